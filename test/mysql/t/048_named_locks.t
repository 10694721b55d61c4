# 048_named_locks.t: no lock dlock takes can be held against it by another
# user (issue 33, 6).  With the stock metadata_lock_info plugin installed,
# which shows every session's named locks (GET_LOCK) to every user, eve, a
# user with no rights but the routines', watches
# information_schema.METADATA_LOCK_INFO while alice and bob run every
# routine (contended acquisitions, expiring leases the reaper frees,
# renewals, releases, pins, xact locks, CALL dlock.reap()), and takes and
# keeps every name she sees.  Nobody's call waits (each runs under
# max_statement_time = 5) or fails, and dlock takes no named lock at all.
# Seeded: DLOCK_SEED=N.
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep);

my $seed = $ENV{DLOCK_SEED} // int(rand(1_000_000));
diag("seed $seed");
my $my = DlockMy->new;
$my->do_root("INSTALL SONAME 'metadata_lock_info'",
             "CREATE USER eve\@'localhost' IDENTIFIED BY 'pe'");
my $dir = $my->{dir};

# The watcher: eve takes every named lock she sees, and keeps it.
my $stop = "$dir/stop";
my $watcher = fork // die;
if ($watcher == 0) {
    my $look = $my->connect('eve', 'pe');
    my $hold = $my->connect('eve', 'pe');
    my %held;
    open my $log, '>', "$dir/names" or die;
    $log->autoflush(1);
    until (-e $stop) {
        my $names = $look->selectcol_arrayref(
            "SELECT TABLE_SCHEMA FROM information_schema.METADATA_LOCK_INFO WHERE LOCK_TYPE = 'User lock'");
        for my $n (@$names) {
            next if $held{$n}++;
            my $got = DlockMy::one($hold, 'SELECT GET_LOCK(?, 0)', $n);
            print $log "$n ", ($got // 'NULL'), "\n";
        }
    }
    POSIX::_exit(0);
}

# A worker: seeded random calls of every routine; every error is logged.
sub worker {
    my ($user, $k) = @_;
    srand($seed + $k);
    my $c = $my->connect($user);
    $c->do('SET SESSION max_statement_time = 5');
    open my $log, '>', "$dir/errors.$k" or die;
    my $h = "w$k";
    my @mine;
    my $call = sub {
        my ($sql, @bind) = @_;
        my $v = eval { $sql =~ /^CALL/ ? DlockMy::call_one($c, $sql, @bind) : DlockMy::one($c, $sql, @bind) };
        if ($@) {
            my $e = ($c->state // '?') . ' ' . ($c->err // '?') . ': ' . ($c->errstr // $@);
            # Expected: error 1020 (a stale REPEATABLE READ snapshot), 55P03 from
            # assert_fence of a lease that just expired.
            print $log "$sql: $e\n" unless $e =~ /^HY000 1020:/ || ($sql =~ /assert_fence/ && $e =~ /^55P03/);
            eval { $c->rollback } unless $c->{AutoCommit};
            return undef;
        }
        return $v;
    };
    for my $i (1 .. 150) {
        my $op = int(rand(9));
        my $r = "nl/$k/" . int(rand(20));
        if ($op == 0) {
            my $f = $call->('SELECT dlock.try_lock(?, ?, ?)', $r, $h, rand() < 0.5 ? 0.05 : 5);
            push @mine, [$r, $f] if $f;
        } elsif ($op == 1) {
            my $f = $call->('CALL dlock.lock(?, ?, ?, ?)', 'nl/shared', $h, 0.05, 0.5);
            push @mine, ['nl/shared', $f] if $f;
        } elsif ($op == 2 && @mine) {
            my ($rr, $f) = @{ $mine[rand @mine] };
            $call->('SELECT dlock.renew(?, ?, NULL, ?)', $rr, $h, $f);
        } elsif ($op == 3 && @mine) {
            my ($rr, $f) = @{ splice(@mine, rand @mine, 1) };
            $call->('SELECT dlock.unlock(?, ?, ?)', $rr, $h, $f);
        } elsif ($op == 4 && @mine) {
            my ($rr, $f) = @{ $mine[rand @mine] };
            $call->('SELECT dlock.check_fence(?, ?)', $rr, $f);
            $c->begin_work;
            $call->('SELECT dlock.assert_fence(?, ?)', $rr, $f);
            $c->commit if $c->{BegunWork};
        } elsif ($op == 5) {
            $c->begin_work;
            $call->('CALL dlock.xact_lock(?, ?)', "nl/x/" . int(rand(5)), 0.5);
            $call->('SELECT dlock.try_xact_lock(?)', "nl/x/" . int(rand(5)));
            $c->commit if $c->{BegunWork};
        } elsif ($op == 6) {
            $call->('CALL dlock.reap()');
        } elsif ($op == 7 && rand() < 0.2) {
            $call->('SELECT dlock.unlock_all(?)', $h);
            @mine = ();
        } else {
            $call->('SELECT dlock.try_lock(?, ?, 0.02)', 'nl/shared', $h);
        }
    }
    close $log;
    POSIX::_exit(0);
}

my @kids;
my $k = 0;
for my $user ('alice', 'bob', 'alice', 'bob') {
    $k++;
    my $pid = fork // die;
    worker($user, $k) if $pid == 0;
    push @kids, $pid;
}
waitpid($_, 0) for @kids;
open my $t, '>', $stop or die;
close $t;
waitpid($watcher, 0);

my @errors = map { open my $fh, '<', "$dir/errors.$_" or die; <$fh> } 1 .. $k;
is(scalar(@errors), 0, 'no call of alice or bob failed or waited (max_statement_time = 5)')
    or diag(join '', @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
open my $fh, '<', "$dir/names" or die;
my @names = <$fh>;
is(scalar(@names), 0, 'dlock took no named lock eve could see and hold')
    or diag("eve saw and took: @names");

# And, holding nothing of dlock's, eve changes nothing: a fresh caller is
# served at once.
my $alice = $my->connect('alice');
$alice->do('SET SESSION max_statement_time = 5');
ok(DlockMy::one($alice, "SELECT dlock.try_lock('nl/after', 'z', 60)"), 'a new acquisition afterwards');
done_testing;
