# 043_fence_session.t: what a caller's session sets does not reach the
# fence draw (issue 33, 1).  An unprivileged user's SET insert_id (to a
# fence already handed out, to 1, to the largest BIGINT), SET last_insert_id,
# SET auto_increment_increment and _offset, SET timestamp (2038, 1970):
# every fence after it is above every fence before, no two are equal, every
# later acquisition of every user works (no error 167), and a fence stays
# near the real clock ((ms since 2020-01-01 UTC) << 22), not the session's.
# Promises: P1
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(time);

my $my = DlockMy->new;
my $alice = $my->connect('alice');
my $bob = $my->connect('bob');
$_->do('SET SESSION max_statement_time = 20') for $alice, $bob;
my $max = 0;
my %seen;
my $n = 0;

# take(dbh, who): a new resource; checks the fence against all before.
sub take {
    my ($dbh, $what) = @_;
    $n++;
    my $f = eval { DlockMy::one($dbh, 'SELECT dlock.try_lock(?, ?, 3600)', "fs/$n", 'h') };
    if (!defined $f) {
        fail("$what: acquired") or diag($@ || 'NULL');
        return;
    }
    my $ok = $f > $max && !$seen{$f};
    ok($ok, "$what: fence $f above every fence before ($max), never seen") ;
    my $ms = int((time - 1577836800) * 1000);
    ok(abs(($f >> 22) - $ms) < 600_000, "$what: fence near the real clock")
        or diag(sprintf 'fence ms %d, clock ms %d', $f >> 22, $ms);
    $seen{$f} = 1;
    $max = $f if $f > $max;
    return $f;
}

take($alice, 'first');
my $last = take($bob, 'second');

$alice->do("SET insert_id = $last");
take($alice, "insert_id = the last fence");
take($bob, 'bob after it');
$alice->do('SET insert_id = 1');
take($alice, 'insert_id = 1');
take($bob, 'bob after it');
# A value ahead of the clock (about a second), set by two users in turn.
my $ahead = $last + (1 << 32);
$alice->do("SET insert_id = $ahead");
take($alice, 'insert_id = a second ahead of the clock');
$bob->do("SET insert_id = $ahead");
take($bob, 'bob, the same insert_id');
$alice->do('SET last_insert_id = 5');
take($alice, 'last_insert_id = 5');
$alice->do('SET auto_increment_increment = 65535, auto_increment_offset = 65535');
take($alice, 'auto_increment_increment = 65535');
take($bob, 'bob after it');
$alice->do('SET auto_increment_increment = 1, auto_increment_offset = 1');
$alice->do('SET timestamp = 2147483647');
take($alice, 'timestamp = 2038');
take($bob, 'bob after it');
$alice->do('SET timestamp = 1');
take($alice, 'timestamp = 1970');
$alice->do('SET timestamp = DEFAULT');
take($bob, 'bob after it');

# Two sessions with the same insert_id, one after the other, inside open
# transactions: different fences.
$alice->do('SET insert_id = 42');
$bob->do('SET insert_id = 42');
$alice->begin_work;
$bob->begin_work;
take($alice, 'alice, insert_id = 42, in a transaction');
take($bob, 'bob, insert_id = 42, in a transaction');
$alice->rollback;
$bob->commit;
take($alice, 'after the rollback');

# SET timestamp in a time zone with daylight saving time (the other half
# of the year than now): leases are still on the real clock.  Bob holds a
# lease of 30 minutes; alice, in Sydney or Berlin at a January or July
# timestamp, finds it busy (an offset wrong by the hour made it look
# expired to her).
my $tz = `mariadb-tzinfo-to-sql /usr/share/zoneinfo/Australia/Sydney Australia/Sydney 2>/dev/null`
       . `mariadb-tzinfo-to-sql /usr/share/zoneinfo/Europe/Berlin Europe/Berlin 2>/dev/null`;
SKIP: {
    skip 'no time zone data', 8 unless $tz =~ /INSERT/;
    open my $fh, '>', "$my->{dir}/tz.sql" or die;
    print $fh $tz;
    close $fh;
    system("mariadb --no-defaults -uroot -S $my->{sock} mysql < $my->{dir}/tz.sql") == 0 or die 'tz load failed';
    ok(DlockMy::one($bob, "SELECT dlock.try_lock('fs/dst', 'b', 1800)"), 'bob holds fs/dst for 30 minutes');
    for my $zone ('Australia/Sydney', 'Europe/Berlin') {
        for my $ts (1768478400, 1784116800) {    # 2026-01-15, 2026-07-15 12:00 UTC
            my $a = $my->connect('alice');
            $a->do("SET time_zone = '$zone'");
            $a->do("SET timestamp = $ts");
            is(DlockMy::one($a, "SELECT dlock.try_lock('fs/dst', ?, 60)", "a$zone$ts"), undef,
               "$zone, timestamp $ts: bob's lease is live for alice");
        }
    }
    my $a = $my->connect('alice');
    $a->do("SET time_zone = 'Australia/Sydney', timestamp = 1768478400");
    take($a, 'Sydney, January timestamp');
    $a->do("SET time_zone = 'Europe/Berlin', timestamp = 1784116800");
    take($a, 'Berlin, July timestamp');
}

# Last: the largest BIGINT, which made every later draw fail (error 167).
$alice->do('SET insert_id = 9223372036854775807');
take($alice, 'insert_id = 2^63 - 1');
take($bob, 'bob after it (no error 167)');
take($alice, 'alice again');

done_testing;
