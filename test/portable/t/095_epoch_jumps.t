# 095_epoch_jumps.t: after a restart, the first fence draw starts a new
# epoch and records it in an open transaction (alice's try_lock inside
# BEGIN, kept open: any role can do that).  Until that transaction ends,
# other sessions cannot see the record.  Each of them jumps once and then
# draws from the sequence: bob's 300 acquisitions span at most two epochs.
# (Before, every draw jumped again: each one took the row lock of
# dlock.portable, wrote a LOG line and moved the epoch on by one, several
# times slower.)  Fences stay strictly increasing through the restart,
# the commit of alice's record and a re-installation.
# Promises: P1 P5
use strict;
use warnings;
use Test::More;
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'jumps');
    my $max = 0;
    my $a = conn('alice');
    $max = q1($a, "SELECT dlock.try_lock('warm', 'a', '1h')");
    $a->do("SELECT dlock.unlock('warm', 'a')");
    $_->disconnect for $a, $admin;
    my $out = `$s->[1]/pg_ctl -D $dir/data -l $dir/server.log -m fast -w restart 2>&1`;
    is($?, 0, "$label: restarted") or diag($out);
    $a = conn('alice');
    my $bob = conn('bob');
    $_->do("SET statement_timeout = '20s'") for $a, $bob;
    $a->begin_work;
    my $fa = q1($a, "SELECT dlock.try_lock('hold', 'a', '1h')");
    ok($fa > $max, "$label: the first draw after the restart is above the fences before");
    $max = $fa;
    my (@f, %epochs);
    my $up = 1;
    for my $i (1 .. 300) {
        my $f = q1($bob, "SELECT dlock.try_lock(?, 'b', '1h')", "b$i");
        $up = 0 unless defined $f && $f > $max;
        $max = $f if defined $f && $f > $max;
        $epochs{int($f / 2**22)}++ if defined $f;
    }
    ok($up, "$label: bob's fences strictly increasing while alice's record is open");
    ok(keys %epochs <= 2, "$label: bob's 300 draws span at most two epochs (" . scalar(keys %epochs) . ')');
    $a->commit;
    for my $who ('bob', 'alice', 'new') {
        my $h = $who eq 'new' ? conn('bob') : $who eq 'bob' ? $bob : $a;
        my $f = q1($h, "SELECT dlock.try_lock(?, 'x', '1h')", "after-$who");
        ok($f > $max, "$label: $who draws above every fence after alice commits");
        $max = $f;
        $h->disconnect if $who eq 'new';
    }
    # A re-installation (the schema dropped and installed again).
    $_->disconnect for $a, $bob;
    my $dbo = conn('dbo');
    $dbo->do("DROP SCHEMA dlock CASCADE") or die $dbo->errstr;
    $dbo->disconnect;
    $out = `$client/psql -X -q -h $sock -U dbo -d app -f $script 2>&1`;
    is($?, 0, "$label: installed again") or diag($out);
    $bob = conn('bob');
    my $f = q1($bob, "SELECT dlock.try_lock('re', 'b', '1h')");
    ok($f > $max, "$label: a fence after re-installation is above every earlier one");
    $bob->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
