/*-------------------------------------------------------------------------
 *
 * semaphore.c
 *		The semaphore functions (0.5): try_acquire and acquire, counting
 *		semaphores with leased permits.
 *
 * A semaphore is a resource name whose holdings are permits: at most
 * max_permits of them are held at once, each holder's holding (a row of
 * dlock.permits, rows.c) leased, renewed and fenced on its own.
 * These functions check the arguments and hand the request to acquire.c,
 * whose attempt asks admit.c (admit_semaphore) and writes the verdict
 * (holding_write).  unlock, renew, unlock_all, break_lock, check,
 * assert_fence, the reaper and the views are the lease functions' own
 * (lease.c, reap.c, worker.c, promote.c): they find a semaphore's
 * holdings with the shared holdings (dlock_row_read_shares).  A name held as a lock cannot be acquired as a semaphore, nor
 * the other way round (42809, admit.c).
 *
 * Backend-local: no shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"

PG_FUNCTION_INFO_V1(dlock_try_acquire);
PG_FUNCTION_INFO_V1(dlock_acquire_semaphore);
PG_FUNCTION_INFO_V1(dlock_acquire_semaphore_1_0);

/*
 * Where fair and wait are (-1: none; lease is always argument 4).  The
 * 0.5 SQL's acquire has wait last; 1.0's has it right after lease, as
 * lock() does.  Each SQL version keeps its own C symbol, so a new library
 * runs under the old SQL.
 */
typedef struct SemaphoreArgs
{
	int			fair;
	int			wait;
	int			session;		/* session => id (1.1; the 1.0 symbol's SQL
								 * passes it from 1.1 on), -1: none */
} SemaphoreArgs;

static const SemaphoreArgs try_acquire_args = {5, -1, 6};
static const SemaphoreArgs acquire_args_0_5 = {5, 6, -1};
static const SemaphoreArgs acquire_args_1_0 = {6, 5, 7};

/* check_count: a positive count argument named what. */
static int32
check_count(FunctionCallInfo fcinfo, int argno, const char *what)
{
	int32		n;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be null", what)));
	n = PG_GETARG_INT32(argno);
	if (n <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be greater than zero", what),
				 errdetail("The %s given is %d.", what, n)));
	return n;
}

/*
 * semaphore_call: try_acquire and acquire: the arguments (semaphore,
 * holder, max_permits, permits, lease, then fair and wait where pos says)
 * checked, in order, before anything changes; the fence or 0.
 */
static int64
semaphore_call(FunctionCallInfo fcinfo, const SemaphoreArgs *pos,
			   const char *fname)
{
	DlockResource res;
	text	   *holder;
	int32		max_permits;
	int32		permits;
	Interval   *lease;
	bool		fair;
	int64		wait_ms = 0;
	DlockCaller caller;
	int64		session;
	int64		fence;

	dlock_resource_init(&res, dlock_check_semaphore(fcinfo, 0));
	holder = pos->session < 0 ? dlock_check_holder(fcinfo, 1) :
		dlock_session_holder_arg(fcinfo, 1, pos->session, dlock_check_holder);
	max_permits = check_count(fcinfo, 2, "max_permits");
	permits = check_count(fcinfo, 3, "permits");
	if (permits > max_permits)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("permits must be at most max_permits"),
				 errdetail("permits is %d, max_permits %d.", permits, max_permits)));
	lease = dlock_check_lease(fcinfo, 4);
	if (pos->wait >= 0 && pos->wait < pos->fair)
		wait_ms = dlock_check_wait_ms(fcinfo, pos->wait);
	fair = dlock_check_fair(fcinfo, pos->fair);
	if (pos->wait > pos->fair)
		wait_ms = dlock_check_wait_ms(fcinfo, pos->wait);
	dlock_check_writable(fname);
	if (wait_ms != 0)
		dlock_table_locks_mark();	/* a waiter keeps no read lock (table.c) */
	if (!dlock_semaphores_installed())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("semaphores need the 0.5 SQL of dlock"),
				 errhint("Run ALTER EXTENSION dlock UPDATE.")));
	caller = dlock_caller();
	session = pos->session < 0 ? 0 :
		dlock_session_call(fcinfo, pos->session, 4, &caller, wait_ms != 0,
						   &holder, &lease);

	fence = dlock_acquire_permits(&res, holder, &caller, lease, session,
								  wait_ms, fair, permits, max_permits);
	dlock_table_locks_forget();
	return fence;
}

/*
 * dlock.try_acquire(semaphore, holder, max_permits, permits, lease, fair):
 * the holding's fence, or NULL at once if the permits are not free.
 */
Datum
dlock_try_acquire(PG_FUNCTION_ARGS)
{
	int64		fence = semaphore_call(fcinfo, &try_acquire_args,
									   "dlock.try_acquire()");

	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/*
 * acquire_call: dlock.acquire(): like try_acquire, but waits up to wait
 * (NULL: no limit but statement_timeout), woken by the commit that frees
 * permits; NULL on timeout.
 */
static Datum
acquire_call(FunctionCallInfo fcinfo, const SemaphoreArgs *pos)
{
	int64		fence = semaphore_call(fcinfo, pos, "dlock.acquire()");

	if (fence == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(fence);
}

/* dlock.acquire(semaphore, holder, max_permits, permits, lease, wait, fair): 1.0 */
Datum
dlock_acquire_semaphore_1_0(PG_FUNCTION_ARGS)
{
	return acquire_call(fcinfo, &acquire_args_1_0);
}

/* dlock.acquire(semaphore, holder, max_permits, permits, lease, fair, wait): 0.5 */
Datum
dlock_acquire_semaphore(PG_FUNCTION_ARGS)
{
	return acquire_call(fcinfo, &acquire_args_0_5);
}
