/*
 * shared.c: measurement 8, shared-lock pairs on one resource.
 * Every client takes a shared lock on the SAME resource and releases it,
 * so readers never wait for each other and what is measured is the cost
 * of a shared acquisition and release while other readers hold it too:
 *
 *   dlock shared     SELECT dlock.try_lock('shared/one', $1, '30s', shared => true);
 *                    SELECT dlock.unlock('shared/one', $1)
 *   advisory shared  SELECT pg_advisory_lock_shared(42);
 *                    SELECT pg_advisory_unlock_shared(42)
 *
 * Each client is its own holder.  Rounds alternate the two methods at 1
 * and 8 clients (three rounds in a full run); the ratio dlock/advisory is
 * taken per round, so a change of load during the run moves both.  Every
 * result is checked: a shared try_lock that returns NULL (another reader
 * must never keep a reader out) ends the run.  Skipped when the installed
 * extension has no shared locks (before 0.4).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SHARED_METHODS 2
#define SHARED_COUNTS 2
#define SHARED_MAX_ROUNDS 3

static const char *shared_method[SHARED_METHODS] = {"dlock shared", "advisory shared"};
static const int shared_clients[SHARED_COUNTS] = {1, 8};

/* What the rounds measured, for results.md. */
static struct
{
	bool		done;
	int			rounds;
	double		rate[SHARED_MAX_ROUNDS][SHARED_METHODS][SHARED_COUNTS];
	double		p99[SHARED_MAX_ROUNDS][SHARED_METHODS][SHARED_COUNTS];
} sh;

/* shared_setup: connect and prepare this client's statements. */
static void
shared_setup(Client *c)
{
	int		   *m = c->arg;
	char	   *holder = calloc(1, 32);

	if (holder == NULL)
		die("out of memory");
	snprintf(holder, 32, "reader:%d", c->id);
	c->priv = holder;
	c->conn = db_connect();
	if (*m == 0)
	{
		db_prepare(c->conn, "lk",
				   "SELECT dlock.try_lock('shared/one', $1, '30s', shared => true)", 1);
		db_prepare(c->conn, "ul", "SELECT dlock.unlock('shared/one', $1)", 1);
	}
	else
	{
		db_prepare(c->conn, "lk", "SELECT pg_advisory_lock_shared(42)", 0);
		db_prepare(c->conn, "ul", "SELECT pg_advisory_unlock_shared(42)", 0);
	}
}

/* shared_op: one shared lock + unlock pair. */
static void
shared_op(Client *c)
{
	int		   *m = c->arg;
	const char *p[1] = {c->priv};

	if (*m == 0)
	{
		db_run_expect(c->conn, "lk", 1, p, "*");
		db_run_expect(c->conn, "ul", 1, p, "0");
	}
	else
	{
		db_run_expect(c->conn, "lk", 0, NULL, NULL);
		db_run_expect(c->conn, "ul", 0, NULL, "t");
	}
}

/* shared_teardown: close the client's connection. */
static void
shared_teardown(Client *c)
{
	PQfinish(c->conn);
}

/* bench_shared: measurement 8, alternating rounds. */
void
bench_shared(void)
{
	PGconn	   *conn = db_connect();
	long		has_shared = db_long(conn,
									 "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
									 " WHERE n.nspname = 'dlock' AND p.proname = 'try_lock'"
									 " AND 'shared' = ANY (p.proargnames)");

	PQfinish(conn);
	if (has_shared == 0)
	{
		progress("shared: the installed dlock has no shared locks (before 0.4): skipped");
		return;
	}
	sh.rounds = opt.quick ? 1 : SHARED_MAX_ROUNDS;
	for (int r = 0; r < sh.rounds; r++)
		for (int i = 0; i < SHARED_COUNTS; i++)
			for (int k = 0; k < SHARED_METHODS; k++)
			{
				/* alternate which method goes first from round to round */
				int			m = (r % 2 == 0) ? k : SHARED_METHODS - 1 - k;
				int			n = shared_clients[i];
				char		label[64];
				RunSpec		spec;
				RunResult	res;

				snprintf(label, sizeof(label), "%s x%d", shared_method[m], n);
				memset(&spec, 0, sizeof(spec));
				spec.label = label;
				spec.nclients = n;
				spec.arg = &m;
				spec.setup = shared_setup;
				spec.op = shared_op;
				spec.teardown = shared_teardown;
				spec.warmup_s = opt.warmup_s;
				spec.measure_s = opt.measure_s;
				harness_run(&spec, &res);
				sh.rate[r][m][i] = res.rate;
				sh.p99[r][m][i] = samples_pct(&res.lat, 99);
				progress("shared: round %d, %s, %d client%s: %.0f pairs/s (p99 %.0f us)",
						 r + 1, shared_method[m], n, n > 1 ? "s" : "", res.rate,
						 sh.p99[r][m][i]);
				report_pairs_row(shared_method[m], n, &res, 0, 0);
				run_free(&res);
			}
	sh.done = true;
}

/* cmp_double: qsort order for the median. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/* write_shared: the table of measurement 8 (rounds and the median ratio). */
void
write_shared(FILE *f)
{
	if (!sh.done)
		return;
	fprintf(f, "## 8. Shared locks: readers of one resource\n\n"
			"Every client takes a shared lock on the same resource and releases it "
			"(dlock `try_lock(..., shared => true)` + `unlock`, each client its own "
			"holder, against `pg_advisory_lock_shared` + `pg_advisory_unlock_shared`), "
			"rounds alternating.\n\n"
			"| clients | round | dlock shared pairs/s | advisory shared pairs/s | dlock / advisory |\n"
			"|---|---|---|---|---|\n");
	for (int i = 0; i < SHARED_COUNTS; i++)
	{
		double		ratios[SHARED_MAX_ROUNDS];

		for (int r = 0; r < sh.rounds; r++)
		{
			ratios[r] = sh.rate[r][1][i] > 0 ? sh.rate[r][0][i] / sh.rate[r][1][i] : 0;
			fprintf(f, "| %d | %d | %.0f | %.0f | %.2fx |\n", shared_clients[i], r + 1,
					sh.rate[r][0][i], sh.rate[r][1][i], ratios[r]);
		}
		qsort(ratios, sh.rounds, sizeof(double), cmp_double);
		fprintf(f, "| %d | median | | | **%.2fx** |\n", shared_clients[i],
				ratios[sh.rounds / 2]);
	}
	fprintf(f, "\n");
}
