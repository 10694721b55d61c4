# 030_node.t - the Node.js client (clients/node) against a real server:
# runs its node:test files (clients/node/test/*.test.js) with node's TAP
# reporter, one node process per file, and turns each of their top-level
# tests into one ok/not ok line here, so that the counts are node's.
#
# The servers: a throwaway cluster with dlock preloaded (the C extension),
# another with the portable edition (portable/dlock.sql, installed and used
# by a role that is no superuser); each file runs against both.  pgbouncer
# in transaction pooling in front of both (its tests are skipped without
# /usr/sbin/pgbouncer).  The npm packages (pg; typescript, @types/node and
# @types/pg for the type check) come from DLOCK_NODE_MODULES (default
# /var/cache/dlock-npm/node_modules, filled by test/clients/node-deps.sh).
#
# Env: DLOCK_NODE (default: node on PATH), DLOCK_NODE_MODULES,
# DLOCK_NODE_TESTS (test files to run instead of all).
# Promises: P16
use strict;
use warnings;

use File::Basename;
use File::Spec;
use FindBin;
use IPC::Run;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use lib "$FindBin::RealBin/../../perl";
use DlockTest::Python;

my $top = File::Spec->rel2abs("$FindBin::RealBin/../../..");
my $client = "$top/clients/node";
my $modules = $ENV{DLOCK_NODE_MODULES} // '/var/cache/dlock-npm/node_modules';
my $node = $ENV{DLOCK_NODE} // 'node';

my $version = `$node --version 2>/dev/null` // '';
chomp $version;
plan skip_all => "node is not installed (apt-get install nodejs)" unless $version =~ /^v(\d+)/;
plan skip_all => "node $version is too old: the client needs 18 or later" if $1 < 18;
plan skip_all => "pg is not in $modules (bash test/clients/node-deps.sh)" unless -d "$modules/pg";

my @files = $ENV{DLOCK_NODE_TESTS} ? split(' ', $ENV{DLOCK_NODE_TESTS})
  : sort glob("$client/test/*.test.js");
die "no test files in $client/test" unless @files;

# PostgreSQL::Test::Cluster runs pg_regress --config-auth: outside PGXS's
# prove_installcheck, say where it is.
if (!$ENV{PG_REGRESS})
{
	my $pg_config = $ENV{PG_CONFIG} // 'pg_config';
	my $pgxs = `$pg_config --pgxs`;
	chomp $pgxs;
	$pgxs =~ s{/src/makefiles/pgxs\.mk$}{};
	$ENV{PG_REGRESS} = "$pgxs/src/test/regress/pg_regress";
}

my $pg = PostgreSQL::Test::Cluster->new('node_client');
$pg->init;
$pg->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\nmax_connections = 100\n");
$pg->start;
$pg->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $user = getpwuid($<);

# The portable edition: another cluster, installed and used by a role that
# owns its database and is no superuser.
my $pp = PostgreSQL::Test::Cluster->new('node_portable');
$pp->init;
$pp->start;
$pp->safe_psql('postgres', "CREATE ROLE dbo LOGIN; CREATE DATABASE app OWNER dbo");
system('psql', '-XqAt', '-v', 'ON_ERROR_STOP=1', '-h', $pp->host, '-p', $pp->port,
	'-U', 'dbo', '-d', 'app', '-o', '/dev/null', '-f', "$top/portable/dlock.sql") == 0
  or die "installing portable/dlock.sql failed";

# ---------- pgbouncer in transaction mode in front of the cluster
my $pgbouncer = '/usr/sbin/pgbouncer';
my ($bport, $bouncer);
my $tmp = PostgreSQL::Test::Utils::tempdir();
if (-x $pgbouncer)
{
	$bport = PostgreSQL::Test::Cluster::get_free_port();
	my ($host, $port) = ($pg->host, $pg->port);
	open(my $fh, '>', "$tmp/userlist.txt") or die;
	print $fh qq{"$user" ""\n"dbo" ""\n};
	close($fh);
	open($fh, '>', "$tmp/pgbouncer.ini") or die;
	print $fh <<"INI";
[databases]
postgres = host=$host port=$port dbname=postgres
app = host=@{[ $pp->host ]} port=@{[ $pp->port ]} dbname=app

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bport
unix_socket_dir =
auth_type = trust
auth_file = $tmp/userlist.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 200
logfile = $tmp/pgbouncer.log
pidfile = $tmp/pgbouncer.pid
INI
	close($fh);
	$bouncer = IPC::Run::start([ $pgbouncer, "$tmp/pgbouncer.ini" ],
		'>', "$tmp/pgbouncer.out", '2>&1');
	my $up = 0;
	for (1 .. 100)
	{
		if (system("psql -XAtq -h 127.0.0.1 -p $bport -d postgres -c 'SELECT 1' >/dev/null 2>&1") == 0)
		{
			$up = 1;
			last;
		}
		select(undef, undef, undef, 0.1);
	}
	die "pgbouncer did not start: " . slurp_file("$tmp/pgbouncer.out") unless $up;
}
END { local $?; $bouncer->kill_kill if $bouncer }

my @editions = (
	[ 'C extension', PGHOST => $pg->host, PGPORT => $pg->port, PGUSER => $user, PGDATABASE => 'postgres',
	  DLOCK_TEST_ELECTIONS => 'required', DLOCK_TEST_PG_CTL => pg_ctl($pg) ],
	[ 'portable', PGHOST => $pp->host, PGPORT => $pp->port, PGUSER => 'dbo', PGDATABASE => 'app',
	  DLOCK_TEST_PG_CTL => pg_ctl($pp) ],
);
note "node $version; pgbouncer " . ($bport ? "on port $bport" : "not installed");
pop @editions unless DlockTest::Python::portable_clients();
for my $edition (@editions)
{
	my ($label, %pgenv) = @$edition;
	my %env = (
		DLOCK_TEST_ELECTIONS => '',
		%pgenv,
		NODE_PATH => $modules,
		DLOCK_NODE_MODULES => $modules,
		($bport ? (DLOCK_TEST_BOUNCER_PORT => $bport) : ()),
	);
	local @ENV{ keys %env } = values %env;
	delete local $ENV{PGSERVICE};
	run_files($label);
}

# pg_ctl NODE: pg_ctl for NODE's server, for the tests that stop and start it.
sub pg_ctl
{
	my ($n) = @_;
	return "pg_ctl -D '" . $n->data_dir . "' -l '" . $n->logfile . "'";
}

# run_files LABEL: each test file in a node process of its own (its tests
# are then top-level TAP lines, on node 18 as on 20 and later); one ok/not
# ok here per node test.
sub run_files
{
	my ($label) = @_;
	for my $file (@files)
	{
		# the type check does not depend on the server
		next if $label ne 'C extension' && basename($file) eq 'types.test.js';
		my $name = "$label: " . basename($file);
		my ($out, $err) = ('', '');
		IPC::Run::run([ $node, '--test-reporter=tap', $file ], '<', \undef,
			'>', \$out, '2>', \$err, IPC::Run::timeout(600));
		my $rc = $? >> 8;
		my ($plan, $seen, $failed) = (undef, 0, 0);
		my @lines = split /\n/, $out;
		for (my $i = 0; $i < @lines; $i++)
		{
			my $l = $lines[$i];
			$plan = $1 if $l =~ /^1\.\.(\d+)$/;
			next unless $l =~ /^(not )?ok \d+ - (.*?)(?: # (SKIP|TODO)\b ?(.*))?$/;
			my ($not, $desc, $dir, $why) = ($1, $2, $3, $4);
			$seen++;
			# the YAML block below a test: its diagnostics
			my @diag;
			push @diag, $lines[ ++$i ] while $i + 1 < @lines && $lines[ $i + 1 ] =~ /^\s/;
			if ($dir && $dir eq 'SKIP')
			{
			  SKIP: { skip "$name: $desc: " . ($why // ''), 1; }
				next;
			}
			ok(!$not, "$name: $desc") or do { $failed++; diag join("\n", @diag); };
		}
		# A file that died before reporting, or reported fewer tests than
		# it planned, fails once more.
		if (!$seen || !defined $plan || $plan != $seen || ($rc != 0 && !$failed))
		{
			fail("$name: node exited $rc after $seen test(s) of " . ($plan // '?'));
			diag "stdout:\n$out\nstderr:\n$err";
		}
		elsif ($err ne '')
		{
			diag "$name: stderr:\n$err";
		}
	}
}

$pg->stop;
$pp->stop;
done_testing();
