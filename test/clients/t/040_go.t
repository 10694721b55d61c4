# 040_go.t - the Go client (clients/go) against real servers: its go
# tests (go test -json, -race with the first driver), one ok/not ok line here per Go test, driver
# and edition; go vet; the module built alone offline; the README's quick
# start and the README's other programs run as a user would.
#
# The servers: a throwaway cluster with dlock preloaded (the C extension)
# and pgbouncer in transaction mode in front of it; then the portable
# edition on a second cluster, installed and used by role dbo (no
# superuser), with its own pgbouncer. The drivers: lib/pq, and pgx's
# stdlib where Debian packages it (v4 on bookworm and trixie, v5 later). Offline,
# from Debian's Go sources (/usr/share/gocode) in GOPATH mode, as Debian
# builds its own Go packages. Env: DLOCK_GO (default: go on PATH),
# DLOCK_GO_TESTS (a go test -run pattern), DLOCK_GO_DRIVERS (default
# "pq pgx4 pgx5", those found), DLOCK_GO_RACE=0 (no -race).
# Promises: P16
use strict;
use warnings;

use Cwd qw(abs_path);
use FindBin;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use lib "$FindBin::RealBin/../../perl";
use DlockTest::Bouncer;
use DlockTest::Python;

my $top = abs_path("$FindBin::RealBin/../../..");
my $go = $ENV{DLOCK_GO} // 'go';
my $gocode = '/usr/share/gocode/src';
my $version = `$go version 2>/dev/null` // '';
chomp $version;
plan skip_all => "go is not installed (apt-get install golang-go)" unless $version =~ /go(\d+)\.(\d+)/;
plan skip_all => "go $1.$2 is too old: the client needs 1.19" if $1 == 1 && $2 < 19;
plan skip_all => "lib/pq is not in $gocode (apt-get install golang-github-lib-pq-dev)"
  unless -d "$gocode/github.com/lib/pq";
my $cc = `cc --version 2>/dev/null` // '';
plan skip_all => "no C compiler: go test -race needs cgo (apt-get install build-essential)" unless $cc;

# The drivers to test with: build tag => its source directory.
my %drivers = (pq => "$gocode/github.com/lib/pq",
	pgx4 => "$gocode/github.com/jackc/pgx/v4/stdlib",
	pgx5 => "$gocode/github.com/jackc/pgx/v5/stdlib");
my @drivers = grep { $drivers{$_} && -d $drivers{$_} } split ' ', ($ENV{DLOCK_GO_DRIVERS} || 'pq pgx4 pgx5');
note "$version; drivers: @drivers";
# Drivers named in DLOCK_GO_DRIVERS (.ci/run names them) must be there.
ok($drivers{$_} && -d $drivers{$_}, "driver $_ (DLOCK_GO_DRIVERS) is there") for split ' ', ($ENV{DLOCK_GO_DRIVERS} || '');

my $tmp = abs_path(PostgreSQL::Test::Utils::tempdir());
my $pkg = "$tmp/gopath/src/github.com/dlock-pg/dlock-go";
system('mkdir', '-p', "$tmp/gopath/src/github.com/dlock-pg") == 0 or die;
system('cp', '-r', "$top/clients/go", $pkg) == 0 or die "copying clients/go";
# GOPATH mode: imports resolve in this GOPATH, then in Debian's.
my %goenv = (GO111MODULE => 'off', GOFLAGS => '', GOPROXY => 'off', GOTOOLCHAIN => 'local',
	GOPATH => "$tmp/gopath:/usr/share/gocode", CGO_ENABLED => '1',
	GOCACHE => $ENV{DLOCK_GOCACHE} // (($ENV{HOME} && -w $ENV{HOME}) ? "$ENV{HOME}/.cache/go-build" : "$tmp/gocache"));

# go ARGS: run go in DIR with %goenv and EXTRA env; (ok, output).
sub go
{
	my ($dir, $extra, @args) = @_;
	local @ENV{ keys %goenv } = values %goenv;
	local @ENV{ keys %$extra } = values %$extra;
	my $out = '';
	my $ok = IPC::Run::run([ $go, @args ], '<', \undef, '>&', \$out, init => sub { chdir $dir or die },
		IPC::Run::timeout(1500));
	return ($ok, $out);
}

# The module alone, as a user's go get would build it: no dependency,
# nothing from the network.
{
	system('cp', '-r', "$top/clients/go", "$tmp/module") == 0 or die;
	my ($ok, $out) = go("$tmp/module", { GO111MODULE => 'on', GOFLAGS => '-mod=mod', GOPATH => "$tmp/modpath" },
		'vet', './...');
	ok($ok, 'the module builds and is go vet clean alone (module mode, offline, no dependency)') or diag $out;
}
{
	my $gofmt = `gofmt -l '$top/clients/go' 2>&1`;
	is($gofmt, '', 'gofmt -l clients/go: nothing to reformat');
}
for my $d (@drivers)
{
	my ($ok, $out) = go($pkg, {}, 'vet', '-tags', "dlock_$d", '.');
	ok($ok, "go vet -tags dlock_$d: the library and its tests") or diag $out;
}

# ---------- the servers
my $pg = DlockTest::Python::cluster('go_client');
my $user = getpwuid($<);
my $pgctl = `pg_config --bindir`;
chomp $pgctl;
$pgctl .= '/pg_ctl';
my @editions = ([ 'C extension', $pg, 'postgres', $user, {} ]);
my $pp = DlockTest::Python::portable_clients() ? DlockTest::Python::portable_cluster('go_portable') : undef;
push @editions, [ 'portable', $pp, 'app', 'dbo', { DLOCK_TEST_EDITION => 'portable' } ] if $pp;

for my $e (@editions)
{
	my ($label, $node, $db, $role, $more) = @$e;
	mkdir "$tmp/bouncer-$db";
	my $bport = DlockTest::Bouncer::start($node, "$tmp/bouncer-$db", pool => 2, clients => 100,
		dbname => $db, users => [$role]);
	my $dsn = "host=127.0.0.1 port=" . $node->port . " dbname=$db user=$role sslmode=disable";
	my %env = (%$more,
		DLOCK_TEST_DSN => $dsn,
		DLOCK_TEST_PROXY_TARGET => '127.0.0.1:' . $node->port,
		DLOCK_TEST_PG_CTL => $pgctl, DLOCK_TEST_PG_DATA => abs_path($node->data_dir), DLOCK_TEST_PG_LOG => abs_path($node->logfile),
		PGHOST => '127.0.0.1', PGPORT => $node->port, PGDATABASE => $db, PGUSER => $role, PGSSLMODE => 'disable');
	for my $d (@drivers)
	{
		my %denv = %env;
		# Behind pgbouncer in transaction mode: each statement in one
		# round trip (lib/pq's default parses in one and binds in another,
		# which may reach another server connection); pgx: no prepared
		# statements.
		my $simple = $d eq 'pgx4' ? ' prefer_simple_protocol=true'
		  : $d eq 'pgx5' ? ' default_query_exec_mode=simple_protocol' : ' binary_parameters=yes';
		$denv{DLOCK_TEST_BOUNCER_DSN} = "host=127.0.0.1 port=$bport dbname=$db user=$role sslmode=disable$simple"
		  if $bport;
		gotest("$label, $d", $d, \%denv);
	}
	quickstart($label, \%env, $node, $db);
}

# gotest LABEL DRIVER ENV: go test, one TAP line per Go test.  With the
# race detector for the first driver only: the client's code is the same
# under each, and -race under all three made this file half the CPU of
# the clients part (374 s of 760 s, here), so that on a loaded
# machine (CI's three runs side by side) renewals came too late and the
# timing tests failed.
# -timeout 1200s, as a hang's bound: with 300 s, one driver's 19 tests
# failed in a row in a CI run on a machine loaded 20 deep, as when go
# test stops a run at its -timeout (its output was not kept to show it).
sub gotest
{
	my ($label, $d, $env) = @_;
	my @run = $ENV{DLOCK_GO_TESTS} ? ('-run', $ENV{DLOCK_GO_TESTS}) : ();
	my @race = $d eq $drivers[0] && ($ENV{DLOCK_GO_RACE} // '') ne '0' ? ('-race') : ();
	my ($ok, $out) = go($pkg, $env, 'test', @race, '-json', '-count=1', '-parallel', '16',
		'-timeout', '1200s', '-tags', "dlock_$d", @run, '.');
	my (%output, $seen, $failed);
	my $json = JSON::PP->new;
	for my $line (split /\n/, $out)
	{
		my $ev = eval { $json->decode($line) };
		if (!$ev)
		{
			$output{''} .= "$line\n";
			next;
		}
		my $t = $ev->{Test} // '';
		$output{$t} .= $ev->{Output} if defined $ev->{Output};
		next unless $t && $ev->{Action} =~ /^(pass|fail|skip)$/;
		$seen++;
		if ($1 eq 'skip')
		{
			my ($why) = ($output{$t} // '') =~ /\s+\w+_test\.go:\d+: (.*)/;
		  SKIP: { skip("$label: $t: " . ($why // 'skipped'), 1); }
		}
		elsif (!ok($1 eq 'pass', "$label: $t"))
		{
			$failed++;
			diag($output{$t});
		}
	}
	# go test's -timeout: each test it stopped is a failure above.
	diag("$label: go test ran out of its -timeout (1200 s); the tests it stopped failed")
	  if $out =~ /panic: test timed out after/;
	if (!$seen || (!$ok && !$failed))
	{
		fail("$label: go test ran " . ($seen // 0) . " tests and " . ($ok ? 'passed' : 'failed'));
		diag($out);
	}
}

# quickstart LABEL ENV NODE DB: each ```go block of README.md, a whole
# program, built and run against this server; it must exit 0 and print a
# fence. A block that opens a session is skipped where the server's dlock
# has none.
sub quickstart
{
	my ($label, $env, $node, $db) = @_;
	my $readme = slurp_file("$top/clients/go/README.md");
	my $nosessions = $node->safe_psql($db,
		"SELECT to_regprocedure('dlock.open_session(interval,text)') IS NULL") eq 't';
	my $n = 0;
	while ($readme =~ /^```go\n(.*?)^```$/msg)
	{
		my $code = $1;
		my $what = $n++ ? "README.md's go block $n" : "README.md's quick start";
		if ($code =~ /OpenSession/ && $nosessions)
		{
		  SKIP: { skip("$label: $what: no sessions here: to_regprocedure('dlock.open_session(interval,text)') IS NULL", 1); }
			next;
		}
		my $dir = "$tmp/gopath/src/example.com/readme$n";
		system('mkdir', '-p', $dir) == 0 or die;
		open(my $fh, '>', "$dir/main.go") or die;
		print $fh $code;
		close($fh);
		my ($ok, $out) = go($dir, $env, 'run', '.');
		ok($ok && $out =~ /fence \d+/, "$label: $what runs as written") or diag $out;
	}
	ok($n >= 2, "$label: README.md has its go blocks");
}

$pp->stop if $pp;
$pg->stop;
done_testing();
