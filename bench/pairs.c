/*
 * pairs.c: measurement 1, uncontended lock+unlock pairs per second.
 * Every client locks and unlocks its own resource, so nobody ever waits:
 * what is measured is the cost of one acquisition and one release.
 *
 *   dlock     SELECT dlock.try_lock($1,$2,'30s'); SELECT dlock.unlock($1,$2)
 *   advisory  SELECT pg_advisory_lock($1); SELECT pg_advisory_unlock($1)
 *   naive     the durable lock table everyone writes first (INSERT ... ON
 *             CONFLICT DO UPDATE WHERE expired; DELETE)
 *   redis     SET key val NX PX 30000; EVALSHA compare-and-delete
 *
 * All statements are prepared, every call is its own autocommit
 * transaction, and every result is checked (a pair that did not lock and
 * unlock ends the run).  Also used by scale.c for the 1-client dlock rate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char *method_name[NUM_METHODS] = {"dlock", "advisory", "naive", "redis"};
const int	client_counts[NCLIENT_COUNTS] = {1, 8, 32};

/* Redis compare-and-delete: release only if we still hold it. */
static const char *redis_unlock_lua =
"if redis.call('get', KEYS[1]) == ARGV[1] then "
"return redis.call('del', KEYS[1]) else return 0 end";

typedef struct PairArg
{
	Method		m;
	const char *prefix;			/* resource name prefix */
	char		sha[64];		/* Redis script SHA1 */
} PairArg;

/* Per-client names: resource (or key) and holder (or value). */
typedef struct PairNames
{
	char		resource[64];
	char		holder[64];
} PairNames;

/* pairs_setup_schema: the naive lock table. */
void
pairs_setup_schema(PGconn *conn)
{
	db_exec(conn, "CREATE TABLE IF NOT EXISTS naive ("
			"resource text PRIMARY KEY, holder text, expires_at timestamptz)");
}

/* pair_setup: connect and prepare this client's statements. */
static void
pair_setup(Client *c)
{
	PairArg    *a = c->arg;
	PairNames  *nm = calloc(1, sizeof(PairNames));

	if (nm == NULL)
		die("out of memory");
	c->priv = nm;
	snprintf(nm->resource, sizeof(nm->resource), "%s/%d", a->prefix, c->id);
	snprintf(nm->holder, sizeof(nm->holder), "bench:%d", c->id);
	if (a->m == M_REDIS)
	{
		c->fd = redis_connect(opt.redis_port);
		return;
	}
	c->conn = db_connect();
	switch (a->m)
	{
		case M_DLOCK:
			db_prepare(c->conn, "lk", "SELECT dlock.try_lock($1, $2, '30s')", 2);
			db_prepare(c->conn, "ul", "SELECT dlock.unlock($1, $2)", 2);
			break;
		case M_ADVISORY:
			snprintf(nm->resource, sizeof(nm->resource), "%d", 100000 + c->id);
			db_prepare(c->conn, "lk", "SELECT pg_advisory_lock($1::bigint)", 1);
			db_prepare(c->conn, "ul", "SELECT pg_advisory_unlock($1::bigint)", 1);
			break;
		case M_NAIVE:
			db_prepare(c->conn, "lk",
					   "INSERT INTO naive VALUES ($1, $2, now() + '30s') "
					   "ON CONFLICT (resource) DO UPDATE "
					   "SET holder = excluded.holder, expires_at = excluded.expires_at "
					   "WHERE naive.expires_at < now()", 2);
			db_prepare(c->conn, "ul",
					   "DELETE FROM naive WHERE resource = $1 AND holder = $2", 2);
			break;
		default:
			break;
	}
}

/* redis_expect: run a Redis command and check its reply. */
static void
redis_expect(int fd, int argc, const char *const *argv, const char *expect)
{
	char	   *reply = redis_cmd(fd, argc, argv);

	if (strcmp(reply, expect) != 0)
		die("redis %s %s returned \"%s\", expected \"%s\"", argv[0], argv[1],
			reply, expect);
	free(reply);
}

/* pair_op: one lock + unlock pair. */
static void
pair_op(Client *c)
{
	PairArg    *a = c->arg;
	PairNames  *nm = c->priv;
	const char *p[2] = {nm->resource, nm->holder};

	switch (a->m)
	{
		case M_DLOCK:
			db_run_expect(c->conn, "lk", 2, p, "*");
			db_run_expect(c->conn, "ul", 2, p, "0");
			break;
		case M_ADVISORY:
			db_run_expect(c->conn, "lk", 1, p, NULL);
			db_run_expect(c->conn, "ul", 1, p, "t");
			break;
		case M_NAIVE:
			db_run_expect(c->conn, "lk", 2, p, "1");
			db_run_expect(c->conn, "ul", 2, p, "1");
			break;
		case M_REDIS:
			{
				const char *set[] = {"SET", nm->resource, nm->holder, "NX", "PX", "30000"};
				const char *del[] = {"EVALSHA", a->sha, "1", nm->resource, nm->holder};

				redis_expect(c->fd, 6, set, "OK");
				redis_expect(c->fd, 5, del, "1");
			}
			break;
		default:
			break;
	}
}

/* pair_teardown: close the client's connection. */
static void
pair_teardown(Client *c)
{
	if (c->conn)
		PQfinish(c->conn);
	if (c->fd >= 0)
		redis_close(c->fd);
}

/*
 * pairs_run_prefix: nclients clients doing method m's pairs on their own
 * resources (prefix names them) for warmup + measure seconds.
 */
static void
pairs_run_prefix(Method m, const char *prefix, int nclients, double warmup,
				 double measure, RunResult *res)
{
	PairArg		a;
	RunSpec		spec;
	char		label[64];

	memset(&a, 0, sizeof(a));
	a.m = m;
	a.prefix = prefix;
	if (m == M_REDIS)
	{
		int			fd = redis_connect(opt.redis_port);
		const char *load[] = {"SCRIPT", "LOAD", redis_unlock_lua};
		char	   *sha = redis_cmd(fd, 3, load);

		snprintf(a.sha, sizeof(a.sha), "%s", sha);
		free(sha);
		redis_close(fd);
	}
	snprintf(label, sizeof(label), "%s x%d", method_name[m], nclients);
	memset(&spec, 0, sizeof(spec));
	spec.label = label;
	spec.nclients = nclients;
	spec.arg = &a;
	spec.setup = pair_setup;
	spec.op = pair_op;
	spec.teardown = pair_teardown;
	spec.warmup_s = warmup;
	spec.measure_s = measure;
	harness_run(&spec, res);
}

/* pairs_run: the standard pair run (resources "pair/<client>"). */
void
pairs_run(Method m, int nclients, double warmup, double measure,
		  RunResult *res)
{
	pairs_run_prefix(m, "pair", nclients, warmup, measure, res);
}

/*
 * wal_counters: pg_stat_wal's sync count and byte count now.  Backends
 * flush their WAL statistics when they exit, so callers read this after
 * the clients have disconnected (and a moment more).
 */
static void
wal_counters(PGconn *conn, double *syncs, double *bytes)
{
	PGresult   *r = PQexec(conn, "SELECT wal_sync, wal_bytes FROM pg_stat_wal");

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		die("reading pg_stat_wal failed: %s", PQerrorMessage(conn));
	*syncs = atof(PQgetvalue(r, 0, 0));
	*bytes = atof(PQgetvalue(r, 0, 1));
	PQclear(r);
}

/* bench_pairs: measurement 1 for every method and client count. */
void
bench_pairs(void)
{
	PGconn	   *mon = db_connect();
	int			m,
				i;

	for (m = 0; m < NUM_METHODS; m++)
	{
		if (m == M_REDIS && opt.redis_port == 0)
		{
			progress("pairs: no Redis server given (redis-server not installed?): Redis reference skipped");
			continue;
		}
		for (i = 0; i < NCLIENT_COUNTS; i++)
		{
			RunResult	r;
			int			n = client_counts[i];

			double		syncs0,
						bytes0,
						syncs1,
						bytes1;

			progress("pairs: %s, %d client%s ...", method_name[m], n, n > 1 ? "s" : "");
			wal_counters(mon, &syncs0, &bytes0);
			pairs_run((Method) m, n, opt.warmup_s, opt.measure_s, &r);
			sleep_s(opt.quick ? 0.1 : 0.3); /* exiting backends flush their statistics */
			wal_counters(mon, &syncs1, &bytes1);
			fig.pairs_wal_syncs[m][i] = (syncs1 - syncs0) / r.all_ops;
			fig.pairs_wal_bytes[m][i] = (bytes1 - bytes0) / r.all_ops;
			fig.pairs_done[m][i] = true;
			fig.pairs_rate[m][i] = r.rate;
			fig.pairs_p50[m][i] = samples_pct(&r.lat, 50);
			fig.pairs_p99[m][i] = samples_pct(&r.lat, 99);
			progress("pairs: %s, %d client%s: %.0f pairs/s (p50 %.0f us, p99 %.0f us; "
					 "%.2f WAL syncs, %.0f WAL bytes a pair)",
					 method_name[m], n, n > 1 ? "s" : "", r.rate,
					 fig.pairs_p50[m][i], fig.pairs_p99[m][i],
					 fig.pairs_wal_syncs[m][i], fig.pairs_wal_bytes[m][i]);
			report_pairs_row(method_name[m], n, &r, fig.pairs_wal_syncs[m][i],
							 fig.pairs_wal_bytes[m][i]);
			run_free(&r);
		}
	}
	PQfinish(mon);
}
