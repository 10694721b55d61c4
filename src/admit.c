/*-------------------------------------------------------------------------
 *
 * admit.c
 *		Admission: may this request have the resource now, and if not, why.
 *		The one place that decides it, for every kind of request.
 *
 * Three steps: read the resource's state once (dlock_admit_read), decide
 * with a pure function of request and state (dlock_admit_decide, one
 * admission function per DlockKind), and let the caller write the verdict
 * (acquire.c, xactlock.c).  A decision that needs the queue or its exact
 * head says so (NEED_QUEUE, NEED_HEAD), and dlock_admit reads it through
 * queue.c's one view of the queue (dlock_queue_view) and asks again.  The
 * steps in full: docs/how-it-works.md, "Inside the C extension".
 *
 * No shared state: it only reads, under the resource's lock that the
 * caller holds (or, for a contended attempt, as a hint), inside the
 * caller's store session (store.c).
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "utils/builtins.h"

/*
 * How often a reader held off by a pinned, ended exclusive holding looks
 * again when its wait has a limit (wait.c waits for the pin itself when
 * it has none).
 */
#define PIN_BUSY_MS 10

/* refuse: a refusal, looking again at retry_at. */
static DlockAdmission
refuse(DlockReason reason, TimestampTz retry_at, bool queue)
{
	DlockAdmission v = {reason, false, retry_at, queue};

	return v;
}

static DlockAdmission
admit(DlockReason reason)
{
	DlockAdmission v = {reason, true, DT_NOEND, false};

	return v;
}

/*
 * refuse_unavailable: the holding has not ended, or its lock-delay is not
 * over: look again when it ends (held) or when the delay is over.
 */
static DlockAdmission
refuse_unavailable(const DlockResourceState *st, bool queue)
{
	if (dlock_lease_ended(&st->row, st->now))
		return refuse(REFUSE_DELAYED, st->row.available_at, queue);
	return refuse(REFUSE_HELD, Max(st->row.expires_at, st->row.available_at),
				  queue);
}

/*
 * admit_in_turn: a free resource, for a lease or permits: a new holding,
 * unless another ticket heads the fair queue.  The cheap look (other
 * backends' in-server tickets, client tickets below the request's) says
 * whether anyone may be ahead; only then the exact head decides.  queue:
 * whether a refusal keeps the request's place in the queue.
 */
static DlockAdmission
admit_in_turn(const DlockResourceState *st, bool queue)
{
	if (!st->server_allows || st->client_ahead)
	{
		if (!st->know_head)
			return refuse(NEED_HEAD, DT_NOEND, false);
		if (st->head.exists && !st->head.mine)
			return refuse(REFUSE_NOT_TURN, st->head.expires_at, queue);
	}
	return admit(ADMIT_NEW);
}

/*
 * admit_exclusive: a lease (try_lock, lock, campaign).  In order:
 *	- this transaction's transaction-scoped lock excludes every lease, its
 *	  own too (only the transaction's end frees it);
 *	- the holder's own holding is re-entered (campaign has it as is): a
 *	  re-entry never queues;
 *	- under the 0.1 SQL (no queues, no lock-delay): an ended holding is
 *	  taken, a live one is busy until it ends;
 *	- a waiter in lock() whose in-server ticket is not the lowest (or that
 *	  has none while others have one) waits its turn, whatever the row
 *	  says: whoever is ahead wakes it;
 *	- a holding not ended, or under lock-delay, is busy until then;
 *	- free: while the queue has a live ticket, only its head takes it;
 *	- else a new holding.
 * Live permits of a semaphore (0.5) by that name: an error (other kind).
 * With shared holdings (0.4), after the re-entry: live shared holdings of
 * others make it wait until they end (an upgrade, by a holder that shares
 * it too, succeeds only when it is the only holder); an upgrade waiting
 * for another holder that waits to upgrade too is a deadlock.
 * A refusal keeps a place in the queue for a fair request, and for a wait
 * in lock() (which adopts the holder's client ticket).
 */
static DlockAdmission
admit_exclusive(const DlockRequest *req, const DlockResourceState *st)
{
	bool		queue = req->fair || req->in_server;

	if (st->contended)
		return refuse(REFUSE_CONTENDED, DT_NOEND,
					  queue && st->queues && st->holding != HOLDING_MINE);
	if (st->own_xact_lock)
		return refuse(REFUSE_OWN_XACT_LOCK, DT_NOEND, false);
	if (st->permit_holdings > 0)
		return refuse(REFUSE_OTHER_KIND, DT_NOEND, false);
	if (st->holding == HOLDING_MINE)
		return admit(req->campaign ? ADMIT_AS_IS : ADMIT_REENTER);
	if (st->shares_others > 0)
	{
		/* Shared by others: an upgrade waits for them, unless they wait too. */
		if (st->upgrade_crossed)
			return refuse(REFUSE_DEADLOCK, DT_NOEND, false);
		return refuse(REFUSE_SHARED, st->shares_until, queue);
	}
	if (!st->queues)
	{
		if (dlock_lease_ended(&st->row, st->now))
			return admit(ADMIT_NEW);
		return refuse(REFUSE_HELD, st->row.expires_at, queue);
	}
	if (!st->know_queue)
		return refuse(NEED_QUEUE, DT_NOEND, false);
	if (req->in_server && !st->server_allows)
		return refuse(REFUSE_NOT_TURN, st->server_until, queue);
	if (!dlock_lease_available(&st->row, st->now))
		return refuse_unavailable(st, queue);
	return admit_in_turn(st, queue);
}

/*
 * admit_shared: a shared lease (shared => true, 0.4).  In order:
 *	- this transaction's transaction-scoped lock excludes it;
 *	- live permits of a semaphore by that name: an error (other kind);
 *	- the holder's own shared holding is re-entered;
 *	- the holder's own exclusive holding also takes shared (a downgrade);
 *	- a waiter in lock() not at the head of the in-server tickets waits;
 *	- an ended exclusive holding that another transaction pins is busy
 *	  until the pin is gone;
 *	- an exclusive holding not ended, or under lock-delay, is busy;
 *	- an exclusive request waiting in lock() keeps new shared holders out
 *	  (writers do not starve); so does a queue headed by another ticket;
 *	- else a new shared holding, beside the others.
 */
static DlockAdmission
admit_shared(const DlockRequest *req, const DlockResourceState *st)
{
	bool		queue = req->fair || req->in_server;

	if (st->contended)
		return refuse(REFUSE_CONTENDED, DT_NOEND,
					  queue && st->queues && st->share_mine == NULL &&
					  st->holding != HOLDING_MINE);
	if (st->own_xact_lock)
		return refuse(REFUSE_OWN_XACT_LOCK, DT_NOEND, false);
	if (st->permit_holdings > 0)
		return refuse(REFUSE_OTHER_KIND, DT_NOEND, false);
	if (st->share_mine != NULL)
		return admit(ADMIT_REENTER);
	if (st->holding == HOLDING_MINE)
		return admit(ADMIT_NEW);
	if (!st->know_queue)
		return refuse(NEED_QUEUE, DT_NOEND, false);
	if (req->in_server && !st->server_allows)
		return refuse(REFUSE_NOT_TURN, st->server_until, queue);
	if (st->pinned_end)
		return refuse(REFUSE_PINNED, st->now + (TimestampTz) PIN_BUSY_MS * 1000, queue);
	if (!dlock_lease_available(&st->row, st->now))
		return refuse_unavailable(st, queue);
	if (st->writer_waiting)
		return refuse(REFUSE_NOT_TURN, DT_NOEND, queue);
	return admit_in_turn(st, queue);
}

/*
 * admit_xact: a transaction-scoped lock (xact_lock, try_xact_lock).  Its
 * re-entry is xactlock.c's (the transaction holds the resource's lock
 * already).  Live permits of a semaphore by that name (0.5) are an error
 * (other kind).  Live shared holdings (0.4) make it busy until they end, as
 * does an exclusive holding not ended, or under lock-delay; a free
 * resource is taken unless the queue has a live ticket: a
 * transaction-scoped lock never queues, nor jumps a queue.
 */
static DlockAdmission
admit_xact(const DlockRequest *req, const DlockResourceState *st)
{
	if (st->contended)
		return refuse(REFUSE_CONTENDED, DT_NOEND, false);
	if (st->permit_holdings > 0)
		return refuse(REFUSE_OTHER_KIND, DT_NOEND, false);
	if (st->shares_others > 0)
		return refuse(REFUSE_SHARED, st->shares_until, false);
	if (!st->queues)
	{
		if (dlock_lease_ended(&st->row, st->now))
			return admit(ADMIT_NEW);
		return refuse(REFUSE_HELD, st->row.expires_at, false);
	}
	if (!st->know_queue)
		return refuse(NEED_QUEUE, DT_NOEND, false);
	if (!dlock_lease_available(&st->row, st->now))
		return refuse_unavailable(st, false);
	if (st->server_others || st->client_ahead)
	{
		if (!st->know_head)
			return refuse(NEED_HEAD, DT_NOEND, false);
		if (st->head.exists)
			return refuse(REFUSE_NOT_TURN, st->head.expires_at, false);
	}
	return admit(ADMIT_NEW);
}

/*
 * admit_semaphore: permits of a semaphore (try_acquire, acquire, 0.5).
 * In order:
 *	- live holdings of a lock by that name (exclusive, shared, or this
 *	  transaction's transaction-scoped lock): an error (other kind);
 *	- permits held under another max_permits: an error;
 *	- more permits than are free (all holders' live permits counted, the
 *	  holder's own too): busy until the first holding ends (or a release
 *	  wakes it);
 *	- the holder's own holding gets the permits added (no queueing, as a
 *	  re-entry);
 *	- a waiter in acquire() not at the head of the in-server tickets
 *	  waits; so does any request while the name's last exclusive holding
 *	  is under lock-delay, or while another ticket heads the queue;
 *	- else a new holding, beside the others, with its own fence.
 */
static DlockAdmission
admit_semaphore(const DlockRequest *req, const DlockResourceState *st)
{
	bool		queue = req->fair || req->in_server;

	if (st->contended)
		return refuse(REFUSE_CONTENDED, DT_NOEND,
					  queue && st->queues && st->share_mine == NULL);
	if (st->own_xact_lock || st->shared_holdings > 0 ||
		!dlock_lease_ended(&st->row, st->now))
		return refuse(REFUSE_OTHER_KIND, DT_NOEND, false);
	if (st->permits_max != 0 && st->permits_max != req->max_permits)
		return refuse(REFUSE_MAX_PERMITS, DT_NOEND, false);
	if (st->permits_held + req->permits > req->max_permits)
		return refuse(REFUSE_NO_PERMITS, st->permits_next_end,
					  queue && st->share_mine == NULL);
	if (st->share_mine != NULL)
		return admit(ADMIT_REENTER);
	if (!st->queues)
		return admit(ADMIT_NEW);
	if (!st->know_queue)
		return refuse(NEED_QUEUE, DT_NOEND, false);
	if (req->in_server && !st->server_allows)
		return refuse(REFUSE_NOT_TURN, st->server_until, queue);
	if (!dlock_lease_available(&st->row, st->now))
		return refuse_unavailable(st, queue);
	return admit_in_turn(st, queue);
}

/*
 * dlock_admit_decide: the verdict on req given st; no side effects.
 */
DlockAdmission
dlock_admit_decide(const DlockRequest *req, const DlockResourceState *st)
{
	switch (req->kind)
	{
		case DLOCK_KIND_EXCLUSIVE:
			return admit_exclusive(req, st);
		case DLOCK_KIND_SHARED:
			return admit_shared(req, st);
		case DLOCK_KIND_XACT:
			return admit_xact(req, st);
		case DLOCK_KIND_SEMAPHORE:
			return admit_semaphore(req, st);
	}
	elog(ERROR, "dlock: unknown kind of request %d", (int) req->kind);
	pg_unreachable();
}

/*
 * read_shares: what the shared holdings read into st->shares (0.4; none
 * under older SQL) are to the request: the request's holder's live one,
 * how many live ones others have and when the last of them ends.  Live
 * holdings of permits (0.5) are counted apart, with their permits, their
 * max_permits and when the first of them ends; the request's holder's own
 * is share_mine too (of the kind the request is not, it is refused before
 * it is used).
 */
static void
read_shares(const DlockRequest *req, DlockResourceState *st)
{
	ListCell   *lc;

	st->shares_until = DT_NOBEGIN;
	st->permits_next_end = DT_NOEND;
	foreach(lc, st->shares)
	{
		DlockRow   *s = lfirst(lc);

		if (s->expires_at <= st->now)
			continue;
		if (s->permits > 0)
		{
			st->permit_holdings++;
			st->permits_held += s->permits;
			st->permits_max = s->max_permits;
			st->permits_next_end = Min(st->permits_next_end, s->expires_at);
		}
		else
			st->shared_holdings++;
		if (req->holder != NULL &&
			dlock_holding_verdict(s, req->holder, req->caller, st->now) == HOLDING_MINE)
			st->share_mine = s;
		else if (s->permits == 0)
		{
			st->shares_others++;
			st->shares_until = Max(st->shares_until, s->expires_at);
		}
	}
}

/*
 * How long a holding whose session has just ended stays busy while a
 * keepalive (or close) of its session is in flight: the attempt looks
 * again then.
 */
#define SESSION_BUSY_MS 10

/*
 * lapse: a holding in a session (1.1) whose session's expiry has passed
 * ends only once that end is locked in (session_row.c's dlock_session_lapsed),
 * so that a keepalive in flight and a takeover never both win; until
 * then it is busy a moment longer.  Under the resource's lock.
 */
static void
lapse(DlockRow *h, TimestampTz now)
{
	if (h->session != 0 && h->held && h->expires_at <= now &&
		!dlock_session_lapsed(h->session))
		h->expires_at = now + (TimestampTz) SESSION_BUSY_MS * 1000;
}

/*
 * pinned_end: a reader takes the resource's lock in SHARE mode, which a
 * pin (assert_fence, PIN mode) does not hold off, as it holds off a
 * takeover (CHANGE mode).  So an exclusive holding that has ended while
 * another transaction pins it stays busy to a reader, its holder too,
 * until that pin is gone (REFUSE_PINNED): the pinned holder's fenced
 * write must commit before a reader holds the resource.  Only pins of the
 * exclusive holding count (dlock_exclusive_pinned), not readers' pins nor
 * others' looks.
 */
static bool
pinned_end(const DlockResource *res, const DlockRow *h, TimestampTz now)
{
	return h->held && h->expires_at <= now && dlock_exclusive_pinned(res);
}

/*
 * dlock_admit_read: read res's state for req into *st: the holding, the
 * shared holdings (for an upgrade waiting in lock() or lock_all(), whether
 * another shared holder waits to upgrade too, queue.c), and whether this
 * transaction holds a transaction-scoped lock on it.  locked:
 * the caller holds the resource's lock; if not (contended), the holding is
 * read as a hint only.  Inside a store session.
 */
void
dlock_admit_read(const DlockResource *res, const DlockRequest *req,
				 bool locked, DlockResourceState *st)
{
	memset(st, 0, sizeof(*st));
	st->now = GetCurrentTimestamp();
	st->contended = !locked;
	st->queues = dlock_queue_installed();
	st->own_xact_lock = locked && dlock_resource_xact_fence(res) != 0;
	st->shares = dlock_row_read_shares(res);
	dlock_row_read(res, &st->row);
	if (locked)
	{
		ListCell   *lc;

		lapse(&st->row, st->now);
		foreach(lc, st->shares)
			lapse(lfirst(lc), st->now);
		if (req->kind == DLOCK_KIND_SHARED)
			st->pinned_end = pinned_end(res, &st->row, st->now);
	}
	if (req->holder != NULL)
		st->holding = dlock_holding_verdict(&st->row, req->holder, req->caller,
											st->now);
	else
		st->holding = dlock_lease_ended(&st->row, st->now) ?
			HOLDING_FREE : HOLDING_OTHERS;
	read_shares(req, st);
	if (locked && req->kind == DLOCK_KIND_EXCLUSIVE &&
		(req->in_server || req->waits) &&
		st->share_mine != NULL && st->shares_others > 0)
		st->upgrade_crossed = dlock_upgrading_any(res, st->shares,
												  st->share_mine, st->now);
}

/*
 * dlock_admit: read, decide, and read more while the decision asks for
 * it; the verdict, with the state it was decided on in *st.
 */
DlockAdmission
dlock_admit(const DlockResource *res, const DlockRequest *req, bool locked,
			DlockResourceState *st)
{
	dlock_admit_read(res, req, locked, st);
	for (;;)
	{
		DlockAdmission v = dlock_admit_decide(req, st);

		if ((v.reason == NEED_QUEUE && !st->know_queue) ||
			(v.reason == NEED_HEAD && !st->know_head))
			dlock_queue_view(res, req, v.reason == NEED_HEAD, st);
		else if (v.reason == NEED_QUEUE || v.reason == NEED_HEAD)
			elog(ERROR, "dlock: admission asked again for what it was given");
		else
			return v;
	}
}

/*
 * dlock_attempt_refused: what a refusal tells the wait loop (wait.c), for
 * the attempts of acquire.c, multi.c and xactlock.c: under lock-delay,
 * held off by a pin of an ended exclusive holding, or busy.
 */
DlockAttempt
dlock_attempt_refused(DlockReason reason)
{
	if (reason == REFUSE_DELAYED)
		return ATTEMPT_DELAYED;
	if (reason == REFUSE_PINNED)
		return ATTEMPT_BUSY_PINNED;
	return ATTEMPT_BUSY;
}

/*
 * dlock_admit_raise: raise the error a refusal stands for (crossing
 * upgrades, another kind of holding by that name, another max_permits);
 * returns for a refusal that is a wait.  The caller has given the resource's lock back.
 */
void
dlock_admit_raise(const DlockResource *res, const DlockRequest *req,
				  const DlockResourceState *st, DlockAdmission v)
{
	if (v.reason == REFUSE_DEADLOCK)
		ereport(ERROR,
				(errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
				 errmsg("deadlock detected"),
				 errdetail("Holder \"%s\" waits to upgrade its shared lock on resource \"%s\" to exclusive, and another shared holder waits to upgrade too: each waits for the other.",
						   text_to_cstring(req->holder), text_to_cstring(res->name)),
				 errhint("Release the shared lock and take the exclusive one afresh.")));
	if (v.reason == REFUSE_OTHER_KIND && req->kind == DLOCK_KIND_SEMAPHORE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("resource \"%s\" is held as a lock, not as a semaphore",
						text_to_cstring(res->name)),
				 errdetail("A name is a lock or a semaphore while it has live holdings, not both."),
				 errhint("Use another name for the semaphore.")));
	if (v.reason == REFUSE_OTHER_KIND)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("resource \"%s\" is held as a semaphore, not as a lock",
						text_to_cstring(res->name)),
				 errdetail("A name is a lock or a semaphore while it has live holdings, not both."),
				 errhint("Use another name for the lock.")));
	if (v.reason == REFUSE_MAX_PERMITS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("semaphore \"%s\" has max_permits %d, not %d",
						text_to_cstring(res->name), st->permits_max,
						req->max_permits),
				 errdetail("Every caller of a semaphore passes the same max_permits while any permit is held.")));
}
