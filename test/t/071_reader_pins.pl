# 071_reader_pins.pl: readers' pins keep no reader out, and hold up no
# renewal.  An exclusive holding that has run out and is not reaped yet
# (no worker here) stays busy to readers only while a transaction pins
# that holding (037_shared.pl); pins of shared holdings beside it, and
# others' looks, do not count.  Found by the review of 2026-11-30 (stop
# 53): any pin of the resource kept every new reader out, for as long as
# it lasted; a reader's lock() in a transaction that already held the
# resource raised 40P01; a shared holder's renew waited for other
# readers' pins (and new pins queued behind it); assert_fence of a stale
# fence waited for a change in progress.
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
my $fe = sql(q{SELECT dlock.try_lock('m', 'e', '2s')});
my $m = $node->background_psql('postgres', on_error_stop => 0);
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

$_->quit for $p, $b, $n;
$node->stop;
done_testing();
