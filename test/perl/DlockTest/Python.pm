# DlockTest::Python: the Python client's tests under prove
# (test/clients/t/010_python.t, 020_tooz.t).
#
#   use DlockTest::Python;
#   my $node = DlockTest::Python::cluster('py');   # dlock preloaded, TCP on 127.0.0.1
#   my $pp = DlockTest::Python::portable_cluster('pyp');  # portable edition, role dbo, db app
#   my $venv = DlockTest::Python::venv($tmp);      # undef (skip_all) if impossible
#   DlockTest::Python::pytest($venv, $tmp, \%env, @pytest_args);
#   my $run = DlockTest::Python::pytest_start(...);   # the same, in the background
#   DlockTest::Python::pytest_finish($run);
#
# venv() makes a virtual environment with Debian's packages visible
# (--system-site-packages: psycopg, tooz, pytest) and installs
# clients/python into it offline (pip --no-build-isolation --no-index);
# that install is itself one test.  pytest() runs pytest with a JUnit XML
# report and turns every test case into one ok / not ok / skip line, so
# the counts prove shows are the Python tests' own; with
# local $DlockTest::Python::LABEL = 'x: ' each line's name begins so.

package DlockTest::Python;

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# %TODO_TESTS: test name => [reason, regexp]: a failure of that test whose
# text matches regexp is shown as a TODO (a known bug outside dlock, e.g.
# in tooz's own test), not counted as a failure.
our %TODO_TESTS;
our $TODO;
our $LABEL = '';

my $top = abs_path(dirname(__FILE__) . '/../../..');

# PostgreSQL::Test::Cluster's init() runs pg_regress --config-auth: under
# prove (not make installcheck) nobody has said where it is.
unless ($ENV{PG_REGRESS})
{
	my $pgxs = `pg_config --pgxs`;
	chomp $pgxs;
	$ENV{PG_REGRESS} = dirname(dirname($pgxs)) . '/test/regress/pg_regress';
}

# cluster NAME: a started throwaway cluster with dlock preloaded and
# created in database postgres, listening on 127.0.0.1 too.
sub cluster
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', <<'EOF');
shared_preload_libraries = 'dlock'
listen_addresses = '127.0.0.1'
max_connections = 200
dlock.reap_interval = '200ms'
EOF
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
	return $node;
}

# portable_clients: whether the clients' tests run against the portable
# edition too.  DLOCK_CLIENTS_EDITIONS="c" (.ci/run sets it in its
# Debian roots, whose portable TAP tests cover PostgreSQL 17 and 18) leaves
# it out; the default is "c portable".
sub portable_clients
{
	return ($ENV{DLOCK_CLIENTS_EDITIONS} || 'c portable') =~ /\bportable\b/;
}

# portable_cluster NAME: a started throwaway cluster (127.0.0.1 too) with
# the portable edition, installed as a user would on a managed service:
# by role dbo (no superuser; CREATEROLE, like the services' admin roles,
# for the tests that make a second role), owner of database app.
sub portable_cluster
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', <<'EOF');
listen_addresses = '127.0.0.1'
max_connections = 200
EOF
	$node->start;
	$node->safe_psql('postgres', 'CREATE ROLE dbo LOGIN CREATEROLE; CREATE DATABASE app OWNER dbo');
	my ($out, $err) = ('', '');
	IPC::Run::run(
		[
			'psql', '-XqAt', '-v', 'ON_ERROR_STOP=1', '-h', $node->host, '-p', $node->port,
			'-U', 'dbo', '-d', 'app', '-f', "$top/portable/dlock.sql"
		],
		'<', \undef, '>', \$out, '2>', \$err)
	  or die "installing portable/dlock.sql as dbo failed: $out$err";
	return $node;
}

# venv TMP: the path of a venv with clients/python installed, or undef.
sub venv
{
	my ($tmp) = @_;
	$tmp = abs_path($tmp);
	my $venv = "$tmp/venv";
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'python3', '-m', 'venv', '--system-site-packages', $venv ],
		'>', \$out, '2>', \$err);
	unless ($ok)
	{
		diag("python3 -m venv failed: $out$err");
		return undef;
	}
	# pip builds a local directory in place (build/, *.egg-info): from a
	# copy of clients/python in TMP, so that two tests installing at once
	# (010_python, 020_tooz under prove -j) never share one (forky, CI).
	# Its caches in TMP too.
	local $ENV{PIP_CACHE_DIR} = "$tmp/pip-cache";
	local $ENV{PIP_DISABLE_PIP_VERSION_CHECK} = 1;
	local $ENV{PIP_NO_INPUT} = 1;
	$ok = IPC::Run::run([ 'cp', '-a', "$top/clients/python", "$tmp/python-src" ],
		'>', \$out, '2>', \$err)
	  && IPC::Run::run(
		[
			"$venv/bin/pip", 'install', '--no-build-isolation', '--no-index',
			'--quiet', "$tmp/python-src"
		],
		'>', \$out, '2>', \$err);
	ok($ok, 'pip install --no-build-isolation ./clients/python (offline) into a venv')
	  or diag("$out$err");
	return $ok ? $venv : undef;
}

# pytest VENV TMP ENV ARGS...: run pytest, one TAP line per test case.
# Returns the number of test cases; says the counts with diag().
sub pytest
{
	return pytest_finish(pytest_start(@_));
}

# pytest_start VENV TMP ENV ARGS...: start pytest in the background (two
# may run at once: each has its own --basetemp and report); returns what
# pytest_finish takes.  Its lines are named with $LABEL as it is now.
sub pytest_start
{
	my ($venv, $tmp, $env, @args) = @_;
	$tmp = abs_path($tmp);
	my $id = int(rand(1e9));
	# Output to files, not pipes: a full pipe would stop pytest until
	# pytest_finish reads it, and its leases would run out meanwhile.
	my %run = (xml => "$tmp/junit-$id.xml", out => "$tmp/pytest-$id.out",
		err => "$tmp/pytest-$id.err", label => $LABEL, args => "@args");
	my %saved = %ENV;
	local %ENV = (%saved, %$env,
		PYTHONDONTWRITEBYTECODE => 1,
		XDG_CACHE_HOME => "$tmp/cache",
		HOME => $tmp);
	$run{h} = IPC::Run::start(
		[
			"$venv/bin/python", '-m', 'pytest', '-p', 'no:cacheprovider',
			'-v', '-rs', "--junitxml=$run{xml}", '-o', 'junit_family=xunit1',
			"--basetemp=$tmp/pytest-$id", @args
		],
		'<', \undef, '>', $run{out}, '2>', $run{err},
		# Not from the tree's top: its dlock.so (the extension) would be
		# imported as the Python module dlock.
		init => sub { chdir $tmp or die "chdir $tmp: $!" });
	return \%run;
}

# pytest_finish RUN: wait for a pytest_start, then its TAP lines; returns
# the number of test cases.
sub pytest_finish
{
	my ($run) = @_;
	$run->{h}->finish;
	local $LABEL = $run->{label};
	my ($out, $err, $xml) = (slurp_file($run->{out}), slurp_file($run->{err}), $run->{xml});
	my $junit = -e $xml ? slurp_file($xml) : '';
	my ($n, $pass, $skip, $known, $fail) = (0, 0, 0, 0, 0);
	while ($junit =~ m{<testcase\b([^>]*?)(/>|>(.*?)</testcase>)}gs)
	{
		my ($attrs, $body) = ($1, $3 // '');
		my ($class) = $attrs =~ /classname="([^"]*)"/;
		my ($name) = $attrs =~ /\bname="([^"]*)"/;
		my $label = $LABEL . ($class // '') . '::' . ($name // '?');
		$n++;
		my $todo = $TODO_TESTS{ $name // '' };
		if ($body =~ /<skipped\b[^>]*?message="([^"]*)"/s)
		{
		  SKIP: { skip($LABEL . _unxml($1), 1); }
			$skip++;
		}
		elsif ($body =~ /<(failure|error)\b[^>]*?message="([^"]*)"[^>]*>(.*?)<\/\1>/s
			|| $body =~ /<(failure|error)\b([^>]*)>(.*?)<\/\1>/s)
		{
			my $text = _unxml("$2\n$3");
			local $TODO = ($todo && $text =~ $todo->[1]) ? $todo->[0] : undef;
			fail($label);
			diag($text);
			$TODO ? $known++ : $fail++;
		}
		else
		{
			pass($label);
			$pass++;
		}
	}
	if ($n == 0)
	{
		fail("pytest $run->{args} ran no tests");
		diag("$out$err");
	}
	elsif ($ENV{DLOCK_TEST_VERBOSE})
	{
		note($out);
	}
	diag("${LABEL}pytest $run->{args}: $n tests: $pass passed, $skip skipped, $fail failed"
		  . ($known ? ", $known known failures outside dlock (TODO)" : ''));
	return $n;
}

sub _unxml
{
	my ($s) = @_;
	$s =~ s/&lt;/</g;
	$s =~ s/&gt;/>/g;
	$s =~ s/&quot;/"/g;
	$s =~ s/&#10;/\n/g;
	$s =~ s/&#13;//g;
	$s =~ s/&apos;/'/g;
	$s =~ s/&amp;/&/g;
	return $s;
}

1;
