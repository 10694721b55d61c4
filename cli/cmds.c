/*
 * cmds.c - the one-shot subcommands of dlock: try, lock, unlock, renew,
 * status, watch, observe, reap, and --version.  Each connects, runs its SQL with
 * parameters (user text never enters the SQL text), prints the answer
 * and returns the exit code.
 */
#include "dlock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ONE_SHOT_MS 30000		/* deadline of a one-shot statement */

/*
 * connect_or_fail: the connection of a one-shot command; NULL (reported)
 * if none can be made.
 */
static PGconn *
connect_or_fail(const Options *o)
{
	return db_connect(o, now_ms() + ONE_SHOT_MS, false, false);
}

/*
 * query: run one statement on conn and return its successful result, or
 * NULL after reporting the error under the name what.
 */
static PGresult *
query(PGconn **connp, const char *what, const char *sql, int n,
	  const char *const *params)
{
	PGresult   *r;

	if (db_exec(connp, sql, n, params, now_ms() + ONE_SHOT_MS, false, &r) != DB_OK)
	{
		logmsg("%s: %s", what, db_lost_reason());
		return NULL;
	}
	if (!db_result_ok(r))
	{
		db_report(what, *connp, r);
		PQclear(r);
		return NULL;
	}
	return r;
}

/*
 * cmd_try: "dlock try" (wait false: one attempt) and "dlock lock" (wait
 * true: up to --wait, forever by default).  Prints the fence; a busy
 * resource exits 75.  The acquisition uses the same transactional path as
 * "run", so an acquisition whose COMMIT outcome was lost is resolved.
 */
int
cmd_try(Options *o, bool wait)
{
	Lock		lk;
	AcqStatus	st;

	if (o->npos != 1)
		return usage_error("%s: expected exactly one RESOURCE", o->subcommand);
	if (wait)
		signals_install();
	lock_init(&lk, o, o->pos[0], o->lease_ms);
	lk.conn = connect_or_fail(o);
	if (lk.conn == NULL)
		return EXIT_CONN;
	st = acquire(&lk, wait ? o->wait_ms : 0);
	db_drop(&lk.conn);
	switch (st)
	{
		case ACQ_OK:
			printf("%s\n", lk.fence);
			if (o->holder == NULL)
				logmsg("held by generated holder \"%s\" (use --holder to choose one)",
					   lk.holder);
			return 0;
		case ACQ_TIMEOUT:
			logmsg(wait ? "\"%s\" not acquired in time" : "\"%s\" is held by another holder",
				   lk.resource);
			return EXIT_NOT_ACQUIRED;
		case ACQ_SIGNAL:
			return 128 + signals_term_sig();
		case ACQ_CONN:
		case ACQ_ERROR:
			break;
	}
	return EXIT_CONN;
}

/*
 * holding_call: run unlock or renew (one value back) on a fresh
 * connection; print the value, or say the holding is not there (exit 76).
 */
static int
holding_call(Options *o, const char *what, const char *sql, int nparams,
			 const char **params, const char *prefix)
{
	PGconn	   *conn;
	PGresult   *r;
	int			code = 0;

	if ((conn = connect_or_fail(o)) == NULL)
		return EXIT_CONN;
	r = query(&conn, what, sql, nparams, params);
	if (r == NULL)
		code = EXIT_CONN;
	else if (PQgetisnull(r, 0, 0))
	{
		logmsg("%s\"%s\" is not held by \"%s\"%s%s", prefix, o->pos[0], o->holder,
			   o->fence ? " with fence " : "", o->fence ? o->fence : "");
		code = EXIT_LEASE_LOST;
	}
	else
		printf("%s\n", PQgetvalue(r, 0, 0));
	if (r)
		PQclear(r);
	db_drop(&conn);
	return code;
}

/*
 * cmd_unlock: "dlock unlock RESOURCE --holder H [--fence N]"; prints the
 * count left (0: released).  Not held by that holder (and fence): 76.
 */
int
cmd_unlock(Options *o)
{
	const char *params[3];

	if (o->npos != 1)
		return usage_error("unlock: expected exactly one RESOURCE");
	if (o->holder == NULL)
		return usage_error("unlock: --holder is required");
	params[0] = o->pos[0];
	params[1] = o->holder;
	params[2] = o->fence;
	return holding_call(o, "unlock", "SELECT dlock.unlock($1, $2, $3::bigint)",
						3, params, "");
}

/*
 * cmd_renew: "dlock renew RESOURCE --holder H [--lease D] [--fence N]";
 * prints the new expiry.  Lease lost: 76.
 */
int
cmd_renew(Options *o)
{
	const char *params[4];
	char		lease[48];

	if (o->npos != 1)
		return usage_error("renew: expected exactly one RESOURCE");
	if (o->holder == NULL)
		return usage_error("renew: --holder is required");
	format_interval(lease, sizeof(lease), o->lease_ms);
	params[0] = o->pos[0];
	params[1] = o->holder;
	params[2] = o->lease_ms > 0 ? lease : NULL;
	params[3] = o->fence;
	return holding_call(o, "renew",
						"SELECT dlock.renew($1, $2, $3::interval, $4::bigint)",
						4, params, "lease on ");
}

/*
 * print_table: print a result as an aligned table with a header, like
 * psql's default output, followed by a row count.
 */
static void
print_table(PGresult *r)
{
	int			nf = PQnfields(r), nt = PQntuples(r);
	int		   *w = calloc(nf > 0 ? nf : 1, sizeof(int));

	if (w == NULL)
		return;
	for (int f = 0; f < nf; f++)
	{
		w[f] = (int) strlen(PQfname(r, f));
		for (int t = 0; t < nt; t++)
			if ((int) strlen(PQgetvalue(r, t, f)) > w[f])
				w[f] = (int) strlen(PQgetvalue(r, t, f));
	}
	for (int f = 0; f < nf; f++)
		printf("%s%-*s", f ? " | " : "", f == nf - 1 ? 0 : w[f], PQfname(r, f));
	putchar('\n');
	for (int f = 0; f < nf; f++)
	{
		printf("%s", f ? "-+-" : "");
		for (int i = 0; i < w[f]; i++)
			putchar('-');
	}
	putchar('\n');
	for (int t = 0; t < nt; t++)
	{
		for (int f = 0; f < nf; f++)
			printf("%s%-*s", f ? " | " : "", f == nf - 1 ? 0 : w[f], PQgetvalue(r, t, f));
		putchar('\n');
	}
	printf("(%d %s)\n", nt, nt == 1 ? "row" : "rows");
	free(w);
}

/*
 * cmd_status: "dlock status [PREFIX]": the locks whose resource starts
 * with PREFIX (all without one), from the view dlock.locks.
 */
int
cmd_status(Options *o)
{
	const char *params[1];
	PGconn	   *conn;
	PGresult   *r;

	if (o->npos > 1)
		return usage_error("status: at most one PREFIX");
	params[0] = o->npos == 1 ? o->pos[0] : "";
	if ((conn = connect_or_fail(o)) == NULL)
		return EXIT_CONN;
	r = query(&conn, "status",
			  "SELECT resource, holder, count, fence, lease, acquired_at, renewed_at, "
			  "expires_at, owner, expired FROM dlock.locks "
			  "WHERE left(resource, length($1)) = $1 ORDER BY resource, holder",
			  1, params);
	db_drop(&conn);
	if (r == NULL)
		return EXIT_CONN;
	print_table(r);
	PQclear(r);
	return 0;
}

/*
 * subscribe: LISTEN on the resource's channel; returns the channel name
 * (malloc'd) or NULL with *connp possibly dropped.
 */
static char *
subscribe(PGconn **connp, const char *resource)
{
	return db_listen(connp, resource, now_ms() + ONE_SHOT_MS);
}

/*
 * resubscribe: after watch lost its connection, reconnect and LISTEN
 * again, with growing pauses (capped at 5 s), until it works or a signal
 * asks us to stop (NULL), so that watch rides out a failover.  *chan is
 * replaced by the fresh name.
 */
static PGconn *
resubscribe(const Options *o, const char *resource, char **chan)
{
	for (int tries = 1; signals_term_count() == 0; tries++)
	{
		PGconn	   *conn;
		char	   *c;

		db_sleep(now_ms() + jitter(tries < 5 ? (int64_t) 250 << tries : 5000));
		if (tries == 6)
			logmsg("still reconnecting: %s", db_lost_reason());
		if (signals_term_count() > 0)
			break;
		conn = db_connect(o, now_ms() + ONE_SHOT_MS, true, true);
		if (conn == NULL)
			continue;
		if ((c = subscribe(&conn, resource)) == NULL)
		{
			db_drop(&conn);
			continue;
		}
		free(*chan);
		*chan = c;
		logmsg("reconnected; events in between were missed");
		return conn;
	}
	return NULL;
}

/*
 * cmd_watch: "dlock watch RESOURCE": LISTEN on the resource's channel and
 * print each event's JSON payload on its own line until a signal ends it
 * (exit 0).  A lost connection is re-established (events sent meanwhile
 * are missed, which is said on stderr).
 */
int
cmd_watch(Options *o)
{
	PGconn	   *conn;
	char	   *chan;

	if (o->npos != 1)
		return usage_error("watch: expected exactly one RESOURCE");
	signals_install();
	if ((conn = connect_or_fail(o)) == NULL)
		return EXIT_CONN;
	if (db_pooled(&conn) && conn)
		logmsg("warning: connection pooler detected; LISTEN may not receive events");
	if (conn == NULL || (chan = subscribe(&conn, o->pos[0])) == NULL)
	{
		db_drop(&conn);
		return EXIT_CONN;
	}
	for (;;)
	{
		DbStatus	st;

		if (signals_term_count() > 0)
			break;
		if (conn == NULL && (conn = resubscribe(o, o->pos[0], &chan)) == NULL)
		{
			if (signals_term_count() > 0)
				break;
			logmsg("could not reconnect: %s", db_lost_reason());
			free(chan);
			return EXIT_CONN;
		}
		st = db_wait(conn, NEVER, true);
		if (st == DB_OK && PQconsumeInput(conn))
			db_drain_notifies(conn, chan, true);
		else if (st != DB_SIGNAL)
		{
			logmsg("connection lost: %s", PQerrorMessage(conn));
			db_drop(&conn);
		}
	}
	free(chan);
	db_drop(&conn);
	return 0;
}

/* json_string: print s as a JSON string. */
static void
json_string(const char *s)
{
	putchar('"');
	for (; *s; s++)
	{
		unsigned char c = (unsigned char) *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/*
 * print_events: print each notification on chan as one JSON line: the
 * server's payload with "election" added first.
 */
static void
print_events(PGconn *conn, const char *chan, const char *election)
{
	PGnotify   *n;

	while ((n = PQnotifies(conn)) != NULL)
	{
		if (strcmp(n->relname, chan) == 0 && n->extra[0] == '{')
		{
			printf("{\"election\":");
			json_string(election);
			printf(",%s\n", n->extra + 1);
		}
		PQfreemem(n);
	}
	fflush(stdout);
}

#define OBSERVE_POLL_MS 200		/* leader() polling interval behind a pooler */
#define OBSERVE_RECHECK_MS 5000	/* re-read while listening (unannounced expiry) */

/* What observe printed so far. */
typedef struct Observed
{
	char	   *last;			/* key of the last state printed (malloc'd), or NULL */
	long long	seen;			/* highest term printed or passed over; -1: none yet */
	int			terms;			/* the server has dlock.terms (0.3): -1 not asked yet */
} Observed;

/* print_term: a term that began (and maybe ended) since the last look. */
static void
print_term(const char *election, PGresult *r, int i)
{
	printf("{\"event\":\"elected\",\"election\":");
	json_string(election);
	printf(",\"candidate\":");
	json_string(PQgetvalue(r, i, 1));
	printf(",\"term\":%s,\"value\":", PQgetvalue(r, i, 2));
	if (PQgetisnull(r, i, 3))
		printf("null");
	else
		json_string(PQgetvalue(r, i, 3));
	printf("}\n");
}

/*
 * has_terms: does the server have dlock.terms (the 0.3 SQL)?  Asked once
 * per observer.  False if the query failed.
 */
static bool
has_terms(PGconn **connp, Observed *ob)
{
	PGresult   *r;

	if (ob->terms >= 0)
		return true;
	if (db_exec(connp, "SELECT to_regclass('dlock.terms') IS NOT NULL", 0, NULL,
				now_ms() + ONE_SHOT_MS, false, &r) != DB_OK)
		return false;
	if (!db_result_ok(r) || PQntuples(r) != 1)
	{
		db_report("dlock.terms", *connp, r);
		PQclear(r);
		return false;
	}
	ob->terms = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return true;
}

/* print_leader: the state line, "leader" (row lead of r) or "none". */
static void
print_leader(const char *election, PGresult *r, int lead)
{
	if (lead < 0)
	{
		printf("{\"event\":\"none\",\"election\":");
		json_string(election);
		printf("}\n");
	}
	else
	{
		printf("{\"event\":\"leader\",\"election\":");
		json_string(election);
		printf(",\"candidate\":");
		json_string(PQgetvalue(r, lead, 1));
		printf(",\"term\":%s,\"value\":", PQgetvalue(r, lead, 2));
		if (PQgetisnull(r, lead, 3))
			printf("null");
		else
			json_string(PQgetvalue(r, lead, 3));
		printf(",\"expires_at\":");
		json_string(PQgetvalue(r, lead, 4));
		printf("}\n");
	}
	fflush(stdout);
}

/*
 * leader_key: the leader's (candidate, term, value) as one string to
 * compare with the last state printed ("" for none); NULL if out of memory.
 */
static char *
leader_key(PGresult *r, int lead)
{
	size_t		len;
	char	   *key;

	len = lead < 0 ? 1 : strlen(PQgetvalue(r, lead, 1)) + strlen(PQgetvalue(r, lead, 2)) +
		strlen(PQgetvalue(r, lead, 3)) + 8;
	key = malloc(len);
	if (key == NULL)
		return NULL;
	if (lead < 0)
		key[0] = '\0';
	else
		snprintf(key, len, "%s\x1f%s\x1f%c%s", PQgetvalue(r, lead, 1), PQgetvalue(r, lead, 2),
				 PQgetisnull(r, lead, 3) ? 'n' : 'v', PQgetvalue(r, lead, 3));
	return key;
}

/*
 * observe_leader: read dlock.leader(election); if its (candidate, term,
 * value) differs from the last state printed, print it as one JSON line
 * (when print) and remember it.  With terms (a poller, on a server with
 * the 0.3 SQL), first print an "elected" line for each term elected since
 * the last look that no longer leads (dlock.terms: the ones that began and
 * ended between two looks), in the same statement, so that none falls
 * between the two reads; then the state line, even if it is the same as
 * before.  False if the query failed (*connp may be dropped).
 */
static bool
observe_leader(PGconn **connp, const char *election, Observed *ob, bool print,
			   bool terms)
{
	char		seen[32];
	const char *params[2] = {election, seen};
	PGresult   *r;
	char	   *key;
	int			n, lead;
	bool		passed = false;

	if (terms && !has_terms(connp, ob))
		return false;
	terms = terms && ob->terms == 1;
	snprintf(seen, sizeof(seen), "%lld", ob->seen < 0 ? 9223372036854775807LL : ob->seen);
	if (db_exec(connp,
				terms
				? "WITH l AS MATERIALIZED (SELECT candidate, term, value, expires_at "
				"                          FROM dlock.leader($1)) "
				"SELECT true AS passed, t.candidate, t.term, t.value, NULL::timestamptz, NULL::bigint "
				"  FROM dlock.terms t WHERE t.election = $1 AND t.term > $2::bigint "
				"   AND t.term < coalesce((SELECT l.term FROM l), 9223372036854775807) "
				"UNION ALL "
				"SELECT false, l.candidate, l.term, l.value, l.expires_at, NULL FROM l "
				"UNION ALL "
				"SELECT NULL, NULL, NULL, NULL, NULL, max(t.term) FROM dlock.terms t "
				"  WHERE t.election = $1 "
				"ORDER BY 1 DESC NULLS LAST, 3"
				: "SELECT false, candidate, term, value, expires_at FROM dlock.leader($1)",
				terms ? 2 : 1, params, now_ms() + ONE_SHOT_MS, false, &r) != DB_OK)
		return false;
	if (!db_result_ok(r))
	{
		db_report("leader", *connp, r);
		PQclear(r);
		return false;
	}

	/* the terms passed over, the leader's row (if any), then the newest term */
	n = PQntuples(r);
	lead = -1;
	for (int i = 0; i < n; i++)
	{
		if (PQgetisnull(r, i, 0))
		{
			/* the newest term of the log: nothing older is news at the first look */
			if (ob->seen < 0 && !PQgetisnull(r, i, 5))
				ob->seen = strtoll(PQgetvalue(r, i, 5), NULL, 10);
			continue;
		}
		if (strcmp(PQgetvalue(r, i, 0), "f") == 0)
		{
			lead = i;
			continue;
		}
		if (print)
			print_term(election, r, i);
		passed = true;
		if (strtoll(PQgetvalue(r, i, 2), NULL, 10) > ob->seen)
			ob->seen = strtoll(PQgetvalue(r, i, 2), NULL, 10);
	}
	if (lead >= 0 && strtoll(PQgetvalue(r, lead, 2), NULL, 10) > ob->seen)
		ob->seen = strtoll(PQgetvalue(r, lead, 2), NULL, 10);
	if (ob->seen < 0)
		ob->seen = 0;

	key = leader_key(r, lead);
	if (key == NULL)
	{
		PQclear(r);
		return false;
	}
	if (!passed && ob->last != NULL && strcmp(ob->last, key) == 0)
	{
		free(key);
		PQclear(r);
		return true;
	}
	free(ob->last);
	ob->last = key;
	if (print)
		print_leader(election, r, lead);
	PQclear(r);
	return true;
}

/*
 * cmd_observe: "dlock observe ELECTION": the current leader as one JSON
 * line ("leader", or "none"), then one line per change until a signal ends
 * it (exit 0).  Listening, each event on the election's channel is printed
 * as the server sent it (elected, proclaimed, resigned, expired, and
 * released or broken for plain holdings), and the leader is re-read every
 * 5 s so that a change nobody announced (an expiry without a reaper) is
 * printed too.  Behind a pooler (or with --poll) dlock.leader() is polled
 * every 200 ms and a "leader"/"none" line printed on each change, after an
 * "elected" line for each term that began and ended since the last poll
 * (dlock.terms, 0.3 SQL; with 0.2 such a term is missed).  After a
 * lost connection it reconnects, reads the leader again and prints it if
 * it changed (events in between are missed; stderr says so).
 */
int
cmd_observe(Options *o)
{
	PGconn	   *conn;
	char	   *chan = NULL;
	Observed	ob = {NULL, -1, -1};
	bool		polling = o->poll;
	const char *election;

	if (o->npos != 1)
		return usage_error("observe: expected exactly one ELECTION");
	election = o->pos[0];
	signals_install();
	if ((conn = connect_or_fail(o)) == NULL)
		return EXIT_CONN;
	if (!polling && db_pooled(&conn))
		polling = true;
	if (conn != NULL && !polling)
		chan = subscribe(&conn, election);
	if (conn == NULL || (!polling && chan == NULL) ||
		!observe_leader(&conn, election, &ob, true, polling))
	{
		free(chan);
		db_drop(&conn);
		return EXIT_CONN;
	}
	for (;;)
	{
		int64_t		next = now_ms() + (polling ? OBSERVE_POLL_MS : OBSERVE_RECHECK_MS);
		DbStatus	st;

		if (signals_term_count() > 0)
			break;
		if (conn == NULL)
		{
			if (polling)
			{
				db_sleep(now_ms() + jitter(1000));
				if (signals_term_count() > 0)
					break;
				conn = db_connect(o, now_ms() + ONE_SHOT_MS, true, true);
			}
			else
				conn = resubscribe(o, election, &chan);
			if (conn == NULL)
				continue;
			if (!observe_leader(&conn, election, &ob, true, polling))
				db_drop(&conn);
			continue;
		}
		if (polling)
		{
			st = db_sleep(next);
			if (st == DB_SIGNAL || signals_term_count() > 0)
				break;
			if (!observe_leader(&conn, election, &ob, true, true))
				db_drop(&conn);
			continue;
		}
		st = db_wait(conn, next, true);
		if (st == DB_SIGNAL)
			continue;
		if (st == DB_OK)
		{
			if (!PQconsumeInput(conn))
			{
				logmsg("connection lost: %s", PQerrorMessage(conn));
				db_drop(&conn);
				continue;
			}
			print_events(conn, chan, election);
			/* what the events said is the state now: remember it quietly */
			if (!observe_leader(&conn, election, &ob, false, false))
				db_drop(&conn);
		}
		else if (st == DB_TIMEOUT)
		{
			if (!observe_leader(&conn, election, &ob, true, false))
				db_drop(&conn);
		}
		else
		{
			logmsg("connection lost: %s", db_lost_reason());
			db_drop(&conn);
		}
	}
	free(chan);
	free(ob.last);
	db_drop(&conn);
	return 0;
}

/* cmd_reap: "dlock reap": remove expired leases now; prints how many. */
int
cmd_reap(Options *o)
{
	PGconn	   *conn;
	PGresult   *r;

	if (o->npos != 0)
		return usage_error("reap: takes no arguments");
	if ((conn = connect_or_fail(o)) == NULL)
		return EXIT_CONN;
	r = query(&conn, "reap", "SELECT dlock.reap()", 0, NULL);
	db_drop(&conn);
	if (r == NULL)
		return EXIT_CONN;
	printf("%s\n", PQgetvalue(r, 0, 0));
	PQclear(r);
	return 0;
}

/*
 * cmd_version: print the client's version (known at build time from
 * dlock.control) and, if the server can be reached, the installed
 * edition's: the C extension's (pg_extension), else the portable
 * edition's (portable/dlock.sql, whose dlock.version() says it), warning
 * on stderr when they differ or neither is installed.  Not being able to
 * connect is only a note: the exit status is 0.
 */
int
cmd_version(Options *o)
{
	PGconn	   *conn;
	PGresult   *r;
	const char *edition = "server extension";

	printf("dlock %s\n", DLOCK_VERSION);
	fflush(stdout);
	conn = db_connect(o, now_ms() + 5000, false, true);
	if (conn == NULL)
	{
		logmsg("note: the server extension's version is not known (no connection: %s)",
			   db_lost_reason());
		return 0;
	}
	r = query(&conn, "version",
			  "SELECT extversion FROM pg_extension WHERE extname = 'dlock' "
			  "UNION ALL SELECT NULL "
			  "WHERE NOT EXISTS (SELECT FROM pg_extension WHERE extname = 'dlock') "
			  "  AND to_regprocedure('dlock.version()') IS NOT NULL", 0, NULL);
	if (r != NULL && PQntuples(r) == 1 && PQgetisnull(r, 0, 0))
	{
		/* the portable edition: only now may dlock.version() be named */
		PQclear(r);
		r = query(&conn, "version", "SELECT dlock.version()", 0, NULL);
		edition = "server portable edition";
	}
	db_drop(&conn);
	if (r == NULL)
		return 0;
	if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0))
		logmsg("warning: dlock is not installed in this database "
			   "(neither the extension nor the portable edition)");
	else
	{
		printf("%s dlock %s%s\n", edition, PQgetvalue(r, 0, 0),
			   strcmp(edition, "server extension") == 0 ? "" : " (SQL only)");
		if (strcmp(PQgetvalue(r, 0, 0), DLOCK_VERSION) != 0)
			logmsg("warning: client version %s differs from the %s's %s",
				   DLOCK_VERSION, edition, PQgetvalue(r, 0, 0));
	}
	PQclear(r);
	return 0;
}
