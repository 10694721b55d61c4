/*
 * acquire.c - taking and giving back a lock from the client side.
 *
 * An acquisition runs as BEGIN; SELECT dlock.try_lock(...) (with
 * pg_current_xact_id() when it returned a fence); COMMIT.  If the
 * connection drops after COMMIT was sent, the outcome is unknown: the
 * client reconnects (maybe to a promoted standby) and looks for the
 * holding itself, waiting while that transaction still runs there (see
 * resolve()).  So nobody runs on an acquisition that may not exist.
 *
 * Waiting: LISTEN on dlock.channel(resource), then try, then sleep on the
 * socket with a bounded timeout (a notification can race the try, and
 * expiries may not be announced at once), then try again.  Behind a
 * connection pooler (detected by the backend pid the pooler makes up), or
 * with --poll, it polls with a jittered back-off instead.
 *
 * With --fair, each failed attempt commits the ticket try_lock wrote (a
 * client-side ticket lives in a table, so it must be committed), and the
 * attempts come at least three times per dlock.queue_ttl so that it never
 * lapses while we wait.  A single try (--wait 0) takes no ticket.  A wait
 * that ends without the lock (timeout, signal, error) withdraws its ticket
 * (dlock.withdraw, where the server has the 0.3 SQL; before, it lapses
 * within dlock.queue_ttl), so that the next waiter is served at once.
 *
 * Several resources (dlock run R1 R2 ... --) are taken together with
 * try_lock_all, all or nothing, while listening on every one's channel;
 * renewed and released together (one statement each, over unnest); their
 * fences go to COMMAND space-separated, in the order given.
 *
 * Elections campaign (always fair) instead of try_lock; a candidate that
 * already leads (another process with the same --holder) is treated as
 * busy, since campaign would give it the current term and both would run.
 */
#include "dlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STMT_TIMEOUT_MS 30000	/* give up on a statement after this */
#define LISTEN_RECHECK_MS 1000	/* retry at least this often while listening */
#define POLL_MIN_MS 50			/* first polling interval */
#define POLL_MAX_MS 500			/* polling interval cap */

typedef enum
{
	TRY_HELD,					/* acquired (committed) */
	TRY_BUSY,					/* someone else holds it */
	TRY_RETRY,					/* not acquired, try again */
	TRY_LOST,					/* connection lost before COMMIT: not acquired */
	TRY_ERROR,					/* the server refused; reported */
	TRY_SIGNAL,					/* a signal while the outcome was unknown */
} TryStatus;

/*
 * lock_init: prepare a Lock for resource: the holder (given or
 * generated), and the lease as interval text (empty: server default).
 */
void
lock_init(Lock *lk, const Options *o, const char *resource, int64_t lease_ms)
{
	memset(lk, 0, sizeof(*lk));
	lk->opt = o;
	lk->resource = resource;
	lk->param = resource;
	lk->nresources = 1;
	if (o->holder)
		snprintf(lk->holder, sizeof(lk->holder), "%s", o->holder);
	else
		make_holder(lk->holder, sizeof(lk->holder));
	lk->lease_ms = lease_ms;
	if (lease_ms > 0)
		format_interval(lk->lease_text, sizeof(lk->lease_text), lease_ms);
	lk->polling = o->poll;
	lk->shared = o->shared;
	if (o->max_permits > 0)
	{
		snprintf(lk->max_permits_text, sizeof(lk->max_permits_text), "%d", (int) o->max_permits);
		snprintf(lk->permits_text, sizeof(lk->permits_text), "%d",
				 (int) (o->permits > 0 ? o->permits : 1));
	}
	if (o->lock_delay_ms >= 0)
		format_interval(lk->lock_delay_text, sizeof(lk->lock_delay_text),
						o->lock_delay_ms);
}

/*
 * lock_set_resources: lk takes the n resources names (n > 1) together:
 * lk->resource becomes them space-separated (for messages and
 * DLOCK_RESOURCE), lk->param a text[] literal (each quoted, '"' and '\'
 * escaped; a parameter, never spliced into SQL).  False if out of memory.
 */
bool
lock_set_resources(Lock *lk, int n, char **names)
{
	size_t		len = 3;
	char	   *shown, *arr, *s, *a;

	for (int i = 0; i < n; i++)
		len += 2 * strlen(names[i]) + 3;
	shown = malloc(len);
	arr = malloc(len);
	if (shown == NULL || arr == NULL)
	{
		free(shown);
		free(arr);
		return false;
	}
	s = shown;
	a = arr;
	*a++ = '{';
	for (int i = 0; i < n; i++)
	{
		if (i > 0)
		{
			*s++ = ' ';
			*a++ = ',';
		}
		*a++ = '"';
		for (const char *c = names[i]; *c; c++)
		{
			*s++ = *c;
			if (*c == '"' || *c == '\\')
				*a++ = '\\';
			*a++ = *c;
		}
		*a++ = '"';
	}
	*s = '\0';
	*a++ = '}';
	*a = '\0';
	lk->resource = shown;
	lk->param = arr;
	lk->nresources = n;
	lk->resources = names;
	return true;
}

/*
 * lock_reconnect: replace the connection by a fresh one (LISTEN state is
 * lost with the old one).  Returns false, with the reason kept in
 * db_lost_reason(), if none could be made before the deadline.
 */
bool
lock_reconnect(Lock *lk, int64_t deadline, bool interruptible)
{
	db_drop(&lk->conn);
	lk->listening = false;
	lk->conn = db_connect(lk->opt, deadline, interruptible, true);
	if (lk->conn == NULL)
		vlog(lk->opt, "reconnect failed: %s", db_lost_reason());
	return lk->conn != NULL;
}

/*
 * reconnect_retrying: after a lost connection, try again with a growing
 * pause (capped at 2 s) until the wait's deadline, and at least TRIES times,
 * so that a waiter rides out a failover (with a multi-host connection
 * string, libpq finds the new primary).  A signal, the end of the wait, or
 * a login refused for its credentials (db_login_refused: a changed
 * password) gives up.
 */
static bool
reconnect_retrying(Lock *lk, int64_t wait_deadline, int tries)
{
	int64_t		backoff = 200;

	for (int attempt = 0; attempt < tries || now_ms() < wait_deadline; attempt++)
	{
		if (signals_term_count() > 0)
			return false;
		if (lock_reconnect(lk, now_ms() + 10000, true))
		{
			if (attempt > 0)
				logmsg("reconnected; still waiting for \"%s\"", lk->resource);
			return true;
		}
		if (db_login_refused())
			break;				/* a wrong password is never tried twice */
		if (attempt == 0)
			logmsg("connection lost (%s); reconnecting while the wait lasts",
				   db_lost_reason());
		db_sleep(now_ms() + jitter(backoff));
		backoff = backoff * 2 > 2000 ? 2000 : backoff * 2;
	}
	logmsg("could not reconnect: %s", db_lost_reason());
	return false;
}

/*
 * sql_params: the (resource, holder, lease, fair, lock_delay) parameters,
 * or for a semaphore (resource, holder, lease, fair, max_permits,
 * permits); a lease or lock-delay of NULL lets the server use its default
 * (dlock.default_lease, dlock.lock_delay).
 */
static void
sql_params(const Lock *lk, const char *params[6])
{
	params[0] = lk->param;
	params[1] = lk->holder;
	params[2] = lk->lease_text[0] ? lk->lease_text : NULL;
	params[3] = lk->fair ? "true" : "false";
	params[4] = lk->lock_delay_text[0] ? lk->lock_delay_text : NULL;
	params[5] = NULL;
	if (lk->max_permits_text[0])
	{
		params[4] = lk->max_permits_text;
		params[5] = lk->permits_text;
	}
}

/* assumed_lease: the lease used for local deadlines (30 s if unknown). */
static int64_t
assumed_lease(const Lock *lk)
{
	return lk->lease_ms > 0 ? lk->lease_ms : 30000;
}

/*
 * resolve: the connection dropped after COMMIT of transaction xid was
 * sent.  Reconnect (with a multi-host connection string, maybe to a newly
 * promoted standby) and look for the holding itself: this holder with the
 * fence try_lock gave, unexpired.  Fences never repeat, so that row can
 * only come from this transaction.  pg_xact_status() alone cannot answer:
 * on a promoted standby the transaction id may be unknown or belong to
 * another transaction, and on the same server a commit still waiting for
 * a synchronous standby is "committed" in the commit log while its
 * changes are not yet visible (nor, perhaps, on the standby).  So:
 *   - the holding is visible: the commit finished; held;
 *   - the transaction is still running here (in the snapshot's list of
 *     running transactions): ask again shortly;
 *   - else it aborted, or never reached this server (lost in a
 *     failover), or its holding is already gone: not acquired.
 * Past the lease (counted from when try_lock was sent), a late commit
 * could only have made an already-expired lease, so it counts as not
 * acquired.
 */
static TryStatus
resolve(Lock *lk, const char *xid, int64_t sent)
{
	const char *params[4] = {lk->param, lk->holder, lk->fence, xid};
	int64_t		until = sent + assumed_lease(lk);

	logmsg("connection lost while committing the acquisition of \"%s\" (%s); "
		   "checking whether transaction %s committed",
		   lk->resource, db_lost_reason(), xid);
	for (;;)
	{
		PGresult   *r;
		bool		held, running;

		if (signals_term_count() > 0)
			return TRY_SIGNAL;
		if (now_ms() >= until)
		{
			logmsg("outcome of transaction %s still unknown when its lease would "
				   "have ended: not acquired", xid);
			return TRY_RETRY;
		}
		if (lk->conn == NULL && !lock_reconnect(lk, until, true))
		{
			db_sleep(now_ms() + 250 < until ? now_ms() + 250 : until);
			continue;
		}
		if (db_exec(&lk->conn,
					lk->nresources > 1
					? "SELECT (SELECT count(*) FROM dlock.locks l,"
					"    unnest($1::text[], string_to_array($3, ' ')::bigint[]) AS u(r, f)"
					"  WHERE l.resource = u.r AND l.holder = $2 AND l.fence = u.f"
					"    AND NOT l.expired) = cardinality($1::text[]),"
					" $4::xid8 IN (SELECT pg_snapshot_xip(s))"
					" FROM pg_current_snapshot() AS s"
					: "SELECT EXISTS (SELECT FROM dlock.locks"
					"  WHERE resource = $1 AND holder = $2 AND fence = $3::bigint"
					"    AND NOT expired),"
					" $4::xid8 IN (SELECT pg_snapshot_xip(s))"
					" FROM pg_current_snapshot() AS s", 4, params,
					until, true, &r) != DB_OK)
			continue;
		if (!db_result_ok(r) || PQntuples(r) != 1 || PQgetisnull(r, 0, 0))
		{
			db_report("checking the acquisition", lk->conn, r);
			PQclear(r);
			return TRY_ERROR;
		}
		held = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
		running = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
		PQclear(r);
		if (held)
		{
			lk->deadline = sent + assumed_lease(lk);
			logmsg("transaction %s committed: lock held with fence %s", xid, lk->fence);
			return now_ms() < lk->deadline ? TRY_HELD : TRY_RETRY;
		}
		if (!running)
		{
			logmsg("transaction %s did not commit here (it aborted, or was lost "
				   "in a failover): not acquired, retrying", xid);
			return TRY_RETRY;
		}
		/* still committing (e.g. waiting for a synchronous standby) */
		db_sleep(now_ms() + 100 < until ? now_ms() + 100 : until);
	}
}

/*
 * attempt_sql: the statement of one attempt for this kind of lock, its
 * number of parameters, and the function's name for errors.  Every
 * statement returns the fence (NULL: not acquired) and, only when
 * acquired, the transaction's id; those with a fair queue also set
 * synchronous_commit off for a busy attempt's commit (it keeps only a
 * ticket), and return dlock.queue_ttl and whether dlock.withdraw exists.
 */
static const char *
attempt_sql(const Lock *lk, int *nparams, const char **what)
{
#define XID_IF_HELD "CASE WHEN f IS NULL THEN NULL ELSE pg_current_xact_id() END"
#define FAIR_COLUMNS \
	"  CASE WHEN f IS NULL AND $4 THEN set_config('synchronous_commit', 'off', true) END, " \
	"  (extract(epoch FROM current_setting('dlock.queue_ttl', true)::interval) " \
	"   * 1000)::bigint, " \
	"  to_regprocedure('dlock.withdraw(text,text)') IS NOT NULL "

	if (lk->election)
	{
		*nparams = 4;
		*what = "campaign";
		return "SELECT f, " XID_IF_HELD ", "
			"  CASE WHEN f IS NULL THEN set_config('synchronous_commit', 'off', true) END, "
			"  (extract(epoch FROM current_setting('dlock.queue_ttl', true)::interval) "
			"   * 1000)::bigint, d.dup, "
			"  to_regprocedure('dlock.withdraw(text,text)') IS NOT NULL "
			"FROM (SELECT EXISTS (SELECT FROM dlock.leader($1) WHERE candidate = $2) AS dup) d, "
			"  LATERAL (SELECT CASE WHEN NOT d.dup "
			"    THEN dlock.campaign($1, $2, $4, $3::interval, wait => '0') END AS f) c";
	}
	if (lk->nresources > 1)
	{
		*nparams = 3;
		*what = "try_lock_all";
		return "SELECT array_to_string(f, ' '), " XID_IF_HELD " "
			"FROM dlock.try_lock_all($1::text[], $2, $3::interval) AS f";
	}
	if (lk->max_permits_text[0])
	{
		*nparams = 6;
		*what = "try_acquire";
		return "SELECT f, " XID_IF_HELD ", " FAIR_COLUMNS
			"FROM dlock.try_acquire($1, $2, $5::integer, $6::integer, $3::interval, "
			"                       fair => $4::boolean) AS f";
	}
	*what = "try_lock";
	if (lk->shared)
	{
		*nparams = 5;
		return "SELECT f, " XID_IF_HELD ", " FAIR_COLUMNS
			"FROM dlock.try_lock($1, $2, $3::interval, fair => $4::boolean, "
			"                    lock_delay => $5::interval, shared => true) AS f";
	}
	if (lk->fair || lk->lock_delay_text[0])
	{
		*nparams = 5;
		return "SELECT f, " XID_IF_HELD ", " FAIR_COLUMNS
			"FROM dlock.try_lock($1, $2, $3::interval, fair => $4::boolean, "
			"                    lock_delay => $5::interval) AS f";
	}
	*nparams = 3;
	return "SELECT f, " XID_IF_HELD " FROM dlock.try_lock($1, $2, $3::interval) AS f";
#undef XID_IF_HELD
#undef FAIR_COLUMNS
}

/*
 * begin_durable: BEGIN the attempt's transaction (false: *fail says why not).  The acquisition must be
 * durable once COMMIT is acknowledged: never commit it with a
 * synchronous_commit weaker than "on" (a stronger setting is kept),
 * whatever the session or role says.  READ COMMITTED, whatever the
 * default: the transaction holds only dlock's statements, and under a
 * SERIALIZABLE default concurrent attempts failed each other with 40001.
 */
static bool
begin_durable(Lock *lk, TryStatus *fail)
{
	PGresult   *r;

	if (db_exec(&lk->conn,
				"BEGIN ISOLATION LEVEL READ COMMITTED; "
				"SELECT set_config('synchronous_commit', 'on', true) "
				"WHERE current_setting('synchronous_commit') IN ('off', 'local')",
				0, NULL, now_ms() + STMT_TIMEOUT_MS, false, &r) != DB_OK)
	{
		*fail = TRY_LOST;
		return false;
	}
	if (!db_result_ok(r))
	{
		db_report("could not start the acquisition", lk->conn, r);
		PQclear(r);
		db_drop(&lk->conn);
		*fail = TRY_ERROR;
		return false;
	}
	PQclear(r);
	return true;
}

/*
 * note_attempt: what an attempt's row says besides the fence: the queue's
 * ttl, whether withdraw exists, and (a campaign) that this candidate
 * already leads.
 */
static void
note_attempt(Lock *lk, PGresult *r)
{
	if (PQnfields(r) >= 4 && !PQgetisnull(r, 0, 3))
		lk->queue_ttl_ms = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
	if (PQnfields(r) >= 5)
		lk->can_withdraw = strcmp(PQgetvalue(r, 0, PQnfields(r) - 1), "t") == 0;
	if (lk->election && strcmp(PQgetvalue(r, 0, 4), "t") == 0 && !lk->dup_said)
	{
		/*
		 * Campaigning again, the leader gets its current term: two processes
		 * with the same --holder would both run COMMAND, and the first to
		 * resign would leave the other running beside the next leader.
		 */
		logmsg("candidate \"%s\" already leads \"%s\" (another process with the same "
			   "--holder?): waiting until it no longer does", lk->holder, lk->resource);
		lk->dup_said = true;
	}
}

/*
 * end_busy: not acquired.  A fair attempt commits, to keep its ticket
 * (written by try_lock) for dlock.queue_ttl; the commit need not be
 * durable, since a lost ticket only costs the place in the queue.  Others
 * roll back: they changed nothing.
 */
static TryStatus
end_busy(Lock *lk)
{
	PGresult   *r;

	if (db_exec(&lk->conn, lk->fair ? "COMMIT" : "ROLLBACK", 0, NULL,
				now_ms() + STMT_TIMEOUT_MS, false, &r) == DB_OK)
	{
		/* (a lost COMMIT may have committed a ticket too) */
		PQclear(r);
	}
	if (lk->fair)
		lk->ticketed = true;
	return TRY_BUSY;
}

/*
 * commit_acquisition: COMMIT the attempt that was granted.  From here on
 * the outcome can be unknown (resolve).  A waiter that listened stops
 * listening in the same transaction (UNLISTEN takes effect at its
 * commit), saving a round trip before COMMAND starts; the result is
 * COMMIT's, or UNLISTEN's error (then nothing committed).  A signal ends
 * the wait for it (a synchronous standby may never come): COMMAND does
 * not start; a holding that committed expires with its lease.
 */
static TryStatus
commit_acquisition(Lock *lk, const char *xid, int64_t sent)
{
	PGresult   *r;
	DbStatus	st;

	st = db_exec(&lk->conn, lk->listening ? "UNLISTEN *; COMMIT" : "COMMIT", 0, NULL,
				 sent + assumed_lease(lk), true, &r);
	if (st == DB_SIGNAL)
		return TRY_SIGNAL;
	if (st != DB_OK)
		return resolve(lk, xid, sent);
	if (!db_result_ok(r) || strcmp(PQcmdStatus(r), "COMMIT") != 0)
	{
		db_report("the acquisition did not commit", lk->conn, r);
		PQclear(r);
		return TRY_ERROR;
	}
	PQclear(r);
	lk->listening = false;
	lk->ticketed = false;		/* an acquisition drops the holder's ticket */
	lk->deadline = sent + assumed_lease(lk);
	return TRY_HELD;
}

/*
 * try_once: one transactional attempt to take the lock, never waiting
 * behind anyone (try_lock does not wait).
 */
static TryStatus
try_once(Lock *lk)
{
	PGresult   *r;
	const char *params[6];
	const char *sql;
	const char *what;
	char		xid[32];
	int64_t		sent;
	int			nparams;
	TryStatus	ts;

	if (!begin_durable(lk, &ts))
		return ts;

	/*
	 * The transaction id is only asked for (and so only assigned) when the
	 * lock was granted: busy attempts of pollers burn no xids.
	 */
	sql_params(lk, params);
	if (lk->election)
		params[3] = lk->value;	/* campaign takes no fair or lock_delay */
	sql = attempt_sql(lk, &nparams, &what);
	sent = now_ms();
	if (db_exec(&lk->conn, sql, nparams, params, sent + STMT_TIMEOUT_MS, false, &r) != DB_OK)
		return TRY_LOST;		/* no COMMIT was sent: nothing committed */
	if (!db_result_ok(r) || PQntuples(r) != 1 || PQnfields(r) < 2)
	{
		db_report(what, lk->conn, r);
		PQclear(r);
		db_drop(&lk->conn);		/* rolls the transaction back */
		return TRY_ERROR;
	}
	note_attempt(lk, r);
	if (PQgetisnull(r, 0, 0))
	{
		PQclear(r);
		return end_busy(lk);
	}
	snprintf(lk->fence, sizeof(lk->fence), "%s", PQgetvalue(r, 0, 0));
	snprintf(xid, sizeof(xid), "%s", PQgetvalue(r, 0, 1));
	PQclear(r);
	return commit_acquisition(lk, xid, sent);
}

/*
 * setup_listen: subscribe to the resource's channel, unless the
 * connection goes through a pooler, where notifications cannot be
 * trusted: then switch to polling for good.
 */
static void
setup_listen(Lock *lk)
{
	char	   *chan;

	if (db_pooled(&lk->conn))
	{
		vlog(lk->opt, "connection pooler detected: LISTEN is not usable, polling");
		lk->polling = true;
		return;
	}
	for (int i = 0; i < lk->nresources; i++)
	{
		if (lk->conn == NULL)
			return;
		chan = db_listen(&lk->conn, lk->nresources > 1 ? lk->resources[i] : lk->resource,
						 now_ms() + STMT_TIMEOUT_MS);
		if (chan == NULL)
		{
			if (lk->conn != NULL)
			{
				logmsg("polling instead");
				lk->polling = true;
			}
			return;
		}
		free(chan);
	}
	lk->listening = true;
	vlog(lk->opt, "waiting for \"%s\" (LISTEN)", lk->resource);
}

/*
 * withdraw: a fair wait ended without the lock: give the ticket back at
 * once (dlock.withdraw), so that the next waiter need not wait for it to
 * lapse.  Best effort, bounded: a ticket not withdrawn still lapses within
 * dlock.queue_ttl.  Only where the server has the 0.3 SQL.
 */
static void
withdraw(Lock *lk)
{
	const char *params[2] = {lk->resource, lk->holder};
	PGresult   *r;

	if (!lk->ticketed || !lk->can_withdraw)
		return;
	lk->ticketed = false;
	if (lk->conn == NULL && !lock_reconnect(lk, now_ms() + 2000, false))
		return;
	if (db_exec(&lk->conn, "SELECT dlock.withdraw($1, $2)", 2, params,
				now_ms() + 2000, false, &r) != DB_OK)
		return;
	if (!db_result_ok(r))
		db_report("withdraw", lk->conn, r);
	else
		vlog(lk->opt, "withdrew from the queue of \"%s\"", lk->resource);
	PQclear(r);
}

static AcqStatus acquire_wait(Lock *lk, int64_t wait_ms);

/*
 * acquire: take the lock, waiting up to wait_ms (-1: forever, 0: one
 * try); a fair wait that ends without it withdraws its ticket.
 */
AcqStatus
acquire(Lock *lk, int64_t wait_ms)
{
	AcqStatus	st = acquire_wait(lk, wait_ms);

	if (st != ACQ_OK)
		withdraw(lk);
	return st;
}

/*
 * acquire_wait: take the lock, waiting up to wait_ms (-1: forever, 0: one
 * try).  On ACQ_OK, lk->fence is the fence and lk->deadline the local
 * monotonic time until which the lease surely lasts (time try_lock was
 * sent + lease).  A terminating signal ends the wait (ACQ_SIGNAL); an
 * acquisition that committed meanwhile is still reported as ACQ_OK so
 * the caller can release it.
 */
static AcqStatus
acquire_wait(Lock *lk, int64_t wait_ms)
{
	int64_t		wait_deadline = wait_ms < 0 ? NEVER : now_ms() + wait_ms;
	int64_t		poll_ms = POLL_MIN_MS;
	int64_t		backoff = 0;	/* after a failed try: the next pause */
	int			failed = 0;		/* tries in a row lost or rolled back */
	int			tries = wait_ms == 0 ? 2 : 7;	/* such tries that end it, once the wait is over */

	/* One try does not queue: a ticket nobody retries would only block. */
	lk->fair = (lk->opt->fair || lk->election) && wait_ms != 0;

	for (;;)
	{
		int64_t		now, until;
		DbStatus	st;

		if (signals_term_count() > 0)
			return ACQ_SIGNAL;
		if (lk->conn == NULL && !reconnect_retrying(lk, wait_deadline, tries - 1))
			return signals_term_count() > 0 ? ACQ_SIGNAL : ACQ_CONN;

		switch (try_once(lk))
		{
			case TRY_HELD:
				/* no longer listening: try_once's commit, or resolve()'s new connection */
				return ACQ_OK;
			case TRY_ERROR:
				return ACQ_ERROR;
			case TRY_SIGNAL:
				return ACQ_SIGNAL;
			case TRY_LOST:
			case TRY_RETRY:

				/*
				 * Lost, or not acquired after all (resolve): try again, but
				 * not past the wait after seven tries (one try, --wait 0:
				 * two), and with growing pauses: behind a pooler whose
				 * server is down, every login succeeds and every try fails.
				 */
				if (lk->conn == NULL)
					vlog(lk->opt, "connection lost (%s), reconnecting", db_lost_reason());
				if (++failed >= tries && now_ms() >= wait_deadline)
				{
					logmsg("no try succeeded before the wait ended: %s", db_lost_reason());
					return ACQ_CONN;
				}
				if (backoff > 0)
				{
					until = now_ms() + jitter(backoff);
					db_sleep(until < wait_deadline || failed < tries ? until : wait_deadline);
				}
				backoff = backoff == 0 ? 100 : backoff * 2 > 2000 ? 2000 : backoff * 2;
				continue;
			case TRY_BUSY:
				failed = 0;
				backoff = 0;
				break;
		}

		now = now_ms();
		if (now >= wait_deadline)
			return ACQ_TIMEOUT;
		if (!lk->polling && !lk->listening)
		{
			/* subscribe, then try again before sleeping */
			setup_listen(lk);
			continue;
		}
		if (lk->listening)
			until = now + LISTEN_RECHECK_MS;
		else
		{
			until = now + jitter(poll_ms);
			poll_ms = poll_ms * 3 / 2 > POLL_MAX_MS ? POLL_MAX_MS : poll_ms * 3 / 2;
		}
		if (lk->fair && lk->queue_ttl_ms > 0)
		{
			/* retry well within dlock.queue_ttl, or the ticket lapses */
			int64_t		keep = lk->queue_ttl_ms / 3 > 5 ? lk->queue_ttl_ms / 3 : 5;

			if (until > now + keep)
				until = now + keep;
		}
		if (until > wait_deadline)
			until = wait_deadline;
		if (lk->conn == NULL)
			continue;
		st = db_wait(lk->conn, until, true);
		if (st == DB_OK)
		{
			if (!PQconsumeInput(lk->conn))
				db_drop(&lk->conn);
			else
				db_drain_notifies(lk->conn, NULL, false);
		}
		else if (st == DB_LOST)
			db_drop(&lk->conn);
	}
}

/*
 * release: give the lock back after COMMAND: unlock(resource, holder,
 * fence), or with linger_ms > 0 renew it once for linger_ms and leave it
 * to expire (ShedLock's lockAtLeastFor).  Connection failures are retried
 * until the deadline (the end of the lease: after it, there is nothing
 * left to release).  Returns 0 done, 1 not held (NULL), -1 failed.
 */
int
release(Lock *lk, int64_t linger_ms, int64_t deadline)
{
	char		linger_text[48];
	const char *params[4];
	bool		retried = false;

	format_interval(linger_text, sizeof(linger_text), linger_ms);
	params[0] = lk->param;
	params[1] = lk->holder;
	params[2] = linger_ms > 0 ? linger_text : lk->fence;
	params[3] = lk->fence;
	for (;;)
	{
		PGresult   *r;
		int64_t		now = now_ms();
		int64_t		stmt_deadline = now + 10000 < deadline ? now + 10000 : deadline;
		bool		isnull;

		if (now >= deadline)
		{
			logmsg("could not release \"%s\" before its lease ended: %s",
				   lk->resource, db_lost_reason());
			return -1;
		}
		if (lk->conn == NULL && !lock_reconnect(lk, stmt_deadline, false))
		{
			db_sleep(now_ms() + jitter(500) < deadline ? now_ms() + jitter(500) : deadline);
			retried = true;
			continue;
		}
		if (db_exec(&lk->conn,
					lk->nresources > 1
					? (linger_ms > 0 ? LOCK_ALL_RENEW : LOCK_ALL_UNLOCK)
					: linger_ms > 0
					? "SELECT dlock.renew($1, $2, $3::interval, $4::bigint)"
					: lk->election
					? "SELECT CASE WHEN dlock.resign($1, $2, $3::bigint) THEN 0 END"
					: "SELECT dlock.unlock($1, $2, $3::bigint)",
					linger_ms > 0 ? 4 : 3, params, stmt_deadline, false, &r) != DB_OK)
		{
			retried = true;
			continue;
		}
		if (!db_result_ok(r) && db_error_is_retryable(r))
		{
			/* rolled back: nothing was done; sent again */
			vlog(lk->opt, "%s", PQresultErrorMessage(r));
			PQclear(r);
			db_sleep(now_ms() + jitter(50) < deadline ? now_ms() + jitter(50) : deadline);
			continue;
		}
		if (!db_result_ok(r) || PQntuples(r) != 1)
		{
			db_report(linger_ms > 0 ? "renew (linger)" : "unlock", lk->conn, r);
			PQclear(r);
			return -1;
		}
		isnull = PQgetisnull(r, 0, 0);
		PQclear(r);
		if (isnull && !retried)
			return 1;
		return 0;
	}
}
