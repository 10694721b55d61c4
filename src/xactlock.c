/*-------------------------------------------------------------------------
 *
 * xactlock.c
 *		Transaction-scoped locks: xact_lock and try_xact_lock.
 *
 * The SELECT ... FOR UPDATE design, without the row: the resource's lock
 * (resource.c) held until the transaction ends is the lock, so nothing is
 * written and nothing is left behind.  It excludes lease holders because
 * every lease change takes the same lock, and a live lease excludes it
 * because the row is checked under that lock.  The fence is drawn after the
 * lock is taken, like any other, and remembered for check()/assert_fence().
 * The wait loop is acquire.c's.  Backend-local (xact.c keeps the fences).
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(dlock_xact_lock);
PG_FUNCTION_INFO_V1(dlock_try_xact_lock);

/*
 * xact_attempt: one attempt at a transaction-scoped lock: re-entry keeps
 * the fence; a free or expired resource is taken with a new fence, the
 * resource's lock (CHANGE) kept to the end of the transaction; a live
 * lease, even one of this session's, makes it busy until it ends.
 */
static DlockAttempt
xact_attempt(const DlockResource *res, void *arg, int64 *fence,
			 TimestampTz *busy_until)
{
	DlockRow	row;
	DlockQueueHead head;
	TimestampTz now;
	bool		queued;

	if ((*fence = dlock_xact_fence(res)) != 0)
		return ATTEMPT_ACQUIRED;
	if (!dlock_take_resource(res))
		return ATTEMPT_CONTENDED;
	now = GetCurrentTimestamp();
	dlock_store_begin();
	queued = dlock_queue_installed();
	dlock_row_read(res, &row);
	if (queued)
		dlock_delay_read(res, &row);
	if (!dlock_lease_available(&row, now))
	{
		dlock_store_end();
		dlock_resource_unlock(res, DLOCK_CHANGE);
		if (dlock_lease_ended(&row, now))
		{
			*busy_until = row.available_at;
			return ATTEMPT_DELAYED;
		}
		*busy_until = Max(row.expires_at, row.available_at);
		return ATTEMPT_BUSY;
	}
	if (queued)
	{
		/* A transaction-scoped lock never queues, nor jumps a queue. */
		dlock_queue_head(res, NULL, InvalidOid, 0, now, &head);
		if (head.exists)
		{
			dlock_store_end();
			dlock_resource_unlock(res, DLOCK_CHANGE);
			*busy_until = head.expires_at;
			return ATTEMPT_BUSY;
		}
	}
	if (row.held)
		dlock_count(DLOCK_STAT_EXPIRED);	/* takes over an expired lease */
	*fence = dlock_next_fence();
	dlock_store_end();
	dlock_xact_register(res, *fence);
	dlock_count(DLOCK_STAT_ACQUIRED);
	return ATTEMPT_ACQUIRED;
}

/* dlock.xact_lock(resource, wait): fence, NULL on timeout. */
Datum
dlock_xact_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	int64		wait_ms;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	wait_ms = dlock_check_wait_ms(fcinfo, 1);
	dlock_check_writable("dlock.xact_lock()");

	fence = dlock_wait_loop(&res, NULL, wait_ms, xact_attempt, NULL, NULL);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/* dlock.try_xact_lock(resource): fence, or NULL at once. */
Datum
dlock_try_xact_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	dlock_check_writable("dlock.try_xact_lock()");

	fence = dlock_wait_loop(&res, NULL, 0, xact_attempt, NULL, NULL);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}
