/*-------------------------------------------------------------------------
 *
 * xact.c
 *		What dlock remembers about the current transaction, and what it
 *		does when that transaction ends.
 *
 *	- Durability: a transaction that acquired or renewed commits with at
 *	  least synchronous_commit = on (a stronger setting is kept), whatever
 *	  the session says; one that only released, outside a transaction
 *	  block, and wrote nothing else (no WAL of this backend outside dlock's
 *	  own statements), commits asynchronously (a lost release only keeps
 *	  the resource busy until its lease ends); one that acquired without
 *	  an xid first flushes all WAL so far (flush_before_commit).  The level is set at PRE_COMMIT, as a
 *	  SET LOCAL through the GUC machinery (so a synchronous standby is
 *	  waited for), after every function SET clause and SET LOCAL of the
 *	  transaction is done; the end of the transaction undoes it.
 *	- The transaction's end, for the other areas: each registers its
 *	  DlockXactHooks once per backend (dlock.c, in the order they are
 *	  called: listeners.c, waiters.c, events.c, sends.c, store.c,
 *	  resource.c: the transaction-scoped locks it holds), and this file
 *	  calls them at PRE_COMMIT (once the commit's level is set: events.c
 *	  sends some events through dlock.outbox when the commit waits for a
 *	  synchronous standby),
 *	  PRE_PREPARE, COMMIT / ABORT / PREPARE (before its own state is
 *	  forgotten, so they can ask for it: dlock_xact_acquired), after the
 *	  top-level transaction's locks are released, and at the end of a
 *	  subtransaction.  So this file calls no other file of dlock: events,
 *	  LISTEN bookkeeping, wakeups and the reaper's hint are their files'
 *	  business, and they call down to here, never the other way round.
 *
 * All of it is backend-local and lives in TopTransactionContext.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "nodes/pg_list.h"
#include "replication/syncrep.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

static bool xact_acquired = false;	/* acquired or renewed something */
static bool xact_locked = false;	/* took a transaction-scoped lock */
static TimestampTz xact_min_expiry; /* earliest expiry it set, if so */
static bool xact_async_release = false; /* released outside a block */
static XLogRecPtr own_writes_end = InvalidXLogRecPtr;	/* WAL end after ours */
static bool foreign_writes = false;	/* the transaction wrote WAL not ours */
static bool xact_outbox_events = false;	/* events went to the outbox */

/* The other areas' hooks, in the order they are called. */
#define MAX_HOOKS 8
static const DlockXactHooks *hooks[MAX_HOOKS];
static int	nhooks = 0;

/*
 * dlock_xact_hooks_add: call h's functions at the ends of transactions,
 * after those added before.  Once per backend (_PG_init).
 */
void
dlock_xact_hooks_add(const DlockXactHooks *h)
{
	if (nhooks >= MAX_HOOKS)
		elog(ERROR, "dlock: too many transaction hooks");
	hooks[nhooks++] = h;
}

/*
 * dlock_xact_acquired: did this transaction acquire or renew a lease?  If
 * so, *min_expiry is the earliest expiry it set.  For the hooks' end().
 */
bool
dlock_xact_acquired(TimestampTz *min_expiry)
{
	if (xact_acquired && min_expiry)
		*min_expiry = xact_min_expiry;
	return xact_acquired;
}

/*
 * dlock_xact_outbox_events: did PRE_COMMIT or PRE_PREPARE leave work for
 * the reaper (a hook's pre_commit or pre_prepare said so)?
 */
bool
dlock_xact_outbox_events(void)
{
	return xact_outbox_events;
}

/*
 * dlock_note_acquisition: this transaction acquired or renewed a lease
 * ending at expires: it must commit durably, and once committed the reaper
 * is told of the earliest such expiry.
 */
void
dlock_note_acquisition(TimestampTz expires)
{
	if (!xact_acquired || expires < xact_min_expiry)
		xact_min_expiry = expires;
	xact_acquired = true;
}

/*
 * dlock_note_xact_lock: this transaction took a transaction-scoped lock,
 * which writes no row: its commit flushes the WAL first (flush_before_commit).
 */
void
dlock_note_xact_lock(void)
{
	xact_locked = true;
}

/*
 * dlock_note_release: this transaction released a lock; outside a
 * transaction block that allows an asynchronous commit.
 */
void
dlock_note_release(void)
{
	if (!IsTransactionBlock())
		xact_async_release = true;
}

/*
 * dlock_own_writes_begin / dlock_own_writes_end: around each store session
 * (store.c).  WAL this backend wrote in the transaction outside them is
 * someone else's writes, which must not commit asynchronously because
 * dlock released something in the same transaction.
 */
void
dlock_own_writes_begin(void)
{
	if (XactLastRecEnd != own_writes_end)
		foreign_writes = true;
}

void
dlock_own_writes_end(void)
{
	own_writes_end = XactLastRecEnd;
}

/*
 * set_sync_commit: SET LOCAL synchronous_commit = value, through the GUC
 * machinery so that its assign hook also sets the mode SyncRepWaitForLSN
 * waits in (assigning the C variable alone left a role's or session's
 * "off" or "local" waiting for no standby).  Called at PRE_COMMIT of the
 * top-level transaction (GUC nest level 1): the value is in force for the
 * commit record (RecordTransactionCommit comes later) and AtEOXact_GUC
 * puts the session's value back after it.  synchronous_commit is
 * PGC_USERSET and not GUC_NOT_WHILE_SEC_REST, so neither the caller's role
 * nor a security-restricted context can refuse it.
 */
static void
set_sync_commit(const char *value)
{
	(void) set_config_option("synchronous_commit", value,
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
}

/*
 * flush_before_commit: an acquisition in a transaction whose commit
 * record is not flushed (a transaction-scoped lock, which writes no row:
 * without an xid there is no commit record; with one but no WAL of its
 * own, txid_current() say, PostgreSQL writes the record and does not
 * flush it) flushes nothing, not even the release it was granted on,
 * which another session may have committed asynchronously (a lone release
 * is, see above).  A crash after its commit was acknowledged would bring
 * the old holding back, behind the newer fence (098, the chaos model;
 * helper-78 with txid_current()).  So all WAL inserted so far is flushed
 * first, and waited for by the synchronous standbys as a commit record
 * would be.
 */
static void
flush_before_commit(void)
{
	XLogRecPtr	upto;

	/*
	 * A commit record after WAL of its own is flushed (and waited for) at
	 * synchronous_commit = on, which force_sync_commit has set.
	 */
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()) && XactLastRecEnd != InvalidXLogRecPtr)
		return;
	upto = GetXLogInsertRecPtr();
	/*
	 * At the start of a page the insert position lies past the page's
	 * header, which is not written yet ("xlog flush request ... is not
	 * satisfied", 024 on 17 and 18): the WAL ends at the page's start.
	 */
	if (XLogSegmentOffset(upto, wal_segment_size) == SizeOfXLogLongPHD)
		upto -= SizeOfXLogLongPHD;
	else if (upto % XLOG_BLCKSZ == SizeOfXLogShortPHD)
		upto -= SizeOfXLogShortPHD;
	XLogFlush(upto);
	SyncRepWaitForLSN(upto, false);
}

/*
 * force_sync_commit: at PRE_COMMIT, pick the synchronous_commit level the
 * commit record must be written with: at least "on" (remote_flush) after
 * an acquisition, a renewal or a transaction-scoped lock, a stronger one
 * such as remote_apply kept; "off" for a transaction that only released
 * outside a block.  Then flush_before_commit for a transaction without a
 * commit record.  (A transaction-scoped lock in a transaction that wrote
 * rows, a break_lock say, left it to a commit record written with the
 * session's "off": a crash took the release with it.)
 */
static void
force_sync_commit(void)
{
	if (xact_acquired || xact_locked)
	{
		if (synchronous_commit < SYNCHRONOUS_COMMIT_REMOTE_FLUSH)
			set_sync_commit("on");
		flush_before_commit();
	}
	else if (xact_async_release && !foreign_writes &&
			 XactLastRecEnd == own_writes_end &&
			 synchronous_commit > SYNCHRONOUS_COMMIT_OFF)
		set_sync_commit("off");
}

/* reset_state: forget everything at transaction end. */
static void
reset_state(void)
{
	xact_acquired = false;
	xact_locked = false;
	xact_async_release = false;
	own_writes_end = InvalidXLogRecPtr;
	foreign_writes = false;
	xact_outbox_events = false;
}

/* call_end: the hooks' end(), then forget. */
static void
call_end(DlockXactEnd how)
{
	for (int i = 0; i < nhooks; i++)
		if (hooks[i]->end)
			hooks[i]->end(how);
	reset_state();
}

/* dlock_xact_callback: the hooks; the commit level; forget at the end. */
static void
dlock_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			force_sync_commit();
			for (int i = 0; i < nhooks; i++)
				if (hooks[i]->pre_commit && hooks[i]->pre_commit())
					xact_outbox_events = true;
			break;
		case XACT_EVENT_PRE_PREPARE:
			for (int i = 0; i < nhooks; i++)
				if (hooks[i]->pre_prepare && hooks[i]->pre_prepare())
					xact_outbox_events = true;
			break;
		case XACT_EVENT_ABORT:
			call_end(DLOCK_XACT_ABORT);
			break;
		case XACT_EVENT_COMMIT:
			call_end(DLOCK_XACT_COMMIT);
			break;
		case XACT_EVENT_PREPARE:
			call_end(DLOCK_XACT_PREPARE);
			break;
		default:
			break;
	}
}

/*
 * dlock_release_callback: after the top-level transaction's locks are gone
 * (its changes are visible and the resources' locks free): the hooks'
 * after_locks (the wakeups of waiters.c).
 */
static void
dlock_release_callback(ResourceReleasePhase phase, bool isCommit,
					   bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	for (int i = 0; i < nhooks; i++)
		if (hooks[i]->after_locks)
			hooks[i]->after_locks(isCommit);
}

/*
 * dlock_subxact_callback: the end of a subtransaction: the hooks'
 * subxact (resource.c drops the transaction-scoped locks taken in one that
 * aborted).
 */
static void
dlock_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	bool		commit;

	if (event == SUBXACT_EVENT_ABORT_SUB)
		commit = false;
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		commit = true;
	else
		return;
	for (int i = 0; i < nhooks; i++)
		if (hooks[i]->subxact)
			hooks[i]->subxact(commit, mySubid, parentSubid);
}

/*
 * dlock_subxact_items: for a list of items that each carry the
 * SubTransactionId that made them (at subxid_off), the end of subtransaction
 * mySubid: its items (and those its committed children handed it) are
 * dropped if it aborted, handed to parentSubid if it committed.  Returns
 * the list.  For the hooks' subxact.
 */
List *
dlock_subxact_items(List *items, size_t subxid_off, bool commit,
					SubTransactionId mySubid, SubTransactionId parentSubid)
{
	ListCell   *lc;

	foreach(lc, items)
	{
		SubTransactionId *subxid = (SubTransactionId *) ((char *) lfirst(lc) + subxid_off);

		if (*subxid != mySubid)
			continue;
		if (commit)
			*subxid = parentSubid;
		else
			items = foreach_delete_current(items, lc);
	}
	return items;
}

/* dlock_xact_init: register the callbacks (once per backend). */
void
dlock_xact_init(void)
{
	RegisterXactCallback(dlock_xact_callback, NULL);
	RegisterSubXactCallback(dlock_subxact_callback, NULL);
	RegisterResourceReleaseCallback(dlock_release_callback, NULL);
}
