# 042_prepared_events.pl: releases in transactions that are prepared
# (two-phase commit, XA), and dlock's events.
#
# A prepared transaction may not NOTIFY; dlock used to NOTIFY at the time
# of the change, so PREPARE TRANSACTION after an unlock failed with 0A000.
# Now the events wait in the transaction and go out at commit, or, when it
# is prepared, wait in dlock.outbox for COMMIT PREPARED and are delivered by
# the next reaper round (dlock.reap() here; the worker is kept idle with a
# long dlock.reap_interval, and then the worker).  Checked: exactly one event after COMMIT
# PREPARED and a round, none before; none after ROLLBACK PREPARED, which
# leaves the holding; none for an unlock in a savepoint rolled back; break
# and expiry use the same queue; a prepared acquisition works as before;
# under the 0.1 SQL (no dlock.outbox) PREPARE after a release fails with a
# clear 0A000 until ALTER EXTENSION dlock UPDATE.  With
# default_transaction_read_only = on in the database, rounds still deliver
# (issue 33, defect 16).
# Promises: P12 P13

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('twophase');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '1h'
max_prepared_transactions = 4
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $listener = $node->background_psql('postgres', timeout => 300);
my %received;    # channel => [payloads]

# collect: read what the listener has received so far.
sub collect
{
	my $out = $listener->query_safe('SELECT 1');
	while ($out =~ /Asynchronous notification "([^"]+)" with payload "(.*)" received/g)
	{
		push @{ $received{$1} }, $2;
	}
}

# events_of: the payloads received on resource's channel, after waiting up
# to ten seconds for want of them or one second otherwise.
sub events_of
{
	my ($resource, $want) = @_;
	my $channel = $node->safe_psql('postgres', "SELECT dlock.channel('$resource')");
	for (my $i = 0; $i < 100; $i++)
	{
		collect();
		last if $want && scalar(@{ $received{$channel} // [] }) >= $want;
		last if !$want && $i >= 10;
		usleep(100_000);
	}
	# And a moment later, anything that came after.
	usleep(300_000);
	collect();
	return @{ $received{$channel} // [] };
}

sub listen_to
{
	my ($resource) = @_;
	my $channel = $node->safe_psql('postgres', "SELECT dlock.channel('$resource')");
	$listener->query_safe(qq{LISTEN "$channel"});
}

sub outbox_rows
{
	return $node->safe_psql('postgres', 'SELECT count(*) FROM dlock.outbox');
}

# 1. unlock, PREPARE, COMMIT PREPARED: one event, after a round.
listen_to($_) for qw(r1 r2 r3 r4 r5 r6 r7);
my $f1 = $node->safe_psql('postgres', q{SELECT dlock.try_lock('r1', 'h', '1h')});
my ($ret, $out, $err) = $node->psql(
	'postgres', q{
BEGIN;
SELECT dlock.unlock('r1', 'h');
PREPARE TRANSACTION 'x';
});
is($ret, 0, 'PREPARE TRANSACTION after unlock succeeds') or diag($err);
is(scalar(events_of('r1')), 0, 'prepared: no event yet');
is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'r1'}),
	'h', 'prepared: the holding is still there');
is($node->safe_psql('postgres', 'SELECT dlock.reap()'), '0', 'a round while it is prepared');
is(scalar(events_of('r1')), 0, 'prepared: still no event after a round');
$node->safe_psql('postgres', q{COMMIT PREPARED 'x'});
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks WHERE resource = 'r1'}),
	'0', 'committed: the holding is gone');
$node->safe_psql('postgres', 'SELECT dlock.reap()');
is_deeply([ events_of('r1', 1) ],
	[qq({"event":"released","resource":"r1","fence":$f1})],
	'committed: after a round the listener got the released event');
$node->safe_psql('postgres', 'SELECT dlock.reap()');
is(scalar(events_of('r1')), 1, 'committed: exactly once, whatever rounds follow');
is(outbox_rows(), '0', 'the outbox is empty');

# 2. ROLLBACK PREPARED: the holding stays, no event.
$node->safe_psql('postgres', q{SELECT dlock.try_lock('r2', 'h', '1h')});
$node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dlock.unlock('r2', 'h');
PREPARE TRANSACTION 'y';
});
$node->safe_psql('postgres', q{ROLLBACK PREPARED 'y'});
$node->safe_psql('postgres', 'SELECT dlock.reap()');
is(scalar(events_of('r2')), 0, 'rolled back: no event');
is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'r2'}),
	'h', 'rolled back: the holding is still there');
is(outbox_rows(), '0', 'rolled back: nothing left in the outbox');

# 3. An unlock in a savepoint rolled back sends nothing, prepared or not;
# one in a savepoint released does.
$node->safe_psql('postgres', q{SELECT dlock.try_lock('r3', 'h', '1h')});
$node->safe_psql(
	'postgres', q{
BEGIN;
SAVEPOINT s;
SELECT dlock.unlock('r3', 'h');
ROLLBACK TO SAVEPOINT s;
COMMIT;
});
is(scalar(events_of('r3')), 0, 'savepoint rolled back: no event');
is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'r3'}),
	'h', 'savepoint rolled back: the holding is still there');
$node->safe_psql(
	'postgres', q{
BEGIN;
SAVEPOINT s;
SELECT dlock.unlock('r3', 'h');
ROLLBACK TO SAVEPOINT s;
PREPARE TRANSACTION 'z';
});
$node->safe_psql('postgres', q{COMMIT PREPARED 'z'});
$node->safe_psql('postgres', 'SELECT dlock.reap()');
is(scalar(events_of('r3')), 0, 'savepoint rolled back, then prepared: no event');
my $f3 = $node->safe_psql('postgres', q{SELECT fence FROM dlock.locks WHERE resource = 'r3'});
$node->safe_psql(
	'postgres', q{
BEGIN;
SAVEPOINT s;
SELECT dlock.unlock('r3', 'h');
RELEASE SAVEPOINT s;
COMMIT;
});
is_deeply([ events_of('r3', 1) ],
	[qq({"event":"released","resource":"r3","fence":$f3})],
	'savepoint released, then committed: one event');

# 4. break_lock, prepared: "broken" through the outbox.
my $f4 = $node->safe_psql('postgres', q{SELECT dlock.try_lock('r4', 'h', '1h')});
$node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dlock.break_lock('r4');
PREPARE TRANSACTION 'b';
});
is(scalar(events_of('r4')), 0, 'break_lock prepared: no event yet');
$node->safe_psql('postgres', q{COMMIT PREPARED 'b'});
$node->safe_psql('postgres', 'SELECT dlock.reap()');
is_deeply([ events_of('r4', 1) ],
	[qq({"event":"broken","resource":"r4","fence":$f4})],
	'break_lock prepared and committed: one broken event after a round');

# 5. Expiry: the round's own commit sends "expired".
my $f5 = $node->safe_psql('postgres', q{SELECT dlock.try_lock('r5', 'h', '100ms')});
usleep(300_000);
is($node->safe_psql('postgres', 'SELECT dlock.reap()'), '1', 'the short lease is reaped');
is_deeply([ events_of('r5', 1) ],
	[qq({"event":"expired","resource":"r5","fence":$f5})],
	'expiry: one expired event');

# 6. A prepared acquisition works as it did.
$node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dlock.try_lock('r6', 'h', '1h');
PREPARE TRANSACTION 'a';
});
is($node->safe_psql('postgres', q{SELECT dlock.try_lock('r6', 'other', '1h') IS NULL}),
	't', 'prepared acquisition: others are kept out');
$node->safe_psql('postgres', q{COMMIT PREPARED 'a'});
is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'r6'}),
	'h', 'prepared acquisition: held once committed');

# 7. A waiter gets a resource released by a prepared transaction.
$node->safe_psql('postgres', q{SELECT dlock.try_lock('r7', 'h', '1h')});
my $waiter = $node->background_psql('postgres', timeout => 300);
$waiter->query_until(qr/waiting/,
	"\\echo waiting\nSELECT dlock.lock('r7', 'w', '1h', '120s') IS NOT NULL;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'r7'}),
	'a waiter waits for r7');
$node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dlock.unlock('r7', 'h');
PREPARE TRANSACTION 'w';
COMMIT PREPARED 'w';
SELECT dlock.reap();
});
my $t0 = time;
is($waiter->query_until(qr/\n/, ''), "t\n", 'the waiter acquired r7');
cmp_ok(time - $t0, '<', 60, 'well before its wait ran out');
$waiter->quit;
is(scalar(events_of('r7', 1)), 1, 'r7: one released event');

# 8. The new library under the 0.1 SQL: PREPARE after a release is refused
# with 0A000 and a hint to update; a prepared acquisition still works.
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', q{CREATE EXTENSION dlock VERSION '0.1'});
$node->safe_psql('old', q{SELECT dlock.try_lock('o1', 'h', '1h')});
($ret, $out, $err) = $node->psql(
	'old', q{
\set VERBOSITY verbose
BEGIN;
SELECT dlock.unlock('o1', 'h');
PREPARE TRANSACTION 'old';
});
like($err, qr/ERROR:\s+0A000: .*ALTER EXTENSION dlock UPDATE/,
	'0.1 SQL: PREPARE after unlock fails with 0A000 naming ALTER EXTENSION dlock UPDATE');
is($node->safe_psql('old', q{SELECT holder FROM dlock.locks WHERE resource = 'o1'}),
	'h', '0.1 SQL: the holding is still there');
is($node->safe_psql('old', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
	'0.1 SQL: nothing was prepared');
$node->safe_psql(
	'old', q{
BEGIN;
SELECT dlock.try_lock('o2', 'h', '1h');
PREPARE TRANSACTION 'old2';
COMMIT PREPARED 'old2';
});
is($node->safe_psql('old', q{SELECT holder FROM dlock.locks WHERE resource = 'o2'}),
	'h', '0.1 SQL: a prepared acquisition works');
$node->safe_psql('old', 'ALTER EXTENSION dlock UPDATE');
($ret, $out, $err) = $node->psql(
	'old', q{
BEGIN;
SELECT dlock.unlock('o1', 'h');
PREPARE TRANSACTION 'old3';
COMMIT PREPARED 'old3';
});
is($ret, 0, 'after ALTER EXTENSION dlock UPDATE the prepared release works') or diag($err);
is($node->safe_psql('old', 'SELECT dlock.reap()') . '/'
	  . $node->safe_psql('old', 'SELECT count(*) FROM dlock.outbox'),
	'0/0', 'and its event leaves the outbox with the next round');

# 9. The worker delivers by itself, within a few of its intervals, though
# nothing in the session of COMMIT PREPARED calls dlock.
$node->append_conf('postgresql.conf', q{dlock.reap_interval = '200ms'});
$node->reload;
my $f8 = $node->safe_psql('postgres', q{SELECT dlock.try_lock('r8', 'h', '1h')});
listen_to('r8');
$node->safe_psql(
	'postgres', q{
BEGIN;
SELECT dlock.unlock('r8', 'h');
PREPARE TRANSACTION 'bg';
});
usleep(1_000_000);    # several rounds while it is prepared
$node->safe_psql('postgres', q{COMMIT PREPARED 'bg'});
is_deeply([ events_of('r8', 1) ],
	[qq({"event":"released","resource":"r8","fence":$f8})],
	'the background worker delivered the event of COMMIT PREPARED');
is(outbox_rows(), '0', 'and emptied the outbox');

# Users cannot touch the outbox.
$node->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
($ret, $out, $err) = $node->psql('postgres', q{INSERT INTO dlock.outbox VALUES ('c', 'p', 0, now())},
	extra_params => [ '-U', 'mallory' ]);
like($err, qr/permission denied/, 'users cannot write dlock.outbox');

# 10. default_transaction_read_only = on in the reaper's database (issue
# 33, defect 16): the rounds still write (they set their transactions
# read-write), so the event of a prepared release leaves the outbox, and
# dlock.reap() works in a session whose transactions are read-only.  The
# test's own writes run as a role that sets it off for itself.
$node->safe_psql('postgres', q{CREATE ROLE rw LOGIN SUPERUSER;
	ALTER ROLE rw SET default_transaction_read_only = off;
	ALTER DATABASE postgres SET default_transaction_read_only = on});
my @rw = (extra_params => [ '-U', 'rw' ]);
is($node->safe_psql('postgres', 'SHOW default_transaction_read_only'), 'on',
	'new sessions of the database are read-only');
my $log_pos = -s $node->logfile;
my $f10 = $node->safe_psql('postgres', q{SELECT dlock.try_lock('r10', 'h', '1h')}, @rw);
listen_to('r10');
$node->safe_psql('postgres', q{
BEGIN;
SELECT dlock.unlock('r10', 'h');
PREPARE TRANSACTION 'ro';
}, @rw);
$node->safe_psql('postgres', q{COMMIT PREPARED 'ro'}, @rw);
is_deeply([ events_of('r10', 1) ],
	[qq({"event":"released","resource":"r10","fence":$f10})],
	'read-only database: the worker delivered the event of COMMIT PREPARED');
is(outbox_rows(), '0', 'read-only database: and emptied the outbox');
($ret, $out, $err) = $node->psql('postgres', 'SELECT dlock.reap()');
is($ret, 0, 'read-only database: dlock.reap() in a read-only session works') or diag($err);
unlike(slurp_file($node->logfile, $log_pos), qr/read-only transaction|ended before finishing/,
	'read-only database: no round failed');
$node->safe_psql('postgres', q{ALTER DATABASE postgres RESET default_transaction_read_only}, @rw);

$listener->quit;
$node->stop;
done_testing();
