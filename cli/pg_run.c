/*
 * pg_run.c - the PostgreSQL backend of the run supervisor (run.c).
 *
 * It connects and learns the server's default lease, acquires through
 * acquire.c, and renews asynchronously: a renewal is put on the wire
 * (reconnecting first if the connection was lost, with a growing pause)
 * and its answer read when the socket is ready, so the supervisor never
 * blocks on the server.  Giving back is release() of acquire.c; after a
 * loss, one unlock (or resign) as a best effort.
 */
#include "dlock.h"

#include <poll.h>
#include <stdlib.h>

/* Reconnection while COMMAND runs: the earliest next attempt, the pause. */
static int64_t next_connect;
static int64_t backoff = 100;

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
 * pg_open: connect, and fill lk for RESOURCE(s), or the election.  A
 * connection by a deadline (a retry) fails quietly.
 */
static int
pg_open(Lock *lk, Options *o, bool election, int64_t deadline)
{
	PGconn	   *conn = db_connect(o, deadline == NEVER ? now_ms() + 30000 : deadline,
								  true, deadline != NEVER);

	if (conn == NULL)
		return signals_term_count() > 0 ? 128 + signals_term_sig() : EXIT_CONN;
	lock_init(lk, o, o->pos[0], o->lease_ms > 0 ? o->lease_ms : default_lease(&conn));
	if (!election && o->npos > 1 && !lock_set_resources(lk, o->npos, o->pos))
	{
		logmsg("out of memory");
		db_drop(&conn);
		return EXIT_CONN;
	}
	lk->conn = conn;			/* acquire() reconnects if it was lost */
	lk->election = election;
	lk->value = election ? o->pos[1] : NULL;
	return -1;
}

/*
 * pg_renew: put renew(resource, holder, lease, fence) on the wire
 * without waiting; reconnect first if needed (bounded by the lease).
 */
static Renewal
pg_renew(Lock *lk, int64_t *sent_at, int64_t *retry_at)
{
	const char *params[4] = {lk->param, lk->holder, lk->lease_text, lk->fence};
	int64_t		now = now_ms();

	if (lk->conn == NULL)
	{
		int64_t		d = now + lk->lease_ms / 3;

		*retry_at = next_connect;
		if (now < next_connect)
			return RN_RETRY;
		if (d > lk->deadline)
			d = lk->deadline;
		if (!lock_reconnect(lk, d, true))
		{
			next_connect = now_ms() + jitter(backoff);
			if (backoff < 2000)
				backoff *= 2;
			*retry_at = next_connect;
			return RN_RETRY;
		}
		backoff = 100;
		vlog(lk->opt, "reconnected");
	}
	*sent_at = now_ms();
	if (!db_send(lk->conn, lk->nresources > 1 ? LOCK_ALL_RENEW
				 : "SELECT dlock.renew($1, $2, $3::interval, $4::bigint)",
				 4, params))
	{
		vlog(lk->opt, "renewal could not be sent: %s", PQerrorMessage(lk->conn));
		db_drop(&lk->conn);
		*retry_at = now;
		return RN_RETRY;
	}
	return RN_WAIT;
}

/*
 * verdict: the answer to a renewal.  A timestamp: renewed (from when it
 * was sent: the server renewed no earlier); NULL: the lease is gone; an
 * SQL error is retried shortly while the lease lasts.
 */
static Renewal
verdict(Lock *lk, PGresult *r, int64_t *retry_at)
{
	int64_t		now = now_ms();
	Renewal		v;

	if (PQstatus(lk->conn) == CONNECTION_BAD ||
		(!db_result_ok(r) && db_error_is_connection(r)))
	{
		vlog(lk->opt, "connection lost during renewal, reconnecting");
		db_drop(&lk->conn);
		*retry_at = now;
		v = RN_RETRY;
	}
	else if (!db_result_ok(r) || PQntuples(r) != 1)
	{
		db_report("renewal failed (will retry)", lk->conn, r);
		*retry_at = now + (lk->lease_ms / 10 < 1000 ? lk->lease_ms / 10 : 1000);
		v = RN_RETRY;
	}
	else if (PQgetisnull(r, 0, 0))
		v = RN_GONE;
	else
	{
		vlog(lk->opt, "renewed until %s", PQgetvalue(r, 0, 0));
		v = RN_OK;
	}
	if (r)
		PQclear(r);
	return v;
}

/* pg_socket: the connection's socket; for writing too while a renewal is unsent. */
static int
pg_socket(Lock *lk, bool inflight, short *events)
{
	if (lk->conn == NULL)
		return -1;
	*events = POLLIN;
	if (inflight && PQflush(lk->conn) == 1)
		*events |= POLLOUT;
	return PQsocket(lk->conn);
}

/*
 * pg_collect: the server sent something: read it, drop stray
 * notifications, and judge a renewal whose answer is complete.
 */
static Renewal
pg_collect(Lock *lk, bool inflight, int64_t *retry_at)
{
	PGresult   *r = NULL;
	Renewal		v = RN_WAIT;

	if (lk->conn == NULL)
		return RN_WAIT;
	if (!inflight)
	{
		if (!PQconsumeInput(lk->conn))
		{
			vlog(lk->opt, "connection lost: %s", PQerrorMessage(lk->conn));
			db_drop(&lk->conn);
		}
		else
			db_drain_notifies(lk->conn, NULL, false);
		return RN_WAIT;
	}
	switch (db_collect(lk->conn, &r))
	{
		case DB_OK:
			v = verdict(lk, r, retry_at);
			break;
		case DB_LOST:
			vlog(lk->opt, "connection lost during renewal: %s", db_lost_reason());
			db_drop(&lk->conn);
			*retry_at = now_ms();
			v = RN_RETRY;
			break;
		default:
			break;
	}
	if (lk->conn)
		db_drain_notifies(lk->conn, NULL, false);
	return v;
}

/*
 * pg_finish: wait until until for the answer to the renewal on the wire,
 * so it is not taken for the release's; without one, a connection left
 * inside a transaction is dropped.
 */
static Renewal
pg_finish(Lock *lk, int64_t until, int64_t *retry_at)
{
	while (lk->conn)
	{
		PGresult   *r = NULL;
		DbStatus	st = db_collect(lk->conn, &r);

		if (st == DB_OK)
			return verdict(lk, r, retry_at);
		if (st == DB_LOST || db_wait(lk->conn, until, false) != DB_OK)
			break;
	}
	if (lk->conn && PQtransactionStatus(lk->conn) != PQTRANS_IDLE)
		db_drop(&lk->conn);
	return RN_WAIT;
}

/*
 * pg_tidy: the lease was lost and nothing of COMMAND runs: unlock (or
 * resign), which frees the resource early if the server still has it.
 */
static void
pg_tidy(Lock *lk)
{
	PGresult   *r;
	const char *params[3] = {lk->param, lk->holder, lk->fence};

	if (lk->conn &&
		db_exec(&lk->conn, lk->election ? "SELECT dlock.resign($1, $2, $3::bigint)"
				: lk->nresources > 1 ? LOCK_ALL_UNLOCK
				: "SELECT dlock.unlock($1, $2, $3::bigint)", 3,
				params, now_ms() + 2000, false, &r) == DB_OK)
		PQclear(r);
}

/* pg_drop: close the connection. */
static void
pg_drop(Lock *lk)
{
	db_drop(&lk->conn);
}

const RunBackend pg_backend = {
	.several = true,
	.kinds = true,
	.elections = true,
	.open = pg_open,
	.refused = db_refused,
	.why = db_lost_reason,
	.acquire = acquire,
	.renew = pg_renew,
	.socket = pg_socket,
	.collect = pg_collect,
	.finish = pg_finish,
	.release = release,
	.tidy = pg_tidy,
	.drop = pg_drop,
};
