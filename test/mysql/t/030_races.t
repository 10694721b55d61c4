# 030_races.t: the races of the MySQL edition, each run many times with
# the contenders released together from a pipe: two connections for a new
# resource, for an expired lease, renew against reap, and a stale unlock
# after a takeover and re-acquisition (ABA).
# Promises: P2 P4 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep);

my $my = DlockMy->new;
my $dbh = $my->connect('alice');
sub one { DlockMy::one($dbh, @_) }

# race(@subs): run each sub in a child with its own connection, all released
# at once; returns their printed results in order.
sub race { return race_at(undef, @_); }

# race_at(t, @subs): the same, released at time t (Time::HiRes time).
sub race_at {
    my ($at, @subs) = @_;
    pipe(my $gate_r, my $gate_w) or die;
    pipe(my $ready_r, my $ready_w) or die;
    my @kids;
    for my $i (0 .. $#subs) {
        pipe(my $out_r, my $out_w) or die;
        my $pid = fork // die;
        if ($pid == 0) {
            close $gate_w; close $out_r; close $ready_r;
            my $c = $my->connect('alice');
            syswrite $ready_w, 'r';
            close $ready_w;
            my $x = <$gate_r>;    # EOF when the parent closes the gate
            my $res = eval { $subs[$i]->($c) };
            $res = "error: $@" unless defined $res || !$@;
            print $out_w (defined $res ? $res : 'NULL');
            close $out_w;
            POSIX::_exit(0);
        }
        close $out_w;
        push @kids, [$pid, $out_r];
    }
    close $gate_r;
    close $ready_w;
    my $n = 0;
    while ($n < @subs) { sysread($ready_r, my $buf, 16) or last; $n += length $buf; }
    my $wait = defined $at ? $at - Time::HiRes::time() : 0;
    sleep $wait if $wait > 0;
    close $gate_w;
    my @res;
    for my $k (@kids) {
        my $fh = $k->[1];
        local $/;
        my $r = <$fh>;
        waitpid $k->[0], 0;
        push @res, $r;
    }
    return @res;
}

my $rounds = $ENV{DLOCK_RACE_ROUNDS} || 25;    # more to look for a rare interleaving

# Two connections for a new resource: exactly one wins, and it holds it.
my ($bad_new, $errors) = (0, 0);
for my $i (1 .. $rounds) {
    my @r = race(map { my $h = "h$_"; sub { DlockMy::one($_[0], "SELECT dlock.try_lock(?, ?, 60)", "new/$i", $h) } } 1 .. 2);
    $errors++ if grep { /error/ } @r;
    my @won = grep { $r[$_] ne 'NULL' } 0 .. 1;
    my $holder = one("SELECT holder FROM dlock.locks WHERE resource = ?", "new/$i") // '';
    $bad_new++ unless @won == 1 && $holder eq 'h' . ($won[0] + 1);
}
is($errors, 0, 'no errors (no deadlock, no lock wait timeout) racing for new resources');
is($bad_new, 0, "new resource, $rounds rounds: exactly one winner, and the table agrees");

# Two connections for an expired lease: exactly one wins, with a larger fence.
my $bad_exp = 0;
for my $i (1 .. $rounds) {
    my $old = one("SELECT dlock.try_lock(?, 'old', 0.05)", "exp/$i");
    sleep 0.1;
    my @r = race(map { my $h = "h$_"; sub { DlockMy::one($_[0], "SELECT dlock.try_lock(?, ?, 60)", "exp/$i", $h) } } 1 .. 2);
    my @won = grep { $r[$_] ne 'NULL' } 0 .. 1;
    my ($holder, $fence) = $dbh->selectrow_array("SELECT holder, fence FROM dlock.locks WHERE resource = ?", undef, "exp/$i");
    $bad_exp++ unless @won == 1 && $holder eq 'h' . ($won[0] + 1) && $fence == $r[$won[0]] && $fence > $old;
}
is($bad_exp, 0, "expired lease, $rounds rounds: exactly one takes over, with a larger fence");

# Four connections for an existing free resource, many rounds.
my $bad_free = 0;
for my $i (1 .. 10) {
    my @r = race(map { my $h = "h$_"; sub { DlockMy::one($_[0], "SELECT dlock.try_lock('free/r', ?, 60)", $h) } } 1 .. 4);
    my @won = grep { $r[$_] ne 'NULL' } 0 .. 3;
    $bad_free++ unless @won == 1;
    one("SELECT dlock.unlock('free/r', ?, NULL)", 'h' . ($won[0] + 1)) if @won;
}
is($bad_free, 0, 'four contenders for a free resource: one winner each round');

# Renew against reap at the moment of expiry: either the renewal wins and
# the lease lives on with the expiry it returned, or the reaper wins and the
# renewal says NULL.  Never both, never a revived lease.
my ($renewed, $reaped, $bad_rr) = (0, 0, 0);
for my $i (1 .. $rounds) {
    my $r = "rr/$i";
    one("SELECT dlock.try_lock(?, 'h', 0.5)", $r);
    my @res = race_at(Time::HiRes::time() + 0.47 + rand(0.06), sub { DlockMy::one($_[0], "SELECT dlock.renew(?, 'h', 60, NULL)", $r) },
                   sub { DlockMy::call_one($_[0], 'CALL dlock.reap()') });
    # One read: the event dlock.reap (every second) may free an expired
    # lease between two reads, and a second read's missing row is not 0.
    my ($holder, $exp, $expired) = $dbh->selectrow_array(
        "SELECT holder, expires_at, expired FROM dlock.locks WHERE resource = ?", undef, $r);
    my $bad = 0;
    if ($res[0] ne 'NULL') {
        $renewed++;
        $bad = !(defined $holder && $holder eq 'h' && $exp eq $res[0]);
    } else {
        $reaped++;
        $bad = defined $holder && !$expired;
    }
    next unless $bad;
    $bad_rr++;
    diag("round $i: renew said '$res[0]', reap said '$res[1]'; then holder "
         . ($holder // 'NULL') . ", expires_at " . ($exp // 'NULL') . ", expired " . ($expired // 'NULL'));
}
is($bad_rr, 0, "renew against reap: consistent every round ($renewed renewed, $reaped lost)");

# ABA: a stale unlock (and renew) with an old fence never touches a newer
# holding of the same holder text.
my $f1 = one("SELECT dlock.try_lock('aba/r', 'x', 0.1)");
sleep 0.2;
my $f2 = one("SELECT dlock.try_lock('aba/r', 'y', 60)");
ok($f2 > $f1, 'y took over');
is(one("SELECT dlock.unlock('aba/r', 'y', NULL)"), 0, 'y released');
my $f3 = one("SELECT dlock.try_lock('aba/r', 'x', 60)");
ok($f3 > $f2, 'x holds it again, new fence');
is(one("SELECT dlock.unlock('aba/r', 'x', ?)", $f1), undef, "x's delayed unlock with its first fence: NULL");
is(one("SELECT dlock.renew('aba/r', 'x', NULL, ?)", $f1), undef, 'a delayed renew with it: NULL');
is_deeply([$dbh->selectrow_array("SELECT holder, fence, count FROM dlock.locks WHERE resource = 'aba/r'")],
          ['x', $f3, 1], 'the new holding is untouched');
is(one("SELECT dlock.check_fence('aba/r', ?)", $f1), 0, 'the old fence is stale');

# Stale unlock racing the takeover: after expiry, the old holder's unlock
# and a new holder's try_lock race; the new holding must survive whichever
# came first.
my $bad_stale = 0;
for my $i (1 .. $rounds) {
    my $r = "stale/$i";
    my $old = one("SELECT dlock.try_lock(?, 'x', 0.05)", $r);
    sleep 0.1;
    my @res = race(sub { DlockMy::one($_[0], "SELECT dlock.unlock(?, 'x', ?)", $r, $old) },
                   sub { DlockMy::one($_[0], "SELECT dlock.try_lock(?, 'y', 60)", $r) });
    my $holder = one("SELECT holder FROM dlock.locks WHERE resource = ?", $r) // '';
    $bad_stale++ unless $res[0] eq 'NULL' && $res[1] ne 'NULL' && $holder eq 'y';
}
is($bad_stale, 0, 'an expired holder\'s unlock never releases the new holding, nor gets in its way');

done_testing;
