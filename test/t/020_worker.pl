# 020_worker.pl: the background reaper ("dlock reaper").
#
# With shared_preload_libraries = 'dlock' the worker runs in dlock.database,
# removes expired leases and sends their "expired" events; it comes back
# after a crash restart caused by its own kill -9; and dlock.reap_interval
# is reloaded on SIGHUP.
# Promises: P5 P13

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('worker');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
# Cluster.pm turns this off; the kill -9 test needs the crash restart.
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# The launcher connects to no database; its rounds run in dlock.database.
my $worker_sql = q{SELECT pid FROM pg_stat_activity
	WHERE backend_type = 'dlock reaper' AND datname IS NULL};

# reaped_sql: is resource free (no holding left in dlock.leases)?
sub reaped_sql
{
	my ($resource) = @_;
	return "SELECT count(*) = 0 FROM dlock.leases"
	  . " WHERE resource = '$resource' AND holder IS NOT NULL";
}

# take_until_reaped: in one psql, take resource for lease, then wait (up
# to a minute) until it is reaped.  Returns whether it was, and the
# seconds from the take to then by the server's clock: a loaded machine's
# psql start-up (0.5-2 s now and then) is not in them, as it was when a
# take and poll_query_until's rounds were timed from here.
sub take_until_reaped
{
	my ($resource, $lease) = @_;
	my ($t0, $fence, $t1, $reaped) = split /\n/, $node->safe_psql('postgres', qq{
		SELECT extract(epoch FROM clock_timestamp());
		SELECT dlock.try_lock('$resource', 'short-holder', '$lease');
		DO \$\$ BEGIN
			FOR i IN 1 .. 1200 LOOP
				EXIT WHEN NOT EXISTS (SELECT FROM dlock.leases
					WHERE resource = '$resource' AND holder IS NOT NULL);
				PERFORM pg_sleep(0.05);
			END LOOP;
		END \$\$;
		SELECT extract(epoch FROM clock_timestamp());
	} . reaped_sql($resource));
	like($fence, qr/^\d+$/, "took a $lease lease of $resource");
	return ($reaped eq 't', $t1 - $t0);
}

# 1. The worker is there, connected to no database.
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($worker_sql) w"),
	'dlock reaper is running, connected to no database');
my $worker_pid = $node->safe_psql('postgres', $worker_sql);
like($worker_pid, qr/^\d+$/, "worker pid $worker_pid");

# 2. It reaps an expired lease, and a LISTENing session gets the event.
my $channel = $node->safe_psql('postgres', q{SELECT dlock.channel('reap-me')});
my $listener = $node->background_psql('postgres');
$listener->query_safe(qq{LISTEN "$channel"});

my $fence = $node->safe_psql('postgres',
	q{SELECT dlock.try_lock('reap-me', 'short-holder', '200ms')});
like($fence, qr/^\d+$/, "took a 200ms lease, fence $fence");
ok($node->poll_query_until('postgres', reaped_sql('reap-me')),
	'the worker reaped the expired lease');
is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks WHERE resource = 'reap-me'}),
	'0', 'dlock.locks no longer lists it');

# psql prints notifications it has received after each command it runs.
my $note = '';
for (my $i = 0; $i < 100 && $note !~ /Asynchronous notification/; $i++)
{
	$note .= $listener->query_safe('SELECT 1');
	usleep(50_000) if $note !~ /Asynchronous notification/;
}
like(
	$note,
	qr/Asynchronous notification "\Q$channel\E" with payload "\{"event":"expired","resource":"reap-me","fence":$fence\}" received/,
	'the listener received the "expired" event with the lease\'s fence');
$listener->quit;

# 3. kill -9 of the worker: the postmaster crash-restarts and the worker
# comes back (a new process) and goes on reaping.
my $log_offset = -s $node->logfile;
kill 'KILL', $worker_pid;
$node->wait_for_log(qr/all server processes terminated; reinitializing/,
	$log_offset);
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) = 1 FROM ($worker_sql) w WHERE pid <> $worker_pid"),
	'the worker is back after the crash restart');
$node->safe_psql('postgres',
	q{SELECT dlock.try_lock('after-crash', 'short-holder', '200ms')});
ok($node->poll_query_until('postgres', reaped_sql('after-crash')),
	'the restarted worker reaps');

# 4. SIGHUP: dlock.reap_interval is reloaded.  Start from a long interval
# (set in the file and applied by a restart, so that no reload has woken
# the worker early): an expired lease stays put.
$node->append_conf('postgresql.conf', q{dlock.reap_interval = '1h'});
$node->restart;
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($worker_sql) w"),
	'worker running with dlock.reap_interval = 1h');
$node->safe_psql('postgres',
	q{SELECT dlock.try_lock('slow', 'short-holder', '100ms')});
ok( $node->poll_query_until(
		'postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'slow'}),
	'the lease has expired');
# Ten times the old interval passes: with one hour between rounds the worker
# must not touch it (and nothing else reaps in this test).
my $still = 1;
for (1 .. 10)
{
	usleep(100_000);
	$still &&= $node->safe_psql('postgres', reaped_sql('slow')) eq 'f';
}
ok($still, 'with dlock.reap_interval = 1h the expired lease is not reaped');

# Now shorten it by ALTER SYSTEM and reload.  The reload itself wakes the
# worker once; a second lease taken afterwards shows the new interval.
$node->safe_psql('postgres',
	q{ALTER SYSTEM SET dlock.reap_interval = '100ms'; SELECT pg_reload_conf()});
ok($node->poll_query_until('postgres', reaped_sql('slow')),
	'after the reload the expired lease is reaped');
my ($reaped, $took) = take_until_reaped('fast', '100ms');
ok($reaped, 'a later lease is reaped too');
diag(sprintf('lease of 100ms reaped %.2fs after it was taken', $took));
cmp_ok($took, '<', 10, 'reaped within seconds: the 100ms interval is in force');

# The worker skips its scan until the earliest known expiry (the hint in
# waiters.c), falling back to a full scan a minute.  With only a long lease
# held the hint is an hour away; a short lease committed afterwards must
# lower it, or this lease would wait for the minute's full scan.
$node->safe_psql('postgres', q{SELECT dlock.try_lock('long', 'long-holder', '1h')});
ok($node->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM dlock.locks WHERE expired}),
	'only the long lease is held');
($reaped, $took) = take_until_reaped('short2', '300ms');
ok($reaped, 'a short lease taken after a long one is reaped');
diag(sprintf('short lease after a long one reaped %.2fs after it was taken', $took));
cmp_ok($took, '<', 30, 'without waiting for the once-a-minute full scan');
is($node->safe_psql('postgres', reaped_sql('long')), 'f', 'the long lease is untouched');

is($node->safe_psql('postgres', 'SELECT expired FROM dlock.stats()') >= 2 ? 'yes' : 'no',
	'yes', 'dlock.stats() counts the expiries');

$node->stop;
done_testing();
