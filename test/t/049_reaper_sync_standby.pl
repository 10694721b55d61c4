# 049_reaper_sync_standby.pl: a reaper round never waits for a synchronous standby
# (issue 26).
#
# synchronous_standby_names names a standby that is not there, so every
# commit that asks for it waits forever.  A round's transactions write:
# the reaping of expired leases (asynchronous since 0.1), the delivery of
# the events prepared transactions left in dlock.outbox, the purge of
# lapsed client tickets and of lock-delays that are over, the purge of
# long-free rows.  Each of them must commit without waiting, so that
# dlock.reap() returns, reaps, and the purges are done.  (0.3: the purge
# of tickets and delays, and the outbox delivery, committed synchronously:
# the round hung in SyncRep, and with it reap() and every later round of
# the database: expired leases unreaped, no events.)
#
# The rounds run in database "solo", where only reap() starts them (the
# worker reaps in "postgres"), so nothing purges behind the test's back.
# reap() runs with a statement_timeout: it must return, with the right
# count, and the test says so rather than timing it.
# Promises: P5 P7 P13

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('round_sync');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.queue_ttl = '1s'
max_prepared_transactions = 5
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE solo');
$node->safe_psql('solo', 'CREATE EXTENSION dlock; CREATE TABLE blk (i int)');

sub q_solo { return $node->safe_psql('solo', $_[0]); }

# What the round will have to do, made while commits do not wait:
#  - a lease that expires (r1);
#  - a lapsed client ticket (r2's queue: b's fair attempt, dlock.queue_ttl 1s);
#  - a lock-delay that is over (r3: broken, its lease and delay of 1s run out);
#  - an event in dlock.outbox (r4 released by a prepared transaction).
q_solo(q{SELECT dlock.try_lock('r1', 'a', '1s')});
q_solo(q{SELECT dlock.try_lock('r2', 'a', '1h')});
is(q_solo(q{SELECT dlock.try_lock('r2', 'b', '1h', fair => true) IS NULL}), 't',
	'b queues for r2');
# (r3 is broken in the psql that took it: by a psql of its own, slow to
# start on a loaded machine, its 1 s lease had run out, and reap() took
# it for a second expired lease.)
is(q_solo(q{SELECT dlock.try_lock('r3', 'a', '1s', lock_delay => '1s') IS NOT NULL;
	SELECT dlock.break_lock('r3')}), "t\nt", 'r3 taken and broken');
q_solo(q{SELECT dlock.try_lock('r4', 'a', '1h')});
q_solo(q{BEGIN; SELECT dlock.unlock('r4', 'a'); PREPARE TRANSACTION 'p4'});
q_solo(q{COMMIT PREPARED 'p4'});
usleep(2_500_000);    # r1's lease, b's ticket and r3's lease and lock-delay run out
is(q_solo(q{SELECT count(*) FROM dlock.tickets}), '1', 'a lapsed ticket to purge');
is(q_solo(q{SELECT count(*) FROM dlock.delays WHERE available_at <= clock_timestamp()}),
	'1', 'a lock-delay that is over, to purge');
is(q_solo(q{SELECT count(*) FROM dlock.outbox}), '1', 'an event in the outbox to deliver');

# The standby goes missing: a probe's commit waits in SyncRep once the
# setting has reached everyone (the checkpointer tells the backends).
$node->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
my $probe = $node->background_psql('solo', timeout => 300, on_error_stop => 0);
my $probe_pid = $probe->query_safe('SELECT pg_backend_pid()');
$probe->query_until(qr/sent/, "\\echo sent\nINSERT INTO blk VALUES (1);\n");
ok( $node->poll_query_until(
		'postgres',
		"SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = $probe_pid"),
	'a commit that asks for the standby waits for it');

# A listener of r4 (its event comes from the outbox) and of r1 (expired).
my $listener = $node->background_psql('solo', timeout => 300, on_error_stop => 0);
$listener->query_safe(
	q{DO $$ BEGIN EXECUTE format('LISTEN %I', dlock.channel('r4'));
	  EXECUTE format('LISTEN %I', dlock.channel('r1')); END $$});

# The round: reap() returns, with r1 reaped.
my ($ret, $out, $err) = $node->psql('solo', q{SET statement_timeout = '20s'; SELECT dlock.reap()});
is($ret, 0, 'reap() returns while the standby is missing') or diag($err);
is($out, '1', 'and reaped the expired lease');
is(q_solo(q{SELECT count(*) FROM dlock.tickets}), '0', 'the lapsed ticket is purged');
is(q_solo(q{SELECT count(*) FROM dlock.delays WHERE available_at <= clock_timestamp()}),
	'0', 'the lock-delay that is over is purged');
is(q_solo(q{SELECT count(*) FROM dlock.outbox}), '0', 'the outbox is delivered');
is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity
		   WHERE backend_type = 'dlock reaper round' AND wait_event = 'SyncRep'}),
	'0',
	'no round waits for the standby');

# The events went out.
my %got;
for (my $i = 0; $i < 50 && keys(%got) < 2; $i++)
{
	my ($o) = $listener->query('SELECT 1');
	$got{$1} = 1 while $o =~ /with payload "\{"event":"(\w+)","resource":"r\d"/g;
	usleep(100_000);
}
ok($got{expired}, 'the listener got the expiry of r1');
ok($got{released}, 'the listener got the release of r4 from the outbox');

$node->safe_psql('postgres',
	"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
ok( $node->poll_query_until(
		'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE wait_event = 'SyncRep'"),
	'once the setting is gone nothing waits any more');
$listener->quit;
$probe->quit;
$node->stop;
done_testing();
