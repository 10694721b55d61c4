/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The background reaper ("dlock reaper").
 *
 * Registered when dlock is in shared_preload_libraries.  It connects to
 * dlock.database and every dlock.reap_interval reaps expired leases: one
 * scan for candidates, then batches of them, one short transaction each
 * (reap.c explains why batches).  It skips the scan while no lease
 * can have expired yet (the hint in waiters.c), so a table of many long
 * leases costs nothing between expiries.  The loop is the canonical one of
 * worker_spi and autoprewarm: WaitLatch with WL_EXIT_ON_PM_DEATH, SIGHUP
 * reloads the configuration, SIGTERM ends it; a per-loop memory context is
 * reset every round (pg_cron).  On a hot standby it only waits, and starts
 * reaping once the server is promoted.  An error ends the process and the
 * postmaster starts it again after bgw_restart_time.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PGDLLEXPORT void dlock_worker_main(Datum main_arg);

#define DLOCK_WORKER_BATCH 500
#define DLOCK_WORKER_SCAN 10000
/* Scan at least this often anyway, to purge long-free rows (reap.c). */
#define DLOCK_WORKER_FULL_SCAN_SECS 60

/* dlock_worker_init: register the reaper when preloaded. */
void
dlock_worker_init(void)
{
	BackgroundWorker worker;

	if (!process_shared_preload_libraries_in_progress)
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

/* begin_round / end_round: one transaction of the reaper. */
static void
begin_round(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

static void
end_round(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * reap_all: reap every expired lease.  One scan finds up to
 * DLOCK_WORKER_SCAN candidates (kept in loop_context), which are reaped
 * DLOCK_WORKER_BATCH to a transaction, so each transaction, and the time a
 * reaped resource's lock is held, stays short.  Then a last transaction
 * purges long-free rows and tells the hint when the next lease ends.  Does
 * nothing where the extension is not installed.
 */
static void
reap_all(MemoryContext loop_context)
{
	for (;;)
	{
		List	   *candidates = NIL;
		int			n,
					i,
					reaped = 0;
		MemoryContext old;

		begin_round("finding expired leases");
		if (!OidIsValid(get_extension_oid("dlock", true)))
		{
			end_round();
			return;
		}
		old = MemoryContextSwitchTo(loop_context);
		candidates = dlock_reap_candidates(GetCurrentTimestamp(), DLOCK_WORKER_SCAN);
		MemoryContextSwitchTo(old);
		end_round();

		n = list_length(candidates);
		for (i = 0; i < n; i += DLOCK_WORKER_BATCH)
		{
			CHECK_FOR_INTERRUPTS();
			begin_round("reaping expired leases");
			reaped += dlock_reap_list(candidates, i, Min(i + DLOCK_WORKER_BATCH, n),
									  GetCurrentTimestamp());
			end_round();
		}
		/* Go on while scans come back full and make progress. */
		if (n < DLOCK_WORKER_SCAN || reaped == 0)
			break;
	}

	begin_round("purging free rows");
	dlock_purge_free(GetCurrentTimestamp(), DLOCK_WORKER_BATCH);
	dlock_store_begin();
	dlock_expiry_hint(dlock_min_expiry());
	dlock_store_end();
	end_round();
}

/* dlock_worker_main: the reaper's main loop. */
void
dlock_worker_main(Datum main_arg)
{
	MemoryContext loop_context;
	TimestampTz last_scan = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(dlock_database, NULL, 0);

	loop_context = AllocSetContextCreate(TopMemoryContext, "dlock reaper loop",
										 ALLOCSET_DEFAULT_SIZES);
	for (;;)
	{
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 dlock_reap_interval_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (RecoveryInProgress())
			continue;			/* hot standby: wait for promotion */

		/* Nothing can have expired before the earliest known expiry. */
		if (!dlock_reap_due(GetCurrentTimestamp()) &&
			!TimestampDifferenceExceeds(last_scan, GetCurrentTimestamp(),
										DLOCK_WORKER_FULL_SCAN_SECS * 1000))
			continue;
		last_scan = GetCurrentTimestamp();
		dlock_reap_started();
		reap_all(loop_context);
		MemoryContextReset(loop_context);
	}
}
