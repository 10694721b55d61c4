# 041_sync_standby.pl: with a synchronous standby, an acquisition or
# renewal that returned is on the standby (promise 3), whatever
# synchronous_commit the role or session asks for; a release outside a
# transaction block stays asynchronous.
#
# The standby is named in synchronous_standby_names.  While it is up every
# call returns.  Once it is stopped, try_lock and renew from a role running
# with synchronous_commit = off and from a session with SET
# synchronous_commit = local must wait for it (wait_event SyncRep) instead
# of returning: before the fix they returned at once, because dlock raised
# the C variable without the assign hook that sets the standby wait mode.
# When the standby is back they return, with a fence.
# Promises: P3 P14

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
});
$primary->start;
$primary->safe_psql(
	'postgres', q{
CREATE EXTENSION dlock;
CREATE ROLE lazy LOGIN;
ALTER ROLE lazy SET synchronous_commit = off;
CREATE ROLE eager LOGIN;
ALTER ROLE eager SET synchronous_commit = remote_apply;
-- A function whose SET clause asks for an asynchronous commit.
CREATE FUNCTION public.take_async(r text) RETURNS bigint
  LANGUAGE sql SET synchronous_commit = off
  AS $$ SELECT dlock.try_lock(r, 'h', '1h') $$;
});

$primary->backup('bk');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'bk', has_streaming => 1);
$standby->start;
# init_from_backup names the standby after the node (application_name).
$primary->append_conf('postgresql.conf', q{synchronous_standby_names = 'standby'});
$primary->reload;
ok( $primary->poll_query_until(
		'postgres',
		q{SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'}),
	'the standby is synchronous');

# session: a psql session on the primary as role, named name in
# pg_stat_activity, after running setup.
sub session
{
	my ($role, $name, $setup) = @_;
	my $s = $primary->background_psql(
		'postgres',
		on_error_stop => 0,
		timeout => 300,
		extra_params => [ '-U', $role ]);
	$s->query_safe("SET application_name = '$name'");
	$s->query_safe($setup) if $setup;
	return $s;
}

# The bootstrap superuser is named after the OS user that ran initdb.
my $super = $primary->safe_psql('postgres', 'SELECT current_user');
my $lazy = session('lazy', 'lazy');
my $local = session($super, 'local', 'SET synchronous_commit = local');
is($lazy->query_safe('SHOW synchronous_commit'), 'off', 'role lazy runs with synchronous_commit = off');

# 1. Standby up: everything returns, and what was acquired is on the standby.
like($lazy->query_safe(q{SELECT dlock.try_lock('a', 'h', '1h')}), qr/^\d+$/,
	'standby up: try_lock at synchronous_commit = off returns a fence');
like($local->query_safe(q{SELECT dlock.try_lock('b', 'h', '1h')}), qr/^\d+$/,
	'standby up: try_lock at synchronous_commit = local returns a fence');
like($lazy->query_safe(q{SELECT dlock.try_lock('d', 'h', '1h')}), qr/^\d+$/,
	'standby up: a lease to release later');
like($local->query_safe(q{SELECT dlock.try_lock('e', 'h', '1h')}), qr/^\d+$/,
	'standby up: another lease to release later');
$primary->safe_psql('postgres', q{CREATE TABLE public.writes (x int); SELECT dlock.try_lock('m', 'h', '1h')});
ok( $standby->poll_query_until(
		'postgres', q{SELECT count(*) = 4 FROM dlock.locks WHERE resource IN ('a', 'b', 'd', 'e')}),
	'standby up: the standby has the holdings');

# A role at remote_apply keeps it: the holding is visible on the standby the
# moment try_lock returns.
my $fence = $primary->safe_psql('postgres', q{SELECT dlock.try_lock('c', 'h', '1h')},
	extra_params => [ '-U', 'eager' ]);
like($fence, qr/^\d+$/, 'remote_apply role: try_lock returns a fence');
is($standby->safe_psql('postgres', qq{SELECT dlock.check('c', $fence)}),
	't', 'remote_apply role: the standby shows the holding as soon as try_lock returned');

# 2. Standby down.
$standby->stop;

# A release outside a transaction block commits asynchronously: it returns
# (from the sessions that are about to wait, and from one at the default
# synchronous_commit = on).
is($lazy->query_safe(q{SELECT dlock.unlock('d', 'h')}), '0',
	'standby down: unlock at synchronous_commit = off returns');
is($local->query_safe(q{SELECT dlock.unlock('e', 'h')}), '0',
	'standby down: unlock at synchronous_commit = local returns');
is( $primary->safe_psql(
		'postgres', q{SELECT dlock.unlock('c', 'h')},
		extra_params => [ '-U', 'eager' ],
		timeout => 120),
	'0',
	'standby down: unlock at synchronous_commit = remote_apply returns');

# Acquisitions and renewals wait for the standby.
# And so does a release whose transaction also wrote something else (the
# release may be asynchronous, the other write may not).
my $renewer = session('lazy', 'renewer');
my $setfn = session('lazy', 'setfn');
my $mixed = session($super, 'mixed');
my %calls = (
	lazy => q{SELECT dlock.try_lock('g', 'h', '1h')},
	local => q{SELECT dlock.try_lock('h', 'h', '1h')},
	renewer => q{SELECT dlock.renew('a', 'h') IS NOT NULL},
	setfn => q{SELECT public.take_async('i')},
	mixed => q{WITH w AS (INSERT INTO public.writes VALUES (1) RETURNING x) SELECT dlock.unlock('m', 'h') FROM w},);
my %session = (lazy => $lazy, local => $local, renewer => $renewer, setfn => $setfn, mixed => $mixed);
for my $name (sort keys %calls)
{
	$session{$name}->{stdin} .= "$calls{$name};\n";
	$session{$name}->{run}->pump_nb;
}
ok( $primary->poll_query_until(
		'postgres',
		q{SELECT count(*) = 5 FROM pg_stat_activity
		   WHERE application_name IN ('lazy', 'local', 'renewer', 'setfn', 'mixed')
		     AND wait_event = 'SyncRep'}),
	'standby down: try_lock (off, local, function SET off), renew (off) and a release with another write wait for the standby');
# Still waiting a while later, with nothing returned.
usleep(2_000_000);
for my $name (sort keys %calls)
{
	$session{$name}->{run}->pump_nb;
	is($session{$name}->{stdout}, '', "standby down: $name has not returned");
}
is( $primary->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity
		   WHERE application_name IN ('lazy', 'local', 'renewer', 'setfn', 'mixed')
		     AND wait_event = 'SyncRep'}),
	'5',
	'standby down: all five still wait in SyncRep');

# 3. Standby back: they return.
$standby->start;
like($lazy->query_until(qr/\n/, ''), qr/^\d+\n$/, 'standby back: try_lock (off) returns a fence');
like($local->query_until(qr/\n/, ''), qr/^\d+\n$/, 'standby back: try_lock (local) returns a fence');
is($renewer->query_until(qr/\n/, ''), "t\n", 'standby back: renew (off) returns');
like($setfn->query_until(qr/\n/, ''), qr/^\d+\n$/,
	'standby back: try_lock in a function with SET synchronous_commit = off returns a fence');
is($mixed->query_until(qr/\n/, ''), "0\n", 'standby back: the release with another write returns');
$primary->wait_for_catchup($standby);
is( $standby->safe_psql(
		'postgres',
		q{SELECT string_agg(resource, ',' ORDER BY resource) FROM dlock.locks}),
	'a,b,g,h,i',
	'the standby has exactly the holdings the primary acknowledged');

# The session's own setting is back after each call.
is($lazy->query_safe('SHOW synchronous_commit'), 'off', 'lazy: synchronous_commit is off again');
is($local->query_safe('SHOW synchronous_commit'), 'local', 'local: synchronous_commit is local again');

$_->quit for values %session;
$standby->stop;
$primary->stop;
done_testing();
