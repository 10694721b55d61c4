/*
 * run.c - "dlock run": hold a lease lock while COMMAND runs; and "dlock
 * elect": the same while this process leads an election.
 *
 * Before acquiring (acquire.c) it forks the watchdog (watchdog.c); once
 * the acquisition committed it tells the watchdog to go, which starts
 * COMMAND in its own process group and stops COMMAND's whole
 * process tree when the lease's deadline passes, when this process dies
 * or when told so; then this process runs one event loop until the
 * watchdog reports that COMMAND and every process it left are gone.  The
 * loop:
 *   - first compares the monotonic clock with the lease deadline (the
 *     time the last acknowledged renewal was SENT plus the lease), so that
 *     after SIGSTOP/SIGCONT or network silence the lease is declared lost
 *     before anything else is trusted;
 *   - renews every third of the lease, asynchronously, reconnecting and
 *     retrying failed renewals while the lease lasts, and gives the
 *     watchdog each new deadline (less watchdog_margin());
 *   - on a lost lease tells the watchdog, which sends the tree SIGTERM,
 *     then SIGKILL after --grace;
 *   - forwards SIGINT/SIGTERM/SIGHUP to COMMAND through the watchdog
 *     (SIGKILL after --grace).
 * When the watchdog reports that COMMAND's tree is gone (or has exited
 * without a word) it releases the lock (or lingers), and exits with
 * COMMAND's status.
 */
#include "dlock.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* The state of the event loop. */
typedef struct Run
{
	Lock	   *lk;
	const Options *opt;
	pid_t		watchdog;		/* the watchdog process */
	int			wd;				/* our end of the socket to it; -1 at EOF */
	pid_t		command;		/* COMMAND's pid once the watchdog said it */
	bool		exited;			/* the watchdog has exited */
	int			wd_status;		/* its waitpid status */
	bool		have_status;	/* it reported COMMAND's status: */
	int			status;			/* waitpid status of COMMAND */
	bool		failed;			/* it could not start COMMAND */
	bool		lost;			/* lease lost: COMMAND is being stopped */
	bool		shutdown;		/* a signal asked us to stop */
	int			forwarded;		/* terminating signals already forwarded */
	bool		inflight;		/* a renewal is on the wire */
	int64_t		sent_at;		/* when it was sent */
	int64_t		next_renew;		/* when to send the next one */
	int64_t		next_connect;	/* earliest next reconnection attempt */
	int64_t		backoff;		/* reconnection pause */
} Run;

/*
 * lose: the lease is gone; say why once, and have the watchdog stop
 * COMMAND's tree: SIGTERM now, SIGKILL after the grace period.
 */
static void
lose(Run *rs, const char *why)
{
	if (rs->lost)
		return;
	rs->lost = true;
	logmsg("lease on \"%s\" (fence %s) lost: %s; stopping COMMAND",
		   rs->lk->resource, rs->lk->fence, why);
	watchdog_send(rs->wd, WD_LOST, 0, 0);
}

/*
 * on_watchdog: read what the watchdog said: COMMAND's pid, that its
 * deadline passed (the lease is lost), COMMAND's final status.
 */
static void
on_watchdog(Run *rs)
{
	WdMsg		m;
	int			r;

	while (rs->wd >= 0 && (r = watchdog_recv(rs->wd, &m, true)) != 0)
	{
		if (r < 0)
		{
			close(rs->wd);
			rs->wd = -1;
			break;
		}
		switch (m.type)
		{
			case WD_STARTED:
				rs->command = m.arg;
				break;
			case WD_EXPIRED:
				lose(rs, "its deadline passed on the local monotonic clock "
					 "(the watchdog stopped COMMAND)");
				break;
			case WD_EXITED:
				rs->have_status = true;
				rs->status = (int) m.value;
				break;
			case WD_FAILED:
				rs->failed = true;
				break;
			default:
				break;
		}
	}
}

/*
 * send_deadline: give the watchdog the lease's deadline, less its margin.
 */
static void
send_deadline(Run *rs)
{
	watchdog_send(rs->wd, WD_DEADLINE, 0,
				  rs->lk->deadline - watchdog_margin(rs->lk->lease_ms));
}

/* take_terminal_back: make our group the terminal's foreground again. */
static void
take_terminal_back(void)
{
	void		(*old) (int) = signal(SIGTTOU, SIG_IGN);

	tcsetpgrp(STDIN_FILENO, getpgrp());
	signal(SIGTTOU, old);
}

/*
 * send_renewal: put renew(resource, holder, lease, fence) on the wire
 * without waiting; reconnect first if needed (bounded by the lease).
 */
static void
send_renewal(Run *rs, int64_t now)
{
	Lock	   *lk = rs->lk;
	const char *params[4] = {lk->param, lk->holder, lk->lease_text, lk->fence};

	if (lk->conn == NULL)
	{
		int64_t		d = now + lk->lease_ms / 3;

		if (now < rs->next_connect)
			return;
		if (d > lk->deadline)
			d = lk->deadline;
		if (!lock_reconnect(lk, d, true))
		{
			rs->next_connect = now_ms() + jitter(rs->backoff);
			if (rs->backoff < 2000)
				rs->backoff *= 2;
			return;
		}
		rs->backoff = 100;
		vlog(rs->opt, "reconnected");
	}
	rs->sent_at = now_ms();
	if (!db_send(lk->conn, lk->nresources > 1 ? LOCK_ALL_RENEW
				 : "SELECT dlock.renew($1, $2, $3::interval, $4::bigint)",
				 4, params))
	{
		vlog(rs->opt, "renewal could not be sent: %s", PQerrorMessage(lk->conn));
		db_drop(&lk->conn);
		return;
	}
	rs->inflight = true;
}

/*
 * renewal_result: handle the answer to a renewal sent at rs->sent_at.
 * A timestamp extends the local deadline to sent_at + lease (the server
 * renewed no earlier than we sent); NULL means the lease is gone; an SQL
 * error is retried shortly while the lease lasts.
 */
static void
renewal_result(Run *rs, PGresult *r)
{
	Lock	   *lk = rs->lk;
	int64_t		now = now_ms();

	rs->inflight = false;
	if (PQstatus(lk->conn) == CONNECTION_BAD ||
		(!db_result_ok(r) && db_error_is_connection(r)))
	{
		vlog(rs->opt, "connection lost during renewal, reconnecting");
		db_drop(&lk->conn);
		rs->next_renew = now;
	}
	else if (!db_result_ok(r) || PQntuples(r) != 1)
	{
		db_report("renewal failed (will retry)", lk->conn, r);
		rs->next_renew = now + (lk->lease_ms / 10 < 1000 ? lk->lease_ms / 10 : 1000);
	}
	else if (PQgetisnull(r, 0, 0))
		lose(rs, "the server says it is no longer held (expired or broken)");
	else
	{
		if (rs->sent_at + lk->lease_ms > lk->deadline)
		{
			lk->deadline = rs->sent_at + lk->lease_ms;
			send_deadline(rs);
		}
		rs->next_renew = rs->sent_at + lk->lease_ms / 3;
		vlog(rs->opt, "renewed until %s", PQgetvalue(r, 0, 0));
	}
	if (r)
		PQclear(r);
}

/*
 * on_socket: the server sent something: read it, drop stray
 * notifications, and finish a renewal whose answer is complete.
 */
static void
on_socket(Run *rs)
{
	Lock	   *lk = rs->lk;
	PGresult   *r = NULL;

	if (!rs->inflight)
	{
		if (!PQconsumeInput(lk->conn))
		{
			vlog(rs->opt, "connection lost: %s", PQerrorMessage(lk->conn));
			db_drop(&lk->conn);
		}
		else
			db_drain_notifies(lk->conn, NULL, false);
		return;
	}
	switch (db_collect(lk->conn, &r))
	{
		case DB_OK:
			renewal_result(rs, r);
			break;
		case DB_LOST:
			rs->inflight = false;
			vlog(rs->opt, "connection lost during renewal: %s", db_lost_reason());
			db_drop(&lk->conn);
			rs->next_renew = now_ms();
			break;
		default:
			break;
	}
	if (lk->conn)
		db_drain_notifies(lk->conn, NULL, false);
}

/* min64: the smaller of two times. */
static int64_t
min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/*
 * loop: keep the lease alive until the watchdog exits, which it does
 * once COMMAND and every process it left behind are gone.
 */
static void
loop(Run *rs)
{
	Lock	   *lk = rs->lk;
	bool		sock_ready = false;

	for (;;)
	{
		int64_t		now = now_ms();
		int64_t		wake;
		struct pollfd pfd[3];
		int			n = 0;
		int			sock = -1;

		/* 1. The clock first: after a stop, nothing else is trusted. */
		if (!rs->lost && now >= lk->deadline)
			lose(rs, "its deadline passed on the local monotonic clock");

		/*
		 * 2. What the watchdog said.  Its WD_EXITED means COMMAND and every
		 * process it left are gone: no need to wait for the watchdog's own
		 * exit (reap_watchdog does that after the release).  Or has it
		 * exited without a word?
		 */
		on_watchdog(rs);
		if (rs->have_status)
			return;
		signals_take_child();
		if (!rs->exited)
		{
			int			st;

			if (waitpid(rs->watchdog, &st, WNOHANG) == rs->watchdog)
			{
				rs->exited = true;
				rs->wd_status = st;
			}
		}
		if (rs->exited)
		{
			on_watchdog(rs);	/* its last words */
			return;
		}

		/* 3. Forward terminating signals (the watchdog escalates). */
		if (signals_term_count() != rs->forwarded)
		{
			rs->forwarded = signals_term_count();
			watchdog_send(rs->wd, WD_SIGNAL, signals_term_sig(), 0);
			if (!rs->shutdown)
			{
				rs->shutdown = true;
				vlog(rs->opt, "signal %d forwarded to COMMAND", signals_term_sig());
			}
		}

		/* 4. The server's answers (only after the clock was checked). */
		if (sock_ready && lk->conn)
			on_socket(rs);
		sock_ready = false;

		/* 5. Renew; give up on a renewal stuck for a third of the lease. */
		if (!rs->lost)
		{
			if (rs->inflight && now - rs->sent_at >= lk->lease_ms / 3 + 200)
			{
				vlog(rs->opt, "renewal unanswered for too long, reconnecting");
				rs->inflight = false;
				db_drop(&lk->conn);
				rs->next_renew = now;
			}
			if (!rs->inflight && now_ms() >= rs->next_renew)
				send_renewal(rs, now_ms());
		}

		/* 6. Sleep until something is due. */
		now = now_ms();
		wake = rs->lost ? NEVER : lk->deadline;
		if (!rs->lost)
		{
			if (rs->inflight)
				wake = min64(wake, rs->sent_at + lk->lease_ms / 3 + 200);
			else if (lk->conn)
				wake = min64(wake, rs->next_renew);
			else
				wake = min64(wake, rs->next_connect > rs->next_renew
							 ? rs->next_connect : rs->next_renew);
		}
		pfd[n].fd = signals_fd();
		pfd[n].events = POLLIN;
		pfd[n++].revents = 0;
		if (rs->wd >= 0)
		{
			pfd[n].fd = rs->wd;
			pfd[n].events = POLLIN;
			pfd[n++].revents = 0;
		}
		if (lk->conn)
		{
			sock = n;
			pfd[n].fd = PQsocket(lk->conn);
			pfd[n].events = POLLIN;
			if (rs->inflight && PQflush(lk->conn) == 1)
				pfd[n].events |= POLLOUT;
			pfd[n++].revents = 0;
		}
		if (poll(pfd, n, wake == NEVER ? 1000
				 : (int) min64(INT_MAX, wake > now ? wake - now : 0)) > 0)
		{
			if (pfd[0].revents)
				signals_drain();
			if (sock >= 0 && pfd[sock].revents)
				sock_ready = true;
		}
	}
}

/*
 * reap_watchdog: after the release, wait for the watchdog, which exits
 * right after its WD_EXITED; give up after a second rather than hang on
 * a watchdog someone stopped (it has nothing left to supervise).
 */
static void
reap_watchdog(Run *rs)
{
	for (int i = 0; !rs->exited && i < 100; i++)
	{
		int			st;

		if (waitpid(rs->watchdog, &st, WNOHANG) != 0)
		{
			rs->exited = true;
			rs->wd_status = st;
		}
		else
			db_sleep(now_ms() + 10);
	}
}

/*
 * drop_watchdog: the watchdog spawned ahead will not be needed (the lock
 * was not acquired, or shutdown began first): it has started nothing, so
 * SIGKILL is safe; reap it.
 */
static void
drop_watchdog(Run *rs)
{
	if (rs->wd >= 0)
	{
		close(rs->wd);
		rs->wd = -1;
	}
	if (rs->watchdog > 0)
	{
		kill(rs->watchdog, SIGKILL);
		while (waitpid(rs->watchdog, NULL, 0) < 0 && errno == EINTR)
			;
		rs->exited = true;
	}
}

/*
 * finish_renewal: before releasing, wait briefly for a renewal still on
 * the wire, so its answer is not taken for the release's.
 */
static void
finish_renewal(Run *rs)
{
	Lock	   *lk = rs->lk;
	int64_t		until = min64(lk->deadline, now_ms() + 5000);

	while (rs->inflight && lk->conn)
	{
		PGresult   *r = NULL;
		DbStatus	st = db_collect(lk->conn, &r);

		if (st == DB_OK)
		{
			renewal_result(rs, r);
			return;
		}
		if (st == DB_LOST || db_wait(lk->conn, until, false) != DB_OK)
			break;
	}
	rs->inflight = false;
	if (lk->conn && PQtransactionStatus(lk->conn) != PQTRANS_IDLE)
		db_drop(&lk->conn);
}

/*
 * default_lease: the server's dlock.default_lease in milliseconds, so
 * that "run" without --lease behaves like the SQL functions without a
 * lease; 30 s if it cannot be read.  The client must know the lease to
 * schedule renewals and its own deadline, so it always sends it.
 */
static int64_t
default_lease(PGconn **connp)
{
	PGresult   *r;
	int64_t		ms = 0;

	if (db_exec(connp, "SELECT (extract(epoch FROM "
				"current_setting('dlock.default_lease', true)::interval) * 1000)::bigint",
				0, NULL, now_ms() + 30000, false, &r) != DB_OK)
		return 30000;
	if (db_result_ok(r) && PQntuples(r) == 1 && !PQgetisnull(r, 0, 0))
		ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return ms > 0 ? ms : 30000;
}

/*
 * cmd_run: dlock run [--lease D] [--wait D] [--holder H] [--linger D]
 * [--grace D] [--poll] RESOURCE... -- COMMAND [ARGS].  Several RESOURCEs
 * are taken together, all or nothing (try_lock_all, acquire.c).
 */
static int run_holding(Options *o, bool election);

int
cmd_run(Options *o)
{
	if (!o->dashdash)
		return usage_error("run: missing \"--\" before COMMAND "
						   "(usage: dlock run [OPTIONS] RESOURCE -- COMMAND [ARGS])");
	if (o->npos < 1)
		return usage_error("run: expected a RESOURCE before \"--\"");
	if (o->npos > MAX_RUN_RESOURCES)
		return usage_error("run: at most %d RESOURCEs at once", MAX_RUN_RESOURCES);
	if (o->npos > 1 && (o->fair || o->lock_delay_ms >= 0 || o->shared || o->max_permits > 0))
		return usage_error("run: --fair, --lock-delay, --shared and --semaphore take one RESOURCE");
	for (int i = 1; i < o->npos; i++)
		for (int j = 0; j < i; j++)
			if (strcmp(o->pos[i], o->pos[j]) == 0)
				return usage_error("run: RESOURCE \"%s\" is named twice", o->pos[i]);
	if (o->command[0] == NULL)
		return usage_error("run: missing COMMAND after \"--\"");
	return run_holding(o, false);
}

/*
 * cmd_elect: "dlock elect [--lease D] [--wait D] [--holder H] [--grace D]
 * [--poll] [--fair] ELECTION VALUE -- COMMAND [ARGS]": run COMMAND while
 * this process leads ELECTION (campaign, always fair; renewals as run's;
 * resign when COMMAND exits).
 */
int
cmd_elect(Options *o)
{
	if (!o->dashdash)
		return usage_error("elect: missing \"--\" before COMMAND "
						   "(usage: dlock elect [OPTIONS] ELECTION VALUE -- COMMAND [ARGS])");
	if (o->npos != 2)
		return usage_error("elect: expected ELECTION and VALUE before \"--\"");
	if (strlen(o->pos[1]) > 4000)
		return usage_error("elect: VALUE must be at most 4000 bytes");
	if (o->command[0] == NULL)
		return usage_error("elect: missing COMMAND after \"--\"");
	return run_holding(o, true);
}

/*
 * start_command: acquire (or campaign) with the watchdog already forked,
 * then have the watchdog start COMMAND.  Returns -1 when COMMAND runs,
 * else the exit code (nothing of COMMAND started; the lock given back).
 */
static int
start_command(const Options *o, Lock *lk, Run *rs, bool *tty)
{
	sigset_t	old;

	switch (acquire(lk, o->wait_ms))
	{
		case ACQ_OK:
			break;
		case ACQ_TIMEOUT:
			drop_watchdog(rs);
			logmsg("\"%s\" not acquired in time", lk->resource);
			db_drop(&lk->conn);
			return EXIT_NOT_ACQUIRED;
		case ACQ_SIGNAL:
			drop_watchdog(rs);
			vlog(o, "interrupted while waiting");
			db_drop(&lk->conn);
			return 128 + signals_term_sig();
		case ACQ_CONN:
		case ACQ_ERROR:
			drop_watchdog(rs);
			db_drop(&lk->conn);
			return EXIT_CONN;
	}
	vlog(o, "acquired \"%s\" as %s with fence %s", lk->resource, lk->holder, lk->fence);

	/* Never start COMMAND once shutdown began: check and start as one step. */
	signals_block_term(&old);
	if (signals_term_count() > 0)
	{
		signals_restore(&old);
		drop_watchdog(rs);
		release(lk, 0, lk->deadline);
		db_drop(&lk->conn);
		return 128 + signals_term_sig();
	}
	rs->next_renew = lk->deadline - lk->lease_ms + lk->lease_ms / 3;
	/* If our stdin is the terminal's foreground, COMMAND gets the terminal. */
	*tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
	if (!watchdog_go(rs->wd, lk, *tty, lk->deadline - watchdog_margin(lk->lease_ms)))
	{
		signals_restore(&old);
		logmsg("the watchdog process is gone: COMMAND not started");
		drop_watchdog(rs);
		release(lk, 0, lk->deadline);
		db_drop(&lk->conn);
		return EXIT_CONN;
	}
	signals_restore(&old);
	return -1;
}

/*
 * watchdog_silent: the loop ended without COMMAND's status.  Either
 * COMMAND never started (give the lock back), or the watchdog died
 * without a word (someone killed it): COMMAND got SIGKILL from its
 * PR_SET_PDEATHSIG and its group gets one too, but what else it started
 * may be running on, so the lock is not released: the lease runs out.
 */
static int
watchdog_silent(Lock *lk, Run *rs)
{
	if (rs->failed)
	{
		reap_watchdog(rs);
		release(lk, 0, lk->deadline);
		db_drop(&lk->conn);
		return EXIT_CONN;
	}
	logmsg("the watchdog process died (%s %d): COMMAND's processes may "
		   "survive; \"%s\" is left to expire",
		   WIFSIGNALED(rs->wd_status) ? "signal" : "status",
		   WIFSIGNALED(rs->wd_status) ? WTERMSIG(rs->wd_status)
		   : WEXITSTATUS(rs->wd_status), lk->resource);
	if (rs->command > 0)
		kill(-rs->command, SIGKILL);
	db_drop(&lk->conn);
	return EXIT_LEASE_LOST;
}

/*
 * lost_tidy: the lease was lost and the watchdog left nothing of COMMAND
 * running; unlock (or resign) as a best effort, which frees the resource
 * early if the server still has it.
 */
static int
lost_tidy(Lock *lk, Run *rs)
{
	if (lk->conn && !rs->inflight)
	{
		PGresult   *r;
		const char *params[3] = {lk->param, lk->holder, lk->fence};

		if (db_exec(&lk->conn, lk->election ? "SELECT dlock.resign($1, $2, $3::bigint)"
					: lk->nresources > 1 ? LOCK_ALL_UNLOCK
					: "SELECT dlock.unlock($1, $2, $3::bigint)", 3,
					params, now_ms() + 2000, false, &r) == DB_OK)
			PQclear(r);
	}
	db_drop(&lk->conn);
	reap_watchdog(rs);
	return EXIT_LEASE_LOST;
}

/*
 * run_holding: acquire (or campaign), run COMMAND under the watchdog while
 * renewing, and release (or resign) when it exits.
 */
static int
run_holding(Options *o, bool election)
{
	Lock		lk;
	Run			rs;
	PGconn	   *conn;
	bool		tty = false;
	int			code;

	signals_install();
	conn = db_connect(o, now_ms() + 30000, true, false);
	if (conn == NULL)
		return signals_term_count() > 0 ? 128 + signals_term_sig() : EXIT_CONN;
	lock_init(&lk, o, o->pos[0], o->lease_ms > 0 ? o->lease_ms : default_lease(&conn));
	if (!election && o->npos > 1 && !lock_set_resources(&lk, o->npos, o->pos))
	{
		logmsg("out of memory");
		db_drop(&conn);
		return EXIT_CONN;
	}
	lk.conn = conn;				/* acquire() reconnects if it was lost */
	lk.election = election;
	lk.value = election ? o->pos[1] : NULL;
	memset(&rs, 0, sizeof(rs));
	rs.lk = &lk;
	rs.opt = o;
	rs.backoff = 100;

	/*
	 * The watchdog is forked now, while we wait, so that once the lock is
	 * held starting COMMAND costs one message, not a fork of this process.
	 * It starts nothing until watchdog_go.
	 */
	rs.watchdog = watchdog_spawn(&lk, o->command, &rs.wd);
	if (rs.watchdog < 0)
	{
		db_drop(&lk.conn);
		return EXIT_CONN;
	}
	if ((code = start_command(o, &lk, &rs, &tty)) >= 0)
		return code;

	loop(&rs);
	if (tty)
		take_terminal_back();
	if (rs.wd >= 0)
		close(rs.wd);
	if (!rs.have_status)
		return watchdog_silent(&lk, &rs);
	code = exit_status(rs.status);
	if (rs.lost)
		return lost_tidy(&lk, &rs);

	finish_renewal(&rs);
	if (rs.lost)
	{
		db_drop(&lk.conn);
		reap_watchdog(&rs);
		return EXIT_LEASE_LOST;
	}
	if (release(&lk, rs.shutdown ? 0 : o->linger_ms, lk.deadline) == 1)
		logmsg("warning: \"%s\" was no longer held by %s when COMMAND ended",
			   lk.resource, lk.holder);
	else
		vlog(o, rs.shutdown || o->linger_ms == 0 ? "released \"%s\""
			 : "left \"%s\" to expire after --linger", lk.resource);
	db_drop(&lk.conn);
	reap_watchdog(&rs);
	return code;
}
