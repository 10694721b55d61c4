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
 * Whether it may be taken now is admit.c's decision (DLOCK_KIND_XACT); the
 * wait loop is acquire.c's.  Backend-local (xact.c keeps the fences).
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(dlock_xact_lock);
PG_FUNCTION_INFO_V1(dlock_try_xact_lock);

/*
 * xact_attempt: one attempt at a transaction-scoped lock: re-entry keeps
 * the fence; else admit.c decides (a free or expired resource nobody
 * queues for is taken with a new fence, the resource's lock (CHANGE) kept
 * to the end of the transaction; a live lease, even one of this
 * session's, makes it busy until it ends).
 */
static DlockAttempt
xact_attempt(const DlockResource *res, void *arg, int64 *fence,
			 TimestampTz *busy_until)
{
	DlockRequest req = {DLOCK_KIND_XACT, NULL, NULL, false, false, 0, false};
	DlockResourceState st;
	DlockAdmission v;

	if ((*fence = dlock_resource_xact_fence(res)) != 0)
		return ATTEMPT_ACQUIRED;
	if (!dlock_take_resource(res, DLOCK_CHANGE))
		return ATTEMPT_CONTENDED;
	dlock_store_begin();
	v = dlock_admit(res, &req, true, &st);
	if (!v.admit)
	{
		dlock_store_end();
		dlock_resource_unlock(res, DLOCK_CHANGE);
		dlock_admit_raise(res, &req, &st, v);
		*busy_until = v.retry_at;
		return dlock_attempt_refused(v.reason);
	}
	if (st.row.held)
		dlock_count(DLOCK_STAT_EXPIRED);	/* takes over an expired lease */
	*fence = dlock_next_fence();
	dlock_store_end();
	dlock_resource_xact_register(res, *fence);
	dlock_note_xact_lock();
	dlock_wake_after_commit(res->hash);
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
