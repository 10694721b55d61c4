# 044_failover_async.pl: promotion of an asynchronous standby that lagged
# behind (cut off from the primary's WAL while the primary went on).
#
# After the primary is killed and the standby promoted:
#   - every fence handed out on the new primary is above every fence the
#     old one handed out, seen by the standby or not, and they keep
#     increasing;
#   - holdings the standby had are there with their fences;
#   - a holder whose acquisition the standby never received gets NULL from
#     renew, and another holder can take the resource;
#   - a "dlock run" whose acquisition was lost (multi-host connection
#     string) reconnects, is told by its renewal that the lease is lost,
#     and its COMMAND is killed (exit 76).
# (A standby whose replay is merely paused is not enough to lose anything:
# promotion replays the WAL it has received before it ends recovery.)
# Promises: P1 P14 P15

use strict;
use warnings;

use File::Spec;
use List::Util qw(max min);
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

my $A = PostgreSQL::Test::Cluster->new('A');
$A->init(allows_streaming => 1);
$A->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
});
$A->start;
$A->safe_psql('postgres', 'CREATE EXTENSION dlock');
$A->backup('bk');
my $B = PostgreSQL::Test::Cluster->new('B');
$B->init_from_backup($A, 'bk', has_streaming => 1);
$B->start;

my $multi = 'host=' . $A->host . ',' . $B->host . ' port=' . $A->port . ',' . $B->port
  . ' dbname=postgres target_session_attrs=read-write';

# take: n acquisitions and releases by holder h on node; their fences in
# the order they were handed out.
sub take
{
	my ($node, $prefix, $n) = @_;
	my @f = split /\n/, $node->safe_psql('postgres', qq{
SELECT dlock.try_lock('$prefix' || i, 'h', '1h') FROM generate_series(1, $n) i;
SELECT count(dlock.unlock('$prefix' || i, 'h')) FROM generate_series(1, $n) i;
});
	pop @f;
	return @f;
}

sub increasing
{
	my @f = @_;
	for my $i (1 .. $#f) { return 0 unless fence_lt($f[ $i - 1 ], $f[$i]); }
	return 1;
}

my @old = take($A, 'seen', 50);
my $f_seen = $A->safe_psql('postgres', q{SELECT dlock.try_lock('kept', 'h-kept', '1h')});
push @old, $f_seen;
$A->wait_for_catchup($B);

# Cut the standby off; the primary goes on.
$B->safe_psql('postgres', q{ALTER SYSTEM SET primary_conninfo = ''});
$B->reload;
ok($B->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver'),
	'the standby is cut off');
# concurrent clients hand out fences the standby will never see
my @bg = map {
	my $c = $_;
	spawn("taker$c", cmd => [ 'psql', '-XAtq', '-d', $A->connstr('postgres'), '-c',
		"SELECT dlock.try_lock('unseen$c-' || i, 'h', '1h') FROM generate_series(1, 200) i" ]);
} 1 .. 4;
is(wait_exit($_, 60), 0, 'a client took 200 fences on the old primary') for @bg;
push @old, map { split /\n/, slurp("$tmp/taker$_.out") } 1 .. 4;
my $f_lost = $A->safe_psql('postgres', q{SELECT dlock.try_lock('lost', 'h-lost', '1h')});
push @old, $f_lost;
my $m = "$tmp/run";
my $run = spawn('run',
	cmd => [ $cli, '-v', '-d', $multi, 'run', '--lease', '10s', '--grace', '1s', 'lostrun', '--',
		'sh', '-c', 'echo "$DLOCK_FENCE" > "$M.start"; sleep 60; echo ok > "$M.end"' ],
	M => $m);
my $deadline = time + 30;
usleep(50_000) while time < $deadline && !-s "$m.start";
chomp(my $f_run = slurp("$m.start") // '');
ok($f_run ne '', "dlock run holds lostrun on the old primary (fence $f_run)");
push @old, $f_run;
is(scalar(@old), 50 + 1 + 800 + 2, 'all fences of the old primary collected');
my $max_old = (sort { fence_lt($a, $b) ? -1 : 1 } @old)[-1];

$A->stop('immediate');
$B->promote;

is($B->safe_psql('postgres', q{SELECT count(*) FROM dlock.leases WHERE resource LIKE 'unseen%' OR resource IN ('lost', 'lostrun')}),
	'0', 'the promoted standby never saw the last acquisitions');
is($B->safe_psql('postgres', q{SELECT fence FROM dlock.locks WHERE resource = 'kept'}), $f_seen,
	'a holding the standby had is there with its fence');
is($B->safe_psql('postgres', q{SELECT dlock.renew('kept', 'h-kept') IS NOT NULL}), 't',
	'and its holder renews it');

is($B->safe_psql('postgres', q{SELECT dlock.renew('lost', 'h-lost') IS NULL}), 't',
	'a holder whose acquisition was lost gets NULL from renew');
my $f_next = $B->safe_psql('postgres', q{SELECT dlock.try_lock('lost', 'other', '1h')});
ok(fence_lt($f_lost, $f_next), "another holder takes it with a higher fence ($f_next > $f_lost)");

is(wait_exit($run, 60), 76, 'dlock run: lease lost, exit 76');
ok(!-e "$m.end", 'dlock run: COMMAND was killed');
like(slurp("$tmp/run.err"), qr/no longer held/, 'dlock run: its renewal on the new primary said so');

my @new = (take($B, 'new', 50), $f_next);
ok(fence_lt($max_old, (sort { fence_lt($a, $b) ? -1 : 1 } @new)[0]),
	'every fence of the new primary is above every fence of the old one');
my @more = take($B, 'more', 20);
ok(increasing(@new[0 .. 49], @more), 'and they keep increasing');

$B->stop;
done_testing();
