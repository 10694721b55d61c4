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
# check_fence in autocommit confirmed a match with a locking read of the
# pins row, and InnoDB kept that lock to the end of the caller's statement:
# any user's `SELECT dlock.check_fence(r, f) + <something slow>` held up
# the holder's unlock (1205).  With the caller's innodb_snapshot_isolation
# on (MariaDB 11.6+'s default) that read also failed with error 1020 when
# the holding was released after the statement's snapshot (070_model, seed
# 1427307377, 11.8).  At REPEATABLE READ check_fence now locks nothing and
# answers from the statement's snapshot, whatever that setting, and leaves
# the setting as it was.  So it does in an UPDATE's condition, INSERT ...
# SELECT, SET and DO.
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

# bob_statement(sql, si, iso): runs sql as bob in a child, in autocommit; returns
# (pid, reader of "answer<TAB>innodb_snapshot_isolation after"), at
# isolation level iso (default REPEATABLE READ).
sub bob_statement {
    my ($sql, $si, $iso) = @_;
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my $c = $my->connect('bob', undef, RaiseError => 0);
        $c->do("SET SESSION innodb_snapshot_isolation = $si");
        $c->do("SET SESSION TRANSACTION ISOLATION LEVEL " . ($iso // 'REPEATABLE READ'));
        my $got = outcome($c, $sql);
        my $kept = outcome($c, 'SELECT @@session.innodb_snapshot_isolation');
        $c->disconnect;
        print $wr "$got\t$kept\n";
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    return ($pid, $rd);
}

# bob_answer(pid, reader): bob's answer and his setting afterwards.
sub bob_answer {
    my ($pid, $rd) = @_;
    my $line = <$rd> // '';
    close $rd;
    waitpid($pid, 0);
    chomp $line;
    return split /\t/, $line;
}

# bob_waits(what): true once bob's statement waits for the barrier.
$my->do_root('CREATE DATABASE cfsi', 'CREATE TABLE cfsi.one (n INT PRIMARY KEY) ENGINE = InnoDB',
             'INSERT INTO cfsi.one VALUES (1)', "GRANT SELECT ON cfsi.* TO 'bob'\@'localhost'");
my $root = $my->connect('root');
sub bob_waits {
    for (1 .. 500) {
        return 1 if $root->selectrow_array("SELECT COUNT(*) FROM information_schema.processlist"
                                           . " WHERE user = 'bob' AND state = 'User lock'");
        select(undef, undef, undef, 0.02);
    }
    return 0;
}

# A statement whose snapshot (opened by its read of cfsi.one) predates a
# release: bob's statement reads the row, then waits for a user lock that
# alice holds until her release has committed, then calls check_fence.  It
# answers from the statement's snapshot (true), with no error 1020.  No
# sleeps: the release waits until bob's statement is seen waiting.
for my $si (1, 0) {
    my $r = "cf/si$si";
    my $f = outcome($a, "SELECT dlock.try_lock('$r', 'h1', 600)");
    like($f, qr/^\d+$/, "snapshot isolation $si: alice acquires");
    is(outcome($a, "SELECT GET_LOCK('cfsi-barrier', 10)"), 1, "snapshot isolation $si: alice holds the barrier");
    my @bob = bob_statement("SELECT GET_LOCK('cfsi-barrier', 30) + dlock.check_fence('$r', $f) FROM cfsi.one", $si);
    ok(bob_waits(), "snapshot isolation $si: bob's statement waits for the barrier, its snapshot taken");
    is(outcome($a, "SELECT dlock.unlock('$r', 'h1', NULL)"), 0, "snapshot isolation $si: alice releases meanwhile");
    is(outcome($a, "SELECT RELEASE_LOCK('cfsi-barrier')"), 1, "snapshot isolation $si: the barrier lifted");
    my ($got, $kept) = bob_answer(@bob);
    # GET_LOCK's 1 plus check_fence's answer from the snapshot: 1 + true.
    is($got, 2, "snapshot isolation $si: check_fence in autocommit answers from the statement's snapshot, no error 1020");
    is($kept, $si, "snapshot isolation $si: the caller's setting kept");
}

# check_fence first, then a wait in the same statement: nothing it read
# stays locked, so the holder renews and releases at once, and after expiry
# another user takes the resource over, while bob's statement goes on.
# At every isolation level, in autocommit.
for my $case ([1, 'REPEATABLE READ'], [0, 'REPEATABLE READ'], [1, 'READ COMMITTED'], [1, 'READ UNCOMMITTED'],
              [1, 'SERIALIZABLE']) {
    my ($si, $iso) = @$case;
    (my $r = "cf/stall$si-$iso") =~ s/ /-/g;
    my $f = outcome($a, "SELECT dlock.try_lock('$r', 'h1', 600)");
    my $g = outcome($a, "SELECT dlock.try_lock('$r-short', 'h1', 3)");   # live until bob's statement has read it
    like("$f $g", qr/^\d+ \d+$/, "stall $si $iso: alice acquires two");
    is(outcome($a, "SELECT GET_LOCK('cfsi-barrier', 10)"), 1, "stall $si $iso: alice holds the barrier");
    my @bob = bob_statement("SELECT dlock.check_fence('$r', $f) + dlock.check_fence('$r-short', $g)"
                            . " + GET_LOCK('cfsi-barrier', 30) FROM cfsi.one", $si, $iso);
    ok(bob_waits(), "stall $si $iso: bob's statement waits, after its check_fence calls");
    like(outcome($a, "SELECT dlock.renew('$r', 'h1', 600, NULL)"), qr/^\d{4}-/, "stall $si $iso: alice renews meanwhile");
    is(outcome($a, "SELECT dlock.unlock('$r', 'h1', NULL)"), 0, "stall $si $iso: alice releases meanwhile (no 1205)");
    my $taken = 'NULL';
    for (1 .. 300) {
        $taken = outcome($root, "SELECT dlock.try_lock('$r-short', 'h2', 600) > $g");
        last if $taken ne 'NULL';
        select(undef, undef, undef, 0.05);
    }
    is($taken, 1, "stall $si $iso: after expiry another user takes the resource over, with a higher fence");
    is(outcome($a, "SELECT RELEASE_LOCK('cfsi-barrier')"), 1, "stall $si $iso: the barrier lifted");
    my ($got, $kept) = bob_answer(@bob);
    is($got, 3, "stall $si $iso: bob's two check_fence calls answered true");
    is($kept, $si, "stall $si $iso: the caller's setting kept");
    is(outcome($root, "SELECT dlock.unlock('$r-short', 'h2', NULL)"), 0, "stall $si $iso: cleaned up");
}
# check_fence in statements other than a SELECT, in autocommit: an UPDATE's
# condition, INSERT ... SELECT, SET and DO lock nothing it read either.
$my->do_root("GRANT INSERT, UPDATE ON cfsi.* TO 'bob'\@'localhost'");
my %forms = (
    update => "UPDATE cfsi.one SET n = n WHERE dlock.check_fence(R) AND GET_LOCK('cfsi-barrier', 30) >= 0",
    insert_select => "INSERT INTO cfsi.one SELECT 1000 + GET_LOCK('cfsi-barrier', 30) + dlock.check_fence(R) FROM DUAL",
    set => "SET \@x = dlock.check_fence(R) + GET_LOCK('cfsi-barrier', 30)",
    do => "DO dlock.check_fence(R) + GET_LOCK('cfsi-barrier', 30)");
for my $form (sort keys %forms) {
    my $r = "cf/form-$form";
    my $f = outcome($a, "SELECT dlock.try_lock('$r', 'h1', 600)");
    is(outcome($a, "SELECT GET_LOCK('cfsi-barrier', 10)"), 1, "$form: alice holds the barrier");
    (my $sql = $forms{$form}) =~ s/\bR\)/'$r', $f)/g;
    my @bob = bob_statement($sql, 1);
    ok(bob_waits(), "$form: bob's statement waits, after its check_fence");
    is(outcome($a, "SELECT dlock.unlock('$r', 'h1', NULL)"), 0, "$form: alice releases meanwhile (no 1205)");
    is(outcome($a, "SELECT RELEASE_LOCK('cfsi-barrier')"), 1, "$form: the barrier lifted");
    bob_answer(@bob);
}
$root->disconnect;
done_testing;
