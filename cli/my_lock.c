/*
 * my_lock.c - a lock on MySQL/MariaDB (mysql/dlock.sql): take it (try
 * until acquired, polling: no LISTEN), renew it, give it back; and the
 * backend of the run supervisor (run.c) built on them.  Every call is a
 * blocking call of my.c, bounded by the connection's timeouts, so a
 * renewal's verdict comes at once.  A lock wait timeout or a deadlock
 * (1205, 1213) is a failed attempt, retried; a renewal is retried on any
 * error but the routine's own.
 */
#include "my.h"

#ifdef DLOCK_MYSQL

#include <poll.h>
#include <stdio.h>
#include <string.h>

/* my_lock_init: the lock of RESOURCE with the holder and lease of o. */
void
my_lock_init(Lock *lk, const Options *o, const char *resource)
{
	lock_init(lk, o, resource, o->lease_ms > 0 ? o->lease_ms : 30000);
}

/*
 * my_try: one try_lock; sets the fence and the deadline (measured from the
 * moment the call was SENT) when acquired.
 */
static QStatus
my_try(Lock *lk, bool *got)
{
	char		lease_s[32];
	const char *v[3] = {lk->resource, lk->holder, lease_s};
	bool		isnull;
	int64_t		sent;
	QStatus		s;

	my_seconds(lease_s, sizeof(lease_s), lk->lease_ms);
	sent = now_ms();
	s = my_scalar("SELECT dlock.try_lock(?, ?, ?)", 3, v, lk->fence, sizeof(lk->fence), &isnull);
	*got = s == Q_OK && !isnull;
	if (*got)
		lk->deadline = sent + lk->lease_ms;
	return s;
}

/*
 * A try_lock whose answer was lost may still commit (the server runs the
 * call to its end), and the next try of the same holder then re-enters
 * the holding (count 2): my_release unlocks until none is left.
 */
static bool maybe_twice;

/* interrupted: the exit code for a terminating signal, else code. */
static int
interrupted(int code)
{
	return signals_term_count() > 0 ? 128 + signals_term_sig() : code;
}

/*
 * my_acquire: try until acquired, the wait runs out (75), a signal (128+N)
 * or a connection failure (69); 0 when held.  A signal that arrives while
 * a call hangs ends the wait once the call gives up.
 */
int
my_acquire(Lock *lk, int64_t wait_ms)
{
	int64_t		until = wait_ms < 0 ? NEVER : now_ms() + wait_ms;
	int64_t		nap = 20;

	for (;;)
	{
		bool		got;
		QStatus		s;
		struct pollfd pfd;
		int64_t		left;

		if (!my_connected() && !my_open(lk->opt, 5, false))
			return interrupted(EXIT_CONN);
		s = my_try(lk, &got);
		if (got)
			return 0;
		if (signals_term_count() > 0)
			return 128 + signals_term_sig();
		if (s == Q_ERROR && !my_transient())
			return EXIT_CONN;
		if (s == Q_LOST)
		{
			maybe_twice = true;
			if (!my_open(lk->opt, 5, false))
				return interrupted(EXIT_CONN);
		}
		left = until == NEVER ? nap : until - now_ms();
		if (left <= 0)
			return EXIT_NOT_ACQUIRED;
		pfd.fd = signals_fd();
		pfd.events = POLLIN;
		(void) poll(&pfd, 1, (int) (left < nap ? left : nap));
		signals_drain();
		if (signals_term_count() > 0)
			return 128 + signals_term_sig();
		nap = nap * 2 > 200 ? 200 : nap * 2;
	}
}

/* release_once: one unlock (or renew for linger), reconnecting if needed. */
static QStatus
release_once(Lock *lk, int64_t linger_ms, char *out, size_t outlen, bool *isnull)
{
	char		linger_s[32];

	if (!my_connected() && !my_open(lk->opt, 5, true))
		return Q_LOST;
	if (linger_ms > 0)
	{
		const char *v[4] = {lk->resource, lk->holder, linger_s, lk->fence};

		my_seconds(linger_s, sizeof(linger_s), linger_ms);
		return my_scalar("SELECT dlock.renew(?, ?, ?, ?)", 4, v, out, outlen, isnull);
	}
	else
	{
		const char *v[3] = {lk->resource, lk->holder, lk->fence};

		return my_scalar("SELECT dlock.unlock(?, ?, ?)", 3, v, out, outlen, isnull);
	}
}

/*
 * my_release: unlock (or, with linger, renew for linger and leave it); 1 if
 * not held, -1 if it failed.  A connection found gone (the server
 * restarted while COMMAND ran) is made again once; after a try whose
 * answer was lost, unlock until no count is left.
 */
static int
my_release(Lock *lk, int64_t linger_ms, int64_t deadline)
{
	char		out[64];
	bool		isnull = true;
	bool		again = false;
	QStatus		s;

	(void) deadline;			/* each call is bounded by the connection's timeouts */
	s = release_once(lk, linger_ms, out, sizeof(out), &isnull);
	if (s == Q_LOST)
	{
		again = true;			/* its answer lost: NULL may mean it was done */
		s = release_once(lk, linger_ms, out, sizeof(out), &isnull);
	}
	for (int i = 0; s == Q_OK && linger_ms == 0 && maybe_twice && !isnull &&
		 strcmp(out, "0") != 0 && i < 8; i++)
		s = release_once(lk, 0, out, sizeof(out), &isnull);
	if (s != Q_OK)
		return -1;
	return isnull && !again ? 1 : 0;
}

/*
 * my_renew: renew the held lock, at once: renewed, gone (NULL, or the
 * routine refused), or no verdict (retried 200 ms later while the lease
 * lasts): no answer, or an error of the server around the routine (a
 * killed query, a lock wait timeout) says nothing of the lease.
 */
static Renewal
my_renew(Lock *lk, int64_t *sent_at, int64_t *retry_at)
{
	char		lease_s[32];
	const char *v[4] = {lk->resource, lk->holder, lease_s, lk->fence};
	char		out[64];
	bool		isnull = true;
	QStatus		s = Q_LOST;

	my_seconds(lease_s, sizeof(lease_s), lk->lease_ms);
	*sent_at = now_ms();
	if (my_connected() || my_open(lk->opt, (unsigned) (lk->lease_ms / 3000 + 1), true))
		s = my_scalar("SELECT dlock.renew(?, ?, ?, ?)", 4, v, out, sizeof(out), &isnull);
	if (s == Q_ERROR && !my_refused())
	{
		logmsg("renewal failed (will retry)");
		s = Q_LOST;
	}
	if (s == Q_LOST)
	{
		*retry_at = now_ms() + 200;
		return RN_RETRY;
	}
	if (s == Q_ERROR || isnull)
		return RN_GONE;
	vlog(lk->opt, "renewed until %s", out);
	return RN_OK;
}

/* The run backend's steps that are one call of the above, or none. */
static int
my_run_open(Lock *lk, Options *o, bool election, int64_t deadline)
{
	int64_t		left = deadline == NEVER ? 10000 : deadline - now_ms();

	(void) election;			/* no elections in mysql/dlock.sql */
	my_lock_init(lk, o, o->pos[0]);
	/*
	 * Each step of the handshake (connect, greeting, login) has the whole
	 * timeout, of whole seconds: half what is left, 1 s at least.
	 */
	return my_open(o, left >= 10000 ? 5 : left >= 2000 ? (unsigned) (left / 2000) : 1,
				   deadline != NEVER) ? -1 : interrupted(EXIT_CONN);
}

static AcqStatus
my_run_acquire(Lock *lk, int64_t wait_ms)
{
	int			rc = my_acquire(lk, wait_ms);

	return rc == 0 ? ACQ_OK : rc == EXIT_NOT_ACQUIRED ? ACQ_TIMEOUT
		: rc == EXIT_CONN ? ACQ_CONN : ACQ_SIGNAL;
}

static int
my_run_socket(Lock *lk, bool inflight, short *events)
{
	(void) lk;
	(void) inflight;
	(void) events;
	return -1;					/* every renewal is answered at once */
}

static Renewal
my_run_wait(Lock *lk, bool inflight, int64_t *retry_at)
{
	(void) lk;
	(void) inflight;
	(void) retry_at;
	return RN_WAIT;				/* never called: nothing is in flight */
}

static Renewal
my_run_finish(Lock *lk, int64_t until, int64_t *retry_at)
{
	(void) until;
	return my_run_wait(lk, true, retry_at);
}

static void
my_run_tidy(Lock *lk)
{
	(void) my_release(lk, 0, lk->deadline);
}

static void
my_run_drop(Lock *lk)
{
	(void) lk;
	my_close();
}

const RunBackend my_backend = {
	.several = false,
	.kinds = false,
	.elections = false,
	.open = my_run_open,
	.refused = my_open_refused,
	.why = my_open_error,
	.acquire = my_run_acquire,
	.renew = my_renew,
	.socket = my_run_socket,
	.collect = my_run_wait,
	.finish = my_run_finish,
	.release = my_release,
	.tidy = my_run_tidy,
	.drop = my_run_drop,
};

#endif							/* DLOCK_MYSQL */
