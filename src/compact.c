/*-------------------------------------------------------------------------
 *
 * compact.c
 *		Keeping dlock's tables small: a reaper round rewrites a table of
 *		dlock whose deleted rows' space has come to dwarf its live rows.
 *
 * A round (worker.c) ends with dlock_compact_tables: a table of dlock
 * larger than dlock.compact_threshold and more than COMPACT_FACTOR times
 * what its live rows need (at most COMPACT_MAX_LIVE of them) is rewritten
 * with VACUUM (FULL, SKIP_LOCKED), only if nobody has it open at that
 * moment.  A cheap look at the cumulative statistics comes first; then the
 * rows a rewrite would copy are counted (kept_rows).  Why both looks:
 * docs/how-it-works.md, "Inside the C extension".
 *
 * No shared state: what protects a table during its rewrite is the table's
 * ACCESS EXCLUSIVE lock.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/detoast.h"
#include "access/heapam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am_d.h"
#include "commands/extension.h"
#include "commands/vacuum.h"
#include "nodes/makefuncs.h"
#include "parser/parse_node.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* A table is rewritten when over this many times what its live rows need, */
#define COMPACT_FACTOR		4
/* counting what its rows need (kept_rows), at least this many bytes a row, */
#define COMPACT_ROW_BYTES	256
/* and when it has at most this many live rows (a copy of ~2.5 MB). */
#define COMPACT_MAX_LIVE	10000
/* The longest a rewrite waits for a lock (see parts_in_use). */
#define COMPACT_LOCK_TIMEOUT_MS 100

/* The tables that take and lose a row per holding, ticket or lock-delay. */
static const char *const compact_tables[] = {
	"leases", "shares", "permits", "tickets", "delays", "holding_values"
};

/*
 * kept_rows: how many rows of heap rel a rewrite would copy, and the bytes
 * they need, counted up to limit + 1 rows or until they need more than
 * max_bytes: every version not yet dead to all (live, deleted but maybe
 * still seen by a snapshot, being inserted or deleted), as VACUUM FULL
 * decides (heapam_relation_copy_for_cluster).  A row needs its length and
 * line pointer in the heap, at the table's fillfactor, as much again in
 * each index (an index entry may hold the whole key: a conservative
 * guess), and its TOASTed values' stored size.  The scan reads a page at a
 * time through a ring of buffers (as pgstattuple).
 */
static void
kept_rows(Relation rel, double limit, double max_bytes,
		  double *rows, double *bytes)
{
	TransactionId oldest = GetOldestNonRemovableTransactionId(rel);
	TableScanDesc scan = table_beginscan_strat(rel, SnapshotAny, 0, NULL,
											   true, false);
	HeapScanDesc hscan = (HeapScanDesc) scan;
	TupleDesc	desc = RelationGetDescr(rel);
	List	   *indexes = RelationGetIndexList(rel);
	double		per_heap_byte = 100.0 / RelationGetFillFactor(rel, HEAP_DEFAULT_FILLFACTOR)
		+ list_length(indexes);
	Datum	   *values = palloc(desc->natts * sizeof(Datum));
	bool	   *nulls = palloc(desc->natts * sizeof(bool));
	HeapTuple	tup;
	double		n = 0,
				b = 0;

	list_free(indexes);
	while (n <= limit && b <= max_bytes &&
		   (tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		HTSV_Result state;

		CHECK_FOR_INTERRUPTS();
		LockBuffer(hscan->rs_cbuf, BUFFER_LOCK_SHARE);
		state = HeapTupleSatisfiesVacuum(tup, oldest, hscan->rs_cbuf);
		LockBuffer(hscan->rs_cbuf, BUFFER_LOCK_UNLOCK);
		if (state == HEAPTUPLE_DEAD)
			continue;
		n++;
		b += per_heap_byte * (MAXALIGN(tup->t_len) + sizeof(ItemIdData));
		if (HeapTupleHasExternal(tup))
		{
			heap_deform_tuple(tup, desc, values, nulls);
			for (int i = 0; i < desc->natts; i++)
				if (!nulls[i] && TupleDescAttr(desc, i)->attlen == -1 &&
					VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(values[i])))
					b += toast_datum_size(values[i]);
		}
	}
	table_endscan(scan);
	pfree(values);
	pfree(nulls);
	*rows = n;
	*bytes = b;
}

/*
 * open_unwaited: table relid under an ACCESS SHARE lock taken without
 * waiting (kept to the transaction's end), or NULL if another transaction
 * holds a lock that conflicts (a rewrite in progress) or the table is gone.
 */
static Relation
open_unwaited(Oid relid)
{
	Relation	rel;

	if (!ConditionalLockRelationOid(relid, AccessShareLock))
		return NULL;
	rel = try_relation_open(relid, NoLock);
	if (rel == NULL)
		UnlockRelationOid(relid, AccessShareLock);
	return rel;
}

/*
 * mostly_dead: whether a table of size bytes is worth rewriting for rows
 * rows that need bytes: few enough to copy quickly, and needing under
 * 1/COMPACT_FACTOR of it (at least COMPACT_ROW_BYTES a row).
 */
static bool
mostly_dead(int64 size, double rows, double bytes)
{
	double		need = Max(bytes, COMPACT_ROW_BYTES * rows) + COMPACT_ROW_BYTES;

	return rows <= COMPACT_MAX_LIVE && (double) size > COMPACT_FACTOR * need;
}

/*
 * worth_compacting: whether table relid is over the threshold and mostly
 * dead space.  False without a look if another transaction holds a lock
 * that would make even the size's look wait (a rewrite in progress).
 * The statistics' live rows first, then the rows a rewrite would copy
 * (docs/how-it-works.md, compact.c, says why).
 */
static bool
worth_compacting(Oid relid)
{
	int64		size;
	int64		threshold = (int64) dlock_compact_threshold_kb * 1024;
	double		live;
	Relation	rel;
	PgStat_StatTabEntry *stats;
	bool		worth = false;

	rel = open_unwaited(relid);
	if (rel == NULL)
		return false;
	stats = pgstat_fetch_stat_tabentry(relid);
	live = stats != NULL ? (double) DLOCK_STAT_LIVE_TUPLES(stats) : 0;
	size = DatumGetInt64(DirectFunctionCall1(pg_total_relation_size,
											 ObjectIdGetDatum(relid)));
	if (size > threshold && mostly_dead(size, live, 0) &&
		rel->rd_rel->relam == HEAP_TABLE_AM_OID)
	{
		double		rows,
					bytes;

		kept_rows(rel, COMPACT_MAX_LIVE, (double) size / COMPACT_FACTOR,
				  &rows, &bytes);
		worth = mostly_dead(size, rows, bytes);
	}
	relation_close(rel, AccessShareLock);
	return worth;
}

/*
 * parts_in_use: whether another transaction has a lock on an index or the
 * TOAST table of table relid (or the table is gone, or locked against a
 * look).  SKIP_LOCKED spares a wait for the table's lock only: VACUUM
 * FULL then locks the TOAST table and the indexes unconditionally, holding
 * the table's ACCESS EXCLUSIVE lock, so every acquirer would wait as long.
 * Autovacuum vacuums a TOAST table alone, with no lock on the table.  A
 * look, not a lock: for a lock taken in the moment between, the round's
 * lock_timeout (dlock_compact_tables) bounds the wait.  Called in a
 * transaction, which keeps an ACCESS SHARE lock on the table.
 */
static bool
parts_in_use(Oid relid)
{
	Relation	rel;
	List	   *parts;
	ListCell   *lc;
	bool		in_use = false;

	rel = open_unwaited(relid);
	if (rel == NULL)
		return true;
	parts = RelationGetIndexList(rel);
	if (OidIsValid(rel->rd_rel->reltoastrelid))
		parts = lappend_oid(parts, rel->rd_rel->reltoastrelid);
	relation_close(rel, NoLock);
	foreach(lc, parts)
	{
		LOCKTAG		tag;
		int			holders;

		SET_LOCKTAG_RELATION(tag, MyDatabaseId, lfirst_oid(lc));
		(void) GetLockConflicts(&tag, AccessExclusiveLock, &holders);
		if (holders > 0)
		{
			in_use = true;
			break;
		}
	}
	list_free(parts);
	return in_use;
}

/*
 * rewrite: VACUUM (FULL, SKIP_LOCKED) of table relid, as that statement run
 * at top level would (it commits the transaction it is given and runs its
 * own).  Named by OID only, so that a table somebody has open is skipped
 * without a message.  Called in a transaction; returns in one.
 */
static void
rewrite(Oid relid)
{
	MemoryContext portal = AllocSetContextCreate(TopMemoryContext,
												 "dlock compaction",
												 ALLOCSET_DEFAULT_SIZES);
	MemoryContext saved_portal = PortalContext;
	MemoryContext old = MemoryContextSwitchTo(portal);
	VacuumStmt *stmt = makeNode(VacuumStmt);

	/*
	 * The statement must outlive the transaction vacuum commits (as a
	 * client's does in MessageContext), and so must vacuum's own context.
	 */
	stmt->options = list_make2(makeDefElem("full", NULL, -1),
							   makeDefElem("skip_locked", NULL, -1));
	stmt->rels = list_make1(makeVacuumRelation(NULL, relid, NIL));
	stmt->is_vacuumcmd = true;
	MemoryContextSwitchTo(old);
	PortalContext = portal;
	PG_TRY();
	{
		ExecVacuum(make_parsestate(NULL), stmt, true);
	}
	PG_FINALLY();
	{
		PortalContext = saved_portal;
	}
	PG_END_TRY();
	/* (After an error it is left to the end of the round's process.) */
	MemoryContextDelete(portal);
}

/*
 * dlock_compact_tables: rewrite each of dlock's tables that is worth it.
 * Called by a reaper round outside any transaction; returns how many it
 * rewrote (or found worth it: a table somebody had open is skipped).
 */
int
dlock_compact_tables(void)
{
	Oid			relids[lengthof(compact_tables)];
	const char *names[lengthof(compact_tables)];
	int			n = 0;

	if (dlock_compact_threshold_kb < 0)
		return 0;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("dlock", true)))
	{
		Oid			schema = dlock_schema_oid();

		for (int i = 0; i < (int) lengthof(compact_tables); i++)
		{
			Oid			relid = get_relname_relid(compact_tables[i], schema);

			if (OidIsValid(relid) && worth_compacting(relid))
			{
				names[n] = compact_tables[i];
				relids[n++] = relid;
			}
		}
	}
	PopActiveSnapshot();
	CommitTransactionCommand();

	/*
	 * A rewrite holds the table's ACCESS EXCLUSIVE lock while it waits for
	 * any other: at most COMPACT_LOCK_TIMEOUT_MS (then it fails, is
	 * reported, and the round goes on).  The round ends after this.
	 */
	if (n > 0 && (LockTimeout == 0 || LockTimeout > COMPACT_LOCK_TIMEOUT_MS))
		SetConfigOption("lock_timeout", CppAsString2(COMPACT_LOCK_TIMEOUT_MS),
						PGC_SUSET, PGC_S_OVERRIDE);
	for (int i = 0; i < n; i++)
	{
		MemoryContext ctx = CurrentMemoryContext;

		PG_TRY();
		{
			StartTransactionCommand();
			if (!parts_in_use(relids[i]))
				rewrite(relids[i]);
			CommitTransactionCommand();
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			/* Report it, and go on with the round. */
			HOLD_INTERRUPTS();
			MemoryContextSwitchTo(ctx);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			RESUME_INTERRUPTS();
			ereport(LOG,
					(errcode(edata->sqlerrcode),
					 errmsg("dlock reaper round could not compact table dlock.%s: %s",
							names[i], edata->message)));
			FreeErrorData(edata);
		}
		PG_END_TRY();
	}
	return n;
}
