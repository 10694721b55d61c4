# 053_cli_fair.pl - "dlock run --fair", "dlock lock --fair" and
# --lock-delay: the CLI as a client-side fair waiter.
#
# A client-side ticket lives in dlock.tickets, so the CLI must commit its
# failed fair attempts and retry within dlock.queue_ttl, or it loses its
# place.  With queue_ttl at 600 ms (shorter than the CLI's 1 s LISTEN
# recheck), eight "dlock run --fair" waiters (listening, polling, and
# through a real pgbouncer in transaction mode) keep their tickets for
# seconds and run exactly in arrival order; a waiter that gives up (--wait)
# is out of the queue within queue_ttl; a plain (unfair) newcomer runs only
# after the queue is empty; "--wait 0" takes no ticket.  Lock-delay: a
# holding taken with --lock-delay that expires keeps the resource from
# others until expiry + delay, and a waiting "dlock lock" takes it then; a
# clean release frees at once.  Usage errors exit 64, a delay over 1 h is
# refused by the server (exit 69), and --fair is refused for MySQL URLs.
# Promises: P7 P15
use strict;
use warnings;

use DBI;
use File::Spec;
use IPC::Run;
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Proc;
use DlockTest::Bouncer;

my $cli = $ENV{DLOCK_CLI}
  // (defined $ENV{TESTDIR} ? "$ENV{TESTDIR}/cli/dlock" : 'cli/dlock');
$cli = File::Spec->rel2abs($cli);
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;

my $TTL = 0.6;    # dlock.queue_ttl, seconds

my $node = PostgreSQL::Test::Cluster->new('clifair');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.queue_ttl = '${\ int($TTL * 1000)}ms'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);

# pgbouncer in transaction mode, if installed (the suite installs it)
my $bport = DlockTest::Bouncer::start($node, $tmp, pool => 3, clients => 50);

sub conn
{
	my ($app) = @_;
	return $node->connstr('postgres') . " application_name=" . ($app // 'dlock_test');
}
my $bconn = defined $bport
  ? "host=127.0.0.1 port=$bport dbname=postgres sslmode=disable" : undef;

sub sql { return $node->safe_psql('postgres', $_[0]) }

sub cli
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, @args ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return (code_of($?), $out, $err);
}

my ($rc, $out, $err);

# ---------- usage
($rc, $out, $err) = cli('-d', conn(), 'try', 'u', '--fair');
is($rc, 64, 'try --fair: exit 64 (one try does not queue)');
like($err, qr/--fair does not apply to "try"/, 'try --fair message');
($rc, $out, $err) = cli('-d', conn(), 'lock', 'u', '--lock-delay', 'soon');
is($rc, 64, 'bad --lock-delay: exit 64');
like($err, qr/invalid duration for --lock-delay/, 'bad --lock-delay message');
($rc, $out, $err) = cli('-d', conn(), 'run', '--fair=yes', 'u', '--', 'true');
is($rc, 64, '--fair takes no value: exit 64');
($rc, $out, $err) = cli('-d', 'mysql://root@127.0.0.1/dlock', 'run', '--fair', 'u', '--', 'true');
is($rc, 64, '--fair with a MySQL URL: exit 64');
like($err, qr/not available in the MySQL edition/, 'MySQL --fair message');
($rc, $out, $err) = cli('-d', conn(), 'try', 'u', '--holder', 'x', '--lock-delay', '2h');
is($rc, 69, '--lock-delay over 1h: the server refuses it, exit 69');
like($err, qr/lock_delay must be between 0 and 1 hour/, 'the server\'s message is shown');
is(sql("SELECT count(*) FROM dlock.leases WHERE resource = 'u'"), '0',
	'the refused attempt left nothing');
($rc, $out, $err) = cli('--help');
like($out, qr/--fair .*--lock-delay/s, '--help lists --fair and --lock-delay');

# ---------- eight fair "dlock run" waiters, served in arrival order
# $look: a session for the looks that are timed (w4's ticket, the
# lock-delay below), started beforehand: a psql's start-up, 0.5-2 s now
# and then on a loaded machine, is not in their times.
my $look = $node->background_psql('postgres');
sql("SELECT dlock.try_lock('q', 'boss', '60s')");

# --wait 0 takes no ticket
($rc, $out, $err) = cli('-d', conn(), 'lock', 'q', '--fair', '--wait', '0', '--holder', 'once');
is($rc, 75, 'lock --fair --wait 0 on a held resource: exit 75');
is(sql("SELECT count(*) FROM dlock.tickets WHERE holder = 'once'"), '0',
	'--wait 0 took no ticket');

my $order = "$tmp/order.txt";
my (@pids, @expected, %kind);
for my $i (1 .. 8)
{
	my $who = "w$i";
	my @conn = ('-d', conn("fair_$who"));
	my @extra;
	if ($i % 3 == 0 && defined $bconn)
	{
		@conn = ('-d', $bconn);
		$kind{$who} = 'pgbouncer';
	}
	elsif ($i % 3 == 1)
	{
		@extra = ('--poll');
		$kind{$who} = 'poll';
	}
	else
	{
		$kind{$who} = 'listen';
	}
	# 8 s: with 2 s, w4 gave up before w8 was queued on a loaded machine (CI).
	my @wait = $i == 4 ? ('--wait', '8s') : ();
	push @pids,
	  [ $who,
		spawn($who,
			cmd => [ $cli, @conn, 'run', '--fair', '--holder', $who, '--lease', '30s',
				@extra, @wait, 'q', '--',
				'sh', '-c', "echo \"\$DLOCK_HOLDER \$DLOCK_FENCE\" >> $order; sleep 0.1" ]) ];
	push @expected, $who unless $i == 4;
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM dlock.queue WHERE resource = 'q' AND holder = '$who'"),
		"$who ($kind{$who}) is queued");
}
my $tickets_before = sql(
	"SELECT string_agg(holder || ':' || ticket, ',' ORDER BY ticket) FROM dlock.queue WHERE resource = 'q'");
is(sql("SELECT string_agg(holder, ',' ORDER BY position) FROM dlock.queue WHERE resource = 'q'"),
	join(',', map { "w$_" } 1 .. 8), 'dlock.queue lists them in arrival order');

# an unfair newcomer: it must not jump the queue
my $late = spawn('late',
	cmd => [ $cli, '-d', conn('fair_late'), 'run', '--holder', 'late', '--lease', '30s', 'q',
		'--', 'sh', '-c', "echo \"\$DLOCK_HOLDER \$DLOCK_FENCE\" >> $order" ]);
push @expected, 'late';

# The waiter with --wait 8s gives up; its ticket lapses within queue_ttl.
my ($w4) = map { $_->[1] } grep { $_->[0] eq 'w4' } @pids;
is(wait_exit($w4, 30), 75, 'w4 (--wait 8s) gives up: exit 75');
my $gone = time;
my $left = 'f';
for (1 .. 1500)
{
	$left = $look->query_safe("SELECT count(*) = 0 FROM dlock.queue WHERE holder = 'w4'");
	last if $left eq 't';
	usleep(20_000);
}
is($left, 't', 'w4 leaves the queue');
cmp_ok(time - $gone, '<=', $TTL + 0.5, 'w4\'s ticket lapsed within queue_ttl');

# Meanwhile (well over queue_ttl), the others kept their tickets.
my $tickets_after = sql(
	"SELECT string_agg(holder || ':' || ticket, ',' ORDER BY ticket) FROM dlock.queue WHERE resource = 'q'");
(my $expect_after = $tickets_before) =~ s/(^|,)w4:\d+//;
$expect_after =~ s/^,//;
is($tickets_after, $expect_after,
	'the waiters kept their tickets for seconds (retrying within queue_ttl)');
is(sql("SELECT count(*) FROM dlock.tickets WHERE holder = 'late'"), '0',
	'the unfair newcomer took no ticket');

sql("SELECT dlock.unlock('q', 'boss')");
for my $p (@pids)
{
	next if $p->[0] eq 'w4';
	is(wait_exit($p->[1], 60), 0, "$p->[0] ran and exited 0");
}
is(wait_exit($late, 60), 0, 'late ran and exited 0');
my @lines = split /\n/, slurp($order);
my @got = map { (split / /)[0] } @lines;
is(join(',', @got), join(',', @expected),
	'served exactly in arrival order, the unfair newcomer last');
my @fences = map { (split / /)[1] } @lines;
my $increasing = 1;
for my $i (1 .. $#fences)
{
	$increasing = 0 unless fence_lt($fences[ $i - 1 ], $fences[$i]);
}
ok($increasing, 'fences strictly increase in serving order');
is(sql("SELECT count(*) FROM dlock.queue WHERE resource = 'q'"), '0', 'the queue is empty');

# ---------- "dlock lock --fair" prints the fence once served
sql("SELECT dlock.try_lock('q2', 'boss', '60s')");
my $fl = spawn('fl',
	cmd => [ $cli, '-d', conn('fl'), 'lock', '--fair', '--holder', 'fl', '--lease', '30s', 'q2' ]);
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM dlock.queue WHERE resource = 'q2' AND holder = 'fl'"),
	'dlock lock --fair is queued');
sql("SELECT dlock.unlock('q2', 'boss')");
is(wait_exit($fl, 30), 0, 'the fair dlock lock acquires once released');
like(slurp("$tmp/fl.out"), qr/^\d+$/m, 'and prints its fence');
is(sql("SELECT holder FROM dlock.leases WHERE resource = 'q2'"), 'fl', 'fl holds q2');
is(sql("SELECT count(*) FROM dlock.tickets WHERE resource = 'q2'"), '0',
	'its ticket left the queue on acquisition');

# ---------- lock-delay
# The expiry and the end of the delay are read in $look, and the delay is
# 5 s: the refused try and the waiting lock (each a new CLI and backend,
# 0.5-2 s to start now and then on a loaded machine) both come within it.
($rc, $out, $err) = cli('-d', conn(), 'try', 'ld', '--holder', 'a', '--lease', '1s',
	'--lock-delay', '5s');
is($rc, 0, 'try --lock-delay 5s acquires');
my $exp = $look->query_safe("SELECT extract(epoch FROM expires_at) FROM dlock.leases WHERE resource = 'ld'");
# let the lease run out uncleanly
usleep(int(($exp - time + 0.2) * 1e6)) if $exp > time - 0.2;
($rc, $out, $err) = cli('-d', conn(), 'try', 'ld', '--holder', 'b');
is($rc, 75, 'after the lease, the resource is refused during the lock-delay');
my $avail = $look->query_safe("SELECT extract(epoch FROM available_at) FROM dlock.locks WHERE resource = 'ld'");
$look->quit;
cmp_ok(abs($avail - ($exp + 5)), '<', 0.01, 'dlock.locks shows available_at = expiry + delay');
($rc, $out, $err) = cli('-d', conn(), 'lock', 'ld', '--holder', 'b', '--wait', '10s');
my $got_at = time;
is($rc, 0, 'a waiting dlock lock takes it after the delay');
cmp_ok($got_at, '>=', $avail - 0.005, 'not before expiry + delay');
cmp_ok($got_at - $avail, '<', 1.5, 'and soon after');

($rc, $out, $err) = cli('-d', conn(), 'run', '--holder', 'c', '--lease', '5s',
	'--lock-delay', '30s', 'ld2', '--', 'true');
is($rc, 0, 'run --lock-delay 30s: COMMAND ran');
($rc, $out, $err) = cli('-d', conn(), 'try', 'ld2', '--holder', 'd');
is($rc, 0, 'a clean release by run frees the resource at once, whatever the delay');

# ---------- a fair waiter that gives up withdraws its ticket at once
# (dlock.withdraw, 0.3 SQL): with queue_ttl at 1 h, the tickets of a "dlock
# lock --fair" that times out, a "dlock run --fair" that gets SIGTERM and a
# "dlock elect" candidate that times out are gone when they exit, and the
# next waiter is served right after the release.
sql("ALTER SYSTEM SET dlock.queue_ttl = '1h'");
$node->reload;
ok($node->poll_query_until('postgres', "SELECT current_setting('dlock.queue_ttl') = '1h'"),
	'queue_ttl is 1h');
sql("SELECT dlock.try_lock('gq', 'boss', '60s')");
sql("SELECT dlock.campaign('ge', 'boss', 'b', '60s')");
my $gw = spawn('gw',
	cmd => [ $cli, '-d', conn('gw'), 'lock', '--fair', '--holder', 'gw', '--wait', '3s', 'gq' ]);
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM dlock.queue WHERE holder = 'gw'"),
	'gw (lock --fair --wait 3s) is queued');
my $gs = spawn('gs',
	cmd => [ $cli, '-d', conn('gs'), 'run', '--fair', '--holder', 'gs', 'gq', '--', 'true' ]);
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM dlock.queue WHERE holder = 'gs'"),
	'gs (run --fair) is queued');
my $ge = spawn('ge',
	cmd => [ $cli, '-d', conn('ge'), 'elect', '--holder', 'ge', '--wait', '3s', 'ge', 'v', '--', 'true' ]);
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM dlock.queue WHERE holder = 'ge'"),
	'ge (elect --wait 3s) is queued');
my $gn = spawn('gn',
	cmd => [ $cli, '-d', conn('gn'), 'run', '--fair', '--holder', 'gn', 'gq', '--', 'true' ]);
ok($node->poll_query_until('postgres', "SELECT count(*) = 1 FROM dlock.queue WHERE holder = 'gn'"),
	'gn (run --fair) is queued last');
kill 'TERM', $gs;
ok(defined wait_exit($gs, 30), 'gs ends on SIGTERM');
is(sql("SELECT count(*) FROM dlock.queue WHERE holder = 'gs'"), '0', 'gs withdrew its ticket');
is(wait_exit($gw, 30), 75, 'gw gives up: exit 75');
is(sql("SELECT count(*) FROM dlock.queue WHERE holder = 'gw'"), '0', 'gw withdrew its ticket');
is(wait_exit($ge, 30), 75, 'ge gives up: exit 75');
is(sql("SELECT count(*) FROM dlock.queue WHERE holder = 'ge'"), '0', 'ge withdrew its ticket');
sql("SELECT dlock.unlock('gq', 'boss')");
is(wait_exit($gn, 30), 0, 'the next waiter gn is served after the release (not after queue_ttl)');
sql("SELECT dlock.resign('ge', 'boss')");
sql("ALTER SYSTEM RESET dlock.queue_ttl");
$node->reload;

done_testing();
