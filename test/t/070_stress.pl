# 070_stress.pl: run the lost-update stress client against fresh clusters.
#
# test/stress/dlock_stress (built by "make -C test/stress"; this test builds
# nothing) increments a counter from several processes under dlock with
# fenced writes while it kills and pauses some of them; it exits 0 only if no
# increment was lost or duplicated and fences increased in write order.  It
# runs once with dlock preloaded (waits woken by commits) and once without
# (waits poll), and both ways again with --fair (waiters in the fair queue,
# acquisitions checked against the order of their tickets; without
# preloading only client-side tickets are visible).  With dlock preloaded
# it also runs --elect: the workers are candidates of an election, write
# fenced by their term, resign, and the leaders are killed and paused; the
# checker's verdict on the terms is asserted, and a run with --no-fence
# shows that the checker does catch writes under a stale term.  The binary is
# $DLOCK_STRESS, else test/stress/dlock_stress in this repository.
# Promises: P1 P2 P7 P8

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $stress = $ENV{DLOCK_STRESS}
  // abs_path(dirname(__FILE__) . '/../stress') . '/dlock_stress';
plan skip_all => "$stress not built (run: make -C test/stress)"
  unless -x $stress;

# run_stress: run dlock_stress against node ($n increments, $kills kills,
# $pauses pauses) and check its verdict and the final state.
sub run_stress
{
	my ($node, $what, $n, $kills, $pauses, @extra) = @_;
	my @cmd = (
		$stress, '-d', $node->connstr('postgres'),
		'-c', 6, '-n', $n, '--lease', '1s', '--sleep-ms', 5,
		'--kill', $kills, '--pause', $pauses, '--max-seconds', 50, @extra);
	note "running @cmd";
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run(\@cmd, '>', \$stdout, '2>', \$stderr,
		IPC::Run::timeout(90));
	my $rc = $? >> 8;
	diag("$what:\n$stdout");
	diag($stderr) if $stderr ne '';

	is($rc, 0, "$what: dlock_stress exited 0");
	like($stdout, qr/^RESULT: PASS$/m, "$what: dlock_stress reports PASS");
	unlike($stdout, qr/^FAIL:/m, "$what: no failed check");
	like($stdout, qr/^kills:\s+$kills of $kills/m, "$what: all $kills kills happened");
	like($stdout, qr/^pauses:\s+$pauses of $pauses/m,
		"$what: all $pauses pauses happened");
	if (grep { $_ eq '--fair' } @extra)
	{
		like($stdout, qr/^PASS: tickets served in the order they were taken/m,
			"$what: acquisitions in ticket order");
	}
	if (grep { $_ eq '--elect' } @extra)
	{
		like($stdout, qr/^PASS: terms strictly increase from one leader's writes/m,
			"$what: terms increase from leader to leader in write order");
		like($stdout, qr/^PASS: each term's writes are all by one candidate/m,
			"$what: no two leaders wrote under one term");
		like($stdout, qr/^PASS: no write under a resigned term was accepted/m,
			"$what: writes under a resigned term refused");
		like($stdout, qr/^PASS: leaders resigned and wrote under their old term/m,
			"$what: resigned leaders did try their old term");
		is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.leader('stress')}),
			'0', "$what: nobody leads at the end");
		is($node->safe_psql('postgres',
				q{SELECT count(*) FROM dlock.queue WHERE resource = 'stress'}),
			'0', "$what: no candidate left in the queue");
	}

	# The final state as the server sees it.
	is($node->safe_psql('postgres', 'SELECT value FROM stress_counter'),
		$n, "$what: counter is $n");
	is( $node->safe_psql(
			'postgres',
			q{SELECT count(*) FROM dlock.locks WHERE resource = 'stress' AND NOT expired}),
		'0',
		"$what: nobody holds the stress lock at the end");
}

# With dlock preloaded: waits are woken by the releasing commit.
my $node = PostgreSQL::Test::Cluster->new('stress');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
max_connections = 40
log_statement = none
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
run_stress($node, 'preloaded', 200, 2, 2);
# Fair: half the workers wait in lock(..., fair => true), half retry
# try_lock(..., fair => true) on their side; served in ticket order.
run_stress($node, 'preloaded, fair', 150, 2, 2, '--fair');
# Election: candidates campaign, lead (writes fenced by the term), resign;
# leaders are killed and paused beyond their lease.
run_stress($node, 'preloaded, election', 150, 2, 2, '--elect');

# The checker can fail: without assert_fence, the write of a leader paused
# beyond its lease and the writes tried under a resigned term go through,
# and the checker must say so.
{
	my @cmd = (
		$stress, '-d', $node->connstr('postgres'),
		'-c', 4, '-n', 40, '--lease', '1s', '--sleep-ms', 5,
		'--kill', 0, '--pause', 1, '--max-seconds', 50, '--elect', '--no-fence');
	note "running @cmd";
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run(\@cmd, '>', \$stdout, '2>', \$stderr, IPC::Run::timeout(90));
	my $rc = $? >> 8;
	# The checker's report of this run names the violations it caught;
	# it is shown only if this test fails (a passing run says nothing that
	# reads as a failure).
	my $ok = is($rc, 1, 'election, no fence: dlock_stress exited 1');
	$ok &= like($stdout, qr/^RESULT: FAIL$/m, 'election, no fence: the checker rejects the run');
	$ok &= like($stdout, qr/^FAIL: no write under a resigned term was accepted \((\d+) of \1\)$/m,
		'election, no fence: every write under a resigned term was caught');
	$ok &= like($stdout, qr/^FAIL: no write of a holder paused beyond its lease was accepted \(1 accepted\)$/m,
		'election, no fence: the paused leader\'s write was caught');
	diag("dlock_stress's report of the run without fencing:\n$stdout") unless $ok;
}
$node->stop;

# Without preloading: waits poll at dlock.poll_interval, expiry is lazy.
my $plain = PostgreSQL::Test::Cluster->new('stress_plain');
$plain->init;
$plain->append_conf(
	'postgresql.conf', q{
max_connections = 40
log_statement = none
});
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION dlock');
run_stress($plain, 'not preloaded', 100, 1, 1);
run_stress($plain, 'not preloaded, fair', 60, 1, 1, '--fair');
$plain->stop;

done_testing();
