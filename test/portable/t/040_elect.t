#!/usr/bin/perl
# 040_elect.t: the portable edition's [elect] (campaign, proclaim, resign,
# leader(), dlock.locks.value, dlock.terms, events), on every server
# 010_core.t uses, installed and used by non-superuser roles.  The same
# calls, results and SQLSTATEs as the C extension's test/sql/elect.sql and
# fair_delay_campaign.sql; between sessions: waiting candidates elected in campaign
# order with their values, one leader at a time, terms increasing; events
# with candidate, term and value; and a race of six candidates with fenced
# writes under their terms.
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P8 P13
use strict;
use warnings;
use DBI;
use DBD::Pg qw(:async);
use Time::HiRes qw(time sleep);
use Test::More;

use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    run_server(@$s);
}
done_testing();

sub run_server {
    my ($lbl, $bindir) = @_;
    my ($dir, $admin) = start_server($lbl, $bindir, 'elect');
    my $al = conn('alice');
    my $bo = conn('bob');
    my $db = conn('dbo');

    elect_api($al, $bo, $db);
    bad_input($al, $db);
    terms($al, $bo, $db);
    candidates($al, $bo);
    events($al, $bo);
    race($dir);

    $_->disconnect for ($al, $bo, $db, $admin);
    stop_server($bindir, $dir);
}

# lead: "candidate value count" of an election's leader.
sub lead {
    my ($dbh, $e) = @_;
    my $r = $dbh->selectrow_arrayref(
        "SELECT l.candidate, coalesce(l.value, '-'), k.count FROM dlock.leader(?) l JOIN dlock.locks k ON k.resource = ?",
        undef, $e, $e);
    die "$label: lead: " . $dbh->errstr if $dbh->err;
    return $r ? "@$r" : 'none';
}

# elect.sql, in the portable edition.
sub elect_api {
    my ($al, $bo, $db) = @_;
    is(lead($al, 'el'), 'none', "$label: nobody leads: no row");
    my $a = q1($al, "SELECT dlock.campaign('el', 'A', 'host-a:5432', '1h')");
    ok(defined $a, "$label: the first candidate is elected at once");
    is(lead($al, 'el'), 'A host-a:5432 1', "$label: leader() and locks.value");
    ok(q1($al, "SELECT term = ? AND owner = 'alice'::regrole FROM dlock.leader('el')", $a), "$label: the term is the fence, the owner the role");
    is(q1($al, "SELECT dlock.campaign('el', 'A')"), $a, "$label: the leader campaigning again gets its term");
    is(lead($al, 'el'), 'A host-a:5432 1', "$label: ... without re-entering");
    is(q1($al, "SELECT dlock.campaign('el', 'A', 'host-a:6000')"), $a, "$label: ... a new value given then");
    is(lead($al, 'el'), 'A host-a:6000 1', "$label: ... is proclaimed");
    is(q1($al, "SELECT dlock.campaign('el', 'B', 'host-b', wait => '0')"), undef, "$label: B queued (wait 0)");
    is(q1($al, "SELECT dlock.campaign('el', 'C', 'host-c', wait => '0')"), undef, "$label: C queued");
    is(queue($al, 'el'), 'B:1 C:2', "$label: candidates in campaign order");
    is(q1($al, "SELECT dlock.try_lock('el', 'D')"), undef, "$label: a newcomer does not jump the queue");
    ok(!q1($al, "SELECT dlock.proclaim('el', 'B', 'b-says')"), "$label: proclaim by a non-leader: false");
    ok(!q1($al, "SELECT dlock.proclaim('el', 'A', 'x', ?)", $a + 1), "$label: proclaim under another term: false");
    ok(q1($al, "SELECT dlock.proclaim('el', 'A', 'host-a:7000', ?)", $a), "$label: proclaim under its term");
    is(q1($al, "SELECT value FROM dlock.locks WHERE resource = 'el'"), 'host-a:7000', "$label: ... shown");
    ok(q1($al, "SELECT dlock.proclaim('el', 'A', NULL)"), "$label: proclaim NULL");
    is(q1($al, "SELECT value FROM dlock.locks WHERE resource = 'el'"), undef, "$label: ... clears it");
    q1($al, "SELECT dlock.proclaim('el', 'A', 'host-a:7000')");
    ok(!q1($al, "SELECT dlock.resign('el', 'B')"), "$label: resign by a non-leader: false");
    ok(!q1($al, "SELECT dlock.resign('el', 'A', ?)", $a + 1), "$label: resign under another term: false");
    is(lead($al, 'el'), 'A host-a:7000 1', "$label: ... still leads");
    ok(q1($al, "SELECT dlock.resign('el', 'A', ?)", $a), "$label: resign under its term");
    is(lead($al, 'el'), 'none', "$label: ... nobody leads");
    ok(!q1($al, "SELECT dlock.resign('el', 'A')"), "$label: resign again: false");
    is(q1($al, "SELECT dlock.campaign('el', 'C', 'host-c', wait => '0')"), undef, "$label: C is still second");
    my $b = q1($al, "SELECT dlock.campaign('el', 'B', 'host-b', wait => '0')");
    ok(defined $b && $b > $a, "$label: B elected, with a higher term");
    is(lead($al, 'el'), 'B host-b 1', "$label: B leads");
    ok(defined q1($al, "SELECT dlock.renew('el', 'B', '1h')"), "$label: renew works on elections");
    ok(q1($al, "SELECT dlock.check('el', ?)", $b) && !q1($al, "SELECT dlock.check('el', ?)", $a), "$label: check: the term is the fence");
    is(err($al, "SELECT dlock.assert_fence('el', ?)", $b), 'no error', "$label: assert_fence of the term");
    is(q1($al, "SELECT dlock.try_lock('el', 'B')"), $b, "$label: B re-enters by try_lock");
    ok(q1($al, "SELECT dlock.resign('el', 'B', ?)", $b), "$label: resign drops every level");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 'el' AND holder IS NOT NULL"), 0, "$label: ... none left");
    ok(defined q1($al, "SELECT dlock.campaign('el', 'C', 'host-c', wait => '0')"), "$label: C elected");
    q1($al, "SELECT dlock.unlock('el', 'C')");
    # Values on any holding.
    q1($al, "SELECT dlock.try_lock('pv', 'P')");
    is(q1($al, "SELECT value FROM dlock.locks WHERE resource = 'pv'"), undef, "$label: a plain lock has no value");
    ok(q1($al, "SELECT dlock.proclaim('pv', 'P', 'hello')"), "$label: proclaim works on a plain lock");
    is(q1($al, "SELECT candidate || '=' || value FROM dlock.leader('pv')"), 'P=hello', "$label: ... and leader() shows it");
    q1($al, "SELECT dlock.unlock('pv', 'P')");
    q1($al, "SELECT dlock.try_lock('pv', 'Q')");
    is(q1($al, "SELECT value FROM dlock.locks WHERE resource = 'pv'"), undef, "$label: a new holding starts without a value");
    q1($al, "SELECT dlock.unlock('pv', 'Q')");
    # An expired leader is no leader.
    q1($al, "SELECT dlock.campaign('ex', 'A', 'a', '100ms')");
    sleep 0.2;
    is(lead($al, 'ex'), 'none', "$label: an expired leader is no leader");
    ok(defined q1($al, "SELECT dlock.campaign('ex', 'B', 'b', wait => '0')"), "$label: the next campaign takes over");
    is(q1($al, "SELECT candidate || '=' || value FROM dlock.leader('ex')"), 'B=b', "$label: ... with its value");
    q1($al, "SELECT dlock.resign('ex', 'B')");
    # Rights.
    ok(defined q1($al, "SELECT dlock.campaign('rights', 'X', 'a-value', '1h')"), "$label: rights: alice's X leads");
    is(err($bo, "SELECT dlock.proclaim('rights', 'X', 'b-value')"), '42501: permission denied to proclaim a lock held by role "alice"',
       "$label: rights: bob cannot proclaim for it");
    is(err($bo, "SELECT dlock.resign('rights', 'X')"), '42501: permission denied to resign a lock held by role "alice"',
       "$label: rights: nor resign");
    is(q1($bo, "SELECT dlock.campaign('rights', 'X', 'b-value', wait => '0')"), undef, "$label: rights: bob's X is another candidate");
    is(q1($bo, "SELECT candidate || '=' || value || '=' || owner FROM dlock.leader('rights')"), 'X=a-value=alice', "$label: rights: unchanged");
    like(err($bo, "UPDATE dlock.holding_values SET value = 'forged'"), qr/^42501/, "$label: rights: holding_values closed");
    ok(q1($al, "SELECT dlock.resign('rights', 'X')"), "$label: rights: alice resigns");
    q1($bo, "SELECT dlock.withdraw('rights', 'X')");
    # campaign honours dlock.lock_delay; a clean resign frees at once.
    $al->do("SET dlock.lock_delay = '1h'");
    q1($al, "SELECT dlock.campaign('rv2', 'L', lease => '100ms')");
    $al->do("RESET dlock.lock_delay");
    sleep 0.3;
    is(q1($al, "SELECT dlock.campaign('rv2', 'M', wait => '0')"), undef, "$label: lock-delay holds the next candidate off");
    is(q1($al, "SELECT dlock.campaign('rv2', 'M', wait => '200ms')"), undef, "$label: ... also waiting");
    $al->do("SET dlock.lock_delay = '1h'");
    q1($al, "SELECT dlock.campaign('rv2c', 'L')");
    $al->do("RESET dlock.lock_delay");
    ok(q1($al, "SELECT dlock.resign('rv2c', 'L')"), "$label: resign under a lock-delay");
    ok(defined q1($al, "SELECT dlock.campaign('rv2c', 'M', wait => '0')"), "$label: ... frees at once");
    q1($al, "SELECT dlock.resign('rv2c', 'M')");
    # campaign never re-enters, however the candidate came to lead.
    my $t3 = q1($al, "SELECT dlock.try_lock('rv3', 'L')");
    is(q1($al, "SELECT dlock.campaign('rv3', 'L', 'v1')"), $t3, "$label: a try_lock holder's campaign: its term");
    is(q1($al, "SELECT dlock.campaign('rv3', 'L', 'v1', wait => '0')"), $t3, "$label: ... client-side too");
    is(q1($al, "SELECT dlock.campaign('rv3', 'L', 'v2', wait => '1s')"), $t3, "$label: ... waiting too");
    is(lead($al, 'rv3'), 'L v2 1', "$label: ... count 1, the last value");
    q1($al, "SELECT dlock.unlock('rv3', 'L')");
    is(lead($al, 'rv3'), 'none', "$label: ... one unlock ends it");
    $al->begin_work;
    my $t3x = q1($al, "SELECT dlock.try_lock('rv3x', 'L')");
    is(q1($al, "SELECT dlock.campaign('rv3x', 'L', wait => '0')"), $t3x, "$label: in one transaction: the same term");
    is(q1($al, "SELECT dlock.campaign('rv3x', 'L')"), $t3x, "$label: ... also waiting");
    $al->commit;
    is(q1($al, "SELECT count FROM dlock.locks WHERE resource = 'rv3x'"), 1, "$label: ... count 1");
    q1($al, "SELECT dlock.unlock('rv3x', 'L')");
}

sub bad_input {
    my ($al, $db) = @_;
    q1($al, "SELECT dlock.campaign('bad', 'L', 'v', '1h')");
    my $state = "SELECT md5(concat((SELECT string_agg(l::text, '|' ORDER BY resource) FROM dlock.leases l),
                       (SELECT string_agg(v::text, '|' ORDER BY resource) FROM dlock.holding_values v),
                       (SELECT string_agg(t::text, '|' ORDER BY resource, ticket) FROM dlock.tickets t),
                       (SELECT string_agg(t::text, '|' ORDER BY resource, term) FROM dlock.term_log t)))";
    my $before = q1($db, $state);
    my @cases = (
        ["SELECT dlock.campaign(NULL, 'B')", '22023: election must not be null'],
        ["SELECT dlock.campaign('', 'B')", '22023: election must not be empty'],
        ["SELECT dlock.campaign(repeat('x', 1001), 'B')", '22023: election must be at most 1000 bytes long'],
        ["SELECT dlock.campaign('bad', NULL)", '22023: candidate must not be null'],
        ["SELECT dlock.campaign('bad', '')", '22023: candidate must not be empty'],
        ["SELECT dlock.campaign('bad', repeat('x', 256))", '22023: candidate must be at most 255 bytes long'],
        ["SELECT dlock.campaign('bad', 'B', repeat('v', 4001))", '22023: value must be at most 4000 bytes long'],
        ["SELECT dlock.campaign('bad', 'B', 'v', '-1s')", '22023: lease must be positive'],
        ["SELECT dlock.campaign('bad', 'B', 'v', '1s', '-1s')", '22023: wait must not be negative'],
        ["SELECT dlock.proclaim(NULL, 'L', 'v')", '22023: election must not be null'],
        ["SELECT dlock.proclaim('bad', NULL, 'v')", '22023: candidate must not be null'],
        ["SELECT dlock.proclaim('bad', 'L', repeat('v', 4001))", '22023: value must be at most 4000 bytes long'],
        ["SELECT dlock.resign(NULL, 'L')", '22023: election must not be null'],
        ["SELECT dlock.resign('bad', '')", '22023: candidate must not be empty'],
        ["SELECT * FROM dlock.leader(NULL)", '22023: election must not be null'],
        ["SELECT * FROM dlock.leader('')", '22023: election must not be empty'],
        ["SELECT * FROM dlock.leader(repeat('x', 1001))", '22023: election must be at most 1000 bytes long'],
    );
    is(err($al, $_->[0]), $_->[1], "$label: $_->[0]") for @cases;
    is(q1($db, $state), $before, "$label: bad input changed nothing");
    ok(q1($al, "SELECT dlock.proclaim('bad', 'L', repeat('v', 4000))"), "$label: a value at the limit");
    is(q1($al, "SELECT length(value) FROM dlock.locks WHERE resource = 'bad'"), 4000, "$label: ... is kept");
    q1($al, "SELECT dlock.resign('bad', 'L')");
    $al->begin_work;
    $al->do("SET TRANSACTION READ ONLY");
    is(err($al, "SELECT dlock.campaign('ro', 'A')"), '25006: cannot execute dlock.campaign() in a read-only transaction',
       "$label: read-only: 25006");
    $al->rollback if !$al->{AutoCommit};
}

sub terms {
    my ($al, $bo, $db) = @_;
    $db->do("INSERT INTO dlock.term_log VALUES ('old-e', 1, 'Old', NULL, 'dbo', clock_timestamp() - interval '1 hour')")
        or die $db->errstr;
    my $t1 = q1($al, "SELECT dlock.campaign('tl', 'T1', 't1', '1h')");
    q1($al, "SELECT dlock.resign('tl', 'T1')");
    my $t2 = q1($al, "SELECT dlock.campaign('tl', 'T2', wait => '0')");
    is(join(' ', map { "@$_" } @{ $bo->selectall_arrayref(
        "SELECT candidate, coalesce(value, '-'), term = ?, term = ? FROM dlock.terms WHERE election = 'tl' ORDER BY term", undef, $t1, $t2) }),
       "T1 t1 1 0 T2 - 0 1", "$label: terms: every term, readable by others");
    is(q1($db, "SELECT count(*) FROM dlock.term_log WHERE resource = 'old-e'"), 0, "$label: terms: a new term sweeps old ones");
    q1($al, "SELECT dlock.resign('tl', 'T2')");
    my $p = q1($al, "SELECT dlock.try_lock('tl2', 'P', '1h')");
    is(q1($al, "SELECT dlock.campaign('tl2', 'P')"), $p, "$label: terms: a holder that campaigns");
    ok(q1($al, "SELECT candidate = 'P' AND term = ? FROM dlock.terms WHERE election = 'tl2'", $p), "$label: ... is logged with its fence");
    is(q1($al, "SELECT dlock.campaign('tl2', 'P', 'pv')"), $p, "$label: ... again");
    is(q1($al, "SELECT count(*) FROM dlock.terms WHERE election = 'tl2'"), 1, "$label: ... logged once");
    q1($al, "SELECT dlock.unlock('tl2', 'P')");
    like(err($bo, "SELECT count(*) FROM dlock.term_log"), qr/^42501/, "$label: terms: term_log closed to users");
}

# Waiting candidates: elected in campaign order; resign elects the next at
# once; a leader's term fences its writes.
sub candidates {
    my ($al, $bo) = @_;
    my $lt = q1($al, "SELECT dlock.campaign('c/e', 'leader', 'l', '1h')");
    my @w;
    for my $i (1 .. 3) {
        push @w, async('bob', "SELECT dlock.campaign('c/e', ?, ?, '1h', '30s')", "c$i", "v$i");
        ok(queued($al, $w[-1]), "$label: c$i queues");
    }
    ok(!$w[0][0]->pg_ready, "$label: candidates wait");
    ok(q1($al, "SELECT dlock.resign('c/e', 'leader')"), "$label: the leader resigns");
    my @order;
    for my $n (1 .. 3) {
        my $got;
        for (1 .. 1000) { ($got) = grep { $_->[0]->pg_ready } @w; last if $got; sleep 0.01; }
        last unless $got;
        my $t = result($got);
        my $c = q1($al, "SELECT candidate FROM dlock.leader('c/e') WHERE term = ?", $t // 0);
        push @order, $c // 'none';
        is(q1($al, "SELECT value FROM dlock.leader('c/e')"), "v" . substr($c // 'c0', 1), "$label: elected with its value ($n)");
        sleep 0.2;
        is(scalar(grep { $_->[0]->pg_ready } grep { $_ != $got } @w), 0, "$label: one leader at a time ($n)");
        @w = grep { $_ != $got } @w;
        ok($t > $lt, "$label: terms increase ($n)");
        $lt = $t;
        ok($got->[0]->selectrow_array("SELECT dlock.resign('c/e', ?, ?)", undef, $c, $t), "$label: it resigns ($n)");
        $got->[0]->disconnect;
    }
    is("@order", "c1 c2 c3", "$label: candidates elected in campaign order");
    # A waiting campaign times out with NULL and leaves the queue.
    q1($al, "SELECT dlock.campaign('c/t', 'leader', NULL, '1h')");
    is(q1($bo, "SELECT dlock.campaign('c/t', 'w', NULL, '1h', '200ms')"), undef, "$label: a waiting campaign times out: NULL");
    q1($al, "SELECT dlock.resign('c/t', 'leader')");
    ok(defined q1($al, "SELECT dlock.try_lock('c/t', 'n')"), "$label: ... and left the queue");
}

sub events {
    my ($al, $bo) = @_;
    my $ch = q1($bo, "SELECT dlock.channel('ev/e')");
    $bo->do(qq{LISTEN "$ch"});
    my $t = q1($al, "SELECT dlock.campaign('ev/e', 'A', 'va', '200ms')");
    q1($al, "SELECT dlock.proclaim('ev/e', 'A', 'vb')");
    sleep 0.4;
    q1($al, "SELECT dlock.reap()");
    my $t2 = q1($al, "SELECT dlock.campaign('ev/e', 'B', 'x\"y', '1h')");
    q1($al, "SELECT dlock.resign('ev/e', 'B')");
    q1($al, "SELECT dlock.campaign('ev/e', 'C', repeat(chr(34), 4000), '1h')");
    q1($al, "SELECT dlock.unlock('ev/e', 'C')");
    q1($bo, "SELECT 1");
    my @got;
    while (my $n = $bo->pg_notifies) { push @got, $n->[2]; }
    is_deeply(\@got, [
        qq({"event":"elected","resource":"ev/e","fence":$t,"candidate":"A","term":$t,"value":"va"}),
        qq({"event":"proclaimed","resource":"ev/e","fence":$t,"candidate":"A","term":$t,"value":"vb"}),
        qq({"event":"expired","resource":"ev/e","fence":$t,"candidate":"A","term":$t,"value":"vb"}),
        qq({"event":"elected","resource":"ev/e","fence":$t2,"candidate":"B","term":$t2,"value":"x\\"y"}),
        qq({"event":"resigned","resource":"ev/e","fence":$t2,"candidate":"B","term":$t2,"value":"x\\"y"}),
        $got[5] // 'missing', $got[6] // 'missing'], "$label: events: elected, proclaimed, expired, resigned with candidate, term and value");
    like($got[5] // '', qr/^\{"event":"elected","resource":"ev\/e","fence":\d+,"candidate":"C","term":\d+,"value_omitted":true\}$/,
         "$label: events: a value too long for NOTIFY once escaped is left out");
    like($got[6] // '', qr/^\{"event":"released","resource":"ev\/e","fence":\d+\}$/, "$label: events: unlock of a leader: released");
    $bo->do("UNLISTEN *");
}

# A race: six candidates campaign, lead briefly with fenced writes, resign
# (or let the lease run out); never two leaders' writes interleaved, every
# candidate elected its rounds.
sub race {
    my ($dir) = @_;
    my $db = conn('dbo');
    $db->do($_) or die $db->errstr for (
        "CREATE TABLE work (last_term bigint NOT NULL, inside integer NOT NULL)",
        "INSERT INTO work VALUES (0, 0)", "GRANT SELECT, UPDATE ON work TO alice, bob");
    my @kids;
    my $rounds = 10;
    for my $w (0 .. 5) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $h = conn($w % 2 ? 'bob' : 'alice');
            $h->do("SET statement_timeout = '60s'");
            open my $log, '>', "$dir/elect$w" or die $!;
            my $done = 0;
            while ($done < $rounds) {
                my ($t) = $h->selectrow_array("SELECT dlock.campaign('race', ?, ?, '2s', '30s')", undef, "c$w", "v$w");
                if ($h->err) { print $log "error campaign: ", $h->state, " ", $h->errstr, "\n"; last; }
                next unless defined $t;
                $h->begin_work;
                if ($h->do("SELECT dlock.assert_fence('race', ?)", undef, $t)) {
                    my $n = $h->do("UPDATE work SET last_term = ?, inside = inside + 1 WHERE last_term < ? AND inside = 0", undef, $t, $t);
                    print $log ($n && $n == 1 ? "wrote $t\n" : "STALE $t\n");
                    $h->commit;
                    sleep 0.005;
                    $h->do("UPDATE work SET inside = inside - 1") if $n && $n == 1;
                } else {
                    print $log "error assert: ", $h->state, "\n";
                    $h->rollback;
                }
                $h->selectrow_array("SELECT dlock.resign('race', ?, ?)", undef, "c$w", $t);
                print $log "error resign: ", $h->state, "\n" if $h->err;
                $done++;
            }
            print $log "done $done\n";
            close $log;
            exit 0;
        }
        push @kids, $pid;
    }
    waitpid $_, 0 for @kids;
    my ($writes, $stale, @errors, %done) = (0, 0);
    for my $w (0 .. 5) {
        open my $log, '<', "$dir/elect$w" or die $!;
        while (<$log>) {
            $writes++ if /^wrote /;
            $stale++ if /^STALE /;
            push @errors, "w$w: $_" if /^error /;
            $done{$w} = $1 if /^done (\d+)/;
        }
    }
    is($stale, 0, "$label: race: one leader at a time, terms increase ($writes fenced writes)");
    is(scalar @errors, 0, "$label: race: no errors") or diag(join '', @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
    is(join(',', map { $done{$_} // 0 } 0 .. 5), join(',', ($rounds) x 6), "$label: race: every candidate elected $rounds times");
    is(q1($db, "SELECT count(*) FROM dlock.terms WHERE election = 'race'"), 6 * $rounds, "$label: race: every term in dlock.terms");
    $db->disconnect;
}
