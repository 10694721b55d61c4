/*-------------------------------------------------------------------------
 *
 * dlock.h
 *		Declarations shared by the files of the dlock extension.
 *
 * Each .c file has one job: guc.c the settings, args.c argument checks,
 * resource.c hashing, the per-resource lock and the transaction-scoped
 * locks held by it, holding.c the rules of a holding (who the caller is,
 * when a lease is free, who may change or pin it), store.c store sessions
 * and the SPI statements that scan dlock.leases, rows.c the hot paths'
 * direct access to a resource's holdings (dlock.leases, dlock.shares,
 * dlock.permits), ending.c the end of an exclusive holding, table.c
 * (private header table.h) the direct heap access both use, fence.c fence
 * numbers, xact.c transaction bookkeeping and the hooks other files run at
 * its end, admit.c the admission decision, acquire.c lease attempts,
 * wait.c the wait loop every waiting call shares, lease.c the lease
 * functions, check.c check and assert_fence, semaphore.c the semaphore functions, multi.c several
 * resources at once, xactlock.c transaction-scoped locks, queue.c
 * fair queues and lock-delay, upkeep.c the same outside an attempt
 * (withdraw, the reaper), elect.c leader election and holding values,
 * reap.c expiry, compat.h what differs between PostgreSQL majors, sends.c
 * the events and wakeups a transaction sends at its end, events.c NOTIFY
 * and the outbox, listeners.c who LISTENs, waiters.c shared memory for
 * sleeping waiters, wakeups and statistics, worker.c the background worker
 * and dlock.reap(), promote.c the refresh of holdings after a promotion,
 * compact.c the rewrite of a mostly dead table, session.c sessions.
 *
 * Calls go one way, down these layers (a file calls only files of lower
 * layers, never back up; no two files call each other in a circle):
 *	dlock.c > worker.c > compact.c, promote.c > reap.c > lease.c, check.c,
 *	elect.c, xactlock.c, semaphore.c, multi.c > session.c > acquire.c, upkeep.c > wait.c,
 *	admit.c > queue.c, events.c, ending.c > rows.c, holding.c, fence.c,
 *	waiters.c > table.c, store.c, listeners.c, sends.c > resource.c >
 *	xact.c, args.c, guc.c.
 * What a transaction's end must do is registered with xact.c as hooks
 * (DlockXactHooks, added by dlock.c), so xact.c calls nobody.
 *
 *-------------------------------------------------------------------------
 */
#ifndef DLOCK_H
#define DLOCK_H

#include "postgres.h"

#include "compat.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "nodes/pg_list.h"
#include "storage/itemptr.h"
#include "storage/lock.h"
#include "utils/timestamp.h"

/* Argument limits from the contract. */
#define DLOCK_MAX_RESOURCE_LEN	1000
#define DLOCK_MAX_HOLDER_LEN	255

/* locktag_field4 of our per-resource advisory locks (user ones use 1 and 2). */
#define DLOCK_LOCKTAG_CLASS		0x444C
/* ... of the fence epoch's writers (fence.c) */
#define DLOCK_LOCKTAG_EPOCH		(DLOCK_LOCKTAG_CLASS + 1)
/* ... of the per-resource maintenance lock of reapers (resource.c) */
#define DLOCK_LOCKTAG_MAINTENANCE	(DLOCK_LOCKTAG_CLASS + 2)
/* ... of dlock.reap() callers taking turns in a database (worker.c) */
#define DLOCK_LOCKTAG_REAP		(DLOCK_LOCKTAG_CLASS + 3)
/* ... of the per-resource pin marker of assert_fence (resource.c) */
#define DLOCK_LOCKTAG_PIN		(DLOCK_LOCKTAG_CLASS + 4)
/* ... of an in-server ticket of a fair queue (queue.c) */
#define DLOCK_LOCKTAG_TICKET	(DLOCK_LOCKTAG_CLASS + 5)
/* ... of "a resource has in-server fair waiters" (queue.c) */
#define DLOCK_LOCKTAG_FAIR		(DLOCK_LOCKTAG_CLASS + 6)
/* ... of the end of a client ticket still in flight (queue.c) */
#define DLOCK_LOCKTAG_LAPSE		(DLOCK_LOCKTAG_CLASS + 7)
/* ... of a transaction writing a holder's client ticket row (queue.c) */
#define DLOCK_LOCKTAG_TICKET_ROW	(DLOCK_LOCKTAG_CLASS + 8)
/* ... of "an exclusive request waits in lock()" (queue.c) */
#define DLOCK_LOCKTAG_WRITER	(DLOCK_LOCKTAG_CLASS + 9)
/* ... of "this shared holder waits to upgrade" (queue.c) */
#define DLOCK_LOCKTAG_UPGRADE	(DLOCK_LOCKTAG_CLASS + 10)
/* ... of a holder's shared holding of a resource being changed (resource.c) */
#define DLOCK_LOCKTAG_SHARE_ROW	(DLOCK_LOCKTAG_CLASS + 11)
/* ... of a session: acquisitions in it share it, close_session alone (session.c) */
#define DLOCK_LOCKTAG_SESSION	(DLOCK_LOCKTAG_CLASS + 12)
/* ... of the pins of an exclusive holding, which readers look at (resource.c) */
#define DLOCK_LOCKTAG_XPIN		(DLOCK_LOCKTAG_CLASS + 13)

/* The modes of the per-resource lock (resource.c explains them). */
typedef enum DlockLockMode
{
	DLOCK_PIN = AccessShareLock,
	DLOCK_SHARE = RowExclusiveLock,
	DLOCK_RENEW = ShareRowExclusiveLock,
	DLOCK_CHANGE = AccessExclusiveLock
} DlockLockMode;

/* What an attempt's take of a resource's lock came to (resource.c). */
typedef enum DlockTake
{
	TAKE_OK,					/* taken, with the share-row tag if asked */
	TAKE_CONTENDED,				/* another transaction has the lock */
	TAKE_SHARE_ROW_BUSY			/* ... the holder's share-row tag: given back */
} DlockTake;

/* ---- guc.c ---- */
extern int	dlock_default_lease_ms;
extern int	dlock_poll_interval_ms;
extern int	dlock_reap_interval_ms;
extern char *dlock_database;
extern int	dlock_queue_ttl_ms;
extern int	dlock_lock_delay_ms;
extern bool dlock_refresh_on_promotion;
extern int	dlock_compact_threshold_kb;
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
extern bool dlock_resource_lock(const DlockResource *res, DlockLockMode mode,
								bool wait);
extern void dlock_resource_unlock(const DlockResource *res, DlockLockMode mode);
extern void dlock_pin(const DlockResource *res);
extern void dlock_unpin(const DlockResource *res);
extern bool dlock_pinned(const DlockResource *res);
extern void dlock_pin_exclusive(const DlockResource *res);
extern void dlock_unpin_exclusive(const DlockResource *res);
extern bool dlock_exclusive_pinned(const DlockResource *res);
extern void dlock_wait_for_pins(const DlockResource *res);
extern void dlock_wait_for_exclusive_pins(const DlockResource *res);
extern bool dlock_resource_held(const DlockResource *res, bool *only_share);
extern bool dlock_share_row_lock(const DlockResource *res, text *holder,
								 Oid owner, DlockLockMode mode, bool wait);
extern void dlock_share_row_unlock(const DlockResource *res, text *holder,
								   Oid owner, DlockLockMode mode);
extern bool dlock_share_row_held(const DlockResource *res, text *holder,
								 Oid owner);
extern bool dlock_take_resource(const DlockResource *res, DlockLockMode mode);
extern DlockTake dlock_resource_take(const DlockResource *res,
									 DlockLockMode mode, text *share_holder,
									 Oid share_owner);
extern void dlock_resource_give_back(const DlockResource *res,
									 DlockLockMode mode, text *share_holder,
									 Oid share_owner);
extern void dlock_change_wait(const DlockResource *res);
extern bool dlock_maintenance_lock(const DlockResource *res);
extern void dlock_maintenance_unlock(const DlockResource *res);
extern void dlock_maintenance_unlock_all(void);
extern bool dlock_wait_for_maintenance(const DlockResource *res);
extern void dlock_set_locktag(LOCKTAG *tag, uint64 hash);
extern void dlock_resource_xact_register(const DlockResource *res,
										 int64 fence);
extern int64 dlock_resource_xact_fence(const DlockResource *res);

/* ---- args.c ---- */
extern text *dlock_check_resource(FunctionCallInfo fcinfo, int argno);
extern void dlock_check_resource_text(text *t);
extern text *dlock_check_holder(FunctionCallInfo fcinfo, int argno);
extern text *dlock_check_semaphore(FunctionCallInfo fcinfo, int argno);
extern text *dlock_check_election(FunctionCallInfo fcinfo, int argno);
extern text *dlock_check_candidate(FunctionCallInfo fcinfo, int argno);
extern Interval *dlock_check_lease(FunctionCallInfo fcinfo, int argno);
extern int64 dlock_check_wait_ms(FunctionCallInfo fcinfo, int argno);
extern void dlock_check_writable(const char *fname);
extern TimestampTz dlock_lease_expiry(TimestampTz now, const Interval *span);
extern Interval *dlock_check_lock_delay(FunctionCallInfo fcinfo, int argno);
extern Interval *dlock_lock_delay_of(FunctionCallInfo fcinfo, int argno,
									 Interval *delay, bool shared);
extern bool dlock_check_fair(FunctionCallInfo fcinfo, int argno);
extern bool dlock_check_shared(FunctionCallInfo fcinfo, int argno);
extern TimestampTz dlock_add_interval(TimestampTz ts, const Interval *span);
extern Interval *dlock_ms_interval(int64 ms);
extern Interval *dlock_check_ttl(FunctionCallInfo fcinfo, int argno);
extern bool dlock_session_arg(FunctionCallInfo fcinfo, int argno,
							  int64 *session);

/* ---- store.c (sessions, scans); rows.c, session_row.c, ending.c ---- */

/* One row of dlock.leases as read by rows.c. */
typedef struct DlockRow
{
	bool		exists;			/* false: no row for this resource */
	ItemPointerData tid;		/* the version read (rows.c's writes check it) */
	bool		held;			/* holder is not NULL */
	char	   *holder;			/* palloc'd in the caller's context */
	Oid			owner;
	int32		count;
	int64		fence;
	Interval	lease;
	TimestampTz expires_at;
	TimestampTz available_at;	/* lock-delay: not available before
								 * (dlock_row_read_delay) */
	int32		permits;		/* a semaphore's holding (0.5): its permits;
								 * 0 for a lock's holding */
	int32		max_permits;	/* ... and the semaphore's max_permits */
	int64		session;		/* its session (1.1), or 0: leased.  Then
								 * expires_at and lease are the session's */
} DlockRow;

/* A row of dlock.session_rows (1.1), as session_row.c reads it. */
typedef struct DlockSession
{
	int64		id;
	char	   *holder;			/* in the store session's caller context */
	Oid			owner;
	Interval	ttl;
	TimestampTz renewed_at;
	TimestampTz expires_at;
} DlockSession;

/* resource.c: share-row tags of the shared holdings read (DlockRow *) */
extern bool dlock_share_rows_held(const DlockResource *res, const List *shares,
								  const DlockRow *mine, TimestampTz now);

extern void dlock_store_begin(void);
/* table.c: the read locks of dlock's tables taken by one wait's attempt */
extern void dlock_table_locks_track(void);
extern void dlock_table_locks_untrack(bool release);
extern void dlock_table_locks_mark(void);
extern void dlock_table_locks_mark_wait(void);
extern void dlock_table_locks_forget(void);
extern void dlock_store_spi(void);
extern MemoryContext dlock_store_context(void);
extern bool dlock_store_active(void);
extern void dlock_store_end(void);
extern void dlock_row_read(const DlockResource *res, DlockRow *row);
extern void dlock_row_insert(const DlockResource *res, text *holder,
							 Oid owner, int64 fence, const Interval *lease,
							 TimestampTz now, TimestampTz expires,
							 int64 session);
extern bool dlock_session_read(int64 id, DlockSession *s);
extern bool dlock_sessions_installed(void);
extern bool dlock_session_lapsed(int64 id);
extern void dlock_row_renew(const DlockResource *res, const Interval *lease,
							TimestampTz now, TimestampTz expires);
extern void dlock_row_release(const DlockResource *res, int32 count_left,
							  TimestampTz now);
extern List *dlock_rows_of_holder(text *holder, Oid owner);
extern List *dlock_rows_expired(TimestampTz now, int limit);
extern List *dlock_rows_stale_free(TimestampTz cutoff, int limit);
extern TimestampTz dlock_min_expiry(void);
extern int64 dlock_row_reap(const DlockResource *res, TimestampTz now);
extern void dlock_row_read_delay(const DlockResource *res, DlockRow *row);
extern bool dlock_row_reenter(const DlockResource *res, const DlockRow *seen,
							  TimestampTz now, TimestampTz expires,
							  int32 *count, TimestampTz *new_expires);
extern bool dlock_row_take(const DlockResource *res, const DlockRow *seen,
						   text *holder, Oid owner, int64 fence,
						   const Interval *lease, TimestampTz now,
						   TimestampTz expires, int64 session);
extern bool dlock_row_tickets_below(const DlockResource *res, int64 below,
									TimestampTz now);
extern bool dlock_shares_installed(void);
extern List *dlock_row_read_shares(const DlockResource *res);
extern void dlock_share_insert(const DlockResource *res, text *holder,
							   Oid owner, int64 fence, const Interval *lease,
							   TimestampTz now, TimestampTz expires,
							   int64 session);
extern bool dlock_share_change(const DlockResource *res, const DlockRow *seen,
							   int32 count, const Interval *lease,
							   TimestampTz now, TimestampTz expires);
extern bool dlock_semaphores_installed(void);
extern void dlock_permits_insert(const DlockResource *res, text *holder,
								 Oid owner, int64 fence, const Interval *lease,
								 TimestampTz now, TimestampTz expires,
								 int32 permits, int32 max_permits,
								 int64 session);
extern bool dlock_permits_add(const DlockResource *res, const DlockRow *seen,
							  int32 count, int32 permits, TimestampTz now,
							  TimestampTz expires);
extern bool dlock_row_tickets_live(const DlockResource *res, TimestampTz now);
extern bool dlock_row_fast_release(const DlockResource *res, text *holder,
								   Oid owner, TimestampTz now, bool fence_given,
								   int64 fence, int32 *left, int64 *fence_out);
extern void dlock_row_delete_free(const DlockResource *res);
extern Oid	dlock_schema_oid(void);
extern uint64 dlock_store_exec(SPIPlanPtr *plan, const char *sql,
							   int nargs, const Oid *argtypes, Datum *values,
							   const char *nulls, bool read_only);
extern char *dlock_store_copy_text(Datum d);

/* ---- holding.c ---- */

/* The caller of a dlock function, captured before any identity switch. */
typedef struct DlockCaller
{
	Oid			role;			/* GetUserId() at the call */
	bool		is_super;
} DlockCaller;

/* What a resource's row is to a holder and caller at some moment. */
typedef enum DlockVerdict
{
	HOLDING_FREE,				/* no holder, or the lease expired (ended) */
	HOLDING_MINE,				/* this holder text and role, unexpired */
	HOLDING_OTHER_ROLE,			/* this holder text, another role's */
	HOLDING_OTHERS				/* another holder's */
} DlockVerdict;

extern DlockCaller dlock_caller(void);
extern bool dlock_lease_ended(const DlockRow *row, TimestampTz now);
extern bool dlock_lease_available(const DlockRow *row, TimestampTz now);
extern DlockVerdict dlock_holding_verdict(const DlockRow *row, text *holder,
										  const DlockCaller *caller,
										  TimestampTz now);
extern bool dlock_may_change(const DlockRow *row, text *holder,
							 const DlockCaller *caller, TimestampTz now,
							 const char *action);
extern void dlock_check_may_pin(const DlockRow *row, const DlockCaller *caller);

/* ---- queue.c ---- */

/* The head of a resource's fair queue, as seen by one caller. */
typedef struct DlockQueueHead
{
	bool		exists;			/* the queue has a live ticket */
	bool		mine;			/* the head is the caller's ticket */
	bool		client;			/* the head is a client-side ticket */
	TimestampTz expires_at;		/* client head: its ticket's end */
} DlockQueueHead;

/*
 * An attempt's place in a resource's fair queue, from its first refusal to
 * the end of its wait: the ticket lifecycle (queue.c).
 */
typedef struct DlockTicket
{
	text	   *holder;
	Oid			owner;			/* the holder's role */
	bool		fair;			/* a refusal takes or keeps a ticket */
	bool		in_server;		/* waiting in lock(): an in-server ticket */
	int64		number;			/* the in-server ticket held, or 0 */
	bool		adopted;		/* number is the holder's client ticket */
	bool		writer;			/* holds the "writer waits" tags */
	bool		upgrade;		/* ... and its "upgrading" tag */
} DlockTicket;

/* What an admitted attempt does to the queue (dlock_queue_settle). */
typedef struct DlockSettle
{
	bool		drop_client;	/* the holder's client ticket leaves too */
	const Interval *delay;		/* a new holding's lock-delay, or NULL */
	int64		fence;			/* ... and its fence */
	bool		wake_abort;		/* a new holding: its abort wakes the next */
	bool		wake_commit;	/* its commit wakes the next waiter */
} DlockSettle;

extern bool dlock_queue_installed(void);
extern bool dlock_queue_heads(const DlockResource *res, const DlockTicket *t);
extern bool dlock_queue_enter(const DlockResource *res, DlockTicket *t,
							  bool queue, TimestampTz now, bool writer,
							  bool upgrade);
extern void dlock_queue_settle(const DlockResource *res, DlockTicket *t,
							   const DlockSettle *s);
extern void dlock_queue_leave(const DlockResource *res, DlockTicket *t,
							  bool acquired);
extern bool dlock_ticket_row_lock(const DlockResource *res, text *holder,
								  Oid owner, bool wait);
extern void dlock_client_ticket_drop(const DlockResource *res, text *holder,
									 Oid owner);
extern void dlock_writer_wait(const DlockResource *res, text *holder,
							  Oid owner, bool upgrade, bool *registered);
extern void dlock_writer_wait_end(const DlockResource *res, text *holder,
								  Oid owner, bool upgrade, bool *registered);

/* ---- upkeep.c ---- */

extern void dlock_client_ticket_release(const DlockResource *res, text *holder,
										Oid owner);
extern void dlock_delay_on_end(const DlockResource *res, TimestampTz at,
							   TimestampTz expired_by);
extern int	dlock_queue_purge(TimestampTz now);
extern void dlock_queue_forget(const DlockResource *res);
extern bool dlock_delay_pending(const DlockResource *res, TimestampTz now);

/* ---- elect.c ---- */
extern bool dlock_values_installed(void);
extern bool dlock_value_read(const DlockResource *res, int64 fence,
							 char **holder, char **value, bool *election);
extern void dlock_values_forget(const DlockResource *res);

/* ---- fence.c ---- */
#define DLOCK_FENCE_SEQ_BITS	44
extern int64 dlock_next_fence(void);

/* ---- xact.c ---- */

/* How a transaction ended, for the hooks' end(). */
typedef enum DlockXactEnd
{
	DLOCK_XACT_COMMIT,
	DLOCK_XACT_ABORT,
	DLOCK_XACT_PREPARE
} DlockXactEnd;

/*
 * What an area does when a transaction ends (xact.c calls them; any may be
 * NULL).  pre_commit runs once the commit's level is set; it and
 * pre_prepare return whether they left work for the reaper (events in
 * dlock.outbox).
 */
typedef struct DlockXactHooks
{
	bool		(*pre_commit) (void);
	bool		(*pre_prepare) (void);
	void		(*end) (DlockXactEnd how);
	void		(*after_locks) (bool commit);
	void		(*subxact) (bool commit, SubTransactionId mySubid,
							SubTransactionId parentSubid);
} DlockXactHooks;

/* Each area's hooks (dlock.c adds them, in this order). */
extern const DlockXactHooks dlock_listeners_xact_hooks;
extern const DlockXactHooks dlock_waiters_xact_hooks;
extern const DlockXactHooks dlock_events_xact_hooks;
extern const DlockXactHooks dlock_store_xact_hooks;
extern const DlockXactHooks dlock_resource_xact_hooks;

extern void dlock_xact_init(void);
extern void dlock_xact_hooks_add(const DlockXactHooks *hooks);
extern bool dlock_xact_acquired(TimestampTz *min_expiry);
extern bool dlock_xact_outbox_events(void);
extern void dlock_note_acquisition(TimestampTz expires);
extern void dlock_note_release(void);
extern void dlock_note_xact_lock(void);
extern void dlock_own_writes_begin(void);
extern void dlock_own_writes_end(void);
extern List *dlock_subxact_items(List *items, size_t subxid_off, bool commit,
								 SubTransactionId mySubid, SubTransactionId parentSubid);

/* ---- admit.c ---- */

/* The kinds of request admit.c decides on (one admission function each). */
typedef enum DlockKind
{
	DLOCK_KIND_EXCLUSIVE,		/* a lease: try_lock, lock, campaign */
	DLOCK_KIND_SHARED,			/* a shared lease: shared => true (0.4) */
	DLOCK_KIND_XACT,			/* a transaction-scoped lock */
	DLOCK_KIND_SEMAPHORE		/* permits of a semaphore: try_acquire,
								 * acquire (0.5) */
} DlockKind;

/* Who asks, for what, and how (admit.c). */
typedef struct DlockRequest
{
	DlockKind	kind;
	text	   *holder;			/* NULL for DLOCK_KIND_XACT */
	const DlockCaller *caller;
	bool		fair;			/* a refusal takes or keeps a ticket */
	bool		in_server;		/* waiting in lock(): may adopt a client ticket */
	int64		ticket;			/* the in-server ticket it holds, or 0 */
	bool		campaign;		/* never re-enter: its own holding is had as is */
	int32		permits;		/* DLOCK_KIND_SEMAPHORE: permits asked for */
	int32		max_permits;	/* ... and the semaphore's max_permits */
	bool		waits;			/* lock_all(): an exclusive request that will
								 * wait (an upgrade looks for crossing ones,
								 * as in lock()) */
	int64		session;		/* in that session (1.1), or 0 */
} DlockRequest;

/* A resource's state, read once per attempt (dlock_admit_read). */
typedef struct DlockResourceState
{
	TimestampTz now;			/* the server clock at the read */
	bool		contended;		/* another transaction has the resource's lock */
	bool		queues;			/* the 0.2 SQL: fair queues and lock-delay */
	bool		own_xact_lock;	/* this transaction holds a transaction-scoped lock */
	bool		pinned_end;		/* shared request: the holding has ended, and
								 * another transaction pins it (admit.c) */
	DlockRow	row;			/* the holding (available_at: with know_queue) */
	DlockVerdict holding;		/* what it is to the request (holding.c) */
	/* The shared holdings (0.4 SQL), read with the holding. */
	List	   *shares;			/* DlockRow *, every row of dlock.shares and
								 * dlock.permits */
	DlockRow   *share_mine;		/* the request's holder's live one, or NULL */
	int			shares_others;	/* live shared holdings of other holders */
	TimestampTz shares_until;	/* when the last of those ends */
	bool		upgrade_crossed;	/* another of them waits to upgrade too */
	/* The live holdings of dlock.shares by kind (shares_others: of others). */
	int			shared_holdings;	/* live shared holdings, the request's too */
	int			permit_holdings;	/* live semaphore holdings (0.5) */
	int64		permits_held;	/* their permits, the request's holder's too */
	int32		permits_max;	/* their max_permits (0: none held) */
	TimestampTz permits_next_end;	/* when the first of them ends */
	/* The queue and lock-delay, read when the decision asks (know_queue). */
	bool		know_queue;
	bool		server_others;	/* other backends hold in-server tickets */
	bool		server_allows;	/* ... none of them ahead of the request's */
	TimestampTz server_until;	/* if not: when the one ahead lapses */
	bool		client_ahead;	/* a live client ticket below the request's */
	bool		writer_waiting; /* an exclusive request waits in lock() */
	/* The exact head of the queue, read when the decision asks (know_head). */
	bool		know_head;
	DlockQueueHead head;
} DlockResourceState;

/* Why a request was admitted or refused (dlock_admit_decide). */
typedef enum DlockReason
{
	ADMIT_NEW,					/* a new holding, with a new fence */
	ADMIT_REENTER,				/* the holder's own holding, count + 1 */
	ADMIT_AS_IS,				/* campaign: its own holding, unchanged */
	REFUSE_CONTENDED,			/* another transaction has the resource's lock */
	REFUSE_OWN_XACT_LOCK,		/* this transaction's transaction-scoped lock */
	REFUSE_HELD,				/* another holder's unexpired holding */
	REFUSE_DELAYED,				/* free, but under lock-delay */
	REFUSE_PINNED,				/* shared: an ended exclusive holding that
								 * another transaction pins */
	REFUSE_NOT_TURN,			/* free, but another ticket heads the queue,
								 * or (shared) a writer waits */
	REFUSE_SHARED,				/* exclusive: other holders share it */
	REFUSE_DEADLOCK,			/* an upgrade waits for another upgrade */
	REFUSE_NO_PERMITS,			/* semaphore: not enough permits free */
	REFUSE_OTHER_KIND,			/* an error: the name is held as a lock and
								 * the request is for permits, or the
								 * other way round */
	REFUSE_MAX_PERMITS,			/* an error: permits are held under another
								 * max_permits */
	NEED_QUEUE,					/* undecided: read the queue and lock-delay */
	NEED_HEAD					/* undecided: read the exact head */
} DlockReason;

/* The verdict: pure data, nothing done yet. */
typedef struct DlockAdmission
{
	DlockReason reason;
	bool		admit;
	TimestampTz retry_at;		/* refused: look again then (DT_NOEND: when woken) */
	bool		queue;			/* refused: the request keeps a place in the queue */
} DlockAdmission;

extern void dlock_admit_read(const DlockResource *res, const DlockRequest *req,
							 bool locked, DlockResourceState *st);
extern DlockAdmission dlock_admit_decide(const DlockRequest *req,
										 const DlockResourceState *st);
extern DlockAdmission dlock_admit(const DlockResource *res,
								  const DlockRequest *req, bool locked,
								  DlockResourceState *st);
extern void dlock_admit_raise(const DlockResource *res,
							  const DlockRequest *req,
							  const DlockResourceState *st,
							  DlockAdmission v);

/* queue.c: the queue and lock-delay as the decision asks for them */
extern bool dlock_upgrading_any(const DlockResource *res, const List *shares,
								const DlockRow *mine, TimestampTz now);
extern void dlock_queue_view(const DlockResource *res, const DlockRequest *req,
							 bool head, DlockResourceState *st);

/* ---- acquire.c ---- */

/* What one attempt at a resource came to (acquire.c). */
typedef enum DlockAttempt
{
	ATTEMPT_ACQUIRED,			/* *fence set; the resource's lock kept */
	ATTEMPT_BUSY,				/* held by another until *busy_until */
	ATTEMPT_BUSY_SHARED,		/* ... an exclusive request held off only by
								 * other holders' shared holdings that this
								 * transaction did not touch: it may wait
								 * while it holds the lock in SHARE mode */
	ATTEMPT_BUSY_PINNED,		/* ... a shared request held off by another
								 * transaction's pin of an ended exclusive
								 * holding: wait for the pin */
	ATTEMPT_DELAYED,			/* free, but under lock-delay until *busy_until */
	ATTEMPT_CONTENDED,			/* another transaction has the resource's lock:
								 * wait for it in CHANGE mode */
	ATTEMPT_CONTENDED_SHARE,	/* ... the attempt's mode is SHARE: wait in it */
	ATTEMPT_CONTENDED_POLL		/* held off by something else (a share-row
								 * tag): poll */
} DlockAttempt;

typedef DlockAttempt (*DlockAttemptFn) (const DlockResource *res, void *arg,
										int64 *fence, TimestampTz *busy_until);

typedef void (*DlockLeaveFn) (const DlockResource *res, void *arg,
							 bool acquired);

/* admit.c: a refusal as the wait loop reads it */
extern DlockAttempt dlock_attempt_refused(DlockReason reason);

/* wait.c: the wait loop */
extern int64 dlock_wait_loop(const DlockResource *res, text *holder,
							 int64 wait_ms, DlockAttemptFn attempt,
							 DlockLeaveFn leave, void *arg);
/* acquire.c: lease attempts */
extern bool dlock_lease_write(const DlockResource *res, text *holder,
							  const DlockCaller *caller, const Interval *lease,
							  int64 session,
							  const Interval *lock_delay, bool shared,
							  const DlockResourceState *st, DlockReason reason,
							  int64 *drawn, int64 *fence);
extern int64 dlock_acquire(const DlockResource *res, text *holder,
						   const DlockCaller *caller, const Interval *lease,
						   int64 session, int64 wait_ms, bool fair,
						   const Interval *lock_delay, bool shared);
extern int64 dlock_acquire_permits(const DlockResource *res, text *holder,
								   const DlockCaller *caller,
								   const Interval *lease, int64 session,
								   int64 wait_ms, bool fair, int32 permits,
								   int32 max_permits);
extern int64 dlock_campaign_acquire(const DlockResource *res, text *candidate,
									const DlockCaller *caller,
									const Interval *lease, int64 session,
									int64 wait_ms,
									const Interval *lock_delay, bool *already);

/* ---- session.c (1.1) ---- */
extern text *dlock_session_use(int64 session, text *holder,
							   const Interval *lease, const DlockCaller *caller,
							   bool waits, Interval **ttl);
extern void dlock_session_hold(int64 session);
extern TimestampTz dlock_session_poll(int64 session, TimestampTz now);
extern Datum dlock_session_keepalive(int64 session, const DlockCaller *caller,
									 bool *isnull);
extern int	dlock_sessions_reap(void);
extern List *dlock_session_candidates(TimestampTz now, int limit);
extern TimestampTz dlock_sessions_min_expiry(void);
extern int64 dlock_sessions_refresh(TimestampTz promoted_at);
extern int64 dlock_session_call(FunctionCallInfo fcinfo, int argno,
								int lease_argno, const DlockCaller *caller,
								bool waits, text **holder, Interval **lease);
extern text *dlock_session_holder_arg(FunctionCallInfo fcinfo, int argno,
									  int session_argno,
									  text *(*check) (FunctionCallInfo, int));

/* ---- sends.c ---- */
/* An event waiting for the end of its transaction. */
typedef struct DlockEvent
{
	char		channel[64];
	char	   *payload;
	uint64		hash;			/* the resource's, for the outbox's wakeup */
	SubTransactionId subxid;	/* (sub)transaction that queued it */
} DlockEvent;

/* A wakeup waiting for the end of its transaction. */
typedef struct DlockWake
{
	uint64		hash;
	bool		abort_only;		/* an acquisition: wake only if it aborts */
	int32		n;				/* how many waiters to wake */
} DlockWake;

extern const DlockXactHooks dlock_sends_xact_hooks;
extern void dlock_notify(const DlockResource *res, const char *event,
						 int64 fence);
extern void dlock_notify_holding(const DlockResource *res, const char *event,
								 int64 fence, const char *candidate,
								 const char *value);
extern List *dlock_sends_events(void);
extern void dlock_wake_after_commit(uint64 hash);
extern void dlock_wake_released(uint64 hash, const DlockRow *holding,
								bool last);
extern void dlock_wake_after_abort(uint64 hash);
extern const DlockWake *dlock_sends_wakes(int *n);

/* ---- events.c ---- */
extern int	dlock_outbox_deliver(void);

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

/* ---- listeners.c ---- */
extern void dlock_listeners_init(void);
extern Size dlock_listeners_shmem_size(void);
extern void dlock_listeners_shmem_startup(void);
extern void dlock_listeners_decide(void);
extern bool dlock_listened(const char *channel);
extern bool dlock_listening(const char *channel);
extern void dlock_count(DlockStat stat);
extern void dlock_wait_begin(const DlockResource *res, text *holder,
							 TimestampTz deadline);
extern void dlock_wait_move(const DlockResource *res, text *holder);
extern void dlock_wait_end(bool acquired);
extern void dlock_wait_look(void);
extern void dlock_wait_sleep(long timeout_ms);
extern void dlock_wait_set_ticket(int64 ticket, Oid owner);
extern void dlock_expiry_hint(TimestampTz expires);
extern bool dlock_reap_due(TimestampTz now);
extern void dlock_reap_started(void);

/* ---- reap.c ---- */
extern int	dlock_reap_batch_size(void);
extern List *dlock_reap_candidates(TimestampTz now, int limit);
extern List *dlock_stale_candidates(TimestampTz now, int limit);
extern int	dlock_reap_list(List *resources, int from, int to, TimestampTz now);
extern void dlock_purge_list(List *resources, int from, int to);

/* ---- promote.c ---- */
extern bool dlock_promotion_step(void);

/* ---- compact.c ---- */
extern int	dlock_compact_tables(void);

/* ---- worker.c ---- */
extern void dlock_worker_init(void);
extern int64 dlock_run_round(void);

#endif							/* DLOCK_H */
