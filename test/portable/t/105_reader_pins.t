# 105_reader_pins.t: a reader's pin keeps no reader out.  An exclusive
# holding that has run out and is not reaped yet is passed over by a new
# reader with the resource's row locked FOR UPDATE (kinds.sql); until stop
# 53, assert_fence of a shared holding locked that row FOR KEY SHARE too,
# so any reader's pin kept every new reader out while it lasted (review
# of 2026-11-30).  A pin of the exclusive holding still keeps readers out
# until its transaction ends, and a pin of a shared holding keeps its
# holder's upgrade out.  A reader's lock() without a limit waits for that
# pin in the lock manager: until stop 54 it polled, and a cycle through
# the pinner lasted until statement_timeout (4).  The holding's own holder
# is no reader while it is pinned (5), and a reader in a transaction that
# pins it too waits for the other pin (6), as in C (071_reader_pins);
# lock_all too (7), and a writer's lock() and xact_lock() (8); a writer
# waiting behind readers beside the ended holding spends no transaction
# ids (9).
# Promises: P5 P9
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;
use DBD::Pg qw(:async);

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

# ended: resource r, with an exclusive holding of bob's that has run out.
sub ended {
    my ($bob, $r) = @_;
    q1($bob, "SELECT dlock.try_lock(?, 'e', '100ms')", $r);
    sleep 0.3;
    is(q1($bob, "SELECT count(*) FROM dlock.locks WHERE resource = ? AND mode = 'exclusive' AND expired", $r), 1,
       "$label: $r: bob's exclusive holding has run out, unreaped");
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'reader-pins');
    my $bob = conn('bob');
    my $alice = conn('alice');
    my $p = conn('alice');

    # 1. Beside an ended exclusive holding, a reader pins its own holding.
    ended($bob, 'rp/a');
    my $fa = q1($alice, "SELECT dlock.try_lock('rp/a', 'A', '1h', shared => true)");
    ok(defined $fa, "$label: rp/a: alice reads beside the ended exclusive holding");
    $p->begin_work;
    $p->do("SELECT dlock.assert_fence('rp/a', ?)", undef, $fa);
    is($p->err, undef, "$label: rp/a: alice pins her shared holding");
    ok(defined q1($bob, "SELECT dlock.try_lock('rp/a', 'B', '1h', shared => true)"),
       "$label: rp/a: bob still joins as a reader (try_lock)");
    ok(defined q1($bob, "SELECT dlock.lock('rp/a', 'C', '1h', '3s', shared => true)"),
       "$label: rp/a: ... and lock()");
    $p->commit;

    # 2. A pin of the exclusive holding keeps readers out until it ends.
    # (The pinners connect before the 1 s leases are taken: a connection
    # made after one, 0.5-2 s now and then on a loaded machine, came once
    # it had run out.)
    my $bp = conn('bob');
    my $bq = conn('bob');
    $bq->do("SET statement_timeout = '20s'");
    my $fx = q1($bob, "SELECT dlock.try_lock('rp/x', 'x', '1s')");
    $bp->begin_work;
    $bp->do("SELECT dlock.assert_fence('rp/x', ?)", undef, $fx);
    is($bp->err, undef, "$label: rp/x: bob pins his exclusive holding");
    sleep 1.3;
    ok(!defined q1($alice, "SELECT dlock.try_lock('rp/x', 'A', '1h', shared => true)"),
       "$label: rp/x: run out but pinned: no reader");
    $bp->commit;
    ok(defined q1($alice, "SELECT dlock.try_lock('rp/x', 'A', '1h', shared => true)"),
       "$label: rp/x: the pin gone, the reader gets it");

    # 3. A pin of a shared holding keeps its holder's upgrade out, as in
    # C (review of stop 53: the upgrade passed once only the exclusive
    # holding's pin locked the resource's row).
    my $fs = q1($alice, "SELECT dlock.try_lock('rp/u', 'H', '1h', shared => true)");
    $p->begin_work;
    $p->do("SELECT dlock.assert_fence('rp/u', ?)", undef, $fs);
    is($p->err, undef, "$label: rp/u: alice pins her shared holding");
    ok(!defined q1($alice, "SELECT dlock.try_lock('rp/u', 'H', '1h')"),
       "$label: rp/u: her upgrade to exclusive waits for the pin (try_lock NULL)");
    ok(!defined q1($alice, "SELECT dlock.lock('rp/u', 'H', '1h', '300ms')"),
       "$label: rp/u: ... lock() times out");
    $p->commit;
    ok(defined q1($alice, "SELECT dlock.try_lock('rp/u', 'H', '1h')"),
       "$label: rp/u: the pin gone, the upgrade goes through");

    # 4. A reader's lock() without a limit behind a pin of the ended
    # exclusive holding: a cycle through the pinner (it waits for a row
    # the reader's transaction updated) is a deadlock PostgreSQL finds.
    # cycle R CALL: bob's exclusive holding of R runs out while the pinner
    # ($pk) pins it; $rk updates a row, then runs CALL (no limit), and the
    # pinner waits for that row: 40P01 for the pinner, and CALL gets R.
    my $app = conn('admin');
    $app->do("CREATE TABLE IF NOT EXISTS public.t4 (id int PRIMARY KEY, v int)");
    $app->do("INSERT INTO public.t4 VALUES (1, 0) ON CONFLICT DO NOTHING");
    my $pk = conn('admin');
    $pk->do("SET deadlock_timeout = '100ms'");     # the pinner finds the cycle
    my $rk = conn('admin');
    $rk->do("SET statement_timeout = '20s'");
    $rk->do("SET deadlock_timeout = '10s'");
    my $cycle = sub {
        my ($r, $call) = @_;
        my $f = q1($bob, "SELECT dlock.try_lock(?, 'x', '1s')", $r);
        $pk->begin_work;
        $pk->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $f);
        is($pk->err, undef, "$label: $r: the pinner pins bob's exclusive holding");
        sleep 1.3;
        $rk->begin_work;
        $rk->do("UPDATE public.t4 SET v = v + 1 WHERE id = 1");
        my $sth = $rk->prepare($call, { pg_async => PG_ASYNC });
        $sth->execute;
        # Blocked by the pinner before the pinner's UPDATE (a fixed sleep was
        # too short under load: the pinner then found no cycle).
        ok(blocked_by($app, $rk, $pk) && !$rk->pg_ready, "$label: $r: $call waits for the pinner");
        $pk->do("UPDATE public.t4 SET v = v + 1 WHERE id = 1");
        is($pk->err ? $pk->state : 'no error', '40P01', "$label: $r: the pinner waiting for it: 40P01");
        $pk->rollback;
        ok(wait_ready($rk, 20), "$label: $r: it answers");
        $rk->pg_result;
        is($rk->err ? $rk->state : 'no error', 'no error', "$label: $r: and gets it, no timeout");
        $rk->rollback;
        $sth->finish;
    };
    $cycle->('rp/k', "SELECT dlock.lock('rp/k', 'r', '1h', shared => true)");

    # 5. Its own holder is no reader while another transaction pins it.
    my $fh = q1($bob, "SELECT dlock.try_lock('rp/h', 'H', '1s')");
    $bp->begin_work;
    $bp->do("SELECT dlock.assert_fence('rp/h', ?)", undef, $fh);
    sleep 1.3;
    ok(!defined q1($bob, "SELECT dlock.try_lock('rp/h', 'H', '1h', shared => true)"),
       "$label: rp/h: its holder cannot read while another transaction pins it");
    $bp->commit;
    ok(defined q1($bob, "SELECT dlock.try_lock('rp/h', 'H', '1h', shared => true)"),
       "$label: rp/h: the pin gone, its holder reads");

    # 6. Two transactions pin the ended exclusive holding: a reader's
    # lock() in one waits for the other's pin, then reads.
    my $fw = q1($bob, "SELECT dlock.try_lock('rp/w', 'x', '1s')");
    $_->begin_work for $bp, $bq;
    $_->do("SELECT dlock.assert_fence('rp/w', ?)", undef, $fw) for $bp, $bq;
    sleep 1.3;
    my $sw = $bq->prepare("SELECT dlock.lock('rp/w', 'b', '1h', shared => true)", { pg_async => PG_ASYNC });
    $sw->execute;
    sleep 0.5;
    ok(!$bq->pg_ready, "$label: rp/w: a reader in one pinner waits for the other pin");
    $bp->commit;
    ok(wait_ready($bq, 20), "$label: rp/w: it answers once the other pin is gone");
    $bq->pg_result;
    is($bq->err ? $bq->state : 'no error', 'no error', "$label: rp/w: and reads (no 40P01)");
    $bq->commit;
    $sw->finish;

    # 7. lock_all of readers, 8. a writer's lock() and xact_lock(): the
    # same cycle is found (the C extension waits for pins in the lock
    # manager).
    $cycle->('rp/l2', "SELECT dlock.lock_all(ARRAY['rp/l1', 'rp/l2'], 'r', '1h', shared => true)");
    $cycle->('rp/e/lock', "SELECT dlock.lock('rp/e/lock', 'w', '1h')");
    $cycle->('rp/e/xact', "SELECT dlock.xact_lock('rp/e/xact')");

    # 9. Readers passed over an ended exclusive holding (its row stays
    # until reaped); a writer waits behind them.  Its polls take no
    # transaction id (the probe for a pin is not made: review of stop 54,
    # it took one per poll).
    my $fv = q1($bob, "SELECT dlock.try_lock('rp/v', 'x', '100ms')");
    sleep 0.3;
    ok(defined q1($alice, "SELECT dlock.try_lock('rp/v', 'A', '1h', shared => true)"),
       "$label: rp/v: a reader passes over the ended exclusive holding");
    # A probe's subtransaction id gives the waiter's transaction one too
    # (backend_xid); autovacuum's ids do not count here.
    my $sv = $bq->prepare("SELECT dlock.lock('rp/v', 'W', '1h')", { pg_async => PG_ASYNC });
    $sv->execute;
    sleep 2;
    ok(!$bq->pg_ready, "$label: rp/v: the writer waits behind the reader");
    is(q1($app, "SELECT coalesce(backend_xid::text, 'none') FROM pg_stat_activity WHERE pid = ?", $bq->{pg_pid}),
       'none', "$label: rp/v: 2 s of its polls took no transaction id");
    q1($alice, "SELECT dlock.unlock('rp/v', 'A')");
    ok(wait_ready($bq, 20), "$label: rp/v: the reader gone, the writer gets it");
    $bq->pg_result;
    $sv->finish;

    $_->disconnect for $bob, $alice, $p, $bp, $app, $pk, $rk, $bq;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
