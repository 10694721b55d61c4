/*-------------------------------------------------------------------------
 *
 * check.c
 *		check and assert_fence: is a fence the current holding of a
 *		resource (a lease, a shared holding, a holding of permits, or a
 *		transaction-scoped lock of this transaction)?  assert_fence also
 *		pins the holding until the caller's transaction ends.
 *
 * Backend-local: no shared state of its own (pins are resource.c's).
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(dlock_check);
PG_FUNCTION_INFO_V1(dlock_assert_fence);

/* check_fence_arg: the fence argument of check and assert_fence. */
static int64
check_fence_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fence must not be null")));
	return PG_GETARG_INT64(argno);
}

/*
 * fence_is_current: is fence the current, unexpired holding of res (a
 * lease, or a transaction-scoped lock of this transaction)?  The row read
 * goes to *row (exists = false for a transaction-scoped lock); *shared
 * says whether it is a shared holding.
 */
static bool
fence_is_current(const DlockResource *res, int64 fence, DlockRow *row,
				 bool *shared)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		own = dlock_resource_xact_fence(res);

	memset(row, 0, sizeof(*row));
	*shared = false;
	if (own != 0)
		return own == fence;
	dlock_store_begin();
	dlock_row_read(res, row);
	if (dlock_lease_ended(row, now) || row->fence != fence)
	{
		/* Any current shared holding's fence (0.4) is current too. */
		ListCell   *lc;

		foreach(lc, dlock_row_read_shares(res))
		{
			DlockRow   *sh = lfirst(lc);

			if (sh->fence == fence && sh->expires_at > now)
			{
				*row = *sh;
				*shared = true;
				dlock_store_end();
				return true;
			}
		}
		dlock_store_end();
		return false;
	}
	dlock_store_end();
	return true;
}

/* dlock.check(resource, fence): Chubby's CheckSequencer. */
Datum
dlock_check(PG_FUNCTION_ARGS)
{
	DlockResource res;
	DlockRow	row;
	int64		fence;
	bool		shared;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	fence = check_fence_arg(fcinfo, 1);
	PG_RETURN_BOOL(fence_is_current(&res, fence, &row, &shared));
}

/* not_current: assert_fence's refusal (55P03). */
static void
not_current(const DlockResource *res, int64 fence)
{
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("fence " INT64_FORMAT " is not the current holding of resource \"%s\"",
					fence, text_to_cstring(res->name)),
			 errdetail("The lease expired, was released or broken, or was taken over by a newer holder.")));
}

/*
 * dlock.assert_fence(resource, fence): raise 55P03 unless fence is current;
 * on success pin the holding (the resource's lock in PIN mode) until this
 * transaction ends, so no one can take it over, expire, break or release it
 * meanwhile and a write fenced in this transaction is atomic with the
 * check.  The holder's renew does not conflict with a pin.  Only roles with
 * the privileges of the holding's role may pin it (holding.c).  A shared
 * holding, which its holder releases in SHARE mode (resource.c), is pinned
 * by its share-row tag too, then looked at again: a release in flight was
 * not visible to the first look.  An exclusive one is marked for readers
 * (dlock_pin_exclusive), then looked at again: still live after the mark.
 */
Datum
dlock_assert_fence(PG_FUNCTION_ARGS)
{
	DlockResource res;
	DlockCaller caller;
	DlockRow	row;
	int64		fence;
	bool		shared;
	bool		current;
	bool		xpinned = false;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	fence = check_fence_arg(fcinfo, 1);
	caller = dlock_caller();

	/*
	 * A first look, pinning nothing: a fence that is not current (it never
	 * is again), or a holding this role may not pin, takes no lock, as a
	 * pin would hold off reapers, takeovers and readers meanwhile.
	 */
	if (!fence_is_current(&res, fence, &row, &shared))
		not_current(&res, fence);
	if (row.exists)
		dlock_check_may_pin(&row, &caller);

	dlock_pin(&res);
	current = fence_is_current(&res, fence, &row, &shared);
	if (current && shared)
	{
		(void) dlock_share_row_lock(&res, cstring_to_text(row.holder),
									row.owner, DLOCK_PIN, true);
		current = fence_is_current(&res, fence, &row, &shared);
	}
	else if (current)
	{
		dlock_pin_exclusive(&res);
		xpinned = true;
		current = fence_is_current(&res, fence, &row, &shared);
	}
	if (!current)
	{
		if (xpinned)
			dlock_unpin_exclusive(&res);
		dlock_unpin(&res);
		not_current(&res, fence);
	}
	if (row.exists)
		dlock_check_may_pin(&row, &caller);
	PG_RETURN_VOID();
}
