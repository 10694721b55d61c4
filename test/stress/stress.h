/*
 * stress.h: what the files of dlock_stress share.
 *
 *   dlock_stress.c  options, the lock-mode workers (plain and --fair), the
 *                   parent's chaos loop, the checks of the lock mode
 *   stress_elect.c  --elect: workers campaign for an election and write
 *                   fenced by their term; the election checks
 *   stress_util.c   clocks, durations, libpq helpers, the slot state
 *                   handshake, the fenced write, PASS/FAIL lines
 *
 * Shared state: one anonymous MAP_SHARED mapping (Shared) made by the
 * parent before it forks the workers.  Slot counters are bumped with
 * __atomic builtins by the slot's worker; a slot's state is the chaos
 * handshake between the worker and the parent, changed only with
 * __atomic loads, stores and compare-and-swap (see wait_in_window and
 * claim_sleeping).  The option globals are set before any fork and read
 * only afterwards.
 */
#ifndef STRESS_H
#define STRESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "libpq-fe.h"

/* Where a worker is in its loop; the chaos handshake works on these. */
enum
{
	ST_IDLE = 0,				/* not holding, or not between read and write */
	ST_SLEEPING,				/* holding: read done, write not started */
	ST_WRITING,					/* claimed its own window: writing now */
	ST_DOOMED,					/* claimed by the parent: SIGKILL is coming */
	ST_PAUSING,					/* claimed by the parent: SIGSTOP'ed */
	ST_RESUMED,					/* SIGCONT'ed by the parent: go on writing */
	ST_DONE						/* finished its work */
};

/* Worker exit codes the parent tells apart. */
#define EXIT_WORKER_ERROR	3
#define EXIT_WORKER_TIMEOUT	4

/* One worker slot in shared memory; counters survive a killed worker. */
typedef struct Slot
{
	int			state;			/* ST_*, changed with __atomic builtins */
	pid_t		pid;
	int			generation;		/* bumped each time the slot is refilled */
	bool		done;			/* exited normally: work finished */
	long		committed;		/* increments whose COMMIT succeeded */
	long		fenced;			/* writes rejected by assert_fence (55P03) */
	long		fenced_after_pause; /* of which after a chaos pause */
	long		stale_writes;	/* writes accepted after a pause: a bug */
	long		lock_timeouts;	/* dlock.lock / campaign returned NULL */
	long		lost_unlocks;	/* unlock (resign) returned NULL (false) after a good write */
	long		errors;			/* unexpected errors */
	/* --elect only */
	long		terms;			/* elections won */
	long		resigns;		/* resign() returned true */
	long		lost_renewals;	/* renew() returned NULL while leading */
	long		old_term_probes;	/* writes tried with a term already resigned */
	long		old_term_accepted;	/* of which committed: a bug */
} Slot;

/* One acquisition, for the fair-order check. */
typedef struct Acq
{
	long long	fence;
	long long	ticket;			/* the ticket seen while waiting; 0: none seen */
	int			slotno;
} Acq;

/* Everything the processes share (one anonymous shared mapping). */
typedef struct Shared
{
	int			chaos_wanted;	/* parent wants to claim a window soon */
	long		committed_total;
	long		nacq;			/* acquisitions logged (may exceed acq_cap) */
	long		acq_cap;
	Acq		   *acq;			/* acq_cap entries, after the slots */
	Slot		slots[];		/* one per client */
} Shared;

/* Options and process-wide state (dlock_stress.c). */
extern const char *conninfo;
extern int	nclients;
extern long target;
extern long lease_ms;
extern long wait_ms;
extern long sleep_ms;
extern const char *resource;
extern double max_seconds;
extern bool verbose;
extern bool no_fence;
extern Shared *shared;
extern double start_time;

/* stress_util.c */
extern double now_s(void);
extern void sleep_ms_now(long ms);
extern long parse_duration(const char *s);
extern PGconn *connect_or_die(int code);
extern PGresult *exec_ok(PGconn *conn, const char *sql, int nparams,
						 const char *const *params, char *sqlstate);
extern void command_or_die(PGconn *conn, const char *sql);
extern void bump(long *counter);
extern int	get_state(Slot *slot);
extern void set_state(Slot *slot, int st);
extern bool cas_state(Slot *slot, int from, int to);
extern int	write_increment(PGconn *conn, const char *fence, long value,
							const char *holder);
extern bool wait_in_window(Slot *slot);
extern bool check(bool ok, const char *fmt,...) __attribute__((format(printf, 2, 3)));
extern const char *row_label(long i);

/* stress_elect.c */
extern void elect_worker_main(Slot *slot, int slotno) __attribute__((noreturn));
extern int	verify_elect(void);

#endif							/* STRESS_H */
