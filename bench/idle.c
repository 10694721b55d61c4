/*
 * idle.c: measurement 5, the server CPU that idle waiters cost.  One
 * connection holds a resource; N others block in dlock.lock() on it (no
 * wait limit).  Once all N show in dlock.waiters, the utime + stime of
 * their backends (from /proc/<pid>/stat; the pids are the backends'
 * pg_backend_pid(), which libpq reports as PQbackendPID) is read before and
 * after an observation period, and reported as a percentage of one core.
 * Those counters are sampled at 10 ms ticks, so short wakeups can escape
 * them: the on-CPU time of /proc/<pid>/schedstat and the voluntary context
 * switches (how often the waiters woke) are reported too.  The same is done
 * with pg_advisory_lock for reference.  The waiters are then cancelled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* proc_ticks: utime + stime of a process in clock ticks. */
static long long
proc_ticks(int pid)
{
	char		path[64];
	char		buf[1024];
	FILE	   *f;
	size_t		n;
	char	   *p;
	long long	utime,
				stime;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (f == NULL)
		die("cannot open %s (is the server on this machine?)", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command name may contain spaces: fields count from the last ')' */
	p = strrchr(buf, ')');
	if (p == NULL ||
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lld %lld",
			   &utime, &stime) != 2)
		die("cannot parse %s", path);
	return utime + stime;
}

/* proc_sched: on-CPU nanoseconds (schedstat) and voluntary context switches. */
static void
proc_sched(int pid, double *ns, double *switches)
{
	char		path[64];
	char		line[256];
	FILE	   *f;

	*ns = proc_cpu_ns(pid);
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	*switches = 0;
	if ((f = fopen(path, "r")) != NULL)
	{
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "voluntary_ctxt_switches: %lf", switches) == 1)
				break;
		fclose(f);
	}
}

/* CPU figures of a set of backends at one moment. */
typedef struct CpuSnap
{
	double		t;				/* monotonic seconds */
	long long	ticks;			/* utime + stime */
	double		ns;				/* schedstat on-CPU time */
	double		switches;		/* voluntary context switches (sleeps) */
} CpuSnap;

/* snap: sum the CPU figures of the given backends. */
static void
snap(PGconn **conns, int n, CpuSnap *s)
{
	int			i;

	memset(s, 0, sizeof(*s));
	s->t = now_s();
	for (i = 0; i < n; i++)
	{
		int			pid = PQbackendPID(conns[i]);
		double		ns,
					sw;

		s->ticks += proc_ticks(pid);
		proc_sched(pid, &ns, &sw);
		s->ns += ns;
		s->switches += sw;
	}
}

/*
 * idle_run: n waiters blocked behind a holder for opt.idle_s seconds;
 * sets their CPU as % of one core from utime + stime (pct) and from
 * schedstat (pct_ns, finer than the 10 ms ticks), and the wakeups per
 * waiter per second.
 */
static void
idle_run(bool advisory, int n, double *pct, double *pct_ns, double *wakeups)
{
	PGconn	   *holder = db_connect();
	PGconn	   *mon = db_connect();
	PGconn	  **conns = calloc(n, sizeof(PGconn *));
	double		give_up;
	CpuSnap		s0,
				s1;
	char	   *v;
	int			i;

	if (conns == NULL)
		die("out of memory");
	if (advisory)
		db_exec(holder, "SELECT pg_advisory_lock(3)");
	else
	{
		v = db_value(holder, "SELECT dlock.try_lock('idle', 'idle-holder', '1h')");
		if (v[0] == '\0')
			die("idle: could not take the held resource");
		free(v);
	}
	for (i = 0; i < n; i++)
	{
		char		holder_name[32];
		const char *p[1] = {holder_name};

		snprintf(holder_name, sizeof(holder_name), "idle:%d", i);
		conns[i] = db_connect();
		if (!PQsendQueryParams(conns[i], advisory ?
							   "SELECT pg_advisory_lock(3), $1::text" :
							   "SELECT dlock.lock('idle', $1, '1h', NULL)",
							   1, NULL, p, NULL, NULL, 0))
			die("send failed: %s", PQerrorMessage(conns[i]));
	}
	give_up = now_s() + 30;
	while (db_long(mon, advisory ?
				   "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
				   " AND objid = 3 AND NOT granted" :
				   "SELECT count(*) FROM dlock.waiters WHERE resource = 'idle'") < n)
	{
		if (now_s() > give_up)
			die("idle: the waiters never all blocked");
		sleep_s(0.05);
	}
	sleep_s(opt.quick ? 0.2 : 0.5); /* past their first look */

	snap(conns, n, &s0);
	sleep_s(opt.idle_s);
	snap(conns, n, &s1);

	for (i = 0; i < n; i++)
	{
		PGcancel   *cancel = PQgetCancel(conns[i]);
		char		err[256];
		PGresult   *r;

		if (cancel == NULL || !PQcancel(cancel, err, sizeof(err)))
			die("cancel failed");
		PQfreeCancel(cancel);
		while ((r = PQgetResult(conns[i])) != NULL)
			PQclear(r);
		PQfinish(conns[i]);
	}
	free(conns);
	db_exec(holder, advisory ? "SELECT pg_advisory_unlock(3)" :
			"SELECT dlock.unlock('idle', 'idle-holder')");
	PQfinish(holder);
	PQfinish(mon);
	*pct = 100.0 * (s1.ticks - s0.ticks) / sysconf(_SC_CLK_TCK) / (s1.t - s0.t);
	*pct_ns = 100.0 * (s1.ns - s0.ns) / 1e9 / (s1.t - s0.t);
	*wakeups = (s1.switches - s0.switches) / n / (s1.t - s0.t);
}

/* bench_idle: measurement 5 for dlock, then advisory for reference. */
void
bench_idle(void)
{
	int			n = opt.idle_waiters;
	int			m;

	for (m = 0; m < 2; m++)
	{
		const char *name = m ? "advisory" : "dlock";
		char		what[64];

		progress("idle waiters: %d waiters in %s for %.0f s ...", n,
				 m ? "pg_advisory_lock()" : "dlock.lock()", opt.idle_s);
		idle_run(m == 1, n, &fig.idle_pct[m], &fig.idle_pct_ns[m], &fig.idle_wakeups[m]);
		progress("idle waiters: %s: %.3f%% of one core (utime+stime), %.3f%% (schedstat), "
				 "%.2f wakeups a waiter a second", name, fig.idle_pct[m],
				 fig.idle_pct_ns[m], fig.idle_wakeups[m]);
		snprintf(what, sizeof(what), "idle_waiters_%s_cpu_pct", name);
		report_figure(what, fig.idle_pct[m], "% of one core (utime+stime)");
		snprintf(what, sizeof(what), "idle_waiters_%s_cpu_pct_schedstat", name);
		report_figure(what, fig.idle_pct_ns[m], "% of one core (schedstat)");
		snprintf(what, sizeof(what), "idle_waiters_%s_wakeups", name);
		report_figure(what, fig.idle_wakeups[m], "wakeups per waiter per second");
	}
	fig.idle_n = n;
	fig.idle_seconds = opt.idle_s;
	fig.idle_done = true;
}
