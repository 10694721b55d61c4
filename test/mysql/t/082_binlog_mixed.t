# 082_binlog_mixed.t: binary logging in a format other than ROW.
#
# With binlog_format MIXED (MariaDB's default) or STATEMENT, MariaDB reads
# the tables of a routine that changes data with shared locks (a locking
# read, for statement-based replay), so dlock's plain reads locked rows:
# a try_lock in autocommit mode waited, and failed with 1205, behind a
# holder's uncommitted renew; another user's refused try_lock, unlock or
# lock() inside an open transaction kept a shared lock on the holder's row,
# whose renew then waited and failed (1205), losing the lease.  The install
# now refuses any format but ROW, and every routine refuses (55000, before
# it reads anything) a session that logs in another format (an
# administrator may change the global format after the install).
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new(install => 0, args => ['--log-bin=mysql-bin', '--server-id=1',
                                             '--log-bin-trust-function-creators=1', '--binlog-format=ROW']);
$my->install;
$my->do_root("CREATE USER alice\@'localhost' IDENTIFIED BY 'pa'", "CREATE USER bob\@'localhost' IDENTIFIED BY 'pb'");

$my->do_root("SET GLOBAL binlog_format = 'MIXED'", 'DROP DATABASE dlock');
my $out = eval { $my->install; 'ok' } // $@;
like($out, qr/binlog_format = MIXED: dlock needs ROW/, 'install refuses binlog_format MIXED');
$my->do_root("SET GLOBAL binlog_format = 'ROW'", 'DROP DATABASE IF EXISTS dlock');
is(eval { $my->install; 'ok' } // $@, 'ok', 'installs with ROW');
# An administrator changes the format afterwards: new sessions log MIXED.
$my->do_root("SET GLOBAL binlog_format = 'MIXED'");

# The holder logs in ROW (root may set its session's format).
my $h = $my->connect('root', undef, RaiseError => 0);
$h->do("SET SESSION binlog_format = 'ROW'");
$h->do('SET SESSION innodb_lock_wait_timeout = 2');
my $f = DlockMy::one($h, "SELECT dlock.try_lock('mx/a', 'h1', 600)");
like($f, qr/^\d+$/, 'the holder (a ROW session) acquires');

my $b = $my->connect('bob', undef, RaiseError => 0);
is(DlockMy::one($b, 'SELECT @@session.binlog_format'), 'MIXED', "bob's session logs MIXED");
$b->do('SET SESSION innodb_lock_wait_timeout = 2');

# outcome(dbh, sql): "NULL", the value, or "error SQLSTATE".
sub outcome {
    my ($dbh, $sql) = @_;
    my $sth = $dbh->prepare($sql);
    return 'error ' . $dbh->state unless $sth->execute;
    my $row = $sth->fetchrow_arrayref;
    $sth->finish;
    1 while $sth->more_results;
    return defined $row->[0] ? $row->[0] : 'NULL';
}

# 1. Never waits: bob's try_lock while the holder's renew is uncommitted.
$h->begin_work;
like(DlockMy::one($h, "SELECT dlock.renew('mx/a', 'h1', 600, NULL)"), qr/^\d{4}-/, 'the holder renews in an open transaction');
my $r = outcome($b, "SELECT dlock.try_lock('mx/a', 'bobh', 60)");
like($r, qr/^(NULL|error 55000)$/, "bob's try_lock (MIXED session) answers NULL or 55000, not a lock wait timeout ($r)");
$h->commit;

# 2. Refused calls inside bob's open transaction pin nothing.
for my $sql ("SELECT dlock.try_lock('mx/a', 'bobh', 60)", "SELECT dlock.unlock('mx/a', 'bobh', NULL)",
             "SET \@x = dlock.try_lock('mx/a', 'bobh', 60)", "CALL dlock.lock('mx/a', 'bobh', 60, 0)",
             "SELECT dlock.check_fence('mx/a', $f)") {
    $b->begin_work;
    my $o = outcome($b, $sql);
    my $rn = outcome($h, "SELECT dlock.renew('mx/a', 'h1', 600, NULL)");
    like($rn, qr/^\d{4}-/, "after bob's $sql ($o) in his open transaction, the holder renews ($rn)");
    $b->rollback;
}
is(outcome($h, "SELECT dlock.unlock('mx/a', 'h1', NULL)"), 0, 'the holder releases');
like(outcome($b, "SELECT dlock.try_lock('mx/b', 'bobh', 60)"), qr/^error 55000$/, 'a MIXED session is refused with 55000');
done_testing;
