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
# release: bob's statement reads the row, then waits for a user lock that
# alice holds until her release has committed, then calls check_fence.
# The plain read shows the holding from the snapshot; the locking read of
# the pins row finds it released since.  No sleeps: the release waits
# until bob's statement is seen waiting for the user lock.
$my->do_root('CREATE DATABASE cfsi', 'CREATE TABLE cfsi.one (n INT PRIMARY KEY) ENGINE = InnoDB',
             'INSERT INTO cfsi.one VALUES (1)', "GRANT SELECT ON cfsi.* TO 'bob'\@'localhost'");
my $root = $my->connect('root');
for my $si (1, 0) {
    my $r = "cf/si$si";
    my $f = outcome($a, "SELECT dlock.try_lock('$r', 'h1', 600)");
    like($f, qr/^\d+$/, "snapshot isolation $si: alice acquires");
    is(outcome($a, "SELECT GET_LOCK('cfsi-barrier', 10)"), 1, "snapshot isolation $si: alice holds the barrier");
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my $c = $my->connect('bob', undef, RaiseError => 0);
        $c->do("SET SESSION innodb_snapshot_isolation = $si");
        $c->do('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
        my $got = outcome($c, "SELECT GET_LOCK('cfsi-barrier', 30) + dlock.check_fence('$r', $f) FROM cfsi.one");
        my $kept = outcome($c, 'SELECT @@session.innodb_snapshot_isolation');
        $c->disconnect;
        print $wr "$got\t$kept\n";
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    my $waiting = 0;
    for (1 .. 500) {
        $waiting = $root->selectrow_array("SELECT COUNT(*) FROM information_schema.processlist"
                                          . " WHERE user = 'bob' AND state = 'User lock'");
        last if $waiting;
        select(undef, undef, undef, 0.02);
    }
    ok($waiting, "snapshot isolation $si: bob's statement waits for the barrier, its snapshot taken");
    is(outcome($a, "SELECT dlock.unlock('$r', 'h1', NULL)"), 0, "snapshot isolation $si: alice releases meanwhile");
    is(outcome($a, "SELECT RELEASE_LOCK('cfsi-barrier')"), 1, "snapshot isolation $si: the barrier lifted");
    my $line = <$rd> // '';
    close $rd;
    waitpid($pid, 0);
    chomp $line;
    my ($got, $kept) = split /\t/, $line;
    # GET_LOCK's 1 plus check_fence's answer: 1 + false.
    is($got, 1, "snapshot isolation $si: check_fence in autocommit from a snapshot older than the release: false, no error 1020");
    is($kept, $si, "snapshot isolation $si: the caller's setting kept");
}
$root->disconnect;
done_testing;
