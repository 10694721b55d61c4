# 048_refresh_no_revival.pl: the refresh after a promotion never revives a
# holding that expired before the refresh came to it (issue 26).
#
# A holding live at the promotion expires while the refresh waits for a
# background worker slot (max_worker_processes = 1: the reaper launcher
# has the only one).  Its holder's renew gets NULL, and xact_lock hands
# out a newer fence.  Then the server restarts with free slots and the
# refresh runs: the expired holding stays expired (its expiry unchanged,
# or reaped), check() of its old fence stays false, its renewal still gets
# NULL, and the next acquisition gets a fence above xact_lock's.  (0.2:
# the refresh extended it to promotion time + lease: check(r, F1) was true
# again and the current fence went back to F1.)
# Promises: P1 P14

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $LEASE = 10;      # seconds
my $PROMOTE = 5;     # seconds after taking it: live at the promotion

sub sleep_until
{
	my ($t) = @_;
	my $d = $t - time;
	usleep(int($d * 1_000_000)) if $d > 0;
	return;
}

# row: holder, fence and expiry (epoch seconds) of a resource's row.
sub row
{
	my ($node, $res) = @_;
	my $r = $node->safe_psql('postgres',
		"SELECT coalesce(holder, '-') || ' ' || coalesce(fence, 0) || ' ' || "
		  . "coalesce(extract(epoch FROM expires_at), 0) FROM dlock.leases WHERE resource = '$res'");
	return split / /, $r;
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# One worker slot, the launcher's (the logical replication launcher, which
# would register first, is off).  A hot standby needs at least as many.
$primary->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
max_worker_processes = 1
max_logical_replication_workers = 0
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION dlock');
$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;

my $t0 = time;
my $f1 = $primary->safe_psql('postgres', "SELECT dlock.try_lock('live', 'h-live', '${LEASE}s')");
$primary->wait_for_catchup($standby);
my @before = row($standby, 'live');
is("$before[0] $before[1]", "h-live $f1", 'the standby has the holding');
$primary->stop('immediate');
sleep_until($t0 + $PROMOTE);
$standby->promote;
ok($standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'promoted');

# The refresh waits for a slot; meanwhile the holding expires.
sleep_until($before[2] + 0.3);
unlike(slurp_file($standby->logfile), qr/refresh after promotion to timeline 2 done/,
	'the refresh has not run (no worker slot)');
is($standby->safe_psql('postgres', q{SELECT dlock.renew('live', 'h-live') IS NULL}), 't',
	'the expired holding: its renewal gets NULL');
my $f2 = $standby->safe_psql('postgres', q{SELECT dlock.xact_lock('live')});
cmp_ok($f2, '>', $f1, 'xact_lock hands out a newer fence');

# Free slots: the refresh runs after the restart.
$standby->append_conf('postgresql.conf', 'max_worker_processes = 8');
$standby->restart;
$standby->wait_for_log(qr/refresh after promotion to timeline 2 done/);
note(time < $t0 + $PROMOTE + $LEASE
	? 'the refresh ran before promotion time + lease: a revival would show in check()'
	: 'the refresh ran after promotion time + lease: only the row would show a revival');
like(slurp_file($standby->logfile), qr/refreshed 0 holdings live at the promotion to timeline 2/,
	'the refresh extended nothing');
my @after = row($standby, 'live');
# (reaped meanwhile: 0.5 deletes the row, so none is as good as a free one)
ok(!@after || $after[0] eq '-' || ("$after[0] $after[1] $after[2]" eq "@before"),
	"the expired holding was not revived (row: @after)");
is($standby->safe_psql('postgres', "SELECT dlock.check('live', $f1)"), 'f',
	'check() of its old fence is false');
is($standby->safe_psql('postgres', q{SELECT dlock.renew('live', 'h-live') IS NULL}), 't',
	'its renewal still gets NULL');
my $f3 = $standby->safe_psql('postgres', q{SELECT dlock.try_lock('live', 'next', '10s')});
cmp_ok($f3 || 0, '>', $f2, "the next holder takes it, with a fence above xact_lock's");

$standby->stop;
done_testing();
