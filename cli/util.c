/*
 * util.c - small services for the dlock client: the monotonic clock,
 * duration parsing, holder names, messages, and the signal self-pipe that
 * lets every wait in the program (poll on the database socket) wake up on
 * SIGINT/SIGTERM/SIGHUP/SIGCHLD/SIGCONT.
 */
#include "dlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *progname = "dlock";

static int	sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t term_sig;		/* last SIGINT/SIGTERM/SIGHUP */
static volatile sig_atomic_t term_count;	/* how many of them so far */
static volatile sig_atomic_t child_flag;	/* SIGCHLD seen */

/*
 * now_ms: milliseconds on a clock that never goes backwards and keeps
 * counting while the process is stopped (SIGSTOP) or the machine is
 * suspended.  CLOCK_BOOTTIME is CLOCK_MONOTONIC plus suspended time, so a
 * laptop that sleeps past the lease is noticed too; the lease deadline is
 * only ever compared with this clock, never with the server's or wall time.
 */
int64_t
now_ms(void)
{
	struct timespec ts;

#ifdef CLOCK_BOOTTIME
	if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
#endif
		clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * parse_duration: read "250ms", "30s", "5m", "1h", "2d", "1.5s" or a plain
 * number of seconds into milliseconds.  Returns false on anything else, so
 * the caller can report a usage error; a nonzero duration never rounds
 * down to 0.  Durations are capped at 100 years to keep arithmetic safe.
 */
bool
parse_duration(const char *s, int64_t *ms)
{
	static const struct
	{
		const char *unit;
		int64_t		ms;
	}			units[] = {
		{"", 1000}, {"ms", 1}, {"s", 1000}, {"sec", 1000}, {"m", 60000},
		{"min", 60000}, {"h", 3600000}, {"d", 86400000},
	};
	int64_t		whole = 0, frac = 0, fracdiv = 1;
	const char *p = s;
	bool		digits = false;

	if (s == NULL)
		return false;
	while (*p >= '0' && *p <= '9')
	{
		if (whole > 100000000000LL)
			return false;
		whole = whole * 10 + (*p++ - '0');
		digits = true;
	}
	if (*p == '.')
	{
		p++;
		while (*p >= '0' && *p <= '9')
		{
			if (fracdiv < 1000000000LL)
			{
				frac = frac * 10 + (*p - '0');
				fracdiv *= 10;
			}
			p++;
			digits = true;
		}
	}
	if (!digits)
		return false;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
	{
		if (strcmp(p, units[i].unit) == 0)
		{
			int64_t		u = units[i].ms;
			int64_t		f = (frac * u + fracdiv - 1) / fracdiv;		/* round up */

			if (whole > (int64_t) 100 * 366 * 86400000 / u)
				return false;
			*ms = whole * u + f;
			return true;
		}
	}
	return false;
}

/*
 * format_interval: the SQL interval text for a duration, e.g.
 * "250 milliseconds"; it is always sent as a query parameter, never
 * spliced into SQL.
 */
void
format_interval(char *buf, size_t len, int64_t ms)
{
	snprintf(buf, len, "%lld milliseconds", (long long) ms);
}

/*
 * make_holder: a holder text unique to this run of the client,
 * "hostname:pid:random", so that two CLIs on different hosts with the
 * same pid, or a pid reused later, never collide.
 */
void
make_holder(char *buf, size_t len)
{
	char		host[200];
	uint32_t	r = 0;

	if (gethostname(host, sizeof(host)) != 0)
		strcpy(host, "localhost");
	host[sizeof(host) - 1] = '\0';
	if (getrandom(&r, sizeof(r), 0) != (ssize_t) sizeof(r))
		r = (uint32_t) now_ms() ^ ((uint32_t) getpid() << 16);
	snprintf(buf, len, "%s:%d:%08x", host, (int) getpid(), r);
}

/* logmsg: print "dlock: message" on stderr. */
void
logmsg(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* vlog: like logmsg, but only with -v (progress information). */
void
vlog(const Options *o, const char *fmt,...)
{
	va_list		ap;

	if (!o->verbose)
		return;
	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/*
 * usage_error: report a command-line mistake and return EXIT_USAGE, so a
 * caller can write "return usage_error(...)".
 */
int
usage_error(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", progname);
	return EXIT_USAGE;
}

/*
 * on_signal: the only signal handler.  It records what happened in flags
 * and writes a byte into the self-pipe, which every poll() in the program
 * watches, so a signal ends any wait at once.
 */
static void
on_signal(int sig)
{
	int			save = errno;
	char		c = 0;

	if (sig == SIGCHLD)
		child_flag = 1;
	else if (sig != SIGCONT)
	{
		term_sig = sig;
		term_count = term_count + 1;
	}
	if (write(sig_pipe[1], &c, 1) < 0)
	{
		/* pipe full: a wakeup is already pending */
	}
	errno = save;
}

/*
 * signals_install: create the self-pipe and catch the signals the client
 * reacts to.  SIGCONT is caught only to wake the loop after a stop, so it
 * can look at the clock before anything else.
 */
void
signals_install(void)
{
	struct sigaction sa;
	int			sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGCONT};

	if (sig_pipe[0] >= 0)
		return;
	if (pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) != 0)
	{
		logmsg("pipe: %s", strerror(errno));
		exit(EXIT_CONN);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
}

/* signals_fd: the read end of the self-pipe, or -1 if none is installed. */
int
signals_fd(void)
{
	return sig_pipe[0];
}

/* signals_drain: empty the self-pipe after a wakeup; the flags remain. */
void
signals_drain(void)
{
	char		buf[64];

	if (sig_pipe[0] < 0)
		return;
	while (read(sig_pipe[0], buf, sizeof(buf)) > 0)
		;
}

/*
 * signals_block_term: block SIGINT/SIGTERM/SIGHUP, so that checking "has
 * shutdown begun?" and starting COMMAND happen as one step.
 */
void
signals_block_term(sigset_t *old)
{
	sigset_t	set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, old);
}

/* signals_restore: undo signals_block_term. */
void
signals_restore(const sigset_t *old)
{
	sigprocmask(SIG_SETMASK, old, NULL);
}

/*
 * signals_default_in_child: in a forked child, before exec, give every
 * signal we touched its default action and unblock all signals, so
 * COMMAND starts with a normal signal state and a signal forwarded early
 * is delivered to it rather than to our handler.
 */
void
signals_default_in_child(void)
{
	int			sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGCONT, SIGPIPE, SIGTTOU};
	sigset_t	none;

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/*
 * signals_uninstall: in the watchdog (forked without exec), give the
 * client's signals back their default actions and close the self-pipe,
 * which the client still uses.
 */
void
signals_uninstall(void)
{
	int			sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGCONT};

	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	if (sig_pipe[0] >= 0)
	{
		close(sig_pipe[0]);
		close(sig_pipe[1]);
		sig_pipe[0] = sig_pipe[1] = -1;
	}
}

/* signals_term_sig: the last terminating signal received (0: none). */
int
signals_term_sig(void)
{
	return term_sig;
}

/* signals_term_count: how many terminating signals arrived so far. */
int
signals_term_count(void)
{
	return term_count;
}

/* signals_take_child: true once per burst of SIGCHLD. */
bool
signals_take_child(void)
{
	if (!child_flag)
		return false;
	child_flag = 0;
	return true;
}

/*
 * jitter: a random duration between half and all of ms, so that many
 * pollers started together spread out instead of hitting the server in
 * lock step.
 */
int64_t
jitter(int64_t ms)
{
	uint32_t	r;

	if (ms < 2)
		return ms;
	if (getrandom(&r, sizeof(r), 0) != (ssize_t) sizeof(r))
		r = (uint32_t) now_ms() * 2654435761u;
	return ms / 2 + (int64_t) (r % (uint32_t) (ms / 2 + 1));
}

/*
 * exit_status: the shell's convention for COMMAND's waitpid status
 * (128 + signal number when it was killed by a signal).
 */
int
exit_status(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return 1;
}
