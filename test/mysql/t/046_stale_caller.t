# 046_stale_caller.t: a refused call of a stale caller pins nothing.
#
# The caller's REPEATABLE READ snapshot is from before a break_lock and a
# new holder's acquisition.  Its renew, unlock and unlock_all used to answer
# NULL or 0 but keep the X lock they took on the row, and its assert_fence
# raised 55P03 but kept its shared lock on the pins row: the new holder's
# renew or unlock then waited and failed with 1205.  Now each is refused
# (NULL, 0, 55P03, or error 1020 with its transaction rolled back) and the
# new holder renews and releases at once, while the stale transaction is
# still open.  The new holder's session has innodb_lock_wait_timeout = 1:
# a wait shows as error 1205.
# Promises: P4 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);

sub conn {
    my ($user, $iso) = @_;
    my $c = $my->connect($user, undef, RaiseError => 0);
    $c->do('SET SESSION max_statement_time = 10');
    $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso") if $iso;
    return $c;
}

# res(dbh, sql, binds...): the first column, or "error ERRNO SQLSTATE".
sub res {
    my ($dbh, $sql, @bind) = @_;
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    return $row ? $row->[0] : 'error ' . $dbh->err . ' ' . $dbh->state;
}

my $x = conn('alice');                      # the old holder, autocommit
my $a = conn('alice', 'REPEATABLE READ');   # the same holder, stale snapshot
my $adm = conn('admin');
my $b = conn('bob');
$b->do('SET SESSION innodb_lock_wait_timeout = 1');

my %refused = (renew => qr/^(|error 1020 HY000)$/, unlock => qr/^(|error 1020 HY000)$/,
               unlock_all => qr/^(0|error 1020 HY000)$/,
               assert_fence => qr/^error (1644 55P03|1020 HY000)$/);
my $n = 0;
for my $iso ('REPEATABLE READ', 'READ COMMITTED') {
    $a->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso");
    for my $op (qw(renew unlock unlock_all assert_fence)) {
        my $r = 'stale-' . $n++;
        my $f1 = res($x, "SELECT dlock.try_lock(?, 'h', 60)", $r);
        like($f1, qr/^\d+$/, "$iso $op: the first holding");
        $a->do('START TRANSACTION WITH CONSISTENT SNAPSHOT');
        is(res($a, 'SELECT count(*) FROM dlock.locks WHERE resource = ?', $r), 1, "$iso $op: the snapshot shows it");
        is(res($adm, 'SELECT dlock.break_lock(?)', $r), 1, "$iso $op: broken");
        my $f2 = res($b, "SELECT dlock.try_lock(?, 'hb', 60)", $r);
        like($f2, qr/^\d+$/, "$iso $op: a new holder");
        my $got = $op eq 'renew' ? res($a, "SELECT dlock.renew(?, 'h', 60, NULL)", $r)
                : $op eq 'unlock' ? res($a, "SELECT dlock.unlock(?, 'h', NULL)", $r)
                : $op eq 'unlock_all' ? res($a, "SELECT dlock.unlock_all('h')")
                : res($a, 'SELECT dlock.assert_fence(?, ?)', $r, $f1);
        like($got // '', $refused{$op}, "$iso $op of the stale caller: refused (" . ($got // 'NULL') . ')');
        # The stale transaction is still open (or rolled back): nothing waits.
        like(res($b, "SELECT dlock.renew(?, 'hb', 60, NULL)", $r), qr/^\d{4}-/,
             "$iso $op: the new holder renews at once");
        is(res($b, 'SELECT dlock.check_fence(?, ?)', $r, $f2), 1, "$iso $op: its fence is current");
        is(res($b, "SELECT dlock.unlock(?, 'hb', NULL)", $r), 0, "$iso $op: the new holder releases at once");
        $a->do('ROLLBACK');
    }
}

done_testing();
