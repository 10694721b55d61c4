# 091_upgrade_catalog.pl: the upgrade walk, step by step, against the
# catalogs.  Install the oldest version, hold locks (one re-entered, one of
# another role), keep a waiter waiting and hand out fences; at every version
# the functions of that version's SQL work on the new library; every
# ALTER EXTENSION dlock UPDATE step leaves every holding, the waiter, the fence
# epoch rows and the fence sequences exactly as they were, and the next fence
# is higher than every earlier one (from 0.1.1 on: in the same epoch).  At
# the end the walked database's extension is the one a fresh CREATE EXTENSION
# of the newest version makes: pg_dump --schema-only --binary-upgrade (which,
# unlike a plain dump, shows every member of the extension: definitions,
# comments, grants), ignoring only OIDs, relfilenodes, frozen xids and
# sequence values; and every member of the extension has a COMMENT.
# (test/t/090_upgrade.pl is the shorter walk that also times each update.)
# Promises: P1 P17

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

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
cmp_ok(scalar(@versions), '>=', 3, 'versions to walk: ' . join(' -> ', @versions));
ok(-f "$sharedir/extension/dlock--$versions[0].sql", "$versions[0] installs from its own script");

my $node = PostgreSQL::Test::Cluster->new('upgrade_catalog');
$node->init;
# The reaper works in another database: nothing in "walk" changes behind the
# test's back.
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
});
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE walk');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('postgres', 'CREATE ROLE walker LOGIN');

sub wq { $node->safe_psql('walk', @_) }

wq("CREATE EXTENSION dlock VERSION '$versions[0]'");
my @fences;
push @fences, wq(q{SELECT dlock.try_lock('walk/a', 'ha', '1h')});
push @fences, wq(q{SELECT dlock.try_lock('walk/b', 'hb', '1h')});
is(wq(q{SELECT dlock.try_lock('walk/b', 'hb', '1h')}), $fences[-1], 're-entry keeps the fence');
push @fences, wq(q{SET ROLE walker; SELECT dlock.try_lock('walk/c', 'hc', '1h')});
my $bg = $node->background_psql('walk', on_error_stop => 0);
$bg->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock.lock('walk/a', 'waiter', '1h', '300s');\n");
ok($node->poll_query_until('walk', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'walk/a'}),
	'a waiter waits for walk/a');

# snapshot_queries: everything an update must leave alone.  Rows of
# dlock.locks (all columns but the computed "expired"), the waiters, the
# epoch tables and the fence sequences of whichever versions exist now.
sub snapshot_queries
{
	my @parts = (
		q{SELECT string_agg(concat_ws(' ', resource, holder, count, fence, lease, acquired_at,
				renewed_at, expires_at, owner), E'\n' ORDER BY resource)
			FROM dlock.locks WHERE resource LIKE 'walk/%'},
		q{SELECT string_agg(concat_ws(' ', pid, resource, holder, waiting_since, wait_deadline), E'\n' ORDER BY pid)
			FROM dlock.waiters});
	# dlock.fence_epoch: the columns 0.1.1 made (1.2 adds dbrow, NULL in
	# the row an earlier version wrote).
	my %rows = ('dlock.epoch' => 'e', 'dlock.fence_epoch' => 'e.one, e.sysid, e.dboid, e.timeline, e.started, e.first_fence');
	for my $t (qw(dlock.epoch dlock.fence_epoch))
	{
		push @parts, "SELECT coalesce(string_agg(($rows{$t})::text, E'\\n'), '(none)') FROM $t e"
		  if wq("SELECT to_regclass('$t') IS NOT NULL") eq 't';
	}
	for my $s (qw(dlock.fence_seq dlock.fences))
	{
		push @parts, "SELECT last_value || ' ' || is_called FROM $s"
		  if wq("SELECT to_regclass('$s') IS NOT NULL") eq 't';
	}
	return @parts;
}

# snapshot QUERIES: their results.
sub snapshot
{
	return join("\n--\n", map { "$_\n" . wq($_) } @_);
}

# exercise V: the functions of version V's SQL work on the new library.
sub exercise
{
	my $v = shift;
	my $f = wq(qq{SELECT dlock.try_lock('ex/$v', 'hx', '1h')});
	cmp_ok($f, '>', $fences[-1], "$v SQL: try_lock hands out a higher fence");
	push @fences, $f;
	is(wq(qq{SELECT dlock.renew('ex/$v', 'hx') > now()}), 't', "$v SQL: renew");
	is(wq(qq{SELECT dlock.check('ex/$v', $f)}), 't', "$v SQL: check");
	is(wq(qq{BEGIN; SELECT dlock.assert_fence('ex/$v', $f); COMMIT}), '', "$v SQL: assert_fence");
	is(wq(qq{SELECT dlock.unlock('ex/$v', 'hx', $f)}), '0', "$v SQL: unlock");
	my $x = wq(qq{SELECT dlock.try_xact_lock('ex/$v/x')});
	cmp_ok($x, '>', $fences[-1], "$v SQL: try_xact_lock hands out a higher fence");
	push @fences, $x;
	is(wq(q{SELECT dlock.reap() >= 0}), 't', "$v SQL: reap");
	is(wq(q{SELECT count(*) FROM dlock.locks WHERE resource LIKE 'walk/%' AND resource <> 'walk/s'}), '3',
		"$v SQL: dlock.locks");
	is(wq(q{SELECT count(*) FROM dlock.stats()}), '1', "$v SQL: stats");
	if (wq(q{SELECT to_regclass('dlock.tickets') IS NOT NULL}) eq 't')
	{
		# Fair queues (0.2); withdraw (0.3), else the ticket is deleted.
		wq(qq{SELECT dlock.try_lock('ex/$v/q', 'hq', '1h')});
		is(wq(qq{SELECT dlock.try_lock('ex/$v/q', 'qw', fair => true) IS NULL}), 't',
			"$v SQL: a fair attempt takes a ticket");
		is(wq(qq{SELECT string_agg(holder || ':' || position, ' ') FROM dlock.queue WHERE resource = 'ex/$v/q'}),
			'qw:1', "$v SQL: dlock.queue lists it");
		if (wq(q{SELECT to_regprocedure('dlock.withdraw(text,text)') IS NOT NULL}) eq 't')
		{
			is(wq(qq{SELECT dlock.withdraw('ex/$v/q', 'qw')}), 't', "$v SQL: withdraw");
			is(wq(qq{SELECT dlock.withdraw('ex/$v/q', 'qw')}), 'f', "$v SQL: withdraw of no ticket");
		}
		else
		{
			wq(qq{DELETE FROM dlock.tickets WHERE resource = 'ex/$v/q'});
		}
		is(wq(qq{SELECT count(*) FROM dlock.queue WHERE resource = 'ex/$v/q'}), '0',
			"$v SQL: the queue is empty again");
		is(wq(qq{SELECT dlock.unlock('ex/$v/q', 'hq')}), '0', "$v SQL: unlock of the queued resource");
	}
	if (wq(q{SELECT to_regclass('dlock.shares') IS NOT NULL}) eq 't')
	{
		# Shared locks (0.4): two holders, each with its own fence.
		my $s1 = wq(qq{SELECT dlock.try_lock('ex/$v/s', 's1', '1h', shared => true)});
		my $s2 = wq(qq{SELECT dlock.try_lock('ex/$v/s', 's2', '1h', shared => true)});
		cmp_ok($s1, '>', $fences[-1], "$v SQL: a shared holding gets a higher fence");
		cmp_ok($s2, '>', $s1, "$v SQL: so does a second shared holder");
		push @fences, $s2;
		is(wq(qq{SELECT dlock.check('ex/$v/s', $s1) AND dlock.check('ex/$v/s', $s2)}), 't',
			"$v SQL: check accepts both fences");
		is(wq(qq{SELECT dlock.unlock('ex/$v/s', 's1') + dlock.unlock('ex/$v/s', 's2')}), '0',
			"$v SQL: unlock of shared holdings");
	}
	if (wq(q{SELECT to_regprocedure('dlock.open_session(interval,text)') IS NOT NULL}) eq 't')
	{
		# Sessions (1.1): one holding in a session, kept alive, closed.
		my $s = wq(qq{SELECT dlock.open_session('1h', 'hs')});
		cmp_ok($s, '>', $fences[-1], "$v SQL: a session id is above every fence before it");
		my $sf = wq(qq{SELECT dlock.try_lock('ex/$v/sess', session => $s)});
		cmp_ok($sf, '>', $s, "$v SQL: a holding in a session gets a higher fence");
		push @fences, $sf;
		is(wq(qq{SELECT dlock.keepalive($s) IS NOT NULL}), 't', "$v SQL: keepalive");
		is(wq(qq{SELECT dlock.close_session($s)}), '1', "$v SQL: close_session");
	}
	if (wq(q{SELECT to_regprocedure('dlock.try_lock_all(text[],text,interval,boolean)') IS NOT NULL}) eq 't')
	{
		# Several resources at once (0.5): all or nothing, fences in order.
		is(wq(qq{SELECT dlock.try_lock_all(ARRAY['ex/$v/m1', 'walk/a'], 'hm', '1h')}), '',
			"$v SQL: try_lock_all refuses all when one is held");
		is(wq(q{SELECT count(*) FROM dlock.locks WHERE holder = 'hm'}), '0',
			"$v SQL: ... and takes none of them");
		my $m = wq(qq{SELECT dlock.lock_all(ARRAY['ex/$v/m2', 'ex/$v/m1'], 'hm', '1h', wait => '10s')});
		my ($m2, $m1) = $m =~ /^\{(\d+),(\d+)\}$/ or fail("$v SQL: lock_all returns two fences: $m");
		cmp_ok($m2 < $m1 ? $m2 : $m1, '>', $fences[-1], "$v SQL: lock_all hands out higher fences");
		push @fences, $m2 > $m1 ? $m2 : $m1;
		is(wq(qq{SELECT dlock.check('ex/$v/m1', $m1) AND dlock.check('ex/$v/m2', $m2)}), 't',
			"$v SQL: the fences come in the order given");
		is(wq(q{SELECT dlock.unlock_all('hm')}), '2', "$v SQL: unlock_all releases them");
	}
	# The waiting calls positionally, in the order of this version's SQL:
	# wait last in 0.5, right after lease from 1.0 on (as in lock()).
	my $old_order = wq(q{SELECT to_regprocedure('dlock.lock_all(text[],text,interval,boolean,interval)') IS NOT NULL}) eq 't';
	my $new_order = wq(q{SELECT to_regprocedure('dlock.lock_all(text[],text,interval,interval,boolean)') IS NOT NULL}) eq 't';
	if ($old_order || $new_order)
	{
		my ($args, $order) = $new_order ? (q{'1h', '5s', false}, 'lease, wait, shared') : (q{'1h', false, '5s'}, 'lease, shared, wait');
		my $m = wq(qq{SELECT dlock.lock_all(ARRAY['ex/$v/o1', 'ex/$v/o2'], 'ho', $args)});
		like($m, qr/^\{\d+,\d+\}$/, "$v SQL: lock_all($order) positionally");
		($args, $order) = $new_order ? (q{'1h', '5s', false}, 'lease, wait, fair') : (q{'1h', false, '5s'}, 'lease, fair, wait');
		my $p = wq(qq{SELECT dlock.acquire('ex/$v/os', 'ho', 2, 1, $args)});
		cmp_ok($p, '>', $fences[-1], "$v SQL: acquire($order) positionally");
		push @fences, $p;
		is(wq(q{SELECT dlock.unlock_all('ho')}), '3', "$v SQL: unlock_all releases them");
	}
	if (wq(q{SELECT to_regprocedure('dlock.try_acquire(text,text,integer,integer,interval,boolean)') IS NOT NULL}) eq 't')
	{
		# Semaphores (0.5): two holders of permits, each with its own fence.
		my $p1 = wq(qq{SELECT dlock.try_acquire('ex/$v/p', 'p1', 3, 2, '1h')});
		my $p2 = wq(qq{SELECT dlock.try_acquire('ex/$v/p', 'p2', 3, 1, '1h')});
		cmp_ok($p1, '>', $fences[-1], "$v SQL: a holding of permits gets a higher fence");
		cmp_ok($p2, '>', $p1, "$v SQL: so does a second holder of permits");
		push @fences, $p2;
		is(wq(qq{SELECT dlock.try_acquire('ex/$v/p', 'p3', 3) IS NULL}), 't',
			"$v SQL: no more than max_permits");
		is(wq(qq{SELECT string_agg(holder || ' ' || mode || ' ' || permits, ', ' ORDER BY holder)
		           FROM dlock.locks WHERE resource = 'ex/$v/p'}),
			'p1 semaphore 2, p2 semaphore 1', "$v SQL: dlock.locks shows the permits");
		is(wq(qq{SELECT dlock.unlock('ex/$v/p', 'p1') + dlock.unlock('ex/$v/p', 'p2')}), '0',
			"$v SQL: unlock returns the permits");
		# The shared holding taken under the 0.4 SQL came through as one.
		is(wq(q{SELECT mode || ' ' || coalesce(permits::text, 'none') FROM dlock.locks WHERE resource = 'walk/s'}),
			'shared none', "$v SQL: the walked shared holding is shared, without permits");
	}
	elsif (wq(q{SELECT to_regclass('dlock.shares') IS NOT NULL}) eq 't'
		&& wq(q{SELECT count(*) FROM dlock.locks WHERE resource = 'walk/s'}) eq '0')
	{
		# A shared holding held through the next updates (0.4 -> 0.5).
		push @fences, wq(q{SELECT dlock.try_lock('walk/s', 'ws', '1h', shared => true)});
	}
}

exercise($versions[0]);
for my $i (1 .. $#versions)
{
	my ($from, $v) = ($versions[ $i - 1 ], $versions[$i]);
	my @queries = snapshot_queries();
	my $before = snapshot(@queries);
	wq("ALTER EXTENSION dlock UPDATE TO '$v'");
	is(wq(q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}), $v, "updated $from -> $v");
	is(snapshot(@queries), $before, "$from -> $v: holdings, the waiter, epoch rows and fence sequences unchanged");
	exercise($v);
	if (wq("SELECT to_regclass('dlock.fence_epoch') IS NOT NULL") eq 't')
	{
		# The fence just drawn belongs to the epoch the row records (an
		# epoch started after 1.2's update records dbrow; nothing was forked
		# or rewound).
		my $epoch = wq(q{SELECT first_fence >> 22 FROM dlock.fence_epoch});
		is($fences[-1] >> 22, $epoch, "$v: the next fence is in the recorded epoch");
	}
}

# After the walk: the waiter waited through every update and takes over.
is(wq(q{SELECT dlock.unlock('walk/b', 'hb')}), '1', 'the re-entered holding still has count 2');
is(wq(q{SELECT dlock.unlock('walk/a', 'ha')}), '0', 'walk/a released after the walk');
ok($node->poll_query_until('walk', q{SELECT holder = 'waiter' FROM dlock.locks WHERE resource = 'walk/a'}),
	'the waiter that waited through the walk holds walk/a');
my $wf = wq(q{SELECT fence FROM dlock.locks WHERE resource = 'walk/a'});
cmp_ok($wf, '>', $fences[-1], "the waiter's fence is above every earlier fence");
$bg->quit;
is(wq(q{SET ROLE walker; SELECT dlock.unlock('walk/c', 'hc')}), '0', "walker's holding is still walker's");

# The walked extension equals a fresh install of the newest version.
$node->safe_psql('fresh', 'CREATE EXTENSION dlock');
is($node->safe_psql('fresh', q{SELECT extversion FROM pg_extension WHERE extname = 'dlock'}),
	$versions[-1], "CREATE EXTENSION installs $versions[-1]");

# schema_dump DB: its schema with every extension member, without what must differ
# between two databases that made the same objects at other times.
sub schema_dump
{
	my $db = shift;
	my ($out, $err);
	IPC::Run::run([ 'pg_dump', '--schema-only', '--binary-upgrade', '-h', $node->host,
			'-p', $node->port, $db ], '>', \$out, '2>', \$err)
	  or die "pg_dump $db: $err";
	$out =~ s/^\\(un)?restrict .*$//mg;                    # a random key
	$out =~ s/^SELECT pg_catalog\.binary_upgrade_set_next_.*$//mg;  # OIDs, relfilenodes
	$out =~ s/^(SELECT pg_catalog\.binary_upgrade_create_empty_extension\(.*?), '\{[0-9,]*\}'/$1, '{OIDS}'/mg;
	$out =~ s/^SET relfrozenxid = '\d+', relminmxid = '\d+'$/SET relfrozenxid = X, relminmxid = X/mg;
	$out =~ s/^WHERE oid = '\d+';$/WHERE oid = OID;/mg;
	$out =~ s/^(SELECT pg_catalog\.setval\('[^']*'), \d+, (true|false)\);$/$1, VALUE);/mg;
	$out =~ s/^--.*$//mg;
	$out =~ s/\n\n+/\n/g;
	return $out;
}
my $walked = schema_dump('walk');
my $fresh = schema_dump('fresh');
like($fresh, qr/^CREATE TABLE dlock\.leases /m, 'the dump shows the extension members');
like($fresh, qr/^COMMENT ON FUNCTION dlock\.try_lock\(/m, 'the dump shows their comments');
like($fresh, qr/^REVOKE ALL ON FUNCTION dlock\.break_lock\(/m, 'the dump shows their grants');
is($walked, $fresh, 'pg_dump --schema-only --binary-upgrade after the walk equals a fresh install');

# The comparison sees a difference in one comment.
wq(q{COMMENT ON FUNCTION dlock.reap() IS 'changed'});
isnt(schema_dump('walk'), $fresh, 'a changed comment makes the dumps differ');
wq(q{COMMENT ON FUNCTION dlock.reap() IS NULL});
isnt(schema_dump('walk'), $fresh, 'a dropped comment makes the dumps differ');

# Every member of the extension, and its schema, has a comment.
my $uncommented = $node->safe_psql('fresh', q{
	SELECT string_agg(o, ', ' ORDER BY o) FROM (
	SELECT pg_describe_object(d.classid, d.objid, d.objsubid) AS o
	  FROM pg_depend d
	 WHERE d.refclassid = 'pg_extension'::regclass
	   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'dlock')
	   AND d.deptype = 'e'
	   AND obj_description(d.objid, (SELECT relname FROM pg_class WHERE oid = d.classid)) IS NULL
	   -- PostgreSQL 17 lists a table's or view's row type and its array type
	   -- as members too; they are described by their relation's comment.
	   AND NOT EXISTS (SELECT FROM pg_type t
	                    WHERE d.classid = 'pg_type'::regclass AND t.oid = d.objid
	                      AND (t.typrelid <> 0
	                           OR EXISTS (SELECT FROM pg_type e WHERE e.oid = t.typelem AND e.typrelid <> 0)))) s});
is($uncommented, '', 'every member of the extension has a COMMENT');
isnt($node->safe_psql('fresh', q{SELECT obj_description('dlock'::regnamespace, 'pg_namespace')}), '',
	'the schema has a COMMENT');

$node->stop;
done_testing();
