/*
 * contend.c: the measurements where clients wait for each other.
 *
 *   2. bench_hot: one hot resource, 8 and 32 contenders each looping
 *      lock / 50 us busy critical section / unlock; acquisitions per second,
 *      the share of them that went to another client (a handoff proper),
 *      wait time p50/p99, fairness (max/mean wait, max/mean acquisitions per
 *      client); dlock.lock(..., NULL) against pg_advisory_lock(1).
 *   3. bench_release: release -> waiter holds it.  The holder releases at
 *      t0 (client clock just before sending unlock); the waiter, a thread of
 *      this process blocked in lock(), gets its result at t1 (same
 *      monotonic clock).  dlock against advisory.
 *   4. bench_takeover: a holder takes a 200 ms lease and never releases; a
 *      waiter blocked in lock() returns its acquisition with
 *      clock_timestamp(); lateness = that - expires_at, both server clock.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const int	hot_counts[NHOT] = {8, 32};

/* Busy critical section of the hot-resource loop. */
#define HOT_CRITICAL_S 50e-6

/* ---------------- 2. one hot resource ---------------- */

typedef struct HotArg
{
	int			advisory;		/* 0: dlock, 1: pg_advisory_lock, 2: dlock fair */
	int			last;			/* client that held it last (under the lock) */
	atomic_long switches;		/* acquisitions by another client than last */
} HotArg;

/* hot_setup: connect and prepare lock/unlock of the hot resource. */
static void
hot_setup(Client *c)
{
	HotArg	   *a = c->arg;
	char	   *holder = malloc(32);

	if (holder == NULL)
		die("out of memory");
	snprintf(holder, 32, "hot:%d", c->id);
	c->priv = holder;
	c->conn = db_connect();
	if (a->advisory == 1)
	{
		db_prepare(c->conn, "lk", "SELECT pg_advisory_lock(1)", 0);
		db_prepare(c->conn, "ul", "SELECT pg_advisory_unlock(1)", 0);
	}
	else
	{
		db_prepare(c->conn, "lk", a->advisory == 2 ?
				   "SELECT dlock.lock('hot', $1, '30s', NULL, fair => true)" :
				   "SELECT dlock.lock('hot', $1, '30s', NULL)", 1);
		db_prepare(c->conn, "ul", "SELECT dlock.unlock('hot', $1)", 1);
	}
}

/* hot_op: wait for the hot resource, hold it briefly, release it. */
static void
hot_op(Client *c)
{
	HotArg	   *a = c->arg;
	const char *p[1] = {c->priv};
	double		t0 = now_s();

	bool		adv = (a->advisory == 1);

	db_run_expect(c->conn, "lk", adv ? 0 : 1, p, adv ? NULL : "*");
	if (c->measuring && harness_measuring())
	{
		samples_add(&c->wait, (now_s() - t0) * 1e6);
		if (a->last != c->id)
			atomic_fetch_add(&a->switches, 1);
	}
	a->last = c->id;			/* we hold the lock: no race */
	spin_s(HOT_CRITICAL_S);
	db_run_expect(c->conn, "ul", adv ? 0 : 1, p, adv ? "t" : "0");
}

/* hot_teardown: close the connection. */
static void
hot_teardown(Client *c)
{
	PQfinish(c->conn);
}

/*
 * bench_hot: measurement 2 for dlock, advisory and dlock with fair => true
 * at 8 and 32 contenders.
 */
void
bench_hot(void)
{
	int			m,
				i;

	for (i = 0; i < NHOT; i++)
		for (m = 0; m < 3; m++)
		{
			HotArg		a;
			RunSpec		spec;
			RunResult	r;
			const char *name = m == 1 ? "advisory" : m == 2 ? "dlock fair" : "dlock";
			double		mean_acq;

			memset(&a, 0, sizeof(a));
			a.advisory = m;
			a.last = -1;
			memset(&spec, 0, sizeof(spec));
			spec.label = name;
			spec.nclients = hot_counts[i];
			spec.arg = &a;
			spec.setup = hot_setup;
			spec.op = hot_op;
			spec.teardown = hot_teardown;
			spec.warmup_s = opt.warmup_s;
			spec.measure_s = opt.measure_s;
			progress("hot resource: %s, %d contenders ...", name, hot_counts[i]);
			harness_run(&spec, &r);

			mean_acq = (double) r.ops / r.nclients;
			fig.hot_done[m][i] = true;
			fig.hot_rate[m][i] = r.rate;
			fig.hot_switch[m][i] = r.ops ? (double) atomic_load(&a.switches) / r.ops : 0;
			fig.hot_p50[m][i] = samples_pct(&r.wait, 50);
			fig.hot_p99[m][i] = samples_pct(&r.wait, 99);
			fig.hot_wait_max_mean[m][i] = samples_max(&r.wait) / samples_mean(&r.wait);
			fig.hot_acq_max_mean[m][i] = mean_acq > 0 ? r.max_ops / mean_acq : 0;
			progress("hot resource: %s, %d contenders: %.0f acquisitions/s (%.0f%% to another client), "
					 "wait p50 %.0f us p99 %.0f us, max/mean wait %.1f, max/mean acquisitions %.2f",
					 name, hot_counts[i], r.rate, 100 * fig.hot_switch[m][i],
					 fig.hot_p50[m][i], fig.hot_p99[m][i],
					 fig.hot_wait_max_mean[m][i], fig.hot_acq_max_mean[m][i]);
			report_hot_clients(name, hot_counts[i], &r);
			report_sample_rows("hot_wait_us", name, hot_counts[i], &r.wait);
			run_free(&r);
		}
}

/* ---------------- 3. release -> waiter ---------------- */

typedef struct ReleaseCtx
{
	PGconn	   *conn;			/* the waiter's connection */
	sem_t		go;				/* main -> waiter: start waiting */
	sem_t		done;			/* waiter -> main: acquired and released */
	bool		quit;
	bool		advisory;
	double		t1;				/* when lock() returned */
} ReleaseCtx;

/* release_waiter: the waiter thread: on each go, lock (blocking), note t1,
 * unlock. */
static void *
release_waiter(void *p)
{
	ReleaseCtx *x = p;
	const char *params[1] = {"W"};

	for (;;)
	{
		sem_wait(&x->go);
		if (x->quit)
			break;
		db_run_expect(x->conn, "lk", x->advisory ? 0 : 1, params,
					  x->advisory ? NULL : "*");
		x->t1 = now_s();
		db_run_expect(x->conn, "ul", x->advisory ? 0 : 1, params,
					  x->advisory ? "t" : "0");
		sem_post(&x->done);
	}
	return NULL;
}

/* prepare_rw: lock/unlock statements of one side of the release test. */
static void
prepare_rw(PGconn *conn, bool advisory, bool waiter)
{
	if (advisory)
	{
		db_prepare(conn, "lk", "SELECT pg_advisory_lock(2)", 0);
		db_prepare(conn, "ul", "SELECT pg_advisory_unlock(2)", 0);
	}
	else
	{
		db_prepare(conn, "lk", waiter ?
				   "SELECT dlock.lock('rw', $1, '30s', NULL)" :
				   "SELECT dlock.try_lock('rw', $1, '30s')", 1);
		db_prepare(conn, "ul", "SELECT dlock.unlock('rw', $1)", 1);
	}
}

/* wait_until_blocked: poll until the backend pid is waiting for the lock. */
static void
wait_until_blocked(PGconn *mon, int pid)
{
	char		pidbuf[16];
	const char *p[1] = {pidbuf};
	double		give_up = now_s() + 10;

	snprintf(pidbuf, sizeof(pidbuf), "%d", pid);
	for (;;)
	{
		PGresult   *r = db_run(mon, "blocked", 1, p);
		bool		yes = strcmp(PQgetvalue(r, 0, 0), "0") != 0;

		PQclear(r);
		if (yes)
			return;
		if (now_s() > give_up)
			die("waiter never blocked");
		sleep_s(0.0005);
	}
}

/* bench_release: measurement 3 for dlock and advisory. */
void
bench_release(void)
{
	int			m,
				i;

	for (m = 0; m < 2; m++)
	{
		bool		advisory = m == 1;
		const char *name = advisory ? "advisory" : "dlock";
		PGconn	   *holder = db_connect();
		PGconn	   *mon = db_connect();
		ReleaseCtx	x;
		pthread_t	th;
		Samples		s = {0};
		const char *hp[1] = {"H"};

		memset(&x, 0, sizeof(x));
		x.advisory = advisory;
		x.conn = db_connect();
		prepare_rw(holder, advisory, false);
		prepare_rw(x.conn, advisory, true);
		db_prepare(mon, "blocked", advisory ?
				   "SELECT count(*) FROM pg_locks WHERE pid = $1::int AND NOT granted" :
				   "SELECT count(*) FROM dlock.waiters WHERE pid = $1::int", 1);
		sem_init(&x.go, 0, 0);
		sem_init(&x.done, 0, 0);
		if (pthread_create(&th, NULL, release_waiter, &x) != 0)
			die("pthread_create failed");

		progress("release -> waiter: %s, %d samples ...", name, opt.rw_samples);
		for (i = 0; i < opt.rw_samples; i++)
		{
			double		t0;

			db_run_expect(holder, "lk", advisory ? 0 : 1, hp, advisory ? NULL : "*");
			sem_post(&x.go);
			wait_until_blocked(mon, PQbackendPID(x.conn));
			sleep_s(0.003);		/* let it settle into its sleep */
			t0 = now_s();
			db_run_expect(holder, "ul", advisory ? 0 : 1, hp, advisory ? "t" : "0");
			sem_wait(&x.done);
			samples_add(&s, (x.t1 - t0) * 1e6);
		}
		x.quit = true;
		sem_post(&x.go);
		pthread_join(th, NULL);

		fig.rw_done[m] = true;
		fig.rw_p50[m] = samples_pct(&s, 50);
		fig.rw_p99[m] = samples_pct(&s, 99);
		progress("release -> waiter: %s: p50 %.0f us, p99 %.0f us, max %.0f us",
				 name, fig.rw_p50[m], fig.rw_p99[m], samples_max(&s));
		report_sample_rows("release_to_waiter_us", name, 2, &s);
		samples_free(&s);
		sem_destroy(&x.go);
		sem_destroy(&x.done);
		PQfinish(x.conn);
		PQfinish(holder);
		PQfinish(mon);
	}
}

/* ---------------- 4. takeover after expiry ---------------- */

/* bench_takeover: measurement 4. */
void
bench_takeover(void)
{
	PGconn	   *holder = db_connect();
	PGconn	   *waiter = db_connect();
	Samples		s = {0};
	int			i;

	db_prepare(holder, "lk", "SELECT dlock.try_lock($1, 'H', '200ms')", 1);
	db_prepare(holder, "exp",
			   "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint"
			   "  FROM dlock.locks WHERE resource = $1", 1);
	db_prepare(waiter, "lk",
			   "SELECT dlock.lock($1, 'W', '30s', NULL),"
			   "       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint", 1);
	db_prepare(waiter, "ul", "SELECT dlock.unlock($1, 'W')", 1);

	progress("takeover after expiry: %d runs of a 200 ms lease ...", opt.takeover_runs);
	for (i = 0; i < opt.takeover_runs; i++)
	{
		char		res[64];
		const char *p[1] = {res};
		PGresult   *r;
		long long	expires,
					got;

		snprintf(res, sizeof(res), "takeover/%d", i);
		db_run_expect(holder, "lk", 1, p, "*");
		r = db_run(holder, "exp", 1, p);
		if (PQntuples(r) != 1)
			die("takeover: lease of %s not found", res);
		expires = atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
		r = db_run(waiter, "lk", 1, p);
		if (PQgetisnull(r, 0, 0))
			die("takeover: lock() returned NULL");
		got = atoll(PQgetvalue(r, 0, 1));
		PQclear(r);
		samples_add(&s, (got - expires) / 1000.0);
		db_run_expect(waiter, "ul", 1, p, "0");
	}
	fig.tk_done = true;
	fig.tk_runs = opt.takeover_runs;
	fig.tk_p50 = samples_pct(&s, 50);
	fig.tk_p99 = samples_pct(&s, 99);
	fig.tk_max = samples_max(&s);
	progress("takeover after expiry: late by p50 %.2f ms, p99 %.2f ms, max %.2f ms",
			 fig.tk_p50, fig.tk_p99, fig.tk_max);
	report_sample_rows("takeover_late_ms", "dlock", 2, &s);
	samples_free(&s);
	PQfinish(holder);
	PQfinish(waiter);
}
