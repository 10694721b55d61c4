# 039_lock_all.pl: several resources at once (0.5) with waits that sleep
# on the latch (preloaded), which isolationtester cannot see.
#
#  - lock_all waits for the resource in its way holding none of the others,
#    and the releasing commit wakes it (dlock.stats().wakeups);
#  - when another resource is in its way after a wakeup, the wait moves
#    there (dlock.waiters) and passes the wakeup on: a plain lock() waiting
#    behind it for the released resource gets it at once (a second wakeup,
#    not the five-second safety net);
#  - a wait that times out returns NULL and holds nothing;
#  - clients taking the same resources in crossing orders in a loop all
#    get them, one at a time (a unique row marks who is inside), never a
#    deadlock (40P01) nor a timeout.
# Promises: P2 P5 P11

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lock_all');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', shift) }

sub wakeups { return sql(q{SELECT wakeups FROM dlock.stats()}) }

# ---- A wait woken by the release of the resource in its way ----
is(sql(q{SELECT dlock.try_lock('a', 'x', '1h') IS NOT NULL}), 't', 'x holds a');
my $m = $node->background_psql('postgres', on_error_stop => 0);
$m->query_until(qr/waiting/,
	"\\echo waiting\nSELECT array_length(dlock.lock_all(ARRAY['b', 'a'], 'm', '1h', wait => '60s'), 1) AS m_took;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'a' AND holder = 'm'}),
	'lock_all waits for the resource in its way');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 'm'}), '0',
	'... holding none of the others meanwhile');
is(sql(q{SELECT dlock.try_lock('b', 'other', '1h') IS NOT NULL AND dlock.unlock('b', 'other') = 0}),
	't', '... so another holder takes and releases b meanwhile');
my $w0 = wakeups();
is(sql(q{SELECT dlock.unlock('a', 'x')}), '0', 'x releases a');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM dlock.locks WHERE holder = 'm'}),
	'the waiting lock_all has both');
cmp_ok(wakeups(), '>', $w0, 'the release woke it');
is(sql(q{SELECT dlock.unlock_all('m')}), '2', 'm releases both');

# ---- The wait moves, and passes the wakeup on ----
is(sql(q{SELECT dlock.try_lock('a', 'x', '1h') IS NOT NULL}), 't', 'x holds a again');
$m->query_until(qr/waiting/,
	"\\echo waiting\nSELECT array_length(dlock.lock_all(ARRAY['b', 'a'], 'm', '1h', wait => '60s'), 1) AS m_took;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'a' AND holder = 'm'}),
	'lock_all waits for a');
my $l = $node->background_psql('postgres', on_error_stop => 0);
$l->query_until(qr/waiting/,
	"\\echo waiting\nSELECT dlock.lock('a', 'l', '1h', '60s') IS NOT NULL AS l_took;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'a' AND holder = 'l'}),
	'a lock() waits for a behind it');
is(sql(q{SELECT dlock.try_lock('b', 'y', '1h') IS NOT NULL}), 't', 'y holds b');
$w0 = wakeups();
is(sql(q{SELECT dlock.unlock('a', 'x')}), '0', 'x releases a');
ok($node->poll_query_until('postgres', q{SELECT holder = 'l' FROM dlock.locks WHERE resource = 'a'}),
	'the lock() behind it has a');
# It waits now for b, or, once the lock() has a, for a again: whichever
# comes first in its order.
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE holder = 'm'}),
	'the lock_all still waits');
cmp_ok(wakeups() - $w0, '>=', 2, 'the lock_all passed its wakeup on to the lock() behind it');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 'm'}), '0', 'the lock_all still holds nothing');
is(sql(q{SELECT dlock.unlock('b', 'y')}), '0', 'y releases b');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'a' AND holder = 'm'}),
	'the lock_all waits for a again');
is(sql(q{SELECT dlock.unlock('a', 'l')}), '0', 'the lock() releases a');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM dlock.locks WHERE holder = 'm'}),
	'the lock_all has both');
is(sql(q{SELECT dlock.unlock_all('m')}), '2', 'm releases both');

# ---- A wait that times out holds nothing ----
is(sql(q{SELECT dlock.try_lock('a', 'x', '1h') IS NOT NULL}), 't', 'x holds a');
is(sql(q{SELECT dlock.lock_all(ARRAY['b', 'a', 'c'], 't', '1h', wait => '200ms')}), '',
	'lock_all times out: NULL');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 't'}), '0', '... holding nothing');
is(sql(q{SELECT count(*) FROM dlock.waiters}), '0', '... and not waiting any more');
is(sql(q{SELECT dlock.unlock('a', 'x')}), '0', 'x releases a');

# ---- Crossing orders in a loop ----
sql(q{CREATE TABLE inside (k text PRIMARY KEY);
      CREATE TABLE got (client int, ok boolean)});
my $script = $node->basedir . '/cross.sql';
open(my $fh, '>', $script) or die "$script: $!";
print $fh <<'EOF';
\set o random(0, 2)
SELECT (dlock.lock_all(CASE :o WHEN 0 THEN ARRAY['p', 'q', 'r'] WHEN 1 THEN ARRAY['r', 'q', 'p'] ELSE ARRAY['q', 'r', 'p'] END, 'c' || :client_id, '1h', wait => '60s') IS NOT NULL)::int AS ok \gset
INSERT INTO got VALUES (:client_id, :ok = 1);
INSERT INTO inside VALUES ('pqr');
DELETE FROM inside;
SELECT dlock.unlock_all('c' || :client_id);
EOF
close($fh);
my ($clients, $n) = (4, 40);
$node->command_ok(
	[ 'pgbench', '-n', '-c', $clients, '-t', $n, '-f', $script, '-d', $node->connstr('postgres') ],
	"$clients clients take p, q, r in crossing orders, $n times each");
is(sql(q{SELECT count(*) FILTER (WHERE ok) || '/' || count(*) FROM got}),
	$clients * $n . '/' . $clients * $n, 'every lock_all got all three');
is(sql(q{SELECT count(*) FROM dlock.locks}), '0', 'nothing is left held');
ok(!grep({ /deadlock detected/ } split(/\n/, slurp_file($node->logfile))),
	'no deadlock anywhere');

$m->quit;
$l->quit;
$node->stop;
done_testing();
