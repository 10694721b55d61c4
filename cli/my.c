/*
 * my.c - the MySQL/MariaDB backend of the dlock client.
 *
 * When -d is a mysql:// URL, main.c hands the parsed Options to
 * my_command() and nothing else in the client knows about MySQL.  This
 * file runs the subcommands that make sense against mysql/dlock.sql: run,
 * try, lock, unlock, renew, status, reap (and --version), with the same
 * exit codes as the PostgreSQL path (main.c refuses elect and observe: no
 * elections in that schema; watch is refused here: no NOTIFY).  A
 * routine's error is printed with its SQLSTATE; lock wait timeouts and
 * deadlocks (1205, 1213) are retried as failed attempts.  It reuses util.c
 * (clocks, durations, holders, the signal self-pipe) and the watchdog of
 * watchdog.c, which stops COMMAND's tree at the deadline of the last
 * acknowledged renewal.  There is no LISTEN in MySQL: waits poll.  Every call is a blocking
 * libmariadb call bounded by connect/read/write timeouts, with parameters
 * bound through prepared statements (nothing is spliced into SQL).
 *
 *   mysql://USER[:PASSWORD]@HOST[:PORT][/DB]
 *   mysql://USER[:PASSWORD]@localhost[/DB]?socket=/path/to/mysqld.sock
 * (DB is accepted and ignored: every name used is qualified with dlock.)
 *
 * Shared state: one connection per process, used by its only thread.
 */
#include "dlock.h"

#ifdef DLOCK_MYSQL

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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
static void
my_close(void)
{
	if (my)
		mysql_close(my);
	my = NULL;
}

/* my_open: connect, with timeouts of timeout_s seconds; false if it failed. */
static bool
my_open(const Options *o, unsigned timeout_s, bool quiet)
{
	unsigned	t = timeout_s > 0 ? timeout_s : 1;

	my_close();
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
		if (!quiet)
			logmsg("could not turn autocommit on: %s", mysql_error(my));
		my_close();
		return false;
	}
	vlog(o, "connected to %s", mysql_get_server_info(my));
	return true;
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

/* Outcome of one statement. */
typedef enum
{
	Q_OK,						/* out/isnull hold the first column of the first row */
	Q_LOST,						/* the connection is gone */
	Q_ERROR,					/* the server refused (reported) */
} QStatus;

/*
 * my_scalar: run sql with n string parameters (NULL values are SQL NULL)
 * as a prepared statement; the first column of the first row as text.
 */
static QStatus
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

/* seconds: ms as the decimal seconds the SQL routines take. */
static void
seconds(char *buf, size_t len, int64_t ms)
{
	snprintf(buf, len, "%lld.%03lld", (long long) (ms / 1000), (long long) (ms % 1000));
}

/* The lock this process takes, renews and releases. */
typedef struct MyLock
{
	Lock		lk;				/* resource, holder, fence, deadline (conn unused) */
	char		lease_s[32];
} MyLock;

/*
 * my_try: one try_lock; sets the fence and the deadline (measured from the
 * moment the call was SENT) when acquired.
 */
static QStatus
my_try(MyLock *m, bool *got)
{
	const char *v[3] = {m->lk.resource, m->lk.holder, m->lease_s};
	bool		isnull;
	int64_t		sent = now_ms();
	QStatus		s = my_scalar("SELECT dlock.try_lock(?, ?, ?)", 3, v, m->lk.fence,
							  sizeof(m->lk.fence), &isnull);

	*got = s == Q_OK && !isnull;
	if (*got)
		m->lk.deadline = sent + m->lk.lease_ms;
	return s;
}

/*
 * my_acquire: try until acquired, the wait runs out (75), a signal (128+N)
 * or a connection failure (69); 0 when held.
 */
static int
my_acquire(const Options *o, MyLock *m, int64_t wait_ms)
{
	int64_t		until = wait_ms < 0 ? NEVER : now_ms() + wait_ms;
	int64_t		nap = 20;

	for (;;)
	{
		bool		got;
		QStatus		s;
		struct pollfd pfd;
		int64_t		left;

		if (my == NULL && !my_open(o, 5, false))
			return EXIT_CONN;
		s = my_try(m, &got);
		if (s == Q_ERROR && !transient_error(last_errno))
			return EXIT_CONN;
		if (s == Q_LOST && !my_open(o, 5, false))
			return EXIT_CONN;
		if (got)
			return 0;
		if (signals_term_count() > 0)
			return 128 + signals_term_sig();
		left = until == NEVER ? nap : until - now_ms();
		if (left <= 0)
			return EXIT_NOT_ACQUIRED;
		pfd.fd = signals_fd();
		pfd.events = POLLIN;
		(void) poll(&pfd, 1, (int) (left < nap ? left : nap));
		signals_drain();
		if (signals_term_count() > 0)
			return 128 + signals_term_sig();
		nap = nap * 2 > 200 ? 200 : nap * 2;
	}
}

/* my_lock_init: the lock of RESOURCE with the holder and lease of o. */
static void
my_lock_init(MyLock *m, const Options *o, const char *resource)
{
	memset(m, 0, sizeof(*m));
	m->lk.opt = o;
	m->lk.resource = resource;
	if (o->holder)
		snprintf(m->lk.holder, sizeof(m->lk.holder), "%s", o->holder);
	else
		make_holder(m->lk.holder, sizeof(m->lk.holder));
	m->lk.lease_ms = o->lease_ms > 0 ? o->lease_ms : 30000;
	seconds(m->lease_s, sizeof(m->lease_s), m->lk.lease_ms);
}

/* my_release: unlock (or, with linger, renew for linger and leave it); 1 if not held. */
static int
my_release(MyLock *m, int64_t linger_ms)
{
	char		out[64];
	char		linger_s[32];
	bool		isnull;
	QStatus		s;

	if (my == NULL && !my_open(m->lk.opt, 5, true))
		return -1;
	if (linger_ms > 0)
	{
		const char *v[4] = {m->lk.resource, m->lk.holder, linger_s, m->lk.fence};

		seconds(linger_s, sizeof(linger_s), linger_ms);
		s = my_scalar("SELECT dlock.renew(?, ?, ?, ?)", 4, v, out, sizeof(out), &isnull);
	}
	else
	{
		const char *v[3] = {m->lk.resource, m->lk.holder, m->lk.fence};

		s = my_scalar("SELECT dlock.unlock(?, ?, ?)", 3, v, out, sizeof(out), &isnull);
	}
	if (s != Q_OK)
		return -1;
	return isnull ? 1 : 0;
}

/* my_renew: renew the held lock; 1 renewed, 0 lost (NULL), -1 no answer. */
static int
my_renew(MyLock *m)
{
	const char *v[4] = {m->lk.resource, m->lk.holder, m->lease_s, m->lk.fence};
	char		out[64];
	bool		isnull;
	int64_t		sent = now_ms();
	QStatus		s;

	if (my == NULL && !my_open(m->lk.opt, (unsigned) (m->lk.lease_ms / 3000 + 1), true))
		return -1;
	s = my_scalar("SELECT dlock.renew(?, ?, ?, ?)", 4, v, out, sizeof(out), &isnull);
	if (s == Q_ERROR && transient_error(last_errno))
	{
		logmsg("renewal failed (will retry)");
		return -1;
	}
	if (s == Q_ERROR)
		return 0;
	if (s != Q_OK)
		return -1;
	if (isnull)
		return 0;
	m->lk.deadline = sent + m->lk.lease_ms;
	return 1;
}

/* The state of my_run's loop. */
typedef struct MyRun
{
	MyLock		m;
	int			wd;				/* our end of the socket to the watchdog; -1 at EOF */
	pid_t		watchdog;
	int			status;			/* COMMAND's waitpid status, once reported */
	bool		have_status;
	bool		failed;			/* the watchdog could not start COMMAND */
	bool		lost;
	bool		exited;			/* the watchdog has exited */
	int			forwarded;		/* terminating signals already forwarded */
	int64_t		next_renew;
} MyRun;

/* my_lose: the lease is gone; say why once and tell the watchdog. */
static void
my_lose(MyRun *r, const char *why, bool tell)
{
	if (r->lost)
		return;
	r->lost = true;
	logmsg("lease on \"%s\" (fence %s) lost: %s", r->m.lk.resource, r->m.lk.fence, why);
	if (tell)
		watchdog_send(r->wd, WD_LOST, 0, 0);
}

/* my_renew_due: renew now; a failed call is retried while the lease lasts. */
static void
my_renew_due(MyRun *r)
{
	int			rc = my_renew(&r->m);

	if (rc == 1)
	{
		watchdog_send(r->wd, WD_DEADLINE, 0, r->m.lk.deadline - watchdog_margin(r->m.lk.lease_ms));
		r->next_renew = r->m.lk.deadline - r->m.lk.lease_ms + r->m.lk.lease_ms / 3;
	}
	else if (rc == 0)
		my_lose(r, "the server says it is no longer held; stopping COMMAND", true);
	else
		r->next_renew = now_ms() + 200;		/* retry while the lease lasts */
}

/* my_on_watchdog: read what the watchdog said; notice when it is gone. */
static void
my_on_watchdog(MyRun *r)
{
	while (r->wd >= 0)
	{
		WdMsg		msg;
		int			rc = watchdog_recv(r->wd, &msg, true);

		if (rc == 0)
			break;
		if (rc < 0)
		{
			close(r->wd);
			r->wd = -1;
			break;
		}
		if (msg.type == WD_EXPIRED)
			my_lose(r, "its deadline passed (the watchdog stopped COMMAND)", false);
		else if (msg.type == WD_EXITED)
		{
			r->have_status = true;
			r->status = (int) msg.value;
		}
		else if (msg.type == WD_FAILED)
			r->failed = true;
	}
	if (r->wd < 0 && !r->exited)
	{
		int			st;

		waitpid(r->watchdog, &st, 0);
		r->exited = true;
	}
}

/*
 * my_supervise: renew every third of the lease until the watchdog has
 * exited; the deadline on the local clock is checked first.
 */
static void
my_supervise(MyRun *r)
{
	while (!r->exited)
	{
		struct pollfd pfd[2];
		int64_t		now = now_ms();
		int64_t		until = r->lost ? now + 1000 : r->next_renew;
		int			np = 0;

		if (!r->lost && now >= r->m.lk.deadline)
			my_lose(r, "no renewal acknowledged within the lease; stopping COMMAND", true);
		if (!r->lost && now >= r->next_renew)
		{
			my_renew_due(r);
			continue;
		}
		if (r->wd >= 0)
		{
			pfd[np].fd = r->wd;
			pfd[np++].events = POLLIN;
		}
		pfd[np].fd = signals_fd();
		pfd[np++].events = POLLIN;
		if (until > r->m.lk.deadline && !r->lost)
			until = r->m.lk.deadline;
		(void) poll(pfd, np, (int) (until > now ? (until - now > 1000 ? 1000 : until - now) : 0));
		signals_drain();
		if (signals_term_count() > r->forwarded)
		{
			r->forwarded = signals_term_count();
			watchdog_send(r->wd, WD_SIGNAL, signals_term_sig(), 0);
		}
		if (signals_take_child())
		{
			int			st;

			if (waitpid(r->watchdog, &st, WNOHANG) == r->watchdog)
				r->exited = true;
		}
		my_on_watchdog(r);
	}
	if (r->wd >= 0)
		close(r->wd);
}

/*
 * my_start: acquire and start COMMAND under the watchdog.  -1 when it
 * runs, else the exit code (nothing started, the lock given back).
 */
static int
my_start(Options *o, MyRun *r)
{
	sigset_t	old;
	int			rc;

	if (!my_open(o, 5, false))
		return EXIT_CONN;
	rc = my_acquire(o, &r->m, o->wait_ms);
	if (rc == EXIT_NOT_ACQUIRED)
		logmsg("\"%s\" not acquired in time", r->m.lk.resource);
	if (rc != 0)
	{
		my_close();
		return rc;
	}
	vlog(o, "acquired \"%s\" as %s with fence %s", r->m.lk.resource, r->m.lk.holder, r->m.lk.fence);

	signals_block_term(&old);
	if (signals_term_count() > 0)
	{
		signals_restore(&old);
		my_release(&r->m, 0);
		my_close();
		return 128 + signals_term_sig();
	}
	r->watchdog = watchdog_start(&r->m.lk, o->command, false,
								 r->m.lk.deadline - watchdog_margin(r->m.lk.lease_ms), &r->wd);
	signals_restore(&old);
	if (r->watchdog < 0)
	{
		my_release(&r->m, 0);
		my_close();
		return EXIT_CONN;
	}
	r->next_renew = r->m.lk.deadline - r->m.lk.lease_ms + r->m.lk.lease_ms / 3;
	return -1;
}

/*
 * my_run: acquire, start COMMAND under the watchdog, renew every third of
 * the lease until the watchdog says COMMAND's tree is gone, release.
 */
static int
my_run(Options *o)
{
	MyRun		r;
	int			rc;

	if (!o->dashdash)
		return usage_error("run: missing \"--\" before COMMAND "
						   "(usage: dlock run [OPTIONS] RESOURCE -- COMMAND [ARGS])");
	if (o->npos != 1)
		return usage_error("run: expected exactly one RESOURCE before \"--\"");
	if (o->command[0] == NULL)
		return usage_error("run: missing COMMAND after \"--\"");
	signals_install();
	memset(&r, 0, sizeof(r));
	r.wd = -1;
	my_lock_init(&r.m, o, o->pos[0]);
	if ((rc = my_start(o, &r)) >= 0)
		return rc;
	my_supervise(&r);
	if (!r.have_status)
	{
		if (!r.failed)
		{
			logmsg("the watchdog process died: \"%s\" is left to expire", r.m.lk.resource);
			my_close();
			return EXIT_LEASE_LOST;
		}
		my_release(&r.m, 0);
		my_close();
		return EXIT_CONN;
	}
	if (r.lost)
	{
		my_release(&r.m, 0);		/* best effort */
		my_close();
		return EXIT_LEASE_LOST;
	}
	if (my_release(&r.m, r.forwarded ? 0 : o->linger_ms) == 1)
		logmsg("warning: \"%s\" was no longer held by %s when COMMAND ended",
			   r.m.lk.resource, r.m.lk.holder);
	my_close();
	return exit_status(r.status);
}

/* my_print_rows: run a query with one parameter and print its rows. */
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
			seconds(lease_s, sizeof(lease_s), o->lease_ms);
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
	MyLock		m;
	int			rc;

	if (o->npos != 1)
		return usage_error("%s: expected exactly one RESOURCE", wait ? "lock" : "try");
	signals_install();
	my_lock_init(&m, o, o->pos[0]);
	if (!my_open(o, 10, false))
		return EXIT_CONN;
	rc = my_acquire(o, &m, wait ? o->wait_ms : 0);
	my_close();
	if (rc == 0)
	{
		printf("%s\n", m.lk.fence);
		if (o->holder == NULL)
			logmsg("held by generated holder \"%s\" (use --holder to choose one)", m.lk.holder);
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
		return my_run(o);
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
