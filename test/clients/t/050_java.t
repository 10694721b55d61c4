# 050_java.t - the Java client (clients/java) against real servers: builds
# it and its JUnit 5 tests with javac alone (clients/java/build.sh, offline,
# from Debian's jars), then runs all the tests in one JVM per edition and
# turns each of their TAP lines into one here.  The editions: a throwaway
# cluster with dlock preloaded (the C extension), pgbouncer in transaction
# pooling in front of it; then the portable edition on a second cluster,
# installed and used by role dbo (no superuser; the OS user is the
# administrator there).  DLOCK_JAVA_TESTS: test classes to run instead of all.
# Promises: P16
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use lib "$FindBin::RealBin/../../perl";
use DlockTest::Bouncer;
use DlockTest::Python;

my $top = abs_path("$FindBin::RealBin/../../..");
my $client = "$top/clients/java";
my $jars = $ENV{DLOCK_JAVA_JARS} // '/usr/share/java';

my $version = `javac -version 2>&1` // '';
plan skip_all => "javac is not installed (apt-get install default-jdk-headless)"
  unless $? == 0 && $version =~ /^javac (\d+)/;
plan skip_all => "javac $1 is too old: the client needs Java 17" if $1 < 17;
for my $jar (qw(postgresql junit-jupiter-api junit-jupiter-engine junit-platform-launcher))
{
	plan skip_all => "$jars/$jar.jar is missing (apt-get install junit5 libpostgresql-jdbc-java)"
	  unless -f "$jars/$jar.jar";
}

my $tmp = abs_path(PostgreSQL::Test::Utils::tempdir());
my %build = (BUILD => "$tmp/build", DLOCK_JAVA_JARS => $jars);
{
	local @ENV{ keys %build } = values %build;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'sh', "$client/build.sh", 'tests' ], '<', \undef, '>', \$out, '2>', \$err);
	ok($ok, "$version: the client and its tests compile (javac --release 17, -Werror)")
	  or BAIL_OUT("clients/java does not build: $out$err");
}

my $user = getpwuid($<);
my @classes = split(' ', $ENV{DLOCK_JAVA_TESTS} // '');

my $pg = DlockTest::Python::cluster('java');
my $bport = DlockTest::Bouncer::start($pg, $tmp, pool => 4, clients => 100);
run_java('C extension: ', PGHOST => '127.0.0.1', PGPORT => $pg->port, PGUSER => $user,
	PGDATABASE => 'postgres', DLOCK_TEST_ADMIN_USER => $user, DLOCK_TEST_PG_CTL => pg_ctl($pg),
	($bport ? (DLOCK_TEST_BOUNCER_PORT => $bport) : ()));
$pg->stop;

if (DlockTest::Python::portable_clients())
{
	my $pp = DlockTest::Python::portable_cluster('java_portable');
	mkdir "$tmp/portable" or die "mkdir $tmp/portable: $!";
	my $pbport = DlockTest::Bouncer::start($pp, "$tmp/portable", pool => 4, clients => 100,
		dbname => 'app', users => ['dbo']);
	run_java('portable: ', PGHOST => '127.0.0.1', PGPORT => $pp->port, PGUSER => 'dbo', PGDATABASE => 'app',
		DLOCK_TEST_ADMIN_USER => $user, DLOCK_TEST_EDITION => 'portable', DLOCK_TEST_PG_CTL => pg_ctl($pp),
		($pbport ? (DLOCK_TEST_BOUNCER_PORT => $pbport) : ()));
	$pp->stop;
}

# pg_ctl NODE: pg_ctl for NODE's server, for the test that stops and starts it.
sub pg_ctl
{
	my ($n) = @_;
	return "pg_ctl -D '" . abs_path($n->data_dir) . "' -l '" . abs_path($n->logfile) . "'";
}

# run_java LABEL ENV: all the tests in one JVM; one ok/not ok here per test.
sub run_java
{
	my ($label, %env) = @_;
	%env = (%build, %env);
	local @ENV{ keys %env } = values %env;
	delete local $ENV{PGSERVICE};
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'sh', "$client/build.sh", 'run', @classes ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(600));
	my $rc = $? >> 8;
	my ($plan, $seen, $failed) = (undef, 0, 0);
	my @lines = split /\n/, $out;
	for (my $i = 0; $i < @lines; $i++)
	{
		my $l = $lines[$i];
		$plan = $1 if $l =~ /^1\.\.(\d+)$/;
		next unless $l =~ /^(not )?ok \d+ - (.*?)(?: # SKIP (.*))?$/;
		my ($not, $desc, $why) = ($1, $2, $3);
		$seen++;
		my @diag;
		push @diag, $lines[ ++$i ] while $i + 1 < @lines && $lines[ $i + 1 ] =~ /^# /;
		if (defined $why)
		{
		  SKIP: { skip "$label$desc: $why", 1; }
			next;
		}
		ok(!$not, "$label$desc") or do { $failed++; diag join("\n", @diag); };
	}
	if (!$seen || !defined $plan || $plan != $seen || ($rc != 0 && !$failed))
	{
		fail("${label}the JVM exited $rc after $seen test(s) of " . ($plan // '?'));
		diag "stdout:\n$out\nstderr:\n$err";
	}
	elsif ($err ne '')
	{
		diag "${label}stderr:\n$err";
	}
}

done_testing();
