/*
 * db.c - libpq with deadlines.  Every connection is made and every query
 * run asynchronously and waited for with poll() on the socket plus the
 * signal self-pipe, so that no network silence can hold the client past
 * a lease deadline and a signal can end any wait.  Connections are
 * non-blocking; a connection whose query was abandoned is dropped, never
 * reused.
 */
#include "dlock.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char lost_reason[512] = "connection lost";
static bool refused = false;	/* the last db_connect: refused for good */
static bool login_refused = false;	/* ... and for its credentials */
static PGresult *kept = NULL;	/* result gathered so far by db_collect */

/*
 * set_lost_reason: remember why the last connection was given up, on one
 * line, without the LOCATION lines of a verbose error.
 */
static void
set_lost_reason(const char *msg)
{
	size_t		n = 0;

	if (msg == NULL || *msg == '\0')
		msg = "connection lost";
	for (const char *p = msg; *p && n < sizeof(lost_reason) - 1;)
	{
		const char *eol;
		size_t		len;

		p += strspn(p, " \t");
		eol = strchr(p, '\n');
		len = eol ? (size_t) (eol - p) : strlen(p);

		if (strncmp(p, "LOCATION:", 9) != 0)
		{
			if (n > 0)
				lost_reason[n++] = ' ';
			for (size_t i = 0; i < len && n < sizeof(lost_reason) - 1; i++)
				lost_reason[n++] = p[i];
		}
		p += len + (eol != NULL);
	}
	while (n > 0 && lost_reason[n - 1] == ' ')
		n--;
	lost_reason[n] = '\0';
}

/*
 * refused_for_good: did the server refuse this login for a reason a
 * failover does not change?  The message is verbose (db_connect), so each
 * server's error reads "SEVERITY:  SQLSTATE: text".  A SQLSTATE other than
 * "not now" (57P01-57P03, class 53: starting, shutting down, too many
 * connections) means yes: a wrong password, an unknown role or database,
 * pg_hba.conf.  So does a password the server asked for and was not given.
 * No answer at all, or only standbys where target_session_attrs wants a
 * primary, is not (libpq's own errors have no SQLSTATE).
 */
static bool
refused_for_good(PGconn *c)
{
	const char *p = PQerrorMessage(c);
	bool		found = false;

	login_refused = PQconnectionNeedsPassword(c);
	while ((p = strstr(p, ":  ")) != NULL)
	{
		p += 3;
		if (strspn(p, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 5 &&
			p[5] == ':' && strncmp(p, "53", 2) != 0 &&
			strncmp(p, "57P01", 5) != 0 && strncmp(p, "57P02", 5) != 0 &&
			strncmp(p, "57P03", 5) != 0)
		{
			found = true;
			if (strncmp(p, "28", 2) == 0)
				login_refused = true;	/* invalid authorization */
		}
	}
	return found || login_refused;
}

/*
 * unreadable: a connection string (key=value, or a URI: what libpq
 * expands; anything else is a database name) libpq cannot parse: a syntax
 * error or an unknown keyword.  A mistake, like a refused login.
 */
static bool
unreadable(const char *conninfo)
{
	PQconninfoOption *opts;

	if (conninfo == NULL ||
		(strchr(conninfo, '=') == NULL &&
		 strncmp(conninfo, "postgresql://", 13) != 0 &&
		 strncmp(conninfo, "postgres://", 11) != 0))
		return false;
	opts = PQconninfoParse(conninfo, NULL);
	if (opts == NULL)
		return true;
	PQconninfoFree(opts);
	return false;
}

/*
 * db_refused: the last failed db_connect was refused for good (above),
 * not a server that was down, starting, or not yet a primary.
 */
bool
db_refused(void)
{
	return refused;
}

/*
 * db_login_refused: the last failed db_connect was refused for its
 * credentials (class 28: a wrong or changed password, an unknown role, a
 * pg_hba.conf reject; or no password given).  A pooler's "no server"
 * (pgbouncer: 08P01) is not.
 */
bool
db_login_refused(void)
{
	return refused && login_refused;
}

/* db_lost_reason: the message of the last lost connection, for reports. */
const char *
db_lost_reason(void)
{
	return lost_reason;
}

/*
 * wait_fd: poll fd for events and the signal pipe until fd is ready, the
 * deadline (monotonic ms) passes, or (if interruptible) a signal arrives.
 * Not interruptible waits drain the pipe and carry on; the signal flags
 * stay set for the caller's loop.
 */
static DbStatus
wait_fd(int fd, short events, int64_t deadline, bool interruptible)
{
	for (;;)
	{
		struct pollfd pfd[2];
		int			n = 0, timeout, rc;
		int64_t		now = now_ms();

		if (deadline != NEVER && now >= deadline)
			return DB_TIMEOUT;
		timeout = deadline == NEVER ? -1
			: (deadline - now > INT_MAX ? INT_MAX : (int) (deadline - now));
		pfd[n].fd = fd;
		pfd[n].events = events;
		pfd[n++].revents = 0;
		if (signals_fd() >= 0)
		{
			pfd[n].fd = signals_fd();
			pfd[n].events = POLLIN;
			pfd[n++].revents = 0;
		}
		rc = poll(pfd, n, timeout);
		if (rc < 0)
		{
			if (errno != EINTR)
				return DB_LOST;
			if (interruptible)
				return DB_SIGNAL;
			continue;
		}
		if (n > 1 && pfd[1].revents)
		{
			signals_drain();
			if (interruptible)
				return DB_SIGNAL;
		}
		if (pfd[0].revents)
			return DB_OK;
	}
}

/*
 * db_sleep: wait until the deadline or a signal, whichever is first.
 */
DbStatus
db_sleep(int64_t deadline)
{
	return wait_fd(-1, 0, deadline, true);
}

/*
 * db_connect: open a connection from -d or the PG* variables, without
 * blocking past the deadline.  Returns NULL on failure (reported unless
 * quiet, and always kept for db_lost_reason and db_refused).  The
 * application_name defaults to "dlock" so that administrators can find
 * the client's backends.
 */
PGconn *
db_connect(const Options *o, int64_t deadline, bool interruptible, bool quiet)
{
	const char *kw[3], *val[3];
	int			n = 0;
	PGconn	   *c;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;

	kw[n] = "fallback_application_name";
	val[n++] = "dlock";
	if (o->conninfo)
	{
		kw[n] = "dbname";
		val[n++] = o->conninfo;
	}
	kw[n] = NULL;
	val[n] = NULL;
	refused = login_refused = false;
	c = PQconnectStartParams(kw, val, 1);
	if (c == NULL)
	{
		set_lost_reason("out of memory");
		if (!quiet)
			logmsg("could not connect: out of memory");
		return NULL;
	}
	PQsetErrorVerbosity(c, PQERRORS_VERBOSE);	/* the SQLSTATE of a refusal */
	while (PQstatus(c) != CONNECTION_BAD && st != PGRES_POLLING_OK &&
		   st != PGRES_POLLING_FAILED)
	{
		DbStatus	w = wait_fd(PQsocket(c),
								st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
								deadline, interruptible);

		if (w == DB_TIMEOUT || w == DB_SIGNAL)
		{
			set_lost_reason(w == DB_TIMEOUT ? "timeout while connecting"
							: "interrupted while connecting");
			if (!quiet)
				logmsg("could not connect: %s", lost_reason);
			PQfinish(c);
			return NULL;
		}
		st = PQconnectPoll(c);
	}
	if (PQstatus(c) != CONNECTION_OK)
	{
		refused = refused_for_good(c) || unreadable(o->conninfo);
		set_lost_reason(PQerrorMessage(c));
		if (!quiet)
			logmsg("could not connect: %s", lost_reason);
		PQfinish(c);
		return NULL;
	}
	PQsetErrorVerbosity(c, PQERRORS_DEFAULT);
	PQsetnonblocking(c, 1);
	return c;
}

/*
 * db_wait: flush what is queued for the server and wait until the server
 * has sent something (or the deadline passes, or a signal arrives when
 * interruptible).
 */
DbStatus
db_wait(PGconn *conn, int64_t deadline, bool interruptible)
{
	for (;;)
	{
		int			f = PQflush(conn);

		if (f < 0)
			return DB_LOST;
		if (f == 0)
			return wait_fd(PQsocket(conn), POLLIN, deadline, interruptible);
		/* output still queued: wait for either direction, then flush again */
		{
			DbStatus	w = wait_fd(PQsocket(conn), POLLIN | POLLOUT, deadline,
									interruptible);

			if (w != DB_OK)
				return w;
			if (!PQconsumeInput(conn))
				return DB_LOST;
		}
	}
}

/*
 * db_send: start a query.  With parameters it uses the extended protocol
 * (PQsendQueryParams), so user text only ever travels as a parameter;
 * without, the simple protocol, which allows fixed multi-statement text.
 */
bool
db_send(PGconn *conn, const char *sql, int n, const char *const *values)
{
	if (n == 0)
		return PQsendQuery(conn, sql) == 1;
	return PQsendQueryParams(conn, sql, n, NULL, values, NULL, NULL, 0) == 1;
}

/*
 * db_collect: without blocking, read what has arrived and, once the query
 * is complete, hand back its result (the first error of a multi-statement
 * query, else the last result).  DB_BUSY: not complete yet; DB_LOST: the
 * connection failed.
 */
DbStatus
db_collect(PGconn *conn, PGresult **res)
{
	if (PQflush(conn) < 0 || !PQconsumeInput(conn))
	{
		set_lost_reason(PQerrorMessage(conn));
		if (kept)
			PQclear(kept);
		kept = NULL;
		return DB_LOST;
	}
	while (!PQisBusy(conn))
	{
		PGresult   *r = PQgetResult(conn);

		if (r == NULL)
		{
			*res = kept;
			kept = NULL;
			return DB_OK;
		}
		if (kept && PQresultStatus(kept) == PGRES_FATAL_ERROR)
			PQclear(r);
		else
		{
			if (kept)
				PQclear(kept);
			kept = r;
		}
	}
	return DB_BUSY;
}

/*
 * db_result_ok: true for a successful command or query result.
 */
bool
db_result_ok(PGresult *res)
{
	ExecStatusType s = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;

	return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

/*
 * db_error_is_connection: whether a failed result means the session is
 * gone (class 08, or the server shutting the backend down: 57P01..57P03)
 * rather than an error of the statement itself.
 */
bool
db_error_is_connection(PGresult *res)
{
	const char *state;

	if (res == NULL)
		return true;
	state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (state == NULL)
		return PQresultStatus(res) == PGRES_FATAL_ERROR;
	return strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0;
}

/*
 * db_error_is_retryable: whether a failed result is a rollback the server
 * asks to retry: a serialization failure (40001: a caller's SERIALIZABLE or
 * REPEATABLE READ default) or a deadlock (40P01).  Nothing was done.
 */
bool
db_error_is_retryable(PGresult *res)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	return state != NULL && (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0);
}

/*
 * db_exec: run one query and wait for its result until the deadline.
 * DB_OK: *res is the result (maybe an SQL error; caller PQclears).
 * Anything else: no result, and *connp has been dropped (set to NULL),
 * since a connection that lost its session or still runs an abandoned
 * query cannot be reused.
 */
DbStatus
db_exec(PGconn **connp, const char *sql, int n, const char *const *values,
		int64_t deadline, bool interruptible, PGresult **res)
{
	PGconn	   *conn = *connp;

	*res = NULL;
	if (conn == NULL)
		return DB_LOST;
	if (!db_send(conn, sql, n, values))
	{
		set_lost_reason(PQerrorMessage(conn));
		db_drop(connp);
		return DB_LOST;
	}
	for (;;)
	{
		PGresult   *r = NULL;
		DbStatus	st = db_collect(conn, &r);

		if (st == DB_OK)
		{
			if (PQstatus(conn) == CONNECTION_BAD ||
				(!db_result_ok(r) && db_error_is_connection(r)))
			{
				set_lost_reason(r ? PQresultErrorMessage(r) : PQerrorMessage(conn));
				if (r)
					PQclear(r);
				db_drop(connp);
				return DB_LOST;
			}
			*res = r;
			return DB_OK;
		}
		if (st == DB_LOST)
		{
			db_drop(connp);
			return DB_LOST;
		}
		st = db_wait(conn, deadline, interruptible);
		if (st != DB_OK)
		{
			set_lost_reason(st == DB_TIMEOUT ? "query timed out"
							: st == DB_SIGNAL ? "interrupted" : PQerrorMessage(conn));
			db_drop(connp);
			return st;
		}
	}
}

/*
 * db_report: print an error of a query (or of the connection) on stderr,
 * prefixed with what we were doing.
 */
void
db_report(const char *what, PGconn *conn, PGresult *res)
{
	const char *msg = res ? PQresultErrorMessage(res) : NULL;
	char		buf[1024];
	size_t		n;

	if ((msg == NULL || *msg == '\0') && conn)
		msg = PQerrorMessage(conn);
	if (msg == NULL || *msg == '\0')
		msg = lost_reason;
	snprintf(buf, sizeof(buf), "%s", msg);
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	logmsg("%s: %s", what, buf);
}

/*
 * db_drop: close a connection (if any) and forget it, with any partial
 * result of a query abandoned on it.
 */
void
db_drop(PGconn **connp)
{
	if (kept)
		PQclear(kept);
	kept = NULL;
	if (*connp)
		PQfinish(*connp);
	*connp = NULL;
}

/*
 * db_pooled: whether this connection goes through a pooler or proxy, so
 * that LISTEN cannot be trusted (pgbouncer in transaction mode hands each
 * transaction to any server connection; notifications go astray).  A
 * pooler reports its own, made-up backend key to the client, so the pid
 * the server reports differs from PQbackendPID.  A failed check leaves
 * *connp NULL for the caller to notice.
 */
bool
db_pooled(PGconn **connp)
{
	PGresult   *r;
	bool		pooled = false;

	if (db_exec(connp, "SELECT pg_backend_pid()", 0, NULL, now_ms() + 30000,
				false, &r) != DB_OK)
		return false;
	if (db_result_ok(r) && PQntuples(r) == 1)
		pooled = atoi(PQgetvalue(r, 0, 0)) != PQbackendPID(*connp);
	PQclear(r);
	return pooled;
}

/*
 * db_listen: LISTEN on resource's channel (dlock.channel); returns the
 * channel name (malloc'd), or NULL after reporting why (*connp is dropped
 * if the connection was lost).  The one place LISTEN is set up: waiting
 * (acquire.c), watch and observe (cmds.c).
 */
char *
db_listen(PGconn **connp, const char *resource, int64_t deadline)
{
	const char *params[1] = {resource};
	PGresult   *r;
	char	   *chan, *ident, *sql;

	if (db_exec(connp, "SELECT dlock.channel($1)", 1, params, deadline, false, &r) != DB_OK)
	{
		logmsg("LISTEN: %s", db_lost_reason());
		return NULL;
	}
	if (!db_result_ok(r) || PQntuples(r) != 1 || PQgetisnull(r, 0, 0))
	{
		db_report("dlock.channel", *connp, r);
		PQclear(r);
		return NULL;
	}
	chan = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	ident = chan ? PQescapeIdentifier(*connp, chan, strlen(chan)) : NULL;
	sql = ident ? malloc(strlen(ident) + 8) : NULL;
	if (sql == NULL)
	{
		if (ident)
			PQfreemem(ident);
		free(chan);
		logmsg("out of memory");
		return NULL;
	}
	sprintf(sql, "LISTEN %s", ident);
	PQfreemem(ident);
	if (db_exec(connp, sql, 0, NULL, deadline, false, &r) != DB_OK)
	{
		logmsg("LISTEN: %s", db_lost_reason());
		free(sql);
		free(chan);
		return NULL;
	}
	free(sql);
	if (!db_result_ok(r))
	{
		db_report("LISTEN", *connp, r);
		PQclear(r);
		free(chan);
		return NULL;
	}
	PQclear(r);
	return chan;
}

/*
 * db_drain_notifies: take every notification libpq has read; print the
 * payloads of those on channel (one per line) when asked to.  Waiters
 * call it only to empty the queue: any notification is a reason to retry.
 */
void
db_drain_notifies(PGconn *conn, const char *channel, bool print)
{
	PGnotify   *n;

	while ((n = PQnotifies(conn)) != NULL)
	{
		if (print && (channel == NULL || strcmp(n->relname, channel) == 0))
			printf("%s\n", n->extra);
		PQfreemem(n);
	}
	if (print)
		fflush(stdout);
}
