/*-------------------------------------------------------------------------
 *
 * acquire.c
 *		Acquisition: one attempt at a lease (try_lock, lock, campaign, a
 *		shared lease, a semaphore's permits), run in wait.c's wait loop.
 *
 * An attempt (a DlockAttemptFn) takes the resource's lock (resource.c),
 * has admit.c decide on the resource's state, and carries the verdict
 * out: admitted, the holding (rows.c) and then the queue in one
 * call (queue.c's dlock_queue_settle); refused, the queue in one call
 * (dlock_queue_enter) and the lock given back.  It says acquired, busy,
 * delayed or contended, and the wait loop decides what to do about it.
 * The path in full: docs/how-it-works.md, "Inside the C extension".
 *
 * Backend-local.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "utils/builtins.h"

/*
 * Longest a client-side fair attempt whose ticket heads the queue waits for
 * the resource's lock (see take_resource_as_head): far longer than another
 * attempt holds it, far shorter than a client's recheck.
 */
#define FAIR_HEAD_WAIT_MS 50

/* What a lease attempt needs. */
typedef struct LeaseAttemptArgs
{
	DlockTicket q;				/* holder, fairness, its place in the queue */
	const DlockCaller *caller;
	const Interval *lease;		/* in a session: its ttl */
	int64		session;		/* in that session (1.1), or 0: leased */
	const Interval *lock_delay; /* NULL: none */
	bool		campaign;		/* never re-enter: the holder's own holding is had as is */
	bool		already;		/* campaign: the holder held it already */
	bool		shared;			/* a shared lease (0.4) */
	int32		permits;		/* a semaphore's permits (0.5), or 0 */
	int32		max_permits;	/* ... and its max_permits */
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
	DlockTake	took = dlock_resource_take(res, mode_of(a), share_holder_of(a), a->caller->role);

	if (took != TAKE_CONTENDED || !a->q.fair || a->q.in_server ||
		!dlock_queue_heads(res, &a->q))
		return took;
	give_up = GetCurrentTimestamp() + (TimestampTz) FAIR_HEAD_WAIT_MS * 1000;
	for (;;)
	{
		dlock_wait_sleep(sleep_ms);
		took = dlock_resource_take(res, mode_of(a), share_holder_of(a), a->caller->role);
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
	a->campaign, a->permits, a->max_permits, false, a->session};

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
								 a->max_permits, a->session);
		else
			dlock_share_insert(res, a->q.holder, a->caller->role, *drawn,
							   a->lease, st->now, expires, a->session);
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
								*drawn, a->lease, st->now, expires,
								a->session))
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
 * same_way: a re-entry (or campaign's own holding) is had only the way the
 * holding was taken: in the same session, or with a lease (1.1); else
 * 55000, nothing changed.
 */
static void
same_way(const DlockResource *res, const LeaseAttemptArgs *a,
		 const DlockResourceState *st, DlockReason reason)
{
	const DlockRow *h = (a->permits > 0 || a->shared) ? st->share_mine : &st->row;

	if ((reason != ADMIT_REENTER && reason != ADMIT_AS_IS) || h == NULL ||
		h->session == a->session)
		return;
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 h->session == 0 ?
			 errmsg("holder \"%s\" holds resource \"%s\" with a lease of its own",
					text_to_cstring(a->q.holder), text_to_cstring(res->name)) :
			 errmsg("holder \"%s\" holds resource \"%s\" in session " INT64_FORMAT,
					text_to_cstring(a->q.holder), text_to_cstring(res->name),
					h->session),
			 errhint("Re-enter a holding the way it was taken: in its session, or with a lease.")));
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
	/* A session's holding has no expiry of its own: its session's counts. */
	TimestampTz stored = a->session != 0 ? DT_NOEND : expires;
	Admitted	done;

	memset(&done, 0, sizeof(done));
	same_way(res, a, st, reason);
	if (a->session != 0)
		dlock_session_hold(a->session);
	if (!((a->permits > 0 || a->shared) ?
		  holding_write(res, a, st, reason, stored, drawn, fence, &done) :
		  lease_row_write(res, a, st, reason, stored, drawn, fence, &done)))
		return false;
	if (a->session != 0)
		done.expires = expires;		/* at the latest (xact.c's hint) */
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
				  int64 session, const Interval *lock_delay, bool shared,
				  const DlockResourceState *st, DlockReason reason,
				  int64 *drawn, int64 *fence)
{
	LeaseAttemptArgs args = {.q = {.holder = holder, .owner = caller->role},
		.caller = caller, .lease = lease, .session = session,
	.lock_delay = lock_delay, .shared = shared};

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
	bool		held_shared = false;

	took = take_resource_as_head(res, a);
	if (took == TAKE_SHARE_ROW_BUSY)
		return ATTEMPT_CONTENDED_POLL;	/* see dlock_resource_take */

	/*
	 * Another transaction is changing the resource (contended): a fair
	 * attempt still takes its place in the queue now (a ticket is its own
	 * row, or its own lock, and needs no resource lock to be taken), and a
	 * wait in lock() adopts the holder's client ticket; unless the holder
	 * holds the resource (a re-entry, delayed).  The holding is then read
	 * without the lock, as a hint, and the verdict is always a refusal.
	 */
	if (took == TAKE_CONTENDED && !(a->q.fair || (a->q.in_server && a->q.number == 0)))
		return a->shared ? ATTEMPT_CONTENDED_SHARE : ATTEMPT_CONTENDED;

	dlock_store_begin();
	for (;;)
	{
		v = dlock_admit(res, &req, took == TAKE_OK, &st);
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
	raise = v.reason == REFUSE_DEADLOCK || v.reason == REFUSE_OTHER_KIND ||
		v.reason == REFUSE_MAX_PERMITS;
	if (!raise)
	{
		/* An exclusive wait in lock() keeps new readers off (queue.c). */
		writer = took == TAKE_OK && !a->shared && a->permits == 0 &&
			a->q.in_server && !a->campaign && dlock_shares_installed();
		adopted = dlock_queue_enter(res, &a->q, v.queue, st.now, writer,
									st.share_mine != NULL);

		/*
		 * An exclusive request (an upgrade) held off only by other holders'
		 * shared holdings may wait in a transaction that holds the
		 * resource's lock in SHARE mode only: their holders can still
		 * release them, unless this transaction touched one of them.
		 */
		held_shared = !a->shared && v.reason == REFUSE_SHARED &&
			!dlock_share_rows_held(res, st.shares, st.share_mine, st.now);
	}
	dlock_store_end();
	if (took == TAKE_CONTENDED)
		return a->shared ? ATTEMPT_CONTENDED_SHARE : ATTEMPT_CONTENDED;
	dlock_resource_give_back(res, mode_of(a), share_holder_of(a), a->caller->role);
	if (raise)
		dlock_admit_raise(res, &req, &st, v);

	/*
	 * With the place its client ticket kept, a wait held off by the queue
	 * may have its turn now: look again at once.
	 */
	*busy_until = (adopted && v.reason == REFUSE_NOT_TURN) ? st.now : v.retry_at;
	if (a->session != 0)
	{
		dlock_store_begin();
		*busy_until = Min(*busy_until, dlock_session_poll(a->session, st.now));
		dlock_store_end();
	}
	return held_shared ? ATTEMPT_BUSY_SHARED : dlock_attempt_refused(v.reason);
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
			  const Interval *lease, int64 session, int64 wait_ms, bool fair,
			  const Interval *lock_delay, bool shared)
{
	LeaseAttemptArgs args = {.q = {.holder = holder, .owner = caller->role,
		.fair = fair, .in_server = wait_ms != 0}, .caller = caller,
	.lease = lease, .session = session, .lock_delay = lock_delay,
	.shared = shared};
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
					  int64 session, int64 wait_ms, bool fair, int32 permits,
					  int32 max_permits)
{
	LeaseAttemptArgs args = {.q = {.holder = holder, .owner = caller->role,
		.fair = fair, .in_server = wait_ms != 0}, .caller = caller,
	.lease = lease, .session = session, .permits = permits,
	.max_permits = max_permits};

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
					   int64 session, int64 wait_ms,
					   const Interval *lock_delay, bool *already)
{
	LeaseAttemptArgs args = {.q = {.holder = candidate, .owner = caller->role,
		.fair = true, .in_server = wait_ms != 0}, .caller = caller,
	.lease = lease, .session = session, .lock_delay = lock_delay,
	.campaign = true};
	int64		fence;

	fence = dlock_wait_loop(res, candidate, wait_ms, lease_attempt, lease_leave,
							&args);
	*already = fence != 0 && args.already;
	return fence;
}
