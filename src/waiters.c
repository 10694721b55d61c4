/*-------------------------------------------------------------------------
 *
 * waiters.c
 *		Shared memory for sleeping waiters and statistics: wake-on-commit
 *		for dlock.lock(), view dlock.waiters and dlock.stats().
 *
 * Present only with shared_preload_libraries = 'dlock'.  Each backend has
 * one waiter slot (by its pgprocno).  A transaction that frees a resource
 * wakes, once its locks are released, the first waiter in line that has
 * not been woken yet: one release wakes one waiter (one per permit freed
 * for a semaphore).  Without shared memory waiters poll at
 * dlock.poll_interval.  It also holds the reaper's hint, next_expiry.
 * More: docs/how-it-works.md, "Inside the C extension".
 *
 * Locking: DlockShared.lock (an LWLock of tranche "dlock") protects
 * next_seq and every field of every slot; a slot's names are written by
 * its backend while not in use.  Statistics and next_expiry are atomics.
 * The wakeups a transaction sends are queued in sends.c and sent from
 * here once its locks are released.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(dlock_waiters);
PG_FUNCTION_INFO_V1(dlock_stats);
PG_FUNCTION_INFO_V1(dlock_waiters_0_2);

/* Safety net for a lost wakeup when waits are woken by commits. */
#define DLOCK_WAKE_SAFETY_MS 5000

/*
 * A waiter slot: what a wakeup scans (every slot, under the exclusive
 * lock), kept small; the names, which only the views read, are apart.
 */
typedef struct DlockWaiter
{
	bool		in_use;			/* this backend is waiting */
	bool		woken;			/* a wakeup was sent and not yet consumed */
	int			pid;
	Oid			dbid;
	Oid			owner;			/* the waiting role */
	uint64		hash;			/* resource hash, as in the locktag */
	uint64		seq;			/* arrival order */
	int64		ticket;			/* fair waiters: the queue ticket; else 0 */
	TimestampTz since;
	TimestampTz deadline;		/* DT_NOEND: no limit */
} DlockWaiter;

/* The names of a slot's wait, for the views (same index). */
typedef struct DlockWaiterNames
{
	char		resource[DLOCK_MAX_RESOURCE_LEN + 1];
	char		holder[DLOCK_MAX_HOLDER_LEN + 1];
} DlockWaiterNames;

typedef struct DlockShared
{
	LWLock	   *lock;
	uint64		next_seq;
	pg_atomic_uint64 stats[DLOCK_NUM_STATS];
	pg_atomic_uint64 next_expiry;	/* TimestampTz; PG_INT64_MAX: none */
	int			nslots;
	DlockWaiter slots[FLEXIBLE_ARRAY_MEMBER];
	/* then, MAXALIGNed, DlockWaiterNames names[nslots] (slot_names()) */
} DlockShared;

static DlockShared *shared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static bool exit_hook_registered = false;

/* This backend's queue ticket and role, copied into its slot (queue.c). */
static int64 my_ticket = 0;
static Oid	my_owner = InvalidOid;

/* slots_size: bytes up to the end of the slots, MAXALIGNed. */
static Size
slots_size(int nslots)
{
	return MAXALIGN(add_size(offsetof(DlockShared, slots),
							 mul_size(nslots, sizeof(DlockWaiter))));
}

/* shared_size: bytes of shared memory needed. */
static Size
shared_size(void)
{
	return add_size(slots_size(MaxBackends),
					mul_size(MaxBackends, sizeof(DlockWaiterNames)));
}

/* slot_names: the names of slot i. */
static DlockWaiterNames *
slot_names(int i)
{
	return (DlockWaiterNames *) ((char *) shared + slots_size(shared->nslots)) + i;
}

/* dlock_shmem_request: reserve our shared memory and LWLock. */
static void
dlock_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
	RequestAddinShmemSpace(dlock_listeners_shmem_size());
	RequestNamedLWLockTranche("dlock", 1);
}

/* dlock_shmem_startup: create or attach to our shared memory. */
static void
dlock_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("dlock", shared_size(), &found);
	if (!found)
	{
		int			i;

		shared->lock = &(GetNamedLWLockTranche("dlock"))->lock;
		shared->next_seq = 1;
		for (i = 0; i < DLOCK_NUM_STATS; i++)
			pg_atomic_init_u64(&shared->stats[i], 0);
		pg_atomic_init_u64(&shared->next_expiry, 0);
		shared->nslots = MaxBackends;
		memset(shared->slots, 0, shared_size() - offsetof(DlockShared, slots));
	}
	dlock_listeners_shmem_startup();
	LWLockRelease(AddinShmemInitLock);
}

/* dlock_shmem_init: install the hooks when preloaded. */
void
dlock_shmem_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = dlock_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = dlock_shmem_startup;
}

/*
 * A transaction's counts of what it changed (acquisitions, re-entries,
 * releases, renewals, expiries, breaks), not yet in shared memory: they
 * count once it commits or is prepared, so a statement that fails counts
 * nothing.  One entry a (statistic, subtransaction), in
 * TopTransactionContext; an aborted subtransaction's are dropped.  Waits,
 * wakeups, timeouts and lost renewals count at once: they happened.
 */
typedef struct PendingCount
{
	DlockStat	stat;
	SubTransactionId subxid;
	uint64		n;
} PendingCount;

static List *pending_counts = NIL;

/* counted_at_commit: whether stat counts changes that may roll back. */
static bool
counted_at_commit(DlockStat stat)
{
	return stat == DLOCK_STAT_ACQUIRED || stat == DLOCK_STAT_REENTERED ||
		stat == DLOCK_STAT_RELEASED || stat == DLOCK_STAT_EXPIRED ||
		stat == DLOCK_STAT_BROKEN || stat == DLOCK_STAT_RENEWED;
}

/* dlock_count: bump a statistic (no-op without shared memory). */
void
dlock_count(DlockStat stat)
{
	SubTransactionId subxid;
	ListCell   *lc;
	PendingCount *p;
	MemoryContext old;

	if (shared == NULL)
		return;
	if (!counted_at_commit(stat) || !IsTransactionState())
	{
		pg_atomic_fetch_add_u64(&shared->stats[stat], 1);
		return;
	}
	subxid = GetCurrentSubTransactionId();
	foreach(lc, pending_counts)
	{
		p = lfirst(lc);
		if (p->stat == stat && p->subxid == subxid)
		{
			p->n++;
			return;
		}
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	p = palloc(sizeof(*p));
	p->stat = stat;
	p->subxid = subxid;
	p->n = 1;
	pending_counts = lappend(pending_counts, p);
	MemoryContextSwitchTo(old);
}

/* counts_end: the transaction's counts into shared memory if keep. */
static void
counts_end(bool keep)
{
	ListCell   *lc;

	foreach(lc, pending_counts)
	{
		PendingCount *p = lfirst(lc);

		if (keep && shared)
			pg_atomic_fetch_add_u64(&shared->stats[p->stat], p->n);
	}
	pending_counts = NIL;		/* freed with TopTransactionContext */
}

/*
 * dlock_expiry_hint: a committed lease ends at expires; lower the reaper's
 * hint to it if it is earlier.
 */
void
dlock_expiry_hint(TimestampTz expires)
{
	uint64		cur;

	if (shared == NULL)
		return;
	cur = pg_atomic_read_u64(&shared->next_expiry);
	while ((int64) cur > expires)
	{
		if (pg_atomic_compare_exchange_u64(&shared->next_expiry, &cur,
										   (uint64) expires))
			break;
	}
}

/* dlock_reap_due: may a lease have expired by now? (true without hint) */
bool
dlock_reap_due(TimestampTz now)
{
	if (shared == NULL)
		return true;
	return (int64) pg_atomic_read_u64(&shared->next_expiry) <= now;
}

/*
 * dlock_reap_started: the reaper is about to scan; from now on only
 * acquisitions committed after this, and the scan itself, set the hint.
 */
void
dlock_reap_started(void)
{
	if (shared != NULL)
		pg_atomic_write_u64(&shared->next_expiry, (uint64) PG_INT64_MAX);
}

/* my_slot: this backend's waiter slot, or NULL. */
static DlockWaiter *
my_slot(void)
{
	if (shared == NULL || MyProc == NULL || DLOCK_PROC_NUMBER(MyProc) >= shared->nslots)
		return NULL;
	return &shared->slots[DLOCK_PROC_NUMBER(MyProc)];
}

/* first_in_line: does waiter a come before waiter b? */
static bool
first_in_line(const DlockWaiter *a, const DlockWaiter *b)
{
	if ((a->ticket != 0) != (b->ticket != 0))
		return a->ticket != 0;
	if (a->ticket != 0)
		return a->ticket < b->ticket;
	return a->seq < b->seq;
}

/*
 * wake_locked: wake the first unwoken waiter of hash; caller holds lock.
 * False if there was none.
 */
static bool
wake_locked(Oid dbid, uint64 hash)
{
	DlockWaiter *best = NULL;
	int			best_procno = -1;
	int			i;

	for (i = 0; i < shared->nslots; i++)
	{
		DlockWaiter *w = &shared->slots[i];

		if (w->in_use && !w->woken && w->hash == hash && w->dbid == dbid &&
			(best == NULL || first_in_line(w, best)))
		{
			best = w;
			best_procno = i;
		}
	}
	if (best)
	{
		best->woken = true;
		SetLatch(&ProcGlobal->allProcs[best_procno].procLatch);
		pg_atomic_fetch_add_u64(&shared->stats[DLOCK_STAT_WAKEUPS], 1);
	}
	return best != NULL;
}

/*
 * wake_queue: the resource with this hash may be free: wake its first n
 * waiters (fewer if there are fewer).  Called after the freeing
 * transaction's locks are gone.
 */
static void
wake_queue(uint64 hash, int32 n)
{
	if (shared == NULL || !OidIsValid(MyDatabaseId))
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int32 i = 0; i < n && wake_locked(MyDatabaseId, hash); i++)
		;
	LWLockRelease(shared->lock);
}

/*
 * leave_slot: clear our slot; if we had been woken, pass the wakeup on
 * (we leave without using it).  Safe to call when not waiting.
 */
static void
leave_slot(bool acquired)
{
	DlockWaiter *w = my_slot();

	my_ticket = 0;
	my_owner = InvalidOid;
	if (w == NULL || !w->in_use)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	w->in_use = false;
	if ((w->woken || w->ticket != 0) && !acquired)
		wake_locked(w->dbid, w->hash);
	w->woken = false;
	w->ticket = 0;
	LWLockRelease(shared->lock);
}

/* waiter_exit: a backend dying while waiting (pg_terminate_backend). */
static void
waiter_exit(int code, Datum arg)
{
	leave_slot(false);
}

/*
 * dlock_wait_begin: this backend starts waiting for res.  Always counted;
 * registered for wakeups when shared memory is there.
 */
void
dlock_wait_begin(const DlockResource *res, text *holder, TimestampTz deadline)
{
	DlockWaiter *w = my_slot();
	DlockWaiterNames *names;

	dlock_count(DLOCK_STAT_WAITS);
	if (w == NULL)
		return;
	if (!exit_hook_registered)
	{
		before_shmem_exit(waiter_exit, (Datum) 0);
		exit_hook_registered = true;
	}

	/*
	 * The names first, outside the lock: the slot is not in use, so nobody
	 * reads them until the locked section below publishes it.
	 */
	names = slot_names(DLOCK_PROC_NUMBER(MyProc));
	text_to_cstring_buffer(res->name, names->resource, sizeof(names->resource));
	if (holder)
		text_to_cstring_buffer(holder, names->holder, sizeof(names->holder));
	else
		names->holder[0] = '\0';
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	w->pid = MyProcPid;
	w->dbid = MyDatabaseId;
	w->hash = res->hash;
	w->seq = shared->next_seq++;
	w->since = GetCurrentTimestamp();
	w->deadline = deadline;
	w->ticket = my_ticket;
	w->owner = my_owner;
	w->woken = false;
	w->in_use = true;
	LWLockRelease(shared->lock);
}

/*
 * dlock_wait_set_ticket: this backend's fair-queue ticket (0: none) and
 * role, for wakeups and the views; before or during its wait.
 */
void
dlock_wait_set_ticket(int64 ticket, Oid owner)
{
	DlockWaiter *w = my_slot();

	my_ticket = ticket;
	my_owner = owner;
	if (w == NULL || !w->in_use)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	w->ticket = ticket;
	w->owner = owner;
	LWLockRelease(shared->lock);
}

/*
 * dlock_wait_move: this backend, waiting, now waits for res instead (an
 * attempt at several resources, multi.c, found another one in its way).
 * It leaves the old resource's line as leave_slot does, and wakes the
 * next waiter there: the old resource may be free now (that is why
 * another is in the way), and a wakeup it had from there, already used
 * by its look, must not be lost to the waiters behind it.  It queues for
 * res as one arriving now.  Not counted as a new wait.
 */
void
dlock_wait_move(const DlockResource *res, text *holder)
{
	DlockWaiter *w = my_slot();
	DlockWaiterNames *names;

	if (w == NULL || !w->in_use)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	w->in_use = false;
	w->woken = false;
	wake_locked(w->dbid, w->hash);
	LWLockRelease(shared->lock);

	/* Not in use: nobody reads the names until the slot is published. */
	names = slot_names(DLOCK_PROC_NUMBER(MyProc));
	text_to_cstring_buffer(res->name, names->resource, sizeof(names->resource));
	if (holder)
		text_to_cstring_buffer(holder, names->holder, sizeof(names->holder));
	else
		names->holder[0] = '\0';
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	w->hash = res->hash;
	w->seq = shared->next_seq++;
	w->in_use = true;
	LWLockRelease(shared->lock);
}

/* dlock_wait_end: this backend stops waiting (acquired or not). */
void
dlock_wait_end(bool acquired)
{
	leave_slot(acquired);
}

/*
 * waiters_end: an abort ends a wait that an error interrupted; a commit
 * that acquired or renewed lowers the reaper's hint to its earliest
 * expiry, one that left events in dlock.outbox to now; a PREPARE (committed later, elsewhere) lets the reaper look soon,
 * for its expiry or for the events it left in dlock.outbox.
 */
static void
waiters_end(DlockXactEnd how)
{
	TimestampTz min_expiry;

	counts_end(how != DLOCK_XACT_ABORT);
	dlock_table_locks_forget();
	switch (how)
	{
		case DLOCK_XACT_ABORT:
			leave_slot(false);
			break;
		case DLOCK_XACT_COMMIT:
			if (dlock_xact_acquired(&min_expiry))
				dlock_expiry_hint(min_expiry);
			if (dlock_xact_outbox_events())
				dlock_expiry_hint(GetCurrentTimestamp());	/* deliver them */
			break;
		case DLOCK_XACT_PREPARE:
			if (dlock_xact_acquired(NULL) || dlock_xact_outbox_events())
				dlock_expiry_hint(GetCurrentTimestamp());
			break;
	}
}

/*
 * waiters_after_locks: the top-level transaction's locks are gone (its
 * changes visible, the resources' locks free): wake one waiter of each
 * resource it released, and of each it acquired if it aborted.
 */
static void
waiters_after_locks(bool commit)
{
	int			nwake;
	const DlockWake *wake = dlock_sends_wakes(&nwake);

	for (int i = 0; i < nwake; i++)
		if (!commit || !wake[i].abort_only)
			wake_queue(wake[i].hash, wake[i].n);
}

/*
 * waiters_subxact: an aborted subtransaction's counts are dropped; a
 * committed one's are added to its parent's, so that the list keeps one
 * entry a statistic and open level (a loop of exception blocks made it
 * one a block, and each count a scan of them all).
 */
static void
waiters_subxact(bool commit, SubTransactionId mySubid,
				SubTransactionId parentSubid)
{
	ListCell   *lc;

	if (!commit)
	{
		dlock_table_locks_forget();
		pending_counts = dlock_subxact_items(pending_counts,
											 offsetof(PendingCount, subxid),
											 false, mySubid, parentSubid);
		return;
	}
	foreach(lc, pending_counts)
	{
		PendingCount *p = lfirst(lc);
		ListCell   *other;

		if (p->subxid != mySubid)
			continue;
		p->subxid = parentSubid;
		foreach(other, pending_counts)
		{
			PendingCount *q = lfirst(other);

			if (q != p && q->stat == p->stat && q->subxid == parentSubid)
			{
				q->n += p->n;
				pending_counts = foreach_delete_current(pending_counts, lc);
				break;
			}
		}
	}
}

/* What waiters.c does when a transaction ends (xact.c calls them). */
const DlockXactHooks dlock_waiters_xact_hooks = {
	.end = waiters_end,
	.after_locks = waiters_after_locks,
	.subxact = waiters_subxact,
};

/*
 * dlock_wait_look: the waiter is about to look at its resource: a wakeup
 * sent before now is used by this look.  It must be consumed before the
 * look, not after: a release that commits while we look would otherwise
 * find us still marked woken, skip us (wake_locked wakes the first unwoken
 * waiter) and wake someone behind us, and we would clear the mark and
 * sleep through it (the head of a fair queue then slept until the safety
 * net, with the resource free).  A wakeup sent after this point sets the
 * mark and our latch again, so the next sleep returns at once.
 */
void
dlock_wait_look(void)
{
	DlockWaiter *w = my_slot();

	if (w && w->in_use && w->woken)
	{
		LWLockAcquire(shared->lock, LW_EXCLUSIVE);
		w->woken = false;
		LWLockRelease(shared->lock);
	}
}

/*
 * dlock_wait_sleep: sleep until woken, timeout_ms passes, or an interrupt
 * (cancel, statement_timeout, termination: CHECK_FOR_INTERRUPTS raises it
 * and the abort path clears the slot).  Without shared memory the sleep is
 * cut to dlock.poll_interval; with it, to a five-second safety net (a
 * release committed by COMMIT PREPARED in another backend wakes nobody).
 */
void
dlock_wait_sleep(long timeout_ms)
{
	DlockWaiter *w = my_slot();
	long		cap = (w && w->in_use) ? DLOCK_WAKE_SAFETY_MS : dlock_poll_interval_ms;

	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Min(timeout_ms, cap), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * waiters_rows: the backends waiting in dlock.lock() and dlock.xact_lock()
 * in this database (empty without shared memory).  Rows are formed by the
 * caller's tuple descriptor, so the 0.1 function's 5 columns take the
 * first five values, the 0.2 one's 7 all of them.
 */
static void
waiters_rows(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_SHARED);
	for (i = 0; i < shared->nslots; i++)
	{
		DlockWaiter *w = &shared->slots[i];
		DlockWaiterNames *names = slot_names(i);
		Datum		values[7];
		bool		nulls[7] = {false, false, false, false, false, false, false};

		if (!w->in_use || w->dbid != MyDatabaseId)
			continue;
		values[0] = Int32GetDatum(w->pid);
		values[1] = CStringGetTextDatum(names->resource);
		values[2] = CStringGetTextDatum(names->holder);
		nulls[2] = (names->holder[0] == '\0');
		values[3] = TimestampTzGetDatum(w->since);
		values[4] = TimestampTzGetDatum(w->deadline);
		nulls[4] = (w->deadline == DT_NOEND);
		values[5] = Int64GetDatum(w->ticket);
		nulls[5] = (w->ticket == 0);
		values[6] = ObjectIdGetDatum(w->owner);
		nulls[6] = !OidIsValid(w->owner);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(shared->lock);
}

/* dlock.waiters_internal(): the 0.1 view's function (5 columns). */
Datum
dlock_waiters(PG_FUNCTION_ARGS)
{
	waiters_rows(fcinfo);
	return (Datum) 0;
}

/* dlock.waiters_internal_0_2(): with ticket and owner (7 columns). */
Datum
dlock_waiters_0_2(PG_FUNCTION_ARGS)
{
	waiters_rows(fcinfo);
	return (Datum) 0;
}

/* dlock.stats(): the counters since the server started. */
Datum
dlock_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[DLOCK_NUM_STATS];
	bool		nulls[DLOCK_NUM_STATS];
	int			i;

	if (shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("dlock statistics are not available"),
				 errhint("Add dlock to shared_preload_libraries and restart the server.")));
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	for (i = 0; i < DLOCK_NUM_STATS; i++)
	{
		values[i] = Int64GetDatum((int64) pg_atomic_read_u64(&shared->stats[i]));
		nulls[i] = false;
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}
