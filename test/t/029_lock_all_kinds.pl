# 029_lock_all_kinds.pl: lock_all (0.5) with the other kinds of holding,
# with waits that sleep on the latch (preloaded), which isolationtester
# cannot see.
#
#  - writers do not starve: an exclusive lock_all waiting for a resource
#    that readers share keeps new shared holders out of it (try_lock,
#    try_lock_all with shared => true), as a waiting lock() does; a reader
#    that shares it already re-enters; the last reader's release lets the
#    lock_all have all of its resources;
#  - when its wait ends without the resources (a cancel), readers are let
#    in again;
#  - two shared holders each waiting in lock_all to upgrade the resource
#    they share is a deadlock (40P01) at once, never a hang; the other one
#    has it once the failed one lets its shared lock go;
#  - a name held as a semaphore is an error (42809) for try_lock_all and
#    lock_all, as for try_lock, not a NULL nor a wait;
#  - a shared try_lock_all is not held off by another reader's acquisition
#    in an open transaction (as a shared try_lock is not), but an exclusive
#    one is.
# Promises: P6 P9 P11

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('lock_all_kinds');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', shift) }

# ---- Writers do not starve ----
is(sql(q{SELECT dlock.try_lock('w', 'r1', '1h', shared => true) IS NOT NULL}), 't', 'r1 shares w');
my $x = $node->background_psql('postgres', on_error_stop => 0);
$x->query_until(qr/waiting/,
	"\\echo waiting\nSELECT array_length(dlock.lock_all(ARRAY['v', 'w'], 'x', '1h', wait => '60s'), 1) AS x_took;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'w' AND holder = 'x'}),
	'an exclusive lock_all waits for w');
is(sql(q{SELECT dlock.try_lock('w', 'r2', '1h', shared => true)}), '',
	'a new reader is kept out of w while it waits');
is(sql(q{SELECT dlock.try_lock_all(ARRAY['w'], 'r3', '1h', shared => true)}), '',
	'... by try_lock_all too');
is(sql(q{SELECT dlock.try_lock('v', 'r4', '1h', shared => true) IS NOT NULL
           AND dlock.unlock('v', 'r4') = 0}), 't',
	'... but not out of v, which it does not wait for');
is(sql(q{SELECT dlock.try_lock('w', 'r1', '1h', shared => true) IS NOT NULL
           AND dlock.unlock('w', 'r1') = 1}), 't',
	'a reader that shares w already re-enters');
is(sql(q{SELECT dlock.unlock('w', 'r1')}), '0', 'the last reader releases w');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM dlock.locks WHERE holder = 'x' AND mode = 'exclusive'}),
	'the lock_all has both');
is(sql(q{SELECT dlock.unlock_all('x')}), '2', 'x releases both');

# ---- A cancelled wait lets readers in again ----
is(sql(q{SELECT dlock.try_lock('w', 'r1', '1h', shared => true) IS NOT NULL}), 't', 'r1 shares w again');
$x->query_until(qr/waiting/,
	"\\echo waiting\nSELECT dlock.lock_all(ARRAY['w'], 'x', '1h', wait => '60s');\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'w' AND holder = 'x'}),
	'the lock_all waits for w again');
is(sql(q{SELECT dlock.try_lock('w', 'r2', '1h', shared => true)}), '', 'a new reader is kept out');
is(sql(q{SELECT pg_cancel_backend(pid) FROM dlock.waiters WHERE holder = 'x'}), 't',
	'the wait is cancelled');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM dlock.waiters WHERE holder = 'x'}),
	'... and ends');
is(sql(q{SELECT dlock.try_lock('w', 'r2', '1h', shared => true) IS NOT NULL}), 't',
	'a new reader is let in');
is(sql(q{SELECT dlock.unlock('w', 'r1') + dlock.unlock('w', 'r2')}), '0', 'both readers release');
$x->quit;

# ---- Crossing upgrades in lock_all: 40P01, not a hang ----
is(sql(q{SELECT dlock.try_lock('u', 'a', '1h', shared => true) IS NOT NULL
           AND dlock.try_lock('u', 'b', '1h', shared => true) IS NOT NULL}), 't',
	'a and b share u');
my $a = $node->background_psql('postgres', on_error_stop => 0);
$a->query_until(qr/waiting/,
	"\\echo waiting\nSELECT array_length(dlock.lock_all(ARRAY['u'], 'a', '1h', wait => '60s'), 1) AS a_took;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'u' AND holder = 'a'}),
	'a waits in lock_all to upgrade u');
my ($ret, $out, $err) = $node->psql('postgres',
	q{SELECT dlock.lock_all(ARRAY['u', 't'], 'b', '1h', wait => '20s')});
like($err, qr/deadlock detected/, 'b waiting to upgrade u too: deadlock detected');
is(sql(q{SELECT dlock.try_lock('t', 'c', '1h') IS NOT NULL AND dlock.unlock('t', 'c') = 0}), 't',
	'... holding none of its resources');
is(sql(q{SELECT dlock.unlock('u', 'b')}), '0', 'b lets its shared lock go');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM dlock.locks
		   WHERE resource = 'u' AND holder = 'a' AND mode = 'exclusive'}),
	'a has u exclusively');
cmp_ok(sql(q{SELECT dlock.unlock_all('a')}), '>=', 1, 'a releases u');
$a->quit;

# ---- A semaphore's name: an error ----
is(sql(q{SELECT dlock.try_acquire('sem', 'p', 3) IS NOT NULL}), 't', 'p holds a permit of sem');
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT dlock.try_lock_all(ARRAY['z', 'sem'], 'q', '1h')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42809.*held as a semaphore/s, 'try_lock_all on a semaphore: 42809');
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT dlock.lock_all(ARRAY['sem'], 'q', '1h', shared => true, wait => '20s')},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42809.*held as a semaphore/s, 'lock_all on a semaphore: 42809, not a wait');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 'q'}), '0', '... and nothing held');

# ---- Readers in open transactions do not hold off a shared lock_all ----
my $o = $node->background_psql('postgres', on_error_stop => 0);
$o->query_safe(q{BEGIN});
$o->query_safe(q{SELECT dlock.try_lock('sh', 'open', '1h', shared => true)});
is(sql(q{SELECT array_length(dlock.try_lock_all(ARRAY['sh', 'sh2'], 'd', '1h', shared => true), 1)}),
	'2', 'a shared try_lock_all beside a reader in an open transaction');
is(sql(q{SELECT dlock.renew('sh', 'd') IS NOT NULL AND dlock.unlock('sh', 'd') = 0}), 't',
	'... renewed and released meanwhile');
is(sql(q{SELECT dlock.try_lock_all(ARRAY['sh'], 'e', '1h')}), '',
	'an exclusive one is refused');
$o->query_safe(q{COMMIT});
is(sql(q{SELECT dlock.unlock_all('d') + dlock.unlock_all('open')}), '2', 'all released');
$o->quit;

done_testing();
