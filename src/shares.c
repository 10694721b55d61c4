/*-------------------------------------------------------------------------
 *
 * shares.c
 *		The shared holdings of dlock.shares (0.4), several per resource
 *		(primary key resource, holder, owner), by direct heap access
 *		(table.c): read all at once for admit.c (dlock_row_read_shares),
 *		written one by one (dlock_share_insert, dlock_share_change).
 *		A semaphore's holdings (0.5) are rows of dlock.permits, the same
 *		columns with their permits and the semaphore's max_permits: read
 *		with the shared holdings (with permits set), written by
 *		dlock_permits_insert and dlock_permits_add, changed and deleted
 *		by dlock_share_change like the shared ones.
 *
 * Concurrency: as for dlock.leases (rows.c): every write happens while the
 * caller holds the resource's lock-manager lock in CHANGE mode
 * (resource.c), taken before the holdings were read; a write that finds
 * another version than the one read (a superuser's UPDATE by hand)
 * changes nothing and says so, and the caller reads and decides again.
 * Under SQL older than 0.4 there is no table: reads find no holdings and
 * writes are refused; under SQL older than 0.5 there is no dlock.permits:
 * no holding read has permits, and permits are refused.
 *
 *-------------------------------------------------------------------------
 */
#include "table.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/*
 * dlock.shares (0.4): shared holdings, several per resource; dlock.permits
 * (0.5): a semaphore's holdings, the same columns and permits and
 * max_permits.  Read and written like dlock.leases, under the resource's
 * lock (CHANGE).
 */
enum
{
	S_RESOURCE, S_HOLDER, S_OWNER, S_COUNT, S_FENCE, S_LEASE, S_ACQUIRED_AT,
	S_RENEWED_AT, S_EXPIRES_AT, S_PERMITS, S_MAX_PERMITS, S_NUM
};
static const char *const share_cols[S_NUM] = {
	"resource", "holder", "owner", "count", "fence", "lease", "acquired_at",
	"renewed_at", "expires_at", "permits", "max_permits"
};
static TableInfo shares = {"shares", share_cols, S_PERMITS, S_PERMITS};
static TableInfo permits_table = {"permits", share_cols, S_NUM, S_NUM};

/* table_of: the table of a holding read by dlock_row_read_shares. */
static TableInfo *
table_of(const DlockRow *seen)
{
	return seen->permits > 0 ? &permits_table : &shares;
}

/* dlock_shares_installed: is the 0.4 SQL there (shared holdings)? */
bool
dlock_shares_installed(void)
{
	Relation	rel = open_table(&shares, AccessShareLock);

	if (rel == NULL)
		return false;
	table_close(rel, NoLock);
	return true;
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
		if (t == &permits_table)
		{
			s->permits = DatumGetInt32(heap_getattr(tup, t->att[S_PERMITS], desc, &isnull));
			s->max_permits = DatumGetInt32(heap_getattr(tup, t->att[S_MAX_PERMITS], desc, &isnull));
		}
		result = lappend(result, s);
		MemoryContextSwitchTo(old);
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
			   TimestampTz expires, int32 permits, int32 max_permits)
{
	TableInfo  *t = permits > 0 ? &permits_table : &shares;
	Relation	rel = open_shares(t);
	TupleDesc	desc = RelationGetDescr(rel);
	RowImage	img;
	HeapTuple	tup;
	EState	   *estate;

	image_init(&img, desc->natts);
	for (int i = 0; i < desc->natts; i++)
	{
		img.values[i] = (Datum) 0;
		img.nulls[i] = true;
	}
	set_col(t, &img, S_RESOURCE, PointerGetDatum(res->name));
	set_col(t, &img, S_HOLDER, PointerGetDatum(holder));
	set_col(t, &img, S_OWNER, ObjectIdGetDatum(owner));
	set_col(t, &img, S_COUNT, Int32GetDatum(1));
	set_col(t, &img, S_FENCE, Int64GetDatum(fence));
	set_col(t, &img, S_LEASE, PointerGetDatum(lease));
	set_col(t, &img, S_ACQUIRED_AT, TimestampTzGetDatum(now));
	set_col(t, &img, S_RENEWED_AT, TimestampTzGetDatum(now));
	set_col(t, &img, S_EXPIRES_AT, TimestampTzGetDatum(expires));
	if (permits > 0)
	{
		set_col(t, &img, S_PERMITS, Int32GetDatum(permits));
		set_col(t, &img, S_MAX_PERMITS, Int32GetDatum(max_permits));
	}
	estate = fill_defaults(rel, &img);
	tup = heap_form_tuple(desc, img.values, img.nulls);
	if (estate != NULL)
		FreeExecutorState(estate);
	(void) store_tuple(rel, NULL, tup);
	heap_freetuple(tup);
	CommandCounterIncrement();
	table_close(rel, NoLock);
}

/* dlock_share_insert: a new shared holding of res. */
void
dlock_share_insert(const DlockResource *res, text *holder, Oid owner,
				   int64 fence, const Interval *lease, TimestampTz now,
				   TimestampTz expires)
{
	insert_holding(res, holder, owner, fence, lease, now, expires, 0, 0);
}

/* dlock_permits_insert: a new holding of permits of the semaphore res (0.5). */
void
dlock_permits_insert(const DlockResource *res, text *holder, Oid owner,
					 int64 fence, const Interval *lease, TimestampTz now,
					 TimestampTz expires, int32 permits, int32 max_permits)
{
	Assert(permits > 0 && max_permits >= permits);
	insert_holding(res, holder, owner, fence, lease, now, expires, permits,
				   max_permits);
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
	Relation	rel = open_table(&permits_table, AccessShareLock);

	if (rel == NULL)
		return false;
	table_close(rel, NoLock);
	return true;
}
