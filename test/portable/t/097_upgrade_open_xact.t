#!/usr/bin/perl
# 097_upgrade_open_xact.t: an upgrade over an install whose resources were
# guarded by advisory keys (0.4), while a transaction holds an xact_lock
# that the old code took (READ COMMITTED, a resource without a row: only
# an advisory lock and its read of dlock.leases).  The run must not let
# the new code hand that resource to another holder while the old
# transaction is open: it waits for that transaction (and fails with
# 55P03, changing nothing, if it stays open past dlock_lock_wait): the
# old code's fence read the view _epoch_mark, whose lock the run takes.
# (Passes on 201aee6 too: evidence for the upgrade note, not a fix.)
# Promises: P2 P17
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'upxact');
    $admin->do("CREATE DATABASE oldx OWNER dbo") or die $admin->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d oldx -f $top/test/portable/old/0.4/dlock.sql 2>&1`;
    is($?, 0, "$label: the 0.4 release installed") or diag($out);
    my $x = conn('alice', 'oldx');
    my $b = conn('bob', 'oldx');
    is(q1($b, "SELECT dlock.version()"), '0.4', "$label: version 0.4 before");
    # The old code's xact_lock on a resource without a row, left open.
    $x->begin_work;
    my $f = q1($x, "SELECT dlock.xact_lock('ux/new', '1s')");
    ok($f, "$label: 0.4's xact_lock taken in an open transaction");
    # The upgrade while it is open (a short lock wait).
    $out = `$client/psql -X -q -v ON_ERROR_STOP=1 -v dlock_lock_wait=300ms -h $dir -U dbo -d oldx -f $script 2>&1`;
    my $upgraded = $? == 0;
    is(q1($b, "SELECT dlock.try_lock('ux/new', 'b', '1h')"), undef,
       "$label: while the old xact_lock's transaction is open, nobody else gets the resource (upgraded: "
       . ($upgraded ? 'yes' : 'no') . ")");
    $b->begin_work;
    is(q1($b, "SELECT dlock.try_xact_lock('ux/new')"), undef, "$label: ... nor an xact_lock");
    $b->rollback;
    ok(!$upgraded, "$label: the run does not commit while the old transaction is open");
    like($out, qr/could not lock dlock/, "$label: ... it fails with 55P03") or diag($out);
    is(q1($b, "SELECT dlock.version()"), '0.4', "$label: ... having changed nothing");
    $x->commit;
    q1($b, "SELECT dlock.unlock('ux/new', 'b')") if $upgraded;
    $out = `$client/psql -X -q -v ON_ERROR_STOP=1 -h $dir -U dbo -d oldx -f $script 2>&1`;
    is($?, 0, "$label: once it has ended, the upgrade runs") or diag($out);
    my $g = q1($b, "SELECT dlock.try_lock('ux/new', 'b', '1h')");
    ok($g && $g > $f, "$label: ... and the resource is free, with a greater fence");
    $_->disconnect for ($x, $b, $admin);
    stop_server($s->[1], $dir);
}
done_testing();
