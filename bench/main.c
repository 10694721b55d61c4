/*
 * main.c: dlock_bench, the benchmark client of bench/run.sh.
 *
 *   dlock_bench -d CONNINFO -o OUTDIR [--redis-port N] [--quick]
 *               [--only pairs,hot,release,takeover,idle,scale,elect,shared,sessions]
 *               [--dlock-cli PATH] [--etcd-endpoint HOST:PORT] [--portable]
 *
 * Runs the measurements of issue 5 in order against a server that has
 * dlock installed (and preloaded: the waits, the worker and dlock.stats()
 * need it), prints progress on stderr and writes CSV files and results.md
 * into OUTDIR.  --quick is a smoke run of a few seconds.  It changes the
 * server's dlock.reap_interval (ALTER SYSTEM) while reaping and expects a
 * throwaway cluster: run.sh makes one.  The election measurement runs
 * `dlock elect` from --dlock-cli and, given --etcd-endpoint, `etcdctl
 * elect` against that etcd.  --portable: the database has the portable
 * edition (no CREATE EXTENSION; give --only sessions); only sessions.md is
 * written.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

Options		opt;

/* usage: the synopsis, then exit with status. */
static void
usage(int status)
{
	fprintf(status ? stderr : stdout,
			"usage: dlock_bench -d CONNINFO -o OUTDIR [--redis-port N] [--quick]\n"
			"                   [--only pairs,hot,release,takeover,idle,scale,elect,shared,sessions]\n"
			"                   [--dlock-cli PATH] [--etcd-endpoint HOST:PORT] [--portable]\n");
	exit(status);
}

/* set_defaults: the full run, or the smoke run with --quick. */
static void
set_defaults(bool quick)
{
	opt.quick = quick;
	if (quick)
	{
		opt.warmup_s = 0.1;
		opt.measure_s = 0.3;
		opt.rw_samples = 20;
		opt.takeover_runs = 5;
		opt.idle_s = 0.5;
		opt.idle_waiters = 20;
		opt.scale_small = 1000;
		opt.scale_large = 20000;
		opt.reap_count = 5000;
		opt.elect_handoffs = 5;
	}
	else
	{
		opt.warmup_s = 1;
		opt.measure_s = 8;
		opt.rw_samples = 300;
		opt.takeover_runs = 50;
		opt.idle_s = 10;
		opt.idle_waiters = 100;
		opt.scale_small = 1000;
		opt.scale_large = 1000000;
		opt.reap_count = 100000;
		opt.elect_handoffs = 30;
	}
}

/* wanted: is measurement name selected by --only (all when not given)? */
static bool
wanted(const char *only, const char *name)
{
	const char *p = only;
	size_t		len = strlen(name);

	if (only == NULL)
		return true;
	while ((p = strstr(p, name)) != NULL)
	{
		if ((p == only || p[-1] == ',') && (p[len] == '\0' || p[len] == ','))
			return true;
		p += len;
	}
	return false;
}

/* main: parse options, prepare the database, run the measurements. */
int
main(int argc, char **argv)
{
	static struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"out", required_argument, NULL, 'o'},
		{"redis-port", required_argument, NULL, 'r'},
		{"quick", no_argument, NULL, 'q'},
		{"only", required_argument, NULL, 'O'},
		{"dlock-cli", required_argument, NULL, 'C'},
		{"etcd-endpoint", required_argument, NULL, 'E'},
		{"portable", no_argument, NULL, 'P'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	const char *only = NULL;
	bool		quick = false;
	PGconn	   *conn;
	double		t0 = now_s();
	int			c;

	while ((c = getopt_long(argc, argv, "d:o:qh", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				opt.conninfo = optarg;
				break;
			case 'o':
				opt.outdir = optarg;
				break;
			case 'r':
				opt.redis_port = atoi(optarg);
				break;
			case 'q':
				quick = true;
				break;
			case 'O':
				only = optarg;
				break;
			case 'C':
				opt.dlock_cli = optarg;
				break;
			case 'E':
				opt.etcd_endpoint = optarg;
				break;
			case 'P':
				opt.portable = true;
				break;
			case 'h':
				usage(0);
				break;
			default:
				usage(2);
		}
	}
	if (opt.conninfo == NULL || opt.outdir == NULL || optind < argc)
		usage(2);
	set_defaults(quick);
	if (opt.portable && only == NULL)
		only = "sessions";
	opt.only = only;
	if (getloadavg(load_start, 3) != 3)
		load_start[0] = load_start[1] = load_start[2] = -1;

	conn = db_connect();
	db_exec(conn, "SET client_min_messages = warning");
	if (!opt.portable)
	{
		db_exec(conn, "CREATE EXTENSION IF NOT EXISTS dlock");
		pairs_setup_schema(conn);
	}
	report_csv_open();
	progress("dlock_bench: %s run", quick ? "quick (smoke)" : "full");

	if (wanted(only, "pairs"))
		bench_pairs();
	if (wanted(only, "hot"))
		bench_hot();
	if (wanted(only, "release"))
		bench_release();
	if (wanted(only, "takeover"))
		bench_takeover();
	if (wanted(only, "idle"))
		bench_idle();
	if (wanted(only, "scale"))
		bench_scale();
	if (wanted(only, "elect"))
		bench_elect();
	if (wanted(only, "shared"))
		bench_shared();
	if (wanted(only, "sessions"))
		bench_sessions();

	if (!opt.portable)			/* --portable: sessions.md only */
		report_write(conn, now_s() - t0);
	report_close();
	PQfinish(conn);
	progress("dlock_bench: done, results in %s/results.md", opt.outdir);
	return 0;
}
