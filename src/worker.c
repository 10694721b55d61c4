/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The background reaper ("dlock reaper"), its rounds, and
 *		dlock.reap(), which runs one.
 *
 * Two kinds of background worker:
 *
 *	- the launcher, "dlock reaper", registered when dlock is in
 *	  shared_preload_libraries.  It connects to no database (like the
 *	  logical replication launcher), so it never stands in the way of DROP
 *	  DATABASE.  Every dlock.reap_interval it checks whether a lease may have
 *	  expired (the hint in waiters.c, and once a minute anyway to purge
 *	  long-free rows) and then starts a round in dlock.database and waits
 *	  for it to end.  If that database does not exist it says so once and
 *	  waits quietly until it does.  On a hot standby it only waits
 *	  (looking every 100 ms for the end of recovery); once the server is
 *	  promoted it first refreshes the holdings live at the promotion, in
 *	  every database (promote.c), and then starts rounds.  The loop is the canonical
 *	  one of worker_spi and autoprewarm: WaitLatch with WL_EXIT_ON_PM_DEATH,
 *	  SIGHUP reloads the configuration, SIGTERM ends it; a per-loop memory
 *	  context is reset every round (pg_cron).  Not started by pg_upgrade.
 *	- a round, "dlock reaper round", a dynamic background worker in one
 *	  database that reaps every expired lease (reap.c: short transactions,
 *	  nothing waited for, all committed asynchronously, so a synchronous
 *	  standby is not waited for either), delivers queued events, purges
 *	  dead tickets and lock-delays and long-free rows,
 *	  lowers the hint to the earliest expiry left, and exits.  The launcher
 *	  starts one per due interval; dlock.reap() starts one in its own
 *	  database and waits for its count (passed back in a small DSM
 *	  segment), with or without preloading; reap() callers of a database
 *	  take turns, so they never need more than one worker slot.
 *
 * Shared state: none of its own; the hint and statistics are waiters.c's,
 * the DSM segment of a round is written only by the round, and read by
 * the caller only after the round has exited.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "access/xlog.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(dlock_reap);

PGDLLEXPORT void dlock_worker_main(Datum main_arg);
PGDLLEXPORT void dlock_round_main(Datum main_arg);

/* Candidates per scan of the table. */
#define DLOCK_ROUND_SCAN 10000
/* How long dlock.reap() waits for a free background worker slot. */
#define DLOCK_ROUND_SLOT_WAIT_MS 10000
/* Start a round at least this often anyway, to purge long-free rows. */
#define DLOCK_WORKER_FULL_SCAN_SECS 60
/* How often the launcher checks for the end of recovery on a standby. */
#define DLOCK_WORKER_STANDBY_POLL_MS 100
/* After rounds that failed in a row, the next waits up to this long. */
#define DLOCK_WORKER_MAX_BACKOFF_MS 60000

/* What a round passes back to whoever waits for it (dlock.reap()). */
typedef struct DlockRoundResult
{
	bool		done;
	int64		reaped;
} DlockRoundResult;

/* dlock_worker_init: register the launcher when preloaded. */
void
dlock_worker_init(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress || IsBinaryUpgrade)
		return;
	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dlock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dlock_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dlock reaper");
	snprintf(worker.bgw_type, BGW_MAXLEN, "dlock reaper");
	RegisterBackgroundWorker(&worker);
}

/*
 * start_round: start a round in database dbid reporting to the DSM segment
 * handle; false if no background worker slot is free.
 */
static bool
start_round(Oid dbid, dsm_handle handle, BackgroundWorkerHandle **bgw)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "dlock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "dlock_round_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "dlock reaper round");
	snprintf(worker.bgw_type, BGW_MAXLEN, "dlock reaper round");
	worker.bgw_main_arg = UInt32GetDatum(handle);
	memcpy(worker.bgw_extra, &dbid, sizeof(Oid));
	worker.bgw_notify_pid = MyProcPid;
	return RegisterDynamicBackgroundWorker(&worker, bgw);
}

/*
 * run_round: start a round in database dbid and wait for it to end.  Sets
 * *done if it finished (else it failed: its error is in the server log),
 * and returns how many leases it reaped; false if no background worker
 * slot was free.
 */
static bool
run_round(Oid dbid, bool *done, int64 *reaped)
{
	dsm_segment *seg;
	DlockRoundResult *result;
	BackgroundWorkerHandle *bgw;
	pid_t		pid;

	seg = dsm_create(sizeof(DlockRoundResult), 0);
	result = dsm_segment_address(seg);
	result->done = false;
	result->reaped = 0;
	if (!start_round(dbid, dsm_segment_handle(seg), &bgw))
	{
		dsm_detach(seg);
		return false;
	}
	if (WaitForBackgroundWorkerStartup(bgw, &pid) == BGWH_STARTED)
		(void) WaitForBackgroundWorkerShutdown(bgw);
	pg_read_barrier();
	*done = result->done;
	*reaped = result->reaped;
	dsm_detach(seg);
	return true;
}

/*
 * dlock_run_round: start a round in this database, wait for it, return how
 * many leases it reaped.  For dlock.reap().  Callers in one database take
 * turns (a lock-manager lock, given back as soon as the round has ended),
 * so any number of concurrent reap() calls use one background worker slot
 * between them; a slot taken by others (parallel query, other extensions)
 * is waited for, up to DLOCK_ROUND_SLOT_WAIT_MS.
 */
int64
dlock_run_round(void)
{
	LOCKTAG		tag;
	bool		done = false;
	bool		started;
	int64		reaped = 0;
	long		waited_ms = 0;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, 0, 0, DLOCK_LOCKTAG_REAP);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	while (!(started = run_round(MyDatabaseId, &done, &reaped)) &&
		   waited_ms < DLOCK_ROUND_SLOT_WAIT_MS)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		waited_ms += 20;
	}
	LockRelease(&tag, ExclusiveLock, false);
	if (!started)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start a dlock reaper round"),
				 errdetail("dlock.reap() reaps in a background worker of its own, and none was free for %d ms.",
						   DLOCK_ROUND_SLOT_WAIT_MS),
				 errhint("Raise max_worker_processes.")));
	if (!done)
		ereport(ERROR,
				(errcode(ERRCODE_SYSTEM_ERROR),
				 errmsg("dlock reaper round ended before finishing"),
				 errhint("See the server log.")));
	return reaped;
}

/*
 * shares_min_expiry: the earliest expiry of a shared holding (0.4) or a
 * holding of a semaphore's permits (0.5), or DT_NOEND (none, or older
 * SQL).  Inside a store session.
 */
static TimestampTz
shares_min_expiry(void)
{
	static SPIPlanPtr plan = NULL;
	static SPIPlanPtr plan_permits = NULL;
	bool		isnull;
	Datum		d;

	if (!dlock_shares_installed())
		return DT_NOEND;
	if (dlock_semaphores_installed() ?
		dlock_store_exec(&plan_permits,
						 "SELECT pg_catalog.min(e) FROM"
						 " (SELECT s.expires_at FROM dlock.shares s"
						 "  UNION ALL SELECT p.expires_at FROM dlock.permits p) h(e)",
						 0, NULL, NULL, NULL, true) != 1 :
		dlock_store_exec(&plan, "SELECT pg_catalog.min(s.expires_at) FROM dlock.shares s",
						 0, NULL, NULL, NULL, true) != 1)
		return DT_NOEND;
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? DT_NOEND : DatumGetTimestampTz(d);
}

/*
 * dlock.reap(): reap the leases expired now and emit their events, in a
 * reaper round of its own (reap.c says why); returns how many.
 */
Datum
dlock_reap(PG_FUNCTION_ARGS)
{
	int64		reaped;

	/*
	 * The round writes in transactions of its own, so a transaction that
	 * is read-only by default_transaction_read_only (ALTER DATABASE ...
	 * SET) may ask; one made read-only otherwise (BEGIN READ ONLY) may not.
	 */
	if (RecoveryInProgress() || !DefaultXactReadOnly)
		dlock_check_writable("dlock.reap()");
	(void) dlock_schema_oid();	/* the extension must be here */
	reaped = dlock_run_round();
	PG_RETURN_INT32((int32) Min(reaped, PG_INT32_MAX));
}

/* begin_xact / end_xact: one transaction of a round. */
static void
begin_xact(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	/*
	 * Whatever default_transaction_isolation says, each statement sees what
	 * committed before it (dlock_outbox_deliver relies on it).
	 */
	XactIsoLevel = XACT_READ_COMMITTED;
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

static void
end_xact(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * in_batches: run fn over list in transactions of at most batch items.
 * Should a transaction fail for want of shared lock memory (other sessions
 * may be using it), it is retried with half the batch; at one item the
 * error stands.  Returns the sum of fn's results.
 */
static int64
in_batches(List *list, int batch, const char *activity,
		   int (*fn) (List *list, int from, int to))
{
	int			n = list_length(list);
	volatile int i = 0;
	volatile int64 sum = 0;
	volatile int cur_batch = batch;
	MemoryContext ctx = CurrentMemoryContext;

	while (i < n)
	{
		/* volatile: read after PG_TRY's longjmp target is set */
		volatile int to = Min(i + cur_batch, n);

		CHECK_FOR_INTERRUPTS();
		PG_TRY();
		{
			begin_xact(activity);
			sum += fn(list, i, to);
			end_xact();
			dlock_maintenance_unlock_all();
			i = to;
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(ctx);
			edata = CopyErrorData();
			if (edata->sqlerrcode != ERRCODE_OUT_OF_MEMORY || cur_batch == 1)
				PG_RE_THROW();
			HOLD_INTERRUPTS();
			FlushErrorState();
			AbortCurrentTransaction();
			dlock_maintenance_unlock_all();
			RESUME_INTERRUPTS();
			cur_batch = Max(1, cur_batch / 2);
			ereport(LOG,
					(errmsg("dlock reaper round: out of shared lock memory, %d leases a transaction from now on",
							cur_batch)));
		}
		PG_END_TRY();
	}
	return sum;
}

/* reap_fn, purge_fn: in_batches' callbacks. */
static int
reap_fn(List *list, int from, int to)
{
	return dlock_reap_list(list, from, to, GetCurrentTimestamp());
}

static int
purge_fn(List *list, int from, int to)
{
	dlock_purge_list(list, from, to);
	return 0;
}

/*
 * reap_round: reap every expired lease, deliver queued events, purge dead
 * tickets and lock-delays and long-free rows, lower the hint, and rewrite
 * the tables that are mostly dead space (compact.c).  Returns how many
 * leases were reaped; 0 where the
 * extension is not installed.
 */
static int64
reap_round(MemoryContext loop_context)
{
	int			batch = dlock_reap_batch_size();
	int64		reaped = 0;
	List	   *list;

	for (;;)
	{
		int64		now_reaped;
		int			n;

		begin_xact("finding expired leases");
		if (!OidIsValid(get_extension_oid("dlock", true)))
		{
			end_xact();
			return reaped;
		}
		MemoryContextSwitchTo(loop_context);
		list = dlock_reap_candidates(GetCurrentTimestamp(), DLOCK_ROUND_SCAN);
		end_xact();
		MemoryContextSwitchTo(loop_context);
		n = list_length(list);
		now_reaped = in_batches(list, batch, "reaping expired leases", reap_fn);
		reaped += now_reaped;
		MemoryContextReset(loop_context);
		/* Go on while scans come back full and make progress. */
		if (n < DLOCK_ROUND_SCAN || now_reaped == 0)
			break;
	}

	begin_xact("delivering queued events");
	(void) dlock_outbox_deliver();
	end_xact();

	begin_xact("purging dead tickets and lock-delays");
	dlock_store_begin();
	(void) dlock_queue_purge(GetCurrentTimestamp());
	dlock_store_end();
	end_xact();

	begin_xact("removing ended sessions");
	(void) dlock_sessions_reap();
	end_xact();

	begin_xact("finding long-free rows");
	MemoryContextSwitchTo(loop_context);
	list = dlock_stale_candidates(GetCurrentTimestamp(), DLOCK_ROUND_SCAN);
	end_xact();
	MemoryContextSwitchTo(loop_context);
	(void) in_batches(list, batch, "purging long-free rows", purge_fn);
	MemoryContextReset(loop_context);

	begin_xact("finding the next expiry");
	dlock_store_begin();
	dlock_expiry_hint(dlock_min_expiry());
	dlock_expiry_hint(shares_min_expiry());
	dlock_expiry_hint(dlock_sessions_min_expiry());
	dlock_store_end();
	end_xact();

	(void) dlock_compact_tables();
	return reaped;
}

/* dlock_round_main: a round, in the database named in bgw_extra. */
void
dlock_round_main(Datum main_arg)
{
	dsm_handle	handle = DatumGetUInt32(main_arg);
	dsm_segment *seg;
	MemoryContext loop_context;
	DlockRoundResult *result;
	Oid			dbid;
	int64		reaped;

	memcpy(&dbid, MyBgworkerEntry->bgw_extra, sizeof(Oid));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dbid, InvalidOid, 0);
	/*
	 * Rounds never wait, not for a synchronous standby either: every
	 * transaction of a round commits asynchronously (what it writes is
	 * maintenance: reaping, delivering the outbox, purging; a crash that
	 * loses it leaves it to a later round).
	 */
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	/*
	 * A round writes (reaping, the outbox, compaction's own transactions),
	 * whatever ALTER DATABASE ... SET default_transaction_read_only says.
	 */
	SetConfigOption("default_transaction_read_only", "off", PGC_SUSET,
					PGC_S_OVERRIDE);

	seg = dsm_attach(handle);
	if (seg == NULL)
		return;					/* whoever waited is gone */
	loop_context = AllocSetContextCreate(TopMemoryContext, "dlock reaper round",
										 ALLOCSET_DEFAULT_SIZES);
	reaped = reap_round(loop_context);
	result = dsm_segment_address(seg);
	result->reaped = reaped;
	pg_write_barrier();
	result->done = true;
	dsm_detach(seg);
}

/*
 * database_oid: the OID of database name, or InvalidOid.  A heap scan of
 * pg_database (as autovacuum's launcher does): without a database of our
 * own, the name index is not at hand.
 */
static Oid
database_oid(const char *name)
{
	Relation	rel = table_open(DatabaseRelationId, AccessShareLock);
	TableScanDesc scan = table_beginscan_catalog(rel, 0, NULL);
	HeapTuple	tup;
	Oid			dbid = InvalidOid;

	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (strcmp(NameStr(db->datname), name) == 0)
		{
			dbid = db->oid;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	return dbid;
}

/*
 * reaper_database: the OID of dlock.database, or InvalidOid; says once
 * that it is missing (and once that it is back).
 */
static Oid
reaper_database(void)
{
	static bool said_missing = false;
	Oid			dbid;

	begin_xact("looking up dlock.database");
	dbid = database_oid(dlock_database);
	end_xact();
	if (!OidIsValid(dbid) && !said_missing)
		ereport(LOG,
				(errmsg("dlock reaper: database \"%s\" does not exist; waiting for it",
						dlock_database),
				 errhint("Set dlock.database to the database where CREATE EXTENSION dlock ran.")));
	else if (OidIsValid(dbid) && said_missing)
		ereport(LOG,
				(errmsg("dlock reaper: database \"%s\" exists again", dlock_database)));
	said_missing = !OidIsValid(dbid);
	return dbid;
}

/* dlock_worker_main: the launcher's main loop. */
void
dlock_worker_main(Datum main_arg)
{
	MemoryContext loop_context;
	TimestampTz last_round = 0;
	bool		said_no_slot = false;
	int			failures = 0;	/* rounds failed in a row */
	TimestampTz retry_at = 0;	/* after failures: no round before */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	loop_context = AllocSetContextCreate(TopMemoryContext, "dlock reaper loop",
										 ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		Oid			dbid;
		TimestampTz now;
		bool		done;
		int64		reaped;

		/* On a standby, look often: the refresh after promotion is due. */
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 RecoveryInProgress()
						 ? Min(dlock_reap_interval_ms, DLOCK_WORKER_STANDBY_POLL_MS)
						 : dlock_reap_interval_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (RecoveryInProgress())
			continue;			/* hot standby: wait for promotion */

		/* After a promotion, refresh the holdings first (promote.c). */
		MemoryContextSwitchTo(loop_context);
		if (!dlock_promotion_step())
		{
			MemoryContextReset(loop_context);
			continue;
		}
		MemoryContextReset(loop_context);

		/* Nothing can have expired before the earliest known expiry. */
		now = GetCurrentTimestamp();
		if (failures > 0 && now < retry_at)
			continue;
		if (!dlock_reap_due(now) &&
			!TimestampDifferenceExceeds(last_round, now,
										DLOCK_WORKER_FULL_SCAN_SECS * 1000))
			continue;

		MemoryContextSwitchTo(loop_context);
		dbid = reaper_database();
		if (!OidIsValid(dbid))
			continue;
		last_round = now;
		dlock_reap_started();
		if (!run_round(dbid, &done, &reaped))
		{
			/* No free slot: try again next interval; say so once. */
			if (!said_no_slot)
				ereport(LOG,
						(errmsg("dlock reaper: no background worker slot is free for a reaper round; trying every dlock.reap_interval"),
						 errhint("Raise max_worker_processes.")));
			said_no_slot = true;
			dlock_expiry_hint(now);
		}
		else
		{
			said_no_slot = false;
			if (!done)
			{
				/*
				 * It failed (its error is in the log): again later, after
				 * twice as long for each failure in a row, at most a minute,
				 * so that a lasting cause does not flood the log.
				 */
				int64		backoff = dlock_reap_interval_ms;

				for (int i = 0; i < failures && backoff < DLOCK_WORKER_MAX_BACKOFF_MS; i++)
					backoff *= 2;
				failures++;
				retry_at = TimestampTzPlusMilliseconds(now,
													   Min(backoff, DLOCK_WORKER_MAX_BACKOFF_MS));
				dlock_expiry_hint(now);
			}
			else
				failures = 0;
		}
		MemoryContextReset(loop_context);
	}
}
