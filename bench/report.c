/*
 * report.c: the output of dlock_bench.  Raw CSV files are written as the
 * measurements go (samples.csv, pairs.csv, hot_clients.csv, figures.csv);
 * at the end the summary tables for the plots (pairs_table.csv,
 * hot_table.csv) and results.md: the machine, the figures and every goal
 * of issue 5 marked met or not met, computed from this one run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

Figures		fig;
double		load_start[3];

static FILE *f_samples,
		   *f_pairs,
		   *f_hot_clients,
		   *f_figures;

/* open_out: open a file in the output directory for writing. */
static FILE *
open_out(const char *name)
{
	char		path[1024];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s", opt.outdir, name);
	f = fopen(path, "w");
	if (f == NULL)
		die("cannot write %s: %m", path);
	return f;
}

/* report_csv_open: create the raw CSV files with their headers. */
void
report_csv_open(void)
{
	f_samples = open_out("samples.csv");
	fprintf(f_samples, "test,method,clients,value\n");
	f_pairs = open_out("pairs.csv");
	fprintf(f_pairs, "method,clients,seconds,pairs,pairs_per_s,p50_us,p99_us,max_us,"
			"wal_syncs_per_pair,wal_bytes_per_pair\n");
	f_hot_clients = open_out("hot_clients.csv");
	fprintf(f_hot_clients, "method,contenders,client,acquisitions,wait_mean_us,wait_max_us\n");
	f_figures = open_out("figures.csv");
	fprintf(f_figures, "figure,value,unit\n");
}

/* report_pairs_row: one pair run. */
void
report_pairs_row(const char *method, int clients, RunResult *r,
				 double wal_syncs, double wal_bytes)
{
	fprintf(f_pairs, "%s,%d,%.3f,%ld,%.1f,%.1f,%.1f,%.1f,%.3f,%.0f\n", method, clients,
			r->seconds, r->ops, r->rate, samples_pct(&r->lat, 50),
			samples_pct(&r->lat, 99), samples_max(&r->lat), wal_syncs, wal_bytes);
	fflush(f_pairs);
}

/* report_sample_rows: every sample of one measurement. */
void
report_sample_rows(const char *test, const char *method, int clients, Samples *s)
{
	size_t		i;

	for (i = 0; i < s->n; i++)
		fprintf(f_samples, "%s,%s,%d,%.1f\n", test, method, clients, s->v[i]);
	fflush(f_samples);
}

/* report_hot_clients: per-client acquisitions and waits of a hot run. */
void
report_hot_clients(const char *method, int contenders, const RunResult *r)
{
	int			i;

	for (i = 0; i < r->nclients; i++)
	{
		const Client *c = &r->clients[i];

		fprintf(f_hot_clients, "%s,%d,%d,%ld,%.1f,%.1f\n", method, contenders, i,
				c->ops, samples_mean(&c->wait), samples_max(&c->wait));
	}
	fflush(f_hot_clients);
}

/* report_figure: one named figure. */
void
report_figure(const char *what, double value, const char *unit)
{
	fprintf(f_figures, "%s,%.3f,%s\n", what, value, unit);
	fflush(f_figures);
}

/* write_tables: the summary CSVs the plots read. */
static void
write_tables(void)
{
	FILE	   *f = open_out("pairs_table.csv");
	int			i,
				m;

	fprintf(f, "clients");
	for (m = 0; m < NUM_METHODS; m++)
		fprintf(f, ",%s", method_name[m]);
	fprintf(f, "\n");
	for (i = 0; i < NCLIENT_COUNTS; i++)
	{
		fprintf(f, "%d", client_counts[i]);
		for (m = 0; m < NUM_METHODS; m++)
			if (fig.pairs_done[m][i])
				fprintf(f, ",%.1f", fig.pairs_rate[m][i]);
			else
				fprintf(f, ",NaN");
		fprintf(f, "\n");
	}
	fclose(f);

	f = open_out("hot_table.csv");
	fprintf(f, "contenders,dlock,advisory,dlock_p50_us,advisory_p50_us,dlock_p99_us,"
			"advisory_p99_us,dlock_switch,advisory_switch,dlock_wait_max_mean,"
			"advisory_wait_max_mean,dlock_acq_max_mean,advisory_acq_max_mean\n");
	for (i = 0; i < NHOT; i++)
		fprintf(f, "%d,%.1f,%.1f,%.0f,%.0f,%.0f,%.0f,%.3f,%.3f,%.2f,%.2f,%.3f,%.3f\n",
				hot_counts[i], fig.hot_rate[0][i], fig.hot_rate[1][i],
				fig.hot_p50[0][i], fig.hot_p50[1][i], fig.hot_p99[0][i],
				fig.hot_p99[1][i], fig.hot_switch[0][i], fig.hot_switch[1][i],
				fig.hot_wait_max_mean[0][i], fig.hot_wait_max_mean[1][i],
				fig.hot_acq_max_mean[0][i], fig.hot_acq_max_mean[1][i]);
	fclose(f);
}

/* cpu_model: the first "model name" of /proc/cpuinfo. */
static void
cpu_model(char *buf, size_t size)
{
	FILE	   *f = fopen("/proc/cpuinfo", "r");
	char		line[512];

	snprintf(buf, size, "unknown");
	if (f == NULL)
		return;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "model name", 10) == 0)
		{
			char	   *p = strchr(line, ':');

			if (p)
			{
				snprintf(buf, size, "%s", p + 2);
				buf[strcspn(buf, "\n")] = '\0';
			}
			break;
		}
	fclose(f);
}

/* mem_total_gib: MemTotal of /proc/meminfo in GiB. */
static double
mem_total_gib(void)
{
	FILE	   *f = fopen("/proc/meminfo", "r");
	long		kb = 0;

	if (f == NULL)
		return 0;
	if (fscanf(f, "MemTotal: %ld kB", &kb) != 1)
		kb = 0;
	fclose(f);
	return kb / 1048576.0;
}

/* Goal status counts for the summary line. */
static int	goals_met,
			goals_missed,
			goals_unknown;

/*
 * goal: one row of the goals table.  known = false when the measurement
 * did not run (then neither met nor missed).
 */
static void
goal(FILE *f, const char *id, const char *target, const char *measured,
	 bool known, bool met)
{
	const char *status = !known ? "not measured" : met ? "**met**" : "**NOT MET**";

	if (!known)
		goals_unknown++;
	else if (met)
		goals_met++;
	else
		goals_missed++;
	fprintf(f, "| %s | %s | %s | %s |\n", id, target, measured, status);
}

/* write_goals: the goals of issue 5, each checked on this run's figures. */
static void
write_goals(FILE *f)
{
	char		m[256];
	int			i;
	double		r;

	fprintf(f, "## Goals\n\n| goal | target | measured | status |\n|---|---|---|---|\n");
	for (i = 0; i < 2; i++)
	{
		char		id[32];
		bool		known = fig.pairs_done[M_DLOCK][i] && fig.pairs_done[M_NAIVE][i];

		r = fig.pairs_rate[M_DLOCK][i] / fig.pairs_rate[M_NAIVE][i];
		snprintf(id, sizeof(id), "P1 (%d client%s)", client_counts[i], i ? "s" : "");
		snprintf(m, sizeof(m), "%.2fx (%.0f vs %.0f pairs/s)", r,
				 fig.pairs_rate[M_DLOCK][i], fig.pairs_rate[M_NAIVE][i]);
		goal(f, id, "dlock pairs/s >= 1.5x naive", m, known, r >= 1.5);
	}
	r = fig.hot_rate[0][0] / fig.hot_rate[1][0];
	snprintf(m, sizeof(m), "%.3fx (%.0f vs %.0f acquisitions/s)", r,
			 fig.hot_rate[0][0], fig.hot_rate[1][0]);
	goal(f, "P2", "hot resource, 8 contenders: >= 0.3x advisory", m,
		 fig.hot_done[0][0] && fig.hot_done[1][0], r >= 0.3);
	r = fig.hot_wait_max_mean[2][NHOT - 1];
	snprintf(m, sizeof(m), "%.2f (unfair %.2f, advisory %.2f)", r,
			 fig.hot_wait_max_mean[0][NHOT - 1], fig.hot_wait_max_mean[1][NHOT - 1]);
	goal(f, "F1", "fair, 32 contenders: max/mean wait <= 1.5", m,
		 fig.hot_done[2][NHOT - 1], r <= 1.5);
	for (i = 0; i < NHOT; i++)
	{
		char		id[32];

		r = fig.hot_rate[2][i] / fig.hot_rate[0][i];
		snprintf(id, sizeof(id), "F2 (%d contenders)", hot_counts[i]);
		snprintf(m, sizeof(m), "%.2fx (%.0f vs %.0f acquisitions/s)", r,
				 fig.hot_rate[2][i], fig.hot_rate[0][i]);
		goal(f, id, "fair >= 0.8x unfair handoffs/s", m,
			 fig.hot_done[2][i] && fig.hot_done[0][i], r >= 0.8);
	}

	snprintf(m, sizeof(m), "%.2f ms", fig.rw_p50[0] / 1000);
	goal(f, "P3 p50", "release -> waiter p50 <= 1 ms", m, fig.rw_done[0],
		 fig.rw_p50[0] <= 1000);
	snprintf(m, sizeof(m), "%.2f ms", fig.rw_p99[0] / 1000);
	goal(f, "P3 p99", "release -> waiter p99 <= 5 ms", m, fig.rw_done[0],
		 fig.rw_p99[0] <= 5000);
	r = fig.rw_p50[0] / fig.rw_p50[1];
	snprintf(m, sizeof(m), "p50 %.1fx (%.0f vs %.0f us)", r, fig.rw_p50[0], fig.rw_p50[1]);
	goal(f, "P3 vs advisory (p50)", "<= 3x advisory", m,
		 fig.rw_done[0] && fig.rw_done[1], r <= 3);
	r = fig.rw_p99[0] / fig.rw_p99[1];
	snprintf(m, sizeof(m), "p99 %.1fx (%.0f vs %.0f us)", r, fig.rw_p99[0], fig.rw_p99[1]);
	goal(f, "P3 vs advisory (p99)", "<= 3x advisory", m,
		 fig.rw_done[0] && fig.rw_done[1], r <= 3);

	snprintf(m, sizeof(m), "p99 %.2f ms late (p50 %.2f, max %.2f; %d runs)",
			 fig.tk_p99, fig.tk_p50, fig.tk_max, fig.tk_runs);
	goal(f, "P4", "expiry takeover p99 <= 20 ms late", m, fig.tk_done, fig.tk_p99 <= 20);

	snprintf(m, sizeof(m), "%.2f%% of a core (schedstat %.3f%%; %d waiters, %.1f s)",
			 fig.idle_pct[0], fig.idle_pct_ns[0], fig.idle_n, fig.idle_seconds);
	goal(f, "P5", "100 idle waiters < 2% of a core", m, fig.idle_done,
		 fig.idle_pct[0] < 2 && fig.idle_pct_ns[0] < 2);

	r = fig.scale_large_rate / fig.scale_small_rate;
	snprintf(m, sizeof(m), "%.2fx (%.0f vs %.0f pairs/s)", r,
			 fig.scale_large_rate, fig.scale_small_rate);
	{
		char		target[128];

		snprintf(target, sizeof(target), "%ld held leases: pair rate >= 0.8x rate at %ld",
				 fig.scale_large_n, fig.scale_small_n);
		goal(f, "P6 scale", target, m, fig.scale_done, r >= 0.8);
		snprintf(target, sizeof(target), "reap %ld expired with reap() <= 2 s", fig.reap_n);
		snprintf(m, sizeof(m), "%.2f s (%d calls)", fig.reap_call_s, fig.reap_calls);
		goal(f, "P6 reap()", target, m, fig.scale_done, fig.reap_call_s <= 2);
		snprintf(m, sizeof(m), "%.2f ms (baseline %.2f ms)", fig.reap_call_acq_p99 / 1000,
				 fig.base_acq_p99 / 1000);
		goal(f, "P6 reap() acquirers", "acquirers' try_lock p99 <= 10 ms meanwhile", m,
			 fig.scale_done, fig.reap_call_acq_p99 <= 10000);
		snprintf(target, sizeof(target), "reap %ld expired by the worker <= 2 s", fig.reap_n);
		snprintf(m, sizeof(m), "%.2f s", fig.reap_worker_s);
		goal(f, "P6 worker", target, m, fig.scale_done, fig.reap_worker_s <= 2);
		snprintf(m, sizeof(m), "%.2f ms", fig.reap_worker_acq_p99 / 1000);
		goal(f, "P6 worker acquirers", "acquirers' try_lock p99 <= 10 ms meanwhile", m,
			 fig.scale_done, fig.reap_worker_acq_p99 <= 10000);
	}
	snprintf(m, sizeof(m), "%.2f ms (p99 %.2f ms, %d samples)", fig.el_resign_p50 / 1000,
			 fig.el_resign_p99 / 1000, fig.el_resign_n);
	goal(f, "E1", "resign -> next leader elected p50 <= 5 ms", m, fig.el_resign_done,
		 fig.el_resign_p50 <= 5000);
	fprintf(f, "\n%d met, %d not met, %d not measured.%s\n\n", goals_met, goals_missed,
			goals_unknown, opt.quick ? " (--quick: a smoke run, the figures are not "
			"meaningful)" : "");
}

/* write_pairs: table of measurement 1. */
static void
write_pairs(FILE *f)
{
	int			m,
				i;

	fprintf(f, "## 1. Uncontended lock+unlock pairs per second\n\n"
			"Each client locks and unlocks its own resource; pair latency p50 / p99 in us.\n\n"
			"| method |");
	for (i = 0; i < NCLIENT_COUNTS; i++)
		fprintf(f, " %d client%s |", client_counts[i], i ? "s" : "");
	fprintf(f, "\n|---|");
	for (i = 0; i < NCLIENT_COUNTS; i++)
		fprintf(f, "---|");
	fprintf(f, "\n");
	for (m = 0; m < NUM_METHODS; m++)
	{
		fprintf(f, "| %s |", method_name[m]);
		for (i = 0; i < NCLIENT_COUNTS; i++)
			if (fig.pairs_done[m][i])
				fprintf(f, " %.0f/s (%.0f / %.0f) |", fig.pairs_rate[m][i],
						fig.pairs_p50[m][i], fig.pairs_p99[m][i]);
			else
				fprintf(f, " skipped |");
		fprintf(f, "\n");
	}
	fprintf(f, "\nWAL flushes (pg_stat_wal.wal_sync, all processes) and WAL bytes per pair, "
			"which is what the durable methods pay for:\n\n| method |");
	for (i = 0; i < NCLIENT_COUNTS; i++)
		fprintf(f, " %d client%s |", client_counts[i], i ? "s" : "");
	fprintf(f, "\n|---|");
	for (i = 0; i < NCLIENT_COUNTS; i++)
		fprintf(f, "---|");
	fprintf(f, "\n");
	for (m = 0; m < M_REDIS; m++)
	{
		fprintf(f, "| %s |", method_name[m]);
		for (i = 0; i < NCLIENT_COUNTS; i++)
			if (fig.pairs_done[m][i])
				fprintf(f, " %.2f syncs, %.0f B |", fig.pairs_wal_syncs[m][i],
						fig.pairs_wal_bytes[m][i]);
			else
				fprintf(f, " skipped |");
		fprintf(f, "\n");
	}
	fprintf(f, "\n");
}

/* write_contention: tables of measurements 2 to 5. */
static void
write_contention(FILE *f)
{
	int			m,
				i;

	fprintf(f, "## 2. One hot resource\n\n"
			"Each contender loops lock / 50 us busy critical section / unlock. "
			"\"to another\": share of acquisitions that went to another client than the "
			"previous one.\n\n"
			"| method | contenders | acquisitions/s | to another | wait p50 | wait p99 | "
			"max/mean wait | max/mean acquisitions |\n|---|---|---|---|---|---|---|---|\n");
	for (i = 0; i < NHOT; i++)
		for (m = 0; m < 3; m++)
			if (fig.hot_done[m][i])
				fprintf(f, "| %s | %d | %.0f | %.0f%% | %.2f ms | %.2f ms | %.1f | %.2f |\n",
						m == 1 ? "advisory" : m == 2 ? "dlock fair" : "dlock",
						hot_counts[i], fig.hot_rate[m][i],
						100 * fig.hot_switch[m][i], fig.hot_p50[m][i] / 1000,
						fig.hot_p99[m][i] / 1000, fig.hot_wait_max_mean[m][i],
						fig.hot_acq_max_mean[m][i]);
	fprintf(f, "\n## 3. Release -> waiter holds it\n\n| method | p50 | p99 |\n|---|---|---|\n");
	for (m = 0; m < 2; m++)
		if (fig.rw_done[m])
			fprintf(f, "| %s | %.0f us | %.0f us |\n", m ? "advisory" : "dlock",
					fig.rw_p50[m], fig.rw_p99[m]);
	fprintf(f, "\n## 4. Takeover after lease expiry (200 ms lease)\n\n");
	if (fig.tk_done)
		fprintf(f, "Waiter's lock() returned after expires_at by p50 %.2f ms, p99 %.2f ms, "
				"max %.2f ms (%d runs, server clock).\n\n", fig.tk_p50, fig.tk_p99,
				fig.tk_max, fig.tk_runs);
	fprintf(f, "## 5. Idle waiters\n\n");
	if (fig.idle_done)
		fprintf(f, "%d backends blocked for %.1f s.\n\n"
				"| waiting in | CPU, utime+stime | CPU, schedstat | wakeups a waiter a second |\n"
				"|---|---|---|---|\n"
				"| dlock.lock() | %.3f%% of one core | %.3f%% | %.2f |\n"
				"| pg_advisory_lock() | %.3f%% of one core | %.3f%% | %.2f |\n\n",
				fig.idle_n, fig.idle_seconds, fig.idle_pct[0], fig.idle_pct_ns[0],
				fig.idle_wakeups[0], fig.idle_pct[1], fig.idle_pct_ns[1],
				fig.idle_wakeups[1]);
}

/* write_scale: table of measurement 6. */
static void
write_scale(FILE *f)
{
	if (!fig.scale_done)
		return;
	fprintf(f, "## 6. Scale\n\n| figure | value |\n|---|---|\n"
			"| 1-client pairs/s, %ld held leases | %.0f (reaper meanwhile: %.1f%% of a core) |\n"
			"| 1-client pairs/s, %ld held leases | %.0f (reaper meanwhile: %.1f%% of a core) |\n"
			"| time to insert the extra leases (INSERT ... SELECT) | %.1f s |\n"
			"| reap %ld expired, dlock.reap() loop | %.2f s (%d calls) |\n"
			"| acquirers' try_lock p99 / pair p99 meanwhile | %.2f ms / %.2f ms |\n"
			"| reap %ld expired, background worker | %.2f s |\n"
			"| acquirers' try_lock p99 / pair p99 meanwhile | %.2f ms / %.2f ms |\n"
			"| acquirers' try_lock p99 / pair p99, nothing reaping | %.2f ms / %.2f ms |\n\n",
			fig.scale_small_n, fig.scale_small_rate, fig.reaper_cpu_small,
			fig.scale_large_n, fig.scale_large_rate, fig.reaper_cpu_large, fig.fill_s, fig.reap_n, fig.reap_call_s,
			fig.reap_calls, fig.reap_call_acq_p99 / 1000, fig.reap_call_pair_p99 / 1000,
			fig.reap_n, fig.reap_worker_s, fig.reap_worker_acq_p99 / 1000,
			fig.reap_worker_pair_p99 / 1000, fig.base_acq_p99 / 1000,
			fig.base_pair_p99 / 1000);
}

/* write_elect: tables of measurement 7. */
static void
write_elect(FILE *f)
{
	int			t,
				q;

	if (!fig.el_resign_done && !fig.el_kill_done)
		return;
	fprintf(f, "## 7. Leader election\n\n| handoff | p50 | p99 | max | samples |\n"
			"|---|---|---|---|---|\n");
	if (fig.el_resign_done)
		fprintf(f, "| resign -> waiting campaign() returns | %.2f ms | %.2f ms | %.2f ms | %d |\n",
				fig.el_resign_p50 / 1000, fig.el_resign_p99 / 1000,
				fig.el_resign_max / 1000, fig.el_resign_n);
	if (fig.el_kill_done)
	{
		fprintf(f, "| killed leader (500 ms lease): elected after the lease end "
				"(server clock) | %.2f ms | %.2f ms | %.2f ms | %d |\n",
				fig.el_kill_late_p50, fig.el_kill_late_p99, fig.el_kill_late_max,
				fig.el_kill_n);
		fprintf(f, "| killed leader: elected after the kill (client clock) | %.0f ms | "
				"%.0f ms | | %d |\n", fig.el_kill_since_p50, fig.el_kill_since_p99,
				fig.el_kill_n);
	}
	for (t = 0; t < 2; t++)
		for (q = 0; q < 2; q++)
			if (fig.el_cli_done[t][q])
				fprintf(f, "| `%s elect`, %d queued: %s "
						"(%d over 1 s; %d not to the first queued) | %.1f ms | %.1f ms | "
						"%.1f ms | %d |\n",
						t ? "etcdctl" : "dlock", q + 1,
						t ? "SIGINT to the leader's etcdctl -> the next etcdctl prints its key"
						: "leader's COMMAND exits -> the next one's COMMAND starts",
						fig.el_cli_over1s[t][q], fig.el_cli_unordered[t][q], fig.el_cli_p50[t][q], fig.el_cli_p99[t][q],
						fig.el_cli_max[t][q], fig.el_cli_n[t][q]);
	fprintf(f, "\n");
}

/* report_write: the summary tables and results.md. */
void
report_write(PGconn *conn, double total_s)
{
	FILE	   *f;
	char		cpu[256];
	char		when[64];
	struct utsname u;
	time_t		t = time(NULL);
	char	   *version = db_value(conn, "SHOW server_version");
	char	   *ext = db_value(conn, "SELECT extversion FROM pg_extension WHERE extname = 'dlock'");
	char	   *settings = db_value(conn,
									"SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ', '"
									" ORDER BY name) FROM pg_settings WHERE name IN ('fsync',"
									" 'synchronous_commit', 'wal_sync_method', 'shared_buffers',"
									" 'max_connections', 'dlock.reap_interval', 'full_page_writes',"
									" 'track_wal_io_timing')");

	double		load_end[3] = {0, 0, 0};

	if (getloadavg(load_end, 3) != 3)
		load_end[0] = load_end[1] = load_end[2] = NAN;
	char	   *wal = db_value(conn,
							   "SELECT format('%s WAL flushes, %s ms each on average (wal_sync_time; "
							   "needs track_wal_io_timing)', wal_sync,"
							   " round((wal_sync_time / nullif(wal_sync, 0))::numeric, 3))"
							   " FROM pg_stat_wal");

	write_tables();
	cpu_model(cpu, sizeof(cpu));
	uname(&u);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", localtime(&t));

	f = open_out("results.md");
	fprintf(f, "# dlock benchmark results\n\n"
			"- run: %s, `bench/run.sh%s%s%s`, %.0f s\n"
			"- machine: %ld CPUs (%s), %.1f GiB RAM, Linux %s\n"
			"- load average (1/5/15 min) at the start %.2f %.2f %.2f, at the end %.2f %.2f %.2f "
			"(other work on the machine skews the figures)\n"
			"- PostgreSQL %s, dlock %s; %s\n"
			"- this run: %s\n"
			"- extension: %s\n"
			"- clients: libpq over the Unix socket, one thread and connection each; "
			"Redis over TCP 127.0.0.1\n\n",
			when, opt.quick ? " --quick" : "", opt.only ? " --only " : "",
			opt.only ? opt.only : "", total_s,
			sysconf(_SC_NPROCESSORS_ONLN), cpu, mem_total_gib(), u.release,
			load_start[0], load_start[1], load_start[2], load_end[0], load_end[1],
			load_end[2], version, ext, settings, wal,
			getenv("DLOCK_BENCH_NOTE") ? getenv("DLOCK_BENCH_NOTE") : "(not given)");
	write_goals(f);
	write_pairs(f);
	write_contention(f);
	write_scale(f);
	write_elect(f);
	write_shared(f);
	write_sessions(f);
	fprintf(f, "Raw data: samples.csv (every latency sample), pairs.csv, hot_clients.csv, "
			"figures.csv; plots: *.png.\n");
	fclose(f);
	free(version);
	free(ext);
	free(settings);
	free(wal);
}

/* report_close: close the raw CSV files. */
void
report_close(void)
{
	fclose(f_samples);
	fclose(f_pairs);
	fclose(f_hot_clients);
	fclose(f_figures);
}
