/*-------------------------------------------------------------------------
 *
 * rows.c
 *		The hot paths' reads and writes of one row of dlock.leases, by
 *		direct heap access (table.c): no SPI, no planner, no identity
 *		switch.  Also the reads of dlock.tickets and dlock.delays that
 *		admit.c's state needs.
 *
 * Each function finds the resource's row with a primary-key index scan on
 * the latest snapshot and writes it as the executor does; a write checks
 * that the row is still the version the decision read (else the caller
 * reads and decides again).  A holding's row goes when the holding ends,
 * unless something still needs it (row_needed).  More:
 * docs/how-it-works.md, "Inside the C extension".
 *
 * Concurrency: every write happens under the resource's lock in CHANGE
 * mode (resource.c), taken before the row is read.  Rights: direct access
 * checks no privileges; read-only transactions and standbys are refused
 * before any of this runs (dlock_check_writable).
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

/* The columns of dlock.leases this file reads or writes. */
typedef enum LeaseCol
{
	L_RESOURCE,
	L_HOLDER,
	L_OWNER,
	L_COUNT,
	L_FENCE,
	L_LEASE,
	L_ACQUIRED_AT,
	L_RENEWED_AT,
	L_EXPIRES_AT,
	L_RELEASED_AT,
	L_TOOK_OVER,				/* 0.1's scratch column; may be absent */
	L_NUM
} LeaseCol;

static const char *const lease_cols[L_NUM] = {
	"resource", "holder", "owner", "count", "fence", "lease", "acquired_at",
	"renewed_at", "expires_at", "released_at", "took_over"
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

static TableInfo leases = {"leases", lease_cols, L_NUM, L_TOOK_OVER};
static TableInfo tickets = {"tickets", ticket_cols, T_NUM, T_NUM};
static TableInfo delays = {"delays", delay_cols, D_NUM, D_NUM};
/* dlock.holding_values (0.2): only whether the resource has a row. */
static const char *const value_cols[1] = {"resource"};
static TableInfo holding_values = {"holding_values", value_cols, 1, 1};

/* open_leases: dlock.leases opened for a read or a change. */
static Relation
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
 * fetch_resource: res's row of t (keyed by resource), as table.c's
 * fetch_row; with seen, for a write decided on the version seen (read by
 * dlock_row_read under the resource's lock): false if it is no longer
 * that version.
 */
static bool
fetch_resource(Relation rel, TableInfo *t, const DlockResource *res,
			   const DlockRow *seen, RowImage *img)
{
	ScanKeyData key;

	ScanKeyInit(&key, t->att[0], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	return fetch_row(rel, t, 1, &key, seen ? &seen->tid : NULL, img);
}

/*
 * is_mine: the row is held, unexpired at now, by holder of role owner:
 * holding.c's HOLDING_MINE, for the one-step re-entry and release.
 */
static bool
is_mine(RowImage *img, text *holder, Oid owner, TimestampTz now)
{
	return !ISNULL(&leases, img, L_HOLDER) &&
		text_eq(DatumGetTextPP(COL(&leases, img, L_HOLDER)), holder) &&
		!ISNULL(&leases, img, L_OWNER) &&
		DatumGetObjectId(COL(&leases, img, L_OWNER)) == owner &&
		!ISNULL(&leases, img, L_EXPIRES_AT) &&
		DatumGetTimestampTz(COL(&leases, img, L_EXPIRES_AT)) > now;
}

/* ended: the row has no holder, or its lease ended by now. */
static bool
ended(RowImage *img, TimestampTz now)
{
	return ISNULL(&leases, img, L_HOLDER) ||
		(!ISNULL(&leases, img, L_EXPIRES_AT) &&
		 DatumGetTimestampTz(COL(&leases, img, L_EXPIRES_AT)) <= now);
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
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
}

/* dlock_row_insert: the first holding of a resource never seen. */
void
dlock_row_insert(const DlockResource *res, text *holder, Oid owner,
				 int64 fence, const Interval *lease, TimestampTz now,
				 TimestampTz expires)
{
	Relation	rel = open_leases(RowExclusiveLock);
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
 * change_row: read the resource's row for a change that must find it;
 * errors (a bug: the caller holds the resource's lock and saw the row).
 */
static void
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

/* set_free: the image of a freed row: no holder, released at now. */
static void
set_free(RowImage *img, TimestampTz now)
{
	set_null(&leases, img, L_HOLDER);
	set_null(&leases, img, L_OWNER);
	set_col(&leases, img, L_COUNT, Int32GetDatum(0));
	set_null(&leases, img, L_EXPIRES_AT);
	set_col(&leases, img, L_RELEASED_AT, TimestampTzGetDatum(now));
}

/*
 * has_row: has table t (0.2 SQL and later) a row of res?  False under
 * older SQL.  An index probe, no copy.
 */
static bool
has_row(TableInfo *t, const DlockResource *res)
{
	Relation	rel = open_table(t, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	Snapshot	snap;
	bool		found;

	if (rel == NULL)
		return false;
	snap = RegisterSnapshot(GetLatestSnapshot());
	ScanKeyInit(&key, t->att[0], BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(res->name));
	scan = systable_beginscan(rel, t->pkey, true, snap, 1, &key);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	table_close(rel, NoLock);
	return found;
}

/*
 * row_needed: must the row of res, whose holding is ending now, stay
 * (free)?  Only while something reads it after the holding: a lock-delay
 * (dlock.delays, tied to the row by its fence: the resource stays
 * unavailable until the delay is over, dlock_row_read_delay), a holding
 * value (elections: elect.c reads the last term's value by its fence), or
 * a live client ticket (the queue's head takes the resource next: the row
 * is reused in place at once).  Otherwise the row goes with the holding
 * (issue 25): a resource nobody holds costs no row, as in the naive lock
 * table, and the table holds what is held, queued or under lock-delay.
 * Nothing else needs it: fences come from the one sequence (fence.c), not
 * from the row, so the next holder's fence is greater whether or not the
 * row is there; waiters are woken by the release's commit (waiters.c) and
 * find the resource free either way; the deletion, like the update it
 * replaces, is undone with the transaction, under the resource's lock
 * held to its end.  The rows kept go with the reaper's purge of long-free
 * rows (reap.c) once nothing needs them.
 */
static bool
row_needed(const DlockResource *res, TimestampTz now)
{
	return has_row(&delays, res) || has_row(&holding_values, res) ||
		dlock_row_tickets_live(res, now);
}

/*
 * delete_row: delete the row read into *img; false if it changed
 * meanwhile (a superuser's UPDATE or DELETE by hand, after waiting for
 * it): read it again and decide again, as for write_row.
 */
static bool
delete_row(Relation rel, RowImage *img)
{
	TM_FailureData tmfd;
	TM_Result	result;

	result = heap_delete(rel, &img->tup->t_self, GetCurrentCommandId(true),
						 InvalidSnapshot, true, &tmfd, false);
	if (result == TM_SelfModified)
		elog(ERROR, "dlock: the row was already changed by this command");
	else if (result != TM_Ok && result != TM_Updated && result != TM_Deleted)
		elog(ERROR, "dlock: unexpected heap_delete result %d", (int) result);
	if (result != TM_Ok)
		return false;
	CommandCounterIncrement();
	return true;
}

/*
 * free_row: the holding read into *img ends at now: its row is deleted
 * unless something still needs it (row_needed), else freed in place.
 * False if the row changed meanwhile (write_row, delete_row).
 */
static bool
free_row(Relation rel, const DlockResource *res, RowImage *img,
		 TimestampTz now)
{
	if (!row_needed(res, now))
		return delete_row(rel, img);
	set_free(img, now);
	return write_row(rel, img);
}

/*
 * dlock_row_release: set the count left; at zero the holding ends: its
 * row goes, or stays free while something needs it (free_row).
 */
void
dlock_row_release(const DlockResource *res, int32 count_left, TimestampTz now)
{
	Relation	rel = open_leases(RowExclusiveLock);
	RowImage	img;
	bool		done;

	do
	{
		change_row(rel, res, &img);
		if (count_left > 0)
		{
			set_col(&leases, &img, L_COUNT, Int32GetDatum(count_left));
			done = write_row(rel, &img);
		}
		else
			done = free_row(rel, res, &img, now);
	} while (!done);
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
			   TimestampTz now, TimestampTz expires)
{
	Relation	rel;
	RowImage	img;
	bool		written = false;

	if (!seen->exists)
	{
		dlock_row_insert(res, holder, owner, fence, lease, now, expires);
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
		written = write_row(rel, &img);
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return written;
}

/*
 * dlock_row_fast_release: the one-step unlock of the caller's own
 * unexpired holding (under fence, when fence_given).  Returns false,
 * changing nothing, otherwise; else sets the count left and the fence.
 */
bool
dlock_row_fast_release(const DlockResource *res, text *holder, Oid owner,
					   TimestampTz now, bool fence_given, int64 fence,
					   int32 *left, int64 *fence_out)
{
	Relation	rel = open_leases(RowExclusiveLock);
	RowImage	img;
	bool		done = false;

	while (!done && fetch_resource(rel, &leases, res, NULL, &img))
	{
		bool		mine = is_mine(&img, holder, owner, now) &&
			(!fence_given || DatumGetInt64(COL(&leases, &img, L_FENCE)) == fence);

		if (mine)
		{
			*left = DatumGetInt32(COL(&leases, &img, L_COUNT)) - 1;
			*fence_out = DatumGetInt64(COL(&leases, &img, L_FENCE));
			if (*left > 0)
			{
				set_col(&leases, &img, L_COUNT, Int32GetDatum(*left));
				done = write_row(rel, &img);
			}
			else
				done = free_row(rel, res, &img, now);
		}
		heap_freetuple(img.tup);
		if (!mine)
			break;
	}
	table_close(rel, NoLock);
	return done;
}

/*
 * dlock_row_reap: end the resource's lease if it expired by now (its row
 * goes, or stays free while something needs it: free_row); returns its
 * fence, or 0 if it was not (or no longer) expired.
 */
int64
dlock_row_reap(const DlockResource *res, TimestampTz now)
{
	Relation	rel = open_leases(RowExclusiveLock);
	RowImage	img;
	int64		fence = 0;
	bool		written = false;

	while (!written && fetch_resource(rel, &leases, res, NULL, &img))
	{
		fence = 0;
		written = true;
		if (!ISNULL(&leases, &img, L_HOLDER) && ended(&img, now))
		{
			fence = DatumGetInt64(COL(&leases, &img, L_FENCE));
			written = free_row(rel, res, &img, now);
		}
		heap_freetuple(img.tup);
	}
	table_close(rel, NoLock);
	return written ? fence : 0;
}
