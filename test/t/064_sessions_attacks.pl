# 064_sessions_attacks.pl: attacks on the C extension's sessions (1.1),
# class by class from ATTACKS.md, with the portable edition's attacks
# (test/portable/t/103_sessions_attacks.t) tried on the C half: close
# against waits, ttl passing during a wait, campaign re-entry, ids after
# re-creation and restore, timeouts cutting close, old snapshots,
# savepoints, read-only and standby, lock-delay, pins, lock_all, renew vs
# break_lock, 1.0 SQL, GUCs, SET ROLE, 20,000 holdings, fair queues,
# prepared transactions, the session's own lock (refused calls,
# savepoints, other roles), and a seeded race at the instant of expiry
# (DLOCK_ATTACK_SEED=N replays it).
# Promises: P1 P2 P4 P5 P6 P7 P8 P11 P12 P17

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('sessatt');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
max_prepared_transactions = 5
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $q = sub { $node->safe_psql('postgres', shift) };
my $seed = $ENV{DLOCK_ATTACK_SEED} // int(rand(2**31));
diag("seed $seed (DLOCK_ATTACK_SEED=$seed replays it)");
srand($seed);

# async SQL: run in its own psql, errors as "ERROR:  SQLSTATE".  With
# a file (a script with psql commands too), as async_script does, -f it.
sub async
{
	my ($sql, $file) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'),
			'-c', '\set VERBOSITY sqlstate', defined $file ? ('-f', $file) : ('-c', $sql)
		],
		'>', \$out, '2>', \$err);
	return [ $h, \$out, \$err ];
}

# async_script: a psql script, run as async runs SQL (from a file: the
# standard input of IPC::Run::start is fed only when pumped).
my $scripts = 0;
sub async_script
{
	my $file = PostgreSQL::Test::Utils::tempdir() . '/script' . $scripts++ . '.sql';
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh shift;
	close($fh);
	return async(undef, $file);
}

# result: the output of an async call, or its SQLSTATE.
sub result
{
	my ($a) = @_;
	$a->[0]->finish;
	my $err = ${ $a->[2] };
	return $1 if $err =~ /ERROR:\s+(\w{5})/;
	my $out = ${ $a->[1] };
	chomp $out;
	return $out;
}

# err: the SQLSTATE of sql, or its output.
sub err { return result(async(shift)); }

# active: wait until n backends run a statement matching like.
sub active
{
	my ($like, $n) = @_;
	$like =~ s/'/''/g;
	return $node->poll_query_until('postgres',
		"SELECT count(*) >= $n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '$like'"
		  . " AND pid <> pg_backend_pid()");
}

# blocked: wait until a backend running a statement matching like waits
# for a lock.
sub blocked
{
	my ($like) = @_;
	$like =~ s/'/''/g;
	return $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '$like'"
		  . " AND pid <> pg_backend_pid()");
}

# opened TTL HOLDER SQL...: open a session and run each SQL (:s is its
# id) in the same psql: a short ttl does not pass between them, however
# slowly a loaded machine starts psql (a 1 s session opened by one psql
# had ended before the next one's try_lock).  The id and each output.
sub opened
{
	my ($ttl, $holder, @sql) = @_;
	return split /\n/, $q->("SELECT dlock.open_session('$ttl', '$holder') AS s \\gset\nSELECT :s;\n"
		  . join('', map { "$_;\n" } @sql));
}

# ended: wait until session s's ttl has passed (the reaper may have
# removed it already).
sub ended
{
	my ($s) = @_;
	return $node->poll_query_until('postgres',
		"SELECT coalesce(clock_timestamp() > (SELECT expires_at FROM dlock.sessions WHERE id = $s), true)");
}

# 1. close_session while lock(), acquire() and lock_all() wait in the
# session for resources another holds: the close does not wait for the
# waiters (it would until the resources free); each waiter's next attempt
# raises 55000 (portable 103's close_vs_wait).
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-cw')});
	ok($q->("SELECT dlock.try_lock('cw/mine', session => $s)"), 'a holding in the session');
	ok($q->(q{SELECT dlock.try_lock('cw/1', 'b', '1h')}), 'b holds cw/1');
	ok($q->(q{SELECT dlock.try_acquire('cw/2', 'b', 1, 1, '1h')}), "b holds cw/2's only permit");
	my @w = (
		async("SET statement_timeout = '30s'; SELECT dlock.lock('cw/1', session => $s)"),
		async("SET statement_timeout = '30s'; SELECT dlock.acquire('cw/2', NULL, 1, 1, session => $s)"),
		async("SET statement_timeout = '30s'; SELECT dlock.lock_all('{cw/free,cw/1}', session => $s)"));
	ok(active('%session => ' . $s . ')%', 3), 'three waits in the session');
	usleep(200_000);
	is(err("SET statement_timeout = '10s'; SELECT dlock.close_session($s)"), '1',
		'close_session does not wait for the waits: it releases the one holding');
	for my $w (@w)
	{
		is(result($w), '55000', 'the wait ends with 55000 (the session has ended)');
	}
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE resource = 'cw/free'}), '0', 'lock_all took nothing');
	is($q->(q{SELECT dlock.unlock_all('b')}), '2', "b's holdings untouched");
}

# 1b. close_session and the release that wakes a lock() waiting in the
# session commit together: the waiter is admitted before it looks at its
# session again, and must see the close there (55000), not take.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-cr')});
	ok($q->(q{SELECT dlock.try_lock('cr/1', 'b', '1h')}), 'b holds cr/1');
	my $w = async("SET statement_timeout = '30s'; SELECT dlock.lock('cr/1', session => $s, wait => '20s')");
	ok(active('%cr/1%', 1), 'lock() waits in the session');
	is($q->("BEGIN; SELECT dlock.close_session($s); SELECT dlock.unlock('cr/1', 'b'); COMMIT"), "0\n0",
		'the session closed and cr/1 released in one transaction');
	is(result($w), '55000', 'the waiter, woken by the release, gets 55000');
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE resource = 'cr/1' AND holder IS NOT NULL}), '0',
		'cr/1 is free');
}

# 2. A session whose ttl passes while lock() waits in it: when the
# resource frees, the waiter gets 55000, not a fence of a holding that has
# already ended.
# The waiter opens the session itself, right before its lock(): opened
# here, a 1 s session ended once before a loaded machine's psql started.
{
	ok($q->(q{SELECT dlock.try_lock('tw/1', 'b', '1h')}), 'b holds tw/1');
	my $w = async_script("SET statement_timeout = '30s';\nSELECT dlock.open_session('2s', 'w-tw') AS s \\gset\n"
		  . "SELECT dlock.lock('tw/1', session => :s, wait => '20s');\n");
	ok(active('%tw/1%', 1), 'lock() waits in the session');
	# Its id is not read by a psql of its own: by then (0.5-2 s to start
	# now and then on a loaded machine) the 2 s session may have ended and
	# been removed; ended() takes the subquery.
	ok(ended(q{(SELECT id FROM dlock.sessions WHERE holder = 'w-tw')}),
		"the session's ttl passes while it waits");
	is($q->(q{SELECT dlock.unlock('tw/1', 'b')}), '0', 'b releases tw/1');
	my $got = result($w);
	is($got, '55000', 'the waiter gets 55000, not a fence of an ended session');
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE resource = 'tw/1' AND holder = 'w-tw'}), '0',
		'no holding of the ended session');
	$q->(q{SELECT dlock.reap()});
}

# 3. campaign re-enters only the way the leader holds it (55000), as
# try_lock does (portable 103's reentry).
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-re')});
	my $s2 = $q->(q{SELECT dlock.open_session('1h', 'w-re')});
	ok($q->(q{SELECT dlock.campaign('a/el', 'w-re', lease => '1h')}), 'w-re leads a/el with a lease');
	is(err("SELECT dlock.campaign('a/el', session => $s)"), '55000',
		'the leader campaigning again in a session: 55000');
	my $t2 = $q->("SELECT dlock.campaign('a/el2', session => $s)");
	ok($t2, 'w-re leads a/el2 in a session');
	is(err(q{SELECT dlock.campaign('a/el2', 'w-re', lease => '1h')}), '55000',
		'the leader in a session campaigning with a lease: 55000');
	is(err("SELECT dlock.campaign('a/el2', session => $s2)"), '55000',
		'... in another session of the same holder: 55000');
	is($q->("SELECT dlock.campaign('a/el2', session => $s)"), $t2, '... in its own session: its term');
	is($q->("SELECT dlock.close_session($s2)"), '0', 'the other session holds nothing');
	is($q->("SELECT dlock.close_session($s)"), '1', 'the session releases its leadership');
	is($q->(q{SELECT dlock.unlock_all('w-re')}), '1', 'the leased leadership stays apart');
}

# 4. statement_timeout cuts close_session while it waits for a pin on its
# second holding; lock_timeout while a keepalive is in flight: nothing
# changed (portable 103's cut_close).
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-cut')});
	my %f = map { $_ => $q->("SELECT dlock.try_lock('$_', session => $s)") } qw(cut/a cut/b);
	ok($q->("SELECT dlock.try_acquire('cut/c', NULL, 3, 1, session => $s)"), 'three holdings');
	my $pin = $node->background_psql('postgres');
	$pin->query_safe("BEGIN; SELECT dlock.assert_fence('cut/b', $f{'cut/b'})");
	is(err("SET statement_timeout = '300ms'; SELECT dlock.close_session($s)"), '57014',
		'close_session cut by statement_timeout');
	$pin->query_safe('COMMIT');
	is($q->("SELECT holdings FROM dlock.sessions WHERE id = $s"), '3', '... all three holdings stay');
	is($q->("SELECT dlock.check('cut/a', $f{'cut/a'})"), 't', '... the first one too');
	$pin->query_safe("BEGIN; SELECT dlock.keepalive($s)");
	is(err("SET lock_timeout = '200ms'; SELECT dlock.close_session($s)"), '55P03',
		'close_session cut by lock_timeout (a keepalive in flight)');
	$pin->query_safe('COMMIT');
	$pin->quit;
	is($q->("SELECT dlock.close_session($s)"), '3', 'then it closes all three');
}

# 5. Keepalives in snapshots older than the end, and in savepoints
# (portable 103's snapshots).
{
	# The other session's psql starts first: its snapshot comes while the
	# 1 s session lives.
	my $a2 = $node->background_psql('postgres');
	my ($s, $f) = opened('1s', 'w-snap', "SELECT dlock.try_lock('sn/1', session => :s)");
	$a2->query_safe("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM dlock.sessions WHERE id = $s");
	ok(ended($s), 'its ttl passes');
	is($a2->query_safe("SELECT dlock.keepalive($s)"), '', 'keepalive in an old REPEATABLE READ snapshot: NULL');
	$a2->query_safe('COMMIT');
	cmp_ok($q->(q{SELECT dlock.try_lock('sn/1', 'b', '1h')}), '>', $f, '... taken by another');
	# A keepalive rolled back to a savepoint keeps no lock on the session.
	($s, $f) = opened('1s', 'w-snap', "SELECT dlock.try_lock('sn/2', session => :s)");
	$a2->query_safe("BEGIN; SAVEPOINT a; SELECT dlock.keepalive($s); ROLLBACK TO SAVEPOINT a");
	ok(ended($s), 'its old ttl passes (the keepalive was rolled back)');
	cmp_ok($q->(q{SELECT dlock.try_lock('sn/2', 'b', '1h')}), '>', $f, 'taken at once: nothing left locked');
	is($a2->query_safe("SELECT dlock.keepalive($s)"), '', 'keepalive in the same transaction: NULL');
	$a2->query_safe('COMMIT');
	$a2->quit;
	$q->(q{SELECT dlock.unlock_all('b')});
}

# 6. Read-only transactions: 25006 for every call that would write,
# nothing changed.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-ro')});
	ok($q->("SELECT dlock.try_lock('ro/1', session => $s)"), 'a holding');
	my $e0 = $q->("SELECT expires_at FROM dlock.sessions WHERE id = $s");
	for my $c ("dlock.open_session('1h', 'w-ro')", "dlock.keepalive($s)", "dlock.close_session($s)",
		"dlock.try_lock('ro/2', session => $s)", "dlock.try_acquire('ro/3', NULL, 2, session => $s)",
		"dlock.renew('ro/1', 'w-ro')", "dlock.unlock('ro/1', 'w-ro')")
	{
		is(err("BEGIN READ ONLY; SELECT $c"), '25006', "read only: $c: 25006");
	}
	is($q->("SELECT expires_at FROM dlock.sessions WHERE id = $s"), $e0, 'nothing changed');
	is($q->("SELECT dlock.close_session($s)"), '1', 'closed');
}

# 8. A lock-delay runs from the session's end (its last keepalive's
# expiry), before and after reap(); close_session is a clean release.
{
	my ($s, $f, $e) = opened('1s', 'w-ld', "SELECT dlock.try_lock('ld/1', session => :s, lock_delay => '1h')",
		"SELECT dlock.keepalive(:s)");
	ok($f, 'a holding with a lock-delay');
	ok(ended($s), "the session's ttl passes");
	is($q->(q{SELECT dlock.try_lock('ld/1', 'b', '1h')}), '', 'busy for the lock-delay');
	is($q->("SELECT available_at = '$e'::timestamptz + interval '1h' FROM dlock.locks WHERE resource = 'ld/1'"), 't',
		'... until the last expiry plus the delay');
	$q->(q{SELECT dlock.reap()});
	is($q->(q{SELECT dlock.try_lock('ld/1', 'b', '1h')}), '', '... after reap() too');
	is($q->("SELECT count(*) FROM dlock.sessions WHERE id = $s"), '0', 'reap() removed the session');
	my $s2 = $q->(q{SELECT dlock.open_session('1h', 'w-ld')});
	ok($q->("SELECT dlock.try_lock('ld/2', session => $s2, lock_delay => '1h')"), 'another with a lock-delay');
	is($q->("SELECT dlock.close_session($s2)"), '1', 'closed');
	ok($q->(q{SELECT dlock.try_lock('ld/2', 'b', '1h')}), 'a close is clean: no lock-delay');
	$q->(q{SELECT dlock.unlock_all('b')});
}

# 9. An assert_fence pin holds a session's holding past the session's end:
# no takeover until the pinning transaction ends.
{
	# The pinner's psql starts first, and the session has 3 s: the pin
	# comes before its end.
	my $pin = $node->background_psql('postgres');
	my ($s, $f) = opened('3s', 'w-pin', "SELECT dlock.try_lock('pin/1', session => :s)");
	$pin->query_safe("BEGIN; SELECT dlock.assert_fence('pin/1', $f)");
	ok(ended($s), "the session's ttl passes while pinned");
	is(err(q{SET statement_timeout = '10s'; SELECT dlock.try_lock('pin/1', 'b', '1h')}), '', 'no takeover while pinned (NULL at once)');
	$pin->query_safe('COMMIT');
	$pin->quit;
	cmp_ok($q->(q{SELECT dlock.try_lock('pin/1', 'b', '1h')}), '>', $f, 'taken over once the pin is gone');
	$q->(q{SELECT dlock.unlock_all('b')});
}

# 10. try_lock_all / lock_all half in a session: all or nothing (portable
# 103's reentry, lock_all part).
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-all')});
	my $s2 = $q->(q{SELECT dlock.open_session('1h', 'w-all')});
	ok($q->("SELECT dlock.try_lock('all/x', session => $s)"), 'all/x in session 1');
	ok($q->(q{SELECT dlock.try_lock('all/m3', 'w-all', '1h')}), 'all/m3 with a lease');
	is(err("SELECT dlock.lock_all('{all/m1,all/m2,all/m3}', session => $s, wait => '1s')"), '55000',
		'lock_all in a session over a leased holding: 55000');
	is(err("SELECT dlock.try_lock_all('{all/m1,all/m2,all/x}', session => $s2)"), '55000',
		"try_lock_all in session 2 over session 1's holding: 55000");
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE resource IN ('all/m1', 'all/m2')}), '0', '... nothing taken');
	is($q->("SELECT holdings FROM dlock.sessions WHERE id = $s2"), '0', '... session 2 holds nothing');
	is($q->("SELECT dlock.close_session($s)"), '1', 'session 1 closes its one');
	is($q->("SELECT dlock.close_session($s2)"), '0', 'session 2 none');
	is($q->(q{SELECT dlock.unlock_all('w-all')}), '1', 'the leased one stays, apart');
}

# 11. renew of a session's holding waits for a keepalive in flight; a
# break_lock meanwhile: renew never reports a broken holding as renewed.
for my $kind ('exclusive', 'shared', 'permits')
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-rr')});
	my $r = "rr/$kind";
	my $f = $kind eq 'permits'
	  ? $q->("SELECT dlock.try_acquire('$r', NULL, 2, 1, session => $s)")
	  : $q->("SELECT dlock.try_lock('$r', session => $s, shared => " . ($kind eq 'shared' ? 'true' : 'false') . ')');
	ok($f, "$kind: a holding in a session");
	my $ka = $node->background_psql('postgres');
	$ka->query_safe("BEGIN; SELECT dlock.keepalive($s)");
	my $w = async("SET statement_timeout = '30s'; SELECT dlock.renew('$r', 'w-rr') IS NOT NULL");
	ok(blocked("%renew('$r'%"), "$kind: renew waits for the keepalive in flight");
	my $b = async("SET statement_timeout = '30s'; SELECT dlock.break_lock('$r')");
	# break_lock either waits for the renew, or ends first: then the renew
	# must not report the broken holding renewed.
	my $break_first;
	for (1 .. 3000)
	{
		$b->[0]->pump_nb if $b->[0]->pumpable;
		if (!$b->[0]->pumpable) { $break_first = 't'; last; }
		if ($q->("SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
				. " AND query LIKE '%break_lock(''$r''%'") eq 't')
		{
			$break_first = 'f';
			last;
		}
		usleep(10_000);
	}
	ok(defined $break_first, "$kind: break_lock ended or waits");
	$break_first //= 'f';
	$ka->query_safe('COMMIT');
	$ka->quit;
	my $renewed = result($w);
	is(result($b), 't', "$kind: broken");
	my $current = $q->("SELECT dlock.check('$r', $f)");
	is($renewed, $break_first eq 't' ? 'f' : 't',
		"$kind: renew after a break_lock that ended first: NULL; else renewed (break first: $break_first)");
	is($current, 'f', "$kind: the broken holding is not current");
	is($q->("SELECT dlock.close_session($s)"), '0', "$kind: the session holds nothing");
}

# 12. close_session wakes the waiters of its holdings when it commits
# (not before: a close rolled back leaves them waiting).
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-wk')});
	my $f = $q->("SELECT dlock.try_lock('wk/1', session => $s)");
	ok($q->("SELECT dlock.try_acquire('wk/2', NULL, 1, 1, session => $s)"), 'the only permit of wk/2');
	my @w = (async(q{SET statement_timeout = '60s'; SELECT dlock.lock('wk/1', 'b', '1h', '30s') IS NOT NULL}),
		async(q{SET statement_timeout = '60s'; SELECT dlock.acquire('wk/2', 'b', 1, 1, '1h', '30s') IS NOT NULL}));
	ok(active('%wk/%', 2), 'two waiters of other holders');
	my $c = $node->background_psql('postgres');
	$c->query_safe("BEGIN; SELECT dlock.close_session($s); ROLLBACK");
	is($q->("SELECT dlock.check('wk/1', $f)"), 't', 'a close rolled back: still held');
	$c->query_safe("BEGIN; SELECT dlock.close_session($s)");
	usleep(100_000);
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE holder = 'b'}), '0', 'waiters wait while the close is in flight');
	$c->query_safe('COMMIT');
	$c->quit;
	is(result($_), 't', 'a waiter is served once the close commits') for @w;
	is($q->(q{SELECT dlock.unlock_all('b')}), '2', 'b holds both');
}

# 13. The 1.1 library under the 1.0 SQL: acquisitions, waits, reap() work;
# the session entry points (reachable only through C functions a superuser
# declares) raise errors, never crash.
{
	$node->safe_psql('postgres', 'CREATE DATABASE old10');
	my $o = sub { $node->safe_psql('old10', shift) };
	$o->(q{CREATE EXTENSION dlock VERSION '1.0'});
	ok($o->(q{SELECT dlock.try_lock('o/1', 'h', '1h')}), '1.0 SQL: try_lock');
	ok($o->(q{SELECT dlock.lock_all('{o/2,o/3}', 'h', '1h', '1s')}), '1.0 SQL: lock_all');
	ok($o->(q{SELECT dlock.campaign('o/e', 'h', lease => '1h')}), '1.0 SQL: campaign');
	ok($o->(q{SELECT dlock.acquire('o/p', 'h', 2, 1, '1h', '1s')}), '1.0 SQL: acquire');
	is($o->(q{SELECT dlock.lock('o/1', 'other', '1h', '200ms')}), '', '1.0 SQL: lock() times out');
	ok(defined $o->(q{SELECT dlock.reap()}), '1.0 SQL: reap()');
	my ($rc, $out, $err) = $node->psql('old10', q{
CREATE FUNCTION pg_temp.os(interval, text) RETURNS bigint AS 'dlock', 'dlock_open_session' LANGUAGE C;
CREATE FUNCTION pg_temp.ka(bigint) RETURNS timestamptz AS 'dlock', 'dlock_keepalive' LANGUAGE C;
CREATE FUNCTION pg_temp.cs(bigint) RETURNS integer AS 'dlock', 'dlock_close_session' LANGUAGE C;
CREATE FUNCTION pg_temp.tl(text, text, interval, boolean, interval, boolean, bigint) RETURNS bigint
    AS 'dlock', 'dlock_try_lock' LANGUAGE C;
SELECT pg_temp.ka(1) IS NULL AS ka;
SELECT pg_temp.cs(1) IS NULL AS cs;
});
	is($out, "t\nt", '1.0 SQL: keepalive and close_session of C: NULL');
	($rc, $out, $err) = $node->psql('old10', q{
CREATE FUNCTION pg_temp.os(interval, text) RETURNS bigint AS 'dlock', 'dlock_open_session' LANGUAGE C;
SELECT pg_temp.os('1h', 'x')});
	like($err, qr/ERROR/, "1.0 SQL: open_session of C: an error ($err)");
	($rc, $out, $err) = $node->psql('old10', q{
CREATE FUNCTION pg_temp.tl(text, text, interval, boolean, interval, boolean, bigint) RETURNS bigint
    AS 'dlock', 'dlock_try_lock' LANGUAGE C;
SELECT pg_temp.tl('o/9', NULL, NULL, false, NULL, false, 5)});
	like($err, qr/ERROR/, "1.0 SQL: try_lock in a session: an error ($err)");
	is($o->(q{SELECT 1}), '1', 'the server is up');
	$o->(q{ALTER EXTENSION dlock UPDATE});
	my $s = $o->(q{SELECT dlock.open_session('1h', 'h')});
	ok($o->("SELECT dlock.try_lock('o/9', session => $s)"), 'after the update: sessions work');
}

# 14. A standby: 25006 for every session call; the session is there.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-sb')});
	ok($q->("SELECT dlock.try_lock('sb/1', session => $s)"), 'a holding');
	$node->backup('sb');
	my $standby = PostgreSQL::Test::Cluster->new('sessatt_standby');
	$standby->init_from_backup($node, 'sb', has_streaming => 1);
	$standby->start;
	$node->wait_for_catchup($standby);
	for my $c ("dlock.open_session('1h', 'w-sb')", "dlock.keepalive($s)", "dlock.close_session($s)",
		"dlock.try_lock('sb/2', session => $s)", "dlock.renew('sb/1', 'w-sb')")
	{
		my ($rc, $out, $err) = $standby->psql('postgres', "\\set VERBOSITY sqlstate\nSELECT $c");
		like($err, qr/ERROR:\s+25006/, "standby: $c: 25006");
	}
	is($standby->safe_psql('postgres', "SELECT holdings FROM dlock.sessions WHERE id = $s"), '1',
		'standby: the session and its holding are there');
	$standby->stop;
	is($q->("SELECT dlock.close_session($s)"), '1', 'closed on the primary');
}

# 15. A keepalive and acquirers at the instant of expiry, seeded: never
# both win (no acquisition by another before the expiry the keepalive
# returned), portable 103's expiry_race.
{
	my ($both, $kept, $taken) = (0, 0, 0);
	for my $i (1 .. 10)
	{
		my $r = "race/$i";
		# One statement: under load, more than the ttl passed between two
		# (the session had ended: 55000 from try_lock).  Its expiry is
		# read off the clock right after open_session (within microseconds:
		# the statement's snapshot cannot see the session's row).
		my ($s, $exp, $got) = split /\|/, $q->(qq{WITH o AS MATERIALIZED
			(SELECT dlock.open_session('400ms', 'w-race') AS s, clock_timestamp() + interval '400ms' AS e)
			SELECT s, e, dlock.try_lock('$r', session => s) IS NOT NULL FROM o});
		is($got, 't', "round $i: the session holds $r");
		my $off = int(rand(121)) - 60;
		my @w = map { async("SELECT dlock.lock('$r', 'b$_', '1h', '2s')") } 1 .. 2;
		my $ka = async("SELECT dlock.keepalive($s) FROM (SELECT pg_sleep(greatest(0, extract(epoch FROM"
			  . " '$exp'::timestamptz + $off * interval '1 ms' - clock_timestamp())))) x");
		my $e = result($ka);
		my @got = map { result($_) } @w;
		my $won = grep { $_ ne '' } @got;
		ok($won <= 1, "round $i (offset $off ms): at most one acquirer wins");
		if ($e ne '')
		{
			$kept++;
			$both++ if $q->("SELECT count(*) FROM dlock.locks WHERE resource = '$r' AND holder <> 'w-race'"
				  . " AND acquired_at < '$e'::timestamptz") ne '0';
		}
		$taken++ if $won;
		$q->(q{SELECT dlock.unlock_all('b' || i) FROM generate_series(1, 2) i});
		$q->("SELECT dlock.close_session($s)");
	}
	is($both, 0, "never both a keepalive and an earlier takeover (kept $kept, taken $taken of 10)");
}

# 16. The caller's own session: isolation levels, TimeZone, IntervalStyle,
# a search_path with planted objects: every session call works the same.
for my $set ("SET default_transaction_isolation = 'serializable'",
	"SET default_transaction_isolation = 'repeatable read'",
	"SET TimeZone = 'Pacific/Chatham'; SET IntervalStyle = 'iso_8601'; SET DateStyle = 'SQL, DMY'",
	"CREATE SCHEMA IF NOT EXISTS plant; CREATE OR REPLACE FUNCTION plant.session_holder() RETURNS text"
	  . " LANGUAGE sql AS 'SELECT ''planted''::text'; SET search_path = plant, dlock, public")
{
	my $out = $q->("$set;
SELECT dlock.open_session('1h', 'w-guc') AS s \\gset
SELECT dlock.try_lock('guc/1', session => :s) > :s,
       dlock.try_acquire('guc/2', NULL, 2, 1, session => :s) > :s,
       dlock.keepalive(:s) > now(),
       dlock.renew('guc/1', 'w-guc') > now();
SELECT holdings FROM dlock.sessions WHERE id = :s;
SELECT dlock.close_session(:s), dlock.keepalive(:s) IS NULL;");
	is($out, "t|t|t|t\n2\n2|t", "$set: open, acquire, keepalive, renew, close");
}

# 17. A session's holding after the session's end (not reaped yet):
# check false, assert_fence 55P03, renew NULL, re-entry 55000, keepalive
# NULL, close_session NULL (the reaper ends them, lock-delay kept).
{
	my ($s, $f) = opened('1s', 'w-end', "SELECT dlock.try_lock('end/1', session => :s)");
	ok(ended($s), "the session's ttl passes");
	is($q->("SELECT dlock.check('end/1', $f)"), 'f', 'check: false');
	is(err("BEGIN; SELECT dlock.assert_fence('end/1', $f)"), '55P03', 'assert_fence: 55P03');
	is($q->(q{SELECT dlock.renew('end/1', 'w-end')}), '', 'renew: NULL');
	is(err("SELECT dlock.try_lock('end/1', session => $s)"), '55000', 're-entry in the session: 55000');
	is($q->("SELECT dlock.keepalive($s)"), '', 'keepalive: NULL');
	is($q->("SELECT dlock.close_session($s)"), '', 'close_session: NULL');
	cmp_ok($q->(q{SELECT dlock.try_lock('end/1', 'b', '1h')}), '>', $f, 'another takes it');
	$q->(q{SELECT dlock.unlock_all('b')});
}

# 18. SET ROLE: a session is the role's that opened it; a SECURITY
# DEFINER function acts as its owner (current_user), as for leases (the
# portable edition's documented limit differs: CONTRACT.md P4).
{
	$q->(q{CREATE ROLE alice; CREATE ROLE bob; GRANT alice TO bob;
GRANT CREATE ON SCHEMA public TO alice});
	my $out = $q->(q{SET ROLE alice;
SELECT dlock.open_session('1h', 'w-sr') AS s \gset
SELECT owner::text FROM dlock.sessions WHERE id = :s;
SELECT dlock.try_lock('sr/1', session => :s) > 0;
CREATE FUNCTION public.ka(bigint) RETURNS timestamptz LANGUAGE sql SECURITY DEFINER
    SET search_path = pg_catalog AS 'SELECT dlock.keepalive($1)';
SET ROLE bob;
\set VERBOSITY sqlstate
\set ON_ERROR_STOP 0
SELECT dlock.keepalive(:s);
SELECT dlock.try_lock('sr/2', session => :s);
SELECT dlock.renew('sr/1', 'w-sr');
SELECT dlock.close_session(:s);
SELECT public.ka(:s) IS NOT NULL AS definer;
RESET ROLE;
SELECT dlock.close_session(:s);});
	is($out, "alice\nt\nt\n1", 'owner alice; bob through alice\'s SECURITY DEFINER function keeps it alive; closed');
	my ($rc, $o2, $err) = $node->psql('postgres', q{SET ROLE alice;
SELECT dlock.open_session('1h', 'w-sr') AS s \gset
SET ROLE bob;
\set VERBOSITY sqlstate
SELECT dlock.keepalive(:s);
SELECT dlock.try_lock('sr/2', session => :s);
SELECT dlock.close_session(:s);
RESET ROLE;
SELECT dlock.close_session(:s);}, on_error_stop => 0);
	is(join(',', $err =~ /ERROR:\s+(\w+)/g), '42501,42501,42501', 'bob: keepalive, acquire, close: 42501');
}

# 19. Savepoints: a close_session rolled back to a savepoint leaves the
# session and its holdings; an acquisition rolled back leaves nothing.
# One backend through ALTER EXTENSION UPDATE, DROP and CREATE EXTENSION:
# sessions work at once, ids stay above.
{
	my $out = $q->(q{SELECT dlock.open_session('1h', 'sp') AS s \gset
SELECT dlock.try_lock('sp/1', session => :s) > 0;
SELECT dlock.try_acquire('sp/2', NULL, 2, 1, session => :s) > 0;
BEGIN;
SAVEPOINT a;
SELECT dlock.close_session(:s);
ROLLBACK TO SAVEPOINT a;
SELECT dlock.keepalive(:s) > now();
SELECT dlock.try_lock('sp/3', session => :s) > 0;
COMMIT;
SELECT holdings FROM dlock.sessions WHERE id = :s;
SELECT dlock.close_session(:s);
BEGIN;
SELECT dlock.open_session('1h', 'sp') AS s3 \gset
SAVEPOINT b;
SELECT dlock.try_lock('sp/4', session => :s3) > 0;
ROLLBACK TO SAVEPOINT b;
SELECT dlock.close_session(:s3);
COMMIT;
SELECT count(*) FROM dlock.locks WHERE resource LIKE 'sp/%';});
	is($out, join("\n", qw(t t 2 t t 3 3 t 0 0)), 'savepoints: nothing half-done');
	$node->safe_psql('postgres', 'CREATE DATABASE one');
	$out = $node->safe_psql('one', q{CREATE EXTENSION dlock VERSION '1.0';
SELECT dlock.try_lock('o/1', 'h', '1h') > 0;
SELECT dlock.reap() >= 0;
ALTER EXTENSION dlock UPDATE;
SELECT dlock.open_session('1h', 'h') AS s \gset
SELECT dlock.try_lock('o/2', session => :s) > 0;
SELECT dlock.keepalive(:s) > now();
SELECT dlock.reap() >= 0;
DROP EXTENSION dlock;
CREATE EXTENSION dlock;
SELECT dlock.keepalive(:s) IS NULL;
SELECT dlock.open_session('1h', 'h') > :s AS higher;
SELECT dlock.open_session('1h', 'h') AS s2 \gset
SELECT dlock.try_lock('o/2', session => :s2) > 0;
SELECT dlock.close_session(:s2);});
	is($out, join("\n", qw(t t t t t t t t 1)), 'one backend: update, drop, create: sessions work, ids above');
}

# 20. reap() under REPEATABLE READ whose snapshot is older than an
# acquisition in the session: it does not remove the session as if it held
# nothing; the lock-delay keeps the resource busy (portable 103's reap_rr).
{
	# 4 s: the snapshot comes between the open and the acquisition.
	my $rp = $node->background_psql('postgres');
	my $s = $q->(q{SELECT dlock.open_session('4s', 'w-rp')});
	$rp->query_safe(q{BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM dlock.sessions});
	ok($q->("SELECT dlock.try_lock('rp/1', session => $s, lock_delay => '1h')"), 'a holding with a lock-delay after the snapshot');
	ok(ended($s), "the session's ttl passes");
	$rp->query_safe(q{SELECT dlock.reap()});
	$rp->query_safe('COMMIT');
	$rp->quit;
	is($q->(q{SELECT dlock.try_lock('rp/1', 'b', '1h')}), '', 'the lock-delay keeps rp/1 busy');
	is($q->(q{SELECT available_at > clock_timestamp() + interval '50 minutes' FROM dlock.locks WHERE resource = 'rp/1'}), 't',
		'... until an hour after the end');
	$q->(q{SELECT dlock.reap()});
	is($q->("SELECT count(*) FROM dlock.sessions WHERE id = $s"), '0', 'the session is removed once its holding ended');
	is($q->(q{SELECT dlock.try_lock('rp/1', 'b', '1h')}), '', 'the lock-delay holds after it');
}

# 21. Size: a session of 20,000 holdings, each taken in its own
# transaction.  keepalive writes one row; close_session needs one
# lock-manager lock per holding (as unlock_all and lock_all do): past the
# lock table, 53200 and nothing changed; the session then ends at its ttl
# and the reaper ends its holdings in rounds, and removes it.
{
	my $n = 20000;
	my $s = $q->(q{SELECT dlock.open_session('40s', 'w-big')});
	$q->("\\o /dev/null\nSELECT format('SELECT dlock.try_lock(%L, session => %s)', 'big/' || i, $s)"
		  . " FROM generate_series(1, $n) i \\gexec");
	is($q->("SELECT holdings FROM dlock.sessions WHERE id = $s"), $n, "$n holdings in one session");
	is($q->("SELECT count(*) FROM (SELECT dlock.keepalive($s)) x"), '1', 'one keepalive for all');
	is($q->("SELECT count(*) FROM dlock.locks WHERE session = $s AND expires_at = (SELECT expires_at FROM dlock.sessions WHERE id = $s)"),
		$n, '... every holding moved with it');
	is(err("SELECT dlock.close_session($s)"), '53200', 'close_session past the lock table: 53200');
	is($q->("SELECT holdings FROM dlock.sessions WHERE id = $s"), $n, '... nothing changed');
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM dlock.sessions WHERE id = $s"),
		'the ttl passes: the reaper ends every holding and removes the session');
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE resource LIKE 'big/%' AND holder IS NOT NULL}), '0', '... no holding left');
}

# 22. A fair wait in a session ends with 55000 when the session is closed;
# its place in the queue goes with it: the next fair waiter is served when
# the resource frees.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-fq')});
	ok($q->(q{SELECT dlock.try_lock('fq/1', 'b', '1h')}), 'b holds fq/1');
	my $w1 = async("SET statement_timeout = '30s'; SELECT dlock.lock('fq/1', session => $s, fair => true)");
	ok(active('%fq/1%session%', 1), 'a fair wait in the session');
	usleep(200_000);
	my $w2 = async(q{SET statement_timeout = '30s'; SELECT dlock.lock('fq/1', 'c', '1h', '25s', fair => true) IS NOT NULL});
	ok(active("%fq/1', 'c'%", 1), 'another fair waiter behind it');
	usleep(200_000);
	is($q->("SELECT dlock.close_session($s)"), '0', 'the session is closed');
	is(result($w1), '55000', 'the fair wait in it ends with 55000');
	is($q->(q{SELECT dlock.unlock('fq/1', 'b')}), '0', 'b releases fq/1');
	is(result($w2), 't', 'the next fair waiter is served');
	$q->(q{SELECT dlock.unlock_all('c')});
}

# 23. Calls that never wait, against a close_session in flight (its
# transaction open): an acquisition in the session is 55000 at once;
# another holder's try_lock of its holding NULL at once; check at once.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-nw')});
	my $f = $q->("SELECT dlock.try_lock('nw/1', session => $s)");
	my $c = $node->background_psql('postgres');
	$c->query_safe("BEGIN; SELECT dlock.close_session($s)");
	is(err("SET statement_timeout = '10s'; SELECT dlock.try_lock('nw/2', session => $s)"), '55000',
		'an acquisition in the session: 55000 at once');
	is(err(q{SET statement_timeout = '10s'; SELECT dlock.try_lock('nw/1', 'b', '1h')}), '',
		'another holder: NULL at once');
	is(err("SET statement_timeout = '10s'; SELECT dlock.check('nw/1', $f)"), 't',
		'check at once (the close has not committed)');
	is(err("SET statement_timeout = '10s'; SELECT dlock.try_lock_all('{nw/3,nw/4}', session => $s)"), '55000',
		'try_lock_all in the session: 55000 at once');
	$c->query_safe('COMMIT');
	$c->quit;
	cmp_ok($q->(q{SELECT dlock.try_lock('nw/1', 'b', '1h')}), '>', $f, 'free once the close commits');
	$q->(q{SELECT dlock.unlock_all('b')});
}

# 24. Prepared transactions: an acquisition in a session prepared is in
# flight: close_session waits for it (lock_timeout: 55P03, nothing
# changed), then releases it with the others; a keepalive prepared keeps
# the holdings past the old expiry until it is resolved.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-pp')});
	ok($q->("SELECT dlock.try_lock('pp/1', session => $s)"), 'a holding');
	$q->("BEGIN; SELECT dlock.try_lock('pp/2', session => $s); PREPARE TRANSACTION 'pp2'");
	is(err("SET lock_timeout = '300ms'; SELECT dlock.close_session($s)"), '55P03',
		'close_session waits for the prepared acquisition');
	is($q->("SELECT holdings FROM dlock.sessions WHERE id = $s"), '1', '... nothing changed');
	$q->(q{COMMIT PREPARED 'pp2'});
	is($q->("SELECT dlock.close_session($s)"), '2', 'then closes both');
	# (The keepalive 3 s before the end: its new expiry is 9 s past the
	# old, time for the steps below on a loaded machine; with a 5 s ttl,
	# the 2 s left once ran out before the COMMIT PREPARED.)
	my $s2 = $q->(q{SELECT dlock.open_session('12s', 'w-pp')});
	my $f = $q->("SELECT dlock.try_lock('pp/3', session => $s2)");
	$q->("SELECT pg_sleep(extract(epoch FROM expires_at - clock_timestamp()) - 3) FROM dlock.sessions WHERE id = $s2");
	$q->("BEGIN; SELECT dlock.keepalive($s2); PREPARE TRANSACTION 'ka'");
	ok(ended($s2), 'the old expiry passes with the keepalive prepared');
	is($q->(q{SELECT dlock.try_lock('pp/3', 'b', '1h')}), '', 'busy: the prepared keepalive may still commit');
	$q->(q{COMMIT PREPARED 'ka'});
	is($q->("SELECT dlock.check('pp/3', $f)"), 't', 'committed: the holding lives on');
	is($q->("SELECT dlock.close_session($s2)"), '1', 'closed');
}

# 25. The session's lock that a call that does not wait takes before its
# read (helper review of 1.1's lock-manager lock): a refused try_lock keeps
# it to its transaction's end (close_session waits), a ROLLBACK TO a
# savepoint gives it back (close_session goes on, and the transaction's
# next acquisition in the session is 55000), and another role's refused
# call (42501, caught in a PL/pgSQL block) keeps none.
{
	my $s = $q->(q{SELECT dlock.open_session('1h', 'w-sl')});
	ok($q->(q{SELECT dlock.try_lock('sl/busy', 'b', '1h')}), 'b holds sl/busy');
	my $t = $node->background_psql('postgres');
	is($t->query_safe("BEGIN; SELECT dlock.try_lock('sl/busy', session => $s) IS NULL"), 't',
		'a try_lock in the session refused, its transaction open');
	is(err("SET lock_timeout = '300ms'; SELECT dlock.close_session($s)"), '55P03',
		'close_session waits for that transaction');
	$t->query_safe('ROLLBACK');
	$t->query_safe("BEGIN; SAVEPOINT a; SELECT dlock.try_lock('sl/busy', session => $s); ROLLBACK TO SAVEPOINT a");
	is(err("SET lock_timeout = '5s'; SELECT dlock.close_session($s)"), '0',
		'refused in a savepoint rolled back: close_session goes on');
	# (an error would end the background psql: caught, its SQLSTATE told)
	$t->query(qq{DO \$\$ BEGIN PERFORM dlock.try_lock('sl/free', session => $s); RAISE NOTICE 'taken';
		EXCEPTION WHEN OTHERS THEN RAISE NOTICE 'sqlstate %', SQLSTATE; END \$\$});
	like($t->{stderr}, qr/sqlstate 55000/, '... the transaction then acquires in the session: 55000');
	$t->{stderr} = '';
	$t->query_safe('ROLLBACK');
	my $s2 = $q->(q{SELECT dlock.open_session('1h', 'w-sl2')});
	$q->(q{DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'mallory') THEN CREATE ROLE mallory; END IF; END $$;
		GRANT USAGE ON SCHEMA dlock TO mallory});
	my $pid = $t->query_safe('SELECT pg_backend_pid()');
	$t->query(qq{BEGIN; SET ROLE mallory; DO \$\$ BEGIN PERFORM dlock.try_lock('sl/m', session => $s2);
		EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE '%', SQLERRM; END \$\$});
	like($t->{stderr}, qr/permission denied to acquire in session/, "another role's try_lock in the session: 42501, caught");
	$t->{stderr} = '';
	is($q->("SELECT count(*) FROM pg_locks WHERE pid = $pid AND locktype = 'advisory' AND objsubid = 17496"), '0',
		"another role's refused acquisition (42501, caught) keeps no lock of the session");
	is(err("SET lock_timeout = '5s'; SELECT dlock.close_session($s2)"), '0',
		"... and the owner's close_session goes on while its transaction is open");
	$t->query_safe('ROLLBACK');
	$t->quit;
	$q->(q{SELECT dlock.unlock_all('b')});
}

# 7. Ids never handed out twice: not after DROP and CREATE EXTENSION, nor
# after an older dump is restored.
{
	my $old = $q->(q{SELECT dlock.open_session('1h', 'w-old')});
	$q->('DROP EXTENSION dlock');
	$q->('CREATE EXTENSION dlock');
	my $new = $q->(q{SELECT dlock.open_session('1h', 'w-new')});
	cmp_ok($new, '>', $old, 'after DROP and CREATE EXTENSION: a higher id');
	$node->safe_psql('postgres', 'CREATE DATABASE dumped');
	$node->safe_psql('dumped', 'CREATE EXTENSION dlock');
	my $before = $node->safe_psql('dumped', q{SELECT dlock.open_session('1h', 'w-b')});
	my $file = $node->basedir . '/dumped.dump';
	$node->command_ok([ 'pg_dump', '-Fc', '-f', $file, '-d', $node->connstr('dumped') ], 'pg_dump');
	my @later = map { $node->safe_psql('dumped', q{SELECT dlock.open_session('1h', 'w-l')}) } 1 .. 3;
	$node->safe_psql('postgres', 'DROP DATABASE dumped');
	$node->safe_psql('postgres', 'CREATE DATABASE dumped');
	$node->command_ok([ 'pg_restore', '-d', $node->connstr('dumped'), $file ], 'pg_restore');
	isnt($node->safe_psql('dumped', "SELECT dlock.keepalive($before)"), '', 'the dumped session is back');
	is($node->safe_psql('dumped', "SELECT dlock.keepalive($later[-1])"), '', 'a later one is unknown: NULL');
	my $next = $node->safe_psql('dumped', q{SELECT dlock.open_session('1h', 'w-n')});
	cmp_ok($next, '>', $later[-1], 'a new id is above every id handed out after the dump');
}

$node->stop;
done_testing();
