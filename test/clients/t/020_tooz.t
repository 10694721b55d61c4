# 020_tooz.t - tooz's own coordination tests (tooz/tests/test_coordination.py
# as Debian's python3-tooz ships it: 76 tests in 3.1.0) against dlock's tooz
# driver, with TOOZ_TEST_URL=dlock://USER@127.0.0.1:PORT/postgres on a
# throwaway cluster with dlock preloaded.  One TAP line per tooz test;
# tooz's skips (tooz.NotImplemented) show as skips with their reason.
# Skipped as a whole when python3-tooz or its tests are not installed.
# Promises: P8 P9 P16
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../../perl";
use DlockTest::Python;

# Warnings (e.g. futurist's EventletDeprecationWarning) are not failures;
# tooz 9's test file imports its other drivers (python3-sysv-ipc for ipc).
my $probe = `python3 -W ignore -c 'import tooz.tests.test_coordination, testtools, fixtures; print(tooz.__file__)' 2>&1`;
plan skip_all => "tooz's tests cannot be imported (apt-get install python3-tooz python3-testtools python3-fixtures python3-sysv-ipc): $probe"
  if $?;

my $node = DlockTest::Python::cluster('tooz');
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $venv = DlockTest::Python::venv($tmp);
BAIL_OUT('the Python client could not be installed') unless $venv;

my $user = getpwuid($<);
my $url = "dlock://$user\@127.0.0.1:" . $node->port . '/postgres';
my $version = `$venv/bin/python -c 'import importlib.metadata as m; print(m.version("tooz"))'`;
chomp $version;
note("tooz $version, TOOZ_TEST_URL=$url");

# tooz before 7.0.0 patches lock.acquire with mock's wraps=True: on
# Python 3.13, whose mock calls what it wraps, that test fails with every
# driver ("'bool' object is not callable"); tooz fixed its test in 7.0.0
# (commit 2e66610, "Fix wrong usage of 'wraps'").  Debian 13 ships 6.3.0.
my ($major) = $version =~ /^(\d+)/;
local %DlockTest::Python::TODO_TESTS = (
	test_lock_context_manager_acquire_argument => [
		"tooz ${version}'s own test passes wraps=True to mock (fixed in tooz 7.0.0)",
		qr/'bool' object is not callable/
	])
  if defined $major && $major < 7;

my $n = DlockTest::Python::pytest($venv, $tmp, { TOOZ_TEST_URL => $url },
	'--pyargs', 'tooz.tests.test_coordination');
note("tooz $version: $n tests");

done_testing();
