# 045_refresh_on_promotion.pl: holdings live at a promotion are refreshed
# once to at least promotion time + their lease (dlock.refresh_on_promotion).
#
# Three promotions in a chain, each of an asynchronous standby that had
# caught up, after its primary was killed:
#   1. preloaded, the setting on: a holder whose lease would have run out
#      during the failover keeps it (in two databases, one still on the
#      0.1 SQL), keeps its fence, and
#      renews on the new primary past its old expiry; a holding already
#      expired at the promotion is not revived; a restart does not refresh
#      again.
#   2. preloaded, the setting off: the same holding is not refreshed, and
#      its renewal past the old expiry gets NULL.
#   3. not preloaded: nothing refreshes either (as the README says).
# Promises: P3 P14

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $LEASE = 8;    # seconds

# sleep_until: sleep until the (Time::HiRes) time t.
sub sleep_until
{
	my ($t) = @_;
	my $d = $t - time;
	usleep(int($d * 1_000_000)) if $d > 0;
	return;
}

# row_sql: the query of row() for a resource: a row, or none.
sub row_sql
{
	my ($res) = @_;
	return "SELECT coalesce(holder, '-') || ' ' || coalesce(fence, 0) || ' ' || "
	  . "coalesce(extract(epoch FROM expires_at), 0) FROM dlock.leases WHERE resource = '$res'";
}

# row: holder, fence and expiry (epoch seconds) of a resource's row.
sub row
{
	my ($node, $db, $res) = @_;
	my $r = $node->safe_psql($db, row_sql($res));
	return split / /, $r;
}

# standby_of: a streaming standby of node, caught up.
sub standby_of
{
	my ($node, $name, $conf) = @_;
	$node->backup("bk_$name");
	my $s = PostgreSQL::Test::Cluster->new($name);
	$s->init_from_backup($node, "bk_$name", has_streaming => 1);
	$s->append_conf('postgresql.conf', $conf);
	$s->start;
	$node->wait_for_catchup($s);
	return $s;
}

# failover: on primary, take 'live' (LEASE) in both databases and 'dead'
# (1 s); once the standby has them, kill the primary, wait 3 s (so 'dead'
# expires before the promotion, 'live' after it), promote.  Returns the
# time 'live' was taken and the rows before the promotion.  'dead' is
# taken with the first 'live', and the rows of a database are read in one
# psql: each psql start (0.5-2 s now and then on a loaded machine) between
# the takes and the promotion eats into 'live''s lease.
sub failover
{
	my ($primary, $standby) = @_;
	my $t0 = time;
	$primary->safe_psql('postgres', "SELECT dlock.try_lock('live', 'h-live', '${LEASE}s');
		SELECT dlock.try_lock('dead', 'h-dead', '1s')");
	my $t_dead = time;
	$primary->safe_psql('other', "SELECT dlock.try_lock('live', 'h-live', '${LEASE}s')");
	$primary->wait_for_catchup($standby);
	my %before;
	@before{qw(live dead)} = map { [ split / / ] } split /\n/,
	  $standby->safe_psql('postgres', join(";\n", map { 'SELECT (' . row_sql($_) . ')' } qw(live dead))), -1;
	$before{other} = [ row($standby, 'other', 'live') ];
	$primary->stop('immediate');
	# 'dead' ran out before the promotion, however late it was taken
	sleep_until($t0 + 3 > $t_dead + 1.5 ? $t0 + 3 : $t_dead + 1.5);
	$before{promote_start} = time;
	$standby->promote;
	$before{promote_end} = time;
	return ($t0, %before);
}

# ---------- 1. preloaded, refresh on
my $p0 = PostgreSQL::Test::Cluster->new('p0');
$p0->init(allows_streaming => 1);
$p0->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
});
$p0->start;
$p0->safe_psql('postgres', 'CREATE DATABASE other');
$p0->safe_psql('postgres', 'CREATE EXTENSION dlock');
# the library must refresh under the oldest SQL too
$p0->safe_psql('other', q{CREATE EXTENSION dlock VERSION '0.1'});

my $s1 = standby_of($p0, 's1', '');
my ($t0, %before) = failover($p0, $s1);
$s1->wait_for_log(qr/refresh after promotion to timeline 2 done/);
my $tli = $s1->safe_psql('postgres',
	q{SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int});
is($tli, '2', 'S1 promoted to timeline 2');
for my $db ('postgres', 'other')
{
	my @b = $db eq 'postgres' ? @{ $before{live} } : @{ $before{other} };
	my @a = row($s1, $db, 'live');
	is("$a[0] $a[1]", "$b[0] $b[1]", "$db: the live holding keeps its holder and fence");
	# P, the promotion, lies between the start and the end of pg_ctl
	# promote (file times may lag the clock by a tick: 50 ms of slack)
	cmp_ok($a[2], '>=', $before{promote_start} + $LEASE - 0.05,
		"$db: its expiry moved to promotion time + lease (by " . sprintf('%.2f', $a[2] - $b[2]) . ' s)');
	cmp_ok($a[2], '<=', $before{promote_end} + $LEASE + 0.05,
		"$db: and not beyond");
}
like(slurp_file($s1->logfile), qr/refreshed 1 holdings live at the promotion to timeline 2/,
	'the log says what was refreshed');
# The expired one was not revived (the reaper may have freed it since, and
# from 0.5 on deleted its row).
my @d = row($s1, 'postgres', 'dead');
ok(!@d || $d[0] eq '-' || $d[2] == $before{dead}[2],
	'a holding already expired at the promotion is not revived');
is($s1->safe_psql('postgres', q{SELECT dlock.renew('dead', 'h-dead') IS NULL}), 't',
	'and its renewal gets NULL');

# The holder renews on the new primary after its old lease would have ended
# (by the expiry the standby had: $t0 is before the take's psql started).
sleep_until($before{live}[2] + 0.5);
is($s1->safe_psql('postgres', q{SELECT dlock.try_lock('live', 'intruder', '1s') IS NULL}),
	't', 'past its old expiry, nobody else can take it');
is($s1->safe_psql('postgres', q{SELECT dlock.renew('live', 'h-live') IS NOT NULL}),
	't', 'the holder renews it on the new primary');
is($s1->safe_psql('other', q{SELECT dlock.renew('live', 'h-live') IS NOT NULL}),
	't', 'in the other database too');

# Once: a crash and restart does not refresh again.
$s1->stop('immediate');
$s1->start;
$s1->safe_psql('postgres', 'SELECT 1');
ok($s1->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'dlock reaper'}),
	'the reaper is back after the restart');
usleep(500_000);
my @done = slurp_file($s1->logfile) =~ /refresh after promotion to timeline 2 done/g;
is(scalar @done, 1, 'the refresh ran once, not again after a crash and restart');
$s1->safe_psql($_, q{SELECT dlock.unlock('live', 'h-live')}) for ('postgres', 'other');

# ---------- 2. a second promotion, the setting off
my $s2 = standby_of($s1, 's2', q{dlock.refresh_on_promotion = off});
($t0, %before) = failover($s1, $s2);
$s2->wait_for_log(qr/holdings not refreshed after promotion to timeline 3: dlock.refresh_on_promotion is off/);
my @a = row($s2, 'postgres', 'live');
is("@a", "@{ $before{live} }", 'off: the live holding is unchanged');
sleep_until($before{live}[2] + 0.5);
is($s2->safe_psql('postgres', q{SELECT dlock.renew('live', 'h-live') IS NULL}), 't',
	'off: its renewal past the old expiry gets NULL');
$s2->safe_psql($_, q{SELECT dlock.unlock_all('h-live')}) for ('postgres', 'other');

# ---------- 3. not preloaded
my $s3 = standby_of($s2, 's3', q{shared_preload_libraries = ''});
($t0, %before) = failover($s2, $s3);
ok($s3->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'S3 promoted');
@a = row($s3, 'postgres', 'live');
is("@a", "@{ $before{live} }", 'not preloaded: the live holding is unchanged');
sleep_until($before{live}[2] + 0.5);
is($s3->safe_psql('postgres', q{SELECT dlock.renew('live', 'h-live') IS NULL}), 't',
	'not preloaded: its renewal past the old expiry gets NULL');
is($s3->safe_psql('postgres', q{SELECT dlock.try_lock('live', 'next', '10s') IS NOT NULL}), 't',
	'and another holder takes it');

$s3->stop;
done_testing();
