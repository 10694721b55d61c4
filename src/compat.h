/*-------------------------------------------------------------------------
 *
 * compat.h
 *		What differs between the PostgreSQL majors dlock builds against
 *		(15, 16, 17 and 18), in one place: the other files use the names
 *		below and never test PG_VERSION_NUM themselves.
 *
 * No shared state.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_COMPAT_H
#define DLOCK_COMPAT_H

#include "postgres.h"

#include "access/heapam.h"
#include "executor/executor.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/relcache.h"

#if PG_VERSION_NUM < 150000
#error "dlock needs PostgreSQL 15 or later"
#endif

/*
 * A backend's index in the PGPROC array (and in dlock's per-backend slots):
 * 17 replaced PGPROC's pgprocno with proc numbers.
 */
#if PG_VERSION_NUM >= 170000
#define DLOCK_PROC_NUMBER(proc) ((int) GetNumberFromPGProc(proc))
#else
#define DLOCK_PROC_NUMBER(proc) ((proc)->pgprocno)
#endif

/*
 * Whether this backend holds lockmode itself on locktag (not a stronger
 * one): 17 added the choice.
 */
#if PG_VERSION_NUM >= 170000
#define DLOCK_LOCK_HELD_BY_ME(tag, mode) LockHeldByMe((tag), (mode), false)
#else
#define DLOCK_LOCK_HELD_BY_ME(tag, mode) LockHeldByMe((tag), (mode))
#endif

/*
 * Which indexes an updated row needs new entries in: none (a HOT update),
 * all, or (16 and later) only the summarizing ones (BRIN).
 */
typedef enum DlockIndexUpdate
{
	DLOCK_INDEX_NONE,
	DLOCK_INDEX_ALL,
	DLOCK_INDEX_SUMMARIZING
} DlockIndexUpdate;

/*
 * dlock_heap_update: heap_update of otid to tup, waiting for a concurrent
 * updater, with the current command id; *indexes says which index entries
 * the new version needs.  16 added the out argument that says so; before,
 * a heap-only tuple needed none.
 */
static inline TM_Result
dlock_heap_update(Relation rel, ItemPointer otid, HeapTuple tup,
				  TM_FailureData *tmfd, LockTupleMode *lockmode,
				  DlockIndexUpdate *indexes)
{
	TM_Result	result;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update = TU_All;

	result = heap_update(rel, otid, tup, GetCurrentCommandId(true),
						 InvalidSnapshot, true, tmfd, lockmode, &update);
	*indexes = update == TU_None ? DLOCK_INDEX_NONE :
		update == TU_Summarizing ? DLOCK_INDEX_SUMMARIZING : DLOCK_INDEX_ALL;
#else
	result = heap_update(rel, otid, tup, GetCurrentCommandId(true),
						 InvalidSnapshot, true, tmfd, lockmode);
	*indexes = HeapTupleIsHeapOnly(tup) ? DLOCK_INDEX_NONE : DLOCK_INDEX_ALL;
#endif
	return result;
}

/*
 * dlock_insert_index_tuples: the index entries of the row in slot (all of
 * them, or only the summarizing ones); the list of deferred constraints to
 * recheck, as ExecInsertIndexTuples returns it.
 */
static inline List *
dlock_insert_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot,
						  EState *estate, DlockIndexUpdate indexes)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL,
								 indexes == DLOCK_INDEX_SUMMARIZING);
#else
	return ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL);
#endif
}

/*
 * The table's primary key index (InvalidOid for none or a deferrable one):
 * 18 made "deferrable or not" an argument.
 */
#if PG_VERSION_NUM >= 180000
#define dlock_primary_key_index(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define dlock_primary_key_index(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/* Where a relation's files are, as ReadRecentBuffer takes it: 16 renamed it. */
#if PG_VERSION_NUM >= 160000
#define DLOCK_REL_FILES(rel) ((rel)->rd_locator)
#else
#define DLOCK_REL_FILES(rel) ((rel)->rd_node)
#endif

/* A table's live tuples in the cumulative statistics: 16 renamed the field. */
#if PG_VERSION_NUM >= 160000
#define DLOCK_STAT_LIVE_TUPLES(entry) ((entry)->live_tuples)
#else
#define DLOCK_STAT_LIVE_TUPLES(entry) ((entry)->n_live_tuples)
#endif

#endif							/* DLOCK_COMPAT_H */
