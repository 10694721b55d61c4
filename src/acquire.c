/*-------------------------------------------------------------------------
 *
 * acquire.c
 *		Acquisition: one attempt at a lease, and the wait loop that
 *		try_lock, lock, xact_lock and try_xact_lock share.
 *
 * An attempt (a DlockAttemptFn) takes the resource's lock without waiting
 * (in CHANGE mode; a shared lease in SHARE mode, with its holder's
 * share-row tag, so readers never hold each other off: resource.c),
 * has admit.c read the resource's state (on the latest snapshot) and
 * decide, carries the verdict out (lease_attempt's admit_write and
 * acquired() for a lease: the row through rows.c, the queue through
 * queue.c, what the transaction must do at its end through xact.c and
 * waiters.c; holding_write for a shared lease or a
 * semaphore's permits; queue_up for a refusal, and
 * for an exclusive wait in lock() the "writer waits" tags of queue.c),
 * and says one of four things:
 * acquired (with the fence, the resource's lock kept until the transaction
 * ends), busy until some time (another holder's lease ends then; the
 * resource's lock given back), delayed (free, but under lock-delay until
 * some time), or contended (another transaction holds the resource's lock:
 * it is changing the resource, or changed it and has not committed; the
 * result says in which mode to wait for that lock, or, held off by a
 * shared attempt's share-row tag, to poll).  The
 * wait loop decides what to do about busy and contended: give up
 * (try_lock), sleep until woken by a releasing commit or until the lease
 * ends, or wait in the lock manager; or, when the transaction itself holds
 * the resource's lock and something other than lock-delay is in the way,
 * raise 40P01 at once: nothing but the end of the transaction could free
 * it, so the wait would be for the transaction itself (except for an
 * upgrade held off only by other readers while the transaction holds the
 * lock in SHARE mode alone: they can still release).  A wait in the lock
 * manager is in the attempt's mode, so crossing upgrades in open
 * transactions are the lock manager's deadlocks (40P01).  Times come from
 * the server clock at the moment of each attempt.  After each sleep a
 * waiter checks that its client is still connected (check_client): a
 * waiter whose client is gone must not be served.
 *
 * An attempt at several resources at once (multi.c) runs in the same wait
 * loop: it names the resource in its way each time it is refused, and the
 * wait moves to that one (dlock_wait_move); it writes each holding through
 * dlock_lease_write, the lease attempt's own admit_write.
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
 * Longest a client-side fair attempt whose ticket heads the queue waits for
 * the resource's lock (see take_resource_as_head): far longer than another
 * attempt holds it, far shorter than a client's recheck.
 */
#define FAIR_HEAD_WAIT_MS 50

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
	if (dlock_xact_fence(res) != 0)
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
 * What the wait loop must know of a lease attempt (defined with it,
 * below): whether a transaction that holds the resource's lock may still
 * wait for what refused it.
 */
static bool attempt_may_wait_on_self(DlockAttemptFn attempt, void *arg);

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
 * mode only, an exclusive request held off by other readers alone may
 * wait: they can still release.
 */
static void
wait_refuse_self(WaitState *w, DlockAttemptFn attempt, DlockLeaveFn leave, void *arg)
{
	if (!w->self_checked)
		w->self_held = dlock_resource_held(w->res, &w->self_only_share);
	w->self_checked = true;
	if (w->self_held &&
		!(w->self_only_share && attempt_may_wait_on_self(attempt, arg)))
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
		if (result == ATTEMPT_BUSY && busy_until > now)
			wait_refuse_self(&w, attempt, leave, arg);
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

/* What a lease attempt needs. */
typedef struct LeaseAttemptArgs
{
	DlockTicket q;				/* holder, fairness, its place in the queue */
	const DlockCaller *caller;
	const Interval *lease;
	const Interval *lock_delay; /* NULL: none */
	bool		campaign;		/* never re-enter: the holder's own holding is had as is */
	bool		already;		/* campaign: the holder held it already */
	bool		shared;			/* a shared lease (0.4) */
	int32		permits;		/* a semaphore's permits (0.5), or 0 */
	int32		max_permits;	/* ... and its max_permits */
	DlockReason refused;		/* why the last attempt was refused */
	bool		own_shares;		/* ... by shared holdings this transaction touched */
} LeaseAttemptArgs;

/* mode_of: the mode of the resource's lock a lease attempt takes. */
static DlockLockMode
mode_of(const LeaseAttemptArgs *a)
{
	return a->shared ? DLOCK_SHARE : DLOCK_CHANGE;
}

/* share_holder_of: whose share-row tag a lease attempt takes (shared only). */
static text *
share_holder_of(const LeaseAttemptArgs *a)
{
	return a->shared ? a->q.holder : NULL;
}

/*
 * What carrying out an admission leaves to do once the holding is
 * written (admit_write): settle the queue, note the expiry, count it.
 */
typedef struct Admitted
{
	DlockSettle settle;			/* what it does to the queue (queue.c) */
	bool		noted;			/* a holding acquired or re-entered: */
	TimestampTz expires;		/* ... its expiry (xact.c) */
	DlockStat	stat;			/* ... and what it counts */
} Admitted;

/*
 * acquired: what an exclusive holding acquired or re-entered does: leave
 * the queue, record the lock-delay of a new holding.  A new holding drops
 * the holder's client ticket whatever the path it came by (a non-fair
 * attempt, lock(), campaign): a ticket left behind would head the queue
 * once it releases, and hold everyone off until it lapses.  no_tickets:
 * the acquisition found no live client ticket of the resource at all, so
 * there is none to drop.
 */
static void
acquired(const LeaseAttemptArgs *a, bool queued, int64 fence, int32 count,
		 TimestampTz expires, bool no_tickets, Admitted *done)
{
	done->settle.drop_client = queued &&
		((count == 1 && !no_tickets) || (a->q.fair && !a->q.in_server));
	done->settle.delay = (queued && count == 1) ? a->lock_delay : NULL;
	done->settle.fence = fence;
	done->settle.wake_abort = count == 1;
	done->noted = true;
	done->expires = expires;
	done->stat = count == 1 ? DLOCK_STAT_ACQUIRED : DLOCK_STAT_REENTERED;
}

/*
 * take_resource_as_head: dlock_resource_take, except that a client-side
 * fair attempt whose ticket heads the queue waits up to FAIR_HEAD_WAIT_MS
 * for the resource's lock.  Every event wakes every client-side waiter, so
 * the head's attempt often meets another's holding the lock for a moment;
 * failing at once, the head would not look again before its client's next
 * recheck (the CLI's is 1 s), and nobody else may take the resource
 * meanwhile.  Others, and a head still held off after that, fail at once
 * as before.
 */
static DlockTake
take_resource_as_head(const DlockResource *res, const LeaseAttemptArgs *a)
{
	TimestampTz give_up;
	long		sleep_ms = 1;
	DlockTake	took = dlock_resource_take(res, mode_of(a), share_holder_of(a));

	if (took != TAKE_CONTENDED || !a->q.fair || a->q.in_server ||
		!dlock_queue_heads(res, &a->q))
		return took;
	give_up = GetCurrentTimestamp() + (TimestampTz) FAIR_HEAD_WAIT_MS * 1000;
	for (;;)
	{
		dlock_wait_sleep(sleep_ms);
		took = dlock_resource_take(res, mode_of(a), share_holder_of(a));
		if (took != TAKE_CONTENDED || GetCurrentTimestamp() >= give_up)
			return took;
		sleep_ms = Min(sleep_ms * 2, 8);
	}
}

/* request_of: the admission request of a lease attempt (admit.c). */
static DlockRequest
request_of(const LeaseAttemptArgs *a)
{
	DlockRequest req = {a->permits > 0 ? DLOCK_KIND_SEMAPHORE :
		a->shared ? DLOCK_KIND_SHARED : DLOCK_KIND_EXCLUSIVE,
		a->q.holder, a->caller, a->q.fair, a->q.in_server, a->q.number,
	a->campaign, a->permits, a->max_permits};

	return req;
}

/*
 * end_own_expired: the request's holder's own expired holding of the same
 * kind (shared, or a semaphore's) still in its table, not reaped yet, ends
 * now as the reaper would have ended it (its event, counted as expired),
 * so that the new holding can take its primary key.  False, changing
 * nothing more, if it changed since it was read: read and decide again.
 */
static bool
end_own_expired(const DlockResource *res, const LeaseAttemptArgs *a,
				const DlockResourceState *st)
{
	ListCell   *lc;
	char	   *holder = text_to_cstring(a->q.holder);

	foreach(lc, st->shares)
	{
		DlockRow   *s = lfirst(lc);

		if (s->expires_at > st->now || s->owner != a->caller->role ||
			(s->permits > 0) != (a->permits > 0) || strcmp(s->holder, holder) != 0)
			continue;
		if (!dlock_share_change(res, s, 0, NULL, st->now, 0))
			return false;
		dlock_notify(res, "expired", s->fence);
		dlock_count(DLOCK_STAT_EXPIRED);
	}
	return true;
}

/*
 * holding_write: the holding of a shared lease (0.4) or of a semaphore's
 * permits (0.5): re-enter the holder's holding (its fence unchanged, its
 * expiry extended; a semaphore's gets the permits added), or add a new
 * one beside the others with its own fence.  Neither takes a lock-delay
 * (that is the exclusive holding's).  A new shared holding wakes the next
 * waiter too, which may be another reader.  A new holding of permits
 * wakes nobody more (a release wakes one waiter per permit it frees,
 * waiters.c, each of which looks for itself), unless it left the fair
 * queue: the waiter next in line, woken by the same release while this
 * one still headed the queue, looks again.
 */
static bool
holding_write(const DlockResource *res, const LeaseAttemptArgs *a,
			  const DlockResourceState *st, DlockReason reason,
			  TimestampTz expires, int64 *drawn, int64 *fence,
			  Admitted *done)
{
	const DlockRow *mine = st->share_mine;
	bool		permits = a->permits > 0;
	TimestampTz new_expires;

	if (reason == ADMIT_NEW)
	{
		if (!end_own_expired(res, a, st))
			return false;
		if (*drawn == 0)
			*drawn = dlock_next_fence();
		if (permits)
			dlock_permits_insert(res, a->q.holder, a->caller->role, *drawn,
								 a->lease, st->now, expires, a->permits,
								 a->max_permits);
		else
			dlock_share_insert(res, a->q.holder, a->caller->role, *drawn,
							   a->lease, st->now, expires);
		*fence = *drawn;
		done->settle.drop_client = st->queues;
		done->settle.wake_abort = true;
		done->settle.wake_commit = !permits || a->q.number != 0 || a->q.fair;
		done->noted = true;
		done->expires = expires;
		done->stat = DLOCK_STAT_ACQUIRED;
		return true;
	}
	if (reason != ADMIT_REENTER)
		elog(ERROR, "dlock: verdict %d does not admit", (int) reason);
	if (mine->count == PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 permits ?
				 errmsg("holder \"%s\" has acquired semaphore \"%s\" too many times",
						mine->holder, text_to_cstring(res->name)) :
				 errmsg("holder \"%s\" has re-entered resource \"%s\" too many times",
						mine->holder, text_to_cstring(res->name)),
				 errdetail("A holding is re-entered at most %d times.", PG_INT32_MAX - 1)));
	new_expires = Max(mine->expires_at, expires);
	if (!(permits ?
		  dlock_permits_add(res, mine, mine->count + 1,
							mine->permits + a->permits, st->now, new_expires) :
		  dlock_share_change(res, mine, mine->count + 1, NULL, st->now,
							 new_expires)))
		return false;
	*fence = mine->fence;
	done->noted = true;
	done->expires = new_expires;
	done->stat = DLOCK_STAT_REENTERED;
	return true;
}

/*
 * lease_row_write: the holding of an exclusive lease (rows.c): campaign's
 * own holding as it is, a re-entry, or a new holding.
 */
static bool
lease_row_write(const DlockResource *res, const LeaseAttemptArgs *a,
				const DlockResourceState *st, DlockReason reason,
				TimestampTz expires, int64 *drawn, int64 *fence,
				Admitted *done)
{
	TimestampTz new_expires;
	int32		count;

	switch (reason)
	{
		case ADMIT_AS_IS:
			/*
			 * campaign never re-enters: a candidate that leads already (it
			 * came to lead by another path, or on another connection, since
			 * campaign looked) gets its holding as it is, its term unchanged.
			 */
			done->settle.drop_client = st->queues;
			*fence = st->row.fence;
			return true;
		case ADMIT_REENTER:
			if (!dlock_row_reenter(res, &st->row, st->now, expires,
								   &count, &new_expires))
				return false;
			*fence = st->row.fence;
			acquired(a, st->queues, *fence, count, new_expires, false, done);
			return true;
		case ADMIT_NEW:
			/* The fence is drawn only now, under the resource's lock. */
			if (*drawn == 0)
				*drawn = dlock_next_fence();
			if (!dlock_row_take(res, &st->row, a->q.holder, a->caller->role,
								*drawn, a->lease, st->now, expires))
				return false;
			if (st->row.held)
				dlock_count(DLOCK_STAT_EXPIRED);	/* took over an expired lease */
			*fence = *drawn;
			/* No live client ticket at all: none of the holder's to drop. */
			acquired(a, st->queues, *fence, 1, expires,
					 st->know_queue && a->q.number == 0 && st->server_allows &&
					 !st->client_ahead, done);
			return true;
		default:
			elog(ERROR, "dlock: verdict %d does not admit", (int) reason);
	}
	return false;
}

/*
 * admit_write: carry out an admitting verdict decided on *st, inside the
 * store session, under the resource's lock: the holding (holding_write,
 * lease_row_write), then the queue (queue.c) and what the transaction
 * notes and counts.  *drawn keeps a fence drawn for a new holding across
 * a second try.  Returns false, changing nothing, if the row changed
 * since it was read (a superuser's UPDATE by hand): read and decide again.
 */
static bool
admit_write(const DlockResource *res, LeaseAttemptArgs *a,
			const DlockResourceState *st, DlockReason reason,
			int64 *drawn, int64 *fence)
{
	TimestampTz expires = dlock_lease_expiry(st->now, a->lease);
	Admitted	done = {{0}};

	if (!((a->permits > 0 || a->shared) ?
		  holding_write(res, a, st, reason, expires, drawn, fence, &done) :
		  lease_row_write(res, a, st, reason, expires, drawn, fence, &done)))
		return false;
	dlock_queue_settle(res, &a->q, &done.settle);
	if (reason == ADMIT_AS_IS)
		a->already = true;
	if (done.noted)
	{
		dlock_note_acquisition(done.expires);
		dlock_count(done.stat);
	}
	return true;
}

/*
 * dlock_lease_write: carry out an admitting verdict on one resource of
 * several taken at once (multi.c): admit_write for a lease that is neither
 * fair nor waiting in the queue.  Same contract as admit_write: inside the
 * store session, under the resource's lock; false, changing nothing, if
 * the row changed since *st was read.
 */
bool
dlock_lease_write(const DlockResource *res, text *holder,
				  const DlockCaller *caller, const Interval *lease,
				  const Interval *lock_delay, bool shared,
				  const DlockResourceState *st, DlockReason reason,
				  int64 *drawn, int64 *fence)
{
	LeaseAttemptArgs args = {.q = {.holder = holder, .owner = caller->role},
		.caller = caller, .lease = lease, .lock_delay = lock_delay,
	.shared = shared};

	return admit_write(res, &args, st, reason, drawn, fence);
}

/*
 * lease_attempt: one attempt at a lease for holder: take the resource's
 * lock (or find another transaction has it), let admit.c decide on the
 * resource's state, and carry the verdict out: admitted, write it
 * (admit_write); refused, keep a place in the queue if the verdict says
 * so and say when to look again.
 */
static DlockAttempt
lease_attempt(const DlockResource *res, void *arg, int64 *fence,
			  TimestampTz *busy_until)
{
	LeaseAttemptArgs *a = arg;
	DlockRequest req = request_of(a);
	DlockResourceState st;
	DlockAdmission v;
	DlockTake	took;
	int64		drawn = 0;
	bool		raise;
	bool		writer;
	bool		adopted = false;

	a->refused = REFUSE_CONTENDED;
	took = take_resource_as_head(res, a);
	if (took == TAKE_CONTENDED)
	{
		/*
		 * Another transaction is changing the resource: a fair attempt
		 * still takes its place in the queue now (a ticket is its own row,
		 * or its own lock, and needs no resource lock to be taken), and a
		 * wait in lock() adopts the holder's client ticket; unless the
		 * holder holds the resource (a re-entry, delayed).  The holding is
		 * read without the lock, as a hint.
		 */
		if (a->q.fair || (a->q.in_server && a->q.number == 0))
		{
			dlock_store_begin();
			v = dlock_admit(res, &req, false, &st);
			(void) dlock_queue_enter(res, &a->q, v.queue, st.now, false, false);
			dlock_store_end();
		}
		return a->shared ? ATTEMPT_CONTENDED_SHARE : ATTEMPT_CONTENDED;
	}
	if (took == TAKE_SHARE_ROW_BUSY)
		return ATTEMPT_CONTENDED_POLL;	/* see dlock_resource_take */

	dlock_store_begin();
	for (;;)
	{
		v = dlock_admit(res, &req, true, &st);
		if (!v.admit ||
			admit_write(res, a, &st, v.reason, &drawn, fence))
			break;
		/* The row changed since it was read: read it and decide again. */
	}
	if (v.admit)
	{
		dlock_store_end();
		return ATTEMPT_ACQUIRED;
	}
	a->refused = v.reason;
	raise = v.reason == REFUSE_DEADLOCK || v.reason == REFUSE_OTHER_KIND ||
		v.reason == REFUSE_MAX_PERMITS;
	if (!raise)
	{
		/* An exclusive wait in lock() keeps new readers off (queue.c). */
		writer = !a->shared && a->permits == 0 && a->q.in_server &&
			!a->campaign && dlock_shares_installed();
		adopted = dlock_queue_enter(res, &a->q, v.queue, st.now, writer,
									st.share_mine != NULL);
		a->own_shares = v.reason == REFUSE_SHARED &&
			dlock_share_rows_held(res, st.shares, st.share_mine, st.now);
	}
	dlock_store_end();
	dlock_resource_give_back(res, mode_of(a), share_holder_of(a));
	if (raise)
		dlock_admit_raise(res, &req, &st, v);

	/*
	 * With the place its client ticket kept, a wait held off by the queue
	 * may have its turn now: look again at once.
	 */
	*busy_until = (adopted && v.reason == REFUSE_NOT_TURN) ? st.now : v.retry_at;
	return v.reason == REFUSE_DELAYED ? ATTEMPT_DELAYED : ATTEMPT_BUSY;
}

/*
 * attempt_may_wait_on_self: an exclusive lease attempt (an upgrade) held
 * off only by other holders' shared holdings may wait in a transaction
 * that holds the resource's lock in SHARE mode only: their holders can
 * still release them, unless this transaction touched one of them.
 */
static bool
attempt_may_wait_on_self(DlockAttemptFn attempt, void *arg)
{
	const LeaseAttemptArgs *a = arg;

	return attempt == lease_attempt && !a->shared &&
		a->refused == REFUSE_SHARED && !a->own_shares;
}

/* lease_leave: the wait is over: leave the queue (queue.c). */
static void
lease_leave(const DlockResource *res, void *arg, bool acquired)
{
	LeaseAttemptArgs *a = arg;

	dlock_queue_leave(res, &a->q, acquired);
}

/*
 * dlock_acquire: try_lock (wait_ms 0) and lock: the fence, or 0 if the
 * lease was not had in time.
 */
int64
dlock_acquire(const DlockResource *res, text *holder, const DlockCaller *caller,
			  const Interval *lease, int64 wait_ms, bool fair,
			  const Interval *lock_delay, bool shared)
{
	LeaseAttemptArgs args = {.q = {.holder = holder, .owner = caller->role,
		.fair = fair, .in_server = wait_ms != 0}, .caller = caller,
	.lease = lease, .lock_delay = lock_delay, .shared = shared};
	int64		fence;

	fence = dlock_wait_loop(res, holder, wait_ms, lease_attempt, lease_leave,
							&args);
	return fence;
}

/*
 * dlock_acquire_permits: try_acquire (wait_ms 0) and acquire: permits of
 * the semaphore res (0.5); the fence, or 0 if they were not had in time.
 */
int64
dlock_acquire_permits(const DlockResource *res, text *holder,
					  const DlockCaller *caller, const Interval *lease,
					  int64 wait_ms, bool fair, int32 permits,
					  int32 max_permits)
{
	LeaseAttemptArgs args = {.q = {.holder = holder, .owner = caller->role,
		.fair = fair, .in_server = wait_ms != 0}, .caller = caller,
	.lease = lease, .permits = permits, .max_permits = max_permits};

	return dlock_wait_loop(res, holder, wait_ms, lease_attempt, lease_leave,
						   &args);
}

/*
 * dlock_campaign_acquire: campaign's fair acquisition, which never
 * re-enters: the term, or 0 if not elected in time; *already is set when
 * the candidate led already (its holding unchanged, the resource's lock
 * kept until the transaction ends like an acquisition's).
 */
int64
dlock_campaign_acquire(const DlockResource *res, text *candidate,
					   const DlockCaller *caller, const Interval *lease,
					   int64 wait_ms, const Interval *lock_delay, bool *already)
{
	LeaseAttemptArgs args = {.q = {.holder = candidate, .owner = caller->role,
		.fair = true, .in_server = wait_ms != 0}, .caller = caller,
	.lease = lease, .lock_delay = lock_delay, .campaign = true};
	int64		fence;

	fence = dlock_wait_loop(res, candidate, wait_ms, lease_attempt, lease_leave,
							&args);
	*already = fence != 0 && args.already;
	return fence;
}
