/*-------------------------------------------------------------------------
 *
 * listeners.c
 *		Who listens on dlock's channels, so that an event nobody listens
 *		for is not handed to NOTIFY.
 *
 * NOTIFY serialises the commits of every notifying transaction of the
 * cluster.  dlock's own waiters are woken through shared memory
 * (waiters.c); NOTIFY is needed only by sessions that LISTEN on a
 * resource's channel.  With shared memory this file's utility hook counts
 * every such LISTEN (counts[bucket]), and a commit hands an event to
 * NOTIFY only if its channel's bucket counts a listener.  A LISTEN, once
 * counted, waits for every backend that was deciding not to send an event
 * of its channel (deciding[pgprocno]), so no event is lost between a
 * LISTEN and the look that follows it.  The race and its proof:
 * docs/how-it-works.md, "Inside the C extension".  Without shared memory
 * every event is sent.
 *
 * Locking: none; counts and deciding slots are atomics.  A backend writes
 * only its own deciding slot.  my_channels lives in TopMemoryContext,
 * pending in TopTransactionContext.
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

/* Most channels a backend decides on in one commit (see dlock_listened). */
#define DECIDE_MAX 16

/* A key: no channel (0), or a channel's hash (0 taken as 1). */
#define NO_KEY 0

/* The prefix of every channel of ours (dlock.channel()). */
#define CHANNEL_PREFIX "dlock_"

/* A backend's deciding round (docs/how-it-works.md, listeners.c). */
typedef struct DecideSlot
{
	pg_atomic_uint64 seq;		/* odd while deciding */
	pg_atomic_uint32 n;			/* keys published this round */
	pg_atomic_uint32 keys[DECIDE_MAX];
} DecideSlot;

typedef struct ListenShared
{
	pg_atomic_uint32 counts[NBUCKETS];
	int			nprocs;
	DecideSlot	deciding[FLEXIBLE_ARRAY_MEMBER];
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
					mul_size(nprocs, sizeof(DecideSlot)));
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
		{
			pg_atomic_init_u64(&shared->deciding[i].seq, 0);
			pg_atomic_init_u32(&shared->deciding[i].n, 0);
			for (int k = 0; k < DECIDE_MAX; k++)
				pg_atomic_init_u32(&shared->deciding[i].keys[k], NO_KEY);
		}
	}
}

static bool
ours(const char *channel)
{
	return channel != NULL &&
		strncmp(channel, CHANNEL_PREFIX, strlen(CHANNEL_PREFIX)) == 0;
}

static uint32
channel_hash(const char *channel)
{
	return hash_bytes((const unsigned char *) channel, strlen(channel));
}

static pg_atomic_uint32 *
bucket(const char *channel)
{
	return &shared->counts[channel_hash(channel) % NBUCKETS];
}

/* channel_key: the key of a channel in a deciding slot. */
static uint32
channel_key(const char *channel)
{
	uint32		h = channel_hash(channel);

	return h == NO_KEY ? NO_KEY + 1 : h;
}

static DecideSlot *
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
	DecideSlot *slot = my_slot();

	if (slot == NULL || deciding)
		return;
	/* Nobody reads the keys while seq is even. */
	pg_atomic_write_u32(&slot->n, 0);
	pg_atomic_fetch_add_u64(&slot->seq, 1); /* odd; a full barrier */
	deciding = true;
}

/*
 * dlock_listened: might a backend listen on channel?  True without shared
 * memory, if this backend could not mark itself deciding, or once it has
 * decided on DECIDE_MAX channels.  The channel's key is published before
 * its bucket is read; when the event is to be sent, the key is taken back
 * (a LISTEN of that channel gets the notification, it need not wait).
 */
bool
dlock_listened(const char *channel)
{
	DecideSlot *slot = my_slot();
	uint32		k;

	if (!deciding)
		return true;
	k = pg_atomic_read_u32(&slot->n);
	if (k >= DECIDE_MAX)
		return true;
	pg_atomic_write_u32(&slot->keys[k], channel_key(channel));
	pg_atomic_fetch_add_u32(&slot->n, 1);	/* a full barrier */
	if (pg_atomic_read_u32(bucket(channel)) == 0)
		return false;
	pg_atomic_write_u32(&slot->keys[k], NO_KEY);
	return true;
}

/*
 * dlock_listening: does some backend count as listening on channel now?
 * True without shared memory.  Publishes nothing: for a commit that does
 * not decide (it sends the events of channels nobody listens on another
 * way: docs/how-it-works.md, listeners.c).
 */
bool
dlock_listening(const char *channel)
{
	if (shared == NULL)
		return true;
	pg_memory_barrier();
	return pg_atomic_read_u32(bucket(channel)) != 0;
}

/*
 * listeners_done: this backend's locks are released (commit or abort):
 * it no longer holds up a LISTEN.
 */
static void
listeners_done(void)
{
	if (!deciding)
		return;
	pg_atomic_fetch_add_u64(&my_slot()->seq, 1);	/* even */
	deciding = false;
}

/*
 * decides_without_sending: did the round seen (odd) of slot d decide, so
 * far, not to send an event of the channel with key?  Keys read after seq
 * moved on may be another round's: a wrong answer then only makes the
 * caller look at seq again, which has moved on.
 */
static bool
decides_without_sending(DecideSlot *d, uint32 key)
{
	uint32		n;

	pg_read_barrier();			/* seq before n */
	n = Min(pg_atomic_read_u32(&d->n), DECIDE_MAX);
	pg_read_barrier();			/* n before the keys it counts */
	for (uint32 k = 0; k < n; k++)
		if (pg_atomic_read_u32(&d->keys[k]) == key)
			return true;
	return false;
}

/*
 * wait_for_deciders: wait until every backend that is deciding now, and
 * decided not to send an event of channel, has released its locks.
 * Called after counting a LISTEN of channel.
 */
static void
wait_for_deciders(const char *channel)
{
	int			me = MyProc ? DLOCK_PROC_NUMBER(MyProc) : -1;
	uint32		key = channel_key(channel);

	for (int i = 0; i < shared->nprocs; i++)
	{
		DecideSlot *d = &shared->deciding[i];
		uint64		seen;

		if (i == me)
			continue;
		seen = pg_atomic_read_u64(&d->seq);
		if (!(seen & 1) || !decides_without_sending(d, key))
			continue;
		while (pg_atomic_read_u64(&d->seq) == seen)
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
	listeners_done();
}

/* remember: an action of this transaction, for listeners_commit(). */
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
	wait_for_deciders(channel);
}

/*
 * listeners_commit: the transaction committed, and its LISTENs and
 * UNLISTENs took effect in the order they ran (as PostgreSQL applies
 * them): uncount what it no longer listens to.  Every LISTEN was counted
 * when it ran, so what remains is a subset of my_channels.
 */
static void
listeners_commit(void)
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

/*
 * listeners_end: a commit applies the transaction's actions; with an
 * abort, or a PREPARE (committed elsewhere, later), they vanish.
 */
static void
listeners_end(DlockXactEnd how)
{
	if (how == DLOCK_XACT_COMMIT)
		listeners_commit();
	else
		pending = NIL;
}

/* listeners_after_locks: the transaction's locks are released. */
static void
listeners_after_locks(bool commit)
{
	listeners_done();
}

/*
 * listeners_subxact: the actions of an aborted subtransaction vanish
 * (as AtSubAbort_Notify drops them; its LISTENs stay counted); those of a
 * committed one pass to the parent.
 */
static void
listeners_subxact(bool commit, SubTransactionId mySubid,
				  SubTransactionId parentSubid)
{
	pending = dlock_subxact_items(pending, offsetof(PendingAction, subxid),
								  commit, mySubid, parentSubid);
}

/* What listeners.c does when a transaction ends (xact.c calls them). */
const DlockXactHooks dlock_listeners_xact_hooks = {
	.end = listeners_end,
	.after_locks = listeners_after_locks,
	.subxact = listeners_subxact,
};

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
