# 039_reaper_creation.t: two findings of 070_model (the MariaDB model),
# each a call that must answer at once.
#   1. The reaper at work: an expired lease is free at once, "whether or
#      not reap() has removed it yet" (the contract).  The reaper frees it
#      in a statement of its own, holding the row for that statement; an
#      acquirer that met the row locked then returned NULL (the prober's
#      try_lock, 5 ms after its lease ended).  Now the reaper locks its
#      slot's row of dlock.reapers from before it locks the resource's row
#      until its commit, and an acquirer that finds the row locked waits
#      for a share lock on that row of dlock.reapers, then looks once more
#      (no named lock: issue 33, 3 and 6).  Here the reaper's round is
#      played by root, step by step: _reap_one in an open transaction, then
#      COMMIT once the acquirer is seen waiting (or has answered):
#      try_lock, lock(wait 0), try_xact_lock must return a fence, not
#      NULL.
#   2. A REPEATABLE READ snapshot older than a resource's creation: the
#      acquirer's plain read shows no row, so it inserted one, and the
#      INSERT's duplicate-key check waited for the transaction that had the
#      (committed) row locked, here the holder renewing in an open
#      transaction (until error 1205 with innodb_lock_wait_timeout = 1; the
#      model saw try_lock wait until the holder committed, then fail with
#      1020, and lock() wait).  Now the creation gate's counter (gen) and
#      last creation tell the acquirer what was created in its slot after
#      the snapshot: exactly this resource, so it locks the row without
#      waiting (NULL while another transaction has it), or more, so it gets
#      error 1020 at once, its transaction rolled back.
# Promises: P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep);

my $my = DlockMy->new(args => ['--innodb-lock-wait-timeout=20']);

sub conn {
    my ($user, $iso) = @_;
    my $c = $my->connect($user, undef, RaiseError => 0);
    $c->do('SET SESSION max_statement_time = 10');
    $c->do('SET SESSION innodb_lock_wait_timeout = 1');
    $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso") if $iso;
    return $c;
}

# run(dbh, sql, binds...): the result, NULL as 'NULL', or "error ERRNO".
sub run {
    my ($dbh, $sql, @bind) = @_;
    my $sth = $dbh->prepare($sql);
    return 'error ' . $dbh->err unless $sth && $sth->execute(@bind);
    my $row = $sth->fetchrow_arrayref;
    my $res = $row ? $row->[0] : undef;
    $sth->finish;
    1 while $sth->more_results;
    return $res // 'NULL';
}

my $root = $my->connect('root', '', RaiseError => 0);
my ($named) = $root->selectrow_array(q{SELECT COUNT(*) FROM information_schema.ROUTINES
    WHERE ROUTINE_SCHEMA = 'dlock' AND ROUTINE_NAME = '_reap_name'});
# The reaper's own rounds would race with root's: off.
$root->do('ALTER EVENT dlock.reap DISABLE') or die $root->errstr;

# 1. The reaper at work.
my $n = 0;
for my $case (['try_lock', 'SELECT dlock.try_lock(?, ?, 10)', 1],
              ['lock', 'CALL dlock.lock(?, ?, 10, 0)', 1],
              ['try_xact_lock', 'SELECT dlock.try_xact_lock(?)', 0],
              ['try_lock in a transaction', 'SELECT dlock.try_lock(?, ?, 10)', 1, 'REPEATABLE READ'])
{
    my ($name, $sql, $holder, $iso) = @$case;
    my $r = 'reaped/' . $n++;
    my $alice = conn('alice');
    like(run($alice, 'SELECT dlock.try_lock(?, ?, 0.05)', $r, 'old'), qr/^\d+$/, "$name: the lease taken");
    sleep 0.2;    # expired
    my $rn;
    if ($named) {
        ($rn) = $root->selectrow_array('SELECT dlock._reap_name(?)', undef, $r);
        is(run($root, 'SELECT GET_LOCK(?, 0)', $rn), 1, "$name: the reaper's named lock taken");
    }
    $root->do('START TRANSACTION');
    is(run($root, 'SELECT dlock._reap_one(?)', $r), 1, "$name: the reaper frees the expired lease (uncommitted)");
    pipe(my $rd, my $wr) or die "pipe: $!";
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        close $rd;
        my $c = conn('bob', $iso);
        $c->do('START TRANSACTION') if $iso;
        my ($id) = $c->selectrow_array('SELECT CONNECTION_ID()');
        print $wr "$id\n";
        $wr->flush;
        my $res = run($c, $sql, $r, $holder ? ('new') : ());
        $c->do('COMMIT') if $iso;
        print $wr "$res\n";
        close $wr;
        POSIX::_exit(0);
    }
    close $wr;
    chomp(my $id = <$rd>);
    # Until the acquirer waits for the named lock, or has answered.
    my $state = '';
    for (1 .. 100) {
        ($state) = $root->selectrow_array(
            'SELECT IFNULL(STATE, \'\') FROM information_schema.PROCESSLIST WHERE ID = ?', undef, $id);
        my ($waits) = $root->selectrow_array(
            "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'", undef, $id);
        last if !defined $state || $state =~ /user lock/i || $waits || !kill(0, $pid);
        sleep 0.15;    # InnoDB refreshes what INNODB_TRX shows at most every 0.1 s
    }
    $root->do('COMMIT');
    run($root, 'SELECT RELEASE_LOCK(?)', $rn) if $named;
    chomp(my $res = <$rd> // 'no answer');
    waitpid($pid, 0);
    like($res, qr/^\d+$/, "$name of an expired lease the reaper is freeing: a fence (got $res)");
}

# 2. A snapshot older than the resource's creation.  Each case: carol's
#    REPEATABLE READ snapshot, then bob creates the resource (and, for
#    "two creations", another resource of the same gate slot), and holds
#    its row in an open transaction (renew); carol's acquisition answers at
#    once: NULL (busy) when the gate says exactly this resource was created
#    since the snapshot, error 1020 with the transaction rolled back when
#    more was; and once the holder's transaction is over, a fence from a
#    snapshot as old (one creation) and from a fresh one.
# same_slot(r): another resource of r's creation gate slot.
sub same_slot {
    my ($r) = @_;
    my ($slot) = $root->selectrow_array('SELECT CRC32(?) % 4096', undef, $r);
    for my $i (0 .. 100000) {
        my ($s) = $root->selectrow_array('SELECT CRC32(?) % 4096', undef, "$r/$i");
        return "$r/$i" if $s == $slot;
    }
    die "no resource in the slot of $r";
}
$n = 0;
for my $case (['try_lock', 'SELECT dlock.try_lock(?, ?, 10)', 1],
              ['lock', 'CALL dlock.lock(?, ?, 10, 0)', 1],
              ['xact_lock', 'CALL dlock.xact_lock(?, 0)', 0],
              ['try_xact_lock', 'SELECT dlock.try_xact_lock(?)', 0])
{
    my ($name, $sql, $holder) = @$case;
    for my $two (0, 1) {
        my $r = 'created/' . $n++;
        my $what = $two ? "$name (two creations)" : $name;
        my $carol = conn('admin', 'REPEATABLE READ');
        $carol->do('START TRANSACTION');
        run($carol, 'SELECT COUNT(*) FROM dlock.locks');    # the snapshot
        my $bob = conn('bob');
        like(run($bob, 'SELECT dlock.try_lock(?, ?, 30)', $r, 'b'), qr/^\d+$/, "$what: $r created and held");
        if ($two) {
            my $q = same_slot($r);
            like(run($bob, 'SELECT dlock.try_lock(?, ?, 30)', $q, 'b'), qr/^\d+$/, "$what: $q of the same slot created");
        }
        my $bob2 = conn('bob');
        $bob2->do('START TRANSACTION');
        like(run($bob2, 'SELECT dlock.renew(?, ?, 30, NULL)', $r, 'b'), qr/^\d/, "$what: the holder renews in an open transaction");
        my $res = run($carol, $sql, $r, $holder ? ('c') : ());
        is($res, $two ? 'error 1020' : 'NULL', "$what from a snapshot older than $r: "
           . ($two ? 'error 1020' : 'NULL') . ' at once (not a wait)');
        is(run($carol, 'SELECT @@in_transaction'), $two ? 0 : 1,
           "$what: ... its transaction " . ($two ? 'rolled back' : 'still open'));
        $bob2->do('COMMIT');
        # Nothing left locked: the holder's own renew and unlock go through.
        like(run($bob, 'SELECT dlock.renew(?, ?, 30, NULL)', $r, 'b'), qr/^\d/, "$what: the holder renews");
        is(run($bob, 'SELECT dlock.unlock(?, ?, NULL)', $r, 'b'), 0, "$what: the holder releases");
        unless ($two) {
            like(run($carol, $sql, $r, $holder ? ('c') : ()), qr/^\d+$/,
                 "$what: then a fence, from the same old snapshot");
        }
        $carol->do('ROLLBACK');
        $carol->do('START TRANSACTION');
        like(run($carol, $sql, $r, $holder ? ('c') : ()), qr/^\d+$/, "$what: a fence from a fresh snapshot");
        $carol->do('ROLLBACK');
    }
}

# 3. lock() and xact_lock() try to create a row that their plain read
#    shows but that they could not lock (dlock._create, for a row the
#    reaper deleted after a REPEATABLE READ snapshot).  When the row was in
#    fact there, locked by another transaction for a moment and free by the
#    time of the INSERT, the INSERT's duplicate-key check kept a shared lock
#    on it to the end of the acquirer's transaction, READ COMMITTED too, and
#    the holder's unlock waited for it (070_model, seed 479467906).  Here
#    _create is called as lock() would, on a row that is there and free:
#    it must leave nothing locked.
for my $iso ('READ COMMITTED', 'REPEATABLE READ') {
    my $r = "there/$iso";
    my $bob = conn('bob');
    like(run($bob, 'SELECT dlock.try_lock(?, ?, 30)', $r, 'b'), qr/^\d+$/, "$iso: $r held");
    my $c = $my->connect('root', '', RaiseError => 0);
    $c->do("SET SESSION TRANSACTION ISOLATION LEVEL $iso");
    $c->do('START TRANSACTION');
    run($c, 'SELECT COUNT(*) FROM dlock.locks');    # the snapshot
    is(run($c, 'CALL dlock._create(?)', $r), 'NULL', "$iso: _create of a row that is there");
    like(run($bob, 'SELECT dlock.renew(?, ?, 30, NULL)', $r, 'b'), qr/^\d/, "$iso: ... and the holder renews (no wait)");
    is(run($bob, 'SELECT dlock.unlock(?, ?, NULL)', $r, 'b'), 0, "$iso: ... and releases (no wait)");
    $c->do('ROLLBACK');
}

# The reaper's round skips a row whose named lock someone holds, and frees
# it once that is gone (no wait either way).
if ($named) {
    my $alice = conn('alice');
    run($alice, 'SELECT dlock.try_lock(?, ?, 0.05)', 'skip/0', 'old');
    sleep 0.2;
    my ($rn) = $root->selectrow_array('SELECT dlock._reap_name(?)', undef, 'skip/0');
    is(run($root, 'SELECT GET_LOCK(?, 0)', $rn), 1, 'named lock held');
    my $other = $my->connect('root', '', RaiseError => 0);
    is(run($other, 'CALL dlock.reap()'), 0, 'reap() passes by a row whose named lock is held');
    run($root, 'SELECT RELEASE_LOCK(?)', $rn);
    is(run($other, 'CALL dlock.reap()'), 1, 'and frees it once released');
}

done_testing();
