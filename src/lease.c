/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease functions: try_lock, lock, unlock, renew, unlock_all,
 *		break_lock, session_holder.  check and assert_fence: check.c.
 *
 * Every change follows one pattern: capture the caller (holding.c), take
 * the resource's lock (resource.c), read its row on the latest snapshot,
 * decide by the rules of holding.c, change the row, and keep the
 * resource's lock until the transaction ends; or, when nothing changes,
 * give the lock back at once.  Acquisition is acquire.c's.  Times come
 * from the server clock at the moment of the call (GetCurrentTimestamp,
 * i.e. clock_timestamp()), never from the transaction start.
 *
 * A holder's shared holdings (0.4, dlock.shares) and its holdings of a
 * semaphore's permits (0.5, dlock.permits, read with them; unlock returns
 * all of its permits at once) follow the same pattern: unlock and renew
 * turn to the caller's shared holding when it has no exclusive one
 * (find_share); unlock_all and break_lock cover them too.  When a look
 * without the lock (a hint) finds no exclusive holding of the caller's,
 * unlock and renew take the resource's lock in SHARE mode
 * and the holding's share-row tag instead (resource.c), so readers never
 * wait for each other's transactions; if the caller's exclusive holding is
 * there after all, they start again in the exclusive holding's mode.
 *
 * Backend-local: no shared state of its own.
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
PG_FUNCTION_INFO_V1(dlock_session_holder);

/*
 * dlock.try_lock(resource, holder, lease, fair, lock_delay, shared,
 * session); the 0.1 SQL passes only the first three, the 0.2 and 0.3 SQL
 * five, the 0.4 to 1.0 SQL six.
 */
Datum
dlock_try_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	Interval   *lease;
	bool		fair;
	Interval   *lock_delay;
	bool		shared;
	DlockCaller caller;
	int64		session;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_session_holder_arg(fcinfo, 1, 6, dlock_check_holder);
	lease = dlock_check_lease(fcinfo, 2);
	fair = dlock_check_fair(fcinfo, 3);
	lock_delay = dlock_check_lock_delay(fcinfo, 4);
	shared = dlock_check_shared(fcinfo, 5);
	lock_delay = dlock_lock_delay_of(fcinfo, 4, lock_delay, shared);
	dlock_check_writable("dlock.try_lock()");
	caller = dlock_caller();
	session = dlock_session_call(fcinfo, 6, 2, &caller, false, &holder, &lease);

	fence = dlock_acquire(&res, holder, &caller, lease, session, 0, fair,
						  lock_delay, shared);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/*
 * dlock.lock(resource, holder, lease, wait, fair, lock_delay, shared,
 * session); the 0.1 SQL passes only the first four, the 0.2 and 0.3 SQL
 * six, the 0.4 to 1.0 SQL seven.
 */
Datum
dlock_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	Interval   *lease;
	int64		wait_ms;
	bool		fair;
	Interval   *lock_delay;
	bool		shared;
	DlockCaller caller;
	int64		session;
	int64		fence;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_session_holder_arg(fcinfo, 1, 7, dlock_check_holder);
	lease = dlock_check_lease(fcinfo, 2);
	wait_ms = dlock_check_wait_ms(fcinfo, 3);
	fair = dlock_check_fair(fcinfo, 4);
	lock_delay = dlock_check_lock_delay(fcinfo, 5);
	shared = dlock_check_shared(fcinfo, 6);
	lock_delay = dlock_lock_delay_of(fcinfo, 5, lock_delay, shared);
	dlock_check_writable("dlock.lock()");
	caller = dlock_caller();
	session = dlock_session_call(fcinfo, 7, 2, &caller, wait_ms != 0, &holder, &lease);

	fence = dlock_acquire(&res, holder, &caller, lease, session, wait_ms, fair,
						  lock_delay, shared);
	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/*
 * release_row: release one level of a holding (all of it when all is set)
 * and, when it is gone, emit the event and arrange the wakeup.  Returns the
 * count left.  Inside a store session, under the resource's lock.
 */
static int32
release_row(const DlockResource *res, const DlockRow *row, TimestampTz now,
			bool all, const char *event)
{
	int32		left = all ? 0 : row->count - 1;

	dlock_row_release(res, left, now);
	if (left == 0)
	{
		dlock_client_ticket_release(res, cstring_to_text(row->holder), row->owner);
		dlock_notify(res, event, row->fence);
		dlock_wake_after_commit(res->hash);
	}
	return left;
}

/*
 * find_share: the caller's live shared holding of res (0.4), or NULL;
 * without own_only, 42501 for another role's of the same holder text
 * (dlock_may_change's rule; a superuser's to change).  *others: how many
 * live shared holdings others have.
 */
static DlockRow *
find_share(const DlockResource *res, text *holder, const DlockCaller *caller,
		   TimestampTz now, const char *action, bool own_only, int *others)
{
	List	   *shares = dlock_row_read_shares(res);
	DlockRow   *found = NULL;
	int			live = 0;
	ListCell   *lc;

	/* The caller's own first: another role's of the holder text may also be there. */
	foreach(lc, shares)
	{
		DlockRow   *sh = lfirst(lc);

		if (sh->expires_at <= now)
			continue;
		live++;
		if (found == NULL &&
			dlock_holding_verdict(sh, holder, caller, now) == HOLDING_MINE)
			found = sh;
	}
	if (found == NULL && !own_only)
	{
		foreach(lc, shares)
		{
			DlockRow   *sh = lfirst(lc);

			if (sh->expires_at > now &&
				dlock_may_change(sh, holder, caller, now, action))
			{
				found = sh;
				break;
			}
		}
	}
	*others = live - (found != NULL ? 1 : 0);
	return found;
}

/* What share_release did. */
typedef enum ShareReleased
{
	SHARE_NONE,					/* no such holding: nothing done */
	SHARE_RELEASED,
	SHARE_OTHER_ROLE			/* another role's, a superuser's to change,
								 * under another role's tag: nothing done */
} ShareReleased;

/*
 * share_release: release one level (all of it, with all) of the caller's
 * shared holding of res, under fence when fence_given.  With all
 * (unlock_all), only the caller's role's own holding: never another
 * role's, nor 42501 for it.  When it is gone:
 * its event, and the wakeup of a waiter on commit.  Every such release
 * wakes: a writer waits for the last reader, and two readers releasing
 * at once each still see the other's holding (its delete is not
 * committed), so neither could tell it was the last.  Inside a store
 * session, under the resource's lock: in SHARE mode with the share-row
 * tag of tag_owner's, which covers only that role's holding (else
 * SHARE_OTHER_ROLE, and *other is the holding's role); in a stronger mode
 * (tag_owner InvalidOid), which covers every holding.
 */
static ShareReleased
share_release(const DlockResource *res, text *holder, const DlockCaller *caller,
			  TimestampTz now, bool fence_given, int64 fence, bool all,
			  Oid tag_owner, int32 *left, Oid *other)
{
	int			others;
	DlockRow   *sh = find_share(res, holder, caller, now, "unlock", all, &others);

	if (sh == NULL || (fence_given && fence != sh->fence))
		return SHARE_NONE;
	if (OidIsValid(tag_owner) && sh->owner != tag_owner)
	{
		*other = sh->owner;
		return SHARE_OTHER_ROLE;
	}
	/* unlock returns all of a semaphore's permits at once (0.5) */
	*left = (all || sh->permits > 0) ? 0 : sh->count - 1;
	if (!dlock_share_change(res, sh, *left, NULL, now, 0))
		elog(ERROR, "dlock: the shared holding of \"%s\" changed meanwhile",
			 text_to_cstring(res->name));
	if (*left == 0)
	{
		dlock_client_ticket_release(res, holder, sh->owner);
		dlock_notify(res, "released", sh->fence);
		/* as if last: see above (a semaphore's wakes per permit freed) */
		dlock_wake_released(res->hash, sh, true);
	}
	return SHARE_RELEASED;
}

/*
 * holder_exclusive: is row a live exclusive holding of holder's (of any
 * role: another role's raises 42501, or is a superuser's to change)?
 */
static bool
holder_exclusive(const DlockRow *row, text *holder, const DlockCaller *caller,
				 TimestampTz now)
{
	DlockVerdict v = dlock_holding_verdict(row, holder, caller, now);

	return v == HOLDING_MINE || v == HOLDING_OTHER_ROLE;
}

/*
 * own_mode: the mode in which unlock or renew takes res's lock: SHARE when
 * a look without the lock (a hint) finds no live exclusive holding of
 * holder's, so a shared holding is what is changed; else exclusive_mode.
 * Whoever takes SHARE also takes the share-row tag (own_lock), and turns
 * to exclusive_mode if the look under the lock finds the hint was wrong.
 * The hint reads a session's row too: a holding of an ended session taken
 * as live would take CHANGE, which waits for another holder's pin.
 */
static DlockLockMode
own_mode(const DlockResource *res, text *holder, const DlockCaller *caller,
		 DlockLockMode exclusive_mode)
{
	DlockRow	row;
	bool		exclusive;

	dlock_store_begin();
	dlock_row_read(res, &row);
	exclusive = holder_exclusive(&row, holder, caller, GetCurrentTimestamp());
	dlock_store_end();
	return exclusive ? exclusive_mode : DLOCK_SHARE;
}

/*
 * own_lock: take res's lock in mode (waiting; CHANGE behind a pin polls,
 * dlock_change_wait), and in SHARE mode the share-row tag of holder and
 * owner in row_mode.  A superuser changing another role's shared holding
 * takes that role's tag (retag), so the other readers never wait for it.
 */
static void
own_lock(const DlockResource *res, text *holder, Oid owner, DlockLockMode mode,
		 DlockLockMode row_mode)
{
	if (mode == DLOCK_CHANGE)
		dlock_change_wait(res);
	else
		(void) dlock_resource_lock(res, mode, true);
	if (mode == DLOCK_SHARE &&
		!dlock_share_row_lock(res, holder, owner, row_mode, false))
	{
		/*
		 * Another transaction is changing (or pins) that holding: wait for
		 * it holding nothing of the resource, so that it may still take
		 * the resource's lock in a stronger mode (a break_lock after a
		 * renew) without a deadlock; then take the resource's lock again.
		 */
		dlock_resource_unlock(res, mode);
		(void) dlock_share_row_lock(res, holder, owner, row_mode, true);
		(void) dlock_resource_lock(res, mode, true);
	}
}

/* own_unlock: give back what own_lock took (nothing was changed). */
static void
own_unlock(const DlockResource *res, text *holder, Oid owner,
		   DlockLockMode mode, DlockLockMode row_mode)
{
	if (mode == DLOCK_SHARE)
		dlock_share_row_unlock(res, holder, owner, row_mode);
	dlock_resource_unlock(res, mode);
}

/*
 * retag: after a look in SHARE mode under tag_owner's tag found a holding
 * it does not cover: give that back, and take next the tag of the role
 * found (other), once; an exclusive holding, or a second miss, takes
 * exclusive_mode instead.  The caller reads again.
 */
static void
retag(const DlockResource *res, text *holder, const DlockCaller *caller,
	  DlockLockMode *mode, Oid *tag_owner, Oid other,
	  DlockLockMode exclusive_mode)
{
	dlock_store_end();
	own_unlock(res, holder, *tag_owner, *mode, exclusive_mode);
	if (OidIsValid(other) && *tag_owner == caller->role)
		*tag_owner = other;
	else
		*mode = exclusive_mode;
}

/* fence_arg: an optional fence argument; false if NULL. */
static bool
fence_arg(FunctionCallInfo fcinfo, int argno, int64 *fence)
{
	*fence = PG_ARGISNULL(argno) ? 0 : PG_GETARG_INT64(argno);
	return !PG_ARGISNULL(argno);
}

/* dlock.unlock(resource, holder, fence) */
Datum
dlock_unlock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	DlockCaller caller;
	TimestampTz now;
	DlockRow	row;
	int32		left;
	int64		fence;
	int64		fence_out;
	bool		fence_given;
	DlockLockMode mode;
	ShareReleased released;
	Oid			tag_owner;
	Oid			other = InvalidOid;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	fence_given = fence_arg(fcinfo, 2, &fence);
	dlock_check_writable("dlock.unlock()");
	caller = dlock_caller();

	mode = own_mode(&res, holder, &caller, DLOCK_CHANGE);
	tag_owner = caller.role;
again:
	own_lock(&res, holder, tag_owner, mode, DLOCK_CHANGE);
	now = GetCurrentTimestamp();
	dlock_store_begin();
	if (mode == DLOCK_SHARE)
	{
		/* No exclusive holding of the caller's, as the hint said? */
		dlock_row_read(&res, &row);
		other = InvalidOid;
		released = holder_exclusive(&row, holder, &caller, now) ? SHARE_OTHER_ROLE :
			share_release(&res, holder, &caller, now, fence_given, fence,
						  false, tag_owner, &left, &other);
		if (released == SHARE_OTHER_ROLE)
		{
			/* an exclusive holding, or another role's (a superuser's call) */
			retag(&res, holder, &caller, &mode, &tag_owner, other, DLOCK_CHANGE);
			goto again;
		}
		if (released == SHARE_NONE)
		{
			dlock_store_end();
			own_unlock(&res, holder, tag_owner, mode, DLOCK_CHANGE);
			PG_RETURN_NULL();
		}
	}
	/* The common case first: the caller's own holding, in one statement. */
	else if (dlock_row_fast_release(&res, holder, caller.role, now, fence_given,
									fence, &left, &fence_out))
	{
		if (left == 0)
		{
			dlock_client_ticket_release(&res, holder, caller.role);
			dlock_notify(&res, "released", fence_out);
			dlock_wake_after_commit(res.hash);
		}
	}
	else
	{
		/* Not held, another role's (42501, superusers aside), or a miss. */
		dlock_row_read(&res, &row);
		if (!dlock_may_change(&row, holder, &caller, now, "unlock") ||
			(fence_given && fence != row.fence))
		{
			/* Not an exclusive holding of the caller's: a shared one? */
			if (share_release(&res, holder, &caller, now, fence_given, fence,
							  false, InvalidOid, &left, &other) == SHARE_NONE)
			{
				dlock_store_end();
				dlock_resource_unlock(&res, DLOCK_CHANGE);
				PG_RETURN_NULL();
			}
		}
		else
		{
			/* Only a session's holding (kept alive since) misses the one-step release. */
			if (row.owner == caller.role && row.session == 0)
				elog(ERROR, "dlock: unlock of an own holding of \"%s\" changed nothing",
					 text_to_cstring(res.name));
			left = release_row(&res, &row, now, false, "released");
		}
	}
	dlock_store_end();
	if (left == 0)
	{
		dlock_note_release();
		dlock_count(DLOCK_STAT_RELEASED);
	}
	PG_RETURN_INT32(left);
}

/*
 * renew_session: renew of a holding in a session (1.1) keeps its session
 * alive, as keepalive does, and returns the session's new expiry (NULL if
 * it ended meanwhile); a lease given is 22023.  Inside the store session,
 * which it ends.
 */
static Datum
renew_session(FunctionCallInfo fcinfo, int64 session, const Interval *lease,
			  const DlockCaller *caller)
{
	Datum		expires;
	bool		isnull;

	if (lease != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a holding in a session has no lease of its own"),
				 errdetail("It lives as long as session " INT64_FORMAT ".", session),
				 errhint("Renew it without lease (or call dlock.keepalive()): that keeps its session alive.")));
	expires = dlock_session_keepalive(session, caller, &isnull);
	dlock_store_end();
	if (isnull)
	{
		dlock_count(DLOCK_STAT_LOST_RENEWALS);
		PG_RETURN_NULL();
	}
	PG_RETURN_DATUM(expires);
}

/*
 * dlock.renew(resource, holder, lease, fence): the resource's lock is taken
 * in RENEW mode (SHARE and the share-row tag in RENEW mode for a shared
 * holding, own_mode), so an assert_fence pin never makes the holder wait.
 */
Datum
dlock_renew(PG_FUNCTION_ARGS)
{
	DlockResource res;
	text	   *holder;
	Interval   *lease = NULL;
	DlockCaller caller;
	TimestampTz now;
	TimestampTz expires;
	DlockRow	row;
	int64		fence;
	bool		fence_given;
	DlockLockMode mode;
	Oid			tag_owner;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	holder = dlock_check_holder(fcinfo, 1);
	if (!PG_ARGISNULL(2))
		lease = dlock_check_lease(fcinfo, 2);
	fence_given = fence_arg(fcinfo, 3, &fence);
	dlock_check_writable("dlock.renew()");
	caller = dlock_caller();

	mode = own_mode(&res, holder, &caller, DLOCK_RENEW);
	tag_owner = caller.role;
again:
	own_lock(&res, holder, tag_owner, mode, DLOCK_RENEW);
	now = GetCurrentTimestamp();
	dlock_store_begin();
	dlock_row_read(&res, &row);
	if (mode == DLOCK_SHARE && holder_exclusive(&row, holder, &caller, now))
	{
		/* The caller's exclusive holding after all: renew it as such. */
		retag(&res, holder, &caller, &mode, &tag_owner, InvalidOid, DLOCK_RENEW);
		goto again;
	}
	if (!dlock_may_change(&row, holder, &caller, now, "renew") ||
		(fence_given && fence != row.fence))
	{
		int			others;
		DlockRow   *sh = find_share(&res, holder, &caller, now, "renew", false, &others);

		if (sh != NULL && mode == DLOCK_SHARE && sh->owner != tag_owner)
		{
			/* Another role's (a superuser's call): its tag is not ours. */
			retag(&res, holder, &caller, &mode, &tag_owner, sh->owner, DLOCK_RENEW);
			goto again;
		}
		if (sh != NULL && (!fence_given || fence == sh->fence))
		{
			/* The caller's shared holding (0.4); in a session (1.1). */
			if (sh->session != 0)
				return renew_session(fcinfo, sh->session, lease, &caller);
			if (lease == NULL)
			{
				lease = palloc(sizeof(Interval));
				*lease = sh->lease;
			}
			expires = dlock_lease_expiry(now, lease);
			if (!dlock_share_change(&res, sh, sh->count, lease, now, expires))
				elog(ERROR, "dlock: the shared holding of \"%s\" changed meanwhile",
					 text_to_cstring(res.name));
			dlock_store_end();
			dlock_note_acquisition(expires);
			dlock_count(DLOCK_STAT_RENEWED);
			PG_RETURN_TIMESTAMPTZ(expires);
		}
		dlock_store_end();
		own_unlock(&res, holder, tag_owner, mode, DLOCK_RENEW);
		dlock_count(DLOCK_STAT_LOST_RENEWALS);
		PG_RETURN_NULL();
	}
	if (row.session != 0)
		return renew_session(fcinfo, row.session, lease, &caller);
	if (lease == NULL)
	{
		lease = palloc(sizeof(Interval));
		*lease = row.lease;
	}
	expires = dlock_lease_expiry(now, lease);
	dlock_row_renew(&res, lease, now, expires);
	dlock_store_end();
	dlock_note_acquisition(expires);
	dlock_count(DLOCK_STAT_RENEWED);
	PG_RETURN_TIMESTAMPTZ(expires);
}

/*
 * unlock_all_shares: release every live shared holding (0.4) and holding
 * of a semaphore's permits (0.5) of holder taken by the caller's role; how
 * many.  Inside a store session.
 */
static int32
unlock_all_shares(text *holder, const DlockCaller *caller)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_permits = NULL;
	static const Oid types[2] = {TEXTOID, REGROLEOID};
	Datum		values[2];
	List	   *resources = NIL;
	ListCell   *lc;
	int32		released = 0;
	bool		permits;

	if (!dlock_shares_installed())
		return 0;
	permits = dlock_semaphores_installed();
	values[0] = PointerGetDatum(holder);
	values[1] = ObjectIdGetDatum(caller->role);
	if (dlock_store_exec(permits ? &plan_permits : &plan,
						 permits ?
						 "SELECT s.resource FROM dlock.shares s"
						 "  WHERE s.holder OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
						 "    AND s.owner OPERATOR(pg_catalog.=) $2"
						 " UNION SELECT p.resource FROM dlock.permits p"
						 "  WHERE p.holder OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
						 "    AND p.owner OPERATOR(pg_catalog.=) $2" :
						 "SELECT s.resource FROM dlock.shares s"
						 "  WHERE s.holder OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"
						 "    AND s.owner OPERATOR(pg_catalog.=) $2",
						 2, types, values, NULL, true) > 0)
	{
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			bool		isnull;

			resources = lappend(resources,
								dlock_store_copy_text(SPI_getbinval(SPI_tuptable->vals[i],
																	SPI_tuptable->tupdesc,
																	1, &isnull)));
		}
	}
	foreach(lc, resources)
	{
		DlockResource res;
		int32		left;
		Oid			other;

		dlock_resource_init(&res, cstring_to_text(lfirst(lc)));
		/* as unlock of a shared holding: other holders never wait for it */
		own_lock(&res, holder, caller->role, DLOCK_SHARE, DLOCK_CHANGE);
		if (share_release(&res, holder, caller, GetCurrentTimestamp(), false, 0,
						  true, caller->role, &left, &other) == SHARE_RELEASED)
		{
			dlock_count(DLOCK_STAT_RELEASED);
			released++;
		}
		else
			own_unlock(&res, holder, caller->role, DLOCK_SHARE, DLOCK_CHANGE);
	}
	return released;
}

/*
 * dlock.unlock_all(holder): release every unexpired holding of this holder
 * taken by the caller's role, whatever its count.
 */
Datum
dlock_unlock_all(PG_FUNCTION_ARGS)
{
	text	   *holder;
	DlockCaller caller;
	List	   *resources;
	ListCell   *lc;
	int32		released = 0;

	holder = dlock_check_holder(fcinfo, 0);
	dlock_check_writable("dlock.unlock_all()");
	caller = dlock_caller();

	dlock_store_begin();
	resources = dlock_rows_of_holder(holder, caller.role);
	foreach(lc, resources)
	{
		DlockResource res;
		DlockRow	row;
		TimestampTz now;

		dlock_resource_init(&res, lfirst(lc));
		dlock_change_wait(&res);
		now = GetCurrentTimestamp();
		dlock_row_read(&res, &row);
		if (dlock_holding_verdict(&row, holder, &caller, now) == HOLDING_MINE)
		{
			release_row(&res, &row, now, true, "released");
			dlock_count(DLOCK_STAT_RELEASED);
			released++;
		}
		else
			dlock_resource_unlock(&res, DLOCK_CHANGE);
	}
	released += unlock_all_shares(holder, &caller);
	dlock_store_end();
	if (released > 0)
		dlock_note_release();
	PG_RETURN_INT32(released);
}

/*
 * break_shares: end every live shared holding of res (0.4), each with its
 * "broken" event; how many.  Under the resource's lock, in a store session.
 */
static int
break_shares(const DlockResource *res, TimestampTz now)
{
	ListCell   *lc;
	int			broken = 0;

	foreach(lc, dlock_row_read_shares(res))
	{
		DlockRow   *sh = lfirst(lc);

		if (sh->expires_at <= now)
			continue;
		if (!dlock_share_change(res, sh, 0, NULL, now, 0))
			elog(ERROR, "dlock: the shared holding of \"%s\" changed meanwhile",
				 text_to_cstring(res->name));
		dlock_notify(res, "broken", sh->fence);
		dlock_wake_released(res->hash, sh, false);
		dlock_count(DLOCK_STAT_BROKEN);
		broken++;
	}
	return broken;
}

/*
 * dlock.break_lock(resource): end the current holding whoever holds it
 * (with shared locks, 0.4: every current holding).  EXECUTE is revoked
 * from PUBLIC; true if there was an unexpired holding.
 */
Datum
dlock_break_lock(PG_FUNCTION_ARGS)
{
	DlockResource res;
	DlockRow	row;
	TimestampTz now;
	int			shares;

	dlock_resource_init(&res, dlock_check_resource(fcinfo, 0));
	dlock_check_writable("dlock.break_lock()");

	dlock_change_wait(&res);
	now = GetCurrentTimestamp();
	dlock_store_begin();
	shares = break_shares(&res, now);
	dlock_row_read(&res, &row);
	if (dlock_lease_ended(&row, now))
	{
		dlock_store_end();
		if (shares == 0)
		{
			dlock_resource_unlock(&res, DLOCK_CHANGE);
			PG_RETURN_BOOL(false);
		}
		dlock_wake_after_commit(res.hash);
		PG_RETURN_BOOL(true);
	}
	if (dlock_queue_installed())
		dlock_delay_on_end(&res, now, DT_NOEND);
	release_row(&res, &row, now, true, "broken");
	dlock_store_end();
	dlock_count(DLOCK_STAT_BROKEN);
	PG_RETURN_BOOL(true);
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
