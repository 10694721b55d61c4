#!/usr/bin/perl
# 035_kinds.t: the portable edition's [kinds] between sessions (the calls,
# results and SQLSTATEs of one session are test/sql/shared.sql,
# semaphore.sql and multi.sql, run by 050_regress.t), on every server
# 010_core.t uses, by non-superuser roles: a writer waiting in lock()
# keeps new readers out and is served when the last reader goes; two
# shared holders waiting to upgrade get 40P01, not a hang, and the other
# upgrade is served; a waiter killed or cancelled in the middle gives its
# marks back; an expired shared holding pinned by assert_fence is not
# taken over; a released permit serves a waiter in acquire(); lock_all
# callers naming the same resources in other orders never deadlock and
# never hold together.
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P5 P9 P10 P11
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
    my ($dir, $admin) = start_server(@$s, 'kinds');
    my $al = conn('alice');
    my $bo = conn('bob');
    writers_first($al, $bo, $admin);
    upgrades($al, $admin);
    pinned($al, $bo);
    permits($al, $bo);
    lock_all($al);
    $_->disconnect for ($al, $bo, $admin);
    stop_server($s->[1], $dir);
}
done_testing();

# sleeping: is the backend pid waiting (polling) now?  No timing: the
# session's own state, as the server shows it.
sub sleeping {
    my ($pid) = @_;
    my $su = conn('admin');
    my $ok = 0;
    for (1 .. 2000) {
        $ok = q1($su, "SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND wait_event = 'PgSleep'", $pid);
        last if $ok;
        sleep 0.005;
    }
    $su->disconnect;
    return $ok;
}

sub writers_first {
    my ($al, $bo, $admin) = @_;
    ok(defined q1($al, "SELECT dlock.try_lock('k/w', 'r1', '1h', shared => true)"), "$label: r1 reads");
    my $w = async('bob', "SELECT dlock.lock('k/w', 'w', '1h', '30s')");
    my $wpid = $w->[0]->{pg_pid};
    ok(sleeping($wpid), "$label: a writer waits in lock()");
    is(q1($al, "SELECT dlock.try_lock('k/w', 'r2', '1h', shared => true)"), undef,
       "$label: while a writer waits, a new reader is kept out");
    ok(defined q1($al, "SELECT dlock.try_lock('k/w', 'r1', '1h', shared => true)"), "$label: ... the reader's re-entry is not");
    q1($al, "SELECT dlock.unlock('k/w', 'r1')");
    q1($al, "SELECT dlock.unlock('k/w', 'r1')");
    ok(defined result($w), "$label: the last reader gone, the writer is served");
    is(q1($al, "SELECT string_agg(holder || ' ' || mode, ',') FROM dlock.locks WHERE resource = 'k/w'"), 'w exclusive',
       "$label: ... and holds alone");
    is(q1($al, "SELECT dlock.try_lock('k/w', 'r2', '1h', shared => true)"), undef, "$label: a reader is refused while it holds");
    is(q1($bo, "SELECT dlock.unlock('k/w', 'w')"), 0, "$label: the writer releases");
    ok(defined q1($al, "SELECT dlock.try_lock('k/w', 'r2', '1h', shared => true)"), "$label: then readers come in");

    # A writer killed while it waits gives its mark back with its session.
    $w = async('bob', "SELECT dlock.lock('k/w', 'w2', '1h')");
    $wpid = $w->[0]->{pg_pid};
    ok(sleeping($wpid), "$label: another writer waits");
    is(q1($al, "SELECT dlock.try_lock('k/w', 'r3', '1h', shared => true)"), undef, "$label: ... keeping r3 out");
    ok(q1($admin, "SELECT pg_terminate_backend(?)", $wpid), "$label: the waiting writer's backend is killed");
    my $in;
    for (1 .. 500) { $in = q1($al, "SELECT dlock.try_lock('k/w', 'r3', '1h', shared => true)"); last if defined $in; sleep 0.01 }
    ok(defined $in, "$label: ... and readers come in again");
    # Cancelled likewise.
    $w = async('bob', "SELECT dlock.lock('k/w', 'w3', '1h')");
    ok(sleeping($w->[0]->{pg_pid}), "$label: a third writer waits");
    $w->[0]->pg_cancel;
    is($w->[0]->state, '57014', "$label: ... is cancelled");
    ok(defined q1($al, "SELECT dlock.try_lock('k/w', 'r4', '1h', shared => true)"), "$label: ... and readers come in again");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 'k/w' AND mode = 'exclusive'"), 0,
       "$label: no writer holds it");
    $w->[0]->disconnect;
    q1($al, "SELECT dlock.unlock_all(h) FROM unnest(ARRAY['r2', 'r3', 'r4']) h");
}

sub upgrades {
    my ($al, $admin) = @_;
    my $a = conn('alice');
    my $b = conn('alice');
    my $fa = q1($a, "SELECT dlock.try_lock('k/u', 'A', '1h', shared => true)");
    my $fb = q1($b, "SELECT dlock.try_lock('k/u', 'B', '1h', shared => true)");
    ok($fa && $fb, "$label: A and B share k/u");
    is(q1($a, "SELECT dlock.try_lock('k/u', 'A', '1h')"), undef, "$label: try_lock's upgrade beside B: NULL");
    my $ua = async('alice', "SELECT dlock.lock('k/u', 'A', '1h', '30s')");
    ok(sleeping($ua->[0]->{pg_pid}), "$label: A waits to upgrade");
    is(err($b, "SELECT dlock.lock('k/u', 'B', '1h', '30s')"), '40P01: deadlock detected',
       "$label: B waiting to upgrade too: 40P01 at once, not a hang");
    is(q1($b, "SELECT dlock.unlock('k/u', 'B')"), 0, "$label: B lets go of its shared lock");
    my $fx = result($ua);
    ok(defined $fx && $fx > $fb, "$label: A's upgrade is served, with a new fence");
    is(q1($al, "SELECT string_agg(holder || ' ' || mode, ',' ORDER BY mode) FROM dlock.locks WHERE resource = 'k/u'"),
       'A exclusive,A shared', "$label: A holds it exclusive and shared");
    ok(q1($al, "SELECT dlock.check('k/u', ?) AND dlock.check('k/u', ?)", $fa, $fx), "$label: both of A's fences are current");
    is(q1($al, "SELECT dlock.unlock_all('A')"), 2, "$label: unlock_all releases both");
    # The marks went with the waits: a new reader and a new upgrade work.
    ok(defined q1($b, "SELECT dlock.try_lock('k/u', 'B', '1h', shared => true)"), "$label: B reads again");
    ok(defined q1($b, "SELECT dlock.lock('k/u', 'B', '1h', '5s')"), "$label: B's lock() upgrades alone");
    q1($b, "SELECT dlock.unlock_all('B')");
    $ua->[0]->disconnect;
    $_->disconnect for ($a, $b);
}

sub pinned {
    my ($al, $bo) = @_;
    my $f = q1($al, "SELECT dlock.try_lock('k/p', 'r', '300ms', shared => true)");
    $al->begin_work;
    $al->do("SELECT dlock.assert_fence('k/p', ?)", undef, $f);
    is($al->err, undef, "$label: assert_fence pins r's shared holding");
    # Wait for the lease to run out while the pin lasts (the server's clock).
    1 while !q1($bo, "SELECT expired FROM dlock.locks WHERE resource = 'k/p'") && sleep 0.05;
    is(q1($bo, "SELECT dlock.try_lock('k/p', 'w', '1h')"), undef, "$label: expired but pinned: a writer cannot take it over");
    is(q1($bo, "SELECT dlock.renew('k/p', 'r')"), undef, "$label: ... nor is it renewed");
    $al->commit;
    ok(defined q1($bo, "SELECT dlock.try_lock('k/p', 'w', '1h')"), "$label: the pin gone, the writer takes it");
    is(q1($bo, "SELECT dlock.reap()"), 1, "$label: reap removes the expired shared holding");
    is(q1($bo, "SELECT dlock.unlock('k/p', 'w')"), 0, "$label: released");
    # Another role cannot pin, renew or release it.
    $f = q1($al, "SELECT dlock.try_lock('k/p', 'r', '1h', shared => true)");
    like(err($bo, "SELECT dlock.assert_fence('k/p', ?)", $f), qr/^42501/, "$label: bob cannot pin alice's shared holding");
    like(err($bo, "SELECT dlock.renew('k/p', 'r')"), qr/^42501/, "$label: ... nor renew it");
    ok(q1($bo, "SELECT dlock.check('k/p', ?)", $f), "$label: ... but check() sees it");
    q1($al, "SELECT dlock.unlock('k/p', 'r')");
}

sub permits {
    my ($al, $bo) = @_;
    my $l = conn('bob');
    $l->do("LISTEN " . q1($l, "SELECT dlock.channel('k/s')"));
    ok(defined q1($al, "SELECT dlock.try_acquire('k/s', 'p1', 3, 2, '1h')"), "$label: p1 holds 2 of 3");
    ok(defined q1($al, "SELECT dlock.try_acquire('k/s', 'p2', 3, 1, '1h')"), "$label: p2 holds 1 of 3");
    my $w = async('bob', "SELECT dlock.acquire('k/s', 'p3', 3, 2, '1h', wait => '30s')");
    ok(sleeping($w->[0]->{pg_pid}), "$label: p3 waits for 2 permits");
    is(q1($al, "SELECT dlock.unlock('k/s', 'p2')"), 0, "$label: p2 returns 1: still not enough");
    ok(sleeping($w->[0]->{pg_pid}), "$label: ... p3 still waits");
    my $f1 = q1($al, "SELECT fence FROM dlock.locks WHERE resource = 'k/s' AND holder = 'p1'");
    is(q1($al, "SELECT dlock.unlock('k/s', 'p1')"), 0, "$label: p1 returns its 2");
    ok(defined result($w), "$label: ... and p3 is served");
    is(q1($al, "SELECT sum(permits) FROM dlock.locks WHERE resource = 'k/s'"), 2, "$label: 2 permits held");
    my @ev;
    while (my $n = $l->pg_notifies) { push @ev, $n->[2] }
    for (1 .. 100) { last if @ev >= 2; sleep 0.01; $l->ping; while (my $n = $l->pg_notifies) { push @ev, $n->[2] } }
    ok((grep { $_ eq qq({"event":"released","resource":"k/s","fence":$f1}) } @ev),
       "$label: a release of permits sends the released event with the holding's fence");
    q1($bo, "SELECT dlock.unlock('k/s', 'p3')");
    $_->disconnect for ($l, $w->[0]);
}

sub lock_all {
    my ($al) = @_;
    # Two callers naming the same resources in other orders, again and
    # again, each holding both for a moment and checking the other does
    # not: no deadlock, never together.
    my @pids;
    for my $order (['k/a', 'k/b', 'k/c'], ['k/c', 'k/b', 'k/a']) {
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            my $h = conn('alice');
            my $me = $order->[0];
            my $bad = 0;
            for (1 .. 30) {
                my $f = q1($h, "SELECT dlock.lock_all(?::text[], ?, '1h', wait => '20s')", '{' . join(',', @$order) . '}', $me);
                $bad++ unless $f;
                $bad++ if q1($h, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'k/_' AND holder <> ? AND NOT expired", $me);
                $bad++ unless q1($h, "SELECT dlock.unlock_all(?)", $me) == 3;
            }
            exit($bad ? 1 : 0);
        }
        push @pids, $pid;
    }
    for my $pid (@pids) {
        waitpid($pid, 0);
        is($? >> 8, 0, "$label: lock_all in another order: 30 times all three, never beside the other, no deadlock");
    }
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'k/_'"), 0, "$label: nothing left held");
}
