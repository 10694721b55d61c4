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
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(dlock_xact_lock);
PG_FUNCTION_INFO_V1(dlock_try_xact_lock);

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

	fence = dlock_acquire(&res, NULL, NULL, wait_ms, true);
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

	fence = dlock_acquire(&res, NULL, NULL, 0, true);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}
