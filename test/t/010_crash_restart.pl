# 010_crash_restart.pl: acknowledged acquisitions and fences survive a crash.
#
# Promises 1 and 3 of the contract: an acquisition or renewal that returned in
# its own transaction is durable even under synchronous_commit = off (set for
# the session or for the role), and fences never repeat or go backwards
# across a crash, even though the fence sequence WAL-logs values ahead of the
# ones it hands out.  An acquisition in a transaction that never committed
# leaves nothing behind.  The crash is "pg_ctl stop -m immediate" with a long
# wal_writer_delay, so anything not explicitly flushed is really lost.
# Promises: P1 P3 P12

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Crash;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
# Nothing but the backends themselves writes WAL while the walwriter is
# frozen (see crash() below): no bgwriter writes, which would flush WAL.
bgwriter_lru_maxpages = 0
});
$node->start;

# crash: kill -9 the frozen walwriter (DlockTest::Crash), so that the
# server goes down with its WAL buffers, and start it again.
sub crash
{
	crash_with($node, shift);
	$node->start;
}

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;
CREATE ROLE async_role LOGIN;
ALTER ROLE async_role SET synchronous_commit = off;
});

# Advance the fence sequence across several of its WAL-logged batches (it
# logs 32 values ahead) so that its prefetch matters at restart.
my $warm = $node->safe_psql(
	'postgres', q{
SELECT count(dlock.try_lock('warm' || i, 'w', '1h')) FROM generate_series(1, 100) i;
SELECT count(dlock.unlock('warm' || i, 'w')) FROM generate_series(1, 100) i;
});
is($warm, "100\n100", 'warm-up: 100 acquisitions and releases');

# Every fence handed out before the crash, to compare with the first after it.
my @all_fences = split /\n/,
  $node->safe_psql('postgres',
	q{SELECT fence FROM dlock.leases WHERE fence IS NOT NULL ORDER BY fence});

# Locks held across the crash: resource => [holder, fence].
my %held;

# Session with synchronous_commit = off: every call is its own transaction.
my @f = split /\n/, $node->safe_psql(
	'postgres', q{
SET synchronous_commit = off;
SELECT dlock.try_lock('sess1', 'sess-holder', '1h');
SELECT dlock.try_lock('sess2', 'sess-holder', '1h');
SELECT dlock.lock('sess3', 'sess-holder', '1h', '1s');
});
$held{sess1} = [ 'sess-holder', $f[0] ];
$held{sess2} = [ 'sess-holder', $f[1] ];
$held{sess3} = [ 'sess-holder', $f[2] ];

# Role whose default is synchronous_commit = off.
my $role_sc = $node->safe_psql('postgres', 'SHOW synchronous_commit',
	extra_params => [ '-U', 'async_role' ]);
is($role_sc, 'off', 'async_role runs with synchronous_commit = off');
@f = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT dlock.try_lock('role1', 'role-holder', '1h');
SELECT dlock.try_lock('role2', 'role-holder', '1h');
},
	extra_params => [ '-U', 'async_role' ]);
$held{role1} = [ 'role-holder', $f[0] ];
$held{role2} = [ 'role-holder', $f[1] ];

# Ordinary synchronous session, with a re-entry (count 2).
@f = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT dlock.try_lock('sync1', 'sync-holder', '1h');
SELECT dlock.try_lock('sync1', 'sync-holder', '1h');
});
is($f[0], $f[1], 're-entry keeps the fence');
$held{sync1} = [ 'sync-holder', $f[0] ];

# The last acknowledged acquisitions and a renewal go through an async
# session with the walwriter frozen, just before the crash, so nothing but
# dlock's forced flush can keep them.
my $walwriter = freeze_wal_writer($node);
@f = split /\n/, $node->safe_psql(
	'postgres', q{
SET synchronous_commit = off;
SELECT dlock.try_lock('last' || i, 'last-holder', '1h') FROM generate_series(1, 5) i;
SELECT dlock.renew('sess1', 'sess-holder', '2h')::text;
});
my $renewed = pop @f;
$held{"last$_"} = [ 'last-holder', $f[ $_ - 1 ] ] for 1 .. 5;

push @all_fences, map { $_->[1] } values %held;
my ($max_before) = sort { $b <=> $a } @all_fences;
ok($max_before > 0, "highest fence before the crash: $max_before");

crash($walwriter);

# Every acknowledged acquisition is there with the same holder and fence.
for my $r (sort keys %held)
{
	my ($holder, $fence) = @{ $held{$r} };
	is( $node->safe_psql(
			'postgres',
			"SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = '$r'"
		),
		"$holder $fence",
		"$r still held by $holder with fence $fence after the crash");
}
is( $node->safe_psql(
		'postgres', q{SELECT count FROM dlock.locks WHERE resource = 'sync1'}),
	'2',
	're-entry count survived');
is( $node->safe_psql(
		'postgres',
		q{SELECT expires_at::text FROM dlock.locks WHERE resource = 'sess1'}),
	$renewed,
	'renewal under synchronous_commit = off survived');

# The first fence after the restart is above every fence before the crash.
my $after = $node->safe_psql('postgres',
	q{SELECT dlock.try_lock('after-crash', 'new-holder', '1h')});
cmp_ok($after, '>', $max_before,
	"first fence after restart ($after) exceeds every fence before ($max_before)");

# The held locks are really held: another holder cannot take them.
is( $node->safe_psql(
		'postgres', q{SELECT dlock.try_lock('role1', 'intruder', '1h') IS NULL}),
	't',
	'a surviving lock still excludes other holders');

# Second crash: fences drawn in a transaction that never commits.  40 draws
# cross a WAL-logged batch of the sequence, and nothing commits after them,
# so only dlock's own flush of the sequence's WAL keeps them from being
# handed out again after the restart.  (The session first takes and drops a
# lock in autocommit: a backend's first fence draw reads the epoch row, and
# 030_waits.pl covers how that interacts with an open transaction.)
my $open = $node->background_psql('postgres');
$walwriter = freeze_wal_writer($node);
$open->query_safe(
	q{SELECT dlock.unlock('open0', 'open-holder', dlock.try_lock('open0', 'open-holder', '1h'))});
$open->query_safe('BEGIN');
my @uncommitted = split /\n/, $open->query_safe(
	q{SELECT dlock.try_lock('open' || i, 'open-holder', '1h')
	    FROM generate_series(1, 40) i});
is(scalar(@uncommitted), 40, '40 fences drawn in an open transaction');
my ($max_open) = sort { $b <=> $a } @uncommitted;

crash($walwriter);
eval { $open->quit };    # its server is gone; psql exits with an error

is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM dlock.leases WHERE resource ~ '^open[1-9]'}),
	'0',
	'the transaction that never committed left nothing');
my $after2 = $node->safe_psql('postgres',
	q{SELECT dlock.try_lock('open1', 'other-holder', '1h')});
cmp_ok($after2, '>', $max_open,
	"first fence after the second crash ($after2) exceeds the uncommitted ones ($max_open)");
is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'last3'}),
	'last-holder', 'holdings survive a second crash too');

# Third crash: a transaction-scoped lock granted on a release that was
# committed asynchronously (dlock commits a lone release so), in a
# transaction that writes nothing itself, so that its commit record would
# flush nothing.  Once its commit is acknowledged, the release it was granted
# on must survive the crash, else the old holding is back after it, behind
# the xact lock's newer fence (the chaos model found it: 098 on 18).  Three
# resources, so that a fence draw's own flush of the sequence cannot hide it.
my @xr = map { "xl$_" } 1 .. 3;
$node->safe_psql('postgres',
	join('', map { "SELECT dlock.try_lock('$_', 'old-holder', '1h');\n" } @xr));
$walwriter = freeze_wal_writer($node);
my %xf;
for my $r (@xr)
{
	is($node->safe_psql('postgres', "SELECT dlock.unlock('$r', 'old-holder')"),
		'0', "$r released (asynchronously)");
	$xf{$r} = $node->safe_psql('postgres', "SELECT dlock.xact_lock('$r')");
	ok($xf{$r} > 0, "$r: an xact lock granted on it, committed (fence $xf{$r})");
}
crash($walwriter);
for my $r (@xr)
{
	is($node->safe_psql('postgres', "SELECT count(*) FROM dlock.locks WHERE resource = '$r' AND holder IS NOT NULL"),
		'0', "$r: the release the xact lock was granted on survived the crash");
	cmp_ok($node->safe_psql('postgres', "SELECT dlock.try_lock('$r', 'new-holder', '1h')"),
		'>', $xf{$r}, "$r: the next fence is above the xact lock's");
}

# Fourth crash: the same in one transaction under synchronous_commit = off,
# which writes rows (a break_lock of a live holding, or the holder's own
# unlock) and so has an xid: its commit record must be flushed before the
# commit is acknowledged, else the crash takes the release with it and the
# broken holding is back behind the xact lock's newer fence (helper-77, by
# reading xact.c: flush_before_commit left it to the commit record, which
# synchronous_commit = off does not flush).
# The yt ones: the release is a lone one (asynchronous), and the xact
# lock's transaction has an xid but no WAL of its own (txid_current(), in
# a session that has drawn fences before, whose draws write no WAL but
# now and then a sequence batch): PostgreSQL writes its commit record and
# does not flush it (helper-78).
my %how = (
	yb1 => "SELECT dlock.break_lock('yb1')",
	yb2 => "SELECT dlock.break_lock('yb2')",
	yu1 => "SELECT dlock.unlock('yu1', 'old-holder')");
my @yt = map { "yt$_" } 1 .. 3;
$node->safe_psql('postgres',
	join('', map { "SELECT dlock.try_lock('$_', 'old-holder', '1h');\n" } sort(keys %how), @yt));
my $warmed = $node->background_psql('postgres');
$warmed->query_safe("SELECT dlock.try_xact_lock('warm$_')") for 1 .. 3;
$walwriter = freeze_wal_writer($node);
for my $r (sort keys %how)
{
	$xf{$r} = $node->safe_psql('postgres', qq{
SET synchronous_commit = off;
BEGIN;
$how{$r};
SELECT dlock.try_xact_lock('$r');
COMMIT;});
	like($xf{$r}, qr/\n\d+$/, "$r: released and xact-locked in one transaction, committed");
	$xf{$r} =~ s/.*\n//s;
}
# (After the others: their commits flush all WAL before them.)
for my $r (@yt)
{
	is($node->safe_psql('postgres', "SELECT dlock.unlock('$r', 'old-holder')"), '0', "$r released alone");
	$xf{$r} = $warmed->query_safe("BEGIN; SELECT txid_current() > 0; SELECT dlock.try_xact_lock('$r'); COMMIT;");
	like($xf{$r}, qr/\n\d+$/, "$r: xact-locked in a transaction with an xid and no WAL, committed");
	$xf{$r} =~ s/.*\n//s;
}
crash($walwriter);
eval { $warmed->quit };    # its server is gone
for my $r (sort(keys %how), @yt)
{
	is($node->safe_psql('postgres', "SELECT count(*) FROM dlock.locks WHERE resource = '$r' AND holder IS NOT NULL"),
		'0', "$r: the release the xact lock was granted on survived the crash");
	cmp_ok($node->safe_psql('postgres', "SELECT dlock.try_lock('$r', 'new-holder', '1h')"),
		'>', $xf{$r}, "$r: the next fence is above the xact lock's");
}

$node->stop;
done_testing();
