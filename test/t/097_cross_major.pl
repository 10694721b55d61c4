# 097_cross_major.pl: from an older PostgreSQL major to this one, the two
# ways users upgrade: pg_dump of the old cluster restored into a new one, and
# pg_upgrade of the old cluster in place.  Both with leases held: the
# holdings come across with their fences, owners and leases, their holders
# renew and release them, and every fence handed out afterwards is above
# every fence the old cluster ever handed out (also those after the dump).
#
# Needs the older major installed beside this one, with dlock built for it:
# DLOCK_OLD_PG_MAJOR names it (test/in-root.sh --old-pg 15 sets it up in a
# Debian 13 or forky root, as CI does).  Skipped without it.
# Promises: P1 P17

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Cwd qw(getcwd);

my $old_major = $ENV{DLOCK_OLD_PG_MAJOR} // '';
my $old_install = "/usr/lib/postgresql/$old_major";
plan skip_all => 'no older PostgreSQL major beside this one (DLOCK_OLD_PG_MAJOR; test/in-root.sh --old-pg 15)'
  unless $old_major =~ /^\d+$/ && -x "$old_install/bin/postgres";

my ($new_major) = `pg_config --version` =~ /PostgreSQL (\d+)/;

# old_node NAME: a cluster of the old major with dlock preloaded and a
# history: released holdings, a held one of an ordinary role, a held one of
# the superuser, and an election.  Returns the node and the fence held by
# the role.
sub old_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name, install_path => $old_install);
	# pg_upgrade wants both clusters alike in data checksums, which initdb
	# turns on by default from 18 on.
	$node->init(extra => $new_major >= 18 ? ['--data-checksums'] : []);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
	$node->start;
	like($node->safe_psql('postgres', 'SHOW server_version_num'), qr/^$old_major\d{4}$/,
		"$name runs PostgreSQL $old_major");
	$node->safe_psql('postgres', q{
		CREATE EXTENSION dlock;
		CREATE ROLE regress_app;
		CREATE ROLE regress_other;
		SELECT dlock.try_lock('r' || g, 'h', '1h') FROM generate_series(1, 40) g;
		SELECT dlock.unlock('r' || g, 'h') FROM generate_series(1, 20) g;
		SELECT dlock.try_lock('super-held', 'su', '1h');
		SELECT dlock.campaign('el', 'cand', 'host-a', '1h');
	});
	my $fence = $node->safe_psql('postgres', q{
		SET ROLE regress_app;
		SELECT dlock.try_lock('app', 'app-holder', '1h');
	});
	like($fence, qr/^\d+$/, "$name: regress_app holds 'app' with fence $fence");
	return ($node, $fence);
}

# new_node NAME: a cluster of this major with dlock preloaded, not started.
sub new_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
	return $node;
}

# max_fence NODE: the largest fence the node's database has handed out and
# still shows, and the largest ever, as its sequence says.
sub max_fence
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT max(fence) FROM dlock.locks');
}

# after_upgrade NODE, WHAT, FENCE, MAX_OLD: the holdings came across and
# work, and fences go on above every old one.
sub after_upgrade
{
	my ($node, $what, $fence, $max_old) = @_;
	my $v = $node->safe_psql('postgres', 'SHOW server_version_num');
	unlike($v, qr/^$old_major\d{4}$/, "$what: now PostgreSQL " . int($v / 10000));
	is($node->safe_psql('postgres',
			q{SELECT holder || ' ' || fence || ' ' || owner || ' ' || NOT expired FROM dlock.locks WHERE resource = 'app'}),
		"app-holder $fence regress_app true", "$what: regress_app's holding is there, same fence and owner, live");
	is($node->safe_psql('postgres', "SELECT dlock.check('app', $fence)"), 't',
		"$what: check() accepts its fence");
	is($node->safe_psql('postgres', q{SELECT count(*) FROM dlock.locks WHERE resource LIKE 'r%' AND NOT expired}),
		'20', "$what: the 20 other held leases are there");
	is($node->safe_psql('postgres', q{SELECT candidate || ' ' || value FROM dlock.leader('el')}),
		'cand host-a', "$what: the election's leader and value are there");
	my ($rc, $out, $err) = $node->psql('postgres',
		q{SET ROLE regress_other; SELECT dlock.renew('app', 'app-holder')});
	like($err, qr/permission denied|may not|not allowed|owner/i, "$what: another role may not renew regress_app's holding");
	is($node->safe_psql('postgres',
			q{SET ROLE regress_app; SELECT dlock.renew('app', 'app-holder') > now() + interval '50 minutes'}),
		't', "$what: its holder renews it");
	is($node->safe_psql('postgres', q{SELECT dlock.try_lock('app', 'other', '1m')}), '',
		"$what: nobody else takes it");
	my $new = $node->safe_psql('postgres',
		q{SELECT max(f) FROM (SELECT dlock.try_lock('new' || g, 'n', '1h') AS f FROM generate_series(1, 30) g) s});
	cmp_ok($new, '>', $max_old, "$what: fences handed out now ($new) are above every old one ($max_old)");
	my $taken = $node->safe_psql('postgres', q{SELECT dlock.try_lock('r1', 'n', '1h')});
	cmp_ok($taken, '>', $max_old, "$what: a resource released before the upgrade gets a higher fence");
	is($node->safe_psql('postgres',
			q{SET ROLE regress_app; SELECT dlock.unlock('app', 'app-holder')}), '0',
		"$what: its holder releases it");
	cmp_ok($node->safe_psql('postgres', q{SELECT dlock.try_lock('app', 'other', '1m')}), '>', $new,
		"$what: the next holder's fence is higher still");
	is($node->safe_psql('postgres', q{SELECT dlock.unlock('super-held', 'su')}), '0',
		"$what: the superuser's own holding is released by it");
}

# ---- pg_dump of the old cluster, restored into a new one
{
	my ($old, $fence) = old_node('dump_old');
	my $dump = $old->basedir . '/dlock.sql';
	# The old major's own pg_dump, as a user upgrading that way runs it.
	$old->command_ok([ "$old_install/bin/pg_dump", '-d', $old->connstr('postgres'), '-f', $dump ],
		"pg_dump of PostgreSQL $old_major");
	# Fences handed out after the dump are lost to the restored copy; it must
	# still never repeat or undercut them.
	$old->safe_psql('postgres',
		q{SELECT dlock.try_lock('late' || g, 'h', '1h') FROM generate_series(1, 50) g});
	my $max_old = max_fence($old);
	$old->stop;

	my $new = new_node('dump_new');
	$new->start;
	$new->safe_psql('postgres', 'CREATE ROLE regress_app; CREATE ROLE regress_other');
	$new->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $new->connstr('postgres'), '-f', $dump ],
		'restored into PostgreSQL ' . int($new->safe_psql('postgres', 'SHOW server_version_num') / 10000));
	after_upgrade($new, 'dump and restore', $fence, $max_old);
	$new->stop;
}

# pg_upgrade_ok OLD, NEW, NAME: pg_upgrade from OLD (stopped) to NEW (not
# started); true if it succeeded.
sub pg_upgrade_ok
{
	my ($old, $new, $name) = @_;
	my $cwd = getcwd();
	chdir($new->basedir) or die "chdir: $!";
	my $ok = $new->run_log(
		[
			'pg_upgrade', '--no-sync',
			'-d', $old->data_dir, '-D', $new->data_dir,
			'-b', "$old_install/bin", '-B', $new->config_data('--bindir'),
			'-s', $new->host, '-p', $old->port, '-P', $new->port,
		]);
	chdir($cwd) or die "chdir: $!";
	return $ok;
}

# ---- pg_upgrade of the old cluster
# First without dlock: whether pg_upgrade between these two builds works at
# all.  (Debian's 15.20 records a column option, pg_attver, that forky's
# 18.6 does not know: pg_upgrade from it fails for every table.)
my $control_ok;
{
	my $old = PostgreSQL::Test::Cluster->new('ctl_old', install_path => $old_install);
	$old->init(extra => $new_major >= 18 ? ['--data-checksums'] : []);
	$old->start;
	$old->safe_psql('postgres', 'CREATE TABLE plain (a int); INSERT INTO plain VALUES (1)');
	$old->stop;
	my $new = PostgreSQL::Test::Cluster->new('ctl_new');
	$new->init;
	$control_ok = pg_upgrade_ok($old, $new, 'control');
}
SKIP:
{
	my $why = "pg_upgrade from this PostgreSQL $old_major to $new_major fails for a plain table without dlock "
	  . '(see tmp_check/log/regress_log_097_cross_major): not a dlock matter';
	diag("pg_upgrade part skipped: $why") unless $control_ok;
	skip($why, 1) unless $control_ok;
	my ($old, $fence) = old_node('upg_old');
	my $max_old = max_fence($old);
	$old->stop;
	my $new = new_node('upg_new');
	ok(pg_upgrade_ok($old, $new, 'dlock'), "pg_upgrade from PostgreSQL $old_major with dlock and leases held")
	  or BAIL_OUT('pg_upgrade failed');
	$new->start;
	after_upgrade($new, 'pg_upgrade', $fence, $max_old);
	# The reaper runs in the upgraded cluster: a short lease taken now expires
	# and is reaped.
	$new->safe_psql('postgres', q{SELECT dlock.try_lock('short', 's', '200ms')});
	ok($new->poll_query_until('postgres',
			q{SELECT NOT EXISTS (SELECT FROM dlock.locks WHERE resource = 'short')}),
		'pg_upgrade: the background reaper removes an expired lease');
	$new->stop;
}

done_testing();
