/*-------------------------------------------------------------------------
 *
 * queue.c
 *		Fair queues and lock-delay: the tickets of fair waiters, the head of
 *		a resource's queue, and the delay after a holding ends uncleanly.
 *
 * Tickets are numbered from one sequence (dlock.ticket_seq).  A client
 * that waits on its own side has a row in dlock.tickets (a client ticket);
 * a backend waiting in lock() holds its ticket in the lock manager (an
 * in-server ticket).  The head of a queue is its lowest live ticket.  An
 * attempt's ticket lives through two calls: dlock_queue_enter when it is
 * refused (adopt, take or keep), dlock_queue_settle when it is admitted
 * (drop, the lock-delay, the wakeups); dlock_queue_leave when its wait
 * ends.  admit.c reads the queue through dlock_queue_view.  The
 * "writer waits" and "upgrading" tags of shared locks (0.4) are here too.
 * upkeep.c does what happens outside an attempt.  The tags, the rules of
 * the rows and why: docs/how-it-works.md, "Inside the C extension".
 *
 * Shared state: rows of dlock.tickets and dlock.delays, and the lock
 * manager's locks.  Nothing here waits for a row lock (a holder's ticket
 * row is written under its writer lock, dlock_ticket_row_lock, taken
 * without waiting).  Runs inside store sessions (store.c), and only under
 * the 0.2 SQL or later (dlock_queue_installed).
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

/*
 * The mode of a look at a "fair waiters" or "writer waits" tag, which
 * waiters hold in ShareLock: it conflicts with that, not with itself, so
 * readers looking at once (they take the resource's lock in SHARE mode
 * together, resource.c) never see each other's look as a waiter.
 */
#define PROBE_LOCK	RowExclusiveLock

#define RES_IS(alias) alias ".resource OPERATOR(pg_catalog.=) ($1 COLLATE pg_catalog.\"C\")"

/*
 * dlock_queue_installed: is the 0.2 SQL there (queues and lock-delay)?  A
 * syscache lookup per call, so an ALTER EXTENSION UPDATE in another
 * session takes effect at once.
 */
bool
dlock_queue_installed(void)
{
	return OidIsValid(get_relname_relid("tickets", dlock_schema_oid()));
}

/* mixed_hash: the resource's hash mixed with the database. */
static uint64
mixed_hash(const DlockResource *res)
{
	return res->hash ^ ((uint64) MyDatabaseId * UINT64CONST(0x9E3779B97F4A7C15));
}

static void
set_ticket_tag(LOCKTAG *tag, const DlockResource *res, int64 ticket)
{
	uint64		h = mixed_hash(res);

	SET_LOCKTAG_ADVISORY(*tag, (uint32) ticket, (uint32) (h >> 32), (uint32) h,
						 DLOCK_LOCKTAG_TICKET);
}

static void
set_fair_tag(LOCKTAG *tag, const DlockResource *res)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (res->hash >> 32),
						 (uint32) res->hash, DLOCK_LOCKTAG_FAIR);
}

/*
 * set_lapse_tag: the lock saying that client ticket (in flight) of res
 * lapses at expires.
 */
static void
set_lapse_tag(LOCKTAG *tag, const DlockResource *res, int64 ticket,
			  TimestampTz expires)
{
	SET_LOCKTAG_ADVISORY(*tag, (uint32) ticket, (uint32) (expires / 1000),
						 (uint32) mixed_hash(res), DLOCK_LOCKTAG_LAPSE);
}

/*
 * dlock_ticket_row_lock: the writer lock of holder's (of role owner) ticket row
 * of res, until the transaction ends; without waiting unless wait: false
 * if another transaction has it (it is writing that row: see
 * docs/how-it-works.md, queue.c).
 */
bool
dlock_ticket_row_lock(const DlockResource *res, text *holder, Oid owner, bool wait)
{
	LOCKTAG		tag;
	uint64		h = mixed_hash(res);
	uint32		who = hash_combine(hash_any((const unsigned char *) VARDATA_ANY(holder),
											VARSIZE_ANY_EXHDR(holder)),
								   (uint32) owner);

	SET_LOCKTAG_ADVISORY(tag, who, (uint32) (h >> 32), (uint32) h,
						 DLOCK_LOCKTAG_TICKET_ROW);
	return LockAcquire(&tag, ExclusiveLock, false, !wait) != LOCKACQUIRE_NOT_AVAIL;
}

/* ticket_before: is a before b, modulo 2^32? */
static bool
ticket_before(uint32 a, uint32 b)
{
	return (int32) (a - b) < 0;
}

/* next_ticket: a new ticket number (inside a store session). */
static int64
next_ticket(void)
{
	Oid			seq = get_relname_relid("ticket_seq", dlock_schema_oid());

	if (!OidIsValid(seq))
		elog(ERROR, "dlock: sequence dlock.ticket_seq is missing");
	return nextval_internal(seq, false);
}

/*
 * server_ticket_take: this backend, about to wait in lock() for res,
 * takes a ticket and holds it in the lock manager until it drops it or its
 * transaction ends.  No-op if it has one.
 */
static void
server_ticket_take(const DlockResource *res, int64 *ticket)
{
	LOCKTAG		tag;

	if (*ticket != 0)
		return;

	/*
	 * The "fair waiters" tag first, then the number, then its lock: a
	 * ticket may be taken without the resource's lock (a contended
	 * attempt), so a backend that finds the tag free knows that every
	 * ticket drawn before its look is visible, and one that finds it taken
	 * but no lower ticket knows that any ticket still being drawn will be
	 * higher than its own.
	 */
	set_fair_tag(&tag, res);
	(void) LockAcquire(&tag, ShareLock, false, false);
	*ticket = next_ticket();
	set_ticket_tag(&tag, res, *ticket);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/*
 * client_ticket_adopt: this backend, waiting in lock() for res as
 * holder, holds the holder's live client ticket (taken by its earlier
 * client-side attempts) in the lock manager as its in-server ticket, so
 * that it keeps that place: served when it heads the queue, woken in its
 * order.  False, changing nothing, if there is none, or if another
 * backend waiting for the same holder holds it already.
 */
static bool
client_ticket_adopt(const DlockResource *res, text *holder, Oid owner,
						  TimestampTz now, int64 *ticket)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, REGROLEOID, TIMESTAMPTZOID};
	Datum		values[4];
	LOCKTAG		fair_tag, ticket_tag;
	int64		number;
	bool		isnull;

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = TimestampTzGetDatum(now);
	if (dlock_store_exec(&plan,
						 "SELECT t.ticket FROM dlock.tickets t WHERE " RES_IS("t")
						 "   AND t.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
						 "   AND t.owner OPERATOR(pg_catalog.=) $3"
						 "   AND t.expires_at OPERATOR(pg_catalog.>) $4",
						 4, types, values, NULL, true) != 1)
		return false;
	number = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
										 SPI_tuptable->tupdesc, 1, &isnull));
	set_fair_tag(&fair_tag, res);
	(void) LockAcquire(&fair_tag, ShareLock, false, false);
	set_ticket_tag(&ticket_tag, res, number);
	if (LockAcquire(&ticket_tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
	{
		LockRelease(&fair_tag, ShareLock, false);
		return false;
	}
	*ticket = number;
	return true;
}

/* server_ticket_drop: leave the queue (acquired, or gave up). */
static void
server_ticket_drop(const DlockResource *res, int64 *ticket)
{
	LOCKTAG		tag;

	if (*ticket == 0)
		return;
	set_ticket_tag(&tag, res, *ticket);
	LockRelease(&tag, ExclusiveLock, false);
	set_fair_tag(&tag, res);
	LockRelease(&tag, ShareLock, false);
	*ticket = 0;
}

/*
 * server_tickets_others: does another backend hold an in-server
 * ticket for res?  One conditional lock: our own ticket does not conflict.
 */
static bool
server_tickets_others(const DlockResource *res)
{
	LOCKTAG		tag;

	set_fair_tag(&tag, res);
	if (LockAcquire(&tag, PROBE_LOCK, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, PROBE_LOCK, false);
	return false;
}

/*
 * server_head: the lowest live ticket of res in the lock manager (low 32
 * bits), whether it is this backend's, and until when it lives (DT_NOEND
 * for a waiter in lock(); a client ticket in flight lapses at its end).
 * False if there is none; *lapsed: tickets in flight that lapsed were
 * passed over.
 */
static bool
server_head(const DlockResource *res, int64 mine, uint32 *head, bool *is_mine,
			TimestampTz *until, bool *lapsed)
{
	uint64		h = mixed_hash(res);
	uint32		now_ms = (uint32) (GetCurrentTimestamp() / 1000);
	LockData   *data;
	bool		found = false;
	int			i;

	*until = DT_NOEND;
	*lapsed = false;
	if (!server_tickets_others(res))
	{
		if (mine == 0)
			return false;
		*head = (uint32) mine;
		*is_mine = true;
		return true;
	}
	data = GetLockStatusData();
	for (i = 0; i < data->nelements; i++)
	{
		LockInstanceData *inst = &data->locks[i];
		const LOCKTAG *t = &inst->locktag;
		TimestampTz ends = DT_NOEND;
		int			j;

		if (t->locktag_type != LOCKTAG_ADVISORY ||
			t->locktag_field4 != DLOCK_LOCKTAG_TICKET ||
			t->locktag_field2 != (uint32) (h >> 32) ||
			t->locktag_field3 != (uint32) h ||
			(inst->holdMask & LOCKBIT_ON(ExclusiveLock)) == 0)
			continue;
		/* A client ticket in flight: has it lapsed? */
		for (j = 0; j < data->nelements; j++)
		{
			const LOCKTAG *e = &data->locks[j].locktag;
			int32		left;

			if (e->locktag_type != LOCKTAG_ADVISORY ||
				e->locktag_field4 != DLOCK_LOCKTAG_LAPSE ||
				e->locktag_field1 != t->locktag_field1 ||
				e->locktag_field3 != (uint32) h ||
				data->locks[j].pid != inst->pid)
				continue;
			left = (int32) (e->locktag_field2 - now_ms);
			ends = GetCurrentTimestamp() + (TimestampTz) left * 1000;
			break;
		}
		if (ends != DT_NOEND && ends <= GetCurrentTimestamp())
		{
			*lapsed = true;
			continue;
		}
		if (!found || ticket_before(t->locktag_field1, *head))
		{
			*head = t->locktag_field1;
			*is_mine = (inst->pid == MyProcPid);
			*until = ends;
			found = true;
		}
	}
	return found;
}

/*
 * server_head_allows: may this backend, whose in-server ticket is
 * mine (0: none), take res as far as the lock manager's tickets go?  Yes
 * if the lowest live one is mine; with none of its own, only if there are
 * none but lapsed ones (another backend taking a ticket right now may not
 * be visible yet).  If not, *until is when the head lapses (DT_NOEND:
 * when it leaves).  Call it only when server_tickets_others.
 */
static bool
server_head_allows(const DlockResource *res, int64 mine, TimestampTz *until)
{
	uint32		head;
	bool		is_mine = false;
	bool		lapsed;

	if (server_head(res, mine, &head, &is_mine, until, &lapsed))
		return is_mine;
	return lapsed;
}

/*
 * queue_head: the head of res's queue at now, to holder and owner
 * (client tickets; holder NULL: none of them is the caller's) and to this
 * backend's in-server ticket mine (0: none).
 */
static void
queue_head(const DlockResource *res, text *holder, Oid owner,
				 int64 mine, TimestampTz now, DlockQueueHead *head)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, REGROLEOID, TIMESTAMPTZOID};
	Datum		values[4];
	bool		client = false;
	int64		client_ticket = 0;
	bool		client_mine = false;
	TimestampTz client_expires = 0;
	uint32		shead = 0;
	bool		smine = false;
	TimestampTz suntil = DT_NOEND;
	bool		slapsed;
	bool		server;
	char		nulls[4] = {' ', holder ? ' ' : 'n', ' ', ' '};

	/*
	 * The lock manager first, then the table: a client ticket in flight
	 * when we look there is either seen there, or committed before our
	 * statement's (later) snapshot is taken, and so seen in the table.
	 */
	server = server_head(res, mine, &shead, &smine, &suntil, &slapsed);

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = TimestampTzGetDatum(now);
	if (dlock_store_exec(&plan,
						 "SELECT t.ticket, t.expires_at,"
						 "  (t.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
						 "   AND t.owner OPERATOR(pg_catalog.=) $3)"
						 "  FROM dlock.tickets t WHERE " RES_IS("t")
						 "   AND t.expires_at OPERATOR(pg_catalog.>) $4"
						 "  ORDER BY t.ticket LIMIT 1",
						 4, types, values, nulls, true) == 1)
	{
		bool		isnull;

		client = true;
		client_ticket = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1, &isnull));
		client_expires = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
														   SPI_tuptable->tupdesc, 2, &isnull));
		client_mine = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 3, &isnull)) && !isnull;
	}

	memset(head, 0, sizeof(*head));
	if (!client && !server)
		return;
	head->exists = true;
	if (client && (!server || ticket_before((uint32) client_ticket, shead)))
	{
		head->client = true;
		head->mine = client_mine;
		head->expires_at = client_expires;
	}
	else
	{
		head->client = false;
		head->mine = smine;
		head->expires_at = suntil;
	}
}

/*
 * client_ticket_keep: a client-side fair attempt failed: take a
 * ticket, or keep the holder's live one for another dlock.queue_ttl (an
 * expired one is replaced by a new one, at the back).
 *
 * A new ticket (true) is held in the lock manager like an in-server one
 * until the transaction ends, so nobody drawing a later number is served
 * before its row is visible; a kept one is committed already, and its
 * locks are given back at once.  If another transaction of the same
 * holder is writing the row, this one leaves the row alone rather than
 * wait for it (docs/how-it-works.md, queue.c).
 */
static bool
client_ticket_keep(const DlockResource *res, text *holder, Oid owner,
						 TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[6] = {TEXTOID, TEXTOID, REGROLEOID, INT8OID,
	TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum		values[6];
	LOCKTAG		fair_tag, ticket_tag, lapse_tag;
	int64		ticket;
	TimestampTz expires = now + (TimestampTz) dlock_queue_ttl_ms * 1000;
	bool		isnull;

	if (!dlock_ticket_row_lock(res, holder, owner, false))
		return false;
	set_fair_tag(&fair_tag, res);
	(void) LockAcquire(&fair_tag, ShareLock, false, false);
	ticket = next_ticket();
	set_ticket_tag(&ticket_tag, res, ticket);
	(void) LockAcquire(&ticket_tag, ExclusiveLock, false, false);

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = Int64GetDatum(ticket);
	values[4] = TimestampTzGetDatum(now);
	values[5] = TimestampTzGetDatum(expires);
	if (dlock_store_exec(&plan,
							"INSERT INTO dlock.tickets AS t"
							"  (resource, ticket, holder, owner, queued_at, expires_at)"
							"  VALUES ($1, $4, $2, $3, $5, $6)"
							"  ON CONFLICT (resource, holder, owner) DO UPDATE SET"
							"  ticket = CASE WHEN t.expires_at OPERATOR(pg_catalog.>) $5"
							"    THEN t.ticket ELSE EXCLUDED.ticket END,"
							"  queued_at = CASE WHEN t.expires_at OPERATOR(pg_catalog.>) $5"
							"    THEN t.queued_at ELSE EXCLUDED.queued_at END,"
							"  expires_at = EXCLUDED.expires_at"
							"  RETURNING t.ticket",
							6, types, values, NULL, false) == 1 &&
		DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									1, &isnull)) == ticket)
	{
		/* a new ticket: in flight until the transaction ends, or lapses */
		set_lapse_tag(&lapse_tag, res, ticket, expires);
		(void) LockAcquire(&lapse_tag, AccessShareLock, false, false);
		return true;
	}
	LockRelease(&ticket_tag, ExclusiveLock, false);
	LockRelease(&fair_tag, ShareLock, false);
	return false;
}

/*
 * client_ticket_heads: is the holder's live client ticket the lowest
 * live client ticket of res at now?  Read without the resource's lock: a
 * hint only (acquire.c's wait for the lock), the head is decided under it.
 */
static bool
client_ticket_heads(const DlockResource *res, text *holder, Oid owner,
						  TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[4] = {TEXTOID, TEXTOID, REGROLEOID, TIMESTAMPTZOID};
	Datum		values[4];
	bool		isnull;

	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	values[3] = TimestampTzGetDatum(now);
	if (dlock_store_exec(&plan,
						 "SELECT t.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
						 "   AND t.owner OPERATOR(pg_catalog.=) $3"
						 "  FROM dlock.tickets t WHERE " RES_IS("t")
						 "   AND t.expires_at OPERATOR(pg_catalog.>) $4"
						 "  ORDER BY t.ticket LIMIT 1",
						 4, types, values, NULL, true) != 1)
		return false;
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									  1, &isnull)) && !isnull;
}

/*
 * dlock_client_ticket_drop: the holder's ticket for res leaves the queue;
 * unless another transaction of the same holder is writing it (see
 * client_ticket_keep): that one's ticket stays, to lapse or be
 * dropped by the holder's next acquisition, rather than this one waiting.
 */
void
dlock_client_ticket_drop(const DlockResource *res, text *holder, Oid owner)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TEXTOID, TEXTOID, REGROLEOID};
	Datum		values[3];

	if (!dlock_ticket_row_lock(res, holder, owner, false))
		return;
	values[0] = PointerGetDatum(res->name);
	values[1] = PointerGetDatum(holder);
	values[2] = ObjectIdGetDatum(owner);
	(void) dlock_store_exec(&plan,
							"DELETE FROM dlock.tickets t WHERE " RES_IS("t")
							"  AND t.holder OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
							"  AND t.owner OPERATOR(pg_catalog.=) $3",
							3, types, values, NULL, false);
}

/* delay_set: the new holding fence of res has this lock-delay. */
static void
delay_set(const DlockResource *res, int64 fence, const Interval *delay)
{
	static SPIPlanPtr plan = NULL;
	static const Oid types[3] = {TEXTOID, INT8OID, INTERVALOID};
	Datum		values[3];

	values[0] = PointerGetDatum(res->name);
	values[1] = Int64GetDatum(fence);
	values[2] = PointerGetDatum(delay);
	(void) dlock_store_exec(&plan,
							"INSERT INTO dlock.delays AS d (resource, fence, lock_delay)"
							"  VALUES ($1, $2, $3)"
							"  ON CONFLICT (resource) DO UPDATE SET fence = EXCLUDED.fence,"
							"  lock_delay = EXCLUDED.lock_delay, available_at = NULL",
							3, types, values, NULL, false);
}

/*
 * Shared locks (0.4): writers do not starve.  An exclusive request that
 * waits in lock() holds the resource's "writer waits" tag in ShareLock for
 * as long as it waits; a new shared holder is admitted only while nobody
 * holds it (one conditional lock, as for the fair tag).  An exclusive
 * request of a shared holder (an upgrade) also holds its own "upgrading"
 * tag in ExclusiveLock while it waits, so that two shared holders waiting
 * to upgrade find each other (admit.c: 40P01) instead of waiting forever.
 */
static void
set_writer_tag(LOCKTAG *tag, const DlockResource *res)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (res->hash >> 32),
						 (uint32) res->hash, DLOCK_LOCKTAG_WRITER);
}

static void
set_upgrade_tag(LOCKTAG *tag, const DlockResource *res, const char *holder,
				Oid owner)
{
	uint64		h = mixed_hash(res);
	uint32		who = hash_combine(hash_any((const unsigned char *) holder,
											strlen(holder)), (uint32) owner);

	SET_LOCKTAG_ADVISORY(*tag, who, (uint32) (h >> 32), (uint32) h,
						 DLOCK_LOCKTAG_UPGRADE);
}

/*
 * dlock_writer_wait: an exclusive request of holder (of role owner) waits
 * in lock() for res: hold the tags until dlock_writer_wait_end (or the
 * transaction's end).  No-op once *registered.
 */
void
dlock_writer_wait(const DlockResource *res, text *holder, Oid owner,
				  bool upgrade, bool *registered)
{
	LOCKTAG		tag;

	if (*registered)
		return;
	set_writer_tag(&tag, res);
	(void) LockAcquire(&tag, ShareLock, false, false);
	if (upgrade)
	{
		set_upgrade_tag(&tag, res, text_to_cstring(holder), owner);
		(void) LockAcquire(&tag, ExclusiveLock, false, false);
	}
	*registered = true;
	/* If the wait ends in an error, readers held off should look again. */
	dlock_wake_after_abort(res->hash);
}

/* dlock_writer_wait_end: the wait is over. */
void
dlock_writer_wait_end(const DlockResource *res, text *holder, Oid owner,
					  bool upgrade, bool *registered)
{
	LOCKTAG		tag;

	if (!*registered)
		return;
	set_writer_tag(&tag, res);
	LockRelease(&tag, ShareLock, false);
	if (upgrade)
	{
		set_upgrade_tag(&tag, res, text_to_cstring(holder), owner);
		LockRelease(&tag, ExclusiveLock, false);
	}
	*registered = false;
}

/* writer_waiting: does another backend's exclusive request wait for res? */
static bool
writer_waiting(const DlockResource *res)
{
	LOCKTAG		tag;

	set_writer_tag(&tag, res);
	if (LockAcquire(&tag, PROBE_LOCK, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, PROBE_LOCK, false);
	return false;
}

/* upgrading: does holder (of role owner) wait to upgrade its share of res? */
static bool
upgrading(const DlockResource *res, const char *holder, Oid owner)
{
	LOCKTAG		tag;

	set_upgrade_tag(&tag, res, holder, owner);
	if (LockAcquire(&tag, ShareLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ShareLock, false);
	return false;
}

/*
 * dlock_upgrading_any: does the holder of one of shares (DlockRow *), live
 * at now and not mine, wait to upgrade too?
 */
bool
dlock_upgrading_any(const DlockResource *res, const List *shares,
					const DlockRow *mine, TimestampTz now)
{
	ListCell   *lc;
	bool		any = false;

	foreach(lc, shares)
	{
		DlockRow   *s = lfirst(lc);

		if (s != mine && s->expires_at > now &&
			upgrading(res, s->holder, s->owner))
			any = true;
	}
	return any;
}

/*
 * dlock_queue_heads: does the holder's live client ticket head the queue?
 * A hint, read in a store session of its own without the resource's lock.
 */
bool
dlock_queue_heads(const DlockResource *res, const DlockTicket *t)
{
	bool		head;

	dlock_store_begin();
	head = dlock_queue_installed() &&
		client_ticket_heads(res, t->holder, t->owner, GetCurrentTimestamp());
	dlock_store_end();
	return head;
}

/*
 * dlock_queue_enter: a refused attempt whose verdict says so (queue) keeps
 * its place in the queue.  Waiting in lock(), with no ticket yet, it adopts the holder's live client
 * ticket if it has one (it queued client-side before: it keeps that place;
 * returns true).  Else a fair attempt takes or keeps its ticket: held in
 * the lock manager while it waits in lock(), else a row kept for
 * dlock.queue_ttl.  writer: an exclusive wait in lock() also holds the
 * "writer waits" tags (upgrade: and its "upgrading" tag) until its wait
 * ends.  Inside a store session; under the 0.1 SQL it adopts nothing.
 */
bool
dlock_queue_enter(const DlockResource *res, DlockTicket *t, bool queue,
				  TimestampTz now, bool writer, bool upgrade)
{
	bool		adopted = false;
	bool		taken = false;
	bool		kept_new = false;

	if (queue && t->in_server && t->number == 0 && dlock_queue_installed() &&
		client_ticket_adopt(res, t->holder, t->owner, now, &t->number))
		adopted = t->adopted = true;
	else if (queue && t->fair && t->in_server && t->number == 0)
	{
		server_ticket_take(res, &t->number);
		taken = true;
	}
	else if (queue && t->fair && !t->in_server)
		kept_new = client_ticket_keep(res, t->holder, t->owner, now);

	/*
	 * A ticket held in the lock manager goes with an abort: then wake the
	 * next.  A new client ticket is seen by others once it commits: then
	 * the next looks again (at the committed row, or past a rollback).
	 */
	if (adopted || taken)
		dlock_wake_after_abort(res->hash);
	if (kept_new)
		dlock_wake_after_commit(res->hash);
	if (adopted || taken)
		dlock_wait_set_ticket(t->number, t->owner);
	if (writer)
	{
		t->upgrade = upgrade;
		dlock_writer_wait(res, t->holder, t->owner, upgrade, &t->writer);
	}
	return adopted;
}

/*
 * dlock_queue_settle: an admitted attempt leaves the queue (its in-server
 * ticket, and as s says its client ticket), records a new holding's
 * lock-delay, and has the transaction's end wake the next waiter as s
 * says.  Inside the store session, under the resource's lock.
 */
void
dlock_queue_settle(const DlockResource *res, DlockTicket *t,
				   const DlockSettle *s)
{
	server_ticket_drop(res, &t->number);
	if (s->drop_client)
		dlock_client_ticket_drop(res, t->holder, t->owner);
	if (s->delay != NULL)
		delay_set(res, s->fence, s->delay);
	if (s->wake_abort)
		dlock_wake_after_abort(res->hash);
	if (s->wake_commit)
		dlock_wake_after_commit(res->hash);
}

/*
 * dlock_queue_leave: the wait is over.  An in-server ticket still held (the
 * wait gave up) leaves the queue before the waiter slot does, so the
 * waiter the slot then wakes sees the queue without it.  Readers held off
 * by a writer's wait look again once it is over.  An adopted client ticket
 * leaves with a wait that gave up (lock() timed out: it left the queue),
 * and the next waiter is woken again once that is committed.
 */
void
dlock_queue_leave(const DlockResource *res, DlockTicket *t, bool acquired)
{
	server_ticket_drop(res, &t->number);
	if (t->writer)
	{
		dlock_writer_wait_end(res, t->holder, t->owner, t->upgrade, &t->writer);
		if (!acquired)
			dlock_wake_after_commit(res->hash);
	}
	if (t->adopted && !acquired)
	{
		dlock_store_begin();
		dlock_client_ticket_drop(res, t->holder, t->owner);
		dlock_store_end();
		dlock_wake_after_commit(res->hash);
	}
}

/*
 * dlock_queue_view: what admit.c's decision asks of the queue.  First
 * (head false) the cheap look: other backends' in-server tickets, whether
 * a writer waits (a shared request), live client tickets below the
 * request's, and the holding's lock-delay; then (head) the exact head.
 */
void
dlock_queue_view(const DlockResource *res, const DlockRequest *req, bool head,
				 DlockResourceState *st)
{
	if (head)
	{
		queue_head(res, req->holder, req->holder ? req->caller->role : InvalidOid,
				   req->ticket, st->now, &st->head);
		st->know_head = true;
		return;
	}
	/* The lock manager before the table (see queue_head). */
	st->server_until = DT_NOEND;
	st->server_others = server_tickets_others(res);
	st->server_allows = !st->server_others ||
		server_head_allows(res, req->ticket, &st->server_until);
	if (req->kind == DLOCK_KIND_SHARED)
		st->writer_waiting = writer_waiting(res);
	st->client_ahead = dlock_row_tickets_below(res,
											   req->ticket != 0 ? req->ticket : PG_INT64_MAX,
											   st->now);
	dlock_row_read_delay(res, &st->row);
	st->know_queue = true;
}
