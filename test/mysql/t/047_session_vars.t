# 047_session_vars.t: session variables a user may set do not change what
# dlock's internal reads see (the transaction marker of _xid: see 037).
#
# SET SESSION system_versioning_asof made _xid() read NULL: xact_lock twice
# gave two fences, a lease was taken on the transaction's own resource,
# lock() waited instead of raising 40P01.  Also swept here: the variables
# that steer _xid's insert (insert_id, last_insert_id, the auto-increment
# step), the clock and time zone, the isolation level, sql_mode, and
# system_versioning_asof at several values.  With each one set, in one
# transaction: xact_lock twice and try_xact_lock give one fence; try_lock
# of the resource is NULL, lock() raises 40P01 at once; another session
# gets NULL at once.  In the next transaction the marker counts for
# nothing: the lease is taken, with a greater fence.  (SET timestamp, which
# the fence draw reads, has its own test with the draw.)
# Promises: P5 P12
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);
my $b = $my->connect('bob', undef, RaiseError => 0);
$b->do('SET SESSION max_statement_time = 5');

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

my @settings = (
    "system_versioning_asof = '2000-01-01 00:00:00'",
    "system_versioning_asof = '2037-12-31 23:59:59'",
    "system_versioning_asof = NOW(6)",
    'insert_id = 5',
    'last_insert_id = 7',
    'auto_increment_increment = 65535, auto_increment_offset = 65535',
    "time_zone = '+13:00'",
    "time_zone = '-12:00'",
    "sql_mode = ''",
    "sql_mode = 'ANSI,NO_BACKSLASH_ESCAPES,PAD_CHAR_TO_FULL_LENGTH'",
    'TRANSACTION ISOLATION LEVEL READ UNCOMMITTED',
    'TRANSACTION ISOLATION LEVEL READ COMMITTED',
    'div_precision_increment = 0',
    'max_sp_recursion_depth = 0',
    'big_tables = 1',
    'sql_select_limit = 1',
    'sql_safe_updates = 1',
    'unique_checks = 0',
    'foreign_key_checks = 0',
    'innodb_lock_wait_timeout = 1',
    "optimizer_switch = 'index_merge=off,derived_merge=off'",
    'join_cache_level = 0',
    'group_concat_max_len = 4',
    'autocommit = 0',
);

my $last = 0;
my $n = 0;
for my $set (@settings) {
    my $a = $my->connect('alice', undef, RaiseError => 0);
    $a->do('SET SESSION max_statement_time = 5');
    is(res($a, "SET SESSION $set"), undef, "SET SESSION $set");
    my $r = 'sv-' . $n++;
    $a->do('START TRANSACTION');
    my $f = res($a, 'CALL dlock.xact_lock(?, 1)', $r);
    like($f, qr/^\d+$/, "$set: xact_lock");
    cmp_ok($f, '>', $last, "$set: above every earlier fence") if $f =~ /^\d+$/;
    is(res($a, 'CALL dlock.xact_lock(?, 1)', $r), $f, "$set: xact_lock again: the same fence");
    is(res($a, 'SELECT dlock.try_xact_lock(?)', $r), $f, "$set: try_xact_lock: the same fence");
    is(res($a, "SELECT dlock.try_lock(?, 'h', 60)", $r), undef, "$set: a lease in the same transaction: NULL");
    is(res($a, "CALL dlock.lock(?, 'h', 60, 1)", $r), 'error 1644 40P01', "$set: lock() in the same transaction: 40P01");
    is(res($b, "SELECT dlock.try_lock(?, 'hb', 60)", $r), undef, "$set: another session: NULL");
    $a->do('COMMIT');
    $a->do('START TRANSACTION');
    my $g = res($a, "SELECT dlock.try_lock(?, 'h', 60)", $r);
    like($g, qr/^\d+$/, "$set: the next transaction takes the lease");
    cmp_ok($g, '>', $f, "$set: with a greater fence") if $g =~ /^\d+$/ && $f =~ /^\d+$/;
    like(res($a, "SELECT dlock.renew(?, 'h', 60, NULL)", $r), qr/^\d{4}-/, "$set: renew");
    is(res($a, "CALL dlock.lock(?, 'other', 60, 1)", $r), 'error 1644 40P01',
       "$set: lock() of another holder after its own change: 40P01");
    $a->do('COMMIT');
    is(res($a, "SELECT dlock.unlock(?, 'h', NULL)", $r), 0, "$set: unlock");
    $last = $g if $g =~ /^\d+$/;
    $a->disconnect;
}

# SERIALIZABLE (the session's level): InnoDB turns the routines' plain reads
# into shared-locking ones, so a refused try_lock pinned the holder's row
# (its renew and unlock failed with 1205) and try_lock waited for another
# transaction.  Now every routine refuses at once with 0A000 inside a
# transaction, pinning nothing, and works in autocommit mode.
{
    my $a = $my->connect('alice', undef, RaiseError => 0);
    $a->do('SET SESSION max_statement_time = 5');
    $a->do('SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE');
    my $bb = $my->connect('bob', undef, RaiseError => 0);
    $bb->do('SET SESSION innodb_lock_wait_timeout = 1');
    my $f = res($bb, "SELECT dlock.try_lock('ser', 'hb', 60)");
    like($f, qr/^\d+$/, 'SERIALIZABLE: bob holds ser');
    $b->do('START TRANSACTION');
    like(res($b, "SELECT dlock.try_lock('ser-open', 'hb', 60)"), qr/^\d+$/, 'SERIALIZABLE: bob holds ser-open in an open transaction');
    $a->do('START TRANSACTION');
    for my $call ("SELECT dlock.try_lock('ser', 'h', 60)", "SELECT dlock.try_lock('ser-open', 'h', 60)",
                  "CALL dlock.lock('ser', 'h', 60, 0)", "CALL dlock.xact_lock('ser-open', 0)",
                  "SELECT dlock.try_xact_lock('ser')", "SELECT dlock.renew('ser', 'h', NULL, NULL)",
                  "SELECT dlock.unlock('ser', 'h', NULL)", "SELECT dlock.unlock_all('h')",
                  "SELECT dlock.check_fence('ser', $f)", "SELECT dlock.assert_fence('ser', $f)") {
        is(res($a, $call), 'error 1644 0A000', "SERIALIZABLE transaction: $call refused");
    }
    like(res($bb, "SELECT dlock.renew('ser', 'hb', 60, NULL)"), qr/^\d{4}-/, 'SERIALIZABLE: the holder renews at once');
    is(res($bb, "SELECT dlock.unlock('ser', 'hb', NULL)"), 0, 'SERIALIZABLE: the holder releases at once');
    $a->do('ROLLBACK');
    $b->do('COMMIT');
    my $g = res($a, "SELECT dlock.try_lock('ser', 'h', 60)");
    like($g, qr/^\d+$/, 'SERIALIZABLE, autocommit: try_lock');
    is(res($a, "SELECT dlock.check_fence('ser', ?)", $g), 1, 'SERIALIZABLE, autocommit: check_fence');
    is(res($a, "SELECT dlock.unlock('ser', 'h', NULL)"), 0, 'SERIALIZABLE, autocommit: unlock');
}

done_testing();
