# 094_own_advisory_locks.t: a wait gives back only the advisory locks it
# took.  The caller's session holds, itself and outside dlock, session
# advisory locks with the very keys a wait of dlock may take (the "fair
# waiters" mark (_qkey, 0), the writer-waits mark (1684828006, _qkey), the
# upgrade mark (1684828007, _umark)), shared and exclusive; then each kind
# of wait (lock() fair or not, shared, campaign, acquire, lock_all) times
# out on a held resource, or is served at once on a free one.  After each
# call the session still holds every one of its own locks (issue 33's
# _let_go gave back what pg_locks showed, also locks the wait never took).
# Promises: P5
use strict;
use warnings;
use Test::More;
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

my $qkey = "('x' || substr(md5('%r'), 17, 8))::bit(32)::integer";
my $umark = "hashtext('%r' || chr(1) || 'a' || chr(1) || 'alice'::regrole::oid::text)";
my @own = (
    ['the fair waiters mark, shared', "pg_advisory_lock_shared($qkey, 0)"],
    ['the fair waiters mark, exclusive', "pg_advisory_lock($qkey, 0)"],
    ['the writer-waits mark, shared', "pg_advisory_lock_shared(1684828006, $qkey)"],
    ['the writer-waits mark, exclusive', "pg_advisory_lock(1684828006, $qkey)"],
    ['the upgrade mark, shared', "pg_advisory_lock_shared(1684828007, $umark)"],
);
# [name, bob's setup making %r busy, alice's wait].
my @waits = (
    ['lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", "SELECT dlock.lock('%r', 'a', '1h', '30ms')"],
    ['fair lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", "SELECT dlock.lock('%r', 'a', '1h', '30ms', fair => true)"],
    ['shared lock()', "SELECT dlock.try_lock('%r', 'b', '1h')", "SELECT dlock.lock('%r', 'a', '1h', '30ms', shared => true)"],
    ['campaign', "SELECT dlock.campaign('%r', 'b', 'x', '1h', '0')", "SELECT dlock.campaign('%r', 'a', 'y', '1h', '30ms')"],
    ['acquire', "SELECT dlock.try_acquire('%r', 'b', 1, 1, '1h')", "SELECT dlock.acquire('%r', 'a', 1, 1, '1h', wait => '30ms')"],
    ['lock_all', "SELECT dlock.try_lock('%r', 'b', '1h')", "SELECT (dlock.lock_all(ARRAY['%r'], 'a', '1h', wait => '30ms'))[1]"],
);

my $n = 0;
for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'ownkeys');
    my $bob = conn('bob');
    for my $o (@own) {
        my ($oname, $take) = @$o;
        for my $w (@waits) {
            my ($wname, $busy, $call) = @$w;
            for my $held (0, 1) {
                $n++;
                my $r = "o$n";
                my $tag = "$label: $wname " . ($held ? 'timing out' : 'served') . ", the caller holding $oname";
                (my $t = $take) =~ s/%r/$r/g;
                (my $c = $call) =~ s/%r/$r/g;
                (my $b = $busy) =~ s/%r/$r/g;
                my $a = conn('alice');
                $a->do("SET statement_timeout = '5s'");
                $a->do("SELECT $t") or die "$tag: " . $a->errstr;
                my $mine = "SELECT string_agg(classid || '/' || objid || '/' || mode, ' ' ORDER BY 1) FROM pg_locks "
                         . "WHERE locktype = 'advisory' AND pid = pg_backend_pid()";
                my $before = q1($a, $mine);
                q1($bob, $b) if $held;
                my $row = $a->selectrow_arrayref($c);
                is($a->err ? $a->state . ' ' . $a->errstr : '', '', "$tag: no error");
                ok($held ? !($row && defined $row->[0]) : ($row && defined $row->[0]), "$tag: the answer");
                is(q1($a, $mine), $before, "$tag: the caller's own advisory locks are all still held");
                $a->do("SELECT dlock.unlock_all('a')");
                $a->do("SELECT dlock.resign('$r', 'a')") if $wname eq 'campaign';
                $bob->do("SELECT dlock.unlock_all('b')");
                $a->disconnect;
            }
        }
    }
    $bob->disconnect;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
