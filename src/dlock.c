/*-------------------------------------------------------------------------
 *
 * dlock.c
 *		Module entry point: wires up the per-area initialisation.
 *
 * dlock works loaded on demand (CREATE EXTENSION, first call) and, better,
 * from shared_preload_libraries, where it also gets shared memory for
 * wake-on-commit waiters and statistics and its background reaper.
 *
 *-------------------------------------------------------------------------
 */
#include "dlock.h"

#include "fmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * _PG_init: define settings, hook transaction events, and when preloaded
 * reserve shared memory and register the reaper.
 */
void
_PG_init(void)
{
	dlock_guc_init();
	dlock_xact_init();

	/*
	 * What each area does when a transaction ends, in this order: LISTEN
	 * bookkeeping before the wakeups (its locks released, a backend first
	 * stops holding LISTENs up, then wakes waiters), events, and the store
	 * session's state last.
	 */
	dlock_xact_hooks_add(&dlock_listeners_xact_hooks);
	dlock_xact_hooks_add(&dlock_waiters_xact_hooks);
	dlock_xact_hooks_add(&dlock_events_xact_hooks);
	dlock_xact_hooks_add(&dlock_sends_xact_hooks);
	dlock_xact_hooks_add(&dlock_store_xact_hooks);
	dlock_xact_hooks_add(&dlock_resource_xact_hooks);
	dlock_shmem_init();
	dlock_listeners_init();
	dlock_worker_init();
}
