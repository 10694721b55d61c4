# 055_run_reset.pl - "dlock run" reports COMMAND's status when COMMAND ends
# as the CLI sends the watchdog a new deadline (issue 33, defect 12).
#
# The watchdog sends WD_EXITED (COMMAND's status) and exits; a renewal's
# deadline the CLI sent in between stays unread in its socket, so Linux
# resets the CLI's end and reports ECONNRESET before WD_EXITED.  The CLI
# took the error for a dead watchdog: exit 76, and the lock left to
# expire.  An LD_PRELOAD shim (test/shim/wd_reset.c, built here) makes
# the race certain: it delays the watchdog's WD_EXITED past a few
# renewals, and has the CLI read it only after the watchdog exited.
# Promises: P15
use strict;
use warnings;

use File::Spec;
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Proc;

my $cli = $ENV{DLOCK_CLI}
  // (defined $ENV{TESTDIR} ? "$ENV{TESTDIR}/cli/dlock" : 'cli/dlock');
$cli = File::Spec->rel2abs($cli);
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);
my $shim = "$tmp/wd_reset.so";
my $src = "$FindBin::RealBin/../shim/wd_reset.c";
system('cc', '-shared', '-fPIC', '-O1', '-o', $shim, $src, '-ldl') == 0
  or BAIL_OUT("cannot build the shim $src");

my $node = PostgreSQL::Test::Cluster->new('runreset');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
sub sql { return $node->safe_psql('postgres', $_[0]) }

# A 3 s lease: its renewal at 1 s falls in the watchdog's 1.5 s hold (a
# 600 ms lease was lost under load, its renewals late).
for my $round (1 .. 2)
{
	my $res = "reset$round";
	my $pid = spawn($res,
		cmd => [ $cli, '-v', '-d', $node->connstr('postgres'), 'run', '--lease', '3s',
			$res, '--', 'sh', '-c', 'sleep 0.3; exit 3' ],
		LD_PRELOAD => $shim);
	my $code = wait_exit($pid, 60);
	my $err = slurp("$tmp/$res.err");
	cmp_ok(() = $err =~ /renewed until/g, '>=', 1,
		"$res: the CLI renewed while the watchdog held back COMMAND's status");
	is($code, 3, "$res: the CLI exits with COMMAND's status") or diag($err);
	unlike($err, qr/watchdog process died/, "$res: and does not take the watchdog for dead");
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = '$res'"), '0',
		"$res: the lock was released, not left to expire");
}

$node->stop;
done_testing();
