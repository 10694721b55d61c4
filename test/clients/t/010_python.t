# 010_python.t - the Python client's own tests (clients/python/tests,
# pytest) against a throwaway cluster with dlock preloaded, and through a
# pgbouncer in transaction mode in front of it; at the same time, the same
# tests against the portable edition (portable/dlock.sql on a second
# cluster, installed and used by role dbo, no superuser; its own
# pgbouncer), where what only the C extension has is skipped with the
# reason (conftest.py: c_only) and shared locks must raise NotSupported.
# The package is installed offline into a venv once, as a user would (pip
# install --no-build-isolation).
# One TAP line per Python test and edition.  Then a client holds a lock
# across a server restart.  DLOCK_PYTEST_ARGS adds pytest arguments.
# Promises: P16
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Text::ParseWords ();
use lib "$FindBin::RealBin/../../perl";
use DlockTest::Bouncer;
use DlockTest::Python;

my $probe = `python3 -c 'import psycopg, pytest' 2>&1`;
plan skip_all => "psycopg 3 or pytest missing (apt-get install python3-psycopg python3-pytest): $probe"
  if $?;

my $node = DlockTest::Python::cluster('python');
my $tmp = abs_path(PostgreSQL::Test::Utils::tempdir());
my $venv = DlockTest::Python::venv($tmp);
BAIL_OUT('the Python client could not be installed') unless $venv;

my $bport = DlockTest::Bouncer::start($node, $tmp, pool => 2, clients => 100);
my $user = getpwuid($<);
my %env = (DLOCK_TEST_DSN => "host=127.0.0.1 port=" . $node->port . " dbname=postgres user=$user");
$env{DLOCK_TEST_BOUNCER} = "host=127.0.0.1 port=$bport dbname=postgres user=$user sslmode=disable"
  if $bport;

my $tests = abs_path("$FindBin::RealBin/../../../clients/python/tests");
# DLOCK_PYTEST_ARGS: more pytest arguments, split as a shell would (e.g.
# "-k 'renewal or forks'").
my @args = (Text::ParseWords::shellwords($ENV{DLOCK_PYTEST_ARGS} // ''), $tests);
# The two editions' runs go side by side (they mostly wait on leases).
my $c_run;
{
	local $DlockTest::Python::LABEL = 'C extension: ';
	$c_run = DlockTest::Python::pytest_start($venv, $tmp, \%env, @args);
}

# ---- the portable edition
if (!DlockTest::Python::portable_clients())
{
	DlockTest::Python::pytest_finish($c_run);
	note 'the portable edition: left out (DLOCK_CLIENTS_EDITIONS)';
}
else
{
	my $pp = DlockTest::Python::portable_cluster('python_portable');
	mkdir "$tmp/portable" or die "mkdir $tmp/portable: $!";
	my $pbport = DlockTest::Bouncer::start($pp, "$tmp/portable", pool => 2, clients => 100,
		dbname => 'app', users => ['dbo']);
	my %penv = (DLOCK_TEST_EDITION => 'portable',
		DLOCK_TEST_DSN => "host=127.0.0.1 port=" . $pp->port . " dbname=app user=dbo");
	$penv{DLOCK_TEST_BOUNCER} = "host=127.0.0.1 port=$pbport dbname=app user=dbo sslmode=disable"
	  if $pbport;
	my $p_run;
	{
		local $DlockTest::Python::LABEL = 'portable: ';
		$p_run = DlockTest::Python::pytest_start($venv, $tmp, \%penv, @args);
	}
	DlockTest::Python::pytest_finish($c_run);
	DlockTest::Python::pytest_finish($p_run);
	session_restart($pp, $penv{DLOCK_TEST_DSN}, 'app', 'portable');
	$pp->stop;
}
session_restart($node, $env{DLOCK_TEST_DSN}, 'postgres', 'C extension');

# ---- the server restarts while a lock is held: the renewal reconnects
# and the lock is kept (holdings survive a restart; the lease is 8 s, the
# restart takes about one).
{
	my $script = <<'PY';
import sys, time, dlock
lock = dlock.Lock(sys.argv[1], "restart-test", lease=8)
assert lock.acquire(wait=5)
open(sys.argv[2] + ".tmp", "w").write(str(lock.fence))
import os; os.rename(sys.argv[2] + ".tmp", sys.argv[2])
time.sleep(14)
print("lost" if lock.lost.is_set() else "kept", lock.check(), lock.fence)
lock.release()
PY
	my $out = '';
	my $ready = "$tmp/restart-fence";
	my $h = IPC::Run::start([ "$venv/bin/python", '-c', $script, $env{DLOCK_TEST_DSN}, $ready ],
		'>', \$out, '2>&1', init => sub { chdir $tmp });
	my $waited = 0;
	while (!-e $ready && $waited++ < 300) { select(undef, undef, undef, 0.1); }
	ok(-e $ready, 'a Python client holds a lock before the restart');
	my $fence = -e $ready ? slurp_file($ready) : 'none';
	$node->restart;
	$h->finish;
	is($out, "kept True $fence\n",
		'across a server restart the lock is kept, renewed and released by its client');
}

# ---- the server goes down for longer than a session's ttl: the session's
# loss is signalled on each of its locks before the expiry the server last
# gave (keepalive's answer; one clock, one machine).  Skipped where the
# server has no sessions.
sub session_restart
{
	my ($cluster, $dsn, $db, $label) = @_;
	my $has = $cluster->safe_psql($db,
		"SELECT to_regprocedure('dlock.open_session(interval,text)') IS NOT NULL");
  SKIP:
	{
		skip "$label: no sessions: to_regprocedure('dlock.open_session(interval,text)') IS NULL", 1
		  unless $has eq 't';
		my $script = <<'PY';
import sys, time, threading, os, dlock
told = {}
s = dlock.Session(sys.argv[1], ttl=4).open()
locks = [s.lock("restart/%d" % i, on_lost=lambda l: told.setdefault(l.resource, time.time()))
         for i in range(3)]
assert all(l.acquire(wait=5) for l in locks)
time.sleep(2)                      # a keepalive has answered with an expiry
open(sys.argv[2] + ".tmp", "w").write("ready")
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
s.lost.wait(20)
for _ in range(100):               # the locks' callbacks run after s.lost is set
    if len(told) == 3:
        break
    time.sleep(0.1)
late = [r for r, at in told.items() if at >= s.expires_at.timestamp()]
print(len(told), "told", "late:", late)
PY
		my $out = '';
		my $ready = "$tmp/session-ready-$db";
		my $h = IPC::Run::start([ "$venv/bin/python", '-c', $script, $dsn, $ready ],
			'>', \$out, '2>&1', init => sub { chdir $tmp });
		my $waited = 0;
		while (!-e $ready && $waited++ < 300) { select(undef, undef, undef, 0.1); }
		ok(-e $ready, "$label: a Python session holds three locks before the server stops")
		  or diag $out;
		$cluster->stop('fast');
		$h->finish;
		$cluster->start;
		is($out, "3 told late: []\n",
			"$label: server down past the ttl: the session's loss told on each lock before its expiry");
	}
}

done_testing();
