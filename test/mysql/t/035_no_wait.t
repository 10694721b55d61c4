# 035_no_wait.t: no dlock call waits behind another transaction where the
# contract says it does not, and no transaction can pin a holding that is
# not its own.  The server runs with innodb_lock_wait_timeout = 20 and the
# calls under test with max_statement_time = 5: a call that waits for a row
# lock ends with an error after 5 s instead of returning, which the checks
# below report (the bound only tells waiting from not waiting: none of these
# calls does any work near a second).
#
# Blockers, each an open transaction of another session: the first
# acquisition of a new resource (try_lock or xact_lock), a failed try_lock
# and a waiting lock() in READ COMMITTED and REPEATABLE READ, another user's
# assert_fence, renew and unlock of a holding not theirs, a SERIALIZABLE
# reader of dlock.locks, a rollback of a new row with acquirers around it,
# a snapshot older than the reaper's deletion of a row, a snapshot older
# than a change of the row (MariaDB 11.6+'s innodb_snapshot_isolation), and
# every pair of calls on one resource inside one transaction, a CALL
# dlock.reap() refused inside a transaction, a takeover of a holder's
# expired lease (its unlock_all passes by, and its renew from an old
# snapshot returns NULL).  The caller's
# innodb_snapshot_isolation survives every call.
# Promises: P4 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(time sleep);

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);
my $root = $my->connect('root');

# conn(user, isolation): a connection whose statements end after 5 s.
sub conn {
    my ($user, $iso) = @_;
    my $c = $my->connect($user);
    $c->do('SET SESSION max_statement_time = 5');
    $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso") if $iso;
    return $c;
}

# run(dbh, sql, binds...): [result or "error STATE: message", seconds].
# A CALL's result is the first column of its row.
sub run {
    my ($dbh, $sql, @bind) = @_;
    my $t0 = time;
    my $res = eval { $sql =~ /^CALL/ ? DlockMy::call_one($dbh, $sql, @bind) : DlockMy::one($dbh, $sql, @bind) };
    $res = 'error ' . ($dbh->state // '?') . ': ' . ($dbh->errstr // $@) if !defined $res && $@;
    return [$res, time - $t0];
}

# quick(dbh, sql, binds...): the result, after checking the call neither
# failed nor waited.
my $quick_bound = 4;
sub quick {
    my ($name, $dbh, $sql, @bind) = @_;
    my ($res, $secs) = @{ run($dbh, $sql, @bind) };
    my $ok = $secs < $quick_bound && !(defined $res && $res =~ /^error /);
    ok($ok, "$name: returns at once") or diag(sprintf "%s -> %s after %.2f s", $sql, $res // 'NULL', $secs);
    return $res;
}

my $alice = conn('alice');
my $alice2 = conn('alice');
my $bob = conn('bob');
my $carol = conn('bob');

# 1. The first acquisition of a new resource, uncommitted: every other
#    acquirer answers at once (NULL), so do the readers; after the commit
#    the resource is as the transaction left it.
for my $first (['try_lock', "SELECT dlock.try_lock(?, 'b', 60)"],
               ['xact_lock', 'CALL dlock.xact_lock(?, NULL)']) {
    my ($what, $sql) = @$first;
    my $r = "new/$what";
    $bob->begin_work;
    ok(run($bob, $sql, $r)->[0], "bob's $what of a new resource inside a transaction");
    for my $c (["try_lock", "SELECT dlock.try_lock(?, 'a', 10)"],
               ["lock, no wait", "CALL dlock.lock(?, 'a', 10, 0)"],
               ["lock, 0.3 s", "CALL dlock.lock(?, 'a', 10, 0.3)"],
               ["try_xact_lock", "SELECT dlock.try_xact_lock(?)"],
               ["xact_lock, no wait", "CALL dlock.xact_lock(?, 0)"]) {
        is(quick("behind bob's uncommitted $what: alice's $c->[0]", $alice, $c->[1], $r), undef,
           "behind bob's uncommitted $what: alice's $c->[0] is NULL");
    }
    is(quick("behind bob's uncommitted $what: check_fence", $alice, "SELECT dlock.check_fence(?, 1)", $r), 0,
       'check_fence: false');
    quick("behind bob's uncommitted $what: the view", $alice, "SELECT COUNT(*) FROM dlock.locks WHERE resource = ?", $r);
    quick("behind bob's uncommitted $what: reap", $alice, 'CALL dlock.reap()');
    $bob->commit;
    if ($what eq 'xact_lock') {
        ok(quick('after the commit', $alice, "SELECT dlock.try_lock(?, 'a', 10)", $r), 'the resource is free once the transaction ends');
    } else {
        is(quick('after the commit', $alice, "SELECT dlock.try_lock(?, 'a', 10)", $r), undef, "bob's lease holds once committed");
    }
}

# 2. A transaction that created a resource's row rolls back while two
#    acquirers try it: both answer NULL at once, no deadlock; afterwards
#    the resource is free and an acquisition's lease starts when it is made.
{
    my $r = 'new/rollback';
    $bob->begin_work;
    ok(run($bob, "SELECT dlock.try_lock(?, 'b', 60)", $r)->[0], 'bob creates a resource in a transaction');
    my @kids;
    for my $h ('x', 'y') {
        pipe(my $rd, my $wr) or die;
        my $pid = fork // die;
        if ($pid == 0) {
            close $rd;
            my $c = conn('alice');
            syswrite($wr, "ready\n");    # connected: bob rolls back after this
            my $res = run($c, "SELECT dlock.try_lock(?, ?, 60)", $r, $h);
            print $wr join("\t", $res->[0] // 'NULL', $res->[1]);
            close $wr;
            POSIX::_exit(0);
        }
        close $wr;
        push @kids, [$pid, $rd];
    }
    # Each child connected first: on a loaded machine a child still
    # connecting 0.5 s after its fork took the resource after the rollback.
    for my $k (@kids) {
        my $fh = $k->[1];
        sysread($fh, my $ready, 6);    # unbuffered: select() below sees what follows
        die "a child did not connect\n" unless defined $ready && $ready eq "ready\n";
    }
    # Each answers at once, beside bob's open creation: its answer is
    # awaited (30 s at most: one that waits for bob is wrong, and is seen
    # below) before the rollback.  A fixed sleep let a late child run after.
    for my $k (@kids) {
        my $bits = '';
        vec($bits, fileno($k->[1]), 1) = 1;
        select(my $rout = $bits, undef, undef, 30);
    }
    $bob->rollback;
    for my $k (@kids) {
        my $fh = $k->[1];
        local $/;
        my ($res, $secs) = split /\t/, <$fh>;
        waitpid $k->[0], 0;
        ok($res eq 'NULL' && $secs < $quick_bound, 'a try_lock beside the rolled-back creation: NULL at once')
            or diag("got $res after $secs s");
    }
    my $t0 = time;
    ok(quick('after the rollback', $alice, "SELECT dlock.try_lock(?, 'a', 10)", $r), 'the resource is free after the rollback');
    my $left = one_root("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1e6 FROM dlock.leases WHERE resource = ? AND tail = 0", $r);
    ok($left > 9, "the lease runs from the acquisition ($left s left of 10)");
}

sub one_root { DlockMy::one($root, @_) }

# 3. Holdings that are not the caller's: bob's assert_fence, renew and
#    unlock of alice's holding fail, and leave no lock behind, inside an open
#    transaction: alice renews and releases at once.
for my $call (['assert_fence', "SELECT dlock.assert_fence(?, ?)", 'fence'],
              ['renew', "SELECT dlock.renew(?, 'ha', 60, NULL)"],
              ['unlock', "SELECT dlock.unlock(?, 'ha', NULL)"]) {
    my ($what, $sql, $arg) = @$call;
    my $r = "theirs/$what";
    my $f = DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
    $bob->begin_work;
    like(run($bob, $sql, $r, $arg ? $f : ())->[0], qr/^error (42501|55P03)/, "bob's $what of alice's holding fails");
    ok(quick("after bob's failed $what, inside his transaction: alice's renew", $alice, "SELECT dlock.renew(?, 'ha', 60, NULL)", $r),
       "alice's renew goes through");
    is(quick("... and alice's unlock", $alice, "SELECT dlock.unlock(?, 'ha', NULL)", $r), 0, 'alice releases');
    $bob->rollback;
}

# 4. A failed try_lock and a lock() that timed out, inside READ COMMITTED
#    and REPEATABLE READ transactions, keep nothing: the holder renews.
for my $iso ('READ COMMITTED', 'REPEATABLE READ') {
    my $c = conn('bob', $iso);
    for my $call (['try_lock', "SELECT dlock.try_lock(?, 'hb', 60)"],
                  ['lock', "CALL dlock.lock(?, 'hb', 60, 0.3)"],
                  ['try_xact_lock', "SELECT dlock.try_xact_lock(?)"],
                  ['xact_lock', "CALL dlock.xact_lock(?, 0.3)"]) {
        my ($what, $sql) = @$call;
        my $r = "failed/$iso/$what";
        DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
        $c->begin_work;
        is(run($c, $sql, $r)->[0], undef, "$iso: bob's $what of alice's resource is NULL");
        ok(quick("$iso, after bob's failed $what: alice's renew", $alice, "SELECT dlock.renew(?, 'ha', 60, NULL)", $r),
           'alice renews');
        $c->rollback;
    }
}

# 5. assert_fence pins a holding for its transaction: no takeover, release
#    or break, but the holder's renew still goes through.
{
    my $r = 'pinned';
    my $f = DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
    $alice->begin_work;
    ok(run($alice, "SELECT dlock.assert_fence(?, ?)", $r, $f)->[0], 'alice pins her holding');
    ok(quick('pinned: the holder renews from another session', $alice2, "SELECT dlock.renew(?, 'ha', 60, NULL)", $r),
       "the holder's renew goes through");
    is(quick('pinned: another acquirer', $bob, "SELECT dlock.try_lock(?, 'hb', 60)", $r), undef, 'no one else acquires it');
    $alice->commit;
    is(DlockMy::one($alice, "SELECT dlock.unlock(?, 'ha', NULL)", $r), 0, 'released after the pin');

    # Past its lease, a pinned holding is not taken over nor reaped until
    # the pinning transaction ends.
    $r = 'pinned/expired';
    $f = DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 0.5)", $r);
    $alice->begin_work;
    ok(run($alice, "SELECT dlock.assert_fence(?, ?)", $r, $f)->[0], 'alice pins a holding with a short lease');
    sleep 0.7;
    is(quick('pinned, expired: another acquirer', $bob, "SELECT dlock.try_lock(?, 'hb', 60)", $r), undef, 'not taken over');
    is(quick('pinned, expired: try_xact_lock', $bob, "SELECT dlock.try_xact_lock(?)", $r), undef, 'not taken by xact_lock');
    quick('pinned, expired: reap', $bob, 'CALL dlock.reap()');
    is(one_root("SELECT holder FROM dlock.leases WHERE resource = ? AND tail = 0", $r), 'ha', 'not reaped');
    is(quick('pinned, expired: the holder renews', $alice2, "SELECT dlock.renew(?, 'ha', 60, NULL)", $r), undef,
       'and the holder cannot revive it');
    $alice->commit;
    my $f2 = quick('after the pin', $bob, "SELECT dlock.try_lock(?, 'hb', 60)", $r);
    ok($f2 && $f2 > $f, 'taken over once the pinning transaction ended');
}

# 6. Snapshots older than the row: a REPEATABLE READ transaction acquires a
#    resource whose row the reaper deleted after its snapshot, and one whose
#    row another session created or changed after it.
{
    my $c = conn('bob', 'REPEATABLE READ');
    for my $r ('reaped/xact', 'reaped/lock') {
        DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
        DlockMy::one($alice, "SELECT dlock.unlock(?, 'ha', NULL)", $r);
    }
    $root->do("UPDATE dlock.leases SET released_at = released_at - INTERVAL 2 HOUR WHERE resource LIKE 'reaped/%'");
    $c->begin_work;
    run($c, 'SELECT COUNT(*) FROM dlock.locks');    # the snapshot
    DlockMy::call_one($root, 'CALL dlock.reap()');
    is(one_root("SELECT COUNT(*) FROM dlock.leases WHERE resource LIKE 'reaped/%'"), 0, 'the reaper deleted both rows');
    ok(run($c, "CALL dlock.xact_lock('reaped/xact', 3)")->[0], 'xact_lock acquires a row reaped after the snapshot');
    ok(run($c, "CALL dlock.lock('reaped/lock', 'hb', 60, 3)")->[0], 'lock acquires a row reaped after the snapshot');
    $c->commit;

    DlockMy::one($alice, "SELECT dlock.try_lock('changed/old', 'ha', 60)");
    DlockMy::one($alice, "SELECT dlock.unlock('changed/old', 'ha', NULL)");
    $c->begin_work;
    run($c, 'SELECT COUNT(*) FROM dlock.locks');    # the snapshot
    for my $r ('changed/new', 'changed/old') {
        DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
        DlockMy::one($alice, "SELECT dlock.unlock(?, 'ha', NULL)", $r);
    }
    like(quick('a row created after the snapshot', $c, "SELECT dlock.try_lock('changed/new', 'hb', 60)"), qr/^\d+$/,
         'try_lock acquires a row created after the snapshot');
    like(quick('a row changed after the snapshot', $c, "SELECT dlock.try_lock('changed/old', 'hb', 60)"), qr/^\d+$/,
         'try_lock acquires a row changed after the snapshot');
    $c->commit;
}

# 7. Every pair of calls on one resource inside one transaction: each
#    returns at once, admitted (a fence) or refused (NULL, or 40P01 when it
#    could only wait for its own transaction); never a wait for itself.
{
    my %call = (
        try_lock   => "SELECT dlock.try_lock(?, 'h', 60)",
        lock       => "CALL dlock.lock(?, 'h', 60, NULL)",
        xact_lock  => 'CALL dlock.xact_lock(?, NULL)',
        try_xact   => 'SELECT dlock.try_xact_lock(?)',
        lock_other => "CALL dlock.lock(?, 'other', 60, NULL)",
    );
    my $n = 0;
    my @expired;
    for my $iso ('REPEATABLE READ', 'READ COMMITTED') {
        my $c = conn('alice', $iso);
        for my $kind ('new', 'free', 'expired') {
            my @pairs;
            for my $x (sort keys %call) {
                for my $y (sort keys %call) {
                    next if $x eq 'lock_other' || ($y eq 'lock_other' && $x !~ /xact/);
                    push @pairs, [$x, $y, "pair/$kind/" . $n++];
                }
            }
            for my $p (@pairs) {
                my $r = $p->[2];
                DlockMy::one($alice, "SELECT dlock.try_lock(?, 'o', ?)", $r, $kind eq 'expired' ? 0.05 : 60) if $kind ne 'new';
                DlockMy::one($alice, "SELECT dlock.unlock(?, 'o', NULL)", $r) if $kind eq 'free';
            }
            sleep 0.1;
            for my $p (@pairs) {
                my ($x, $y, $r) = @$p;
                $c->begin_work;
                my $first = run($c, $call{$x}, $r);
                my $second = run($c, $call{$y}, $r);
                my $fence = DlockMy::one($c, 'SELECT fence FROM dlock.locks WHERE resource = ?', $r);
                my $af = $fence ? run($c, 'SELECT dlock.assert_fence(?, ?)', $r, $fence) : ['none', 0];
                my $third = run($c, $call{$x}, $r);
                $c->rollback;
                my $ok = !grep { $_->[1] >= $quick_bound || (defined $_->[0] && $_->[0] =~ /^error (?!40P01|55P03)/) }
                    $first, $second, $af, $third;
                ok($ok, "$iso, $kind resource, one transaction: $x, $y, assert_fence, $x again: each answers at once")
                    or diag(join ' / ', map { sprintf '%s after %.2f s', $_->[0] // 'NULL', $_->[1] } $first, $second, $af, $third);
            }
        }
    }
}

# 8. Every call that never waits, against open transactions in every state
#    of an existing resource: an xact_lock, the holder's uncommitted
#    re-entry, renew and unlock, its assert_fence, a failed try_lock.
{
    my @blockers = (
        ['xact_lock',          undef, 'CALL dlock.xact_lock(?, NULL)'],
        ['uncommitted re-entry', 'ha', "SELECT dlock.try_lock(?, 'ha', 60)"],
        ['uncommitted renew',  'ha',  "SELECT dlock.renew(?, 'ha', 60, NULL)"],
        ['uncommitted unlock', 'ha',  "SELECT dlock.unlock(?, 'ha', NULL)"],
        ['assert_fence',       'ha',  'SELECT dlock.assert_fence(?, ?)'],
        ['failed try_lock',    'ha',  "SELECT dlock.try_lock(?, 'hb', 60)", 'bob'],
    );
    my @calls = (
        ['try_lock',           "SELECT dlock.try_lock(?, 'hc', 60)"],
        ['lock, no wait',      "CALL dlock.lock(?, 'hc', 60, 0)"],
        ['try_xact_lock',      'SELECT dlock.try_xact_lock(?)'],
        ['xact_lock, no wait', 'CALL dlock.xact_lock(?, 0)'],
        ['check_fence',        'SELECT dlock.check_fence(?, 1)'],
        ['the view',           'SELECT COUNT(*) FROM dlock.locks WHERE resource = ?'],
        ['reap',               'CALL dlock.reap()'],
        ['unlock_all',         "SELECT dlock.unlock_all('hc')"],
    );
    my $n = 0;
    for my $b (@blockers) {
        my ($what, $held, $sql, $user) = @$b;
        my $r = 'matrix/' . $n++;
        my $f = DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $r);
        DlockMy::one($alice, "SELECT dlock.unlock(?, 'ha', NULL)", $r) unless $held;
        my $c = $user ? $bob : $alice2;
        $c->begin_work;
        run($c, $sql, $r, $sql =~ /assert_fence/ ? $f : ());
        for my $call (@calls) {
            my ($cw, $csql) = @$call;
            quick("behind $what: $cw", $carol, $csql, $csql =~ /\?/ ? $r : ());
        }
        $c->rollback;
    }
}

# 10. Transactions that changed other resources get in nobody's way: an
#     open transaction that acquired, took over, released, renewed, pinned
#     or xact_locked some resources, then every call that never waits on a
#     new resource and on a free one.
{
    my @blockers = (
        ['a new acquisition',     "SELECT dlock.try_lock('other/new', 'ha', 60)"],
        ['a takeover',            "SELECT dlock.try_lock('other/expired', 'ha', 60)"],
        ['a re-acquisition',      "SELECT dlock.try_lock('other/free', 'ha', 60)"],
        ['a release',             "SELECT dlock.unlock('other/held', 'ha', NULL)"],
        ['a renewal',             "SELECT dlock.renew('other/held', 'ha', 60, NULL)"],
        ['a pin',                 "SELECT dlock.assert_fence('other/held', ?)"],
        ['an xact_lock',          "CALL dlock.xact_lock('other/xact', NULL)"],
    );
    my $n = 0;
    for my $b (@blockers) {
        my ($what, $sql) = @$b;
        $root->do("DELETE FROM dlock.leases WHERE resource LIKE 'other/%'");
        $root->do("DELETE FROM dlock.pins WHERE resource LIKE 'other/%'");
        DlockMy::one($alice, "SELECT dlock.try_lock('other/expired', 'hx', 0.05)");
        DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ha', 60)", $_) for 'other/free', 'other/xact';
        DlockMy::one($alice, "SELECT dlock.unlock(?, 'ha', NULL)", $_) for 'other/free', 'other/xact';
        my $f = DlockMy::one($alice, "SELECT dlock.try_lock('other/held', 'ha', 60)");
        sleep 0.1;
        for my $iso ('READ COMMITTED', 'REPEATABLE READ') {
            my $c = conn('alice', $iso);
            $c->begin_work;
            my $res = run($c, $sql, $sql =~ /\?/ ? $f : ());
            ok(defined $res->[0] && $res->[0] !~ /^error/, "$iso: $what in an open transaction") or diag($res->[0]);
            for my $r ('fresh/' . $n++, 'fresh/' . $n++) {
                if ($n % 4 == 0) {    # a free resource, not a new one
                    DlockMy::one($alice, "SELECT dlock.try_lock(?, 'hb', 60)", $r);
                    DlockMy::one($alice, "SELECT dlock.unlock(?, 'hb', NULL)", $r);
                }
                ok(quick("$iso, behind $what: try_lock of $r", $bob, "SELECT dlock.try_lock(?, 'hb', 60)", $r), 'acquired');
                is(quick("... unlock", $bob, "SELECT dlock.unlock(?, 'hb', NULL)", $r), 0, 'released');
                ok(quick("... try_xact_lock", $bob, "SELECT dlock.try_xact_lock(?)", $r), 'acquired for the statement');
                ok(quick("... lock", $bob, "CALL dlock.lock(?, 'hb', 60, 0)", $r), 'acquired');
                quick("... reap", $bob, 'CALL dlock.reap()');
            }
            $c->rollback;
        }
    }
}

# 11. CALL dlock.reap() inside a transaction (START TRANSACTION in READ
#     COMMITTED or REPEATABLE READ, or autocommit off) is refused at once
#     with 25001 and changes and locks nothing: the rows it would free would
#     stay locked to the end of the caller's transaction (a procedure cannot
#     commit apart from it), so an expired lease would not be free at once,
#     and a REPEATABLE READ scan's gap locks would hold up new resources.
#     In autocommit it frees the lease.
{
    my $n = 0;
    for my $mode ('REPEATABLE READ', 'READ COMMITTED', 'autocommit off') {
        my $r = 'reapx/' . $n++;
        $root->do('ALTER EVENT dlock.reap DISABLE');
        DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ho', 0.05)", $r);
        sleep 0.1;
        my $c = conn('alice', $mode =~ /READ/ ? $mode : undef);
        if ($mode eq 'autocommit off') { $c->do('SET autocommit = 0') } else { $c->begin_work }
        my $res = run($c, 'CALL dlock.reap()');
        like($res->[0], qr/^error 25001: .*autocommit/, "$mode: CALL dlock.reap() refused (25001)") or diag($res->[0]);
        ok($res->[1] < $quick_bound, "$mode: ... at once");
        is(DlockMy::one($root, "SELECT COUNT(*) FROM dlock.locks WHERE resource = ?", $r), 1, "$mode: ... the expired lease is still listed (not reaped)");
        ok(quick("$mode, reap refused in an open transaction: try_lock of the expired lease", $bob, "SELECT dlock.try_lock(?, 'hr', 60)", $r), '... acquired');
        ok(quick("$mode, reap refused in an open transaction: try_lock of a new resource", $bob, "SELECT dlock.try_lock(?, 'hr', 60)", "$r/new"), '... acquired');
        is(quick("... unlock_all", $bob, "SELECT dlock.unlock_all('hr')"), 2, '... both released');
        if ($mode eq 'autocommit off') { $c->do('ROLLBACK'); $c->do('SET autocommit = 1') } else { $c->rollback }
        $root->do('ALTER EVENT dlock.reap ENABLE');
    }
    my $r = 'reapx/auto';
    $root->do('ALTER EVENT dlock.reap DISABLE');
    DlockMy::one($alice, "SELECT dlock.try_lock(?, 'ho', 0.05)", $r);
    sleep 0.1;
    my $c = conn('alice');
    ok(defined quick('autocommit: CALL dlock.reap()', $c, 'CALL dlock.reap()'), 'autocommit: reap runs');
    is(DlockMy::one($root, "SELECT COUNT(*) FROM dlock.locks WHERE resource = ?", $r), 0, '... and frees the expired lease');
    $root->do('ALTER EVENT dlock.reap ENABLE');
}

# 12. unlock_all passes by an expired holding of its holder that another
#     transaction is taking over (it used to wait for that transaction's row
#     lock), and releases the holder's live ones.
for my $iso ('READ COMMITTED', 'REPEATABLE READ') {
    my $r = "ua/$iso";
    DlockMy::one($alice, "SELECT dlock.try_lock(?, 'hu', 0.05)", $r);
    DlockMy::one($alice, "SELECT dlock.try_lock(?, 'hu', 60)", "$r/live");
    sleep 0.1;
    my $c = conn('bob', $iso);
    $c->begin_work;
    ok(DlockMy::one($c, "SELECT dlock.try_lock(?, 'hb', 60)", $r), "$iso: bob takes over the expired lease in an open transaction");
    is(quick("$iso, behind a takeover: unlock_all of the old holder", $alice, "SELECT dlock.unlock_all('hu')"), 1, '... releases only the live holding');
    $c->rollback;
}

# 13. A holder's renew inside a REPEATABLE READ transaction whose snapshot
#     still shows its lease live, after the lease expired and another
#     transaction took it over (still open): NULL at once (it used to wait
#     for the takeover's transaction).
{
    my $r = 'renewx';
    DlockMy::one($alice, "SELECT dlock.try_lock(?, 'hn', 60)", $r);
    my $c = conn('alice', 'REPEATABLE READ');
    $c->begin_work;
    is(DlockMy::one($c, 'SELECT COUNT(*) FROM dlock.locks WHERE resource = ?', $r), 1, 'a snapshot with the lease live');
    ok(DlockMy::one($alice, "SELECT dlock.renew(?, 'hn', 0.05, NULL)", $r), 'renewed for 50 ms (autocommit)');
    sleep 0.1;
    my $b = conn('bob', 'READ COMMITTED');
    $b->begin_work;
    ok(DlockMy::one($b, "SELECT dlock.try_lock(?, 'hb', 60)", $r), 'bob takes the expired lease over in an open transaction');
    is(quick('renew with an old snapshot, behind the takeover', $c, "SELECT dlock.renew(?, 'hn', 60, NULL)", $r), undef, '... NULL: lost');
    $c->rollback;
    $b->rollback;
}

# 9. The routines turn innodb_snapshot_isolation off inside and give the
#    caller's setting back: after a call, after a call's error, and (at the
#    next call) after a call ended by max_statement_time while it waited.
for my $si (1, 0) {
    my $c = conn('alice');
    $c->do("SET SESSION innodb_snapshot_isolation = $si");
    DlockMy::one($c, "SELECT dlock.try_lock('si', 'hs', 60)");
    is(DlockMy::one($c, 'SELECT @@session.innodb_snapshot_isolation'), $si, "snapshot isolation $si: kept after a call");
    like(run($c, "SELECT dlock.try_lock('', 'hs', 60)")->[0], qr/^error 22023/, 'a call that fails');
    is(DlockMy::one($c, 'SELECT @@session.innodb_snapshot_isolation'), $si, '... kept after its error');
    my $f = DlockMy::one($c, "SELECT dlock.try_lock('si', 'hs', 60)");
    $alice->begin_work;
    ok(run($alice, "SELECT dlock.assert_fence('si', ?)", $f)->[0], 'pinned by another session');
    $c->do('SET SESSION max_statement_time = 1');
    like(run($c, "SELECT dlock.unlock_all('hs')")->[0], qr/^error 70100/, 'a release waiting for the pin ends at max_statement_time');
    $alice->rollback;
    DlockMy::one($c, "SELECT dlock.renew('si', 'hs', 60, NULL)");
    is(DlockMy::one($c, 'SELECT @@session.innodb_snapshot_isolation'), $si, '... the next call gives the setting back');
    is(DlockMy::one($c, "SELECT dlock.unlock_all('hs')"), 1, 'released');
}

done_testing;
