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
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"

#define DLOCK_MAX_EPOCH		((INT64CONST(1) << (63 - DLOCK_FENCE_SEQ_BITS)) - 1)

/* Epoch verified for this backend's timeline (0: not yet). */
static TimeLineID cached_tli = 0;
static int64 cached_epoch = 0;

/*
 * epoch_exec: run one statement against dlock.epoch on the latest snapshot
 * (callers are inside a store session).
 */
static void
epoch_exec(const char *sql, int nargs, Oid *types, Datum *values, int expect)
{
	int			rc;

	rc = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);
	if (rc != expect)
		elog(ERROR, "dlock: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
}

/*
 * current_epoch: the epoch for fences drawn now; reads (and when needed
 * moves) dlock.epoch once per backend and timeline.
 */
static int64
current_epoch(void)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	char		sysid[32];
	char	   *stored_sysid;
	int64		base,
				last_epoch,
				epoch;
	bool		isnull;
	Oid			types[3] = {TEXTOID, INT4OID, INT4OID};
	Datum		values[3];

	if (tli == cached_tli)
		return cached_epoch;

	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	values[0] = CStringGetTextDatum(sysid);
	values[1] = Int32GetDatum((int32) tli);
	epoch_exec("INSERT INTO dlock.epoch (sysid, base, last_epoch)"
			   " VALUES ($1, 0, $2) ON CONFLICT DO NOTHING",
			   2, types, values, SPI_OK_INSERT);
	epoch_exec("SELECT sysid, base, last_epoch FROM dlock.epoch FOR UPDATE",
			   0, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		elog(ERROR, "dlock: dlock.epoch must hold exactly one row");
	stored_sysid = TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull));
	base = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
									   SPI_tuptable->tupdesc, 2, &isnull));
	last_epoch = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 3, &isnull));

	if (strcmp(stored_sysid, sysid) != 0)
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
	if (epoch != last_epoch || strcmp(stored_sysid, sysid) != 0)
	{
		values[1] = Int32GetDatum((int32) base);
		values[2] = Int32GetDatum((int32) epoch);
		epoch_exec("UPDATE dlock.epoch SET sysid = $1, base = $2, last_epoch = $3",
				   3, types, values, SPI_OK_UPDATE);
	}
	cached_tli = tli;
	cached_epoch = epoch;
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
