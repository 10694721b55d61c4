# 054_cli_kinds.pl - the dlock command-line client with the other kinds of
# lock: --shared (0.4) and --semaphore N [--permits K] (0.5), on try, lock
# and run, against a server with the extension preloaded.
#
# Covers: the usage errors of the new options (exit 64); a semaphore's
# permits taken by try (and refused, exit 75, when none are free), shown
# in dlock.locks with mode and permits while run's COMMAND runs, and
# returned when it exits; a run that waits for permits and runs COMMAND
# once a holder returns them; shared holders that share, and an exclusive
# run kept out by them.
#
# Env: DLOCK_CLI (default $TESTDIR/cli/dlock, else cli/dlock).
# Promises: P9 P10 P15
use strict;
use warnings;

use File::Spec;
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

my $node = PostgreSQL::Test::Cluster->new('cli_kinds');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);
my $conn = $node->connstr('postgres');

sub cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, @_ ], '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return (code_of($?), $out, $err);
}
sub sql { return $node->safe_psql('postgres', $_[0]) }

my ($rc, $out, $err);

# ---------- usage errors
for my $case (
	[ [qw(run --permits 2 r -- true)], qr/--permits needs --semaphore/ ],
	[ [qw(run --semaphore 0 r -- true)], qr/invalid --semaphore: "0"/ ],
	[ [qw(run --semaphore x r -- true)], qr/invalid --semaphore: "x"/ ],
	[ [qw(run --semaphore 2 --permits 3 r -- true)], qr/--permits \(3\) must be at most --semaphore \(2\)/ ],
	[ [qw(run --shared --semaphore 2 r -- true)], qr/--shared and --semaphore do not go together/ ],
	[ [qw(run --semaphore 2 --lock-delay 1s r -- true)], qr/--lock-delay does not apply to --semaphore/ ],
	[ [qw(run --shared --lock-delay 1s r -- true)], qr/--lock-delay applies to exclusive locks only/ ],
	[ [qw(try r --shared --lock-delay 1s)], qr/--lock-delay applies to exclusive locks only/ ],
	[ [qw(unlock r --holder h --semaphore 2)], qr/option --semaphore does not apply to "unlock"/ ])
{
	($rc, $out, $err) = cli('-d', $conn, @{ $case->[0] });
	is($rc, 64, "usage error: @{ $case->[0] }");
	like($err, $case->[1], '... with its message');
}

# ---------- a semaphore: try, run, and a run that waits for permits
($rc, $out, $err) = cli('-d', $conn, 'try', 'sem/cli', '--semaphore', '3', '--permits', '2',
	'--holder', 'a', '--lease', '1h');
is($rc, 0, 'try takes two of three permits');
like($out, qr/^\d+$/, 'try prints the fence');
($rc, $out, $err) = cli('-d', $conn, 'try', 'sem/cli', '--semaphore', '3', '--permits', '2', '--holder', 'b');
is($rc, 75, 'two more are not free: exit 75');
($rc, $out, $err) = cli('-d', $conn, 'try', 'sem/cli', '--semaphore', '4', '--holder', 'b');
is($rc, 69, 'another max_permits while permits are held: a server error, exit 69');
like($err, qr/has max_permits 3, not 4/, '... saying so');
($rc, $out, $err) = cli('-d', $conn, 'run', '--semaphore', '3', '--holder', 'r', '--wait', '0', 'sem/cli', '--',
	'psql', '-XAt', '-d', $conn, '-c',
	q{SELECT string_agg(holder || ' ' || mode || ' ' || permits, ',' ORDER BY holder) FROM dlock.locks WHERE resource = 'sem/cli'});
is($rc, 0, 'run takes the third permit');
is($out, "a semaphore 2,r semaphore 1\n", 'COMMAND sees both holdings, with their permits');
is(sql(q{SELECT string_agg(holder, ',') FROM dlock.locks WHERE resource = 'sem/cli'}), 'a',
	'run returned its permit when COMMAND exited');

my $pid = spawn('semwait', cmd => [ $cli, '-d', "$conn application_name=semwait", 'run', '--semaphore', '3', '--permits', '3',
		'--holder', 'w', '--wait', '60s', 'sem/cli', '--', 'sh', '-c', "echo \$DLOCK_FENCE > $tmp/semwait.ran" ]);
# (it has seen the permits busy at least once: it rolled back, or listens)
ok($node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity
		   WHERE application_name = 'semwait' AND query ~ '^(ROLLBACK|LISTEN)'}),
	'a run waits for three permits');
ok(!-e "$tmp/semwait.ran", 'COMMAND has not run');
($rc, $out, $err) = cli('-d', $conn, 'unlock', 'sem/cli', '--holder', 'a');
is($rc, 0, 'a returns its two permits');
is(wait_exit($pid, 60), 0, 'the waiting run ran COMMAND and exited');
like(slurp("$tmp/semwait.ran"), qr/^\d+$/, 'COMMAND ran with DLOCK_FENCE');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE resource = 'sem/cli'}), '0', 'no permit is held');

# ---------- shared
($rc, $out, $err) = cli('-d', $conn, 'try', 'sh/cli', '--shared', '--holder', 'r1', '--lease', '1h');
is($rc, 0, 'try --shared takes a shared lock');
($rc, $out, $err) = cli('-d', $conn, 'run', '--shared', '--holder', 'r2', '--wait', '0', 'sh/cli', '--',
	'psql', '-XAt', '-d', $conn, '-c',
	q{SELECT string_agg(holder || ' ' || mode, ',' ORDER BY holder) FROM dlock.locks WHERE resource = 'sh/cli'});
is($rc, 0, 'run --shared shares it');
is($out, "r1 shared,r2 shared\n", 'COMMAND sees both shared holders');
($rc, $out, $err) = cli('-d', $conn, 'run', '--holder', 'w', '--wait', '0', 'sh/cli', '--', 'touch', "$tmp/excl.ran");
is($rc, 75, 'an exclusive run is kept out while it is shared: exit 75');
ok(!-e "$tmp/excl.ran", 'its COMMAND did not run');
($rc, $out, $err) = cli('-d', $conn, 'unlock', 'sh/cli', '--holder', 'r1');
is($rc, 0, 'the shared holder unlocks');

$node->stop;
done_testing();
