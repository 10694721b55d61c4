/*-------------------------------------------------------------------------
 *
 * shares.c
 *		The shared holdings of dlock.shares (0.4), several per resource
 *		(primary key resource, holder, owner), by direct heap access
 *		(table.c): read all at once for admit.c (dlock_row_read_shares),
 *		written one by one (dlock_share_insert, dlock_share_change).
 *
 * Concurrency: as for dlock.leases (rows.c): every write happens while the
 * caller holds the resource's lock-manager lock in CHANGE mode
 * (resource.c), taken before the holdings were read; a write that finds
 * another version than the one read (a superuser's UPDATE by hand)
 * changes nothing and says so, and the caller reads and decides again.
 * Under SQL older than 0.4 there is no table: reads find no holdings and
 * writes are refused.
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
 * dlock.shares (0.4): shared holdings, several per resource.  Read and
 * written like dlock.leases, under the resource's lock (CHANGE).
 */
enum
{
	S_RESOURCE, S_HOLDER, S_OWNER, S_COUNT, S_FENCE, S_LEASE, S_ACQUIRED_AT,
	S_RENEWED_AT, S_EXPIRES_AT, S_NUM
};
static const char *const share_cols[S_NUM] = {
	"resource", "holder", "owner", "count", "fence", "lease", "acquired_at",
	"renewed_at", "expires_at"
};
static TableInfo shares = {"shares", share_cols, S_NUM, S_NUM};

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
 * dlock_row_read_shares: the shared holdings of res (all of them, expired
 * ones too), each copied into the store session's caller context; NIL
 * under older SQL.
 */
List *
dlock_row_read_shares(const DlockResource *res)
{
	Relation	rel = open_table(&shares, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	Snapshot	snap;
	HeapTuple	tup;
	List	   *result = NIL;
	TupleDesc	desc;

	if (rel == NULL)
		return NIL;
	desc = RelationGetDescr(rel);
	snap = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyInit(&key, shares.att[S_RESOURCE], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	scan = systable_beginscan(rel, shares.pkey, true, snap, 1, &key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		MemoryContext old = MemoryContextSwitchTo(dlock_store_context());
		DlockRow   *s = palloc0(sizeof(DlockRow));
		bool		isnull;

		s->exists = true;
		s->held = true;
		s->tid = tup->t_self;
		s->holder = TextDatumGetCString(heap_getattr(tup, shares.att[S_HOLDER], desc, &isnull));
		s->owner = DatumGetObjectId(heap_getattr(tup, shares.att[S_OWNER], desc, &isnull));
		s->count = DatumGetInt32(heap_getattr(tup, shares.att[S_COUNT], desc, &isnull));
		s->fence = DatumGetInt64(heap_getattr(tup, shares.att[S_FENCE], desc, &isnull));
		s->lease = *DatumGetIntervalP(heap_getattr(tup, shares.att[S_LEASE], desc, &isnull));
		s->expires_at = DatumGetTimestampTz(heap_getattr(tup, shares.att[S_EXPIRES_AT], desc, &isnull));
		result = lappend(result, s);
		MemoryContextSwitchTo(old);
	}
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return result;
}

/* fetch_share: the share row at seen->tid, if it is still that version. */
static bool
fetch_share(Relation rel, const DlockResource *res, const DlockRow *seen,
			RowImage *img)
{
	ScanKeyData keys[3];
	SysScanDesc scan;
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	HeapTuple	tup;
	TupleDesc	desc = RelationGetDescr(rel);
	text	   *holder = cstring_to_text(seen->holder);

	ScanKeyInit(&keys[0], shares.att[S_RESOURCE], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	ScanKeyInit(&keys[1], shares.att[S_HOLDER], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(holder));
	ScanKeyInit(&keys[2], shares.att[S_OWNER], BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(seen->owner));
	scan = systable_beginscan(rel, shares.pkey, true, snap, 3, keys);
	tup = systable_getnext(scan);
	img->tup = HeapTupleIsValid(tup) && ItemPointerEquals(&tup->t_self, (ItemPointer) &seen->tid) ?
		heap_copytuple(tup) : NULL;
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	if (img->tup == NULL)
		return false;
	image_init(img, desc->natts);
	heap_deform_tuple(img->tup, desc, img->values, img->nulls);
	return true;
}

/* open_shares: dlock.shares for a change (the 0.4 SQL is there). */
static Relation
open_shares(void)
{
	Relation	rel = open_table(&shares, RowExclusiveLock);

	if (rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shared locks need the 0.4 SQL of dlock"),
				 errhint("Run ALTER EXTENSION dlock UPDATE.")));
	return rel;
}

/* dlock_share_insert: a new shared holding of res. */
void
dlock_share_insert(const DlockResource *res, text *holder, Oid owner,
				   int64 fence, const Interval *lease, TimestampTz now,
				   TimestampTz expires)
{
	Relation	rel = open_shares();
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
	set_col(&shares, &img, S_RESOURCE, PointerGetDatum(res->name));
	set_col(&shares, &img, S_HOLDER, PointerGetDatum(holder));
	set_col(&shares, &img, S_OWNER, ObjectIdGetDatum(owner));
	set_col(&shares, &img, S_COUNT, Int32GetDatum(1));
	set_col(&shares, &img, S_FENCE, Int64GetDatum(fence));
	set_col(&shares, &img, S_LEASE, PointerGetDatum(lease));
	set_col(&shares, &img, S_ACQUIRED_AT, TimestampTzGetDatum(now));
	set_col(&shares, &img, S_RENEWED_AT, TimestampTzGetDatum(now));
	set_col(&shares, &img, S_EXPIRES_AT, TimestampTzGetDatum(expires));
	estate = fill_defaults(rel, &img);
	tup = heap_form_tuple(desc, img.values, img.nulls);
	if (estate != NULL)
		FreeExecutorState(estate);
	(void) store_tuple(rel, NULL, tup);
	heap_freetuple(tup);
	CommandCounterIncrement();
	table_close(rel, NoLock);
}

/*
 * dlock_share_change: a shared holding read as *seen gets count (0: it is
 * deleted), and, when expires is not 0, that expiry (and lease, if not
 * NULL).  False, changing nothing, if the row changed since it was read.
 */
bool
dlock_share_change(const DlockResource *res, const DlockRow *seen,
				   int32 count, const Interval *lease, TimestampTz now,
				   TimestampTz expires)
{
	Relation	rel = open_shares();
	RowImage	img;
	bool		written = false;

	if (fetch_share(rel, res, seen, &img))
	{
		if (count == 0)
		{
			simple_heap_delete(rel, &img.tup->t_self);
			CommandCounterIncrement();
			written = true;
		}
		else
		{
			set_col(&shares, &img, S_COUNT, Int32GetDatum(count));
			if (expires != 0)
			{
				set_col(&shares, &img, S_EXPIRES_AT, TimestampTzGetDatum(expires));
				set_col(&shares, &img, S_RENEWED_AT, TimestampTzGetDatum(now));
			}
			if (lease != NULL)
				set_col(&shares, &img, S_LEASE, PointerGetDatum(lease));
			written = write_row(rel, &img);
		}
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return written;
}
