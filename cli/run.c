/*
 * run.c - "dlock run": hold a lease lock while COMMAND runs.
 *
 * After acquiring (acquire.c) it forks COMMAND into its own process group
 * (with PR_SET_PDEATHSIG, so it dies with us) and then runs one event
 * loop until COMMAND exits.  The loop:
 *   - first compares the monotonic clock with the lease deadline (the
 *     time the last acknowledged renewal was SENT plus the lease), so that
 *     after SIGSTOP/SIGCONT or network silence the lease is declared lost
 *     before anything else is trusted;
 *   - renews every third of the lease, asynchronously, reconnecting and
 *     retrying failed renewals while the lease lasts;
 *   - on a lost lease sends COMMAND SIGTERM, then SIGKILL after --grace;
 *   - forwards SIGINT/SIGTERM/SIGHUP to COMMAND (SIGKILL after --grace).
 * When COMMAND has exited it releases the lock (or lingers), and exits
 * with COMMAND's status.
 */
#include "dlock.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* The state of the event loop. */
typedef struct Run
{
	Lock	   *lk;
	const Options *opt;
	pid_t		child;
	bool		exited;
	int			status;			/* waitpid status of COMMAND */
	bool		lost;			/* lease lost: COMMAND is being stopped */
	bool		shutdown;		/* a signal asked us to stop */
	int			forwarded;		/* terminating signals already forwarded */
	int64_t		kill_at;		/* when to SIGKILL (lost or shutdown) */
	bool		killed;
	bool		inflight;		/* a renewal is on the wire */
	int64_t		sent_at;		/* when it was sent */
	int64_t		next_renew;		/* when to send the next one */
	int64_t		next_connect;	/* earliest next reconnection attempt */
	int64_t		backoff;		/* reconnection pause */
} Run;

/*
 * signal_command: send sig to COMMAND's process group (falling back to
 * the process itself if the group is already gone).
 */
static void
signal_command(Run *rs, int sig)
{
	if (kill(-rs->child, sig) != 0 && errno == ESRCH)
		kill(rs->child, sig);
}

/*
 * lose: the lease is gone; say why once, and start stopping COMMAND:
 * SIGTERM now, SIGKILL after the grace period.
 */
static void
lose(Run *rs, const char *why)
{
	if (rs->lost)
		return;
	rs->lost = true;
	logmsg("lease on \"%s\" (fence %s) lost: %s; stopping COMMAND",
		   rs->lk->resource, rs->lk->fence, why);
	if (!rs->exited)
	{
		signal_command(rs, SIGTERM);
		if (!rs->shutdown || rs->kill_at > now_ms() + rs->opt->grace_ms)
			rs->kill_at = now_ms() + rs->opt->grace_ms;
	}
}

/*
 * spawn: start COMMAND in its own process group, with DLOCK_RESOURCE,
 * DLOCK_HOLDER and DLOCK_FENCE in its environment.  The child asks the
 * kernel for SIGKILL when we die and checks that we did not die already.
 * If our stdin is the terminal's foreground, the terminal is handed to
 * COMMAND's group so that interactive commands work; *tty says so.
 * Returns the pid, or -1.
 */
static pid_t
spawn(Lock *lk, char **command, bool *tty)
{
	pid_t		parent = getpid();
	pid_t		pid;

	*tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp();
	fflush(NULL);
	pid = fork();
	if (pid < 0)
	{
		logmsg("fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0)
	{
		setpgid(0, 0);
		if (*tty)
		{
			signal(SIGTTOU, SIG_IGN);
			tcsetpgrp(STDIN_FILENO, getpid());
		}
		signals_default_in_child();
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(EXIT_LEASE_LOST);
		if (setenv("DLOCK_RESOURCE", lk->resource, 1) != 0 ||
			setenv("DLOCK_HOLDER", lk->holder, 1) != 0 ||
			setenv("DLOCK_FENCE", lk->fence, 1) != 0)
			_exit(126);
		execvp(command[0], command);
		fprintf(stderr, "%s: cannot run %s: %s\n", progname, command[0], strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	setpgid(pid, pid);
	return pid;
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
	const char *params[4] = {lk->resource, lk->holder, lk->lease_text, lk->fence};

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
	if (!db_send(lk->conn, "SELECT dlock.renew($1, $2, $3::interval, $4::bigint)",
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
			lk->deadline = rs->sent_at + lk->lease_ms;
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
 * loop: supervise COMMAND until it exits, keeping the lease alive.
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
		struct pollfd pfd[2];
		int			n = 0;

		/* 1. The clock first: after a stop, nothing else is trusted. */
		if (!rs->lost && now >= lk->deadline)
			lose(rs, "its deadline passed on the local monotonic clock");

		/* 2. Has COMMAND exited? */
		if (signals_take_child() || !rs->exited)
		{
			int			st;
			pid_t		p = waitpid(rs->child, &st, WNOHANG);

			if (p == rs->child)
			{
				rs->exited = true;
				rs->status = st;
			}
		}
		if (rs->exited)
			return;

		/* 3. Forward terminating signals. */
		if (signals_term_count() != rs->forwarded)
		{
			rs->forwarded = signals_term_count();
			signal_command(rs, signals_term_sig());
			if (!rs->shutdown)
			{
				rs->shutdown = true;
				if (!rs->lost)
					rs->kill_at = now + rs->opt->grace_ms;
				vlog(rs->opt, "signal %d forwarded to COMMAND", signals_term_sig());
			}
		}

		/* 4. Escalate after the grace period. */
		if ((rs->lost || rs->shutdown) && !rs->killed && now >= rs->kill_at)
		{
			logmsg("COMMAND did not exit within the grace period: SIGKILL");
			signal_command(rs, SIGKILL);
			rs->killed = true;
		}

		/* 5. The server's answers (only after the clock was checked). */
		if (sock_ready && lk->conn)
			on_socket(rs);
		sock_ready = false;

		/* 6. Renew; give up on a renewal stuck for a third of the lease. */
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

		/* 7. Sleep until something is due. */
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
		if ((rs->lost || rs->shutdown) && !rs->killed)
			wake = min64(wake, rs->kill_at);
		pfd[n].fd = signals_fd();
		pfd[n].events = POLLIN;
		pfd[n++].revents = 0;
		if (lk->conn)
		{
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
			if (n > 1 && pfd[1].revents)
				sock_ready = true;
		}
	}
}

/*
 * exit_status: the shell's convention for COMMAND's waitpid status
 * (128 + signal number when it was killed by a signal).
 */
static int
exit_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 1;
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
 * [--grace D] [--poll] RESOURCE -- COMMAND [ARGS].
 */
int
cmd_run(Options *o)
{
	Lock		lk;
	Run			rs;
	PGconn	   *conn;
	sigset_t	old;
	bool		tty = false;
	int			code;

	if (!o->dashdash)
		return usage_error("run: missing \"--\" before COMMAND "
						   "(usage: dlock run [OPTIONS] RESOURCE -- COMMAND [ARGS])");
	if (o->npos != 1)
		return usage_error("run: expected exactly one RESOURCE before \"--\"");
	if (o->command[0] == NULL)
		return usage_error("run: missing COMMAND after \"--\"");

	signals_install();
	conn = db_connect(o, now_ms() + 30000, true, false);
	if (conn == NULL)
		return signals_term_count() > 0 ? 128 + signals_term_sig() : EXIT_CONN;
	lock_init(&lk, o, o->pos[0], o->lease_ms > 0 ? o->lease_ms : default_lease(&conn));
	lk.conn = conn;				/* acquire() reconnects if it was lost */

	switch (acquire(&lk, o->wait_ms))
	{
		case ACQ_OK:
			break;
		case ACQ_TIMEOUT:
			logmsg("\"%s\" not acquired in time", lk.resource);
			db_drop(&lk.conn);
			return EXIT_NOT_ACQUIRED;
		case ACQ_SIGNAL:
			vlog(o, "interrupted while waiting");
			db_drop(&lk.conn);
			return 128 + signals_term_sig();
		case ACQ_CONN:
		case ACQ_ERROR:
			db_drop(&lk.conn);
			return EXIT_CONN;
	}
	vlog(o, "acquired \"%s\" as %s with fence %s", lk.resource, lk.holder, lk.fence);

	/* Never start COMMAND once shutdown began: check and fork as one step. */
	signals_block_term(&old);
	if (signals_term_count() > 0)
	{
		signals_restore(&old);
		release(&lk, 0, lk.deadline);
		db_drop(&lk.conn);
		return 128 + signals_term_sig();
	}
	memset(&rs, 0, sizeof(rs));
	rs.lk = &lk;
	rs.opt = o;
	rs.next_renew = lk.deadline - lk.lease_ms + lk.lease_ms / 3;
	rs.backoff = 100;
	rs.child = spawn(&lk, o->command, &tty);
	signals_restore(&old);
	if (rs.child < 0)
	{
		release(&lk, 0, lk.deadline);
		db_drop(&lk.conn);
		return EXIT_CONN;
	}

	loop(&rs);
	if (tty)
		take_terminal_back();
	code = exit_status(rs.status);

	if (rs.lost)
	{
		/* make sure nothing of COMMAND's group survives, then tidy up */
		kill(-rs.child, SIGKILL);
		if (lk.conn && !rs.inflight)
		{
			PGresult   *r;
			const char *params[3] = {lk.resource, lk.holder, lk.fence};

			/* best effort: frees the resource early if the server still has it */
			if (db_exec(&lk.conn, "SELECT dlock.unlock($1, $2, $3::bigint)", 3,
						params, now_ms() + 2000, false, &r) == DB_OK)
				PQclear(r);
		}
		db_drop(&lk.conn);
		return EXIT_LEASE_LOST;
	}

	finish_renewal(&rs);
	if (rs.lost)
	{
		db_drop(&lk.conn);
		return EXIT_LEASE_LOST;
	}
	if (release(&lk, rs.shutdown ? 0 : o->linger_ms, lk.deadline) == 1)
		logmsg("warning: \"%s\" was no longer held by %s when COMMAND ended",
			   lk.resource, lk.holder);
	else
		vlog(o, rs.shutdown || o->linger_ms == 0 ? "released \"%s\""
			 : "left \"%s\" to expire after --linger", lk.resource);
	db_drop(&lk.conn);
	return code;
}
