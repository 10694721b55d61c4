# 067_su_retag_deadlock.pl: a superuser's renew of alice's shared holding
# keeps the resource's lock in SHARE mode and alice's share-row tag to the
# end of its transaction (retag).  Alice's own renew of her holding,
# started meanwhile, must wait for her tag holding nothing of the
# resource: when the superuser's transaction then needs the resource's
# lock in an exclusive mode (break_lock here), it goes through, and
# alice's renew answers NULL (the holding broken), not 40P01.  With the
# retag alone, alice's renew held SHARE while it waited for her tag: a
# deadlock (review of 2026-11-30, attacker's brief, class 4).
# Promises: P4 P5

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('su_retag_deadlock');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.reap_interval = '1h'
deadlock_timeout = '200ms'
});
$node->start;
sub sql { return $node->safe_psql('postgres', $_[0]); }
sql('CREATE EXTENSION dlock');
sql('CREATE ROLE alice LOGIN');

my $r = 'su/break';
my ($ret, $f) = $node->psql('postgres', "SELECT dlock.try_lock('$r', 'a', '1h', shared => true)",
	extra_params => [ '-U', 'alice' ]);
ok($f, "alice holds $r shared as a");

my $su = $node->background_psql('postgres');
$su->query_safe("BEGIN; SELECT dlock.renew('$r', 'a', '2h')");

my $a = $node->background_psql('postgres', extra_params => [ '-U', 'alice' ], on_error_stop => 0);
$a->query_until(qr/started/, "\\echo started\nSET statement_timeout = '10s';\nSELECT coalesce(dlock.renew('$r', 'a')::text, 'lost') AS alice_renew;\n");
ok( $node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
	WHERE query LIKE '%alice_renew%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()}),
	"alice's renew waits for the superuser's open renew of her holding");

my ($ok, $err) = (1, '');
eval { $su->query_safe("SELECT dlock.break_lock('$r')"); 1 } or do { $ok = 0; $err = $@; };
ok($ok, "the superuser's break_lock in that transaction goes through") or diag($err);
$su->query('COMMIT');
$su->quit;

my ($out, $aerr) = $a->query('SELECT 1');
# what alice's renew answered (its output, and its error if any)
my $stderr = $a->{stderr} // '';
unlike($stderr . ($aerr // ''), qr/deadlock detected|40P01/,
	"alice's renew of her own holding does not fail with a deadlock") or diag($stderr);
$a->quit;
is(sql("SELECT count(*) FROM dlock.locks WHERE resource = '$r'"), '0', "the holding is broken");

$node->stop;
done_testing();
