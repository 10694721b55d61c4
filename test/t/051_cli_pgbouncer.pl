# 051_cli_pgbouncer.pl - the dlock client behind a real pgbouncer in
# transaction pooling mode, where LISTEN/NOTIFY cannot work (each
# transaction may run on another server connection).  The client must
# detect the pooler and poll; the acquisition (BEGIN ... COMMIT) stays on
# one server connection, renewals and releases are autocommit statements.
#
# Runs etcd's counter example (8 processes x 5 runs) through pgbouncer and
# checks the count and that fences strictly increase.  With the server
# gone behind pgbouncer, a waiting run ends when its wait does.  Skipped
# if /usr/sbin/pgbouncer is not installed.
#
# Env: DLOCK_CLI (default $TESTDIR/cli/dlock, else cli/dlock).
# Promises: P1 P2 P15
use strict;
use warnings;

use File::Spec;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Proc;

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => "pgbouncer is not installed ($pgbouncer missing; apt-get install pgbouncer)"
  unless -x $pgbouncer;

my $cli = $ENV{DLOCK_CLI}
  // (defined $ENV{TESTDIR} ? "$ENV{TESTDIR}/cli/dlock" : 'cli/dlock');
$cli = File::Spec->rel2abs($cli);
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;

my $node = PostgreSQL::Test::Cluster->new('cli_pgbouncer');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);






# ---------- pgbouncer in transaction mode in front of the node
my $port = PostgreSQL::Test::Cluster::get_free_port();
my $user = getpwuid($<);
my ($host, $pgport) = ($node->host, $node->port);
{
	open(my $fh, '>', "$tmp/userlist.txt") or die;
	print $fh qq{"$user" ""\n};
	close($fh);
	open($fh, '>', "$tmp/pgbouncer.ini") or die;
	print $fh <<"EOF";
[databases]
postgres = host=$host port=$pgport dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $tmp/userlist.txt
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
logfile = $tmp/pgbouncer.log
pidfile = $tmp/pgbouncer.pid
EOF
	close($fh);
}
my $bouncer = spawn('pgbouncer', cmd => [ $pgbouncer, "$tmp/pgbouncer.ini" ]);
END { kill 'TERM', $bouncer if $bouncer }

my $bconn = "host=127.0.0.1 port=$port dbname=postgres sslmode=disable gssencmode=disable";
{
	my $deadline = time + 60;
	my $up = 0;
	while (time < $deadline)
	{
		my ($out, $err) = ('', '');
		IPC::Run::run([ 'psql', '-X', '-At', '-d', $bconn, '-c', 'SELECT 1' ],
			'>', \$out, '2>', \$err);
		if ($? == 0 && $out eq "1\n") { $up = 1; last }
		usleep(100_000);
	}
	ok($up, 'pgbouncer accepts connections') or BAIL_OUT('pgbouncer did not start: ' . slurp("$tmp/pgbouncer.log"));
}

# Run the CLI to completion through pgbouncer: (exit code, stdout, stderr).
sub cli
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, '-d', $bconn, @args ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return (code_of($?), $out, $err);
}

my ($rc, $out, $err);
($rc, $out, $err) = cli('try', 'pb', '--holder', 'a', '--lease', '30s');
is($rc, 0, 'try through pgbouncer');
like($out, qr/^\d+$/, 'prints the fence');
($rc, $out, $err) = cli('try', 'pb', '--holder', 'b');
is($rc, 75, 'busy through pgbouncer: 75');
($rc, $out, $err) = cli('unlock', 'pb', '--holder', 'a');
is($rc, 0, 'unlock through pgbouncer');

# A waiter through pgbouncer detects the pooler and polls.
$node->safe_psql('postgres', "SELECT dlock.try_lock('pw', 'other', '60s')");
my $w = spawn('waiter', cmd => [ $cli, '-v', '-d', $bconn, 'run', '--wait', '60s', 'pw', '--', 'true' ]);
{
	my $deadline = time + 60;
	usleep(50_000) while time < $deadline && slurp("$tmp/waiter.err") !~ /pooler detected/;
}
like(slurp("$tmp/waiter.err"), qr/connection pooler detected: LISTEN is not usable, polling/,
	'the pooler is detected and the waiter polls');
$node->safe_psql('postgres', "SELECT dlock.unlock('pw', 'other')");
is(wait_exit($w, 30), 0, 'the polling waiter acquires after the release');

# ---------- etcd's counter example through pgbouncer
{
	my $counter = "$tmp/counter";
	my $fences = "$tmp/fences";
	open(my $fh, '>', $counter) or die;
	print $fh "0\n";
	close($fh);
	my $script = 'n=$(cat "$COUNTER"); sleep 0.0$(( $$ % 5 + 1 )); '
	  . 'echo $((n + 1)) > "$COUNTER"; echo "$DLOCK_FENCE" >> "$FENCES"';
	my @pids;
	for my $i (1 .. 8)
	{
		push @pids, spawn("ctr$i",
			cmd => [ 'sh', '-c',
				'for i in 1 2 3 4 5; do "$DLOCK" -v -d "$CONN" run --lease 10s --wait 120s ctr -- sh -c "$SCRIPT" || exit $?; done' ],
			DLOCK => $cli, CONN => $bconn, SCRIPT => $script,
			COUNTER => $counter, FENCES => $fences);
	}
	my @codes = map { wait_exit($_, 300) } @pids;
	is_deeply(\@codes, [ (0) x 8 ], 'all 8 counter loops succeeded through pgbouncer')
	  or diag(join("\n", map { slurp("$tmp/ctr$_.err") } 1 .. 8));
	is(slurp($counter), "40\n", 'counter is exactly 40');
	my @f = split /\n/, slurp($fences);
	is(scalar(@f), 40, '40 fences recorded');
	my $inc = 1;
	for my $i (1 .. $#f) { $inc = 0 unless fence_lt($f[ $i - 1 ], $f[$i]) }
	ok($inc, 'fences strictly increase');
	ok(scalar(grep { slurp("$tmp/ctr$_.err") =~ /pooler detected/ } 1 .. 8) > 0,
		'waiters polled (pooler detected)');
	unlike(join('', map { slurp("$tmp/ctr$_.err") } 1 .. 8), qr/lease .* lost/,
		'no lease was lost');
	is($node->safe_psql('postgres', "SELECT count(*) FROM dlock.locks WHERE resource = 'ctr'"),
		'0', 'nothing left held');
}

# ---------- the server gone behind pgbouncer: every login succeeds and
# every try fails at once.  A run with --wait 3s ends (69) once the wait
# is over, after a bounded number of logins, instead of trying forever.
$node->stop('fast');
{
	my $w3 = spawn('gone', cmd => [ $cli, '-v', '-d', $bconn, 'run', '--wait', '3s', 'pg', '--', 'true' ]);
	is(wait_exit($w3, 90), 69, 'server gone behind pgbouncer: run --wait 3s exits 69');
	like(slurp("$tmp/gone.err"), qr/no try succeeded before the wait ended/, 'and says why');
	my $logins = () = slurp("$tmp/gone.err") =~ /reconnecting/g;
	cmp_ok($logins, '>=', 7, "it reconnected and tried again ($logins times)");
	cmp_ok($logins, '<', 40, 'with growing pauses between tries');
	# One try (--wait 0, and dlock try): a try lost with its connection is
	# tried once more, no more (it made seven).
	for my $how ([ 'run', '--wait', '0', 'pg', '--', 'true' ], [ 'try', 'pg' ])
	{
		my $w0 = spawn('gone0', cmd => [ $cli, '-v', '-d', $bconn, @$how ]);
		is(wait_exit($w0, 90), 69, "server gone behind pgbouncer: $how->[0] with one try exits 69");
		my $n = () = slurp("$tmp/gone0.err") =~ /reconnecting/g;
		cmp_ok($n, '<=', 2, "$how->[0]: one try, tried once more at most ($n reconnections)");
	}
}

kill 'TERM', $bouncer;
wait_exit($bouncer, 30);
$bouncer = undef;
done_testing();
