/*-------------------------------------------------------------------------
 *
 * table.c
 *		Direct heap access to the tables of dlock, for rows.c, ending.c
 *		and session_row.c (dlock.leases, dlock.shares, dlock.permits,
 *		dlock.tickets, dlock.delays, dlock.session_rows): no SPI, no
 *		planner, no identity switch.
 *
 * A table is looked up by name (so a library newer than the installed SQL
 * finds its columns wherever they are, or finds that the table is not
 * there), checked after it is locked (open_table), and cached until a
 * relcache invalidation touches it: DROP EXTENSION and ALTER EXTENSION
 * UPDATE send one.  Rows are read on the latest snapshot by primary key,
 * with the keys the caller builds (fetch_row), or first where the row
 * was last found (fetch_row_at: dlock.session_rows), and written with
 * heap_update (HOT: nothing indexed changes) or heap_insert, checking the
 * table's constraints and maintaining its indexes as the executor does
 * (store_tuple): a superuser may add an expression or partial index or a
 * CHECK constraint, which CatalogTupleUpdate does not support (an
 * expression index crashed the server).  Triggers do not fire.
 *
 * What the table's own expressions run (CHECK constraints, defaults,
 * generated columns, index expressions) runs as the table's owner with a
 * safe search_path, as the statements of the store session ran it
 * (become_owner; only when the table has any).  Direct access checks no
 * privileges otherwise.
 *
 * Concurrency: the callers write only under the resource's lock-manager
 * lock (CHANGE, resource.c); a superuser's UPDATE or DELETE by hand makes
 * a write find another version than the one read: it changes nothing and
 * says so (store_tuple, write_row), and the caller reads and decides
 * again.  The cache and its invalidation list are backend-local.
 *
 *-------------------------------------------------------------------------
 */
#include "table.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "executor/executor.h"
#include "executor/nodeModifyTable.h"
#include "rewrite/rewriteHandler.h"
#include "catalog/namespace.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* The tables open_table looked up, for invalidate. */
static TableInfo *tables = NULL;
static bool callback_registered = false;

/*
 * The tables whose read locks a wait's attempt gives back (those that take
 * and lose rows: compaction rewrites them), whatever took the locks:
 * open_table, or SPI (dlock.tickets), which locks the indexes too.  Each
 * with its OID and whether the transaction held a read lock of it before
 * the attempt (then it keeps it, and those of its indexes).
 */
static const char *const waited_tables[] = {
	"leases", "shares", "permits", "tickets", "delays", "holding_values"
};
#define NWAITED lengthof(waited_tables)
static Oid	waited_relid[NWAITED];
static bool waited_held[NWAITED];
/* ... and at the mark (the start of the call or of the wait) */
static Oid	start_relid[NWAITED];
static bool start_held[NWAITED];

/* read_locked: whether this backend holds ACCESS SHARE on relid. */
static bool
read_locked(Oid relid, LOCKTAG *tag)
{
	SET_LOCKTAG_RELATION(*tag, MyDatabaseId, relid);
	return DLOCK_LOCK_HELD_BY_ME(tag, AccessShareLock);
}

/*
 * release_reads: give back every ACCESS SHARE lock of relid (each
 * acquisition counts once).  LockRelease says false (with a WARNING) for a
 * lock that another resource owner took: never for one the attempt took.
 */
static void
release_reads(Oid relid)
{
	LOCKTAG		tag;

	while (read_locked(relid, &tag) && LockRelease(&tag, AccessShareLock, false))
		;
}

/* Whether dlock_table_locks_mark noted them for the whole call. */
static bool marked = false;

/*
 * note_held: the OIDs of waited_tables now (an update of the SQL during a
 * long wait may have created some), and which of them the transaction
 * held a read lock of before: at the mark, when marked (a table made since
 * was not held), else now.
 */
static void
note_held(void)
{
	Oid			schema = get_namespace_oid("dlock", true);
	LOCKTAG		tag;

	for (int i = 0; i < (int) NWAITED; i++)
	{
		waited_relid[i] = OidIsValid(schema) ?
			get_relname_relid(waited_tables[i], schema) : InvalidOid;
		waited_held[i] = marked ?
			(start_held[i] && start_relid[i] == waited_relid[i]) :
			(OidIsValid(waited_relid[i]) && read_locked(waited_relid[i], &tag));
	}
}

/*
 * dlock_table_locks_mark: at the start of a waiting call that reads
 * dlock's tables before its wait (campaign, acquire), note what the
 * transaction held before the call, so that a refused attempt gives back
 * those reads too.  Valid until dlock_table_locks_forget (the wait's end,
 * the end of the transaction or of a subtransaction that aborts).
 */
void
dlock_table_locks_mark(void)
{
	marked = false;
	note_held();
	memcpy(start_relid, waited_relid, sizeof(start_relid));
	memcpy(start_held, waited_held, sizeof(start_held));
	marked = true;
}

/*
 * dlock_table_locks_mark_wait: at the start of a wait (wait.c), unless the
 * call marked already: so that a read lock taken between two attempts
 * (not by either) is given back by the next one, not kept as if the
 * transaction had held it before (an ALTER EXTENSION UPDATE that adds a
 * column waited for the waiter, test/t/091).
 */
void
dlock_table_locks_mark_wait(void)
{
	if (!marked)
		dlock_table_locks_mark();
}

void
dlock_table_locks_forget(void)
{
	marked = false;
}

/*
 * give_back: give back the read locks of waited_tables, their indexes and
 * TOAST tables that the transaction did not hold before (note_held).
 */
static void
give_back(void)
{
	LOCKTAG		tag;

	for (int i = 0; i < (int) NWAITED; i++)
	{
		Oid			relid = waited_relid[i];
		Relation	rel;
		List	   *parts;
		ListCell   *lc;

		if (!OidIsValid(relid) || waited_held[i] || !read_locked(relid, &tag))
			continue;
		/* Locked: its index list and TOAST table can be read. */
		rel = try_relation_open(relid, NoLock);
		if (rel == NULL)
		{
			release_reads(relid);	/* dropped meanwhile */
			continue;
		}
		parts = RelationGetIndexList(rel);
		if (OidIsValid(rel->rd_rel->reltoastrelid))
			parts = lappend_oid(parts, rel->rd_rel->reltoastrelid);
		relation_close(rel, NoLock);
		foreach(lc, parts)
			release_reads(lfirst_oid(lc));
		list_free(parts);
		release_reads(relid);
	}
}

/*
 * dlock_table_locks_track: before a wait's attempt, note the OIDs of
 * waited_tables and which of them the transaction held a read lock of
 * before (at the mark: the start of the call or of the wait), and give
 * back those taken since, between two attempts: the attempt starts with
 * none of them, and takes them in its own order, which ALTER EXTENSION
 * UPDATE's LOCK TABLE follows (a read lock of dlock.permits kept from a
 * look between attempts deadlocked a waiter with the 1.0 -> 1.1 update,
 * test/t/091).
 */
void
dlock_table_locks_track(void)
{
	note_held();
	if (marked)
		give_back();
}

/*
 * dlock_table_locks_untrack: after the attempt, if release, give back the
 * read locks it took of waited_tables (give_back), so that a waiter keeps
 * no lock of a table (a rewrite by compact.c would skip the table as long
 * as it waits; ALTER EXTENSION UPDATE would wait).  A lock the transaction
 * held before is kept; so is a table's ROW EXCLUSIVE lock (an attempt that
 * wrote).  The next attempt locks again.
 */
void
dlock_table_locks_untrack(bool release)
{
	if (release)
		give_back();
}

/* invalidate: a relcache invalidation of one of our tables, or of all. */
static void
invalidate(Datum arg, Oid relid)
{
	for (TableInfo *t = tables; t != NULL; t = t->next)
		if (relid == InvalidOid || relid == t->relid)
			t->valid = false;
}

/*
 * open_table: the table opened (and locked) in mode, its OID, primary key
 * and column numbers in *t; NULL when the installed SQL has no such table.
 * The OID cached, or just looked up by name, may name a table that another
 * session dropped (DROP EXTENSION; CREATE EXTENSION) since this backend
 * last read the invalidation messages: locking it reads them, and if they
 * say the table changed, it is looked up again (as RangeVarGetRelid does).
 */
Relation
open_table(TableInfo *t, LOCKMODE mode)
{
	Relation	rel;
	Oid			relid;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (!t->listed)
	{
		t->next = tables;
		tables = t;
		t->listed = true;
	}
	for (;;)
	{
		bool		was_valid = t->valid;

		relid = was_valid ? t->relid :
			get_relname_relid(t->name, dlock_schema_oid());
		if (!OidIsValid(relid))
		{
			/* Older SQL: looked up again next time (cheap, and rare). */
			t->relid = InvalidOid;
			return NULL;
		}
		LockRelationOid(relid, mode);
		if (was_valid ? t->valid :
			get_relname_relid(t->name, dlock_schema_oid()) == relid)
			break;
		/* Dropped, or changed, meanwhile: look again. */
		UnlockRelationOid(relid, mode);
	}
	rel = table_open(relid, NoLock);
	if (t->valid)
		return rel;
	t->relid = relid;
	t->pkey = dlock_primary_key_index(rel);
	if (!OidIsValid(t->pkey))
		elog(ERROR, "dlock: table dlock.%s has no primary key", t->name);
	for (int i = 0; i < t->ncols; i++)
		t->att[i] = get_attnum(t->relid, t->cols[i]);
	for (int i = 0; i < t->ncols; i++)
		if (t->att[i] == InvalidAttrNumber && i < t->nrequired)
			elog(ERROR, "dlock: table dlock.%s has no column %s",
				 t->name, t->cols[i]);
	t->valid = true;
	return rel;
}

/* image_init: columns for natts attributes, none to be replaced. */
void
image_init(RowImage *img, int natts)
{
	if (natts <= MAX_ATTS)
	{
		img->values = img->values_buf;
		img->nulls = img->nulls_buf;
		img->replace = img->replace_buf;
	}
	else
	{
		img->values = palloc(natts * sizeof(Datum));
		img->nulls = palloc(natts * sizeof(bool));
		img->replace = palloc(natts * sizeof(bool));
	}
	memset(img->replace, 0, natts * sizeof(bool));
}

/*
 * fetch_row: the row of rel that a scan of its primary-key index with
 * keys (nkeys of them) finds on the latest snapshot, copied and deformed
 * into *img; false if none, or, with seen, if the row found is another
 * version than seen (a superuser's UPDATE or DELETE by hand since it was
 * read: the caller reads again and decides again).
 */
bool
fetch_row(Relation rel, TableInfo *t, int nkeys, ScanKey keys,
		  const ItemPointerData *seen, RowImage *img)
{
	SysScanDesc scan;
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	HeapTuple	tup;
	TupleDesc	desc = RelationGetDescr(rel);

	scan = systable_beginscan(rel, t->pkey, true, snap, nkeys, keys);
	tup = systable_getnext(scan);
	img->tup = HeapTupleIsValid(tup) &&
		(seen == NULL || ItemPointerEquals(&tup->t_self, (ItemPointer) seen)) ?
		heap_copytuple(tup) : NULL;
	systable_endscan(scan);
	UnregisterSnapshot(snap);
	if (img->tup == NULL)
		return false;
	image_init(img, desc->natts);
	heap_deform_tuple(img->tup, desc, img->values, img->nulls);
	return true;
}

/*
 * root_of: the first version of the chain of HOT updates that tid is in
 * (where the row's index entry points), or tid itself if none is found.
 */
static ItemPointerData
root_of(Relation rel, ItemPointer tid, Buffer *recent)
{
	OffsetNumber roots[MaxHeapTuplesPerPage];
	ItemPointerData root = *tid;
	Buffer		buf = ReadBuffer(rel, ItemPointerGetBlockNumber(tid));
	OffsetNumber off = ItemPointerGetOffsetNumber(tid);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	heap_get_root_tuples(BufferGetPage(buf), roots);
	if (off <= MaxHeapTuplesPerPage && OffsetNumberIsValid(roots[off - 1]))
		ItemPointerSetOffsetNumber(&root, roots[off - 1]);
	*recent = buf;
	UnlockReleaseBuffer(buf);
	return root;
}

/*
 * hint_buffer: block blk of rel pinned, or InvalidBuffer if the relation
 * has no such block now.  First the buffer that held it last (*recent),
 * which still holds it if its tag says so (a block cut off by a truncation
 * leaves the buffers first); else read, after a look at the relation's
 * size (a system call).
 */
static Buffer
hint_buffer(Relation rel, BlockNumber blk, Buffer *recent)
{
	if (BufferIsValid(*recent) &&
		ReadRecentBuffer(DLOCK_REL_FILES(rel), MAIN_FORKNUM, blk, *recent))
		return *recent;
	if (blk >= RelationGetNumberOfBlocks(rel))
		return InvalidBuffer;
	*recent = ReadBuffer(rel, blk);
	return *recent;
}

/*
 * fetch_row_at: as fetch_row for the row whose column c is the int8 key,
 * looking first at *hint: where that row's chain of HOT updates began
 * (where its index entry points), remembered from an earlier read.  What
 * is found there counts only if visible on the latest snapshot and its
 * key matches (the key is unique: no other visible row has it); else the
 * index is scanned, and *hint set to the chain of the row found (or made
 * invalid).  It saves the index descent on a row read again and again;
 * *recent, the buffer that held the hint's block, saves its lookup.
 */
bool
fetch_row_at(Relation rel, TableInfo *t, int c, int64 key, ItemPointer hint,
			 Buffer *recent, RowImage *img)
{
	ScanKeyData skey;
	bool		found;
	Buffer		buf = ItemPointerIsValid(hint) ?
		hint_buffer(rel, ItemPointerGetBlockNumber(hint), recent) : InvalidBuffer;

	if (BufferIsValid(buf))
	{
		Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
		ItemPointerData tid = *hint;	/* set to the version found */
		HeapTupleData tup;
		bool		all_dead;

		heap_page_prune_opt(rel, buf);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		img->tup = heap_hot_search_buffer(&tid, rel, buf, snap, &tup, &all_dead, true) ?
			heap_copytuple(&tup) : NULL;
		UnlockReleaseBuffer(buf);
		UnregisterSnapshot(snap);
		if (img->tup != NULL)
		{
			bool		isnull;
			Datum		d = heap_getattr(img->tup, t->att[c], RelationGetDescr(rel), &isnull);

			if (!isnull && DatumGetInt64(d) == key)
			{
				image_init(img, RelationGetDescr(rel)->natts);
				heap_deform_tuple(img->tup, RelationGetDescr(rel), img->values, img->nulls);
				return true;
			}
			heap_freetuple(img->tup);
		}
	}
	ScanKeyInit(&skey, t->att[c], BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(key));
	found = fetch_row(rel, t, 1, &skey, NULL, img);
	if (found)
		*hint = HeapTupleHeaderIsHeapOnly(img->tup->t_data) ?
			root_of(rel, &img->tup->t_self, recent) : img->tup->t_self;
	else
		ItemPointerSetInvalid(hint);
	return found;
}

/*
 * What a write runs of the table's own expressions (CHECK constraints,
 * defaults, generated columns, index expressions and predicates) runs as
 * the table's owner with a safe search_path, as the statements of the
 * store session ran it: a caller needs no rights on the functions and
 * sequences they use.  Only when there is any: the plain table needs none.
 */
typedef struct OwnerSwitch
{
	bool		active;
	Oid			saved_userid;
	int			saved_sec_context;
	int			nestlevel;
} OwnerSwitch;

static void
become_owner(Relation rel, OwnerSwitch *sw)
{
	GetUserIdAndSecContext(&sw->saved_userid, &sw->saved_sec_context);
	SetUserIdAndSecContext(rel->rd_rel->relowner,
						   sw->saved_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	sw->nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	sw->active = true;
}

/* leave_owner: undo become_owner (an error undoes it by itself). */
static void
leave_owner(OwnerSwitch *sw)
{
	if (!sw->active)
		return;
	AtEOXact_GUC(true, sw->nestlevel);
	SetUserIdAndSecContext(sw->saved_userid, sw->saved_sec_context);
	sw->active = false;
}

/* runs_expressions: do the table's constraints or indexes have any? */
static bool
runs_expressions(Relation rel, ResultRelInfo *rri)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;

	if (constr != NULL && (constr->num_check > 0 || constr->has_generated_stored))
		return true;
	for (int i = 0; i < rri->ri_NumIndices; i++)
		if (rri->ri_IndexRelationInfo[i]->ii_Expressions != NIL ||
			rri->ri_IndexRelationInfo[i]->ii_Predicate != NIL ||
			rri->ri_IndexRelationInfo[i]->ii_ExclusionOps != NULL)
			return true;
	return false;
}

/*
 * store_tuple: write tup as a new row (otid NULL) or as the new version of
 * the row at otid (HOT when nothing indexed changes), as the executor
 * would: the table's NOT NULL and CHECK constraints first, then an entry
 * in every index (expressions and predicates evaluated) unless HOT.
 * Stored generated columns are computed (into a copy of tup).
 * Returns false, changing nothing, if the row at otid was updated or
 * deleted by another transaction that committed since it was read (after
 * waiting for it): not a dlock call (those hold the resource's lock), but
 * a superuser's UPDATE by hand.  The caller reads the row again and
 * decides again, as a statement's EvalPlanQual recheck did.
 */
bool
store_tuple(Relation rel, ItemPointer otid, HeapTuple tup)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	TM_Result	result = TM_Ok;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	DlockIndexUpdate indexes = DLOCK_INDEX_ALL;
	OwnerSwitch sw = {false};
	MemoryContext old = MemoryContextSwitchTo(estate->es_query_cxt);

	/* All of it in the executor state's memory, freed with it. */
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	if (runs_expressions(rel, rri))
		become_owner(rel, &sw);
	slot = ExecInitExtraTupleSlot(estate, RelationGetDescr(rel),
								  &TTSOpsHeapTuple);
	ExecStoreHeapTuple(tup, slot, false);
	if (RelationGetDescr(rel)->constr != NULL &&
		RelationGetDescr(rel)->constr->has_generated_stored)
	{
		/* All of them, as for an INSERT: nothing says which changed. */
		ExecComputeStoredGenerated(rri, estate, slot, CMD_INSERT);
		tup = heap_copytuple(ExecFetchSlotHeapTuple(slot, false, NULL));
	}
	if (RelationGetDescr(rel)->constr != NULL)
		ExecConstraints(rri, slot, estate);
	if (otid != NULL)
		result = dlock_heap_update(rel, otid, tup, &tmfd, &lockmode, &indexes);
	else
		simple_heap_insert(rel, tup);
	if (result == TM_SelfModified)
		elog(ERROR, "dlock: the row was already changed by this command");
	else if (result != TM_Ok && result != TM_Updated && result != TM_Deleted)
		elog(ERROR, "dlock: unexpected heap_update result %d", (int) result);
	if (result == TM_Ok && rri->ri_NumIndices > 0 &&
		(otid == NULL || indexes != DLOCK_INDEX_NONE))
	{
		List	   *recheck;

		ExecStoreHeapTuple(tup, slot, false);	/* with its new TID */
		recheck = dlock_insert_index_tuples(rri, slot, estate, indexes);

		/*
		 * A deferrable unique or exclusion constraint that the new row may
		 * violate: the executor would check it again at commit (an AFTER
		 * trigger); dlock fires none, so it refuses the row now.
		 */
		if (recheck != NIL)
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("duplicate key value violates unique constraint \"%s\"",
							get_rel_name(linitial_oid(recheck))),
					 errdetail("dlock checks deferrable constraints on dlock.%s at once.",
							   RelationGetRelationName(rel))));
	}
	leave_owner(&sw);
	ExecCloseIndices(rri);
	ExecResetTupleTable(estate->es_tupleTable, false);
	MemoryContextSwitchTo(old);
	FreeExecutorState(estate);
	return result == TM_Ok;
}

/*
 * write_row: the update of the image's changed columns (HOT); false if the
 * row changed meanwhile (store_tuple): read it again and decide again.
 */
bool
write_row(Relation rel, RowImage *img)
{
	HeapTuple	newtup = heap_modify_tuple(img->tup, RelationGetDescr(rel),
										   img->values, img->nulls, img->replace);
	bool		done = store_tuple(rel, &img->tup->t_self, newtup);

	heap_freetuple(newtup);
	if (done)
		CommandCounterIncrement();
	return done;
}

/* text_eq: do two text values say the same (byte for byte, as "C")? */
bool
text_eq(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * fill_defaults: the defaults of the columns of a new row that dlock does
 * not set (columns a superuser added, as an INSERT would fill them), as
 * the table's owner.
 * Returns the executor state holding their values (free it once the tuple
 * is formed), or NULL if there were none.
 */
static EState *
fill_defaults(Relation rel, RowImage *img)
{
	TupleDesc	desc = RelationGetDescr(rel);
	EState	   *estate = NULL;
	OwnerSwitch sw = {false};

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Node	   *def;
		ExprState  *expr;

		if (att->attisdropped || att->attgenerated || img->replace[i])
			continue;
		def = build_column_default(rel, i + 1);
		if (def == NULL)
			continue;
		if (estate == NULL)
		{
			estate = CreateExecutorState();
			become_owner(rel, &sw);
		}
		expr = ExecPrepareExpr((Expr *) def, estate);
		img->values[i] = ExecEvalExprSwitchContext(expr,
												   GetPerTupleExprContext(estate),
												   &img->nulls[i]);
	}
	leave_owner(&sw);
	return estate;
}

/* image_new: an image of a new row of rel, every column NULL. */
void
image_new(Relation rel, RowImage *img)
{
	TupleDesc	desc = RelationGetDescr(rel);

	image_init(img, desc->natts);
	for (int i = 0; i < desc->natts; i++)
	{
		img->values[i] = (Datum) 0;
		img->nulls[i] = true;
	}
}

/*
 * insert_row: insert the new row of rel that *img holds (image_new,
 * set_col), the defaults of the columns it does not set filled in.
 */
void
insert_row(Relation rel, RowImage *img)
{
	EState	   *estate = fill_defaults(rel, img);
	HeapTuple	tup = heap_form_tuple(RelationGetDescr(rel), img->values,
									  img->nulls);

	if (estate != NULL)
		FreeExecutorState(estate);
	(void) store_tuple(rel, NULL, tup);
	heap_freetuple(tup);
	CommandCounterIncrement();
}
