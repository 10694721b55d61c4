# 010_python.t - the Python client's own tests (clients/python/tests,
# pytest) against a throwaway cluster with dlock preloaded, and through a
# pgbouncer in transaction mode in front of it.  The package is installed
# offline into a venv as a user would (pip install --no-build-isolation).
# One TAP line per Python test.  DLOCK_PYTEST_ARGS adds pytest arguments.
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use PostgreSQL::Test::Utils;
use Test::More;
use lib "$FindBin::RealBin/../../perl";
use DlockTest::Bouncer;
use DlockTest::Python;

my $probe = `python3 -c 'import psycopg, pytest' 2>&1`;
plan skip_all => "psycopg 3 or pytest missing (apt-get install python3-psycopg python3-pytest): $probe"
  if $?;

my $node = DlockTest::Python::cluster('python');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $venv = DlockTest::Python::venv($tmp);
BAIL_OUT('the Python client could not be installed') unless $venv;

my $bport = DlockTest::Bouncer::start($node, $tmp, pool => 2, clients => 100);
my $user = getpwuid($<);
my %env = (DLOCK_TEST_DSN => "host=127.0.0.1 port=" . $node->port . " dbname=postgres user=$user");
$env{DLOCK_TEST_BOUNCER} = "host=127.0.0.1 port=$bport dbname=postgres user=$user sslmode=disable"
  if $bport;

my $tests = abs_path("$FindBin::RealBin/../../../clients/python/tests");
# DLOCK_PYTEST_ARGS: more pytest arguments (e.g. "-k renewal").
DlockTest::Python::pytest($venv, $tmp, \%env, split(' ', $ENV{DLOCK_PYTEST_ARGS} // ''), $tests);

done_testing();
