/*
 * stress_util.c: helpers of dlock_stress (see stress.h): the monotonic
 * clock, durations, libpq wrappers, the slot state handshake with the
 * parent, the fenced write both modes use, and PASS/FAIL lines.
 *
 * Shared state: the Shared mapping (stress.h); here only a slot's state
 * and counters, through __atomic builtins.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stress.h"

/* now_s: monotonic clock in seconds, for elapsed times and deadlines. */
double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* sleep_ms_now: sleep for ms milliseconds (restarting after signals). */
void
sleep_ms_now(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/*
 * parse_duration: "250ms", "2s", "5m", "1h" or a bare number of seconds to
 * milliseconds; -1 if malformed.  Same forms as the dlock CLI accepts.
 */
long
parse_duration(const char *s)
{
	char	   *end;
	double		v = strtod(s, &end);

	if (end == s || v < 0)
		return -1;
	if (*end == '\0' || strcmp(end, "s") == 0)
		return (long) (v * 1000);
	if (strcmp(end, "ms") == 0)
		return (long) v;
	if (strcmp(end, "m") == 0)
		return (long) (v * 60000);
	if (strcmp(end, "h") == 0)
		return (long) (v * 3600000);
	return -1;
}

/* connect_or_die: open a connection; exit with code on failure. */
PGconn *
connect_or_die(int code)
{
	PGconn	   *conn = PQconnectdb(conninfo);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "dlock_stress: connection failed: %s", PQerrorMessage(conn));
		exit(code);
	}
	return conn;
}

/*
 * exec_ok: run a statement with text parameters; returns the result if it
 * succeeded, else prints the error, clears it and returns NULL.  *sqlstate
 * (if given) receives the error's SQLSTATE ("" on success).
 */
PGresult *
exec_ok(PGconn *conn, const char *sql, int nparams, const char *const *params,
		char *sqlstate)
{
	PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (sqlstate)
		sqlstate[0] = '\0';
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return res;
	if (sqlstate)
	{
		const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		snprintf(sqlstate, 6, "%s", s ? s : "?????");
	}
	if (!sqlstate || strcmp(sqlstate, "55P03") != 0)
		fprintf(stderr, "dlock_stress[%d]: \"%s\" failed: %s", (int) getpid(),
				sql, PQerrorMessage(conn));
	PQclear(res);
	return NULL;
}

/* command_or_die: run a statement that must succeed (setup, checks). */
void
command_or_die(PGconn *conn, const char *sql)
{
	PGresult   *res = exec_ok(conn, sql, 0, NULL, NULL);

	if (!res)
		exit(2);
	PQclear(res);
}

/* bump: atomically add 1 to a shared counter. */
void
bump(long *counter)
{
	__atomic_add_fetch(counter, 1, __ATOMIC_SEQ_CST);
}

/* get_state / set_state / cas_state: the slot state handshake. */
int
get_state(Slot *slot)
{
	return __atomic_load_n(&slot->state, __ATOMIC_SEQ_CST);
}

void
set_state(Slot *slot, int st)
{
	__atomic_store_n(&slot->state, st, __ATOMIC_SEQ_CST);
}

bool
cas_state(Slot *slot, int from, int to)
{
	return __atomic_compare_exchange_n(&slot->state, &from, to, false,
									   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/*
 * write_increment: the fenced write, in one transaction: assert_fence, then
 * the counter update and the log insert (value, fence, holder: the term
 * and the candidate under --elect).  Returns 1 if committed, 0 if fenced
 * off (55P03), -1 on any other error.
 */
int
write_increment(PGconn *conn, const char *fence, long value, const char *holder)
{
	char		newval[32];
	char		sqlstate[6];
	const char *p_assert[2] = {resource, fence};
	const char *p_write[3] = {newval, fence, holder};
	PGresult   *res;

	snprintf(newval, sizeof(newval), "%ld", value + 1);
	if (!(res = exec_ok(conn, "BEGIN", 0, NULL, NULL)))
		return -1;
	PQclear(res);
	res = exec_ok(conn, no_fence ? "SELECT $1::text, $2::bigint" :
				  "SELECT dlock.assert_fence($1, $2::bigint)", 2,
				  p_assert, sqlstate);
	if (!res)
	{
		PGresult   *rb = PQexec(conn, "ROLLBACK");

		PQclear(rb);
		return strcmp(sqlstate, "55P03") == 0 ? 0 : -1;
	}
	PQclear(res);
	if (!(res = exec_ok(conn, "UPDATE stress_counter SET value = $1::bigint,"
						" last_fence = $2::bigint WHERE id = 1", 2, p_write, NULL)))
		return -1;
	PQclear(res);
	if (!(res = exec_ok(conn, "INSERT INTO stress_log (value, fence, holder)"
						" VALUES ($1::bigint, $2::bigint, $3)", 3, p_write, NULL)))
		return -1;
	PQclear(res);
	/* An error here (connection lost) leaves the outcome unknown: -1. */
	if (!(res = exec_ok(conn, "COMMIT", 0, NULL, NULL)))
		return -1;
	if (strcmp(PQcmdStatus(res), "COMMIT") != 0)
	{
		fprintf(stderr, "dlock_stress[%d]: COMMIT said %s\n", (int) getpid(),
				PQcmdStatus(res));
		PQclear(res);
		return -1;
	}
	PQclear(res);
	return 1;
}

/*
 * wait_in_window: the read-to-write window.  Sleeps --sleep-ms, lingers
 * while the parent wants a chaos victim (so chaos never depends on luck),
 * then claims the window for the write.  If the parent claimed it first:
 * DOOMED waits for the SIGKILL; PAUSING waits (stopped) until RESUMED.
 * Returns true if the worker was paused.
 */
bool
wait_in_window(Slot *slot)
{
	long		lingered = 0;

	set_state(slot, ST_SLEEPING);
	if (sleep_ms > 0)
		sleep_ms_now(sleep_ms);
	while (__atomic_load_n(&shared->chaos_wanted, __ATOMIC_SEQ_CST) &&
		   get_state(slot) == ST_SLEEPING && lingered < 1000)
	{
		sleep_ms_now(1);
		lingered++;
	}
	if (cas_state(slot, ST_SLEEPING, ST_WRITING))
		return false;
	if (get_state(slot) == ST_DOOMED)
		for (;;)
			pause();			/* SIGKILL is on its way */
	while (get_state(slot) != ST_RESUMED)
		sleep_ms_now(1);
	set_state(slot, ST_WRITING);
	return true;
}

/* check: print a PASS or FAIL line; returns ok. */
bool
check(bool ok, const char *fmt, ...)
{
	va_list		ap;

	printf("%s: ", ok ? "PASS" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	return ok;
}

/* row_label: a 0-based row index as a 1-based label, "none" if negative. */
const char *
row_label(long i)
{
	static char buf[2][32];
	static int	which = 0;

	which = 1 - which;
	if (i < 0)
		return "none";
	snprintf(buf[which], sizeof(buf[which]), "%ld", i + 1);
	return buf[which];
}
