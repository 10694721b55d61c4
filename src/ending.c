/*-------------------------------------------------------------------------
 *
 * ending.c
 *		The end of an exclusive holding in dlock.leases, by direct heap
 *		access (table.c): a release (dlock_row_release), the one-step
 *		release (dlock_row_fast_release), the reaper's end of an expired
 *		lease (dlock_row_reap).
 *
 * A holding's row goes when the holding ends, unless something still
 * needs it (row_needed): then it stays, free.  Like rows.c's writes, each
 * checks that the row is still the version it read, under the resource's
 * lock in CHANGE mode (resource.c).  More: docs/how-it-works.md, "Inside
 * the C extension".
 *
 *-------------------------------------------------------------------------
 */
#include "table.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* dlock.holding_values (0.2): only whether the resource has a row. */
static const char *const value_cols[1] = {"resource"};
static TableInfo holding_values = {"holding_values", value_cols, 1, 1};

/*
 * in_session: a holding in a session (1.1): its expiry is its session's,
 * not the copy in its row.
 */
static bool
in_session(RowImage *img)
{
	return leases.att[L_SESSION] != InvalidAttrNumber &&
		!ISNULL(&leases, img, L_SESSION);
}

/*
 * is_mine: the row is held, unexpired at now, by holder of role owner:
 * holding.c's HOLDING_MINE, for the one-step release.  A session's
 * holding lives while its session does (rows.c's with_session).
 */
static bool
is_mine(RowImage *img, text *holder, Oid owner, TimestampTz now)
{
	DlockSession sess;

	if (ISNULL(&leases, img, L_HOLDER) ||
		!text_eq(DatumGetTextPP(COL(&leases, img, L_HOLDER)), holder) ||
		ISNULL(&leases, img, L_OWNER) ||
		DatumGetObjectId(COL(&leases, img, L_OWNER)) != owner)
		return false;
	if (in_session(img))
		return dlock_session_read(DatumGetInt64(COL(&leases, img, L_SESSION)), &sess) &&
			sess.expires_at > now;
	return !ISNULL(&leases, img, L_EXPIRES_AT) &&
		DatumGetTimestampTz(COL(&leases, img, L_EXPIRES_AT)) > now;
}

/*
 * ended: the row has no holder, or its lease ended by now; a session's
 * holding, when its session ended with that end locked in (session_row.c's
 * dlock_session_lapsed: a keepalive in flight keeps it).
 */
static bool
ended(RowImage *img, TimestampTz now)
{
	if (!ISNULL(&leases, img, L_HOLDER) && in_session(img))
	{
		DlockSession sess;
		int64		id = DatumGetInt64(COL(&leases, img, L_SESSION));

		if (dlock_session_read(id, &sess) && sess.expires_at > now)
			return false;
		return dlock_session_lapsed(id);
	}
	return ISNULL(&leases, img, L_HOLDER) ||
		(!ISNULL(&leases, img, L_EXPIRES_AT) &&
		 DatumGetTimestampTz(COL(&leases, img, L_EXPIRES_AT)) <= now);
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
	set_null(&leases, img, L_SESSION);
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
