# 021_reaper_faults.pl: reaping never stands in anyone's way, and always
# makes progress.
#
#  1. An uncommitted reap() (BEGIN; SELECT dlock.reap(); left open) does not
#     make an expired lease unavailable: try_lock gets it at once, lock()
#     does not wait.  (0.1: NULL and a timeout.)
#  2. While the reaper works through 20,000 expired leases, and reaps
#     1 ms leases that pgbench clients keep taking again, try_lock calls on
#     expired leases (autocommit, each client on resources of its own, so
#     only a reaper could be in the way) never return NULL.
#     (0.1: 38 of 68,667 did.)
#  3. With a small lock table (max_locks_per_transaction = 10,
#     max_connections = 10, legal settings) 1,500 expired leases are all
#     reaped, by the worker and by reap(), with their events.
#     (0.1: "out of shared memory" every 5 s, nothing reaped.)
#  4. DROP DATABASE of dlock.database works without FORCE; the reaper says
#     once that the database is gone, then waits quietly, and reaps again
#     once it is back.  (0.1: DROP needed FORCE, then a FATAL every 5 s.)
#  5. Rounds that keep failing (a lock they need held past lock_timeout)
#     back off instead of failing every interval.
# Promises: P5

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('reaper_faults');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'app'
dlock.reap_interval = '50ms'
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION dlock');
# A database of its own, where only reap() reaps (the worker is in app).
$node->safe_psql('postgres', 'CREATE DATABASE solo');
$node->safe_psql('solo', 'CREATE EXTENSION dlock');

# expire: n leases of 1 ms on PREFIX/1 .. PREFIX/n, expired on return
# (a few to a transaction: a small lock table holds few locks).
sub expire
{
	my ($db, $prefix, $n, $on) = @_;
	($on // $node)->safe_psql($db, qq{
		DO \$\$ BEGIN
		FOR i IN 1..$n LOOP
			PERFORM dlock.try_lock('$prefix/' || i, 'old', '1ms');
			IF i % 3 = 0 THEN COMMIT; END IF;
		END LOOP; END \$\$;
		SELECT pg_sleep(0.01)});
	return;
}

# ---- 1. An open reap() transaction blocks nobody (database solo). ----
expire('solo', 'open', 3);
my $bg = $node->background_psql('solo', on_error_stop => 0);
$bg->query_safe('BEGIN');
my $reaped = $bg->query_safe('SELECT dlock.reap()');
is($reaped, '3', 'reap() in an open transaction reaped the three expired leases');
expire('solo', 'open2', 2);
isnt($node->safe_psql('solo', q{SELECT dlock.try_lock('open/1', 'new', '1h')}),
	'', 'try_lock of a lease reaped by the open transaction: acquired');
isnt($node->safe_psql('solo', q{SELECT dlock.try_lock('open2/1', 'new', '1h')}),
	'', 'try_lock of a lease expired after it: acquired');
# Timed inside its psql: psql's own start-up (0.5-2 s now and then on a
# loaded machine) is no wait of lock().
my ($t0, $got, $t1) = split /\n/, $node->safe_psql('solo', q{
	SELECT extract(epoch FROM clock_timestamp());
	SELECT dlock.lock('open2/2', 'new', '1h', '5s');
	SELECT extract(epoch FROM clock_timestamp());});
isnt($got, '', 'lock() of an expired lease: acquired');
cmp_ok($t1 - $t0, '<', 2.5, 'lock() did not wait for the open transaction');
$bg->query_safe('COMMIT');
$bg->quit;
is($node->safe_psql('solo',
	q{SELECT string_agg(resource || '=' || holder, ',' ORDER BY resource) FROM dlock.locks}),
	'open/1=new,open2/1=new,open2/2=new', 'the new holders hold; nothing else does');
is($node->safe_psql('solo', q{SELECT dlock.unlock_all('new')}), '3', 'cleanup');

# ---- 2. Acquirers of expired leases while the worker reaps them. ----
# Stop the worker's rounds while the leases are made, so that all 20,000
# are expired and waiting when pgbench and the reaper start together.
my $n = 20000;
$node->safe_psql('postgres', q{ALTER SYSTEM SET dlock.reap_interval = '1h'});
$node->reload;
sleep 1;
expire('app', 'bulk', $n);
is($node->safe_psql('app', q{SELECT count(*) FROM dlock.locks WHERE expired}),
	$n, "$n expired leases wait for the reaper");
$node->safe_psql('app', 'CREATE TABLE misses (resource text, at timestamptz DEFAULT clock_timestamp())');
# Client c (0 or 1) takes bulk leases i with i = c + 1 (mod 2) under a
# holder of its own, and its own hot/c with a 1 ms lease again and again.
my $script = "$PostgreSQL::Test::Utils::tmp_check/take.sql";
PostgreSQL::Test::Utils::append_to_file($script,
	  "\\set i 2 * random(0, " . ($n / 2 - 1) . ") + :client_id + 1\n"
	  . "INSERT INTO misses (resource) SELECT 'bulk/' || :i WHERE dlock.try_lock('bulk/' || :i, 'taker-' || :client_id || '-' || :i, '1h') IS NULL;\n"
	  . "INSERT INTO misses (resource) SELECT 'hot/' || :client_id WHERE dlock.try_lock('hot/' || :client_id, 'hot', '1ms') IS NULL;\n");
$node->safe_psql('postgres', q{ALTER SYSTEM SET dlock.reap_interval = '10ms'});
$node->reload;
my ($stdout, $stderr);
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '2', '-T', '8', '-f', $script, '-h', $node->host,
	  '-p', $node->port, 'app' ],
	'>', \$stdout, '2>', \$stderr);
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 0 FROM dlock.locks WHERE expired AND resource LIKE 'bulk/%'}, 't'),
	'the worker reaped every expired lease');
$pgbench->finish;
my ($tx) = $stdout =~ /number of transactions actually processed: (\d+)/;
diag("pgbench: " . ($tx // 'no count') . " try_lock calls on expired leases during the reap");
cmp_ok($tx // 0, '>', 1000, 'the acquirers ran while the worker reaped');
is($node->safe_psql('app', 'SELECT count(*) FROM misses'), '0',
	'no try_lock on an expired lease returned NULL while it was reaped');
my $taken = $node->safe_psql('app', q{SELECT count(*) FROM dlock.locks WHERE holder LIKE 'taker-%'});
cmp_ok($taken, '>', 0, "$taken leases were taken over by the acquirers");

# Then the hot leases alone, for 4 s, taken every 2 ms: the reaper reaps
# them again and again while their clients take them again.
my $before = $node->safe_psql('app', 'SELECT expired FROM dlock.stats()');
my $hot = "$PostgreSQL::Test::Utils::tmp_check/hot.sql";
PostgreSQL::Test::Utils::append_to_file($hot,
	"INSERT INTO misses (resource) SELECT 'hot/' || :client_id WHERE dlock.try_lock('hot/' || :client_id, 'hot', '1ms') IS NULL;\n"
	  . "\\sleep 2 ms\n");
IPC::Run::run(
	[ 'pgbench', '-n', '-c', '2', '-T', '4', '-f', $hot, '-h', $node->host,
	  '-p', $node->port, 'app' ],
	'>', \$stdout, '2>', \$stderr);
($tx) = $stdout =~ /number of transactions actually processed: (\d+)/;
my $hot_reaped = $node->safe_psql('app', 'SELECT expired FROM dlock.stats()') - $before;
diag("hot: " . ($tx // 'no count') . " try_lock calls, the reaper reaped $hot_reaped of their leases meanwhile");
cmp_ok($hot_reaped, '>=', 10, 'the reaper kept reaping the hot leases');
is($node->safe_psql('app', 'SELECT count(*) FROM misses'), '0',
	'no try_lock on a hot expired lease returned NULL while the reaper was at it');
$node->safe_psql('postgres', q{ALTER SYSTEM SET dlock.reap_interval = '50ms'});
$node->reload;

# ---- 3. A small lock table: 1,500 expired leases, all reaped. ----
my $small = PostgreSQL::Test::Cluster->new('reaper_small');
$small->init;
$small->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.reap_interval = '50ms'
max_locks_per_transaction = 10
max_connections = 10
max_worker_processes = 3
});
$small->start;
$small->safe_psql('postgres', 'CREATE EXTENSION dlock');
$small->safe_psql('postgres', 'CREATE DATABASE solo');
$small->safe_psql('solo', 'CREATE EXTENSION dlock');
expire('postgres', 'small', 1500, $small);
ok( $small->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM dlock.leases WHERE holder IS NOT NULL}),
	'with max_locks_per_transaction = 10 the worker reaps 1,500 leases');
is($small->safe_psql('postgres', 'SELECT expired FROM dlock.stats()'), '1500',
	'1,500 expiries counted (their events sent)');
expire('solo', 'small', 1500, $small);
is($small->safe_psql('solo', 'SELECT dlock.reap()'), '1500',
	'reap() reaps 1,500 leases in one call with the small lock table');
unlike(slurp_file($small->logfile), qr/out of shared memory/,
	'no "out of shared memory" in the log');

# Five sessions calling reap() at once, 20 times each, while the launcher
# runs its rounds too, with max_worker_processes = 3 (the logical
# replication launcher, dlock's launcher and one round): the callers take
# turns, none fails.
my @callers;
for my $c (1 .. 5)
{
	my ($out, $err) = ('', '');
	push @callers, [ IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $small->connstr('solo'),
		  '-c', 'SELECT count(dlock.reap()) FROM generate_series(1, 20)' ],
		'>', \$out, '2>', \$err), \$out, \$err ];
}
my $all_ok = 1;
for my $c (@callers)
{
	$c->[0]->finish;
	$all_ok = 0 unless ${ $c->[1] } =~ /^20$/m;
	diag(${ $c->[2] }) if ${ $c->[2] } ne '';
}
ok($all_ok, 'five concurrent callers of reap() with one worker slot to share: 100 calls, none failed');
$small->stop;

# ---- 4. Dropping dlock.database. ----
my $offset = -s $node->logfile;
my ($rc, $out, $err) = $node->psql('postgres', 'DROP DATABASE app');
is($rc, 0, 'DROP DATABASE of dlock.database works without FORCE') or diag($err);
# A lease that expires (in another database) makes a round due: the
# reaper looks for its database every interval from now on.
expire('solo', 'due', 1);
sleep 2;    # 40 reaper intervals
my $log = slurp_file($node->logfile, $offset);
my @said = $log =~ /dlock reaper: database "app" does not exist/g;
is(scalar(@said), 1, 'the reaper said once that the database is gone');
unlike($log, qr/FATAL/, 'and logged no FATAL');
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION dlock');
expire('app', 'back', 1);
expire('solo', 'due2', 1);
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 0 FROM dlock.leases WHERE holder IS NOT NULL}),
	'once the database is back the reaper reaps there again');
like(slurp_file($node->logfile, $offset), qr/dlock reaper: database "app" exists again/,
	'and said so');

# ---- 5. Rounds that keep failing back off (issue 33, defect 16). ----
# A lock_timeout of 10 ms for the database and a transaction that keeps
# dlock.outbox locked make every round fail where it delivers the outbox.
# Without a backoff one failed every interval (50 ms here) and flooded the
# log.  With it the k-th failure in a row comes no earlier than
# 50 ms x (2^(k-1) - 1) after the first, so a window of W ms holds at most
# 1 + log2(W / 50 + 1) of them (a slow machine only makes fewer).
$node->safe_psql('postgres', q{ALTER DATABASE app SET lock_timeout = '10ms'});
my $blocker = $node->background_psql('app');
$blocker->query_safe('BEGIN; LOCK TABLE dlock.outbox IN ACCESS EXCLUSIVE MODE');
$offset = -s $node->logfile;
$t0 = time;
expire('app', 'fail', 1);
sleep 3;
my $window_ms = (time - $t0) * 1000;
$log = slurp_file($node->logfile, $offset);
my $failed = () = $log =~ /canceling statement due to lock timeout/g;
my $most = 1 + int(log($window_ms / 50 + 1) / log(2));
cmp_ok($failed, '>', 0, 'rounds failed while dlock.outbox was locked');
cmp_ok($failed, '<=', $most,
	sprintf('and backed off: %d failed in %.0f ms (at most %d with the backoff)', $failed, $window_ms, $most));
$blocker->query_safe('ROLLBACK');
$blocker->quit;
$node->safe_psql('postgres', 'ALTER DATABASE app RESET lock_timeout');
expire('app', 'fail2', 1);
ok( $node->poll_query_until('app',
		q{SELECT count(*) = 0 FROM dlock.leases WHERE holder IS NOT NULL}),
	'once the lock is gone rounds reap again');

$node->stop;
done_testing();
