# 011_hot_churn.pl: the hot paths write dlock.leases in place.
#
# rows.c changes a lease row with heap_update and never changes an indexed
# column, so every update of an existing row is HOT: under churn (acquire,
# re-enter, renew, release, contention, expiry and reaping, from several
# clients) the table's updates are all HOT and its primary key does not
# grow.  A holding's row goes when the holding ends (0.5, issue 25), so
# the churn also inserts; the table never holds more than a row a
# resource.  The churned table still dumps and restores: the holdings come back
# as they were, and the next fence is above every restored one.
# Promises: P1

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('hot');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock, pg_stat_statements'
pg_stat_statements.track = 'all'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
$node->safe_psql('postgres', 'CREATE ROLE regress_churn LOGIN');

# The first acquisitions insert the rows (and the releases delete them).
$node->safe_psql('postgres', q{
	SELECT dlock.try_lock('churn/' || g, 'seed', '1s') FROM generate_series(1, 20) g;
	SELECT dlock.unlock('churn/' || g, 'seed') FROM generate_series(1, 20) g;
});
# That session's statistics are flushed when it exits.
$node->poll_query_until('postgres', q{
	SELECT n_tup_ins = 20 FROM pg_stat_user_tables WHERE relid = 'dlock.leases'::regclass})
  or die 'statistics of the first acquisitions never arrived';

# No SQL on the hot paths: with pg_stat_statements tracking nested
# statements, a takeover, a re-entry, a renewal and two unlocks of an
# existing row record no statement of their own (the SPI statements they
# ran before 0.2 were "UPDATE dlock.leases ..." and "SELECT holder, owner,
# ... FROM dlock.leases").  unlock_all, which still scans by SPI, shows that
# nested statements are recorded at all.
$node->safe_psql('postgres', 'CREATE EXTENSION pg_stat_statements');
$node->safe_psql('postgres', 'SELECT pg_stat_statements_reset()');
$node->safe_psql('postgres', q{
	SELECT dlock.try_lock('churn/1', 'p', '10s');
	SELECT dlock.try_lock('churn/1', 'p', '10s');
	SELECT dlock.renew('churn/1', 'p', '20s');
	SELECT dlock.unlock('churn/1', 'p');
	SELECT dlock.unlock('churn/1', 'p');
	SELECT dlock.unlock_all('nobody');
});
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_statements
	 WHERE NOT toplevel AND (query ILIKE 'UPDATE dlock.leases%' OR query ILIKE 'INSERT INTO dlock.leases%'
	       OR query ILIKE 'SELECT holder, owner%')}),
	'0', 'the hot paths ran no SQL statement on dlock.leases');
cmp_ok($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_stat_statements WHERE NOT toplevel AND query ILIKE '%FROM dlock.leases%'}),
	'>', 0, 'while nested statements are recorded (unlock_all scans by SPI)');
is($node->safe_psql('postgres', q{
	SELECT sum(calls) FROM pg_stat_statements WHERE toplevel AND query ILIKE 'SELECT dlock.%'}),
	'6', 'the six calls themselves were recorded');

sub stats
{
	return split /\|/, $node->safe_psql('postgres', q{
		SELECT n_tup_upd, n_tup_hot_upd, n_tup_ins,
		       pg_relation_size('dlock.leases_pkey'), pg_relation_size('dlock.leases')
		  FROM pg_stat_user_tables WHERE relid = 'dlock.leases'::regclass});
}

# Each transaction of the script is one of the hot paths on one of the 20
# resources; some leases are 10 ms long, so that they expire and are taken
# over or reaped while the others churn.
my $script = $node->basedir . '/churn.sql';
open my $fh, '>', $script or die;
print $fh q{
\set r random(1, 20)
\set h random(1, 4)
\set ms random(10, 2000)
SELECT dlock.try_lock('churn/' || :r, 'h' || :h, (:ms || ' ms')::interval);
SELECT dlock.try_lock('churn/' || :r, 'h' || :h, '2s');
SELECT dlock.renew('churn/' || :r, 'h' || :h, '1s');
SELECT dlock.unlock('churn/' || :r, 'h' || :h);
SELECT dlock.try_lock('churn/' || :r, 'h' || :h, '10ms', fair => true);
SELECT dlock.unlock('churn/' || :r, 'h' || :h);
};
close $fh;

# churn: run the script from $clients clients, $n transactions each; the
# table's statistics before and after.
sub churn
{
	my ($clients, $n) = @_;
	my ($upd0, $hot0, $ins0, $idx0, $heap0) = stats();
	$node->command_ok(
		[ 'pgbench', '-n', '-c', $clients, '-t', $n, '-f', $script,
		  '-d', $node->connstr('postgres') . ' user=regress_churn' ],
		"$clients clients churn 20 resources (" . $clients * $n . ' transactions)');
	$node->safe_psql('postgres', 'SELECT dlock.reap()');
	# The clients' statistics are flushed as they exit; wait for them.
	$node->poll_query_until('postgres', qq{
		SELECT n_tup_upd >= $upd0 + $clients * $n FROM pg_stat_user_tables
		 WHERE relid = 'dlock.leases'::regclass})
	  or die 'statistics of the churn never arrived';
	my ($upd1, $hot1, $ins1, $idx1, $heap1) = stats();
	diag("churn, $clients clients: " . ($upd1 - $upd0) . ' updates, '
		  . ($hot1 - $hot0) . " HOT; pkey $idx0 -> $idx1 bytes, heap $heap0 -> $heap1 bytes");
	cmp_ok($upd1 - $upd0, '>=', $clients * $n, 'the churn updated the rows');
	# A holding's row goes when it ends (released or reaped, issue 25) and
	# the next acquisition inserts it again; held ones are updated in place.
	diag("churn, $clients clients: " . ($ins1 - $ins0) . ' inserts');
	cmp_ok($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.leases WHERE resource LIKE 'churn/%'}),
		'<=', 20, 'the table holds at most one row per resource');
	is($idx1, $idx0, 'the primary key did not grow');
	return ($upd1 - $upd0, $hot1 - $hot0);
}

# One client: each old version is dead to the client by its next update,
# so pruning makes room on the page, unless another backend's snapshot
# still sees it: the reaper's (every 100 ms) does now and then on a loaded
# machine (CI: 4 of 1582 updates moved to another page).  An update that
# changed an indexed column would make all of them non-HOT.
my ($updates, $hot) = churn(1, 1000);
cmp_ok($hot, '>=', 0.99 * $updates, 'one client: at least 99% of the updates were HOT');

# Four clients: a page can fill with versions still visible to a
# concurrent snapshot, and PostgreSQL then moves the row to another page
# (not HOT).  That is rare; an update that changed an indexed column would
# make all of them non-HOT.
($updates, $hot) = churn(4, 500);
cmp_ok($hot, '>=', 0.98 * $updates, 'four clients: at least 98% of the updates were HOT');

# A dump of the churned table restores.
$node->safe_psql('postgres', q{
	SELECT dlock.try_lock('keep/' || g, 'keeper', '1h') FROM generate_series(1, 5) g});
my $before = $node->safe_psql('postgres', q{
	SELECT string_agg(resource || ' ' || holder || ' ' || fence || ' ' || count, ',' ORDER BY resource)
	  FROM dlock.locks WHERE resource LIKE 'keep/%'});
my $dump = $node->basedir . '/churned.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ],
	'pg_dump of the churned database');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ],
	'pg_restore into another database');
is($node->safe_psql('restored', q{
	SELECT string_agg(resource || ' ' || holder || ' ' || fence || ' ' || count, ',' ORDER BY resource)
	  FROM dlock.locks WHERE resource LIKE 'keep/%'}),
	$before, 'the holdings come back with their holders, fences and counts');
is($node->safe_psql('restored', q{SELECT dlock.try_lock('keep/1', 'other')}), '',
	'a restored holding is held');
my $next = $node->safe_psql('restored', q{SELECT dlock.try_lock('fresh', 'h')});
my $max = $node->safe_psql('restored', q{SELECT max(fence) FROM dlock.leases});
is($next, $max, 'a new holding in the restored database gets the largest fence');
cmp_ok($node->safe_psql('restored', q{SELECT count(*) FROM dlock.leases WHERE fence >= } . $next),
	'==', 1, 'above every restored fence');
is($node->safe_psql('restored', q{SELECT dlock.unlock('fresh', 'h')}), '0',
	'and is released in place');

$node->stop;
done_testing();
