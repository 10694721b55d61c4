/*-------------------------------------------------------------------------
 *
 * resource.c
 *		Argument checks, resource identity (hash, channel) and the
 *		per-resource lock that serialises every change to one resource.
 *
 * The per-resource lock is a transaction-level advisory lock in
 * PostgreSQL's lock manager, keyed by the first 64 bits of md5(resource)
 * and a class number of our own (so it never meets a user's advisory
 * locks).  Every function that changes a resource's row takes it first:
 *
 *	- try_lock takes it without waiting, so it never waits behind another
 *	  transaction's uncommitted acquisition: that transaction still holds it;
 *	- a successful change keeps it until the transaction ends, so nobody
 *	  ever waits on a row lock of ours;
 *	- a failed attempt releases it at once (LockRelease works on
 *	  transaction-level locks too), so a failed try leaves nothing behind
 *	  that could block the holder's own unlock or renew;
 *	- waits on it are ordinary lock-manager waits: deadlock detection,
 *	  lock_timeout, statement_timeout and cancel all apply, and
 *	  isolationtester can see them.
 *
 * Two resources whose hashes collide merely share the lock (a spurious
 * conflict with probability 2^-64); rows are always matched by full text.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "common/md5.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

/* Longest lease we accept; anything longer is surely a unit mistake. */
#define DLOCK_MAX_LEASE_USECS	((double) 1000 * MONTHS_PER_YEAR * DAYS_PER_MONTH * USECS_PER_DAY)

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

/*
 * check_text_arg: common NULL/empty/length check for resource and holder.
 */
static text *
check_text_arg(FunctionCallInfo fcinfo, int argno, const char *what, int maxlen)
{
	text	   *t;
	int			len;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be null", what)));
	t = PG_GETARG_TEXT_PP(argno);
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

/* dlock_check_resource: the resource argument, validated. */
text *
dlock_check_resource(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "resource", DLOCK_MAX_RESOURCE_LEN);
}

/* dlock_check_holder: the holder argument, validated. */
text *
dlock_check_holder(FunctionCallInfo fcinfo, int argno)
{
	return check_text_arg(fcinfo, argno, "holder", DLOCK_MAX_HOLDER_LEN);
}

/*
 * dlock_check_lease: the lease argument, validated; NULL means the
 * dlock.default_lease setting.  The result is palloc'd.
 */
Interval *
dlock_check_lease(FunctionCallInfo fcinfo, int argno)
{
	Interval   *span;
	double		usecs;

	if (PG_ARGISNULL(argno))
		return dlock_ms_interval(dlock_default_lease_ms);
	span = PG_GETARG_INTERVAL_P(argno);
	usecs = interval_usecs(span);
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be positive")));
	if (usecs > DLOCK_MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("lease must be finite and at most 1000 years")));
	return span;
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

/*
 * dlock_resource_lock: take the per-resource lock for this transaction.
 * With wait = false returns false at once if another transaction has it.
 */
bool
dlock_resource_lock(const DlockResource *res, bool wait)
{
	LOCKTAG		tag;

	dlock_set_locktag(&tag, res->hash);
	return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * dlock_resource_unlock: give back one reference to the per-resource lock
 * taken by dlock_resource_lock; used when an attempt changed nothing.  If
 * this transaction took it before (it holds or changed the resource), the
 * earlier reference keeps it held.
 */
void
dlock_resource_unlock(const DlockResource *res)
{
	LOCKTAG		tag;

	dlock_set_locktag(&tag, res->hash);
	LockRelease(&tag, ExclusiveLock, false);
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
