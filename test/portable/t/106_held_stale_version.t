# 106_held_stale_version.t: assert_fence must not pass on a shared
# holding or a holding of permits that has run out, whatever version of
# its row the caller's snapshot saw.  The pin locks the holding's row
# (dlock.shares, dlock.permits) FOR KEY SHARE, which lets a no-key update
# committed since the snapshot pass (a renew to a shorter lease) and
# returns the version that snapshot saw.  Until stop 54 the pin then
# judged that old version: 104's case, for the kinds' own rows.
# Cases:
# 1. REPEATABLE READ: the snapshot predates a renew to 10 ms (a shared
#    holding, then permits): 40001, as for the exclusive holding (104).
# 2. READ COMMITTED: the pin waits for a transaction that takes one
#    level of the holding back (its row FOR UPDATE) and renews it to
#    10 ms; once that commits, the holding has run out: 55P03.  This
#    passed before the fix too (the row lock makes PostgreSQL read the
#    row again).  The fix's own read again under READ COMMITTED closes a
#    window no test can hold open: a renew that commits between the
#    pin's snapshot and its lock, with no lock to wait for.
# Promises: P2
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

sub state_of {
    my ($dbh) = @_;
    return $dbh->err ? $dbh->state : 'no error';
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'held-stale');
    my $bob = conn('bob');

    # 1. REPEATABLE READ, a snapshot older than the renew.
    for my $kind (['shared', "SELECT dlock.try_lock(?, 'h', '1h', shared => true)"],
                  ['permits', "SELECT dlock.try_acquire(?, 'h', 3, 2, '1h')"]) {
        my ($what, $take) = @$kind;
        my $r = "held/stale/rr/$what";
        my $f = q1($bob, $take, $r);
        ok(defined $f, "$label: $what: bob holds $r");
        my $p = conn('bob');
        $p->begin_work;
        $p->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
        q1($p, "SELECT count(*) FROM dlock.locks");
        ok(defined q1($bob, "SELECT dlock.renew(?, 'h', '10ms')", $r), "$label: $what: bob renews to 10 ms");
        sleep 0.1;
        is(q1($bob, "SELECT dlock.check(?, ?)::text", $r, $f), 'false', "$label: $what: check() outside: run out");
        $p->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $f);
        is(state_of($p), '40001', "$label: $what: assert_fence on the older snapshot raises 40001");
        $p->rollback;
        $p->disconnect;
    }

    # 2. READ COMMITTED: the pin waits for T, which renews the holding to
    # 10 ms and takes one of its two levels back.
    {
        my $r = 'held/stale/rc';
        my $f = q1($bob, "SELECT dlock.try_lock(?, 'h', '1h', shared => true)", $r);
        is(q1($bob, "SELECT dlock.try_lock(?, 'h', '1h', shared => true)", $r), $f, "$label: rc: bob reads $r twice");
        my $t = conn('bob');
        $t->begin_work;
        # The level first: a renew to 10 ms first could run out before
        # the unlock on a loaded machine (CI, 17 root: unlock NULL).
        is(q1($t, "SELECT dlock.unlock(?, 'h')", $r), 1, "$label: rc: T takes one level back (row locked)");
        ok(defined q1($t, "SELECT dlock.renew(?, 'h', '10ms')", $r), "$label: rc: T renews to 10 ms");
        my $p = conn('bob');
        $p->do("SET statement_timeout = '20s'");
        $p->begin_work;
        my $sth = $p->prepare("SELECT dlock.assert_fence(?, ?)", { pg_async => PG_ASYNC });
        $sth->execute($r, $f);
        sleep 0.5;
        ok(!$p->pg_ready, "$label: rc: the pin waits for T");
        $t->commit;
        ok(wait_ready($p, 10), "$label: rc: the pin answers once T committed");
        $p->pg_result;
        is(state_of($p), '55P03', "$label: rc: assert_fence of the run-out holding raises 55P03");
        $p->rollback;
        is(q1($bob, "SELECT dlock.check(?, ?)::text", $r, $f), 'false', "$label: rc: check() agrees");
        $sth->finish;
        $_->disconnect for $t, $p;
    }

    # 3. Still passes: the holding live, read committed and repeatable
    # read alike (no renew since the snapshot).
    for my $level ('READ COMMITTED', 'REPEATABLE READ') {
        my $r = "held/live/$level";
        my $f = q1($bob, "SELECT dlock.try_lock(?, 'h', '1h', shared => true)", $r);
        my $g = q1($bob, "SELECT dlock.try_acquire(?, 'h', 3, 1, '1h')", "$r/sem");
        my $p = conn('bob');
        $p->begin_work;
        $p->do("SET TRANSACTION ISOLATION LEVEL $level");
        $p->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $f);
        is(state_of($p), 'no error', "$label: $level: a live shared holding is pinned");
        $p->do("SELECT dlock.assert_fence(?, ?)", undef, "$r/sem", $g);
        is(state_of($p), 'no error', "$label: $level: live permits are pinned");
        $p->commit;
        $p->disconnect;
    }

    $bob->disconnect;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
