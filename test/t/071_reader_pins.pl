# 071_reader_pins.pl: readers' pins keep no reader out, and hold up no
# renewal.  An exclusive holding that has run out and is not reaped yet
# (no worker here) stays busy to readers only while a transaction pins
# that holding (037_shared.pl); pins of shared holdings beside it, and
# others' looks, do not count.  Found by the review of 2026-11-30 (stop
# 53): any pin of the resource kept every new reader out, for as long as
# it lasted; a reader's lock() in a transaction that already held the
# resource raised 40P01; a shared holder's renew waited for other
# readers' pins (and new pins queued behind it); assert_fence of a stale
# fence waited for a change in progress.  Stop 54: a reader's wait behind
# a pin of an ended exclusive holding is a lock-manager wait (6, 8), and
# that holding's holder is no reader while it is pinned (7); lock_all
# too (9).
# Promises: P5 P9

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('reader_pins');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE ROLE mallory LOGIN');
sub sql { return $node->safe_psql('postgres', shift) }

# ended: resource r with an exclusive holding that has run out, unreaped.
sub ended
{
	my ($r) = @_;
	sql(qq{SELECT dlock.try_lock('$r', 'e', '100ms')});
	ok($node->poll_query_until('postgres', qq{SELECT expired FROM dlock.locks WHERE resource = '$r'}),
		"$r: the exclusive holding has run out");
}

# ---- 1. A reader pins its own holding: other readers still join. ----
ended('a');
my $fa = sql(q{SELECT dlock.try_lock('a', 'A', '1h', shared => true)});
isnt($fa, '', 'a: a reader joins beside the ended exclusive holding');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE resource = 'a' AND mode = 'exclusive'}), '1',
	'a: whose row is still there');
my $p = $node->background_psql('postgres');
$p->query_safe("BEGIN; SELECT dlock.assert_fence('a', $fa)");
isnt(sql(q{SELECT dlock.try_lock('a', 'B', '1h', shared => true)}), '',
	'a: another reader joins beside the reader\'s pin (try_lock)');
isnt(sql(q{SELECT dlock.lock('a', 'C', '1h', '5s', shared => true)}), '',
	'a: ... and lock()');
$p->query_safe('COMMIT');

# ---- 2. A transaction that holds the resource asks again beside a pin. ----
ended('c');
my $fr = sql(q{SELECT dlock.try_lock('c', 'R', '1h', shared => true)});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('c', $fr)");
my $b = $node->background_psql('postgres', on_error_stop => 0);
$b->query_safe('BEGIN');
isnt($b->query_safe(q{SELECT dlock.try_lock('c', 'b1', '1h', shared => true)}), '',
	'c: a reader takes it beside another\'s pin, in a transaction');
like($b->query(q{SELECT dlock.lock('c', 'b2', '1h', '5s', shared => true) IS NOT NULL}), qr/^t$/m,
	'c: and lock() of another holder text there gets it: no 40P01');
$b->query_safe('COMMIT');
$p->query_safe('COMMIT');

# ---- 3. A failed assert_fence of the exclusive holding by another role
# leaves no mark behind. ----
my $m = $node->background_psql('postgres', on_error_stop => 0);
my $fe = sql(q{SELECT dlock.try_lock('m', 'e', '3s')});
$m->query_safe('SET ROLE mallory; BEGIN; SAVEPOINT s');
$m->query("SELECT dlock.assert_fence('m', $fe)");
like($m->{stderr}, qr/permission denied to assert the fence/, 'm: another role may not pin the holding');
$m->{stderr} = '';
$m->query_safe('ROLLBACK TO s');
ok($node->poll_query_until('postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'm'}),
	'm: the exclusive holding runs out');
isnt(sql(q{SELECT dlock.try_lock('m', 'r', '1h', shared => true)}), '',
	'm: a reader joins while that transaction is still open');
$m->query_safe('COMMIT');
$m->quit;

# ---- 4. A shared holder's renew waits for its own tag, not for pins. ----
my $fy = sql(q{SELECT dlock.try_lock('d', 'Y', '1h', shared => true)});
sql(q{SELECT dlock.try_lock('d', 'x', '1h', shared => true)});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('d', $fy)");
$b->query_safe(q{BEGIN; SELECT dlock.try_lock('d', 'x', '1h', shared => true)});    # x's tag, held
my $n = $node->background_psql('postgres', on_error_stop => 0);
$n->query_until(qr/renewing/, "\\echo renewing\nSELECT dlock.renew('d', 'x') IS NOT NULL AS renewed;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%renew(''d''%'}),
	'd: the renew waits while x\'s re-entry is open');
$b->query_safe('COMMIT');
my $done = 0;
for (1 .. 200)
{
	$done = sql(q{SELECT count(*) = 0 FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%renew(''d''%'}) eq 't';
	last if $done;
	select(undef, undef, undef, 0.1);
}
ok($done, 'd: once the re-entry commits, the renew goes on though a reader still pins the resource');
like($n->query_safe('SELECT 1'), qr/^t$/m, 'd: renewed');
$p->query_safe('COMMIT');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE resource = 'd' AND count = 2 AND holder = 'x'}), '1',
	'd: x holds it twice');

# ---- 5. assert_fence of a fence that is not current answers at once:
# it does not wait for a change in progress (nor pin anything meanwhile).
$b->query_safe(q{BEGIN; SELECT dlock.try_lock('q', 'x', '1h')});    # a change, open
my $q = $node->background_psql('postgres', on_error_stop => 0);
$q->query("SET statement_timeout = '5s'; SELECT dlock.assert_fence('q', 12345)");
like($q->{stderr}, qr/fence 12345 is not the current holding/,
	'q: a stale fence is refused at once, during another\'s change (55P03, not 57014)');
$q->quit;
$b->query_safe('COMMIT');

# waiting_in_lock: is a statement like pattern waiting in the lock
# manager (not polling)?  Looked at for up to 10 s.
sub waiting_in_lock
{
	my ($like) = @_;
	for (1 .. 100)
	{
		return 1 if sql(qq{SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '$like'}) > 0;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# ---- 6. A reader's lock() without a limit waits for a pin of the ended
# exclusive holding in the lock manager: a cycle through the pinner is a
# deadlock PostgreSQL finds (40P01), not a wait until statement_timeout.
# Until stop 54 the reader polled, out of the deadlock detector's sight.
sql(q{CREATE TABLE t6 (id int PRIMARY KEY, v int); INSERT INTO t6 VALUES (1, 0)});
# The pinner's psql starts first, and the leases here are 3 s: the pin
# comes before the lease ends (a 1 s lease once ended first under load).
my $p6 = $node->background_psql('postgres', on_error_stop => 0);
my $f6 = sql(q{SELECT dlock.try_lock('k', 'x', '3s')});
$p6->query_safe("SET deadlock_timeout = '100ms'; BEGIN; SELECT dlock.assert_fence('k', $f6)");
ok($node->poll_query_until('postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'k'}),
	'k: the pinned exclusive holding runs out');
my $r6 = $node->background_psql('postgres', on_error_stop => 0);
# The pinner looks for deadlocks first: it is the one to raise 40P01.
$r6->query_safe(q{SET statement_timeout = '20s'; SET deadlock_timeout = '10s'; BEGIN; UPDATE t6 SET v = 1 WHERE id = 1});
$r6->query_until(qr/reading/, "\\echo reading\nSELECT dlock.lock('k', 'r', '1h', shared => true) IS NOT NULL AS got;\n");
ok(waiting_in_lock(q{%lock(''k''%}), 'k: the reader waits for the pin in the lock manager');
$p6->query('UPDATE t6 SET v = 2 WHERE id = 1');
like($p6->{stderr}, qr/deadlock detected/, 'k: the pinner waiting for the reader is a deadlock found (40P01)');
like($r6->query('SELECT 1'), qr/^t$/m, 'k: the pin gone with it, the reader gets the resource');
unlike($r6->{stderr}, qr/timeout|canceling/, 'k: nobody waited until statement_timeout');
$r6->query('COMMIT');
$p6->query('ROLLBACK');

# ---- 7. The holder of the ended exclusive holding is no reader either
# while another transaction pins it.  Until stop 54 it was let in (as a
# downgrade of a holding it no longer had); the portable edition refused.
my $f7 = sql(q{SELECT dlock.try_lock('h', 'H', '3s')});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('h', $f7)");
ok($node->poll_query_until('postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'h'}),
	'h: the pinned exclusive holding runs out');
is(sql(q{SELECT dlock.try_lock('h', 'H', '1h', shared => true)}), '',
	'h: its holder cannot read while another transaction pins it');
$p->query_safe('COMMIT');
isnt(sql(q{SELECT dlock.try_lock('h', 'H', '1h', shared => true)}), '',
	'h: the pin gone, its holder reads');

# ---- 8. Two transactions pin the ended exclusive holding: a reader's
# lock() in one of them waits for the other's pin.  Until stop 54 it raised
# 40P01 at once (a wait for itself, it judged).
my $f8 = sql(q{SELECT dlock.try_lock('w', 'x', '3s')});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('w', $f8)");
$b->query_safe("BEGIN; SELECT dlock.assert_fence('w', $f8)");
ok($node->poll_query_until('postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'w'}),
	'w: the twice pinned exclusive holding runs out');
$b->{stderr} = '';
$b->query_until(qr/reading/, "\\echo reading\nSELECT dlock.lock('w', 'b', '1h', shared => true) IS NOT NULL AS got;\n");
ok(waiting_in_lock(q{%lock(''w''%}), 'w: a reader in one pinner waits for the other pin');
$p->query_safe('COMMIT');
like($b->query('SELECT 1'), qr/^t$/m, 'w: once the other pin is gone, it reads');
unlike($b->{stderr}, qr/deadlock/, 'w: no 40P01');
$b->query('COMMIT');

# ---- 9. lock_all of readers waits for such a pin in the lock manager too.
my $f9 = sql(q{SELECT dlock.try_lock('l2', 'x', '3s')});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('l2', $f9)");
ok($node->poll_query_until('postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'l2'}),
	'l2: the pinned exclusive holding runs out');
$b->{stderr} = '';
$b->query_until(qr/reading/,
	"\\echo reading\nSELECT dlock.lock_all(ARRAY['l1', 'l2'], 'b', '1h', shared => true) IS NOT NULL AS got;\n");
ok(waiting_in_lock(q{%lock_all(ARRAY[''l1''%}), 'l2: lock_all waits for the pin in the lock manager');
$p->query_safe('COMMIT');
like($b->query('SELECT 1'), qr/^t$/m, 'l2: once the pin is gone, lock_all reads both');

# ---- 10. A writer's lock() and xact_lock() behind such a pin: the cycle
# is found too (as the portable edition's 105_reader_pins checks).
for my $call ('lock', 'xact_lock')
{
	my $r = "e/$call";
	my $fe = sql(qq{SELECT dlock.try_lock('$r', 'x', '3s')});
	$p6->{stderr} = '';
	$p6->query_safe("BEGIN; SELECT dlock.assert_fence('$r', $fe)");
	ok($node->poll_query_until('postgres', qq{SELECT expired FROM dlock.locks WHERE resource = '$r'}),
		"$r: the pinned exclusive holding runs out");
	$r6->{stderr} = '';
	$r6->query_safe(q{BEGIN; UPDATE t6 SET v = 5 WHERE id = 1});
	my $q = $call eq 'lock' ? qq{dlock.lock('$r', 'w', '1h')} : qq{dlock.xact_lock('$r')};
	$r6->query_until(qr/taking/, "\\echo taking\nSELECT $q IS NOT NULL AS got;\n");
	ok(waiting_in_lock("%$call(''$r''%"), "$r: $call waits in the lock manager");
	$p6->query('UPDATE t6 SET v = 6 WHERE id = 1');
	like($p6->{stderr}, qr/deadlock detected/, "$r: the pinner waiting for it: 40P01");
	like($r6->query('SELECT 1'), qr/^t$/m, "$r: $call gets it");
	$r6->query('ROLLBACK');
	$p6->query('ROLLBACK');
}

$_->quit for $p, $b, $n, $p6, $r6;
$node->stop;
done_testing();
