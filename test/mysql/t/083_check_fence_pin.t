# 083_check_fence_pin.t: check_fence pins nothing, whoever calls it.
#
# check_fence is open to every user, on every resource (it takes no owner).
# In a READ UNCOMMITTED transaction it confirmed its answer with a shared
# lock on the resource's row of dlock.pins and kept it to the end of the
# caller's transaction: a user with no part in a holding (its fence is in
# dlock.locks) kept the holder from releasing it (unlock waited, 1205), and
# anyone from taking it over after expiry, for as long as his transaction
# stayed open.  Only assert_fence, for the holding's own user, may pin.
# Promises: P4 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

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
done_testing;
