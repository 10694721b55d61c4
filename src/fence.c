/*-------------------------------------------------------------------------
 *
 * fence.c
 *		Fencing tokens: strictly increasing across crash, restart,
 *		promotion and restore.
 *
 * A fence is (epoch << 44) | n, where n comes from dlock.fence_seq
 * (CACHE 1, NO CYCLE, at most 2^44 - 1) and epoch is the WAL insertion
 * timeline plus a stored base:
 *
 *	- within one timeline, n only grows.  A sequence WAL-logs ahead of the
 *	  values it hands out but that record is flushed only by a synchronous
 *	  commit; when a draw writes such a record we flush it ourselves before
 *	  the fence leaves the function, so no crash can hand a fence out twice;
 *	- a promoted standby, even one that lagged behind an asynchronous
 *	  primary and so holds an older n, runs on a higher timeline, so every
 *	  fence it hands out is above every fence of the old primary;
 *	- restoring a dump (or pg_upgrade) gives another system identifier and
 *	  restarts timelines at 1: on first use the base moves so that the new
 *	  epoch is above the last epoch recorded in dlock.epoch.
 *
 * Callers draw a fence only after they hold the resource's lock, so a fence
 * can never be written behind a newer one of the same resource.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "storage/lock.h"

#define DLOCK_MAX_EPOCH		((INT64CONST(1) << (63 - DLOCK_FENCE_SEQ_BITS)) - 1)

/* Epoch verified for this backend's timeline (0: not yet). */
static TimeLineID cached_tli = 0;
static int64 cached_epoch = 0;

/*
 * epoch_exec: run one statement against dlock.epoch on the latest snapshot
 * (callers are inside a store session); returns SPI_processed.
 */
static uint64
epoch_exec(const char *sql, int nargs, Oid *types, Datum *values)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);
	int			rc;

	if (plan == NULL)
		elog(ERROR, "dlock: SPI_prepare failed for \"%s\"", sql);
	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, false, 0);
	if (rc < 0)
		elog(ERROR, "dlock: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
	SPI_freeplan(plan);
	return SPI_processed;
}

/*
 * current_epoch: the epoch for fences drawn now; reads dlock.epoch once per
 * backend and timeline, and records a new timeline or system identifier.
 *
 * Writers of dlock.epoch serialise on a lock-manager lock of their own,
 * taken without waiting, so a fence is never delayed by another
 * transaction that recorded the epoch and has not committed yet: the epoch
 * is derived from the timeline and the committed row, and whoever holds
 * the lock records the same value.  Without the lock the result is used
 * but not cached, so a later call records it.
 */
static int64
current_epoch(void)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	char		sysid[32];
	char	   *stored_sysid = NULL;
	int64		base = 0,
				last_epoch = 0,
				epoch;
	bool		isnull;
	bool		locked;
	bool		need_write;
	LOCKTAG		tag;
	Oid			types[3] = {TEXTOID, INT4OID, INT4OID};
	Datum		values[3];

	if (tli == cached_tli)
		return cached_epoch;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, DLOCK_LOCKTAG_CLASS + 1);
	locked = LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL;

	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	if (epoch_exec("SELECT sysid, base, last_epoch FROM dlock.epoch", 0, NULL, NULL) > 0)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;

		stored_sysid = TextDatumGetCString(SPI_getbinval(tup, desc, 1, &isnull));
		base = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		last_epoch = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
	}

	if (stored_sysid != NULL && strcmp(stored_sysid, sysid) != 0)
	{
		/* Restored into another cluster: continue above the last epoch. */
		base = last_epoch + 1 - (int64) tli;
		ereport(LOG,
				(errmsg("dlock: system identifier changed from %s to %s, fence epoch base is now " INT64_FORMAT,
						stored_sysid, sysid, base)));
	}
	epoch = (int64) tli + base;
	if (epoch < last_epoch)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("fence epoch would go backwards from " INT64_FORMAT " to " INT64_FORMAT,
						last_epoch, epoch),
				 errdetail("Timeline %u, epoch base " INT64_FORMAT ".", tli, base)));
	if (epoch > DLOCK_MAX_EPOCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fence epoch " INT64_FORMAT " is out of range", epoch)));

	need_write = stored_sysid == NULL || strcmp(stored_sysid, sysid) != 0 ||
		epoch != last_epoch;
	if (need_write && locked)
	{
		values[0] = CStringGetTextDatum(sysid);
		values[1] = Int32GetDatum((int32) base);
		values[2] = Int32GetDatum((int32) epoch);
		if (stored_sysid == NULL)
			epoch_exec("INSERT INTO dlock.epoch (sysid, base, last_epoch)"
					   " VALUES ($1, $2, $3)", 3, types, values);
		else
			epoch_exec("UPDATE dlock.epoch SET sysid = $1, base = $2, last_epoch = $3",
					   3, types, values);
	}
	else if (locked)
		LockRelease(&tag, ExclusiveLock, false);
	if (!need_write || locked)
	{
		cached_tli = tli;
		cached_epoch = epoch;
	}
	return epoch;
}

/*
 * dlock_next_fence: draw a new fence.  Call inside a store session, after
 * taking the resource's lock.
 */
int64
dlock_next_fence(void)
{
	Oid			seqoid;
	int64		n;
	int64		epoch = current_epoch();
	XLogRecPtr	before = XactLastRecEnd;

	seqoid = get_relname_relid("fence_seq", dlock_schema_oid());
	if (!OidIsValid(seqoid))
		elog(ERROR, "dlock: sequence dlock.fence_seq does not exist");
	n = nextval_internal(seqoid, false);

	/*
	 * If nextval logged a new batch, make that record durable now: the fence
	 * may be seen by the client before (or without) a commit.
	 */
	if (XactLastRecEnd != before)
		XLogFlush(XactLastRecEnd);

	return (epoch << DLOCK_FENCE_SEQ_BITS) | n;
}

PG_FUNCTION_INFO_V1(dlock_next_fence_sql);

/*
 * dlock._next_fence(): a new fence, for dlock's own statements (EXECUTE is
 * revoked from PUBLIC; store sessions run as the extension's owner).  It
 * runs inside one of our SPI statements, so it opens its own SPI level in
 * case the epoch must be read.
 */
Datum
dlock_next_fence_sql(PG_FUNCTION_ARGS)
{
	int64		fence;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	fence = dlock_next_fence();
	if (SPI_finish() != SPI_OK_FINISH)
		elog(ERROR, "SPI_finish failed");
	PG_RETURN_INT64(fence);
}
