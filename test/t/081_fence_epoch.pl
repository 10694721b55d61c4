# 081_fence_epoch.pl: fences never repeat when the data is forked or
# rewound (issue 8, defects 3 to 5).
#
# Each case hands out fences, loses some of them to the copy that goes on
# (a dump restored into another database of the same cluster; a database
# made again from a copy of itself under its old OID; a dump
# restored into a cluster whose lagging asynchronous standby is promoted;
# DROP + CREATE EXTENSION; point-in-time recovery, twice from one backup),
# and checks that the copy's next fences are above every fence noted.  A
# crash restart and a sequence whose epoch is ahead of the clock (a clock
# stepped back) keep increasing too, and the new library runs under the
# 0.1 SQL and keeps increasing across ALTER EXTENSION dlock UPDATE.
# Promises: P1 P17

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = "shared_preload_libraries = 'dlock'\n";

# Fences are above 2^53: compare them as integers (<=>), never as doubles
# (List::Util's min and max do).
sub max { (sort { $b <=> $a } @_)[0] }
sub min { (sort { $a <=> $b } @_)[0] }

# fences: n new holders (acquire, then release) on node/db; their fences.
my $round = 0;
sub fences
{
	my ($node, $db, $n) = @_;
	my $p = 'r' . $round++ . '/';
	my @f = split /\n/, $node->safe_psql($db, qq{
SELECT dlock.try_lock('$p' || i, 'h', '1h') FROM generate_series(1, $n) i;
SELECT count(dlock.unlock('$p' || i, 'h')) FROM generate_series(1, $n) i;
});
	pop @f;
	is(scalar(grep { /^\d+$/ } @f), $n, "$n fences drawn on " . $node->name . "/$db");
	return @f;
}

sub restore
{
	my ($node, $db, $dump) = @_;
	$node->command_ok([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-q',
			'-d', $node->connstr($db), '-f', $dump ], "restore into " . $node->name . "/$db");
}

my $a = PostgreSQL::Test::Cluster->new('a');
$a->init(allows_streaming => 1, has_archiving => 1);
$a->append_conf('postgresql.conf', $conf);
$a->start;
$a->safe_psql('postgres', 'CREATE DATABASE app');
$a->safe_psql('app', 'CREATE EXTENSION dlock');

# 1. Defect 3: a dump restored into another database of the same cluster.
my @seen = fences($a, 'app', 10);
my $dump = $a->basedir . '/app.sql';
$a->command_ok([ 'pg_dump', '-d', $a->connstr('app'), '-f', $dump ], 'pg_dump app');
push @seen, fences($a, 'app', 3);    # lost to the dump
$a->safe_psql('postgres', 'CREATE DATABASE app2');
restore($a, 'app2', $dump);
cmp_ok(min(fences($a, 'app2', 3)), '>', max(@seen),
	'same cluster, restored database: next fences above every fence of app');

# 1b. A data-only dump restored into the very database it came from, in the
# same server run (the restore's COPY into dlock.leases fails on its
# duplicate keys; nothing else of it may set the fences back).
my $data = $a->basedir . '/app-data.sql';
$a->command_ok([ 'pg_dump', '-a', '-d', $a->connstr('app'), '-f', $data ], 'pg_dump -a app');
push @seen, fences($a, 'app', 3);    # after the dump
IPC::Run::run([ 'psql', '-X', '-q', '-d', $a->connstr('app'), '-f', $data ],
	'>', \my $rout, '2>', \my $rerr);
cmp_ok(min(fences($a, 'app', 3)), '>', max(@seen),
	'data-only restore into the same database: next fences above every earlier one');

# 1c. A database dropped and made again from an earlier copy of itself,
# under its old OID, in the same server run: the copy keeps the sequence,
# the epoch row and all the row records (system identifier, database OID,
# timeline, postmaster start); its pg_database row is new (helper-81:
# fences repeated).
$a->safe_psql('postgres', 'CREATE DATABASE cp');
$a->safe_psql('cp', 'CREATE EXTENSION dlock');
my @cp_seen = fences($a, 'cp', 3);
my $cp_oid = $a->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'cp'");
$a->safe_psql('postgres', 'CREATE DATABASE cp_snap TEMPLATE cp');
push @cp_seen, fences($a, 'cp', 3);    # after the copy
$a->safe_psql('postgres', 'DROP DATABASE cp');
$a->safe_psql('postgres', "CREATE DATABASE cp TEMPLATE cp_snap OID $cp_oid");
cmp_ok(min(fences($a, 'cp', 3)), '>', max(@cp_seen),
	'database made again from a copy under its old OID: next fences above every earlier one');

# 1d. The same, with the new pg_database row frozen before the first fence
# (VACUUM FREEZE): its xmin no longer compares as newer than the epoch
# row's.  1.2 records the row's xmin with the epoch and compares it.
$a->safe_psql('postgres', 'DROP DATABASE cp_snap');
@cp_seen = fences($a, 'cp', 3);
$cp_oid = $a->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = 'cp'");
$a->safe_psql('postgres', 'CREATE DATABASE cp_snap TEMPLATE cp');
push @cp_seen, fences($a, 'cp', 3);    # after the copy
$a->safe_psql('postgres', 'DROP DATABASE cp');
$a->safe_psql('postgres', "CREATE DATABASE cp TEMPLATE cp_snap OID $cp_oid");
$a->safe_psql('postgres', 'VACUUM (FREEZE) pg_catalog.pg_database');
$a->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS pageinspect');
is($a->safe_psql('postgres', q{
WITH t AS (SELECT ctid::text::point AS p FROM pg_catalog.pg_database WHERE datname = 'cp')
SELECT (h.t_infomask & 768 = 768)::text    -- HEAP_XMIN_FROZEN
  FROM t, heap_page_items(get_raw_page('pg_database', t.p[0]::int)) h
 WHERE h.lp = t.p[1]::int}), 'true', "cp's new pg_database row is frozen");
cmp_ok(min(fences($a, 'cp', 3)), '>', max(@cp_seen),
	'... made again from a copy, its row frozen before the first fence: next fences above every earlier one');

# 2. Defect 5: DROP EXTENSION + CREATE EXTENSION.
push @seen, fences($a, 'app', 3);
$a->safe_psql('app', 'DROP EXTENSION dlock; CREATE EXTENSION dlock');
my @recreated = fences($a, 'app', 3);
cmp_ok(min(@recreated), '>', max(@seen), 're-created extension: next fences above every earlier one');
push @seen, @recreated;

# 3. Crash restart, and an epoch ahead of the clock (a clock stepped back):
# a fence of a rolled-back transaction and the sequence set ahead by a year
# both stay below the fences after the restart.
my $rolled = $a->safe_psql('app', q{BEGIN; SELECT dlock.try_lock('rb', 'h', '1h'); ROLLBACK;});
like($rolled, qr/^\d+$/, 'a fence drawn in a rolled-back transaction');
push @seen, $rolled;
$a->stop('immediate');
$a->start;
my @after_crash = fences($a, 'app', 3);
cmp_ok(min(@after_crash), '>', max(@seen), 'crash restart: next fences above every earlier one');
push @seen, @after_crash;
$a->safe_psql('postgres', 'CREATE DATABASE clk');
$a->safe_psql('clk', 'CREATE EXTENSION dlock');
my $ahead = $a->safe_psql('clk', q{
	SELECT setval('dlock.fences', ((extract(epoch FROM now() + interval '1 year' - '2020-01-01 UTC')
	                              * 1000)::bigint << 22) + 5)});
$a->restart;
cmp_ok(min(fences($a, 'clk', 3)), '>', $ahead, 'a new epoch starts above a sequence ahead of the clock');

# 4. Defect 4: a dump restored into cluster B, whose asynchronous standby S
# lags behind (stops replaying) while B hands out its first fences; S is
# promoted and must not repeat them.
my $b = PostgreSQL::Test::Cluster->new('b');
$b->init(allows_streaming => 1);
$b->append_conf('postgresql.conf', $conf);
$b->start;
$b->safe_psql('postgres', 'CREATE DATABASE app');
restore($b, 'app', $dump);
$b->backup('bk');
my $s = PostgreSQL::Test::Cluster->new('s');
$s->init_from_backup($b, 'bk', has_streaming => 1);
$s->start;
$b->wait_for_catchup($s);
$s->safe_psql('postgres', 'SELECT pg_wal_replay_pause()');
$s->stop;    # S lags: it never sees what B does now
my @b_fences = fences($b, 'app', 20);
$b->stop('immediate');
$s->start;
$s->promote;
ok($s->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), 'S promoted');
is($s->safe_psql('app', q{SELECT count(*) FROM dlock.leases WHERE resource LIKE 'r' || } . ($round - 1) . q{ || '/%'}),
	'0', 'S never saw B\'s fences');
cmp_ok(min(fences($s, 'app', 3)), '>', max(@b_fences),
	'restore + failover: the promoted standby\'s fences are above every fence of B');

# 5. Defect 5, PITR: recover a base backup to a restore point before the last
# fences, twice (the first recovered server archives nowhere, so the
# second one picks the same new timeline).
$a->backup('pitr');
push @seen, fences($a, 'app', 5);
$a->safe_psql('postgres', q{SELECT pg_create_restore_point('rp')});
my @lost = fences($a, 'app', 5);
push @seen, @lost;
my $seg = $a->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_lsn())');
$a->safe_psql('postgres', 'SELECT pg_switch_wal()');
ok($a->poll_query_until('postgres',
		"SELECT last_archived_wal >= '$seg' FROM pg_stat_archiver"), 'WAL archived');
$a->stop;

sub recover
{
	my ($name) = @_;
	my $r = PostgreSQL::Test::Cluster->new($name);
	$r->init_from_backup($a, 'pitr', has_restoring => 1);
	$r->append_conf('postgresql.conf', q{
archive_mode = off
recovery_target_name = 'rp'
recovery_target_action = 'promote'
});
	$r->start;
	ok($r->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()'), "$name recovered to rp");
	is($r->safe_psql('app', "SELECT count(*) FROM dlock.leases WHERE fence >= " . min(@lost)),
		'0', "$name does not know the fences after rp");
	return $r;
}
my $r1 = recover('r1');
my @r1_fences = fences($r1, 'app', 5);
cmp_ok(min(@r1_fences), '>', max(@seen), 'PITR: next fences above every fence before and after rp');
push @seen, @r1_fences;
my $tli1 = $r1->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()');
$r1->stop;
my $r2 = recover('r2');
is($r2->safe_psql('postgres', 'SELECT timeline_id FROM pg_control_checkpoint()'), $tli1,
	'the second recovery runs on the same timeline as the first');
cmp_ok(min(fences($r2, 'app', 5)), '>', max(@seen),
	'PITR again from the same backup: above the first recovery\'s fences too');

# 6. The new library under the 0.1 SQL, then ALTER EXTENSION dlock UPDATE.
$r2->safe_psql('postgres', 'CREATE DATABASE walk');
$r2->safe_psql('walk', "CREATE EXTENSION dlock VERSION '0.1'");
my @old = fences($r2, 'walk', 5);
cmp_ok(max(@old), '<', 2**48, '0.1 SQL: the 0.1 scheme\'s fences (epoch << 44 | n)');
$r2->safe_psql('walk', 'ALTER EXTENSION dlock UPDATE');
my @upd = fences($r2, 'walk', 5);
cmp_ok(min(@upd), '>', max(@old), 'after ALTER EXTENSION dlock UPDATE fences keep increasing');
cmp_ok(min(@upd) >> 59, '>=', 1, 'and come from the clock scheme (above 2^59)');
$r2->stop;

done_testing();
