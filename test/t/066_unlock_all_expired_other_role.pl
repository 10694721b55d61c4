# 066_unlock_all_expired_other_role.pl: unlock_all(holder) releases every
# live holding of the holder taken by the caller's role (unlock_all.md).
# Alice's shared holding of "h" on r1 has expired but is not reaped yet;
# mallory holds "h" on r1 too (a holding is the text and the role).  Alice's
# unlock_all('h') must still release her live holding of "h" on r2, and
# must not fail with 42501 because of mallory's holding: unlock_all never
# touches another role's holdings.  (find_share falls back from the
# caller's own, expired, holding to another role's and raises 42501;
# a superuser's unlock_all skips it since 65bbcdd, but released it before.)
# Found by the adversarial review of 65bbcdd (2026-11-30).
# Promises: P4

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('unlock_all_expired');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.reap_interval = '1h'
});
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
# The cluster's superuser: the user the tests run as (not always "postgres").
my $su = sql('SELECT current_user');
sql('CREATE EXTENSION dlock');
sql('CREATE ROLE alice LOGIN');
sql('CREATE ROLE mallory LOGIN');

sub as
{
	my ($role, $q) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "SET statement_timeout = '5s'; $q",
		extra_params => [ '-U', $role ]);
	return ($ret, $out, $err);
}

is((as('alice', q{SELECT dlock.try_lock('r1', 'h', '1 s', shared => true) IS NOT NULL}))[1],
	't', 'alice: shared h on r1, 1 s lease');
is((as('alice', q{SELECT dlock.try_lock('r2', 'h', '1 min', shared => true) IS NOT NULL}))[1],
	't', 'alice: shared h on r2');
sleep 2;
is((as('mallory', q{SELECT dlock.try_lock('r1', 'h', '1 min', shared => true) IS NOT NULL}))[1],
	't', 'mallory: shared h on r1');
is(sql(q{SELECT count(*) FROM dlock.shares WHERE resource = 'r1' AND owner = 'alice'::regrole AND expires_at <= now()}),
	'1', "alice's expired holding of r1 is not reaped yet");

my ($ret, $out, $err) = as('alice', q{SELECT dlock.unlock_all('h')});
unlike($err, qr/permission denied/, "alice's unlock_all is not refused for mallory's holding");
is($out, '1', "alice's unlock_all releases her live holding of r2");
is(sql(q{SELECT count(*) FROM dlock.shares WHERE resource = 'r2' AND expires_at > now()}),
	'0', 'r2 is free');
is(sql(q{SELECT count(*) FROM dlock.shares WHERE resource = 'r1' AND owner = 'mallory'::regrole AND expires_at > now()}),
	'1', "mallory's holding of r1 stays");

# The superuser: its own expired holding of r3, alice's live one: skipped.
is((as($su, q{SELECT dlock.try_lock('r3', 'h', '1 s', shared => true) IS NOT NULL}))[1],
	't', 'postgres: shared h on r3, 1 s lease');
sleep 2;
is((as('alice', q{SELECT dlock.try_lock('r3', 'h', '1 min', shared => true) IS NOT NULL}))[1],
	't', 'alice: shared h on r3');
is((as($su, q{SELECT dlock.unlock_all('h')}))[1], '0',
	"a superuser's unlock_all does not release alice's holding");
is(sql(q{SELECT count(*) FROM dlock.shares WHERE resource = 'r3' AND owner = 'alice'::regrole AND expires_at > now()}),
	'1', "alice's holding of r3 stays");

$node->stop;
done_testing();
