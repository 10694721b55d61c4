/*
 * dlock.h - shared declarations of the dlock command-line client.
 *
 * The client is split by job: main.c parses the command line and
 * dispatches, util.c holds clocks, durations, holders, logging and the
 * signal self-pipe, db.c wraps libpq with deadlines, acquire.c takes a
 * lock (waiting by LISTEN/NOTIFY or by polling, and resolving commits of
 * unknown outcome), run.c runs a COMMAND under a lease through the
 * watchdog process of watchdog.c, over a backend (RunBackend): pg_run.c
 * for PostgreSQL, my_lock.c for MySQL/MariaDB (my.c: its connection and
 * one-shot subcommands), and cmds.c holds the small one-shot subcommands.
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>

#ifndef DLOCK_VERSION
#define DLOCK_VERSION "unknown"
#endif

/* Exit codes (documented in --help and dlock(1)). */
#define EXIT_USAGE        64   /* EX_USAGE: bad command line */
#define EXIT_CONN         69   /* EX_UNAVAILABLE: connection or server error */
#define EXIT_NOT_ACQUIRED 75   /* EX_TEMPFAIL: not acquired in time / busy */
#define EXIT_LEASE_LOST   76   /* lease lost (or not held) */

/*
 * run: at most this many resources taken at once (lock_all); their fences
 * as text, space-separated, fit FENCE_TEXT_LEN.
 */
#define MAX_RUN_RESOURCES 32
#define FENCE_TEXT_LEN (MAX_RUN_RESOURCES * 21 + 32)

/*
 * Several resources held together (Lock.nresources > 1): renew ($1 the
 * text[] literal, $2 holder, $3 lease, $4 the fences) and unlock ($3 the
 * fences) each of them in one statement; NULL if any of them is no longer
 * held (then the others are still renewed or released).
 */
#define LOCK_ALL_RENEW \
	"SELECT CASE WHEN bool_and(e IS NOT NULL) THEN min(e) END" \
	" FROM unnest($1::text[], string_to_array($4, ' ')::bigint[]) AS u(r, f)," \
	"  LATERAL dlock.renew(u.r, $2, $3::interval, u.f) AS e"
#define LOCK_ALL_UNLOCK \
	"SELECT CASE WHEN bool_and(x IS NOT NULL) THEN max(x) END" \
	" FROM unnest($1::text[], string_to_array($3, ' ')::bigint[]) AS u(r, f)," \
	"  LATERAL dlock.unlock(u.r, $2, u.f) AS x"

/* A deadline meaning "never". */
#define NEVER INT64_MAX

/* Everything the command line can say. */
typedef struct Options
{
	const char *subcommand;		/* "run", "try", ... */
	const char *conninfo;		/* -d; NULL: PG* environment */
	const char *holder;			/* --holder; NULL: generated */
	int64_t		lease_ms;		/* --lease; 0: not given */
	int64_t		wait_ms;		/* --wait; -1: not given (forever) */
	int64_t		linger_ms;		/* --linger; 0: none */
	int64_t		grace_ms;		/* --grace; default 5 s */
	const char *fence;			/* --fence as validated digits; NULL: none */
	bool		poll;			/* --poll: never LISTEN */
	bool		fair;			/* --fair: wait in the resource's fair queue */
	int64_t		lock_delay_ms;	/* --lock-delay; -1: not given (server default) */
	bool		shared;			/* --shared: a shared (read) lock (dlock 0.4) */
	int32_t		max_permits;	/* --semaphore N: a semaphore's permits (0.5); 0: a lock */
	int32_t		permits;		/* --permits K (default 1) */
	bool		verbose;		/* -v */
	int			npos;			/* positional arguments before "--" */
	char	  **pos;
	bool		dashdash;		/* "--" was present */
	char	  **command;		/* argv after "--" (NULL-terminated) */
} Options;

/* Outcome of waiting on the database socket or a query. */
typedef enum
{
	DB_OK,						/* done / ready */
	DB_TIMEOUT,					/* the deadline passed */
	DB_SIGNAL,					/* a signal arrived and the caller asked to be told */
	DB_LOST,					/* the connection is gone (or could not be made) */
	DB_BUSY,					/* db_collect: the result is not complete yet */
} DbStatus;

/* A lock being acquired or held by this process. */
typedef struct Lock
{
	const Options *opt;
	const char *resource;		/* several (run R1 R2 ...): space-separated */
	const char *param;			/* the resource as the SQL takes it: resource,
								 * or several as a text[] literal */
	int			nresources;		/* > 1: several, taken together (lock_all) */
	char	  **resources;		/* ... the names, as given */
	char		holder[300];
	char		lease_text[48];	/* "N milliseconds" */
	int64_t		lease_ms;
	PGconn	   *conn;			/* NULL while disconnected */
	bool		listening;		/* LISTEN is active on conn */
	bool		polling;		/* LISTEN unusable: poll */
	char		fence[FENCE_TEXT_LEN];	/* fence of the holding, as text; of
										 * several: space-separated, in order */
	int64_t		deadline;		/* monotonic ms until which the lease surely lasts */
	char		lock_delay_text[48];	/* "N milliseconds"; empty: server default */
	bool		fair;			/* attempts take a ticket (and commit it) */
	bool		shared;			/* try_lock(..., shared => true) */
	char		max_permits_text[16];	/* a semaphore's: try_acquire; empty: a lock */
	char		permits_text[16];
	int64_t		queue_ttl_ms;	/* the server's dlock.queue_ttl; 0: not known yet */
	bool		ticketed;		/* a failed fair attempt committed a ticket */
	bool		can_withdraw;	/* the server has dlock.withdraw (0.3 SQL) */
	bool		election;		/* "dlock elect": campaign and resign */
	const char *value;			/* elect: the candidate's value */
	bool		dup_said;		/* elect: said that our candidate already leads */
} Lock;

/* util.c */
extern const char *progname;
int64_t		now_ms(void);
bool		parse_duration(const char *s, int64_t *ms);
void		format_interval(char *buf, size_t len, int64_t ms);
void		make_holder(char *buf, size_t len);
void		logmsg(const char *fmt,...) __attribute__((format(printf, 1, 2)));
void		vlog(const Options *o, const char *fmt,...) __attribute__((format(printf, 2, 3)));
int			usage_error(const char *fmt,...) __attribute__((format(printf, 1, 2)));
void		signals_install(void);
int			signals_fd(void);
void		signals_drain(void);
void		signals_block_term(sigset_t *old);
void		signals_restore(const sigset_t *old);
void		signals_default_in_child(void);
void		signals_uninstall(void);
int			signals_term_sig(void);
int			signals_term_count(void);
bool		signals_take_child(void);
int64_t		jitter(int64_t ms);
int			exit_status(int st);

/* db.c */
PGconn	   *db_connect(const Options *o, int64_t deadline, bool interruptible, bool quiet);
DbStatus	db_sleep(int64_t deadline);
DbStatus	db_wait(PGconn *conn, int64_t deadline, bool interruptible);
bool		db_send(PGconn *conn, const char *sql, int n, const char *const *values);
DbStatus	db_collect(PGconn *conn, PGresult **res);
DbStatus	db_exec(PGconn **connp, const char *sql, int n, const char *const *values,
					int64_t deadline, bool interruptible, PGresult **res);
bool		db_result_ok(PGresult *res);
bool		db_error_is_connection(PGresult *res);
bool		db_error_is_retryable(PGresult *res);
void		db_report(const char *what, PGconn *conn, PGresult *res);
char	   *db_listen(PGconn **connp, const char *resource, int64_t deadline);
void		db_drop(PGconn **connp);
bool		db_pooled(PGconn **connp);
void		db_drain_notifies(PGconn *conn, const char *channel, bool print);
const char *db_lost_reason(void);
bool		db_refused(void);
bool		db_login_refused(void);

/* acquire.c */
typedef enum
{
	ACQ_OK,						/* held: lock->fence, lock->deadline */
	ACQ_TIMEOUT,				/* not acquired within the wait */
	ACQ_SIGNAL,					/* a terminating signal arrived */
	ACQ_CONN,					/* connection failed */
	ACQ_ERROR,					/* the server said no (reported) */
} AcqStatus;

void		lock_init(Lock *lk, const Options *o, const char *resource, int64_t lease_ms);
bool		lock_set_resources(Lock *lk, int n, char **names);
AcqStatus	acquire(Lock *lk, int64_t wait_ms);
bool		lock_reconnect(Lock *lk, int64_t deadline, bool interruptible);
int			release(Lock *lk, int64_t linger_ms, int64_t deadline);

/*
 * run.c: the one supervisor of "dlock run" and "dlock elect", over a
 * backend that takes, renews and gives back the lock on one kind of
 * server.  A renewal's verdict:
 */
typedef enum
{
	RN_WAIT,					/* sent: the answer comes on the backend's socket */
	RN_OK,						/* renewed: the lease lasts from when it was sent */
	RN_GONE,					/* the server says it is no longer held */
	RN_RETRY,					/* no verdict: try again at *retry_at */
} Renewal;

typedef struct RunBackend
{
	bool		several;		/* several RESOURCEs at once (lock_all) */
	bool		kinds;			/* --fair, --lock-delay, --shared, --semaphore */
	bool		elections;		/* dlock elect */
	/*
	 * connect (by deadline; NEVER: the usual timeout) and fill lk (lease,
	 * resources): -1, or the exit code
	 */
	int			(*open) (Lock *lk, Options *o, bool election, int64_t deadline);
	/* the last failed open was refused for good (a login, a bad string) */
	bool		(*refused) (void);
	const char *(*why) (void);	/* the last failed open's message */
	AcqStatus	(*acquire) (Lock *lk, int64_t wait_ms);
	/* start a renewal; *sent_at when it went; synchronous: the verdict */
	Renewal		(*renew) (Lock *lk, int64_t *sent_at, int64_t *retry_at);
	/* the socket to poll (with *events) while COMMAND runs; -1: none */
	int			(*socket) (Lock *lk, bool inflight, short *events);
	/* the socket is ready: read it; inflight: the verdict or RN_WAIT */
	Renewal		(*collect) (Lock *lk, bool inflight, int64_t *retry_at);
	/* before the release: the verdict of the renewal in flight, by until */
	Renewal		(*finish) (Lock *lk, int64_t until, int64_t *retry_at);
	/* 0 done, 1 not held, -1 failed (as release() of acquire.c) */
	int			(*release) (Lock *lk, int64_t linger_ms, int64_t deadline);
	void		(*tidy) (Lock *lk);	/* lease lost: unlock (resign), best effort */
	void		(*drop) (Lock *lk); /* close the connection */
} RunBackend;

int			run_on(Options *o, const RunBackend *be);
int			cmd_run(Options *o);
int			cmd_elect(Options *o);

/* pg_run.c: the PostgreSQL backend of the supervisor */
extern const RunBackend pg_backend;

/* watchdog.c: messages on the socket between the client and the watchdog */
typedef enum
{
	/* client -> watchdog */
	WD_DEADLINE = 1,			/* value: new deadline (now_ms clock) */
	WD_SIGNAL,					/* arg: forward this signal to COMMAND's group */
	WD_LOST,					/* the lease is lost: stop COMMAND's tree now */
	/* watchdog -> client */
	WD_STARTED,					/* arg: COMMAND's pid */
	WD_EXPIRED,					/* the deadline passed: the tree is being stopped */
	WD_EXITED,					/* value: COMMAND's wait status; its tree is gone */
	WD_FAILED,					/* arg: errno; COMMAND was not started */
} WdType;

typedef struct WdMsg
{
	int32_t		type;
	int32_t		arg;
	int64_t		value;
} WdMsg;

/*
 * The one message that starts COMMAND (client -> watchdog, before any
 * other): the holding's fence, the deadline, whether COMMAND gets the
 * terminal.  A watchdog spawned ahead (watchdog_spawn) waits for it.
 */
typedef struct WdGo
{
	int32_t		type;			/* WD_GO */
	int32_t		tty;
	int64_t		deadline;
	char		fence[FENCE_TEXT_LEN];
} WdGo;

#define WD_GO 100

int64_t		watchdog_margin(int64_t lease_ms);
pid_t		watchdog_spawn(const Lock *lk, char **command, int *fd);
bool		watchdog_go(int fd, const Lock *lk, bool tty, int64_t deadline);
pid_t		watchdog_start(const Lock *lk, char **command, bool tty, int64_t deadline, int *fd);
bool		watchdog_send(int fd, int type, int arg, int64_t value);
int			watchdog_recv(int fd, WdMsg *m, bool past_reset);

/* my.c: the MySQL/MariaDB backend, for -d mysql://... */
bool		my_is_url(const char *conninfo);
int			my_command(Options *o);
int			my_version(const Options *o);

/* cmds.c */
int			cmd_try(Options *o, bool wait);
int			cmd_unlock(Options *o);
int			cmd_renew(Options *o);
int			cmd_status(Options *o);
int			cmd_watch(Options *o);
int			cmd_observe(Options *o);
int			cmd_reap(Options *o);
int			cmd_version(Options *o);

#endif							/* DLOCK_CLI_H */
