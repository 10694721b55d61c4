# 010_api.t: every routine of the MySQL edition on a real MariaDB, the
# happy path and its edges: re-entry, counts, fences across resources,
# renew, check/assert, unlock_all, break, lock() waiting and timing out,
# defaults, limits, expiry without revival, the clock at the call (not
# NOW()), transaction-scoped locks against leases and the event reaping.
# Promises: P1 P2 P5 P12
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(time sleep);
use POSIX ();

my $my = DlockMy->new;
my $a = $my->connect('alice');
my $b = $my->connect('alice');    # a second connection of the same user
my $root = $my->connect('root');
sub one { DlockMy::one($a, @_) }

# try_lock: first acquisition, re-entry keeps the fence, another holder NULL.
my $f1 = one("SELECT dlock.try_lock('api/a', 'h1', 10)");
ok($f1 && $f1 > 0, 'try_lock acquires a free resource');
is(one("SELECT dlock.try_lock('api/a', 'h1', 10)"), $f1, 're-entry keeps the fence');
is(one("SELECT dlock.try_lock('api/a', 'h2', NULL)"), undef, 'another holder gets NULL');
my $row = $a->selectrow_hashref("SELECT * FROM dlock.locks WHERE resource = 'api/a'");
is_deeply([@$row{qw(holder count owner expired)}], ['h1', 2, 'alice', 0], 'view: holder, count 2, owner, live');
ok(one("SELECT expires_at > UTC_TIMESTAMP(6) + INTERVAL 9 SECOND FROM dlock.locks WHERE resource = 'api/a'"),
   'expiry about now + 10 s (UTC)');

# Holders are independent of connections: the second connection renews and
# releases what the first took.
ok(DlockMy::one($b, "SELECT dlock.renew('api/a', 'h1', NULL, NULL)"), 'renewed from another connection');

# Bytes: case and trailing spaces matter.
ok(one("SELECT dlock.try_lock('API/A', 'h2', NULL)"), 'other case is another resource');
ok(one("SELECT dlock.try_lock('api/a ', 'h2', NULL)"), 'trailing space is another resource');
is(one("SELECT dlock.try_lock('api/a', 'H1', NULL)"), undef, 'other case is another holder');
is(one("SELECT dlock.unlock('API/A', 'h2', NULL)"), 0, 'released API/A');
is(one("SELECT dlock.unlock('api/a ', 'h2', NULL)"), 0, 'released api/a+space');

# unlock counts down; NULL when not held; a wrong fence changes nothing.
is(one("SELECT dlock.unlock('api/a', 'h1', ?)", $f1 + 1), undef, 'wrong fence: NULL');
is(one("SELECT dlock.unlock('api/a', 'h2', NULL)"), undef, 'not the holder: NULL');
is(one("SELECT dlock.unlock('api/a', 'h1', ?)", $f1), 1, 'count left 1');
is(DlockMy::one($b, "SELECT dlock.unlock('api/a', 'h1', NULL)"), 0, 'released (from the other connection)');
is(one("SELECT dlock.unlock('api/a', 'h1', NULL)"), undef, 'after release: NULL');
is(one("SELECT dlock.unlock('api/never', 'h1', NULL)"), undef, 'unknown resource: NULL');
is(one("SELECT count(*) FROM dlock.locks WHERE resource = 'api/a'"), 0, 'view hides the free row');

# Fences grow for a new holder and across resources.
my $f2 = one("SELECT dlock.try_lock('api/a', 'h2', 10)");
my $f3 = one("SELECT dlock.try_lock('api/b', 'h2', 10)");
ok($f2 > $f1 && $f3 > $f2, 'fences increase: new holder, other resource');

# renew: from now, default the lease it was taken with; stale fence NULL.
ok(one("SELECT dlock.renew('api/a', 'h2', NULL, NULL) BETWEEN UTC_TIMESTAMP(6) + INTERVAL 9 SECOND AND UTC_TIMESTAMP(6) + INTERVAL 11 SECOND"),
   'renew with the stored lease');
ok(one("SELECT dlock.renew('api/a', 'h2', 3600, NULL) > UTC_TIMESTAMP(6) + INTERVAL 59 MINUTE"), 'renew with a new lease');
is(one("SELECT lease FROM dlock.locks WHERE resource = 'api/a'"), '3600.0000', 'new lease stored');
is(one("SELECT dlock.renew('api/a', 'h2', NULL, ?)", $f1), undef, 'renew with a stale fence: NULL');
is(one("SELECT dlock.renew('api/a', 'h1', NULL, NULL)"), undef, 'renew by another holder: NULL');
is(one("SELECT dlock.renew('api/nothing', 'h1', NULL, NULL)"), undef, 'renew of an unknown resource: NULL');

# check_fence and assert_fence.
is_deeply([$a->selectrow_array("SELECT dlock.check_fence('api/a', ?), dlock.check_fence('api/a', ?), dlock.check_fence('api/nothing', 1)", undef, $f2, $f1)],
          [1, 0, 0], 'check_fence: current, stale, unknown');
is(DlockMy::err($a, "SELECT dlock.assert_fence('api/a', ?)", $f2), 'no error', 'assert_fence: current fence passes');
is(DlockMy::err($a, "SELECT dlock.assert_fence('api/a', ?)", $f1),
   qq{55P03: fence $f1 is not the current holding of resource "api/a"}, 'assert_fence: stale fence, 55P03');
# The DO trap: MariaDB's DO turns every error into success ("DO always is
# OK"), so a fence must be asserted with SELECT, never DO.
is(DlockMy::err($a, "DO dlock.assert_fence('api/a', ?)", $f1), 'no error', 'DO swallows the 55P03 (why the README says SELECT)');

# unlock_all: every holding of the holder whatever its count.
ok(one("SELECT dlock.try_lock('api/b', 'h2', NULL)"), 're-enter api/b');
is(one("SELECT dlock.unlock_all('h2')"), 2, 'unlock_all releases 2');
is(one("SELECT dlock.unlock_all('h2')"), 0, 'again: 0');
is(one("SELECT count(*) FROM dlock.locks WHERE resource LIKE 'api/%'"), 0, 'nothing left');

# break_lock (root has EXECUTE on everything).
ok(one("SELECT dlock.try_lock('api/c', 'h3', NULL)"), 'taken');
is_deeply([$root->selectrow_array("SELECT dlock.break_lock('api/c'), dlock.break_lock('api/c')")], [1, 0], 'break: true, then false');
ok(one("SELECT dlock.try_lock('api/c', 'h4', NULL)"), 'free after break');
is(one("SELECT dlock.renew('api/c', 'h3', NULL, NULL)"), undef, 'the broken holder cannot renew');

# lock(): free at once; wait 0 is one try; a wait runs out; a release ends it.
ok(DlockMy::call_lock($a, 'api/d', 'h5', 10, undef), 'lock: free resource at once');
is(DlockMy::call_lock($a, 'api/d', 'h6', 10, 0), undef, 'lock: wait 0, one try');
my $t0 = time;
is(DlockMy::call_lock($a, 'api/d', 'h6', 10, 0.4), undef, 'lock: wait 0.4 s runs out');
my $took = time - $t0;
ok($took >= 0.4 && $took < 5, "lock honours its wait (took $took s)");
{
    my $pid = fork // die;
    if ($pid == 0) {
        my $c = $my->connect('alice');
        sleep 0.5;
        DlockMy::one($c, "SELECT dlock.unlock('api/d', 'h5', NULL)");
        POSIX::_exit(0);
    }
    $t0 = time;
    my $f = DlockMy::call_lock($a, 'api/d', 'h6', 10, 20);
    $took = time - $t0;
    waitpid $pid, 0;
    ok($f, 'lock: acquired once the holder released');
    ok($took >= 0.4 && $took < 5, "lock: waited for the release, polling ($took s)");
    is(one("SELECT holder FROM dlock.locks WHERE resource = 'api/d'"), 'h6', 'h6 holds api/d');
}
# While a lock() waits, the holder's own calls are not blocked (no attempt
# keeps a row lock while it sleeps: the SLEEP-in-a-function trap).
{
    my $pid = fork // die;
    if ($pid == 0) {
        my $c = $my->connect('alice');
        DlockMy::call_lock($c, 'api/d', 'h7', 10, 3);
        POSIX::_exit(0);
    }
    sleep 0.5;
    $t0 = time;
    ok(one("SELECT dlock.renew('api/d', 'h6', NULL, NULL)"), 'holder renews while another waits');
    is(one("SELECT dlock.unlock('api/d', 'h6', NULL)"), 0, 'holder unlocks while another waits');
    ok(time - $t0 < 1, 'neither call waited for the waiter');
    waitpid $pid, 0;
    is(one("SELECT holder FROM dlock.locks WHERE resource = 'api/d'"), 'h7', 'the waiter got it');
}

# Cancel: KILL QUERY ends a waiting lock() (and xact_lock()) with 70100.
one("SELECT dlock.try_lock('api/k', 'pre', 1)");
one("SELECT dlock.unlock('api/k', 'pre', NULL)");
$b->begin_work;
ok(DlockMy::call_xact($b, 'api/k', undef), 'another transaction holds api/k');
for my $call ("CALL dlock.lock('api/d', 'h8', 10, NULL)", "CALL dlock.xact_lock('api/k', NULL)") {
    pipe(my $r, my $w) or die;
    my $pid = fork // die;
    if ($pid == 0) {
        close $r;
        my $c = $my->connect('alice');
        print $w DlockMy::one($c, 'SELECT CONNECTION_ID()'), "\n";
        close $w;
        my $e = DlockMy::err($c, $call);
        POSIX::_exit($e =~ /^70100/ ? 0 : 1);
    }
    close $w;
    my $id = <$r>;
    chomp $id;
    # Its CALL waits (a KILL QUERY that reaches an idle connection is lost);
    # seen by root: while it runs as its definer, alice does not see it.
    my $waits;
    for (1 .. 1500) {
        last if $waits = DlockMy::one($root, "SELECT count(*) FROM information_schema.processlist WHERE id = ? AND command = 'Query'", $id);
        sleep 0.02;
    }
    ok($waits, "$call waits");
    $t0 = time;
    $root->do("KILL QUERY $id");
    waitpid $pid, 0;
    is($? >> 8, 0, "KILL QUERY ends $call with SQLSTATE 70100");
    ok(time - $t0 < 2, 'promptly');
}
$b->rollback;
is(one("SELECT holder FROM dlock.locks WHERE resource = 'api/d'"), 'h7', 'the holding is untouched');

# Defaults: holder NULL is session_holder(), lease NULL is 30 s.
ok(one("SELECT dlock.try_lock('api/e', NULL, NULL)"), 'default holder');
my ($h, $lease) = $a->selectrow_array("SELECT holder, lease FROM dlock.locks WHERE resource = 'api/e'");
is($h, one("SELECT dlock.session_holder()"), 'holder is session_holder()');
like($h, qr/^conn:\d+:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'session_holder format: conn:<connection id>:<UUID>');
isnt(DlockMy::one($b, "SELECT dlock.session_holder()"), $h, 'another connection, another session holder');
is($lease, '30.0000', 'default lease 30 s');
is(one("SELECT dlock.unlock('api/e', NULL, NULL)"), 0, 'unlock with the default holder');

# Limits are inclusive and count bytes.
ok(one("SELECT dlock.try_lock(REPEAT('r', 1000), REPEAT('h', 255), NULL)"), '1000-byte resource, 255-byte holder');
is(one("SELECT dlock.unlock(REPEAT('r', 1000), REPEAT('h', 255), NULL)"), 0, 'released');
ok(one("SELECT dlock.try_lock(REPEAT(UNHEX('C3A9'), 500), 'h', NULL)"), '500 two-byte characters are 1000 bytes');
ok(one("SELECT dlock.try_lock(0.001 + 0, 'h', 0.000001)"), 'a lease of one microsecond is positive');

# Expiry: an expired lease is free, never revived, and its fence is stale.
# (The reap event is paused meanwhile so that the expired lease stays listed.)
$root->do('ALTER EVENT dlock.reap DISABLE');
my $fx = one("SELECT dlock.try_lock('api/x', 'hx', 0.3)");
sleep 0.5;
is(one("SELECT expired FROM dlock.locks WHERE resource = 'api/x'"), 1, 'listed as expired');
is(one("SELECT dlock.check_fence('api/x', ?)", $fx), 0, 'expired fence is not current');
is(one("SELECT dlock.renew('api/x', 'hx', NULL, NULL)"), undef, 'no revival by renew');
is(one("SELECT dlock.unlock('api/x', 'hx', NULL)"), undef, 'unlock of an expired lease: NULL');
my $fy = one("SELECT dlock.try_lock('api/x', 'hx', 10)");
ok($fy > $fx, 'the same holder acquires anew, with a new fence');
is(one("SELECT count FROM dlock.locks WHERE resource = 'api/x'"), 1, 'count starts over');
$fx = one("SELECT dlock.try_lock('api/y', 'hy', 0.3)");
sleep 0.5;
$fy = one("SELECT dlock.try_lock('api/y', 'hz', 10)");
ok($fy > $fx, 'another holder takes over an expired lease at once, larger fence');
is(one("SELECT dlock.renew('api/y', 'hy', NULL, NULL)"), undef, 'the old holder cannot renew after takeover');
$root->do('ALTER EVENT dlock.reap ENABLE');

# The clock at the call, not the statement start (NOW()).
$a->do("SELECT SLEEP(1), dlock.try_lock('api/now', 'h', 5)");
ok(one("SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM dlock.locks WHERE resource = 'api/now'") > 4_500_000,
   'the lease starts at the call, not when the statement started');
ok(one("SELECT acquired_at FROM dlock.locks WHERE resource = 'api/now'") gt
   one("SELECT UTC_TIMESTAMP(6) - INTERVAL 2 SECOND"), 'acquired_at is recent');

# Times are UTC whatever the session's time zone.
$b->do("SET time_zone = '+05:00'");
ok(DlockMy::one($b, "SELECT dlock.renew('api/now', 'h', 5, NULL) BETWEEN UTC_TIMESTAMP(6) + INTERVAL 4 SECOND AND UTC_TIMESTAMP(6) + INTERVAL 6 SECOND"),
   'renew from a +05:00 session returns UTC');
is(DlockMy::one($b, "SELECT dlock.check_fence('api/now', fence) FROM dlock.locks WHERE resource = 'api/now'"), 1,
   'a +05:00 session sees the lease live');

# Transaction-scoped locks: released at COMMIT and ROLLBACK, exclusive with
# leases.  The resources get their rows first: a transaction that creates a
# resource's row makes other creators of that row wait for it (README).
for my $r ('api/t', 'api/w', 'api/g') {
    one("SELECT dlock.try_lock(?, 'pre', 1)", $r);
    one("SELECT dlock.unlock(?, 'pre', NULL)", $r);
}
$a->begin_work;
my $xf = DlockMy::call_xact($a, 'api/t', undef);
ok($xf, 'xact_lock in a transaction');
$t0 = time;
is(DlockMy::one($b, "SELECT dlock.try_lock('api/t', 'hb', NULL)"), undef, 'a lease is refused at once while it is held');
is(DlockMy::one($b, "SELECT dlock.try_xact_lock('api/t')"), undef, 'try_xact_lock: NULL at once');
is(DlockMy::call_lock($b, 'api/t', 'hb', 10, 0.3), undef, 'lock() times out behind it');
ok(time - $t0 < 3, 'nothing waited for the transaction');
$a->commit;
my $lf = DlockMy::one($b, "SELECT dlock.try_lock('api/t', 'hb', 10)");
ok($lf && $lf > $xf, 'after COMMIT a lease is granted, larger fence');
$a->begin_work;
is(DlockMy::call_xact($a, 'api/t', 0.2), undef, 'xact_lock against a live lease: NULL');
$a->rollback;
is(DlockMy::one($b, "SELECT dlock.unlock('api/t', 'hb', NULL)"), 0, 'the lease holder was never blocked');
$a->begin_work;
ok(one("SELECT dlock.try_xact_lock('api/t')"), 'try_xact_lock');
$a->rollback;
ok(DlockMy::one($b, "SELECT dlock.try_xact_lock('api/t')"), 'free again after ROLLBACK (autocommit call)');
# xact_lock waits for another transaction's xact_lock, and times out.
$a->begin_work;
ok(DlockMy::call_xact($a, 'api/w', undef), 'a holds api/w');
$b->begin_work;
$t0 = time;
is(DlockMy::call_xact($b, 'api/w', 0.3), undef, 'b times out');
ok(time - $t0 >= 0.3, 'after its wait');
{
    my $kid = fork // die;
    if ($kid == 0) {
        my $c = $my->connect('alice');
        $c->begin_work;
        my $f = DlockMy::call_xact($c, 'api/w', 10);
        $c->commit;
        POSIX::_exit($f ? 0 : 1);
    }
    sleep 0.5;
    $a->commit;
    waitpid $kid, 0;
    is($? >> 8, 0, 'a waiting xact_lock gets it when the other transaction commits');
}
$b->rollback;
# GET_LOCK survives COMMIT and belongs to the connection; dlock's xact lock
# does not survive, and leases do not belong to connections.
$a->begin_work;
one("SELECT GET_LOCK('api/g', 0)");
DlockMy::call_xact($a, 'api/g', undef);
$a->commit;
is(DlockMy::one($b, "SELECT IS_FREE_LOCK('api/g')"), 0, 'GET_LOCK is still held after COMMIT (the trap)');
ok(DlockMy::one($b, "SELECT dlock.try_xact_lock('api/g')"), 'the xact lock is gone at COMMIT');
one("SELECT RELEASE_LOCK('api/g')");
{
    my $c = $my->connect('alice');
    ok(DlockMy::one($c, "SELECT dlock.try_lock('api/conn', 'hc', 30)"), 'lease taken on a connection');
    $c->disconnect;
    is(one("SELECT holder FROM dlock.locks WHERE resource = 'api/conn'"), 'hc', 'still held after that connection closed');
    is(one("SELECT dlock.unlock('api/conn', 'hc', NULL)"), 0, 'released from another connection');
}

# Uncommitted acquisitions: others get NULL at once, not a lock wait.
$a->begin_work;
ok(one("SELECT dlock.try_lock('api/a', 'tx', 10)"), 'acquired inside a transaction (existing row)');
$t0 = time;
is(DlockMy::one($b, "SELECT dlock.try_lock('api/a', 'other', 10)"), undef, 'another session: NULL');
ok(time - $t0 < 1, 'at once');
$a->rollback;
is(one("SELECT count(*) FROM dlock.locks WHERE resource = 'api/a'"), 0, 'ROLLBACK undid the acquisition');

# REPEATABLE READ (the default): two transactions acquiring new, adjacent
# resources in turn neither deadlock nor wait (no gap locks are taken).
$b->do("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
$a->do("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
$a->begin_work; $b->begin_work;
is(one("SELECT dlock.unlock('gap/m', 'x', NULL)"), undef, 'a looks at an unknown resource');
is(DlockMy::one($b, "SELECT dlock.unlock('gap/n', 'x', NULL)"), undef, 'b too');
$t0 = time;
ok(one("SELECT dlock.try_lock('gap/n2', 'a', 10)"), 'a acquires a new resource in the gap');
ok(DlockMy::one($b, "SELECT dlock.try_lock('gap/m2', 'b', 10)"), 'b acquires another one in the gap');
ok(one("SELECT dlock.try_lock('gap/m1', 'a', 10)"), 'a again');
ok(time - $t0 < 1, 'no lock waits');
$a->commit; $b->commit;
is(one("SELECT count(*) FROM dlock.locks WHERE resource LIKE 'gap/%'"), 3, 'all three committed');

# reap() and the dlock.reap event.
$root->do('ALTER EVENT dlock.reap DISABLE');    # so that CALL dlock.reap() finds them
one("SELECT dlock.try_lock('reap/a', 'h', 0.2)");
one("SELECT dlock.try_lock('reap/b', 'h', 0.2)");
sleep 0.3;
my $sth = $root->prepare('CALL dlock.reap()');
$sth->execute;
my $n = $sth->fetchrow_arrayref->[0];
$sth->finish; 1 while $sth->more_results;
ok($n >= 2, "CALL dlock.reap() reaped $n");
is(one("SELECT count(*) FROM dlock.locks WHERE resource LIKE 'reap/%'"), 0, 'gone from the view');
$root->do('ALTER EVENT dlock.reap ENABLE');
one("SELECT dlock.try_lock('reap/c', 'h', 0.5)");
is(one("SELECT count(*) FROM dlock.locks WHERE resource = 'reap/c'"), 1, 'listed while live');
my $gone = 0;
for (1 .. 50) {
    sleep 0.1;
    if (DlockMy::one($root, "SELECT count(*) FROM dlock.leases WHERE resource = 'reap/c' AND tail = 0 AND holder IS NULL")) { $gone = 1; last; }
}
ok($gone, 'the dlock.reap event freed the expired lease by itself');
is(one("SELECT dlock.renew('reap/c', 'h', NULL, NULL)"), undef, 'a reaped lease is not revived');

my ($version) = do { local (@ARGV, $/) = "$DlockMy::TOP/dlock.control"; <> } =~ /^default_version = '([^']+)'/m;
is(one("SELECT dlock.version()"), $version, 'version: default_version of dlock.control');
is(`grep -F '[dlock.reap]' $my->{dir}/error.log`, '', 'the reap event ran every second without a warning in the error log');
done_testing;
