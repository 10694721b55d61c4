# 024_guc_sweep.pl: what the caller's own session settings can do to dlock
# (issue 33, "close the class").
#
# Every setting of pg_settings with context 'user' (anyone may SET it) or
# 'superuser' (what ALTER ROLE ... SET by a superuser gives a role's
# sessions: session_replication_role, lc_messages, deadlock_timeout,
# max_stack_depth, ...) is set, one at a time, to unusual values: a boolean both ways, a number at
# its minimum and maximum, every value of an enum, and chosen values of the
# strings (search_path with a schema that plants functions and operators
# under the names dlock's SQL might use, time zones, date styles, ...), plus
# 1 ms timeouts.  Each time, two roles run the core operations in that
# session (try_lock, lock with a wait, renew, unlock, check, assert_fence,
# a shared lock, try_acquire, try_lock_all, lock_all, campaign, xact_lock,
# reap, and a try_lock of a resource another transaction holds).  Then a
# session with normal settings checks the promises:
#   - a call either answers or raises an error with a SQLSTATE that is not
#     an internal error (XX...), and the server does not crash;
#   - what is held is exactly what the answers said was taken (a call that
#     raised left nothing held), counts included;
#   - exclusion: no second holder of an exclusive lock, no permits beyond
#     max_permits; owner rules: another role's unlock or renew of a
#     holding answers no number and no expiry;
#   - never-wait: try_lock of a resource another transaction holds answers
#     NULL (or raises), and a lock() with a 20 ms wait answers NULL;
#   - fences only grow: each acquisition's fence is above every fence seen
#     before it (a re-entry keeps its fence);
#   - once the roles released what they held, the next caller with normal
#     settings is served at once (try_lock under lock_timeout).
# Last, durability: under every synchronous_commit value an acquisition
# that returned survives an immediate stop.
#
# Env: DLOCK_GUC_SEED (the order of the settings; printed).
# Promises: P1 P2 P3 P4 P5 P6 P10

use strict;
use warnings;

use List::Util qw(shuffle);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seed = ($ENV{DLOCK_GUC_SEED} // '') =~ /^(\d+)$/ ? $1 : int(rand(1 << 30));
diag("settings in random order: DLOCK_GUC_SEED=$seed");
srand($seed);

my $node = PostgreSQL::Test::Cluster->new('gucsweep');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
});
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{CREATE EXTENSION dlock});
sql(q{CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN;
	GRANT USAGE ON SCHEMA dlock TO alice, bob;
	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA dlock TO alice, bob;
	GRANT SELECT ON ALL TABLES IN SCHEMA dlock TO alice, bob});

# A schema that plants what an unqualified name in dlock's SQL would find:
# now() in 2000, a max() that is a min(), text = that is always true, a
# timestamptz + that subtracts, a bigint < that is >, hashing and locking
# functions that do nothing, and tables named like dlock's.
sql(q{CREATE SCHEMA evil; GRANT USAGE ON SCHEMA evil TO PUBLIC;
	CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
	CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
	CREATE AGGREGATE evil.max(bigint) (sfunc = int8smaller, stype = bigint);
	CREATE FUNCTION evil.teq(text, text) RETURNS boolean LANGUAGE sql AS $$SELECT true$$;
	CREATE OPERATOR evil.= (leftarg = text, rightarg = text, function = evil.teq);
	CREATE FUNCTION evil.tsplus(timestamptz, interval) RETURNS timestamptz LANGUAGE sql AS $$SELECT $1 OPERATOR(pg_catalog.-) $2$$;
	CREATE OPERATOR evil.+ (leftarg = timestamptz, rightarg = interval, function = evil.tsplus);
	CREATE FUNCTION evil.i8lt(bigint, bigint) RETURNS boolean LANGUAGE sql AS $$SELECT $1 OPERATOR(pg_catalog.>) $2$$;
	CREATE OPERATOR evil.< (leftarg = bigint, rightarg = bigint, function = evil.i8lt);
	CREATE FUNCTION evil.hashtext(text) RETURNS integer LANGUAGE sql AS $$SELECT 0$$;
	CREATE FUNCTION evil.md5(text) RETURNS text LANGUAGE sql AS $$SELECT 'x'$$;
	CREATE FUNCTION evil.pg_advisory_xact_lock(bigint) RETURNS void LANGUAGE sql AS $$SELECT$$;
	CREATE FUNCTION evil.pg_notify(text, text) RETURNS void LANGUAGE sql AS $$SELECT$$;
	CREATE TABLE evil.leases (resource text, holder text); CREATE TABLE evil.tickets (resource text);
	CREATE TABLE evil.shares (resource text); CREATE TABLE evil.delays (resource text);
	GRANT ALL ON ALL TABLES IN SCHEMA evil TO PUBLIC});

# Values of the string settings (and extra ones for numbers).
my %strings = (
	search_path => [ 'evil', 'evil, pg_catalog', 'pg_temp, evil, pg_catalog, dlock', '' ],
	TimeZone => [ 'Pacific/Kiritimati', 'America/St_Johns', '<-14>+14', 'UTC' ],
	DateStyle => [ 'SQL, DMY', 'German', 'Postgres, MDY', 'ISO, YMD' ],
	timezone_abbreviations => [ 'India', 'Australia' ],
	client_encoding => [ 'SQL_ASCII', 'LATIN1' ],
	application_name => [ q{x'y"z;--} . ('a' x 60) ],
	lc_monetary => ['C'], lc_numeric => ['C'], lc_time => ['C'],
	default_text_search_config => ['pg_catalog.simple'],
	default_tablespace => ['pg_default'],
	temp_tablespaces => ['pg_default'],
	default_table_access_method => ['heap'],
);
my %extra = (
	statement_timeout => [1],
	lock_timeout => [1],
	idle_in_transaction_session_timeout => [1],
	idle_session_timeout => [1],
);
# Not settable outside a transaction, or a session's identity.
my %skip = map { $_ => 1 } qw(role session_authorization transaction_isolation
  transaction_read_only transaction_deferrable local_preload_libraries);

my @combos;
for my $row (split /\n/, sql(q{SELECT name, vartype, coalesce(min_val, ''), coalesce(max_val, ''),
		coalesce(array_to_string(enumvals, E'\t'), '') FROM pg_settings WHERE context IN ('user', 'superuser') ORDER BY name}))
{
	my ($name, $type, $min, $max, $enums) = split /\|/, $row, 5;
	next if $skip{$name};
	my @v;
	if ($type eq 'bool') { @v = ('on', 'off') }
	elsif ($type eq 'integer' || $type eq 'real') { @v = ($min, $max) }
	elsif ($type eq 'enum') { @v = split /\t/, $enums }
	elsif ($strings{$name}) { @v = @{ $strings{$name} } }
	push @v, @{ $extra{$name} } if $extra{$name};
	push @combos, [ $name, $_ ] for @v;
}
@combos = shuffle(@combos);
diag(scalar(@combos) . ' settings and values to sweep');

# A resource another transaction holds for the whole sweep.
my $busy = $node->background_psql('postgres', timeout => 3600);
$busy->query_safe(q{BEGIN; SELECT dlock.xact_lock('g/busy')});

# The operations, in a session with the setting; every answer labelled.
sub session_script
{
	my ($p, $name, $value) = @_;
	(my $v = $value) =~ s/'/''/g;
	my $w = q{WHERE resource OPERATOR(pg_catalog.=) '} . "$p/x'";
	return qq{\\set VERBOSITY sqlstate
CREATE TEMP TABLE leases (resource text, holder text);
SET "$name" = '$v';
SET ROLE alice;
SELECT 'X1', dlock.try_lock('$p/x', 'a', '30s');
SELECT 'X2', dlock.lock('$p/x', 'a', '30s', wait => '1s');
SET ROLE bob;
SELECT 'X3', dlock.try_lock('$p/x', 'b', '30s');
SELECT 'X4', dlock.unlock('$p/x', 'a');
SELECT 'X4r', dlock.renew('$p/x', 'a', '30s');
SELECT 'X5', dlock.lock('$p/x', 'b', '30s', wait => '20ms');
SET ROLE alice;
SELECT 'X6', dlock.renew('$p/x', 'a', '30s') IS NOT NULL;
SELECT 'X7', dlock.check('$p/x', (SELECT pg_catalog.max(fence) FROM dlock.locks $w));
SELECT 'X8', dlock.assert_fence('$p/x', (SELECT pg_catalog.max(fence) FROM dlock.locks $w));
SELECT 'X9', dlock.unlock('$p/x', 'a');
SELECT 'S1', dlock.try_lock('$p/s', 'a', '30s', shared => true);
SET ROLE bob;
SELECT 'S2', dlock.try_lock('$p/s', 'b', '30s', shared => true);
SELECT 'M1', dlock.try_acquire('$p/sem', 'b', 2, 1, '30s');
SET ROLE alice;
SELECT 'M2', dlock.try_acquire('$p/sem', 'a', 2, 1, '30s');
SELECT 'M3', dlock.try_acquire('$p/sem', 'c', 2, 1, '30s');
SELECT 'L1', dlock.try_lock_all(ARRAY['$p/m1', '$p/m2'], 'a', '30s');
SELECT 'L2', dlock.lock_all(ARRAY['$p/m3'], 'a', '30s', wait => '1s');
SELECT 'E1', dlock.campaign('$p/e', 'a', 'v', '30s', '0');
BEGIN;
SELECT 'T1', dlock.xact_lock('$p/t');
COMMIT;
SELECT 'B1', dlock.try_lock('g/busy', 'a');
SELECT 'B2', dlock.lock('g/busy', 'a', wait => '20ms');
RESET ROLE;
SELECT 'R1', dlock.reap();
};
}

my @res = qw(x s sem m1 m2 m3 e t);
my $max_fence = 0;    # as a decimal string: fences fit in 63 bits
my (%bad, $n, $ran);
sub fence_gt { my ($a, $b) = @_; return length($a) <=> length($b) || $a cmp $b; }
sub is_fence { return defined $_[0] && $_[0] =~ /^\d+$/; }

# role_switch_cut(SCRIPT, STDERR): the lines of SCRIPT's SET ROLE and RESET
# ROLE that failed.  A 1 ms statement_timeout can cut one on a loaded
# machine (seen in CI: the server logged the error before the statement);
# the calls after it then run as the other role, and the answers cannot
# be judged by who called.
sub role_switch_cut
{
	my ($script, $err) = @_;
	my @lines = split /\n/, $script;
	my @cut;
	while ($err =~ /^psql:[^:\n]*:(\d+): ERROR/mg)
	{
		my $line = $1;
		push @cut, $line if ($lines[ $line - 1 ] // '') =~ /^(?:SET|RESET) ROLE/;
	}
	return join(',', @cut);
}

my $unjudged = 0;
for my $c (@combos)
{
	my ($name, $value) = @$c;
	my $what = "$name = '$value'";
	# A run whose role switch was cut runs again, with new resources.
	my ($p, $ret, $out, $err, $cut);
	for my $try (1 .. 5)
	{
		$p = 'g' . ++$n;
		my $script = session_script($p, $name, $value);
		($ret, $out, $err) = $node->psql('postgres', $script, on_error_stop => 0, timeout => 120);
		$cut = role_switch_cut($script, $err);
		last unless $cut;
		diag("$what: a role switch was cut (script line $cut); run again");
	}
	if ($cut)
	{
		$unjudged++;
		next;
	}
	my %r;
	for (split /\n/, $out) { $r{$1} = $2 if /^([A-Z]\d+r?)\|(.*)$/ }
	my @problems;
	$ran++ if is_fence($r{X1}) && is_fence(($r{L2} // "") =~ s/[{}]//gr) && is_fence($r{E1}) && ($r{B1} // 'x') eq '';
	push @problems, "internal error: $1" if $err =~ /ERROR:\s+(XX\d\d\d)/;
	push @problems, "an error without a SQLSTATE: $1" if $err =~ /^(.*ERROR:\s+(?![0-9A-Z]{5}\b)\S.*)$/m;

	# what the answers say is held
	my $na = grep { is_fence($r{$_}) } qw(X1 X2);
	push @problems, 'a re-entry changed the fence'
	  if is_fence($r{X1}) && is_fence($r{X2}) && $r{X1} ne $r{X2};
	my $nb = grep { is_fence($r{$_}) } qw(X3 X5);
	push @problems, 'two exclusive holders (b took what a held)' if $na && $nb;
	push @problems, "another role's unlock answered a number" if ($r{X4} // '') =~ /^\d+$/;
	push @problems, "another role's renew answered an expiry" if ($r{X4r} // '') ne '';
	push @problems, 'the holder\'s renew failed' if $na && defined $r{X6} && $r{X6} ne 't';
	push @problems, 'check of the current fence is not true' if $na && defined $r{X7} && $r{X7} ne 't';
	push @problems, 'try_lock of a resource held elsewhere answered a fence' if is_fence($r{B1});
	push @problems, 'lock() of a resource held elsewhere answered a fence' if is_fence($r{B2});
	my $a_left = $na - (($r{X9} // '') =~ /^\d+$/ ? 1 : 0);
	my %want = ("x\ta" => $a_left, "x\tb" => ($na ? 0 : $nb),
		"s\ta" => is_fence($r{S1}) ? 1 : 0, "s\tb" => is_fence($r{S2}) ? 1 : 0,
		"sem\tb" => is_fence($r{M1}) ? 1 : 0, "sem\ta" => is_fence($r{M2}) ? 1 : 0,
		"sem\tc" => is_fence($r{M3}) ? 1 : 0,
		"m1\ta" => ($r{L1} // '') =~ /^\{/ ? 1 : 0, "m2\ta" => ($r{L1} // '') =~ /^\{/ ? 1 : 0,
		"m3\ta" => ($r{L2} // '') =~ /^\{/ ? 1 : 0, "e\ta" => is_fence($r{E1}) ? 1 : 0);
	push @problems, 'three permits of a semaphore of two'
	  if $want{"sem\ta"} + $want{"sem\tb"} + $want{"sem\tc"} > 2;

	# fences only grow
	my @fences = grep { is_fence($_) } map { $r{$_} } qw(X1 X3 X5 S1 S2 M1 M2 M3 E1 T1);
	push @fences, $r{X2} if is_fence($r{X2}) && !is_fence($r{X1});
	for my $l (qw(L1 L2)) { push @fences, split /,/, $1 if ($r{$l} // '') =~ /^\{([\d,]+)\}$/ }
	for my $f (@fences)
	{
		push @problems, "fence $f is not above $max_fence" if fence_gt($f, $max_fence) <= 0;
	}

	# The state, with normal settings; then (in the same psql: one psql
	# start less per setting) release, and the next caller with normal
	# settings is served at once.
	my @out = split /\n/, $node->safe_psql('postgres', qq{
		SELECT regexp_replace(resource, '^$p/', '') || E'\\t' || holder, count
		FROM dlock.locks WHERE resource LIKE '$p/%' AND holder IS NOT NULL;
		SET lock_timeout = '5s'; SET statement_timeout = '30s';
		SET ROLE alice; SELECT dlock.unlock_all('a') + dlock.unlock_all('c') >= 0;
		SET ROLE bob; SELECT dlock.unlock_all('b') >= 0; RESET ROLE;
		SELECT count(*) FROM dlock.locks WHERE resource LIKE '$p/%' AND holder IS NOT NULL;
		SELECT count(*) FROM unnest(ARRAY['x', 's', 'm1', 'm2', 'm3', 'e', 't']) r
			WHERE dlock.try_lock('$p/' || r, 'n', '30s') IS NOT NULL;
		SELECT dlock.try_acquire('$p/sem', 'n', 2, 2, '30s') IS NOT NULL;
		SELECT max(fence) FROM dlock.locks WHERE resource LIKE '$p/%';
		SELECT dlock.unlock_all('n')}), -1;
	my ($t1, $t2, $left, $served, $sem, $fmax, $released) = splice(@out, -7);
	my %have;
	for (@out) { my ($k, $cnt) = split /\|/; $have{$k} = $cnt }
	for my $k (sort(keys %want), sort(keys %have))
	{
		my ($w, $h) = ($want{$k} // 0, $have{$k} // 0);
		push @problems, "holding $k: $h held, the answers said $w" if $w != $h;
	}
	push @problems, "$left holdings left after unlock_all" if $left ne '0';
	push @problems, "the next caller got $served of 7 resources at once" if $served ne '7';
	push @problems, 'the next caller did not get the semaphore at once' if $sem ne 't';
	push @problems, "the next caller's fence $fmax is not above $max_fence"
	  if fence_gt($fmax, $max_fence) <= 0;
	$max_fence = $fmax if fence_gt($fmax, $max_fence) > 0;
	for my $f (@fences) { $max_fence = $f if fence_gt($f, $max_fence) > 0 }
	$bad{$what} = join('; ', @problems) if @problems;
}
my @bad = sort keys %bad;
diag("$ran of " . scalar(@combos) . ' sessions took a lock, a lock_all and an election and found the busy resource busy');
cmp_ok($ran, '>', @combos * 3 / 4, 'most settings let the calls run (the sweep is not all errors)');
cmp_ok($unjudged, '<=', 2, "at most 2 settings left unjudged, their role switches cut 5 times ($unjudged)");
diag("$_: $bad{$_}") for @bad;
is(scalar(@bad), 0, scalar(@combos) . ' settings and values: every promise held');
is(sql('SELECT 1'), '1', 'the server is up');
unlike(slurp_file($node->logfile), qr/TRAP:|PANIC:|was terminated by signal/,
	'no assertion failure, panic or crash in the log');
$busy->query_safe('COMMIT');
$busy->quit;

# Durability: an acquisition that returned survives an immediate stop,
# whatever synchronous_commit the session asks for.
my @sc = split /\t/, sql(q{SELECT array_to_string(enumvals, E'\t') FROM pg_settings WHERE name = 'synchronous_commit'});
for my $v (@sc)
{
	my $f = $node->safe_psql('postgres', qq{SET synchronous_commit = '$v'; SELECT dlock.try_lock('dur/$v', 'h', '1h')});
	my $g = $node->safe_psql('postgres', qq{SET synchronous_commit = '$v';
		BEGIN; SELECT dlock.try_lock('dur/$v/tx', 'h', '1h'); COMMIT;});
	$node->stop('immediate');
	$node->start;
	is(sql(qq{SELECT string_agg(fence::text, ',' ORDER BY resource) FROM dlock.locks WHERE resource LIKE 'dur/$v%'}),
		"$f,$g", "synchronous_commit = $v: both acquisitions survive an immediate stop");
}

$node->stop;
done_testing();
