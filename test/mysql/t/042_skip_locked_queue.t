# 042_skip_locked_queue.t: an acquirer that skips a row another transaction
# holds does not wait for it, though InnoDB's lock-wait view can show it
# waiting.
#
# MariaDB's SKIP LOCKED queues a waiting lock request for each row another
# transaction holds, then withdraws it and skips the row: INNODB_METRICS
# lock_rec_lock_waits ("enqueued into record lock wait queue") counts one
# per skipped row, Innodb_row_lock_waits (waits) none, and
# information_schema.INNODB_LOCK_WAITS lists the request while it is queued
# (trx_state LOCK WAIT, trx_wait_started NULL, or the start of the
# connection's last real wait if it ever waited: MariaDB never clears it).  The model test's waits
# monitor (test/model/MyModelDriver.pm) once caught one (MariaDB 11.8): a
# lock() in a REPEATABLE READ transaction, after an earlier lock() of the
# same resource in it had polled to its end, skipping the row a
# try_lock of another open transaction held; the checker took it for a
# wait.  This test replays that history and checks, by the server's
# counters, that no call waited while requests were queued, and that the
# counter of waits does count a real one (a plain FOR UPDATE).
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20', '--innodb-monitor-enable=lock_rec_lock_waits']);
my $root = $my->connect('root');

sub conn {
    my ($user, $iso) = @_;
    my $c = $my->connect($user, undef, RaiseError => 0);
    $c->do('SET SESSION max_statement_time = 5');
    $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso") if $iso;
    return $c;
}
sub call {
    my ($dbh, $sql, @bind) = @_;
    my $sth = $dbh->prepare($sql);
    return 'error ' . $sth->err . ' ' . $sth->state unless $sth->execute(@bind);
    my $row = $sth->fetchrow_arrayref;
    my $res = $row ? $row->[0] : undef;
    $sth->finish;
    1 while $sth->more_results;
    return $res;
}
# counters(): [waits for a row lock, lock requests queued] so far.
sub counters {
    my ($waits) = ($root->selectrow_array(q{SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'}))[1];
    my ($queued) = $root->selectrow_array(q{SELECT count FROM information_schema.INNODB_METRICS WHERE name = 'lock_rec_lock_waits'});
    return [$waits, $queued];
}

my $r = 'skip/r2';
my $holder = conn('alice', 'REPEATABLE READ');
my $acq = conn('admin', 'REPEATABLE READ');
ok(call($acq, "SELECT dlock.try_lock(?, 'h0', 60)", $r), 'the resource has its row');
is(call($acq, "SELECT dlock.unlock(?, 'h0', NULL)", $r), 0, '... free');

$holder->do('BEGIN');
ok(call($holder, "SELECT dlock.try_lock(?, 'shared/h0', 60)", $r), "alice's try_lock in an open transaction holds its row");
my $c0 = counters();
$acq->do('BEGIN');
is(call($acq, "CALL dlock.lock(?, 'shared/h1', 0.05, 0.3)", $r), undef, "admin's lock(wait 0.3) in a REPEATABLE READ transaction: NULL");
is(call($acq, "CALL dlock.lock(?, 'shared/h1', 0.05, 0.1)", $r), undef, '... then lock(wait 0.1) in the same transaction: NULL');
is(call($acq, "SELECT dlock.try_lock(?, 'shared/h1', 0.05)", $r), undef, '... then try_lock: NULL');
is(call($acq, 'CALL dlock.xact_lock(?, 0.1)', $r), undef, '... then xact_lock(wait 0.1): NULL');
my $c1 = counters();
is($c1->[0] - $c0->[0], 0, 'none of them waited for a row lock (Innodb_row_lock_waits)');
cmp_ok($c1->[1] - $c0->[1], '>', 0, 'while InnoDB queued lock requests for the row it skipped (lock_rec_lock_waits)');
$holder->do('ROLLBACK');
like(call($acq, "CALL dlock.lock(?, 'shared/h1', 0.05, 0.1)", $r), qr/^\d+$/, "once alice's transaction ended, the same transaction's lock() acquires");
$acq->do('ROLLBACK');

# The counter of waits counts a wait.
my $w = $my->connect('root', undef, RaiseError => 0);
$holder->do('BEGIN');
ok(call($holder, "SELECT dlock.try_lock(?, 'shared/h0', 60)", $r), 'alice holds the row again');
$c0 = counters();
$w->do('SET SESSION innodb_lock_wait_timeout = 1');
$w->selectrow_array("SELECT fence FROM dlock.leases WHERE resource = ? AND tail = 0 FOR UPDATE", undef, $r);
is($w->err, 1205, 'a plain FOR UPDATE of the row waits (and times out)');
is(counters()->[0] - $c0->[0], 1, '... and Innodb_row_lock_waits counts that wait');
$holder->do('ROLLBACK');

done_testing();
