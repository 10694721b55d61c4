/*
 * run.c - "dlock run": hold a lease lock while COMMAND runs; and "dlock
 * elect": the same while this process leads an election.  One supervisor
 * for every server: what differs is a RunBackend (pg_run.c, my_lock.c).
 *
 * Before acquiring it forks the watchdog (watchdog.c); once the
 * acquisition committed it tells the watchdog to go, which starts
 * COMMAND in its own process group and stops COMMAND's whole process
 * tree when the lease's deadline passes, when this process dies or when
 * told so; then this process runs one event loop until the watchdog
 * reports that COMMAND and every process it left are gone.  The loop:
 *   - first compares the monotonic clock with the lease deadline (the
 *     time the last acknowledged renewal was SENT plus the lease), so that
 *     after SIGSTOP/SIGCONT or network silence the lease is declared lost
 *     before anything else is trusted;
 *   - renews every third of the lease, retrying failed renewals while
 *     the lease lasts, and gives the watchdog each new deadline (less
 *     watchdog_margin());
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
	const RunBackend *be;
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
 * judge: act on a renewal's verdict.  Renewed: the local deadline
 * extends to sent_at + lease (the server renewed no earlier than it was
 * sent), and the next renewal is due a third of the lease later.
 */
static void
judge(Run *rs, Renewal v, int64_t retry_at)
{
	Lock	   *lk = rs->lk;

	if (v == RN_WAIT)
		return;
	rs->inflight = false;
	if (v == RN_RETRY)
		rs->next_renew = retry_at;
	else if (v == RN_GONE)
		lose(rs, "the server says it is no longer held (expired or broken)");
	else
	{
		if (rs->sent_at + lk->lease_ms > lk->deadline)
		{
			lk->deadline = rs->sent_at + lk->lease_ms;
			send_deadline(rs);
		}
		rs->next_renew = rs->sent_at + lk->lease_ms / 3;
	}
}

/* renew: start a renewal (a synchronous backend judges it at once). */
static void
renew(Run *rs)
{
	int64_t		retry_at = 0;
	int64_t		sent_at = rs->sent_at;
	Renewal		v = rs->be->renew(rs->lk, &sent_at, &retry_at);

	rs->sent_at = sent_at;
	if (v == RN_WAIT)
		rs->inflight = true;
	else
		judge(rs, v, retry_at);
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
		if (sock_ready)
		{
			int64_t		retry_at = 0;

			judge(rs, rs->be->collect(lk, rs->inflight, &retry_at), retry_at);
		}
		sock_ready = false;

		/* 5. Renew; give up on a renewal stuck for a third of the lease. */
		if (!rs->lost)
		{
			if (rs->inflight && now - rs->sent_at >= lk->lease_ms / 3 + 200)
			{
				vlog(rs->opt, "renewal unanswered for too long, reconnecting");
				rs->inflight = false;
				rs->be->drop(lk);
				rs->next_renew = now;
			}
			if (!rs->inflight && now_ms() >= rs->next_renew)
				renew(rs);
		}

		/* 6. Sleep until something is due. */
		now = now_ms();
		wake = rs->lost ? NEVER : lk->deadline;
		if (!rs->lost)
		{
			if (rs->inflight)
				wake = min64(wake, rs->sent_at + lk->lease_ms / 3 + 200);
			else
				wake = min64(wake, rs->next_renew);
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
		if ((pfd[n].fd = rs->be->socket(lk, rs->inflight, &pfd[n].events)) >= 0)
		{
			sock = n;
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
	int64_t		retry_at = 0;

	if (!rs->inflight)
		return;
	judge(rs, rs->be->finish(rs->lk, min64(rs->lk->deadline, now_ms() + 5000), &retry_at),
		  retry_at);
	rs->inflight = false;
}

/*
 * run_on: dlock run [--lease D] [--wait D] [--holder H] [--linger D]
 * [--grace D] [--poll] RESOURCE... -- COMMAND [ARGS] over the backend be.
 * Several RESOURCEs are taken together, all or nothing (try_lock_all,
 * acquire.c), where the backend can.
 */
static int run_holding(Options *o, const RunBackend *be, bool election);

int
run_on(Options *o, const RunBackend *be)
{
	if (!o->dashdash)
		return usage_error("run: missing \"--\" before COMMAND "
						   "(usage: dlock run [OPTIONS] RESOURCE -- COMMAND [ARGS])");
	if (o->npos < 1 || (o->npos > 1 && !be->several))
		return usage_error(be->several ? "run: expected a RESOURCE before \"--\""
						   : "run: expected exactly one RESOURCE before \"--\"");
	if (o->npos > MAX_RUN_RESOURCES)
		return usage_error("run: at most %d RESOURCEs at once", MAX_RUN_RESOURCES);
	if (!be->kinds && (o->fair || o->lock_delay_ms >= 0 || o->shared || o->max_permits > 0))
		return usage_error("run: --fair, --lock-delay, --shared and --semaphore are not "
						   "available with this server");
	if (o->npos > 1 && (o->fair || o->lock_delay_ms >= 0 || o->shared || o->max_permits > 0))
		return usage_error("run: --fair, --lock-delay, --shared and --semaphore take one RESOURCE");
	for (int i = 1; i < o->npos; i++)
		for (int j = 0; j < i; j++)
			if (strcmp(o->pos[i], o->pos[j]) == 0)
				return usage_error("run: RESOURCE \"%s\" is named twice", o->pos[i]);
	if (o->command[0] == NULL)
		return usage_error("run: missing COMMAND after \"--\"");
	return run_holding(o, be, false);
}

/* cmd_run: "dlock run" on PostgreSQL. */
int
cmd_run(Options *o)
{
	return run_on(o, &pg_backend);
}

/*
 * cmd_elect: "dlock elect [--lease D] [--wait D] [--holder H] [--grace D]
 * [--poll] [--fair] ELECTION VALUE -- COMMAND [ARGS]": run COMMAND while
 * this process leads ELECTION (campaign, always fair; renewals as run's;
 * resign when COMMAND exits).  PostgreSQL only.
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
	return run_holding(o, &pg_backend, true);
}

/*
 * start_command: acquire (or campaign), waiting up to wait_ms, with the
 * watchdog already forked, then have the watchdog start COMMAND.  Returns
 * -1 when COMMAND runs, else the exit code (nothing of COMMAND started;
 * the lock given back).
 */
static int
start_command(const Options *o, int64_t wait_ms, Lock *lk, Run *rs, bool *tty)
{
	const RunBackend *be = rs->be;
	sigset_t	old;

	switch (be->acquire(lk, wait_ms))
	{
		case ACQ_OK:
			break;
		case ACQ_TIMEOUT:
			drop_watchdog(rs);
			logmsg("\"%s\" not acquired in time", lk->resource);
			be->drop(lk);
			return EXIT_NOT_ACQUIRED;
		case ACQ_SIGNAL:
			drop_watchdog(rs);
			vlog(o, "interrupted while waiting");
			be->drop(lk);
			return 128 + signals_term_sig();
		case ACQ_CONN:
		case ACQ_ERROR:
			drop_watchdog(rs);
			be->drop(lk);
			return EXIT_CONN;
	}
	vlog(o, "acquired \"%s\" as %s with fence %s", lk->resource, lk->holder, lk->fence);

	/* Never start COMMAND once shutdown began: check and start as one step. */
	signals_block_term(&old);
	if (signals_term_count() > 0)
	{
		signals_restore(&old);
		drop_watchdog(rs);
		be->release(lk, 0, lk->deadline);
		be->drop(lk);
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
		be->release(lk, 0, lk->deadline);
		be->drop(lk);
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
		rs->be->release(lk, 0, lk->deadline);
		rs->be->drop(lk);
		return EXIT_CONN;
	}
	logmsg("the watchdog process died (%s %d): COMMAND's processes may "
		   "survive; \"%s\" is left to expire",
		   WIFSIGNALED(rs->wd_status) ? "signal" : "status",
		   WIFSIGNALED(rs->wd_status) ? WTERMSIG(rs->wd_status)
		   : WEXITSTATUS(rs->wd_status), lk->resource);
	if (rs->command > 0)
		kill(-rs->command, SIGKILL);
	rs->be->drop(lk);
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
	if (!rs->inflight)
		rs->be->tidy(lk);
	rs->be->drop(lk);
	reap_watchdog(rs);
	return EXIT_LEASE_LOST;
}

/*
 * open_waiting: be->open.  With --wait D (D > 0), a first connection that
 * fails for a reason a failover ends (no answer, a server starting or
 * shutting down, no primary yet) is tried again for D from that failure,
 * with pauses growing to 2 s and each try's connect bounded by what is
 * left; what the retries took comes off *wait_ms.  A login the server
 * refused for good (be->refused: a wrong password, an unknown role or
 * database, a bad connection string) is never tried twice; without
 * --wait, or with 0, there is one try.  Either way a failure exits 69,
 * and a signal ends the retries.
 */
static int
open_waiting(Lock *lk, Options *o, const RunBackend *be, bool election,
			 int64_t *wait_ms)
{
	int64_t		deadline = NEVER;
	int64_t		backoff = 200;

	for (int attempt = 0;; attempt++)
	{
		int			code = be->open(lk, o, election, deadline);
		int64_t		until;

		if (code < 0 && deadline != NEVER)
			*wait_ms = deadline > now_ms() ? deadline - now_ms() : 0;
		if (code != EXIT_CONN || *wait_ms <= 0)
			return code;
		if (be->refused())
		{
			if (attempt > 0)
				logmsg("could not connect: %s", be->why());
			return code;
		}
		if (attempt == 0)
		{
			deadline = now_ms() + *wait_ms;
			if (*wait_ms > 300)
				logmsg("retrying the connection while the wait lasts");
		}
		until = now_ms() + jitter(backoff);
		db_sleep(until < deadline ? until : deadline);
		if (signals_term_count() > 0)
			return 128 + signals_term_sig();
		if (now_ms() + 100 >= deadline)
		{
			logmsg("no connection before the wait ended: %s", be->why());
			return code;
		}
		backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
	}
}

/*
 * run_holding: acquire (or campaign), run COMMAND under the watchdog while
 * renewing, and release (or resign) when it exits.
 */
static int
run_holding(Options *o, const RunBackend *be, bool election)
{
	Lock		lk;
	Run			rs;
	bool		tty = false;
	int64_t		wait_ms = o->wait_ms;
	int			code;

	signals_install();
	if ((code = open_waiting(&lk, o, be, election, &wait_ms)) >= 0)
		return code;
	memset(&rs, 0, sizeof(rs));
	rs.lk = &lk;
	rs.opt = o;
	rs.be = be;

	/*
	 * The watchdog is forked now, while we wait, so that once the lock is
	 * held starting COMMAND costs one message, not a fork of this process.
	 * It starts nothing until watchdog_go.
	 */
	rs.watchdog = watchdog_spawn(&lk, o->command, &rs.wd);
	if (rs.watchdog < 0)
	{
		be->drop(&lk);
		return EXIT_CONN;
	}
	if ((code = start_command(o, wait_ms, &lk, &rs, &tty)) >= 0)
		return code;

	loop(&rs);
	if (tty)
		take_terminal_back();
	if (rs.wd >= 0)
		close(rs.wd);
	rs.wd = -1;
	if (!rs.have_status)
		return watchdog_silent(&lk, &rs);
	code = exit_status(rs.status);
	if (rs.lost)
		return lost_tidy(&lk, &rs);

	finish_renewal(&rs);
	if (rs.lost)
	{
		be->drop(&lk);
		reap_watchdog(&rs);
		return EXIT_LEASE_LOST;
	}
	if (be->release(&lk, rs.shutdown ? 0 : o->linger_ms, lk.deadline) == 1)
		logmsg("warning: \"%s\" was no longer held by %s when COMMAND ended",
			   lk.resource, lk.holder);
	else
		vlog(o, rs.shutdown || o->linger_ms == 0 ? "released \"%s\""
			 : "left \"%s\" to expire after --linger", lk.resource);
	be->drop(&lk);
	reap_watchdog(&rs);
	return code;
}
