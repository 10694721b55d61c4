/*
 * sessions.c: measurement 9, sessions (issue 36): one keepalive for many
 * holdings.  N = 10,000 holdings (--quick: 1,000).
 *
 *   a. latency: one keepalive of a session of N holdings against one renew
 *      of a single leased holding, alternating on one connection;
 *   b. server CPU a second to keep N holdings alive at a 30 s lease renewed
 *      every 10 s: N/10 renews a second (paced, 4 connections) against one
 *      keepalive every 10 s, in windows of the same wall time, alternating;
 *      CPU of the backends doing it (/proc/<pid>/schedstat), and of every
 *      process of the cluster (the postmaster and its children);
 *   c. pairs in a session (try_lock(r, session => s) + unlock) against
 *      leased pairs, 1 and 8 clients, each client doing both in turn;
 *   d. a session of N holdings expires: from its expiry until another
 *      holder has acquired every resource (one statement), and until every
 *      `expired` event is received (LISTEN on each resource's channel).
 *
 * Skipped when the database has no dlock.open_session.  With --portable
 * (the portable edition: no background worker) dlock.reap() is called at
 * the expiry; on the C extension its worker reaps.  Writes sessions.md.
 */
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include "bench.h"

#define RENEWERS 4
#define MAX_ROUNDS 3
#define PAIR_ROUNDS 5			/* c's rounds (the median is S3) */
#define PAIR_COUNTS 2

static const int pair_clients[PAIR_COUNTS] = {1, 8};
static const char *pair_method[2] = {"leased", "session"};

/* What was measured, for sessions.md. */
static struct
{
	bool		done;
	long		n;				/* holdings */
	/* a */
	int			lat_n;
	double		keep_p50,
				keep_p99,
				keep_mean,
				renew_p50,
				renew_p99,
				renew_mean;
	/* b: [0] renewals [1] keepalive, per round */
	int			cpu_rounds;
	double		window_s;
	double		target_rate;	/* renews a second wanted */
	double		rate[MAX_ROUNDS];	/* renews a second achieved */
	double		be_cpu[MAX_ROUNDS][2];	/* backends: CPU s per wall s */
	double		all_cpu[MAX_ROUNDS][2]; /* cluster: CPU s per wall s */
	int			keepalives[MAX_ROUNDS];
	/* c */
	int			pair_rounds;
	double		pair_us[PAIR_ROUNDS][2][PAIR_COUNTS];	/* mean pair time */
	long		pair_count[PAIR_ROUNDS][2][PAIR_COUNTS];
	/* d */
	double		fill_s;
	double		first_ms;		/* expiry -> first probe acquired */
	double		probe_ms;		/* expiry -> every resource acquired */
	double		base_ms;		/* the same acquisitions of free resources */
	long		probed;
	double		reap_start_ms;	/* expiry -> reap() sent (portable) */
	double		reap_ms;		/* expiry -> reap() returned (portable) */
	double		events_ms;		/* expiry -> last expired event */
	long		events;
	char		reaper[160];
	double		load[2];		/* 1-minute load average at the start, the end */
} ss;

/* wall_s: CLOCK_REALTIME in seconds (the server's clock on this machine). */
static double
wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* value: run sql with text parameters; the first value (malloc'd; "" if NULL). */
static char *
value(PGconn *conn, const char *sql, int n, const char *const *p)
{
	PGresult   *r = PQexecParams(conn, sql, n, NULL, p, NULL, NULL, 0);
	char	   *v;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1)
		die("\"%s\" failed: %s", sql, PQerrorMessage(conn));
	v = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

/* fill: take n holdings prefix1..prefixn in session s (s NULL: leased by holder). */
static double
fill(PGconn *conn, const char *prefix, const char *s, const char *holder, long n)
{
	char		ns[32];
	const char *p[3] = {prefix, s ? s : holder, ns};
	double		t0 = now_s();
	char	   *got;

	snprintf(ns, sizeof(ns), "%ld", n);
	got = value(conn, s ? "SELECT count(dlock.try_lock($1 || i, session => $2::bigint))"
				" FROM generate_series(1, $3::int) i"
				: "SELECT count(dlock.try_lock($1 || i, $2, '30s'))"
				" FROM generate_series(1, $3::int) i", 3, p);
	if (atol(got) != n)
		die("sessions: took %s of %ld holdings %s", got, n, prefix);
	free(got);
	return now_s() - t0;
}

/* open_session: a session of holder with ttl; its id (malloc'd). */
static char *
open_session(PGconn *conn, const char *ttl, const char *holder)
{
	const char *p[2] = {ttl, holder};

	return value(conn, "SELECT dlock.open_session($1::interval, $2)", 2, p);
}

/* ---- a: latency ---- */

/* latency: keepalive of session s against renew of one leased holding. */
static void
latency(PGconn *conn, const char *s)
{
	Samples		keep = {0},
				renew = {0};
	const char *pk[1] = {s};
	const char *pr[2] = {"sess/lat", "bench:lat"};

	ss.lat_n = opt.quick ? 20 : 300;
	db_exec(conn, "SELECT dlock.try_lock('sess/lat', 'bench:lat', '30s')");
	db_prepare(conn, "ka", "SELECT dlock.keepalive($1::bigint)", 1);
	db_prepare(conn, "rn", "SELECT dlock.renew($1, $2)", 2);
	for (int i = 0; i < ss.lat_n + 5; i++)
		for (int k = 0; k < 2; k++)
		{
			bool		is_keep = (k == i % 2);
			double		t0 = now_s();

			if (is_keep)
				db_run_expect(conn, "ka", 1, pk, "*");
			else
				db_run_expect(conn, "rn", 2, pr, "*");
			if (i >= 5)			/* the first five warm up */
				samples_add(is_keep ? &keep : &renew, (now_s() - t0) * 1e6);
		}
	ss.keep_p50 = samples_pct(&keep, 50);
	ss.keep_p99 = samples_pct(&keep, 99);
	ss.keep_mean = samples_mean(&keep);
	ss.renew_p50 = samples_pct(&renew, 50);
	ss.renew_p99 = samples_pct(&renew, 99);
	ss.renew_mean = samples_mean(&renew);
	report_sample_rows("sessions_latency", "keepalive", 1, &keep);
	report_sample_rows("sessions_latency", "renew", 1, &renew);
	progress("sessions: keepalive of %ld holdings p50 %.0f us (p99 %.0f), renew of one p50 %.0f us"
			 " (p99 %.0f): %.2fx", ss.n, ss.keep_p50, ss.keep_p99, ss.renew_p50,
			 ss.renew_p99, ss.keep_p50 / ss.renew_p50);
	samples_free(&keep);
	samples_free(&renew);
	db_exec(conn, "DEALLOCATE ka");
	db_exec(conn, "DEALLOCATE rn");
}

/* ---- b: CPU to keep N holdings alive ---- */

static atomic_int renew_go;		/* 0 wait, 1 run, 2 stop */
static pthread_barrier_t renew_ready;

typedef struct Renewer
{
	int			id;
	int			pid;
	long		done;			/* renews completed in the window */
	double		t0;				/* window start (monotonic) */
} Renewer;

/* renewer_main: renew holdings id, id+R, ... paced to the target rate. */
static void *
renewer_main(void *p)
{
	Renewer    *rw = p;
	PGconn	   *conn = db_connect();
	double		every = RENEWERS / ss.target_rate;
	char		res[32];
	const char *par[2] = {res, "bench:renew"};
	long		i = 0;

	rw->pid = PQbackendPID(conn);
	db_prepare(conn, "rn", "SELECT dlock.renew($1, $2)", 2);
	pthread_barrier_wait(&renew_ready);
	while (atomic_load(&renew_go) == 0)
		sleep_s(0.0005);
	while (atomic_load(&renew_go) == 1)
	{
		double		due = rw->t0 + (i + (double) rw->id / RENEWERS) * every;

		sleep_s(due - now_s());
		if (atomic_load(&renew_go) != 1)
			break;
		snprintf(res, sizeof(res), "renew/%ld", 1 + (rw->id + i * RENEWERS) % ss.n);
		db_run_expect(conn, "rn", 2, par, "*");
		if (atomic_load(&renew_go) == 1)
			rw->done++;
		i++;
	}
	PQfinish(conn);
	return NULL;
}

/* renew_window: paced renewals for one window; CPU figures into round r. */
static void
renew_window(int r, int pm)
{
	pthread_t	th[RENEWERS];
	Renewer		rw[RENEWERS];
	double		be0 = 0,
				be1 = 0,
				t0;
	ClusterCpu		all0,
				all1;
	long		done = 0;

	memset(rw, 0, sizeof(rw));
	atomic_store(&renew_go, 0);
	pthread_barrier_init(&renew_ready, NULL, RENEWERS + 1);
	for (int i = 0; i < RENEWERS; i++)
	{
		rw[i].id = i;
		if (pthread_create(&th[i], NULL, renewer_main, &rw[i]) != 0)
			die("pthread_create failed");
	}
	pthread_barrier_wait(&renew_ready);
	t0 = now_s() + 0.05;
	for (int i = 0; i < RENEWERS; i++)
	{
		rw[i].t0 = t0;
		be0 += proc_cpu_ns(rw[i].pid);
	}
	cluster_cpu_snap(pm, &all0);
	sleep_s(t0 - now_s());
	atomic_store(&renew_go, 1);
	sleep_s(ss.window_s);
	for (int i = 0; i < RENEWERS; i++)
		be1 += proc_cpu_ns(rw[i].pid);
	cluster_cpu_snap(pm, &all1);
	atomic_store(&renew_go, 2);
	for (int i = 0; i < RENEWERS; i++)
	{
		pthread_join(th[i], NULL);
		done += rw[i].done;
	}
	pthread_barrier_destroy(&renew_ready);
	ss.rate[r] = done / ss.window_s;
	ss.be_cpu[r][0] = (be1 - be0) / 1e9 / ss.window_s;
	ss.all_cpu[r][0] = cluster_cpu_delta(&all0, &all1) / 1e9 / ss.window_s;
	progress("sessions: round %d, renewals: %.0f renews/s (target %.0f), backends %.4f CPU s/s,"
			 " cluster %.4f CPU s/s", r + 1, ss.rate[r], ss.target_rate, ss.be_cpu[r][0],
			 ss.all_cpu[r][0]);
}

/* keep_window: one keepalive every 10 s for one window; into round r. */
static void
keep_window(int r, int pm, PGconn *conn, const char *s)
{
	int			pid = PQbackendPID(conn);
	const char *p[1] = {s};
	double		be0,
				t0,
				be1;
	ClusterCpu		all0,
				all1;

	sleep_s(0.5);				/* the renewers' backends exit */
	be0 = proc_cpu_ns(pid);
	cluster_cpu_snap(pm, &all0);
	t0 = now_s();

	ss.keepalives[r] = 0;
	for (double next = t0; next < t0 + ss.window_s; next += 10)
	{
		sleep_s(next - now_s());
		db_run_expect(conn, "ka", 1, p, "*");
		ss.keepalives[r]++;
	}
	sleep_s(t0 + ss.window_s - now_s());
	be1 = proc_cpu_ns(pid);
	cluster_cpu_snap(pm, &all1);
	ss.be_cpu[r][1] = (be1 - be0) / 1e9 / ss.window_s;
	ss.all_cpu[r][1] = cluster_cpu_delta(&all0, &all1) / 1e9 / ss.window_s;
	progress("sessions: round %d, keepalive: %d in %.0f s, backend %.6f CPU s/s, cluster %.4f CPU s/s",
			 r + 1, ss.keepalives[r], ss.window_s, ss.be_cpu[r][1], ss.all_cpu[r][1]);
}

/* ---- c: pairs ---- */

/*
 * Each client does both kinds of pair, one after the other, in an order
 * that alternates, and times each: both kinds see the same load at the
 * same moments, which separate rounds did not (their ratios moved by up to
 * 0.3 between runs).  A closed-loop client's rate is 1 / its mean pair
 * time, so the rate ratio is leased mean / session mean.
 */
typedef struct SPair
{
	char		resource[2][64];
	char		holder[2][64];
	char	   *session;
	double		sum[2];			/* seconds in pairs of each kind, in the window */
	long		n[2];
} SPair;

static pthread_mutex_t pair_mutex = PTHREAD_MUTEX_INITIALIZER;
static double pair_sum[2];		/* the run's clients' sums, added at teardown */
static long pair_n[2];

/* spair_setup: connect, open this client's session, prepare both kinds. */
static void
spair_setup(Client *c)
{
	SPair	   *sp = calloc(1, sizeof(SPair));

	if (sp == NULL)
		die("out of memory");
	c->priv = sp;
	c->conn = db_connect();
	for (int m = 0; m < 2; m++)
	{
		snprintf(sp->resource[m], sizeof(sp->resource[m]), "spair/%s/%d", pair_method[m], c->id);
		snprintf(sp->holder[m], sizeof(sp->holder[m]), "bench:%s:%d", pair_method[m], c->id);
	}
	sp->session = open_session(c->conn, "30s", sp->holder[1]);
	db_prepare(c->conn, "lk0", "SELECT dlock.try_lock($1, $2, '30s')", 2);
	db_prepare(c->conn, "lk1", "SELECT dlock.try_lock($1, session => $2::bigint)", 2);
	db_prepare(c->conn, "ul", "SELECT dlock.unlock($1, $2)", 2);
}

/* spair_op: one pair of each kind, timed, the first kind alternating. */
static void
spair_op(Client *c)
{
	SPair	   *sp = c->priv;

	for (int k = 0; k < 2; k++)
	{
		int			m = (int) ((c->all_ops + k) % 2);
		const char *lk[2] = {sp->resource[m], m ? sp->session : sp->holder[0]};
		const char *ul[2] = {sp->resource[m], sp->holder[m]};
		double		t0 = now_s();

		db_run_expect(c->conn, m ? "lk1" : "lk0", 2, lk, "*");
		db_run_expect(c->conn, "ul", 2, ul, "0");
		if (c->measuring)
		{
			sp->sum[m] += now_s() - t0;
			sp->n[m]++;
		}
	}
}

/* spair_teardown: add this client's sums, close the session, disconnect. */
static void
spair_teardown(Client *c)
{
	SPair	   *sp = c->priv;
	const char *p[1] = {sp->session};

	pthread_mutex_lock(&pair_mutex);
	for (int m = 0; m < 2; m++)
	{
		pair_sum[m] += sp->sum[m];
		pair_n[m] += sp->n[m];
	}
	pthread_mutex_unlock(&pair_mutex);
	free(value(c->conn, "SELECT dlock.close_session($1::bigint)", 1, p));
	free(sp->session);
	sp->session = NULL;
	PQfinish(c->conn);
}

/* pairs: rounds of interleaved pairs at 1 and 8 clients. */
static void
pairs(void)
{
	ss.pair_rounds = opt.quick ? 1 : PAIR_ROUNDS;
	for (int r = 0; r < ss.pair_rounds; r++)
		for (int i = 0; i < PAIR_COUNTS; i++)
		{
			int			n = pair_clients[i];
			char		label[64];
			RunSpec		spec;
			RunResult	res;

			snprintf(label, sizeof(label), "leased+session pairs x%d", n);
			memset(&spec, 0, sizeof(spec));
			spec.label = label;
			spec.nclients = n;
			spec.setup = spair_setup;
			spec.op = spair_op;
			spec.teardown = spair_teardown;
			spec.warmup_s = opt.quick ? opt.warmup_s : 0.5;
			spec.measure_s = opt.quick ? opt.measure_s : 6;
			pair_sum[0] = pair_sum[1] = 0;
			pair_n[0] = pair_n[1] = 0;
			harness_run(&spec, &res);
			for (int m = 0; m < 2; m++)
			{
				if (pair_n[m] == 0)
					die("sessions: no %s pair in the window", pair_method[m]);
				ss.pair_us[r][m][i] = pair_sum[m] / pair_n[m] * 1e6;
				ss.pair_count[r][m][i] = pair_n[m];
			}
			progress("sessions: round %d, %d client%s: leased pair %.0f us, session pair %.0f us"
					 " (%ld each): %.3fx", r + 1, n, n > 1 ? "s" : "", ss.pair_us[r][0][i],
					 ss.pair_us[r][1][i], pair_n[1], ss.pair_us[r][0][i] / ss.pair_us[r][1][i]);
			report_pairs_row(label, n, &res, 0, 0);
			run_free(&res);
		}
}

/* ---- d: expiry ---- */

/*
 * expiring: open a session, fill it with n holdings prefix1..n, keep it
 * alive once more; its expiry (epoch seconds).  The ttl doubles while the
 * fill does not fit in it (an acquisition in an ended session fails).
 */
static double
expiring(PGconn *conn, const char *prefix)
{
	for (int ttl = opt.quick ? 4 : 10; ttl <= 160; ttl *= 2)
	{
		char		t[32],
					ns[32];
		char	   *s;
		const char *p[3] = {prefix, NULL, ns};
		PGresult   *r;
		double		t0 = now_s(),
					exp = 0;

		snprintf(t, sizeof(t), "%d s", ttl);
		snprintf(ns, sizeof(ns), "%ld", ss.n);
		s = open_session(conn, t, "bench:expiring");
		p[1] = s;
		r = PQexecParams(conn, "SELECT count(dlock.try_lock($1 || i, session => $2::bigint)),"
						 " extract(epoch FROM dlock.keepalive($2::bigint))"
						 " FROM generate_series(1, $3::int) i", 3, NULL, p, NULL, NULL, 0);
		ss.fill_s = now_s() - t0;
		if (PQresultStatus(r) == PGRES_TUPLES_OK && atol(PQgetvalue(r, 0, 0)) == ss.n &&
			!PQgetisnull(r, 0, 1))
			exp = atof(PQgetvalue(r, 0, 1));
		PQclear(r);
		free(s);
		if (exp - wall_s() > 1)
			return exp;
		progress("sessions: filling %ld holdings took %.1f s, over the %d s ttl: again, longer",
				 ss.n, ss.fill_s, ttl);
		sleep_s(ttl);
		if (opt.portable)
			db_exec(conn, "SELECT dlock.reap()");
	}
	die("sessions: could not fill a session in time");
}

/*
 * release_all: release every holding of holder, in batches: unlock_all of
 * 10,000 holdings or more would keep a lock on each until it commits, more
 * than the default lock table holds.
 */
static void
release_all(PGconn *conn, const char *holder)
{
	const char *p[1] = {holder};

	for (;;)
	{
		char	   *n = value(conn, "SELECT count(dlock.unlock(l.resource, $1))"
							  " FROM (SELECT resource FROM dlock.locks"
							  " WHERE holder = $1 LIMIT 1000) l", 1, p);
		bool		done = atol(n) == 0;

		free(n);
		if (done)
			break;
	}
}

/*
 * probe: from the expiry until another holder has every resource; the
 * baseline is the same statement on as many free rows (taken and released
 * before: a row that exists, as the expired ones do).
 */
static void
probe(PGconn *conn)
{
	char		ns[32],
				es[32];
	const char *p[2];
	double		exp;
	char	   *v;

	fill(conn, "free/", NULL, "bench:free", ss.n);
	release_all(conn, "bench:free");
	exp = expiring(conn, "probe/");

	p[0] = "probe/1";
	v = value(conn, "SELECT dlock.try_lock($1, 'bench:prober', '30s') IS NULL", 1, p);
	if (strcmp(v, "t") != 0)
		die("sessions: probe/1 was acquirable before the session's expiry");
	free(v);
	sleep_s(exp - wall_s());
	while (1)
	{
		v = value(conn, "SELECT dlock.try_lock($1, 'bench:prober', '30s')", 1, p);
		if (*v != '\0')
			break;
		free(v);
	}
	free(v);
	ss.first_ms = (wall_s() - exp) * 1e3;
	snprintf(ns, sizeof(ns), "%ld", ss.n);
	snprintf(es, sizeof(es), "%.6f", exp);
	p[0] = ns;
	p[1] = es;
	v = value(conn, "SELECT count(dlock.try_lock('probe/' || i, 'bench:prober', '30s'))"
			  " FROM generate_series(2, $1::int) i", 1, p);
	ss.probe_ms = (wall_s() - exp) * 1e3;
	ss.probed = 1 + atol(v);
	free(v);
	if (ss.probed != ss.n)
		die("sessions: another holder acquired %ld of %ld resources after the expiry",
			ss.probed, ss.n);
	/* the baseline: the same statement on free rows (released before) */
	{
		double		t0 = now_s();

		free(value(conn, "SELECT count(dlock.try_lock('free/' || i, 'bench:prober', '30s'))"
				   " FROM generate_series(2, $1::int) i", 1, p));
		ss.base_ms = (now_s() - t0) * 1e3;
	}
	progress("sessions: expiry -> first resource acquired by another %.1f ms, all %ld %.1f ms"
			 " (the same acquisitions of free resources: %.1f ms)",
			 ss.first_ms, ss.n, ss.probe_ms, ss.base_ms);
	release_all(conn, "bench:prober");
}

/* events: from the expiry until every expired event has arrived. */
static void
events(PGconn *conn)
{
	PGconn	   *lis = db_connect(),
			   *rp = opt.portable ? db_connect() : NULL;
	PGresult   *r;
	char		ns[32];
	const char *p[1] = {ns};
	size_t		cap = 64 * (ss.n + 1),
				len = 0;
	char	   *sql = malloc(cap);
	double		exp,
				last = 0,
				deadline;
	bool		reaping = false;

	if (sql == NULL)
		die("out of memory");
	snprintf(ns, sizeof(ns), "%ld", ss.n);
	r = PQexecParams(lis, "SELECT dlock.channel('events/' || i) FROM generate_series(1, $1::int) i",
					 1, NULL, p, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		die("sessions: channels: %s", PQerrorMessage(lis));
	for (int i = 0; i < PQntuples(r); i++)
		len += snprintf(sql + len, cap - len, "LISTEN %s;", PQgetvalue(r, i, 0));
	PQclear(r);
	db_exec(lis, sql);
	free(sql);
	exp = expiring(conn, "events/");
	ss.events = 0;
	deadline = exp + 60;
	if (opt.portable)
	{
		sleep_s(exp - wall_s() + 0.001);
		ss.reap_start_ms = (wall_s() - exp) * 1e3;
		if (!PQsendQuery(rp, "SELECT dlock.reap()"))
			die("sessions: reap(): %s", PQerrorMessage(rp));
		reaping = true;
	}
	while (ss.events < ss.n && wall_s() < deadline)
	{
		fd_set		fds;
		struct timeval tv = {0, 100000};
		PGnotify   *nt;
		int			maxfd = PQsocket(lis);

		FD_ZERO(&fds);
		FD_SET(PQsocket(lis), &fds);
		if (reaping)
		{
			FD_SET(PQsocket(rp), &fds);
			if (PQsocket(rp) > maxfd)
				maxfd = PQsocket(rp);
		}
		if (select(maxfd + 1, &fds, NULL, NULL, &tv) < 0)
			continue;
		if (reaping && FD_ISSET(PQsocket(rp), &fds))
		{
			if (!PQconsumeInput(rp))
				die("sessions: reap(): %s", PQerrorMessage(rp));
			if (!PQisBusy(rp))
			{
				ss.reap_ms = (wall_s() - exp) * 1e3;
				while ((r = PQgetResult(rp)) != NULL)
				{
					if (PQresultStatus(r) != PGRES_TUPLES_OK)
						die("sessions: reap(): %s", PQerrorMessage(rp));
					PQclear(r);
				}
				reaping = false;
			}
		}
		if (!PQconsumeInput(lis))
			die("sessions: listener: %s", PQerrorMessage(lis));
		while ((nt = PQnotifies(lis)) != NULL)
		{
			if (strstr(nt->extra, "\"event\":\"expired\"") != NULL)
			{
				ss.events++;
				last = wall_s();
			}
			PQfreemem(nt);
		}
	}
	if (reaping)				/* every event came before reap()'s result */
	{
		while ((r = PQgetResult(rp)) != NULL)
			PQclear(r);
		ss.reap_ms = (wall_s() - exp) * 1e3;
	}
	ss.events_ms = ss.events > 0 ? (last - exp) * 1e3 : -1;
	progress("sessions: %ld of %ld expired events received, the last %.1f ms after the expiry%s",
			 ss.events, ss.n, ss.events_ms, opt.portable ? " (reap() called at the expiry)" : "");
	PQfinish(lis);
	if (rp)
		PQfinish(rp);
}

/* bench_sessions: measurement 9. */
void
bench_sessions(void)
{
	PGconn	   *conn = db_connect();
	long		has = db_long(conn, "SELECT count(*) FROM pg_proc p JOIN pg_namespace n"
							  " ON n.oid = p.pronamespace WHERE n.nspname = 'dlock'"
							  " AND p.proname = 'open_session'");
	char	   *s,
			   *ri;
	int			pm;
	double		l[3];

	if (has == 0)
	{
		progress("sessions: this dlock has no dlock.open_session (sessions came in 1.1): skipped");
		PQfinish(conn);
		return;
	}
	ss.load[0] = getloadavg(l, 3) == 3 ? l[0] : -1;
	ss.n = opt.quick ? 1000 : 10000;
	ss.window_s = opt.quick ? 1 : 10;
	ss.target_rate = ss.n / 10.0;	/* each holding renewed every 10 s */
	ss.cpu_rounds = opt.quick ? 1 : 2;
	pm = proc_ppid(PQbackendPID(conn));
	if (opt.portable)
		snprintf(ss.reaper, sizeof(ss.reaper), "dlock.reap() called at the expiry");
	else
	{
		ri = db_value(conn, "SELECT coalesce(current_setting('dlock.reap_interval', true), '?')");
		snprintf(ss.reaper, sizeof(ss.reaper), "the background worker (dlock.reap_interval %s)", ri);
		free(ri);
	}

	s = open_session(conn, "30s", "bench:keep");
	progress("sessions: filling a session with %ld holdings and %ld leased ones", ss.n, ss.n);
	fill(conn, "sess/", s, NULL, ss.n);
	fill(conn, "renew/", NULL, "bench:renew", ss.n);
	db_exec(conn, "VACUUM ANALYZE dlock.leases");
	latency(conn, s);

	db_prepare(conn, "ka", "SELECT dlock.keepalive($1::bigint)", 1);
	/*
	 * Windows alternate, renewals first in every round: a holding is then
	 * renewed every 2 windows (20 s), inside its 30 s lease.
	 */
	for (int r = 0; r < ss.cpu_rounds; r++)
	{
		renew_window(r, pm);
		keep_window(r, pm, conn, s);
	}
	{
		const char *p[1] = {s};

		free(value(conn, "SELECT dlock.close_session($1::bigint)", 1, p));
	}
	db_exec(conn, "SELECT dlock.unlock_all('bench:renew')");
	free(s);

	pairs();
	probe(conn);
	events(conn);
	if (opt.portable)
		db_exec(conn, "SELECT dlock.reap()");
	ss.done = true;
	ss.load[1] = getloadavg(l, 3) == 3 ? l[0] : -1;
	PQfinish(conn);
	{
		char		path[1024];
		FILE	   *f;

		snprintf(path, sizeof(path), "%s/sessions.md", opt.outdir);
		if ((f = fopen(path, "w")) == NULL)
			die("cannot write %s", path);
		write_sessions(f);
		fclose(f);
	}
}

/* ratio_median: the median over the rounds of leased/session pair time at i. */
static double
ratio_median(int i)
{
	double		v[PAIR_ROUNDS],
				t;
	int			n = ss.pair_rounds;

	for (int r = 0; r < n; r++)
		v[r] = ss.pair_us[r][0][i] / ss.pair_us[r][1][i];
	for (int a = 0; a < n; a++)
		for (int b = a + 1; b < n; b++)
			if (v[b] < v[a])
				t = v[a], v[a] = v[b], v[b] = t;
	return v[n / 2];
}

/* write_sessions: the section of measurement 9 (goals S1-S4 and tables). */
void
write_sessions(FILE *f)
{
	double		rn = 0,
				ka = 0,
				rn_all = 0,
				ka_all = 0,
				scale = 0,
				lat = ss.keep_p50 / ss.renew_p50;

	if (!ss.done)
		return;
	for (int r = 0; r < ss.cpu_rounds; r++)
	{
		rn += ss.be_cpu[r][0];
		ka += ss.be_cpu[r][1];
		rn_all += ss.all_cpu[r][0];
		ka_all += ss.all_cpu[r][1];
		scale += ss.rate[r];
	}
	/* renewals that fell behind the target rate: their CPU scaled up to it */
	scale = scale > 0 ? ss.target_rate * ss.cpu_rounds / scale : 1;
	if (scale < 1)
		scale = 1;
	fprintf(f, "## 9. Sessions: one keepalive for %ld holdings (%s)\n\n"
			"Load average (1 min) %.2f at its start, %.2f at its end.\n\n"
			"| goal | target | measured | status |\n|---|---|---|---|\n",
			ss.n, opt.portable ? "portable edition" : "C extension", ss.load[0], ss.load[1]);
	fprintf(f, "| S1 | keepalive of %ld holdings p50 <= 1.2x renew of one | %.2fx "
			"(%.0f vs %.0f us) | %s |\n", ss.n, lat, ss.keep_p50, ss.renew_p50,
			lat <= 1.2 ? "**met**" : "**NOT MET**");
	fprintf(f, "| S2 | server CPU to keep them alive: renewals >= 100x keepalives | %.0fx "
			"(%.4f vs %.6f CPU s/s) | %s |\n", rn * scale / ka, rn * scale / ss.cpu_rounds,
			ka / ss.cpu_rounds, rn * scale / ka >= 100 ? "**met**" : "**NOT MET**");
	for (int i = 0; i < PAIR_COUNTS; i++)
		fprintf(f, "| S3 (%d client%s) | session pairs >= 0.95x leased | %.3fx | %s |\n",
				pair_clients[i], i ? "s" : "", ratio_median(i),
				ratio_median(i) >= 0.95 ? "**met**" : "**NOT MET**");
	fprintf(f, "| S4 | expiry -> every resource acquirable (beyond the acquisitions' own time) "
			"and every expired event received: <= 2 s | %.0f ms (all acquired %.0f ms after, "
			"%.0f ms for free ones) / %.0f ms (%ld of %ld events) | %s |\n\n",
			ss.probe_ms - ss.base_ms, ss.probe_ms, ss.base_ms, ss.events_ms, ss.events, ss.n,
			ss.probe_ms - ss.base_ms <= 2000 && ss.events == ss.n && ss.events_ms <= 2000
			? "**met**" : "**NOT MET**");

	fprintf(f, "a. Latency, alternating on one connection, %d samples each: keepalive of a "
			"session of %ld holdings p50 %.0f / p99 %.0f / mean %.0f us; renew of one leased "
			"holding p50 %.0f / p99 %.0f / mean %.0f us.\n\n", ss.lat_n, ss.n, ss.keep_p50,
			ss.keep_p99, ss.keep_mean, ss.renew_p50, ss.renew_p99, ss.renew_mean);
	fprintf(f, "b. Keeping %ld holdings alive at a 30 s lease, each renewed every 10 s: "
			"`renew` of each (target %.0f a second, %d connections, paced) against one "
			"`keepalive` every 10 s, windows of %.0f s alternating. CPU seconds a second "
			"of the backends doing it (/proc/<pid>/schedstat) and of the whole cluster "
			"(postmaster and children: background processes included).\n\n"
			"| round | renews/s | renewals: backends | keepalive: backend | renewals: cluster "
			"| keepalive: cluster |\n|---|---|---|---|---|---|\n",
			ss.n, ss.target_rate, RENEWERS, ss.window_s);
	for (int r = 0; r < ss.cpu_rounds; r++)
		fprintf(f, "| %d | %.0f | %.4f | %.6f (%d keepalive%s) | %.4f | %.4f |\n", r + 1,
				ss.rate[r], ss.be_cpu[r][0], ss.be_cpu[r][1], ss.keepalives[r],
				ss.keepalives[r] > 1 ? "s" : "", ss.all_cpu[r][0], ss.all_cpu[r][1]);
	fprintf(f, "\nBackends: renewals/keepalive %.0fx%s; whole cluster %.1fx.\n\n",
			rn * scale / ka, scale > 1.001 ? " (renewals fell behind the target: scaled up to it)" : "",
			ka_all > 0 ? rn_all * scale / ka_all : 0);
	fprintf(f, "c. Pairs: `try_lock(r, session => s)` + `unlock` against `try_lock(r, h, '30s')` + "
			"`unlock`, each client its own two resources and session, one pair of each kind in "
			"turn (the first kind alternating), each pair timed: a client's rate is 1 / its mean "
			"pair time, so session rate / leased rate = leased time / session time.\n\n"
			"| clients | round | pairs of each kind | leased pair us | session pair us "
			"| session / leased rate |\n|---|---|---|---|---|---|\n");
	for (int i = 0; i < PAIR_COUNTS; i++)
	{
		for (int r = 0; r < ss.pair_rounds; r++)
			fprintf(f, "| %d | %d | %ld | %.1f | %.1f | %.3fx |\n", pair_clients[i], r + 1,
					ss.pair_count[r][1][i], ss.pair_us[r][0][i], ss.pair_us[r][1][i],
					ss.pair_us[r][0][i] / ss.pair_us[r][1][i]);
		fprintf(f, "| %d | median | | | | **%.3fx** |\n", pair_clients[i], ratio_median(i));
	}
	fprintf(f, "\nd. A session of %ld holdings expires (filled in %.1f s): another holder "
			"acquired the first resource %.1f ms after the expiry and all %ld (one statement, "
			"each on its first try) %.1f ms after it; the same statement on %ld free resources "
			"(taken and released before) took %.1f ms. Expired events (LISTEN on each resource's channel, one "
			"listener): %ld of %ld, the last %.1f ms after the expiry; reaper: %s",
			ss.n, ss.fill_s, ss.first_ms, ss.probed, ss.probe_ms, ss.n - 1, ss.base_ms,
			ss.events, ss.n,
			ss.events_ms, ss.reaper);
	if (opt.portable)
		fprintf(f, ", sent %.1f ms and returned %.1f ms after the expiry", ss.reap_start_ms,
				ss.reap_ms);
	fprintf(f, ". Times against the expiry use the machine's one clock (server and "
			"client on it).\n\n");
}
