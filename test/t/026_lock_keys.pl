# 026_lock_keys.pl: the locks the C extension takes in shared namespaces
# are out of other roles' reach (issue 33, "close the class").
#
#   1. While every kind of holding and wait is in progress (holdings,
#      shared ones, a transaction-scoped lock, a pin, waiters in lock(), a
#      fair lock(), acquire(), campaign() and lock_all(), a reap round),
#      every advisory lock in pg_locks is of dlock's own classes: its
#      objsubid is neither 1 nor 2, the two that pg_advisory_lock and its
#      kin take, so no SQL function can take one of them.
#   2. A role with no rights on dlock holds every key seen there in both
#      forms SQL takes (one bigint, two integers), in session and
#      transaction scope, and holds dlock.locks open in a transaction
#      (ACCESS SHARE on dlock's tables through the view).  Meanwhile the
#      calls that never wait answer at once, the waits end by their own
#      limits, and reap() returns: every call runs under statement_timeout,
#      so a wait for that role would show as 57014.
# Promises: P5

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lockkeys');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
});
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION dlock');
sql('CREATE ROLE mallory LOGIN');

# ---- 1. every kind in progress ----
my $f = sql(q{SELECT dlock.try_lock('k/p', 'hp', '1h')});
sql(q{SELECT dlock.try_acquire('k/sem', 'full', 1, 1, '1h'), dlock.campaign('k/el', 'leader', 'v', '1h', '0')});
my $s1 = $node->background_psql('postgres');
$s1->query_safe(qq{BEGIN; SELECT dlock.try_lock('k/a', 'h1', '1h'); SELECT dlock.xact_lock('k/x');
	SELECT dlock.try_lock('k/s', 'h1', '1h', shared => true); SELECT dlock.assert_fence('k/p', $f);
	SELECT dlock.try_lock('k/f', 'h1', '1h', fair => true)});
my @waits = (
	q{SELECT dlock.lock('k/a', 'h2', '1h', fair => true)},
	q{SELECT dlock.lock('k/x', 'h3', '1h')},
	q{SELECT dlock.acquire('k/sem', 'h4', 1, 1, '1h')},
	q{SELECT dlock.campaign('k/el', 'h5', 'w', '1h')},
	q{SELECT dlock.lock_all(ARRAY['k/m', 'k/a'], 'h6', '1h')},
	q{SELECT dlock.lock('k/s', 'h7', '1h')},
);
my @w;
for my $q (@waits)
{
	my $b = $node->background_psql('postgres', on_error_stop => 0);
	$b->query_until(qr/started/, "\\echo started\n$q;\n");
	push @w, $b;
}
ok($node->poll_query_until('postgres', 'SELECT count(*) >= ' . scalar(@waits) . ' FROM dlock.waiters'),
	'every waiter waits');
my $reap = $node->background_psql('postgres');
$reap->query_safe('SELECT dlock.reap()');
my @keys = split /\n/, sql(q{SELECT DISTINCT coalesce(classid, 0) || '|' || coalesce(objid, 0) || '|' || objsubid
	FROM pg_locks WHERE locktype = 'advisory' ORDER BY 1});
diag(scalar(@keys) . ' advisory locks of dlock in pg_locks');
cmp_ok(scalar(@keys), '>', 5, 'dlock took advisory locks');
is(join(',', grep { (split /\|/)[2] =~ /^[12]$/ } @keys), '',
	'none is of a class that pg_advisory_lock and its kin take (objsubid 1 or 2)');

# ---- 2. another role holds every key that looks the same ----
my $m = $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
my $taken = 0;
my $sql = 'BEGIN;';
for my $k (@keys)
{
	my ($classid, $objid) = split /\|/, $k;
	my $int8 = "((${classid}::bigint << 32) | ${objid}::bigint)";
	my ($i1, $i2) = map { "(CASE WHEN $_ >= 2147483648 THEN $_ - 4294967296 ELSE $_ END)::int" } ($classid, $objid);
	$sql .= "SELECT pg_try_advisory_lock($int8), pg_try_advisory_lock($i1, $i2),"
	  . " pg_try_advisory_xact_lock_shared($int8), pg_try_advisory_xact_lock_shared($i1, $i2);";
}
$sql .= 'SELECT count(*) FROM dlock.locks;';
my $out = $m->query_safe($sql);
$taken = () = $out =~ /\bt\b/g;
cmp_ok($taken, '>=', 4 * scalar(@keys), 'the other role holds every key in both forms');

# The waiters of part 1 go (cancelled); the holder's transaction ends.
sql(q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE state = 'active'
	AND pid <> pg_backend_pid() AND query LIKE 'SELECT dlock.%'});
$_->quit for @w;
$s1->query_safe('COMMIT');
$reap->quit;
my $guard = q{SET statement_timeout = '30s'; };
my @calls = (
	[ q{SELECT dlock.try_lock('k/n1', 'n', '1h') IS NOT NULL}, 't', 'try_lock of a free resource' ],
	[ q{SELECT dlock.lock('k/n2', 'n', '1h', wait => '1s') IS NOT NULL}, 't', 'lock of a free resource' ],
	[ q{SELECT dlock.try_lock('k/a', 'n') IS NULL}, 't', 'try_lock of a held resource' ],
	[ q{SELECT dlock.lock('k/a', 'n', wait => '100ms') IS NULL}, 't', 'lock of a held resource, 100 ms' ],
	[ q{SELECT dlock.lock('k/a', 'n', wait => '100ms', fair => true) IS NULL}, 't', 'fair lock of a held resource, 100 ms' ],
	[ q{SELECT dlock.try_lock('k/n3', 'n', fair => true) IS NOT NULL}, 't', 'fair try_lock of a free resource' ],
	[ q{SELECT dlock.try_acquire('k/n4', 'n', 2, 1) IS NOT NULL}, 't', 'try_acquire' ],
	[ q{SELECT dlock.acquire('k/sem', 'n', 1, 1, wait => '100ms') IS NULL}, 't', 'acquire of a full semaphore, 100 ms' ],
	[ q{SELECT dlock.campaign('k/n5', 'n', 'v', wait => '0') IS NOT NULL}, 't', 'campaign' ],
	[ q{SELECT dlock.lock_all(ARRAY['k/n6', 'k/n7'], 'n', wait => '1s') IS NOT NULL}, 't', 'lock_all' ],
	[ q{BEGIN; SELECT dlock.xact_lock('k/n8') IS NOT NULL; COMMIT}, 't', 'xact_lock' ],
	[ q{SELECT dlock.renew('k/n1', 'n') IS NOT NULL}, 't', 'renew' ],
	[ qq{BEGIN; SELECT 't' FROM (SELECT dlock.assert_fence('k/p', $f)) a; COMMIT}, 't', 'assert_fence' ],
	[ q{SELECT dlock.unlock('k/n1', 'n')}, '0', 'unlock' ],
	[ q{SELECT dlock.reap() >= 0}, 't', 'reap' ],
	[ q{SELECT dlock.unlock_all('n') > 0}, 't', 'unlock_all' ],
);
for my $c (@calls)
{
	my ($ret, $o, $e) = $node->psql('postgres', $guard . $c->[0]);
	is($o, $c->[1], "with another role holding every key: $c->[2] answers in time") or diag($e);
}
$m->quit;
$node->stop;
done_testing();
