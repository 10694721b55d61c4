/*-------------------------------------------------------------------------
 *
 * fence.c
 *		Fencing tokens: strictly increasing across crash, restart,
 *		promotion, restore, point-in-time recovery and re-creation.
 *
 * A fence is the next value of the sequence dlock.fences, read as
 * (epoch << 22) + n.  Before its first fence a backend compares (system
 * identifier, database, timeline, postmaster start) with the row of
 * dlock.fence_epoch, and its database's catalog row with the one the
 * epoch recorded (1.2; the 1.1 SQL compares the row's age).  If they
 * differ it starts a new epoch by moving the sequence up (setval, flushed
 * before the fence leaves).  Until ALTER EXTENSION dlock UPDATE creates
 * dlock.fences, the 0.1 scheme runs unchanged.  Why fences never repeat: docs/how-it-works.md, "Inside the
 * C extension".
 *
 * Shared state: the sequence; jumps take the DLOCK_LOCKTAG_EPOCH lock
 * exclusively and draws take it shared, only around the draw.  Writers of
 * dlock.fence_epoch take its other tag without waiting.  Callers draw a
 * fence only after they hold the resource's lock.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "storage/lock.h"

/* The 0.1 scheme: epoch << 44 | n. */
#define DLOCK_MAX_EPOCH		((INT64CONST(1) << (63 - DLOCK_FENCE_SEQ_BITS)) - 1)

/* The clock scheme: epoch (ms since 2020-01-01 UTC) << 22 + n. */
#define FENCE_COUNT_BITS	22
#define FENCE_MAX_EPOCH		((INT64CONST(1) << (63 - FENCE_COUNT_BITS)) - 1)
/* 2020-01-01 00:00 UTC in microseconds since the PostgreSQL epoch */
#define FENCE_CLOCK_ORIGIN	INT64CONST(631152000000000)

/* id2 of the DLOCK_LOCKTAG_EPOCH locks */
#define EPOCH_LOCK_OLD_WRITER	0	/* writers of dlock.epoch (0.1 scheme) */
#define EPOCH_LOCK_DRAW			1	/* draws (shared) and jumps (exclusive) */
#define EPOCH_LOCK_WRITER		2	/* writers of dlock.fence_epoch */

/* 0.1 scheme: epoch verified for this backend's timeline (0: not yet). */
static TimeLineID cached_tli = 0;
static int64 cached_epoch = 0;

/* Clock scheme: no new epoch needed on this timeline and sequence. */
static TimeLineID verified_tli = 0;
static Oid	verified_seq = InvalidOid;

static void
epoch_locktag(LOCKTAG *tag, uint32 which)
{
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, which, 0, DLOCK_LOCKTAG_EPOCH);
}

/*
 * epoch_exec: run one statement on the latest snapshot (callers are inside
 * a store session); returns SPI_processed.
 */
static uint64
epoch_exec(const char *sql, int nargs, Oid *types, Datum *values)
{
	SPIPlanPtr	plan;
	int			rc;

	dlock_store_spi();
	plan = SPI_prepare(sql, nargs, types);
	if (plan == NULL)
		elog(ERROR, "dlock: SPI_prepare failed for \"%s\"", sql);
	rc = SPI_execute_snapshot(plan, values, NULL, GetLatestSnapshot(),
							  InvalidSnapshot, false, false, 0);
	if (rc < 0)
		elog(ERROR, "dlock: \"%s\" failed: %s", sql, SPI_result_code_string(rc));
	SPI_freeplan(plan);
	return SPI_processed;
}

/* flush_since: make the WAL this backend wrote since before durable. */
static void
flush_since(XLogRecPtr before)
{
	if (XactLastRecEnd != before)
		XLogFlush(XactLastRecEnd);
}

/*
 * old_epoch: the 0.1 scheme's epoch for fences drawn now; reads dlock.epoch
 * once per backend and timeline, and records a new timeline or system
 * identifier.  Used only until ALTER EXTENSION dlock UPDATE.
 *
 * Writers of dlock.epoch serialise on a lock-manager lock of their own,
 * taken without waiting, so a fence is never delayed by another
 * transaction that recorded the epoch and has not committed yet: the epoch
 * is derived from the timeline and the committed row, and whoever holds
 * the lock records the same value.  Without the lock the result is used
 * but not cached, so a later call records it.
 */
static int64
old_epoch(void)
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

	epoch_locktag(&tag, EPOCH_LOCK_OLD_WRITER);
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

/* old_next_fence: a fence of the 0.1 scheme. */
static int64
old_next_fence(Oid schema)
{
	Oid			seqoid = get_relname_relid("fence_seq", schema);
	int64		epoch = old_epoch();
	XLogRecPtr	before = XactLastRecEnd;
	int64		n;

	if (!OidIsValid(seqoid))
		elog(ERROR, "dlock: sequence dlock.fence_seq does not exist");
	n = nextval_internal(seqoid, false);
	flush_since(before);
	return (epoch << DLOCK_FENCE_SEQ_BITS) | n;
}

/*
 * epoch_floor: the lowest epoch of the clock scheme that is above every
 * fence the 0.1 scheme can have handed out from the dlock.epoch row (0
 * when there is none).  A 0.1 epoch E yields fences below (E + 1) << 44,
 * and its next epoch would have been max(last_epoch + 1, timeline + base).
 */
static int64
epoch_floor(Oid schema)
{
	int64		old;
	bool		isnull;

	if (!OidIsValid(get_relname_relid("epoch", schema)) ||
		epoch_exec("SELECT base, last_epoch FROM dlock.epoch", 0, NULL, NULL) == 0)
		return 0;
	old = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 2, &isnull)) + 1;
	old = Max(old, (int64) GetWALInsertionTimeLine() +
			  DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
										  SPI_tuptable->tupdesc, 1, &isnull)));
	old = Max(old, 0);
	if (old >= DLOCK_MAX_EPOCH)
		return FENCE_MAX_EPOCH + 1;		/* out of range: jump() complains */
	return (old + 1) << (DLOCK_FENCE_SEQ_BITS - FENCE_COUNT_BITS);
}

/*
 * jump: start a new epoch and return its first fence.  The epoch is the
 * clock in milliseconds, but above the sequence's epoch (the clock may have
 * stepped back), the highest fence dlock.leases holds (a restore brings the
 * old cluster's), and the 0.1 floor.  Jumps take the draw lock exclusively,
 * so no draw falls between our nextval and our setval: the sequence never
 * goes back.
 */
static int64
jump(Oid schema, Oid seqoid)
{
	LOCKTAG		tag;
	int64		now_ms = (GetCurrentTimestamp() - FENCE_CLOCK_ORIGIN) / 1000;
	int64		floor = epoch_floor(schema);
	int64		epoch;
	int64		fence;

	/* Above every fence the table remembers (a restore brings them). */
	if (epoch_exec("SELECT pg_catalog.max(fence) FROM dlock.leases", 0, NULL, NULL) > 0)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0],
									  SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			floor = Max(floor, (DatumGetInt64(d) >> FENCE_COUNT_BITS) + 1);
	}

	epoch_locktag(&tag, EPOCH_LOCK_DRAW);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	epoch = (nextval_internal(seqoid, false) >> FENCE_COUNT_BITS) + 1;
	epoch = Max(epoch, Max(now_ms, floor));
	if (epoch > FENCE_MAX_EPOCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("fence epoch " INT64_FORMAT " is out of range", epoch),
				 errdetail("Fence epochs are milliseconds since 2020-01-01 and end in 2089.")));
	fence = epoch << FENCE_COUNT_BITS;
	(void) DirectFunctionCall2(setval_oid, ObjectIdGetDatum(seqoid),
							   Int64GetDatum(fence));
	LockRelease(&tag, ExclusiveLock, false);
	return fence;
}

/*
 * database_row_newer: is this database's pg_database row newer than
 * EPOCH_XMIN, the xmin of the dlock.fence_epoch row?  A database dropped and
 * made again from a copy of itself (CREATE DATABASE ... TEMPLATE ... OID)
 * keeps everything else same_history compares, and its row is new.
 * ALTER DATABASE also makes the row new: one harmless jump.  Used under
 * the 1.1 SQL only.  It misses a new row frozen before the first fence,
 * and an epoch row more than 2^31 transactions old; the 1.2 SQL records
 * database_row_xmin instead, which misses neither.
 */
static bool
database_row_newer(TransactionId epoch_xmin)
{
	HeapTuple	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	bool		newer = false;

	if (HeapTupleIsValid(tup))
	{
		newer = !HeapTupleHeaderXminFrozen(tup->t_data) &&
			TransactionIdIsNormal(epoch_xmin) &&
			TransactionIdFollows(HeapTupleHeaderGetRawXmin(tup->t_data), epoch_xmin);
		ReleaseSysCache(tup);
	}
	return newer;
}

/*
 * database_row_xmin: the raw xmin of this database's pg_database row, as
 * text (frozen or not; the portable edition's dlock._dbrow() reads the
 * same).  Recorded with an epoch in dlock.fence_epoch.dbrow (1.2).
 */
static char *
database_row_xmin(void)
{
	HeapTuple	tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
	TransactionId xmin = InvalidTransactionId;

	if (HeapTupleIsValid(tup))
	{
		xmin = HeapTupleHeaderGetRawXmin(tup->t_data);
		ReleaseSysCache(tup);
	}
	return psprintf("%u", xmin);
}

/* has_dbrow: has dlock.fence_epoch the column dbrow (1.2 SQL)? */
static bool
has_dbrow(Oid schema)
{
	Oid			relid = get_relname_relid("fence_epoch", schema);

	return OidIsValid(relid) && get_attnum(relid, "dbrow") != InvalidAttrNumber;
}

/*
 * same_history: does dlock.fence_epoch say that the sequence's current
 * epoch started in this cluster, database, timeline and server run, with
 * this database's catalog row (DBROW: the table records it)?
 */
static bool
same_history(const char *sysid, TimeLineID tli, bool dbrow)
{
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	char	   *stored;
	Datum		row;

	if (epoch_exec(dbrow ?
				   "SELECT sysid, dboid, timeline, started, xmin, dbrow FROM dlock.fence_epoch" :
				   "SELECT sysid, dboid, timeline, started, xmin FROM dlock.fence_epoch",
				   0, NULL, NULL) == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	stored = TextDatumGetCString(SPI_getbinval(tup, desc, 1, &isnull));
	if (strcmp(stored, sysid) != 0 ||
		DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull)) != MyDatabaseId ||
		DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull)) != (int64) tli ||
		DatumGetTimestampTz(SPI_getbinval(tup, desc, 4, &isnull)) != PgStartTime)
		return false;
	if (!dbrow)
		return !database_row_newer(DatumGetTransactionId(SPI_getbinval(tup, desc, 5, &isnull)));
	/* A row without dbrow (1.1 wrote it): a new epoch, once, records one. */
	row = SPI_getbinval(tup, desc, 6, &isnull);
	return !isnull && strcmp(TextDatumGetCString(row), database_row_xmin()) == 0;
}

/*
 * new_epoch_if_forked: before this backend's first fence on a timeline (or
 * after the sequence was re-created), start a new epoch unless
 * dlock.fence_epoch shows that one was started in this very history.
 * Returns the new epoch's first fence, or 0 if the sequence can go on.
 */
static int64
new_epoch_if_forked(Oid schema, Oid seqoid)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	char		sysid[32];
	LOCKTAG		tag;
	int64		fence;
	Oid			types[6] = {TEXTOID, OIDOID, INT8OID, TIMESTAMPTZOID, INT8OID, TEXTOID};
	Datum		values[6];
	bool		dbrow;

	if (tli == verified_tli && seqoid == verified_seq)
		return 0;
	snprintf(sysid, sizeof(sysid), UINT64_FORMAT, GetSystemIdentifier());
	dbrow = has_dbrow(schema);
	if (same_history(sysid, tli, dbrow))
	{
		verified_tli = tli;
		verified_seq = seqoid;
		return 0;
	}

	fence = jump(schema, seqoid);
	ereport(LOG,
			(errmsg("dlock: new fence epoch in database %u, first fence " INT64_FORMAT,
					MyDatabaseId, fence),
			 errdetail("System identifier %s, timeline %u.", sysid, tli)));

	/* Record it, unless another transaction is recording one right now. */
	epoch_locktag(&tag, EPOCH_LOCK_WRITER);
	if (LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
	{
		values[0] = CStringGetTextDatum(sysid);
		values[1] = ObjectIdGetDatum(MyDatabaseId);
		values[2] = Int64GetDatum((int64) tli);
		values[3] = TimestampTzGetDatum(PgStartTime);
		values[4] = Int64GetDatum(fence);
		values[5] = CStringGetTextDatum(database_row_xmin());
		if (dbrow)
			epoch_exec("INSERT INTO dlock.fence_epoch"
					   " (sysid, dboid, timeline, started, first_fence, dbrow)"
					   " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (one) DO UPDATE"
					   " SET sysid = $1, dboid = $2, timeline = $3, started = $4,"
					   " first_fence = $5, dbrow = $6",
					   6, types, values);
		else
			epoch_exec("INSERT INTO dlock.fence_epoch (sysid, dboid, timeline, started, first_fence)"
					   " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (one) DO UPDATE"
					   " SET sysid = $1, dboid = $2, timeline = $3, started = $4, first_fence = $5",
					   5, types, values);
	}
	/* This backend has jumped: its next fences need no other check. */
	verified_tli = tli;
	verified_seq = seqoid;
	return fence;
}

/*
 * dlock_next_fence: draw a new fence.  Call inside a store session, after
 * taking the resource's lock.
 */
int64
dlock_next_fence(void)
{
	Oid			schema = dlock_schema_oid();
	Oid			seqoid = get_relname_relid("fences", schema);
	XLogRecPtr	before = XactLastRecEnd;
	int64		fence;

	if (!OidIsValid(seqoid))
		return old_next_fence(schema);	/* 0.1 SQL, not updated yet */

	fence = new_epoch_if_forked(schema, seqoid);
	if (fence == 0)
	{
		LOCKTAG		tag;

		epoch_locktag(&tag, EPOCH_LOCK_DRAW);
		(void) LockAcquire(&tag, ShareLock, false, false);
		fence = nextval_internal(seqoid, false);
		LockRelease(&tag, ShareLock, false);
	}

	/*
	 * If nextval logged a new batch, or we moved the sequence, make that
	 * record durable now: the fence may be seen by the client before (or
	 * without) a commit.
	 */
	flush_since(before);
	return fence;
}
PG_FUNCTION_INFO_V1(dlock_next_fence_sql);

/*
 * dlock._next_fence(): a new fence (EXECUTE is revoked from PUBLIC).  The
 * statements of 0.1 and 0.1.1 drew their fences with it; since rows.c
 * draws them in C, only the extension's owner calling it directly does.
 * Its own store session, in case the epoch must be read.
 */
Datum
dlock_next_fence_sql(PG_FUNCTION_ARGS)
{
	int64		fence;

	dlock_store_begin();
	fence = dlock_next_fence();
	dlock_store_end();
	PG_RETURN_INT64(fence);
}

