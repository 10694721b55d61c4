# 027_wait_table_locks.pl: what a waiter keeps of dlock's tables while it
# sleeps (issue 33, defect 14, reviewed): every waiting call (lock() of
# either kind, xact_lock, lock_all over many resources, acquire, campaign)
# holds no read lock of a table of dlock or its indexes that it took itself
# (a refused attempt reads dlock.tickets by SQL; lock_all opens the tables
# once a resource); a lock the transaction held before it called stays
# held; DROP and CREATE EXTENSION during a wait never hand out a fence
# that an earlier one passes.
# Promises: P1 P5

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('wait_locks');
$node->init;
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = 'dlock'
dlock.reap_interval = '1h'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', shift) }

# asleep: the background session's pid once it sleeps in a wait of dlock
# (on its latch, or polling) for resource.
sub asleep
{
	my ($resource) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM dlock.waiters w JOIN pg_stat_activity a USING (pid)
		 WHERE w.resource = '$resource' AND a.wait_event_type = 'Extension'})
	  or die "nobody sleeps waiting for $resource";
	return sql(qq{SELECT pid FROM dlock.waiters WHERE resource = '$resource'});
}

# table_locks: the read locks that pid holds on relations of schema dlock
# (a fair waiter's ticket draws from dlock.ticket_seq: a write).
sub table_locks
{
	my ($pid) = @_;
	return sql(qq{SELECT coalesce(string_agg(c.relname || ':' || l.mode, ',' ORDER BY 1), '')
		FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE l.pid = $pid AND l.granted AND c.relnamespace = 'dlock'::regnamespace
		  AND l.mode = 'AccessShareLock'});
}

my $w = $node->background_psql('postgres', on_error_stop => 0);

# ---- 1. lock(), exclusive and shared. ----
sql(q{SELECT dlock.try_lock('one', 'holder', '1h')});
$w->query_until(qr/go/, "\\echo go\nSELECT dlock.lock('one', 'w', '1h', wait => '300s') IS NOT NULL;\n");
my $pid = asleep('one');
is(table_locks($pid), '', 'a lock() asleep holds no lock of dlock\'s tables');
sql(q{SELECT dlock.unlock('one', 'holder')});
$node->poll_query_until('postgres', q{SELECT holder = 'w' FROM dlock.locks WHERE resource = 'one'})
  or die 'the waiter never got one';
sql(q{SELECT dlock.unlock_all('w')});

sql(q{SELECT dlock.try_lock('two', 'holder', '1h')});
$w->query_until(qr/go/,
	"\\echo go\nSELECT dlock.lock('two', 'w', '1h', wait => '300s', shared => true) IS NOT NULL;\n");
$pid = asleep('two');
is(table_locks($pid), '', 'a shared lock() asleep holds none either');
sql(q{SELECT dlock.unlock('two', 'holder')});
$node->poll_query_until('postgres', q{SELECT holder = 'w' FROM dlock.locks WHERE resource = 'two'})
  or die 'the waiter never got two';
sql(q{SELECT dlock.unlock_all('w')});

sql(q{SELECT dlock.try_lock('xl', 'holder', '1h')});
$w->query_until(qr/go/, "\\echo go\nBEGIN; SELECT dlock.xact_lock('xl', '300s') IS NOT NULL;\n");
$pid = asleep('xl');
is(table_locks($pid), '', 'an xact_lock() asleep holds none either');
sql(q{SELECT dlock.unlock('xl', 'holder')});
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock.waiters WHERE resource = 'xl'})
  or die 'the waiter never got xl';
$w->query_safe('COMMIT');

# ---- 2. lock_all over many resources: the last one is in its way. ----
sql(q{SELECT dlock.try_lock('many/60', 'holder', '1h')});
$w->query_until(qr/go/, "\\echo go\nSELECT array_length(dlock.lock_all(
	ARRAY(SELECT 'many/' || i FROM generate_series(1, 60) i), 'w', '1h', wait => '300s'), 1);\n");
$pid = asleep('many/60');
is(table_locks($pid), '', 'a lock_all over 60 resources asleep holds none either');
sql(q{SELECT dlock.unlock('many/60', 'holder')});
$node->poll_query_until('postgres', q{SELECT count(*) = 60 FROM dlock.locks WHERE holder = 'w'})
  or die 'the waiter never got them';
sql(q{SELECT dlock.unlock_all('w')});

# ---- 3. A transaction that read the table before keeps its lock. ----
sql(q{SELECT dlock.try_lock('three', 'holder', '1h')});
$w->query_until(qr/go/, "\\echo go\nBEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM dlock.leases;
SELECT dlock.lock('three', 'w', '1h', wait => '300s') IS NOT NULL;\n");
$pid = asleep('three');
my $locks = table_locks($pid);
like($locks, qr/(^|,)leases:AccessShareLock/,
	'a transaction that read dlock.leases before its lock() keeps that lock');
unlike($locks, qr/tickets/, '... and keeps none that only its attempts took');
sql(q{SELECT dlock.unlock('three', 'holder')});
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock.waiters WHERE resource = 'three'})
  or die 'the waiter never got three';
$w->query_safe('COMMIT');
is(sql(q{SELECT holder FROM dlock.locks WHERE resource = 'three'}), 'w', 'it got three');
sql(q{SELECT dlock.unlock_all('w')});

# ---- 3b. acquire() and campaign(). ----
sql(q{SELECT dlock.try_acquire('sem', 'holder', 1, 1, '1h')});
$w->query_until(qr/go/, "\\echo go\nSELECT dlock.acquire('sem', 'w', 1, 1, '1h', wait => '300s') IS NOT NULL;\n");
$pid = asleep('sem');
is(table_locks($pid), '', 'an acquire() asleep holds none');
sql(q{SELECT dlock.unlock('sem', 'holder')});
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock.waiters WHERE resource = 'sem'})
  or die 'the waiter never got sem';
sql(q{SELECT dlock.unlock_all('w')});

sql(q{SELECT dlock.campaign('elect', 'leader', 'v', '1h')});
$w->query_until(qr/go/, "\\echo go\nSELECT dlock.campaign('elect', 'w', 'v2', '1h', wait => '300s') IS NOT NULL;\n");
$pid = asleep('elect');
is(table_locks($pid), '', 'a campaign() asleep holds none');
sql(q{SELECT dlock.resign('elect', 'leader')});
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock.waiters WHERE resource = 'elect'})
  or die 'the candidate was never elected';
sql(q{SELECT dlock.unlock_all('w')});

# ---- 3c. A campaign that returns without waiting (the leader's own)
# leaves nothing noted for a later wait of its transaction. ----
sql(q{SELECT dlock.campaign('elect2', 'leader', 'v', '1h')});
sql(q{SELECT dlock.try_lock('five', 'holder', '1h')});
$w->query_until(qr/go/, "\\echo go\nBEGIN;
SELECT dlock.campaign('elect2', 'leader', 'v', '1h', wait => '300s') IS NOT NULL;
SELECT count(*) FROM dlock.tickets;
SELECT dlock.lock('five', 'w', '1h', wait => '300s') IS NOT NULL;\n");
$pid = asleep('five');
like(table_locks($pid), qr/(^|,)tickets:AccessShareLock/,
	'after the leader\'s campaign, a read of its transaction keeps its lock through a wait');
sql(q{SELECT dlock.unlock('five', 'holder')});
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM dlock.waiters WHERE resource = 'five'})
  or die 'the waiter never got five';
$w->query_safe('COMMIT');
sql(q{SELECT dlock.unlock_all('w'); SELECT dlock.unlock_all('leader')});

# ---- 4. DROP and CREATE EXTENSION while a lock() waits: in one
# transaction, so the waiter never wakes to find no tables (4b does).
my $before = sql(q{SELECT dlock.try_lock('four', 'holder', '1h')});
$w->query_until(qr/go/, "\\echo go\nSELECT dlock.lock('four', 'w', '1h', wait => '300s') AS f4;\n");
$pid = asleep('four');
sql(q{BEGIN; DROP EXTENSION dlock; CREATE EXTENSION dlock; COMMIT});
# A release of the resource in the new tables wakes it.
sql(q{SELECT dlock.try_lock('four', 'x', '1h'); SELECT dlock.unlock('four', 'x')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.locks WHERE resource = 'four' AND holder = 'w'}),
	'the waiter takes the resource in the re-created extension');
cmp_ok(sql(q{SELECT fence FROM dlock.locks WHERE resource = 'four'}), '>', $before,
	'with a fence above the one handed out before the re-creation');
$w->quit;

# ---- 4b. DROP and CREATE EXTENSION in two transactions, the waiter woken
# between them (a reload sets every backend's latch; under load the
# invalidations of the DROP can do the same): it ends with 55000, having
# taken nothing, and a new attempt in the re-created extension gets the
# resource.  (4 ran the two statements apart until stop 52, and failed
# once in CI under load: its waiter never took the resource.  A wake in
# the gap does exactly that.)
$before = sql(q{SELECT max(fence) FROM dlock.locks});
sql(q{SELECT dlock.try_lock('fourb', 'holder', '1h')});
$w = $node->background_psql('postgres', on_error_stop => 0);
$w->query_until(qr/go/, "\\echo go\nSELECT dlock.lock('fourb', 'w', '1h', wait => '300s') AS f4b;\n");
$pid = asleep('fourb');
sql(q{DROP EXTENSION dlock});
sql(q{SELECT pg_reload_conf()});
ok($node->poll_query_until('postgres', qq{SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $pid}),
	'a waiter woken while dlock is not installed ends its wait');
is($w->query('SELECT 1'), '1', 'its session still answers');
like($w->{stderr}, qr/ERROR:  table dlock.leases does not exist/, 'its lock() failed: dlock is not installed');
sql(q{CREATE EXTENSION dlock});
cmp_ok(sql(q{SELECT dlock.try_lock('fourb', 'w', '1h')}), '>', $before,
	'a new attempt takes fourb, with a fence above those before');
$w->quit;

done_testing();
