/*-------------------------------------------------------------------------
 *
 * listeners.c
 *		Who listens on dlock's channels, so that an event nobody listens
 *		for is not handed to NOTIFY.
 *
 * NOTIFY serialises the commits of every notifying transaction of the
 * cluster: PreCommit_Notify takes a heavyweight lock on "database 0" and
 * holds it until the transaction's locks are released.  Every release
 * queues an event (events.c), so at 8 clients releases committed one at a
 * time, waiting on that lock ("Lock: object") about a third of the time.
 * dlock's own waiters are woken through shared memory (waiters.c); NOTIFY
 * is needed only by sessions that LISTEN on a resource's channel (the
 * CLI, applications, dlock observe).  With shared memory (only with
 * shared_preload_libraries, so every backend of the cluster runs this
 * file's utility hook) dlock knows of every such LISTEN:
 *
 *	- counts[bucket]: the (backend, channel) pairs listening on a channel
 *	  named "dlock_..." whose hash falls in the bucket.  A pair is counted
 *	  when its LISTEN statement runs (before it takes effect at commit) and
 *	  stays counted until an UNLISTEN of it, UNLISTEN * or DISCARD ALL
 *	  commits, or the backend exits.  A LISTEN that rolls back stays
 *	  counted (an over-count costs only a NOTIFY); what is counted is a
 *	  superset of what PostgreSQL delivers to.  Each backend remembers the
 *	  channels it counted (my_channels) and its UNLISTENs not yet committed
 *	  (pending, dropped with an aborting subtransaction as PostgreSQL drops
 *	  them).
 *	- deciding[pgprocno]: odd from the moment a backend decides, at
 *	  PRE_COMMIT, which events to send until its locks are released after
 *	  its commit or abort (dlock_listeners_done).
 *
 * A commit hands an event to NOTIFY only if its channel's bucket counts a
 * listener.  The race this must not lose: a session LISTENs, looks at the
 * resource (busy) and waits for the event.  A release that decided before
 * the LISTEN was counted sends nothing, and could become visible only
 * after the look.  So a LISTEN, once counted, waits for every backend
 * that was deciding at that moment to release its locks: then either a
 * release decided after the count (and sends), or it is visible and its
 * resource lock free when the LISTEN returns.  Both sides write (count,
 * parity) with a full barrier before they read the other's (Dekker), so
 * at least one sees the other.  The wait is as long as a commit.
 *
 * Without shared memory (not preloaded) every event is sent, as before.
 *
 * Locking: none; counts and deciding are atomics.  A backend writes only
 * its own deciding slot.  my_channels lives in TopMemoryContext, pending
 * in TopTransactionContext.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/memutils.h"

#define NBUCKETS 4096

/* The prefix of every channel of ours (dlock.channel()). */
#define CHANNEL_PREFIX "dlock_"

typedef struct ListenShared
{
	pg_atomic_uint32 counts[NBUCKETS];
	int			nprocs;
	pg_atomic_uint64 deciding[FLEXIBLE_ARRAY_MEMBER];
} ListenShared;

/* A LISTEN or UNLISTEN (channel NULL: all) of the current transaction. */
typedef struct PendingAction
{
	bool		listen;
	char	   *channel;
	SubTransactionId subxid;
} PendingAction;

static ListenShared *shared = NULL;
static ProcessUtility_hook_type prev_utility_hook = NULL;
static List *my_channels = NIL; /* char *, counted by this backend */
static List *pending = NIL;		/* PendingAction *, in this transaction */
static bool deciding = false;	/* my deciding slot is odd */
static bool exit_registered = false;

/* shared_size: bytes of shared memory needed. */
static Size
shared_size(int nprocs)
{
	return add_size(offsetof(ListenShared, deciding),
					mul_size(nprocs, sizeof(pg_atomic_uint64)));
}

static int
procs_needed(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS;
}

/* dlock_listeners_shmem_size: for waiters.c's shmem request. */
Size
dlock_listeners_shmem_size(void)
{
	return shared_size(procs_needed());
}

/* dlock_listeners_shmem_startup: create or attach (AddinShmemInitLock held). */
void
dlock_listeners_shmem_startup(void)
{
	bool		found;

	shared = ShmemInitStruct("dlock listeners", shared_size(procs_needed()), &found);
	if (!found)
	{
		for (int i = 0; i < NBUCKETS; i++)
			pg_atomic_init_u32(&shared->counts[i], 0);
		shared->nprocs = procs_needed();
		for (int i = 0; i < shared->nprocs; i++)
			pg_atomic_init_u64(&shared->deciding[i], 0);
	}
}

static bool
ours(const char *channel)
{
	return channel != NULL &&
		strncmp(channel, CHANNEL_PREFIX, strlen(CHANNEL_PREFIX)) == 0;
}

static pg_atomic_uint32 *
bucket(const char *channel)
{
	return &shared->counts[hash_bytes((const unsigned char *) channel,
									  strlen(channel)) % NBUCKETS];
}

static pg_atomic_uint64 *
my_slot(void)
{
	if (shared == NULL || MyProc == NULL || DLOCK_PROC_NUMBER(MyProc) >= shared->nprocs)
		return NULL;
	return &shared->deciding[DLOCK_PROC_NUMBER(MyProc)];
}

/*
 * dlock_listeners_decide: called at PRE_COMMIT before the first
 * dlock_listened() of the transaction: marks this backend deciding.
 */
void
dlock_listeners_decide(void)
{
	pg_atomic_uint64 *slot = my_slot();

	if (slot == NULL || deciding)
		return;
	pg_atomic_fetch_add_u64(slot, 1);	/* odd; a full barrier */
	deciding = true;
}

/*
 * dlock_listened: might a backend listen on channel?  True without shared
 * memory, or if this backend could not mark itself deciding.
 */
bool
dlock_listened(const char *channel)
{
	if (!deciding)
		return true;
	return pg_atomic_read_u32(bucket(channel)) > 0;
}

/*
 * dlock_listeners_done: this backend's locks are released (commit or
 * abort): it no longer holds up a LISTEN.
 */
void
dlock_listeners_done(void)
{
	if (!deciding)
		return;
	pg_atomic_fetch_add_u64(my_slot(), 1);	/* even */
	deciding = false;
}

/*
 * wait_for_deciders: wait until every backend that is deciding now has
 * released its locks.  Called after counting a LISTEN.
 */
static void
wait_for_deciders(void)
{
	int			me = MyProc ? DLOCK_PROC_NUMBER(MyProc) : -1;

	for (int i = 0; i < shared->nprocs; i++)
	{
		uint64		seen;

		if (i == me)
			continue;
		seen = pg_atomic_read_u64(&shared->deciding[i]);
		while ((seen & 1) && pg_atomic_read_u64(&shared->deciding[i]) == seen)
		{
			CHECK_FOR_INTERRUPTS();
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 1L, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
}

/* find: the element of channels (char *) equal to channel, or NULL. */
static char *
find(List *channels, const char *channel)
{
	ListCell   *lc;

	foreach(lc, channels)
		if (strcmp(lfirst(lc), channel) == 0)
			return lfirst(lc);
	return NULL;
}

/* uncount_all: at exit (the backend listens to nothing any more). */
static void
uncount_all(void)
{
	ListCell   *lc;

	foreach(lc, my_channels)
		pg_atomic_fetch_sub_u32(bucket(lfirst(lc)), 1);
	list_free_deep(my_channels);
	my_channels = NIL;
}

static void
listeners_exit(int code, Datum arg)
{
	if (shared == NULL)
		return;
	uncount_all();
	dlock_listeners_done();
}

/* remember: an action of this transaction, for dlock_listeners_commit(). */
static void
remember(bool listen, const char *channel)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	PendingAction *a = palloc(sizeof(PendingAction));

	a->listen = listen;
	a->channel = channel ? pstrdup(channel) : NULL;
	a->subxid = GetCurrentSubTransactionId();
	pending = lappend(pending, a);
	MemoryContextSwitchTo(old);
}

/* on_listen: count channel for this backend, then wait out the deciders. */
static void
on_listen(const char *channel)
{
	MemoryContext old;

	remember(true, channel);
	if (find(my_channels, channel))
		return;
	if (!exit_registered)
	{
		before_shmem_exit(listeners_exit, (Datum) 0);
		exit_registered = true;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	my_channels = lappend(my_channels, pstrdup(channel));
	MemoryContextSwitchTo(old);
	pg_atomic_fetch_add_u32(bucket(channel), 1);	/* a full barrier */
	wait_for_deciders();
}

/*
 * dlock_listeners_commit: the transaction committed, and its LISTENs and
 * UNLISTENs took effect in the order they ran (as PostgreSQL applies
 * them): uncount what it no longer listens to.  Every LISTEN was counted
 * when it ran, so what remains is a subset of my_channels.
 */
void
dlock_listeners_commit(void)
{
	List	   *keep;
	ListCell   *lc;

	if (pending == NIL)
		return;
	keep = list_copy(my_channels);
	foreach(lc, pending)
	{
		PendingAction *a = lfirst(lc);
		char	   *c = a->channel ? find(my_channels, a->channel) : NULL;

		if (a->listen)
		{
			if (c)				/* always: a LISTEN is counted when it runs */
				keep = list_append_unique_ptr(keep, c);
		}
		else if (a->channel == NULL)
			keep = NIL;
		else if (c)
			keep = list_delete_ptr(keep, c);
	}
	foreach(lc, my_channels)
	{
		char	   *c = lfirst(lc);

		if (!list_member_ptr(keep, c))
		{
			pg_atomic_fetch_sub_u32(bucket(c), 1);
			my_channels = foreach_delete_current(my_channels, lc);
			pfree(c);
		}
	}
	list_free(keep);
	pending = NIL;
}

/* dlock_listeners_abort: the actions of an aborted transaction vanish. */
void
dlock_listeners_abort(void)
{
	pending = NIL;
}

/*
 * dlock_listeners_subxact: the actions of an aborted subtransaction vanish
 * (as AtSubAbort_Notify drops them; its LISTENs stay counted); those of a
 * committed one pass to the parent.
 */
void
dlock_listeners_subxact(bool commit, SubTransactionId mySubid,
						SubTransactionId parentSubid)
{
	pending = dlock_subxact_items(pending, offsetof(PendingAction, subxid),
								  commit, mySubid, parentSubid);
}

/* The utility hook: see LISTEN, UNLISTEN and DISCARD ALL. */
static void
listeners_utility(PlannedStmt *pstmt, const char *queryString,
				  bool readOnlyTree, ProcessUtilityContext context,
				  ParamListInfo params, QueryEnvironment *queryEnv,
				  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (shared != NULL && IsA(stmt, ListenStmt) &&
		ours(((ListenStmt *) stmt)->conditionname))
		on_listen(((ListenStmt *) stmt)->conditionname);

	if (prev_utility_hook)
		prev_utility_hook(pstmt, queryString, readOnlyTree, context, params,
						  queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
								params, queryEnv, dest, qc);

	/* After it ran: one that failed left nothing to remember. */
	if (shared == NULL || my_channels == NIL)
		return;
	if (IsA(stmt, UnlistenStmt))
		remember(false, ((UnlistenStmt *) stmt)->conditionname);
	else if (IsA(stmt, DiscardStmt) &&
			 ((DiscardStmt *) stmt)->target == DISCARD_ALL)
		remember(false, NULL);
}

/* dlock_listeners_init: install the utility hook (when preloaded). */
void
dlock_listeners_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = listeners_utility;
}
