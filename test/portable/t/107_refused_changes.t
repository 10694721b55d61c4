#!/usr/bin/perl
# 107_refused_changes.t: a refused unlock, renew, proclaim or resign in a
# transaction the caller keeps open holds off nobody (helper-74's finding
# 1; the C extension's test/isolation/specs/refused_change.spec).  Four
# ways to be refused: an old fence or term (a stale incarnation of the
# same holder and role), a holding whose session has ended, a holding
# that another transaction released while the call waited for its row,
# and (for acquisitions) another holder's live holding.
# Each time the live holder's renew, assert_fence and proclaim, or
# another holder's try_lock, must answer at once: every such call runs
# under statement_timeout, and 57014 is the failure.  Section 5: a call
# that waited while the holder released and took the resource again must
# not act on the new holding under its old fence or term (helper-75's
# review of the first fix: 8 of these failed against it).
# Promises: P1 P2 P4
use strict;
use warnings;
use Test::More;
use DBD::Pg qw(:async);
use Time::HiRes qw(sleep);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

# answer: run SQL under a 3 s statement_timeout; its value, or
# "SQLSTATE: message" (in a transaction, which it then rolls back).
sub answer {
    my ($dbh, $sql, @bind) = @_;
    $dbh->do("SET statement_timeout = '3s'");
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    my $e = $dbh->err ? $dbh->state . ': ' . ($dbh->errstr =~ s/^ERROR:\s*//r =~ s/\n.*//sr) : undef;
    $dbh->rollback if $e && !$dbh->{AutoCommit};
    $dbh->do("SET statement_timeout = 0") if $dbh->{AutoCommit};
    return $e // ($row ? $row->[0] // 'NULL' : 'no row');
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'rc');
    my $live = conn('alice');
    my $stale = conn('alice');
    my $bob = conn('bob');

    # 1. An old fence or term.
    my $f = q1($live, "SELECT dlock.try_lock('rc', 'h', '1h')");
    my $t = q1($live, "SELECT dlock.campaign('rc/e', 'h', 'v1', '1h', '0')");
    my ($fs, $ts) = ($f + 1000, $t + 1000);
    $stale->begin_work;
    is(answer($stale, "SELECT dlock.unlock('rc', 'h', $fs)"), 'NULL', "$label: old fence: unlock refused");
    is(answer($stale, "SELECT dlock.renew('rc', 'h', NULL, $fs)"), 'NULL', "$label: old fence: renew refused");
    is(answer($stale, "SELECT dlock.proclaim('rc/e', 'h', 'x', $ts)"), 0, "$label: old term: proclaim refused");
    is(answer($stale, "SELECT dlock.resign('rc/e', 'h', $ts)"), 0, "$label: old term: resign refused");
    like(answer($live, "SELECT dlock.renew('rc', 'h')"), qr/^\d{4}-/, "$label: ... the holder renews at once");
    $live->begin_work;
    is(answer($live, "SELECT dlock.assert_fence('rc', $f)"), '', "$label: ... and pins at once");
    $live->commit if $live->{BegunWork};
    like(answer($live, "SELECT dlock.renew('rc/e', 'h')"), qr/^\d{4}-/, "$label: ... the leader renews at once");
    is(answer($live, "SELECT dlock.proclaim('rc/e', 'h', 'v2')"), 1, "$label: ... and proclaims at once");
    $live->begin_work;
    is(answer($live, "SELECT dlock.assert_fence('rc/e', $t)"), '', "$label: ... and pins its term at once");
    $live->commit if $live->{BegunWork};
    is(answer($live, "SELECT dlock.unlock('rc', 'h')"), 0, "$label: ... the holder unlocks at once");
    is(answer($live, "SELECT dlock.resign('rc/e', 'h')"), 1, "$label: ... the leader resigns at once");
    $stale->commit;

    # 2. A holding whose session has ended: its unlock is refused, and
    # the resource is acquirable at once by others.
    my ($sid, $fe) = @{$live->selectrow_arrayref(q{WITH o AS MATERIALIZED
        (SELECT dlock.open_session('300ms', 'w') AS s)
      SELECT s, dlock.try_lock('rs', session => s) FROM o})};
    ok($fe, "$label: a holding in a 300ms session");
    for (1 .. 100) {
        last unless q1($live, "SELECT dlock.check('rs', ?)", $fe);
        sleep 0.05;
    }
    ok(!q1($live, "SELECT dlock.check('rs', ?)", $fe), "$label: ... the session has ended");
    $stale->begin_work;
    is(answer($stale, "SELECT dlock.unlock('rs', 'w')"), 'NULL', "$label: ended session: unlock refused");
    my $g = answer($bob, "SELECT dlock.try_lock('rs', 'b', '1h')");
    like($g, qr/^\d+$/, "$label: ... another holder takes it at once") or diag($g);
    $stale->commit;
    q1($bob, "SELECT dlock.unlock('rs', 'b')");

    # 3. Released while the call waited for the row: the call finds it
    # gone (refused) and must not keep the row.
    for my $call (['unlock', "SELECT dlock.unlock('rw', 'h', %d)"],
                  ['unlock of count 2', "SELECT dlock.unlock('rw', 'h', %d)", 2],
                  ['renew', "SELECT dlock.renew('rw', 'h', NULL, %d)"]) {
        my ($name, $sql, $count) = @$call;
        my $fw = q1($live, "SELECT dlock.try_lock('rw', 'h', '1h')");
        q1($live, "SELECT dlock.try_lock('rw', 'h', '1h')") for 2 .. ($count // 1);
        $live->begin_work;
        q1($live, "SELECT dlock.unlock_all('h')");      # holds the row until commit
        $stale->begin_work;
        $stale->do("SET LOCAL statement_timeout = '10s'");
        my $sth = $stale->prepare(sprintf($sql, $fw), { pg_async => PG_ASYNC });
        $sth->execute;
        sleep 0.2;
        ok(!$stale->pg_ready, "$label: $name: waits for the release in flight");
        $live->commit;
        ok(wait_ready($stale, 10), "$label: $name: answers once it commits");
        $stale->pg_result;
        ok(!$stale->err, "$label: $name: no error") or diag($stale->errstr);
        is(($sth->fetchrow_array)[0], undef, "$label: $name: refused (NULL): the holding is gone");
        $sth->finish;
        my $gw = answer($bob, "SELECT dlock.try_lock('rw', 'b', '1h')");
        like($gw, qr/^\d+$/, "$label: $name: ... another holder takes it at once") or diag($gw);
        $stale->commit;
        q1($bob, "SELECT dlock.unlock('rw', 'b')");
    }
    # 4. Refused acquisitions of another holder's live holding, in a
    # transaction kept open: the holder renews, pins and unlocks at once.
    my $fa = q1($live, "SELECT dlock.try_lock('ra', 'h', '1h')");
    $stale->begin_work;
    for my $try ("dlock.try_lock('ra', 'x', '1h')", "dlock.lock('ra', 'x', '1h', '0')",
                 "dlock.try_lock('ra', 'x', '1h', shared => true)", "dlock.try_xact_lock('ra')",
                 "dlock.try_lock_all(ARRAY['ra'], 'x', '1h')") {
        is(answer($stale, "SELECT $try"), 'NULL', "$label: busy: $try refused");
    }
    like(answer($live, "SELECT dlock.renew('ra', 'h')"), qr/^\d{4}-/, "$label: ... the holder renews at once");
    $live->begin_work;
    is(answer($live, "SELECT dlock.assert_fence('ra', $fa)"), '', "$label: ... and pins at once");
    $live->commit if $live->{BegunWork};
    is(answer($live, "SELECT dlock.unlock('ra', 'h')"), 0, "$label: ... and unlocks at once");
    $stale->commit;
    # 5. The holder released and took the resource again (a new fence, in
    # one transaction) while the call waited for the row: a call under the
    # old fence or term is refused and leaves the new holding as it is
    # (helper-75's finding 1); a call without one acts on the new holding.
    my $waiting = sub {     # start SQL on a new connection; it must wait for $live
        my ($sql, $name) = @_;
        my $w = conn('alice');
        my $sth = $w->prepare($sql, { pg_async => PG_ASYNC });
        $sth->execute;
        sleep 0.2;
        ok(!$w->pg_ready, "$label: $name: waits for the holder's transaction");
        return [$w, $sth];
    };
    my $answer = sub {      # after $live commits: the waiting call's answer
        my ($ws, $name) = @_;
        my ($w, $sth) = @$ws;
        ok(wait_ready($w, 10), "$label: $name: answers once it commits");
        $w->pg_result;
        ok(!$w->err, "$label: $name: no error") or diag($w->errstr);
        my ($v) = $sth->fetchrow_array;
        $sth->finish;
        $w->disconnect;
        return $v;
    };
    for my $call (['unlock', "SELECT dlock.unlock('rf', 'h', %d)"],
                  ['renew', "SELECT dlock.renew('rf', 'h', '2h', %d)"]) {
        my ($name, $sql) = @$call;
        my $f1 = q1($live, "SELECT dlock.try_lock('rf', 'h', '1h')");
        $live->begin_work;
        q1($live, "SELECT dlock.unlock('rf', 'h')");
        my $f2 = q1($live, "SELECT dlock.try_lock('rf', 'h', '1h')");
        my $exp = q1($live, "SELECT expires_at FROM dlock.locks WHERE resource = 'rf'");
        my $sth = $waiting->(sprintf($sql, $f1), "old fence, $name");
        $live->commit;
        is($answer->($sth, "old fence, $name"), undef, "$label: old fence, $name: refused (NULL)");
        is(q1($live, "SELECT fence || ' ' || expires_at FROM dlock.locks WHERE resource = 'rf'"), "$f2 $exp",
           "$label: old fence, $name: the new holding is left as it was");
        q1($live, "SELECT dlock.unlock('rf', 'h')");
    }
    for my $call (['proclaim', "SELECT dlock.proclaim('rf/e', 'h', 'STALE', %d)"],
                  ['resign', "SELECT dlock.resign('rf/e', 'h', %d)"]) {
        my ($name, $sql) = @$call;
        my $t1 = q1($live, "SELECT dlock.campaign('rf/e', 'h', 'v1', '1h', '0')");
        $live->begin_work;
        q1($live, "SELECT dlock.resign('rf/e', 'h')");
        my $t2 = q1($live, "SELECT dlock.campaign('rf/e', 'h', 'v2', '1h', '0')");
        my $sth = $waiting->(sprintf($sql, $t1), "old term, $name");
        $live->commit;
        is($answer->($sth, "old term, $name"), 0, "$label: old term, $name: refused (false)");
        is(q1($live, "SELECT term || ' ' || value FROM dlock.leader('rf/e')"), "$t2 v2",
           "$label: old term, $name: the new term leads, its value as it was");
        q1($live, "SELECT dlock.resign('rf/e', 'h')");
    }
    {
        q1($live, "SELECT dlock.try_lock('rf', 'h', '1h')");
        $live->begin_work;
        q1($live, "SELECT dlock.unlock('rf', 'h')");
        my $f2 = q1($live, "SELECT dlock.try_lock('rf', 'h', '1h')");
        my $sth = $waiting->("SELECT dlock.renew('rf', 'h', '2h')", "no fence, renew");
        $live->commit;
        my $e = $answer->($sth, "no fence, renew");
        ok(defined $e, "$label: no fence, renew: renews the holder's new holding");
        is(q1($live, "SELECT fence || ' ' || (expires_at = ?::timestamptz) FROM dlock.locks WHERE resource = 'rf'", $e),
           "$f2 true", "$label: ... to the expiry it returned") if defined $e;
        $live->begin_work;
        q1($live, "SELECT dlock.unlock('rf', 'h')");
        q1($live, "SELECT dlock.try_lock('rf', 'h', '1h')");
        $sth = $waiting->("SELECT dlock.unlock('rf', 'h')", "no fence, unlock");
        $live->commit;
        is($answer->($sth, "no fence, unlock"), 0, "$label: no fence, unlock: releases the holder's new holding");
        is(q1($live, "SELECT count(*) FROM dlock.locks WHERE resource = 'rf'"), 0, "$label: ... nothing left held");
    }
    stop_server($s->[1], $dir);
}
done_testing;
