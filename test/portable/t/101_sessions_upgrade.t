#!/usr/bin/perl
# 101_sessions_upgrade.t: portable/dlock.sql run over the 1.0 release
# (test/portable/old/1.0, as v1.0 shipped it) with holdings of every kind
# open: while a lock() of 1.0 waits the run is refused (55P03, nothing
# changed: it adds a column to the holdings' tables); once it is served,
# every holding is kept, sessions are usable at once, fences increasing;
# then a re-run over itself with a session and its holdings
# open keeps them (one keepalive still moves them all).
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P1 P2 P17
use strict;
use warnings;
use DBI;
use DBD::Pg qw(:async);
use Time::HiRes qw(time sleep);
use Test::More;

use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

my $view = "SELECT string_agg(concat_ws(':', resource, holder, count, fence, mode, permits, value, expires_at), ' ' ORDER BY resource, holder)"
         . " FROM dlock.locks";

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'sessup');
    $admin->do("CREATE DATABASE old10 OWNER dbo") or die $admin->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d old10 -f $top/test/portable/old/1.0/dlock.sql 2>&1`;
    is($?, 0, "$label: the 1.0 release installed") or diag($out);
    my $a = conn('alice', 'old10');
    is(q1($a, "SELECT count(*) FROM pg_proc WHERE proname = 'open_session'"), 0, "$label: 1.0 has no sessions");
    my @f;
    push @f, q1($a, "SELECT dlock.try_lock('u/x', 'h', '1h', lock_delay => '1h')");
    push @f, q1($a, "SELECT dlock.try_lock('u/s', 'h', '1h', shared => true)");
    push @f, q1($a, "SELECT dlock.try_acquire('u/sem', 'h', 3, 2, '1h')");
    push @f, q1($a, "SELECT dlock.campaign('u/el', 'h', 'v1', '1h')");
    ok((grep { $_ } @f) == 4, "$label: 1.0 holdings of every kind");
    # A lock() of 1.0 waiting while the script runs.
    my $wh = conn('bob', 'old10');
    $wh->do("SET statement_timeout = '60s'");
    my $wsth = $wh->prepare("SELECT dlock.lock('u/x', 'w', '1h', '60s')", { pg_async => PG_ASYNC });
    $wsth->execute;
    my $w = [$wh, $wsth];
    my $o = conn('admin', 'old10');
    my $ws = 0;
    for (1 .. 500) {
        last if $ws = q1($o, "SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND wait_event = 'PgSleep'", $w->[0]{pg_pid});
        sleep 0.01;
    }
    ok($ws, "$label: a waiter in 1.0's lock()");
    my $before = q1($a, $view);
    # The upgrade adds a column to the holdings' tables: a wait in
    # progress uses them to its end, so the run fails (55P03) after
    # dlock_lock_wait, changing nothing, and callers never queue behind it.
    $out = `$client/psql -X -q -v ON_ERROR_STOP=1 -v dlock_lock_wait=300ms -h $dir -U dbo -d old10 -f $script 2>&1`;
    isnt($?, 0, "$label: this script over 1.0 while a lock() waits: refused");
    like($out, qr/could not lock dlock's views and tables for the upgrade/, "$label: ... 55P03, saying why") or diag($out);
    is(q1($a, "SELECT dlock.version() || ' ' || count(*) FROM pg_proc WHERE proname = 'open_session'"), '1.0 0',
       "$label: ... nothing changed");
    is(q1($a, $view), $before, "$label: ... every holding as it was");
    # The waiter is served by 1.0's release; then the upgrade goes through.
    is(q1($a, "SELECT dlock.unlock('u/x', 'h')"), 0, "$label: the waited-for resource released");
    my $g = result($w);
    ok($g && $g > $f[3], "$label: the waiter is served, a higher fence");
    $w->[0]->disconnect;
    $before = q1($a, $view);
    $out = `$client/psql -X -q -v ON_ERROR_STOP=1 -h $dir -U dbo -d old10 -f $script 2>&1`;
    is($?, 0, "$label: this script over 1.0") or diag($out);
    $a->disconnect;
    $a = conn('alice', 'old10');
    is(q1($a, $view), $before, "$label: every holding kept, with its lock-delay and value");
    is(q1($a, "SELECT count(*) FROM dlock.locks WHERE session IS NOT NULL"), 0, "$label: none in a session");
    my $b = conn('bob', 'old10');
    is(q1($b, "SELECT dlock.unlock('u/x', 'w')"), 0, "$label: the served waiter's holding released by the new code");
    $b->disconnect;
    # Sessions at once.
    my $s1 = q1($a, "SELECT dlock.open_session('1h', 'sess')");
    ok($s1 > $g, "$label: open_session after the upgrade, an id above every fence");
    ok(q1($a, "SELECT dlock.try_lock('u/y', session => ?)", $s1), "$label: try_lock in it");
    ok(q1($a, "SELECT dlock.try_lock('u/s', session => ?, shared => true)", $s1), "$label: shared beside the 1.0 shared holding");
    ok(q1($a, "SELECT dlock.try_acquire('u/sem', NULL, 3, 1, session => ?)", $s1), "$label: the last permit beside 1.0's two");
    is(q1($a, "SELECT dlock.renew('u/sem', 'h')") ne '', 1, "$label: 1.0's permits still renew on their own lease");
    # A re-run over itself keeps the session and its holdings.
    my $sb = q1($a, "SELECT string_agg(concat_ws(':', id, holder, ttl, expires_at, holdings), ' ') FROM dlock.sessions");
    my $lb = q1($a, $view);
    $out = `$client/psql -X -q -v ON_ERROR_STOP=1 -h $dir -U dbo -d old10 -f $script 2>&1`;
    is($?, 0, "$label: the script again over itself") or diag($out);
    is(q1($a, "SELECT string_agg(concat_ws(':', id, holder, ttl, expires_at, holdings), ' ') FROM dlock.sessions"), $sb,
       "$label: ... the session kept");
    is(q1($a, $view), $lb, "$label: ... every holding kept");
    my $e = q1($a, "SELECT dlock.keepalive(?)", $s1);
    is(q1($a, "SELECT count(*) FROM dlock.locks WHERE session = ? AND expires_at = ?", $s1, $e), 3,
       "$label: one keepalive moves its three holdings");
    is(q1($a, "SELECT dlock.close_session(?)", $s1), 3, "$label: closed");
    $_->disconnect for ($a, $o);
    stop_server($s->[1], $dir);
}
done_testing();
