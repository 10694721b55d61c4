/*-------------------------------------------------------------------------
 *
 * wait.c
 *		The wait loop that every waiting call shares: lock, try_lock,
 *		campaign, acquire, lock_all, xact_lock and their tries.
 *
 * dlock_wait_loop runs an attempt (a DlockAttemptFn: acquire.c, multi.c,
 * xactlock.c) until it acquires or the wait ends.  Busy: sleep until woken
 * by a releasing commit (waiters.c) or until the holding ends.  Contended:
 * wait in the lock manager for the resource's lock, or poll.  A wait for
 * the transaction itself raises 40P01 at once.  After each sleep a waiter
 * checks that its client is still connected.  The reasons:
 * docs/how-it-works.md, "Inside the C extension" (acquire.c).
 *
 * Backend-local; the waiter slot it registers is waiters.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"

/*
 * libpq/libpq.h's, declared here: that header includes libpq-be.h, which
 * needs the GSSAPI headers of a server built with GSSAPI (PostgreSQL
 * 14 to 18 all have it).
 */
extern bool pq_check_connection(void);

/* Longest back-off while another transaction has the resource's lock. */
#define MAX_BACKOFF_MS 100

/*
 * check_lock_timeout: lock_timeout bounds a wait in lock() like any lock
 * wait in PostgreSQL, with the same error.
 */
static void
check_lock_timeout(TimestampTz now, TimestampTz limit)
{
	if (now >= limit)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("canceling statement due to lock timeout")));
}

/* ms_until: milliseconds from now to then, at least 0, rounded up. */
static long
ms_until(TimestampTz now, TimestampTz then)
{
	if (then <= now)
		return 0;
	if (then - now > (TimestampTz) 3600 * 1000 * 1000)
		return 3600 * 1000;
	return (long) ((then - now + 999) / 1000);
}

/*
 * check_client: before each look after a sleep, a waiter makes sure its
 * client is still there, whatever client_connection_check_interval says.
 * A client killed while its backend waits (SIGKILL, a lost host) leaves a
 * backend that would otherwise wait on, be served in its turn, take the
 * lock, and only then, sending the result, find nobody to send it to: the
 * lock (and a fair queue behind it) held by nobody until its lease ends.
 * A gone client ends the wait as PostgreSQL's own check does (FATAL
 * "connection to client lost"); the abort drops the ticket and wakes the
 * next waiter.  One poll of the socket.  It may reset our latch: pending
 * interrupts are handled right after it, and a wakeup it swallowed is seen
 * by the look that follows (dlock_wait_look), so none is lost.
 */
static void
check_client(void)
{
	if (MyProcPort == NULL || whereToSendOutput != DestRemote ||
		!WaitEventSetCanReportClosed())
		return;
	if (!pq_check_connection())
	{
		ClientConnectionLost = true;
		InterruptPending = true;
	}
	/* also any interrupt whose latch the check reset (a cancel, say) */
	CHECK_FOR_INTERRUPTS();
}

/*
 * refuse_self_wait: an attempt is held off by what only the end of this
 * transaction can move: the transaction holds the resource's lock (it
 * took, changed, renewed or pinned the resource), so the holding, queue or
 * transaction-scoped lock in the way cannot change hands before it ends,
 * and a wait would wait for the transaction itself.  Like a deadlock in
 * the lock manager: 40P01, at once.
 */
static void
refuse_self_wait(const DlockResource *res)
{
	if (dlock_resource_xact_fence(res) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
				 errmsg("deadlock detected"),
				 errdetail("This transaction holds a transaction-scoped lock on resource \"%s\" until it ends, and that excludes every lease, the caller's too.",
						   text_to_cstring(res->name)),
				 errhint("Take the lease in another transaction, or use try_lock(), which returns NULL at once.")));
	ereport(ERROR,
			(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
			 errmsg("deadlock detected"),
			 errdetail("Resource \"%s\" has a holding or a fair queue in the way, and this transaction holds the resource's lock (it took, changed, renewed or pinned it): nothing can change that before this transaction ends.",
					   text_to_cstring(res->name)),
			 errhint("Commit or roll back first, or use try_lock() or try_xact_lock(), which return NULL at once.")));
}

/*
 * contended_mode: the mode a contended attempt takes the resource's lock
 * in, for the wait loop to wait for it in the lock manager; NoLock when
 * what held it off was not the resource's lock (a shared attempt's
 * share-row tag: the same holder on another connection, for a moment):
 * then it polls.
 */
static LOCKMODE
contended_mode(DlockAttempt result)
{
	switch (result)
	{
		case ATTEMPT_CONTENDED_SHARE:
			return DLOCK_SHARE;
		case ATTEMPT_CONTENDED_POLL:
			return NoLock;
		default:
			return DLOCK_CHANGE;
	}
}

/*
 * What one wait (dlock_wait_loop) carries from one attempt to the next.
 */
typedef struct WaitState
{
	const DlockResource *res;	/* the resource waited on (see the loop) */
	TimestampTz deadline;		/* the wait's own limit */
	TimestampTz lock_limit;		/* lock_timeout's */
	long		backoff_ms;		/* the next poll's sleep */
	bool		waiting;		/* registered as a waiter */
	uint64		waiting_on;		/* the resource registered for */
	bool		held_extra;		/* the resource's lock waited for and held */
	LOCKMODE	extra_mode;		/* ... in this mode */
	LOCKTAG		tag;			/* ... under this tag */
	bool		self_checked;	/* whether the transaction holds the */
	bool		self_held;		/* resource's lock (only in SHARE mode?) */
	bool		self_only_share;	/* was looked at once in this wait */
} WaitState;

/*
 * wait_refuse_self: a busy attempt: if the transaction itself holds the
 * resource's lock (looked at once per wait: it does not change while it
 * waits; an attempt's own reference is gone again when it is busy), the
 * wait would be for itself: end it and raise 40P01.  Holding it in SHARE
 * mode only, an exclusive request held off by other readers alone
 * (ATTEMPT_BUSY_SHARED) may wait: they can still release.
 */
static void
wait_refuse_self(WaitState *w, DlockAttempt result, DlockLeaveFn leave, void *arg)
{
	if (!w->self_checked)
		w->self_held = dlock_resource_held(w->res, &w->self_only_share);
	w->self_checked = true;
	if (w->self_held &&
		!(w->self_only_share && result == ATTEMPT_BUSY_SHARED))
	{
		if (leave)
			leave(w->res, arg, false);
		if (w->waiting)
			dlock_wait_end(false);
		refuse_self_wait(w->res);
	}
}

/*
 * wait_contended: an attempt held off by another transaction's hold of
 * the resource's lock: wait for that lock in the lock manager when the
 * wait has no limit of its own (so waiters queue there in order), else
 * poll with a backoff.  The loop then looks again.
 */
static void
wait_contended(WaitState *w, int64 wait_ms, DlockAttempt result, TimestampTz now)
{
	w->extra_mode = contended_mode(result);
	if (wait_ms < 0 && w->lock_limit == DT_NOEND && w->extra_mode != NoLock &&
		!dlock_pinned(w->res))
	{
		/*
		 * No limit of ours, and no pin in the way (resource.c): wait in the
		 * lock manager (in the attempt's mode) and look again holding the
		 * lock, so waiters queue there in order instead of taking and
		 * dropping it in turn.
		 */
		dlock_set_locktag(&w->tag, w->res->hash);
		(void) LockAcquire(&w->tag, w->extra_mode, false, false);
		w->held_extra = true;
		return;
	}
	if (wait_ms < 0 && w->lock_limit == DT_NOEND &&
		w->extra_mode == (LOCKMODE) DLOCK_CHANGE)
	{
		/*
		 * No limit, and a pin in the way of a change: wait for the pins in
		 * the lock manager, where a cycle through them is a deadlock it
		 * finds, and look again.  (A SHARE attempt is not held off by pins:
		 * it polls.)
		 */
		dlock_wait_for_pins(w->res);
		return;
	}
	dlock_wait_sleep(Min(w->backoff_ms, ms_until(now, Min(w->deadline, w->lock_limit))));
	w->backoff_ms = Min(w->backoff_ms * 2, MAX_BACKOFF_MS);
}

/*
 * dlock_wait_loop: run attempt until it acquires, or the wait ends.
 * wait_ms: 0 one try, -1 no limit (but statement_timeout), else the limit.
 * holder is only shown in dlock.waiters.  leave (may be NULL) runs when the
 * wait ends, before the waiter slot is left (which may wake the next
 * waiter).  Returns the fence, or 0.  A wait for the transaction itself
 * (refuse_self_wait) raises 40P01 at once, after leave; a try (wait_ms 0)
 * returns 0 then as for any busy resource.  Lock-delay is waited out even
 * then: only time ends it.
 *
 * res is the resource waited on.  An attempt at several resources
 * (multi.c) passes the address of its own "resource in the way", which its
 * attempts rewrite: when it names another resource than the one the wait
 * is registered for, the wait moves there and looks again at once.
 */
int64
dlock_wait_loop(const DlockResource *res, text *holder, int64 wait_ms,
				DlockAttemptFn attempt, DlockLeaveFn leave, void *arg)
{
	TimestampTz start = GetCurrentTimestamp();
	WaitState	w = {0};
	int64		fence = 0;

	w.res = res;
	w.deadline = wait_ms < 0 ? DT_NOEND : start + wait_ms * 1000;
	w.lock_limit = (LockTimeout > 0 && wait_ms != 0) ?
		start + (TimestampTz) LockTimeout * 1000 : DT_NOEND;
	w.backoff_ms = 1;
	w.extra_mode = NoLock;
	if (wait_ms != 0)
		dlock_table_locks_mark_wait();

	for (;;)
	{
		TimestampTz busy_until = DT_NOEND;
		TimestampTz now;
		DlockAttempt result;

		if (w.waiting)
		{
			check_client();
			dlock_wait_look();
		}
		if (wait_ms != 0)
			dlock_table_locks_track();
		result = attempt(res, arg, &fence, &busy_until);
		/* A waiter keeps no read lock of dlock's tables (table.c). */
		if (wait_ms != 0)
			dlock_table_locks_untrack(result != ATTEMPT_ACQUIRED);

		if (w.held_extra)
		{
			/* attempt took its own reference; an acquisition keeps that */
			LockRelease(&w.tag, w.extra_mode, false);
			w.held_extra = false;
		}
		if (result == ATTEMPT_ACQUIRED)
			break;
		fence = 0;
		now = GetCurrentTimestamp();
		if (wait_ms == 0)
			break;
		if (w.waiting && res->hash != w.waiting_on)
		{
			/* Another resource is in the way now (multi.c): wait for it. */
			dlock_wait_move(res, holder);
			w.waiting_on = res->hash;
			w.self_checked = false;
			if (now >= w.deadline)
				break;
			continue;
		}
		if ((result == ATTEMPT_BUSY || result == ATTEMPT_BUSY_SHARED) &&
			busy_until > now)
			wait_refuse_self(&w, result, leave, arg);
		if (now >= w.deadline)
			break;
		check_lock_timeout(now, w.lock_limit);
		if (!w.waiting)
		{
			/* Register, then look again: a release may have just passed. */
			dlock_wait_begin(res, holder, w.deadline);
			w.waiting = true;
			w.waiting_on = res->hash;
			continue;
		}
		if (result == ATTEMPT_CONTENDED || result == ATTEMPT_CONTENDED_SHARE ||
			result == ATTEMPT_CONTENDED_POLL)
		{
			wait_contended(&w, wait_ms, result, now);
			continue;
		}
		if (result == ATTEMPT_BUSY_PINNED && wait_ms < 0 && w.lock_limit == DT_NOEND)
		{
			/*
			 * No limit: wait for the pins in the lock manager, where a cycle
			 * through a pinner is a deadlock it finds, and look again.  With
			 * a limit, poll (busy_until is near).
			 */
			dlock_wait_for_exclusive_pins(res);
			continue;
		}
		w.backoff_ms = 1;
		dlock_wait_sleep(ms_until(now, Min(Min(busy_until, w.deadline), w.lock_limit)));
	}

	dlock_table_locks_forget();
	if (leave)
		leave(res, arg, fence != 0);
	if (w.waiting)
	{
		dlock_wait_end(fence != 0);
		if (fence == 0)
			dlock_count(DLOCK_STAT_TIMEOUTS);
	}
	return fence;
}
