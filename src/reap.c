/*-------------------------------------------------------------------------
 *
 * reap.c
 *		Expiry: what one transaction of a reaper round does.
 *
 * An expired lease is already free to acquirers (lazy expiry); reaping
 * makes the row free for real, emits the "expired" event and wakes a
 * waiter.  A holding's row goes when the holding ends, unless something
 * still needs it (a lock-delay, a holding value, a queued ticket: rows.c's
 * row_needed); a row kept free is deleted (purged) by reapers once it has
 * been free for DLOCK_FREE_ROW_TTL_SECS and its lock-delay is over, so the
 * table holds what is held, queued or under lock-delay (issue 25).
 *
 * Reaping must never make an expired lease unavailable, and must progress
 * at any legal setting.  So:
 *
 *	- reaping runs only in reaper rounds (worker.c): background workers of
 *	  their own, whose short transactions never wait for anything.
 *	  dlock.reap() starts such a round and waits for it: the caller's
 *	  transaction holds nothing, so leaving it open blocks nobody, and
 *	  rolling it back does not undo the reaping (reaping is maintenance);
 *	- each candidate is taken with its maintenance lock (held until after
 *	  the transaction ends) and then its resource lock, both without
 *	  waiting; a resource some transaction is working on is skipped (an
 *	  acquirer takes it over anyway), and an acquirer that finds a reaper
 *	  in the way waits for it (resource.c);
 *	- a transaction reaps at most dlock_reap_batch_size() leases, two locks
 *	  each, sized from max_locks_per_transaction so the shared lock table
 *	  never runs out.
 *
 * Shared holdings and a semaphore's permits expire the same way, each with
 * its own event and wakeups; a session's holdings (1.1) with their session,
 * once its end is locked in (session_row.c), its row going last
 * (session.c).
 *
 * No shared state of its own (the statistics and the hint are waiters.c's).
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "storage/lock.h"
#include "utils/builtins.h"

#define DLOCK_FREE_ROW_TTL_SECS 60

/*
 * dlock_reap_batch_size: leases per reaper transaction.  Each holds two
 * locks to commit; a quarter of max_locks_per_transaction keeps a round
 * well within its share of the lock table, whatever the setting.
 */
int
dlock_reap_batch_size(void)
{
	return Max(1, Min(64, max_locks_per_xact / 4));
}

/*
 * take_for_maintenance: the maintenance lock (session level), then the
 * resource lock, both without waiting; false, holding neither, if either
 * is busy.  The round gives the maintenance locks back after the
 * transaction ends (worker.c).
 */
static bool
take_for_maintenance(const DlockResource *res)
{
	if (!dlock_maintenance_lock(res))
		return false;
	if (!dlock_resource_lock(res, DLOCK_CHANGE, false))
	{
		dlock_maintenance_unlock(res);
		return false;
	}
	return true;
}

/*
 * shares_expired: up to limit resources with an expired shared holding
 * (0.4) or holding of a semaphore's permits (0.5), as text* in the store
 * session's caller context.
 */
static List *
shares_expired(TimestampTz now, int limit)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_permits = NULL;
	static const Oid types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum		values[2];
	List	   *result = NIL;
	bool		permits = dlock_semaphores_installed();

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(limit);
	if (dlock_store_exec(permits ? &plan_permits : &plan,
						 permits ?
						 "SELECT s.resource FROM dlock.shares s"
						 "  WHERE s.expires_at OPERATOR(pg_catalog.<=) $1"
						 " UNION SELECT p.resource FROM dlock.permits p"
						 "  WHERE p.expires_at OPERATOR(pg_catalog.<=) $1 LIMIT $2" :
						 "SELECT DISTINCT s.resource FROM dlock.shares s"
						 "  WHERE s.expires_at OPERATOR(pg_catalog.<=) $1 LIMIT $2",
						 2, types, values, NULL, true) > 0)
	{
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;
			char	   *r = dlock_store_copy_text(SPI_getbinval(SPI_tuptable->vals[i],
															   SPI_tuptable->tupdesc,
															   1, &isnull));
			MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

			result = lappend(result, cstring_to_text(r));
			MemoryContextSwitchTo(old);
		}
	}
	return result;
}

/*
 * reap_shares: free res's shared holdings (0.4) that expired by now, with
 * their events; the last holding of the resource gone wakes a waiter.
 * Returns how many.  Under the resource's lock.
 */
static int
reap_shares(const DlockResource *res, TimestampTz now)
{
	List	   *shares = dlock_row_read_shares(res);
	ListCell   *lc;
	int			reaped = 0;
	int			reaped_shared = 0;
	int			live = 0;
	DlockRow	row;

	foreach(lc, shares)
	{
		DlockRow   *sh = lfirst(lc);

		/* A session's (1.1): only once its end is locked in (session_row.c). */
		if (sh->expires_at > now ||
			(sh->session != 0 && !dlock_session_lapsed(sh->session)))
		{
			live++;
			continue;
		}
		if (!dlock_share_change(res, sh, 0, NULL, now, 0))
			continue;			/* changed by hand meanwhile: a later round */
		dlock_notify(res, "expired", sh->fence);
		dlock_count(DLOCK_STAT_EXPIRED);
		dlock_wake_released(res->hash, sh, false);
		reaped++;
		if (sh->permits == 0)
			reaped_shared++;
	}
	dlock_row_read(res, &row);
	if (reaped_shared > 0 && live == 0 && dlock_lease_ended(&row, now))
		dlock_wake_after_commit(res->hash);
	return reaped;
}

/*
 * session_in_flight: res's exclusive holding is a session's (1.1) whose
 * end is not locked in (a keepalive in flight, rows.c's
 * dlock_session_lapsed): it is left alone, lock-delay and all, as a
 * holding renewed meanwhile is.  Under the resource's lock.
 */
static bool
session_in_flight(const DlockResource *res, TimestampTz now)
{
	DlockRow	row;

	dlock_row_read(res, &row);
	return row.session != 0 && row.held && row.expires_at <= now &&
		!dlock_session_lapsed(row.session);
}

/*
 * dlock_reap_candidates: up to limit resources whose lease ended by now,
 * as text* in the current memory context (the round keeps them across the
 * transactions that reap them).
 */
List *
dlock_reap_candidates(TimestampTz now, int limit)
{
	List	   *resources;

	dlock_store_begin();
	resources = dlock_rows_expired(now, limit);
	if (list_length(resources) < limit && dlock_shares_installed())
	{
		List	   *shares = shares_expired(now, limit - list_length(resources));

		/*
		 * In the caller's context: list_concat onto NIL copies the list
		 * into the current context, which the store session's end frees.
		 */
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

		resources = list_concat(resources, shares);
		MemoryContextSwitchTo(old);
	}
	if (list_length(resources) < limit)
	{
		/* Holdings of sessions that ended (1.1). */
		List	   *sessions = dlock_session_candidates(now, limit - list_length(resources));
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

		resources = list_concat(resources, sessions);
		MemoryContextSwitchTo(old);
	}
	dlock_store_end();
	return resources;
}

/*
 * dlock_stale_candidates: up to limit resources free since
 * DLOCK_FREE_ROW_TTL_SECS before now, for dlock_purge_list.
 */
List *
dlock_stale_candidates(TimestampTz now, int limit)
{
	List	   *resources;

	dlock_store_begin();
	resources = dlock_rows_stale_free(now - (TimestampTz) DLOCK_FREE_ROW_TTL_SECS * USECS_PER_SEC,
									  limit);
	dlock_store_end();
	return resources;
}

/*
 * dlock_reap_list: reap resources[from .. to-1] that are still expired at
 * now; returns how many.  Runs in the caller's (a round's) transaction.
 */
int
dlock_reap_list(List *resources, int from, int to, TimestampTz now)
{
	int			reaped = 0;
	int			i;
	bool		queued;
	bool		values;
	bool		shares;

	dlock_store_begin();
	queued = dlock_queue_installed();
	values = queued && dlock_values_installed();
	shares = dlock_shares_installed();
	for (i = from; i < to; i++)
	{
		DlockResource res;
		int64		fence;
		char	   *holder;
		char	   *value;
		bool		election;

		dlock_resource_init(&res, list_nth(resources, i));
		if (!take_for_maintenance(&res))
			continue;
		if (shares)
			reaped += reap_shares(&res, now);
		if (session_in_flight(&res, now))
			continue;			/* the locks go at commit */
		if (queued)
			dlock_delay_on_end(&res, DT_NOBEGIN, now);
		fence = dlock_row_reap(&res, now);
		if (fence == 0)
			continue;			/* no longer expired; the locks go at commit */
		if (values && dlock_value_read(&res, fence, &holder, &value, &election) &&
			election)
			dlock_notify_holding(&res, "expired", fence, holder, value);
		else
			dlock_notify(&res, "expired", fence);
		dlock_wake_after_commit(res.hash);
		dlock_count(DLOCK_STAT_EXPIRED);
		reaped++;
	}
	dlock_store_end();
	if (reaped > 0)
		dlock_note_release();
	return reaped;
}

/*
 * dlock_purge_list: delete the rows of resources[from .. to-1] that are
 * (still) free, and not under a pending lock-delay.  Runs in the caller's
 * (a round's) transaction.
 */
void
dlock_purge_list(List *resources, int from, int to)
{
	int			i;
	bool		queued;
	TimestampTz now = GetCurrentTimestamp();

	dlock_store_begin();
	queued = dlock_queue_installed() && dlock_values_installed();
	for (i = from; i < to; i++)
	{
		DlockResource res;

		dlock_resource_init(&res, list_nth(resources, i));
		if (!take_for_maintenance(&res))
			continue;
		/*
		 * A row freed uncleanly keeps its lock-delay (queue.c) while that
		 * runs: a broken holding of a long lease may be unavailable for
		 * longer than a row is kept free.
		 */
		if (queued && dlock_delay_pending(&res, now))
			continue;
		dlock_row_delete_free(&res);
		if (queued)
		{
			dlock_queue_forget(&res);
			dlock_values_forget(&res);
		}
	}
	dlock_store_end();
	/* Nothing anyone waits for: commit without waiting for a standby. */
	dlock_note_release();
}
