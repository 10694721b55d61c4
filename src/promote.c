/*-------------------------------------------------------------------------
 *
 * promote.c
 *		Refresh on promotion: when a standby is promoted, the holdings that
 *		were live at the promotion are extended once to at least promotion
 *		time + their lease, so that a holder that could not renew while no
 *		primary existed keeps its lock.  GUC dlock.refresh_on_promotion.
 *
 * Only with shared_preload_libraries: the reaper launcher (worker.c) calls
 * dlock_promotion_step() whenever the server is not in recovery, before it
 * reaps.  A new WAL insertion timeline is a promotion to handle; its time
 * P is the modification time of the timeline's history file; a holding is
 * refreshed iff P < expires_at < P + lease, by a refresh worker in each
 * database in turn.  Why that rule never revives an expired holding, and
 * how a crash midway is carried on: docs/how-it-works.md, "Inside the C
 * extension".
 *
 * Shared state: the launcher's own statics; the file
 * DLOCK_PROMOTION_FILE is written only by the launcher; a refresh
 * worker's DSM segment is written by the worker and read by the launcher
 * after the worker has exited.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PGDLLEXPORT void dlock_refresh_main(Datum main_arg);

#define DLOCK_PROMOTION_FILE "dlock_promotion.state"
#define DLOCK_PROMOTION_TMP "dlock_promotion.state.tmp"
#define MAX_TRACKED_DBS 1024
#define MAX_DB_FAILURES 3
/* Passes over resources that were busy, and the pause between them. */
#define REFRESH_PASSES 100
#define REFRESH_PASS_PAUSE_MS 20

/* What the launcher knows about the promotion it is handling. */
typedef struct PromotionState
{
	TimeLineID	tli;			/* 0: none */
	TimestampTz promoted_at;	/* P */
	bool		complete;
	int			ndone;
	Oid			done[MAX_TRACKED_DBS];
} PromotionState;

static PromotionState state;
static bool state_loaded = false;
static TimeLineID handled_tli = 0;	/* complete, nothing more to do */
static Oid	failed_db[MAX_TRACKED_DBS];
static int	failures[MAX_TRACKED_DBS];
static int	nfailed = 0;

/* What a refresh worker passes back (in its DSM segment). */
typedef struct RefreshResult
{
	bool		done;
	bool		installed;
	int64		refreshed;
	int64		skipped;		/* busy in every pass: not refreshed */
} RefreshResult;

/* What a refresh worker is given (in bgw_extra). */
typedef struct RefreshArgs
{
	Oid			dbid;
	TimestampTz promoted_at;
} RefreshArgs;

/* ---------------------------------------------------------------------
 * The state file (launcher only)
 * ---------------------------------------------------------------------
 */

/* load_state: read the file if there is one; a damaged file counts as none. */
static void
load_state(void)
{
	FILE	   *f = AllocateFile(DLOCK_PROMOTION_FILE, "r");
	unsigned int tli;
	long long	p;
	int			complete;
	unsigned int oid;

	memset(&state, 0, sizeof(state));
	state_loaded = true;
	if (f == NULL)
		return;
	if (fscanf(f, "%u %lld %d", &tli, &p, &complete) == 3)
	{
		state.tli = tli;
		state.promoted_at = (TimestampTz) p;
		state.complete = complete != 0;
		while (state.ndone < MAX_TRACKED_DBS && fscanf(f, "%u", &oid) == 1)
			state.done[state.ndone++] = oid;
	}
	FreeFile(f);
}

/* save_state: write the file durably (a new file renamed over the old). */
static void
save_state(void)
{
	FILE	   *f = AllocateFile(DLOCK_PROMOTION_TMP, PG_BINARY_W);
	int			i;

	if (f == NULL)
	{
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not create file \"%s\": %m", DLOCK_PROMOTION_TMP)));
		return;
	}
	fprintf(f, "%u %lld %d\n", state.tli, (long long) state.promoted_at,
			state.complete ? 1 : 0);
	for (i = 0; i < state.ndone; i++)
		fprintf(f, "%u\n", state.done[i]);
	if (fflush(f) != 0 || pg_fsync(fileno(f)) != 0)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not write file \"%s\": %m", DLOCK_PROMOTION_TMP)));
	FreeFile(f);
	(void) durable_rename(DLOCK_PROMOTION_TMP, DLOCK_PROMOTION_FILE, LOG);
}

/* db_done: whether database dbid was refreshed (or given up). */
static bool
db_done(Oid dbid)
{
	int			i;

	for (i = 0; i < state.ndone; i++)
		if (state.done[i] == dbid)
			return true;
	return false;
}

static void
mark_db_done(Oid dbid)
{
	if (state.ndone < MAX_TRACKED_DBS)
		state.done[state.ndone++] = dbid;
	save_state();
}

/* note_failure: count a failed worker of dbid; true once it is given up. */
static bool
note_failure(Oid dbid)
{
	int			i;

	for (i = 0; i < nfailed; i++)
		if (failed_db[i] == dbid)
			return ++failures[i] >= MAX_DB_FAILURES;
	if (nfailed < MAX_TRACKED_DBS)
	{
		failed_db[nfailed] = dbid;
		failures[nfailed++] = 1;
	}
	return MAX_DB_FAILURES <= 1;
}

/*
 * promotion_time: the modification time of tli's history file, written by
 * the startup process as the promotion ended recovery; 0 if unknown.
 */
static TimestampTz
promotion_time(TimeLineID tli)
{
	char		path[MAXPGPATH];
	struct stat st;

	TLHistoryFilePath(path, tli);
	if (stat(path, &st) != 0)
		return 0;
	return time_t_to_timestamptz(st.st_mtim.tv_sec) +
		st.st_mtim.tv_nsec / 1000;
}

/* ---------------------------------------------------------------------
 * The launcher's side
 * ---------------------------------------------------------------------
 */

/*
 * connectable_databases: OIDs of the databases that accept connections, in
 * the caller's memory context (not the transaction's, which the commit
 * frees).
 */
static List *
connectable_databases(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	List	   *dbs = NIL;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (db->datallowconn && db->datconnlimit != -2)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);

			dbs = lappend_oid(dbs, db->oid);
			MemoryContextSwitchTo(old);
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return dbs;
}

/*
 * run_refresh: start a refresh worker in dbid and wait for it.  False if
 * no background worker slot was free; else *result says how it went.
 */
static bool
run_refresh(Oid dbid, RefreshResult *result)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *bgw;
	dsm_segment *seg;
	RefreshResult *shared;
	RefreshArgs args;
	pid_t		pid;

	seg = dsm_create(sizeof(RefreshResult), 0);
	shared = dsm_segment_address(seg);
	memset(shared, 0, sizeof(RefreshResult));

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dlock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dlock_refresh_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dlock refresh");
	snprintf(worker.bgw_type, BGW_MAXLEN, "dlock refresh");
	worker.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(seg));
	args.dbid = dbid;
	args.promoted_at = state.promoted_at;
	memcpy(worker.bgw_extra, &args, sizeof(args));
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &bgw))
	{
		dsm_detach(seg);
		return false;
	}
	if (WaitForBackgroundWorkerStartup(bgw, &pid) == BGWH_STARTED)
		(void) WaitForBackgroundWorkerShutdown(bgw);
	pg_read_barrier();
	*result = *shared;
	dsm_detach(seg);
	return true;
}

/*
 * dlock_promotion_step: for the reaper launcher, outside recovery.  Handle
 * a promotion to the current timeline not yet handled
 * (docs/how-it-works.md, promote.c).  Returns true once there is nothing (more) to do, false while
 * databases remain (no free worker slot, or a worker failed): the
 * launcher then skips reaping and calls again at its next interval.
 */
bool
dlock_promotion_step(void)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	List	   *dbs;
	ListCell   *lc;
	bool		all = true;

	if (tli == handled_tli)
		return true;
	if (!state_loaded)
		load_state();
	if (state.tli != tli)
	{
		/* A timeline not seen before: a promotion (or PITR) to handle. */
		if (tli <= 1)
		{
			handled_tli = tli;	/* never promoted */
			return true;
		}
		memset(&state, 0, sizeof(state));
		state.tli = tli;
		state.promoted_at = promotion_time(tli);
		if (state.promoted_at == 0)
		{
			ereport(LOG,
					(errmsg("dlock: holdings not refreshed after promotion to timeline %u: the time of the promotion is unknown",
							tli),
					 errdetail("The timeline history file could not be read.")));
			state.complete = true;
		}
		else if (!dlock_refresh_on_promotion)
		{
			ereport(LOG,
					(errmsg("dlock: holdings not refreshed after promotion to timeline %u: dlock.refresh_on_promotion is off",
							tli)));
			state.complete = true;
		}
		save_state();
	}
	if (state.complete)
	{
		handled_tli = tli;
		return true;
	}

	dbs = connectable_databases();
	foreach(lc, dbs)
	{
		Oid			dbid = lfirst_oid(lc);
		RefreshResult result;

		if (db_done(dbid))
			continue;
		if (!run_refresh(dbid, &result))
			return false;		/* no slot: next interval */
		if (result.done)
		{
			if (result.installed)
				ereport(LOG,
						(errmsg("dlock: refreshed " INT64_FORMAT " holdings live at the promotion to timeline %u (%s) in database %u",
								result.refreshed, tli,
								timestamptz_to_str(state.promoted_at), dbid),
						 result.skipped > 0 ?
						 errdetail(INT64_FORMAT " holdings stayed busy and were not refreshed.",
								   result.skipped) : 0));
			mark_db_done(dbid);
		}
		else if (note_failure(dbid))
		{
			ereport(LOG,
					(errmsg("dlock: gave up refreshing holdings in database %u after promotion to timeline %u",
							dbid, tli),
					 errhint("See the earlier errors of the \"dlock refresh\" worker.")));
			mark_db_done(dbid);
		}
		else
			all = false;
	}
	list_free(dbs);
	if (!all)
		return false;
	state.complete = true;
	save_state();
	handled_tli = tli;
	ereport(LOG,
			(errmsg("dlock: refresh after promotion to timeline %u done", tli)));
	return true;
}

/* ---------------------------------------------------------------------
 * The refresh worker
 * ---------------------------------------------------------------------
 */

#define LIVE_AT_P \
	"holder IS NOT NULL AND lease IS NOT NULL" \
	" AND expires_at OPERATOR(pg_catalog.>) $1" \
	" AND expires_at OPERATOR(pg_catalog.<) ($1 OPERATOR(pg_catalog.+) lease)"

/* candidates: the resources whose holdings were live at P, as text *. */
static List *
candidates(TimestampTz promoted_at, MemoryContext cxt)
{
	Oid			argtypes[1] = {TIMESTAMPTZOID};
	Datum		values[1];
	List	   *list = NIL;
	uint64		i;

	values[0] = TimestampTzGetDatum(promoted_at);
	dlock_store_begin();
	dlock_store_spi();
	if (SPI_execute_with_args(dlock_semaphores_installed() ?
							  "SELECT resource FROM dlock.leases WHERE " LIVE_AT_P
							  " UNION SELECT resource FROM dlock.shares WHERE " LIVE_AT_P
							  " UNION SELECT resource FROM dlock.permits WHERE " LIVE_AT_P :
							  dlock_shares_installed() ?
							  "SELECT resource FROM dlock.leases WHERE " LIVE_AT_P
							  " UNION SELECT resource FROM dlock.shares WHERE " LIVE_AT_P :
							  "SELECT resource FROM dlock.leases WHERE " LIVE_AT_P,
							  1, argtypes, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read dlock.leases");
	for (i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
									  1, &isnull);
		MemoryContext old = MemoryContextSwitchTo(cxt);

		list = lappend(list, DatumGetTextPCopy(d));
		MemoryContextSwitchTo(old);
	}
	dlock_store_end();
	return list;
}

/*
 * refresh_one: extend res's holding if it is still one that was live at P,
 * and still unexpired now; *busy if another transaction is working on the
 * resource.  Returns the new expiry, or 0 if nothing changed.
 */
static TimestampTz
refresh_one(const DlockResource *res, TimestampTz promoted_at, bool *busy)
{
	Oid			argtypes[3] = {TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID};
	Datum		values[3];
	bool		isnull;
	TimestampTz result = 0;

	*busy = false;
	if (!dlock_maintenance_lock(res))
	{
		*busy = true;
		return 0;
	}
	if (!dlock_resource_lock(res, DLOCK_RENEW, false))
	{
		dlock_maintenance_unlock(res);
		*busy = true;
		return 0;
	}
	values[0] = TimestampTzGetDatum(promoted_at);
	values[1] = PointerGetDatum(res->name);
	/* Now, under the renewal lock: like a renewal, only an unexpired holding. */
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	if (SPI_execute_with_args("UPDATE dlock.leases"
							  "   SET expires_at = $1 OPERATOR(pg_catalog.+) lease"
							  " WHERE resource OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
							  "   AND " LIVE_AT_P
							  "   AND expires_at OPERATOR(pg_catalog.>) $3"
							  " RETURNING expires_at",
							  3, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "could not update dlock.leases");
	if (SPI_processed > 0)
		result = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0],
												   SPI_tuptable->tupdesc, 1, &isnull));
	if (!dlock_shares_installed())
		return result;

	/*
	 * The shared holdings of the resource (0.4) and its holdings of a
	 * semaphore's permits (0.5), each by the same rule.
	 */
	for (int t = 0; t < (dlock_semaphores_installed() ? 2 : 1); t++)
	{
		if (SPI_execute_with_args(t == 0 ?
								  "UPDATE dlock.shares"
								  "   SET expires_at = $1 OPERATOR(pg_catalog.+) lease"
								  " WHERE resource OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
								  "   AND " LIVE_AT_P
								  "   AND expires_at OPERATOR(pg_catalog.>) $3"
								  " RETURNING expires_at" :
								  "UPDATE dlock.permits"
								  "   SET expires_at = $1 OPERATOR(pg_catalog.+) lease"
								  " WHERE resource OPERATOR(pg_catalog.=) ($2 COLLATE pg_catalog.\"C\")"
								  "   AND " LIVE_AT_P
								  "   AND expires_at OPERATOR(pg_catalog.>) $3"
								  " RETURNING expires_at",
								  3, argtypes, values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not update the shared holdings");
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			TimestampTz e = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i],
															  SPI_tuptable->tupdesc, 1, &isnull));

			if (result == 0 || e < result)
				result = e;
		}
	}
	return result;
}

/*
 * refresh_database: refresh every holding live at P, in transactions of a
 * reaper's batch size; resources found busy are tried again in later
 * passes.  Returns how many were refreshed; *skipped those still busy.
 */
static int64
refresh_database(TimestampTz promoted_at, int64 *skipped)
{
	MemoryContext cxt = AllocSetContextCreate(TopMemoryContext, "dlock refresh",
											  ALLOCSET_DEFAULT_SIZES);
	int			batch = dlock_reap_batch_size();
	int64		refreshed = 0;
	List	   *todo;
	int			pass;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "finding holdings live at the promotion");
	todo = OidIsValid(get_extension_oid("dlock", true))
		? candidates(promoted_at, cxt) : NIL;
	/* Sessions (1.1) by the same rule: their holdings follow them. */
	if (OidIsValid(get_extension_oid("dlock", true)))
		refreshed += dlock_sessions_refresh(promoted_at);
	PopActiveSnapshot();
	CommitTransactionCommand();

	for (pass = 0; todo != NIL && pass < REFRESH_PASSES; pass++)
	{
		List	   *busy_list = NIL;
		int			n = list_length(todo);
		int			i = 0;

		if (pass > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 REFRESH_PASS_PAUSE_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		while (i < n)
		{
			int			to = Min(i + batch, n);
			TimestampTz min_expiry = DT_NOEND;

			CHECK_FOR_INTERRUPTS();
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			PushActiveSnapshot(GetTransactionSnapshot());
			pgstat_report_activity(STATE_RUNNING, "refreshing holdings live at the promotion");
			dlock_store_begin();
			dlock_store_spi();
			for (; i < to; i++)
			{
				DlockResource res;
				bool		busy;
				TimestampTz e;

				dlock_resource_init(&res, list_nth(todo, i));
				e = refresh_one(&res, promoted_at, &busy);
				if (busy)
				{
					MemoryContext old = MemoryContextSwitchTo(cxt);

					busy_list = lappend(busy_list, list_nth(todo, i));
					MemoryContextSwitchTo(old);
				}
				else if (e != 0)
				{
					refreshed++;
					if (e < min_expiry)
						min_expiry = e;
				}
			}
			dlock_store_end();
			/* durable like a renewal; the reaper learns the expiries */
			if (min_expiry != DT_NOEND)
				dlock_note_acquisition(min_expiry);
			PopActiveSnapshot();
			CommitTransactionCommand();
			dlock_maintenance_unlock_all();
			pgstat_report_activity(STATE_IDLE, NULL);
		}
		todo = busy_list;
	}
	*skipped = list_length(todo);
	MemoryContextDelete(cxt);
	return refreshed;
}

/* dlock_refresh_main: a refresh worker, in the database of its arguments. */
void
dlock_refresh_main(Datum main_arg)
{
	dsm_handle	handle = DatumGetUInt32(main_arg);
	dsm_segment *seg;
	RefreshResult *result;
	RefreshArgs args;
	int64		refreshed;
	int64		skipped = 0;
	bool		installed;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.dbid, InvalidOid, 0);
	/* It writes, whatever the database's default_transaction_read_only. */
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET,
					PGC_S_OVERRIDE);

	seg = dsm_attach(handle);
	if (seg == NULL)
		return;					/* the launcher is gone */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	installed = OidIsValid(get_extension_oid("dlock", true));
	CommitTransactionCommand();
	refreshed = installed ? refresh_database(args.promoted_at, &skipped) : 0;
	result = dsm_segment_address(seg);
	result->installed = installed;
	result->refreshed = refreshed;
	result->skipped = skipped;
	pg_write_barrier();
	result->done = true;
	dsm_detach(seg);
}
