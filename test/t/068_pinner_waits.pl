# 068_pinner_waits.pl: a transaction that already pins a resource
# (assert_fence) and then waits for a holding that another transaction is
# changing must wait in the lock manager, not spin.  Its own pin holds up
# the requests queued on the pin marker (a break_lock waiting for the pins,
# a new pin behind it), and the lock manager lets a pinner's own wait for
# the pins go ahead of them at once: looping on that wait spun, unseen by
# the deadlock detector, until statement_timeout.  Found by the review of
# 2026-11-30 (a random workload of three roles: 7 to 26 calls in a minute
# ran into statement_timeout).
# Promises: P5

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('pinner_waits');
$node->init;
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = 'dlock'
dlock.reap_interval = '1h'
});
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION dlock');

my $r = 'pw';
my $fa = sql("SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
sql("SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");    # count 2
my $fb = sql("SELECT dlock.try_lock('$r', 'b', '1h', shared => true)");

# X changes a's holding (count 2 to 1) and stays open: a's tag in CHANGE mode.
my $x = $node->background_psql('postgres');
$x->query_safe("BEGIN; SELECT dlock.unlock('$r', 'a')");
# P pins b's holding: the pin marker, shared.
my $p = $node->background_psql('postgres', on_error_stop => 0);
$p->query_safe("BEGIN; SELECT dlock.assert_fence('$r', $fb)");
# U (break_lock) waits for the pins on the marker; Q, a new pin, queues behind it.
my $u = $node->background_psql('postgres', on_error_stop => 0);
$u->query_until(qr/go/, "\\echo go\nSELECT dlock.break_lock('$r') AS u_break;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%u_break%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()}),
	'break_lock waits for the pin');
my $q = $node->background_psql('postgres', on_error_stop => 0);
$q->query_until(qr/go/, "\\echo go\nSELECT dlock.assert_fence('$r', $fb) AS q_pin;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%q_pin%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()}),
	'a new pin queues behind it');

# P now pins a's holding, which X is changing: it must wait for X.
$p->query_until(qr/go/, "\\echo go\nSELECT dlock.assert_fence('$r', $fa) AS p_pin;\n");
# Its first wait, before the 20 looks (it may not have arrived yet).
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%p_pin%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()}),
	'the pinner waits');
my $waits = 0;
for (1 .. 20)
{
	$waits++ if sql(q{SELECT wait_event_type = 'Lock' FROM pg_stat_activity
		WHERE query LIKE '%p_pin%' AND pid <> pg_backend_pid()}) eq 't';
	select(undef, undef, undef, 0.05);
}
is($waits, 20, "the pinner's second assert_fence waits in the lock manager (20 looks of 20), not spinning");
$x->query_safe('COMMIT');
$x->quit;
like($p->query_safe('SELECT 1'), qr/^1$/m, 'once X commits, it goes on');
like($p->{stderr}, qr/^$/, '... and its fence is current (a has count 1)') or diag($p->{stderr});
$p->query_safe('COMMIT');
$p->quit;
$q->quit;
$u->quit;
is(sql("SELECT count(*) FROM dlock.locks WHERE resource = '$r'"), '0', 'then break_lock breaks both holdings');

$node->stop;
done_testing();
