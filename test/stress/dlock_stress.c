/*
 * dlock_stress.c: lost-update stress test for dlock's fencing tokens.
 *
 * Several worker processes increment one counter row with the classic
 * lost-update pattern: take the lock (dlock.lock -> fence), read the value,
 * sleep, write value + 1.  The write runs in one transaction that first calls
 * dlock.assert_fence(resource, fence), which is what makes the write of a
 * holder whose lease ran out fail (SQLSTATE 55P03, "fenced off") instead of
 * overwriting a newer holder's increment.  Meanwhile the parent process plays
 * chaos monkey: it SIGKILLs some workers while they hold the lock (between
 * their read and their write; the lease must run out before anyone else gets
 * the lock) and SIGSTOPs others beyond their lease (then SIGCONT: their write
 * must be fenced off).  Killed workers are replaced so the work finishes.
 *
 * At the end it checks, on a fresh connection:
 *   - the counter equals the number of increments whose COMMIT succeeded;
 *   - stress_log, in seq (write) order, holds the values 1..N exactly once;
 *   - fences are strictly increasing in write order;
 *   - no write of a paused (stale) holder was accepted;
 *   - no worker hit an unexpected error;
 * prints the figures and PASS/FAIL lines, and exits 0 only if all hold.
 *
 * With --fair, workers wait in the resource's fair queue: even-numbered
 * ones in dlock.lock(..., fair => true) (a second connection reads the
 * waiting backend's ticket from dlock.queue), odd-numbered ones on their
 * own side, retrying dlock.try_lock(..., fair => true) and reading their
 * ticket after each failed attempt.  Every acquisition is logged with its
 * fence and the ticket it was seen waiting with, and the check is that,
 * in acquisition (fence) order, those tickets strictly increase: the lock
 * went to the tickets in the order they were taken.
 *
 * With --elect, workers are candidates of one election (the resource):
 * dlock.campaign, then, while leader, renew, read, window, and the write
 * fenced by the term; they resign now and then and probe that a write
 * under the term they resigned is refused.  The chaos kills and pauses
 * leaders.  See stress_elect.c for the loop and the extra checks.
 *
 * Usage:
 *   dlock_stress -d CONNINFO [-c CLIENTS] [-n INCREMENTS] [--lease D]
 *                [--wait D] [--sleep-ms MS] [--kill K] [--pause P]
 *                [--pause-time D] [--resource NAME] [--max-seconds S]
 *                [--fair | --elect]
 * Durations: 250ms, 2s, 5m, 1h (a bare number is seconds).
 *
 * The workers are processes (fork), not threads, so that kill -9 and
 * SIGSTOP hit exactly one client as they would in production.  Chaos is
 * made deterministic by a small handshake in shared memory (see
 * claim_sleeping): a worker announces the window between its read and its
 * write, and the parent claims that window atomically before signalling, so
 * a kill never lands after the write has started.
 *
 * Files and shared state: see stress.h.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stress.h"

/* Options (stress.h declares those the other files read). */
const char *conninfo = "";
int			nclients = 8;
long		target = 50;
long		lease_ms = 2000;
long		wait_ms = 30000;
long		sleep_ms = 5;
static int	nkills = 0;
static int	npauses = 0;
static long pause_ms = -1;		/* default: lease + 500 ms */
const char *resource = "stress";
double		max_seconds = 120;

Shared	   *shared;
double		start_time;
bool		verbose = false;
bool		no_fence = false;	/* skip assert_fence: checks the checker */
static bool fair = false;		/* --fair: wait in the fair queue */
static bool elect = false;		/* --elect: campaign, write under the term */

/* usage: print the command line summary and exit with status code. */
static void
usage(int code)
{
	fprintf(code ? stderr : stdout,
			"Usage: dlock_stress -d CONNINFO [options]\n"
			"  -c, --clients N       worker processes (default 8)\n"
			"  -n, --increments N    increments to commit in all (default 50)\n"
			"      --lease D         lease of each lock (default 2s)\n"
			"      --wait D          wait limit of each dlock.lock (default 30s)\n"
			"      --sleep-ms MS     sleep between read and write (default 5)\n"
			"      --kill K          SIGKILL K workers while they hold the lock\n"
			"      --pause P         SIGSTOP P workers beyond their lease\n"
			"      --pause-time D    how long a pause lasts (default lease + 500ms)\n"
			"      --resource NAME   lock resource (default stress)\n"
			"      --max-seconds S   give up (FAIL) after S seconds (default 120)\n"
			"      --no-fence        omit assert_fence (the checks must then fail)\n"
			"      --fair            wait in the fair queue and check the serving order\n"
			"      --elect           campaign for an election (the resource), write under\n"
			"                        the term, resign sometimes; check the terms\n"
			"  -v, --verbose         log chaos events\n"
			"Exit status 0 only if every check passes.\n");
	exit(code);
}

/* parse_args: fill the option globals from argv. */
static void
parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"clients", required_argument, NULL, 'c'},
		{"increments", required_argument, NULL, 'n'},
		{"lease", required_argument, NULL, 1},
		{"wait", required_argument, NULL, 2},
		{"sleep-ms", required_argument, NULL, 3},
		{"kill", required_argument, NULL, 4},
		{"pause", required_argument, NULL, 5},
		{"pause-time", required_argument, NULL, 6},
		{"resource", required_argument, NULL, 7},
		{"max-seconds", required_argument, NULL, 8},
		{"no-fence", no_argument, NULL, 9},
		{"fair", no_argument, NULL, 10},
		{"elect", no_argument, NULL, 11},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	while ((c = getopt_long(argc, argv, "d:c:n:vh", longopts, NULL)) != -1)
	{
		switch (c)
		{
			case 'd':
				conninfo = optarg;
				break;
			case 'c':
				nclients = atoi(optarg);
				break;
			case 'n':
				target = atol(optarg);
				break;
			case 1:
				lease_ms = parse_duration(optarg);
				break;
			case 2:
				wait_ms = parse_duration(optarg);
				break;
			case 3:
				sleep_ms = atol(optarg);
				break;
			case 4:
				nkills = atoi(optarg);
				break;
			case 5:
				npauses = atoi(optarg);
				break;
			case 6:
				pause_ms = parse_duration(optarg);
				break;
			case 7:
				resource = optarg;
				break;
			case 8:
				max_seconds = atof(optarg);
				break;
			case 9:
				no_fence = true;
				break;
			case 10:
				fair = true;
				break;
			case 11:
				elect = true;
				break;
			case 'v':
				verbose = true;
				break;
			case 'h':
				usage(0);
				break;
			default:
				usage(2);
		}
	}
	if (optind < argc || nclients < 1 || nclients > 1000 || target < 1 ||
		lease_ms <= 0 || wait_ms < 0 || sleep_ms < 0 || nkills < 0 ||
		npauses < 0 || max_seconds <= 0 || (pause_ms < 0 && pause_ms != -1) ||
		(fair && elect))
	{
		fprintf(stderr, "dlock_stress: invalid arguments\n");
		usage(2);
	}
	if (pause_ms == -1)
		pause_ms = lease_ms + 500;
	if (npauses > 0 && pause_ms <= lease_ms)
	{
		fprintf(stderr, "dlock_stress: --pause-time must exceed --lease\n");
		exit(2);
	}
}

/*
 * setup_tables: (re)create stress_counter with its one row at 0 and an
 * empty stress_log, so every run starts from a known state.
 */
static void
setup_tables(void)
{
	PGconn	   *conn = connect_or_die(2);

	command_or_die(conn, "SET client_min_messages = warning");
	command_or_die(conn, "CREATE EXTENSION IF NOT EXISTS dlock");
	command_or_die(conn, "DROP TABLE IF EXISTS stress_counter, stress_log");
	command_or_die(conn, "CREATE TABLE stress_counter (id int PRIMARY KEY,"
				   " value bigint NOT NULL, last_fence bigint)");
	command_or_die(conn, "CREATE TABLE stress_log (seq bigserial PRIMARY KEY,"
				   " value bigint NOT NULL, fence bigint NOT NULL, holder text NOT NULL,"
				   " at timestamptz NOT NULL DEFAULT clock_timestamp())");
	command_or_die(conn, "INSERT INTO stress_counter VALUES (1, 0, NULL)");
	PQfinish(conn);
}

/*
 * lock_fair_server: dlock.lock(..., fair => true), sent asynchronously so
 * that the worker can read its backend's ticket from dlock.queue on a
 * second connection while it waits.  Returns the result (NULL after
 * reporting an error); *ticket is the ticket seen, or stays 0.
 */
static PGresult *
lock_fair_server(PGconn *conn, PGconn *conn2, const char *const *p_lock,
				 long long *ticket)
{
	char		pid[16];
	const char *p_q[2] = {pid, resource};
	PGresult   *res = NULL, *r;

	snprintf(pid, sizeof(pid), "%d", PQbackendPID(conn));
	if (!PQsendQueryParams(conn, "SELECT dlock.lock($1, $2, $3::interval, $4::interval,"
						   " fair => true)", 4, NULL, p_lock, NULL, NULL, 0))
	{
		fprintf(stderr, "dlock_stress[%d]: send failed: %s", (int) getpid(),
				PQerrorMessage(conn));
		return NULL;
	}
	for (;;)
	{
		if (!PQconsumeInput(conn))
		{
			fprintf(stderr, "dlock_stress[%d]: %s", (int) getpid(), PQerrorMessage(conn));
			return NULL;
		}
		if (!PQisBusy(conn))
			break;
		if (*ticket == 0)
		{
			r = exec_ok(conn2, "SELECT ticket FROM dlock.queue WHERE pid = $1::integer"
						" AND resource = $2", 2, p_q, NULL);
			if (!r)
				return NULL;
			if (PQntuples(r) == 1)
				*ticket = atoll(PQgetvalue(r, 0, 0));
			PQclear(r);
		}
		sleep_ms_now(1);
	}
	while ((r = PQgetResult(conn)) != NULL)
	{
		if (res == NULL && PQresultStatus(r) == PGRES_TUPLES_OK)
			res = r;
		else
		{
			if (PQresultStatus(r) != PGRES_TUPLES_OK)
				fprintf(stderr, "dlock_stress[%d]: fair lock failed: %s", (int) getpid(),
						PQerrorMessage(conn));
			PQclear(r);
		}
	}
	return res;
}

/*
 * lock_fair_client: wait on our own side: retry try_lock(..., fair =>
 * true) every 10 ms until the wait limit, reading our (committed) ticket
 * after each failed attempt.  Returns a one-row result like dlock.lock's
 * (NULL value on timeout), or NULL after reporting an error.
 */
static PGresult *
lock_fair_client(PGconn *conn, const char *const *p_lock, long long *ticket)
{
	double		deadline = now_s() + wait_ms / 1000.0;

	for (;;)
	{
		PGresult   *res = exec_ok(conn, "SELECT dlock.try_lock($1, $2, $3::interval,"
								  " fair => true)", 3, p_lock, NULL);

		if (!res || !PQgetisnull(res, 0, 0) || now_s() >= deadline)
			return res;
		PQclear(res);
		res = exec_ok(conn, "SELECT ticket FROM dlock.queue WHERE resource = $1"
					  " AND holder = $2 AND pid IS NULL", 2, p_lock, NULL);
		if (!res)
			return NULL;
		if (PQntuples(res) == 1)
			*ticket = atoll(PQgetvalue(res, 0, 0));
		PQclear(res);
		sleep_ms_now(10);
	}
}

/* log_acquisition: record an acquisition for the fair-order check. */
static void
log_acquisition(const char *fence, long long ticket, int slotno)
{
	long		i = __atomic_fetch_add(&shared->nacq, 1, __ATOMIC_SEQ_CST);

	if (i < shared->acq_cap)
	{
		shared->acq[i].fence = atoll(fence);
		shared->acq[i].ticket = ticket;
		shared->acq[i].slotno = slotno;
	}
}

/*
 * worker_main: one client's loop: lock, read, window, fenced write,
 * unlock, until the counter reaches the target.  Never returns.
 */
static void
worker_main(Slot *slot, int slotno)
{
	PGconn	   *conn = connect_or_die(EXIT_WORKER_ERROR);
	PGconn	   *conn2 = fair && slotno % 2 == 0 ? connect_or_die(EXIT_WORKER_ERROR) : NULL;
	char		holder[64];
	char		lease[32];
	char		wait[32];

	snprintf(holder, sizeof(holder), "stress-%d.%d-%d", slotno,
			 slot->generation, (int) getpid());
	snprintf(lease, sizeof(lease), "%ld milliseconds", lease_ms);
	snprintf(wait, sizeof(wait), "%ld milliseconds", wait_ms);

	for (;;)
	{
		const char *p_lock[4] = {resource, holder, lease, wait};
		PGresult   *res;
		char		fence[32];
		long		value;
		bool		paused;
		int			w;
		long long	ticket = 0;

		if (now_s() - start_time > max_seconds)
			exit(EXIT_WORKER_TIMEOUT);
		set_state(slot, ST_IDLE);
		if (!fair)
			res = exec_ok(conn, "SELECT dlock.lock($1, $2, $3::interval, $4::interval)",
						  4, p_lock, NULL);
		else if (conn2)
			res = lock_fair_server(conn, conn2, p_lock, &ticket);
		else
			res = lock_fair_client(conn, p_lock, &ticket);
		if (!res)
			goto fail;
		if (PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			bump(&slot->lock_timeouts);
			continue;
		}
		snprintf(fence, sizeof(fence), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		log_acquisition(fence, ticket, slotno);

		if (!(res = exec_ok(conn, "SELECT value FROM stress_counter WHERE id = 1",
							0, NULL, NULL)))
			goto fail;
		value = atol(PQgetvalue(res, 0, 0));
		PQclear(res);

		if (value >= target)
		{
			/* All done: let the next worker see it too. */
			const char *p_unlock[3] = {resource, holder, fence};

			if (!(res = exec_ok(conn, "SELECT dlock.unlock($1, $2, $3::bigint)",
								3, p_unlock, NULL)))
				goto fail;
			PQclear(res);
			set_state(slot, ST_DONE);
			PQfinish(conn);
			if (conn2)
				PQfinish(conn2);
			exit(0);
		}

		paused = wait_in_window(slot);
		w = write_increment(conn, fence, value, holder);
		set_state(slot, ST_IDLE);
		if (w < 0)
			goto fail;
		if (w == 0)
		{
			bump(&slot->fenced);
			if (paused)
				bump(&slot->fenced_after_pause);
			if (verbose)
				fprintf(stderr, "dlock_stress: %s fenced off (fence %s)%s\n",
						holder, fence, paused ? " after a pause" : "");
			continue;			/* the lease is gone: nothing to unlock */
		}
		bump(&slot->committed);
		bump(&shared->committed_total);
		if (paused)
		{
			bump(&slot->stale_writes);
			fprintf(stderr, "dlock_stress: STALE WRITE accepted from %s"
					" (fence %s) after a pause beyond its lease\n", holder, fence);
		}

		{
			const char *p_unlock[3] = {resource, holder, fence};

			if (!(res = exec_ok(conn, "SELECT dlock.unlock($1, $2, $3::bigint)",
								3, p_unlock, NULL)))
				goto fail;
			if (PQgetisnull(res, 0, 0))
				bump(&slot->lost_unlocks);
			PQclear(res);
		}
	}

fail:
	bump(&slot->errors);
	PQfinish(conn);
	if (conn2)
		PQfinish(conn2);
	exit(EXIT_WORKER_ERROR);
}

/* spawn: start (or restart) the worker of a slot. */
static void
spawn(int slotno)
{
	Slot	   *slot = &shared->slots[slotno];
	pid_t		pid;

	slot->generation++;
	set_state(slot, ST_IDLE);
	fflush(NULL);
	pid = fork();
	if (pid < 0)
	{
		perror("dlock_stress: fork");
		exit(2);
	}
	if (pid == 0)
	{
		if (elect)
			elect_worker_main(slot, slotno);
		worker_main(slot, slotno);
	}
	slot->pid = pid;
}

/* kill_all: end every live worker (timeout path); stopped ones included. */
static void
kill_all(void)
{
	int			i;

	for (i = 0; i < nclients; i++)
		if (shared->slots[i].pid > 0)
		{
			kill(shared->slots[i].pid, SIGKILL);
			kill(shared->slots[i].pid, SIGCONT);
		}
	while (wait(NULL) > 0)
		;
}

/*
 * claim_sleeping: find the worker in its read-to-write window (there is at
 * most one: it holds the lock) and claim it by moving it to state to.
 * Returns the slot number or -1.
 */
static int
claim_sleeping(int to)
{
	int			i;

	for (i = 0; i < nclients; i++)
		if (shared->slots[i].pid > 0 &&
			cas_state(&shared->slots[i], ST_SLEEPING, to))
			return i;
	return -1;
}

/* Figures of a run, summed over slots. */
typedef struct Totals
{
	long		committed,
				fenced,
				fenced_after_pause,
				stale_writes,
				lock_timeouts,
				lost_unlocks,
				errors;
} Totals;

/* sum_slots: add up the per-slot counters. */
static Totals
sum_slots(void)
{
	Totals		t = {0};
	int			i;

	for (i = 0; i < nclients; i++)
	{
		Slot	   *s = &shared->slots[i];

		t.committed += s->committed;
		t.fenced += s->fenced;
		t.fenced_after_pause += s->fenced_after_pause;
		t.stale_writes += s->stale_writes;
		t.lock_timeouts += s->lock_timeouts;
		t.lost_unlocks += s->lost_unlocks;
		t.errors += s->errors;
	}
	return t;
}

/*
 * verify: read the final state on a fresh connection and check the
 * invariants against what the workers saw committed.  Returns the number
 * of failed checks.
 */
static int
verify(const Totals *t)
{
	PGconn	   *conn = connect_or_die(2);
	PGresult   *res;
	long		value,
				rows,
				i,
				bad_value_at = -1,
				bad_fence_at = -1;
	long long	last_fence_counter = -1,	/* fences are bigint */
				prev_fence = -1;
	int			failed = 0;

	res = exec_ok(conn, "SELECT value, last_fence FROM stress_counter WHERE id = 1",
				  0, NULL, NULL);
	if (!res || PQntuples(res) != 1)
	{
		printf("FAIL: cannot read stress_counter\n");
		return 1;
	}
	value = atol(PQgetvalue(res, 0, 0));
	if (!PQgetisnull(res, 0, 1))
		last_fence_counter = atoll(PQgetvalue(res, 0, 1));
	PQclear(res);

	res = exec_ok(conn, "SELECT value, fence FROM stress_log ORDER BY seq",
				  0, NULL, NULL);
	if (!res)
	{
		printf("FAIL: cannot read stress_log\n");
		return 1;
	}
	rows = PQntuples(res);
	for (i = 0; i < rows; i++)
	{
		long		v = atol(PQgetvalue(res, i, 0));
		long long	f = atoll(PQgetvalue(res, i, 1));

		if (v != i + 1 && bad_value_at < 0)
			bad_value_at = i;
		if (f <= prev_fence && bad_fence_at < 0)
			bad_fence_at = i;
		prev_fence = f;
	}
	PQclear(res);
	PQfinish(conn);

	failed += !check(value == t->committed,
					 "counter value %ld == committed increments %ld",
					 value, t->committed);
	failed += !check(value == target, "counter value %ld == target %ld",
					 value, target);
	failed += !check(rows == t->committed && bad_value_at < 0,
					 "stress_log holds values 1..%ld in write order, no gaps or"
					 " duplicates (rows %ld, first bad row %s)",
					 t->committed, rows, row_label(bad_value_at));
	if (!elect)					/* a term has many writes: verify_elect */
		failed += !check(bad_fence_at < 0,
						 "fences strictly increasing in write order (first bad row %s)",
						 row_label(bad_fence_at));
	failed += !check(rows == 0 || last_fence_counter == prev_fence,
					 "counter's last_fence %lld is the last logged fence %lld",
					 last_fence_counter, prev_fence);
	failed += !check(t->stale_writes == 0,
					 "no write of a holder paused beyond its lease was accepted"
					 " (%ld accepted)", t->stale_writes);
	failed += !check(t->errors == 0, "no unexpected worker errors (%ld)",
					 t->errors);
	return failed;
}

static int
cmp_acq(const void *a, const void *b)
{
	long long	fa = ((const Acq *) a)->fence,
				fb = ((const Acq *) b)->fence;

	return fa < fb ? -1 : fa > fb;
}

/*
 * verify_fair: in acquisition (fence) order, the tickets the acquirers
 * were seen waiting with strictly increase; and enough acquisitions had a
 * ticket seen for that to mean something.  Returns the failed checks.
 */
static int
verify_fair(void)
{
	long		n = shared->nacq < shared->acq_cap ? shared->nacq : shared->acq_cap;
	long		seen = 0,
				bad_at = -1;
	long long	prev = 0;
	int			failed = 0;

	qsort(shared->acq, n, sizeof(Acq), cmp_acq);
	for (long i = 0; i < n; i++)
	{
		if (shared->acq[i].ticket == 0)
			continue;
		seen++;
		if (shared->acq[i].ticket <= prev && bad_at < 0)
		{
			bad_at = i;
			fprintf(stderr, "dlock_stress: fence %lld (worker %d) served ticket %lld"
					" after ticket %lld\n", shared->acq[i].fence, shared->acq[i].slotno,
					shared->acq[i].ticket, prev);
		}
		prev = shared->acq[i].ticket;
	}
	printf("fair acquisitions:    %ld, %ld with a ticket seen\n", n, seen);
	failed += !check(shared->nacq <= shared->acq_cap, "every acquisition was logged");
	failed += !check(bad_at < 0, "tickets served in the order they were taken"
					 " (first bad acquisition %s)", row_label(bad_at));
	failed += !check(seen * 4 >= n, "a ticket was seen for at least a quarter of the"
					 " acquisitions (%ld of %ld)", seen, n);
	return failed;
}

/*
 * The chaos of a run: kills and pauses, alternating, spread evenly over
 * the run (event j is due once (j + 1) / (events + 1) of the target has
 * been committed), one pause at a time.
 */
typedef struct Chaos
{
	char	   *plan;			/* events in order: 'k' kill, 'p' pause */
	int			nevents;
	int			next_event;
	int			kills_done;
	int			pauses_done;
	int			paused_slot;	/* the paused worker, or -1 */
	double		resume_at;		/* ... resumed then */
} Chaos;

/* map_shared: the shared memory of the run (slots and acquisitions). */
static bool
map_shared(void)
{
	long		cap = 4 * target + 16L * nclients + 1000;
	size_t		size = sizeof(Shared) + nclients * sizeof(Slot) + cap * sizeof(Acq);

	shared = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
	{
		perror("dlock_stress: mmap");
		return false;
	}
	memset(shared, 0, size);
	shared->acq_cap = cap;
	shared->acq = (Acq *) ((char *) shared + sizeof(Shared) + nclients * sizeof(Slot));
	return true;
}

/* plan_chaos: nkills kills and npauses pauses, alternating while both last. */
static void
plan_chaos(Chaos *c)
{
	int			i;

	memset(c, 0, sizeof(*c));
	c->paused_slot = -1;
	c->nevents = nkills + npauses;
	c->plan = malloc(c->nevents + 1);
	for (i = 0; i < c->nevents; i++)
	{
		int			k = 0,
					p = 0,
					j;

		for (j = 0; j < i; j++)
			c->plan[j] == 'k' ? k++ : p++;
		c->plan[i] = (k < nkills && (i % 2 == 0 || p >= npauses)) ? 'k' : 'p';
	}
}

/*
 * collect_exited: reap the workers that exited; refill the slots of those
 * killed by the chaos, and (up to a limit) of those that failed, which
 * verify() reports.  Counts the workers done in *ndone.
 */
static void
collect_exited(int *ndone, int *replaced_errors)
{
	pid_t		pid;
	int			status;
	int			i;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
	{
		for (i = 0; i < nclients; i++)
			if (shared->slots[i].pid == pid)
				break;
		if (i == nclients)
			continue;
		shared->slots[i].pid = 0;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		{
			shared->slots[i].done = true;
			(*ndone)++;
		}
		else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
				 get_state(&shared->slots[i]) == ST_DOOMED)
			spawn(i);
		else
		{
			fprintf(stderr, "dlock_stress: worker %d (pid %d) failed: %s %d\n",
					i, (int) pid,
					WIFEXITED(status) ? "exit status" : "signal",
					WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
			if (!(WIFEXITED(status) && WEXITSTATUS(status) == EXIT_WORKER_ERROR))
				shared->slots[i].errors++;
			/* Replace it so the run can finish; verify() reports it. */
			if (++(*replaced_errors) <= 3 * nclients)
				spawn(i);
			else
			{
				shared->slots[i].done = true;
				(*ndone)++;
			}
		}
	}
}

/*
 * chaos_step: end a pause that has lasted long enough, and start the next
 * chaos event when it is due (on a worker sleeping while it holds).
 */
static void
chaos_step(Chaos *c, long committed)
{
	bool		is_kill;
	int			victim;

	if (c->paused_slot >= 0 && now_s() >= c->resume_at)
	{
		set_state(&shared->slots[c->paused_slot], ST_RESUMED);
		kill(shared->slots[c->paused_slot].pid, SIGCONT);
		if (verbose)
			fprintf(stderr, "dlock_stress: resumed worker %d\n", c->paused_slot);
		c->paused_slot = -1;
		c->pauses_done++;
	}
	if (c->next_event >= c->nevents ||
		committed * (c->nevents + 1) < (long) (c->next_event + 1) * target)
		return;
	is_kill = c->plan[c->next_event] == 'k';
	if (!is_kill && c->paused_slot >= 0)
		return;					/* one pause at a time */
	__atomic_store_n(&shared->chaos_wanted, 1, __ATOMIC_SEQ_CST);
	victim = claim_sleeping(is_kill ? ST_DOOMED : ST_PAUSING);
	if (victim < 0)
		return;
	__atomic_store_n(&shared->chaos_wanted, 0, __ATOMIC_SEQ_CST);
	if (is_kill)
	{
		kill(shared->slots[victim].pid, SIGKILL);
		c->kills_done++;
	}
	else
	{
		kill(shared->slots[victim].pid, SIGSTOP);
		c->paused_slot = victim;
		c->resume_at = now_s() + pause_ms / 1000.0;
	}
	if (verbose)
		fprintf(stderr, "dlock_stress: %s worker %d (pid %d) at %ld commits\n",
				is_kill ? "killed" : "paused", victim,
				(int) shared->slots[victim].pid, committed);
	c->next_event++;
}

/* report: the run's figures, then its checks; the number that failed. */
static int
report(const Chaos *c, double elapsed, bool timed_out)
{
	Totals		t = sum_slots();
	int			failed;

	printf("increments committed: %ld\n", t.committed);
	printf("fenced-off writes:    %ld (after a chaos pause: %ld)\n",
		   t.fenced, t.fenced_after_pause);
	printf("kills:                %d of %d requested\n", c->kills_done, nkills);
	printf("pauses:               %d of %d requested\n", c->pauses_done, npauses);
	printf("lock timeouts:        %ld\n", t.lock_timeouts);
	printf("%s         %ld\n", elect ? "lost resigns:" : "lost unlocks:", t.lost_unlocks);
	printf("elapsed:              %.2f s\n", elapsed);
	printf("increments/s:         %.1f\n", elapsed > 0 ? t.committed / elapsed : 0.0);

	if (timed_out)
	{
		printf("FAIL: did not finish within --max-seconds %.0f\n", max_seconds);
		printf("RESULT: FAIL\n");
		return 1;
	}
	failed = verify(&t);
	failed += !check(t.fenced_after_pause == c->pauses_done,
					 "every pause beyond the lease ended in a fenced-off write"
					 " (%ld of %d)", t.fenced_after_pause, c->pauses_done);
	if (fair)
		failed += verify_fair();
	if (elect)
		failed += verify_elect();
	printf("RESULT: %s\n", failed ? "FAIL" : "PASS");
	return failed;
}

/*
 * main: set up, run the workers under chaos until the target is reached
 * (or --max-seconds passes), then verify and report.
 */
int
main(int argc, char **argv)
{
	Chaos		chaos;
	int			ndone = 0;
	int			replaced_errors = 0;
	bool		timed_out = false;
	int			i;

	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	setup_tables();
	if (!map_shared())
		return 2;

	printf("dlock_stress: %d clients, %ld increments, lease %ld ms, wait %ld ms,"
		   " sleep %ld ms, kills %d, pauses %d (%ld ms), resource \"%s\"%s\n",
		   nclients, target, lease_ms, wait_ms, sleep_ms, nkills, npauses,
		   pause_ms, resource, fair ? ", fair" : elect ? ", election" : "");
	start_time = now_s();
	for (i = 0; i < nclients; i++)
		spawn(i);

	plan_chaos(&chaos);
	while (ndone < nclients)
	{
		long		committed = __atomic_load_n(&shared->committed_total, __ATOMIC_SEQ_CST);

		if (now_s() - start_time > max_seconds)
		{
			timed_out = true;
			kill_all();
			break;
		}
		collect_exited(&ndone, &replaced_errors);
		chaos_step(&chaos, committed);
		sleep_ms_now(1);
	}
	__atomic_store_n(&shared->chaos_wanted, 0, __ATOMIC_SEQ_CST);
	return report(&chaos, now_s() - start_time, timed_out) ? 1 : 0;
}
