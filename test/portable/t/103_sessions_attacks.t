#!/usr/bin/perl
# 103_sessions_attacks.t: attacks on the portable edition's sessions
# (ATTACKS.md, class by class): re-entry in another way than taken (campaign,
# shared, permits, lock_all, another session), a renew whose holding ends
# while its keepalive waits, keepalives in old snapshots and rolled-back
# savepoints, read-only transactions, statement_timeout in the middle of
# close_session, close_session racing acquisitions (every isolation
# level) and waits in the session (lock, acquire, lock_all), reap() under
# REPEATABLE READ, SET ROLE and SECURITY DEFINER callers, ids after a
# reload of old data, and a seeded race of a keepalive against acquirers
# at the instant of expiry.
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t; DLOCK_ATTACK_SEED=N replays the
# race (the seed is printed).
# Promises: P1 P2 P4 P5 P6 P8 P12 P13
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

my $seed = $ENV{DLOCK_ATTACK_SEED} // int(rand(2**31));
diag("seed $seed (DLOCK_ATTACK_SEED=$seed replays it)");

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'satt');
    my $al = conn('alice');
    my $bo = conn('bob');
    my $su = conn('admin');
    reentry($al, $bo);
    renew_race($al, $su);
    snapshots($al, $bo);
    read_only($al);
    cut_close($al, $bo);
    close_race($al, $bo, $su);
    close_vs_wait($al, $bo, $su);
    reap_rr($al, $bo);
    set_role($al, $bo, $su);
    srand($seed);
    expiry_race($al, $bo);
    reload($al, $dir);
    $_->disconnect for ($al, $bo, $su);
    $admin->disconnect;
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

# blocked: wait until the backend of an async connection waits for a lock.
sub blocked {
    my ($su, $a) = @_;
    for (1 .. 2000) {
        return 1 if q1($su, "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = ?", $a->[0]{pg_pid});
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

sub events {
    my ($dbh) = @_;
    my @e;
    while (my $n = $dbh->pg_notifies) { push @e, $n->[2] }
    return @e;
}

# A holding is re-entered only the way it was taken (55000): also by
# campaign, shared holdings, permits, lock_all, and in another session.
sub reentry {
    my ($al, $bo) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-re')");
    my $s2 = q1($al, "SELECT dlock.open_session('1h', 'w-re')");
    # campaign: the leader campaigning again gets its term only the way it leads.
    my $t = q1($al, "SELECT dlock.campaign('a/el', 'w-re', lease => '1h')");
    ok($t, "$label: w-re leads a/el with a lease");
    like(err($al, "SELECT dlock.campaign('a/el', session => $s)"), qr/^55000: holder "w-re" holds resource "a\/el" with a lease of its own/,
         "$label: the leader campaigning again in a session: 55000");
    my $t2 = q1($al, "SELECT dlock.campaign('a/el2', session => ?)", $s);
    ok($t2, "$label: w-re leads a/el2 in a session");
    like(err($al, "SELECT dlock.campaign('a/el2', 'w-re', lease => '1h')"), qr/^55000: holder "w-re" holds resource "a\/el2" in session $s/,
         "$label: the leader in a session campaigning with a lease: 55000");
    like(err($al, "SELECT dlock.campaign('a/el2', session => $s2)"), qr/^55000: holder "w-re" holds resource "a\/el2" in session $s/,
         "$label: ... in another session of the same holder: 55000");
    is(q1($al, "SELECT dlock.campaign('a/el2', session => ?)", $s), $t2, "$label: ... in its own session: its term");
    is(q1($al, "SELECT dlock.close_session(?)", $s2), 0, "$label: the other session holds nothing");
    $s2 = q1($al, "SELECT dlock.open_session('1h', 'w-re')");
    # try_lock in another session of the same holder.
    ok(q1($al, "SELECT dlock.try_lock('a/x', session => ?)", $s), "$label: a/x in session 1");
    like(err($al, "SELECT dlock.try_lock('a/x', session => $s2)"), qr/^55000: holder "w-re" holds resource "a\/x" in session $s/,
         "$label: try_lock in session 2: 55000");
    # shared and permits, both ways.
    ok(q1($al, "SELECT dlock.try_lock('a/sh', session => ?, shared => true)", $s), "$label: a shared holding in session 1");
    like(err($al, "SELECT dlock.try_lock('a/sh', session => $s2, shared => true)"), qr/^55000: .* in session $s/,
         "$label: shared, in session 2: 55000");
    like(err($al, "SELECT dlock.try_lock('a/sh', 'w-re', '1h', shared => true)"), qr/^55000: .* in session $s/,
         "$label: shared, with a lease: 55000");
    ok(q1($al, "SELECT dlock.try_acquire('a/pm', 'w-re', 5, 1, '1h')"), "$label: permits with a lease");
    like(err($al, "SELECT dlock.try_acquire('a/pm', NULL, 5, 1, session => $s)"), qr/^55000: .* with a lease of its own/,
         "$label: permits, in a session: 55000");
    # lock_all: one resource held another way: 55000, none of the others taken.
    ok(q1($al, "SELECT dlock.try_lock('a/m3', 'w-re', '1h')"), "$label: a/m3 with a lease");
    like(err($al, "SELECT dlock.lock_all('{a/m1,a/m2,a/m3}', session => $s, wait => '1s')"), qr/^55000:/,
         "$label: lock_all in a session over a leased holding: 55000");
    like(err($al, "SELECT dlock.try_lock_all('{a/m1,a/m2,a/x}', session => $s2)"), qr/^55000:/,
         "$label: try_lock_all in session 2 over session 1's holding: 55000");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource IN ('a/m1', 'a/m2')"), 0, "$label: ... nothing taken");
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s2), 0, "$label: ... session 2 holds nothing");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 3, "$label: session 1 closes its three");
    is(q1($al, "SELECT dlock.close_session(?)", $s2), 0, "$label: session 2 closes none");
    is(q1($al, "SELECT dlock.unlock_all('w-re')"), 3, "$label: the leased ones stay, apart");
}

# renew of a session's holding while its keepalive waits for the session's
# row, and meanwhile the holding is broken (or unlocked): NULL, not the
# session's new expiry.
sub renew_race {
    my ($al, $su) = @_;
    for my $kind ('exclusive', 'shared', 'permits') {
        my $s = q1($al, "SELECT dlock.open_session('1h', 'w-rr')");
        my $r = "rr/$kind";
        my $f = $kind eq 'permits' ? q1($al, "SELECT dlock.try_acquire(?, NULL, 2, 1, session => ?)", $r, $s)
              : q1($al, "SELECT dlock.try_lock(?, session => ?, shared => ?)", $r, $s, $kind eq 'shared' ? 1 : 0);
        ok($f, "$label: $kind holding in a session");
        my $a2 = conn('alice');
        $a2->begin_work;
        ok(q1($a2, "SELECT dlock.keepalive(?)", $s), "$label: $kind: a keepalive in an open transaction");
        my $w = async('alice', "SELECT dlock.renew(?, 'w-rr')", $r);
        ok(blocked($su, $w), "$label: $kind: renew waits for the session's row");
        ok(q1($su, "SELECT dlock.break_lock(?)", $r), "$label: $kind: the holding is broken meanwhile");
        $a2->commit;
        $a2->disconnect;
        ok(wait_ready($w->[0], 20), "$label: $kind: renew returns");
        $w->[0]->pg_result;
        my ($v) = $w->[1]->fetchrow_array;
        $w->[1]->finish;
        is($v, undef, "$label: $kind: renew of the broken holding: NULL");
        $w->[0]->disconnect;
        ok(!q1($al, "SELECT dlock.check(?, ?)", $r, $f), "$label: $kind: ... it is not current");
        is(q1($al, "SELECT dlock.close_session(?)", $s), 0, "$label: $kind: the session holds nothing");
    }
}

# Keepalives in snapshots older than the end, and in savepoints.
sub snapshots {
    my ($al, $bo) = @_;
    # REPEATABLE READ whose snapshot is from before the end.  A ttl of 5s,
    # not 300ms: the snapshot, on another connection, must be taken while
    # the session lives (under load, more than 300ms passed between
    # statements); ended() sleeps until the expiry.  Opened and taken in
    # one statement.
    my ($s, $f) = row($al, q{WITH o AS MATERIALIZED (SELECT dlock.open_session('5s', 'w-snap') AS s)
        SELECT s, dlock.try_lock('sn/1', session => s) FROM o});
    ok($f, "$label: sn/1 held in a session");
    my $a2 = conn('alice');
    $a2->begin_work;
    $a2->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    ok(q1($a2, "SELECT expires_at > clock_timestamp() FROM dlock.sessions WHERE id = ?", $s), "$label: RR snapshot while it lives");
    ok(ended($al, $s), "$label: its ttl passes");
    is(q1($a2, "SELECT dlock.keepalive(?)", $s), undef, "$label: keepalive in the old snapshot: NULL");
    $a2->commit;
    ok(q1($bo, "SELECT dlock.try_lock('sn/1', 'b', '1h')") > $f, "$label: ... taken by another");
    # A takeover committed after the snapshot.
    # Opened and taken in one statement (under load, more than the ttl
    # passed between two: 55000 from try_lock).
    ($s, $f) = row($al, q{WITH o AS MATERIALIZED (SELECT dlock.open_session('300ms', 'w-snap') AS s)
        SELECT s, dlock.try_lock('sn/2', session => s) FROM o});
    ok($f, "$label: sn/2 held in a 300ms session");
    $a2->begin_work;
    $a2->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    q1($a2, "SELECT count(*) FROM dlock.sessions");
    ok(ended($al, $s), "$label: its ttl passes");
    ok(q1($bo, "SELECT dlock.try_lock('sn/2', 'b', '1h')"), "$label: another takes it over");
    my $v = $a2->selectrow_arrayref("SELECT dlock.keepalive(?)", undef, $s);
    if ($a2->err) {
        is($a2->state, '40001', "$label: keepalive after it: a serialization failure");
    } else {
        is($v->[0], undef, "$label: keepalive after it: NULL");
    }
    $a2->rollback;
    is(q1($al, "SELECT dlock.keepalive(?)", $s), undef, "$label: ... never revived");
    # SERIALIZABLE, while it lives: kept alive.
    $s = q1($al, "SELECT dlock.open_session('1h', 'w-snap')");
    $a2->begin_work;
    $a2->do("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE");
    ok(q1($a2, "SELECT dlock.keepalive(?)", $s), "$label: keepalive under SERIALIZABLE");
    ok(q1($a2, "SELECT dlock.try_lock('sn/3', session => ?)", $s), "$label: try_lock in it under SERIALIZABLE");
    $a2->commit;
    is(q1($al, "SELECT dlock.close_session(?)", $s), 1, "$label: ... committed");
    # A keepalive rolled back to a savepoint keeps no lock on the session.
    # A ttl of 5s, not 300ms: the keepalive, on another connection, must
    # come while the session lives (under load, more than 300ms passed
    # between statements); ended() sleeps until the expiry.  Opened and
    # taken in one statement.
    ($s, $f) = row($al, q{WITH o AS MATERIALIZED (SELECT dlock.open_session('5s', 'w-snap') AS s)
        SELECT s, dlock.try_lock('sn/4', session => s) FROM o});
    ok($f, "$label: sn/4 held in a session");
    $a2->begin_work;
    $a2->do("SAVEPOINT a");
    ok(q1($a2, "SELECT dlock.keepalive(?)", $s), "$label: keepalive in a savepoint");
    $a2->do("ROLLBACK TO SAVEPOINT a");
    ok(ended($al, $s), "$label: its old ttl passes (the keepalive was rolled back)");
    ok(q1($bo, "SELECT dlock.try_lock('sn/4', 'b', '1h')") > $f, "$label: taken at once: nothing left locked");
    is(q1($a2, "SELECT dlock.keepalive(?)", $s), undef, "$label: keepalive in the same transaction: NULL");
    $a2->commit;
    $a2->disconnect;
    q1($bo, "SELECT dlock.unlock_all('b')");
}

sub read_only {
    my ($al) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-ro')");
    ok(q1($al, "SELECT dlock.try_lock('ro/1', session => ?)", $s), "$label: a holding");
    my $e0 = q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s);
    for my $set ("SET TRANSACTION READ ONLY", "SET default_transaction_read_only = on") {
        my $a2 = conn('alice');
        $a2->do("SET default_transaction_read_only = on") if $set =~ /default/;
        for my $c ("dlock.open_session('1h', 'w-ro')", "dlock.keepalive($s)", "dlock.close_session($s)",
                   "dlock.try_lock('ro/2', session => $s)", "dlock.try_acquire('ro/3', NULL, 2, session => $s)",
                   "dlock.renew('ro/1', 'w-ro')", "dlock.unlock('ro/1', 'w-ro')") {
            $a2->begin_work;
            $a2->do("SET TRANSACTION READ ONLY") if $set !~ /default/;
            like(err($a2, "SELECT $c"), qr/^25006:/, "$label: $set: $c: 25006");
            $a2->rollback if !$a2->{AutoCommit};
        }
        $a2->disconnect;
    }
    is(q1($al, "SELECT expires_at FROM dlock.sessions WHERE id = ?", $s), $e0, "$label: nothing changed");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 1, "$label: closed");
}

# statement_timeout cuts close_session while it waits for a pin on its
# second holding, after it has released the first: nothing changed.
sub cut_close {
    my ($al, $bo) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-cut')");
    my %f = map { $_ => q1($al, "SELECT dlock.try_lock(?, session => ?)", $_, $s) } qw(cut/a cut/b);
    ok(q1($al, "SELECT dlock.try_acquire('cut/c', NULL, 3, 1, session => ?)", $s), "$label: three holdings");
    $bo->do("LISTEN \"" . q1($bo, "SELECT dlock.channel(?)", $_) . "\"") for qw(cut/a cut/b cut/c);
    my $pin = conn('alice');
    $pin->begin_work;
    $pin->do("SELECT dlock.assert_fence('cut/b', $f{'cut/b'})") or die $pin->errstr;
    my $a2 = conn('alice');
    $a2->do("SET statement_timeout = '300ms'");
    like(err($a2, "SELECT dlock.close_session($s)"), qr/^57014:/, "$label: close_session cut by statement_timeout");
    $pin->commit;
    $pin->disconnect;
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = ?", $s), 3, "$label: ... all three holdings stay");
    ok(q1($al, "SELECT dlock.check('cut/a', ?)", $f{'cut/a'}), "$label: ... the first one too");
    ok(q1($al, "SELECT dlock.keepalive(?)", $s), "$label: ... the session lives");
    sleep 0.1;
    q1($bo, "SELECT 1");
    is(scalar(events($bo)), 0, "$label: ... no event sent");
    $a2->do("SET statement_timeout = 0");
    $a2->do("SET lock_timeout = '200ms'");
    my $h = conn('alice');
    $h->begin_work;
    ok(q1($h, "SELECT dlock.keepalive(?)", $s), "$label: a keepalive in flight");
    like(err($a2, "SELECT dlock.close_session($s)"), qr/^55P03:/, "$label: close_session cut by lock_timeout");
    $h->commit;
    $h->disconnect;
    is(q1($a2, "SELECT dlock.close_session(?)", $s), 3, "$label: then it closes all three");
    $a2->disconnect;
    sleep 0.1;
    q1($bo, "SELECT 1");
    is(scalar(events($bo)), 3, "$label: ... with three events");
    $bo->do("UNLISTEN *");
}

# close_session racing acquisitions in the session: an acquisition in
# flight (its transaction open) is waited for and released with the others,
# the closer in READ COMMITTED or REPEATABLE READ (default_transaction_
# isolation, autocommit: its snapshot is older than the acquisition).
# Else its holding, invisible to the close, would end unannounced.
sub close_race {
    my ($al, $bo, $su) = @_;
    for my $iso ('read committed', 'repeatable read', 'serializable') {
        my $s = q1($al, "SELECT dlock.open_session('1h', 'w-cr')");
        my $r = "cr/" . ($iso =~ s/ /-/r);
        $bo->do("LISTEN \"" . q1($bo, "SELECT dlock.channel(?)", $r) . "\"");
        my $acq = conn('alice');
        $acq->begin_work;
        my $f = q1($acq, "SELECT dlock.try_lock(?, session => ?)", $r, $s);
        ok($f, "$label: $iso: an acquisition in flight");
        my $h = conn('alice');
        $h->do("SET default_transaction_isolation = '$iso'");
        $h->do("SET statement_timeout = '60s'");
        my $sth = $h->prepare("SELECT dlock.close_session(?)", { pg_async => PG_ASYNC });
        $sth->execute($s);
        my $c = [$h, $sth];
        ok(blocked($su, $c), "$label: $iso: close_session waits for it");
        $acq->commit;
        $acq->disconnect;
        ok(wait_ready($h, 20), "$label: $iso: close_session returns");
        $h->pg_result;
        if ($h->err) {
            # Under REPEATABLE READ and SERIALIZABLE: 40001, nothing done.
            is($h->state, '40001', "$label: $iso: a serialization failure (retry)");
            ok(q1($al, "SELECT dlock.check(?, ?)", $r, $f), "$label: $iso: ... the holding stays");
            is(q1($h, "SELECT dlock.close_session(?)", $s), 1, "$label: $iso: the retry releases it");
        } else {
            my ($n) = $sth->fetchrow_array;
            $sth->finish;
            is($n, 1, "$label: $iso: it released the acquisition that was in flight");
        }
        $h->disconnect;
        is(q1($al, "SELECT count(*) FROM dlock.sessions WHERE id = ?", $s), 0, "$label: $iso: the session is gone");
        ok(q1($bo, "SELECT dlock.try_lock(?, 'b', '1h')", $r) > $f, "$label: $iso: taken by another at once");
        sleep 0.1;
        q1($bo, "SELECT 1");
        is(join(',', map { /"event":"(\w+)"/ ? $1 : $_ } events($bo)), 'released', "$label: $iso: one released event");
        $bo->do("UNLISTEN *");
        q1($bo, "SELECT dlock.unlock_all('b')");
    }
}

# close_session while lock() waits in the session (no limit) for a
# resource another holds: the close does not wait for the waiter (it would
# until the resource frees); the waiter's next attempt raises 55000.
sub close_vs_wait {
    my ($al, $bo, $su) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'w-cw')");
    ok(q1($al, "SELECT dlock.try_lock('cw/mine', session => ?)", $s), "$label: a holding in the session");
    ok(q1($bo, "SELECT dlock.try_lock('cw/1', 'b', '1h')"), "$label: bob holds cw/1");
    ok(q1($bo, "SELECT dlock.try_acquire('cw/2', 'b', 1, 1, '1h')"), "$label: bob holds cw/2's only permit");
    my @w = (async('alice', "SELECT dlock.lock('cw/1', session => ?)", $s),
             async('alice', "SELECT dlock.acquire('cw/2', NULL, 1, 1, session => ?, wait => NULL)", $s),
             async('alice', "SELECT dlock.lock_all('{cw/free,cw/1}', session => ?)", $s));
    for my $w (@w) {
        my $waiting = 0;
        for (1 .. 2000) {
            last if ($waiting = q1($su, "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = ?", $w->[0]{pg_pid}));
            sleep 0.01;
        }
        ok($waiting, "$label: a wait in the session polls");
    }
    my $c = conn('alice');
    $c->do("SET statement_timeout = '20s'");
    my $v = $c->selectrow_arrayref("SELECT dlock.close_session(?)", undef, $s);
    is($c->err ? $c->state : $v->[0], 1, "$label: close_session does not wait for the waits (releases the one holding)");
    $c->disconnect;
    for my $w (@w) {
        ok(wait_ready($w->[0], 20), "$label: the wait ends");
        $w->[0]->pg_result;
        is($w->[0]->state, '55000', "$label: ... with 55000 (the session has ended)");
        $w->[0]->disconnect;
    }
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 'cw/free' AND holder IS NOT NULL"), 0,
       "$label: lock_all took nothing");
    is(q1($bo, "SELECT dlock.unlock_all('b')"), 2, "$label: bob's holdings untouched");
}

# reap() under REPEATABLE READ (default_transaction_isolation) whose
# snapshot is older than an acquisition in the session: it must not remove
# the session as if it held nothing.  Else the holding, its session gone,
# would lose its lock-delay (available at once instead of an hour after
# the session's end).
sub reap_rr {
    my ($al, $bo) = @_;
    # A ttl of 5s, not 400ms: the reaper's snapshot comes between the open
    # and the acquisition (two statements of their own), and the
    # acquisition must come while the session lives (under load, more than
    # 400ms passed between statements); ended() sleeps until the expiry.
    my $s = q1($al, "SELECT dlock.open_session('5s', 'w-rp')");
    my $rp = conn('bob');
    $rp->do("SET default_transaction_isolation = 'repeatable read'");
    $rp->begin_work;
    q1($rp, "SELECT count(*) FROM dlock.sessions");     # its snapshot
    my $f = q1($al, "SELECT dlock.try_lock('rp/1', session => ?, lock_delay => '1h')", $s);
    ok($f, "$label: a holding with a lock-delay, after the reaper's snapshot");
    ok(ended($al, $s), "$label: the session's ttl passes");
    my $v = $rp->selectrow_arrayref("SELECT dlock.reap()");
    ok(!$rp->err || $rp->state eq '40001', "$label: reap under REPEATABLE READ: " . ($rp->err ? $rp->state : 'done'));
    $rp->err ? $rp->rollback : $rp->commit;
    $rp->disconnect;
    is(q1($bo, "SELECT dlock.try_lock('rp/1', 'b', '1h')"), undef, "$label: the lock-delay still keeps rp/1 busy");
    ok(q1($bo, "SELECT available_at > clock_timestamp() + interval '50 minutes' FROM dlock.locks WHERE resource = 'rp/1'"),
       "$label: ... until an hour after the session's end");
    is(q1($bo, "SELECT dlock.reap()"), 1, "$label: a reap in READ COMMITTED ends it");
    is(q1($bo, "SELECT count(*) FROM dlock.sessions WHERE id = ?", $s), 0, "$label: ... and removes the session");
    is(q1($bo, "SELECT dlock.try_lock('rp/1', 'b', '1h')"), undef, "$label: the lock-delay holds after it");
}

sub set_role {
    my ($al, $bo, $su) = @_;
    $su->do("GRANT alice TO bob");
    my $b2 = conn('bob');
    $b2->do("SET ROLE alice");
    my $s = q1($b2, "SELECT dlock.open_session('1h', 'w-sr')");
    is(q1($b2, "SELECT owner::text FROM dlock.sessions WHERE id = ?", $s), 'alice', "$label: opened under SET ROLE alice: alice's");
    ok(q1($b2, "SELECT dlock.try_lock('sr/1', session => ?)", $s), "$label: ... a holding in it");
    $b2->do("RESET ROLE");
    like(err($b2, "SELECT dlock.keepalive($s)"), qr/^42501:/, "$label: after RESET ROLE: keepalive 42501");
    like(err($b2, "SELECT dlock.try_lock('sr/2', session => $s)"), qr/^42501:/, "$label: ... acquiring in it 42501");
    like(err($b2, "SELECT dlock.renew('sr/1', 'w-sr')"), qr/^42501:/, "$label: ... renew 42501");
    like(err($b2, "SELECT dlock.close_session($s)"), qr/^42501:/, "$label: ... close 42501");
    # A function of alice's, SECURITY DEFINER, called by bob: bob's.
    $su->do("CREATE SCHEMA att AUTHORIZATION alice") or die $su->errstr;
    $al->do("CREATE FUNCTION att.ka(bigint) RETURNS timestamptz LANGUAGE sql SECURITY DEFINER AS 'SELECT dlock.keepalive(\$1)'")
        or die $al->errstr;
    $al->do("GRANT USAGE ON SCHEMA att TO bob") or die $al->errstr;
    like(err($bo, "SELECT att.ka($s)"), qr/^42501:/, "$label: bob through alice's SECURITY DEFINER function: 42501");
    $b2->disconnect;
    $su->do("REVOKE alice FROM bob");
    is(q1($al, "SELECT dlock.close_session(?)", $s), 1, "$label: alice closes it");
    $su->do("DROP SCHEMA att CASCADE");
}

# Old data reloaded (a backup restored over the database): a session id
# handed out after the backup is never handed out again.
sub reload {
    my ($al, $dir) = @_;
    my $db = conn('dbo');
    my $old = q1($al, "SELECT dlock.open_session('1h', 'w-old')");
    my %saved;
    $saved{seq} = [ $db->selectrow_array("SELECT last_value, is_called FROM dlock.fences") ];
    my @tables = qw(portable leases fence_epoch fence_epoch_seal session_rows);
    for my $t (@tables) {
        $db->do("COPY dlock.$t TO STDOUT") or die $db->errstr;
        my ($line, @lines);
        push @lines, $line while $db->pg_getcopydata($line) >= 0;
        $saved{$t} = \@lines;
    }
    my @later = map { q1($al, "SELECT dlock.open_session('1h', 'w-later')") } 1 .. 3;
    $db->do("DROP SCHEMA dlock CASCADE") or die $db->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d app -f $script 2>&1`;
    is($?, 0, "$label: re-installed") or diag($out);
    $db->do("SELECT setval('dlock.fences', ?, ?)", undef, @{ $saved{seq} }) or die $db->errstr;
    for my $t (@tables) {
        $db->do("DELETE FROM dlock.$t") or die $db->errstr;
        $db->do("COPY dlock.$t FROM STDIN") or die $db->errstr;
        $db->pg_putcopydata($_) for @{ $saved{$t} };
        $db->pg_putcopyend or die $db->errstr;
    }
    $db->disconnect;
    my $a2 = conn('alice');
    ok(q1($a2, "SELECT dlock.keepalive(?)", $old), "$label: the session of the backup is back");
    is(q1($a2, "SELECT dlock.keepalive(?)", $later[-1]), undef, "$label: one opened after it is unknown: NULL");
    my @new = map { q1($a2, "SELECT dlock.open_session('1h', 'w-new')") } 1 .. 3;
    ok($new[0] > $later[-1], "$label: new ids are above every id handed out after the backup");
    is(q1($a2, "SELECT count(*) FROM dlock.sessions WHERE id = ANY (?)", [@later]), 0, "$label: none of them reused");
    $a2->do("SELECT dlock.close_session(id) FROM dlock.sessions");
    $a2->disconnect;
}

# A keepalive and acquirers at the instant of expiry, seeded: never both
# win (no acquisition by another before the expiry the keepalive returned).
sub expiry_race {
    my ($al, $bo) = @_;
    my $rounds = 12;
    my $both = 0;
    my ($kept, $taken) = (0, 0);
    for my $i (1 .. $rounds) {
        my $r = "race/$i";
        # One statement: under load, more than the ttl passed between two
        # (the session had ended: 55000 from try_lock).  Its expiry is read
        # off the clock right after open_session (within microseconds: the
        # statement's snapshot cannot see the session's row).
        my ($s, $exp, $f) = row($al, q{WITH o AS MATERIALIZED
            (SELECT dlock.open_session('400ms', 'w-race') AS s, clock_timestamp() + interval '400ms' AS e)
            SELECT s, e, dlock.try_lock(?, session => s) FROM o}, $r);
        ok($f, "$label: round $i: the session holds $r");
        # The keepalive at a random offset from the expiry (-60 .. +60 ms).
        my $off = int(rand(121)) - 60;
        my @w = map {
            async('bob', "SELECT dlock.lock(?, 'b$_', '1h', '2s')", $r)
        } 1 .. 2;
        my $ka = async('alice', "SELECT dlock.keepalive(?) FROM (SELECT pg_sleep(greatest(0, extract(epoch FROM ?::timestamptz"
                                . " + ?::integer * interval '1 ms' - clock_timestamp())))) x", $s, $exp, $off);
        ok(wait_ready($ka->[0], 20), "$label: round $i: keepalive returns");
        $ka->[0]->pg_result;
        my ($e) = $ka->[1]->fetchrow_array;
        $ka->[1]->finish;
        $ka->[0]->disconnect;
        my @got = map { result($_) } @w;
        $_->[0]->disconnect for @w;
        my $won = grep { defined } @got;
        ok($won <= 1, "$label: round $i: at most one acquirer wins");
        if (defined $e) {
            $kept++;
            my $early = q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = ? AND holder <> 'w-race' AND acquired_at < ?::timestamptz",
                           $r, $e);
            $both++ if $early;
        }
        $taken++ if $won;
        q1($bo, "SELECT dlock.unlock_all('b' || i) FROM generate_series(1, 2) i");
        q1($al, "SELECT dlock.close_session(?)", $s);
    }
    is($both, 0, "$label: never both a keepalive and an earlier takeover (kept $kept, taken $taken of $rounds)");
}
