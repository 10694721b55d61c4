/*-------------------------------------------------------------------------
 *
 * sends.c
 *		What a transaction sends when it ends: the events of the holdings
 *		it ended (NOTIFY payloads) and the wakeups of the waiters its
 *		changes concern, queued here as it makes them.
 *
 * A change queues what it sends afterwards in one place, whatever it is:
 * an event (dlock_notify, dlock_notify_holding) or a wakeup
 * (dlock_wake_after_commit, dlock_wake_released, dlock_wake_after_abort).
 * Nothing goes out here.  At the transaction's end events.c takes the
 * events (NOTIFY, or dlock.outbox) and waiters.c the wakeups (once the
 * transaction's locks are released).  More: docs/how-it-works.md, "Inside
 * the C extension".
 *
 * Backend-local.  Events live in TopTransactionContext and follow
 * subtransactions (dropped with one that aborts, handed to the parent by
 * one that commits).  Wakeups live in TopMemoryContext, because they go
 * out after the transaction's locks are released; an extra wakeup is
 * harmless, so subtransactions do not touch them.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/memutils.h"

/* The longest payload NOTIFY takes (NOTIFY_PAYLOAD_MAX_LENGTH, async.c). */
#define DLOCK_NOTIFY_PAYLOAD_MAX (BLCKSZ - NAMEDATALEN - 128)

static List *events = NIL;		/* DlockEvent *, in TopTransactionContext */

/* queue_event: queue payload on res's channel. */
static void
queue_event(const DlockResource *res, char *payload)
{
	DlockEvent *ev = palloc(sizeof(DlockEvent));

	strlcpy(ev->channel, res->channel, sizeof(ev->channel));
	ev->payload = payload;
	ev->hash = res->hash;
	ev->subxid = GetCurrentSubTransactionId();
	events = lappend(events, ev);
}

/*
 * event_start: the payload's start: event, resource and fence (the JSON
 * object left open).
 */
static void
event_start(StringInfo buf, const DlockResource *res, const char *event,
			int64 fence)
{
	initStringInfo(buf);
	appendStringInfoString(buf, "{\"event\":");
	escape_json(buf, event);
	appendStringInfoString(buf, ",\"resource\":");
	escape_json(buf, text_to_cstring(res->name));
	appendStringInfo(buf, ",\"fence\":" INT64_FORMAT, fence);
}

/*
 * dlock_notify: queue event (released, expired, broken) for res with the
 * fence of the holding that ended; it goes out if the transaction commits.
 */
void
dlock_notify(const DlockResource *res, const char *event, int64 fence)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	StringInfoData buf;

	event_start(&buf, res, event, fence);
	appendStringInfoChar(&buf, '}');
	queue_event(res, buf.data);
	MemoryContextSwitchTo(old);
}

/*
 * dlock_notify_holding: queue an event of a holding that carries its
 * holder and value (elections: elected, proclaimed, resigned, expired):
 * resource and fence as dlock_notify's, with candidate, term (the fence)
 * and value.  A value that would make the payload longer than NOTIFY
 * takes is left out ("value_omitted": true; dlock.leader() has it).
 */
void
dlock_notify_holding(const DlockResource *res, const char *event, int64 fence,
					 const char *candidate, const char *value)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	StringInfoData buf;
	int			before_value;

	event_start(&buf, res, event, fence);
	appendStringInfoString(&buf, ",\"candidate\":");
	escape_json(&buf, candidate);
	appendStringInfo(&buf, ",\"term\":" INT64_FORMAT, fence);
	before_value = buf.len;
	appendStringInfoString(&buf, ",\"value\":");
	if (value)
		escape_json(&buf, value);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoChar(&buf, '}');
	if (buf.len >= DLOCK_NOTIFY_PAYLOAD_MAX)
	{
		buf.len = before_value;
		buf.data[buf.len] = '\0';
		appendStringInfoString(&buf, ",\"value_omitted\":true}");
	}
	queue_event(res, buf.data);
	MemoryContextSwitchTo(old);
}

/*
 * dlock_sends_events: the events queued so far (DlockEvent *), handed over
 * to be sent: the queue is empty after it.
 */
List *
dlock_sends_events(void)
{
	List	   *taken = events;

	events = NIL;
	return taken;
}

/* Resources to wake a waiter of when the transaction ends. */
static DlockWake *wake = NULL;
static int	nwake = 0;
static int	maxwake = 0;

static void
add_wake(uint64 hash, bool abort_only, int32 n)
{
	if (nwake >= maxwake)
	{
		maxwake = Max(16, maxwake * 2);
		wake = wake ? repalloc(wake, maxwake * sizeof(DlockWake)) :
			MemoryContextAlloc(TopMemoryContext, maxwake * sizeof(DlockWake));
	}
	wake[nwake].hash = hash;
	wake[nwake].abort_only = abort_only;
	wake[nwake].n = n;
	nwake++;
}

/*
 * dlock_wake_after_commit: this transaction changed the resource with this
 * hash in a way its waiters care about: wake one when the transaction ends.
 */
void
dlock_wake_after_commit(uint64 hash)
{
	add_wake(hash, false, 1);
}

/*
 * dlock_wake_released: a holding of the resource with this hash is gone
 * (unlocked, broken, expired): when the transaction commits, wake one
 * waiter per permit it frees (a semaphore's holding, 0.5), or, for a
 * lock's holding, one waiter if it was the resource's last holding (a
 * writer waits for the last reader only; a shared holder's own release
 * passes last = true, as it cannot see a concurrent reader's release).
 * The rule of who is woken by a release, in one place.
 */
void
dlock_wake_released(uint64 hash, const DlockRow *holding, bool last)
{
	if (holding->permits > 0)
		add_wake(hash, false, holding->permits);
	else if (last)
		add_wake(hash, false, 1);
}

/*
 * dlock_wake_after_abort: an uncommitted acquisition others may be waiting
 * behind; if it rolls back, one of them should look again.
 */
void
dlock_wake_after_abort(uint64 hash)
{
	add_wake(hash, true, 1);
}

/*
 * dlock_sends_wakes: the wakeups queued so far, *n of them, handed over
 * to be sent: the queue is empty after it (the array stays valid until
 * the next wakeup is queued).
 */
const DlockWake *
dlock_sends_wakes(int *n)
{
	*n = nwake;
	nwake = 0;
	return wake;
}

/* sends_end: forget the events (their memory goes with the transaction). */
static void
sends_end(DlockXactEnd how)
{
	events = NIL;
}

/*
 * sends_subxact: drop the events of an aborted subtransaction (and of its
 * committed children, already handed to it); give those of a committed
 * one to its parent.
 */
static void
sends_subxact(bool commit, SubTransactionId mySubid,
			  SubTransactionId parentSubid)
{
	events = dlock_subxact_items(events, offsetof(DlockEvent, subxid),
								 commit, mySubid, parentSubid);
}

/* What sends.c does when a transaction ends (xact.c calls them). */
const DlockXactHooks dlock_sends_xact_hooks = {
	.end = sends_end,
	.subxact = sends_subxact,
};
