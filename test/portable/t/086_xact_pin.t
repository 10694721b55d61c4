#!/usr/bin/perl
# 086_xact_pin.t: assert_fence pins the holding it checked until its
# transaction ends: nobody takes it over, also once its lease has run
# out meanwhile.  Neither a lease (try_lock) nor a transaction-scoped lock
# (try_xact_lock) gets the resource while the pinning transaction is
# open; both do once it ends.  For an exclusive and a shared holding.
# Promises: P2 P12
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep);
use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'xpin');
    my $al = conn('alice');
    my $bo = conn('bob');
    for my $kind ('exclusive', 'shared') {
        my $r = "pin/$kind";
        my $sh = $kind eq 'shared' ? 'true' : 'false';
        my $f = q1($al, "SELECT dlock.try_lock('$r', 'h', '1s', shared => $sh)");
        ok($f, "$label ($kind): alice holds it with a 1 s lease");
        $al->begin_work;
        ok(defined $al->do("SELECT dlock.assert_fence('$r', $f)"), "$label ($kind): alice's assert_fence pins it");
        # Until the lease has run out (seen from another session).
        my $out = 0;
        for (1 .. 300) { $out = 1, last unless q1($bo, "SELECT dlock.check('$r', $f)"); sleep 0.01; }
        ok($out, "$label ($kind): its lease runs out while alice's transaction is open");
        is(q1($bo, "SELECT dlock.try_lock('$r', 'b', '1h')"), undef, "$label ($kind): no lease takes it over");
        $bo->begin_work;
        is(q1($bo, "SELECT dlock.try_xact_lock('$r')"), undef, "$label ($kind): no xact lock takes it over");
        $bo->rollback;
        $al->commit;
        $bo->begin_work;
        my $g = q1($bo, "SELECT dlock.try_xact_lock('$r')");
        ok($g && $g > $f, "$label ($kind): once alice's transaction ends, an xact lock gets it, a greater fence");
        $bo->commit;
    }
    $_->disconnect for ($al, $bo, $admin);
    stop_server($s->[1], $dir);
}
done_testing();
