/*-------------------------------------------------------------------------
 *
 * args.c
 *		The SQL functions' arguments, checked before anything is looked
 *		at: names (resource, holder and the names the semaphore and
 *		election functions give them), lease, wait, lock_delay, fair,
 *		shared; the refusal of changes on a standby or in a read-only
 *		transaction; and the interval arithmetic that bounds a lease.
 *
 * Every refusal is 22023 (invalid_parameter_value), or 25006 for a
 * read-only transaction, raised before anything changes.  No state.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include <math.h>

#include "access/xlog.h"
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
static TimestampTz
span_expiry(TimestampTz now, const Interval *span, const char *what)
{
	TimestampTz expires;

	if (span->month > DLOCK_MAX_LEASE_MONTHS || span->month < -DLOCK_MAX_LEASE_MONTHS ||
		span->day > DLOCK_MAX_LEASE_DAYS || span->day < -DLOCK_MAX_LEASE_DAYS ||
		span->time > DLOCK_MAX_LEASE_USECS || span->time < -DLOCK_MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be finite and at most 1000 years", what)));
	expires = dlock_add_interval(now, span);
	if (expires <= now)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be positive", what),
				 errdetail("The %s given ends at or before the moment of the call.", what)));
	if (expires - now > DLOCK_MAX_LEASE_USECS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be finite and at most 1000 years", what)));
	return expires;
}

TimestampTz
dlock_lease_expiry(TimestampTz now, const Interval *span)
{
	return span_expiry(now, span, "lease");
}

/*
 * dlock_check_ttl: a session's ttl argument (open_session): as a lease,
 * NULL meaning dlock.default_lease; errors name it ttl.
 */
Interval *
dlock_check_ttl(FunctionCallInfo fcinfo, int argno)
{
	Interval   *span;

	if (PG_ARGISNULL(argno))
		return dlock_ms_interval(dlock_default_lease_ms);
	span = PG_GETARG_INTERVAL_P(argno);
	(void) span_expiry(GetCurrentTimestamp(), span, "ttl");
	return span;
}

/*
 * dlock_session_arg: an acquisition's optional session argument (1.1);
 * false when it is NULL or the installed SQL does not pass it.
 */
bool
dlock_session_arg(FunctionCallInfo fcinfo, int argno, int64 *session)
{
	*session = 0;
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return false;
	*session = PG_GETARG_INT64(argno);
	return true;
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

/* check_bool_arg: a boolean argument, not null; false when the SQL has none. */
static bool
check_bool_arg(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (argno >= PG_NARGS())
		return false;
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be null", what)));
	return PG_GETARG_BOOL(argno);
}

/* dlock_check_fair: the fair argument (false when the SQL has none). */
bool
dlock_check_fair(FunctionCallInfo fcinfo, int argno)
{
	return check_bool_arg(fcinfo, argno, "fair");
}

/* dlock_check_shared: the shared argument (false when the SQL has none). */
bool
dlock_check_shared(FunctionCallInfo fcinfo, int argno)
{
	return check_bool_arg(fcinfo, argno, "shared");
}
