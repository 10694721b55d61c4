# 065_other_role_waits.pl: another role (mallory, with only the rights
# every user has) keeps a transaction open, or prepared, that changes or
# pins only its OWN shared holding or permits of a resource that alice
# also holds.  Alice's own calls on her own holding must not wait for it:
# renew ("waits for a transaction changing this holding"), unlock ("changing
# the same holding, or pins it"), assert_fence ("nothing, but for another
# transaction changing this very holding"), close_session ("transactions
# that acquired in the session ... an assert_fence pin on one of its
# holdings"), and a shared holder's re-entry is not refused because of
# another reader's transaction ("readers never wait for, nor are refused
# because of, each other's transactions", docs/how-it-works.md).  Also
# mallory's own shared holding under alice's holder text (a holding is the
# text and the role, P4), in a transaction open or prepared.  (An open
# acquisition of permits may hold off the other holders: try_acquire.md.)
# Every call of alice runs under statement_timeout: 57014 is the failure.
# And a superuser's unlock of alice's shared holding waits for her open
# renew instead of changing the row under it; but a superuser's renew or
# unlock of alice's shared holding never waits for, nor holds off, another
# reader's transaction (it takes alice's tag, not the resource's lock in
# an exclusive mode as it did until stop 52).
# Found by the review of 2026-11-30 (attacker's brief, classes 2 and 4):
# the share-row tag was keyed by the holder text alone, and unlock_all and
# close_session released shared holdings in CHANGE mode.
# Promises: P5

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('other_role_waits');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
max_prepared_transactions = 10
dlock.reap_interval = '1h'
});
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION dlock');
sql('CREATE ROLE alice LOGIN');
sql('CREATE ROLE mallory LOGIN');

# as: run SQL as role under a 2 s statement_timeout; (stdout, stderr).
sub as
{
	my ($role, $q) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "SET statement_timeout = '2s'; $q",
		extra_params => [ '-U', $role ]);
	return ($out, $err);
}

# answers: alice's call returns in time (no 57014), and gives $want if
# defined; answers_as: the same call as another role ('' for the superuser).
sub answers { return answers_as('alice', @_); }

sub answers_as
{
	my ($role, $q, $want, $name) = @_;
	my ($out, $err);
	if ($role eq '')
	{
		(undef, $out, $err) = $node->psql('postgres', "SET statement_timeout = '2s'; $q");
	}
	else { ($out, $err) = as($role, $q); }
	if ($err =~ /statement timeout/)
	{
		fail("$name: answers in time");
		diag("it waited: $err");
		return;
	}
	if (defined $want) { is($out, $want, "$name: answers in time, $want") or diag($err); }
	else { is($err, '', "$name: answers in time") }
}

# mallory: a session of mallory's own (background psql).
sub mallory
{
	return $node->background_psql('postgres', extra_params => [ '-U', 'mallory' ]);
}

# ---- 1. mallory's open unlock_all / close_session of her own shared holding ----
for my $how ('unlock_all', 'close_session')
{
	my $r = "sh/$how";
	my ($f) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	ok($f, "$how: alice holds $r shared");
	my $m = mallory();
	my $start = $how eq 'unlock_all'
	  ? "SELECT dlock.try_lock('$r', 'm', '1h', shared => true)"
	  : "SELECT dlock.try_lock('$r', session => dlock.open_session('1h', 'm'), shared => true)";
	$m->query_safe($start);
	my $end = $how eq 'unlock_all'
	  ? "SELECT dlock.unlock_all('m')"
	  : "SELECT dlock.close_session(id) FROM dlock.sessions WHERE holder = 'm'";
	$m->query_safe("BEGIN; $end");
	answers("SELECT dlock.renew('$r', 'a') IS NOT NULL", 't',
		"mallory's open $how of her own shared holding: alice's renew");
	answers("SELECT 'pinned' FROM (SELECT dlock.assert_fence('$r', $f)) x", 'pinned',
		"mallory's open $how of her own shared holding: alice's assert_fence");
	answers("SELECT dlock.try_lock('$r', 'a', '1h', shared => true) = $f", 't',
		"mallory's open $how of her own shared holding: alice's re-entry gets her fence");
	answers("SELECT dlock.unlock('$r', 'a') IS NOT NULL", 't',
		"mallory's open $how of her own shared holding: alice's unlock");
	$m->query_safe('ROLLBACK');
	$m->quit;
}

# ---- 2. mallory's open shared acquisition, or pin of her own shared holding ----
# alice holds r in a session and r2 leased (holder 'u'); mallory's
# transaction touches only her own holdings of both.
for my $how ('acquisition', 'pin')
{
	my ($r, $r2) = ("ses/$how", "all/$how");
	my ($sid) = as('alice', "SELECT dlock.open_session('1h', 'a')");
	my ($f) = as('alice', "SELECT dlock.try_lock('$r', session => $sid, shared => true)");
	my ($f2) = as('alice', "SELECT dlock.try_lock('$r2', 'u', '1h', shared => true)");
	ok($f && $f2, "$how: alice holds $r shared in session $sid, $r2 shared as u");
	my $m = mallory();
	if ($how eq 'acquisition')
	{
		$m->query_safe("BEGIN; SELECT dlock.try_lock('$r', 'm', '1h', shared => true),
			dlock.try_lock('$r2', 'm', '1h', shared => true)");
	}
	else
	{
		my $mf = $m->query_safe("SELECT dlock.try_lock('$r', 'm', '1h', shared => true)");
		my $mf2 = $m->query_safe("SELECT dlock.try_lock('$r2', 'm', '1h', shared => true)");
		$m->query_safe("BEGIN; SELECT dlock.assert_fence('$r', $mf), dlock.assert_fence('$r2', $mf2)");
	}
	answers("SELECT dlock.close_session($sid)", '1',
		"mallory's open shared $how of her own: alice's close_session");
	answers("SELECT dlock.unlock_all('u')", '1',
		"mallory's open shared $how of her own: alice's unlock_all");
	$m->query_safe('ROLLBACK');
	$m->quit;
}

# ---- 3. a prepared shared acquisition of mallory's, and her release of
# another of her holdings: that release does not queue behind the prepared
# transaction (it used to wait there in CHANGE mode, and every later call
# on the resource queued behind it), and alice's calls answer.
{
	my $r = 'chain';
	my ($f) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	my $m1 = mallory();
	$m1->query_safe("SELECT dlock.try_lock('$r', 'm2', '1h', shared => true)");
	$m1->query_safe("BEGIN; SELECT dlock.try_lock('$r', 'm1', '1h', shared => true); PREPARE TRANSACTION 'm1'");
	$m1->quit;
	my ($out, $err) = as('mallory', "SELECT dlock.unlock_all('m2')");
	is($out, '1', "mallory's unlock_all('m2') does not wait for her prepared transaction") or diag($err);
	answers("SELECT dlock.renew('$r', 'a') IS NOT NULL", 't',
		"mallory's prepared shared acquisition: alice's renew");
	answers("SELECT 'pinned' FROM (SELECT dlock.assert_fence('$r', $f)) x", 'pinned',
		"mallory's prepared shared acquisition: alice's assert_fence");
	answers("SELECT dlock.try_lock('$r', 'a', '1h', shared => true) = $f", 't',
		"mallory's prepared shared acquisition: alice's re-entry");
	answers("SELECT dlock.unlock('$r', 'a') IS NOT NULL", 't',
		"mallory's prepared shared acquisition: alice's unlock");
	sql("ROLLBACK PREPARED 'm1'");
}

# ---- 4. semaphores: mallory's open release of her own permits, or acquisition ----
for my $how ('unlock_all', 'close_session', 'acquisition')
{
	my $r = "sem/$how";
	my ($f) = as('alice', "SELECT dlock.try_acquire('$r', 'a', 10, 1, '1h')");
	ok($f, "$how: alice holds a permit of $r");
	my $m = mallory();
	if ($how eq 'unlock_all')
	{
		$m->query_safe("SELECT dlock.try_acquire('$r', 'm', 10, 1, '1h')");
		$m->query_safe("BEGIN; SELECT dlock.unlock_all('m')");
	}
	elsif ($how eq 'close_session')
	{
		$m->query_safe("SELECT dlock.try_acquire('$r', 'm', 10, 1, session => dlock.open_session('1h', 'm'))");
		$m->query_safe("BEGIN; SELECT dlock.close_session(id) FROM dlock.sessions WHERE holder = 'm'");
	}
	else
	{
		$m->query_safe("BEGIN; SELECT dlock.try_acquire('$r', 'm', 10, 1, '1h')");
	}
	if ($how ne 'acquisition')
	{
		# (try_acquire.md lets an open acquisition of permits hold off
		# renew, unlock and assert_fence: it takes the resource's lock in
		# CHANGE mode.)
		answers("SELECT 'pinned' FROM (SELECT dlock.assert_fence('$r', $f)) x", 'pinned',
			"mallory's open $how of her own permits: alice's assert_fence");
		answers("SELECT dlock.renew('$r', 'a') IS NOT NULL", 't',
			"mallory's open $how of her own permits: alice's renew");
		answers("SELECT dlock.unlock('$r', 'a') IS NOT NULL", 't',
			"mallory's open $how of her own permits: alice's unlock");
	}
	$m->query_safe('ROLLBACK');
	$m->quit;
}

# ---- 5. mallory's own shared holding under alice's holder text ----
# A holding is the holder text and the role (P4): mallory may hold r
# shared as 'a' beside alice's 'a'.  Her transaction open, or prepared,
# must not hold up alice's renew and unlock of alice's own holding.
for my $how ('open', 'prepared')
{
	my $r = "text/$how";
	my ($f) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	ok($f, "$how: alice holds $r shared as a");
	my $m = mallory();
	my $mf = $m->query_safe("BEGIN; SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	ok($mf && $mf ne $f, "$how: mallory's transaction takes her own shared holding as a");
	if ($how eq 'prepared') { $m->query_safe("PREPARE TRANSACTION 'text'"); }
	answers("SELECT dlock.renew('$r', 'a') IS NOT NULL", 't',
		"mallory's $how shared acquisition as a: alice's renew");
	answers("SELECT 'pinned' FROM (SELECT dlock.assert_fence('$r', $f)) x", 'pinned',
		"mallory's $how shared acquisition as a: alice's assert_fence");
	answers("SELECT dlock.unlock('$r', 'a') IS NOT NULL", 't',
		"mallory's $how shared acquisition as a: alice's unlock");
	if ($how eq 'prepared') { sql("ROLLBACK PREPARED 'text'"); }
	else { $m->query_safe('ROLLBACK'); }
	$m->quit;
}

# ---- 6. a superuser's unlock of alice's shared holding (its tag is alice's,
# not the superuser's): it waits for alice's open renew of it, then
# releases it; nothing is changed twice.
{
	my $r = 'su/unlock';
	my ($f) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	ok($f, "superuser: alice holds $r shared as a");
	my $a = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
	$a->query_safe("BEGIN; SELECT dlock.renew('$r', 'a', '2h')");
	my $su = $node->background_psql('postgres', on_error_stop => 0);
	$su->query_until(qr/started/, "\\echo started\nSELECT dlock.unlock('$r', 'a') AS su_left;\n");
	ok( $node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%su_left%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()}),
		"superuser: the unlock of alice's holding waits for her open renew");
	$a->query_safe('COMMIT');
	$a->quit;
	like($su->query_safe('SELECT 1'), qr/^0\n/m, "superuser: then it releases alice's holding (0 left)");
	$su->quit;
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = '$r'"), '0', "superuser: $r is free");
	my ($f2) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	is(sql("SELECT dlock.renew('$r', 'a', '3h') IS NOT NULL"), 't', "superuser: renews alice's new shared holding");
	is(sql("SELECT dlock.unlock('$r', 'a')"), '0', "superuser: and unlocks it");
}

# ---- 7. a superuser's renew and unlock of alice's shared holding, while
# mallory's transaction renewing her own shared holding is open: neither
# waits; and mallory's renew does not wait for the superuser's open one.
# If alice unlocks first, the superuser's unlock (waiting on her tag)
# finds nothing.
{
	my $r = 'su/readers';
	my ($f) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	ok($f, "superuser readers: alice holds $r shared as a");
	my ($mf) = as('mallory', "SELECT dlock.try_lock('$r', 'm', '1h', shared => true)");
	ok($mf, "superuser readers: mallory holds $r shared as m");
	my $m = mallory();
	$m->query_safe("BEGIN; SELECT dlock.renew('$r', 'm', '2h')");
	answers_as('', "SELECT dlock.renew('$r', 'a', '3h') IS NOT NULL", 't',
		"superuser readers: the superuser's renew of alice's holding, mallory's renew open");
	answers_as('', "SELECT dlock.unlock('$r', 'a')", '0',
		"superuser readers: the superuser's unlock of alice's holding, mallory's renew open");
	$m->query_safe('ROLLBACK');
	($f) = as('alice', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)");
	ok($f, "superuser readers: alice holds $r shared again");
	my $su = $node->background_psql('postgres');
	$su->query_safe("BEGIN; SELECT dlock.renew('$r', 'a', '3h')");
	answers_as('mallory', "SELECT dlock.renew('$r', 'm', '2h') IS NOT NULL", 't',
		"superuser readers: mallory's renew, the superuser's renew of alice's open");
	answers_as('mallory', "SELECT 'pinned' FROM (SELECT dlock.assert_fence('$r', $mf)) x", 'pinned',
		"superuser readers: mallory's assert_fence, the superuser's renew of alice's open");
	$su->query_safe('COMMIT');
	is(sql("SELECT expires_at > now() + interval '2 hours' FROM dlock.locks WHERE resource = '$r' AND holder = 'a'"),
		't', "superuser readers: the superuser's renew of alice's holding took (3 h)");

	my $a = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ]);
	$a->query_safe("BEGIN; SELECT dlock.unlock('$r', 'a')");
	$su->query_until(qr/started/, "\\echo started\nSELECT coalesce(dlock.unlock('$r', 'a')::text, 'none') AS su_left;\n");
	ok( $node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
		WHERE query LIKE '%su_left%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()}),
		"superuser readers: the superuser's unlock waits for alice's open unlock");
	$a->query_safe('COMMIT');
	$a->quit;
	like($su->query_safe('SELECT 1'), qr/^none\n/m,
		"superuser readers: alice's unlock went first, the superuser's finds nothing");
	$su->quit;
	is(sql("SELECT string_agg(holder, ',') FROM dlock.locks WHERE resource = '$r'"), 'm',
		"superuser readers: only mallory's holding is left");
}

$node->stop;
done_testing();
