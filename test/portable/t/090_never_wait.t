# 090_never_wait.t: issue 33's portable defects, each against the
# unfixed code: dlock's advisory keys held by a role without rights (10),
# shared try_lock and try_acquire behind another transaction's change of
# the row (11), an in-place upgrade behind an open transaction (11a), a
# holder's fair try_lock behind its own withdraw (11b), lock_delay with
# shared (15), another role's open shared or permits acquisition beside a
# pin (16), and a re-run keeping the DBA's grants.  Every call that
# could hang runs under statement_timeout: 57014 is the failure.
# Promises: P5 P17
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

# call: run SQL under a statement_timeout; (value, '') or (undef, SQLSTATE: message).
sub call {
    my ($dbh, $sql, $timeout, @bind) = @_;
    $dbh->do("SET statement_timeout = '" . ($timeout // '5s') . "'");
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    my $e = $dbh->err ? $dbh->state . ': ' . ($dbh->errstr =~ s/^ERROR:\s*//r =~ s/\n.*//sr) : '';
    $dbh->rollback if $e && !$dbh->{AutoCommit};
    $dbh->do("SET statement_timeout = 0") if $dbh->{AutoCommit};
    return ($row ? $row->[0] : undef, $e);
}

# answered: the call answered (anything but a statement timeout).
sub answered {
    my ($dbh, $sql, $name, @bind) = @_;
    my ($v, $e) = call($dbh, $sql, '5s', @bind);
    unlike($e, qr/^57014/, "$label: $name answers") or diag($e);
    return ($v, $e);
}

sub advisory_held {
    my ($admin, $pid) = @_;
    return q1($admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = ?", $pid);
}

sub qkey { my ($dbh, $r) = @_; return q1($dbh, "SELECT ('x' || substr(md5(?), 17, 8))::bit(32)::integer", $r) }

sub upgrade {
    my ($dir, @v) = @_;
    my $vars = join ' ', map { "-v $_" } @v;
    my $out = `PGOPTIONS='-c statement_timeout=30s' $client/psql -X -q -h $dir -U dbo -d app $vars -f $script 2>&1`;
    return ($? >> 8, $out);
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'never-wait');
    $admin->do("CREATE ROLE mallory LOGIN") or die $admin->errstr;   # no rights on dlock
    my $db = PortableTest::conn('admin', 'app');
    my $dbo = conn('dbo');
    my $mal = conn('mallory');
    my $bob = conn('bob');

    # -- 10: the epoch jump's key (1684828003, 1), held by mallory.
    q1($mal, "SELECT pg_advisory_lock(1684828003, 1)");
    for my $case (['try_lock', "SELECT dlock.try_lock('e1')"],
                  ['lock with wait', "SELECT dlock.lock('e2', wait => '1s')"],
                  ['shared try_lock', "SELECT dlock.try_lock('e3', shared => true)"],
                  ['try_acquire', "SELECT dlock.try_acquire('e4', 'h', 2)"]) {
        $dbo->do("DELETE FROM dlock.fence_epoch");   # the next draw starts an epoch
        my $a = conn('alice');
        my ($v, $e) = answered($a, $case->[1], "10: $case->[0] while a role without rights holds the epoch key");
        ok(defined $v, "$label: 10: $case->[0] got a fence") or diag($e);
        $a->disconnect;
    }
    q1($mal, "SELECT pg_advisory_unlock_all()");

    # -- 10: the fair waiters' mark (_qkey, 0), the writer-waits mark
    # (1684828006, _qkey) and the upgrade mark (1684828007, _umark), held by
    # mallory; bob holds the resource.
    q1($bob, "SELECT dlock.try_lock('q1', 'bobh', '1h')");
    my $k = qkey($mal, 'q1');
    my $alice_oid = q1($admin, "SELECT 'alice'::regrole::oid");
    my $umark = q1($mal, "SELECT hashtext('q1' || chr(1) || 'ah' || chr(1) || ?::text)", $alice_oid);
    for my $key (["(_qkey, 0)", $k, 0, "fair => true"],
                 ["(1684828006, _qkey)", 1684828006, $k, "fair => false"],
                 ["(1684828007, _umark)", 1684828007, $umark, "fair => false"]) {
        my ($name, $k1, $k2, $fair) = @$key;
        q1($mal, "SELECT pg_advisory_lock($k1, $k2)");
        my $a = conn('alice');
        my $pid = q1($a, "SELECT pg_backend_pid()");
        my ($v) = answered($a, "SELECT dlock.lock('q1', 'ah', wait => '300ms', $fair)",
                           "10: lock(wait => 300ms, $fair) while mallory holds $name");
        is($v, undef, "$label: 10: ... and times out (NULL)");
        is(advisory_held($admin, $pid), 0, "$label: 10: ... leaving no advisory lock");
        # A wait cut by statement_timeout leaves nothing either.
        my (undef, $e) = call($a, "SELECT dlock.lock('q1', 'ah', $fair)", '300ms');
        like($e, qr/^57014/, "$label: 10: an endless wait ($fair) is cut by statement_timeout");
        is(advisory_held($admin, $pid), 0, "$label: 10: ... leaving no advisory lock (mallory holds $name)");
        $a->disconnect;
        q1($mal, "SELECT pg_advisory_unlock_all()");
    }
    q1($bob, "SELECT dlock.unlock('q1', 'bobh')");

    # -- 11: an open reap() transaction deleting a long-free row.
    for my $r ('old1', 'old2') {
        q1($bob, "SELECT dlock.try_lock(?, 'bobh')", $r);
        q1($bob, "SELECT dlock.unlock(?, 'bobh')", $r);
    }
    $dbo->do("UPDATE dlock.leases SET released_at = now() - interval '2 hours' WHERE resource IN ('old1', 'old2')");
    $dbo->begin_work;
    q1($dbo, "SELECT dlock.reap()");
    {
        my $a = conn('alice');
        answered($a, "SELECT dlock.try_lock('old1', 'ah', shared => true)", "11: shared try_lock beside an open reap()");
        answered($a, "SELECT dlock.try_acquire('old2', 'ah', 3)", "11: try_acquire beside an open reap()");
        answered($a, "SELECT dlock.try_lock('old1', 'ah')", "11: exclusive try_lock beside an open reap()");
        $a->disconnect;
    }
    $dbo->rollback;

    # -- 11: REPEATABLE READ beside the exclusive holder's uncommitted change.
    for my $op (['renew', "SELECT dlock.renew('rr', 'bobh')", $bob],
                ['unlock', "SELECT dlock.unlock('rr', 'bobh')", $bob],
                ['unlock_all', "SELECT dlock.unlock_all('bobh')", $bob],
                ['break_lock', "SELECT dlock.break_lock('rr')", $dbo],
                ['resign', "SELECT dlock.resign('rr', 'bobh')", $bob]) {
        my ($name, $sql, $who) = @$op;
        if ($name eq 'resign') {
            q1($bob, "SELECT dlock.campaign('rr', 'bobh', 'v', '1h', '0')");
        } else {
            q1($bob, "SELECT dlock.try_lock('rr', 'bobh', '1h')");
        }
        $who->begin_work;
        q1($who, $sql);
        my $a = conn('alice');
        for my $call (['shared try_lock', "SELECT dlock.try_lock('rr', 'ah', shared => true)"],
                      ['try_acquire', "SELECT dlock.try_acquire('rr', 'ah', 3)"],
                      ['exclusive try_lock', "SELECT dlock.try_lock('rr', 'ah')"]) {
            $a->begin_work;
            $a->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
            answered($a, $call->[1], "11: $call->[0] (REPEATABLE READ) beside an uncommitted $name");
            $a->rollback unless $a->{AutoCommit};
        }
        $a->disconnect;
        $who->rollback;
        $bob->do("SELECT dlock.resign('rr', 'bobh')");
        $bob->do("SELECT dlock.unlock_all('bobh')");
    }

    # -- 11a: an in-place upgrade while a transaction that used dlock is open.
    q1($bob, "SELECT dlock.try_lock('u1', 'bobh')");
    q1($bob, "SELECT dlock.unlock('u1', 'bobh')");
    my $t = conn('alice');
    $t->begin_work;
    q1($t, "SELECT dlock.try_lock('u1', 'th')");
    q1($t, "SELECT count(*) FROM dlock.locks");
    my $installed = q1($dbo, "SELECT installed_at::text FROM dlock.portable");
    {
        my $pid = fork // die "fork: $!";
        if (!$pid) {
            my ($rc, $out) = upgrade($dir);
            open my $fh, '>', "$dir/upgrade.out" or die; print $fh "$rc\n$out"; close $fh;
            exit 0;
        }
        # Until the upgrade has started (or 3 s).
        for (1 .. 300) {
            last if q1($admin, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'dbo' AND datname = 'app' AND state = 'active' AND query <> ''") > 0
                    && q1($admin, "SELECT now() - min(xact_start) > interval '500ms' FROM pg_stat_activity WHERE usename = 'dbo' AND datname = 'app' AND state = 'active'");
            select undef, undef, undef, 0.01;
        }
        my $a = conn('bob');
        my ($v, $e) = answered($a, "SELECT dlock.try_lock('u2', 'bobh')", "11a: try_lock while an upgrade waits for an open transaction");
        ok(defined $v, "$label: 11a: ... and gets its fence") or diag($e);
        answered($a, "SELECT count(*) FROM dlock.locks", "11a: dlock.locks while an upgrade waits for an open transaction");
        answered($a, "SELECT dlock.unlock('u2', 'bobh')", "11a: unlock while an upgrade waits");
        $a->disconnect;
        $t->commit;
        waitpid $pid, 0;
        open my $fh, '<', "$dir/upgrade.out" or die; my $rc = <$fh>; local $/; my $out = <$fh>; close $fh;
        is($rc + 0, 0, "$label: 11a: the upgrade completes once the transaction ends") or diag($out);
    }
    # A transaction that stays open: the upgrade fails clearly, changing nothing.
    $t->begin_work;
    q1($t, "SELECT dlock.try_lock('u1', 'th')");
    q1($t, "SELECT count(*) FROM dlock.locks");
    {
        my ($rc, $out) = upgrade($dir, 'dlock_lock_wait=300ms');
        isnt($rc, 0, "$label: 11a: an upgrade that cannot get its locks fails");
        like($out, qr/55P03|could not lock|open transaction/i, "$label: 11a: ... saying why") or diag($out);
        is(q1($dbo, "SELECT installed_at::text FROM dlock.portable"), $installed, "$label: 11a: ... changing nothing");
    }
    $t->rollback;
    $t->disconnect;

    # -- 11b: the holder's fair try_lock while its own withdraw is open.
    q1($bob, "SELECT dlock.try_lock('fb', 'bobh', '1h')");
    {
        my $a = conn('alice');
        my $w = conn('alice');
        is(q1($a, "SELECT dlock.try_lock('fb', 'ah', fair => true)"), undef, "$label: 11b: a fair attempt queues");
        $w->begin_work;
        q1($w, "SELECT dlock.withdraw('fb', 'ah')");
        answered($a, "SELECT dlock.try_lock('fb', 'ah', fair => true)", "11b: a fair try_lock while the holder's withdraw is open");
        q1($bob, "SELECT dlock.unlock('fb', 'bobh')");
        answered($a, "SELECT dlock.try_lock('fb', 'ah', fair => true)", "11b: ... also once the resource is free");
        $w->rollback;
        $a->do("SELECT dlock.unlock_all('ah')");
        $a->disconnect; $w->disconnect;
    }

    # -- 15: lock_delay with shared => true: 22023, nothing changed.
    {
        my $a = conn('alice');
        my $fences = q1($dbo, "SELECT last_value FROM dlock.fences");
        for my $sql ("SELECT dlock.try_lock('s15', 'ah', '10s', lock_delay => '20s', shared => true)",
                     "SELECT dlock.lock('s15', 'ah', '10s', '1s', lock_delay => '20s', shared => true)",
                     "SELECT dlock.lock('s15', 'ah', '10s', '1s', true, '1s', true)") {
            my (undef, $e) = call($a, $sql);
            is($e, '22023: lock_delay applies to exclusive locks only', "$label: 15: $sql");
        }
        is(q1($a, "SELECT count(*) FROM dlock.locks WHERE resource = 's15'"), 0, "$label: 15: ... nothing held");
        is(q1($dbo, "SELECT last_value FROM dlock.fences"), $fences, "$label: 15: ... no fence drawn");
        ok(defined q1($a, "SELECT dlock.try_lock('s15', 'ah', '10s', lock_delay => '0', shared => true)"),
           "$label: 15: lock_delay => '0' with shared => true is taken");
        $a->do("SET dlock.lock_delay = '20s'");
        ok(defined q1($a, "SELECT dlock.try_lock('s15', 'ah2', '10s', shared => true)"),
           "$label: 15: dlock.lock_delay does not refuse a shared holding");
        $a->do("SELECT dlock.unlock_all('ah'), dlock.unlock_all('ah2')");
        $a->disconnect;
    }

    # -- 16: another role's shared or permits acquisition in a transaction
    # still open, and a reader's open pin.  The acquisition locked the
    # resource's row FOR UPDATE: the other holders' assert_fence (FOR KEY
    # SHARE) waited for it, and a pin made every new reader busy.  Readers
    # now lock it FOR NO KEY UPDATE; a pin of an exclusive holding, even
    # one that has run out, still keeps a reader out.
    for my $kind (['shared', "SELECT dlock.try_lock(?, ?, '1h', shared => true)"],
                  ['permits', "SELECT dlock.try_acquire(?, ?, 3, lease => '1h')"]) {
        my ($k, $take) = @$kind;
        my $r = "k16/$k";
        my $a = conn('alice');
        my $fa = q1($a, $take, $r, 'ah');
        ok(defined $fa, "$label: 16: alice holds $r ($k)");
        $bob->begin_work;
        ok(defined q1($bob, $take, $r, 'bh'), "$label: 16: bob's open transaction takes $r ($k) too");
        $a->begin_work;
        my ($v, $e) = answered($a, "SELECT 'pinned' FROM (SELECT dlock.assert_fence(?, ?)) x",
                               "16: alice's assert_fence while bob's $k acquisition is open", $r, $fa);
        is($v, 'pinned', "$label: 16: ... and passes") or diag($e);
        $a->rollback unless $a->{AutoCommit};
        $bob->rollback;
        # Alice's pin open: a new holder of the same kind joins.
        $a->begin_work;
        $a->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $fa);
        is($a->err, undef, "$label: 16: alice pins her $k holding of $r");
        my $c = conn('bob');
        ($v, $e) = answered($c, $take, "16: a new $k holder while alice's pin is open", $r, 'ch');
        ok(defined $v, "$label: 16: ... and is taken (a pin of another holding)") or diag($e);
        $a->commit;
        q1($c, "SELECT dlock.unlock_all('ch')");
        q1($a, "SELECT dlock.unlock_all('ah')");
        $_->disconnect for $a, $c;
    }
    {
        my $a = conn('alice');
        my $fx = q1($a, "SELECT dlock.try_lock('k16/x', 'ah', '300ms')");
        $a->begin_work;
        $a->do("SELECT dlock.assert_fence('k16/x', ?)", undef, $fx);
        is($a->err, undef, "$label: 16: alice pins her exclusive holding of k16/x");
        1 while !q1($bob, "SELECT expired FROM dlock.locks WHERE resource = 'k16/x'") && sleep 0.05;
        my ($v, $e) = answered($bob, "SELECT dlock.try_lock('k16/x', 'bh', '1h', shared => true)",
                               "16: a reader while alice's pin of her expired holding is open");
        is($v, undef, "$label: 16: ... is busy (the pinned holding does not change hands)") or diag($e);
        $a->commit;
        ok(defined q1($bob, "SELECT dlock.try_lock('k16/x', 'bh', '1h', shared => true)"),
           "$label: 16: the pin gone, the reader takes k16/x");
        q1($bob, "SELECT dlock.unlock_all('bh')");
        $a->disconnect;
    }

    # -- Lower weight: a re-run keeps the DBA's revokes.
    $dbo->do("REVOKE SELECT ON dlock.locks, dlock.queue, dlock.terms FROM PUBLIC") or die $dbo->errstr;
    $dbo->do("REVOKE USAGE ON SCHEMA dlock FROM PUBLIC") or die $dbo->errstr;
    $dbo->do("GRANT USAGE ON SCHEMA dlock TO alice") or die $dbo->errstr;
    {
        my ($rc, $out) = upgrade($dir);
        is($rc, 0, "$label: re-run with the DBA's revokes") or diag($out);
        is(q1($db, "SELECT has_schema_privilege('bob', 'dlock', 'USAGE')::text"), 'false', "$label: grants: schema USAGE stays revoked");
        is(q1($db, "SELECT has_schema_privilege('alice', 'dlock', 'USAGE')::text"), 'true', "$label: grants: alice's grant stays");
        for my $v ('dlock.locks', 'dlock.queue', 'dlock.terms') {
            is(q1($db, "SELECT has_table_privilege('bob', '$v', 'SELECT')::text"), 'false', "$label: grants: SELECT on $v stays revoked");
        }
    }

    $_->disconnect for $dbo, $mal, $bob, $db;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
