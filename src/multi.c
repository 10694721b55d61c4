/*-------------------------------------------------------------------------
 *
 * multi.c
 *		Several resources at once: try_lock_all and lock_all (0.5).
 *
 * All or nothing.  One attempt (multi_attempt) takes the resources' locks
 * (resource.c: CHANGE mode; for shared holdings SHARE mode and the
 * holder's share-row tag, as a shared try_lock does) without waiting, in one canonical order (by
 * hash, then by the resource's bytes) whatever the order given, so two
 * attempts naming the same resources never hold each other's locks in the
 * lock manager crosswise; then, inside one store session, has admit.c read
 * and decide on every resource, with the same request a try_lock of that
 * kind makes (neither fair nor queued: a resource with a live ticket in its
 * fair queue, or under lock-delay, is not free); only when every one is
 * admitted are the holdings written, each by acquire.c's own write
 * (dlock_lease_write: a new holding with a fence drawn under its lock, or
 * a re-entry, as the single-lock rules say).  A refusal of any, or a
 * resource whose lock another transaction has, gives every lock taken
 * back before anything is written: nothing is held while waiting.
 *
 * lock_all waits in wait.c's wait loop, for the resource in the way at
 * the last attempt (MultiArgs.in_way, which the loop watches: when another
 * resource is in the way, the wait moves there, waiters.c): a releasing
 * commit of that resource wakes it, as it wakes a lock(); it then tries
 * them all again.  An exclusive lock_all waits there as a waiting writer,
 * like lock() (writer_wait: new shared holders are kept out of that
 * resource; crossing upgrades are 40P01).  A name held by another kind
 * (a semaphore's permits) is an error, as for one lock.  Each resource is an ordinary holding afterwards: renew,
 * unlock, unlock_all, check and assert_fence treat it like one taken by
 * try_lock.
 *
 * Backend-local: no shared state of its own.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(dlock_try_lock_all);
PG_FUNCTION_INFO_V1(dlock_lock_all);
PG_FUNCTION_INFO_V1(dlock_lock_all_1_0);

/* One resource of the array. */
typedef struct MultiItem
{
	DlockResource res;
	int			given;			/* its place in the array as given */
	int64		fence;			/* once acquired */
} MultiItem;

/* What an attempt at all of them needs. */
typedef struct MultiArgs
{
	MultiItem  *items;			/* in canonical order */
	int			n;
	DlockResourceState *states; /* one per item, reused by each attempt */
	text	   *holder;
	int64		session;		/* in that session (1.1), or 0: leased */
	const DlockCaller *caller;
	const Interval *lease;
	const Interval *lock_delay; /* NULL: none */
	bool		shared;
	bool		waits;			/* lock_all, not try_lock_all */
	DlockResource in_way;		/* refused: the resource in the way */
	/* An exclusive lock_all's "writer waits" tags (queue.c), on one resource */
	bool		writer;			/* held */
	bool		upgrade;		/* ... with the "upgrading" tag */
	DlockResource writer_on;	/* ... for this resource */
} MultiArgs;

/* res_cmp: the order resources are locked in: hash, then bytes. */
static int
res_cmp(const DlockResource *x, const DlockResource *y)
{
	int			xlen = VARSIZE_ANY_EXHDR(x->name);
	int			ylen = VARSIZE_ANY_EXHDR(y->name);
	int			c;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	c = memcmp(VARDATA_ANY(x->name), VARDATA_ANY(y->name), Min(xlen, ylen));
	if (c != 0)
		return c;
	return (xlen > ylen) - (xlen < ylen);
}

/* canonical_cmp: res_cmp of two MultiItems, for qsort. */
static int
canonical_cmp(const void *a, const void *b)
{
	return res_cmp(&((const MultiItem *) a)->res, &((const MultiItem *) b)->res);
}

/*
 * read_resources: the resources argument, validated (22023 for a null or
 * empty array, a null element, a bad resource, a resource named twice),
 * in canonical order.
 */
static MultiItem *
read_resources(FunctionCallInfo fcinfo, int argno, int *n)
{
	ArrayType  *arr;
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	MultiItem  *items;

	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("resources must not be null")));
	arr = PG_GETARG_ARRAYTYPE_P(argno);
	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("resources must be a one-dimensional array")));
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &nelems);
	if (nelems == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("resources must not be empty")));
	items = palloc0(nelems * sizeof(MultiItem));
	for (int i = 0; i < nelems; i++)
	{
		text	   *t;

		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("resources must not contain null elements"),
					 errdetail("Element %d is null.", i + 1)));
		t = DatumGetTextPP(elems[i]);
		dlock_check_resource_text(t);
		dlock_resource_init(&items[i].res, t);
		items[i].given = i;
	}
	qsort(items, nelems, sizeof(MultiItem), canonical_cmp);
	for (int i = 1; i < nelems; i++)
		if (canonical_cmp(&items[i - 1], &items[i]) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("resources must not contain duplicates"),
					 errdetail("Resource \"%s\" is named more than once.",
							   text_to_cstring(items[i].res.name))));
	*n = nelems;
	return items;
}

/* request_of: the admission request for each resource (admit.c). */
static DlockRequest
request_of(const MultiArgs *m)
{
	DlockRequest req = {m->shared ? DLOCK_KIND_SHARED : DLOCK_KIND_EXCLUSIVE,
	m->holder, m->caller, false, false, 0, false};

	req.session = m->session;

	req.waits = m->waits && !m->shared;
	return req;
}

/*
 * writer_end: an exclusive lock_all no longer waits for the resource it
 * registered as a waiting writer on: let go of its tags; readers held off
 * by them look again once the transaction ends (acquired: the holding
 * keeps them out anyway).
 */
static void
writer_end(MultiArgs *m, bool acquired)
{
	if (!m->writer)
		return;
	dlock_writer_wait_end(&m->writer_on, m->holder, m->caller->role,
						  m->upgrade, &m->writer);
	if (!acquired)
		dlock_wake_after_commit(m->writer_on.hash);
}

/*
 * writer_wait: an exclusive lock_all refused by res waits for it as a
 * lock() does: it holds res's "writer waits" tags (queue.c), so new
 * shared holders are kept out of res until it is served or the wait
 * ends (writers do not starve), and, when the holder shares res (an
 * upgrade), its "upgrading" tag, so that two upgrades waiting for each
 * other are a deadlock (40P01) and not a hang.  One resource at a time,
 * the one in its way: when another one is in the way, the tags move
 * there.  Holding nothing while it waits, it keeps no reader of any other
 * resource out, so it closes no cycle a single lock() would not.
 */
static void
writer_wait(MultiArgs *m, const DlockResource *res, bool upgrade)
{
	if (m->writer && m->upgrade == upgrade && res_cmp(&m->writer_on, res) == 0)
		return;
	writer_end(m, false);
	if (!dlock_shares_installed())
		return;
	m->writer_on = *res;
	m->upgrade = upgrade;
	dlock_writer_wait(res, m->holder, m->caller->role, upgrade, &m->writer);
}

/* multi_leave: the wait is over (a DlockLeaveFn). */
static void
multi_leave(const DlockResource *res, void *arg, bool acquired)
{
	writer_end((MultiArgs *) arg, acquired);
}

/*
 * mode_of: the mode of the resources' locks an attempt takes: SHARE for
 * shared holdings (with the holder's share-row tag of each, as a shared
 * try_lock takes them: readers in open transactions never hold each other
 * off, resource.c), else CHANGE.
 */
static DlockLockMode
mode_of(const MultiArgs *m)
{
	return m->shared ? DLOCK_SHARE : DLOCK_CHANGE;
}

/*
 * take: take the item's resource lock without waiting (and, shared, the
 * holder's share-row tag): ATTEMPT_ACQUIRED, or, holding neither, what
 * the wait loop is to wait for: the resource's lock in the attempt's mode,
 * or (the share-row tag) a poll.
 */
static DlockAttempt
take(const MultiArgs *m, const MultiItem *it)
{
	if (!dlock_take_resource(&it->res, mode_of(m)))
		return m->shared ? ATTEMPT_CONTENDED_SHARE : ATTEMPT_CONTENDED;
	if (m->shared && !dlock_share_row_lock(&it->res, m->holder, m->caller->role, DLOCK_CHANGE, false))
	{
		dlock_resource_unlock(&it->res, DLOCK_SHARE);
		return ATTEMPT_CONTENDED_POLL;
	}
	return ATTEMPT_ACQUIRED;
}

/* give_back: give back the locks of the first taken items. */
static void
give_back(const MultiArgs *m, int taken)
{
	for (int i = taken - 1; i >= 0; i--)
	{
		if (m->shared)
			dlock_share_row_unlock(&m->items[i].res, m->holder, m->caller->role, DLOCK_CHANGE);
		dlock_resource_unlock(&m->items[i].res, mode_of(m));
	}
}

/*
 * write_all: every resource was admitted on m->states (verdicts[i]):
 * write each holding.  A row changed since it was read (a superuser's
 * UPDATE by hand) is read and decided again; refused then, the whole call
 * fails (40001) and its transaction rolls back what was written.  Inside
 * the store session, under every resource's lock.
 */
static void
write_all(MultiArgs *m, DlockAdmission *verdicts)
{
	for (int i = 0; i < m->n; i++)
	{
		MultiItem  *it = &m->items[i];
		DlockRequest req = request_of(m);
		DlockAdmission v = verdicts[i];
		int64		drawn = 0;

		while (!dlock_lease_write(&it->res, m->holder, m->caller, m->lease, m->session,
								  m->lock_delay, m->shared, &m->states[i],
								  v.reason, &drawn, &it->fence))
		{
			v = dlock_admit(&it->res, &req, true, &m->states[i]);
			if (!v.admit)
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not lock resource \"%s\": its row changed while it was being locked",
								text_to_cstring(it->res.name)),
						 errhint("Try again.")));
		}
	}
}

/*
 * multi_attempt: one attempt at every resource (a DlockAttemptFn; res is
 * m->in_way, unused here).  Acquired: each item's fence set, every
 * resource's lock kept until the transaction ends, *fence the first
 * fence.  Else nothing changed, every lock taken given back, and
 * m->in_way names the resource in the way.
 */
static DlockAttempt
multi_attempt(const DlockResource *res, void *arg, int64 *fence,
			  TimestampTz *busy_until)
{
	MultiArgs  *m = arg;
	DlockRequest req = request_of(m);
	DlockAdmission *verdicts = palloc(m->n * sizeof(DlockAdmission));
	DlockAttempt took = ATTEMPT_ACQUIRED;
	int			taken;
	int			i;

	for (taken = 0; taken < m->n; taken++)
		if ((took = take(m, &m->items[taken])) != ATTEMPT_ACQUIRED)
			break;
	if (taken < m->n)
	{
		m->in_way = m->items[taken].res;
		give_back(m, taken);
		pfree(verdicts);
		return took;
	}

	dlock_store_begin();
	for (i = 0; i < m->n; i++)
	{
		verdicts[i] = dlock_admit(&m->items[i].res, &req, true, &m->states[i]);
		if (!verdicts[i].admit)
			break;
	}
	if (i < m->n)
	{
		DlockAdmission v = verdicts[i];
		const DlockResource *way = &m->items[i].res;

		*busy_until = v.retry_at;
		if (m->session != 0)
			*busy_until = Min(*busy_until, dlock_session_poll(m->session, m->states[i].now));
		dlock_store_end();
		m->in_way = *way;
		if (m->waits && !m->shared && v.reason != REFUSE_DEADLOCK &&
			v.reason != REFUSE_OTHER_KIND && v.reason != REFUSE_MAX_PERMITS)
			writer_wait(m, way, m->states[i].share_mine != NULL);
		give_back(m, m->n);
		pfree(verdicts);
		/*
		 * Crossing upgrades, another kind of holding by that name: an error,
		 * as for one lock.
		 */
		dlock_admit_raise(way, &req, &m->states[i], v);
		return dlock_attempt_refused(v.reason);
	}
	write_all(m, verdicts);
	dlock_store_end();
	pfree(verdicts);
	*fence = m->items[0].fence;
	return ATTEMPT_ACQUIRED;
}

/*
 * lock_all_common: try_lock_all (wait_ms 0) and lock_all: the fences in
 * the order given, or NULL.
 */
static Datum
lock_all_common(FunctionCallInfo fcinfo, MultiArgs *m, int64 wait_ms)
{
	Datum	   *fences;

	m->states = palloc0(m->n * sizeof(DlockResourceState));
	m->in_way = m->items[0].res;
	m->waits = wait_ms != 0;
	if (dlock_wait_loop(&m->in_way, m->holder, wait_ms, multi_attempt,
						multi_leave, m) == 0)
		PG_RETURN_NULL();
	fences = palloc(m->n * sizeof(Datum));
	for (int i = 0; i < m->n; i++)
		fences[m->items[i].given] = Int64GetDatum(m->items[i].fence);
	PG_RETURN_ARRAYTYPE_P(construct_array(fences, m->n, INT8OID, sizeof(int64),
										  FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/* dlock.try_lock_all(resources, holder, lease, shared, session) */
Datum
dlock_try_lock_all(PG_FUNCTION_ARGS)
{
	MultiArgs	m = {0};
	DlockCaller caller;
	Interval   *lease;

	m.items = read_resources(fcinfo, 0, &m.n);
	m.holder = dlock_session_holder_arg(fcinfo, 1, 4, dlock_check_holder);
	m.lease = lease = dlock_check_lease(fcinfo, 2);
	m.shared = dlock_check_shared(fcinfo, 3);
	m.lock_delay = dlock_lock_delay_of(fcinfo, PG_NARGS(),
									   dlock_check_lock_delay(fcinfo, PG_NARGS()),
									   m.shared);	/* the GUC */
	dlock_check_writable("dlock.try_lock_all()");
	caller = dlock_caller();
	m.caller = &caller;
	m.session = dlock_session_call(fcinfo, 4, 2, &caller, false, &m.holder, &lease);
	m.lease = lease;
	return lock_all_common(fcinfo, &m, 0);
}

/*
 * lock_all_call: dlock.lock_all(); shared and wait at the positions given.
 * The 0.5 SQL has wait last; 1.0's has it right after lease, as lock()
 * does.  Each SQL version keeps its own C symbol, so a new library runs
 * under the old SQL.
 */
static Datum
lock_all_call(FunctionCallInfo fcinfo, int shared_argno, int wait_argno,
			  int session_argno)
{
	MultiArgs	m = {0};
	DlockCaller caller;
	Interval   *lease;
	int64		wait_ms = 0;

	m.items = read_resources(fcinfo, 0, &m.n);
	m.holder = session_argno < 0 ? dlock_check_holder(fcinfo, 1) :
		dlock_session_holder_arg(fcinfo, 1, session_argno, dlock_check_holder);
	m.lease = lease = dlock_check_lease(fcinfo, 2);
	if (wait_argno < shared_argno)
		wait_ms = dlock_check_wait_ms(fcinfo, wait_argno);
	m.shared = dlock_check_shared(fcinfo, shared_argno);
	if (wait_argno > shared_argno)
		wait_ms = dlock_check_wait_ms(fcinfo, wait_argno);
	m.lock_delay = dlock_lock_delay_of(fcinfo, PG_NARGS(),
									   dlock_check_lock_delay(fcinfo, PG_NARGS()),
									   m.shared);	/* the GUC */
	dlock_check_writable("dlock.lock_all()");
	caller = dlock_caller();
	m.caller = &caller;
	if (session_argno >= 0)
		m.session = dlock_session_call(fcinfo, session_argno, 2, &caller,
									   wait_ms != 0, &m.holder, &lease);
	m.lease = lease;
	return lock_all_common(fcinfo, &m, wait_ms);
}

/* dlock.lock_all(resources, holder, lease, wait, shared, session): 1.0, 1.1 */
Datum
dlock_lock_all_1_0(PG_FUNCTION_ARGS)
{
	return lock_all_call(fcinfo, 4, 3, 5);
}

/* dlock.lock_all(resources, holder, lease, shared, wait): 0.5 */
Datum
dlock_lock_all(PG_FUNCTION_ARGS)
{
	return lock_all_call(fcinfo, 3, 4, -1);
}
