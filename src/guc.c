/*-------------------------------------------------------------------------
 *
 * guc.c
 *		dlock's configuration settings.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

int			dlock_default_lease_ms = 30000;
int			dlock_poll_interval_ms = 100;
int			dlock_reap_interval_ms = 1000;
char	   *dlock_database = NULL;
int			dlock_queue_ttl_ms = 10000;
int			dlock_lock_delay_ms = 0;
bool		dlock_refresh_on_promotion = true;
int			dlock_compact_threshold_kb = 1024;

/*
 * dlock_guc_init: define the dlock.* settings.  The worker's settings are
 * PGC_SIGHUP (server-wide).  dlock.queue_ttl is PGC_SUSET: it bounds how
 * long a dead client's ticket blocks everybody else's queue, so it is the
 * administrator's (postgresql.conf, ALTER SYSTEM/DATABASE/ROLE by a
 * superuser), not the ticket-taker's.  The others can be set per session.
 */
void
dlock_guc_init(void)
{
	DefineCustomIntVariable("dlock.default_lease",
							"Lease used when a call passes none.",
							NULL,
							&dlock_default_lease_ms,
							30000, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dlock.poll_interval",
							"How often a waiting lock() re-checks when it is not woken by commits.",
							"Used when dlock is not in shared_preload_libraries, and as a safety net otherwise.",
							&dlock_poll_interval_ms,
							100, 1, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dlock.reap_interval",
							"How often the background reaper removes expired leases.",
							NULL,
							&dlock_reap_interval_ms,
							1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dlock.queue_ttl",
							"How long a client-side fair waiter keeps its ticket after each attempt.",
							"A client that retries try_lock(..., fair => true) less often than this loses its place in the queue.",
							&dlock_queue_ttl_ms,
							10000, 1, 3600 * 1000,
							PGC_SUSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("dlock.lock_delay",
							"Lock-delay of exclusive holdings taken without one.",
							"After a holding ends uncleanly (its lease ran out, or it was broken), nobody acquires the resource before the end of the lease plus this.",
							&dlock_lock_delay_ms,
							0, 0, 3600 * 1000,
							PGC_USERSET, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("dlock.refresh_on_promotion",
							 "Extends the holdings live at a promotion to at least promotion time + their lease.",
							 "Read by the background reaper (shared_preload_libraries) when the server ends recovery on a new timeline.",
							 &dlock_refresh_on_promotion,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("dlock.compact_threshold",
							"Size above which a reaper round rewrites a table of dlock that is mostly deleted rows' space.",
							"The table with its indexes and TOAST; rewritten (VACUUM FULL) only when nobody has it open and it has at most 10,000 live rows. -1 turns it off.",
							&dlock_compact_threshold_kb,
							1024, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_KB,
							NULL, NULL, NULL);

	/* PGC_POSTMASTER settings can only be defined while preloading. */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomStringVariable("dlock.database",
								   "Database in which the background reaper runs.",
								   NULL,
								   &dlock_database,
								   "postgres",
								   PGC_POSTMASTER, 0,
								   NULL, NULL, NULL);

	MarkGUCPrefixReserved("dlock");
}
