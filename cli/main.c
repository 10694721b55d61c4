/*
 * main.c - entry point of the dlock client: parses the command line
 * (global options, the subcommand, its options and arguments, and for
 * "run" the COMMAND after "--"), validates it, prints --help, and
 * dispatches to the subcommand.  Mistakes exit 64 with a clear message.
 */
#include "dlock.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Option bits, to say which subcommand accepts what. */
enum
{
	O_LEASE = 1 << 0,
	O_WAIT = 1 << 1,
	O_HOLDER = 1 << 2,
	O_LINGER = 1 << 3,
	O_GRACE = 1 << 4,
	O_FENCE = 1 << 5,
	O_POLL = 1 << 6,
	O_DB = 1 << 7,				/* global ones: */
	O_VERBOSE = 1 << 8,
	O_HELP = 1 << 9,
	O_VERSION = 1 << 10,
	O_FAIR = 1 << 11,
	O_LOCK_DELAY = 1 << 12,
	O_SHARED = 1 << 13,
	O_SEMAPHORE = 1 << 14,
	O_PERMITS = 1 << 15,
};
#define O_GLOBAL (O_DB | O_VERBOSE | O_HELP | O_VERSION)

static const struct
{
	const char *lng;
	char		shrt;
	bool		value;
	int			bit;
}			optdefs[] = {
	{"lease", 'l', true, O_LEASE},
	{"wait", 'w', true, O_WAIT},
	{"holder", 'H', true, O_HOLDER},
	{"linger", 0, true, O_LINGER},
	{"grace", 0, true, O_GRACE},
	{"fence", 'f', true, O_FENCE},
	{"poll", 0, false, O_POLL},
	{"fair", 0, false, O_FAIR},
	{"lock-delay", 0, true, O_LOCK_DELAY},
	{"shared", 0, false, O_SHARED},
	{"semaphore", 0, true, O_SEMAPHORE},
	{"permits", 0, true, O_PERMITS},
	{"dbname", 'd', true, O_DB},
	{"verbose", 'v', false, O_VERBOSE},
	{"help", 'h', false, O_HELP},
	{"version", 'V', false, O_VERSION},
};

static int	do_try(Options *o) { return cmd_try(o, false); }
static int	do_lock(Options *o) { return cmd_try(o, true); }
static int	do_help(Options *o);

/*
 * The subcommands: the options each accepts, whether the MySQL edition
 * has it, and what runs it.
 */
static const struct
{
	const char *name;
	int			allowed;
	bool		mysql;
	int			(*fn) (Options *o);
}			subcommands[] = {
	{"run", O_LEASE | O_WAIT | O_HOLDER | O_LINGER | O_GRACE | O_POLL | O_FAIR | O_LOCK_DELAY |
	O_SHARED | O_SEMAPHORE | O_PERMITS, true, cmd_run},
	{"elect", O_LEASE | O_WAIT | O_HOLDER | O_GRACE | O_POLL | O_FAIR, false, cmd_elect},
	{"try", O_LEASE | O_HOLDER | O_LOCK_DELAY | O_SHARED | O_SEMAPHORE | O_PERMITS, true, do_try},
	{"lock", O_LEASE | O_WAIT | O_HOLDER | O_POLL | O_FAIR | O_LOCK_DELAY | O_SHARED |
	O_SEMAPHORE | O_PERMITS, true, do_lock},
	{"unlock", O_HOLDER | O_FENCE, true, cmd_unlock},
	{"renew", O_HOLDER | O_LEASE | O_FENCE, true, cmd_renew},
	{"status", 0, true, cmd_status},
	{"watch", 0, true, cmd_watch},
	{"observe", O_POLL, false, cmd_observe},
	{"reap", 0, true, cmd_reap},
	{"help", 0, true, do_help},
};

/* help: the synopsis, options and exit codes (--help). */
static void
help(void)
{
	printf(
		   "dlock %s - leased distributed locks with fencing tokens in PostgreSQL\n"
		   "\n"
		   "Usage:\n"
		   "  dlock [-d CONNINFO] run [--lease D] [--wait D] [--holder H] [--linger D]\n"
		   "                          [--grace D] [--poll] [--fair] [--lock-delay D]\n"
		   "                          [--shared | --semaphore N [--permits K]]\n"
		   "                          RESOURCE -- COMMAND [ARGS...]\n"
		   "  dlock [-d CONNINFO] run [OPTIONS] RESOURCE RESOURCE... -- COMMAND [ARGS...]\n"
		   "  dlock [-d CONNINFO] elect [--lease D] [--wait D] [--holder H] [--grace D]\n"
		   "                          [--poll] ELECTION VALUE -- COMMAND [ARGS...]\n"
		   "  dlock [-d CONNINFO] observe [--poll] ELECTION\n"
		   "  dlock [-d CONNINFO] try RESOURCE [--lease D] [--holder H] [--lock-delay D]\n"
		   "                          [--shared | --semaphore N [--permits K]]\n"
		   "  dlock [-d CONNINFO] lock RESOURCE [--lease D] [--wait D] [--holder H] [--poll]\n"
		   "                          [--fair] [--lock-delay D]\n"
		   "                          [--shared | --semaphore N [--permits K]]\n"
		   "  dlock [-d CONNINFO] unlock RESOURCE --holder H [--fence N]\n"
		   "  dlock [-d CONNINFO] renew RESOURCE --holder H [--lease D] [--fence N]\n"
		   "  dlock [-d CONNINFO] status [PREFIX]\n"
		   "  dlock [-d CONNINFO] watch RESOURCE\n"
		   "  dlock [-d CONNINFO] reap\n"
		   "  dlock [-d CONNINFO] --version\n"
		   "  dlock --help\n"
		   "\n"
		   "run acquires RESOURCE (waiting by LISTEN/NOTIFY, or polling behind a pooler),\n"
		   "runs COMMAND with DLOCK_RESOURCE, DLOCK_HOLDER and DLOCK_FENCE set, renews the\n"
		   "lease every third of it, and releases the lock when COMMAND exits.  If the lease\n"
		   "is lost or this client dies, COMMAND and every process it started get SIGTERM,\n"
		   "then SIGKILL after the grace period; a watchdog process does it at the lease's\n"
		   "deadline even while this client is stopped.  Processes COMMAND leaves behind\n"
		   "are stopped the same way before the lock is released.  Several RESOURCEs are\n"
		   "taken together or not at all (try_lock_all, dlock 0.5), renewed and released\n"
		   "together; DLOCK_RESOURCE and DLOCK_FENCE are then space-separated lists.\n"
		   "\n"
		   "elect does the same while this process leads ELECTION (campaigning in its\n"
		   "fair queue; --holder is the candidate), with DLOCK_ELECTION, DLOCK_TERM and\n"
		   "DLOCK_VALUE set, and resigns when COMMAND exits, so the next candidate leads\n"
		   "at once.  observe prints the leader of ELECTION and then every change, one\n"
		   "JSON line each, until interrupted.\n"
		   "\n"
		   "Options:\n"
		   "  -d, --dbname=CONNINFO  connection string or URI (default: PG* variables)\n"
		   "  -l, --lease=D          lease (default: the server's dlock.default_lease;\n"
		   "                         renew: the lease the lock was taken with)\n"
		   "  -w, --wait=D           how long to wait for the lock (default: forever;\n"
		   "                         0: one try)\n"
		   "  -H, --holder=H         holder name (default: hostname:pid:random)\n"
		   "      --linger=D         run: keep RESOURCE busy for D after COMMAND exits\n"
		   "      --grace=D          run: SIGTERM-to-SIGKILL grace period (default 5s)\n"
		   "  -f, --fence=N          unlock/renew only this holding\n"
		   "      --poll             never LISTEN, poll instead\n"
		   "      --fair             run/lock: wait in the resource's fair queue (first\n"
		   "                         come, first served; needs dlock 0.2 on the server);\n"
		   "                         elect: always fair (accepted, changes nothing)\n"
		   "      --lock-delay=D     keep RESOURCE unavailable for D after the lease if\n"
		   "                         this holding ends uncleanly (at most 1h; default:\n"
		   "                         the server's dlock.lock_delay)\n"
		   "      --shared           run/try/lock: a shared (read) lock: any number of\n"
		   "                         shared holders, or one exclusive (dlock 0.4)\n"
		   "      --semaphore=N      run/try/lock: RESOURCE is a semaphore of N permits;\n"
		   "                         take --permits of them (dlock 0.5)\n"
		   "      --permits=K        with --semaphore: how many permits (default 1)\n"
		   "  -v, --verbose          report progress on stderr\n"
		   "  -V, --version          print the client's and the server extension's versions\n"
		   "  -h, --help             print this help\n"
		   "Durations D: 250ms, 30s, 5m, 1h, 1d, or a plain number of seconds.\n"
		   "\n"
		   "Exit status:\n"
		   "  0-255  run: COMMAND's exit status (128+N if it was killed by signal N)\n"
		   "  64     usage error (bad option, bad duration, missing \"--\")\n"
		   "  69     connection or server error\n"
		   "  75     not acquired in time (try: held by another holder)\n"
		   "  76     lease lost (unlock/renew: not held by this holder and fence)\n"
		   "  126/127 run: COMMAND could not be executed / not found\n"
		   "  128+N  ended by signal N while waiting for the lock\n",
		   DLOCK_VERSION);
}

/*
 * find_option: the definition matching "--name" (long) or "-c" (short).
 */
static int
find_option(const char *name, size_t len, char shrt)
{
	for (size_t i = 0; i < sizeof(optdefs) / sizeof(optdefs[0]); i++)
	{
		if (shrt ? optdefs[i].shrt == shrt
			: (strlen(optdefs[i].lng) == len && strncmp(optdefs[i].lng, name, len) == 0))
			return (int) i;
	}
	return -1;
}

/*
 * duration_option: parse the value of a duration option, or report a
 * usage error (returns false).
 */
static bool
duration_option(const char *name, const char *value, int64_t *ms, bool positive)
{
	if (!parse_duration(value, ms))
	{
		usage_error("invalid duration for --%s: \"%s\" (use e.g. 250ms, 30s, 5m, 1h)",
					name, value);
		return false;
	}
	if (positive && *ms <= 0)
	{
		usage_error("--%s must be positive", name);
		return false;
	}
	return true;
}

/*
 * set_option: store the value of one option; false after reporting a
 * usage error.
 */
static bool
set_option(Options *o, int bit, const char *name, const char *v)
{
	switch (bit)
	{
		case O_LEASE:
			return duration_option(name, v, &o->lease_ms, true);
		case O_WAIT:
			return duration_option(name, v, &o->wait_ms, false);
		case O_LINGER:
			return duration_option(name, v, &o->linger_ms, false);
		case O_GRACE:
			return duration_option(name, v, &o->grace_ms, false);
		case O_HOLDER:
			if (*v == '\0' || strlen(v) > 255)
			{
				usage_error("--holder must be 1 to 255 bytes");
				return false;
			}
			o->holder = v;
			return true;
		case O_FENCE:
			if (*v == '\0' || strspn(v, "0123456789") != strlen(v) || strlen(v) > 19)
			{
				usage_error("invalid --fence: \"%s\" (expected a non-negative integer)", v);
				return false;
			}
			o->fence = v;
			return true;
		case O_DB:
			o->conninfo = v;
			return true;
		case O_POLL:
			o->poll = true;
			return true;
		case O_FAIR:
			o->fair = true;
			return true;
		case O_LOCK_DELAY:
			return duration_option(name, v, &o->lock_delay_ms, false);
		case O_SHARED:
			o->shared = true;
			return true;
		case O_SEMAPHORE:
		case O_PERMITS:
			{
				char	   *end;
				long		n;

				errno = 0;
				n = strtol(v, &end, 10);
				if (*v == '\0' || *end != '\0' || errno != 0 || n < 1 || n > INT32_MAX)
				{
					usage_error("invalid --%s: \"%s\" (expected a whole number from 1 to %d)",
								name, v, (int) INT32_MAX);
					return false;
				}
				if (bit == O_SEMAPHORE)
					o->max_permits = (int32_t) n;
				else
					o->permits = (int32_t) n;
				return true;
			}
		case O_VERBOSE:
			o->verbose = true;
			return true;
	}
	return true;
}

/*
 * parse: read argv into o.  Options may come anywhere before "--" (also
 * as --name=value, -dVALUE); the first plain word is the subcommand, the
 * others its arguments; everything after "--" is COMMAND.  Returns 0, or
 * EXIT_USAGE after reporting the mistake.  *seen collects the option bits
 * used.
 */
static int
parse(int argc, char **argv, Options *o, int *seen)
{
	static char *no_command[] = {NULL};

	o->pos = calloc(argc > 0 ? argc : 1, sizeof(char *));
	o->command = no_command;
	if (o->pos == NULL)
		return usage_error("out of memory");
	for (int i = 1; i < argc; i++)
	{
		const char *a = argv[i];
		const char *value = NULL;
		const char *name;
		int			k;

		if (strcmp(a, "--") == 0)
		{
			o->dashdash = true;
			o->command = &argv[i + 1];
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
		{
			if (o->subcommand == NULL)
				o->subcommand = a;
			else
				o->pos[o->npos++] = (char *) a;
			continue;
		}
		if (a[1] == '-')
		{
			const char *eq = strchr(a + 2, '=');
			size_t		len = eq ? (size_t) (eq - (a + 2)) : strlen(a + 2);

			k = find_option(a + 2, len, 0);
			if (k < 0)
				return usage_error("unknown option \"%.*s\"", (int) len + 2, a);
			if (eq)
			{
				if (!optdefs[k].value)
					return usage_error("option --%s takes no value", optdefs[k].lng);
				value = eq + 1;
			}
		}
		else
		{
			k = find_option(NULL, 0, a[1]);
			if (k < 0)
				return usage_error("unknown option \"-%c\"", a[1]);
			if (a[2] != '\0')
			{
				if (!optdefs[k].value)
					return usage_error("option -%c takes no value", a[1]);
				value = a + 2;
			}
		}
		name = optdefs[k].lng;
		if (optdefs[k].value && value == NULL)
		{
			if (i + 1 >= argc)
				return usage_error("option --%s needs a value", name);
			value = argv[++i];
		}
		*seen |= optdefs[k].bit;
		if (!set_option(o, optdefs[k].bit, name, value))
			return EXIT_USAGE;
	}
	return 0;
}

/*
 * main: parse, check that the options fit the subcommand, and run it.
 */
int
main(int argc, char **argv)
{
	Options		o;
	int			seen = 0;
	int			rc;
	int			allowed = -1;
	size_t		which = 0;

	memset(&o, 0, sizeof(o));
	o.wait_ms = -1;
	o.lock_delay_ms = -1;
	o.grace_ms = 5000;
	if ((rc = parse(argc, argv, &o, &seen)) != 0)
		return rc;
	if (seen & O_HELP)
	{
		help();
		return 0;
	}
	if (seen & O_VERSION)
		return my_is_url(o.conninfo) ? my_version(&o) : cmd_version(&o);
	if (o.subcommand == NULL)
		return usage_error("missing subcommand (run, elect, try, lock, unlock, renew, "
						   "status, watch, observe, reap)");
	for (size_t i = 0; i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (strcmp(subcommands[i].name, o.subcommand) == 0)
		{
			allowed = subcommands[i].allowed | O_GLOBAL;
			which = i;
		}
	if (allowed < 0)
		return usage_error("unknown subcommand \"%s\"", o.subcommand);
	for (size_t i = 0; i < sizeof(optdefs) / sizeof(optdefs[0]); i++)
		if ((seen & optdefs[i].bit) && !(allowed & optdefs[i].bit))
			return usage_error("option --%s does not apply to \"%s\"",
							   optdefs[i].lng, o.subcommand);
	if (o.dashdash && strcmp(o.subcommand, "run") != 0 && strcmp(o.subcommand, "elect") != 0)
		return usage_error("\"--\" and a COMMAND are only for \"run\" and \"elect\"");
	/* RESOURCE/ELECTION: 1 to 1000 bytes (status's PREFIX may be empty) */
	for (int i = 0; i < o.npos; i++)
	{
		bool		named = strcmp(o.subcommand, "elect") == 0 ||
			strcmp(o.subcommand, "observe") == 0;
		size_t		len = strlen(o.pos[i]);

		if (i == 1 && strcmp(o.subcommand, "elect") == 0)
			continue;			/* VALUE: checked by elect */
		if (len > 1000 || (len == 0 && strcmp(o.subcommand, "status") != 0))
			return usage_error("%s must be 1 to 1000 bytes", named ? "ELECTION" : "RESOURCE");
	}

	if ((seen & O_PERMITS) && !(seen & O_SEMAPHORE))
		return usage_error("--permits needs --semaphore");
	if ((seen & O_SHARED) && (seen & O_SEMAPHORE))
		return usage_error("--shared and --semaphore do not go together");
	if ((seen & O_SEMAPHORE) && (seen & O_LOCK_DELAY))
		return usage_error("--lock-delay does not apply to --semaphore");
	if ((seen & O_SHARED) && (seen & O_LOCK_DELAY) && o.lock_delay_ms > 0)
		return usage_error("--lock-delay applies to exclusive locks only, not to --shared");
	if ((seen & O_PERMITS) && o.permits > o.max_permits)
		return usage_error("--permits (%d) must be at most --semaphore (%d)",
						   (int) o.permits, (int) o.max_permits);
	if (my_is_url(o.conninfo) && strcmp(o.subcommand, "help") != 0)
	{
		if (seen & (O_SHARED | O_SEMAPHORE))
			return usage_error("--shared and --semaphore are not available in the MySQL "
							   "edition");
		if (seen & (O_FAIR | O_LOCK_DELAY))
			return usage_error("--fair and --lock-delay are not available in the MySQL "
							   "edition");
		if (!subcommands[which].mysql)
			return usage_error("\"%s\" is not available in the MySQL edition%s", o.subcommand,
							   subcommands[which].fn == cmd_elect ||
							   subcommands[which].fn == cmd_observe
							   ? ": mysql/dlock.sql has no elections (no campaign, leader or "
							   "resign; see docs/editions/mysql.md)" : "");
		return my_command(&o);	/* the MySQL/MariaDB backend, my.c */
	}
	return subcommands[which].fn(&o);
}

/* do_help: "dlock help". */
static int
do_help(Options *o)
{
	(void) o;
	help();
	return 0;
}
