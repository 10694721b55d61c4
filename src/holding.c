/*-------------------------------------------------------------------------
 *
 * holding.c
 *		The rules of a holding, in one place: who the caller is, when a
 *		lease is free, who may change a holding, and who may pin one.
 *
 *	- The caller is captured once, at the entry of each SQL function,
 *	  before any store session switches to the table owner (store.c): a
 *	  role read after that switch is the owner's, not the caller's.
 *	- A holding has ended when there is no row, no holder, or its expiry is
 *	  at or before now (lazy expiry: nobody has to reap it first).
 *	- A resource is available to a new holder when its holding has ended
 *	  and the lock-delay of an unclean end is over (row->available_at,
 *	  rows.c reads it); and, while its fair queue has a live ticket, only to
 *	  the ticket at the head of the queue (queue.c finds the head, admit.c
 *	  decides with it).  Re-entry by the holder never queues.
 *	- A holding is the caller's when the holder text and the role that took
 *	  it are both the caller's and it has not expired.  The same holder text
 *	  presented by another role is another holder; unlock and renew of it
 *	  raise 42501 (superusers aside) and change nothing.
 *	- Pinning a holding with assert_fence (so that nobody can take it over,
 *	  expire or release it until the pinning transaction ends) needs the
 *	  privileges of the role that took it, or superuser: otherwise any role
 *	  reading a fence from dlock.locks could freeze another role's lock.
 *
 * admit.c builds each admission verdict from these rules; rows.c's
 * one-step release restates "the caller's" (is_mine) and must say the same.
 *
 * No shared state: everything here is per call.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "miscadmin.h"
#include "utils/acl.h"

/* dlock_caller: who is calling, read before any identity switch. */
DlockCaller
dlock_caller(void)
{
	DlockCaller caller;

	if (dlock_store_active())
		elog(ERROR, "dlock: caller identity read inside a store session");
	caller.role = GetUserId();
	caller.is_super = superuser_arg(caller.role);
	return caller;
}

/* dlock_lease_ended: has the holding ended by now (no holder, or expired)? */
bool
dlock_lease_ended(const DlockRow *row, TimestampTz now)
{
	return !row->exists || !row->held || row->expires_at <= now;
}

/*
 * dlock_lease_available: may a new holder take the resource at now, queues
 * aside: the holding ended and its lock-delay is over.
 */
bool
dlock_lease_available(const DlockRow *row, TimestampTz now)
{
	return dlock_lease_ended(row, now) &&
		(!row->exists || now >= row->available_at);
}

/* holder_is: does the row name this holder text? */
static bool
holder_is(const DlockRow *row, text *holder)
{
	return row->held &&
		strlen(row->holder) == VARSIZE_ANY_EXHDR(holder) &&
		memcmp(row->holder, VARDATA_ANY(holder), VARSIZE_ANY_EXHDR(holder)) == 0;
}

/*
 * dlock_holding_verdict: what the row is to this holder and caller at now.
 */
DlockVerdict
dlock_holding_verdict(const DlockRow *row, text *holder,
					  const DlockCaller *caller, TimestampTz now)
{
	if (dlock_lease_ended(row, now))
		return HOLDING_FREE;
	if (!holder_is(row, holder))
		return HOLDING_OTHERS;
	if (row->owner == caller->role)
		return HOLDING_MINE;
	return HOLDING_OTHER_ROLE;
}

/* role_name: a role's name for messages. */
static const char *
role_name(Oid role)
{
	const char *name = GetUserNameFromId(role, true);

	return name ? name : "(dropped)";
}

/*
 * dlock_may_change: for unlock and renew of the holder's holding: true if
 * the caller may change it (its own, or a superuser's call on another
 * role's); raises 42501 for another role's; false if it is not this
 * holder's unexpired holding at all.
 */
bool
dlock_may_change(const DlockRow *row, text *holder, const DlockCaller *caller,
				 TimestampTz now, const char *action)
{
	switch (dlock_holding_verdict(row, holder, caller, now))
	{
		case HOLDING_MINE:
			return true;
		case HOLDING_OTHER_ROLE:
			if (caller->is_super)
				return true;
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to %s a lock held by role \"%s\"",
							action, role_name(row->owner)),
					 errdetail("Only the role that took a lock, or a superuser, can %s it.",
							   action)));
			break;
		default:
			break;
	}
	return false;
}

/*
 * dlock_check_may_pin: assert_fence of a current holding: raise 42501
 * unless the caller has the privileges of the role that took it.
 */
void
dlock_check_may_pin(const DlockRow *row, const DlockCaller *caller)
{
	if (caller->is_super || has_privs_of_role(caller->role, row->owner))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied to assert the fence of a lock held by role \"%s\"",
					role_name(row->owner)),
			 errdetail("Only roles with the privileges of the role that took a lock can pin it with assert_fence; use dlock.check() to test a fence without pinning it.")));
}
