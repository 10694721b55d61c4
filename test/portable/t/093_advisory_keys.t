# 093_advisory_keys.t: every advisory key the portable edition uses (or
# used: 0.5's before issue 33), held by mallory, a role with no rights on
# dlock, in another session, exclusive and shared, session-level and in an
# open transaction: the resource's key (_key), the fair-waiters mark
# (_qkey, 0), the next ticket numbers (_qkey, ticket), the writer-waits
# mark (1684828006, _qkey), the upgrade mark (1684828007, _umark), the old
# epoch keys (1684828003, 1) and (1684828003, 2) and the old ticket-writer
# key (1684828005, ...).  With each held, every public call on that
# resource (and an epoch jump) answers within its own limit: nothing
# reaches the 5 s statement_timeout guard; calls on a free resource get it
# (NULL is allowed only while mallory holds the resource's own key, which
# an acquirer tries without waiting, and for a shared request while
# mallory holds the writer-waits mark, which a new reader tries); a wait
# gives up at its wait, and the callers' sessions are left holding no
# advisory lock.
# Promises: P5
use strict;
use warnings;
use Test::More;
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::sweep_servers();    # Debian's, npm 14 and 18
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

# The keys, as SQL over the resource %r (mallory computes them; functions
# anyone may call).  qkey: the first key of the queue locks.
my $qkey = "('x' || substr(md5('%r'), 17, 8))::bit(32)::integer";
my $umark = "hashtext('%r' || chr(1) || 'a' || chr(1) || 'alice'::regrole::oid::text)";
my @keys = (
    ['the resource key', "('x' || substr(md5('%r'), 1, 16))::bit(64)::bigint", qr/./],
    ['the fair waiters mark', "$qkey, 0"],
    ['the next ticket', "$qkey, (%t + 1)::bit(64)::bit(32)::integer"],
    ['the ticket after', "$qkey, (%t + 2)::bit(64)::bit(32)::integer"],
    ['the writer-waits mark', "1684828006, $qkey", qr/^shared/],
    ['the upgrade mark', "1684828007, $umark"],
    ['the old epoch jump key', "1684828003, 1"],
    ['the old epoch row key', "1684828003, 2"],
    ['the old ticket writer key', "1684828005, hashtext('%r' || chr(1) || 'a' || chr(1) || 'alice'::regrole::oid::text)"],
);

# The calls: [name, SQL (alice's, %r the resource), what a free resource gives].
my @calls = (
    ['try_lock', "SELECT dlock.try_lock('%r', 'a', '1h')", 'fence'],
    ['renew', "SELECT dlock.renew('%r', 'a') IS NOT NULL"],
    ['check', "SELECT dlock.check('%r', 1)"],
    ['unlock', "SELECT dlock.unlock('%r', 'a')"],
    ['try_lock again (fast path)', "SELECT dlock.try_lock('%r', 'a', '1h')", 'fence'],
    ['unlock_all', "SELECT dlock.unlock_all('a')"],
    ['fair try_lock', "SELECT dlock.try_lock('%r', 'a', '1h', fair => true)", 'fence'],
    ['unlock', "SELECT dlock.unlock('%r', 'a')"],
    ['shared try_lock', "SELECT dlock.try_lock('%r', 'a', '1h', shared => true)", 'fence'],
    ['unlock', "SELECT dlock.unlock('%r', 'a')"],
    ['lock(wait)', "SELECT dlock.lock('%r', 'a', '1h', '300ms')", 'fence'],
    ['unlock', "SELECT dlock.unlock('%r', 'a')"],
    ['fair lock(wait)', "SELECT dlock.lock('%r', 'a', '1h', '300ms', fair => true)", 'fence'],
    ['unlock', "SELECT dlock.unlock('%r', 'a')"],
    ['xact_lock(wait)', "SELECT dlock.xact_lock('%r', '300ms')", 'fence'],
    ['try_xact_lock', "SELECT dlock.try_xact_lock('%r')", 'fence'],
    ['campaign(wait)', "SELECT dlock.campaign('%r', 'a', 'v', '1h', '300ms')", 'fence'],
    ['resign', "SELECT dlock.resign('%r', 'a')"],
    ['lock_all(wait)', "SELECT (dlock.lock_all(ARRAY['%r'], 'a', '1h', wait => '300ms'))[1]", 'fence'],
    ['unlock_all', "SELECT dlock.unlock_all('a')"],
    ['reap', "SELECT dlock.reap()"],
    ['withdraw', "SELECT dlock.withdraw('%r', 'a')"],
);
# On a held resource (bob's): the waits give up, the tries answer NULL.
my @busy = (
    ['try_lock of a held resource', "SELECT dlock.try_lock('%r', 'a', '1h')"],
    ['fair try_lock of a held resource', "SELECT dlock.try_lock('%r', 'a', '1h', fair => true)"],
    ['lock(wait) of a held resource', "SELECT dlock.lock('%r', 'a', '1h', '300ms')"],
    ['fair lock(wait) of a held resource', "SELECT dlock.lock('%r', 'a', '1h', '300ms', fair => true)"],
    ['shared lock(wait) of a held resource', "SELECT dlock.lock('%r', 'a', '1h', '300ms', shared => true)"],
    ['xact_lock(wait) of a held resource', "SELECT dlock.xact_lock('%r', '300ms')"],
    ['withdraw', "SELECT dlock.withdraw('%r', 'a')"],
);

my $n = 0;
for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'keys');
    $admin->do("CREATE ROLE mallory LOGIN") or die $admin->errstr;
    my $db = conn('admin', 'app');
    my $dbo = conn('dbo');
    my $bob = conn('bob');
    $_->do("SET statement_timeout = '5s'") for $dbo, $bob;    # every connection guarded
    for my $key (@keys) {
        my ($kname, $kexpr, $may_refuse) = @$key;
        for my $how ('session exclusive', 'session shared', 'transaction exclusive') {
            $n++;
            my $r = "k$n";
            my $tag = "$label: $kname held ($how)";
            my $t = q1($dbo, "SELECT last_value FROM dlock.ticket_seq");
            (my $k = $kexpr) =~ s/%r/$r/g;
            $k =~ s/%t/$t/g;
            my $mal = conn('mallory');
            my $fn = $how =~ /shared/ ? 'pg_advisory_lock_shared' : $how =~ /transaction/ ? 'pg_advisory_xact_lock' : 'pg_advisory_lock';
            $mal->begin_work if $how =~ /transaction/;
            $mal->do("SELECT $fn($k)") or die "$tag: " . $mal->errstr;
            # An epoch jump comes first: the epoch row gone.
            $dbo->do("DELETE FROM dlock.fence_epoch");
            my $a = conn('alice');
            $a->do("SET statement_timeout = '5s'");
            my $pid = $a->{pg_pid};
            for my $c (@calls) {
                my ($cname, $sql, $want) = @$c;
                $sql =~ s/%r/$r/g;
                my $row = $a->selectrow_arrayref($sql);
                my $e = $a->err ? $a->state . ' ' . $a->errstr : '';
                unlike($e, qr/^57014/, "$tag: $cname answers in time");
                is($e, '', "$tag: $cname: no error") unless $e =~ /^57014/;
                if (($want // '') eq 'fence' && !$e && !($may_refuse && $cname =~ $may_refuse)) {
                    ok(defined $row->[0], "$tag: $cname gets the free resource");
                }
            }
            $a->do("SELECT dlock.unlock_all('a')");
            $bob->do("SELECT dlock.try_lock(?, 'b', '1h')", undef, $r);
            for my $c (@busy) {
                my ($cname, $sql) = @$c;
                $sql =~ s/%r/$r/g;
                my $row = $a->selectrow_arrayref($sql);
                my $e = $a->err ? $a->state . ' ' . $a->errstr : '';
                is($e, '', "$tag: $cname answers in time, without error");
                ok(!($row && $row->[0]), "$tag: $cname is refused") unless $cname eq 'withdraw';
            }
            is(q1($db, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ?", $pid), 0,
               "$tag: alice's session holds no advisory lock after");
            $bob->do("SELECT dlock.unlock_all('b')");
            $a->disconnect;
            $mal->disconnect;
        }
    }
    $_->disconnect for $db, $dbo, $bob;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
