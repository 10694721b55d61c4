# 040_standby.pl: dlock on a hot standby and after its promotion.
#
# On a streaming standby every state-changing function raises 25006 and the
# reaper only waits.  The standby is then cut off while the primary goes on
# handing out fences (an asynchronous standby that lagged behind), the
# primary dies, and the standby is promoted: its reaper starts reaping and
# every fence it hands out is above every fence of the old primary, including
# those the standby never saw: the new timeline starts a new fence epoch.
# Promises: P1 P6 P14

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
# The primary never reaps here, so that an expired lease reaches the standby.
dlock.reap_interval = '1h'
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');

my @fences;    # every fence the primary handed out

# take_fences: n acquisitions (and releases, so they are all new holders)
# on node; returns their fences.
sub take_fences
{
	my ($node, $prefix, $n) = @_;
	my @f = split /\n/, $node->safe_psql(
		'postgres', qq{
SELECT dlock.try_lock('$prefix' || i, 'h', '1h') FROM generate_series(1, $n) i;
SELECT count(dlock.unlock('$prefix' || i, 'h')) FROM generate_series(1, $n) i;
});
	pop @f;
	return @f;
}

push @fences, take_fences($primary, 'before', 50);
push @fences,
  $primary->safe_psql('postgres',
	q{SELECT dlock.try_lock('held', 'keeper', '1h')});
push @fences,
  $primary->safe_psql('postgres',
	q{SELECT dlock.try_lock('expires', 'short', '300ms')});

$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->append_conf('postgresql.conf', q{dlock.reap_interval = '100ms'});
$standby->start;
$primary->wait_for_catchup($standby);

# 1. Changes are refused with 25006 on the standby.
for my $call (
	q{dlock.try_lock('x', 'h', '1h')}, q{dlock.lock('x', 'h', '1h', '1s')},
	q{dlock.unlock('held', 'keeper')}, q{dlock.renew('held', 'keeper')},
	q{dlock.unlock_all('keeper')},     q{dlock.reap()},
	q{dlock.break_lock('held')},       q{dlock.xact_lock('x', '1s')},
	q{dlock.try_xact_lock('x')})
{
	my ($ret, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/ERROR:\s+25006:/, "standby: $call raises 25006");
}
is($standby->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'held'}),
	'keeper', 'standby: dlock.locks shows the replicated holding');
ok( $standby->safe_psql('postgres',
		"SELECT dlock.check('held', $fences[-2])") eq 't',
	'standby: check() works read-only');

# 2. The standby's reaper runs but does not reap while in recovery.
my $worker_sql = q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'dlock reaper'};
ok($standby->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($worker_sql) w"),
	'standby: the reaper is running');
my $worker_pid = $standby->safe_psql('postgres', $worker_sql);
ok( $standby->poll_query_until(
		'postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'expires'}),
	'standby: the short lease has expired');
# It cannot write on a standby at all; check that it did not try (and die
# and restart) either, over ten of its 100ms rounds.
usleep(1_000_000);
is($standby->safe_psql('postgres', $worker_sql), $worker_pid,
	'standby: the reaper neither died nor restarted');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks WHERE resource = 'expires'}),
	'1', 'standby: the expired lease is still there');

# 3. Cut the standby off, and go on handing out fences on the primary: the
# standby will never see these.
$standby->stop;
my $max_seen = (sort { $b <=> $a } @fences)[0];
my @unseen = take_fences($primary, 'unseen', 100);
push @fences, @unseen;
my $max_primary = (sort { $b <=> $a } @fences)[0];
cmp_ok($max_primary, '>', $max_seen,
	"the primary moved on to $max_primary after the standby stopped at $max_seen");
$primary->stop('immediate');

# 4. Promote the lagging standby.
$standby->start;
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'),
	'standby promoted');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM dlock.leases WHERE resource LIKE 'unseen%'}),
	'0', 'the promoted node never saw the last fences of the old primary');

my @new = take_fences($standby, 'promoted', 5);
my ($min_new) = sort { $a <=> $b } @new;
cmp_ok($min_new, '>', $max_primary,
	"fences after promotion ($min_new) exceed every fence of the old primary ($max_primary)");
my $tli = $standby->safe_psql('postgres',
	q{SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int});
is($standby->safe_psql('postgres', 'SELECT timeline FROM dlock.fence_epoch'), $tli,
	"the promoted node started a new fence epoch on the new timeline ($tli)");

# The holding survives the failover and is still exclusive.
is($standby->safe_psql('postgres', q{SELECT dlock.try_lock('held', 'intruder', '1h') IS NULL}),
	't', 'the replicated holding still excludes others');

# 5. The promoted node's reaper now reaps.
ok( $standby->poll_query_until(
		'postgres',
		q{SELECT count(*) = 0 FROM dlock.leases WHERE resource = 'expires' AND holder IS NOT NULL}),
	'after promotion the reaper reaps the expired lease');

$standby->stop;
done_testing();
