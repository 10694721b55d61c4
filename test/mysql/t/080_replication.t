# 080_replication.t: dlock on a MariaDB primary with a replica, as users run
# it, then the replica's promotion.
#
# For binlog_format ROW (dlock refuses MIXED and STATEMENT: 082_binlog_mixed.t):
# a primary and a replica started here on
# loopback (DlockMy servers, GTID replication), dlock installed on the
# primary.  Every routine is called in autocommit mode and inside
# transactions (committed and rolled back, REPEATABLE READ and READ
# COMMITTED, several calls in one statement, a call inside a user's INSERT
# ... SELECT).  One call inside START TRANSACTION ... COMMIT used to stop
# the replica's I/O thread (error 1595: _xid's statement events amid row
# events).  Checked: the replica keeps replicating (both threads running,
# no error), and has the same rows (leases, pins, gates, no xids history).
# Then the promotion: the old primary stopped, the replica's replication
# stopped and reset, read_only off.  The dlock.reap event arrived there as
# SLAVESIDE_DISABLED; dlock.on_promotion() enables it, and holdings that
# expired (taken on the old primary with its event scheduler off) are
# reaped by the event on the new primary.  Fences drawn there are above
# every fence the old primary handed out.
# Promises: P1 P14
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(usleep time);
use List::Util qw(max);

# res(dbh, sql, binds...): the first column (CALLs too), or "error ERRNO SQLSTATE".
sub res {
    my ($dbh, $sql, @bind) = @_;
    my $sth = $dbh->prepare($sql);
    return 'error ' . $dbh->err . ' ' . $dbh->state unless $sth && $sth->execute(@bind);
    my $row = $sth->{NUM_OF_FIELDS} ? $sth->fetchrow_arrayref : undef;
    my $v = $row ? $row->[0] : undef;
    $sth->finish;
    1 while $sth->more_results;
    return $v;
}

# wait_for(what, code): poll code until true (guard 60 s; a failure is a fail).
sub wait_for {
    my ($what, $code) = @_;
    my $t0 = time;
    until ($code->()) {
        return fail("$what: not within 60 s") if time - $t0 > 60;
        usleep(100_000);
    }
    return pass($what);
}

my @fences;    # every fence the primary handed out
sub fence { my ($v) = @_; push @fences, $v if defined $v && $v =~ /^\d+$/; return $v; }

sub dump_rows {
    my ($dbh) = @_;
    my %d;
    for my $t (['leases', 'resource, tail'], ['pins', 'resource, tail'], ['gates', 'slot'],
               ['fences', 'u'], ['reapers', 'slot']) {
        $d{$t->[0]} = $dbh->selectall_arrayref("SELECT * FROM dlock.$t->[0] ORDER BY $t->[1]");
    }
    $d{xids} = $dbh->selectall_arrayref('SELECT COUNT(*) FROM dlock.xids FOR SYSTEM_TIME ALL');
    return \%d;
}

sub replica_ok {
    my ($r, $what) = @_;
    my $st = $r->selectrow_hashref('SHOW SLAVE STATUS');
    is(join(' ', map { $st->{$_} // 'NULL' } qw(Slave_IO_Running Slave_SQL_Running Last_IO_Errno Last_SQL_Errno)),
       'Yes Yes 0 0', "$what: the replica replicates (" . ($st->{Last_IO_Error} || $st->{Last_SQL_Error} || 'no error') . ')');
}

for my $fmt ('ROW') {
    @fences = ();
    my @log = ('--log-bin=mysql-bin', "--binlog-format=$fmt", '--log-bin-trust-function-creators=1',
               '--innodb-lock-wait-timeout=20');
    my $p = DlockMy->new(install => 0, args => ['--server-id=1', @log]);
    $p->do_root("CREATE USER repl\@'127.0.0.1' IDENTIFIED BY 'rp'",
                "GRANT REPLICATION SLAVE ON *.* TO repl\@'127.0.0.1'");
    my $rs = DlockMy->new(install => 0, args => ['--server-id=2', @log, '--read-only=1']);
    $rs->do_root("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$p->{port}, MASTER_USER='repl', "
                 . "MASTER_PASSWORD='rp', MASTER_USE_GTID=slave_pos", 'START SLAVE');
    $p->install;
    $p->do_root("CREATE USER alice\@'localhost' IDENTIFIED BY 'pa'",
                "CREATE USER bob\@'localhost' IDENTIFIED BY 'pb'",
                "CREATE USER admin\@'localhost' IDENTIFIED BY 'pc'",
                "GRANT EXECUTE ON FUNCTION dlock.break_lock TO admin\@'localhost'",
                'CREATE DATABASE app', 'CREATE TABLE app.t (f BIGINT) ENGINE = InnoDB',
                'CREATE TABLE app.src (n INT) ENGINE = InnoDB', 'INSERT INTO app.src VALUES (1), (2), (3)');

    my $a = $p->connect('alice', undef, RaiseError => 0);
    my $b = $p->connect('bob', undef, RaiseError => 0);
    my $adm = $p->connect('admin', undef, RaiseError => 0);
    my $root = $p->connect('root', undef, RaiseError => 0);
    $_->do('SET SESSION max_statement_time = 10') for $a, $b, $adm, $root;

    # Autocommit: every routine.
    like(res($a, 'SELECT dlock.version()'), qr/^\d/, "$fmt autocommit: version");
    like(res($a, 'SELECT dlock.session_holder()'), qr/^conn:/, "$fmt autocommit: session_holder");
    my $f = fence(res($a, "SELECT dlock.try_lock('ac1', 'h', 60)"));
    like($f, qr/^\d+$/, "$fmt autocommit: try_lock");
    like(fence(res($a, "CALL dlock.lock('ac2', 'h', 60, 1)")), qr/^\d+$/, "$fmt autocommit: lock");
    like(res($a, "SELECT dlock.renew('ac1', 'h', 60, NULL)"), qr/^\d{4}-/, "$fmt autocommit: renew");
    is(res($a, "SELECT dlock.check_fence('ac1', ?)", $f), 1, "$fmt autocommit: check_fence");
    is(res($a, "SELECT dlock.assert_fence('ac1', ?)", $f), 1, "$fmt autocommit: assert_fence");
    is(res($a, "SELECT dlock.unlock('ac1', 'h', NULL)"), 0, "$fmt autocommit: unlock");
    like(fence(res($b, "SELECT dlock.try_lock('ac3', NULL, 60)")), qr/^\d+$/, "$fmt autocommit: try_lock, session holder");
    is(res($b, 'SELECT dlock.unlock_all(NULL)'), 1, "$fmt autocommit: unlock_all");
    is(res($adm, "SELECT dlock.break_lock('ac2')"), 1, "$fmt autocommit: break_lock");
    like(fence(res($a, "CALL dlock.xact_lock('ac4', 1)")), qr/^\d+$/, "$fmt autocommit: xact_lock");
    like(fence(res($a, "SELECT dlock.try_xact_lock('ac4')")), qr/^\d+$/, "$fmt autocommit: try_xact_lock");
    like(res($a, 'CALL dlock.reap()'), qr/^\d+$/, "$fmt autocommit: reap");

    # Transactions, in both isolation levels, committed and rolled back.
    for my $iso ('REPEATABLE READ', 'READ COMMITTED') {
        for my $end ('COMMIT', 'ROLLBACK') {
            my $t = "$fmt $iso $end";
            my $k = lc(substr($iso, 0, 2) . substr($end, 0, 1));
            $a->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso");
            $a->do('START TRANSACTION');
            my $tf = fence(res($a, "SELECT dlock.try_lock('tx-$k-1', 'h', 60)"));
            like($tf, qr/^\d+$/, "$t: try_lock");
            is(fence(res($a, "SELECT dlock.try_lock('tx-$k-1', 'h', 60)")), $tf, "$t: try_lock re-entered");
            like(res($a, "SELECT dlock.renew('tx-$k-1', 'h', 60, NULL)"), qr/^\d{4}-/, "$t: renew");
            is(res($a, "SELECT dlock.unlock('tx-$k-1', 'h', NULL)"), 1, "$t: unlock, count left");
            is(res($a, "SELECT dlock.assert_fence('tx-$k-1', ?)", $tf), 1, "$t: assert_fence");
            is(res($a, "SELECT dlock.check_fence('tx-$k-1', ?)", $tf), 1, "$t: check_fence");
            like(res($a, "CALL dlock.lock('tx-$k-1', 'other', 60, 1)"), qr/^error 1644 40P01$/, "$t: lock of another holder: 40P01");
            my $xf = fence(res($a, "CALL dlock.xact_lock('tx-$k-2', 1)"));
            like($xf, qr/^\d+$/, "$t: xact_lock");
            is(res($a, "CALL dlock.xact_lock('tx-$k-2', 1)"), $xf, "$t: xact_lock again, the same fence");
            is(res($a, "SELECT dlock.try_xact_lock('tx-$k-2')"), $xf, "$t: try_xact_lock, the same fence");
            is(res($a, "SELECT dlock.try_lock('tx-$k-2', 'h', 60)"), undef, "$t: a lease on its own xact_lock: NULL");
            like(fence(res($a, "CALL dlock.lock('tx-$k-3', 'h', 60, 1)")), qr/^\d+$/, "$t: lock");
            like(fence(res($a, "SELECT dlock.try_xact_lock('tx-$k-4')")), qr/^\d+$/, "$t: try_xact_lock");
            my $two = $a->selectrow_arrayref("SELECT dlock.try_lock('tx-$k-5', 'h', 60), dlock.renew('tx-$k-3', 'h', 60, NULL)");
            ok($two && $two->[0] =~ /^\d+$/ && $two->[1] =~ /^\d{4}-/, "$t: two calls in one statement");
            fence($two->[0]) if $two;
            is(res($a, "SELECT dlock.unlock_all('h')"), 3, "$t: unlock_all");
            like(res($a, 'CALL dlock.reap()'), qr/^error 1644 25001$/, "$t: reap refused");
            $a->do($end);
            $adm->do('START TRANSACTION');
            like(fence(res($adm, "SELECT dlock.try_lock('tx-$k-6', 'h', 60)")), qr/^\d+$/, "$t: admin's try_lock");
            is(res($adm, "SELECT dlock.break_lock('tx-$k-6')"), 1, "$t: break_lock");
            $adm->do($end);
            replica_ok($rs->connect('root'), $t) if $iso eq 'REPEATABLE READ' && $end eq 'COMMIT';
        }
    }
    # A call inside the user's own row-logged statement, in a transaction.
    $root->do('START TRANSACTION');
    is(res($root, "INSERT INTO app.t (f) SELECT dlock.try_xact_lock(CONCAT('ins-', n)) FROM app.src"), undef,
       "$fmt: INSERT ... SELECT dlock.try_xact_lock() in a transaction");
    $root->do('COMMIT');
    push @fences, map { $_->[0] } @{ $p->connect('root')->selectall_arrayref('SELECT f FROM app.t') };
    cmp_ok(scalar(grep { defined } @fences), '>=', 30, "$fmt: fences collected");

    # Holdings that expire before the promotion, with nothing reaping them here.
    $root->do('SET GLOBAL event_scheduler = OFF');
    for my $i (1 .. 3) {
        like(fence(res($b, "SELECT dlock.try_lock('exp-$i', 'h', 1)")), qr/^\d+$/, "$fmt: expiring lease $i");
    }
    $b->do('START TRANSACTION');
    like(fence(res($b, "SELECT dlock.try_lock('exp-4', 'h', 1)")), qr/^\d+$/, "$fmt: expiring lease in a transaction");
    $b->do('COMMIT');

    # The replica caught up: still replicating, the same rows.
    my $pos = res($root, 'SELECT @@global.gtid_binlog_pos');
    my $r = $rs->connect('root', undef, RaiseError => 0);
    is(res($r, 'SELECT MASTER_GTID_WAIT(?, 60)', $pos), 0, "$fmt: the replica reached the primary's position");
    replica_ok($r, "$fmt, the end");
    is_deeply(dump_rows($r), dump_rows($p->connect('root')), "$fmt: the replica has the same rows");
    is(res($r, "SELECT COUNT(*) FROM dlock.locks WHERE resource LIKE 'exp-%'"), 4, "$fmt: the expiring leases are there");

    # Promotion.
    $p->stop;
    $r->do('STOP SLAVE');
    $r->do('RESET SLAVE ALL');
    $r->do('SET GLOBAL read_only = 0');
    is(res($r, "SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'dlock' AND EVENT_NAME = 'reap'"),
       'SLAVESIDE_DISABLED', "$fmt: the reap event arrived disabled");
    $r->do('SET GLOBAL event_scheduler = ON');
    my $sth = $r->prepare('CALL dlock.on_promotion()');
    ok($sth->execute, "$fmt: on_promotion()") or diag($r->errstr);
    my $row = $sth->fetchrow_hashref || {};
    $sth->finish;
    1 while $sth->more_results;
    is($row->{status}, 'ENABLED', "$fmt: on_promotion() enabled the reap event");
    is(res($r, "SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_SCHEMA = 'dlock' AND EVENT_NAME = 'reap'"),
       'ENABLED', "$fmt: the reap event is enabled");
    my $ra = $rs->connect('alice', undef, RaiseError => 0);
    like(res($ra, "CALL dlock.lock('exp-x', 'h', 1, 1)"), qr/^\d+$/, "$fmt: a lease taken on the new primary");
    wait_for("$fmt: expired leases reaped by the event on the new primary", sub {
        res($r, "SELECT COUNT(*) FROM dlock.locks WHERE resource LIKE 'exp-%'") == 0 });
    is(res($r, "SELECT COUNT(*) FROM dlock.leases WHERE resource LIKE 'exp-%' AND tail = 0 AND holder IS NOT NULL"), 0,
       "$fmt: no expired holding left");

    # Fences on the new primary are above every fence of the old one.
    my $max = max(grep { defined } @fences);
    my @new = (res($ra, "SELECT dlock.try_lock('ac1', 'h', 60)"), res($ra, "CALL dlock.xact_lock('new-x', 1)"),
               res($ra, "SELECT dlock.try_lock('tx-reC-1', 'h', 60)"));
    for my $nf (@new) {
        ok(defined $nf && $nf =~ /^\d+$/ && $nf > $max, "$fmt: fence after the promotion " . ($nf // 'NULL') . " > $max");
    }
    $rs->stop;
}

done_testing();
