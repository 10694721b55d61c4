# 083_check_fence_pin.t: check_fence pins nothing, whoever calls it.
#
# check_fence is open to every user, on every resource (it takes no owner).
# In a READ UNCOMMITTED transaction it confirmed its answer with a shared
# lock on the resource's row of dlock.pins and kept it to the end of the
# caller's transaction: a user with no part in a holding (its fence is in
# dlock.locks) kept the holder from releasing it (unlock waited, 1205), and
# anyone from taking it over after expiry, for as long as his transaction
# stayed open.  Only assert_fence, for the holding's own user, may pin.
#
# check_fence in autocommit confirms a match with a locking read of the
# pins row, in the statement's REPEATABLE READ snapshot: with the caller's
# innodb_snapshot_isolation on (MariaDB 11.6+'s default) it failed with
# error 1020 when the holding was released after the statement's snapshot
# and before that read (070_model, seed 1427307377, 11.8: a check_fence
# flagged "Record has changed since last read in table 'pins'"): it must
# answer false, and leave the caller's setting as it was.
# Promises: P4 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();

my $my = DlockMy->new;
my $a = $my->connect('alice', undef, RaiseError => 0);
my $b = $my->connect('bob', undef, RaiseError => 0);
$_->do('SET SESSION innodb_lock_wait_timeout = 2') for $a, $b;

# outcome(dbh, sql): the value, "NULL", or "error ERRNO".
sub outcome {
    my ($dbh, $sql) = @_;
    my $sth = $dbh->prepare($sql);
    return 'error ' . $dbh->err unless $sth->execute;
    my $row = $sth->fetchrow_arrayref;
    $sth->finish;
    return defined $row->[0] ? $row->[0] : 'NULL';
}

for my $iso ('READ UNCOMMITTED', 'READ COMMITTED', 'REPEATABLE READ') {
    (my $r = "cf/$iso") =~ s/ /-/g;
    my $f = outcome($a, "SELECT dlock.try_lock('$r', 'h1', 600)");
    like($f, qr/^\d+$/, "$iso: alice acquires");
    $b->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso");
    $b->begin_work;
    is(outcome($b, "SELECT dlock.check_fence('$r', $f)"), 1, "$iso: bob's check_fence in his open transaction: true");
    is(outcome($b, "SELECT dlock.check_fence('$r', " . ($f + 1) . ')'), 0, "$iso: another fence: false");
    like(outcome($a, "SELECT dlock.renew('$r', 'h1', 600, NULL)"), qr/^\d{4}-/, "$iso: alice renews meanwhile");
    is(outcome($a, "SELECT dlock.unlock('$r', 'h1', NULL)"), 0, "$iso: alice releases meanwhile (no lock wait)");
    # (A REPEATABLE READ snapshot from before the release still shows it.)
    is(outcome($b, "SELECT dlock.check_fence('$r', $f)"), 0, "$iso: released: false") unless $iso eq 'REPEATABLE READ';
    $b->rollback;
}
my $f = outcome($a, "SELECT dlock.try_lock('cf/b', 'h1', 600)");
is(outcome($b, "SELECT dlock.check_fence('cf/b', $f)"), 1, 'autocommit: true');
is(outcome($a, "SELECT dlock.unlock('cf/b', 'h1', NULL)"), 0, 'autocommit: released');
is(outcome($b, "SELECT dlock.check_fence('cf/b', $f)"), 0, 'autocommit: false once released');

# A statement whose snapshot (opened by its read of cfsi.one) predates a
# release that commits while it sleeps, then check_fence: the plain read
# shows the holding from the snapshot, the locking read of the pins row
# finds it released since.
$my->do_root('CREATE DATABASE cfsi', 'CREATE TABLE cfsi.one (n INT PRIMARY KEY) ENGINE = InnoDB',
             'INSERT INTO cfsi.one VALUES (1)', "GRANT SELECT ON cfsi.* TO 'bob'\@'localhost'");
for my $si (1, 0) {
    my $r = "cf/si$si";
    my $f = outcome($a, "SELECT dlock.try_lock('$r', 'h1', 600)");
    like($f, qr/^\d+$/, "snapshot isolation $si: alice acquires");
    $b->do("SET SESSION innodb_snapshot_isolation = $si");
    $b->do('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        my $c = $my->connect('alice', undef, RaiseError => 0);
        select(undef, undef, undef, 0.5);
        my $ok = outcome($c, "SELECT dlock.unlock('$r', 'h1', NULL)") eq '0';
        $c->disconnect;
        POSIX::_exit($ok ? 0 : 1);
    }
    my $got = outcome($b, "SELECT SLEEP(1.5) + dlock.check_fence('$r', $f) FROM cfsi.one");
    waitpid($pid, 0);
    is($?, 0, "snapshot isolation $si: alice releases while bob's statement sleeps");
    is($got, 0, "snapshot isolation $si: check_fence in autocommit from a snapshot older than the release: false, no error 1020");
    is(outcome($b, 'SELECT @@session.innodb_snapshot_isolation'), $si, "snapshot isolation $si: the caller's setting kept");
}
done_testing;
