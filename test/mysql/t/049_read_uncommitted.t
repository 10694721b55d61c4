# 049_read_uncommitted.t: check_fence answers from committed holdings only
# (issue 33, 9).  Alice acquires inside a transaction she later rolls
# back; bob, reading in READ UNCOMMITTED (autocommit and in a
# transaction), never sees her fence as current, and assert_fence never
# pins it.  Committed holdings are seen in every isolation level, and
# check_fence never waits.
# Promises: P2 P12
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);
my $alice = $my->connect('alice');
my $bob = $my->connect('bob');
$bob->do('SET SESSION max_statement_time = 5');
sub one { DlockMy::one(@_) }
sub err { DlockMy::err(@_) }

# check(dbh, resource, fence): check_fence's answer, or the error.
sub check {
    my ($dbh, $r, $f) = @_;
    my $v = eval { one($dbh, 'SELECT dlock.check_fence(?, ?)', $r, $f) };
    return defined $v ? $v : 'error ' . ($dbh->state // '?') . ': ' . ($dbh->errstr // $@);
}

my $committed = one($alice, "SELECT dlock.try_lock('ru/held', 'a', 3600)");
for my $iso ('READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE') {
    $bob->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso");
    is(check($bob, 'ru/held', $committed), 1, "$iso, autocommit: a committed holding is current");
    $bob->begin_work;
    if ($iso eq 'SERIALIZABLE') {
        # Every routine refuses inside a SERIALIZABLE transaction (0A000:
        # its plain reads would take shared locks; 047_session_vars).
        like(check($bob, 'ru/held', $committed), qr/^error 0A000/, "$iso, in a transaction: refused with 0A000");
    } else {
        is(check($bob, 'ru/held', $committed), 1, "$iso, in a transaction: a committed holding is current");
    }
    $bob->commit;
}

# An acquisition that rolls back, of a new resource and of a released one.
one($alice, "SELECT dlock.try_lock('ru/old', 'a', 3600)");
one($alice, "SELECT dlock.unlock('ru/old', 'a', NULL)");
for my $r ('ru/new', 'ru/old') {
    $alice->begin_work;
    my $f = one($alice, 'SELECT dlock.try_lock(?, ?, 3600)', $r, 'a');
    ok($f, "$r: alice acquires inside a transaction");
    for my $iso ('READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ') {
        $bob->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso");
        is(check($bob, $r, $f), 0, "$r, $iso, autocommit: the uncommitted fence is not current");
        $bob->begin_work;
        is(check($bob, $r, $f), 0, "$r, $iso, in a transaction: the uncommitted fence is not current");
        $bob->rollback;
    }
    is(one($alice, 'SELECT dlock.check_fence(?, ?)', $r, $f), 1, "$r: alice's own transaction sees its fence");
    $alice->rollback;
    $bob->do('SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED');
    is(check($bob, $r, $f), 0, "$r: after the rollback, not current");
    is(one($bob, 'SELECT dlock.try_lock(?, ?, 60)', $r, 'b') ? 1 : 0, 1, "$r: bob acquires it");
    one($bob, 'SELECT dlock.unlock(?, ?, NULL)', $r, 'b');
}

# assert_fence in READ UNCOMMITTED (alice's second session, the same
# owner): it waits for the acquiring transaction, then refuses the fence
# that transaction rolled back.
{
    my $alice2 = $my->connect('alice');
    $alice2->do('SET SESSION max_statement_time = 10');
    $alice2->do('SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED');
    $alice->begin_work;
    my $f = one($alice, "SELECT dlock.try_lock('ru/assert', 'a', 3600)");
    $alice2->begin_work;
    my $sth = $alice2->prepare("SELECT dlock.assert_fence('ru/assert', ?)", { mariadb_async => 1 });
    $sth->execute($f);
    my $waiting = 0;
    for (1 .. 100) {
        $waiting = one($my->connect('root'), "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'");
        last if $waiting;
        select(undef, undef, undef, 0.15);
    }
    $alice->rollback;
    my $ok = eval { $sth->mariadb_async_result; 1 };
    my $state = $ok ? 'no error' : $alice2->state;
    $alice2->rollback;
    is($state, '55P03', "READ UNCOMMITTED: assert_fence of a fence whose acquisition rolls back: 55P03 (it waited: $waiting)");
}

# READ UNCOMMITTED: an uncommitted release of a committed holding.
$alice->begin_work;
is(one($alice, "SELECT dlock.unlock('ru/held', 'a', NULL)"), 0, 'alice releases ru/held in an open transaction');
$bob->do('SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED');
my $c = check($bob, 'ru/held', $committed);
ok($c eq '0' || $c eq '1', "READ UNCOMMITTED during an uncommitted release: an answer at once ($c)");
$alice->rollback;
is(check($bob, 'ru/held', $committed), 1, 'after its rollback the holding is current again');

# A READ UNCOMMITTED transaction's check_fence pins the holding (as
# assert_fence does): the release waits for it, then goes through.
$bob->begin_work;
is(check($bob, 'ru/held', $committed), 1, 'READ UNCOMMITTED transaction: current');
$bob->commit;
is(one($alice, "SELECT dlock.unlock('ru/held', 'a', NULL)"), 0, 'alice releases after it');
done_testing;
