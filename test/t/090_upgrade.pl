# 090_upgrade.pl: the upgrade walk.  Install every released version from
# its own script, with locks held, a waiter waiting and fences handed out;
# run the new library under the old SQL (it must keep working until ALTER
# EXTENSION dlock UPDATE); update step by step to the newest; every holding
# and the fences are intact, the next fence is higher, and the schema is the
# one a fresh install of the newest version makes.
# Promises: P1 P7 P8 P17

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

# The versions, oldest first, from the scripts that ship.
my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
my %seen;
for my $f (glob("$sharedir/extension/dlock--*.sql"))
{
	$seen{$1} = 1 if $f =~ /dlock--([0-9.]+)\.sql$/;
	$seen{$2} = 1 if $f =~ /dlock--([0-9.]+)--([0-9.]+)\.sql$/;
}
my @versions = sort {
	my @x = split /\./, $a;
	my @y = split /\./, $b;
	($x[0] <=> $y[0]) || (($x[1] // 0) <=> ($y[1] // 0)) || (($x[2] // 0) <=> ($y[2] // 0))
} keys %seen;
my $newest = $versions[-1];
open(my $ctl, '<', "$sharedir/extension/dlock.control") or die;
my ($default) = grep { defined } map { /^default_version = '(.*)'/ ? $1 : undef } <$ctl>;
close $ctl;
is($newest, $default, "the newest script version ($newest) is the control file's default");
cmp_ok(scalar(@versions), '>=', 2, 'versions to walk: ' . join(' -> ', @versions));

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'walk'
dlock.reap_interval = '100ms'
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE walk');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');

# Install the oldest version and use it with the new library.
$node->safe_psql('walk', "CREATE EXTENSION dlock VERSION '$versions[0]'");
$node->safe_psql('walk', 'CREATE ROLE walker LOGIN');
my $f1 = $node->safe_psql('walk', q{SELECT dlock.try_lock('walk/a', 'ha', '1h')});
my $f2 = $node->safe_psql('walk', q{SELECT dlock.try_lock('walk/b', 'hb', '1h')});
$node->safe_psql('walk', q{SELECT dlock.try_lock('walk/b', 'hb', '1h')});    # count 2
$node->safe_psql('walk', q{SET ROLE walker; SELECT dlock.try_lock('walk/c', 'hc', '1h')});
my $bg = $node->background_psql('walk', on_error_stop => 0);
# The waiter waits up to 600 s: on a loaded machine (CI, trixie) the walk
# took longer than the 60 s it had, and it gave up before the release.
$bg->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock.lock('walk/a', 'waiter', '1h', '600s');\n");
ok($node->poll_query_until('walk', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'walk/a'}),
	'a waiter waits for walk/a');

# Every function of the old SQL works on the new library.
my $old = $versions[0];
is($node->safe_psql('walk', q{SELECT dlock.renew('walk/b', 'hb') IS NOT NULL}), 't', "$old SQL: renew");
is($node->safe_psql('walk', qq{SELECT dlock.check('walk/a', $f1)}), 't', "$old SQL: check");
is($node->safe_psql('walk', qq{BEGIN; SELECT dlock.assert_fence('walk/a', $f1); COMMIT}), '', "$old SQL: assert_fence");
my $f3 = $node->safe_psql('walk', q{SELECT dlock.try_lock('walk/d', 'hd', '1ms')});
cmp_ok($f3, '>', $f2, "$old SQL: fences increase");
is($node->safe_psql('walk', q{SELECT pg_sleep(0.01); SELECT dlock.reap() >= 0}), "\nt", "$old SQL: reap");
is($node->safe_psql('walk', q{SELECT dlock.try_xact_lock('walk/x') IS NOT NULL}), 't', "$old SQL: try_xact_lock");
is($node->safe_psql('walk', q{SELECT dlock.unlock('walk/b', 'hb')}), '1', "$old SQL: unlock of a re-entered holding");
is($node->safe_psql('walk', q{SELECT count(*) FROM dlock.locks}), '3', "$old SQL: dlock.locks");
my $before = $node->safe_psql('walk',
	q{SELECT string_agg(resource || ' ' || holder || ' ' || count || ' ' || fence || ' ' || owner, ', ' ORDER BY resource) FROM dlock.locks});

# Walk every step.
my ($queue, $delay, $leader) = ('', '', '');
my $leader_q = q{SELECT candidate || ' ' || value || ' ' || term FROM dlock.leader('walk/e')};
my $queue_q = q{SELECT string_agg(holder || ':' || position, ' ' ORDER BY position) FROM dlock.queue WHERE resource = 'walk/q'};
my $delay_q = q{SELECT string_agg(resource || ' ' || available_at, ', ') FROM dlock.locks WHERE resource = 'walk/delayed'};
for my $i (1 .. $#versions)
{
	my $v = $versions[$i];
	my $t0 = time;
	$node->safe_psql('walk', "ALTER EXTENSION dlock UPDATE TO '$v'");
	cmp_ok(time - $t0, '<', 120, "the update to $v did not wait for the waiter (600 s)");
	is($node->safe_psql('walk', q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
		$v, "updated to $v");
	is($node->safe_psql('walk',
		q{SELECT string_agg(resource || ' ' || holder || ' ' || count || ' ' || fence || ' ' || owner, ', ' ORDER BY resource) FROM dlock.locks}),
		$before, "$v: every holding intact");
	my $f = $node->safe_psql('walk', "SELECT dlock.try_lock('walk/v$v', 'hv', '1h')");
	cmp_ok($f, '>', $f3, "$v: the next fence is higher than every earlier one");
	$f3 = $f;
	# Under every SQL the library deletes a released resource's row when
	# nothing needs it (issue 25); the next holder's fence is still higher.
	$node->safe_psql('walk', "SELECT dlock.try_lock('walk/r$v', 'hr', '1h'), dlock.unlock('walk/r$v', 'hr')");
	is($node->safe_psql('walk', "SELECT count(*) FROM dlock.leases WHERE resource = 'walk/r$v'"), '0',
		"$v: a released resource keeps no row");
	$f = $node->safe_psql('walk', "SELECT dlock.try_lock('walk/r$v', 'hr', '1h')");
	cmp_ok($f, '>', $f3, "$v: its next holder's fence is higher still");
	$node->safe_psql('walk', "SELECT dlock.unlock('walk/r$v', 'hr')");
	$f3 = $f;

	# From 0.2 on there are queues and lock-delays: every step keeps them.
	if ($queue ne '')
	{
		is($node->safe_psql('walk', $queue_q), $queue, "$v: every queue entry intact");
		is($node->safe_psql('walk', $delay_q), $delay, "$v: every lock-delay intact");
		is($node->safe_psql('walk', $leader_q), $leader, "$v: the leader and its value intact");
		# From 0.3 on a client-side waiter withdraws its ticket.
		if ($node->safe_psql('walk', q{SELECT to_regprocedure('dlock.withdraw(text,text)') IS NOT NULL}) eq 't')
		{
			$node->safe_psql('walk',
				qq{SET dlock.queue_ttl = '1h'; SELECT dlock.try_lock('walk/q', 'q$v', fair => true)});
			is($node->safe_psql('walk', $queue_q), "$queue q$v:3", "$v: a ticket joins the queue");
			is($node->safe_psql('walk', qq{SELECT dlock.withdraw('walk/q', 'q$v')}), 't',
				"$v: withdraw takes it out");
			is($node->safe_psql('walk', $queue_q), $queue, "$v: the queue is as it was");
		}
	}
	elsif ($node->safe_psql('walk', q{SELECT to_regclass('dlock.tickets') IS NOT NULL}) eq 't')
	{
		$node->safe_psql('walk', q{SELECT dlock.try_lock('walk/q', 'hq', '1h')});
		$node->safe_psql('walk', q{SET dlock.queue_ttl = '1h'; SELECT dlock.try_lock('walk/q', 'q1', fair => true)});
		$node->safe_psql('walk', q{SET dlock.queue_ttl = '1h'; SELECT dlock.try_lock('walk/q', 'q2', fair => true)});
		$node->safe_psql('walk', q{SELECT dlock.try_lock('walk/delayed', 'hd', '1h', lock_delay => '10min')});
		$queue = $node->safe_psql('walk', $queue_q);
		$delay = $node->safe_psql('walk', $delay_q);
		is($queue, 'q1:1 q2:2', "$v: a queue forms");
		like($delay, qr/^walk\/delayed \d/, "$v: a lock-delay is recorded");
		# ... and elections, whose leaders carry a value.
		my $term = $node->safe_psql('walk', q{SELECT dlock.campaign('walk/e', 'le', 'where-e', '1h')});
		cmp_ok($term, '>', $f3, "$v: a leader is elected with a higher term");
		$leader = $node->safe_psql('walk', $leader_q);
		is($leader, "le where-e $term", "$v: dlock.leader() shows it with its value");
	}
	# A shared holding taken under the 0.4 SQL is held through the next
	# steps (0.4 -> 0.5 adds the permit columns beside it).
	if ($node->safe_psql('walk', q{SELECT to_regclass('dlock.shares') IS NOT NULL}) eq 't'
		&& $node->safe_psql('walk', q{SELECT count(*) FROM dlock.locks WHERE resource = 'walk/sh'}) eq '0')
	{
		my $sh = $node->safe_psql('walk', q{SELECT dlock.try_lock('walk/sh', 'sh', '1h', shared => true)});
		cmp_ok($sh, '>', $f3, "$v: a shared holding to walk through the next steps");
	}
	# (after this step's new holdings: the next step must keep them all)
	$before = $node->safe_psql('walk',
		q{SELECT string_agg(resource || ' ' || holder || ' ' || count || ' ' || fence || ' ' || owner, ', ' ORDER BY resource) FROM dlock.locks});
}

# From 0.4 on: shared holdings, each with its own fence, beside the
# exclusive holdings that came through the walk (shown with their mode).
if ($node->safe_psql('walk', q{SELECT to_regclass('dlock.shares') IS NOT NULL}) eq 't')
{
	is($node->safe_psql('walk', q{SELECT string_agg(DISTINCT mode, ',') FROM dlock.locks WHERE holder IS NOT NULL AND resource <> 'walk/sh'}),
		'exclusive', "$newest: the walked holdings are exclusive");
	my $s1 = $node->safe_psql('walk', q{SELECT dlock.try_lock('walk/s', 's1', '1h', shared => true)});
	my $s2 = $node->safe_psql('walk', q{SELECT dlock.try_lock('walk/s', 's2', '1h', shared => true)});
	cmp_ok($s1, '>', $f3, "$newest: a shared holding's fence is higher than every earlier one");
	cmp_ok($s2, '>', $s1, "$newest: a second shared holder gets its own, higher fence");
	is($node->safe_psql('walk', q{SELECT string_agg(holder || ' ' || mode, ', ' ORDER BY holder) FROM dlock.locks WHERE resource = 'walk/s'}),
		's1 shared, s2 shared', "$newest: dlock.locks shows both, with their mode");
	is($node->safe_psql('walk', q{SELECT dlock.try_lock('walk/s', 'w', '1h')}), '',
		"$newest: an exclusive request is refused while they share");
	is($node->safe_psql('walk', q{SELECT dlock.unlock_all('s1') + dlock.unlock_all('s2')}), '2',
		"$newest: unlock_all releases shared holdings");
}

# From 0.5 on: semaphores, whose holdings of permits sit beside the shared
# holding that walked through 0.4 -> 0.5.
if ($node->safe_psql('walk', q{SELECT to_regprocedure('dlock.try_acquire(text,text,integer,integer,interval,boolean)') IS NOT NULL}) eq 't')
{
	is($node->safe_psql('walk', q{SELECT holder || ' ' || mode || ' ' || coalesce(permits::text, 'none') FROM dlock.locks WHERE resource = 'walk/sh'}),
		'sh shared none', "$newest: the shared holding taken under 0.4 is there, without permits");
	my $p1 = $node->safe_psql('walk', q{SELECT dlock.try_acquire('walk/p', 'p1', 2, 1, '1h')});
	my $p2 = $node->safe_psql('walk', q{SELECT dlock.try_acquire('walk/p', 'p2', 2, 1, '1h')});
	cmp_ok($p1, '>', $f3, "$newest: a holding of permits gets a higher fence than every earlier one");
	cmp_ok($p2, '>', $p1, "$newest: a second holder of permits gets its own, higher fence");
	is($node->safe_psql('walk', q{SELECT dlock.try_acquire('walk/p', 'p3', 2)}), '',
		"$newest: no more than max_permits");
	is($node->safe_psql('walk', q{SELECT string_agg(holder || ' ' || mode || ' ' || permits, ', ' ORDER BY holder) FROM dlock.locks WHERE resource = 'walk/p'}),
		'p1 semaphore 1, p2 semaphore 1', "$newest: dlock.locks shows the permits");
	is($node->safe_psql('walk', q{SELECT dlock.unlock_all('p1') + dlock.unlock_all('p2') + dlock.unlock_all('sh')}), '3',
		"$newest: unlock_all returns permits and the walked shared holding");
}

# From 0.5 on ([scale]): rows are inserted and deleted, so dlock.leases
# is filled to 100% (reads prune what the releases deleted).
if (grep { $_ eq '0.5' } @versions)
{
	is($node->safe_psql('walk', q{SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'dlock.leases'::regclass}),
		'fillfactor=100', "$newest: dlock.leases has fillfactor 100");
}

# From 0.5 on: several resources at once, beside the walked holdings.
if ($node->safe_psql('walk', q{SELECT to_regprocedure('dlock.try_lock_all(text[],text,interval,boolean)') IS NOT NULL}) eq 't')
{
	is($node->safe_psql('walk', q{SELECT dlock.try_lock_all(ARRAY['walk/m1', 'walk/a'], 'hm', '1h')}), '',
		"$newest: try_lock_all refuses all when a walked holding is among them");
	is($node->safe_psql('walk', q{SELECT count(*) FROM dlock.locks WHERE holder = 'hm'}), '0',
		"$newest: ... and takes none of them");
	is($node->safe_psql('walk',
		qq{SELECT bool_and(f > $f3) AND count(*) = 2 FROM unnest(dlock.lock_all(ARRAY['walk/m1', 'walk/m2'], 'hm', '1h', wait => '10s')) f}),
		't', "$newest: lock_all takes both with higher fences");
	is($node->safe_psql('walk', q{SELECT dlock.unlock_all('hm')}), '2', "$newest: unlock_all releases them");
}

# The waiter is still waiting and gets the lock when it is released.
is($node->safe_psql('walk', q{SELECT dlock.unlock('walk/a', 'ha')}), '0', 'walk/a released after the walk');
ok($node->poll_query_until('walk', q{SELECT holder = 'waiter' FROM dlock.locks WHERE resource = 'walk/a'}),
	'the waiter that waited through the walk holds walk/a');
$bg->quit;
is($node->safe_psql('walk', q{SET ROLE walker; SELECT dlock.unlock('walk/c', 'hc')}), '0',
	"walker's holding is still walker's");

# 0.5 -> 1.0: the waiting calls take wait right after lease.  Under the
# 0.5 SQL the new library keeps the old order (wait last); a holding and a
# waiting lock_all() and acquire() go through the update; after it the new
# order works positionally and the old one is refused.
if ((grep { $_ eq '0.5' } @versions) && (grep { $_ eq '1.0' } @versions))
{
	$node->safe_psql('postgres', 'CREATE DATABASE walk5');
	my $q = sub { $node->safe_psql('walk5', @_) };
	$q->(q{CREATE EXTENSION dlock VERSION '0.5'});
	is($q->(q{SELECT array_length(dlock.lock_all(ARRAY['o/a', 'o/b'], 'ho', '1h', false, '5s'), 1)}), '2',
		'0.5 SQL: lock_all(resources, holder, lease, shared, wait) positionally');
	is($q->(q{SELECT dlock.acquire('o/s', 'ho', 2, 1, '1h', false, '5s') > 0}), 't',
		'0.5 SQL: acquire(..., lease, fair, wait) positionally');
	is($q->(q{SELECT dlock.lock_all(ARRAY['o/a'], 'other', '1h', false, '0') IS NULL}), 't',
		'0.5 SQL: lock_all of a held resource, one try (wait last)');
	is($q->(q{SELECT dlock.acquire('o/s', 'other', 2, 2, '1h', false, '0') IS NULL}), 't',
		'0.5 SQL: acquire of permits not free, one try (wait last)');
	# Waiters across the update: for o/a (held by ho) and for two permits
	# of o/s (ho holds one of two).
	my $wl = $node->background_psql('walk5', on_error_stop => 0);
	$wl->query_until(qr/waiting/,
		"\\echo waiting\nSELECT array_length(dlock.lock_all(ARRAY['o/c', 'o/a'], 'wl', '1h', false, '60s'), 1) AS wl_took;\n");
	my $wa = $node->background_psql('walk5', on_error_stop => 0);
	$wa->query_until(qr/waiting/,
		"\\echo waiting\nSELECT dlock.acquire('o/s', 'wa', 2, 2, '1h', false, '60s') > 0 AS wa_took;\n");
	ok($node->poll_query_until('walk5',
		q{SELECT count(*) = 2 FROM dlock.waiters WHERE holder IN ('wl', 'wa')}),
		'0.5 SQL: a lock_all() and an acquire() wait');
	my $held = q{SELECT string_agg(resource || ' ' || holder || ' ' || fence || ' ' || mode || ' ' || coalesce(permits::text, '-'), ', ' ORDER BY resource, holder) FROM dlock.locks};
	my $before5 = $q->($held);
	# A changed privilege: the functions are created again with the
	# default ones, and the update says so.
	$q->(q{REVOKE EXECUTE ON FUNCTION dlock.lock_all(text[], text, interval, boolean, interval) FROM PUBLIC});
	my ($o5, $e5) = ('', '');
	my $t0 = time;
	$node->psql('walk5', q{ALTER EXTENSION dlock UPDATE TO '1.0'},
		stdout => \$o5, stderr => \$e5, on_error_die => 1);
	cmp_ok(time - $t0, '<', 20, 'the update to 1.0 did not wait for the waiters (60 s)');
	like($e5, qr/WARNING:  privileges of (?:dlock\.)?lock_all\(text\[\],text,interval,boolean,interval\) are reset/,
		'1.0: the update warns that lock_all\'s changed privileges are reset');
	unlike($e5, qr/acquire/, '... and not about acquire, whose privileges were not changed');
	is($q->($held), $before5, '1.0: every holding intact');
	is($q->(q{SELECT count(*) FROM dlock.waiters WHERE holder IN ('wl', 'wa')}), '2',
		'1.0: both still wait');
	is($q->(q{SELECT array_length(dlock.lock_all(ARRAY['o/x', 'o/y'], 'hn', '5s', '5s'), 1)}), '2',
		'1.0 SQL: lock_all(resources, holder, lease, wait) positionally');
	is($q->(q{SELECT dlock.acquire('o/t', 'hn', 2, 1, '1h', '5s') > 0}), 't',
		'1.0 SQL: acquire(..., lease, wait) positionally');
	my ($out, $err) = ('', '');
	$node->psql('walk5', q{SELECT dlock.lock_all(ARRAY['o/z'], 'hn', '1h', false, '5s')},
		stdout => \$out, stderr => \$err);
	like($err, qr/function dlock\.lock_all\(text\[\], unknown, unknown, boolean, unknown\) does not exist/,
		'1.0 SQL: the 0.5 order is refused, not misread');
	# Releases wake the waiters that waited through the update.
	is($q->(q{SELECT dlock.unlock_all('ho')}), '3', '1.0: the 0.5 holdings are released');
	ok($node->poll_query_until('walk5',
		q{SELECT count(*) = 3 FROM dlock.locks WHERE holder IN ('wl', 'wa')}),
		'the lock_all() and acquire() that waited through the update hold');
	is($q->(q{SELECT string_agg(holder || ' ' || coalesce(permits::text, '-'), ', ' ORDER BY resource) FROM dlock.locks WHERE holder IN ('wl', 'wa')}),
		'wl -, wl -, wa 2', 'with what they asked for');
	$wl->quit;
	$wa->quit;
}

# 1.0 -> 1.1 ([sessions]): a session column on every holdings' table and
# dlock.session_rows.  Under the 1.0 SQL the 1.1 library reads and writes
# the tables without that column; after the update the 1.0 holdings are
# leased ones (session NULL), re-entered as such, and sessions work.
if ((grep { $_ eq '1.0' } @versions) && (grep { $_ eq '1.1' } @versions))
{
	$node->safe_psql('postgres', 'CREATE DATABASE walk11');
	my $q = sub { $node->safe_psql('walk11', shift) };
	$q->(q{CREATE EXTENSION dlock VERSION '1.0'});
	my $f10 = $q->(q{SELECT dlock.try_lock('w11/a', 'h10', '1h')});
	$q->(q{SELECT dlock.try_lock('w11/s', 'h10', '1h', shared => true)});
	$q->(q{SELECT dlock.try_acquire('w11/p', 'h10', 3, 2, '1h')});
	is($q->(q{SELECT dlock.try_lock('w11/b', 'h10', '1h') > 0 AND dlock.unlock('w11/b', 'h10') = 0}), 't',
		'1.0 SQL: the 1.1 library acquires and releases');
	my $held = q{SELECT string_agg(resource || ' ' || holder || ' ' || count || ' ' || fence || ' ' || mode, ', ' ORDER BY resource) FROM dlock.locks};
	my $before11 = $q->($held);
	$q->(q{ALTER EXTENSION dlock UPDATE TO '1.1'});
	is($q->($held), $before11, '1.1: every holding intact');
	is($q->(q{SELECT count(*) FROM dlock.locks WHERE session IS NULL}), '3', '1.1: the 1.0 holdings are leased ones');
	is($q->(q{SELECT dlock.try_lock('w11/a', 'h10', '1h')}), $f10, '1.1: a 1.0 holding is re-entered with a lease');
	my $s = $q->(q{SELECT dlock.open_session('1h', 'h10')});
	cmp_ok($s, '>', $f10, '1.1: a session id is above every 1.0 fence');
	my ($rc, $out, $err) = $node->psql('walk11', "SELECT dlock.try_lock('w11/a', session => $s)");
	like($err, qr/holds resource "w11\/a" with a lease of its own/, '1.1: ... and not in a session');
	cmp_ok($q->("SELECT dlock.try_lock('w11/c', session => $s)"), '>', $s, '1.1: an acquisition in a session');
	is($q->("SELECT dlock.keepalive($s) IS NOT NULL"), 't', '1.1: keepalive');
	is($q->("SELECT dlock.close_session($s)"), '1', '1.1: close_session releases its holding');
	is($q->(q{SELECT dlock.unlock_all('h10')}), '3', '1.1: the 1.0 holdings are released');
}

# 1.1 -> 1.2: dlock.fence_epoch.dbrow records the xmin of the database's
# pg_database row with the epoch.  Under the 1.1 SQL the 1.2 library
# writes the row without it; the update keeps that row (dbrow NULL), and
# the first fence after it starts a new epoch, once, to record dbrow (the
# 1.1 test by age missed a frozen row).
if ((grep { $_ eq '1.1' } @versions) && (grep { $_ eq '1.2' } @versions))
{
	$node->safe_psql('postgres', 'CREATE DATABASE walk12');
	my $q = sub { $node->safe_psql('walk12', shift) };
	$q->(q{CREATE EXTENSION dlock VERSION '1.1'});
	my $f11 = $q->(q{SELECT dlock.try_lock('w12/a', 'h11', '1h')});
	is($q->(q{SELECT count(*) FROM dlock.fence_epoch}), '1', '1.1 SQL: the 1.2 library records its epoch');
	$q->(q{ALTER EXTENSION dlock UPDATE TO '1.2'});
	is($q->(q{SELECT dbrow IS NULL FROM dlock.fence_epoch}), 't', '1.2: the 1.1 epoch row is kept, dbrow NULL');
	my $f12 = $q->(q{SELECT dlock.try_lock('w12/b', 'h11', '1h')});
	cmp_ok($f12 >> 22, '>', $f11 >> 22, '1.2: the first fence after the update starts a new epoch, above the last');
	is($q->(q{SELECT e.dbrow = d.xmin::text FROM dlock.fence_epoch e, pg_database d
		WHERE d.datname = current_database()}), 't', "1.2: the new epoch records the database row's xmin");
	my $f13 = $q->(q{SELECT dlock.try_lock('w12/c', 'h11', '1h')});
	cmp_ok($f13, '>', $f12, '1.2: the next fence is higher ...');
	is($f13 >> 22, $f12 >> 22, '1.2: ... in the same epoch (a new backend)');
	is($q->(q{SELECT dlock.unlock_all('h11')}), '3', '1.2: the holdings are released');
}

# The schema is the one a fresh install of the newest version makes.
$node->safe_psql('fresh', 'CREATE EXTENSION dlock');
my @dump = ('pg_dump', '--schema-only', '--no-owner', '-h', $node->host, '-p', $node->port);
my ($walked, $fresh, $err);
IPC::Run::run([ @dump, 'walk' ], '>', \$walked, '2>', \$err) or die $err;
IPC::Run::run([ @dump, 'fresh' ], '>', \$fresh, '2>', \$err) or die $err;
# (pg_dump's \restrict lines carry a random key.)
s/^\\(un)?restrict .*$//mg for ($walked, $fresh);
is($walked, $fresh, 'pg_dump --schema-only after the walk equals a fresh install');
my $cat = q{SELECT string_agg(f, E'\n' ORDER BY f) FROM (
	SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') '
	|| p.provolatile::text || p.proparallel::text || coalesce(array_to_string(p.proacl, ','), '') AS f
	FROM pg_proc p WHERE p.pronamespace = 'dlock'::regnamespace) s};
is($node->safe_psql('walk', $cat), $node->safe_psql('fresh', $cat),
	'functions, volatility, parallel safety and grants match a fresh install');

$node->stop;
done_testing();
