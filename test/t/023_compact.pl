# 023_compact.pl: reaper rounds rewrite a table of dlock that is mostly
# deleted rows' space (compact.c, issue 25).
#
# A holding's row goes at release, but its space stays: after churn over
# many resources dlock.leases and its index keep megabytes for a few rows.
# A round (dlock.reap()'s, or the worker's: when a lease expires, and once a
# minute) rewrites such a table when it is
# over dlock.compact_threshold and more than 4 times what its live rows
# need, if nobody has it open at that moment.  Checked here:
#   1. after churn over 24,000 resources and one dlock.reap(), dlock.leases
#      is small again (a new file), and nothing was logged;
#   2. holdings of every kind survive the rewrite unchanged (fence, lease,
#      count, owner, shared holders, permits, a lock-delay, a client
#      ticket), renew and release afterwards, and later fences are higher;
#   3. a transaction that has the table open (an xact_lock) is not waited
#      for: dlock.reap() returns at once and the table is left as it is,
#      then rewritten once that transaction has ended;
#   4. dlock.compact_threshold = -1 turns it off, a threshold above the
#      table's size leaves it, and so do 10,500 live rows;
#   5. rows the statistics do not count (after a crash, as after a
#      promotion or pg_stat_reset()) are counted before a rewrite: 15,000
#      held rows are not copied;
#   6. nor are 24,000 deleted rows that a snapshot older than them may still
#      see (a rewrite would copy them all and free nothing), until that
#      snapshot is gone;
#   7. a transaction that has the table's TOAST table open (not the table:
#      autovacuum vacuums a TOAST table alone) is not waited for either
#      (VACUUM FULL would lock it after the table, unconditionally);
#   8. 8,000 holdings with 1,000-byte names (rows that need far more than
#      a guess per row) are never copied: the table file stays the same
#      over rounds (issue 33, defect 13);
#   9. a lock() waiting for a held resource does not keep the table from
#      a rewrite: rounds rewrite it while it waits (issue 33, defect 14);
#  10. under acquirers (pgbench, 3 clients taking and releasing resources
#      of their own with 2 ms pauses) while rounds (dlock.reap() in a loop,
#      dlock.compact_threshold = 0) rewrite the table again and again: every try_lock of a free resource succeeds, every unlock
#      finds its holding, and fences keep increasing.
# Promises: P1 P2 P5 P7

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('compact');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '1h'
autovacuum = off
dlock.queue_ttl = '1h'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub filenode { return sql(q{SELECT pg_relation_filenode('dlock.leases')}); }
sub size_kb { return int(sql(q{SELECT pg_total_relation_size('dlock.leases')}) / 1024); }

# churn: take and release n resources named prefix/i, each in its own
# transaction (a procedure that commits), then wait until the statistics
# count the rows as gone again (live <= what is still held).
sql(q{CREATE PROCEDURE churn(prefix text, n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM dlock.try_lock(prefix || '/' || i, 'churner');
        PERFORM dlock.unlock(prefix || '/' || i, 'churner');
        COMMIT;
    END LOOP;
END $$});
sub churn
{
	my ($prefix, $n, $live) = @_;
	sql("CALL churn('$prefix', $n)");
	$node->poll_query_until('postgres',
		qq{SELECT n_live_tup <= $live FROM pg_stat_all_tables WHERE relid = 'dlock.leases'::regclass})
	  or die "statistics never showed $live live rows";
}

# ---- 1. Churn, one reap: small again. ----
churn('c1', 24000, 0);
my ($node1, $kb1) = (filenode(), size_kb());
cmp_ok($kb1, '>', 1024, "after churn over 24,000 resources dlock.leases takes $kb1 kB");
my $log_pos = -s $node->logfile;
sql('SELECT dlock.reap()');
my ($node2, $kb2) = (filenode(), size_kb());
isnt($node2, $node1, 'one dlock.reap() rewrote dlock.leases (a new file)');
cmp_ok($kb2, '<=', 64, "it takes $kb2 kB now");
my $log = slurp_file($node->logfile, $log_pos);
unlike($log, qr/WARNING|ERROR|skipping/, 'the rewrite logged nothing');
is(sql(q{SELECT count(*) FROM dlock.leases}), '0', 'no row was made up');

# ---- 2. Holdings of every kind survive it. ----
sql(q{CREATE ROLE app LOGIN; GRANT USAGE ON SCHEMA dlock TO app;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA dlock TO app; GRANT SELECT ON ALL TABLES IN SCHEMA dlock TO app});
my $snap_sql = q{SELECT string_agg(concat_ws(',', resource, holder, count, fence, expires_at,
	owner::text, mode, permits, available_at, value), E'\n' ORDER BY resource, holder, mode)
	FROM dlock.locks};
$node->safe_psql('postgres', q{
	SELECT dlock.try_lock('keep/' || i, 'holder-' || i, '1h') FROM generate_series(1, 50) i;
	SELECT dlock.try_lock('keep/1', 'holder-1');
	SELECT dlock.try_lock('keep/sh', 'r' || i, '1h', shared => true) FROM generate_series(1, 3) i;
	SELECT dlock.try_acquire('keep/sem', 's' || i, 5, 2, '1h') FROM generate_series(1, 2) i;
	SELECT dlock.campaign('keep/elect', 'leader', 'v1', '1h');
	SELECT dlock.try_lock('keep/delay', 'd', '50ms', lock_delay => '1h');
	SELECT dlock.try_lock('keep/1', 'queued', fair => true);
}, extra_params => [ '-U', 'app' ]);
sleep 1;	# keep/delay's lease ends: a row under lock-delay, once reaped
sql('SELECT dlock.reap()');
my $before = sql($snap_sql);
my $tickets = sql(q{SELECT string_agg(holder, ',') FROM dlock.queue});
my $max_fence = sql(q{SELECT max(fence) FROM dlock.locks});
churn('c2', 24000, 100);
my $node3 = filenode();
sql('SELECT dlock.reap()');
isnt(filenode(), $node3, 'rewritten with holdings of every kind in it');
is(sql($snap_sql), $before, 'every holding is as it was: fence, count, lease, owner, mode, permits, lock-delay, value');
is(sql(q{SELECT string_agg(holder, ',') FROM dlock.queue}), $tickets, 'the client ticket is still queued');
is( $node->safe_psql('postgres', q{
		SELECT count(*) FROM generate_series(1, 50) i
		WHERE dlock.renew('keep/' || i, 'holder-' || i, '2h') IS NULL}, extra_params => [ '-U', 'app' ]),
	'0', 'every lease renews after the rewrite');
is( $node->safe_psql('postgres', q{SELECT dlock.unlock('keep/1', 'holder-1')}, extra_params => [ '-U', 'app' ]),
	'1', 'a re-entered holding is still counted twice');
is(sql(q{SELECT dlock.try_lock('keep/delay', 'other')}), '', 'the lock-delay still holds others off');
my $new_fence = sql(q{SELECT dlock.try_lock('after/1', 'h')});
cmp_ok($new_fence, '>', $max_fence, 'a new fence is above every fence handed out before');
is(sql(q{SELECT dlock.unlock('keep/sh', 'r1')}), '0', 'a shared holding releases');
is(sql(q{SELECT dlock.unlock('keep/sem', 's1')}), '0', "a semaphore holding releases");
is(sql(q{SELECT dlock.unlock('keep/2', 'other')}), '', "another holder's unlock is still refused");
$node->safe_psql('postgres', q{
	SELECT dlock.unlock_all('holder-' || i) FROM generate_series(1, 50) i;
	SELECT dlock.unlock_all(h) FROM unnest(ARRAY['r2', 'r3', 's2', 'leader']) h;
	SELECT dlock.withdraw('keep/1', 'queued');
}, extra_params => [ '-U', 'app' ]);
sql(q{SELECT dlock.unlock_all('h')});
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder IS NOT NULL}), '0', 'all released');

# ---- 3. A transaction that has the table open is not waited for. ----
churn('c3', 24000, 100);
my $open = $node->background_psql('postgres');
$open->query_safe(q{BEGIN; SELECT dlock.xact_lock('open/x')});
my $node4 = filenode();
my ($rc3, $out3, $err3) = $node->psql('postgres', q{SET statement_timeout = '60s'; SELECT dlock.reap()});
is($rc3, 0, 'dlock.reap() returned with the table open in a transaction') or diag($err3);
is(filenode(), $node4, 'and left the table as it was');
$open->query_safe('COMMIT');
$open->quit;
sql('SELECT dlock.reap()');
isnt(filenode(), $node4, 'rewritten by the next round, once the transaction ended');

# ---- 4. The setting, and tables with many live rows. ----
churn('c4', 24000, 100);
my $node5 = filenode();
sql(q{ALTER SYSTEM SET dlock.compact_threshold = -1; SELECT pg_reload_conf()});
sleep 1;
sql('SELECT dlock.reap()');
is(filenode(), $node5, 'dlock.compact_threshold = -1: not rewritten');
sql(q{ALTER SYSTEM SET dlock.compact_threshold = '100MB'; SELECT pg_reload_conf()});
sleep 1;
sql('SELECT dlock.reap()');
is(filenode(), $node5, 'a threshold above the table size: not rewritten');
sql(q{ALTER SYSTEM RESET dlock.compact_threshold; SELECT pg_reload_conf()});
sleep 1;
sql(q{SELECT count(dlock.try_lock('many/' || i, 'm', '1h')) FROM generate_series(1, 10500) i});
churn('c5', 12000, 11000);
my ($node6, $kb6) = (filenode(), size_kb());
cmp_ok($kb6, '>', 1024, "10,500 held and churn over 12,000: $kb6 kB");
sql('SELECT dlock.reap()');
is(filenode(), $node6, 'a table its live rows need: not rewritten');
sql(q{SELECT dlock.unlock_all('m')});
sql('SELECT dlock.reap()');
cmp_ok(size_kb(), '<=', 64, 'once they are released, the next round rewrites it');

# ---- 5. Statistics that count too few live rows. ----
# They start from zero after a crash, a promotion or pg_stat_reset(): a
# table of 15,000 held rows must not be copied (under its ACCESS EXCLUSIVE
# lock, every round) for the statistics' word that it holds none.
sql(q{DO $$ BEGIN FOR b IN 0 .. 14 LOOP
	PERFORM dlock.try_lock('held/' || i, 'h6', '1h') FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i;
	COMMIT; END LOOP; END $$});
$node->poll_query_until('postgres',
	q{SELECT n_live_tup >= 15000 FROM pg_stat_all_tables WHERE relid = 'dlock.leases'::regclass})
  or die 'statistics never showed 15,000 live rows';
$node->stop('immediate');
$node->start;
is(sql(q{SELECT n_live_tup FROM pg_stat_all_tables WHERE relid = 'dlock.leases'::regclass}),
	'0', 'after a crash the statistics count no live row');
my ($node8, $kb8) = (filenode(), size_kb());
cmp_ok($kb8, '>', 1024, "15,000 held: $kb8 kB");
sql('SELECT dlock.reap()');
is(filenode(), $node8, 'after the crash: 15,000 held rows are not copied');
sql(q{DO $$ BEGIN FOR b IN 0 .. 14 LOOP
	PERFORM dlock.unlock('held/' || i, 'h6') FROM generate_series(b * 1000 + 1, b * 1000 + 1000) i;
	COMMIT; END LOOP; END $$});
sql('SELECT dlock.reap()');
cmp_ok(size_kb(), '<=', 64, 'once they are released, the next round rewrites it');

# ---- 6. Deleted rows an older snapshot may still see. ----
# A rewrite copies them all (RECENTLY_DEAD): with a snapshot older than
# 24,000 deleted rows it would copy 24,000 rows, free nothing, and do so
# again every round.
my $old = $node->background_psql('postgres');
$old->query_safe(q{BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class});
churn('c7', 24000, 100);
my ($node9, $kb9) = (filenode(), size_kb());
cmp_ok($kb9, '>', 1024, "churn over 24,000 resources under an old snapshot: $kb9 kB");
sql('SELECT dlock.reap()');
is(filenode(), $node9, 'not rewritten while a snapshot may still see the deleted rows');
$old->query_safe('COMMIT');
$old->quit;
sql('SELECT dlock.reap()');
cmp_ok(size_kb(), '<=', 64, 'once that snapshot is gone, the next round rewrites it');

# ---- 7. A lock on the table's TOAST table alone. ----
# Autovacuum vacuums a TOAST table on its own, with no lock on the table,
# and VACUUM FULL locks the TOAST table (and the indexes) after the table,
# without SKIP_LOCKED's care: a rewrite that waited there would keep every
# acquirer waiting with it.  Here a transaction reads the TOAST table and
# stays open.
churn('c8', 24000, 100);
my $node10 = filenode();
my $toast = sql(q{SELECT reltoastrelid::regclass FROM pg_class WHERE oid = 'dlock.leases'::regclass});
my $reader = $node->background_psql('postgres');
$reader->query_safe("BEGIN; SELECT count(*) FROM $toast");
$log_pos = -s $node->logfile;
my ($rc, $out, $err) = $node->psql('postgres', q{SET statement_timeout = '60s'; SELECT dlock.reap()});
is($rc, 0, 'dlock.reap() returned with the TOAST table open in a transaction') or diag($err);
is(filenode(), $node10, 'and left the table as it was');
is(sql(q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dlock reaper round'}),
	'0', 'no round is left waiting');
unlike(slurp_file($node->logfile, $log_pos), qr/could not compact/,
	'it did not try (a lock timeout would say so in the log)');
($rc, $out, $err) = $node->psql('postgres',
	q{SET lock_timeout = '30s'; SELECT dlock.try_lock('toast/x', 'h') IS NOT NULL});
is($out, 't', 'a try_lock meanwhile is served') or diag($err);
sql(q{SELECT dlock.unlock('toast/x', 'h')});
$reader->query_safe('COMMIT');
$reader->quit;
sql('SELECT dlock.reap()');
cmp_ok(size_kb(), '<=', 64, 'rewritten by the next round, once that transaction ended');

# ---- 8. Long names: rows that need far more than a guess per row. ----
# 31 MD5s a name: 1,000 bytes that do not compress, each in the heap and
# in the primary key.  A rewrite would copy all and free nothing.
sql(q{SELECT count(dlock.try_lock(n, 'long', '1h')) FROM (SELECT i || '/' ||
	(SELECT string_agg(md5(i || '/' || j), '') FROM generate_series(1, 31) j) AS n
	FROM generate_series(1, 8000) i) s});
$node->poll_query_until('postgres',
	q{SELECT n_live_tup >= 8000 FROM pg_stat_all_tables WHERE relid = 'dlock.leases'::regclass})
  or die 'statistics never showed 8,000 live rows';
my ($node11, $kb11) = (filenode(), size_kb());
cmp_ok($kb11, '>', 8192, "8,000 holdings with 1,000-byte names: $kb11 kB");
sql('SELECT dlock.reap()') for 1 .. 3;
is(filenode(), $node11, 'three rounds: the table of long names was not copied');
sql(q{SELECT dlock.unlock_all('long')});
sql('SELECT dlock.reap()');
cmp_ok(size_kb(), '<=', 64, 'once they are released, the next round rewrites it');

# ---- 9. A lock() that waits does not keep the table from a rewrite. ----
# The churn comes first: rows deleted after the waiter's statement began
# are kept for its snapshot, as for any running statement.
churn('c9', 24000, 100);
sql(q{SELECT dlock.try_lock('wait/x', 'holder', '1h')});
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_until(qr/waiting/, q{\echo waiting
SELECT dlock.lock('wait/x', 'waiter', wait => '120s') IS NOT NULL AS got;
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'wait/x'})
  or die 'the lock() never waited';
my $node12 = filenode();
sql('SELECT dlock.reap()');
isnt(filenode(), $node12, 'a round rewrote the table while a lock() waited');
cmp_ok(size_kb(), '<=', 64, 'and it is small again');
is(sql(q{SELECT count(*) FROM dlock.waiters WHERE resource = 'wait/x'}), '1',
	'the lock() still waits');
sql(q{SELECT dlock.unlock('wait/x', 'holder')});
ok($node->poll_query_until('postgres',
		q{SELECT holder = 'waiter' FROM dlock.locks WHERE resource = 'wait/x'}),
	'and gets the lock once it is released');
$waiter->quit;
sql(q{SELECT dlock.unlock_all('waiter')});

# ---- 10. Under acquirers, rounds rewriting again and again. ----
sql(q{ALTER SYSTEM SET dlock.compact_threshold = 0; SELECT pg_reload_conf()});
sql(q{CREATE TABLE misses (what text, at timestamptz DEFAULT clock_timestamp());
	CREATE TABLE fences (client int, fence bigint, at timestamptz DEFAULT clock_timestamp(), id bigserial)});
my $script = "$PostgreSQL::Test::Utils::tmp_check/compact.sql";
PostgreSQL::Test::Utils::append_to_file($script,
	"\\set r random(1, 1000000)\n"
	  . "INSERT INTO fences (client, fence) SELECT :client_id, dlock.try_lock('pb/' || :client_id || '/' || :r, 'c', '30s');\n"
	  . "INSERT INTO misses (what) SELECT 'unlock' WHERE dlock.unlock('pb/' || :client_id || '/' || :r, 'c') IS DISTINCT FROM 0;\n"
	  . "\\sleep 2 ms\n");
my $node7 = filenode();
my ($stdout, $stderr);
my %seen_nodes = ($node7 => 1);
my $pgbench = IPC::Run::start(
	[ 'pgbench', '-n', '-c', '3', '-T', '8', '-f', $script, '-h', $node->host,
	  '-p', $node->port, 'postgres' ],
	'>', \$stdout, '2>', \$stderr);
my $end = time + 8;
while (time < $end)
{
	sql('SELECT dlock.reap()');
	$seen_nodes{ filenode() } = 1;
	select(undef, undef, undef, 0.02);
}
my $pgbench_ok = $pgbench->finish;
my ($tx) = $stdout =~ /number of transactions actually processed: (\d+)/;
my $rewrites = scalar(keys %seen_nodes) - 1;
diag("pgbench: " . ($tx // 'no count') . " pairs, dlock.leases rewritten at least $rewrites times meanwhile");
ok($pgbench_ok, 'pgbench ended without an error') or diag($stderr);
cmp_ok($tx // 0, '>', 300, 'the acquirers ran');
cmp_ok($rewrites, '>=', 3, 'rounds rewrote the table while they ran');
is(sql(q{SELECT count(*) FROM fences WHERE fence IS NULL}), '0',
	'every try_lock of a free resource got its fence');
is(sql(q{SELECT count(*) FROM misses}), '0', 'every unlock found its holding');
is( sql(q{SELECT count(*) FROM (SELECT fence <= lag(fence) OVER (PARTITION BY client ORDER BY id) AS back
		FROM fences) f WHERE back}),
	'0', "each client's fences kept increasing");
is(sql(q{SELECT count(*) FROM dlock.leases WHERE resource LIKE 'pb/%'}), '0', 'nothing left held');

$node->stop;
done_testing();
