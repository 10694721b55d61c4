# 037_own_transaction.t: a transaction's own xact_lock, and acquirers whose
# snapshot is older than a change of holder.
#
# 1. Inside one transaction that holds xact_lock(r) (or try_xact_lock(r)):
#    try_lock(r, h) returns NULL and CALL lock(r, h, ...) raises 40P01 at
#    once, whatever its wait (they used to acquire the lease too: two
#    holdings of r at once); xact_lock(r) and try_xact_lock(r) again return
#    the first one's fence (they used to draw a new one).  In the next
#    transaction of the same connection, and in autocommit, the marker the
#    committed transaction left counts for nothing: the lease is taken, and
#    a new xact_lock gets a new, greater fence.  After ROLLBACK TO a
#    savepoint taken before the xact_lock, the lock is undone.
# 2. A REPEATABLE READ transaction whose snapshot shows a resource free
#    after another holder took it: its try_lock, lock or xact_lock locked
#    the row, saw the holding, returned NULL and kept the row locked to the
#    end of the transaction, so the holder's unlock and renew waited for
#    it.  Now the acquirer gets error 1020 and its transaction is rolled
#    back (its locks with it), and the holder renews and releases at once.
# 3. lock() of another holder in a transaction that took, re-entered or
#    renewed the resource's holding: 40P01 at once, not a wait for itself.
# Statements run with max_statement_time = 5 and the server with
# innodb_lock_wait_timeout = 20: a call that waits shows as an error.
# Promises: P2 P5 P12
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(time);

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

my $a = conn('alice');
my $b = conn('bob', 'REPEATABLE READ');
my $b_si = res($b, 'SELECT @@session.innodb_snapshot_isolation');

# 1. The transaction's own xact_lock.
for my $first (['xact_lock', 'CALL dlock.xact_lock(?, NULL)'], ['try_xact_lock', 'SELECT dlock.try_xact_lock(?)']) {
    my ($what, $sql) = @$first;
    my $r = "own/$what";
    $a->begin_work;
    my $f = res($a, $sql, $r);
    like($f, qr/^\d+$/, "$what in a transaction: a fence");
    is(res($a, "SELECT dlock.try_lock(?, 'h', 60)", $r), undef, "$what, then try_lock in the same transaction: NULL");
    for my $wait ('NULL', '0', '0.5') {
        my ($res, $secs) = @{ run($a, "CALL dlock.lock(?, 'h', 60, $wait)", $r) };
        is($res, 'error 1644 40P01', "$what, then lock(wait $wait) in the same transaction: 40P01");
        cmp_ok($secs, '<', 0.4, "... at once") if $wait ne '0.5';
    }
    is(res($a, 'CALL dlock.xact_lock(?, NULL)', $r), $f, "$what, then xact_lock again: the same fence");
    is(res($a, 'SELECT dlock.try_xact_lock(?)', $r), $f, "$what, then try_xact_lock again: the same fence");
    is(res($a, 'SELECT COUNT(*) FROM dlock.locks WHERE resource = ?', $r), 0, 'no lease was taken');
    is(res($b, 'SELECT dlock.try_lock(?, ?, 60)', $r, 'other'), undef, "another session's try_lock: NULL");
    $a->commit;
    # The next transaction of the same connection: the marker is stale.
    $a->begin_work;
    my $f2 = res($a, $sql, $r);
    cmp_ok($f2, '>', $f, "$what in the next transaction of the connection: a new, greater fence");
    $a->rollback;
    $a->begin_work;
    my $g = res($a, "SELECT dlock.try_lock(?, 'h', 60)", $r);
    like($g, qr/^\d+$/, "try_lock in the next transaction: acquired");
    cmp_ok($g, '>', $f, '... with a greater fence');
    $a->commit;
    is(res($a, "SELECT dlock.unlock(?, 'h', NULL)", $r), 0, 'released in autocommit');
    $a->begin_work;
    $a->do('SAVEPOINT s');
    my $f3 = res($a, $sql, $r);
    $a->do('ROLLBACK TO SAVEPOINT s');
    my $g2 = res($a, "SELECT dlock.try_lock(?, 'h', 60)", $r);
    ok($g2 && $g2 > $f3, "$what undone by ROLLBACK TO: try_lock in the same transaction acquires");
    $a->rollback;
}
# In autocommit, one statement after another: nothing is held in between.
{
    my $r = 'own/autocommit';
    my $f = res($a, 'SELECT dlock.try_xact_lock(?)', $r);
    my $f2 = res($a, 'SELECT dlock.try_xact_lock(?)', $r);
    cmp_ok($f2, '>', $f, 'try_xact_lock in autocommit, twice: a new fence each time');
    ok(res($a, "SELECT dlock.try_lock(?, 'h', 60)", $r), 'then try_lock in autocommit: acquired');
}

# 2. An acquirer whose REPEATABLE READ snapshot shows the resource free
#    after alice took it.
for my $acq (['try_lock', "SELECT dlock.try_lock(?, 'hb', 60)"],
             ['lock', "CALL dlock.lock(?, 'hb', 60, 0)"],
             ['xact_lock', 'CALL dlock.xact_lock(?, 0)'],
             ['try_xact_lock', 'SELECT dlock.try_xact_lock(?)']) {
    my ($what, $sql) = @$acq;
    my $r = "stale/$what";
    ok(res($a, "SELECT dlock.try_lock(?, 'ha', 60)", $r), "$what: the row exists");
    is(res($a, "SELECT dlock.unlock(?, 'ha', NULL)", $r), 0, '... and is free');
    $b->begin_work;
    is(res($b, 'SELECT COUNT(*) FROM dlock.locks WHERE resource = ?', $r), 0, "bob's snapshot: free");
    my $f = res($a, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
    ok($f, 'alice takes it');
    my $got = res($b, $sql, $r);
    is($got, 'error 1020 HY000', "bob's $what from the older snapshot: error 1020 (his transaction rolled back)");
    my ($renew, $secs) = @{ run($a, "SELECT dlock.renew(?, 'ha', 60, NULL)", $r) };
    ok($renew && $renew !~ /^error/ && $secs < 4, "alice renews at once while bob's session is still open")
        or diag("renew: $renew after $secs s");
    ($renew, $secs) = @{ run($a, "SELECT dlock.unlock(?, 'ha', NULL)", $r) };
    is($renew, 0, 'alice releases');
    cmp_ok($secs, '<', 4, '... at once');
    $b->rollback;
    # An acquisition from a snapshot that still shows the row as it is.
    $b->begin_work;
    is(res($b, 'SELECT COUNT(*) FROM dlock.locks WHERE resource = ?', $r), 0, "bob's new snapshot: free");
    like(res($b, $sql, $r), qr/^\d+$/, "bob's $what from a current snapshot: acquired");
    $b->rollback;
}
# 3. A holding the transaction itself took, re-entered or renewed: lock()
#    of another holder raises 40P01 at once instead of waiting for its own
#    transaction (it waited until its wait ran out, or the lease ended);
#    the same holder re-enters; a lease taken by an earlier, committed
#    transaction of the connection is waited for as usual.
for my $first (['try_lock', "SELECT dlock.try_lock(?, 'h1', 60)", 0],
               ['lock', "CALL dlock.lock(?, 'h1', 60, NULL)", 0],
               ['renew', "SELECT dlock.renew(?, 'h1', 60, NULL)", 1],
               ['re-entry', "SELECT dlock.try_lock(?, 'h1', 60)", 1],
               ['unlock of one of two', "SELECT dlock.unlock(?, 'h1', NULL)", 2]) {
    my ($what, $sql, $before) = @$first;
    my $r = "self/$what";
    res($a, "SELECT dlock.try_lock(?, 'h1', 60)", $r) for 1 .. $before;
    $a->begin_work;
    my $x = res($a, $sql, $r);
    ok(defined $x && $x !~ /^error/, "$what of h1 in a transaction");
    my ($res, $secs) = @{ run($a, "CALL dlock.lock(?, 'h2', 60, NULL)", $r) };
    is($res, 'error 1644 40P01', "$what, then lock(h2) without a wait limit in the same transaction: 40P01");
    cmp_ok($secs, '<', 0.4, '... at once');
    ($res, $secs) = @{ run($a, "CALL dlock.lock(?, 'h2', 60, 2)", $r) };
    is($res, 'error 1644 40P01', "$what, then lock(h2, wait 2 s): 40P01");
    cmp_ok($secs, '<', 0.4, '... at once');
    is(res($a, "SELECT dlock.try_lock(?, 'h2', 60)", $r), undef, '... try_lock(h2): NULL');
    like(res($a, "CALL dlock.lock(?, 'h1', 60, NULL)", $r), qr/^\d+$/, '... lock(h1): re-entered');
    $a->commit;
    $a->begin_work;
    ($res, $secs) = @{ run($a, "CALL dlock.lock(?, 'h2', 60, 0.3)", $r) };
    is($res, undef, "in the next transaction, lock(h2, wait 0.3 s) waits for h1's lease: NULL");
    cmp_ok($secs, '>=', 0.29, '... after its wait');
    $a->rollback;
}

is(res($b, 'SELECT @@session.innodb_snapshot_isolation'), $b_si,
   "bob's innodb_snapshot_isolation is his own again after the next call");

done_testing();
