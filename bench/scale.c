/*
 * scale.c: measurement 6, dlock with a big lease table.
 *
 *   - the 1-client try_lock/unlock pair rate with opt.scale_small and then
 *     opt.scale_large held leases in dlock.leases (filled with INSERT ...
 *     SELECT as superuser, 100,000 rows a statement; then VACUUM ANALYZE
 *     and CHECKPOINT so neither lands inside the timed window);
 *   - reaping opt.reap_count expired leases (taken with try_lock and a 1 ms
 *     lease): first by calling dlock.reap()
 *     until it returns 0 (the background worker is parked meanwhile with
 *     dlock.reap_interval = 1h), then by the background worker (the setting
 *     is reset and the configuration reloaded, which wakes it at once; done
 *     when dlock.stats().expired has grown by the count).  Meanwhile
 *     acquirer threads do try_lock/unlock pairs on their own resources; their
 *     try_lock p99 and pair p99 inside the reaping window are reported, and
 *     the same with nothing reaping as a baseline.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Acquirer threads that run while reaping goes on. */
#define NACQ 2

typedef struct Acquirer
{
	pthread_t	th;
	int			id;
	PGconn	   *conn;
	Samples		start;			/* start time of each pair (s) */
	Samples		acq;			/* try_lock latency (us) */
	Samples		pair;			/* pair latency (us) */
} Acquirer;

static Acquirer acqs[NACQ];
static atomic_int acq_stop;
static pthread_barrier_t acq_ready;

/* acquirer_main: try_lock/unlock pairs until told to stop. */
static void *
acquirer_main(void *p)
{
	Acquirer   *a = p;
	char		res[32];
	const char *params[2] = {res, "acquirer"};

	snprintf(res, sizeof(res), "acq/%d", a->id);
	a->conn = db_connect();
	db_prepare(a->conn, "lk", "SELECT dlock.try_lock($1, $2, '30s')", 2);
	db_prepare(a->conn, "ul", "SELECT dlock.unlock($1, $2)", 2);
	pthread_barrier_wait(&acq_ready);
	while (!atomic_load(&acq_stop))
	{
		double		t0 = now_s(),
					t1;

		db_run_expect(a->conn, "lk", 2, params, "*");
		t1 = now_s();
		db_run_expect(a->conn, "ul", 2, params, "0");
		samples_add(&a->start, t0);
		samples_add(&a->acq, (t1 - t0) * 1e6);
		samples_add(&a->pair, (now_s() - t0) * 1e6);
	}
	PQfinish(a->conn);
	return NULL;
}

/* acquirers_start: start the acquirers; returns once they are connected. */
static void
acquirers_start(void)
{
	int			i;

	atomic_store(&acq_stop, 0);
	pthread_barrier_init(&acq_ready, NULL, NACQ + 1);
	for (i = 0; i < NACQ; i++)
	{
		memset(&acqs[i], 0, sizeof(Acquirer));
		acqs[i].id = i;
		if (pthread_create(&acqs[i].th, NULL, acquirer_main, &acqs[i]) != 0)
			die("pthread_create failed");
	}
	pthread_barrier_wait(&acq_ready);
	pthread_barrier_destroy(&acq_ready);
}

/*
 * acquirers_stop: stop them and collect the latencies of the pairs that
 * started between t0 and t1.
 */
static void
acquirers_stop(double t0, double t1, Samples *acq, Samples *pair)
{
	int			i;
	size_t		k;

	atomic_store(&acq_stop, 1);
	for (i = 0; i < NACQ; i++)
	{
		pthread_join(acqs[i].th, NULL);
		for (k = 0; k < acqs[i].start.n; k++)
			if (acqs[i].start.v[k] >= t0 && acqs[i].start.v[k] <= t1)
			{
				samples_add(acq, acqs[i].acq.v[k]);
				samples_add(pair, acqs[i].pair.v[k]);
			}
		samples_free(&acqs[i].start);
		samples_free(&acqs[i].acq);
		samples_free(&acqs[i].pair);
	}
}

/*
 * fill: insert leases prefix/from .. prefix/to held by holder, expiring
 * at expiry (an SQL expression), 100,000 rows a statement.
 */
static void
fill(PGconn *conn, const char *prefix, long from, long to, const char *holder,
	 const char *expiry)
{
	long		lo;

	for (lo = from; lo <= to; lo += 100000)
	{
		char		sql[1024];
		long		hi = lo + 99999 < to ? lo + 99999 : to;

		snprintf(sql, sizeof(sql),
				 "INSERT INTO dlock.leases (resource, holder, owner, count, fence,"
				 "  lease, acquired_at, renewed_at, expires_at)"
				 " SELECT '%s/' || g, '%s', (SELECT oid FROM pg_roles WHERE rolname = current_user),"
				 "  1, g, '1h', now() - '1h'::interval, now() - '1h'::interval, %s"
				 " FROM generate_series(%ld, %ld) g",
				 prefix, holder, expiry, lo, hi);
		db_exec(conn, sql);
		if (to - from > 100000)
			progress("scale: %ld / %ld leases inserted", hi - from + 1, to - from + 1);
	}
}

/* settle: vacuum, analyze and checkpoint, so they stay out of the window. */
static void
settle(PGconn *conn)
{
	db_exec(conn, "VACUUM (ANALYZE) dlock.leases");
	db_exec(conn, "CHECKPOINT");
}

/*
 * pair_rate: the 1-client dlock pair rate now; *reaper_pct: the background
 * reaper's CPU meanwhile, % of one core (it scans for expired leases every
 * dlock.reap_interval).
 */
static double
pair_rate(PGconn *conn, long held, double *reaper_pct)
{
	RunResult	r;
	double		rate,
				ns0,
				t0;
	char		what[64];
	int			reaper = (int) db_long(conn, "SELECT coalesce(max(pid), 0) FROM pg_stat_activity"
									   " WHERE backend_type = 'dlock reaper'");

	progress("scale: 1-client dlock pairs with %ld held leases ...", held);
	ns0 = proc_cpu_ns(reaper);
	t0 = now_s();
	pairs_run(M_DLOCK, 1, opt.warmup_s, opt.measure_s, &r);
	*reaper_pct = 100 * (proc_cpu_ns(reaper) - ns0) / 1e9 / (now_s() - t0);
	rate = r.rate;
	progress("scale: %ld held leases: %.0f pairs/s (p99 %.0f us); the reaper used %.1f%% of a core",
			 held, rate, samples_pct(&r.lat, 99), *reaper_pct);
	snprintf(what, sizeof(what), "pairs_per_s_with_%ld_held", held);
	report_figure(what, rate, "pairs/s");
	snprintf(what, sizeof(what), "reaper_cpu_pct_with_%ld_held", held);
	report_figure(what, *reaper_pct, "% of one core");
	run_free(&r);
	return rate;
}

/* set_reap_interval: change dlock.reap_interval (NULL: reset) and reload. */
static void
set_reap_interval(PGconn *conn, const char *value)
{
	char		sql[128];

	if (value)
		snprintf(sql, sizeof(sql), "ALTER SYSTEM SET dlock.reap_interval = '%s'", value);
	else
		snprintf(sql, sizeof(sql), "ALTER SYSTEM RESET dlock.reap_interval");
	db_exec(conn, sql);
	db_exec(conn, "SELECT pg_reload_conf()");
	sleep_s(0.2);				/* the postmaster passes it on */
}

/* expired_stat: dlock.stats().expired. */
static long
expired_stat(PGconn *conn)
{
	return db_long(conn, "SELECT expired FROM dlock.stats()");
}

/*
 * make_expired: (re)create opt.reap_count expired leases "exp/N" and
 * settle.  They are taken through dlock.try_lock() with a 1 ms lease, 1,000
 * a transaction, so that the extension sees them as it would real leases
 * (the worker may keep track of the next expiry); by the time the batches
 * are done they have expired.  With the worker parked none should vanish
 * before the timed part starts; if some did anyway, say so and expire them
 * again.
 */
static void
make_expired(PGconn *conn)
{
	long		n,
				lo;

	db_exec(conn, "DELETE FROM dlock.leases WHERE resource LIKE 'exp/%'");
	progress("scale: taking %ld leases of 1 ms ...", opt.reap_count);
	for (lo = 1; lo <= opt.reap_count; lo += 1000)
	{
		char		sql[256];
		long		hi = lo + 999 < opt.reap_count ? lo + 999 : opt.reap_count;

		snprintf(sql, sizeof(sql),
				 "SELECT count(dlock.try_lock('exp/' || g, 'expired', '1 ms'))"
				 " FROM generate_series(%ld, %ld) g", lo, hi);
		if (db_long(conn, sql) != hi - lo + 1)
			die("could not take the leases exp/%ld to exp/%ld", lo, hi);
	}
	sleep_s(0.01);
	settle(conn);
	n = db_long(conn, "SELECT count(*) FROM dlock.leases WHERE holder = 'expired'");
	if (n != opt.reap_count)
	{
		progress("scale: warning: %ld of %ld expired leases were reaped before the timed "
				 "part (is the worker parked?); expiring them again", opt.reap_count - n,
				 opt.reap_count);
		db_exec(conn, "UPDATE dlock.leases SET holder = 'expired', count = 1,"
				" owner = (SELECT oid FROM pg_roles WHERE rolname = current_user),"
				" expires_at = now() - '1s'::interval WHERE resource LIKE 'exp/%'");
	}
}

/* reap_by_calls: reap() until 0 while the acquirers run; fills fig. */
static void
reap_by_calls(PGconn *conn)
{
	Samples		acq = {0},
				pair = {0};
	double		t0,
				t1;
	int			calls = 0;

	progress("scale: reaping %ld expired leases with dlock.reap() ...", opt.reap_count);
	acquirers_start();
	t0 = now_s();
	while (db_long(conn, "SELECT dlock.reap()") > 0)
		calls++;
	t1 = now_s();
	acquirers_stop(t0, t1, &acq, &pair);
	if (db_long(conn, "SELECT count(*) FROM dlock.leases WHERE holder = 'expired'") != 0)
		die("reap() left expired leases behind");
	fig.reap_call_s = t1 - t0;
	fig.reap_calls = calls + 1;
	fig.reap_call_acq_p99 = samples_pct(&acq, 99);
	fig.reap_call_pair_p99 = samples_pct(&pair, 99);
	progress("scale: reap(): %ld leases in %.2f s (%d calls); acquirers' try_lock p99 %.0f us, "
			 "pair p99 %.0f us (%zu pairs)", opt.reap_count, fig.reap_call_s, fig.reap_calls,
			 fig.reap_call_acq_p99, fig.reap_call_pair_p99, acq.n);
	report_figure("reap_calls_seconds", fig.reap_call_s, "s");
	report_sample_rows("acq_during_reap_calls_us", "dlock", NACQ, &acq);
	samples_free(&acq);
	samples_free(&pair);
}

/* reap_by_worker: let the background worker reap; fills fig. */
static void
reap_by_worker(PGconn *conn)
{
	Samples		acq = {0},
				pair = {0};
	double		t0,
				t1,
				give_up;
	long		before = expired_stat(conn);

	progress("scale: reaping %ld expired leases with the background worker ...", opt.reap_count);
	acquirers_start();
	t0 = now_s();
	set_reap_interval(conn, NULL);	/* the reload wakes the worker */
	give_up = t0 + 120;
	/*
	 * The counter moves as rows are reaped, before their batch commits: once
	 * it is there, wait for the last batch to become visible.
	 */
	while (expired_stat(conn) - before < opt.reap_count ||
		   db_long(conn, "SELECT count(*) FROM dlock.leases WHERE holder = 'expired'") != 0)
	{
		if (now_s() > give_up)
			die("the background worker did not reap within 120 s");
		sleep_s(0.01);
	}
	t1 = now_s();
	acquirers_stop(t0, t1, &acq, &pair);
	fig.reap_worker_s = t1 - t0;
	fig.reap_worker_acq_p99 = samples_pct(&acq, 99);
	fig.reap_worker_pair_p99 = samples_pct(&pair, 99);
	progress("scale: worker: %ld leases in %.2f s; acquirers' try_lock p99 %.0f us, "
			 "pair p99 %.0f us (%zu pairs)", opt.reap_count, fig.reap_worker_s,
			 fig.reap_worker_acq_p99, fig.reap_worker_pair_p99, acq.n);
	report_figure("reap_worker_seconds", fig.reap_worker_s, "s");
	report_sample_rows("acq_during_reap_worker_us", "dlock", NACQ, &acq);
	samples_free(&acq);
	samples_free(&pair);
}

/* acquirers_baseline: the acquirers' latencies with nothing reaping. */
static void
acquirers_baseline(void)
{
	Samples		acq = {0},
				pair = {0};
	double		t0;

	acquirers_start();
	t0 = now_s();
	sleep_s(opt.measure_s / 2);
	acquirers_stop(t0, now_s(), &acq, &pair);
	fig.base_acq_p99 = samples_pct(&acq, 99);
	fig.base_pair_p99 = samples_pct(&pair, 99);
	progress("scale: acquirers with nothing reaping: try_lock p99 %.0f us, pair p99 %.0f us",
			 fig.base_acq_p99, fig.base_pair_p99);
	samples_free(&acq);
	samples_free(&pair);
}

/* bench_scale: measurement 6. */
void
bench_scale(void)
{
	PGconn	   *conn = db_connect();
	double		t0;

	fig.scale_small_n = opt.scale_small;
	fig.scale_large_n = opt.scale_large;
	fig.reap_n = opt.reap_count;

	db_exec(conn, "DELETE FROM dlock.leases WHERE resource LIKE 'fill/%'"
			" OR resource LIKE 'exp/%'");
	progress("scale: filling %ld held leases ...", opt.scale_small);
	fill(conn, "fill", 1, opt.scale_small, "filler", "now() + '1h'::interval");
	settle(conn);
	fig.scale_small_rate = pair_rate(conn, opt.scale_small, &fig.reaper_cpu_small);

	progress("scale: filling up to %ld held leases ...", opt.scale_large);
	t0 = now_s();
	fill(conn, "fill", opt.scale_small + 1, opt.scale_large, "filler",
		 "now() + '1h'::interval");
	fig.fill_s = now_s() - t0;
	settle(conn);
	fig.scale_large_rate = pair_rate(conn, opt.scale_large, &fig.reaper_cpu_large);

	/* Reaping: park the worker, start from a table without the fillers. */
	set_reap_interval(conn, "1h");
	db_exec(conn, "DELETE FROM dlock.leases WHERE resource LIKE 'fill/%'");
	make_expired(conn);
	acquirers_baseline();
	reap_by_calls(conn);

	make_expired(conn);
	reap_by_worker(conn);
	fig.scale_done = true;
	PQfinish(conn);
}
