# 105_reader_pins.t: a reader's pin keeps no reader out.  An exclusive
# holding that has run out and is not reaped yet is passed over by a new
# reader with the resource's row locked FOR UPDATE (kinds.sql); until stop
# 53, assert_fence of a shared holding locked that row FOR KEY SHARE too,
# so any reader's pin kept every new reader out while it lasted (review
# of 2026-11-30).  A pin of the exclusive holding still keeps readers out
# until its transaction ends, and a pin of a shared holding keeps its
# holder's upgrade out.
# Promises: P5 P9
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

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
    my $fx = q1($bob, "SELECT dlock.try_lock('rp/x', 'x', '1s')");
    my $bp = conn('bob');
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

    $_->disconnect for $bob, $alice, $p, $bp;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
