/*-------------------------------------------------------------------------
 *
 * upkeep.c
 *		The fair queue and lock-delay outside an attempt: a holder withdraws
 *		its client ticket, a clean release drops a stale one, and the
 *		reaper records, keeps and purges what lock-delay and the queue leave.
 *
 * The tickets and delays themselves are queue.c's; the rules of their
 * rows are in docs/how-it-works.md ("Fair queues and lock-delay").  Runs
 * inside store sessions (store.c), and only under the 0.2 SQL or later.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#define RES_IS(alias) alias ".resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"

PG_FUNCTION_INFO_V1(dlock_withdraw);

/*
 * dlock_client_ticket_release: the holding of holder (of role owner) of res
 * has ended cleanly (unlock, unlock_all, resign): a client ticket of that
 * holder left behind is stale (taken by a fair attempt on another
 * connection that met the acquisition still uncommitted, so it could not
 * see that the holder was taking the resource); it would head the queue
 * once the holding is gone and hold everyone off until it lapses.  Under
 * the resource's lock, inside a store session; nothing under the 0.1 SQL.
 * A release is a hot path: the statement runs only if the resource has a
 * live ticket at all, looked up without SPI (rows.c).
 */
void
dlock_client_ticket_release(const DlockResource *res, text *holder, Oid owner)
{
	if (dlock_row_tickets_live(res, GetCurrentTimestamp()))
		dlock_client_ticket_drop(res, holder, owner);
}

/*
 * dlock.withdraw(resource, holder) (0.3 SQL): the holder gives up its
 * client ticket for resource at once (a client-side waiter that stops
 * waiting); false if it had none.  Owner checks as for unlock: the
 * caller's role's ticket; another role's ticket of the same holder text
 * raises 42501 (a superuser withdraws it).  The next waiter is woken once
 * the withdrawal commits, so the next ticket is served at once.  A ticket
 * held by a wait in lock() is the wait's: it leaves with the wait.
 */
Datum
dlock_withdraw(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, REGROLEOID, BOOLOID};
	Datum		values[4];
	DlockResource res;
	text	   *holder;
	DlockCaller caller;
	Oid			other = InvalidOid;
	bool		withdrawn = false;
	uint64		i;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	dlock_check_writable("dlock.withdraw()");
	caller = dlock_caller();

	/*
	 * One statement: delete the caller's role's ticket (a superuser
	 * without one: every other role's of that holder), and report the
	 * roles of the holder's other live tickets, which it may not touch.
	 */
	values[0] = PointerGetDatum(res.name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(caller.role);
	values[3] = BoolGetDatum(caller.is_super);
	/*
	 * The writer lock of the caller's ticket row (dlock_ticket_row_lock),
	 * so that the holder's fair attempts meanwhile leave the row alone
	 * instead of waiting for this transaction.  (A superuser's withdrawal
	 * of other roles' tickets does not take theirs.)
	 */
	(void) dlock_ticket_row_lock(&res, holder, caller.role, true);
	dlock_store_begin();
	if (dlock_store_exec(&plan,
						 "WITH d AS (DELETE FROM dlock.tickets t WHERE " RES_IS("t")
						 "    AND t.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
						 "    AND (t.owner OPERATOR(pg_catalog.=) $3 OR ($4 AND NOT EXISTS"
						 "     (SELECT FROM dlock.tickets o WHERE " RES_IS("o")
						 "       AND o.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
						 "       AND o.owner OPERATOR(pg_catalog.=) $3)))"
						 "  RETURNING t.expires_at)"
						 " SELECT CASE WHEN d.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()"
						 "   THEN 1 ELSE 0 END, NULL::pg_catalog.oid FROM d"
						 " UNION ALL"
						 " SELECT 2, t.owner::pg_catalog.oid FROM dlock.tickets t"
						 "  WHERE " RES_IS("t")
						 "    AND t.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
						 "    AND t.owner OPERATOR(pg_catalog.<>) $3 AND NOT $4"
						 "    AND t.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()",
						 4, types, values, NULL, false) > 0)
	{
		for (i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
										  1, &isnull);

			if (DatumGetInt32(d) == 1)
				withdrawn = true;	/* a live ticket (a lapsed one goes too) */
			else if (DatumGetInt32(d) == 2)
				other = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
													   SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
	dlock_store_end();
	if (!withdrawn && OidIsValid(other))
	{
		const char *name = GetUserNameFromId(other, true);

		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to withdraw a ticket taken by role \"%s\"",
						name ? name : "(dropped)"),
				 errdetail("Only the role that took a ticket, or a superuser, can withdraw it.")));
	}
	if (withdrawn)
		dlock_wake_after_commit(res.hash);
	PG_RETURN_BOOL(withdrawn);
}

/*
 * dlock_delay_on_end: res's holding is about to be freed uncleanly: by
 * the reaper, its lease having ended (at = DT_NOBEGIN: available at expiry
 * + delay), or by break_lock at "at" (the holder may still write until its
 * lease ends: available at the later of the two + delay).  Record when the
 * resource becomes available; the reaper passes expired_by = now (a
 * holding renewed meanwhile is left alone), break_lock DT_NOEND.  Before
 * the row is freed, under the resource's lock.
 */
void
dlock_delay_on_end(const DlockResource *res, TimestampTz at,
				   TimestampTz expired_by)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_sessions = NULL;
	static const Oid types[3] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[3];

	values[0] = PointerGetDatum(res->name);
	values[1] = TimestampTzGetDatum(at);
	values[2] = TimestampTzGetDatum(expired_by);
	if (dlock_sessions_installed())
	{
		/* A session's holding (1.1) ends with its session. */
		(void) dlock_store_exec(&plan_sessions,
								"UPDATE dlock.delays d SET available_at ="
								"  GREATEST(h.e, $2) OPERATOR(pg_catalog.+) d.lock_delay"
								"  FROM (SELECT l.resource, l.fence, CASE WHEN l.session IS NULL THEN l.expires_at"
								"          ELSE COALESCE((SELECT s.expires_at FROM dlock.session_rows s"
								"                          WHERE s.id OPERATOR(pg_catalog.=) l.session),"
								"                        '-infinity'::pg_catalog.timestamptz) END AS e"
								"          FROM dlock.leases l WHERE " RES_IS("l") " AND l.holder IS NOT NULL) h"
								" WHERE " RES_IS("d") " AND h.fence OPERATOR(pg_catalog.=) d.fence"
								"   AND h.e OPERATOR(pg_catalog.<=) $3",
								3, types, values, NULL, false);
		return;
	}
	(void) dlock_store_exec(&plan,
							"UPDATE dlock.delays d SET available_at ="
							"  GREATEST(l.expires_at, $2) OPERATOR(pg_catalog.+) d.lock_delay"
							"  FROM dlock.leases l WHERE " RES_IS("d") " AND " RES_IS("l")
							"   AND l.fence OPERATOR(pg_catalog.=) d.fence AND l.holder IS NOT NULL"
							"   AND l.expires_at OPERATOR(pg_catalog.<=) $3",
							3, types, values, NULL, false);
}

/*
 * dlock_queue_purge: delete client tickets nobody kept alive, and delays
 * that are over.  Only dead rows, so no resource lock is needed: a row a
 * fair attempt or a new holding took over meanwhile no longer matches
 * when its lock re-checks it.  For the reaper, which never waits: only
 * rows locked at once are deleted (SKIP LOCKED); a row an open
 * transaction is taking over (a client re-taking its lapsed ticket, an
 * acquisition with a lock-delay) is left for a later round, which finds
 * it dead again or not.  Returns how many.
 */
int
dlock_queue_purge(TimestampTz now)
{
	static SPIPlanPtr tickets_plan = NULL;
	static SPIPlanPtr delays_plan = NULL;
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	uint64		n;

	if (!dlock_queue_installed())
		return 0;
	values[0] = TimestampTzGetDatum(now);
	n = dlock_store_exec(&tickets_plan,
						 "DELETE FROM dlock.tickets t"
						 "  WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
						 "    SELECT k.ctid FROM dlock.tickets k"
						 "     WHERE k.expires_at OPERATOR(pg_catalog.<=) $1"
						 "     FOR UPDATE SKIP LOCKED))"
						 "   AND t.expires_at OPERATOR(pg_catalog.<=) $1",
						 1, types, values, NULL, false);
	n += dlock_store_exec(&delays_plan,
						  "DELETE FROM dlock.delays d"
						  "  WHERE d.ctid OPERATOR(pg_catalog.=) ANY (ARRAY("
						  "    SELECT k.ctid FROM dlock.delays k"
						  "     WHERE k.available_at OPERATOR(pg_catalog.<=) $1"
						  "     FOR UPDATE SKIP LOCKED))"
						  "   AND d.available_at OPERATOR(pg_catalog.<=) $1",
						  1, types, values, NULL, false);
	return (int) Min(n, (uint64) INT_MAX);
}

/*
 * dlock_delay_pending: is res, freed uncleanly, still under its lock-delay
 * at now?  Then its row must stay (the purge of long-free rows, reap.c):
 * without it the resource would look never seen, free at once.  Under
 * the resource's lock.
 */
bool
dlock_delay_pending(const DlockResource *res, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum		values[2];

	values[0] = PointerGetDatum(res->name);
	values[1] = TimestampTzGetDatum(now);
	return dlock_store_exec(&plan,
							"SELECT FROM dlock.delays d WHERE " RES_IS("d")
							"   AND d.available_at OPERATOR(pg_catalog.>) $2",
							2, types, values, NULL, true) > 0;
}

/*
 * dlock_queue_forget: delete res's delay row if its holding ended cleanly
 * (or is gone), with the resource's row once that has been free long
 * enough (reap.c).  Under the resource's lock: a sweeping DELETE without
 * it could meet a row just taken over for a new holding and, re-checking
 * it against its own older snapshot of dlock.leases, delete the new delay.
 */
void
dlock_queue_forget(const DlockResource *res)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = PointerGetDatum(res->name);
	(void) dlock_store_exec(&plan,
							"DELETE FROM dlock.delays d WHERE " RES_IS("d")
							"   AND d.available_at IS NULL AND NOT EXISTS (SELECT FROM dlock.leases l"
							"    WHERE l.resource OPERATOR(pg_catalog.=) d.resource"
							"      AND l.fence OPERATOR(pg_catalog.=) d.fence"
							"      AND l.holder IS NOT NULL)",
							1, types, values, NULL, false);
}
