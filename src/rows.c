/*-------------------------------------------------------------------------
 *
 * rows.c
 *		The hot paths' reads and writes of a resource's holdings, by direct
 *		heap access (table.c): no SPI, no planner, no identity switch.
 *		The exclusive holding's row of dlock.leases; the shared holdings
 *		of dlock.shares (0.4) and a semaphore's of dlock.permits (0.5);
 *		the reads of dlock.tickets and dlock.delays that admit.c's state
 *		needs; the column setters of the row images that rows.c and
 *		ending.c write (set_col, set_null).  A holding in a session (1.1)
 *		has its session's expiry and ttl (with_session, session_row.c).
 *		Ending an exclusive holding is ending.c's.
 *
 * Each function finds its row with a primary-key index scan on the
 * latest snapshot and writes it as the executor does; a write checks that
 * the row is still the version the decision read (else it changes
 * nothing, and the caller reads and decides again).  Under SQL older than
 * 0.4 there is no dlock.shares: reads find no shared holdings and writes
 * are refused; likewise dlock.permits before 0.5.  More:
 * docs/how-it-works.md, "Inside the C extension".
 *
 * Concurrency: every write happens under the resource's lock (resource.c:
 * CHANGE; SHARE for a shared holder's own row), taken before the row is
 * read.  Rights: direct access checks no privileges; read-only
 * transactions and standbys are refused before any of this runs
 * (dlock_check_writable).
 *
 *-------------------------------------------------------------------------
 */
#include "table.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

static const char *const lease_cols[L_NUM] = {
	"resource", "holder", "owner", "count", "fence", "lease", "acquired_at",
	"renewed_at", "expires_at", "released_at", "took_over", "session"
};

/* dlock.tickets (0.2): the columns the queue check reads. */
enum
{
	T_RESOURCE, T_TICKET, T_EXPIRES_AT, T_NUM
};
static const char *const ticket_cols[T_NUM] = {"resource", "ticket", "expires_at"};

/* dlock.delays (0.2) */
enum
{
	D_RESOURCE, D_FENCE, D_LOCK_DELAY, D_AVAILABLE_AT, D_NUM
};
static const char *const delay_cols[D_NUM] = {
	"resource", "fence", "lock_delay", "available_at"
};

/* dlock.leases and dlock.delays are ending.c's too (table.h). */
TableInfo	leases = {"leases", lease_cols, L_NUM, L_TOOK_OVER};
static TableInfo tickets = {"tickets", ticket_cols, T_NUM, T_NUM};
TableInfo	delays = {"delays", delay_cols, D_NUM, D_NUM};

/*
 * with_session: a holding in a session (row->session set) has its
 * session's expiry and ttl, not those stored in its row (a copy from its
 * acquisition): -infinity once the session's row is gone.
 */
static void
with_session(DlockRow *row)
{
	DlockSession s;

	if (row->session == 0)
		return;
	if (dlock_session_read(row->session, &s))
	{
		row->expires_at = s.expires_at;
		row->lease = s.ttl;
	}
	else
		row->expires_at = DT_NOBEGIN;
}

/* open_leases: dlock.leases opened for a read or a change. */
Relation
open_leases(LOCKMODE mode)
{
	Relation	rel = open_table(&leases, mode);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table dlock.leases does not exist"),
				 errhint("Run CREATE EXTENSION dlock.")));
	return rel;
}

/*
 * set_col / set_null: change column c (of t's enum in table.h) of the
 * image for write_row; a column the installed SQL lacks is skipped.
 */
void
set_col(TableInfo *t, RowImage *img, int c, Datum v)
{
	if (t->att[c] == InvalidAttrNumber)
		return;
	img->values[t->att[c] - 1] = v;
	img->nulls[t->att[c] - 1] = false;
	img->replace[t->att[c] - 1] = true;
}

void
set_null(TableInfo *t, RowImage *img, int c)
{
	if (t->att[c] == InvalidAttrNumber)
		return;
	img->values[t->att[c] - 1] = (Datum) 0;
	img->nulls[t->att[c] - 1] = true;
	img->replace[t->att[c] - 1] = true;
}

/*
 * fetch_resource: res's row of t (keyed by resource), as table.c's
 * fetch_row; with seen, for a write decided on the version seen (read by
 * dlock_row_read under the resource's lock): false if it is no longer
 * that version.
 */
bool
fetch_resource(Relation rel, TableInfo *t, const DlockResource *res,
			   const DlockRow *seen, RowImage *img)
{
	ScanKeyData key;

	ScanKeyInit(&key, t->att[0], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	return fetch_row(rel, t, 1, &key, seen ? &seen->tid : NULL, img);
}

/*
 * dlock_row_read: read a resource's row into *row (holder copied into the
 * memory context that was current when the store session began).
 */
void
dlock_row_read(const DlockResource *res, DlockRow *row)
{
	Relation	rel = open_leases(AccessShareLock);
	RowImage	img;

	memset(row, 0, sizeof(*row));
	if (fetch_resource(rel, &leases, res, NULL, &img))
	{
		row->exists = true;
		row->tid = img.tup->t_self;
		row->held = !ISNULL(&leases, &img, L_HOLDER);
		if (row->held)
		{
			MemoryContext old = MemoryContextSwitchTo(dlock_store_context());

			row->holder = TextDatumGetCString(COL(&leases, &img, L_HOLDER));
			MemoryContextSwitchTo(old);
		}
		row->owner = ISNULL(&leases, &img, L_OWNER) ? InvalidOid :
			DatumGetObjectId(COL(&leases, &img, L_OWNER));
		row->count = DatumGetInt32(COL(&leases, &img, L_COUNT));
		row->fence = ISNULL(&leases, &img, L_FENCE) ? 0 :
			DatumGetInt64(COL(&leases, &img, L_FENCE));
		if (!ISNULL(&leases, &img, L_LEASE))
			row->lease = *DatumGetIntervalP(COL(&leases, &img, L_LEASE));
		row->expires_at = ISNULL(&leases, &img, L_EXPIRES_AT) ? DT_NOBEGIN :
			DatumGetTimestampTz(COL(&leases, &img, L_EXPIRES_AT));
		if (row->held && leases.att[L_SESSION] != InvalidAttrNumber &&
			!ISNULL(&leases, &img, L_SESSION))
			row->session = DatumGetInt64(COL(&leases, &img, L_SESSION));
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	with_session(row);
}

/* set_session: a new holding's session column (0: a leased holding). */
static void
set_session(TableInfo *t, RowImage *img, int c, int64 session)
{
	if (session != 0 && t->att[c] == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sessions need the 1.1 SQL of dlock"),
				 errhint("Run ALTER EXTENSION dlock UPDATE.")));
	if (session != 0)
		set_col(t, img, c, Int64GetDatum(session));
	else
		set_null(t, img, c);
}

/* dlock_row_insert: the first holding of a resource never seen. */
void
dlock_row_insert(const DlockResource *res, text *holder, Oid owner,
				 int64 fence, const Interval *lease, TimestampTz now,
				 TimestampTz expires, int64 session)
{
	Relation	rel = open_leases(RowExclusiveLock);
	RowImage	img;

	image_new(rel, &img);
	set_col(&leases, &img, L_RESOURCE, PointerGetDatum(res->name));
	set_col(&leases, &img, L_HOLDER, PointerGetDatum(holder));
	set_col(&leases, &img, L_OWNER, ObjectIdGetDatum(owner));
	set_col(&leases, &img, L_COUNT, Int32GetDatum(1));
	set_col(&leases, &img, L_FENCE, Int64GetDatum(fence));
	set_col(&leases, &img, L_LEASE, PointerGetDatum(lease));
	set_col(&leases, &img, L_ACQUIRED_AT, TimestampTzGetDatum(now));
	set_col(&leases, &img, L_RENEWED_AT, TimestampTzGetDatum(now));
	set_col(&leases, &img, L_EXPIRES_AT, TimestampTzGetDatum(expires));
	set_col(&leases, &img, L_TOOK_OVER, BoolGetDatum(false));
	set_session(&leases, &img, L_SESSION, session);
	insert_row(rel, &img);
	table_close(rel, NoLock);
}

/*
 * change_row: read the resource's row for a change that must find it;
 * errors (a bug: the caller holds the resource's lock and saw the row).
 */
void
change_row(Relation rel, const DlockResource *res, RowImage *img)
{
	if (!fetch_resource(rel, &leases, res, NULL, img))
		elog(ERROR, "dlock: the row of \"%s\" is gone",
			 text_to_cstring(res->name));
}

/* dlock_row_renew: a renewal's new lease and expiry. */
void
dlock_row_renew(const DlockResource *res, const Interval *lease,
				TimestampTz now, TimestampTz expires)
{
	Relation	rel = open_leases(RowExclusiveLock);
	RowImage	img;

	do
	{
		change_row(rel, res, &img);
		set_col(&leases, &img, L_LEASE, PointerGetDatum(lease));
		set_col(&leases, &img, L_RENEWED_AT, TimestampTzGetDatum(now));
		set_col(&leases, &img, L_EXPIRES_AT, TimestampTzGetDatum(expires));
	} while (!write_row(rel, &img));
	table_close(rel, NoLock);
}

/*
 * dlock_row_tickets_below: is a live client ticket of res below `below`
 * queued at now (0.2)?  A direct index scan (the statement form was a NOT
 * EXISTS on dlock.tickets), so that the common acquisition and release
 * find out without SPI that nobody queued; false under older SQL.
 */
bool
dlock_row_tickets_below(const DlockResource *res, int64 below, TimestampTz now)
{
	TableInfo  *t = &tickets;
	Relation	rel = open_table(t, AccessShareLock);
	ScanKeyData keys[2];
	SysScanDesc scan;
	Snapshot	snap;
	HeapTuple	tup;
	bool		found = false;

	if (rel == NULL)
		return false;
	snap = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyInit(&keys[0], t->att[T_RESOURCE], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	ScanKeyInit(&keys[1], t->att[T_TICKET], BTLessStrategyNumber, F_INT8LT,
				Int64GetDatum(below));
	scan = systable_beginscan(rel, t->pkey, true, snap, 2, keys);
	while (!found && HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, t->att[T_EXPIRES_AT],
									 RelationGetDescr(rel), &isnull);

		found = !isnull && DatumGetTimestampTz(d) > now;
	}
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return found;
}

/*
 * dlock_row_tickets_live: has res a live client ticket at now (0.2)?  So
 * that a release finds out without SPI that there is no ticket to drop
 * (upkeep.c's dlock_client_ticket_release).
 */
bool
dlock_row_tickets_live(const DlockResource *res, TimestampTz now)
{
	return dlock_row_tickets_below(res, PG_INT64_MAX, now);
}

/*
 * dlock_row_read_delay: set row->available_at (read by dlock_row_read)
 * from the lock-delay of its holding (0.2): its expiry plus the delay
 * while it is held (expired or not), the stored moment once it was freed
 * uncleanly (NULL after a clean unlock); 0, no delay, otherwise and under
 * older SQL.  holding.c's dlock_lease_available applies it.
 */
void
dlock_row_read_delay(const DlockResource *res, DlockRow *row)
{
	TableInfo  *t = &delays;
	Relation	rel;
	RowImage	d;

	row->available_at = 0;
	if (!row->exists)
		return;
	rel = open_table(t, AccessShareLock);
	if (rel == NULL)
		return;
	if (fetch_resource(rel, t, res, NULL, &d))
	{
		if (DatumGetInt64(COL(t, &d, D_FENCE)) == row->fence)
		{
			if (row->held)
				row->available_at = dlock_add_interval(row->expires_at,
													   DatumGetIntervalP(COL(t, &d, D_LOCK_DELAY)));
			else if (!ISNULL(t, &d, D_AVAILABLE_AT))
				row->available_at = DatumGetTimestampTz(COL(t, &d, D_AVAILABLE_AT));
		}
		heap_freetuple(d.tup);
	}
	table_close(rel, NoLock);
}

/*
 * dlock_row_reenter: write a re-entry decided on *seen (the holder's own
 * unexpired holding): count + 1, expiry extended to at least expires.
 * Sets the new count and expiry; false, changing nothing, if the row
 * changed since it was read (fetch_resource).
 */
bool
dlock_row_reenter(const DlockResource *res, const DlockRow *seen,
				  TimestampTz now, TimestampTz expires, int32 *count,
				  TimestampTz *new_expires)
{
	Relation	rel = open_leases(RowExclusiveLock);
	RowImage	img;
	bool		written = false;

	if (fetch_resource(rel, &leases, res, seen, &img))
	{
		TimestampTz old = DatumGetTimestampTz(COL(&leases, &img, L_EXPIRES_AT));
		int32		held = DatumGetInt32(COL(&leases, &img, L_COUNT));

		if (held == PG_INT32_MAX)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("holder \"%s\" has re-entered resource \"%s\" too many times",
							seen->holder, text_to_cstring(res->name)),
					 errdetail("A holding is re-entered at most %d times.", PG_INT32_MAX - 1)));
		*count = held + 1;
		*new_expires = Max(old, expires);
		set_col(&leases, &img, L_COUNT, Int32GetDatum(*count));
		set_col(&leases, &img, L_EXPIRES_AT, TimestampTzGetDatum(*new_expires));
		set_col(&leases, &img, L_RENEWED_AT, TimestampTzGetDatum(now));
		set_null(&leases, &img, L_RELEASED_AT);
		written = write_row(rel, &img);
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return written;
}

/*
 * dlock_row_take: write a new holding decided on *seen (a free or ended
 * holding, or no row at all: then the row is inserted), with the fence
 * drawn after the resource's lock was taken.  False, changing nothing, if
 * the row changed since it was read (fetch_resource).
 */
bool
dlock_row_take(const DlockResource *res, const DlockRow *seen, text *holder,
			   Oid owner, int64 fence, const Interval *lease,
			   TimestampTz now, TimestampTz expires, int64 session)
{
	Relation	rel;
	RowImage	img;
	bool		written = false;

	if (!seen->exists)
	{
		dlock_row_insert(res, holder, owner, fence, lease, now, expires,
						 session);
		return true;
	}
	rel = open_leases(RowExclusiveLock);
	if (fetch_resource(rel, &leases, res, seen, &img))
	{
		set_col(&leases, &img, L_HOLDER, PointerGetDatum(holder));
		set_col(&leases, &img, L_OWNER, ObjectIdGetDatum(owner));
		set_col(&leases, &img, L_COUNT, Int32GetDatum(1));
		set_col(&leases, &img, L_FENCE, Int64GetDatum(fence));
		set_col(&leases, &img, L_LEASE, PointerGetDatum(lease));
		set_col(&leases, &img, L_ACQUIRED_AT, TimestampTzGetDatum(now));
		set_col(&leases, &img, L_EXPIRES_AT, TimestampTzGetDatum(expires));
		set_col(&leases, &img, L_RENEWED_AT, TimestampTzGetDatum(now));
		set_null(&leases, &img, L_RELEASED_AT);
		set_session(&leases, &img, L_SESSION, session);
		written = write_row(rel, &img);
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return written;
}


/*
 * dlock.shares (0.4): shared holdings, several per resource; dlock.permits
 * (0.5): a semaphore's holdings, the same columns and permits and
 * max_permits.  Read and written like dlock.leases, under the resource's
 * lock (CHANGE).
 */
enum
{
	S_RESOURCE, S_HOLDER, S_OWNER, S_COUNT, S_FENCE, S_LEASE, S_ACQUIRED_AT,
	S_RENEWED_AT, S_EXPIRES_AT, S_SESSION, S_PERMITS, S_MAX_PERMITS, S_NUM
};
static const char *const share_cols[S_NUM] = {
	"resource", "holder", "owner", "count", "fence", "lease", "acquired_at",
	"renewed_at", "expires_at", "session", "permits", "max_permits"
};
/* session (1.1) may be absent; so, to open_table, may the permits' columns */
static TableInfo shares = {"shares", share_cols, S_PERMITS, S_SESSION};
static TableInfo permits_table = {"permits", share_cols, S_NUM, S_SESSION};

/* table_of: the table of a holding read by dlock_row_read_shares. */
static TableInfo *
table_of(const DlockRow *seen)
{
	return seen->permits > 0 ? &permits_table : &shares;
}

/* installed: is table t there (the installed SQL has it)? */
static bool
installed(TableInfo *t)
{
	Relation	rel = open_table(t, AccessShareLock);

	if (rel == NULL)
		return false;
	table_close(rel, NoLock);
	return true;
}

/* dlock_shares_installed: is the 0.4 SQL there (shared holdings)? */
bool
dlock_shares_installed(void)
{
	return installed(&shares);
}

/*
 * read_holdings: the holdings of res in table t appended to result (all
 * of them, expired ones too), each copied into the store session's caller
 * context; none if the installed SQL has no such table.
 */
static List *
read_holdings(TableInfo *t, const DlockResource *res, List *result)
{
	Relation	rel = open_table(t, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	Snapshot	snap;
	HeapTuple	tup;
	TupleDesc	desc;

	if (rel == NULL)
		return result;
	desc = RelationGetDescr(rel);
	snap = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyInit(&key, t->att[S_RESOURCE], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	scan = systable_beginscan(rel, t->pkey, true, snap, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());
		DlockRow   *s = palloc0(sizeof(DlockRow));
		bool		isnull;

		s->exists = true;
		s->held = true;
		s->tid = tup->t_self;
		s->holder = TextDatumGetCString(heap_getattr(tup, t->att[S_HOLDER], desc, &isnull));
		s->owner = DatumGetObjectId(heap_getattr(tup, t->att[S_OWNER], desc, &isnull));
		s->count = DatumGetInt32(heap_getattr(tup, t->att[S_COUNT], desc, &isnull));
		s->fence = DatumGetInt64(heap_getattr(tup, t->att[S_FENCE], desc, &isnull));
		s->lease = *DatumGetIntervalP(heap_getattr(tup, t->att[S_LEASE], desc, &isnull));
		s->expires_at = DatumGetTimestampTz(heap_getattr(tup, t->att[S_EXPIRES_AT], desc, &isnull));
		if (t->att[S_SESSION] != InvalidAttrNumber)
		{
			Datum		d = heap_getattr(tup, t->att[S_SESSION], desc, &isnull);

			s->session = isnull ? 0 : DatumGetInt64(d);
		}
		if (t == &permits_table)
		{
			s->permits = DatumGetInt32(heap_getattr(tup, t->att[S_PERMITS], desc, &isnull));
			s->max_permits = DatumGetInt32(heap_getattr(tup, t->att[S_MAX_PERMITS], desc, &isnull));
		}
		result = lappend(result, s);
		MemoryContextSwitchTo(old);
		with_session(s);
	}
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return result;
}

/*
 * dlock_row_read_shares: the holdings of res in dlock.shares and (0.5)
 * dlock.permits, all of them, expired ones too; a semaphore's have their
 * permits set.  NIL under older SQL.
 */
List *
dlock_row_read_shares(const DlockResource *res)
{
	return read_holdings(&permits_table, res,
						 read_holdings(&shares, res, NIL));
}

/*
 * fetch_share: the row of table t that seen was read from, if it is still
 * that version (table.c's fetch_row).
 */
static bool
fetch_share(Relation rel, TableInfo *t, const DlockResource *res,
			const DlockRow *seen, RowImage *img)
{
	ScanKeyData keys[3];

	ScanKeyInit(&keys[0], t->att[S_RESOURCE], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	ScanKeyInit(&keys[1], t->att[S_HOLDER], BTEqualStrategyNumber, F_TEXTEQ,
				CStringGetTextDatum(seen->holder));
	ScanKeyInit(&keys[2], t->att[S_OWNER], BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(seen->owner));
	return fetch_row(rel, t, 3, keys, &seen->tid, img);
}

/*
 * open_shares: table t for a change: dlock.shares (the 0.4 SQL is there)
 * or dlock.permits (0.5).
 */
static Relation
open_shares(TableInfo *t)
{
	Relation	rel = open_table(t, RowExclusiveLock);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg(t == &shares ? "shared locks need the 0.4 SQL of dlock" :
						"semaphores need the 0.5 SQL of dlock"),
				 errhint("Run ALTER EXTENSION dlock UPDATE.")));
	return rel;
}

/*
 * insert_holding: a new holding of res: a shared lock's in dlock.shares
 * (permits 0), or a semaphore's in dlock.permits.
 */
static void
insert_holding(const DlockResource *res, text *holder, Oid owner,
			   int64 fence, const Interval *lease, TimestampTz now,
			   TimestampTz expires, int32 permits, int32 max_permits,
			   int64 session)
{
	TableInfo  *t = permits > 0 ? &permits_table : &shares;
	Relation	rel = open_shares(t);
	RowImage	img;

	image_new(rel, &img);
	set_col(t, &img, S_RESOURCE, PointerGetDatum(res->name));
	set_col(t, &img, S_HOLDER, PointerGetDatum(holder));
	set_col(t, &img, S_OWNER, ObjectIdGetDatum(owner));
	set_col(t, &img, S_COUNT, Int32GetDatum(1));
	set_col(t, &img, S_FENCE, Int64GetDatum(fence));
	set_col(t, &img, S_LEASE, PointerGetDatum(lease));
	set_col(t, &img, S_ACQUIRED_AT, TimestampTzGetDatum(now));
	set_col(t, &img, S_RENEWED_AT, TimestampTzGetDatum(now));
	set_col(t, &img, S_EXPIRES_AT, TimestampTzGetDatum(expires));
	set_session(t, &img, S_SESSION, session);
	if (permits > 0)
	{
		set_col(t, &img, S_PERMITS, Int32GetDatum(permits));
		set_col(t, &img, S_MAX_PERMITS, Int32GetDatum(max_permits));
	}
	insert_row(rel, &img);
	table_close(rel, NoLock);
}

/* dlock_share_insert: a new shared holding of res. */
void
dlock_share_insert(const DlockResource *res, text *holder, Oid owner,
				   int64 fence, const Interval *lease, TimestampTz now,
				   TimestampTz expires, int64 session)
{
	insert_holding(res, holder, owner, fence, lease, now, expires, 0, 0,
				   session);
}

/* dlock_permits_insert: a new holding of permits of the semaphore res (0.5). */
void
dlock_permits_insert(const DlockResource *res, text *holder, Oid owner,
					 int64 fence, const Interval *lease, TimestampTz now,
					 TimestampTz expires, int32 permits, int32 max_permits,
					 int64 session)
{
	Assert(permits > 0 && max_permits >= permits);
	insert_holding(res, holder, owner, fence, lease, now, expires, permits,
				   max_permits, session);
}

/*
 * change_holding: a holding read as *seen (dlock.shares or, with permits,
 * dlock.permits) gets count (0: it is
 * deleted), and, when expires is not 0, that expiry (and lease, if not
 * NULL), and permits, if not 0.  False, changing nothing, if the row
 * changed since it was read.
 */
static bool
change_holding(const DlockResource *res, const DlockRow *seen,
			   int32 count, const Interval *lease, TimestampTz now,
			   TimestampTz expires, int32 permits)
{
	TableInfo  *t = table_of(seen);
	Relation	rel = open_shares(t);
	RowImage	img;
	bool		written = false;

	if (fetch_share(rel, t, res, seen, &img))
	{
		if (count == 0)
		{
			simple_heap_delete(rel, &img.tup->t_self);
			CommandCounterIncrement();
			written = true;
		}
		else
		{
			set_col(t, &img, S_COUNT, Int32GetDatum(count));
			if (expires != 0)
			{
				set_col(t, &img, S_EXPIRES_AT, TimestampTzGetDatum(expires));
				set_col(t, &img, S_RENEWED_AT, TimestampTzGetDatum(now));
			}
			if (lease != NULL)
				set_col(t, &img, S_LEASE, PointerGetDatum(lease));
			if (permits > 0)
				set_col(t, &img, S_PERMITS, Int32GetDatum(permits));
			written = write_row(rel, &img);
		}
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return written;
}

/*
 * dlock_share_change: change_holding of any holding dlock_row_read_shares
 * read (a semaphore's keeps its permits).
 */
bool
dlock_share_change(const DlockResource *res, const DlockRow *seen,
				   int32 count, const Interval *lease, TimestampTz now,
				   TimestampTz expires)
{
	return change_holding(res, seen, count, lease, now, expires, 0);
}

/*
 * dlock_permits_add: a semaphore's holding read as *seen gets count,
 * permits (the ones it had and those added) and expires.  False,
 * changing nothing, if the row changed since it was read.
 */
bool
dlock_permits_add(const DlockResource *res, const DlockRow *seen,
				  int32 count, int32 permits, TimestampTz now,
				  TimestampTz expires)
{
	Assert(seen->permits > 0 && permits > seen->permits);
	return change_holding(res, seen, count, NULL, now, expires, permits);
}

/* dlock_semaphores_installed: is the 0.5 SQL there (dlock.permits)? */
bool
dlock_semaphores_installed(void)
{
	return installed(&permits_table);
}
