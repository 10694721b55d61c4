/*
 * bench.h: declarations shared by the files of dlock_bench, the benchmark
 * client that bench/run.sh runs against a throwaway cluster.
 *
 *   util.c     clocks, samples and percentiles, libpq helpers, progress
 *   harness.c  the timed multi-client loop (warm-up, measure, stop)
 *   pairs.c    uncontended lock+unlock pairs: dlock, advisory, naive, Redis
 *   redis.c    a minimal RESP client (no hiredis needed)
 *   contend.c  one hot resource, release->waiter latency, expiry takeover
 *   idle.c     server CPU of idle waiters
 *   scale.c    pair rate with many held leases, reaping 100k expired ones
 *   elect.c    leader election: resign and kill handoffs, dlock elect
 *              against etcdctl elect
 *   shared.c   shared-lock pairs of readers of one resource against
 *              pg_advisory_lock_shared
 *   sessions.c sessions: keepalive against renewals, session pairs, expiry
 *   report.c   CSV files and results.md with the goals
 *   main.c     options and the order of the measurements
 */
#ifndef BENCH_H
#define BENCH_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "libpq-fe.h"

/* ---- options (main.c) ---- */
typedef struct Options
{
	const char *conninfo;		/* libpq connection string */
	const char *outdir;			/* where CSV files and results.md go */
	int			redis_port;		/* 0: no Redis */
	bool		quick;			/* smoke run: a few seconds in all */
	double		warmup_s;		/* warm-up before each timed window */
	double		measure_s;		/* length of each timed window */
	int			rw_samples;		/* release->waiter samples per method */
	int			takeover_runs;	/* expiry takeover runs */
	double		idle_s;			/* idle waiter observation time */
	int			idle_waiters;	/* number of idle waiters */
	long		scale_small;	/* held leases, small table */
	long		scale_large;	/* held leases, large table */
	long		reap_count;		/* expired leases to reap */
	int			elect_handoffs; /* CLI handoffs per tool and queue length */
	const char *dlock_cli;		/* the dlock CLI for "dlock elect"; NULL: skip */
	const char *etcd_endpoint;	/* host:port of etcd; NULL: skip etcdctl */
	const char *only;			/* --only: the measurements run; NULL: all */
	bool		portable;		/* --portable: the portable edition's database */
} Options;

extern Options opt;

/* ---- util.c ---- */
typedef struct Samples
{
	double	   *v;
	size_t		n;
	size_t		cap;
	bool		sorted;
} Samples;

extern double now_s(void);
extern void sleep_s(double s);
extern void spin_s(double s);
extern void progress(const char *fmt,...) __attribute__((format(printf, 1, 2)));
extern void die(const char *fmt,...) __attribute__((format(printf, 1, 2), noreturn));

extern double proc_cpu_ns(int pid);
extern int	proc_ppid(int pid);

/* On-CPU ns of a cluster's processes (the postmaster and its children). */
#define CLUSTER_CPU_MAX 512
typedef struct ClusterCpu
{
	int			n;
	int			pid[CLUSTER_CPU_MAX];
	double		ns[CLUSTER_CPU_MAX];
} ClusterCpu;
extern void cluster_cpu_snap(int pm, ClusterCpu *s);
extern double cluster_cpu_delta(const ClusterCpu *a, const ClusterCpu *b);
extern void samples_add(Samples *s, double v);
extern void samples_merge(Samples *into, const Samples *from);
extern double samples_pct(Samples *s, double p);
extern double samples_mean(const Samples *s);
extern double samples_max(const Samples *s);
extern void samples_free(Samples *s);

extern PGconn *db_connect(void);
extern void db_exec(PGconn *conn, const char *sql);
extern char *db_value(PGconn *conn, const char *sql);
extern long db_long(PGconn *conn, const char *sql);
extern void db_prepare(PGconn *conn, const char *name, const char *sql, int nparams);
extern PGresult *db_run(PGconn *conn, const char *name, int nparams,
						const char *const *params);
extern void db_run_expect(PGconn *conn, const char *name, int nparams,
						  const char *const *params, const char *expect);

/* ---- harness.c ---- */
struct Client;
typedef void (*client_setup_fn) (struct Client *c);
typedef void (*client_op_fn) (struct Client *c);
typedef void (*client_teardown_fn) (struct Client *c);

/* One client thread of a timed run. */
typedef struct Client
{
	int			id;
	int			nclients;
	void	   *arg;			/* the run's shared argument */
	void	   *priv;			/* the client's own data (freed by the harness) */
	PGconn	   *conn;
	int			fd;				/* Redis socket, -1 if none */
	long		ops;			/* operations completed in the window */
	long		all_ops;		/* operations completed, warm-up included */
	Samples		lat;			/* latency of each op in the window (us) */
	Samples		wait;			/* op-specific second measure (us) */
	bool		measuring;		/* set by the op: this op counts */
	double		extra;			/* op-specific figure */
} Client;

typedef struct RunSpec
{
	const char *label;
	int			nclients;
	void	   *arg;
	client_setup_fn setup;
	client_op_fn op;
	client_teardown_fn teardown;
	double		warmup_s;
	double		measure_s;
} RunSpec;

typedef struct RunResult
{
	double		seconds;		/* length of the timed window */
	long		ops;			/* operations in it */
	long		all_ops;		/* operations in the whole run */
	double		rate;			/* ops / seconds */
	Samples		lat;			/* all clients' op latencies (us) */
	Samples		wait;			/* all clients' second measure (us) */
	long		max_ops;		/* busiest client's ops */
	Client	   *clients;		/* per-client figures (freed by run_free) */
	int			nclients;
} RunResult;

extern bool harness_measuring(void);
extern bool harness_stopping(void);
extern void harness_run(const RunSpec *spec, RunResult *res);
extern void run_free(RunResult *res);

/* ---- pairs.c ---- */
typedef enum Method
{
	M_DLOCK,
	M_ADVISORY,
	M_NAIVE,
	M_REDIS,
	NUM_METHODS
} Method;

extern const char *method_name[NUM_METHODS];
extern void pairs_setup_schema(PGconn *conn);
extern void pairs_run(Method m, int nclients, double warmup, double measure,
					  RunResult *res);
extern void bench_pairs(void);

/* ---- redis.c ---- */
extern int redis_connect(int port);
extern char *redis_cmd(int fd, int argc, const char *const *argv);
extern void redis_close(int fd);

/* ---- contend.c ---- */
extern void bench_hot(void);
extern void bench_release(void);
extern void bench_takeover(void);

/* ---- idle.c ---- */
extern void bench_idle(void);

/* ---- scale.c ---- */
extern void bench_scale(void);

/* ---- elect.c ---- */
extern void bench_elect(void);

/* ---- shared.c ---- */
extern void bench_shared(void);
extern void write_shared(FILE *f);

/* ---- sessions.c ---- */
extern void bench_sessions(void);
extern void write_sessions(FILE *f);

/* ---- report.c: the figures every part fills in ---- */
#define NCLIENT_COUNTS 3
extern const int client_counts[NCLIENT_COUNTS];

#define NHOT 2
extern const int hot_counts[NHOT];

typedef struct Figures
{
	/* 1: pairs/s and pair latency p50/p99 (us) by method and client count */
	bool		pairs_done[NUM_METHODS][NCLIENT_COUNTS];
	double		pairs_rate[NUM_METHODS][NCLIENT_COUNTS];
	double		pairs_p50[NUM_METHODS][NCLIENT_COUNTS];
	double		pairs_p99[NUM_METHODS][NCLIENT_COUNTS];
	double		pairs_wal_syncs[NUM_METHODS][NCLIENT_COUNTS];	/* per pair */
	double		pairs_wal_bytes[NUM_METHODS][NCLIENT_COUNTS];	/* per pair */

	/* 2: hot resource, [0] dlock [1] advisory [2] dlock fair, by contender count */
	bool		hot_done[3][NHOT];
	double		hot_rate[3][NHOT];	/* acquisitions/s */
	double		hot_switch[3][NHOT];	/* share that went to another client */
	double		hot_p50[3][NHOT];
	double		hot_p99[3][NHOT];
	double		hot_wait_max_mean[3][NHOT];
	double		hot_acq_max_mean[3][NHOT];

	/* 3: release -> waiter (us), [0] dlock [1] advisory */
	bool		rw_done[2];
	double		rw_p50[2];
	double		rw_p99[2];

	/* 4: takeover lateness after expiry (ms) */
	bool		tk_done;
	double		tk_p50;
	double		tk_p99;
	double		tk_max;
	int			tk_runs;

	/* 5: idle waiters */
	bool		idle_done;
	int			idle_n;
	double		idle_seconds;
	/* [0] dlock [1] advisory: % of one core, all waiters together */
	double		idle_pct[2];	/* from utime + stime */
	double		idle_pct_ns[2]; /* from schedstat */
	double		idle_wakeups[2];	/* per waiter per second */

	/* 6: scale */
	bool		scale_done;
	long		scale_small_n;
	long		scale_large_n;
	double		scale_small_rate;
	double		scale_large_rate;
	double		reaper_cpu_small;	/* reaper's % of a core, small table */
	double		reaper_cpu_large;	/* the same, large table */
	double		fill_s;			/* time to fill the large table */
	long		reap_n;
	double		reap_call_s;	/* reap() loop */
	int			reap_calls;
	double		reap_call_acq_p99;	/* acquirers' try_lock p99 (us) */
	double		reap_call_pair_p99;
	double		reap_worker_s;	/* background worker */
	double		reap_worker_acq_p99;
	double		reap_worker_pair_p99;
	double		base_acq_p99;	/* same acquirers, nothing reaping */
	double		base_pair_p99;

	/* 7: leader election; a: resign -> next leader (us) */
	bool		el_resign_done;
	int			el_resign_n;
	double		el_resign_p50;
	double		el_resign_p99;
	double		el_resign_max;
	/* b: killed leader (500 ms lease): ms after the lease end, ms after the kill */
	bool		el_kill_done;
	int			el_kill_n;
	double		el_kill_late_p50;
	double		el_kill_late_p99;
	double		el_kill_late_max;
	double		el_kill_since_p50;
	double		el_kill_since_p99;
	/* c, d: [0] dlock elect [1] etcdctl elect, by candidates queued (1, 2); ms */
	bool		el_cli_done[2][2];
	int			el_cli_n[2][2];
	double		el_cli_p50[2][2];
	double		el_cli_p99[2][2];
	double		el_cli_max[2][2];
	int			el_cli_over1s[2][2];
	int			el_cli_unordered[2][2]; /* handoffs not to the first queued */
} Figures;

extern Figures fig;
extern double load_start[3];	/* load averages when the run started */

extern void report_csv_open(void);
extern void report_pairs_row(const char *method, int clients, RunResult *r,
							 double wal_syncs, double wal_bytes);
extern void report_sample_rows(const char *test, const char *method, int clients,
							   Samples *s);
extern void report_hot_clients(const char *method, int contenders,
							   const RunResult *r);
extern void report_figure(const char *what, double value, const char *unit);
extern void report_write(PGconn *conn, double total_s);
extern void report_close(void);

#endif							/* BENCH_H */
