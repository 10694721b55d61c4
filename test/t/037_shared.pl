# 037_shared.pl: shared locks (0.4) with waiters in lock().
#
#  - a writer waiting in lock() keeps new readers out (writers do not
#    starve), with preloading (waiters sleep on their latch);
#  - the last reader's release wakes the waiting writer
#    (dlock.stats().wakeups), and the writer then has it;
#  - a reader that waited behind the writer gets it when the writer
#    releases; readers that share do not wait for each other;
#  - an exclusive holding that has run out while a transaction pins it
#    (assert_fence) keeps readers out, as it keeps a takeover out, until
#    that transaction ends: try_lock, try_lock_all and lock() (which then
#    gets it); a pin of another reader's holding keeps nobody out.
# Promises: P2 P5 P9

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('shared');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', shift) }

is(sql(q{SELECT dlock.try_lock('s', 'r1', '1h', shared => true) IS NOT NULL
           AND dlock.try_lock('s', 'r2', '1h', shared => true) IS NOT NULL}),
	't', 'two readers share');

my $w = $node->background_psql('postgres', on_error_stop => 0);
$w->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock.lock('s', 'w', '1h', '60s');\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 's'}),
	'the writer waits in lock()');
is(sql(q{SELECT dlock.try_lock('s', 'r3', '1h', shared => true)}), '',
	'a new reader is kept out while the writer waits');
is(sql(q{SELECT dlock.try_lock('s', 'r1', '1h', shared => true) IS NOT NULL}), 't',
	'a reader that shares already re-enters');
is(sql(q{SELECT dlock.unlock('s', 'r1') + dlock.unlock('s', 'r1')}), '1', 'the first reader releases');

my $wakeups = sql(q{SELECT wakeups FROM dlock.stats()});
is(sql(q{SELECT dlock.unlock('s', 'r2')}), '0', 'the last reader releases');
ok($node->poll_query_until('postgres',
		q{SELECT holder = 'w' AND mode = 'exclusive' FROM dlock.locks WHERE resource = 's'}),
	'the writer has it once the last reader is gone');
cmp_ok(sql(q{SELECT wakeups FROM dlock.stats()}), '>', $wakeups,
	'the last reader\'s release woke the writer');

# A reader waits behind the writer and gets it when the writer releases.
my $r = $node->background_psql('postgres', on_error_stop => 0);
$r->query_until(qr/waiting/,
	"\\echo waiting\nSELECT dlock.lock('s', 'r4', '1h', '60s', shared => true);\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 's'}),
	'a reader waits behind the writer');
is(sql(q{SELECT dlock.unlock('s', 'w')}), '0', 'the writer releases');
ok($node->poll_query_until('postgres',
		q{SELECT holder = 'r4' AND mode = 'shared' FROM dlock.locks WHERE resource = 's'}),
	'the waiting reader has it');
is(sql(q{SELECT dlock.try_lock('s', 'r5', '1h', shared => true) IS NOT NULL}), 't',
	'another reader joins it at once');

$w->quit;
$r->quit;

# A pinned exclusive holding that has run out: readers stay out until the
# pin's transaction ends (the holder's fenced write commits before any
# reader holds the resource).  Until stop 52 a reader took it at once.
# The pinner's psql starts first and takes the 1 s lease itself: the pin
# comes before the lease ends, however slowly a loaded machine starts psql.
my $p = $node->background_psql('postgres', on_error_stop => 0);
my $fx = $p->query_safe(q{SELECT dlock.try_lock('px', 'x', '1s')});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('px', $fx)");
ok($node->poll_query_until('postgres', q{SELECT expired FROM dlock.locks WHERE resource = 'px'}),
	'pin: the pinned exclusive holding runs out');
is(sql(q{SELECT dlock.try_lock('px', 'x2', '1h')}), '', 'pin: no takeover while it is pinned');
is(sql(q{SELECT dlock.try_lock('px', 'r', '1h', shared => true)}), '', 'pin: no reader either (try_lock)');
is(sql(q{SELECT dlock.try_lock_all(ARRAY['px', 'py'], 'r', '1h', shared => true)}), '',
	'pin: ... nor try_lock_all');
is(sql(q{SELECT dlock.lock('px', 'r', '1h', '300ms', shared => true)}), '',
	'pin: ... and lock() times out');
$r = $node->background_psql('postgres', on_error_stop => 0);
$r->query_until(qr/waiting/,
	"\\echo waiting\nSELECT dlock.lock('px', 'r', '1h', '60s', shared => true) IS NOT NULL AS got;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'px'}),
	'pin: a reader waits in lock()');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE resource = 'px' AND mode = 'shared'}), '0',
	'pin: and holds nothing yet');
$p->query_safe('COMMIT');
like($r->query_safe('SELECT 1'), qr/^t\n/m, 'pin: the pin gone, the waiting reader gets it');
$r->quit;
# A reader's pin of its own shared holding keeps other readers in.
my $fr = sql(q{SELECT dlock.try_lock('ps', 'r1', '1h', shared => true)});
$p->query_safe("BEGIN; SELECT dlock.assert_fence('ps', $fr)");
isnt(sql(q{SELECT dlock.try_lock('ps', 'r2', '1h', shared => true)}), '',
	'pin: a reader joins beside another reader\'s pin');
$p->query_safe('COMMIT');
$p->quit;
$node->stop;
done_testing();
