# 036_no_wait_random.t: a randomized workload against 035_no_wait.t's
# promise.  Workers of two users run random dlock calls on a few resources
# (and new ones) in autocommit mode and in READ COMMITTED and REPEATABLE
# READ transactions that stay open a while and commit or roll back; the
# calls that never wait (try_lock, try_xact_lock, lock and xact_lock with
# wait 0, check_fence, the view, reap) must each return without an error
# (reap inside a transaction: refused with 25001) and well before innodb_lock_wait_timeout (20 s; statements end after 5 s);
# the others (unlock, renew, assert_fence, unlock_all) may wait for
# another transaction (see the README on REPEATABLE READ snapshots) and fail
# only as documented (55P03, 42501, a deadlock, max_statement_time).
# Inside transactions acquisitions may also fail as documented, at once:
# error 1020 in REPEATABLE READ (a snapshot older than a change of holder:
# the transaction rolled back), 40P01 from lock() (its own transaction holds
# the resource).
# Transactions now and then stay open longer than the bound, so that a call
# waiting behind one shows.
# DLOCK_MY_RANDOM_SECONDS sets the length (default 15).
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep time);

my $seconds = $ENV{DLOCK_MY_RANDOM_SECONDS} || 15;
my $workers = 6;
my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);
my $end_all = time + $seconds;
my $bound = 4;

# One worker: prints one line per call that broke the promise.
sub worker {
    my ($id, $out) = @_;
    srand($$ ^ time);
    my $user = $id % 2 ? 'alice' : 'bob';
    my $c = $my->connect($user);
    $c->do('SET SESSION max_statement_time = 5');
    my $holder = "w$id";
    my %fence;    # resource -> fence this worker last got
    while (time < $end_all) {
        my $mode = (undef, 'READ COMMITTED', 'REPEATABLE READ')[int rand 3];
        if ($mode) {
            $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $mode");
            $c->begin_work;
        }
        for (1 .. 1 + int rand 4) {
            # new resources: the same for every worker during a quarter second
            my $r = rand() < 0.2 ? 'new/' . int(time * 4) : 'r' . int rand 4;
            my $f = $fence{$r} // 1;
            my @ops = (
                [1, "SELECT dlock.try_lock(?, ?, ?)", $r, $holder, 0.2 + rand 1],
                [1, 'SELECT dlock.try_xact_lock(?)', $r],
                [1, 'CALL dlock.lock(?, ?, ?, 0)', $r, $holder, 0.2 + rand 1],
                [1, 'CALL dlock.xact_lock(?, 0)', $r],
                [1, 'SELECT dlock.check_fence(?, ?)', $r, $f],
                [1, 'SELECT COUNT(*) FROM dlock.locks WHERE resource = ?', $r],
                [1, 'CALL dlock.reap()'],
                [0, 'SELECT dlock.unlock(?, ?, NULL)', $r, $holder],
                [0, 'SELECT dlock.renew(?, ?, ?, NULL)', $r, $holder, 0.2 + rand 1],
                [0, 'SELECT dlock.assert_fence(?, ?)', $r, $f],
                [0, "SELECT dlock.unlock_all(?)", $holder],
                [0, "SELECT dlock.try_lock(?, 'w0', 1)", $r],    # another worker's holder text
            );
            my ($never_waits, $sql, @bind) = @{ $ops[int rand @ops] };
            my $t0 = time;
            my $res = eval { $sql =~ /^CALL/ ? DlockMy::call_one($c, $sql, @bind) : DlockMy::one($c, $sql, @bind) };
            my $err = $@ ? ($c->state // '?') . ' ' . ($c->err // '?') . ': ' . ($c->errstr // $@) : undef;
            my $secs = time - $t0;
            $fence{$r} = $res if defined $res && $res =~ /^\d{10,}$/ && $sql =~ /try_lock|lock\(/;
            my $bad;
            # Documented outcomes inside a transaction (README, MySQL
            # "Traps"): an acquisition whose REPEATABLE READ snapshot is
            # older than a change of holder gets error 1020, its
            # transaction rolled back; lock() where only the end of its own
            # transaction could free the resource, 40P01.  Both at once.
            my $documented = $mode && defined $err && $sql =~ /try_lock|xact_lock|dlock\.lock/
                && ($err =~ /^HY000 1020: / && $mode eq 'REPEATABLE READ'
                    || $err =~ /^40P01 / && $sql =~ /dlock\.lock/);
            if ($documented) {
                $bad = 'waited' if $secs >= $bound;
                if (!$bad) {
                    last if $err =~ / 1020: /;    # the transaction is gone
                    next;
                }
            } elsif ($never_waits && $mode && $sql =~ /reap/) {
                # refused inside a transaction, at once
                $bad = 'waited' if $secs >= $bound;
                $bad = 'not refused' if ($err // '') !~ /^25001 /;
                undef $err unless $bad;
            } elsif ($never_waits) {
                $bad = 'waited' if $secs >= $bound;
                $bad = 'failed' if defined $err;
            } elsif (defined $err && $err !~ /^(55P03|42501|40001 1213|70100 1969) /) {
                $bad = 'failed';
            }
            if ($bad) {
                (my $e = $err // '') =~ s/\s+/ /g;
                printf $out "%s %s %s (%s, %.2f s) %s\n", $bad, $sql, join(',', map { $_ // 'NULL' } @bind),
                    $mode // 'autocommit', $secs, $e;
                last if defined $err && $mode;    # the transaction may be gone
            }
            sleep rand 0.2 if $mode;
        }
        if ($mode) {
            sleep $bound + 0.5 if rand() < 0.04;    # now and then, longer than the bound
            eval { rand() < 0.5 ? $c->commit : $c->rollback; 1 } or eval { $c->rollback };
        }
    }
    close $out;
    POSIX::_exit(0);
}

my @kids;
for my $id (1 .. $workers) {
    pipe(my $rd, my $wr) or die;
    my $pid = fork // die;
    if ($pid == 0) { close $rd; worker($id, $wr); }
    close $wr;
    push @kids, [$pid, $rd];
}
my @bad;
for my $k (@kids) {
    my $fh = $k->[1];
    push @bad, <$fh>;
    waitpid $k->[0], 0;
}
my $root = $my->connect('root');
my $held = DlockMy::one($root, 'SELECT COUNT(*) FROM dlock.leases WHERE holder IS NOT NULL');
is(scalar(@bad), 0, "$workers workers for $seconds s: no call that never waits waited or failed, none failed otherwise")
    or diag(join '', @bad[0 .. ($#bad < 20 ? $#bad : 19)]);
ok(defined $held, "the table is readable afterwards ($held holdings left)");
done_testing;
