#!/usr/bin/perl
# 080_fast.t: the portable edition's fast path (written at the top of
# try_lock and unlock, core.sql: try_lock of a free row or of an ended
# holding, and unlock of a count-1 holding, in one statement each) keeps every promise the general path keeps, on every server
# 010_core.t uses.  Each case is one the fast path could get wrong if it
# skipped a check: another session's uncommitted acquisition, release or
# transaction-scoped lock (try_lock must answer NULL at once, never wait:
# a statement_timeout turns a wait into an error), a fair waiter in lock()
# or a client ticket (a newcomer must not jump the queue), a lock-delay in
# force (given, or from the dlock.lock_delay setting), the fence epoch (a
# missing epoch row must start a new epoch, as the general path does),
# owner by role, synchronous_commit, the released event, an assert_fence
# pin (unlock waits for it), a keepalive in flight over a session's end
# (its holding is not taken over), and a failed attempt that leaves no lock.
# Then twins: each state of a row and each argument or setting the fast
# path looks at, on two rows made alike, one called as is (the fast path
# when it applies) and one with lock_delay => '0' (the same request, which
# only the general path takes): the answers and what they leave must be
# the same, and the fast path must have decided the cases it is for (no
# call of _attempt, counted by track_functions).
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P1 P2 P3 P4 P5 P7 P13
use strict;
use warnings;
use DBI;
use DBD::Pg qw(:async);
use Time::HiRes qw(time sleep);
use Test::More;

use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    run_server(@$s);
}
done_testing();

sub run_server {
    my ($lbl, $bindir) = @_;
    my ($dir, $admin) = start_server($lbl, $bindir, 'fast');
    # Calls of dlock's PL/pgSQL functions counted (pg_stat_xact_user_functions):
    # whether a call went through the general path (_attempt) or not.
    $admin->do("ALTER DATABASE app SET track_functions = 'pl'") or die $admin->errstr;
    my $al = conn('alice');
    my $bo = conn('bob');
    my $db = conn('dbo');
    my $su = conn('admin');
    $_->do("SET statement_timeout = '20s'") for ($al, $bo);

    basics($al, $bo);
    never_waits($al, $bo, $su);
    queues($al, $bo);
    delays($al, $bo, $su);
    epoch($al, $db);
    promises($al, $bo, $su);
    nothing_left($al, $bo);
    twins($al, $bo, $db, $su);
    session_twins($al, $bo, $db, $su);
    session_races($al, $bo, $su);
    refusal_races($al, $bo, $su);
    unlock_cases($al, $bo, $db, $su);
    session_unlocks($al, $bo, $db, $su);

    $_->disconnect for ($al, $bo, $db, $su, $admin);
    stop_server($bindir, $dir);
}

# free_row: make resource's row exist and be free (the fast path's case:
# a new resource goes to the general path); the fence it was taken with.
sub free_row {
    my ($dbh, $r) = @_;
    my $f = q1($dbh, "SELECT dlock.try_lock(?, 'setup', '30s')", $r);
    die "$label: setup of $r failed" unless $f;
    die "$label: setup unlock of $r failed" unless defined q1($dbh, "SELECT dlock.unlock(?, 'setup')", $r);
    return $f;
}

# session_holding: a holding of resource r in a session of its own, of
# ttl (300 ms), or of the resources @$r in one (tried again if the session
# ended first on a loaded machine).
sub session_holding {
    my ($dbh, $r, $delay, $ttl) = @_;
    for my $try (1 .. 20) {
        my $sx = q1($dbh, "SELECT dlock.open_session(?::interval, 'os')", $ttl // '300 milliseconds');
        return $sx if eval {
            q1($dbh, "SELECT dlock.try_lock(?, session => ?, lock_delay => ?)", $_, $sx, $delay)
                or die for ref $r ? @$r : ($r);
            1;
        };
    }
    die "$label: setup of a session's holding of $r failed";
}

# twin_session: a twins setup: both rows (fa/tN/a, then fa/tN/b) held in
# one session of 300 ms (their states name it).
sub twin_session {
    my ($dbh, $delay) = @_;
    return sub {
        session_holding($dbh, [$_[0], $_[0] =~ s{/a$}{/b}r], $delay) if $_[0] =~ m{/a$};
    };
}

sub basics {
    my ($al, $bo) = @_;
    my $f0 = free_row($al, 'fa/basic');
    my $f1 = q1($al, "SELECT dlock.try_lock('fa/basic', 'h1', '30s')");
    ok($f1 && $f1 > $f0, "$label: try_lock of a free row: a fence above the last one");
    is(q1($al, "SELECT count || ' ' || holder || ' ' || owner FROM dlock.locks WHERE resource = 'fa/basic'"),
       '1 h1 alice', "$label: the holding is recorded with holder, count 1 and the caller's role");
    is(q1($al, "SELECT dlock.try_lock('fa/basic', 'h1', '30s')"), $f1, "$label: re-entry keeps the fence");
    is(q1($al, "SELECT dlock.try_lock('fa/basic', 'h2', '30s')"), undef, "$label: another holder gets NULL");
    is(q1($al, "SELECT dlock.unlock('fa/basic', 'h1')"), 1, "$label: unlock of a re-entered holding: 1 left");
    is(q1($al, "SELECT dlock.unlock('fa/basic', 'h1', ?)", $f1 + 1), undef, "$label: unlock under another fence: NULL");
    is(q1($al, "SELECT dlock.unlock('fa/basic', 'h1', ?)", $f1), 0, "$label: unlock under its fence: released");
    is(q1($al, "SELECT dlock.unlock('fa/basic', 'h1')"), undef, "$label: unlock of a free row: NULL");
    my $f2 = q1($al, "SELECT dlock.try_lock('fa/basic', 'h2')");
    ok($f2 && $f2 > $f1, "$label: the default lease: acquired, a greater fence");
    is(q1($al, "SELECT (expires_at - acquired_at)::text FROM dlock.locks WHERE resource = 'fa/basic'"), '00:00:30',
       "$label: ... with dlock.default_lease's 30 s");
    $al->do("SET dlock.default_lease = '2min'");
    q1($al, "SELECT dlock.unlock('fa/basic', 'h2')");
    q1($al, "SELECT dlock.try_lock('fa/basic', 'h2')");
    is(q1($al, "SELECT (expires_at - acquired_at)::text FROM dlock.locks WHERE resource = 'fa/basic'"), '00:02:00',
       "$label: ... and with the setting when it is set");
    $al->do("RESET dlock.default_lease");
    q1($al, "SELECT dlock.unlock('fa/basic', 'h2')");
    # Bad input is refused as by the general path, also on a free row.
    like(err($al, "SELECT dlock.try_lock('fa/basic', 'h1', '-1s')"), qr/^22023: lease must be positive/,
         "$label: a negative lease: 22023");
    ok(q1($al, "SELECT dlock.try_lock('fa/basic', 'h1', '1 month')"), "$label: a lease of a month (the general path's case)");
    is(q1($al, "SELECT (expires_at - acquired_at) >= interval '28 days' FROM dlock.locks WHERE resource = 'fa/basic'"), 1,
       "$label: ... runs a month");
    q1($al, "SELECT dlock.unlock('fa/basic', 'h1')");
    like(err($al, "SELECT dlock.try_lock('fa/basic', '')"), qr/^22023: holder must not be empty/, "$label: an empty holder: 22023");
    like(err($al, "SELECT dlock.try_lock('fa/basic', 'h1', fair => NULL)"), qr/^22023: fair must not be null/,
         "$label: fair NULL: 22023");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 'fa/basic'"), 0, "$label: ... nothing changed");
}

# Another session's uncommitted acquisition (by the fast path), release,
# or transaction-scoped lock of a free row: try_lock answers NULL at once.
# statement_timeout = 5s: a try_lock that waited would raise 57014.
sub never_waits {
    my ($al, $bo, $su) = @_;
    free_row($al, 'fa/wait');
    $bo->do("SET statement_timeout = '5s'");
    $al->begin_work;
    ok(q1($al, "SELECT dlock.try_lock('fa/wait', 'a', '30s')"), "$label: an acquisition in an open transaction");
    is(err($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), 'no error',
       "$label: another session's try_lock during it does not wait");
    is(q1($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), undef, "$label: ... and returns NULL");
    is(q1($bo, "SELECT dlock.try_lock('fa/wait', 'a', '30s')"), undef,
       "$label: ... also for the same holder text from another session");
    is(q1($bo, "SELECT dlock.try_xact_lock('fa/wait')"), undef, "$label: ... and try_xact_lock");
    $al->commit;
    is(q1($bo, "SELECT holder FROM dlock.locks WHERE resource = 'fa/wait'"), 'a', "$label: the acquisition committed");

    # An uncommitted release: the row is free in the snapshot, locked.
    $al->begin_work;
    is(q1($al, "SELECT dlock.unlock('fa/wait', 'a')"), 0, "$label: a release in an open transaction");
    is(err($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), 'no error',
       "$label: try_lock during an uncommitted release does not wait");
    is(q1($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), undef, "$label: ... and returns NULL");
    $al->commit;

    # Another transaction's xact lock of the free row.
    $al->begin_work;
    ok(q1($al, "SELECT dlock.try_xact_lock('fa/wait')"), "$label: a transaction-scoped lock of the free row");
    is(err($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), 'no error',
       "$label: try_lock during another's xact lock does not wait");
    is(q1($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), undef, "$label: ... and returns NULL");
    is(q1($al, "SELECT dlock.try_lock('fa/wait', 'a', '30s')"), undef,
       "$label: the xact lock's own transaction cannot take a lease of it either");
    $al->commit;

    # A transaction that holds the free row's lock without the advisory
    # lock (break_lock of a free row locks it FOR UPDATE, and answers false).
    $su->begin_work;
    is(q1($su, "SELECT dlock.break_lock('fa/wait')"), 0, "$label: break_lock of the free row in an open transaction");
    is(err($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), 'no error',
       "$label: try_lock meanwhile does not wait for the row");
    is(q1($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), undef, "$label: ... and returns NULL");
    $su->commit;
    ok(q1($bo, "SELECT dlock.try_lock('fa/wait', 'b', '30s')"), "$label: free again once it ended");
    is(q1($bo, "SELECT dlock.unlock('fa/wait', 'b')"), 0, "$label: ... released");
    $bo->do("SET statement_timeout = '20s'");
}

# A fair waiter in lock() or a live client ticket keeps a newcomer out of a
# free row.
sub queues {
    my ($al, $bo) = @_;
    # Client ticket.
    free_row($al, 'fa/q');
    ok(q1($al, "SELECT dlock.try_lock('fa/q', 'a', '30s')"), "$label: a holds fa/q");
    is(q1($bo, "SELECT dlock.try_lock('fa/q', 't', '30s', fair => true)"), undef, "$label: t queues (client ticket)");
    is(q1($al, "SELECT dlock.unlock('fa/q', 'a')"), 0, "$label: a releases");
    is(q1($bo, "SELECT dlock.try_lock('fa/q', 'n', '30s')"), undef,
       "$label: a newcomer's try_lock of the free row: NULL, t's ticket is ahead");
    ok(q1($bo, "SELECT dlock.try_lock('fa/q', 't', '30s', fair => true)"), "$label: t, the head, takes it");
    is(q1($bo, "SELECT count(*) FROM dlock.queue WHERE resource = 'fa/q'"), 0, "$label: t's ticket left the queue");
    is(q1($bo, "SELECT dlock.unlock('fa/q', 't')"), 0, "$label: t releases");

    # The holder's own lapsed ticket goes with its acquisition (as _acquired does).
    $al->do("SET dlock.queue_ttl = '1ms'");
    ok(q1($al, "SELECT dlock.try_lock('fa/q', 'a', '30s')"), "$label: a holds fa/q again");
    is(q1($bo, "SELECT dlock.try_lock('fa/q', 'u', '30s', fair => true)"), undef, "$label: u queues");
    $bo->do("SET dlock.queue_ttl = '1ms'");
    is(q1($bo, "SELECT dlock.try_lock('fa/q', 'u', '30s', fair => true)"), undef, "$label: u's ticket now lapses in 1 ms");
    $bo->do("RESET dlock.queue_ttl");
    $al->do("RESET dlock.queue_ttl");
    q1($al, "SELECT dlock.unlock('fa/q', 'a')");
    sleep 0.01;
    ok(q1($bo, "SELECT dlock.try_lock('fa/q', 'u', '30s')"), "$label: u takes the free row");
    is(q1($bo, "SELECT count(*) FROM dlock.queue WHERE resource = 'fa/q'"), 0, "$label: ... and its ticket is gone");
    is(q1($bo, "SELECT dlock.unlock('fa/q', 'u')"), 0, "$label: u releases");

    # A session waiting in lock(..., fair => true), polling slowly.
    ok(q1($al, "SELECT dlock.try_lock('fa/q', 'a', '30s')"), "$label: a holds fa/q");
    my $w = async('bob', "SELECT dlock.lock('fa/q', 'w', '30s', '60s', fair => true)");
    my $seen = 0;
    for (1 .. 2000) {
        $seen = q1($al, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND objid = 0 AND granted");
        last if $seen;
        sleep 0.01;
    }
    ok($seen, "$label: w waits in lock() with a ticket (its fair-waiters mark is held)");
    # One lock() poll can come between the release and the newcomer: then
    # w holds it and the newcomer gets NULL all the same.
    is(q1($al, "SELECT dlock.unlock('fa/q', 'a')"), 0, "$label: a releases");
    is(q1($al, "SELECT dlock.try_lock('fa/q', 'n', '30s')"), undef,
       "$label: a newcomer's try_lock of the free row with a waiter in lock(): NULL");
    ok(result($w), "$label: w gets it");
    is(q1($al, "SELECT holder FROM dlock.locks WHERE resource = 'fa/q'"), 'w', "$label: ... and holds it");
    $w->[0]->disconnect;
}

# A lock-delay in force keeps the free row unavailable; the dlock.lock_delay
# setting gives a fast-path acquisition its delay.
sub delays {
    my ($al, $bo, $su) = @_;
    free_row($al, 'fa/d');
    ok(q1($al, "SELECT dlock.try_lock('fa/d', 'a', '30s', lock_delay => '1h')"), "$label: a takes fa/d with a lock-delay");
    ok(q1($su, "SELECT dlock.break_lock('fa/d')"), "$label: broken");
    is(q1($bo, "SELECT dlock.try_lock('fa/d', 'b', '30s')"), undef,
       "$label: try_lock of the free row under its lock-delay: NULL");

    free_row($al, 'fa/d2');
    $al->do("SET dlock.lock_delay = '1h'");
    ok(q1($al, "SELECT dlock.try_lock('fa/d2', 'a', '30s')"), "$label: a takes fa/d2 with dlock.lock_delay set");
    $al->do("RESET dlock.lock_delay");
    ok(q1($su, "SELECT dlock.break_lock('fa/d2')"), "$label: broken");
    is(q1($bo, "SELECT dlock.try_lock('fa/d2', 'b', '30s')"), undef,
       "$label: ... its setting's lock-delay is in force: NULL");

    free_row($al, 'fa/d3');
    ok(q1($al, "SELECT dlock.try_lock('fa/d3', 'a', '30s', lock_delay => '1h')"), "$label: a takes fa/d3 with a lock-delay");
    is(q1($al, "SELECT dlock.unlock('fa/d3', 'a')"), 0, "$label: a releases it cleanly");
    ok(q1($bo, "SELECT dlock.try_lock('fa/d3', 'b', '30s')"), "$label: a clean release leaves no delay: b takes it");
    q1($bo, "SELECT dlock.unlock('fa/d3', 'b')");
}

# The fast path draws fences after the epoch check: with the epoch row
# gone (a re-installation's state) the next fence starts a new epoch, in
# a session whose mark was made before (it names the old row).
sub epoch {
    my ($al, $db) = @_;
    free_row($al, 'fa/e');
    my $f1 = q1($al, "SELECT dlock.try_lock('fa/e', 'a', '30s')");
    is(q1($al, "SELECT dlock.unlock('fa/e', 'a')"), 0, "$label: taken and released (the session's epoch mark made)");
    $db->do("DELETE FROM dlock.fence_epoch") or die $db->errstr;
    my $f2 = q1($al, "SELECT dlock.try_lock('fa/e', 'a', '30s')");
    ok($f2 > $f1, "$label: the next fence is greater");
    is($f2 % (1 << 22), 0, "$label: ... and the first of a new epoch (the epoch row was checked)");
    ok(($f2 >> 22) > ($f1 >> 22), "$label: ... a later epoch");
    is(q1($db, "SELECT first_fence FROM dlock.fence_epoch"), $f2, "$label: ... recorded in dlock.fence_epoch");
    my $f3 = q1($al, "SELECT dlock.try_lock('fa/e2', 'a', '30s')");
    ok($f3 > $f2, "$label: fences go on increasing");
    q1($al, "SELECT dlock.unlock('fa/e', 'a')");
    q1($al, "SELECT dlock.unlock('fa/e2', 'a')");
}

# Owner by role, durability, the released event, an assert_fence pin.
sub promises {
    my ($al, $bo, $su) = @_;
    free_row($al, 'fa/p');
    ok(q1($al, "SELECT dlock.try_lock('fa/p', 'h', '30s')"), "$label: alice takes fa/p as h");
    is(q1($bo, "SELECT dlock.try_lock('fa/p', 'h', '30s')"), undef, "$label: bob with the same holder text: NULL");
    like(err($bo, "SELECT dlock.unlock('fa/p', 'h')"), qr/^42501: permission denied to unlock a lock held by role "alice"/,
         "$label: bob's unlock of alice's holding: 42501");
    is(q1($su, "SELECT dlock.unlock('fa/p', 'h')"), 0, "$label: a superuser may unlock it");
    # SET ROLE: the role in force is the owner.
    $su->do("GRANT alice TO bob");
    $bo->do("SET ROLE alice");
    ok(q1($bo, "SELECT dlock.try_lock('fa/p', 'h', '30s')"), "$label: bob as SET ROLE alice takes fa/p");
    is(q1($al, "SELECT owner::text FROM dlock.locks WHERE resource = 'fa/p'"), 'alice', "$label: ... owned by alice");
    $bo->do("RESET ROLE");
    is(q1($al, "SELECT dlock.unlock('fa/p', 'h')"), 0, "$label: alice releases it");
    $su->do("REVOKE alice FROM bob");

    # Durability: synchronous_commit raised to on for the transaction.
    $al->do("SET synchronous_commit = off");
    $al->begin_work;
    ok(q1($al, "SELECT dlock.try_lock('fa/p', 'h', '30s')"), "$label: taken with synchronous_commit = off");
    is(q1($al, "SHOW synchronous_commit"), 'on', "$label: ... raised to on for its transaction");
    $al->commit;
    is(q1($al, "SHOW synchronous_commit"), 'off', "$label: ... and back after it");
    $al->do("RESET synchronous_commit");

    # The released event of a fast unlock.
    my $ch = q1($bo, "SELECT dlock.channel('fa/p')");
    $bo->do(qq{LISTEN "$ch"});
    my $fence = q1($al, "SELECT fence FROM dlock.locks WHERE resource = 'fa/p'");
    is(q1($al, "SELECT dlock.unlock('fa/p', 'h')"), 0, "$label: released");
    my $n;
    for (1 .. 500) { q1($bo, "SELECT 1"); $n = $bo->pg_notifies and last; sleep 0.01; }
    is($n && $n->[2], qq({"event":"released","resource":"fa/p","fence":$fence}), "$label: ... with its event");
    $bo->do(qq{UNLISTEN "$ch"});

    # An assert_fence pin: the holder's unlock waits for the pinning transaction.
    my $f = q1($al, "SELECT dlock.try_lock('fa/p', 'h', '30s')");
    $su->begin_work;
    is(err($su, "SELECT dlock.assert_fence('fa/p', $f)"), 'no error', "$label: a pin by assert_fence");
    my $u = async('alice', "SELECT dlock.unlock('fa/p', 'h')");
    my $blocked = 0;
    for (1 .. 2000) {
        $blocked = q1($al, "SELECT count(*) FROM pg_stat_activity a WHERE cardinality(pg_blocking_pids(a.pid)) > 0 AND a.query LIKE '%unlock(''fa/p''%'");
        last if $blocked;
        sleep 0.01;
    }
    ok($blocked, "$label: the holder's unlock waits for the pin");
    is(q1($al, "SELECT holder FROM dlock.locks WHERE resource = 'fa/p'"), 'h', "$label: ... still held meanwhile");
    $su->commit;
    is(result($u), 0, "$label: ... and releases once the pin's transaction ended");
    $u->[0]->disconnect;
}

# A failed attempt on a free row (a ticket ahead) leaves no lock behind.
sub nothing_left {
    my ($al, $bo) = @_;
    free_row($al, 'fa/n');
    ok(q1($al, "SELECT dlock.try_lock('fa/n', 'a', '30s')"), "$label: a holds fa/n");
    is(q1($al, "SELECT dlock.try_lock('fa/n', 't', '30s', fair => true)"), undef, "$label: t queues");
    q1($al, "SELECT dlock.unlock('fa/n', 'a')");
    $bo->begin_work;
    is(q1($bo, "SELECT dlock.try_lock('fa/n', 'n', '30s')"), undef, "$label: a newcomer in a transaction block: NULL");
    is(q1($bo, "SELECT dlock.try_lock('fa/n', 'n2', '30s')"), undef, "$label: ... again");
    is(q1($bo, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"), 0,
       "$label: ... holding no advisory lock");
    $bo->commit;
    ok(q1($al, "SELECT dlock.try_lock('fa/n', 't', '30s', fair => true)"), "$label: t takes it");
    q1($al, "SELECT dlock.unlock('fa/n', 't')");
}

# state: what a call left on resource $r (read by the schema's owner $db),
# a fence told only as drawn after $before or not.
sub state {
    my ($db, $r, $before) = @_;
    return q1($db, q{
        SELECT coalesce((SELECT concat_ws(' ', 'holder=' || coalesce(l.holder, '-'), 'owner=' || coalesce(l.owner::text, '-'),
                                          'count=' || l.count, 'lease=' || coalesce(l.lease::text, '-'),
                                          'runs=' || coalesce(round(extract(epoch FROM l.expires_at - l.acquired_at))::text, '-'),
                                          'released=' || (l.released_at IS NOT NULL), 'kinds=' || l.kinds,
                                          'session=' || coalesce(l.session::text, '-'),
                                          'fence=' || CASE WHEN l.fence IS NULL THEN '-' WHEN l.fence > $2 THEN 'new' ELSE 'old' END)
                           FROM dlock.leases l WHERE l.resource = $1), 'no row')
               || ' tickets=' || (SELECT count(*) FROM dlock.tickets t WHERE t.resource = $1)
               || ' delays=' || (SELECT count(*) FROM dlock.delays d WHERE d.resource = $1)}, $r, $before);
}

# call: try_lock(resource, ARGS) by $dbh in a transaction of its own (after
# the statements in @pre, within it): "fence"/"NULL" or the error, its
# synchronous_commit after, the state it left, and the calls of _attempt
# it made ('-' after an error).
sub call {
    my ($dbh, $db, $r, $args, @pre) = @_;
    my $before = q1($db, "SELECT last_value FROM dlock.fences");
    $dbh->begin_work;
    for my $p (@pre) { $dbh->do($p) or die "$label: $p: " . $dbh->errstr }
    # (The counts of the view are this backend's not yet reported, which
    # may include earlier transactions': the difference is the call's.)
    my $count = "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
                  WHERE schemaname = 'dlock' AND funcname = '_attempt'";
    my $calls0 = q1($dbh, $count);
    my $row = $dbh->selectrow_arrayref("SELECT dlock.try_lock(?$args)", undef, $r);
    my ($out, $attempts);
    if ($dbh->err) {
        $out = $dbh->state . ': ' . ($dbh->errstr =~ s/^ERROR:\s*//r =~ s/\n.*//sr);
        $dbh->rollback;
        $attempts = '-';
    } else {
        $out = (defined $row->[0] ? 'fence' : 'NULL') . ' sync=' . q1($dbh, "SHOW synchronous_commit");
        $attempts = q1($dbh, $count) - $calls0;
        $dbh->commit;
    }
    return ($out . ' | ' . state($db, $r, $before), $attempts);
}

sub twins {
    my ($al, $bo, $db, $su) = @_;
    $su->do("GRANT alice TO bob");
    # Each case: [name, setup (code on resource r), caller, args, statements
    # before the call, whether the fast path decides it].
    my @cases = (
        ['a free row', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s'", [], 1],
        ['a free row, the default lease', sub { free_row($al, $_[0]) }, $al, ", 'h'", [], 1],
        ['a free row, lease NULL', sub { free_row($al, $_[0]) }, $al, ", 'h', NULL", [], 1],
        ['dlock.default_lease 2min', sub { free_row($al, $_[0]) }, $al, ", 'h'", ["SET LOCAL dlock.default_lease = '2min'"], 1],
        ['dlock.default_lease in ms', sub { free_row($al, $_[0]) }, $al, ", 'h'", ["SET LOCAL dlock.default_lease = ' 90000 '"], 1],
        ['dlock.default_lease of a day', sub { free_row($al, $_[0]) }, $al, ", 'h'", ["SET LOCAL dlock.default_lease = '1 day'"], 0],
        ['dlock.default_lease bad', sub { free_row($al, $_[0]) }, $al, ", 'h'", ["SET LOCAL dlock.default_lease = 'soon'"], 0],
        ['dlock.default_lease 0', sub { free_row($al, $_[0]) }, $al, ", 'h'", ["SET LOCAL dlock.default_lease = '0'"], 0],
        ['a lease of 25 hours', sub { free_row($al, $_[0]) }, $al, ", 'h', '25 hours'", [], 1],
        ['a lease of 1000 years in hours', sub { free_row($al, $_[0]) }, $al, ", 'h', '8766000 hours'", [], 1],
        ['a lease a second over', sub { free_row($al, $_[0]) }, $al, ", 'h', '8766000 hours 1 second'", [], 0],
        ['a lease of 0', sub { free_row($al, $_[0]) }, $al, ", 'h', '0'", [], 0],
        ['a lease of 1 day -1 hour', sub { free_row($al, $_[0]) }, $al, ", 'h', '1 day -1 hour'", [], 0],
        ['a NULL holder', sub { free_row($al, $_[0]) }, $al, ", NULL, '30s'", [], 0],
        ['shared NULL', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s', shared => NULL", [], 0],
        ['dlock.lock_delay 0', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s'", ["SET LOCAL dlock.lock_delay = '0'"], 1],
        ['synchronous_commit off', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s'", ["SET LOCAL synchronous_commit = off"], 1],
        ['REPEATABLE READ', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s'",
         ["SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"], 0],
        ['a read-only transaction', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s'", ["SET TRANSACTION READ ONLY"], 0],
        ['its own xact lock', sub { free_row($al, $_[0]) }, $al, ", 'h', '30s'", [], 0, 1],
        ['SET ROLE', sub { free_row($al, $_[0]) }, $bo, ", 'h', '30s'", ["SET LOCAL ROLE alice"], 1],
        ['a superuser', sub { free_row($al, $_[0]) }, $su, ", 'h', '30s'", [], 1],
        ['a new resource', sub { }, $al, ", 'h', '30s'", [], 0],
        ['held by another', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s')", $_[0]) }, $al, ", 'h', '30s'", [], 0],
        ['held by the holder (re-entry)', sub { q1($al, "SELECT dlock.try_lock(?, 'h', '30s')", $_[0]) }, $al, ", 'h', '30s'", [], 0],
        ['held twice by the holder', sub { q1($al, "SELECT dlock.try_lock(?, 'h', '30s')", $_[0]) for 1 .. 2 },
         $al, ", 'h', '30s'", [], 0],
        ['the holder\'s text of another role', sub { q1($bo, "SELECT dlock.try_lock(?, 'h', '30s')", $_[0]) },
         $al, ", 'h', '30s'", [], 0],
        ['an expired holding', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '1 millisecond')", $_[0]) },
         $al, ", 'h', '30s'", [], 1, 0, 0.01],
        ['the holder\'s own expired holding', sub { q1($al, "SELECT dlock.try_lock(?, 'h', '1 millisecond')", $_[0]) },
         $al, ", 'h', '30s'", [], 1, 0, 0.01],
        ['an ended session\'s holding', twin_session($bo), $al, ", 'h', '30s'", [], 1, 0, 0.35],
        ['an expired holding under a lock-delay', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '1 millisecond', lock_delay => '1h')", $_[0]) },
         $al, ", 'h', '30s'", [], 0, 0, 0.01],
        ['an expired holding, its lock-delay past', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '1 millisecond', lock_delay => '1 millisecond')", $_[0]) },
         $al, ", 'h', '30s'", [], 0, 0, 0.01],
        ['an ended session\'s holding under a lock-delay', twin_session($bo, '1h'),
         $al, ", 'h', '30s'", [], 0, 0, 0.35],
        ['a reaped holding', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '1 millisecond')", $_[0]) },
         $al, ", 'h', '30s'", [], 1, 0, 0.01, 1],
        ['a lock-delay in force', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s', lock_delay => '1h')", $_[0]);
                                          q1($su, "SELECT dlock.break_lock(?)", $_[0]) }, $al, ", 'h', '30s'", [], 0],
        # Broken while live (a break after the lease ran out finds nothing
        # to break and leaves an expired holding, which only the general
        # path takes: retried until the break breaks, as a loaded machine
        # may take longer than the lease between the two calls).
        ['a lock-delay past', sub { for my $try (1 .. 50) {
                                        q1($bo, "SELECT dlock.try_lock(?, 'o', '50 milliseconds', lock_delay => '5 milliseconds')", $_[0]);
                                        last if q1($su, "SELECT dlock.break_lock(?)", $_[0]);
                                    } }, $al, ", 'h', '30s'", [], 1, 0, 0.1],
        ['a delay of a clean release', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s', lock_delay => '1h')", $_[0]);
                                             q1($bo, "SELECT dlock.unlock(?, 'o')", $_[0]) }, $al, ", 'h', '30s'", [], 1],
        ['another\'s live ticket', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s')", $_[0]);
                                         q1($bo, "SELECT dlock.try_lock(?, 't', '30s', fair => true)", $_[0]);
                                         q1($bo, "SELECT dlock.unlock(?, 'o')", $_[0]) }, $al, ", 'h', '30s'", [], 0],
        ['the holder\'s own live ticket', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s')", $_[0]);
                                                q1($al, "SELECT dlock.try_lock(?, 'h', '30s', fair => true)", $_[0]);
                                                q1($bo, "SELECT dlock.unlock(?, 'o')", $_[0]) }, $al, ", 'h', '30s'", [], 0],
        ['a lapsed ticket of another', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s')", $_[0]);
                                             $bo->do("SET dlock.queue_ttl = '1ms'");
                                             q1($bo, "SELECT dlock.try_lock(?, 't', '30s', fair => true)", $_[0]);
                                             $bo->do("RESET dlock.queue_ttl");
                                             q1($bo, "SELECT dlock.unlock(?, 'o')", $_[0]) }, $al, ", 'h', '30s'", [], 1, 0, 0.01],
        ['the holder\'s lapsed ticket', sub { q1($bo, "SELECT dlock.try_lock(?, 'o', '30s')", $_[0]);
                                              $al->do("SET dlock.queue_ttl = '1ms'");
                                              q1($al, "SELECT dlock.try_lock(?, 'h', '30s', fair => true)", $_[0]);
                                              $al->do("RESET dlock.queue_ttl");
                                              q1($bo, "SELECT dlock.unlock(?, 'o')", $_[0]) }, $al, ", 'h', '30s'", [], 0, 0, 0.01],
        ['a row of shared holdings', sub { q1($bo, "SELECT dlock.try_lock(?, 's', '30s', shared => true)", $_[0]);
                                           q1($bo, "SELECT dlock.unlock(?, 's')", $_[0]) }, $al, ", 'h', '30s'", [], 0],
        ['a row held shared', sub { q1($bo, "SELECT dlock.try_lock(?, 's', '30s', shared => true)", $_[0]) },
         $al, ", 'h', '30s'", [], 0],
        ['a row an xact lock made', sub { $al->begin_work; $al->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
                                          q1($al, "SELECT dlock.try_xact_lock(?)", $_[0]); $al->commit }, $al, ", 'h', '30s'", [], 0],
    );
    run_twins($db, $su, @cases);
    $su->do("REVOKE alice FROM bob");
}

# run_twins: each case of twins on two rows made alike, one called as is
# and one with lock_delay => '0' (the general path only): the same answer
# and state, and the fast path decides the cases marked for it.
my $twin;     # twins made so far (their rows' names)
sub run_twins {
    my ($db, $su, @cases) = @_;
    for my $c (@cases) {
        my ($name, $setup, $who, $args, $pre, $fast, $xact, $nap, $reap) = @$c;
        my $n = ++$twin;
        my ($rf, $rg) = ("fa/t$n/a", "fa/t$n/b");
        $setup->($_) for ($rf, $rg);
        sleep $nap if $nap;
        q1($su, "SELECT dlock.reap()") if $reap;
        my @pre = @$pre;
        my (@fast, @gen);
        push @pre, "SELECT dlock.try_xact_lock('$rf')" if $xact;
        @fast = call($who, $db, $rf, $args, @pre);
        $pre[-1] = "SELECT dlock.try_xact_lock('$rg')" if $xact;
        @gen = call($who, $db, $rg, "$args, lock_delay => '0'", @pre);
        $gen[0] =~ s{fa/t$n/b}{fa/t$n/a}g;
        is($fast[0], $gen[0], "$label: twins, $name: as the general path ($gen[0])");
        if ($fast[1] ne '-') {
            is($fast[1] == 0 ? 1 : 0, $fast, "$label: twins, $name: " . ($fast ? 'the fast path decides' : 'the general path decides'));
        }
    }
}

# session_twins ([sessions]): try_lock(session => id) of a free row takes
# the fast path too; every check of _session_use stays (the holder, a
# lease given, the session's role, its end) and gives the general path's
# answer.
sub session_twins {
    my ($al, $bo, $db, $su) = @_;
    $su->do("GRANT alice TO bob");
    my $s = q1($al, "SELECT dlock.open_session('1h', 'hs')");
    my $sb = q1($bo, "SELECT dlock.open_session('1h', 'hb')");
    my $sd = q1($al, "SELECT dlock.open_session('1 day', 'hd')");
    my $closed = q1($al, "SELECT dlock.open_session('1h', 'hc')");
    q1($al, "SELECT dlock.close_session($closed)");
    my $short = q1($al, "SELECT dlock.open_session('10 milliseconds', 'hx')");
    my $pid = q1($al, "SELECT pg_backend_pid()");
    my @cases = (
        ['in a session', sub { free_row($al, $_[0]) }, $al, ", session => $s", [], 1],
        ['in a session, its holder given', sub { free_row($al, $_[0]) }, $al, ", 'hs', session => $s", [], 1],
        ['in a session, the default holder', sub { free_row($al, $_[0]) }, $al,
         ", dlock.session_holder(), session => $s", [], 1],
        ['in a session, a default-like holder', sub { free_row($al, $_[0]) }, $al, ", 'pid:$pid:1', session => $s", [], 1],
        ['in a session, another holder', sub { free_row($al, $_[0]) }, $al, ", 'x', session => $s", [], 0],
        ['in a session, an empty holder', sub { free_row($al, $_[0]) }, $al, ", '', session => $s", [], 0],
        ['in a session, a lease too', sub { free_row($al, $_[0]) }, $al, ", NULL, '30s', session => $s", [], 0],
        ['in another role\'s session', sub { free_row($al, $_[0]) }, $al, ", session => $sb", [], 0],
        ['in it under SET ROLE', sub { free_row($al, $_[0]) }, $bo, ", session => $s", ["SET LOCAL ROLE alice"], 1],
        ['in a closed session', sub { free_row($al, $_[0]) }, $al, ", session => $closed", [], 0],
        ['in a session whose ttl passed', sub { free_row($al, $_[0]) }, $al, ", session => $short", [], 0],
        ['in a session that never was', sub { free_row($al, $_[0]) }, $al, ", session => 12345", [], 0],
        ['in a session of a day', sub { free_row($al, $_[0]) }, $al, ", session => $sd", [], 0],
        ['in a session, REPEATABLE READ', sub { free_row($al, $_[0]) }, $al, ", session => $s",
         ["SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"], 0],
        ['in a session, held by it', sub { q1($al, "SELECT dlock.try_lock(?, session => $s)", $_[0]) },
         $al, ", session => $s", [], 0],
        ['in a session, held leased by its holder', sub { q1($al, "SELECT dlock.try_lock(?, 'hs', '30s')", $_[0]) },
         $al, ", session => $s", [], 0],
        ['leased, held by a session of the holder', sub { q1($al, "SELECT dlock.try_lock(?, session => $s)", $_[0]) },
         $al, ", 'hs', '30s'", [], 0],
    );
    run_twins($db, $su, @cases);
    $su->do("REVOKE alice FROM bob");
}

# session_races: the fast path in a session never waits and never takes
# in a session a close_session in flight is ending (its row locked FOR
# UPDATE: 55000, as the general path); a keepalive in flight does not
# stand in its way; the holding's row lock and the session's row lock go
# with the call's transaction.
sub session_races {
    my ($al, $bo, $su) = @_;
    my $s = q1($al, "SELECT dlock.open_session('1h', 'hr')");
    my $a2 = conn('alice');
    $a2->do("SET statement_timeout = '5s'");
    free_row($al, 'fa/sr');
    $al->begin_work;
    is(q1($al, "SELECT dlock.keepalive($s) > clock_timestamp()"), 1, "$label: a keepalive in an open transaction");
    ok(q1($a2, "SELECT dlock.try_lock('fa/sr', session => $s)"), "$label: ... a fast-path acquisition in its session meanwhile");
    $al->commit;
    is(q1($a2, "SELECT dlock.unlock('fa/sr', 'hr')"), 0, "$label: ... released");
    $al->begin_work;
    is(q1($al, "SELECT dlock.close_session($s)"), 0, "$label: a close_session in an open transaction");
    like(err($a2, "SELECT dlock.try_lock('fa/sr', session => $s)"), qr/^55000: session \d+ has ended/,
         "$label: ... an acquisition in its session meanwhile: 55000 at once");
    $al->rollback;
    my $f = q1($a2, "SELECT dlock.try_lock('fa/sr', session => $s)");
    ok($f, "$label: the close rolled back: the session takes it");
    $a2->begin_work;
    is(q1($a2, "SELECT dlock.unlock('fa/sr', 'hr')"), 0, "$label: an unlock in an open transaction");
    is(q1($a2, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"), 0,
       "$label: ... holding no advisory lock");
    $a2->commit;
    $a2->begin_work;
    ok(q1($a2, "SELECT dlock.try_lock('fa/sr', session => $s)"), "$label: taken again in an open transaction");
    my $c = async('alice', "SELECT dlock.close_session($s)");
    my $blocked = 0;
    for (1 .. 2000) {
        $blocked = q1($al, "SELECT count(*) FROM pg_stat_activity a WHERE cardinality(pg_blocking_pids(a.pid)) > 0"
                         . " AND a.query LIKE '%close_session($s)%'");
        last if $blocked;
        sleep 0.01;
    }
    ok($blocked, "$label: ... a close_session waits for that acquisition");
    $a2->commit;
    is(result($c), 1, "$label: ... and releases its holding once it committed");
    $c->[0]->disconnect;
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 'fa/sr' AND holder IS NOT NULL"), 0,
       "$label: ... nothing held");
    # A keepalive in flight when the session's committed end passes: the
    # fast path must not take its holding over (_lapsed: busy), nor wait.
    # (2 s, kept alive with 1 s left: 1 s more to check it by.)
    my $k = session_holding($a2, 'fa/sk', undef, '2 seconds');
    sleep 0.05 until q1($su, "SELECT expires_at <= clock_timestamp() + interval '1 second' FROM dlock.session_rows WHERE id = $k");
    $a2->begin_work;
    ok(q1($a2, "SELECT dlock.keepalive($k) > clock_timestamp() + interval '1 second'"),
       "$label: a keepalive in an open transaction (before the session's end)");
    sleep 0.1 until q1($su, "SELECT expires_at <= clock_timestamp() FROM dlock.session_rows WHERE id = $k");
    $bo->begin_work;
    is(q1($bo, "SELECT dlock.try_lock('fa/sk', 'o', '30s')"), undef,
       "$label: ... past the end it was extending: its holding not taken over, at once");
    is(row_locked($su, 'fa/sk'), 0, "$label: ... and the refusal, its transaction still open, holds no lock on the row");
    $bo->commit;
    $a2->commit;
    is(q1($bo, "SELECT dlock.try_lock('fa/sk', 'o', '30s')"), undef, "$label: ... nor once the keepalive committed");
    is(q1($a2, "SELECT dlock.close_session($k)"), 1, "$label: ... the session still holds it");
    ok(q1($bo, "SELECT dlock.try_lock('fa/sk', 'o', '30s')"), "$label: ... then it is taken");
    q1($bo, "SELECT dlock.unlock('fa/sk', 'o')");
    # unlock of an ended holding, in an open transaction: NULL, and the row
    # is not locked (a takeover meanwhile is not refused by it).
    ok(q1($al, "SELECT dlock.try_lock('fa/ue', 'h', '1 millisecond')"), "$label: a holding of 1 ms");
    sleep 0.01;
    $al->begin_work;
    is(q1($al, "SELECT dlock.unlock('fa/ue', 'h')"), undef, "$label: ... its unlock once ended, in an open transaction: NULL");
    is(row_locked($su, 'fa/ue'), 0, "$label: ... holding no lock on the row");
    ok(q1($bo, "SELECT dlock.try_lock('fa/ue', 'o', '30s')"), "$label: ... taken over meanwhile");
    $al->commit;
    q1($bo, "SELECT dlock.unlock('fa/ue', 'o')");
    $a2->disconnect;
}

# row_locked: 1 if another transaction holds resource r's row locked (a
# FOR KEY SHARE NOWAIT of it fails), else 0.
sub row_locked {
    my ($su, $r) = @_;
    $su->begin_work;
    $su->selectrow_array("SELECT 1 FROM dlock.leases WHERE resource = ? FOR KEY SHARE NOWAIT", undef, $r);
    my $state = $su->err ? $su->state : '';
    $su->rollback;
    return 0 if $state eq '';
    die "$label: row_locked($r): $state " . $su->errstr unless $state eq '55P03';
    return 1;
}

# refusal_races: another acquirer takes the row (and commits) between the
# fast path's snapshot and its lock: the fast path answers NULL and must
# give back the lock it took on the new version, or an open transaction
# would stall the new holder's renew until its lease ran out.  The window
# is widened with expired tickets of others on the row, which every
# attempt scans (each round: the leak or not, whatever the timing).
sub refusal_races {
    my ($al, $bo, $su) = @_;
    my $r = 'fa/race';
    free_row($al, $r);
    $su->do("INSERT INTO dlock.tickets (resource, ticket, holder, owner, queued_at, expires_at)
             SELECT ?, -i, 'old' || i, 'bob'::regrole, now() - interval '1 hour', now() - interval '1 hour'
               FROM generate_series(1, 40000) i", undef, $r) or die $su->errstr;
    my ($refused, $leaks) = (0, 0);
    for my $round (1 .. 8) {
        q1($bo, "SELECT dlock.try_lock(?, 'old', '1 millisecond')", $r) or next;
        sleep 0.01;
        my $as = $al->prepare("SELECT dlock.try_lock(?, 'ha', '30s')", { pg_async => PG_ASYNC });
        $as->execute($r);
        sleep 0.005 * $round;
        $bo->begin_work;
        my $f = q1($bo, "SELECT dlock.try_lock(?, 'b', '30s')", $r);
        $as->pg_result;
        my $fa = $as->fetchrow_arrayref->[0];
        if (!defined $f) {
            $refused++;
            $leaks += row_locked($su, $r);
        }
        $bo->rollback;
        q1($_->[0], "SELECT dlock.unlock_all(?)", $_->[1]) for [$al, 'ha'], [$bo, 'b'], [$bo, 'old'];
    }
    ok($refused > 0, "$label: refusal races: $refused of 8 rounds refused the second acquirer");
    is($leaks, 0, "$label: ... none left the row locked");
    $su->do("DELETE FROM dlock.tickets WHERE resource = ?", undef, $r);
}

# session_unlocks: unlock's fast path releases a session's holding of
# count 1 while its session lives (with its event), and leaves the rest to
# the general path: a session that ended (NULL, left for reap), a closed
# one (NULL), a re-entered holding (count down).
sub session_unlocks {
    my ($al, $bo, $db, $su) = @_;
    my $count = "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions
                  WHERE schemaname = 'dlock' AND funcname = '_may_change'";
    my $s = q1($al, "SELECT dlock.open_session('1h', 'hu')");
    free_row($al, 'fa/su');
    my $f = q1($al, "SELECT dlock.try_lock('fa/su', session => $s)");
    $al->do("LISTEN " . q1($al, "SELECT dlock.channel('fa/su')"));
    $al->begin_work;
    my $c0 = q1($al, $count);
    is(q1($al, "SELECT dlock.unlock('fa/su', 'hu')"), 0, "$label: unlock of a session's holding: released");
    is(q1($al, $count) - $c0, 0, "$label: ... by the fast path");
    $al->commit;
    # (the free row keeps the session's id: it counts only with a holder)
    is(q1($db, "SELECT coalesce(holder, '-') || ' ' || coalesce(session::text, '-') FROM dlock.leases WHERE resource = 'fa/su'"),
       "- $s", "$label: ... its row free");
    my $n = $al->pg_notifies;
    ok($n && $n->[2] =~ /"event":"released".*"fence":$f\b/, "$label: ... its released event sent");
    is(q1($al, "SELECT holdings FROM dlock.sessions WHERE id = $s"), 0, "$label: ... the session holds nothing");
    is(q1($db, "SELECT count(*) FROM dlock.locks WHERE resource = 'fa/su' OR session = $s"), 0,
       "$label: ... and dlock.locks lists neither");
    ok(q1($al, "SELECT dlock.try_lock('fa/su', session => $s)"), "$label: in the session again");
    ok(q1($al, "SELECT dlock.try_lock('fa/su', session => $s)"), "$label: ... re-entered");
    is(q1($al, "SELECT dlock.unlock('fa/su', 'hu')"), 1, "$label: unlock of the re-entered holding: 1 left");
    is(q1($al, "SELECT dlock.unlock('fa/su', 'hu', ?)", $f), undef, "$label: unlock under another fence: NULL");
    like(err($bo, "SELECT dlock.unlock('fa/su', 'hu')"), qr/^42501: /, "$label: unlock of it by another role: 42501");
    is(q1($al, "SELECT dlock.unlock('fa/su', 'hu')"), 0, "$label: ... then released");
    # Long enough to be live at the try_lock on a loaded machine (10 ms
    # ended before it once: 55000), then waited out.
    my $x = q1($al, "SELECT dlock.open_session('1 second', 'hx')");
    ok(q1($al, "SELECT dlock.try_lock('fa/su', session => $x)"), "$label: in a session of 1 s");
    sleep 0.1 until q1($db, "SELECT expires_at <= clock_timestamp() FROM dlock.session_rows WHERE id = $x");
    is(q1($al, "SELECT dlock.unlock('fa/su', 'hx')"), undef, "$label: unlock once the session ended: NULL");
    is(q1($db, "SELECT holder FROM dlock.leases WHERE resource = 'fa/su'"), 'hx', "$label: ... left for reap");
    q1($su, "SELECT dlock.reap()");
    my $y = q1($al, "SELECT dlock.open_session('1h', 'hy')");
    ok(q1($al, "SELECT dlock.try_lock('fa/su', session => $y)"), "$label: in another session");
    q1($al, "SELECT dlock.close_session($y)");
    is(q1($al, "SELECT dlock.unlock('fa/su', 'hy')"), undef, "$label: unlock once it was closed: NULL");
    q1($al, "SELECT dlock.close_session($s)");
}

# unlock: what its fast path must leave to the general path.
sub unlock_cases {
    my ($al, $bo, $db, $su) = @_;
    q1($al, "SELECT dlock.try_lock('fa/u1', 'h', '1 millisecond')");
    sleep 0.01;
    is(q1($al, "SELECT dlock.unlock('fa/u1', 'h')"), undef, "$label: unlock of an expired holding: NULL");
    is(q1($db, "SELECT holder FROM dlock.leases WHERE resource = 'fa/u1'"), 'h', "$label: ... left for reap");
    like(err($al, "SELECT dlock.unlock('fa/u1', NULL)"), qr/^22023: holder must not be null/, "$label: unlock, holder NULL: 22023");
    like(err($al, "SELECT dlock.unlock(NULL, 'h')"), qr/^22023: resource must not be null/, "$label: unlock, resource NULL: 22023");
    ok(q1($al, "SELECT dlock.try_lock('fa/u2', 'h', '30s', shared => true)"), "$label: a shared holding");
    is(q1($al, "SELECT dlock.unlock('fa/u2', 'h')"), 0, "$label: ... released by unlock (kinds.sql's path)");
    ok(q1($al, "SELECT dlock.try_lock('fa/u3', 'h', '30s')"), "$label: alice's holding");
    $al->begin_work;
    $al->do("SET TRANSACTION READ ONLY");
    like(err($al, "SELECT dlock.unlock('fa/u3', 'h')"), qr/^25006: /, "$label: unlock in a read-only transaction: 25006");
    is(q1($db, "SELECT holder FROM dlock.leases WHERE resource = 'fa/u3'"), 'h', "$label: ... still held");
    $al->begin_work;
    $al->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    is(q1($al, "SELECT dlock.unlock('fa/u3', 'h')"), 0, "$label: unlock under REPEATABLE READ");
    $al->commit;
    ok(q1($su, "SELECT dlock.try_lock('fa/u4', 'h', '30s')"), "$label: a superuser's holding");
    $su->do("SET ROLE alice");
    like(err($su, "SELECT dlock.unlock('fa/u4', 'h')"), qr/^42501: permission denied to unlock a lock held by role "admin"/,
         "$label: unlock by SET ROLE alice of a superuser's holding: 42501");
    $su->do("RESET ROLE");
    is(q1($su, "SELECT dlock.unlock('fa/u4', 'h')"), 0, "$label: ... the superuser's own unlock: released");
    $su->do("RESET ROLE");
}
