# 080_dump_restore.pl: fences keep increasing across pg_dump and restore
# into another cluster (another system identifier, timeline 1 again).
#
# dlock.leases and dlock.fences are extension configuration
# (pg_extension_config_dump), so a dump carries the holdings and the fence
# sequence, but not dlock.fence_epoch: in the new cluster the first fence
# starts a new epoch (the clock, in the high bits), so every fence is above
# every fence of the old cluster, including those handed out after the
# dump was taken.  test/t/081_fence_epoch.pl covers the other forks.
# Promises: P1

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old = PostgreSQL::Test::Cluster->new('old');
$old->init;
$old->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$old->start;
$old->safe_psql('postgres', 'CREATE EXTENSION dlock');

# Some history: holdings, releases, and a lease still held at dump time.
$old->safe_psql('postgres', q{
	SELECT dlock.try_lock('r' || g, 'h', '1h') FROM generate_series(1, 50) g;
	SELECT dlock.unlock('r' || g, 'h') FROM generate_series(1, 25) g;
});
# A holding of an ordinary role: its owner must come back by name, though
# the role has another OID in the new cluster.
$old->safe_psql('postgres', q{
	CREATE ROLE regress_app;
	SET ROLE regress_app;
	SELECT dlock.try_lock('app', 'app-holder', '1h');
});
# Shared holdings (0.4) and a semaphore's permits (0.5) held at dump time.
$old->safe_psql('postgres', q{
	SELECT dlock.try_lock('sh', 'r1', '1h', shared => true),
	       dlock.try_lock('sh', 'r2', '1h', shared => true),
	       dlock.try_acquire('sem', 'p', 3, permits => 2);
});
my $held_fence = $old->safe_psql('postgres',
	q{SELECT fence FROM dlock.locks WHERE resource = 'r30'});
like($held_fence, qr/^\d+$/, "r30 held with fence $held_fence");

my $dump = $old->basedir . '/dlock.sql';
$old->command_ok([ 'pg_dump', '-d', $old->connstr('postgres'), '-f', $dump ],
	'pg_dump');

# Fences handed out after the dump was taken are lost to the restored copy,
# which must still never repeat or undercut them.
my $max_old = $old->safe_psql('postgres', q{
	SELECT max(f) FROM (SELECT dlock.try_lock('late' || g, 'h', '1h') AS f
	                      FROM generate_series(1, 100) g
	                    UNION ALL SELECT dlock.try_lock('sh', 'late', '1h', shared => true)
	                    UNION ALL SELECT dlock.try_acquire('sem', 'late', 3)) s});
my $old_sysid = $old->safe_psql('postgres',
	'SELECT system_identifier FROM pg_control_system()');
$old->stop;

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$new->start;
isnt($new->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()'),
	$old_sysid, 'the new cluster has another system identifier');
# Roles are not in a database's dump (pg_dumpall -g); create them first, with
# another role before so that regress_app gets another OID.
$new->safe_psql('postgres', 'CREATE ROLE regress_shift; CREATE ROLE regress_app');
$new->command_ok([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-q',
		'-d', $new->connstr('postgres'), '-f', $dump ], 'restore the dump');

is($new->safe_psql('postgres',
		q{SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = 'r30'}),
	"h $held_fence", 'the holding survives the restore with its fence');
is($new->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks}),
	'29', 'the 29 holdings of the dump are there (two shared, one of permits)');
is($new->safe_psql('postgres',
		q{SELECT string_agg(holder || ' ' || mode || ' ' || coalesce(permits, 0), ', ' ORDER BY holder)
		    FROM dlock.locks WHERE resource IN ('sh', 'sem')}),
	'p semaphore 2, r1 shared 0, r2 shared 0', 'the shared holdings and the permits survive');
is($new->safe_psql('postgres', q{SELECT owner FROM dlock.locks WHERE resource = 'app'}),
	'regress_app', 'an ordinary role\'s holding keeps its owner by name');
is($new->safe_psql('postgres',
		q{SET ROLE regress_app; SELECT dlock.renew('app', 'app-holder') IS NOT NULL}),
	't', 'and that role can renew it in the new cluster');

my $first_new = $new->safe_psql('postgres', q{SELECT dlock.try_lock('after', 'h', '1h')});
like($first_new, qr/^\d+$/, "first fence after restore: $first_new");
cmp_ok($first_new, '>', $max_old,
	"above every fence of the old cluster, even those after the dump ($max_old)");
is($new->safe_psql('postgres', 'SELECT (' . $first_new . ' >> 22) > (' . $max_old . ' >> 22)'),
	't', 'the epoch (high bits) moved up');
is($new->safe_psql('postgres', q{SELECT dlock.renew('r30', 'h') IS NOT NULL}),
	't', 'the restored holding can be renewed by its holder');
is($new->safe_psql('postgres', q{SELECT dlock.renew('sh', 'r1') IS NOT NULL
                                   AND dlock.renew('sem', 'p') IS NOT NULL}),
	't', 'so can the shared holding and the permits');
cmp_ok($new->safe_psql('postgres', q{SELECT dlock.try_lock('sh', 'r3', '1h', shared => true)}),
	'>', $max_old, 'a new reader beside the restored ones: a fence above every old one');
cmp_ok($new->safe_psql('postgres', q{SELECT dlock.try_acquire('sem', 'q', 3)}),
	'>', $max_old, 'the last free permit: a fence above every old one');
is($new->safe_psql('postgres', q{SELECT dlock.try_acquire('sem', 'q2', 3)}),
	'', 'no permit is left: the restored ones count');

$new->stop;
done_testing();
