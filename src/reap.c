/*-------------------------------------------------------------------------
 *
 * reap.c
 *		Expiry: dlock.reap() and the batch the background worker runs.
 *
 * An expired lease is already free to acquirers (lazy expiry); reaping
 * makes the row free for real, emits the "expired" event and wakes a
 * waiter.  Each candidate's resource lock is taken without waiting: a
 * resource some transaction is working on is skipped (the acquirer will
 * take it over anyway), so reaping never blocks anyone.  The locks of the
 * reaped rows are held to commit like any change, so one call reaps at most
 * DLOCK_REAP_PER_CALL rows to bound the lock table; the worker commits
 * after each batch and goes on while batches come back full.
 *
 * Released rows stay in the table so that the next acquisition is an
 * update in place; rows free for longer than DLOCK_FREE_ROW_TTL are deleted
 * by the same batches, so resources used once do not pile up.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(dlock_reap);

#define DLOCK_REAP_PER_CALL 1000
#define DLOCK_FREE_ROW_TTL_SECS 3600

/*
 * dlock_purge_free: delete up to limit rows free for DLOCK_FREE_ROW_TTL,
 * skipping any resource a transaction is working on.
 */
void
dlock_purge_free(TimestampTz now, int limit)
{
	List	   *resources;
	ListCell   *lc;

	if (limit <= 0)
		return;
	dlock_store_begin();
	resources = dlock_rows_stale_free(now - (TimestampTz) DLOCK_FREE_ROW_TTL_SECS * USECS_PER_SEC,
									  limit);
	foreach(lc, resources)
	{
		DlockResource res;

		dlock_resource_init(&res, lfirst(lc));
		if (!dlock_resource_lock(&res, false))
			continue;
		dlock_row_delete_free(&res);
	}
	dlock_store_end();
}

/*
 * dlock_reap_candidates: up to limit resources whose lease ended by now,
 * as text* in the current memory context (the worker keeps them across
 * the transactions that reap them).
 */
List *
dlock_reap_candidates(TimestampTz now, int limit)
{
	List	   *resources;

	dlock_store_begin();
	resources = dlock_rows_expired(now, limit);
	dlock_store_end();
	return resources;
}

/*
 * dlock_reap_list: reap resources[from .. to-1] that are still expired at
 * now; returns how many.  A resource some transaction is working on is
 * skipped.  Runs in the caller's transaction.
 */
int
dlock_reap_list(List *resources, int from, int to, TimestampTz now)
{
	int			reaped = 0;
	int			i;

	dlock_store_begin();
	for (i = from; i < to; i++)
	{
		DlockResource res;
		int64		fence;

		dlock_resource_init(&res, list_nth(resources, i));
		if (!dlock_resource_lock(&res, false))
			continue;
		fence = dlock_row_reap(&res, now);
		if (fence == 0)
		{
			dlock_resource_unlock(&res);
			continue;
		}
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
 * dlock_reap_batch: reap up to limit leases expired by now and purge old
 * free rows, in the caller's transaction; returns how many were reaped.
 */
int
dlock_reap_batch(TimestampTz now, int limit)
{
	List	   *resources = dlock_reap_candidates(now, limit);
	int			reaped = dlock_reap_list(resources, 0, list_length(resources), now);

	dlock_purge_free(now, limit - reaped);
	return reaped;
}

/*
 * dlock.reap(): remove leases expired now, emit their events; returns how
 * many (at most 1000 a call: call again while it returns 1000).
 */
Datum
dlock_reap(PG_FUNCTION_ARGS)
{
	dlock_check_writable("dlock.reap()");
	PG_RETURN_INT32(dlock_reap_batch(GetCurrentTimestamp(), DLOCK_REAP_PER_CALL));
}
