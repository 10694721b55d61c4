#!/usr/bin/perl
# 100_sessions.t: the portable edition's sessions ([sessions], 1.1):
# open_session, keepalive, close_session, session => id on every kind of
# acquisition, dlock.sessions and dlock.locks.session, on every server
# 010_core.t uses, by non-superuser roles.  Each rule of the contract:
# the holder is the session's, one keepalive writes one row however many
# holdings, an ended session's holdings end at that instant (acquirable at
# once, expired events from reap, lock-delay, higher fences), never
# revived, close releases each with its event, renew renews the session,
# unlock and break_lock of one holding leave the rest, check and
# assert_fence see the session's expiry and a pin holds the holding;
# other roles (42501), bad input (22023, 55000, nothing changed),
# transactions rolled back, a keepalive in flight at the expiry, and ids
# never reused across a re-installation.
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P1 P2 P4 P5 P6 P7 P12 P13
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

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'sess');
    my $al = conn('alice');
    my $bo = conn('bob');
    my $su = conn('admin');
    api($al, $bo, $su);
    expiry($al, $bo, $su);
    close_tests($al, $bo);
    holdings($al, $bo, $su);
    roles($al, $bo, $su);
    bad_input($al);
    transactions($al, $bo);
    in_flight($al, $bo);
    reinstall($al, $su, $dir);
    $_->disconnect for ($al, $bo, $su);
    stop_server($s->[1], $dir);
}
done_testing();

# ended: wait (no timing asserted) until the session's ttl has passed:
# asleep until its expiry (30s at most), then polled past it.
sub ended {
    my ($dbh, $s) = @_;
    q1($dbh, "SELECT pg_sleep_until(least(expires_at, clock_timestamp() + interval '30s')) FROM dlock.sessions WHERE id = ?", $s);
    for (1 .. 3000) {
        return 1 if q1($dbh, "SELECT clock_timestamp() > (SELECT expires_at FROM dlock.sessions WHERE id = ?)", $s);
        sleep 0.01;
    }
    return 0;
}

# row: a statement's one row, as a list (dies on an error, as q1).
sub row {
    my ($dbh, $sql, @bind) = @_;
    my $r = $dbh->selectrow_arrayref($sql, undef, @bind);
    die "$label: $sql: " . $dbh->errstr . "\n" if $dbh->err;
    return $r ? @$r : ();
}

# events: the notifications DBH has (a statement first: those signalled
# before it arrive with its answer; a fixed sleep was a guess).
sub events {
    my ($dbh) = @_;
    q1($dbh, "SELECT 1");
    my @e;
    while (my $n = $dbh->pg_notifies) { push @e, $n->[2] }
    return @e;
}

sub api {
    my ($al, $bo, $su) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'worker-1')");
    ok($s > 0, "$label: open_session returns an id");
    is(join('|', @{$al->selectrow_arrayref("SELECT holder, owner::text, ttl::text, holdings, expired FROM dlock.sessions WHERE id = ?", undef, $s)}),
       'worker-1|alice|01:00:00|0|0', "$label: dlock.sessions lists it");
    ok($s > (q1($su, "SELECT max(fence) FROM dlock.locks") // 0), "$label: the id is a fence (never reused)");
    my $f = q1($al, "SELECT dlock.try_lock('s/a', session => ?)", $s);
    ok($f, "$label: try_lock in a session, no holder given");
    is(join('|', @{$al->selectrow_arrayref("SELECT holder, session, owner::text, lease::text, expires_at = (SELECT expires_at FROM dlock.sessions WHERE id = ?) FROM dlock.locks WHERE resource = 's/a'", undef, $s)}),
       "worker-1|$s|alice|01:00:00|1", "$label: dlock.locks shows the session's holder, session, ttl and expiry");
    is(q1($al, "SELECT dlock.try_lock('s/a', NULL, session => ?)", $s), $f, "$label: holder NULL with a session: re-entry, same fence");
    is(q1($al, "SELECT dlock.try_lock('s/a', 'worker-1', session => ?)", $s), $f, "$label: the session's own holder: re-entry");
    is(q1($al, "SELECT count FROM dlock.locks WHERE resource = 's/a'"), 3, "$label: count 3");
    like(err($al, "SELECT dlock.try_lock('s/a', 'other', session => $s)"), qr/^22023: holder "other" is not the holder of session/,
         "$label: an explicit holder that differs: 22023");
    like(err($al, "SELECT dlock.try_lock('s/b', session => $s, lease => '1s')"), qr/^22023: session and lease cannot both be given/,
         "$label: session and lease both: 22023");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 's/b'"), 0, "$label: ... nothing taken");
    # Re-entry only as it was taken.
    ok(q1($al, "SELECT dlock.try_lock('s/l', 'worker-1', '1h')"), "$label: a leased holding of the same holder text");
    like(err($al, "SELECT dlock.try_lock('s/l', session => $s)"), qr/^55000: holder "worker-1" holds resource "s\/l" with a lease of its own/,
         "$label: re-entering a leased holding in a session: 55000");
    like(err($al, "SELECT dlock.try_lock('s/a', 'worker-1', '1h')"), qr/^55000: holder "worker-1" holds resource "s\/a" in session/,
         "$label: re-entering a session's holding with a lease: 55000");
    is(q1($al, "SELECT count FROM dlock.locks WHERE resource = 's/a'"), 3, "$label: ... count unchanged");
    # Another holder is kept out; lock() waits in the session.
    is(q1($bo, "SELECT dlock.try_lock('s/a', 'b', '1h')"), undef, "$label: another holder gets NULL");
    my $f2 = q1($al, "SELECT dlock.lock('s/c', session => ?, wait => '1s')", $s);
    ok($f2 > $f, "$label: lock() in a session");
    # renew of a session's holding renews the session.
    my $before = q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s);
    my $r = q1($al, "SELECT dlock.renew('s/c', 'worker-1')");
    is($r, q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s), "$label: renew of a session's holding returns the session's new expiry");
    ok(q1($al, "SELECT ?::timestamptz > ?::timestamptz", $r, $before), "$label: ... later than before");
    like(err($al, "SELECT dlock.renew('s/c', 'worker-1', '5s')"), qr/^22023: a holding in a session has no lease of its own/,
         "$label: renew with a lease of a session's holding: 22023");
    # unlock of one holding leaves the others and the session.
    is(q1($al, "SELECT dlock.unlock('s/c', 'worker-1')"), 0, "$label: unlock of one holding");
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s), 1, "$label: ... the other holding stays (s/a)");
    ok(q1($al, "SELECT dlock.keepalive(?)", $s), "$label: ... the session lives");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 1, "$label: close_session releases the one left");
    is(q1($al, "SELECT dlock.unlock('s/l', 'worker-1')"), 0, "$label: the leased holding was never in it");
}

sub expiry {
    my ($al, $bo, $su) = @_;
    # One statement opens the session, takes the four and checks e/1: under
    # load, more than the ttl passed between statements (the session had
    # ended: 55000 from try_lock).
    my ($s, %f, $cur);
    ($s, @f{qw(e/1 e/2 e/3 e/d)}, $cur) = row($al, q{WITH o AS MATERIALIZED
        (SELECT dlock.open_session('400ms', 'w-exp') AS s),
      l AS MATERIALIZED
        (SELECT s, dlock.try_lock('e/1', session => s) AS f1, dlock.try_lock('e/2', session => s) AS f2,
                dlock.try_lock('e/3', session => s) AS f3, dlock.try_lock('e/d', session => s, lock_delay => '1h') AS fd FROM o)
      SELECT s, f1, f2, f3, fd, dlock.check('e/1', f1) FROM l});
    ok((grep { $_ } values %f) == 4, "$label: four holdings in a 400ms session");
    ok($cur, "$label: check sees it current");
    $bo->do("LISTEN \"" . q1($bo, "SELECT dlock.channel(?)", $_) . "\"") for qw(e/1 e/2 e/3 e/d);
    ok(ended($al, $s), "$label: the session's ttl passes (no keepalive)");
    ok(!q1($al, "SELECT dlock.check('e/1', ?)", $f{'e/1'}), "$label: check sees the session's end");
    like(err($al, "SELECT dlock.assert_fence('e/1', $f{'e/1'})"), qr/^55P03:/, "$label: assert_fence: 55P03");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE session = ? AND expired", $s), 4, "$label: dlock.locks: all four expired at once");
    # Acquirable at once by others (before any reap), with a higher fence.
    my $g = q1($bo, "SELECT dlock.try_lock('e/1', 'b', '1h')");
    ok($g && $g > $f{'e/1'}, "$label: another holder takes e/1 at once, with a higher fence");
    # Never revived.
    is(q1($al, "SELECT dlock.keepalive(?)", $s), undef, "$label: keepalive after the end: NULL");
    is(q1($al, "SELECT dlock.renew('e/2', 'w-exp')"), undef, "$label: renew of its holding: NULL");
    is(q1($al, "SELECT dlock.unlock('e/2', 'w-exp')"), undef, "$label: unlock of its holding: NULL");
    like(err($al, "SELECT dlock.try_lock('e/9', session => $s)"), qr/^55000: session \d+ has ended/, "$label: acquiring in it: 55000");
    # Lock-delay from the session's expiry.
    is(q1($bo, "SELECT dlock.try_lock('e/d', 'b', '1h')"), undef, "$label: lock-delay keeps e/d busy");
    ok(q1($bo, "SELECT available_at = (SELECT expires_at FROM dlock.sessions WHERE id = ?) + interval '1h' FROM dlock.locks WHERE resource = 'e/d'", $s),
       "$label: ... available at the session's expiry + 1h");
    # reap: an expired event per resource still held; the session goes.
    is(q1($su, "SELECT dlock.reap()"), 3, "$label: reap ends the three left");
    my @e = sort(events($bo));
    is(scalar(@e), 3, "$label: three events") or diag(join "\n", @e);
    like($_, qr/^\{"event":"expired","resource":"e\/[23d]","fence":\d+\}$/, "$label: event $_") for @e;
    is(q1($al, "SELECT count(*) FROM dlock.sessions WHERE id = ?", $s), 0, "$label: the ended session is reaped");
    is(q1($bo, "SELECT dlock.try_lock('e/d', 'b', '1h')"), undef, "$label: lock-delay still holds after the reap");
    ok(q1($bo, "SELECT available_at > clock_timestamp() + interval '50 minutes' FROM dlock.locks WHERE resource = 'e/d'"),
       "$label: ... dlock.locks shows when");
    $bo->do("UNLISTEN *");
    is(q1($bo, "SELECT dlock.unlock_all('b')"), 1, "$label: cleanup");
}

sub close_tests {
    my ($al, $bo) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-close')");
    q1($al, "SELECT dlock.try_lock(?, session => ?, lock_delay => '1h')", $_, $s) for qw(c/1 c/2);
    $bo->do("LISTEN \"" . q1($bo, "SELECT dlock.channel(?)", $_) . "\"") for qw(c/1 c/2);
    my $w = async('bob', "SELECT dlock.lock('c/1', 'b', '1h', '20s')");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 2, "$label: close_session returns the holdings released");
    ok(result($w), "$label: a waiter in lock() is served");
    $w->[0]->disconnect;
    my @e = sort(events($bo));
    is_deeply([map { /"event":"(\w+)","resource":"([^"]+)"/ ? "$1 $2" : $_ } @e], ['released c/1', 'released c/2'],
              "$label: a released event per resource");
    ok(q1($bo, "SELECT dlock.try_lock('c/2', 'b', '1h')"), "$label: a clean close: no lock-delay");
    is(q1($al, "SELECT dlock.close_session(?)", $s), undef, "$label: closed again: NULL");
    is(q1($al, "SELECT dlock.keepalive(?)", $s), undef, "$label: keepalive of a closed session: NULL");
    like(err($al, "SELECT dlock.try_lock('c/3', session => $s)"), qr/^55000:/, "$label: acquiring in a closed session: 55000");
    $bo->do("UNLISTEN *");
    q1($bo, "SELECT dlock.unlock_all('b')");
}

# Every kind of acquisition in one session; one keepalive writes one row.
sub holdings {
    my ($al, $bo, $su) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-all')");
    ok(q1($al, "SELECT dlock.try_lock('h/x', session => ?)", $s), "$label: try_lock");
    ok(q1($al, "SELECT dlock.lock('h/y', session => ?, shared => true)", $s), "$label: lock, shared");
    ok(q1($al, "SELECT dlock.try_lock('h/y2', session => ?, shared => true)", $s), "$label: try_lock, shared");
    ok(q1($al, "SELECT dlock.try_acquire('h/sem', NULL, 3, 2, session => ?)", $s), "$label: try_acquire");
    ok(q1($al, "SELECT dlock.acquire('h/sem2', NULL, 3, 1, session => ?, wait => '1s')", $s), "$label: acquire");
    ok(q1($al, "SELECT dlock.try_lock_all('{h/m1,h/m2}', session => ?)", $s), "$label: try_lock_all");
    ok(q1($al, "SELECT dlock.lock_all('{h/m3,h/m4}', session => ?, shared => true)", $s), "$label: lock_all, shared");
    my $t = q1($al, "SELECT dlock.campaign('h/el', value => 'v', session => ?)", $s);
    ok($t, "$label: campaign");
    is(q1($al, "SELECT candidate FROM dlock.leader('h/el')"), 'w-all', "$label: ... the leader is the session's holder");
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s), 10, "$label: dlock.sessions counts 10 holdings");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE session = ? AND holder = 'w-all' AND owner = 'alice'::regrole", $s), 10,
       "$label: dlock.locks: 10 rows in the session");
    my $xmins = "SELECT string_agg(xmin::text, ',' ORDER BY resource) FROM (SELECT resource, xmin FROM dlock.leases WHERE session = $s"
              . " UNION ALL SELECT resource, xmin FROM dlock.shares WHERE session = $s UNION ALL SELECT resource, xmin FROM dlock.permits WHERE session = $s) x";
    my $x0 = q1($su, $xmins);
    my $e0 = q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s);
    my $e1 = q1($al, "SELECT dlock.keepalive(?)", $s);
    ok(q1($al, "SELECT ?::timestamptz > ?::timestamptz", $e1, $e0), "$label: keepalive moves the expiry");
    is(q1($su, $xmins), $x0, "$label: keepalive wrote none of the 10 holding rows (O(1))");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE session = ? AND expires_at = ?", $s, $e1), 10,
       "$label: every holding shows the new expiry");
    # renew of a shared holding and of permits renews the session too.
    my $e2 = q1($al, "SELECT dlock.renew('h/sem', 'w-all')");
    is($e2, q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s), "$label: renew of permits: the session's expiry");
    is(q1($su, $xmins), $x0, "$label: ... no holding row written");
    # break_lock of one holding leaves the session and the others.
    ok(q1($su, "SELECT dlock.break_lock('h/x')"), "$label: break_lock of one holding");
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s), 9, "$label: ... 9 left, the session lives");
    ok(q1($al, "SELECT dlock.keepalive(?)", $s), "$label: ... keepalive works");
    # unlock_all of the holder's holdings, then close.
    is(q1($al, "SELECT dlock.unlock('h/y2', 'w-all')"), 0, "$label: unlock of a shared holding");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 8, "$label: close releases the 8 left of every kind");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE holder = 'w-all'"), 0, "$label: none left");
    # A session's shared holding that expires: a writer gets in.  A ttl of
    # 5s, not 300ms: the writer, on another connection, must try while the
    # session lives (under load, more than 300ms passed between statements);
    # ended() sleeps until the expiry.  Opened and taken in one statement.
    my ($s2, $sh, $pm) = row($al, q{WITH o AS MATERIALIZED (SELECT dlock.open_session('5s', 'w-sh') AS s)
        SELECT s, dlock.try_lock('h/sh', session => s, shared => true), dlock.try_acquire('h/p', NULL, 1, 1, session => s) FROM o});
    ok($sh, "$label: a shared holding in a short session");
    ok($pm, "$label: the only permit in it");
    is(q1($bo, "SELECT dlock.try_lock('h/sh', 'b', '1h')"), undef, "$label: a writer is kept out while it lives");
    ok(ended($al, $s2), "$label: the session ends");
    ok(q1($bo, "SELECT dlock.try_lock('h/sh', 'b', '1h')"), "$label: the writer gets in at once");
    ok(q1($bo, "SELECT dlock.try_acquire('h/p', 'b', 1, 1, '1h')"), "$label: the permit is free at once");
    q1($bo, "SELECT dlock.unlock_all('b')");
}

sub roles {
    my ($al, $bo, $su) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-role')");
    my $f = q1($al, "SELECT dlock.try_lock('r/1', session => ?)", $s);
    like(err($bo, "SELECT dlock.keepalive($s)"), qr/^42501: permission denied to keep alive session/, "$label: bob keeps alice's session alive: 42501");
    like(err($bo, "SELECT dlock.close_session($s)"), qr/^42501: permission denied to close session/, "$label: bob closes it: 42501");
    like(err($bo, "SELECT dlock.try_lock('r/2', session => $s)"), qr/^42501: permission denied to acquire in session/,
         "$label: bob acquires in it: 42501");
    like(err($bo, "SELECT dlock.try_lock('r/1', 'w-role', session => $s)"), qr/^42501:/, "$label: ... also naming its holder");
    # A forged holder text is another holder.
    is(q1($bo, "SELECT dlock.try_lock('r/1', 'w-role', '1h')"), undef, "$label: bob with the session's holder text: busy");
    like(err($bo, "SELECT dlock.unlock('r/1', 'w-role')"), qr/^42501:/, "$label: bob unlocks its holding: 42501");
    like(err($bo, "SELECT dlock.renew('r/1', 'w-role')"), qr/^42501:/, "$label: bob renews it: 42501");
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s), 1, "$label: nothing changed");
    # No rights on the table.
    like(err($bo, "UPDATE dlock.session_rows SET expires_at = 'infinity'"), qr/^42501:/, "$label: bob cannot write dlock.session_rows");
    like(err($bo, "SELECT dlock._exp($s, now())"), qr/^42501:/, "$label: internal helpers are closed");
    # Under SET ROLE, the role set counts.
    $su->do("GRANT alice TO bob");
    my $b2 = conn('bob');
    $b2->do("SET ROLE alice");
    ok(q1($b2, "SELECT dlock.keepalive(?)", $s), "$label: bob under SET ROLE alice keeps it alive");
    $b2->disconnect;
    $su->do("REVOKE alice FROM bob");
    # A superuser keeps it alive and closes it.
    ok(q1($su, "SELECT dlock.keepalive(?)", $s), "$label: a superuser keeps it alive");
    is(q1($su, "SELECT dlock.close_session(?)", $s), 1, "$label: a superuser closes it");
}

sub bad_input {
    my ($al) = @_;
    my $n0 = q1($al, "SELECT count(*) FROM dlock.sessions");
    for my $c (["open_session('0s')", qr/^22023: ttl must be positive/],
               ["open_session('-1s')", qr/^22023: ttl must be positive/],
               ["open_session('2000 years')", qr/^22023: ttl must be finite/],
               ["open_session('1h', '')", qr/^22023: holder must not be empty/],
               ["open_session('1h', NULL)", qr/^22023: holder must not be null/],
               ["open_session('1h', repeat('x', 256))", qr/^22023: holder must be at most 255 bytes/],
               ["keepalive(NULL)", qr/^22023: session must not be null/],
               ["close_session(NULL)", qr/^22023: session must not be null/],
               ["try_lock('b/1', session => -5)", qr/^55000: session -5 has ended/],
               ["try_lock(NULL, session => -5)", qr/^22023: resource must not be null/],
               ["lock('b/1', session => -5, wait => '1s')", qr/^55000:/],
               ["try_acquire('b/1', NULL, 2, session => -5)", qr/^55000:/],
               ["try_lock_all('{b/1}', session => -5)", qr/^55000:/],
               ["campaign('b/1', session => -5)", qr/^55000:/]) {
        like(err($al, "SELECT dlock.$c->[0]"), $c->[1], "$label: $c->[0]");
    }
    is(q1($al, "SELECT dlock.keepalive(-5)"), undef, "$label: keepalive of an unknown id: NULL");
    is(q1($al, "SELECT dlock.close_session(-5)"), undef, "$label: close_session of an unknown id: NULL");
    is(q1($al, "SELECT count(*) FROM dlock.sessions"), $n0, "$label: nothing changed");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'b/%'"), 0, "$label: nothing taken");
}

sub transactions {
    my ($al, $bo) = @_;
    $al->begin_work;
    my $s0 = q1($al, "SELECT dlock.open_session('1h', 'w-tx')");
    q1($al, "SELECT dlock.try_lock('t/0', session => ?)", $s0);
    $al->rollback;
    is(q1($al, "SELECT count(*) FROM dlock.sessions WHERE id = ?", $s0), 0, "$label: open_session rolled back: no session");
    ok(q1($bo, "SELECT dlock.try_lock('t/0', 'b', '1h')"), "$label: ... nor its holding");
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-tx')");
    q1($al, "SELECT dlock.try_lock('t/1', session => ?)", $s);
    my $e = q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s);
    $al->begin_work;
    ok(q1($al, "SELECT dlock.keepalive(?)", $s), "$label: keepalive in a transaction");
    $al->rollback;
    is(q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s), $e, "$label: ... rolled back: expiry unchanged");
    $al->begin_work;
    is(q1($al, "SELECT dlock.close_session(?)", $s), 1, "$label: close_session in a transaction");
    $al->rollback;
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s), 1, "$label: ... rolled back: the holding stays");
    is(q1($bo, "SELECT dlock.try_lock('t/1', 'b', '1h')"), undef, "$label: ... and keeps others out");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 1, "$label: closed");
    q1($bo, "SELECT dlock.unlock_all('b')");
}

# A keepalive in flight when the ttl passes: the holding is not taken over
# (else the keepalive would commit a session whose holding is gone).
sub in_flight {
    my ($al, $bo) = @_;
    my $s = q1($al, "SELECT dlock.open_session('4s', 'w-fl')");
    my $f = q1($al, "SELECT dlock.try_lock('f/1', session => ?)", $s);
    # The keepalive late in the ttl, so that its new expiry is well after
    # the old one.
    for (1 .. 1000) {
        last if q1($al, "SELECT expires_at - clock_timestamp() < interval '1s' FROM dlock.sessions WHERE id = ?", $s);
        sleep 0.01;
    }
    $al->begin_work;
    ok(q1($al, "SELECT dlock.keepalive(?)", $s), "$label: a keepalive, not yet committed");
    ok(ended($bo, $s), "$label: the old expiry passes meanwhile");
    is(q1($bo, "SELECT dlock.try_lock('f/1', 'b', '1h')"), undef, "$label: an acquirer finds it busy");
    is(q1($bo, "SELECT dlock.try_xact_lock('f/1')"), undef, "$label: so does try_xact_lock");
    q1($bo, "SELECT dlock.reap()");
    is(q1($bo, "SELECT count(*) FROM dlock.locks WHERE resource = 'f/1' AND session = ?", $s), 1, "$label: reap skips it");
    $al->commit;
    is(q1($bo, "SELECT dlock.try_lock('f/1', 'b', '1h')"), undef, "$label: after the commit: still held");
    ok(q1($al, "SELECT dlock.check('f/1', ?)", $f), "$label: ... its fence current");
    # A pin holds a session's holding as a leased one.
    # A ttl of 5s, not 500ms: the pin, a statement of its own in a
    # transaction, must come while the session lives (under load, more than
    # 500ms passed between statements); ended() sleeps until the expiry.
    my ($s2, $g) = row($al, q{WITH o AS MATERIALIZED (SELECT dlock.open_session('5s', 'w-pin') AS s)
        SELECT s, dlock.try_lock('f/2', session => s) FROM o});
    ok($g, "$label: a holding in a session");
    $al->begin_work;
    ok($al->do("SELECT dlock.assert_fence('f/2', $g)"), "$label: ... pinned while the session lives") or diag($al->errstr);
    ok(ended($bo, $s2), "$label: the pinned holding's session ends");
    is(q1($bo, "SELECT dlock.try_lock('f/2', 'b', '1h')"), undef, "$label: pinned: not taken over");
    is(q1($bo, "SELECT dlock.try_xact_lock('f/2')"), undef, "$label: pinned: no xact_lock either");
    $al->commit;
    ok(q1($bo, "SELECT dlock.try_lock('f/2', 'b', '1h')") > $g, "$label: after the pin: taken, a higher fence");
    # Concurrent acquirers at the expiry: exactly one gets it.
    # Opened and taken in one statement (under load, more than the ttl
    # passed between two: 55000 from try_lock).
    my ($s3, $h3) = row($al, q{WITH o AS MATERIALIZED (SELECT dlock.open_session('500ms', 'w-race') AS s)
        SELECT s, dlock.try_lock('f/3', session => s) FROM o});
    ok($h3, "$label: f/3 held in a 500ms session");
    my @w = map { async('bob', "SELECT dlock.lock('f/3', 'b$_', '1h', '3s')") } 1 .. 4;
    my @got = grep { defined } map { result($_) } @w;
    is(scalar(@got), 1, "$label: four waiters at the expiry: one gets it");
    $_->[0]->disconnect for @w;
    q1($al, "SELECT dlock.close_session(?)", $s);
    $bo->do("SELECT dlock.unlock_all('b' || i) FROM generate_series(1, 4) i");
    q1($bo, "SELECT dlock.unlock_all('b')");
}

# Ids are fences: never reused, not after DROP SCHEMA + re-installation.
sub reinstall {
    my ($al, $su, $dir) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-re')");
    my $db = conn('dbo');
    $db->do("DROP SCHEMA dlock CASCADE") or die $db->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d app -f $script 2>&1`;
    is($?, 0, "$label: re-installed") or diag($out);
    $db->disconnect;
    my $al2 = conn('alice');
    ok(q1($al2, "SELECT dlock.open_session('1h', 'w-re')") > $s, "$label: a new session's id is higher than every old one");
    $al2->disconnect;
}
