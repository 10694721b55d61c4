/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease functions: try_lock, lock, unlock, renew, unlock_all,
 *		break_lock, check, assert_fence, session_holder.
 *
 * Every change follows one pattern: take the resource's lock (resource.c),
 * read its row on the latest snapshot, decide, change the row, and keep the
 * resource's lock until the transaction ends; or, when nothing changes,
 * give the lock back at once.  Times come from the server clock at the
 * moment of the call (GetCurrentTimestamp, i.e. clock_timestamp()), never
 * from the transaction start.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

PG_FUNCTION_INFO_V1(dlock_try_lock);
PG_FUNCTION_INFO_V1(dlock_lock);
PG_FUNCTION_INFO_V1(dlock_unlock);
PG_FUNCTION_INFO_V1(dlock_renew);
PG_FUNCTION_INFO_V1(dlock_unlock_all);
PG_FUNCTION_INFO_V1(dlock_break_lock);
PG_FUNCTION_INFO_V1(dlock_check);
PG_FUNCTION_INFO_V1(dlock_assert_fence);
PG_FUNCTION_INFO_V1(dlock_session_holder);

/* Longest back-off while another transaction has the resource's lock. */
#define MAX_BACKOFF_MS 100

/* holder_matches: does the row name this holder text? */
static bool
holder_matches(const DlockRow *row, text *holder)
{
	return row->held &&
		strlen(row->holder) == VARSIZE_ANY_EXHDR(holder) &&
		memcmp(row->holder, VARDATA_ANY(holder), VARSIZE_ANY_EXHDR(holder)) == 0;
}

/*
 * check_lock_timeout: lock_timeout bounds a wait in lock() like any lock
 * wait in PostgreSQL, with the same error.
 */
static void
check_lock_timeout(TimestampTz now, TimestampTz limit)
{
	if (now >= limit)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("canceling statement due to lock timeout")));
}

/* ms_until: milliseconds from now to then, at least 0, rounded up. */
static long
ms_until(TimestampTz now, TimestampTz then)
{
	if (then <= now)
		return 0;
	if (then - now > (TimestampTz) 3600 * 1000 * 1000)
		return 3600 * 1000;
	return (long) ((then - now + 999) / 1000);
}

/*
 * dlock_acquire: the acquisition loop of try_lock, lock, xact_lock and
 * try_xact_lock.  wait_ms: 0 one try, -1 no limit, else the limit.  Returns
 * the fence, or 0 if not acquired (fences are never 0).
 *
 * A lease acquisition re-enters a holding of the same holder and role.  A
 * transaction-scoped one writes nothing: holding the resource's lock until
 * the transaction ends is the lock; its fence is remembered in xact.c.
 */
int64
dlock_acquire(const DlockResource *res, text *holder, const Interval *lease,
			  int64 wait_ms, bool transaction_scoped)
{
	Oid			role = GetUserId();
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz deadline = wait_ms < 0 ? DT_NOEND : start + wait_ms * 1000;
	TimestampTz lock_limit = (LockTimeout > 0 && wait_ms != 0) ?
		start + (TimestampTz) LockTimeout * 1000 : DT_NOEND;
	long		backoff_ms = 1;
	bool		waiting = false;
	int64		fence = 0;

	for (;;)
	{
		TimestampTz now;
		TimestampTz wake_at = deadline;
		DlockRow	row;

		if (!dlock_resource_lock(res, false))
		{
			/* Another transaction is changing it, or changed it uncommitted. */
			if (wait_ms == 0)
				break;
			if (wait_ms < 0)
				(void) dlock_resource_lock(res, true);	/* lock-manager wait */
			else
			{
				now = GetCurrentTimestamp();
				if (now >= deadline)
					break;
				check_lock_timeout(now, lock_limit);
				if (!waiting)
				{
					dlock_wait_begin(res, holder, deadline);
					waiting = true;
				}
				dlock_wait_sleep(Min(backoff_ms, ms_until(now, Min(deadline, lock_limit))));
				backoff_ms = Min(backoff_ms * 2, MAX_BACKOFF_MS);
				continue;
			}
		}

		now = GetCurrentTimestamp();
		dlock_store_begin();

		/* The common case first: free, expired or our own, in one statement. */
		if (!transaction_scoped && dlock_xact_fence(res) == 0)
		{
			int32		count;
			TimestampTz expires;
			bool		took_over;

			if (dlock_row_fast_acquire(res, holder, role, lease, now,
									   dlock_add_interval(now, lease),
									   &fence, &count, &expires, &took_over))
			{
				dlock_note_acquisition(expires);
				if (took_over)
					dlock_count(DLOCK_STAT_EXPIRED);
				if (count == 1)
				{
					dlock_wake_after_abort(res->hash);
					dlock_count(DLOCK_STAT_ACQUIRED);
				}
				else
					dlock_count(DLOCK_STAT_REENTERED);
				dlock_store_end();
				break;
			}
		}

		/*
		 * Otherwise the row decides: a lease is inserted for a resource never
		 * seen; a transaction-scoped lock takes a free or expired resource
		 * (writing nothing) or re-enters its own.  Anything else is busy,
		 * including a lease on a resource of our own transaction-scoped lock.
		 */
		dlock_row_read(res, &row);
		if (transaction_scoped && (fence = dlock_xact_fence(res)) != 0)
		{
			/* Already ours in this transaction: re-entry keeps the fence. */
			dlock_store_end();
			dlock_resource_unlock(res);
			break;
		}
		if (transaction_scoped && (!row.held || row.expires_at <= now))
		{
			if (row.held)
				dlock_count(DLOCK_STAT_EXPIRED);
			fence = dlock_next_fence();
			dlock_xact_register(res, fence);
			dlock_count(DLOCK_STAT_ACQUIRED);
			dlock_store_end();
			break;
		}
		if (!transaction_scoped && !row.exists && dlock_xact_fence(res) == 0)
		{
			TimestampTz expires = dlock_add_interval(now, lease);

			fence = dlock_next_fence();
			dlock_row_insert(res, holder, role, fence, lease, now, expires);
			dlock_note_acquisition(expires);
			dlock_wake_after_abort(res->hash);
			dlock_count(DLOCK_STAT_ACQUIRED);
			dlock_store_end();
			break;
		}
		if (row.held)
			wake_at = Min(row.expires_at, deadline);

		/* Busy: give the resource's lock back and wait, or give up. */
		dlock_store_end();
		dlock_resource_unlock(res);
		if (wait_ms == 0 || now >= deadline)
			break;
		check_lock_timeout(now, lock_limit);
		if (!waiting)
		{
			/* Register, then look again: a release may have just passed. */
			dlock_wait_begin(res, holder, deadline);
			waiting = true;
			continue;
		}
		backoff_ms = 1;
		dlock_wait_sleep(ms_until(now, Min(wake_at, lock_limit)));
	}

	if (waiting)
	{
		dlock_wait_end(fence != 0);
		if (fence == 0)
			dlock_count(DLOCK_STAT_TIMEOUTS);
	}
	return fence;
}

/* dlock.try_lock(resource, holder, lease) */
Datum
dlock_try_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	Interval   *lease;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	lease = dlock_check_lease(fcinfo, 2);
	dlock_check_writable("dlock.try_lock()");

	fence = dlock_acquire(&res, holder, lease, 0, false);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/* dlock.lock(resource, holder, lease, wait) */
Datum
dlock_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	Interval   *lease;
	int64		wait_ms;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	lease = dlock_check_lease(fcinfo, 2);
	wait_ms = dlock_check_wait_ms(fcinfo, 3);
	dlock_check_writable("dlock.lock()");

	fence = dlock_acquire(&res, holder, lease, wait_ms, false);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/*
 * check_role: a holding of another role may be changed only by a
 * superuser; anyone else gets 42501 and nothing changes.
 */
static void
check_role(const DlockRow *row, Oid role, bool is_super, const char *action)
{
	if (row->owner != role && !is_super)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to %s a lock held by role \"%s\"",
						action, GetUserNameFromId(row->owner, true) ?
						GetUserNameFromId(row->owner, true) : "(dropped)"),
				 errdetail("Only the role that took a lock, or a superuser, can %s it.",
						   action)));
}

/*
 * release_row: release one level of a holding (all of it when all is set)
 * and, when it is gone, emit the event and arrange the wakeup.  Returns the
 * count left.
 */
static int32
release_row(const DlockResource *res, const DlockRow *row, TimestampTz now,
			bool all, const char *event)
{
	int32		left = all ? 0 : row->count - 1;

	dlock_row_release(res, left, now);
	if (left == 0)
	{
		dlock_notify(res, event, row->fence);
		dlock_wake_after_commit(res->hash);
	}
	return left;
}

/*
 * open_holding: for unlock and renew.  Takes the resource's lock, opens a
 * store session and reads the row into *row.  Returns true, with both left
 * open, if holder holds it unexpired (under fence, when fence_given);
 * raises 42501 if that holding is another role's (superusers aside);
 * otherwise closes both and returns false.
 */
static bool
open_holding(const DlockResource *res, text *holder, bool fence_given,
			 int64 fence, const char *action, TimestampTz *now, DlockRow *row)
{
	Oid			role = GetUserId();
	bool		is_super = superuser();

	(void) dlock_resource_lock(res, true);
	*now = GetCurrentTimestamp();
	dlock_store_begin();
	dlock_row_read(res, row);
	if (holder_matches(row, holder) && row->expires_at > *now)
	{
		check_role(row, role, is_super, action);
		if (!fence_given || fence == row->fence)
			return true;
	}
	dlock_store_end();
	dlock_resource_unlock(res);
	return false;
}

/* dlock.unlock(resource, holder, fence) */
Datum
dlock_unlock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	TimestampTz now;
	DlockRow	row;
	int32		left;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	dlock_check_writable("dlock.unlock()");

	/* The common case first: our own holding, in one statement. */
	(void) dlock_resource_lock(&res, true);
	now = GetCurrentTimestamp();
	dlock_store_begin();
	if (dlock_row_fast_release(&res, holder, GetUserId(), now, !PG_ARGISNULL(2),
							   PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2),
							   &left, &fence))
	{
		if (left == 0)
		{
			dlock_notify(&res, "released", fence);
			dlock_wake_after_commit(res.hash);
		}
		dlock_store_end();
		goto released;
	}
	dlock_store_end();
	dlock_resource_unlock(&res);

	/* Otherwise: not held, another role's (42501), or a superuser's call. */
	if (!open_holding(&res, holder, !PG_ARGISNULL(2),
					  PG_ARGISNULL(2) ? 0 : PG_GETARG_INT64(2), "unlock", &now, &row))
		PG_RETURN_NULL();
	left = release_row(&res, &row, now, false, "released");
	dlock_store_end();

released:
	if (left == 0)
	{
		dlock_note_release();
		dlock_count(DLOCK_STAT_RELEASED);
	}
	PG_RETURN_INT32(left);
}

/* dlock.renew(resource, holder, lease, fence) */
Datum
dlock_renew(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	Interval   *lease = NULL;
	TimestampTz now;
	TimestampTz expires;
	DlockRow	row;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	if (!PG_ARGISNULL(2))
		lease = dlock_check_lease(fcinfo, 2);
	dlock_check_writable("dlock.renew()");

	if (!open_holding(&res, holder, !PG_ARGISNULL(3),
					  PG_ARGISNULL(3) ? 0 : PG_GETARG_INT64(3), "renew", &now, &row))
	{
		dlock_count(DLOCK_STAT_LOST_RENEWALS);
		PG_RETURN_NULL();
	}
	if (lease == NULL)
	{
		lease = palloc(sizeof(Interval));
		*lease = row.lease;
	}
	expires = dlock_add_interval(now, lease);
	dlock_row_renew(&res, lease, now, expires);
	dlock_store_end();
	dlock_note_acquisition(expires);
	dlock_count(DLOCK_STAT_RENEWED);
	PG_RETURN_TIMESTAMPTZ(expires);
}

/*
 * dlock.unlock_all(holder): release every unexpired holding of this holder
 * taken by the caller's role, whatever its count.
 */
Datum
dlock_unlock_all(PG_FUNCTION_ARGS)
{
	text	   *holder;
	Oid			role = GetUserId();
	List	   *resources;
	ListCell   *lc;
	int32		released = 0;

	holder = dlock_check_holder(fcinfo, 0);
	dlock_check_writable("dlock.unlock_all()");

	dlock_store_begin();
	resources = dlock_rows_of_holder(holder, role);
	foreach(lc, resources)
	{
		DlockResource res;
		DlockRow	row;
		TimestampTz now;

		dlock_resource_init(&res, lfirst(lc));
		(void) dlock_resource_lock(&res, true);
		now = GetCurrentTimestamp();
		dlock_row_read(&res, &row);
		if (holder_matches(&row, holder) && row.owner == role &&
			row.expires_at > now)
		{
			release_row(&res, &row, now, true, "released");
			dlock_count(DLOCK_STAT_RELEASED);
			released++;
		}
		else
			dlock_resource_unlock(&res);
	}
	dlock_store_end();
	if (released > 0)
		dlock_note_release();
	PG_RETURN_INT32(released);
}

/*
 * dlock.break_lock(resource): end the current holding whoever holds it.
 * EXECUTE is revoked from PUBLIC; true if there was an unexpired holding.
 */
Datum
dlock_break_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	DlockRow	row;
	TimestampTz now;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	dlock_check_writable("dlock.break_lock()");

	(void) dlock_resource_lock(&res, true);
	now = GetCurrentTimestamp();
	dlock_store_begin();
	dlock_row_read(&res, &row);
	if (!row.held || row.expires_at <= now)
	{
		dlock_store_end();
		dlock_resource_unlock(&res);
		PG_RETURN_BOOL(false);
	}
	release_row(&res, &row, now, true, "broken");
	dlock_store_end();
	dlock_count(DLOCK_STAT_BROKEN);
	PG_RETURN_BOOL(true);
}

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
 * lease, or a transaction-scoped lock of this transaction)?
 */
static bool
fence_is_current(const DlockResource *res, int64 fence)
{
	DlockRow	row;
	TimestampTz now = GetCurrentTimestamp();
	int64		own = dlock_xact_fence(res);

	if (own != 0)
		return own == fence;
	dlock_store_begin();
	dlock_row_read(res, &row);
	dlock_store_end();
	return row.held && row.fence == fence && row.expires_at > now;
}

/* dlock.check(resource, fence): Chubby's CheckSequencer. */
Datum
dlock_check(PG_FUNCTION_ARGS)
{
	DlockResource res;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	fence = check_fence_arg(fcinfo, 1);
	PG_RETURN_BOOL(fence_is_current(&res, fence));
}

/*
 * dlock.assert_fence(resource, fence): raise 55P03 unless fence is current;
 * on success keep the resource's lock until this transaction ends, so no
 * one can take over, expire, renew away or release the holding meanwhile
 * and a write fenced in this transaction is atomic with the check.
 */
Datum
dlock_assert_fence(PG_FUNCTION_ARGS)
{
	DlockResource res;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	fence = check_fence_arg(fcinfo, 1);

	(void) dlock_resource_lock(&res, true);
	if (!fence_is_current(&res, fence))
	{
		dlock_resource_unlock(&res);
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("fence " INT64_FORMAT " is not the current holding of resource \"%s\"",
						fence, text_to_cstring(res.name)),
				 errdetail("The lease expired, was released or broken, or was taken over by a newer holder.")));
	}
	PG_RETURN_VOID();
}

/*
 * dlock.session_holder(): "pid:<pid>:<backend start, microseconds>", unique
 * to this backend over the server's lifetime.
 */
Datum
dlock_session_holder(PG_FUNCTION_ARGS)
{
	char		buf[64];

	snprintf(buf, sizeof(buf), "pid:%d:" INT64_FORMAT, MyProcPid,
			 (int64) MyStartTimestamp);
	PG_RETURN_TEXT_P(cstring_to_text(buf));
}
