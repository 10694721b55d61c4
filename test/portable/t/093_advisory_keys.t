# 093_advisory_keys.t: a role with no rights on dlock (mallory, without
# USAGE on the schema) holds every advisory key the portable edition uses
# or used for a resource, all at once, session-level (exclusive, shared)
# or in an open transaction: the old resource key (_key), the fair-waiters
# mark (_qkey, 0), the next 64 ticket numbers (_qkey, n), the writer-waits
# mark, both holders' upgrade marks, the old epoch and ticket-writer keys;
# then it replays the keys a real waiter held.  None of it keeps a free
# resource busy or a waiter unserved (issue 35): every call on a free
# resource gets it at once (exclusive, shared, fair, xact, campaign,
# acquire, lock_all), every wait is served when the holder lets go (an
# upgrade beside another shared holder too, without a false 40P01), calls
# on a held resource answer NULL in time, and the callers' sessions keep no
# advisory lock.
# Promises: P5
use strict;
use warnings;
use Test::More;
use File::Basename ();
use Time::HiRes qw(sleep);
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::sweep_servers();    # Debian's, npm 14 and 18
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

# The keys, as SQL over the resource %r and the ticket sequence's last
# value %t (mallory computes them; functions anyone may call).
my $qkey = "('x' || substr(md5('%r'), 17, 8))::bit(32)::integer";
sub umark { "hashtext('%r' || chr(1) || '$_[0]' || chr(1) || '$_[1]'::regrole::oid::text)" }
my @keys = (
    "('x' || substr(md5('%r'), 1, 16))::bit(64)::bigint",           # the old resource key
    "$qkey, 0",                                                     # the fair-waiters mark
    (map { "$qkey, (%t + $_)::bit(64)::bit(32)::integer" } 1 .. 64), # the next tickets
    "1684828006, $qkey",                                            # the writer-waits mark
    "1684828007, " . umark('a', 'alice'),                           # the upgrade marks
    "1684828007, " . umark('b', 'bob'),
    "1684828003, 1", "1684828003, 2",                               # the old epoch keys
    "1684828005, " . umark('a', 'alice'),                           # the old ticket-writer key
);

# Calls on a free resource: [name, alice's SQL (%r the resource), gets it?].
my @calls = (
    ['try_lock', "SELECT dlock.try_lock('%r', 'a', '1h')", 1],
    ['renew', "SELECT dlock.renew('%r', 'a') IS NOT NULL", 1],
    ['unlock', "SELECT dlock.unlock('%r', 'a') = 0", 1],
    ['try_lock again (fast path)', "SELECT dlock.try_lock('%r', 'a', '1h')", 1],
    ['unlock_all', "SELECT dlock.unlock_all('a') >= 1", 1],
    ['fair try_lock', "SELECT dlock.try_lock('%r', 'a', '1h', fair => true)", 1],
    ['unlock', "SELECT dlock.unlock('%r', 'a') = 0", 1],
    ['shared try_lock', "SELECT dlock.try_lock('%r', 'a', '1h', shared => true)", 1],
    ['unlock', "SELECT dlock.unlock('%r', 'a') = 0", 1],
    ['lock(wait)', "SELECT dlock.lock('%r', 'a', '1h', '2s')", 1],
    ['unlock', "SELECT dlock.unlock('%r', 'a') = 0", 1],
    ['fair lock(wait)', "SELECT dlock.lock('%r', 'a', '1h', '2s', fair => true)", 1],
    ['unlock', "SELECT dlock.unlock('%r', 'a') = 0", 1],
    ['shared lock(wait)', "SELECT dlock.lock('%r', 'a', '1h', '2s', shared => true)", 1],
    ['unlock', "SELECT dlock.unlock('%r', 'a') = 0", 1],
    ['xact_lock(wait)', "SELECT dlock.xact_lock('%r', '2s')", 1],
    ['try_xact_lock', "SELECT dlock.try_xact_lock('%r')", 1],
    ['campaign(wait)', "SELECT dlock.campaign('%r', 'a', 'v', '1h', '2s')", 1],
    ['resign', "SELECT dlock.resign('%r', 'a')", 1],
    ['lock_all(wait)', "SELECT (dlock.lock_all(ARRAY['%r'], 'a', '1h', wait => '2s'))[1]", 1],
    ['shared try_lock_all', "SELECT (dlock.try_lock_all(ARRAY['%r'], 'a', '1h', true))[1]", 1],
    ['unlock_all', "SELECT dlock.unlock_all('a') >= 1", 1],
    ['acquire(wait)', "SELECT dlock.acquire('%r', 'a', 2, 1, '1h', wait => '2s')", 1],
    ['try_acquire', "SELECT dlock.try_acquire('%r', 'a', 2, 1, '1h')", 1],
    ['unlock_all', "SELECT dlock.unlock_all('a') >= 1", 1],
    ['a new resource: try_lock', "SELECT dlock.try_lock('%r/new', 'a', '1h')", 1],
    ['a new resource: try_xact_lock', "SELECT dlock.try_xact_lock('%r/new2')", 1],
    ['a new resource: shared lock(wait)', "SELECT dlock.lock('%r/new3', 'a', '1h', '2s', shared => true)", 1],
    ['unlock_all', "SELECT dlock.unlock_all('a') >= 1", 1],
    ['reap', "SELECT dlock.reap()"],
    ['withdraw', "SELECT dlock.withdraw('%r', 'a')"],
);
# On a held resource (bob's): the tries answer NULL, the waits give up.
my @busy = (
    ['try_lock', "SELECT dlock.try_lock('%r', 'a', '1h')"],
    ['fair try_lock', "SELECT dlock.try_lock('%r', 'a', '1h', fair => true)"],
    ['shared try_lock', "SELECT dlock.try_lock('%r', 'a', '1h', shared => true)"],
    ['lock(wait)', "SELECT dlock.lock('%r', 'a', '1h', '100ms')"],
    ['xact_lock(wait)', "SELECT dlock.xact_lock('%r', '100ms')"],
);
# Waits on bob's holding, served when bob lets go: [name, bob's holding,
# alice's own holding (or ''), alice's wait, bob's release].
my @waits = (
    ['lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", '', "SELECT dlock.lock('%r', 'a', '1h', '20s')",
     "SELECT dlock.unlock('%r', 'b')"],
    ['fair lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", '',
     "SELECT dlock.lock('%r', 'a', '1h', '20s', fair => true)", "SELECT dlock.unlock('%r', 'b')"],
    ['shared lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", '',
     "SELECT dlock.lock('%r', 'a', '1h', '20s', shared => true)", "SELECT dlock.unlock('%r', 'b')"],
    ['xact_lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", '', "SELECT dlock.xact_lock('%r', '20s')",
     "SELECT dlock.unlock('%r', 'b')"],
    ['campaign', "SELECT dlock.campaign('%r', 'b', 'x', '1h', '0')", '',
     "SELECT dlock.campaign('%r', 'a', 'y', '1h', '20s')", "SELECT dlock.resign('%r', 'b')"],
    ['acquire', "SELECT dlock.try_acquire('%r', 'b', 1, 1, '1h')", '',
     "SELECT dlock.acquire('%r', 'a', 1, 1, '1h', wait => '20s')", "SELECT dlock.unlock('%r', 'b')"],
    ['lock_all', "SELECT dlock.try_lock('%r', 'b', '1h')", '',
     "SELECT (dlock.lock_all(ARRAY['%r'], 'a', '1h', wait => '20s'))[1]", "SELECT dlock.unlock('%r', 'b')"],
    ['an upgrade beside another shared holder', "SELECT dlock.try_lock('%r', 'b', '1h', shared => true)",
     "SELECT dlock.try_lock('%r', 'a', '1h', shared => true)", "SELECT dlock.lock('%r', 'a', '1h', '20s')",
     "SELECT dlock.unlock('%r', 'b')"],
);

# answer: alice's call on her connection: (value, error).
sub answer {
    my ($a, $sql) = @_;
    my $row = $a->selectrow_arrayref($sql);
    return ($row ? $row->[0] : undef, $a->err ? $a->state . ' ' . $a->errstr : '');
}

my $n = 0;
for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'keys');
    $admin->do("CREATE ROLE mallory LOGIN") or die $admin->errstr;
    my $db = conn('admin', 'app');
    my $dbo = conn('dbo');
    my $bob = conn('bob');
    $_->do("SET statement_timeout = '30s'") for $dbo, $bob;    # every connection guarded
    # USAGE on dlock for alice and bob only.
    $dbo->do($_) or die $dbo->errstr
        for "REVOKE USAGE ON SCHEMA dlock FROM PUBLIC", "GRANT USAGE ON SCHEMA dlock TO alice, bob";
    my $mal0 = conn('mallory');
    is(q1($mal0, "SELECT has_schema_privilege('dlock', 'USAGE')"), 0, "$label: mallory has no USAGE on dlock");
    $mal0->disconnect;
    for my $how ('session exclusive', 'session shared', 'transaction exclusive') {
        $n++;
        my $r = "k$n";
        my $tag = "$label: every key held ($how)";
        my $t = q1($dbo, "SELECT last_value FROM dlock.ticket_seq");
        my $mal = conn('mallory');
        my $fn = $how =~ /shared/ ? 'pg_advisory_lock_shared' : $how =~ /transaction/ ? 'pg_advisory_xact_lock' : 'pg_advisory_lock';
        $mal->begin_work if $how =~ /transaction/;
        my $take = sub {
            my ($res) = @_;
            for my $kexpr (@keys) {
                (my $k = $kexpr) =~ s/%r/$res/g;
                $k =~ s/%t/$t/g;
                $mal->do("SELECT $fn($k)") or die "$tag: " . $mal->errstr;
            }
        };
        $take->($_) for $r, "$r/new", "$r/new2", "$r/new3";
        my $a = conn('alice');
        $a->do("SET statement_timeout = '30s'");
        my $pid = $a->{pg_pid};

        for my $c (@calls) {
            my ($cname, $sql, $gets) = @$c;
            $sql =~ s/%r/$r/g;
            my ($v, $e) = answer($a, $sql);
            is($e, '', "$tag: $cname: no error");
            ok($v, "$tag: $cname gets the free resource") if $gets;
        }

        $bob->do("SELECT dlock.try_lock(?, 'b', '1h')", undef, $r);
        for my $c (@busy) {
            my ($cname, $sql) = @$c;
            $sql =~ s/%r/$r/g;
            my ($v, $e) = answer($a, $sql);
            is($e, '', "$tag: $cname of a held resource answers without error");
            ok(!defined $v, "$tag: $cname of a held resource is refused");
        }
        $bob->do("SELECT dlock.unlock_all('b')");

        for my $w (@waits) {
            my ($wname, $setup, $mine, $wait, $release) = map { s/%r/$r/gr } @$w;
            ok(defined q1($bob, $setup), "$tag: $wname: bob holds the resource");
            ok(defined q1($a, $mine), "$tag: $wname: alice holds it shared") if $mine;
            my $as = async('alice', $wait);
            sleep 0.3;      # let the wait start (not asserted)
            $bob->do($release) or diag($bob->errstr);
            my $v = result($as);
            ok(defined $v && $v, "$tag: $wname: the waiter is served when the holder lets go")
                or diag($as->[0]->errstr // 'timed out');
            is(q1($db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ?", $as->[0]{pg_pid}), 0,
               "$tag: $wname: the waiter keeps no advisory lock");
            $as->[0]->do("SELECT dlock.unlock_all('a')");
            $as->[0]->disconnect;
            $a->do("SELECT dlock.unlock_all('a')");
            $bob->do("SELECT dlock.unlock_all('b')");
        }

        # A real waiter's keys replayed: bob waits fair (and as a writer)
        # on alice's holding; mallory notes every advisory key bob holds,
        # and takes them all once bob is served and has let go.
        my $rr = "$r/replay";
        ok(defined q1($a, "SELECT dlock.try_lock(?, 'a', '1h', shared => true)", $rr), "$tag: replay: alice holds");
        my $bw = async('bob', "SELECT dlock.lock(?, 'b', '1h', '20s', fair => true)", $rr);
        my $seen = [];
        for (1 .. 200) {
            $seen = $db->selectall_arrayref(
                "SELECT classid::bigint, objid::bigint, objsubid, mode FROM pg_locks
                  WHERE locktype = 'advisory' AND pid = ? AND granted", undef, $bw->[0]{pg_pid});
            last if @$seen >= 4;
            sleep 0.02;
        }
        ok(@$seen >= 4, "$tag: replay: bob's wait holds its ticket, marks and proofs (" . scalar(@$seen) . " keys)");
        $a->do("SELECT dlock.unlock(?, 'a')", undef, $rr);
        ok(defined result($bw), "$tag: replay: bob is served");
        $bw->[0]->do("SELECT dlock.unlock(?, 'b')", undef, $rr);
        $bw->[0]->disconnect;
        for my $k (@$seen) {
            my ($c, $o, $sub, $mode) = @$k;
            my $f = $mode eq 'ShareLock' ? 'pg_advisory_lock_shared' : 'pg_advisory_lock';
            my $args = $sub == 1 ? "(($c << 32) | $o)" : "${c}::bigint::bit(32)::integer, ${o}::bigint::bit(32)::integer";
            $f =~ s/pg_advisory_lock/pg_advisory_xact_lock/ if $how =~ /transaction/;
            $mal->do("SELECT $f($args)") or diag("$tag: replay: " . $mal->errstr);
        }
        ok(defined q1($a, "SELECT dlock.try_lock(?, 'a', '1h')", $rr), "$tag: replay: the free resource is taken at once");
        $a->do("SELECT dlock.unlock(?, 'a')", undef, $rr);
        ok(defined q1($a, "SELECT dlock.try_lock(?, 'a', '1h', shared => true)", $rr),
           "$tag: replay: a shared request too");
        $a->do("SELECT dlock.unlock_all('a')");

        is(q1($db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ?", $pid), 0,
           "$tag: alice's session holds no advisory lock after");
        $a->disconnect;
        $mal->disconnect;
    }
    $_->disconnect for $db, $dbo, $bob;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
