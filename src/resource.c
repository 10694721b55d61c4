/*-------------------------------------------------------------------------
 *
 * resource.c
 *		Argument checks, resource identity (hash, channel) and the
 *		per-resource lock that serialises every change to one resource.
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
 * Shared state: the lock manager's locks only.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "common/md5.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

/*
 * Longest lease we accept; anything longer is surely a unit mistake.  The
 * limit applies to the expiry the call really writes (1000 years of 365.25
 * days); the component limits (2,000 years each, 1,000 for the time part)
 * keep the arithmetic inside the timestamp range, which ends 4713 BC.
 */
#define DLOCK_MAX_LEASE_USECS	(INT64CONST(1000) * 36525 * USECS_PER_DAY / 100)
#define DLOCK_MAX_LEASE_MONTHS	(INT64CONST(2000) * MONTHS_PER_YEAR)
#define DLOCK_MAX_LEASE_DAYS	(INT64CONST(2000) * 366)

/* Longest an acquirer waits for a reaper's transaction (see below). */
#define DLOCK_MAINTENANCE_WAIT_MS	100

/*
 * interval_usecs: an interval's length in microseconds as a double, with
 * months as 30 days like PostgreSQL's own interval comparison.
 */
static double
interval_usecs(const Interval *span)
{
	return (double) span->time +
		(double) span->day * USECS_PER_DAY +
		(double) span->month * DAYS_PER_MONTH * USECS_PER_DAY;
}

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

/* check_text: a text argument that is not null: not empty, not too long. */
static text *
check_text(text *t, const char *what, int maxlen)
{
	int			len;

	len = VARSIZE_ANY_EXHDR(t);
	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > maxlen)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at most %d bytes long", what, maxlen),
				 errdetail("The %s given is %d bytes long.", what, len)));
	return t;
}

/*
 * check_text_arg: common NULL/empty/length check for resource and holder.
 */
static text *
check_text_arg(FunctionCallInfo fcinfo, int argno, const char *what, int maxlen)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be null", what)));
	return check_text(PG_GETARG_TEXT_PP(argno), what, maxlen);
}

/* dlock_check_resource: the resource argument, validated. */
text *
dlock_check_resource(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "resource", DLOCK_MAX_RESOURCE_LEN);
}

/*
 * dlock_check_resource_text: one resource of an array (multi.c), not
 * null and detoasted, validated like a resource argument.
 */
void
dlock_check_resource_text(text *t)
{
	(void) check_text(t, "resource", DLOCK_MAX_RESOURCE_LEN);
}

/* dlock_check_holder: the holder argument, validated. */
text *
dlock_check_holder(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "holder", DLOCK_MAX_HOLDER_LEN);
}

/* dlock_check_semaphore: a resource under the name the semaphore functions give it. */
text *
dlock_check_semaphore(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "semaphore", DLOCK_MAX_RESOURCE_LEN);
}

/*
 * dlock_check_election / dlock_check_candidate: a resource and a holder
 * under the names the election functions give them.
 */
text *
dlock_check_election(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "election", DLOCK_MAX_RESOURCE_LEN);
}

text *
dlock_check_candidate(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "candidate", DLOCK_MAX_HOLDER_LEN);
}

/*
 * dlock_check_lease: the lease argument, validated against the clock now;
 * NULL means the dlock.default_lease setting.  The result is palloc'd.
 * Every use turns it into an expiry with dlock_lease_expiry, which checks
 * again at that moment.
 */
Interval *
dlock_check_lease(FunctionCallInfo fcinfo, int argno)
{
	Interval   *span;

	if (PG_ARGISNULL(argno))
		return dlock_ms_interval(dlock_default_lease_ms);
	span = PG_GETARG_INTERVAL_P(argno);
	(void) dlock_lease_expiry(GetCurrentTimestamp(), span);
	return span;
}

/*
 * dlock_lease_expiry: now + lease as the calendar applies it (months are
 * calendar months, days calendar days), which is what gets written; the
 * lease must end after now and at most 1000 years later.  Components so
 * large that the sum could leave the timestamp range are refused first, so
 * every bad lease is 22023, never 22008.  Called before anything changes.
 */
TimestampTz
dlock_lease_expiry(TimestampTz now, const Interval *span)
{
	TimestampTz expires;

	if (span->month > DLOCK_MAX_LEASE_MONTHS || span->month < -DLOCK_MAX_LEASE_MONTHS ||
		span->day > DLOCK_MAX_LEASE_DAYS || span->day < -DLOCK_MAX_LEASE_DAYS ||
		span->time > DLOCK_MAX_LEASE_USECS || span->time < -DLOCK_MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be finite and at most 1000 years")));
	expires = dlock_add_interval(now, span);
	if (expires <= now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be positive"),
				 errdetail("The lease given ends at or before the moment of the call.")));
	if (expires - now > DLOCK_MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be finite and at most 1000 years")));
	return expires;
}

/*
 * dlock_check_wait_ms: the wait argument in milliseconds; -1 for NULL (no
 * limit but statement_timeout).  Waits beyond a century count as no limit.
 */
int64
dlock_check_wait_ms(FunctionCallInfo fcinfo, int argno)
{
	double		usecs;

	if (PG_ARGISNULL(argno))
		return -1;
	usecs = interval_usecs(PG_GETARG_INTERVAL_P(argno));
	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("wait must not be negative")));
	if (usecs > 100 * 365.25 * USECS_PER_DAY)
		return -1;
	return (int64) ceil(usecs / 1000.0);
}

/*
 * dlock_check_writable: refuse state changes on a standby or in a read-only
 * transaction with SQLSTATE 25006, before anything is looked at.
 */
void
dlock_check_writable(const char *fname)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("cannot execute %s during recovery", fname),
				 errhint("Locks are taken on the primary server.")));
	PreventCommandIfReadOnly(fname);
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
 * dlock_pinned: does another transaction pin res?  A request for the
 * resource lock in CHANGE mode queued in the lock manager behind a pin
 * would make every later RENEW queue behind it too (the lock manager
 * queues a request that conflicts with a waiting one), so whoever must
 * wait for a change while a pin holds waits for the pins on their marker
 * instead (dlock_wait_for_pins).
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
 * set_share_row_locktag: the tag of holder's shared holding of res (any
 * role's: the holder text alone, so that it covers the primary key of
 * dlock.shares whoever the owner).  Two holders whose hashes collide
 * merely share it.
 */
static void
set_share_row_locktag(LOCKTAG *tag, const DlockResource *res, text *holder)
{
	uint32		who = hash_any((const unsigned char *) VARDATA_ANY(holder),
							   VARSIZE_ANY_EXHDR(holder));

	SET_LOCKTAG_ADVISORY(*tag, who ^ MyDatabaseId, (uint32) (res->hash >> 32),
						 (uint32) res->hash, DLOCK_LOCKTAG_SHARE_ROW);
}

/*
 * dlock_share_row_lock: take the share-row tag of holder's shared holding
 * of res in mode for this transaction (docs/how-it-works.md).  With wait =
 * false returns false at once if another transaction has it in a
 * conflicting mode; with wait, behind a pin it waits for the pins
 * (dlock_wait_for_pins) and tries again, else it waits in the lock
 * manager.
 */
bool
dlock_share_row_lock(const DlockResource *res, text *holder,
					 DlockLockMode mode, bool wait)
{
	LOCKTAG		tag;

	set_share_row_locktag(&tag, res, holder);
	for (;;)
	{
		if (LockAcquire(&tag, (LOCKMODE) mode, false, true) != LOCKACQUIRE_NOT_AVAIL)
			return true;
		if (!wait)
			return false;
		if (!dlock_pinned(res))
		{
			(void) LockAcquire(&tag, (LOCKMODE) mode, false, false);
			return true;
		}
		dlock_wait_for_pins(res);
	}
}

/*
 * dlock_share_row_held: does this transaction hold the share-row tag of
 * holder's shared holding of res, in any mode (it took, changed or pinned
 * that holding)?  Then nobody else can release it before this one ends.
 */
bool
dlock_share_row_held(const DlockResource *res, text *holder)
{
	static const LOCKMODE modes[] = {DLOCK_CHANGE, DLOCK_RENEW, DLOCK_PIN};
	LOCKTAG		tag;

	set_share_row_locktag(&tag, res, holder);
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
dlock_share_row_unlock(const DlockResource *res, text *holder,
					   DlockLockMode mode)
{
	LOCKTAG		tag;

	set_share_row_locktag(&tag, res, holder);
	LockRelease(&tag, (LOCKMODE) mode, false);
}

/*
 * dlock_change_wait: take res's lock in CHANGE mode, waiting as long as it
 * takes, always in the lock manager (deadlock detection, cancel, visible
 * to isolationtester): for the resource's lock while no pin holds it, for
 * the pins (dlock_wait_for_pins) while one does, then again.
 */
void
dlock_change_wait(const DlockResource *res)
{
	for (;;)
	{
		if (dlock_resource_lock(res, DLOCK_CHANGE, false))
			return;
		if (!dlock_pinned(res))
		{
			(void) dlock_resource_lock(res, DLOCK_CHANGE, true);
			return;
		}
		dlock_wait_for_pins(res);
	}
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
 * attempt (share_holder not NULL) its holder's share-row tag in CHANGE
 * mode, without waiting.  If another transaction is changing that
 * holder's shared holding (the holder on another connection), the lock is
 * given back at once: the attempt must never wait on that transaction's
 * uncommitted row in the primary key.
 */
DlockTake
dlock_resource_take(const DlockResource *res, DlockLockMode mode,
					text *share_holder)
{
	if (!dlock_take_resource(res, mode))
		return TAKE_CONTENDED;
	if (share_holder != NULL &&
		!dlock_share_row_lock(res, share_holder, DLOCK_CHANGE, false))
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
						 text *share_holder)
{
	if (share_holder != NULL)
		dlock_share_row_unlock(res, share_holder, DLOCK_CHANGE);
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
			dlock_share_row_held(res, cstring_to_text(s->holder)))
			return true;
	}
	return false;
}

/* dlock_add_interval: ts + span, PostgreSQL's timestamptz + interval. */
TimestampTz
dlock_add_interval(TimestampTz ts, const Interval *span)
{
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												   TimestampTzGetDatum(ts),
												   PointerGetDatum(span)));
}

/* dlock_ms_interval: a palloc'd interval of ms milliseconds. */
Interval *
dlock_ms_interval(int64 ms)
{
	Interval   *span = palloc0(sizeof(Interval));

	span->time = ms * 1000;
	return span;
}

/* The lock-delay limit from the contract. */
#define MAX_LOCK_DELAY_USECS	((int64) 3600 * USECS_PER_SEC)

/*
 * dlock_check_lock_delay: the lock_delay argument (NULL: dlock.lock_delay),
 * between 0 and 1 hour, without months or days; NULL when it is zero.
 */
Interval *
dlock_check_lock_delay(FunctionCallInfo fcinfo, int argno)
{
	Interval   *span;

	if (argno >= PG_NARGS() || PG_ARGISNULL(argno))
		return dlock_lock_delay_ms > 0 ? dlock_ms_interval(dlock_lock_delay_ms) : NULL;
	span = PG_GETARG_INTERVAL_P(argno);
	if (span->month != 0 || span->day != 0 ||
		span->time < 0 || span->time > MAX_LOCK_DELAY_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_delay must be between 0 and 1 hour"),
				 (span->month != 0 || span->day != 0) ?
				 errdetail("A lock_delay is given in hours, minutes and seconds, not in days or months.") : 0));
	return span->time > 0 ? span : NULL;
}

/*
 * dlock_lock_delay_of: the lock-delay of an acquisition, given the checked
 * lock_delay argument (dlock_check_lock_delay) at argno: none for a shared
 * one (lock-delay keeps others off after an exclusive holding ends
 * uncleanly), and an explicit non-zero lock_delay with shared => true is
 * refused, changing nothing.
 */
Interval *
dlock_lock_delay_of(FunctionCallInfo fcinfo, int argno, Interval *delay,
					bool shared)
{
	if (!shared)
		return delay;
	if (delay != NULL && argno < PG_NARGS() && !PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lock_delay applies to exclusive locks only"),
				 errhint("Leave lock_delay out, or give 0, for a shared lock.")));
	return NULL;
}

/* dlock_check_fair: the fair argument (false when the SQL has none). */
bool
dlock_check_fair(FunctionCallInfo fcinfo, int argno)
{
	if (argno >= PG_NARGS())
		return false;
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("fair must not be null")));
	return PG_GETARG_BOOL(argno);
}

/* dlock_check_shared: the shared argument (false when the SQL has none). */
bool
dlock_check_shared(FunctionCallInfo fcinfo, int argno)
{
	if (argno >= PG_NARGS())
		return false;
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("shared must not be null")));
	return PG_GETARG_BOOL(argno);
}
