# 022_reaper_nowait.pl: neither a reaper round nor try_lock ever waits for
# a row lock of dlock.tickets or dlock.delays (issue 26).
#
#  1. A client re-takes its lapsed fair ticket inside an open transaction:
#     dlock.reap() still returns, a fair try_lock on another resource whose
#     lapsed ticket the purge deleted returns NULL, and that resource's
#     holder renews; the ticket being re-taken is purged by a later round
#     once it lapses again.  (0.2: reap() hung behind the open
#     transaction, the try_lock hung behind reap() holding its resource's
#     lock, and the renew hung behind the try_lock.)
#  2. BEGIN; try_lock(r, h, lock_delay => '1s') left open on a resource
#     whose old lock-delay row is not purged yet: reap() still returns and
#     reaps an expired lease, and the purge leaves the new holding's delay
#     alone.  (0.2: the purge waited for the open transaction.)
#  3. A holder's second fair try_lock while its first one (or its
#     acquisition, which drops its ticket, or its withdraw()) sits in an
#     open transaction returns NULL at once, and the resource's holder
#     renews meanwhile.
#     (0.2: the second attempt waited for the ticket row, holding the
#     resource's lock, and the renew waited behind it.)
#
# The rounds run in database "solo", where only reap() starts them (the
# worker reaps in "postgres"), so nothing purges behind the test's back.
# Every call that used to hang runs with a statement_timeout: it must
# return, with the right result, and the test says so rather than timing
# it.
# Promises: P5 P7

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# statement_timeout of the calls that used to hang: the background ones
# (probes) get longer, so that a call made while a probe hangs times out
# before the probe gives up and lets it through.
my $TIMEOUT = '15s';
my $PROBE_TIMEOUT = '60s';

my $node = PostgreSQL::Test::Cluster->new('reaper_nowait');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
$node->safe_psql('postgres', 'CREATE DATABASE solo');
$node->safe_psql('solo', 'CREATE EXTENSION dlock');

sub q_solo { return $node->safe_psql('solo', $_[0]); }

# start_probe: run sql in a psql of its own in the background (named
# probe-NAME, bounded by statement_timeout); returns a record of it.
sub start_probe
{
	my ($name, $sql) = @_;
	my %p = (name => "probe-$name", out => '', err => '');
	$p{h} = IPC::Run::start(
		[
			$node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('solo')
			  . " application_name=probe-$name options='-c statement_timeout=$PROBE_TIMEOUT'",
			'-c', $sql
		],
		'>', \$p{out}, '2>', \$p{err},
		IPC::Run::timeout(120));
	return \%p;
}

# settle: wait until the probe has ended ('done'), or it waits for a lock
# ('waits'); with $round, or a reaper round in solo does.
sub settle
{
	my ($p, $round) = @_;
	my $who = "application_name = '$p->{name}'";
	$who .= q{ OR backend_type = 'dlock reaper round'} if $round;
	my $until = time + 60;
	while (time < $until)
	{
		$p->{h}->pump_nb if $p->{h}->pumpable;
		return 'done' unless $p->{h}->pumpable;
		return 'waits'
		  if $node->safe_psql('postgres', qq{
			SELECT count(*) > 0 FROM pg_stat_activity
			 WHERE wait_event_type = 'Lock' AND datname = 'solo' AND ($who)})
		  eq 't';
		usleep(20_000);
	}
	return 'neither';
}

# finish: the probe's output once it has ended (stderr appended); one
# still waiting is cancelled.
sub finish
{
	my ($p) = @_;
	$p->{h}->pump_nb if $p->{h}->pumpable;
	$node->safe_psql('postgres',
		"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$p->{name}'")
	  if $p->{h}->pumpable;
	$p->{h}->finish;
	chomp(my $out = $p->{out});
	return $p->{err} eq '' ? $out : "$out / $p->{err}";
}

# bounded: run sql in solo now with the statement_timeout; its output, or
# the error.
sub bounded
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	$node->psql('solo', "SET statement_timeout = '$TIMEOUT'; $sql",
		stdout => \$out, stderr => \$err);
	return $err eq '' ? $out : "ERROR: $err";
}

# ---- 1. A lapsed ticket re-taken in an open transaction. ----
# Two resources with holders and lapsed client tickets; 'a-other''s ticket
# comes first, so a purge that waits deletes it before it gets stuck.
q_solo(q{SELECT dlock.try_lock('a-other', 'holder-b', '1h')});
q_solo(q{SELECT dlock.try_lock('r-open', 'holder-a', '1h')});
q_solo(q{SET dlock.queue_ttl = '100ms';
	SELECT dlock.try_lock('a-other', 'client-b', fair => true);
	SELECT dlock.try_lock('r-open', 'client-a', fair => true)});
ok($node->poll_query_until('solo',
		q{SELECT count(*) = 2 FROM dlock.tickets WHERE expires_at <= clock_timestamp()}),
	'1: two client tickets have lapsed, not purged yet');

my $open = $node->background_psql('solo', on_error_stop => 0);
$open->query_safe('BEGIN');
$open->query_safe(q{SET LOCAL dlock.queue_ttl = '2s'});
is($open->query_safe(q{SELECT dlock.try_lock('r-open', 'client-a', fair => true) IS NULL}),
	't', '1: client-a re-takes its lapsed ticket in an open transaction (busy)');

my $reap = start_probe('reap1', 'SELECT dlock.reap()');
is(settle($reap, 1), 'done', '1: dlock.reap() returns, no reaper round waits');
like(finish($reap), qr/^\d+$/, '1: and returns a count, no error');

my $try = start_probe('try1', q{SET dlock.queue_ttl = '100ms';
	SELECT dlock.try_lock('a-other', 'client-b', fair => true) IS NULL});
is(settle($try), 'done', '1: a fair try_lock on the other resource returns');
is(bounded(q{SELECT dlock.renew('a-other', 'holder-b') IS NOT NULL}), 't',
	"1: the other resource's holder renews");
is(finish($try), 't', '1: the fair try_lock returned NULL (held), no error');

$open->query_safe('COMMIT');
is(q_solo(q{SELECT count(*) FROM dlock.tickets WHERE resource = 'r-open' AND holder = 'client-a'}),
	'1', "1: client-a's re-taken ticket was left alone");
ok($node->poll_query_until('solo',
		q{SELECT count(*) > 0 AND bool_and(expires_at <= clock_timestamp()) FROM dlock.tickets}),
	'1: the tickets lapse again');
like(bounded('SELECT dlock.reap()'), qr/^\d+$/, '1: a later reap() ...');
is(q_solo('SELECT count(*) FROM dlock.tickets'), '0', '1: ... purges them');

# ---- 2. A lock-delay row taken over in an open transaction. ----
q_solo(q{SELECT dlock.try_lock('d-res', 'dh1', '100ms', lock_delay => '3s')});
ok($node->poll_query_until('solo',
		q{SELECT count(*) = 1 FROM dlock.leases WHERE resource = 'd-res' AND expires_at <= clock_timestamp()}),
	'2: the holding with a lock-delay expired');
is(bounded('SELECT dlock.reap()'), '1', '2: reaped (its delay runs on)');
ok($node->poll_query_until('solo',
		q{SELECT available_at <= clock_timestamp() FROM dlock.delays WHERE resource = 'd-res'}),
	'2: the lock-delay is over, its row not purged yet');

$open = $node->background_psql('solo', on_error_stop => 0);
$open->query_safe('BEGIN');
my $f2 = $open->query_safe(q{SELECT dlock.try_lock('d-res', 'dh2', '1h', lock_delay => '1s')});
like($f2, qr/^\d+$/, '2: dh2 takes the resource with a lock-delay in an open transaction');

q_solo(q{SELECT dlock.try_lock('x-exp', 'xh', '1ms')});
ok($node->poll_query_until('solo',
		q{SELECT expires_at <= clock_timestamp() FROM dlock.leases WHERE resource = 'x-exp'}),
	'2: another lease expired');
$reap = start_probe('reap2', 'SELECT dlock.reap()');
is(settle($reap, 1), 'done', '2: dlock.reap() returns, no reaper round waits');
is(finish($reap), '1', '2: and reaped the expired lease, no error');

$open->query_safe('COMMIT');
$open->quit;
is(q_solo(q{SELECT d.fence = l.fence AND d.lock_delay = '1s' AND d.available_at IS NULL
	FROM dlock.delays d JOIN dlock.leases l USING (resource) WHERE resource = 'd-res'}),
	't', "2: the new holding's lock-delay row is intact");
like(bounded('SELECT dlock.reap()'), qr/^\d+$/, '2: a later reap() ...');
is(q_solo(q{SELECT count(*) FROM dlock.delays WHERE resource = 'd-res'}), '1',
	"2: ... leaves it too (it is live)");

# ---- 3. Two fair attempts of one holder at once. ----
q_solo(q{SELECT dlock.try_lock('q-res', 'qh', '1h')});
$open = $node->background_psql('solo', on_error_stop => 0);
$open->query_safe('BEGIN');
is($open->query_safe(q{SELECT dlock.try_lock('q-res', 'qc', fair => true) IS NULL}),
	't', "3: qc's first fair try_lock, busy, in an open transaction");
$try = start_probe('try3', q{SELECT dlock.try_lock('q-res', 'qc', fair => true) IS NULL});
is(settle($try), 'done', "3: qc's second fair try_lock returns");
is(bounded(q{SELECT dlock.renew('q-res', 'qh') IS NOT NULL}), 't', '3: the holder renews');
is(finish($try), 't', '3: the second try_lock returned NULL (held), no error');
$open->query_safe('COMMIT');
is(q_solo(q{SELECT count(*) FROM dlock.tickets WHERE resource = 'q-res'}), '1',
	'3: qc has one ticket, from its first attempt');

# 3b. The first attempt acquires (dropping its ticket) in an open
# transaction; the second, contended, must not wait for the dropped row.
# q2c queues in the psql that took q2h's lease: a psql of its own, slow to
# start on a loaded machine, came after the lease and took it at once.
my (undef, $q2c) = split /\n/, q_solo(q{SELECT dlock.try_lock('q2-res', 'q2h', '1s');
	SELECT dlock.try_lock('q2-res', 'q2c', fair => true) IS NULL});
is($q2c, 't', "3b: q2c queues behind q2h's lease");
ok($node->poll_query_until('solo',
		q{SELECT expires_at <= clock_timestamp() FROM dlock.leases WHERE resource = 'q2-res'}),
	"3b: q2h's lease ran out");
$open->query_safe('BEGIN');
like($open->query_safe(q{SELECT dlock.try_lock('q2-res', 'q2c', '1h', fair => true)}),
	qr/^\d+$/, '3b: q2c, at the head of the queue, acquires in an open transaction');
$try = start_probe('try3b', q{SELECT dlock.try_lock('q2-res', 'q2c', fair => true) IS NULL});
is(settle($try), 'done', "3b: q2c's second fair try_lock returns");
is(finish($try), 't', '3b: with NULL (the resource is being changed), no error');
$open->query_safe('COMMIT');
$open->quit;
is(q_solo(q{SELECT holder FROM dlock.locks WHERE resource = 'q2-res'}), 'q2c',
	'3b: q2c holds the resource');
is(q_solo(q{SELECT count(*) FROM dlock.tickets WHERE resource = 'q2-res'}), '0',
	'3b: and has no ticket left');

# 3c. withdraw (0.3) of the holder's ticket sits in an open transaction;
# the holder's fair attempt on another connection must not wait for it.
q_solo(q{SELECT dlock.try_lock('q3-res', 'q3h', '1h')});
q_solo(q{SELECT dlock.try_lock('q3-res', 'q3c', fair => true)});
$open = $node->background_psql('solo', on_error_stop => 0);
$open->query_safe('BEGIN');
is($open->query_safe(q{SELECT dlock.withdraw('q3-res', 'q3c')}), 't',
	'3c: qc withdraws its ticket in an open transaction');
$try = start_probe('try3c', q{SELECT dlock.try_lock('q3-res', 'q3c', fair => true) IS NULL});
is(settle($try), 'done', "3c: q3c's fair try_lock on another connection returns");
is(bounded(q{SELECT dlock.renew('q3-res', 'q3h') IS NOT NULL}), 't', '3c: the holder renews');
is(finish($try), 't', '3c: the try_lock returned NULL (held), no error');
$open->query_safe('COMMIT');
$open->quit;
is(q_solo(q{SELECT count(*) FROM dlock.tickets WHERE resource = 'q3-res'}), '0',
	'3c: the withdrawal stands');

$node->stop;
done_testing();
