/*
 * my.c - the MySQL/MariaDB backend of the dlock client: its connection
 * and one-shot subcommands.
 *
 * When -d is a mysql:// URL, main.c hands the parsed Options to
 * my_command() and nothing else in the client knows about MySQL.  This
 * file runs the subcommands that make sense against mysql/dlock.sql: try,
 * lock, unlock, renew, status, reap (and --version); run goes to the one
 * supervisor of run.c over my_lock.c's backend.  The exit codes are the
 * PostgreSQL path's (main.c refuses elect and observe: no elections in
 * that schema; watch is refused here: no NOTIFY).  A routine's error is
 * printed with its SQLSTATE.  Every call is a blocking libmariadb call
 * bounded by connect/read/write timeouts, with parameters bound through
 * prepared statements (nothing is spliced into SQL).
 *
 *   mysql://USER[:PASSWORD]@HOST[:PORT][/DB]
 *   mysql://USER[:PASSWORD]@localhost[/DB]?socket=/path/to/mysqld.sock
 * (DB is accepted and ignored: every name used is qualified with dlock.)
 *
 * Shared state: one connection per process, used by its only thread.
 */
#include "my.h"

#ifdef DLOCK_MYSQL

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>
#include <mysql.h>

/* A parsed mysql:// URL. */
typedef struct MyUrl
{
	char		user[128];
	char		password[256];
	char		host[256];
	char		db[128];
	char		socket[512];
	unsigned	port;
} MyUrl;

static MyUrl url;
static MYSQL *my;				/* NULL while disconnected */
static unsigned last_errno;		/* error of my_scalar's last Q_ERROR, else 0 */
static unsigned open_errno;		/* error of my_open's last failure, else 0 */
static char open_error[512];	/* its message */

/* decode: copy [s, s+n) percent-decoded into out; false if it does not fit. */
static bool
decode(const char *s, size_t n, char *out, size_t outlen)
{
	size_t		j = 0;

	for (size_t i = 0; i < n; i++)
	{
		char		c = s[i];

		if (c == '%')
		{
			char		hex[3];
			char	   *end;
			long		v;

			if (i + 2 >= n)
				return false;
			hex[0] = s[i + 1];
			hex[1] = s[i + 2];
			hex[2] = '\0';
			v = strtol(hex, &end, 16);
			if (*end != '\0')
				return false;
			c = (char) v;
			i += 2;
		}
		if (j + 1 >= outlen)
			return false;
		out[j++] = c;
	}
	out[j] = '\0';
	return true;
}

/* parse_url: fill url from "mysql://..."; false (and a message) if malformed. */
static bool
parse_url(const char *s)
{
	const char *p = s + strlen("mysql://");
	const char *at = strchr(p, '@');
	const char *q = strchr(p, '?');
	const char *slash;
	const char *hostend;

	memset(&url, 0, sizeof(url));
	if (q && at && at > q)
		at = NULL;
	if (at)
	{
		const char *colon = memchr(p, ':', (size_t) (at - p));

		if (!decode(p, (size_t) ((colon ? colon : at) - p), url.user, sizeof(url.user)) ||
			(colon && !decode(colon + 1, (size_t) (at - colon - 1), url.password, sizeof(url.password))))
			return false;
		p = at + 1;
	}
	hostend = q ? q : p + strlen(p);
	slash = memchr(p, '/', (size_t) (hostend - p));
	if (slash)
	{
		if (!decode(slash + 1, (size_t) (hostend - slash - 1), url.db, sizeof(url.db)))
			return false;
		hostend = slash;
	}
	{
		const char *colon = memchr(p, ':', (size_t) (hostend - p));

		if (colon)
		{
			char	   *end;
			long		port = strtol(colon + 1, &end, 10);

			if (end != hostend || port <= 0 || port > 65535)
				return false;
			url.port = (unsigned) port;
			hostend = colon;
		}
		if (!decode(p, (size_t) (hostend - p), url.host, sizeof(url.host)))
			return false;
	}
	if (q)
	{
		if (strncmp(q + 1, "socket=", 7) != 0 ||
			!decode(q + 8, strlen(q + 8), url.socket, sizeof(url.socket)))
			return false;
	}
	if (url.host[0] == '\0')
		strcpy(url.host, "localhost");
	return true;
}

/* my_close: drop the connection. */
void
my_close(void)
{
	if (my)
		mysql_close(my);
	my = NULL;
}

/* my_connected: is there a connection? */
bool
my_connected(void)
{
	return my != NULL;
}

/* my_open: connect, with timeouts of timeout_s seconds; false if it failed. */
bool
my_open(const Options *o, unsigned timeout_s, bool quiet)
{
	unsigned	t = timeout_s > 0 ? timeout_s : 1;

	my_close();
	open_errno = 0;
	snprintf(open_error, sizeof(open_error), "out of memory");
	my = mysql_init(NULL);
	if (my == NULL)
		return false;
	mysql_options(my, MYSQL_OPT_CONNECT_TIMEOUT, &t);
	mysql_options(my, MYSQL_OPT_READ_TIMEOUT, &t);
	mysql_options(my, MYSQL_OPT_WRITE_TIMEOUT, &t);
	if (!mysql_real_connect(my, url.host, url.user[0] ? url.user : NULL,
							url.password[0] ? url.password : NULL,
							NULL, url.port,	/* every name is qualified: no default database */
							url.socket[0] ? url.socket : NULL, CLIENT_MULTI_RESULTS))
	{
		open_errno = mysql_errno(my);
		snprintf(open_error, sizeof(open_error), "%s", mysql_error(my));
		if (!quiet)
			logmsg("could not connect to MySQL/MariaDB at %s: %s",
				   url.socket[0] ? url.socket : url.host, mysql_error(my));
		my_close();
		return false;
	}
	/*
	 * A server may start sessions with autocommit off (my.cnf, init_connect):
	 * every call would then run in a transaction never committed, and an
	 * acquisition vanish at disconnect.  Each call must commit on its own.
	 */
	if (mysql_autocommit(my, 1) != 0)
	{
		snprintf(open_error, sizeof(open_error), "autocommit: %s", mysql_error(my));
		if (!quiet)
			logmsg("could not turn autocommit on: %s", mysql_error(my));
		my_close();
		return false;
	}
	vlog(o, "connected to %s", mysql_get_server_info(my));
	return true;
}

/*
 * my_open_refused: did the server refuse my_open's last login for a reason
 * a failover does not change?  A server's error (all but the client
 * library's own, 2000-2999 and 5000-5999: no answer, a lost handshake)
 * other than "not now" (1040 too many connections, 1053 shutting down,
 * 1203 the user's connections, 1927 killed, MySQL 3032 offline mode):
 * access denied, an unknown user, a blocked host, a locked account
 * (MariaDB 4150, 4151; MySQL 3118, 3955).
 */
bool
my_open_refused(void)
{
	unsigned	e = open_errno;

	if (e == 0 || (e >= 2000 && e < 3000) || (e >= 5000 && e < 6000))
		return false;
	return e != 1040 && e != 1053 && e != 1203 && e != 1927 && e != 3032;
}

/* my_open_error: the message of my_open's last failure. */
const char *
my_open_error(void)
{
	return open_error;
}

/* connection_error: does this client error mean the connection is gone? */
static bool
connection_error(unsigned e)
{
	return e == CR_SERVER_GONE_ERROR || e == CR_SERVER_LOST || e == CR_CONNECTION_ERROR ||
		e == CR_CONN_HOST_ERROR || e == CR_SERVER_LOST_EXTENDED || e == 1927 /* killed */ ;
}

/*
 * transient_error: a lock wait timeout (1205) or a deadlock (1213): the
 * statement was rolled back, the lease (if any) is as it was, and the same
 * call may be retried.
 */
static bool
transient_error(unsigned e)
{
	return e == 1205 || e == 1213;
}

/* my_transient: my_scalar's last Q_ERROR was transient_error. */
bool
my_transient(void)
{
	return transient_error(last_errno);
}

/*
 * my_refused: my_scalar's last Q_ERROR was raised by the routine itself
 * (SIGNAL, 1644: 42501, 22023, ...), not by the server around it (a
 * KILL QUERY, max_statement_time, a shutdown, read_only).
 */
bool
my_refused(void)
{
	return last_errno == 1644;
}

/*
 * stmt_errno, report_stmt_error: the error of a failed statement, and its
 * message and SQLSTATE on stderr.  An error that arrives while rows are
 * fetched (a routine's SIGNAL) is left on the connection, not the statement.
 */
static unsigned
stmt_errno(MYSQL_STMT *st)
{
	return mysql_stmt_errno(st) ? mysql_stmt_errno(st) : mysql_errno(my);
}

static void
report_stmt_error(MYSQL_STMT *st)
{
	if (mysql_stmt_errno(st))
		logmsg("server error: %s (SQLSTATE %s)", mysql_stmt_error(st), mysql_stmt_sqlstate(st));
	else
		logmsg("server error: %s (SQLSTATE %s)", mysql_error(my), mysql_sqlstate(my));
}

/*
 * my_scalar: run sql with n string parameters (NULL values are SQL NULL)
 * as a prepared statement; the first column of the first row as text.
 */
QStatus
my_scalar(const char *sql, int n, const char *const *vals, char *out, size_t outlen,
		  bool *isnull)
{
	MYSQL_STMT *st;
	MYSQL_BIND	in[4];
	MYSQL_BIND	res;
	unsigned long lens[4];
	unsigned long outl = 0;
	my_bool		innull[4];
	my_bool		null = 1;
	QStatus		status = Q_OK;

	last_errno = 0;
	if (my == NULL)
		return Q_LOST;
	st = mysql_stmt_init(my);
	if (st == NULL)
		return Q_LOST;
	memset(in, 0, sizeof(in));
	for (int i = 0; i < n; i++)
	{
		innull[i] = vals[i] == NULL;
		lens[i] = vals[i] ? strlen(vals[i]) : 0;
		in[i].buffer_type = MYSQL_TYPE_STRING;
		in[i].buffer = (void *) (vals[i] ? vals[i] : "");
		in[i].buffer_length = lens[i];
		in[i].length = &lens[i];
		in[i].is_null = &innull[i];
	}
	memset(&res, 0, sizeof(res));
	res.buffer_type = MYSQL_TYPE_STRING;
	res.buffer = out;
	res.buffer_length = outlen - 1;
	res.length = &outl;
	res.is_null = &null;
	out[0] = '\0';
	if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0 ||
		(n > 0 && mysql_stmt_bind_param(st, in) != 0) ||
		mysql_stmt_execute(st) != 0 ||
		mysql_stmt_bind_result(st, &res) != 0)
	{
		unsigned	e = stmt_errno(st);

		if (connection_error(e))
			status = Q_LOST;
		else
		{
			report_stmt_error(st);
			last_errno = e;
			status = Q_ERROR;
		}
	}
	else
	{
		/*
		 * A routine called in the select list runs while the row is made:
		 * its SIGNAL (42501, 22023, ...) or a lock wait timeout arrives
		 * here, at the fetch, not at the execute.
		 */
		int			f = mysql_stmt_fetch(st);

		if (f == 1)
		{
			unsigned	e = stmt_errno(st);

			if (connection_error(e))
				status = Q_LOST;
			else
			{
				report_stmt_error(st);
				last_errno = e;
				status = Q_ERROR;
			}
		}
		else if (f == MYSQL_NO_DATA)
			null = 1;
		else
			out[outl < outlen ? outl : outlen - 1] = '\0';
	}
	*isnull = null;
	mysql_stmt_close(st);
	if (status == Q_LOST)
	{
		logmsg("connection to MySQL/MariaDB lost");
		my_close();
	}
	return status;
}

/* my_seconds: ms as the decimal seconds the SQL routines take. */
void
my_seconds(char *buf, size_t len, int64_t ms)
{
	snprintf(buf, len, "%lld.%03lld", (long long) (ms / 1000), (long long) (ms % 1000));
}

/* my_status: "status [PREFIX]": the rows of dlock.locks whose resource starts with it. */
static int
my_status(const Options *o)
{
	const char *sql = "SELECT resource, holder, count, fence, lease, expires_at, owner, expired "
		"FROM dlock.locks WHERE LEFT(resource, CHAR_LENGTH(?)) = ? ORDER BY resource";
	const char *prefix = o->npos > 0 ? o->pos[0] : "";
	MYSQL_STMT *st;
	MYSQL_BIND	in[2];
	MYSQL_BIND	out[8];
	char		buf[8][1100];
	unsigned long len[8];
	my_bool		null[8];
	unsigned long plen = strlen(prefix);
	int			rows = 0;

	if (!my_open(o, 10, false))
		return EXIT_CONN;
	st = mysql_stmt_init(my);
	memset(in, 0, sizeof(in));
	for (int i = 0; i < 2; i++)
	{
		in[i].buffer_type = MYSQL_TYPE_STRING;
		in[i].buffer = (void *) prefix;
		in[i].buffer_length = plen;
		in[i].length = &plen;
	}
	memset(out, 0, sizeof(out));
	for (int i = 0; i < 8; i++)
	{
		out[i].buffer_type = MYSQL_TYPE_STRING;
		out[i].buffer = buf[i];
		out[i].buffer_length = sizeof(buf[i]) - 1;
		out[i].length = &len[i];
		out[i].is_null = &null[i];
	}
	if (st == NULL || mysql_stmt_prepare(st, sql, strlen(sql)) != 0 ||
		mysql_stmt_bind_param(st, in) != 0 || mysql_stmt_execute(st) != 0 ||
		mysql_stmt_bind_result(st, out) != 0)
	{
		logmsg("server error: %s (SQLSTATE %s)", st ? mysql_stmt_error(st) : mysql_error(my),
			   st ? mysql_stmt_sqlstate(st) : mysql_sqlstate(my));
		if (st)
			mysql_stmt_close(st);
		my_close();
		return EXIT_CONN;
	}
	printf("resource | holder | count | fence | lease | expires_at (UTC) | owner | expired\n");
	while (mysql_stmt_fetch(st) == 0)
	{
		for (int i = 0; i < 8; i++)
		{
			buf[i][len[i] < sizeof(buf[i]) ? len[i] : sizeof(buf[i]) - 1] = '\0';
			printf("%s%s", i ? " | " : "", null[i] ? "" : buf[i]);
		}
		printf("\n");
		rows++;
	}
	printf("(%d %s)\n", rows, rows == 1 ? "row" : "rows");
	mysql_stmt_close(st);
	my_close();
	return 0;
}

/* my_reap: CALL dlock.reap(); prints how many expired leases it freed. */
static int
my_reap(const Options *o)
{
	MYSQL_RES  *r;
	MYSQL_ROW	row;
	int			rc = 0;

	if (!my_open(o, 30, false))
		return EXIT_CONN;
	if (mysql_query(my, "CALL dlock.reap()") != 0 || (r = mysql_store_result(my)) == NULL)
	{
		logmsg("server error: %s (SQLSTATE %s)", mysql_error(my), mysql_sqlstate(my));
		my_close();
		return EXIT_CONN;
	}
	if ((row = mysql_fetch_row(r)) != NULL && row[0])
		printf("%s\n", row[0]);
	else
		rc = EXIT_CONN;
	mysql_free_result(r);
	while (mysql_next_result(my) == 0)
		;
	my_close();
	return rc;
}

/* my_unlock_renew: "unlock" or "renew" with --holder and --fence. */
static int
my_unlock_renew(const Options *o, bool renew)
{
	char		lease_s[32];
	char		out[64];
	bool		isnull;
	const char *v[4];
	QStatus		s;

	if (o->npos != 1)
		return usage_error("%s: expected exactly one RESOURCE", renew ? "renew" : "unlock");
	if (o->holder == NULL)
		return usage_error("%s: --holder is required", renew ? "renew" : "unlock");
	if (!my_open(o, 10, false))
		return EXIT_CONN;
	v[0] = o->pos[0];
	v[1] = o->holder;
	if (renew)
	{
		if (o->lease_ms > 0)
			my_seconds(lease_s, sizeof(lease_s), o->lease_ms);
		v[2] = o->lease_ms > 0 ? lease_s : NULL;
		v[3] = o->fence;
		s = my_scalar("SELECT dlock.renew(?, ?, ?, ?)", 4, v, out, sizeof(out), &isnull);
	}
	else
	{
		v[2] = o->fence;
		s = my_scalar("SELECT dlock.unlock(?, ?, ?)", 3, v, out, sizeof(out), &isnull);
	}
	my_close();
	if (s != Q_OK)
		return EXIT_CONN;
	if (isnull)
	{
		logmsg("\"%s\" is not held by \"%s\"%s%s", o->pos[0], o->holder,
			   o->fence ? " with fence " : "", o->fence ? o->fence : "");
		return EXIT_LEASE_LOST;
	}
	printf("%s\n", out);
	return 0;
}

/* my_try_cmd: "try" (one attempt) or "lock" (wait up to --wait). */
static int
my_try_cmd(const Options *o, bool wait)
{
	Lock		lk;
	int			rc;

	if (o->npos != 1)
		return usage_error("%s: expected exactly one RESOURCE", wait ? "lock" : "try");
	signals_install();
	my_lock_init(&lk, o, o->pos[0]);
	if (!my_open(o, 10, false))
		return EXIT_CONN;
	rc = my_acquire(&lk, wait ? o->wait_ms : 0);
	my_close();
	if (rc == 0)
	{
		printf("%s\n", lk.fence);
		if (o->holder == NULL)
			logmsg("held by generated holder \"%s\" (use --holder to choose one)", lk.holder);
	}
	else if (rc == EXIT_NOT_ACQUIRED)
		logmsg(wait ? "\"%s\" not acquired in time" : "\"%s\" is held by another holder",
			   o->pos[0]);
	return rc;
}

/* my_version: the client's version and the schema's (--version). */
int
my_version(const Options *o)
{
	char		out[64];
	bool		isnull;

	printf("dlock %s\n", DLOCK_VERSION);
	if (o->conninfo && parse_url(o->conninfo) && my_open(o, 10, true) &&
		my_scalar("SELECT dlock.version()", 0, NULL, out, sizeof(out), &isnull) == Q_OK && !isnull)
		printf("server schema dlock %s (MySQL/MariaDB %s)\n", out, mysql_get_server_info(my));
	my_close();
	return 0;
}

bool
my_is_url(const char *conninfo)
{
	return conninfo && strncmp(conninfo, "mysql://", 8) == 0;
}

int
my_command(Options *o)
{
	if (!parse_url(o->conninfo))
		return usage_error("malformed MySQL URL (mysql://USER[:PASSWORD]@HOST[:PORT][/DB]"
						   "[?socket=PATH])");
	if (o->subcommand == NULL || strcmp(o->subcommand, "version") == 0)
		return my_version(o);
	if (strcmp(o->subcommand, "run") == 0)
		return run_on(o, &my_backend);
	if (strcmp(o->subcommand, "try") == 0)
		return my_try_cmd(o, false);
	if (strcmp(o->subcommand, "lock") == 0)
		return my_try_cmd(o, true);
	if (strcmp(o->subcommand, "unlock") == 0)
		return my_unlock_renew(o, false);
	if (strcmp(o->subcommand, "renew") == 0)
		return my_unlock_renew(o, true);
	if (strcmp(o->subcommand, "status") == 0)
		return my_status(o);
	if (strcmp(o->subcommand, "reap") == 0)
		return my_reap(o);
	return usage_error("%s: not available with MySQL/MariaDB (no LISTEN/NOTIFY)", o->subcommand);
}

#else							/* !DLOCK_MYSQL */

#include <stdio.h>
#include <string.h>

int
my_version(const Options *o)
{
	(void) o;
	printf("dlock %s\n", DLOCK_VERSION);
	return 0;
}

bool
my_is_url(const char *conninfo)
{
	return conninfo && strncmp(conninfo, "mysql://", 8) == 0;
}

int
my_command(Options *o)
{
	(void) o;
	logmsg("this dlock was built without MySQL/MariaDB support (install libmariadb-dev and rebuild)");
	return EXIT_USAGE;
}

#endif							/* DLOCK_MYSQL */
