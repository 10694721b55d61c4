#!/usr/bin/perl
# 099_blocked_marks.t: a role with no rights on dlock (mallory) holds the
# keys of the writer-waits mark and of both upgrade marks exclusive, so
# the waits cannot take them.  The waits must still be seen: two shared
# holders that both wait to upgrade get 40P01 (one of them at least)
# rather than waiting for each other to their limits, and a writer that
# waits keeps new readers out (writers do not starve).
# Promises: P5 P9
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

my $qkey = "('x' || substr(md5(%s), 17, 8))::bit(32)::integer";
sub umark { "hashtext(" . $_[0] . " || chr(1) || '$_[1]' || chr(1) || '$_[2]'::regrole::oid::text)" }

# sleeping: has a session of user waited in pg_sleep (lock()'s poll)?
sub sleeping {
    my ($su, $user) = @_;
    for (1 .. 500) {
        return 1 if q1($su, "SELECT count(*) FROM pg_stat_activity WHERE usename = '$user' AND wait_event = 'PgSleep'");
        sleep 0.01;
    }
    return 0;
}

sub outcome {
    my ($a) = @_;
    return 'stuck' unless wait_ready($a->[0], 20);
    my $v = eval { $a->[0]->pg_result; my $row = $a->[1]->fetchrow_arrayref; $row ? $row->[0] : undef };
    my $got = $a->[0]->err ? $a->[0]->state : ($v // 'NULL');
    eval { $a->[1]->finish };    # (after err: finish clears it)
    return $got;
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'marks');
    $admin->do("CREATE ROLE mallory LOGIN") or die $admin->errstr;
    my $su = conn('admin');
    # USAGE on dlock for alice and bob only.
    $su->do($_) or die $su->errstr
        for "REVOKE USAGE ON SCHEMA dlock FROM PUBLIC", "GRANT USAGE ON SCHEMA dlock TO alice, bob";
    my $al = conn('alice');
    my $bo = conn('bob');
    my $mal = conn('mallory');
    is(q1($mal, "SELECT has_schema_privilege('dlock', 'USAGE')"), 0, "$label: mallory has no USAGE on dlock");

    # Two shared holders, both waiting to upgrade, the upgrade marks held.
    my $r = "'bm/up'";
    ok(q1($al, "SELECT dlock.try_lock($r, 'a', '1h', shared => true)"), "$label: alice's shared holding");
    ok(q1($bo, "SELECT dlock.try_lock($r, 'b', '1h', shared => true)"), "$label: bob's shared holding");
    ok(q1($mal, "SELECT pg_try_advisory_lock(1684828007, " . umark($r, 'a', 'alice') . ")")
       && q1($mal, "SELECT pg_try_advisory_lock(1684828007, " . umark($r, 'b', 'bob') . ")"),
       "$label: mallory holds both upgrade marks exclusive");
    my $wa = async('alice', "SELECT dlock.lock($r, 'a', '1h', '4s')");
    ok(sleeping($su, 'alice'), "$label: alice waits to upgrade");
    my $wb = async('bob', "SELECT dlock.lock($r, 'b', '1h', '4s')");
    my @got = (outcome($wa), outcome($wb));
    ok((grep { $_ eq '40P01' } @got), "$label: the crossing upgrades: one gets 40P01 (got @got)");
    $_->[0]->disconnect for ($wa, $wb);
    q1($al, "SELECT dlock.unlock_all('a')");
    q1($bo, "SELECT dlock.unlock_all('b')");
    q1($mal, "SELECT pg_advisory_unlock_all()");

    # A writer waits behind a reader, the writer-waits mark held.
    $r = "'bm/w'";
    ok(q1($al, "SELECT dlock.try_lock($r, 'r1', '1h', shared => true)"), "$label: a reader holds it");
    ok(q1($mal, "SELECT pg_try_advisory_lock(1684828006, " . sprintf($qkey, $r) . ")"),
       "$label: mallory holds the writer-waits mark exclusive");
    my $w = async('bob', "SELECT dlock.lock($r, 'w', '1h', '4s')");
    ok(sleeping($su, 'bob'), "$label: the writer waits");
    is(q1($al, "SELECT dlock.try_lock($r, 'r2', '1h', shared => true)"), undef,
       "$label: a new reader is kept out while the writer waits");
    q1($al, "SELECT dlock.unlock_all('r1')");
    q1($al, "SELECT dlock.unlock_all('r2')");
    my $f = outcome($w);
    ok($f =~ /^\d+$/, "$label: the writer is served when the readers let go ($f)");
    $w->[0]->disconnect;
    is(q1($su, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid IN
                 (SELECT pid FROM pg_stat_activity WHERE usename IN ('alice', 'bob'))"), 0,
       "$label: the callers' sessions keep no advisory lock");
    $_->disconnect for ($al, $bo, $mal, $su, $admin);
    stop_server($s->[1], $dir);
}
done_testing();
