/*
 * util.c: helpers of dlock_bench: the monotonic clock, sleeping and
 * spinning, progress lines, latency samples with percentiles, and thin
 * libpq wrappers that end the program on any unexpected result (a benchmark
 * that silently measures errors is worse than none).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static double start_time = -1;

/* now_s: CLOCK_MONOTONIC in seconds. */
double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* sleep_s: sleep for s seconds (restarting after signals). */
void
sleep_s(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t) s;
	ts.tv_nsec = (long) ((s - ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* spin_s: busy-wait for s seconds (a critical section that does work). */
void
spin_s(double s)
{
	double		end = now_s() + s;

	while (now_s() < end)
		;
}

/* progress: one line on stderr, prefixed with the time since start. */
void
progress(const char *fmt,...)
{
	va_list		ap;
	char		buf[512];

	if (start_time < 0)
		start_time = now_s();
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "[%6.1fs] %s\n", now_s() - start_time, buf);
}

/* die: report a fatal error and exit (run.sh stops the cluster). */
void
die(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "dlock_bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

/* samples_add: append one value. */
void
samples_add(Samples *s, double v)
{
	if (s->n == s->cap)
	{
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->v = realloc(s->v, s->cap * sizeof(double));
		if (s->v == NULL)
			die("out of memory");
	}
	s->v[s->n++] = v;
	s->sorted = false;
}

/* samples_merge: append all of from to into. */
void
samples_merge(Samples *into, const Samples *from)
{
	size_t		i;

	for (i = 0; i < from->n; i++)
		samples_add(into, from->v[i]);
}

/* cmp_double: qsort comparator. */
static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return (x > y) - (x < y);
}

/*
 * samples_pct: the p-th percentile (0..100), nearest-rank; NAN when
 * there are no samples.
 */
double
samples_pct(Samples *s, double p)
{
	size_t		rank;

	if (s->n == 0)
		return NAN;
	if (!s->sorted)
	{
		qsort(s->v, s->n, sizeof(double), cmp_double);
		s->sorted = true;
	}
	rank = (size_t) ceil(p / 100.0 * s->n);
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return s->v[rank - 1];
}

/* samples_mean: arithmetic mean, NAN when empty. */
double
samples_mean(const Samples *s)
{
	double		sum = 0;
	size_t		i;

	if (s->n == 0)
		return NAN;
	for (i = 0; i < s->n; i++)
		sum += s->v[i];
	return sum / s->n;
}

/* samples_max: largest value, NAN when empty. */
double
samples_max(const Samples *s)
{
	double		m;
	size_t		i;

	if (s->n == 0)
		return NAN;
	m = s->v[0];
	for (i = 1; i < s->n; i++)
		if (s->v[i] > m)
			m = s->v[i];
	return m;
}

/* samples_free: release the memory. */
void
samples_free(Samples *s)
{
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* proc_cpu_ns: on-CPU nanoseconds of a process (/proc/<pid>/schedstat), 0 if unknown. */
double
proc_cpu_ns(int pid)
{
	char		path[64];
	FILE	   *f;
	double		ns = 0;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", pid);
	if ((f = fopen(path, "r")) != NULL)
	{
		if (fscanf(f, "%lf", &ns) != 1)
			ns = 0;
		fclose(f);
	}
	return ns;
}

/* proc_ppid: the parent of pid (/proc/<pid>/stat), 0 if unknown. */
int
proc_ppid(int pid)
{
	char		path[64],
				buf[1024] = "",
			   *p;
	FILE	   *f;
	int			ppid = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if ((f = fopen(path, "r")) == NULL)
		return 0;
	buf[fread(buf, 1, sizeof(buf) - 1, f)] = '\0';
	fclose(f);
	if ((p = strrchr(buf, ')')) == NULL || sscanf(p + 1, " %*c %d", &ppid) != 1)
		ppid = 0;
	return ppid;
}

/* cluster_cpu_snap: on-CPU ns of the postmaster pm and each child now. */
void
cluster_cpu_snap(int pm, ClusterCpu *s)
{
	DIR		   *d = opendir("/proc");
	struct dirent *e;

	s->n = 0;
	s->pid[s->n] = pm;
	s->ns[s->n++] = proc_cpu_ns(pm);
	while (d != NULL && (e = readdir(d)) != NULL && s->n < CLUSTER_CPU_MAX)
	{
		int			pid = atoi(e->d_name);

		if (pid > 0 && proc_ppid(pid) == pm)
		{
			s->pid[s->n] = pid;
			s->ns[s->n++] = proc_cpu_ns(pid);
		}
	}
	if (d != NULL)
		closedir(d);
}

/*
 * cluster_cpu_delta: the CPU (ns) from a to b of the processes alive at b:
 * since a, or all of it for those started after a.  Processes that ended
 * between a and b are not counted.
 */
double
cluster_cpu_delta(const ClusterCpu *a, const ClusterCpu *b)
{
	double		ns = 0;

	for (int i = 0; i < b->n; i++)
	{
		double		before = 0;

		for (int j = 0; j < a->n; j++)
			if (a->pid[j] == b->pid[i])
				before = a->ns[j];
		ns += b->ns[i] - before;
	}
	return ns;
}

/* db_connect: a new connection to the benchmark database. */
PGconn *
db_connect(void)
{
	PGconn	   *conn = PQconnectdb(opt.conninfo);

	if (PQstatus(conn) != CONNECTION_OK)
		die("connection failed: %s", PQerrorMessage(conn));
	return conn;
}

/* db_exec: run SQL that must succeed; results are discarded. */
void
db_exec(PGconn *conn, const char *sql)
{
	PGresult   *r = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		die("\"%s\" failed: %s", sql, PQerrorMessage(conn));
	PQclear(r);
}

/* db_value: first column of the first row as a malloc'd string ("" if NULL). */
char *
db_value(PGconn *conn, const char *sql)
{
	PGresult   *r = PQexec(conn, sql);
	char	   *v;

	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1)
		die("\"%s\" failed: %s", sql, PQerrorMessage(conn));
	v = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

/* db_long: db_value as a number. */
long
db_long(PGconn *conn, const char *sql)
{
	char	   *v = db_value(conn, sql);
	long		n = atol(v);

	free(v);
	return n;
}

/* db_prepare: prepare a named statement with text parameters. */
void
db_prepare(PGconn *conn, const char *name, const char *sql, int nparams)
{
	PGresult   *r = PQprepare(conn, name, sql, nparams, NULL);

	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		die("prepare \"%s\" failed: %s", sql, PQerrorMessage(conn));
	PQclear(r);
}

/* db_run: execute a prepared statement that must succeed; caller clears. */
PGresult *
db_run(PGconn *conn, const char *name, int nparams, const char *const *params)
{
	PGresult   *r = PQexecPrepared(conn, name, nparams, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		die("statement %s failed: %s", name, PQerrorMessage(conn));
	return r;
}

/*
 * db_run_expect: execute a prepared statement and check its outcome:
 * expect is the value of the first column for queries, the affected row
 * count for commands (NULL: anything goes; "*": any non-NULL value; ""
 * matches SQL NULL).
 */
void
db_run_expect(PGconn *conn, const char *name, int nparams,
			  const char *const *params, const char *expect)
{
	PGresult   *r = db_run(conn, name, nparams, params);
	const char *got;

	if (expect != NULL)
	{
		bool		isnull = false;

		if (PQresultStatus(r) == PGRES_TUPLES_OK)
		{
			got = PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "(no rows)";
			isnull = PQntuples(r) > 0 && PQgetisnull(r, 0, 0);
		}
		else
			got = PQcmdTuples(r);
		if (strcmp(expect, "*") == 0 ? isnull || PQntuples(r) == 0 :
			strcmp(got, expect) != 0)
			die("statement %s (%s, %s) returned \"%s\", expected \"%s\"",
				name, nparams > 0 ? params[0] : "", nparams > 1 ? params[1] : "",
				isnull ? "NULL" : got, expect);
	}
	PQclear(r);
}
