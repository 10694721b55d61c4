/*-------------------------------------------------------------------------
 *
 * resource.c
 *		Resource identity (hash, channel) and the per-resource lock that
 *		serialises every change to one resource, with the
 *		transaction-scoped locks this transaction holds by it.
 *
 * The per-resource lock is a transaction-level advisory lock in the lock
 * manager, keyed by the first 64 bits of md5(resource).  It is taken in
 * one of four modes (DlockLockMode: CHANGE, RENEW, SHARE, PIN); a shared
 * holder's row also has its share-row tag, a pin its pin marker, and a
 * reaper its maintenance lock.  An attempt takes what it needs with
 * dlock_resource_take and gives it back, if refused, with
 * dlock_resource_give_back: that is the lock protocol of an acquisition.
 * Waits on it are the lock manager's (deadlock detection, lock_timeout,
 * cancel).  Why each mode conflicts with which, and how pins and reapers
 * are waited for: docs/how-it-works.md, "Inside the C extension".
 *
 * A transaction-scoped lock (xactlock.c) is the resource's lock kept in
 * CHANGE mode to the transaction's end, with a fence: this file keeps the
 * list of them (dlock_resource_xact_register, dlock_resource_xact_fence),
 * backend-local, one taken in a subtransaction gone with it.
 *
 * Shared state: the lock manager's locks only.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "common/md5.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

/*
 * Longest an acquirer waits for a reaper's transaction (see below); 100 ms
 * was outlasted on a loaded machine (021_reaper_faults: 2 busy answers).
 */
#define DLOCK_MAINTENANCE_WAIT_MS	1000

/*
 * dlock_resource_init: derive hash and channel from a validated resource.
 */
void
dlock_resource_init(DlockResource *res, text *name)
{
	uint8		digest[MD5_DIGEST_LENGTH];
	const char *errstr = NULL;
	static const char hex[] = "0123456789abcdef";
	int			i;

	res->name = name;
	if (!pg_md5_binary(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), digest, &errstr))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not compute MD5 hash of resource: %s", errstr)));
	res->hash = 0;
	for (i = 0; i < 8; i++)
		res->hash = (res->hash << 8) | digest[i];
	memcpy(res->channel, "dlock_", 6);
	for (i = 0; i < MD5_DIGEST_LENGTH; i++)
	{
		res->channel[6 + 2 * i] = hex[digest[i] >> 4];
		res->channel[7 + 2 * i] = hex[digest[i] & 0xF];
	}
	res->channel[6 + 2 * MD5_DIGEST_LENGTH] = '\0';
}

/* dlock_set_locktag: the lock-manager tag of a resource hash. */
void
dlock_set_locktag(LOCKTAG *tag, uint64 hash)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, DLOCK_LOCKTAG_CLASS);
}

/* set_maintenance_locktag: the tag of a resource's maintenance lock. */
static void
set_maintenance_locktag(LOCKTAG *tag, uint64 hash)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, DLOCK_LOCKTAG_MAINTENANCE);
}

/*
 * dlock_resource_lock: take the per-resource lock in mode for this
 * transaction.  With wait = false returns false at once if another
 * transaction holds it in a conflicting mode.
 */
bool
dlock_resource_lock(const DlockResource *res, DlockLockMode mode, bool wait)
{
	LOCKTAG		tag;

	dlock_set_locktag(&tag, res->hash);
	return LockAcquire(&tag, (LOCKMODE) mode, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * dlock_resource_unlock: give back one reference to the per-resource lock
 * taken in mode by dlock_resource_lock; used when an attempt changed
 * nothing.  If this transaction took it before (it holds or changed the
 * resource), the earlier reference keeps it held.
 */
void
dlock_resource_unlock(const DlockResource *res, DlockLockMode mode)
{
	LOCKTAG		tag;

	dlock_set_locktag(&tag, res->hash);
	LockRelease(&tag, (LOCKMODE) mode, false);
}

/*
 * dlock_maintenance_lock: a reaper, about to take the resource's lock
 * without waiting, marks it as held for maintenance, at session level.
 * Returns false, taking nothing, if an acquirer is looking at the mark just
 * now.  Give it back with dlock_maintenance_unlock if the resource's lock
 * is not had, else with dlock_maintenance_unlock_all once the transaction
 * has ended.  Only reaper rounds (worker.c) take it: they hold no session
 * lock of their own.
 */
bool
dlock_maintenance_lock(const DlockResource *res)
{
	LOCKTAG		tag;

	set_maintenance_locktag(&tag, res->hash);
	return LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* set_pin_locktag: the tag of a resource's pin marker. */
static void
set_pin_locktag(LOCKTAG *tag, uint64 hash)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, DLOCK_LOCKTAG_PIN);
}

/*
 * dlock_pin: assert_fence's pin: the pin marker (shared) and the resource
 * lock in PIN mode, until the transaction ends.  Waits for changes in
 * progress.
 */
void
dlock_pin(const DlockResource *res)
{
	LOCKTAG		tag;

	set_pin_locktag(&tag, res->hash);
	(void) LockAcquire(&tag, ShareLock, false, false);
	(void) dlock_resource_lock(res, DLOCK_PIN, true);
}

/* dlock_unpin: give back a pin taken by dlock_pin (nothing was pinned). */
void
dlock_unpin(const DlockResource *res)
{
	LOCKTAG		tag;

	dlock_resource_unlock(res, DLOCK_PIN);
	set_pin_locktag(&tag, res->hash);
	LockRelease(&tag, ShareLock, false);
}

/*
 * dlock_pinned: does another transaction pin res (or wait on the pin
 * marker: the lock manager counts requests still waiting)?  A request
 * for the resource lock in CHANGE mode queued in the lock manager behind
 * a pin would make every later RENEW queue behind it too (the lock
 * manager queues a request that conflicts with a waiting one), so whoever
 * must wait for a change while a pin holds waits for the pins on their
 * marker instead (dlock_wait_for_pins).
 */
bool
dlock_pinned(const DlockResource *res)
{
	LOCKTAG		tag;

	set_pin_locktag(&tag, res->hash);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ExclusiveLock, false);
	return false;
}

/* set_xpin_locktag: the tag of the pins of res's exclusive holding. */
static void
set_xpin_locktag(LOCKTAG *tag, uint64 hash)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, DLOCK_LOCKTAG_XPIN);
}

/*
 * dlock_pin_exclusive: assert_fence of an exclusive holding marks it
 * too, until the transaction ends (shared holdings and permits are pinned
 * by their share-row tag): a reader, whose SHARE mode a pin does not hold
 * off, looks at this mark beside an ended exclusive holding
 * (dlock_exclusive_pinned).  Taken before a second look that
 * finds the holding still live, so a reader that finds it ended later
 * sees the mark.  dlock_unpin_exclusive gives it back (nothing pinned).
 */
void
dlock_pin_exclusive(const DlockResource *res)
{
	LOCKTAG		tag;

	set_xpin_locktag(&tag, res->hash);
	(void) LockAcquire(&tag, ShareLock, false, false);
}

void
dlock_unpin_exclusive(const DlockResource *res)
{
	LOCKTAG		tag;

	set_xpin_locktag(&tag, res->hash);
	LockRelease(&tag, ShareLock, false);
}

/*
 * dlock_exclusive_pinned: does another transaction pin res's exclusive
 * holding?  A look in RowExclusiveLock, which conflicts with the pins'
 * ShareLock but not with itself: readers looking at once do not take
 * each other for pins, and pins of shared holdings do not count.
 */
bool
dlock_exclusive_pinned(const DlockResource *res)
{
	LOCKTAG		tag;

	set_xpin_locktag(&tag, res->hash);
	if (LockAcquire(&tag, RowExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, RowExclusiveLock, false);
	return false;
}

/*
 * dlock_wait_for_exclusive_pins: wait, in the lock manager, until the pins
 * of res's exclusive holding that other transactions hold now are gone
 * (the mark in RowExclusiveLock, given back at once): a reader's wait
 * behind an ended exclusive holding, where the deadlock detector sees a
 * cycle through the pinner.  New pins of that holding queue behind it;
 * assert_fence refuses an ended holding before it pins anything.
 */
void
dlock_wait_for_exclusive_pins(const DlockResource *res)
{
	LOCKTAG		tag;

	set_xpin_locktag(&tag, res->hash);
	(void) LockAcquire(&tag, RowExclusiveLock, false, false);
	LockRelease(&tag, RowExclusiveLock, false);
}

/*
 * dlock_wait_for_pins: wait, in the lock manager, until the pins of res
 * that other transactions hold now are gone: an ExclusiveLock on the pin
 * marker, given back at once.  The wait is on the marker, not on the
 * resource's lock, so renewals never queue behind it (see dlock_pinned);
 * new pins queue behind it for that moment, as they wait for a change in
 * progress anyway.  Being a lock-manager wait, a cycle through a pin (this
 * transaction waits for a pinner that waits for this one in the lock
 * manager) is found by the deadlock detector (40P01), and lock_timeout,
 * statement_timeout and cancel end it.  The caller looks again after it.
 */
void
dlock_wait_for_pins(const DlockResource *res)
{
	LOCKTAG		tag;

	set_pin_locktag(&tag, res->hash);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	LockRelease(&tag, ExclusiveLock, false);
}

/*
 * dlock_resource_held: does this transaction hold res's lock, in any mode
 * (it took, changed, renewed or pinned the resource)?  Then no other
 * transaction can change the resource before this one ends, except that
 * when it holds it in SHARE mode only (*only_share), other shared holders
 * can still change (renew, release) their own holdings.
 */
bool
dlock_resource_held(const DlockResource *res, bool *only_share)
{
	static const LOCKMODE modes[] = {DLOCK_CHANGE, DLOCK_RENEW, DLOCK_PIN,
	DLOCK_SHARE};
	LOCKTAG		tag;

	dlock_set_locktag(&tag, res->hash);
	for (size_t i = 0; i < lengthof(modes); i++)
	{
		LockAcquireResult r = LockAcquire(&tag, modes[i], false, true);

		if (r == LOCKACQUIRE_NOT_AVAIL)
			continue;
		LockRelease(&tag, modes[i], false);
		if (r != LOCKACQUIRE_OK)
		{
			/* held already (or already clear) */
			*only_share = modes[i] == DLOCK_SHARE;
			return true;
		}
	}
	*only_share = false;
	return false;
}

/*
 * set_share_row_locktag: the tag of the shared holding of res by holder
 * and owner: the primary key of dlock.shares and dlock.permits.  Another
 * role's holding of the same holder text has another tag, so nothing it
 * does makes this one wait.  Two holdings whose hashes collide merely
 * share it.
 */
static void
set_share_row_locktag(LOCKTAG *tag, const DlockResource *res, text *holder,
					  Oid owner)
{
	uint32		who = hash_combine(hash_any((const unsigned char *) VARDATA_ANY(holder),
											VARSIZE_ANY_EXHDR(holder)),
								   hash_uint32(owner));

	SET_LOCKTAG_ADVISORY(*tag, who ^ MyDatabaseId, (uint32) (res->hash >> 32),
						 (uint32) res->hash, DLOCK_LOCKTAG_SHARE_ROW);
}

/*
 * dlock_share_row_lock: take the share-row tag of holder's shared holding
 * of res in mode for this transaction (docs/how-it-works.md).  With wait =
 * false returns false at once if another transaction has it in a
 * conflicting mode; with wait, a CHANGE behind a pin waits for the pins
 * (dlock_wait_for_pins) once and tries again, else it waits in the lock
 * manager.  Once only: a pinner's own wait for the pins returns at once
 * (the lock manager lets it go ahead of requests its own pin holds up),
 * and looping there spun, out of the deadlock detector's sight, until
 * statement_timeout.
 */
bool
dlock_share_row_lock(const DlockResource *res, text *holder, Oid owner,
					 DlockLockMode mode, bool wait)
{
	LOCKTAG		tag;
	bool		detoured = false;

	set_share_row_locktag(&tag, res, holder, owner);
	for (;;)
	{
		if (LockAcquire(&tag, (LOCKMODE) mode, false, true) != LOCKACQUIRE_NOT_AVAIL)
			return true;
		if (!wait)
			return false;
		/*
		 * Only CHANGE conflicts with a pin: a PIN or RENEW request queued
		 * on the tag waits for a change, never for a pin, so no detour.
		 */
		if (mode != DLOCK_CHANGE || detoured || !dlock_pinned(res))
		{
			(void) LockAcquire(&tag, (LOCKMODE) mode, false, false);
			return true;
		}
		dlock_wait_for_pins(res);
		detoured = true;
	}
}

/*
 * dlock_share_row_held: does this transaction hold the share-row tag of
 * holder's shared holding of res, in any mode (it took, changed or pinned
 * that holding)?  Then nobody else can release it before this one ends.
 */
bool
dlock_share_row_held(const DlockResource *res, text *holder, Oid owner)
{
	static const LOCKMODE modes[] = {DLOCK_CHANGE, DLOCK_RENEW, DLOCK_PIN};
	LOCKTAG		tag;

	set_share_row_locktag(&tag, res, holder, owner);
	for (size_t i = 0; i < lengthof(modes); i++)
	{
		LockAcquireResult r = LockAcquire(&tag, modes[i], false, true);

		if (r == LOCKACQUIRE_NOT_AVAIL)
			continue;
		LockRelease(&tag, modes[i], false);
		if (r != LOCKACQUIRE_OK)
			return true;
	}
	return false;
}

/* dlock_share_row_unlock: give back a share-row tag that changed nothing. */
void
dlock_share_row_unlock(const DlockResource *res, text *holder, Oid owner,
					   DlockLockMode mode)
{
	LOCKTAG		tag;

	set_share_row_locktag(&tag, res, holder, owner);
	LockRelease(&tag, (LOCKMODE) mode, false);
}

/*
 * dlock_change_wait: take res's lock in CHANGE mode, waiting as long as it
 * takes, always in the lock manager (deadlock detection, cancel, visible
 * to isolationtester): for the pins (dlock_wait_for_pins) once if one
 * holds it, then for the resource's lock (see dlock_share_row_lock).
 */
void
dlock_change_wait(const DlockResource *res)
{
	if (dlock_resource_lock(res, DLOCK_CHANGE, false))
		return;
	if (dlock_pinned(res))
	{
		dlock_wait_for_pins(res);
		if (dlock_resource_lock(res, DLOCK_CHANGE, false))
			return;
	}
	(void) dlock_resource_lock(res, DLOCK_CHANGE, true);
}

/* dlock_maintenance_unlock: give back an unused maintenance lock. */
void
dlock_maintenance_unlock(const DlockResource *res)
{
	LOCKTAG		tag;

	set_maintenance_locktag(&tag, res->hash);
	LockRelease(&tag, ExclusiveLock, true);
}

/*
 * dlock_maintenance_unlock_all: a reaper round, after each transaction:
 * give back every maintenance lock (every session-level advisory lock of
 * the round's process, which has no others).
 */
void
dlock_maintenance_unlock_all(void)
{
	LockReleaseSession(USER_LOCKMETHOD);
}

/*
 * dlock_wait_for_maintenance: after failing to take res's lock: if a
 * reaper holds it, wait until the reaper's transaction ends and return
 * true (look again); false if someone else holds it (the resource is
 * busy).  A reaper's transaction is short and never waits for a lock, but
 * its commit could wait (for the NOTIFY queue, say), so the wait is
 * bounded: polled, at most DLOCK_MAINTENANCE_WAIT_MS, then the resource
 * counts as busy.
 */
bool
dlock_wait_for_maintenance(const DlockResource *res)
{
	LOCKTAG		tag;
	long		waited_us = 0;
	long		step_us = 10;

	set_maintenance_locktag(&tag, res->hash);
	for (;;)
	{
		if (LockAcquire(&tag, ShareLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		{
			LockRelease(&tag, ShareLock, false);
			return waited_us > 0;
		}
		if (waited_us >= DLOCK_MAINTENANCE_WAIT_MS * 1000L)
			return false;
		pg_usleep(step_us);
		CHECK_FOR_INTERRUPTS();
		waited_us += step_us;
		step_us = Min(step_us * 2, 1000);
	}
}

/*
 * dlock_take_resource: take res's lock in mode without waiting for anyone
 * but a reaper; false if another transaction has it.
 */
bool
dlock_take_resource(const DlockResource *res, DlockLockMode mode)
{
	while (!dlock_resource_lock(res, mode, false))
	{
		/*
		 * No reaper holds it (any more): another transaction has it, or a
		 * reaper let go of both between the two looks.  Once more, then.
		 */
		if (!dlock_wait_for_maintenance(res))
			return dlock_resource_lock(res, mode, false);
	}
	return true;
}

/*
 * dlock_resource_take: an attempt takes what it needs to read and change
 * res: the resource's lock in mode (dlock_take_resource), and for a shared
 * attempt (share_holder not NULL) the share-row tag of its holder and
 * role (share_owner) in CHANGE mode, without waiting.  If another transaction is changing that
 * holder's shared holding (the holder on another connection), the lock is
 * given back at once: the attempt must never wait on that transaction's
 * uncommitted row in the primary key.
 */
DlockTake
dlock_resource_take(const DlockResource *res, DlockLockMode mode,
					text *share_holder, Oid share_owner)
{
	if (!dlock_take_resource(res, mode))
		return TAKE_CONTENDED;
	if (share_holder != NULL &&
		!dlock_share_row_lock(res, share_holder, share_owner, DLOCK_CHANGE, false))
	{
		dlock_resource_unlock(res, mode);
		return TAKE_SHARE_ROW_BUSY;
	}
	return TAKE_OK;
}

/*
 * dlock_resource_give_back: a refused attempt gives back what
 * dlock_resource_take took.
 */
void
dlock_resource_give_back(const DlockResource *res, DlockLockMode mode,
						 text *share_holder, Oid share_owner)
{
	if (share_holder != NULL)
		dlock_share_row_unlock(res, share_holder, share_owner, DLOCK_CHANGE);
	dlock_resource_unlock(res, mode);
}

/*
 * dlock_share_rows_held: is one of shares (DlockRow *), live at now and
 * not mine, a shared holding whose share-row tag this transaction holds
 * (it took, changed or pinned it)?  Only the end of the transaction lets
 * that one go.
 */
bool
dlock_share_rows_held(const DlockResource *res, const List *shares,
					  const DlockRow *mine, TimestampTz now)
{
	ListCell   *lc;

	foreach(lc, shares)
	{
		DlockRow   *s = lfirst(lc);

		if (s != mine && s->expires_at > now &&
			dlock_share_row_held(res, cstring_to_text(s->holder), s->owner))
			return true;
	}
	return false;
}

/*
 * The transaction-scoped locks this transaction holds (xactlock.c): the
 * resource's lock kept in CHANGE mode to the transaction's end, with the
 * fence it was given.  Backend-local, in TopTransactionContext; one taken
 * in a subtransaction goes with it, as its lock-manager lock does.
 */
typedef struct XactHolding
{
	uint64		hash;
	text	   *resource;
	int64		fence;
	SubTransactionId subxid;
} XactHolding;

static List *xact_holdings = NIL;	/* XactHolding * */

/* dlock_resource_xact_register: record a transaction-scoped lock of ours. */
void
dlock_resource_xact_register(const DlockResource *res, int64 fence)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	XactHolding *h = palloc(sizeof(XactHolding));

	h->hash = res->hash;
	h->resource = DatumGetTextPCopy(PointerGetDatum(res->name));
	h->fence = fence;
	h->subxid = GetCurrentSubTransactionId();
	xact_holdings = lappend(xact_holdings, h);
	MemoryContextSwitchTo(old);
}

/* find_holding: this transaction's transaction-scoped lock on res, if any. */
static XactHolding *
find_holding(const DlockResource *res)
{
	ListCell   *lc;

	foreach(lc, xact_holdings)
	{
		XactHolding *h = lfirst(lc);

		if (h->hash == res->hash &&
			VARSIZE_ANY_EXHDR(h->resource) == VARSIZE_ANY_EXHDR(res->name) &&
			memcmp(VARDATA_ANY(h->resource), VARDATA_ANY(res->name),
				   VARSIZE_ANY_EXHDR(res->name)) == 0)
			return h;
	}
	return NULL;
}

/*
 * dlock_resource_xact_fence: the fence of this transaction's
 * transaction-scoped lock on res, or 0.
 */
int64
dlock_resource_xact_fence(const DlockResource *res)
{
	XactHolding *h = find_holding(res);

	return h ? h->fence : 0;
}

/* resource_xact_end: forget the transaction's transaction-scoped locks. */
static void
resource_xact_end(DlockXactEnd how)
{
	xact_holdings = NIL;		/* memory goes with TopTransactionContext */
}

/*
 * resource_xact_subxact: drop the transaction-scoped locks taken in an
 * aborted subtransaction (its lock-manager locks are gone); hand those of
 * a committed one to its parent.
 */
static void
resource_xact_subxact(bool commit, SubTransactionId mySubid,
					  SubTransactionId parentSubid)
{
	xact_holdings = dlock_subxact_items(xact_holdings,
										offsetof(XactHolding, subxid),
										commit, mySubid, parentSubid);
}

/* What resource.c does when a transaction ends (xact.c calls them). */
const DlockXactHooks dlock_resource_xact_hooks = {
	.end = resource_xact_end,
	.subxact = resource_xact_subxact,
};
