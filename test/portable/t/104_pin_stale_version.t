# 104_pin_stale_version.t: assert_fence must not pass on an exclusive
# holding that was released after the caller's snapshot.  assert_fence
# pins the resource's row in dlock.leases FOR KEY SHARE.  While a first
# pin (P1) is open, the holder renews (FOR NO KEY UPDATE, which a pin
# allows) and then unlocks in the same transaction (T); the unlock waits
# for P1, and its UPDATE (holder NULL) is a no-key update.  A second pin
# (P3) started before T commits waits for T; once T has committed,
# PostgreSQL's FOR KEY SHARE lets the committed no-key update pass and
# returns the version P3's snapshot saw: the old holder, unexpired, with
# its fence.  Until stop 52 _current then said "current", and the
# resource could be taken while P3's pin was open (review of 2026-11-30).
# Now: 55P03 under READ COMMITTED (the row is read again), 40001 under
# REPEATABLE READ (P3's snapshot predates the release).
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

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'pin-stale');
    for my $case (['READ COMMITTED', '55P03'], ['REPEATABLE READ', '40001']) {
    my ($level, $want) = @$case;
    my $bob = conn('bob');
    my $alice = conn('alice');
    my $r = "pin/stale/$level";
    my $f = q1($bob, "SELECT dlock.try_lock(?, 'h', '1h')", $r);
    ok(defined $f, "$label: $level: bob holds $r exclusive");

    my $p1 = conn('bob');
    $p1->begin_work;
    $p1->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $f);
    is($p1->err, undef, "$label: $level: P1 pins bob's holding");

    my $t = conn('bob');
    $t->begin_work;
    ok(defined q1($t, "SELECT dlock.renew(?, 'h')", $r), "$label: $level: T (bob) renews beside P1's pin");
    $t->do("SET statement_timeout = '20s'");
    my $sth = $t->prepare("SELECT dlock.unlock(?, 'h')", { pg_async => PG_ASYNC });
    $sth->execute($r);
    ok(blocked_by($alice, $t, $p1) && !$t->pg_ready, "$label: $level: T's unlock waits for P1's pin");
    $p1->commit;
    ok(wait_ready($t, 10), "$label: $level: T's unlock goes on once P1 is done");
    $t->pg_result;
    my ($left) = $sth->fetchrow_array;
    is($left, 0, "$label: $level: T released the holding (not committed yet)");

    # P3: a pin started before T commits (and, under REPEATABLE READ,
    # P3b: a snapshot taken before, the pin after T commits).
    my $p3 = conn('bob');
    $p3->do("SET statement_timeout = '20s'");
    $p3->begin_work;
    $p3->do("SET TRANSACTION ISOLATION LEVEL $level");
    my $p3b;
    if ($level eq 'REPEATABLE READ') {
        $p3b = conn('bob');
        $p3b->begin_work;
        $p3b->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
        q1($p3b, "SELECT count(*) FROM dlock.locks");
    }
    my $sth3 = $p3->prepare("SELECT dlock.assert_fence(?, ?)", { pg_async => PG_ASYNC });
    $sth3->execute($r, $f);
    ok(blocked_by($alice, $p3, $t), "$label: $level: P3's assert_fence waits for T");
    $t->commit;
    ok(wait_ready($p3, 10), "$label: $level: P3's assert_fence answers once T committed");
    $p3->pg_result;
    my $e = $p3->err ? $p3->state : 'no error';
    is($e, $want, "$label: $level: P3's assert_fence of the released holding raises $want");
    if ($p3b) {
        $p3b->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $f);
        is($p3b->err ? $p3b->state : 'no error', '40001',
           "$label: $level: a pin after T committed, on an older snapshot, raises 40001");
        $p3b->rollback;
        $p3b->disconnect;
    }
    if ($e eq 'no error') {
        # The pin "holds": check() agrees, and nobody may take the
        # resource before P3 ends.
        is(q1($p3, "SELECT dlock.check(?, ?)::text", $r, $f), 'true',
           "$label: check() in P3's transaction agrees with its assert_fence");
        sleep 1;
        my $g = q1($alice, "SELECT dlock.try_lock(?, 'a', '1h')", $r);
        ok(!defined $g, "$label: alice cannot take $r while P3's pin is open")
            or diag("alice got fence $g; check() of the pinned fence: "
                    . (q1($p3, "SELECT dlock.check(?, ?)", $r, $f) ? 't' : 'f'));
    }
    $p3->rollback;
    q1($alice, "SELECT dlock.unlock_all('a')");
    $_->finish for $sth, $sth3;
    $_->disconnect for $bob, $alice, $t, $p3, $p1;
    }
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
