#!/usr/bin/perl
# 030_fair.t: the portable edition's [fair] (fair queues, withdraw,
# dlock.queue, dlock.queue_ttl, lock-delay), on every server 010_core.t
# uses, installed and used by non-superuser roles.  The same calls, results
# and SQLSTATEs as the C extension's test/sql/fair.sql and fair_delay_campaign.sql,
# and between sessions: fair waiters in lock() served in the order they
# queued, ahead of any newcomer (also in the moment between a release and
# the head's next poll); a wait that ends (timeout, cancel, disconnect)
# leaves the queue at once; client-side tickets and waiting sessions in
# one queue; and a race of fair waiters and non-fair pollers with fenced
# writes (never stale, every waiter served).
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P7 P17
use strict;
use warnings;
use DBI;
use DBD::Pg qw(:async);
use Time::HiRes qw(time sleep);
use Test::More;
use File::Temp ();

use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

# The version portable/dlock.sql installs: default_version of dlock.control.
my ($version) = do { local (@ARGV, $/) = "$top/dlock.control"; <> } =~ /^default_version = '([^']+)'/m;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    run_server(@$s);
}
done_testing();

sub run_server {
    my ($lbl, $bindir) = @_;
    my ($dir, $admin) = start_server($lbl, $bindir, 'fair');
    my $al = conn('alice');
    my $bo = conn('bob');
    my $db = conn('dbo');
    my $su = conn('admin');

    upgrade($admin, $dir);
    upgrade_03($admin, $dir);
    upgrade_04($admin, $dir);
    queue_api($al, $bo, $db, $su);
    delay_api($al, $bo, $db);
    bad_input($al, $db);
    withdraw_api($al, $bo, $su);
    review($al);
    waiting_sessions($al, $bo);
    race($dir);

    $_->disconnect for ($al, $bo, $db, $su, $admin);
    stop_server($bindir, $dir);
}

# Running the script over a [core]-only portable install (the first
# release's, test/portable/old/dlock-core.sql) upgrades it in place: every
# holding and fence kept, calls of the old signatures still resolve, the
# new arguments work.
sub upgrade {
    my ($admin, $dir) = @_;
    $admin->do("CREATE DATABASE old OWNER dbo") or die $admin->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d old -f $top/test/portable/old/dlock-core.sql 2>&1`;
    is($?, 0, "$label: upgrade: the [core] release installed") or diag($out);
    my $o = conn('alice', 'old');
    my $f1 = q1($o, "SELECT dlock.try_lock('up/a', 'h', '1h')");
    q1($o, "SELECT dlock.try_lock('up/a', 'h', '1h')");
    my $before = q1($o, "SELECT string_agg(concat_ws(' ', resource, holder, count, fence, expires_at), ',' ORDER BY resource) FROM dlock.locks");
    $o->disconnect;
    $out = `$client/psql -X -q -h $dir -U dbo -d old -f $script 2>&1`;
    is($?, 0, "$label: upgrade: this script over it") or diag($out);
    $o = conn('alice', 'old');
    is(q1($o, "SELECT string_agg(concat_ws(' ', resource, holder, count, fence, expires_at), ',' ORDER BY resource) FROM dlock.locks"),
       $before, "$label: upgrade: every holding kept");
    is(q1($o, "SELECT count(*) FROM pg_proc WHERE proname IN ('try_lock', 'lock') AND pronamespace = 'dlock'::regnamespace"), 2,
       "$label: upgrade: one try_lock and one lock (the old signatures replaced)");
    is(q1($o, "SELECT dlock.try_lock('up/a', 'h', '1h')"), $f1, "$label: upgrade: a call of the old signature re-enters the old holding");
    is(q1($o, "SELECT dlock.try_lock('up/a', 'q', fair => true)"), undef, "$label: upgrade: fair => true queues");
    is(q1($o, "SELECT holder FROM dlock.queue WHERE resource = 'up/a'"), 'q', "$label: upgrade: ... in dlock.queue");
    is(q1($o, "SELECT dlock.unlock('up/a', 'h', ?) ", $f1), 2, "$label: upgrade: the old holding unlocks");
    my $f2 = q1($o, "SELECT dlock.try_lock('up/b', 'h', '1h', lock_delay => '1s')");
    ok($f2 > $f1, "$label: upgrade: fences keep increasing");
    $o->disconnect;
}

# Running the script over the 0.3 release ([core], [fair], [elect];
# test/portable/old/dlock-0.3.sql) upgrades it in place to 0.5 ([kinds]):
# holdings (with their lock-delay and value), client tickets and fences
# kept, calls of the old signatures still resolve, the kinds work on the
# upgraded schema, and a second run changes nothing.
sub upgrade_03 {
    my ($admin, $dir) = @_;
    $admin->do("CREATE DATABASE old03 OWNER dbo") or die $admin->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d old03 -f $top/test/portable/old/dlock-0.3.sql 2>&1`;
    is($?, 0, "$label: upgrade 0.3: the 0.3 release installed") or diag($out);
    my $o = conn('alice', 'old03');
    is(q1($o, "SELECT dlock.version()"), '0.3', "$label: upgrade 0.3: version 0.3 before");
    my $f1 = q1($o, "SELECT dlock.try_lock('u3/a', 'h', '1h', lock_delay => '1s')");
    q1($o, "SELECT dlock.try_lock('u3/a', 'h', '1h')");
    is(q1($o, "SELECT dlock.try_lock('u3/a', 'q', fair => true)"), undef, "$label: upgrade 0.3: a client ticket queued");
    my $term = q1($o, "SELECT dlock.campaign('u3/e', 'c1', 'v1', '1h')");
    my $view = "SELECT string_agg(concat_ws(' ', resource, holder, count, fence, expires_at, available_at, value), ','
                                  ORDER BY resource) FROM dlock.locks";
    my $queue = "SELECT string_agg(concat_ws(' ', resource, holder, position, expires_at), ',') FROM dlock.queue";
    # A waiter in 0.3's lock() while the script runs.
    q1($o, "SELECT dlock.try_lock('u3/w', 'hw', '1h')");
    my $w = conn('alice', 'old03');
    my $sth = $w->prepare("SELECT dlock.lock('u3/w', 'waiter', '1h', '60s')", { pg_async => PG_ASYNC });
    $sth->execute;
    my $ws = 0;
    for (1 .. 500) {
        last if $ws = q1($o, "SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND wait_event = 'PgSleep'", $w->{pg_pid});
        sleep 0.01;
    }
    ok($ws, "$label: upgrade 0.3: a waiter in 0.3's lock()");
    my ($before, $qbefore) = (q1($o, $view), q1($o, $queue));
    $o->disconnect;
    $out = `$client/psql -X -q -h $dir -U dbo -d old03 -f $script 2>&1`;
    is($?, 0, "$label: upgrade 0.3: this script over it") or diag($out);
    $o = conn('alice', 'old03');
    is(q1($o, "SELECT dlock.version()"), $version, "$label: upgrade 0.3: version $version after");
    is(q1($o, $view), $before, "$label: upgrade 0.3: every holding kept, with its lock-delay and value");
    is(q1($o, $queue), $qbefore, "$label: upgrade 0.3: the client ticket kept");
    is(q1($o, "SELECT string_agg(DISTINCT mode, ',') FROM dlock.locks"), 'exclusive', "$label: upgrade 0.3: old holdings are exclusive");
    is(q1($o, "SELECT dlock.unlock('u3/w', 'hw')"), 0, "$label: upgrade 0.3: the waiter's resource released");
    ok(wait_ready($w, 20) && defined($w->pg_result) && !$w->err, "$label: upgrade 0.3: the waiter, through the upgrade, is served")
        or diag($w->errstr);
    $sth->finish;
    $w->disconnect;
    q1($o, "SELECT dlock.unlock('u3/w', 'waiter')");
    is(q1($o, "SELECT count(*) FROM pg_proc WHERE proname IN ('try_lock', 'lock') AND pronamespace = 'dlock'::regnamespace"), 2,
       "$label: upgrade 0.3: one try_lock and one lock (the old signatures replaced)");
    is(q1($o, "SELECT dlock.try_lock('u3/a', 'h', '1h', false, '1s')"), $f1,
       "$label: upgrade 0.3: a call of the old signature re-enters the old holding");
    is(q1($o, "SELECT dlock.try_lock('u3/a', 'r', '1h', shared => true)"), undef,
       "$label: upgrade 0.3: the old exclusive holding keeps a reader out");
    is(q1($o, "SELECT (dlock.leader('u3/e')).term"), $term, "$label: upgrade 0.3: the leader kept");
    my $s1 = q1($o, "SELECT dlock.try_lock('u3/s', 'r1', '1h', shared => true)");
    my $s2 = q1($o, "SELECT dlock.try_lock('u3/s', 'r2', '1h', shared => true)");
    ok($s1 > $f1 && $s2 > $s1, "$label: upgrade 0.3: shared holdings on the upgraded schema, fences increasing");
    ok(defined q1($o, "SELECT dlock.try_acquire('u3/m', 'p', 2)"), "$label: upgrade 0.3: a semaphore too");
    $before = q1($o, $view);
    $out = `$client/psql -X -q -h $dir -U dbo -d old03 -f $script 2>&1`;
    is($?, 0, "$label: upgrade 0.3: the script again over 0.5") or diag($out);
    is(q1($o, $view), $before, "$label: upgrade 0.3: ... keeps every holding of every kind");
    is(q1($o, "SELECT dlock.unlock('u3/a', 'h', ?)", $f1), 2, "$label: upgrade 0.3: the old holding unlocks");
    $o->disconnect;
}

# Running the script over the 0.4 release (test/portable/old/0.4: the fast
# path in functions of its own, _fast_lock and _fast_unlock) upgrades it in
# place to 0.5 (the fast path inside try_lock and unlock): those two
# functions dropped, a holding taken by 0.4's fast path kept and released
# by 0.5's, a shared holding kept, fences increasing, while a session of
# 0.4 that made pairs before the upgrade goes on making them through it.
# Before it, a run of a copy of portable/ whose last part fails must stop
# and leave 0.4 whole (one transaction across the parts, ON_ERROR_STOP);
# the script is run by a relative path from another directory, then again.
sub upgrade_04 {
    my ($admin, $dir) = @_;
    $admin->do("CREATE DATABASE old04 OWNER dbo") or die $admin->errstr;
    my $out = `$client/psql -X -q -h $dir -U dbo -d old04 -f $top/test/portable/old/0.4/dlock.sql 2>&1`;
    is($?, 0, "$label: upgrade 0.4: the 0.4 release installed") or diag($out);
    my $o = conn('alice', 'old04');
    is(q1($o, "SELECT dlock.version()"), '0.4', "$label: upgrade 0.4: version 0.4 before");
    my $fast = "SELECT count(*) FROM pg_proc WHERE proname IN ('_fast_lock', '_fast_unlock') AND pronamespace = 'dlock'::regnamespace";
    is(q1($o, $fast), 2, "$label: upgrade 0.4: 0.4 has _fast_lock and _fast_unlock");
    # A free row, then a holding taken by 0.4's fast path.
    q1($o, "SELECT dlock.try_lock('u4/a', 'setup', '1h')");
    q1($o, "SELECT dlock.unlock('u4/a', 'setup')");
    my $f1 = q1($o, "SELECT dlock.try_lock('u4/a', 'h', '1h')");
    my $s1 = q1($o, "SELECT dlock.try_lock('u4/s', 'r1', '1h', shared => true)");
    my $view = "SELECT string_agg(concat_ws(' ', resource, holder, mode, count, fence, expires_at), ',' ORDER BY resource)
                  FROM dlock.locks";
    my $before = q1($o, $view);
    # Another session of 0.4 making pairs on a row of its own.
    my $p = conn('bob', 'old04');
    q1($p, "SELECT dlock.try_lock('u4/p', 'setup', '1h')");
    q1($p, "SELECT dlock.unlock('u4/p', 'setup')");
    my $last = q1($p, "SELECT dlock.try_lock('u4/p', 'hp', '1h')");
    q1($p, "SELECT dlock.unlock('u4/p', 'hp')");
    # A copy of portable/ whose last part fails: the whole run stops
    # (ON_ERROR_STOP) and its one transaction leaves 0.4 as it was.
    my $bad = File::Temp::tempdir("dlock-bad-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    system('cp', glob("$top/portable/*.sql"), $bad) == 0 or die "cp: $?";
    open(my $fh, '>>', "$bad/kinds.sql") or die "$bad/kinds.sql: $!";
    print $fh "CREATE FUNCTION dlock.zz_half() RETURNS int LANGUAGE sql AS 'SELECT 1';\nSELECT 1 / 0;\n";
    close $fh;
    $out = `$client/psql -X -q -h $dir -U dbo -d old04 -f $bad/dlock.sql 2>&1`;
    isnt($?, 0, "$label: upgrade 0.4: a run whose last part fails stops with an error");
    like($out, qr/kinds\.sql:\d+: ERROR:  division by zero/, "$label: ... naming the part") or diag($out);
    is(q1($o, "SELECT dlock.version() || ' ' || ($fast) || ' ' || (SELECT count(*) FROM pg_proc WHERE proname = 'zz_half')"),
       '0.4 2 0', "$label: ... and leaves 0.4 as it was (nothing of the run is left)");
    # The script run by a relative path from another directory, twice.
    $out = `cd $top/test && $client/psql -X -q -h $dir -U dbo -d old04 -f ../portable/dlock.sql 2>&1`;
    is($?, 0, "$label: upgrade 0.4: this script over it (a relative path, from another directory)") or diag($out);
    $out = `cd / && $client/psql -X -q -h $dir -U dbo -d old04 -f $script 2>&1`;
    is($?, 0, "$label: upgrade 0.4: ... and again (an absolute path, from /)") or diag($out);
    is(q1($o, "SELECT dlock.version()"), $version, "$label: upgrade 0.4: version $version after");
    is(q1($o, $fast), 0, "$label: upgrade 0.4: _fast_lock and _fast_unlock dropped");
    is(q1($o, $view), $before, "$label: upgrade 0.4: every holding kept");
    my $ok = 1;
    for (1 .. 5) {
        my $f = q1($p, "SELECT dlock.try_lock('u4/p', 'hp', '1h')");
        $ok = 0 unless $f && $f > $last && q1($p, "SELECT dlock.unlock('u4/p', 'hp')") == 0;
        $last = $f // $last;
    }
    ok($ok, "$label: upgrade 0.4: the session connected before the upgrade makes pairs after it, fences increasing");
    is(q1($o, "SELECT dlock.try_lock('u4/a', 'x', '1h')"), undef, "$label: upgrade 0.4: the holding of 0.4's fast path keeps another holder out");
    is(q1($o, "SELECT dlock.unlock('u4/a', 'h', ?)", $f1), 0, "$label: upgrade 0.4: ... and is released by 0.5's");
    my $f2 = q1($o, "SELECT dlock.try_lock('u4/a', 'x', '1h')");
    ok($f2 && $f2 > $last && $f2 > $s1, "$label: upgrade 0.4: taken again by 0.5's fast path, a greater fence");
    is(q1($o, "SELECT dlock.unlock('u4/s', 'r1', ?)", $s1), 0, "$label: upgrade 0.4: the shared holding released");
    # 1.0: acquire and lock_all take wait right after lease (0.4 and 0.5
    # had it last): the old order is replaced, not left as an overload.
    is(q1($o, "SELECT string_agg(pg_get_function_identity_arguments(oid), ' | ' ORDER BY proname)
                 FROM pg_proc WHERE proname IN ('acquire', 'lock_all') AND pronamespace = 'dlock'::regnamespace"),
       'semaphore text, holder text, max_permits integer, permits integer, lease interval, wait interval, fair boolean, session bigint'
       . ' | resources text[], holder text, lease interval, wait interval, shared boolean, session bigint',
       "$label: upgrade 0.4: acquire and lock_all in the 1.0 order, once each");
    is(q1($o, "SELECT array_length(dlock.lock_all(ARRAY['u4/m1', 'u4/m2'], 'hm', '5s', '5s'), 1)"), 2,
       "$label: upgrade 0.4: lock_all(resources, holder, lease, wait) positionally");
    ok(q1($o, "SELECT dlock.acquire('u4/sem', 'hm', 2, 1, '1h', '5s')"),
       "$label: upgrade 0.4: acquire(..., lease, wait) positionally");
    is(q1($o, "SELECT dlock.unlock_all('hm')"), 3, "$label: upgrade 0.4: released");
    $_->disconnect for ($o, $p);
}

# fair.sql's first sections: a queue forms, re-entry never queues, the
# head is served, a dead ticket lapses, tickets are the role's.
sub queue_api {
    my ($al, $bo, $db, $su) = @_;
    ok(defined q1($al, "SELECT dlock.try_lock('fq', 'A')"), "$label: A holds");
    is(q1($al, "SELECT dlock.try_lock('fq', 'B', fair => true)"), undef, "$label: B fair: NULL, queued");
    is(q1($al, "SELECT dlock.try_lock('fq', 'C', fair => true)"), undef, "$label: C fair: queued");
    is(q1($al, "SELECT dlock.try_lock('fq', 'D')"), undef, "$label: D (not fair): NULL");
    is(queue($al, 'fq'), 'B:1 C:2', "$label: dlock.queue: B then C; a non-fair attempt takes no ticket");
    ok(defined q1($al, "SELECT dlock.try_lock('fq', 'A', fair => true)"), "$label: re-entry by the holder never queues");
    is(q1($al, "SELECT count FROM dlock.locks WHERE resource = 'fq'"), 2, "$label: ... and counts");
    q1($al, "SELECT dlock.unlock('fq', 'A')");
    is(q1($al, "SELECT dlock.unlock('fq', 'A')"), 0, "$label: released");
    is(q1($al, "SELECT dlock.try_lock('fq', 'D')"), undef, "$label: free but queued: a newcomer is refused");
    is(q1($al, "SELECT dlock.try_lock('fq', 'E', fair => true)"), undef, "$label: ... a fair newcomer queues");
    $al->begin_work;
    is(q1($al, "SELECT dlock.try_xact_lock('fq')"), undef, "$label: ... try_xact_lock is refused");
    $al->rollback;
    is(q1($al, "SELECT dlock.try_lock('fq', 'C', fair => true)"), undef, "$label: ... the second ticket is refused");
    ok(defined q1($al, "SELECT dlock.try_lock('fq', 'B', fair => true)"), "$label: the head is served");
    is(queue($al, 'fq'), 'C:1 E:2', "$label: ... and leaves the queue");
    q1($al, "SELECT dlock.unlock('fq', 'B')");
    ok(defined q1($al, "SELECT dlock.try_lock('fq', 'C', fair => true)"), "$label: the next is served");
    q1($al, "SELECT dlock.unlock('fq', 'C')");
    ok(defined q1($al, "SELECT dlock.try_lock('fq', 'E', fair => true)"), "$label: the last is served");
    q1($al, "SELECT dlock.unlock('fq', 'E')");
    is(queue($al, 'fq'), '', "$label: the queue is empty");
    ok(defined q1($al, "SELECT dlock.try_lock('fq', 'D')"), "$label: an empty queue lets a non-fair attempt through");
    q1($al, "SELECT dlock.unlock('fq', 'D')");

    # queue_ttl: a ticket nobody keeps alive lapses; its holder requeues at the back.
    $al->do("SET dlock.queue_ttl = '1s'");
    q1($al, "SELECT dlock.try_lock('ft', 'A')");
    is(q1($al, "SELECT dlock.try_lock('ft', 'B', fair => true)"), undef, "$label: ttl: B queued");
    ok(q1($al, "SELECT expires_at - queued_at = interval '1s' FROM dlock.queue WHERE resource = 'ft'"),
       "$label: ... kept for dlock.queue_ttl");
    sleep 1.2;
    is(q1($al, "SELECT dlock.try_lock('ft', 'C', fair => true)"), undef, "$label: ttl: C queued");
    is(queue($al, 'ft'), 'C:1', "$label: B's lapsed ticket is gone from dlock.queue");
    is(q1($al, "SELECT dlock.try_lock('ft', 'B', fair => true)"), undef, "$label: B comes back");
    is(queue($al, 'ft'), 'C:1 B:2', "$label: ... at the back");
    q1($al, "SELECT dlock.unlock('ft', 'A')");
    is(q1($al, "SELECT dlock.try_lock('ft', 'B', fair => true)"), undef, "$label: B is not the head");
    ok(defined q1($al, "SELECT dlock.try_lock('ft', 'C', fair => true)"), "$label: C is");
    q1($al, "SELECT dlock.unlock('ft', 'C')");
    sleep 1.2;
    ok(defined q1($al, "SELECT dlock.try_lock('ft', 'Z')"), "$label: a dead queue blocks nobody");
    q1($al, "SELECT dlock.unlock('ft', 'Z')");
    $al->do("RESET dlock.queue_ttl");
    q1($al, "SELECT dlock.try_lock('ft', 'A')");
    $al->do("SET dlock.queue_ttl = '0'");
    like(err($al, "SELECT dlock.try_lock('ft', 'Y', fair => true)"), qr/^22023: invalid value for parameter "dlock.queue_ttl"/,
         "$label: a bad dlock.queue_ttl: 22023 when used");
    $al->do("RESET dlock.queue_ttl");
    q1($al, "SELECT dlock.unlock('ft', 'A')");

    # A ticket is the holder's and its role's.
    q1($al, "SELECT dlock.try_lock('fr', 'A')");
    is(q1($al, "SELECT dlock.try_lock('fr', 'B', fair => true)"), undef, "$label: roles: alice's B queued");
    is(q1($bo, "SELECT dlock.try_lock('fr', 'B', fair => true)"), undef, "$label: roles: bob's B queued too");
    is(q1($bo, "SELECT string_agg(holder || ':' || position || ':' || owner, ' ' ORDER BY position) FROM dlock.queue WHERE resource = 'fr'"),
       'B:1:alice B:2:bob', "$label: ... two tickets, with their owners");
    like(err($bo, "SELECT count(*) FROM dlock.tickets"), qr/^42501/, "$label: dlock.tickets is closed to users");
    like(err($bo, "DELETE FROM dlock.tickets"), qr/^42501/, "$label: ... also for writing");
    like(err($bo, "SELECT nextval('dlock.ticket_seq')"), qr/^42501/, "$label: ... and so is dlock.ticket_seq");
    q1($al, "SELECT dlock.unlock('fr', 'A')");
    is(q1($bo, "SELECT dlock.try_lock('fr', 'B', fair => true)"), undef, "$label: bob's B: not its turn");
    ok(defined q1($al, "SELECT dlock.try_lock('fr', 'B', fair => true)"), "$label: alice's B is served");
    q1($al, "SELECT dlock.unlock('fr', 'B')");
    ok(defined q1($bo, "SELECT dlock.try_lock('fr', 'B', fair => true)"), "$label: then bob's");
    q1($bo, "SELECT dlock.unlock('fr', 'B')");
}

sub delay_api {
    my ($al, $bo, $db) = @_;
    ok(defined q1($al, "SELECT dlock.try_lock('fd', 'A', '200ms', lock_delay => '30s')"), "$label: delay: taken with a 30s lock-delay");
    sleep 0.5;
    ok(q1($al, "SELECT expired AND available_at = expires_at + interval '30s' FROM dlock.locks WHERE resource = 'fd'"),
       "$label: delay: locks shows available_at = expiry + 30s");
    is(q1($bo, "SELECT dlock.try_lock('fd', 'B')"), undef, "$label: delay: an expired holding's resource is refused");
    $bo->begin_work;
    is(q1($bo, "SELECT dlock.try_xact_lock('fd')"), undef, "$label: delay: ... to try_xact_lock too");
    $bo->rollback;
    is(q1($al, "SELECT dlock.renew('fd', 'A')"), undef, "$label: delay: the lost holder cannot renew");
    ok(q1($al, "SELECT dlock.reap() >= 1"), "$label: delay: reaped");
    ok(q1($al, "SELECT holder IS NULL AND available_at > clock_timestamp() FROM dlock.locks WHERE resource = 'fd'"),
       "$label: delay: reaped, still listed, with no holder, until available_at");
    is(q1($bo, "SELECT dlock.try_lock('fd', 'B')"), undef, "$label: delay: still refused");
    is(q1($bo, "SELECT dlock.lock('fd', 'B', wait => '300ms')"), undef, "$label: delay: lock() waits it out (times out here)");
    # A short delay runs out.
    ok(defined q1($al, "SELECT dlock.try_lock('fe', 'A', '100ms', lock_delay => '300ms')"), "$label: delay: 300ms");
    my $avail = q1($al, "SELECT available_at FROM dlock.locks WHERE resource = 'fe'");
    my $fb = q1($bo, "SELECT dlock.lock('fe', 'B', wait => '5s')");
    ok(defined $fb, "$label: delay: lock() gets it after the delay");
    ok(q1($bo, "SELECT acquired_at >= ?::timestamptz FROM dlock.locks WHERE resource = 'fe'", $avail),
       "$label: delay: ... not before expiry + delay");
    q1($bo, "SELECT dlock.unlock('fe', 'B')");
    # Clean unlock frees at once.
    q1($al, "SELECT dlock.try_lock('fc', 'A', lock_delay => '1h')");
    q1($al, "SELECT dlock.unlock('fc', 'A')");
    ok(defined q1($bo, "SELECT dlock.try_lock('fc', 'B')"), "$label: delay: a clean unlock frees at once");
    q1($bo, "SELECT dlock.unlock('fc', 'B')");
    # break_lock: not before the broken lease's end plus the delay.
    q1($al, "SELECT dlock.try_lock('fb', 'A', '1h', lock_delay => '1s')");
    ok(q1($db, "SELECT dlock.break_lock('fb')"), "$label: delay: broken (by the schema's owner)");
    is(q1($bo, "SELECT dlock.try_lock('fb', 'B')"), undef, "$label: delay: a broken holding's resource is refused");
    ok(q1($al, "SELECT holder IS NULL AND available_at >= clock_timestamp() + interval '59 min' FROM dlock.locks WHERE resource = 'fb'"),
       "$label: delay: ... until the lease's end plus the delay");
    # The default comes from dlock.lock_delay.
    $al->do("SET dlock.lock_delay = '30s'");
    q1($al, "SELECT dlock.try_lock('fg', 'A', '100ms')");
    $al->do("RESET dlock.lock_delay");
    sleep 0.2;
    is(q1($bo, "SELECT dlock.try_lock('fg', 'B')"), undef, "$label: delay: dlock.lock_delay is the default");
    $al->do("SET dlock.lock_delay = '2h'");
    like(err($al, "SELECT dlock.try_lock('fg2', 'A')"), qr/^22023: invalid value for parameter "dlock.lock_delay"/,
         "$label: delay: a bad dlock.lock_delay: 22023 when used");
    $al->do("RESET dlock.lock_delay");
    # Re-entry keeps the first delay.
    q1($al, "SELECT dlock.try_lock('fh', 'A', '100ms', lock_delay => '300ms')");
    q1($al, "SELECT dlock.try_lock('fh', 'A', '100ms', lock_delay => '0')");
    is(q1($db, "SELECT lock_delay FROM dlock.delays WHERE resource = 'fh'"), '00:00:00.3', "$label: delay: re-entry keeps the first delay");
    like(err($al, "SELECT * FROM dlock.delays"), qr/^42501/, "$label: delay: dlock.delays is closed to users");
    # The purge keeps a row whose delay is pending.
    q1($al, "SELECT dlock.try_lock('rv5', 'A', '2h', lock_delay => '1h')");
    q1($db, "SELECT dlock.break_lock('rv5')");
    $db->do("UPDATE dlock.leases SET released_at = released_at - interval '90 min' WHERE resource = 'rv5'");
    q1($al, "SELECT dlock.reap()");
    is(q1($db, "SELECT count(*) FROM dlock.leases WHERE resource = 'rv5'"), 1, "$label: delay: the purge keeps a pending delay's row");
    is(q1($bo, "SELECT dlock.try_lock('rv5', 'B')"), undef, "$label: delay: ... which still holds newcomers off");
    q1($al, "SELECT dlock.try_lock('rv5b', 'A', '1h', lock_delay => '1s')");
    q1($db, "SELECT dlock.break_lock('rv5b')");
    $db->do("UPDATE dlock.leases SET released_at = released_at - interval '3h' WHERE resource = 'rv5b'");
    $db->do("UPDATE dlock.delays SET available_at = available_at - interval '3h' WHERE resource = 'rv5b'");
    q1($al, "SELECT dlock.reap()");
    is(q1($db, "SELECT count(*) FROM dlock.leases WHERE resource = 'rv5b'"), 0, "$label: delay: a row whose delay is over is purged");
    ok(defined q1($bo, "SELECT dlock.try_lock('rv5b', 'B')"), "$label: delay: ... and the resource is free");
}

sub bad_input {
    my ($al, $db) = @_;
    q1($al, "SELECT dlock.try_lock('fx', 'A', '1h')");
    q1($al, "SELECT dlock.try_lock('fx', 'Q', fair => true)");
    my $state = "SELECT md5(concat((SELECT string_agg(l::text, '|' ORDER BY resource) FROM dlock.leases l),
                       (SELECT string_agg(t::text, '|' ORDER BY resource, ticket) FROM dlock.tickets t),
                       (SELECT string_agg(d::text, '|' ORDER BY resource) FROM dlock.delays d),
                       (SELECT last_value FROM dlock.fences), (SELECT last_value FROM dlock.ticket_seq)))";
    my $before = q1($db, $state);
    my @cases = (
        ["SELECT dlock.try_lock('fx', 'B', fair => NULL)", '22023: fair must not be null'],
        ["SELECT dlock.lock('fx', 'B', wait => '0', fair => NULL)", '22023: fair must not be null'],
        ["SELECT dlock.lock('fx', 'B', wait => '1s', fair => NULL)", '22023: fair must not be null'],
        ["SELECT dlock.try_lock('fx', 'B', lock_delay => '-1s')", '22023: lock_delay must be between 0 and 1 hour'],
        ["SELECT dlock.try_lock('fx', 'B', lock_delay => '1h 0.000001s')", '22023: lock_delay must be between 0 and 1 hour'],
        ["SELECT dlock.try_lock('fx', 'B', lock_delay => '1 day')", '22023: lock_delay must be between 0 and 1 hour'],
        ["SELECT dlock.try_lock('fx', 'B', lock_delay => '1 mon')", '22023: lock_delay must be between 0 and 1 hour'],
        ["SELECT dlock.try_lock('fx', 'B', lock_delay => '-1 day 25 hours')", '22023: lock_delay must be between 0 and 1 hour'],
        ["SELECT dlock.try_lock('fx', 'B', fair => true, lock_delay => '2h')", '22023: lock_delay must be between 0 and 1 hour'],
        ["SELECT dlock.withdraw(NULL, 'Q')", '22023: resource must not be null'],
        ["SELECT dlock.withdraw('', 'Q')", '22023: resource must not be empty'],
        ["SELECT dlock.withdraw(repeat('x', 1001), 'Q')", '22023: resource must be at most 1000 bytes long'],
        ["SELECT dlock.withdraw('fx', NULL)", '22023: holder must not be null'],
        ["SELECT dlock.withdraw('fx', '')", '22023: holder must not be empty'],
        ["SELECT dlock.withdraw('fx', repeat('x', 256))", '22023: holder must be at most 255 bytes long'],
    );
    for my $c (@cases) {
        is(err($al, $c->[0]), $c->[1], "$label: $c->[0]");
    }
    is(q1($db, $state), $before, "$label: bad input changed nothing");
    q1($al, "SELECT dlock.unlock('fx', 'A')");
    is(q1($al, "SELECT dlock.try_lock('fx', 'B', lock_delay => '1h')"), undef, "$label: B behind Q's ticket");
    q1($al, "SELECT dlock.withdraw('fx', 'Q')");
    ok(defined q1($al, "SELECT dlock.try_lock('fx', 'B', lock_delay => '1h')"), "$label: a lock_delay of 1 hour is allowed");
    q1($al, "SELECT dlock.unlock('fx', 'B')");
}

sub withdraw_api {
    my ($al, $bo, $su) = @_;
    q1($al, "SELECT dlock.try_lock('fw', 'A')");
    q1($al, "SELECT dlock.try_lock('fw', 'B', fair => true)");
    q1($al, "SELECT dlock.try_lock('fw', 'C', fair => true)");
    ok(q1($al, "SELECT dlock.withdraw('fw', 'B')"), "$label: withdraw: true for a ticket");
    is(queue($al, 'fw'), 'C:1', "$label: withdraw: the next ticket heads the queue");
    ok(!q1($al, "SELECT dlock.withdraw('fw', 'B')"), "$label: withdraw: false the second time");
    ok(!q1($al, "SELECT dlock.withdraw('fw', 'A')"), "$label: withdraw: false for the holder");
    ok(!q1($al, "SELECT dlock.withdraw('fw-none', 'B')"), "$label: withdraw: false with no queue");
    q1($al, "SELECT dlock.unlock('fw', 'A')");
    ok(defined q1($al, "SELECT dlock.try_lock('fw', 'C', fair => true)"), "$label: withdraw: C is served next");
    q1($al, "SELECT dlock.unlock('fw', 'C')");
    q1($al, "SELECT dlock.try_lock('fw', 'A')");
    is(q1($al, "SELECT dlock.try_lock('fw', fair => true)"), undef, "$label: withdraw: the session holder queues");
    ok(q1($al, "SELECT dlock.withdraw('fw')"), "$label: withdraw: the session holder is the default");
    is(queue($al, 'fw'), '', "$label: withdraw: nothing left");
    is(q1($al, "SELECT dlock.try_lock('fw', 'X', fair => true)"), undef, "$label: withdraw: alice's X queued");
    is(err($bo, "SELECT dlock.withdraw('fw', 'X')"), '42501: permission denied to withdraw a ticket taken by role "alice"',
       "$label: withdraw: another role's ticket: 42501");
    is(queue($al, 'fw'), 'X:1', "$label: withdraw: ... and it stays");
    is(q1($bo, "SELECT dlock.try_lock('fw', 'Y', fair => true)"), undef, "$label: withdraw: bob's Y queued");
    ok(q1($su, "SELECT dlock.withdraw('fw', 'Y')"), "$label: withdraw: a superuser withdraws another role's ticket");
    ok(q1($al, "SELECT dlock.withdraw('fw', 'X')"), "$label: withdraw: the owner withdraws its own");
    q1($al, "SELECT dlock.unlock('fw', 'A')");
    $al->begin_work;
    $al->do("SET TRANSACTION READ ONLY");
    like(err($al, "SELECT dlock.withdraw('fw', 'B')"), qr/^25006: cannot execute dlock.withdraw\(\) in a read-only transaction/,
         "$label: withdraw: read-only: 25006");
    $al->rollback if !$al->{AutoCommit};
}

# fair_delay_campaign.sql: a client that queued and then acquires by another path
# leaves the queue.
sub review {
    my ($al) = @_;
    for my $how (["try_lock", "dlock.try_lock('R', 'B')"], ["lock", "dlock.lock('R', 'B', wait => '10s')"],
                 ["fair lock", "dlock.lock('R', 'B', wait => '10s', fair => true)"]) {
        my $r = "rv1/$how->[0]";
        (my $call = $how->[1]) =~ s/'R'/'$r'/;
        q1($al, "SELECT dlock.try_lock(?, 'A')", $r);
        q1($al, "SELECT dlock.try_lock(?, 'B', fair => true)", $r);
        q1($al, "SELECT dlock.unlock(?, 'A')", $r);
        ok(defined q1($al, "SELECT $call"), "$label: queued B served by $how->[0]");
        is(queue($al, $r), '', "$label: ... and out of the queue");
        q1($al, "SELECT dlock.unlock(?, 'B')", $r);
        ok(defined q1($al, "SELECT dlock.try_lock(?, 'C')", $r), "$label: ... a newcomer is served after it");
        q1($al, "SELECT dlock.unlock(?, 'C')", $r);
    }
}

# Between sessions: waiters in lock(..., fair => true).
sub waiting_sessions {
    my ($al, $bo) = @_;
    my $lk = "SELECT dlock.lock('w/fifo', ?, '1h', '30s', fair => true)";
    q1($al, "SELECT dlock.try_lock('w/fifo', 'holder', '1h')");
    my @w;
    for my $i (1 .. 3) {
        push @w, async('bob', $lk, "w$i");
        ok(queued($al, $w[-1]), "$label: fifo: w$i queues");
    }
    ok(!$w[0][0]->pg_ready, "$label: fifo: three fair waiters wait");
    is(queue($al, 'w/fifo'), '', "$label: fifo: waiting sessions are not listed in dlock.queue (pid NULL)");
    q1($al, "SELECT dlock.unlock('w/fifo', 'holder')");
    # At once, before the head's next poll: its ticket holds newcomers off.
    is(q1($bo, "SELECT dlock.try_lock('w/fifo', 'newcomer')"), undef, "$label: fifo: a newcomer right after the release: NULL");
    is(q1($bo, "SELECT dlock.try_lock('w/fifo', 'newcomer', fair => true)"), undef, "$label: fifo: a fair newcomer queues");
    my @order;
    for my $n (1 .. 3) {
        my $got;
        for (1 .. 1000) { ($got) = grep { $_->[0]->pg_ready } @w; last if $got; sleep 0.01; }
        last unless $got;
        my $f = result($got);
        my $h = q1($al, "SELECT holder FROM dlock.locks WHERE resource = 'w/fifo' AND fence = ?", $f // 0);
        push @order, $h // 'none';
        sleep 0.3;
        is(scalar(grep { $_->[0]->pg_ready } grep { $_ != $got } @w), 0, "$label: fifo: one waiter served at a time ($n)");
        @w = grep { $_ != $got } @w;
        $got->[0]->disconnect;
        q1($bo, "SELECT dlock.unlock('w/fifo', ?)", $h) if $h;
    }
    is("@order", "w1 w2 w3", "$label: fifo: served in the order they queued");
    is(q1($bo, "SELECT dlock.try_lock('w/fifo', 'newcomer2')"), undef, "$label: fifo: then the fair newcomer's ticket heads");
    ok(defined q1($bo, "SELECT dlock.try_lock('w/fifo', 'newcomer', fair => true)"), "$label: fifo: ... and it is served");
    q1($bo, "SELECT dlock.unlock('w/fifo', 'newcomer')");

    # A wait that ends leaves the queue at once: timeout, cancel, disconnect.
    q1($al, "SELECT dlock.try_lock('w/end', 'holder', '1h')");
    is(q1($bo, "SELECT dlock.lock('w/end', 'w', '1h', '300ms', fair => true)"), undef, "$label: end: a fair wait times out");
    is(q1($bo, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"), 0,
       "$label: end: ... and holds no advisory lock");
    my $c = async('bob', "SELECT dlock.lock('w/end', 'c', '1h', '30s', fair => true)");
    ok(queued($al, $c), "$label: end: a fair wait queues");
    $c->[0]->pg_cancel;
    is($c->[0]->state, '57014', "$label: end: a fair wait cancelled");
    is(q1($c->[0], "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"), 0,
       "$label: end: ... holds no advisory lock");
    # A waiter whose client is gone leaves when the server notices, which
    # needs client_connection_check_interval (PostgreSQL 14+; README).
    my $d = conn('bob');
    $d->do("SET client_connection_check_interval = '100ms'");
    $d = [$d, $d->prepare("SELECT dlock.lock('w/end', 'd', '1h', '30s', fair => true)", { pg_async => PG_ASYNC })];
    $d->[1]->execute;
    ok(queued($al, $d), "$label: end: a fair wait on a connection about to go queues");
    my $dpid = $d->[0]->{pg_pid};
    $d->[0]->disconnect;
    for (1 .. 500) { last unless q1($al, "SELECT count(*) FROM pg_stat_activity WHERE pid = ?", $dpid); sleep 0.01; }
    q1($al, "SELECT dlock.unlock('w/end', 'holder')");
    ok(defined q1($al, "SELECT dlock.try_lock('w/end', 'newcomer')"), "$label: end: after timeout, cancel and disconnect a newcomer is served at once");
    q1($al, "SELECT dlock.unlock('w/end', 'newcomer')");

    # Client tickets and waiting sessions share one queue, in ticket order.
    q1($al, "SELECT dlock.try_lock('w/mix', 'holder', '1h')");
    is(q1($al, "SELECT dlock.try_lock('w/mix', 'client', fair => true)"), undef, "$label: mix: a client ticket first");
    my $s = async('bob', "SELECT dlock.lock('w/mix', 'session', '1h', '30s', fair => true)");
    ok(queued($al, $s), "$label: mix: a session queues behind it");
    q1($al, "SELECT dlock.unlock('w/mix', 'holder')");
    sleep 0.5;
    ok(!$s->[0]->pg_ready, "$label: mix: the waiting session is behind the client ticket");
    ok(defined q1($al, "SELECT dlock.try_lock('w/mix', 'client', fair => true)"), "$label: mix: the client is served");
    q1($al, "SELECT dlock.unlock('w/mix', 'client')");
    my $fs = result($s);
    ok(defined $fs, "$label: mix: then the waiting session");
    $s->[0]->disconnect;
    # A waiting session ahead of a client ticket: the client is refused until it is served.
    $bo->do("SELECT dlock.unlock('w/mix', 'session')");
    q1($al, "SELECT dlock.try_lock('w/mix2', 'holder', '1h')");
    my $s2 = async('bob', "SELECT dlock.lock('w/mix2', 'session', '1h', '30s', fair => true)");
    ok(queued($al, $s2), "$label: mix: a session queues");
    is(q1($al, "SELECT dlock.try_lock('w/mix2', 'client', fair => true)"), undef, "$label: mix: a client ticket after a waiting session");
    q1($al, "SELECT dlock.unlock('w/mix2', 'holder')");
    is(q1($al, "SELECT dlock.try_lock('w/mix2', 'client', fair => true)"), undef, "$label: mix: ... is not served before it");
    ok(defined result($s2), "$label: mix: the session is");
    $s2->[0]->disconnect;

    # A client that queued and then waits in lock() keeps its place
    # (it adopts its ticket) even beyond dlock.queue_ttl.
    # (The wait adopts the ticket only while it is live: 2 s of queue_ttl
    # for the wait's connection to get there on a loaded machine, where
    # 200 ms was once too short; it holds the ticket's advisory lock then.)
    $al->do("SET dlock.queue_ttl = '2s'");
    q1($al, "SELECT dlock.try_lock('w/adopt', 'holder', '1h')");
    my $t_first = time;
    is(q1($al, "SELECT dlock.try_lock('w/adopt', 'first', fair => true)"), undef, "$label: adopt: first queues client-side");
    my $second = conn('alice');
    is(q1($second, "SELECT dlock.try_lock('w/adopt', 'second', fair => true)"), undef, "$label: adopt: second too");
    my $fst = async('alice', "SELECT dlock.lock('w/adopt', 'first', '1h', '30s')");
    my $fpid = $fst->[0]{pg_pid};
    for (1 .. 200) {
        last if q1($al, "SELECT count(*) FROM pg_locks WHERE pid = ? AND locktype = 'advisory'
                          AND mode = 'ExclusiveLock' AND objsubid = 2 AND objid <> 0", $fpid);
        sleep 0.05;
    }
    sleep(2.3 - (time - $t_first)) if time - $t_first < 2.3;     # first's row lapses, its adopted ticket does not
    is(q1($second, "SELECT dlock.try_lock('w/adopt', 'second', fair => true)"), undef, "$label: adopt: second keeps its ticket");
    q1($al, "SELECT dlock.unlock('w/adopt', 'holder')");
    is(q1($second, "SELECT dlock.try_lock('w/adopt', 'second', fair => true)"), undef, "$label: adopt: second is not served first");
    ok(defined result($fst), "$label: adopt: the waiting first one is");
    $fst->[0]->disconnect;
    $al->do("RESET dlock.queue_ttl");
    $second->disconnect;
}

# A race: fair waiters in lock(), client-side fair pollers and non-fair
# pollers on one resource, with fenced writes.  Never two holders, every
# fair waiter and poller served its rounds, no errors.
sub race {
    my ($dir) = @_;
    my $db = conn('dbo');
    $db->do($_) or die $db->errstr for (
        "CREATE TABLE work (resource text PRIMARY KEY, last_fence bigint NOT NULL, inside integer NOT NULL)",
        "INSERT INTO work VALUES ('race', 0, 0)",
        "GRANT SELECT, UPDATE ON work TO alice, bob");
    my @kids;
    my $rounds = 15;
    for my $w (0 .. 5) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $h = conn($w % 2 ? 'bob' : 'alice');
            $h->do("SET statement_timeout = '60s'");
            open my $log, '>', "$dir/fair$w" or die $!;
            my $kind = $w < 3 ? 'lock' : $w < 5 ? 'client' : 'plain';
            my $holder = "w$w";
            my $done = 0;
            my $deadline = time + 60;
            while ($done < $rounds && time < $deadline) {
                my $f;
                if ($kind eq 'lock') {
                    ($f) = $h->selectrow_array("SELECT dlock.lock('race', ?, '5s', '30s', fair => true)", undef, $holder);
                } else {
                    ($f) = $h->selectrow_array("SELECT dlock.try_lock('race', ?, '5s', fair => ?)", undef,
                                               $holder, $kind eq 'client' ? 1 : 0);
                }
                if ($h->err) { print $log "error acquire: ", $h->state, " ", $h->errstr, "\n"; last; }
                unless (defined $f) { sleep 0.005; next; }
                $h->begin_work;
                if ($h->do("SELECT dlock.assert_fence('race', ?)", undef, $f)) {
                    my $n = $h->do("UPDATE work SET last_fence = ?, inside = inside + 1 WHERE resource = 'race' AND last_fence < ? AND inside = 0",
                                   undef, $f, $f);
                    print $log ($n && $n == 1 ? "wrote $f\n" : "STALE $f\n");
                    $h->commit;
                    sleep 0.005;
                    $h->do("UPDATE work SET inside = inside - 1 WHERE resource = 'race'") if $n && $n == 1;
                } else {
                    print $log "error assert: ", $h->state, "\n";
                    $h->rollback;
                }
                $h->selectrow_array("SELECT dlock.unlock('race', ?, ?)", undef, $holder, $f);
                print $log "error unlock: ", $h->state, "\n" if $h->err;
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
        open my $log, '<', "$dir/fair$w" or die $!;
        while (<$log>) {
            $writes++ if /^wrote /;
            $stale++ if /^STALE /;
            push @errors, "w$w: $_" if /^error /;
            $done{$w} = $1 if /^done (\d+)/;
        }
    }
    is($stale, 0, "$label: race: never two holders, fences increase ($writes fenced writes)");
    is(scalar @errors, 0, "$label: race: no errors") or diag(join '', @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
    is(join(',', map { $done{$_} // 0 } 0 .. 4), join(',', ($rounds) x 5),
       "$label: race: every fair waiter and client-side fair poller was served $rounds times");
    is(q1($db, "SELECT count(*) FROM dlock.tickets t WHERE t.resource = 'race' AND t.expires_at > clock_timestamp()"), 0,
       "$label: race: no live ticket is left")
        or diag(join "\n", map { "@$_" } @{ $db->selectall_arrayref("SELECT * FROM dlock.tickets") });
    $db->disconnect;
}
