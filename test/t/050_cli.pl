# 050_cli.pl - the dlock command-line client (cli/dlock) against a real
# server with the extension preloaded.
#
# Covers: --help/--version, usage errors (exit 64), try/lock/unlock/renew/
# status/reap/watch, COMMAND's exit status and environment, --wait
# timeouts (exit 75), etcd's 8-way counter (mutual exclusion, fences
# strictly increasing), a SIGSTOPped CLI whose lease runs out (COMMAND
# stopped by the watchdog while the CLI is still stopped, exit 76 at
# SIGCONT; more in 052_run_faults.pl), an admin break_lock (exit 76),
# SIGTERM while waiting and while running, a terminated backend while
# waiting (COMMAND only starts once the lock is really held), SIGKILL
# while waiting (the watchdog forked ahead starts nothing and exits too),
# a COMMIT whose outcome is unknown (connection terminated while the COMMIT
# waits for a synchronous standby that does not exist: the CLI resolves it with
# pg_xact_status and runs COMMAND because it did commit), --linger, and
# lease expiry wakeups, and callers whose transactions default to
# SERIALIZABLE (four run loops at once, none fails).
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

my $cli = $ENV{DLOCK_CLI}
  // (defined $ENV{TESTDIR} ? "$ENV{TESTDIR}/cli/dlock" : 'cli/dlock');
$cli = File::Spec->rel2abs($cli);
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;

my $node = PostgreSQL::Test::Cluster->new('cli');
$node->init;
# wal senders allowed: the unknown-COMMIT test below makes COMMIT wait for a
# synchronous standby, which PostgreSQL only does when max_wal_senders > 0.
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dlock'\nwal_level = replica\nmax_wal_senders = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);

# A connection string for the CLI, tagged so its backends can be found.
sub conn
{
	my ($app) = @_;
	return $node->connstr('postgres') . " application_name=" . ($app // 'dlock_test');
}


# Run the CLI to completion: (exit code, stdout, stderr).
sub cli
{
	my @args = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, @args ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(120));
	return (code_of($?), $out, $err);
}



# Wait (bounded) until a file exists and is not empty.
sub wait_file
{
	my ($file, $secs) = @_;
	my $deadline = time + ($secs // 60);
	while (time < $deadline)
	{
		return 1 if -s $file;
		usleep(20_000);
	}
	return 0;
}


sub sql { return $node->safe_psql('postgres', $_[0]) }


# Wait until a CLI backend (by application_name) is waiting: it has seen
# the resource busy at least once.
sub wait_waiting
{
	my ($app) = @_;
	ok( $node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = '$app' "
			  . "AND query ~ '^(ROLLBACK|LISTEN)'"),
		"$app is waiting");
}

my ($rc, $out, $err);

# ---------- --help, --version, usage errors
($rc, $out, $err) = cli('--help');
is($rc, 0, '--help exits 0');
like($out, qr/Usage:.*dlock .*run .*RESOURCE -- COMMAND/s, '--help has the synopsis');
like($out, qr/64\s+usage/, '--help documents 64');
like($out, qr/69\s+connection/, '--help documents 69');
like($out, qr/75\s+not acquired in time/, '--help documents 75');
like($out, qr/76\s+lease lost/, '--help documents 76');

my $extver = sql("SELECT extversion FROM pg_extension WHERE extname = 'dlock'");
($rc, $out, $err) = cli('-d', conn(), '--version');
is($rc, 0, '--version exits 0');
like($out, qr/^dlock \Q$extver\E$/m, '--version prints the client version');
like($out, qr/^server extension dlock \Q$extver\E$/m, '--version prints the server extension version');
is($err, '', 'no version mismatch warning');
($rc, $out, $err) = cli('-d', "host=$tmp/nosuchdir port=1", '--version');
is($rc, 0, '--version without a server still exits 0');
like($out, qr/^dlock \S+$/m, '--version without a server prints the client version');
like($err, qr/the server extension's version is not known \(no connection: /, '--version without a server says only that the server version is not known');

($rc, $out, $err) = cli('-d', conn(), 'run', '--lease', '5x', 'r', '--', 'true');
is($rc, 64, 'bad duration: exit 64');
like($err, qr/invalid duration for --lease: "5x"/, 'bad duration message');
($rc, $out, $err) = cli('-d', conn(), 'run', '--wait', 'soon', 'r', '--', 'true');
is($rc, 64, 'bad --wait: exit 64');
($rc, $out, $err) = cli('-d', conn(), 'run', 'r', 'true');
is($rc, 64, 'missing -- : exit 64');
like($err, qr/missing "--"/, 'missing -- message');
($rc, $out, $err) = cli('-d', conn(), 'frobnicate');
is($rc, 64, 'unknown subcommand: exit 64');
($rc, $out, $err) = cli('-d', conn(), 'try', 'r', '--linger', '1s');
is($rc, 64, 'option not applying to the subcommand: exit 64');
($rc, $out, $err) = cli('-d', "host=$tmp/nosuchdir port=1", 'try', 'r');
is($rc, 69, 'connection failure: exit 69');

# ---------- try / renew / unlock / status / reap
($rc, $out, $err) = cli('-d', conn(), 'try', 'one', '--holder', 'alice', '--lease', '30s');
is($rc, 0, 'try acquires');
like($out, qr/^\d+$/, 'try prints the fence');
chomp(my $f_one = $out);
($rc, $out, $err) = cli('-d', conn(), 'try', 'one', '--holder', 'bob');
is($rc, 75, 'try on a held resource: exit 75');
($rc, $out, $err) = cli('-d', conn(), 'renew', 'one', '--holder', 'alice', '--lease', '40s', '--fence', $f_one);
is($rc, 0, 'renew');
like($out, qr/^\d{4}-\d\d-\d\d/, 'renew prints the expiry');
($rc, $out, $err) = cli('-d', conn(), 'renew', 'one', '--holder', 'bob');
is($rc, 76, 'renew by a non-holder: exit 76');
sql("SELECT dlock.try_lock('pre/a', 'x', '30s'), dlock.try_lock('pre/b', 'y', '30s'), dlock.try_lock('prf', 'z', '30s')");
($rc, $out, $err) = cli('-d', conn(), 'status', 'pre/');
is($rc, 0, 'status');
like($out, qr/resource .*holder .*fence .*expires_at/, 'status header');
like($out, qr/^pre\/a .*\n^pre\/b /m, 'status lists the prefix');
unlike($out, qr/^prf/m, 'status filters by prefix');
like($out, qr/\(2 rows\)/, 'status row count');
($rc, $out, $err) = cli('-d', conn(), 'status');
like($out, qr/^one /m, 'status without prefix lists all');
($rc, $out, $err) = cli('-d', conn(), 'unlock', 'one', '--holder', 'alice', '--fence', $f_one);
is($rc, 0, 'unlock');
is($out, "0\n", 'unlock prints the count left');
($rc, $out, $err) = cli('-d', conn(), 'unlock', 'one', '--holder', 'alice');
is($rc, 76, 'unlock of a lock not held: exit 76');
($rc, $out, $err) = cli('-d', conn(), 'reap');
is($rc, 0, 'reap');
like($out, qr/^\d+$/, 'reap prints a count');
sql("SELECT dlock.unlock('pre/a', 'x'), dlock.unlock('pre/b', 'y'), dlock.unlock('prf', 'z')");

# ---------- run: environment, exit status, release
($rc, $out, $err) = cli('-d', conn(), 'run', '--holder', 'h1', 'envr', '--',
	'sh', '-c', 'echo "$DLOCK_RESOURCE|$DLOCK_HOLDER|$DLOCK_FENCE"; exit 3');
is($rc, 3, "COMMAND's exit status is propagated");
like($out, qr/^envr\|h1\|\d+$/, 'COMMAND sees DLOCK_RESOURCE, DLOCK_HOLDER, DLOCK_FENCE');
is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 'envr'"), '0', 'run released the lock');
($rc, $out, $err) = cli('-d', conn(), 'run', 'envr', '--', 'sh', '-c', 'echo $DLOCK_HOLDER');
like($out, qr/^[^:\s]+:\d+:[0-9a-f]+$/, 'default holder is host:pid:random');
($rc, $out, $err) = cli('-d', conn(), 'run', 'envr', '--', 'sh', '-c', 'kill -9 $$');
is($rc, 137, 'COMMAND killed by a signal: 128 + signal');
($rc, $out, $err) = cli('-d', conn(), 'run', 'envr', '--', "$tmp/no/such/command");
is($rc, 127, 'COMMAND not found: 127');
is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 'envr'"), '0', 'released after failures');

# ---------- run without --lease uses the server's dlock.default_lease
sql("ALTER DATABASE postgres SET dlock.default_lease = '7s'");
($rc, $out, $err) = cli('-d', conn(), 'run', 'dl', '--', 'psql', '-XAt', '-d', conn(), '-c',
	"SELECT lease FROM dlock.locks WHERE resource = 'dl'");
is($rc, 0, 'run without --lease');
is($out, "00:00:07\n", "run without --lease takes the server's dlock.default_lease");
sql("ALTER DATABASE postgres RESET dlock.default_lease");

# ---------- not acquired in time
my $f_busy = sql("SELECT dlock.try_lock('busy', 'other', '60s')");
($rc, $out, $err) = cli('-d', conn(), 'run', '--wait', '0', 'busy', '--', 'touch', "$tmp/busy.ran");
is($rc, 75, '--wait 0 on a held resource: exit 75');
ok(!-e "$tmp/busy.ran", 'COMMAND did not run');
my $t0 = time;
($rc, $out, $err) = cli('-d', conn(), 'run', '--wait', '1500ms', 'busy', '--', 'touch', "$tmp/busy.ran");
my $el = time - $t0;
is($rc, 75, '--wait 1500ms on a held resource: exit 75');
ok($el >= 1.4 && $el < 10, "waited about 1.5 s ($el)");
like($err, qr/not acquired in time/, 'timeout message');
($rc, $out, $err) = cli('-d', conn(), '--poll', 'run', '--wait', '300ms', 'busy', '--', 'touch', "$tmp/busy.ran");
is($rc, 75, '--poll --wait 300ms: exit 75');
ok(!-e "$tmp/busy.ran", 'COMMAND never ran');
is(sql("SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = 'busy'"), "other $f_busy",
	'the other holding is untouched');
sql("SELECT dlock.unlock('busy', 'other')");

# ---------- a lease that expires wakes a waiter; lock waits too
sql("SELECT dlock.try_lock('exp', 'dead', '1s')");
$t0 = time;
($rc, $out, $err) = cli('-d', conn(), 'run', '--wait', '30s', 'exp', '--', 'true');
is($rc, 0, 'waiter acquires after the holder\'s lease expires');
ok(time - $t0 < 10, 'promptly');
sql("SELECT dlock.try_lock('exp2', 'dead', '1s')");
($rc, $out, $err) = cli('-d', conn(), 'lock', 'exp2', '--wait', '30s', '--holder', 'me', '--lease', '30s');
is($rc, 0, 'lock waits and acquires');
like($out, qr/^\d+$/, 'lock prints the fence');
is(sql("SELECT holder FROM dlock.locks WHERE resource = 'exp2'"), 'me', 'held by me');
($rc, $out, $err) = cli('-d', conn(), 'lock', 'exp2', '--wait', '200ms', '--holder', 'you');
is($rc, 75, 'lock times out: exit 75');
sql("SELECT dlock.unlock('exp2', 'me')");

# ---------- etcd's example: 8 concurrent counters, 5 runs each
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
				'for i in 1 2 3 4 5; do "$DLOCK" -d "$CONN" run --wait 60s ctr -- sh -c "$SCRIPT" || exit $?; done' ],
			DLOCK => $cli, CONN => conn(), SCRIPT => $script,
			COUNTER => $counter, FENCES => $fences);
	}
	my @codes = map { wait_exit($_, 240) } @pids;
	is_deeply(\@codes, [ (0) x 8 ], 'all 8 counter loops succeeded')
	  or diag(join("\n", map { slurp("$tmp/ctr$_.err") } 1 .. 8));
	is(slurp($counter), "40\n", 'counter is exactly 40');
	my @f = split /\n/, slurp($fences);
	is(scalar(@f), 40, '40 fences recorded');
	my $inc = 1;
	for my $i (1 .. $#f) { $inc = 0 unless fence_lt($f[ $i - 1 ], $f[$i]) }
	ok($inc, 'fences strictly increase');
}

# ---------- a paused CLI loses its lease; the watchdog stops COMMAND
{
	my $mark = "$tmp/pause.mark";
	my $pid = spawn('pause',
		cmd => [ $cli, '-d', conn(), 'run', '--lease', '2s', '--grace', '5s', 'p', '--',
			'sh', '-c', 'echo "$$ $DLOCK_FENCE" > "$MARK"; exec sleep 60' ],
		MARK => $mark);
	ok(wait_file($mark), 'paused: COMMAND started');
	my ($cmdpid, $f1) = split ' ', slurp($mark);
	kill 'STOP', $pid;
	ok($node->poll_query_until('postgres', "SELECT dlock.try_lock('p', 'other', '60s') IS NOT NULL"),
		'another holder takes the resource once the paused lease expired');
	my $f2 = sql("SELECT fence FROM dlock.locks WHERE resource = 'p'");
	ok(fence_lt($f1, $f2), "next holder's fence is larger ($f1 < $f2)");
	my $gone = time + 10;
	usleep(20_000) while proc_alive($cmdpid) && time < $gone;
	ok(!proc_alive($cmdpid), 'the watchdog stopped COMMAND while the CLI is stopped');
	$t0 = time;
	kill 'CONT', $pid;
	my $code = wait_exit($pid, 30);
	is($code, 76, 'CLI exits with the lease-lost code after SIGCONT');
	ok(time - $t0 < 4, 'at once (' . (time - $t0) . ' s)');
	ok(!kill(0, $cmdpid), 'COMMAND was killed');
	like(slurp("$tmp/pause.err"), qr/lease .* lost/, 'lease lost is reported');
	is(sql("SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = 'p'"), "other $f2",
		'the new holder keeps the lock');
	sql("SELECT dlock.unlock('p', 'other')");
}

# ---------- the CLI's backend is terminated while COMMAND runs: the next
# renewal reconnects, and COMMAND, outliving the first lease, completes.
# A lease of 4 s: the reconnection (a new backend) and its renewal must
# come within the lease, and a loaded machine starts a backend in 0.5-2 s
# now and then.
{
	my $mark = "$tmp/reconn.mark";
	my $pid = spawn('reconn',
		cmd => [ $cli, '-v', '-d', conn('reconn'), 'run', '--lease', '4s', 'rc', '--',
			'sh', '-c', 'echo $DLOCK_FENCE > "$MARK"; sleep 5; echo done >> "$MARK"' ],
		MARK => $mark);
	ok(wait_file($mark), 'reconn: COMMAND started');
	is(sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'reconn'"),
		't', "terminated the running CLI's backend");
	is(wait_exit($pid, 30), 0, 'COMMAND completed across the reconnection');
	like(slurp($mark), qr/^\d+\ndone$/, 'COMMAND ran to its end');
	like(slurp("$tmp/reconn.err"), qr/reconnected/, 'the CLI reconnected');
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 'rc'"), '0', 'and released the lock');
}

# ---------- the network goes silent: the CLI's backend and the postmaster
# are stopped, so the renewal never gets an answer and no new connection
# can be made.  The CLI's own clock ends the lease.
{
	my $mark = "$tmp/silent.mark";
	my $pid = spawn('silent',
		cmd => [ $cli, '-d', conn('silent'), 'run', '--lease', '2s', 'sil', '--',
			'sh', '-c', 'echo $$ > "$MARK"; exec sleep 60' ],
		MARK => $mark);
	ok(wait_file($mark), 'silent: COMMAND started');
	chomp(my $cmdpid = slurp($mark));
	my $backend = sql("SELECT pid FROM pg_stat_activity WHERE application_name = 'silent'");
	my $postmaster = $node->{_pid};
	like($backend, qr/^\d+$/, 'found the CLI\'s backend');
	kill 'STOP', $backend, $postmaster;
	$t0 = time;
	my $code = wait_exit($pid, 30);
	my $el = time - $t0;
	kill 'CONT', $postmaster, $backend;
	is($code, 76, 'silent network: lease lost by the local clock, exit 76');
	ok($el < 6, "within the lease ($el s)");
	ok(!kill(0, $cmdpid), 'COMMAND was killed');
	like(slurp("$tmp/silent.err"), qr/deadline passed on the local monotonic clock/,
		'reported as a local deadline');
}

# ---------- an administrator breaks the lease
{
	my $mark = "$tmp/break.mark";
	my $pid = spawn('break',
		cmd => [ $cli, '-d', conn(), 'run', '--lease', '3s', 'b', '--',
			'sh', '-c', 'echo $$ > "$MARK"; exec sleep 60' ],
		MARK => $mark);
	ok(wait_file($mark), 'break: COMMAND started');
	chomp(my $cmdpid = slurp($mark));
	is(sql("SELECT dlock.break_lock('b')"), 't', 'break_lock');
	$t0 = time;
	is(wait_exit($pid, 30), 76, 'broken lease: exit 76');
	ok(time - $t0 < 5, 'noticed at the next renewal');
	ok(!kill(0, $cmdpid), 'COMMAND was killed');
}

# ---------- SIGTERM while waiting
{
	my $f = sql("SELECT dlock.try_lock('w', 'other', '60s')");
	my $pid = spawn('termwait',
		cmd => [ $cli, '-d', conn('termwait'), 'run', '--wait', '60s', 'w', '--', 'touch', "$tmp/w.ran" ]);
	wait_waiting('termwait');
	kill 'TERM', $pid;
	is(wait_exit($pid, 30), 128 + 15, 'SIGTERM while waiting: exit 143');
	ok(!-e "$tmp/w.ran", 'COMMAND never ran');
	is(sql("SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = 'w'"), "other $f",
		"the other holder's lock is untouched");
	sql("SELECT dlock.unlock('w', 'other')");
}

# ---------- SIGKILL while waiting: the watchdog, forked before the wait,
# has started nothing, and goes away with its client
{
	my $f = sql("SELECT dlock.try_lock('wk', 'other', '60s')");
	my $pid = spawn('killwait',
		cmd => [ $cli, '-d', conn('killwait'), 'run', '--wait', '60s', 'wk', '--', 'touch', "$tmp/wk.ran" ]);
	wait_waiting('killwait');
	my @tree = DlockTest::Proc::proc_tree($pid);
	is(scalar(@tree), 1, 'a waiting run has one child (its watchdog), nothing started');
	kill 'KILL', $pid;
	is(wait_exit($pid, 30), 128 + 9, 'SIGKILL while waiting: exit 137');
	is(join(',', DlockTest::Proc::wait_gone(30, @tree)), '',
		'the watchdog exited with its client');
	sql("SELECT dlock.unlock('wk', 'other')");
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 'wk'"), '0',
		'the killed waiter took nothing');
	ok(!-e "$tmp/wk.ran", 'COMMAND never ran');
}

# ---------- SIGTERM while running
{
	my $mark = "$tmp/termrun.mark";
	my $trapped = "$tmp/termrun.trapped";
	my $pid = spawn('termrun',
		cmd => [ $cli, '-d', conn(), 'run', '--lease', '10s', 's', '--', 'sh', '-c',
			'trap "echo got > \"$TRAPPED\"; exit 7" TERM; echo $$ > "$MARK"; while :; do sleep 0.1; done' ],
		MARK => $mark, TRAPPED => $trapped);
	ok(wait_file($mark), 'termrun: COMMAND started');
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 's'"), '1', 'held while running');
	kill 'TERM', $pid;
	is(wait_exit($pid, 30), 7, "SIGTERM while running: exit with COMMAND's status");
	ok(-e $trapped, 'COMMAND received the SIGTERM');
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 's'"), '0', 'lock released');
}

# ---------- the backend of a waiting CLI is terminated: it reconnects and
# COMMAND only starts once the lock is really held
{
	my $f = sql("SELECT dlock.try_lock('k', 'other', '60s')");
	my $mark = "$tmp/k.mark";
	my $pid = spawn('kill',
		cmd => [ $cli, '-v', '-d', conn('kwaiter'), 'run', '--wait', '60s', 'k', '--',
			'sh', '-c', 'echo "$DLOCK_FENCE" > "$MARK"' ],
		MARK => $mark);
	wait_waiting('kwaiter');
	my $old = sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'kwaiter'");
	is($old, 't', 'terminated the waiting CLI\'s backend');
	ok($node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'kwaiter' AND query ~ '^(ROLLBACK|LISTEN)'"),
		'the CLI reconnected and waits again');
	ok(!-e $mark, 'COMMAND did not start while the lock is held by another');
	sql("SELECT dlock.unlock('k', 'other')");
	is(wait_exit($pid, 30), 0, 'acquired after the release and ran COMMAND');
	chomp(my $fk = slurp($mark));
	ok(fence_lt($f, $fk), 'with a larger fence');
}

# no_sync_standby ON: commits wait for a synchronous standby that does not
# exist (ON), or for none (new backends see it before it returns).
sub no_sync_standby
{
	my ($on) = @_;
	$node->safe_psql('postgres',
		$on ? "ALTER SYSTEM SET synchronous_standby_names = 'nosuchstandby'"
		: 'ALTER SYSTEM RESET synchronous_standby_names');
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	ok($node->poll_query_until('postgres', 'SHOW synchronous_standby_names', $on ? 'nosuchstandby' : ''),
		'new backends see synchronous_standby_names ' . ($on ? 'set' : 'reset'));
}

# ---------- a COMMIT whose outcome is unknown.  The COMMIT of the CLI's
# acquisition waits for a synchronous standby that does not exist; the
# transaction is then committed locally.  Its backend is terminated, so the
# CLI loses the connection after COMMIT was sent without an answer: it must
# reconnect, ask pg_xact_status, learn "committed", and only then run COMMAND.
{
	no_sync_standby(1);
	my $mark = "$tmp/u.mark";
	my $pid = spawn('unknown',
		cmd => [ $cli, '-d', conn('syncwaiter'), 'run', '--lease', '30s', 'u', '--',
			'sh', '-c', 'echo "$DLOCK_FENCE" > "$MARK"' ],
		MARK => $mark);
	ok($node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'syncwaiter' AND wait_event = 'SyncRep'"),
		'the acquisition\'s COMMIT waits for the synchronous standby');
	ok(!-e $mark, 'COMMAND not started before COMMIT is acknowledged');
	$node->safe_psql('postgres',
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'syncwaiter'");
	no_sync_standby(0);
	is(wait_exit($pid, 60), 0, 'CLI resolved the commit and ran COMMAND');
	my $e = slurp("$tmp/unknown.err");
	like($e, qr/checking whether transaction \d+ committed/, 'the unknown outcome was noticed');
	like($e, qr/committed: lock held with fence (\d+)/, 'and resolved as committed');
	my ($resolved) = $e =~ /lock held with fence (\d+)/;
	chomp(my $fu = slurp($mark));
	is($fu, $resolved // 'none', 'COMMAND ran with the fence of the committed acquisition');
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 'u'"), '0', 'and released it');
}

# ---------- a signal while the acquisition's COMMIT waits for a
# synchronous standby that never comes: the CLI ends (128 + N) within
# the wait, not at the lease's end, and COMMAND never starts.
{
	no_sync_standby(1);
	my $mark = "$tmp/s.mark";
	my $pid = spawn('syncsig',
		cmd => [ $cli, '-d', conn('syncsig'), 'run', '--lease', '60s', '--wait', '1s', 'sync-sig', '--',
			'touch', $mark ]);
	ok($node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'syncsig' AND wait_event = 'SyncRep'"),
		'the COMMIT waits for the synchronous standby');
	kill 'TERM', $pid;
	is(wait_exit($pid, 20), 143, 'SIGTERM while the COMMIT waits: 143, not the lease later');
	ok(!-e $mark, 'COMMAND never started');
	no_sync_standby(0);
	$node->safe_psql('postgres',
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'syncsig'");
	ok($node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'syncsig'"),
		'its backend is gone');
	sql("SELECT dlock.break_lock('sync-sig')");
}

# ---------- --linger keeps the resource busy after COMMAND
{
	($rc, $out, $err) = cli('-d', conn(), 'run', '--lease', '10s', '--linger', '3s', 'l', '--', 'true');
	my $done = time;
	is($rc, 0, 'run --linger exits 0');
	# One psql looks and then waits for it: psqls of their own (0.5-2 s to
	# start now and then on a loaded machine) came after the linger, and
	# the rounds of a poll for it stretched the time below.
	my ($busy, $about, $acquired) = split /\n/, sql(q{
		SELECT dlock.try_lock('l', 'other', '10s') IS NULL;
		SELECT expires_at <= clock_timestamp() + interval '3.5 s' FROM dlock.locks WHERE resource = 'l';
		SELECT dlock.lock('l', 'other', '10s', '30s') IS NOT NULL;});
	my $el = time - $done;
	is($busy, 't', 'resource still busy right after COMMAND exited');
	is($about, 't', 'busy for about the linger, not the lease');
	is($acquired, 't', 'acquirable after the linger');
	ok($el >= 1.5 && $el < 9, "after about 3 s ($el)");
	sql("SELECT dlock.unlock('l', 'other')");
}

# ---------- watch prints events
{
	my $pid = spawn('watch', cmd => [ $cli, '-d', conn('watcher'), 'watch', 'wr' ]);
	ok($node->poll_query_until('postgres',
			"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'watcher' AND query ~ '^LISTEN' AND state = 'idle'"),
		'watch listens');
	sql("SELECT dlock.try_lock('wr', 'a', '30s')");
	sql("SELECT dlock.unlock('wr', 'a')");
	my $deadline = time + 30;
	usleep(50_000) while time < $deadline && slurp("$tmp/watch.out") !~ /released/;
	kill 'TERM', $pid;
	is(wait_exit($pid, 30), 0, 'watch exits 0 on SIGTERM');
	like(slurp("$tmp/watch.out"), qr/^\{.*"event"\s*:\s*"released".*"resource"\s*:\s*"wr".*\}$/m,
		'watch printed the release event');
}

# ---------- callers whose transactions default to SERIALIZABLE: four
# `dlock run` loops at once on distinct resources.  Concurrent attempts
# failed each other with 40001 (about 7 in 100, "could not serialize
# access"); the attempt now runs READ COMMITTED, and a release rolled back
# that way is sent again.
{
	my $ser = conn('dlock_ssi') . " options='-c default_transaction_isolation=serializable'";
	my @kids;
	for my $k (1 .. 4)
	{
		my $pid = fork // die "fork: $!";
		if ($pid == 0)
		{
			my $failed = 0;
			for my $i (1 .. 40)
			{
				my ($code, $out, $err) = cli('-d', $ser, 'run', '--lease', '30s', "ssi/$k/$i", '--', 'true');
				if ($code != 0) { $failed++; print STDERR "ssi/$k/$i: exit $code: $err"; }
			}
			POSIX::_exit($failed > 99 ? 99 : $failed);
		}
		push @kids, $pid;
	}
	my $failed = 0;
	for my $pid (@kids) { waitpid($pid, 0); $failed += $? >> 8; }
	is($failed, 0, 'SERIALIZABLE by default: 160 runs in four loops at once, none failed');
	is($node->safe_psql('postgres', "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'ssi/%' AND NOT expired"),
		'0', 'SERIALIZABLE by default: every run released its lock');
}

$node->stop;
done_testing();
