/*-------------------------------------------------------------------------
 *
 * acquire.c
 *		Acquisition: one attempt at a lease, and the wait loop that
 *		try_lock, lock, xact_lock and try_xact_lock share.
 *
 * An attempt (a DlockAttemptFn) takes the resource's lock without waiting,
 * reads the resource on the latest snapshot, and says one of four things:
 * acquired (with the fence, the resource's lock kept until the transaction
 * ends), busy until some time (another holder's lease ends then; the
 * resource's lock given back), delayed (free, but under lock-delay until
 * some time), or contended (another transaction holds the resource's lock:
 * it is changing the resource, or changed it and has not committed).  The
 * wait loop decides what to do about busy and contended: give up
 * (try_lock), sleep until woken by a releasing commit or until the lease
 * ends, or wait in the lock manager; or, when the transaction itself holds
 * the resource's lock and something other than lock-delay is in the way,
 * raise 40P01 at once: nothing but the end of the transaction could free
 * it, so the wait would be for the transaction itself.  Times come from
 * the server clock at the moment of each attempt.  After each sleep a
 * waiter checks that its client is still connected (check_client): a
 * waiter whose client is gone must not be served.
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
 * dlock_take_resource: take res's lock in CHANGE mode without waiting for
 * anyone but a reaper (resource.c); false if another transaction has it.
 */
bool
dlock_take_resource(const DlockResource *res)
{
	while (!dlock_resource_lock(res, DLOCK_CHANGE, false))
	{
		if (!dlock_wait_for_maintenance(res))
			return false;
	}
	return true;
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
 */
int64
dlock_wait_loop(const DlockResource *res, text *holder, int64 wait_ms,
				DlockAttemptFn attempt, DlockLeaveFn leave, void *arg)
{
	TimestampTz start = GetCurrentTimestamp();
	TimestampTz deadline = wait_ms < 0 ? DT_NOEND : start + wait_ms * 1000;
	TimestampTz lock_limit = (LockTimeout > 0 && wait_ms != 0) ?
		start + (TimestampTz) LockTimeout * 1000 : DT_NOEND;
	long		backoff_ms = 1;
	bool		waiting = false;
	bool		held_extra = false;
	bool		self_checked = false;
	int64		fence = 0;
	LOCKTAG		tag;

	dlock_set_locktag(&tag, res->hash);

	for (;;)
	{
		TimestampTz busy_until = DT_NOEND;
		TimestampTz now;
		DlockAttempt result;

		if (waiting)
		{
			check_client();
			dlock_wait_look();
		}
		result = attempt(res, arg, &fence, &busy_until);

		if (held_extra)
		{
			/* attempt took its own reference; an acquisition keeps that */
			LockRelease(&tag, DLOCK_CHANGE, false);
			held_extra = false;
		}
		if (result == ATTEMPT_ACQUIRED)
			break;
		fence = 0;
		now = GetCurrentTimestamp();
		if (wait_ms == 0)
			break;
		if (result == ATTEMPT_BUSY && busy_until > now && !self_checked)
		{
			/*
			 * Once per wait: whether the transaction holds the resource's
			 * lock does not change while it waits (an attempt's own
			 * reference is gone again when it is busy).
			 */
			self_checked = true;
			if (dlock_resource_held(res))
			{
				if (leave)
					leave(res, arg, false);
				if (waiting)
					dlock_wait_end(false);
				refuse_self_wait(res);
			}
		}
		if (now >= deadline)
			break;
		check_lock_timeout(now, lock_limit);
		if (!waiting)
		{
			/* Register, then look again: a release may have just passed. */
			dlock_wait_begin(res, holder, deadline);
			waiting = true;
			continue;
		}
		if (result == ATTEMPT_CONTENDED)
		{
			if (wait_ms < 0 && lock_limit == DT_NOEND && !dlock_pinned(res))
			{
				/*
				 * No limit of ours, and no pin in the way (resource.c): wait
				 * in the lock manager and look again holding the lock, so
				 * waiters queue there in order instead of taking and
				 * dropping it in turn.
				 */
				(void) LockAcquire(&tag, DLOCK_CHANGE, false, false);
				held_extra = true;
				continue;
			}
			dlock_wait_sleep(Min(backoff_ms, ms_until(now, Min(deadline, lock_limit))));
			backoff_ms = Min(backoff_ms * 2, MAX_BACKOFF_MS);
			continue;
		}
		backoff_ms = 1;
		dlock_wait_sleep(ms_until(now, Min(Min(busy_until, deadline), lock_limit)));
	}

	if (leave)
		leave(res, arg, fence != 0);
	if (waiting)
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
	text	   *holder;
	const DlockCaller *caller;
	const Interval *lease;
	bool		fair;			/* take a ticket when not served */
	bool		in_server;		/* waiting in lock(): an in-server ticket */
	const Interval *lock_delay; /* NULL: none */
	int64		ticket;			/* the in-server ticket held, or 0 */
	bool		campaign;		/* never re-enter: the holder's own holding is had as is */
	bool		already;		/* campaign: the holder held it already */
	bool		adopted;		/* ticket is the holder's client ticket */
} LeaseAttemptArgs;

/*
 * queue_up: an attempt was not served.  Waiting in lock(), with no ticket
 * yet, it adopts the holder's live client ticket if it has one (it queued
 * client-side before: it keeps that place; returns true); else a fair
 * attempt takes or keeps its ticket (held in the lock manager while
 * waiting in lock(), else a row kept for dlock.queue_ttl).  Inside a
 * store session; under the 0.1 SQL (no queues) it does nothing.
 */
static bool
queue_up(const DlockResource *res, LeaseAttemptArgs *a, TimestampTz now)
{
	if (a->in_server && a->ticket == 0 && dlock_queue_installed() &&
		dlock_client_ticket_adopt(res, a->holder, a->caller->role, now, &a->ticket))
	{
		dlock_wait_set_ticket(a->ticket, a->caller->role);
		a->adopted = true;
		return true;
	}
	if (!a->fair)
		return false;
	if (a->in_server)
	{
		if (a->ticket == 0)
		{
			dlock_server_ticket_take(res, &a->ticket);
			dlock_wait_set_ticket(a->ticket, a->caller->role);
		}
	}
	else
		dlock_client_ticket_keep(res, a->holder, a->caller->role, now);
	return false;
}

/*
 * acquired: bookkeeping of a successful attempt: leave the queue, record
 * the lock-delay of a new holding.  Inside the store session.  A new
 * holding drops the holder's client ticket whatever the path it came by
 * (a non-fair attempt, lock(), campaign): a ticket left behind would head
 * the queue once it releases, and hold everyone off until it lapses.
 * no_tickets: the acquisition found no live client ticket of the resource
 * at all, so there is none to drop.
 */
static void
acquired(const DlockResource *res, LeaseAttemptArgs *a, bool queued,
		 int64 fence, int32 count, TimestampTz expires, bool no_tickets)
{
	dlock_server_ticket_drop(res, &a->ticket);
	if (queued && ((count == 1 && !no_tickets) || (a->fair && !a->in_server)))
		dlock_client_ticket_drop(res, a->holder, a->caller->role);
	if (queued && count == 1 && a->lock_delay != NULL)
		dlock_delay_set(res, fence, a->lock_delay);
	dlock_note_acquisition(expires);
	if (count == 1)
	{
		dlock_wake_after_abort(res->hash);
		dlock_count(DLOCK_STAT_ACQUIRED);
	}
	else
		dlock_count(DLOCK_STAT_REENTERED);
}

/*
 * take_resource_as_head: dlock_take_resource, except that a client-side
 * fair attempt whose ticket heads the queue waits up to FAIR_HEAD_WAIT_MS
 * for the resource's lock.  Every event wakes every client-side waiter, so
 * the head's attempt often meets another's holding the lock for a moment;
 * failing at once, the head would not look again before its client's next
 * recheck (the CLI's is 1 s), and nobody else may take the resource
 * meanwhile.  Others, and a head still held off after that, fail at once
 * as before.
 */
static bool
take_resource_as_head(const DlockResource *res, const LeaseAttemptArgs *a)
{
	TimestampTz give_up;
	long		sleep_ms = 1;
	bool		head;

	if (dlock_take_resource(res))
		return true;
	if (!a->fair || a->in_server)
		return false;
	dlock_store_begin();
	head = dlock_queue_installed() &&
		dlock_client_ticket_heads(res, a->holder, a->caller->role,
								  GetCurrentTimestamp());
	dlock_store_end();
	if (!head)
		return false;
	give_up = GetCurrentTimestamp() + (TimestampTz) FAIR_HEAD_WAIT_MS * 1000;
	for (;;)
	{
		dlock_wait_sleep(sleep_ms);
		if (dlock_take_resource(res))
			return true;
		if (GetCurrentTimestamp() >= give_up)
			return false;
		sleep_ms = Min(sleep_ms * 2, 8);
	}
}

/*
 * lease_attempt: one attempt at a lease for holder: the caller's own,
 * re-enter it (count + 1, the expiry extended to at least now + lease);
 * available (holding.c) and the queue empty or headed by the caller, take
 * it with a new fence; else busy, queued if fair.
 */
static DlockAttempt
lease_attempt(const DlockResource *res, void *arg, int64 *fence,
			  TimestampTz *busy_until)
{
	LeaseAttemptArgs *a = arg;
	TimestampTz now;
	TimestampTz expires;
	TimestampTz new_expires;
	int32		count;
	bool		took_over;
	bool		queued;
	bool		allow;
	int64		below;
	TimestampTz server_until = DT_NOEND;
	DlockRow	row;
	DlockQueueHead head;

	if (!take_resource_as_head(res, a))
	{
		/*
		 * Another transaction is changing the resource: a fair attempt
		 * still takes its place in the queue now (a ticket is its own row,
		 * or its own lock, and needs no resource lock to be taken), and a
		 * wait in lock() adopts the holder's client ticket; unless the
		 * holder holds the resource (a re-entry, delayed).
		 */
		if (a->fair || (a->in_server && a->ticket == 0))
		{
			TimestampTz at = GetCurrentTimestamp();
			DlockRow	seen;

			dlock_store_begin();
			dlock_row_read(res, &seen);
			/* The holder's own attempt is a re-entry: it never queues. */
			if (dlock_queue_installed() &&
				dlock_holding_verdict(&seen, a->holder, a->caller, at) != HOLDING_MINE)
				(void) queue_up(res, a, at);
			dlock_store_end();
		}
		return ATTEMPT_CONTENDED;
	}
	if (dlock_xact_fence(res) != 0)
	{
		/* Our own transaction-scoped lock excludes a lease, even ours. */
		dlock_resource_unlock(res, DLOCK_CHANGE);
		*busy_until = DT_NOEND;
		return ATTEMPT_BUSY;
	}
	now = GetCurrentTimestamp();
	expires = dlock_lease_expiry(now, a->lease);

	dlock_store_begin();
	queued = dlock_queue_installed();
	if (a->campaign)
	{
		/*
		 * campaign never re-enters: a candidate that leads already (it
		 * came to lead by another path, or on another connection, since
		 * campaign looked) gets its holding as it is, its term unchanged.
		 */
		dlock_row_read(res, &row);
		if (dlock_holding_verdict(&row, a->holder, a->caller, now) == HOLDING_MINE)
		{
			dlock_server_ticket_drop(res, &a->ticket);
			if (queued)
				dlock_client_ticket_drop(res, a->holder, a->caller->role);
			dlock_store_end();
			*fence = row.fence;
			a->already = true;
			return ATTEMPT_ACQUIRED;
		}
	}
	/*
	 * The common case first, in one statement: our own (re-entry), or
	 * available with nobody queued ahead of us.  In-server tickets are
	 * looked up here (a waiter at the head of them passes its ticket, so
	 * only client tickets taken before it stop it); client tickets and
	 * lock-delay by the statement.
	 */
	below = a->ticket != 0 ? a->ticket : PG_INT64_MAX;
	allow = true;
	if (queued && dlock_server_tickets_others(res))
		allow = dlock_server_head_allows(res, a->ticket, &server_until);
	if (dlock_row_fast_acquire(res, a->holder, a->caller->role, a->lease, now,
							   expires, queued, allow, below,
							   fence, &count, &new_expires, &took_over))
	{
		if (took_over)
			dlock_count(DLOCK_STAT_EXPIRED);
		acquired(res, a, queued, *fence, count, new_expires,
				 below == PG_INT64_MAX);
		dlock_store_end();
		return ATTEMPT_ACQUIRED;
	}
	if (!allow && a->in_server)
	{
		/*
		 * We wait in lock() and another backend's in-server ticket is
		 * ahead of ours (or we have none yet): whatever the row says, it
		 * is not our turn.  Whoever is ahead wakes the next waiter when it
		 * leaves or releases.  (A client-side attempt goes on: its ticket
		 * may be the head of the whole queue.)
		 */
		bool		adopted = queue_up(res, a, now);

		dlock_store_end();
		dlock_resource_unlock(res, DLOCK_CHANGE);
		/* With the place its client ticket kept, it may be its turn. */
		*busy_until = adopted ? now : server_until;
		return ATTEMPT_BUSY;
	}

	dlock_row_read(res, &row);
	if (queued)
		dlock_delay_read(res, &row);
	if (dlock_holding_verdict(&row, a->holder, a->caller, now) == HOLDING_MINE)
		elog(ERROR, "dlock: re-entry of an own holding of \"%s\" changed nothing",
			 text_to_cstring(res->name));
	if (!dlock_lease_available(&row, now))
	{
		/* Held by another, or under lock-delay. */
		(void) queue_up(res, a, now);
		dlock_store_end();
		dlock_resource_unlock(res, DLOCK_CHANGE);
		if (dlock_lease_ended(&row, now))
		{
			*busy_until = row.available_at;
			return ATTEMPT_DELAYED;
		}
		*busy_until = Max(row.expires_at, row.available_at);
		return ATTEMPT_BUSY;
	}
	if (queued)
	{
		dlock_queue_head(res, a->holder, a->caller->role, a->ticket, now, &head);
		if (head.exists && !head.mine)
		{
			/* Someone is ahead: wait for its turn to pass. */
			if (queue_up(res, a, now))
				head.expires_at = now;	/* it may be ours now: look again */
			dlock_store_end();
			dlock_resource_unlock(res, DLOCK_CHANGE);
			*busy_until = head.expires_at;
			return ATTEMPT_BUSY;
		}
	}

	if (!row.exists)
	{
		/* A resource never seen (or purged): its first row. */
		*fence = dlock_next_fence();
		dlock_row_insert(res, a->holder, a->caller->role, *fence, a->lease,
						 now, expires);
		acquired(res, a, queued, *fence, 1, expires, false);
		dlock_store_end();
		return ATTEMPT_ACQUIRED;
	}
	/* Ours to take: the takeover of the 0.1 statement, checks done above. */
	if (!dlock_row_fast_acquire(res, a->holder, a->caller->role, a->lease, now,
								expires, false, true, PG_INT64_MAX,
								fence, &count, &new_expires, &took_over))
		elog(ERROR, "dlock: takeover of an available holding of \"%s\" changed nothing",
			 text_to_cstring(res->name));
	if (took_over)
		dlock_count(DLOCK_STAT_EXPIRED);
	acquired(res, a, queued, *fence, count, new_expires, false);
	dlock_store_end();
	return ATTEMPT_ACQUIRED;
}

/*
 * lease_leave: the wait is over: an in-server ticket still held (the wait
 * gave up) leaves the queue before the waiter slot does, so the waiter the
 * slot then wakes sees the queue without it.  An adopted client ticket
 * leaves with it (lock() timed out: it left the queue), and the next
 * waiter is woken again once that is committed.
 */
static void
lease_leave(const DlockResource *res, void *arg, bool acquired)
{
	LeaseAttemptArgs *a = arg;

	dlock_server_ticket_drop(res, &a->ticket);
	if (a->adopted && !acquired)
	{
		dlock_store_begin();
		dlock_client_ticket_drop(res, a->holder, a->caller->role);
		dlock_store_end();
		dlock_wake_after_commit(res->hash);
	}
}

/*
 * dlock_acquire: try_lock (wait_ms 0) and lock: the fence, or 0 if the
 * lease was not had in time.
 */
int64
dlock_acquire(const DlockResource *res, text *holder, const DlockCaller *caller,
			  const Interval *lease, int64 wait_ms, bool fair,
			  const Interval *lock_delay)
{
	LeaseAttemptArgs args = {holder, caller, lease, fair, wait_ms != 0,
	lock_delay, 0, false, false, false};
	int64		fence;

	fence = dlock_wait_loop(res, holder, wait_ms, lease_attempt, lease_leave,
							&args);
	return fence;
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
	LeaseAttemptArgs args = {candidate, caller, lease, true, wait_ms != 0,
	lock_delay, 0, true, false, false};
	int64		fence;

	fence = dlock_wait_loop(res, candidate, wait_ms, lease_attempt, lease_leave,
							&args);
	*already = fence != 0 && args.already;
	return fence;
}
