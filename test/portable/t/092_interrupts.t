# 092_interrupts.t: interrupts at every point of every routine (issue 33,
# "close the class"): each public call (acquisitions new and existing,
# fair and not, waits of every kind, renew, unlock, unlock_all, xact_lock,
# an epoch jump, campaign, lock_all, reap, withdraw) is cut by
# statement_timeout swept from 1 ms upward until it completes, by
# pg_cancel_backend swept from 0 to 3 ms after it was sent, and by
# pg_terminate_backend
# after a random delay, on one "pooled" connection of alice's reused
# throughout.  After each cut: that session holds no advisory lock and no
# open transaction (so no row lock), and once the owners have released
# what completed calls took (and withdrawn their tickets), the next
# caller gets the resource at once.  Some routines run while mallory, a
# role with no rights on dlock, holds one of dlock's advisory keys (the
# interrupted wait of issue 33's defect 10).  Seeded (DLOCK_SEED): the
# cancel delays.
# Promises: P5
use strict;
use warnings;
use Test::More;
use DBD::Pg qw(:async);
use Time::HiRes qw(sleep);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::sweep_servers();    # Debian's, npm 14 and 18
plan skip_all => 'no PostgreSQL server binaries' unless @servers;
my $seed = $ENV{DLOCK_SEED} || int(rand(2**31));
diag("092_interrupts: seed $seed (DLOCK_SEED=$seed to repeat)");

# Each routine: setup (the state the call meets: bob's holdings, the
# victim's own), the call (alice, holder 'v'), and the resources to check.
# In SQL, %r is the iteration's resource.
my $qkey = "('x' || substr(md5('%r'), 17, 8))::bit(32)::integer";
my @routines = (
    ['try_lock of a new resource', '', "SELECT dlock.try_lock('%r', 'v', '1h')"],
    ['try_lock of a free row (fast path)', "B:SELECT dlock.try_lock('%r', 'b'), dlock.unlock('%r', 'b')",
     "SELECT dlock.try_lock('%r', 'v', '1h')"],
    ['try_lock with a new fence epoch', "O:DELETE FROM dlock.fence_epoch", "SELECT dlock.try_lock('%r', 'v', '1h')"],
    ['fair try_lock of a held resource', "B:SELECT dlock.try_lock('%r', 'b', '1h')",
     "SELECT dlock.try_lock('%r', 'v', '1h', fair => true)"],
    ['fair lock() waiting', "B:SELECT dlock.try_lock('%r', 'b', '1h')",
     "SELECT dlock.lock('%r', 'v', '1h', '40ms', fair => true)"],
    ['lock() waiting', "B:SELECT dlock.try_lock('%r', 'b', '1h')", "SELECT dlock.lock('%r', 'v', '1h', '40ms')"],
    ['an upgrade waiting', "B:SELECT dlock.try_lock('%r', 'b', '1h', shared => true)\nA:SELECT dlock.try_lock('%r', 'v', '1h', shared => true)",
     "SELECT dlock.lock('%r', 'v', '1h', '40ms')"],
    ['shared lock() waiting', "B:SELECT dlock.try_lock('%r', 'b', '1h')",
     "SELECT dlock.lock('%r', 'v', '1h', '40ms', shared => true)"],
    ['shared try_lock', "B:SELECT dlock.try_lock('%r', 'b', '1h', shared => true)",
     "SELECT dlock.try_lock('%r', 'v', '1h', shared => true)"],
    ['try_acquire', "B:SELECT dlock.try_acquire('%r', 'b', 3, 1, '1h')", "SELECT dlock.try_acquire('%r', 'v', 3, 2, '1h')"],
    ['acquire() waiting', "B:SELECT dlock.try_acquire('%r', 'b', 2, 2, '1h')",
     "SELECT dlock.acquire('%r', 'v', 2, 1, '1h', wait => '40ms')"],
    ['renew', "A:SELECT dlock.try_lock('%r', 'v', '1h')", "SELECT dlock.renew('%r', 'v')"],
    ['unlock', "A:SELECT dlock.try_lock('%r', 'v', '1h')", "SELECT dlock.unlock('%r', 'v')"],
    ['unlock_all', "A:SELECT dlock.try_lock('%r', 'v', '1h'), dlock.try_lock('%r/2', 'v', '1h', shared => true), dlock.try_acquire('%r/3', 'v', 2, 1, '1h')",
     "SELECT dlock.unlock_all('v')"],
    ['xact_lock', '', "SELECT dlock.xact_lock('%r', '40ms')"],
    ['campaign waiting', "B:SELECT dlock.campaign('%r', 'b', 'x', '1h', '0')",
     "SELECT dlock.campaign('%r', 'v', 'y', '1h', '40ms')"],
    ['lock_all waiting', "B:SELECT dlock.try_lock('%r/2', 'b', '1h')",
     "SELECT dlock.lock_all(ARRAY['%r', '%r/2'], 'v', '1h', wait => '40ms')"],
    ['reap', "A:SELECT dlock.try_lock('%r', 'v', '1ms')\nA:SELECT pg_sleep(0.002)", "SELECT dlock.reap()"],
    ['withdraw', "B:SELECT dlock.try_lock('%r', 'b', '1h')\nA:SELECT dlock.try_lock('%r', 'v', '1h', fair => true)",
     "SELECT dlock.withdraw('%r', 'v')"],
    # With one of dlock's advisory keys held by mallory (no rights on dlock).
    ['fair lock() waiting, the fair waiters mark held by another role',
     "B:SELECT dlock.try_lock('%r', 'b', '1h')\nM:SELECT pg_advisory_lock($qkey, 0)",
     "SELECT dlock.lock('%r', 'v', '1h', '40ms', fair => true)"],
    ['lock() waiting, the writer-waits mark held by another role',
     "B:SELECT dlock.try_lock('%r', 'b', '1h')\nM:SELECT pg_advisory_lock(1684828006, $qkey)",
     "SELECT dlock.lock('%r', 'v', '1h', '40ms')"],
    ['try_lock with a new fence epoch, the old jump key held by another role',
     "O:DELETE FROM dlock.fence_epoch\nM:SELECT pg_advisory_lock(1684828003, 1)",
     "SELECT dlock.try_lock('%r', 'v', '1h')"],
);

my ($victim, $obs, $na, $nb, $mal, $n);

sub victim {
    $victim = conn('alice');
    $victim->do("SET dlock.poll_interval = '5ms'");
}

# run: the call on the victim, cut as $how says; its error state.
sub run {
    my ($sql, $how, $arg) = @_;
    if ($how eq 'timeout') {
        $victim->do("SET statement_timeout = '${arg}ms'");
        $victim->do($sql);
        my $st = $victim->err ? $victim->state : '';
        $victim->do("SET statement_timeout = 0");
        return $st;
    }
    $victim->do("SET statement_timeout = '20s'");
    my $pid = $victim->{pg_pid};
    my $sth = $victim->prepare($sql, { pg_async => PG_ASYNC });
    $sth->execute;
    sleep $arg / 1e6;
    q1($obs, $how eq 'cancel' ? "SELECT pg_cancel_backend(?)" : "SELECT pg_terminate_backend(?)", $pid);
    for (1 .. 2000) { last if $victim->pg_ready; sleep 0.005 }
    eval { $victim->pg_result };
    my $st = $victim->err ? $victim->state : '';
    eval { $sth->finish };    # (its connection may be gone)
    if ($how eq 'terminate') {
        # Until the backend is gone, then a new pooled connection.
        for (1 .. 500) { last unless q1($obs, "SELECT count(*) FROM pg_stat_activity WHERE pid = ?", $pid); sleep 0.01 }
        $victim->disconnect;
        victim();
    } else {
        $victim->do("SET statement_timeout = 0");
    }
    return $st;
}

sub step {
    my ($rt, $how, $arg) = @_;
    my ($name, $setup, $call) = @$rt;
    $n++;
    my $r = "i$n";
    my $tag = "$label: $name, $how $arg";
    for my $line (grep { length } split /\n/, $setup) {
        my ($who, $sql) = $line =~ /^(\w):(.*)$/s;
        $sql =~ s/%r/$r/g;
        my $h = { A => $na, B => $nb, O => $obs, M => $mal }->{$who};
        $h->do($sql) or die "$tag: setup $sql: " . $h->errstr;
    }
    (my $sql = $call) =~ s/%r/$r/g;
    my $st = run($sql, $how, $arg);
    $mal->do("SELECT pg_advisory_unlock_all()");
    my $pid = $victim->{pg_pid};
    my $adv = q1($obs, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ?", $pid);
    my $open = q1($obs, "SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND state <> 'idle'", $pid);
    is("$adv $open", "0 0", "$tag: no advisory lock, no open transaction left ($st)");
    # The owners release what completed, then the next caller is served.
    for my $res ($r, "$r/2", "$r/3") {
        $na->do("SELECT dlock.withdraw(?, 'v')", undef, $res);
    }
    $na->do("SELECT dlock.unlock_all('v'), dlock.resign(?, 'v')", undef, $r);
    $nb->do("SELECT dlock.unlock_all('b'), dlock.resign(?, 'b')", undef, $r);
    my $f = q1($obs, "SELECT count(*) FROM dlock.locks WHERE resource LIKE ? || '%' AND NOT expired", $r);
    is($f, 0, "$tag: nothing held once the owners released") or return;
    $nb->do("SET statement_timeout = '5s'");
    my $got = $nb->selectrow_arrayref("SELECT dlock.try_lock(?, 'n', '1h')", undef, $r);
    ok($got && defined $got->[0], "$tag: the next caller gets the resource at once")
        or diag($nb->errstr // 'NULL');
    $nb->do("SELECT dlock.unlock(?, 'n')", undef, $r);
    return $st;
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'interrupts');
    $admin->do("CREATE ROLE mallory LOGIN") or die $admin->errstr;
    srand($seed);
    $n = 0;
    $obs = conn('admin', 'app');
    $na = conn('alice');
    $nb = conn('bob');
    $mal = conn('mallory');
    victim();
    for my $rt (@routines) {
        # statement_timeout from 1 ms upward until the call completes twice.
        my ($ms, $done, %seen) = (1, 0);
        while ($done < 2 && $ms <= 400) {
            my $st = step($rt, 'timeout', $ms);
            $seen{$st || 'completed'}++;
            $done = $st eq '57014' ? 0 : $done + 1;
            $ms += $ms < 20 ? 1 : 5;
        }
        ok($seen{57014}, "$label: $rt->[0]: statement_timeout cut it (" . join(', ', map { "$_ $seen{$_}" } sort keys %seen) . ")");
        isnt(step($rt, 'timeout', 5000), '57014', "$label: $rt->[0]: completes within 5 s (its own limit is 40 ms)");
        # pg_cancel_backend swept from 0 to 3 ms after the call was sent
        # (finer than statement_timeout's milliseconds), seeded jitter.
        step($rt, 'cancel', $_ * 150 + int(rand(150))) for 0 .. 20;
        step($rt, 'terminate', int(rand(4000)));
        step($rt, 'terminate', int(rand(500)));
    }
    $_->disconnect for $victim, $obs, $na, $nb, $mal;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
