# 061_sessions_crash.pl: sessions (1.1) across crashes and restarts.
#
# open_session, an acquisition in a session and keepalive that returned are
# durable even under synchronous_commit = off (the walwriter frozen, then
# the server crashed): the session, its holdings and its last expiry come
# back, and ids never repeat.  A session's holdings end at its expiry after
# a crash: free to others at once, and the reaper sends one "expired" event
# per resource, then removes the session.  A backend killed with an
# acquisition in a session in flight leaves nothing behind.  close_session
# sends one "released" event per holding and wakes a waiter at once.  After a
# promotion, a session live at the promotion is refreshed to at least the
# promotion time + its ttl (dlock.refresh_on_promotion), one already ended
# is not revived.
# Promises: none

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Crash;

my $node = PostgreSQL::Test::Cluster->new('sessions');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
bgwriter_lru_maxpages = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $q = sub { $node->safe_psql('postgres', shift) };

# crash: freeze the walwriter, run WORK, kill -9 the walwriter (the server
# goes down, its WAL buffers with it: DlockTest::Crash) and start again.
sub crash
{
	my $work = shift;
	my $walwriter = freeze_wal_writer($node);
	my @out = $work->();
	crash_with($node, $walwriter);
	$node->start;
	return @out;
}

# 1. Acknowledged under synchronous_commit = off, then a crash: all there.
my ($s, $f1, $f2, $e) = crash(
	sub {
		return split /\n/, $q->(q{
SET synchronous_commit = off;
SELECT dlock.open_session('1h', 'crash-worker') AS s \gset
SELECT :s;
SELECT dlock.try_lock('c/1', session => :s);
SELECT dlock.try_lock('c/2', session => :s);
SELECT dlock.keepalive(:s);
});
	});
like($s, qr/^\d+$/, "session $s opened before the crash");
is($q->("SELECT holder || ' ' || holdings || ' ' || (expires_at = '$e') FROM dlock.sessions WHERE id = $s"),
	'crash-worker 2 true', 'the session, its holdings and its last keepalive survived the crash');
is($q->("SELECT string_agg(resource || ' ' || fence, ', ' ORDER BY resource) FROM dlock.locks WHERE session = $s"),
	"c/1 $f1, c/2 $f2", 'each holding with its fence');
is($q->(q{SELECT dlock.try_lock('c/1', 'other', '1h') IS NULL}), 't', 'still held after the crash');
my $s2 = $q->(q{SELECT dlock.open_session('1h', 'after')});
cmp_ok($s2, '>', $f2, 'a session opened after the crash has a higher id than every fence before');
is($q->("SELECT dlock.keepalive($s) > '$e'"), 't', 'the session is kept alive after the crash');
is($q->("SELECT dlock.close_session($s)"), '2', 'and closed');

# 2. A session that ends while the server is down: its holdings end at its
# expiry, the reaper sends one expired event each, then removes it.
# The listener needs its LISTENs in before the reaper removes the session:
# should the session be gone by then (a slow restart on a loaded
# machine), the case is tried again with a longer ttl.
my ($short, $g1, $g2, $listener);
for my $ttl (3, 15, 60)
{
	($short, $g1, $g2) = split /\n/, $q->(qq{
SELECT dlock.open_session('${ttl}s', 'short') AS s \\gset
SELECT :s;
SELECT dlock.try_lock('c/short1', session => :s);
SELECT dlock.try_acquire('c/short2', NULL, 3, 2, session => :s);
});
	crash(sub { return (); });
	$listener = $node->background_psql('postgres');
	for my $r ('c/short1', 'c/short2')
	{
		my $channel = $q->("SELECT dlock.channel('$r')");
		$listener->query_safe(qq{LISTEN "$channel"});
	}
	last if $q->("SELECT count(*) FROM dlock.sessions WHERE id = $short") eq '1' || $ttl == 60;
	diag("session $short (ttl ${ttl}s) was removed before the LISTENs: again with a longer ttl");
	$listener->quit;
}
ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM dlock.sessions WHERE id = $short"),
	'the reaper removed the session once its ttl had passed');
is($q->(q{SELECT count(*) FROM dlock.locks WHERE resource LIKE 'c/short%'}), '0',
	'with its holdings');
my $note = '';
for (my $i = 0; $i < 200 && ($note =~ tr/\n//) < 2; $i++)
{
	$note .= join("\n", grep { /Asynchronous notification/ } split /\n/, $listener->query_safe('SELECT 1')) . "\n";
	$note =~ s/^\n+//;
	usleep(50_000) if ($note =~ tr/\n//) < 2;
}
like($note, qr/"event":"expired","resource":"c\/short1","fence":$g1\}/, 'an expired event for the exclusive holding');
like($note, qr/"event":"expired","resource":"c\/short2","fence":$g2\}/, 'an expired event for the holding of permits');
$listener->quit;
is($q->("SELECT dlock.keepalive($short)"), '', 'the ended session is never revived');
cmp_ok($q->(q{SELECT dlock.try_lock('c/short1', 'next', '1h')}), '>', $g2, 'the next holder gets a higher fence');

# 3. A backend killed with an acquisition in a session in flight: nothing
# of it stays; the session and its committed holdings do.
my $bg = $node->background_psql('postgres', on_error_stop => 0);
my $pid = $bg->query_safe('SELECT pg_backend_pid()');
$bg->query_safe("BEGIN; SELECT dlock.try_lock('c/inflight', session => $s2)");
$q->("SELECT dlock.try_lock('c/kept', session => $s2)");
kill 'KILL', $pid;
$bg->quit;
# restart_after_crash is off in these clusters: the server goes down too.
$node->stop('immediate', fail_ok => 1);
$node->start;
is($q->("SELECT string_agg(resource, ', ') FROM dlock.locks WHERE session = $s2"), 'c/kept',
	'the acquisition in flight left nothing; the committed one stays');
is($q->("SELECT dlock.close_session($s2)"), '1', 'close_session releases it');

# 4. close_session: one released event per holding; a waiter in lock()
# behind one of them is served (its wait is an hour).
my $s3 = $q->(q{SELECT dlock.open_session('1h', 'closer')});
my ($h1, $h2) = split /\n/, $q->(qq{
SELECT dlock.try_lock('c/close1', session => $s3);
SELECT dlock.try_lock('c/close2', session => $s3, shared => true);
});
my $ears = $node->background_psql('postgres');
for my $r ('c/close1', 'c/close2')
{
	my $channel = $q->("SELECT dlock.channel('$r')");
	$ears->query_safe(qq{LISTEN "$channel"});
}
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock.lock('c/close1', 'waiter', '1h', '1h');\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'c/close1'}),
	'a waiter waits for c/close1');
is($q->("SELECT dlock.close_session($s3)"), '2', 'close_session releases both holdings');
ok($node->poll_query_until('postgres', q{SELECT holder = 'waiter' FROM dlock.locks WHERE resource = 'c/close1'}),
	'the waiter is served');
$note = '';
for (my $i = 0; $i < 200 && ($note =~ tr/\n//) < 2; $i++)
{
	$note .= join("\n", grep { /Asynchronous notification/ } split /\n/, $ears->query_safe('SELECT 1')) . "\n";
	$note =~ s/^\n+//;
	usleep(50_000) if ($note =~ tr/\n//) < 2;
}
like($note, qr/"event":"released","resource":"c\/close1","fence":$h1\}/, 'a released event for the exclusive holding');
like($note, qr/"event":"released","resource":"c\/close2","fence":$h2\}/, 'a released event for the shared holding');
$ears->quit;
$waiter->quit;

$node->stop;

# 5. A promotion: the refresh refreshes sessions live at the promotion.
my $p = PostgreSQL::Test::Cluster->new('sessions_primary');
$p->init(allows_streaming => 1);
$p->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
});
$p->start;
$p->safe_psql('postgres', 'CREATE EXTENSION dlock');
$p->backup('bk');
my $st = PostgreSQL::Test::Cluster->new('sessions_standby');
$st->init_from_backup($p, 'bk', has_streaming => 1);
$st->start;
# Both sessions and their holdings in one psql: a 1 s session opened by
# one psql may have ended before the next one's try_lock (a psql start is
# 0.5-2 s now and then on a loaded machine), and each psql start before
# the promotion eats into the 8 s one.
my $t0 = time;
my ($live, $lf, $dead) = split /\n/, $p->safe_psql('postgres', q{
SELECT dlock.open_session('8s', 'live') AS s \gset
SELECT :s;
SELECT dlock.try_lock('p/live', session => :s);
SELECT dlock.open_session('1s', 'dead') AS d \gset
SELECT :d;
SELECT dlock.try_lock('p/dead', session => :d);
});
my $opened = time;
$p->wait_for_catchup($st);
$p->stop('immediate');
# the 1 s session ended before the promotion, however late it was opened
usleep(50_000) while time < $t0 + 3 || time < $opened + 1.5;
my $promote_start = time;
$st->promote;
$st->wait_for_log(qr/refresh after promotion to timeline 2 done/);
cmp_ok($st->safe_psql('postgres', "SELECT extract(epoch FROM expires_at) FROM dlock.sessions WHERE id = $live"),
	'>=', $promote_start + 8, 'a session live at the promotion lives its ttl from the promotion on');
is($st->safe_psql('postgres', "SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = 'p/live' AND NOT expired"),
	"live $lf", 'its holding with it, fence unchanged');
is($st->safe_psql('postgres', "SELECT dlock.keepalive($dead) IS NULL AND NOT EXISTS (SELECT FROM dlock.locks WHERE resource = 'p/dead' AND NOT expired)"),
	't', 'a session that ended before the promotion is not revived, nor its holding');
is($st->safe_psql('postgres', "SELECT dlock.keepalive($live) IS NOT NULL"), 't', 'keepalive on the new primary');
$st->stop;
done_testing();
