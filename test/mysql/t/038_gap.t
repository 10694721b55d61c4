# 038_gap.t: a REPEATABLE READ transaction whose acquirer (or renew) passed
# by a row another transaction has locked must not make the first
# acquisition of a new resource wait.  A locking read with SKIP LOCKED
# that skips a resource's row goes on to the next key of the index and,
# in REPEATABLE READ, locks the gap before it: the gap after the skipped
# row, where the row of a new resource named just after it is inserted.
# try_lock of such a new resource waited for the skipping transaction to
# end (found by 070_model, about one run in eleven).
#
# Each case: a blocker transaction holds the row(s) of resource P/m; a
# REPEATABLE READ transaction's call on P/m passes it by (NULL) and stays
# open; then try_lock of the new resource P/n (sorting right after P/m,
# nothing in between) in autocommit must return a fence at once.
#   1. dlock.leases: try_lock, lock (no wait) or try_xact_lock of a
#      resource whose row another transaction's try_lock (uncommitted)
#      holds.
#   2. dlock.pins: try_lock (a takeover) of an expired lease pinned by
#      the holder's open assert_fence.
#   3. renew (both tables): renew, from a snapshot older than it, of a
#      holding an open break_lock transaction is changing.
#   4. try_lock from a snapshot older than the reaper's deletion of the
#      row: new resources on either side of it.
# Statements run with max_statement_time = 5 and the server with
# innodb_lock_wait_timeout = 20: a call that waits shows as an error.
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(time sleep);

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);

sub conn {
    my ($user, $iso) = @_;
    my $c = $my->connect($user, undef, RaiseError => 0);
    $c->do('SET SESSION max_statement_time = 5');
    $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso") if $iso;
    return $c;
}

# run(dbh, sql, binds...): [result, or "error ERRNO SQLSTATE", seconds].
sub run {
    my ($dbh, $sql, @bind) = @_;
    my $t0 = time;
    my $res;
    if ($sql =~ /^CALL/) {
        my $sth = $dbh->prepare($sql);
        if ($sth->execute(@bind)) {
            my $row = $sth->fetchrow_arrayref;
            $res = $row ? $row->[0] : undef;
            $sth->finish;
            1 while $sth->more_results;
        } else {
            $res = 'error ' . $sth->err . ' ' . $sth->state;
        }
    } else {
        my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
        $res = $row ? $row->[0] : 'error ' . $dbh->err . ' ' . $dbh->state;
    }
    return [$res, time - $t0];
}

sub res { return run(@_)->[0] }

# new_at_once(dbh, sql, resource, name): the call on a new resource
# returns a fence, not an error after waiting.
sub new_at_once {
    my ($dbh, $sql, $r, $name) = @_;
    my ($res, $secs) = @{ run($dbh, $sql, $r) };
    like($res // 'NULL', qr/^\d+$/, "$name: the first acquisition of new $r returns a fence")
        or diag(sprintf "%s -> %s after %.2f s", $sql, $res // 'NULL', $secs);
    cmp_ok($secs, '<', 4, "... without waiting");
}

my $alice = conn('alice');
my $alice2 = conn('alice', 'REPEATABLE READ');
my $bob = conn('bob', 'REPEATABLE READ');
my $carol = conn('bob');
my $admin = conn('admin');

# 1. dlock.leases.
for my $case (['try_lock', "SELECT dlock.try_lock(?, 'b', 60)", 'g1'],
              ['lock, no wait', "CALL dlock.lock(?, 'b', 60, 0)", 'g4'],
              ['try_xact_lock', "SELECT dlock.try_xact_lock(?)", 'g5']) {
    my ($what, $sql, $p) = @$case;
    like(res($alice, "SELECT dlock.try_lock(?, 'a', 60)", "$p/m"), qr/^\d+$/, "$p/m exists");
    is(res($alice, "SELECT dlock.unlock(?, 'a', NULL)", "$p/m"), 0, "$p/m free");
    $alice->begin_work;
    like(res($alice, "SELECT dlock.try_lock(?, 'a', 60)", "$p/m"), qr/^\d+$/, "$p: alice takes $p/m in an open transaction");
    $bob->begin_work;
    is(res($bob, $sql, "$p/m"), undef, "$p: bob's $what of $p/m in REPEATABLE READ: NULL");
    new_at_once($carol, "SELECT dlock.try_lock(?, 'c', 60)", "$p/n", "$p, leases, after bob's $what");
    $bob->rollback;
    $alice->rollback;
}

# 2. dlock.pins: a takeover of an expired lease its holder pins.
{
    my $f = res($alice, "SELECT dlock.try_lock('g2/m', 'a', 1)");
    like($f, qr/^\d+$/, 'g2/m held for 1 s');
    $alice->begin_work;
    is(res($alice, 'SELECT dlock.assert_fence(?, ?)', 'g2/m', $f), 1, 'alice pins it');
    sleep 1.2;
    $bob->begin_work;
    is(res($bob, "SELECT dlock.try_lock('g2/m', 'b', 60)"), undef, "bob's takeover of the pinned, expired lease: NULL");
    new_at_once($carol, "SELECT dlock.try_lock(?, 'c', 60)", 'g2/n', 'pins, after a pinned takeover');
    $bob->rollback;
    $alice->rollback;
}

# 3. renew from a snapshot older than an open break_lock.
{
    like(res($alice, "SELECT dlock.try_lock('g3/m', 'h', 60)"), qr/^\d+$/, 'g3/m held by h');
    $alice2->begin_work;
    is(res($alice2, "SELECT COUNT(*) FROM dlock.locks WHERE resource = 'g3/m'"), 1, "alice's snapshot shows it held");
    $admin->begin_work;
    is(res($admin, "SELECT dlock.break_lock('g3/m')"), 1, 'admin breaks it in an open transaction');
    is(res($alice2, "SELECT dlock.renew('g3/m', 'h', 60, NULL)"), undef, "h's renew from an older snapshot: NULL");
    new_at_once($carol, "SELECT dlock.try_lock(?, 'c', 60)", 'g3/n', 'renew passing by a break');
    $alice2->rollback;
    $admin->rollback;
}

# 4. A snapshot older than the reaper's deletion of the row (the locking
#    read finds it delete-marked): other resources' first acquisitions,
#    on either side of it, and the resource's own, do not wait.
{
    my $root = $my->connect('root');
    like(res($alice, "SELECT dlock.try_lock('g6/m', 'a', 60)"), qr/^\d+$/, 'g6/m exists');
    is(res($alice, "SELECT dlock.unlock('g6/m', 'a', NULL)"), 0, 'g6/m free');
    $root->do("UPDATE dlock.leases SET released_at = released_at - INTERVAL 2 HOUR WHERE resource = 'g6/m'");
    $bob->begin_work;
    is(res($bob, "SELECT COUNT(*) FROM dlock.locks WHERE resource = 'g6/m'"), 0, "bob's snapshot");
    DlockMy::call_one($root, 'CALL dlock.reap()');
    is(DlockMy::one($root, "SELECT COUNT(*) FROM dlock.leases WHERE resource = 'g6/m'"), 0, 'g6/m reaped');
    my $bf = res($bob, "SELECT dlock.try_lock('g6/m', 'b', 60)");
    ok(!defined $bf || $bf =~ /^\d+$/, "bob's try_lock of g6/m, reaped after his snapshot: a fence or NULL")
        or diag($bf);
    new_at_once($carol, "SELECT dlock.try_lock(?, 'c', 60)", 'g6/l', 'after a read of a reaped row');
    new_at_once($carol, "SELECT dlock.try_lock(?, 'c', 60)", 'g6/n', 'after a read of a reaped row');
    $bob->rollback;
}

done_testing;
