/*
 * elect.c: leader election (0.2) measurements, bench_elect.
 *
 *   a. resign -> next leader: the leader (one connection) resigns at t0
 *      (client clock just before sending dlock.resign); a candidate, a
 *      thread of this process blocked in dlock.campaign() (seen in
 *      dlock.waiters), gets its term at t1.  t1 - t0.
 *   b. killed leader -> next leader: the leader campaigns with a 500 ms
 *      lease and its session is terminated (connection closed) at once;
 *      the waiting candidate's campaign returns its term with
 *      clock_timestamp(): lateness = that - the old term's expires_at
 *      (both server clock), and time since the kill (client clock).
 *   c. dlock elect: candidates are `dlock elect --lease 10s ELECTION VALUE
 *      -- sh -c 'echo go; read x; echo bye'` processes with pipes on
 *      COMMAND's stdin and stdout; the leader's COMMAND is told to exit,
 *      t0 = its "bye" (its last act), t1 = the next COMMAND's "go".  With
 *      one and with two candidates queued behind the leader.
 *   d. etcdctl elect (etcd, single node on loopback, started by run.sh):
 *      the same handoff, t0 = SIGINT to the leading etcdctl (it resigns
 *      and exits), t1 = the next etcdctl printing its leader key.
 *
 * Shared state: (a) hands one connection to a waiter thread, synchronised
 * with two semaphores as contend.c's release test does; everything else
 * runs in the main thread, with child processes owned by it alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* ---------------- a. resign -> next leader ---------------- */

typedef struct ResignCtx
{
	PGconn	   *conn;			/* the candidate's connection */
	sem_t		go;				/* main -> candidate: campaign */
	sem_t		done;			/* candidate -> main: elected, resigned */
	bool		quit;
	double		t1;				/* when campaign() returned */
} ResignCtx;

/* resign_candidate: the waiting candidate thread. */
static void *
resign_candidate(void *p)
{
	ResignCtx  *x = p;
	const char *params[1] = {"W"};

	for (;;)
	{
		sem_wait(&x->go);
		if (x->quit)
			break;
		db_run_expect(x->conn, "camp", 1, params, "*");
		x->t1 = now_s();
		db_run_expect(x->conn, "resign", 1, params, "t");
		sem_post(&x->done);
	}
	return NULL;
}

/* wait_blocked: poll dlock.waiters until backend pid waits. */
static void
wait_blocked(PGconn *mon, int pid)
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
			die("candidate never blocked in campaign()");
		sleep_s(0.0005);
	}
}

/* elect_resign: measurement a. */
static void
elect_resign(void)
{
	PGconn	   *leader = db_connect();
	PGconn	   *mon = db_connect();
	ResignCtx	x;
	pthread_t	th;
	Samples		s = {0};
	const char *lp[1] = {"L"};
	int			i;

	memset(&x, 0, sizeof(x));
	x.conn = db_connect();
	db_prepare(leader, "camp", "SELECT dlock.campaign('elect-a', $1, 'l', '30s', NULL)", 1);
	db_prepare(leader, "resign", "SELECT dlock.resign('elect-a', $1)", 1);
	db_prepare(x.conn, "camp", "SELECT dlock.campaign('elect-a', $1, 'w', '30s', NULL)", 1);
	db_prepare(x.conn, "resign", "SELECT dlock.resign('elect-a', $1)", 1);
	db_prepare(mon, "blocked", "SELECT count(*) FROM dlock.waiters WHERE pid = $1::int", 1);
	sem_init(&x.go, 0, 0);
	sem_init(&x.done, 0, 0);
	if (pthread_create(&th, NULL, resign_candidate, &x) != 0)
		die("pthread_create failed");

	progress("election: resign -> next leader, %d samples ...", opt.rw_samples);
	for (i = 0; i < opt.rw_samples; i++)
	{
		double		t0;

		db_run_expect(leader, "camp", 1, lp, "*");
		sem_post(&x.go);
		wait_blocked(mon, PQbackendPID(x.conn));
		sleep_s(0.003);			/* let it settle into its sleep */
		t0 = now_s();
		db_run_expect(leader, "resign", 1, lp, "t");
		sem_wait(&x.done);
		samples_add(&s, (x.t1 - t0) * 1e6);
	}
	x.quit = true;
	sem_post(&x.go);
	pthread_join(th, NULL);

	fig.el_resign_done = true;
	fig.el_resign_n = (int) s.n;
	fig.el_resign_p50 = samples_pct(&s, 50);
	fig.el_resign_p99 = samples_pct(&s, 99);
	fig.el_resign_max = samples_max(&s);
	progress("election: resign -> next leader: p50 %.2f ms, p99 %.2f ms, max %.2f ms",
			 fig.el_resign_p50 / 1000, fig.el_resign_p99 / 1000, fig.el_resign_max / 1000);
	report_sample_rows("elect_resign_us", "dlock", 2, &s);
	samples_free(&s);
	sem_destroy(&x.go);
	sem_destroy(&x.done);
	PQfinish(x.conn);
	PQfinish(leader);
	PQfinish(mon);
}

/* ---------------- b. killed leader -> next leader ---------------- */

/* elect_killed: measurement b. */
static void
elect_killed(void)
{
	PGconn	   *mon = db_connect();
	PGconn	   *cand = db_connect();
	Samples		late = {0},
				since = {0};
	int			i;

	db_prepare(mon, "exp",
			   "SELECT (extract(epoch FROM expires_at) * 1000000)::bigint"
			   "  FROM dlock.leader($1)", 1);
	db_prepare(mon, "blocked", "SELECT count(*) FROM dlock.waiters WHERE pid = $1::int", 1);
	db_prepare(cand, "camp",
			   "SELECT dlock.campaign($1, 'W', 'w', '30s', NULL),"
			   "       (extract(epoch FROM clock_timestamp()) * 1000000)::bigint", 1);
	db_prepare(cand, "resign", "SELECT dlock.resign($1, 'W')", 1);

	progress("election: killed leader (500 ms lease) -> next leader, %d runs ...",
			 opt.takeover_runs);
	for (i = 0; i < opt.takeover_runs; i++)
	{
		char		e[64];
		const char *p[1] = {e};
		PGconn	   *leader = db_connect();
		PGresult   *r;
		long long	expires,
					got;
		double		t_kill;

		snprintf(e, sizeof(e), "elect-b/%d", i);
		db_prepare(leader, "camp", "SELECT dlock.campaign($1, 'L', 'l', '500ms', NULL)", 1);
		db_run_expect(leader, "camp", 1, p, "*");
		r = db_run(mon, "exp", 1, p);
		if (PQntuples(r) != 1)
			die("election %s: no leader", e);
		expires = atoll(PQgetvalue(r, 0, 0));
		PQclear(r);
		if (!PQsendQueryPrepared(cand, "camp", 1, p, NULL, NULL, 0))
			die("send failed: %s", PQerrorMessage(cand));
		wait_blocked(mon, PQbackendPID(cand));
		t_kill = now_s();
		PQfinish(leader);		/* the leader's session ends, its lease runs on */
		r = PQgetResult(cand);
		if (PQresultStatus(r) != PGRES_TUPLES_OK || PQgetisnull(r, 0, 0))
			die("election %s: campaign failed: %s", e, PQerrorMessage(cand));
		samples_add(&since, (now_s() - t_kill) * 1000);
		got = atoll(PQgetvalue(r, 0, 1));
		PQclear(r);
		while ((r = PQgetResult(cand)) != NULL)
			PQclear(r);
		samples_add(&late, (got - expires) / 1000.0);
		db_run_expect(cand, "resign", 1, p, "t");
	}
	fig.el_kill_done = true;
	fig.el_kill_n = (int) late.n;
	fig.el_kill_late_p50 = samples_pct(&late, 50);
	fig.el_kill_late_p99 = samples_pct(&late, 99);
	fig.el_kill_late_max = samples_max(&late);
	fig.el_kill_since_p50 = samples_pct(&since, 50);
	fig.el_kill_since_p99 = samples_pct(&since, 99);
	progress("election: killed leader: elected after the lease end by p50 %.2f ms, "
			 "p99 %.2f ms, max %.2f ms; after the kill p50 %.0f ms, p99 %.0f ms",
			 fig.el_kill_late_p50, fig.el_kill_late_p99, fig.el_kill_late_max,
			 fig.el_kill_since_p50, fig.el_kill_since_p99);
	report_sample_rows("elect_kill_late_ms", "dlock", 2, &late);
	report_sample_rows("elect_kill_since_ms", "dlock", 2, &since);
	samples_free(&late);
	samples_free(&since);
	PQfinish(cand);
	PQfinish(mon);
}

/* ---------------- c, d. command-line handoffs ---------------- */

/* One candidate process with a pipe on its stdin and one on its stdout. */
typedef struct Cand
{
	pid_t		pid;
	int			in;				/* write end: its stdin */
	int			out;			/* read end: its stdout */
} Cand;

/* spawn_cand: start argv with stdin and stdout on pipes; stderr inherited. */
static Cand
spawn_cand(char *const *argv)
{
	int			in[2],
				out[2];
	Cand		c;

	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
		die("pipe failed: %m");
	fflush(NULL);
	c.pid = fork();
	if (c.pid < 0)
		die("fork failed: %m");
	if (c.pid == 0)
	{
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		execvp(argv[0], argv);
		fprintf(stderr, "dlock_bench: cannot run %s: %m\n", argv[0]);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c.in = in[1];
	c.out = out[0];
	return c;
}

/*
 * read_until: read c's stdout until it has printed a line starting with
 * word (NULL: any output); returns the time it arrived.  Dies after
 * timeout_s or if the candidate's stdout closes first.
 */
static double
read_until(Cand *c, const char *word, double timeout_s)
{
	double		give_up = now_s() + timeout_s;
	char		buf[512];
	size_t		len = 0;

	for (;;)
	{
		struct pollfd pfd = {c->out, POLLIN, 0};
		int			left = (int) ((give_up - now_s()) * 1000);
		ssize_t		n;

		if (left <= 0)
			die("candidate %d: no \"%s\" within %.0f s", (int) c->pid,
				word ? word : "output", timeout_s);
		if (poll(&pfd, 1, left) < 0)
		{
			if (errno == EINTR)
				continue;
			die("poll failed: %m");
		}
		if (pfd.revents == 0)
			continue;
		n = read(c->out, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			die("candidate %d ended before \"%s\"", (int) c->pid, word ? word : "output");
		len += n;
		buf[len] = '\0';
		if (word == NULL)
			return now_s();
		for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
			if (strncmp(line, word, strlen(word)) == 0)
				return now_s();
		if (len > sizeof(buf) / 2)
		{
			/* keep the tail: the word may be split across reads */
			memmove(buf, buf + len - 16, 16);
			len = 16;
		}
	}
}

/* first_output: which of cands[0..n) prints first, and when (*t). */
static int
first_output(Cand *cands, int n, double timeout_s, double *t)
{
	struct pollfd pfd[8];
	double		give_up = now_s() + timeout_s;
	int			i;

	for (i = 0; i < n; i++)
	{
		pfd[i].fd = cands[i].out;
		pfd[i].events = POLLIN;
	}
	for (;;)
	{
		int			left = (int) ((give_up - now_s()) * 1000);

		if (left <= 0)
			die("no candidate elected within %.0f s", timeout_s);
		if (poll(pfd, n, left) < 0 && errno != EINTR)
			die("poll failed: %m");
		for (i = 0; i < n; i++)
			if (pfd[i].revents)
			{
				*t = read_until(&cands[i], NULL, 1);
				return i;
			}
	}
}

/* reap_cand: close c's pipes and wait for it; its exit status. */
static int
reap_cand(Cand *c)
{
	int			status;

	close(c->in);
	close(c->out);
	if (waitpid(c->pid, &status, 0) < 0)
		die("waitpid failed: %m");
	return status;
}

/* queued: how many candidates of election are queued (dlock). */
static long
dlock_queued(PGconn *mon, const char *election)
{
	const char *p[1] = {election};
	PGresult   *r = db_run(mon, "queued", 1, p);
	long		n = atol(PQgetvalue(r, 0, 0));

	PQclear(r);
	return n;
}

/* etcd_keys: how many keys etcd has under prefix (candidates in the election). */
static long
etcd_keys(const char *prefix)
{
	char		cmd[512];
	char		line[1024];
	FILE	   *f;
	long		n = 0;

	snprintf(cmd, sizeof(cmd), "etcdctl --endpoints=%s get --prefix --keys-only '%s'",
			 opt.etcd_endpoint, prefix);
	if ((f = popen(cmd, "r")) == NULL)
		die("popen failed: %m");
	while (fgets(line, sizeof(line), f))
		if (line[0] != '\n')
			n++;
	pclose(f);
	return n;
}

/*
 * handoffs: measurement c (etcd false) or d (etcd true) with nwait
 * candidates queued behind the leader; fills s (ms).  Returns how many
 * handoffs went to another candidate than the one queued first.
 */
static int
handoffs(bool etcd, int nwait, int nsamples, const char *election, Samples *s)
{
	int			out_of_order = 0;
	PGconn	   *mon = etcd ? NULL : db_connect();
	Cand		leader;
	Cand		waiting[8];
	int			nw = 0;
	int			made = 0;
	char		value[32];
	char	   *dlock_argv[] = {(char *) opt.dlock_cli, "-d", (char *) opt.conninfo,
		"elect", "--lease", "10s", (char *) election, value, "--",
		"sh", "-c", "echo go; read x; echo bye", NULL};
	char		endpoints[300];
	char	   *etcd_argv[] = {"etcdctl", endpoints, "elect", (char *) election, value, NULL};
	char	   *const *argv = etcd ? etcd_argv : dlock_argv;
	const char *tool = etcd ? "etcdctl elect" : "dlock elect";
	int			i;

	snprintf(endpoints, sizeof(endpoints), "--endpoints=%s", opt.etcd_endpoint ? opt.etcd_endpoint : "");
	if (mon)
		db_prepare(mon, "queued", "SELECT count(*) FROM dlock.queue WHERE resource = $1", 1);

	snprintf(value, sizeof(value), "c%d", made++);
	leader = spawn_cand(argv);
	read_until(&leader, etcd ? NULL : "go", 30);
	for (i = 0; i < nsamples; i++)
	{
		double		t0,
					t1;
		int			next,
					status;

		/* fill the queue, one at a time so that their order is known */
		while (nw < nwait)
		{
			double		give_up = now_s() + 30;

			snprintf(value, sizeof(value), "c%d", made++);
			waiting[nw++] = spawn_cand(argv);
			while ((etcd ? etcd_keys(election) - 1 : dlock_queued(mon, election)) < nw)
			{
				if (now_s() > give_up)
					die("%s: candidate never queued", tool);
				sleep_s(0.005);
			}
		}
		sleep_s(0.05);			/* let the last one settle into its wait */

		if (etcd)
		{
			t0 = now_s();
			kill(leader.pid, SIGINT);
		}
		else
		{
			if (write(leader.in, "x\n", 2) != 2)
				die("write to COMMAND failed: %m");
			t0 = read_until(&leader, "bye", 30);
		}
		next = first_output(waiting, nw, 60, &t1);	/* its "go" (or key) */
		if (next != 0)
			out_of_order++;
		samples_add(s, (t1 - t0) * 1000);
		status = reap_cand(&leader);
		if (!etcd && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
			die("%s: the leader ended with status %d", tool, status);
		leader = waiting[next];
		memmove(&waiting[next], &waiting[next + 1], (nw - next - 1) * sizeof(Cand));
		nw--;
	}

	/* stop everyone: the leader exits, the others are interrupted */
	for (i = 0; i < nw; i++)
	{
		kill(waiting[i].pid, SIGINT);
		reap_cand(&waiting[i]);
	}
	if (etcd)
		kill(leader.pid, SIGINT);
	else if (write(leader.in, "x\n", 2) != 2)
		die("write to COMMAND failed: %m");
	reap_cand(&leader);
	if (mon)
		PQfinish(mon);
	return out_of_order;
}

/* elect_cli: measurements c and d, with 1 and 2 candidates queued. */
static void
elect_cli(void)
{
	int			q,
				t;

	for (t = 0; t < 2; t++)
	{
		bool		etcd = t == 1;

		if (!etcd && (opt.dlock_cli == NULL || access(opt.dlock_cli, X_OK) != 0))
		{
			progress("election: no dlock CLI (--dlock-cli): dlock elect skipped");
			continue;
		}
		if (etcd && opt.etcd_endpoint == NULL)
		{
			progress("election: no etcd (--etcd-endpoint): etcdctl elect skipped");
			continue;
		}
		for (q = 0; q < 2; q++)
		{
			Samples		s = {0};
			char		election[64];
			const char *name = etcd ? "etcdctl" : "dlock";

			snprintf(election, sizeof(election), "elect-cli-%s-%d", name, q + 1);
			progress("election: %s elect, %d queued, %d handoffs ...", name, q + 1,
					 opt.elect_handoffs);
			fig.el_cli_unordered[t][q] = handoffs(etcd, q + 1, opt.elect_handoffs, election, &s);
			fig.el_cli_done[t][q] = true;
			fig.el_cli_n[t][q] = (int) s.n;
			fig.el_cli_p50[t][q] = samples_pct(&s, 50);
			fig.el_cli_p99[t][q] = samples_pct(&s, 99);
			fig.el_cli_max[t][q] = samples_max(&s);
			fig.el_cli_over1s[t][q] = 0;
			for (size_t k = 0; k < s.n; k++)
				if (s.v[k] >= 1000)
					fig.el_cli_over1s[t][q]++;
			progress("election: %s elect, %d queued: %s -> next one elected p50 %.1f ms, "
					 "p99 %.1f ms, max %.1f ms, %d of %d over 1 s, %d not to the first queued",
					 name, q + 1, etcd ? "SIGINT to the leader" : "leader's COMMAND exits",
					 fig.el_cli_p50[t][q], fig.el_cli_p99[t][q], fig.el_cli_max[t][q],
					 fig.el_cli_over1s[t][q], fig.el_cli_n[t][q], fig.el_cli_unordered[t][q]);
			report_sample_rows(etcd ? "elect_cli_etcd_ms" : "elect_cli_dlock_ms", name,
							   q + 1, &s);
			samples_free(&s);
		}
	}
}

/* bench_elect: the election measurements a to d. */
void
bench_elect(void)
{
	elect_resign();
	elect_killed();
	elect_cli();
}
