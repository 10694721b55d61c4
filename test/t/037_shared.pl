# 037_shared.pl: shared locks (0.4) with waiters in lock().
#
#  - a writer waiting in lock() keeps new readers out (writers do not
#    starve), with preloading (waiters sleep on their latch);
#  - the last reader's release wakes the waiting writer
#    (dlock.stats().wakeups), and the writer then has it;
#  - a reader that waited behind the writer gets it when the writer
#    releases; readers that share do not wait for each other.
# Promises: P5 P9

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
$node->stop;
done_testing();
