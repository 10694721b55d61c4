/*-------------------------------------------------------------------------
 *
 * dlock.h
 *		Declarations shared by the files of the dlock extension.
 *
 * Each .c file has one job: guc.c the settings, resource.c argument checks,
 * hashing and the per-resource lock, store.c the SPI statements against
 * dlock.leases, fence.c fence numbers, xact.c transaction bookkeeping,
 * lease.c the lease functions, xactlock.c transaction-scoped locks, reap.c
 * expiry, events.c NOTIFY, waiters.c shared memory for sleeping waiters and
 * statistics, worker.c the background reaper.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "storage/lock.h"
#include "utils/timestamp.h"

/* Argument limits from the contract. */
#define DLOCK_MAX_RESOURCE_LEN	1000
#define DLOCK_MAX_HOLDER_LEN	255

/* locktag_field4 of our per-resource advisory locks (user ones use 1 and 2). */
#define DLOCK_LOCKTAG_CLASS		0x444C

/* ---- guc.c ---- */
extern int	dlock_default_lease_ms;
extern int	dlock_poll_interval_ms;
extern int	dlock_reap_interval_ms;
extern char *dlock_database;
extern void dlock_guc_init(void);

/* ---- resource.c ---- */

/* A validated resource with its derived identities. */
typedef struct DlockResource
{
	text	   *name;			/* the resource as given */
	uint64		hash;			/* first 64 bits of md5(resource) */
	char		channel[64];	/* LISTEN channel, "dlock_" + md5 hex */
} DlockResource;

extern void dlock_resource_init(DlockResource *res, text *name);
extern text *dlock_check_resource(FunctionCallInfo fcinfo, int argno);
extern text *dlock_check_holder(FunctionCallInfo fcinfo, int argno);
extern Interval *dlock_check_lease(FunctionCallInfo fcinfo, int argno);
extern int64 dlock_check_wait_ms(FunctionCallInfo fcinfo, int argno);
extern void dlock_check_writable(const char *fname);
extern bool dlock_resource_lock(const DlockResource *res, bool wait);
extern void dlock_resource_unlock(const DlockResource *res);
extern void dlock_set_locktag(LOCKTAG *tag, uint64 hash);
extern TimestampTz dlock_add_interval(TimestampTz ts, const Interval *span);
extern Interval *dlock_ms_interval(int64 ms);

/* ---- store.c ---- */

/* One row of dlock.leases as read by store.c. */
typedef struct DlockRow
{
	bool		exists;			/* false: no row for this resource */
	bool		held;			/* holder is not NULL */
	char	   *holder;			/* palloc'd in the caller's context */
	Oid			owner;
	int32		count;
	int64		fence;
	Interval	lease;
	TimestampTz expires_at;
} DlockRow;

extern void dlock_store_begin(void);
extern void dlock_store_end(void);
extern void dlock_store_reset(void);
extern void dlock_row_read(const DlockResource *res, DlockRow *row);
extern void dlock_row_insert(const DlockResource *res, text *holder,
							 Oid owner, int64 fence, const Interval *lease,
							 TimestampTz now, TimestampTz expires);
extern void dlock_row_renew(const DlockResource *res, const Interval *lease,
							TimestampTz now, TimestampTz expires);
extern void dlock_row_release(const DlockResource *res, int32 count_left,
							  TimestampTz now);
extern List *dlock_rows_of_holder(text *holder, Oid owner);
extern List *dlock_rows_expired(TimestampTz now, int limit);
extern List *dlock_rows_stale_free(TimestampTz cutoff, int limit);
extern TimestampTz dlock_min_expiry(void);
extern int64 dlock_row_reap(const DlockResource *res, TimestampTz now);
extern bool dlock_row_fast_acquire(const DlockResource *res, text *holder,
								   Oid owner, const Interval *lease,
								   TimestampTz now, TimestampTz expires,
								   int64 *fence, int32 *count,
								   TimestampTz *new_expires, bool *took_over);
extern bool dlock_row_fast_release(const DlockResource *res, text *holder,
								   Oid owner, TimestampTz now, bool fence_given,
								   int64 fence, int32 *left, int64 *fence_out);
extern void dlock_row_delete_free(const DlockResource *res);
extern Oid	dlock_schema_oid(void);

/* ---- fence.c ---- */
#define DLOCK_FENCE_SEQ_BITS	44
extern int64 dlock_next_fence(void);

/* ---- xact.c ---- */
extern void dlock_xact_init(void);
extern void dlock_note_acquisition(TimestampTz expires);
extern void dlock_note_release(void);
extern void dlock_xact_register(const DlockResource *res, int64 fence);
extern int64 dlock_xact_fence(const DlockResource *res);
extern void dlock_wake_after_commit(uint64 hash);
extern void dlock_wake_after_abort(uint64 hash);

/* ---- lease.c ---- */
extern int64 dlock_acquire(const DlockResource *res, text *holder,
						   const Interval *lease, int64 wait_ms,
						   bool transaction_scoped);

/* ---- events.c ---- */
extern void dlock_notify(const DlockResource *res, const char *event,
						 int64 fence);

/* ---- waiters.c (shared memory; inert unless preloaded) ---- */
typedef enum DlockStat
{
	DLOCK_STAT_ACQUIRED,
	DLOCK_STAT_REENTERED,
	DLOCK_STAT_RELEASED,
	DLOCK_STAT_EXPIRED,
	DLOCK_STAT_BROKEN,
	DLOCK_STAT_RENEWED,
	DLOCK_STAT_LOST_RENEWALS,
	DLOCK_STAT_WAITS,
	DLOCK_STAT_WAKEUPS,
	DLOCK_STAT_TIMEOUTS,
	DLOCK_NUM_STATS
} DlockStat;

extern void dlock_shmem_init(void);
extern void dlock_count(DlockStat stat);
extern void dlock_wait_begin(const DlockResource *res, text *holder,
							 TimestampTz deadline);
extern void dlock_wait_end(bool acquired);
extern void dlock_wait_abort(void);
extern void dlock_wait_sleep(long timeout_ms);
extern void dlock_wake_queue(uint64 hash);
extern void dlock_expiry_hint(TimestampTz expires);
extern bool dlock_reap_due(TimestampTz now);
extern void dlock_reap_started(void);

/* ---- worker.c ---- */
extern void dlock_worker_init(void);
extern int	dlock_reap_batch(TimestampTz now, int limit);
extern List *dlock_reap_candidates(TimestampTz now, int limit);
extern int	dlock_reap_list(List *resources, int from, int to, TimestampTz now);
extern void dlock_purge_free(TimestampTz now, int limit);

#endif							/* DLOCK_H */
