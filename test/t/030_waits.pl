# 030_waits.pl: waiting in dlock.lock() with dlock preloaded.
#
# A wait ended by cancel, statement_timeout or pg_terminate_backend leaves no
# row in dlock.waiters and no lock of the waiter behind; a chain of 40
# waiters is served one release at a time (wakeups about equal to hand-offs,
# no herd, no timeouts); a waiter whose holder's lease runs out takes over at
# expiry without the reaper; try_lock never waits behind another session's
# open transaction; and a blocked lock() burns no CPU.
# Promises: P5

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('waits');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
# The reaper stays out of this test: every takeover here is the waiters' own.
dlock.reap_interval = '1h'
max_connections = 80
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# stat: one dlock.stats() counter.
sub dstat
{
	my ($name) = @_;
	return $node->safe_psql('postgres', "SELECT $name FROM dlock.stats()");
}

# start_waiter: a background psql session blocked in dlock.lock(); returns
# the session and its backend pid once the wait shows in dlock.waiters.
sub start_waiter
{
	my ($resource, $holder, $setup) = @_;
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query_safe($setup) if $setup;
	$bg->query_until(qr/waiting now/,
		"\\echo waiting now\nSELECT dlock.lock('$resource', '$holder', '30s');\n");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM dlock.waiters WHERE pid = $pid"
			  . " AND resource = '$resource' AND holder = '$holder'"),
		"$holder (pid $pid) shows in dlock.waiters");
	return ($bg, $pid);
}

# nothing_left: the waiter left no waiter row and holds nothing.
sub nothing_left
{
	my ($pid, $holder, $how) = @_;
	ok( $node->poll_query_until(
			'postgres', "SELECT count(*) = 0 FROM dlock.waiters WHERE pid = $pid"),
		"$how: no row left in dlock.waiters");
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM dlock.leases WHERE holder = '$holder'"),
		'0',
		"$how: the waiter holds no lease");
	is( $node->safe_psql(
			'postgres',
			"SELECT count(*) FROM pg_locks WHERE pid = $pid AND locktype = 'advisory'"),
		'0',
		"$how: the waiter holds no per-resource lock");
	is( $node->safe_psql(
			'postgres',
			q{SELECT holder FROM dlock.locks WHERE resource = 'busy'}),
		'owner',
		"$how: the holder still holds the resource");
}

my $owner_fence = $node->safe_psql('postgres',
	q{SELECT dlock.try_lock('busy', 'owner', '1h')});

# 1. Cancel.
{
	my ($bg, $pid) = start_waiter('busy', 'w-cancel');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	my $out = $bg->query('SELECT 42');
	is($out, '42', 'cancelled session is usable again');
	like($bg->{stderr}, qr/canceling statement due to user request/,
		'the wait ended with the cancel error');
	nothing_left($pid, 'w-cancel', 'cancel');
	$bg->quit;
}

# 2. statement_timeout.
{
	my $waits = dstat('waits');
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	my $t0 = time;
	$bg->query(q{SET statement_timeout = '700ms';
		SELECT dlock.lock('busy', 'w-timeout', '30s')});
	my $took = time - $t0;
	like($bg->{stderr}, qr/canceling statement due to statement timeout/,
		'the wait ended with the statement_timeout error');
	cmp_ok($took, '>=', 0.7, sprintf('it waited (%.2fs)', $took));
	is(dstat('waits') - $waits, 1, 'dlock.stats() counted the wait');
	nothing_left($pid, 'w-timeout', 'statement_timeout');
	is($bg->query('SELECT 42'), '42', 'timed-out session is usable again');
	$bg->quit;
}

# 3. pg_terminate_backend.
{
	my ($bg, $pid) = start_waiter('busy', 'w-term');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	ok( $node->poll_query_until(
			'postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
		'terminated waiter is gone');
	nothing_left($pid, 'w-term', 'terminate');
	eval { $bg->quit };    # psql has exited with the lost connection
}

# 3b. lock_timeout bounds the wait like any lock wait (55P03); the wait
# argument's own limit returns NULL and counts a timeout.
{
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query(q{SET lock_timeout = '300ms';
		\set VERBOSITY verbose
		SELECT dlock.lock('busy', 'w-locktimeout', '30s')});
	like($bg->{stderr}, qr/ERROR:\s+55P03:/, 'lock_timeout ends the wait with 55P03');
	nothing_left($pid, 'w-locktimeout', 'lock_timeout');
	$bg->quit;

	my $timeouts = dstat('timeouts');
	is( $node->safe_psql(
			'postgres', q{SELECT dlock.lock('busy', 'w-limit', '30s', '300ms') IS NULL}),
		't',
		'a wait limit that passes returns NULL');
	is(dstat('timeouts') - $timeouts, 1, 'dlock.stats() counted the timeout');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM dlock.waiters'),
		'0', 'wait limit: no row left in dlock.waiters');
}

# 3c. A transaction-scoped wait (xact_lock) ended by cancel leaves nothing
# either, and its transaction can go on.
{
	my $bg = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $bg->query_safe('SELECT pg_backend_pid()');
	$bg->query_safe('BEGIN');
	$bg->query_until(qr/waiting now/,
		"\\echo waiting now\nSELECT dlock.xact_lock('busy');\n");
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = 1 FROM dlock.waiters WHERE pid = $pid AND resource = 'busy'"),
		'xact_lock waiter shows in dlock.waiters');
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	$bg->query('ROLLBACK');
	like($bg->{stderr}, qr/canceling statement due to user request/,
		'the xact_lock wait ended with the cancel error');
	nothing_left($pid, 'no-such-holder', 'xact_lock cancel');
	$bg->quit;
}

# 4. A blocked lock() uses no CPU: its backend's CPU time over a second of
# waiting stays within a few clock ticks (it sleeps on its latch).
SKIP:
{
	skip 'no /proc', 2 unless -r "/proc/$$/stat";
	my ($bg, $pid) = start_waiter('busy', 'w-cpu');
	my $ticks = sub {
		my @f = split ' ', slurp_file("/proc/$pid/stat") =~ s/^.*\) //sr;
		return $f[11] + $f[12];    # utime + stime
	};
	my $before = $ticks->();
	my $t0 = time;
	usleep(100_000) while time - $t0 < 1.5;
	my $used = $ticks->() - $before;
	cmp_ok($used, '<=', 5, "blocked lock() used $used clock ticks in 1.5s");
	$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
	$bg->query('SELECT 1');
	$bg->quit;
}

# 5. try_lock never waits behind another session's open transaction: not on
# the same resource (NULL at once) and not on any other resource.  Both
# sessions are new backends (their first fence draw), with a statement
# timeout so that a wait fails here instead of hanging.
{
	my $open = $node->background_psql('postgres');
	$open->query_safe('BEGIN');
	like($open->query_safe(q{SELECT dlock.try_lock('open-a', 'tx-holder', '1h')}),
		qr/^\d+$/, 'open transaction acquired open-a (uncommitted)');
	my ($ret, $out, $err) = $node->psql('postgres',
		q{SET statement_timeout = '5s';
		  SELECT dlock.try_lock('open-a', 'other', '1h') IS NULL});
	is($out, 't', 'try_lock of the same resource returns NULL at once')
	  or diag($err);
	($ret, $out, $err) = $node->psql('postgres',
		q{SET statement_timeout = '5s';
		  SELECT dlock.try_lock('open-b', 'other', '1h') IS NOT NULL});
	is($out, 't',
		'try_lock of another resource does not wait for the open transaction')
	  or diag($err);
	$open->query_safe('ROLLBACK');
	$open->quit;
}

# 6. A chain of 40 waiters, each taking the lock and releasing it: all are
# served, one wakeup per hand-off, no timeouts.
{
	my $n = 40;
	my $first = $node->safe_psql('postgres',
		q{SELECT dlock.try_lock('chain', 'chain-head', '1h')});
	my %before = map { $_ => dstat($_) } qw(wakeups timeouts acquired waits);
	my @procs;
	for my $i (1 .. $n)
	{
		my %p = (out => '', err => '');
		$p{h} = IPC::Run::start(
			[
				$node->installed_command('psql'), '-XAtq', '-d', $node->connstr('postgres'),
				'-c', "SELECT dlock.lock('chain', 'w$i', '30s')",
				'-c', "SELECT dlock.unlock('chain', 'w$i')"
			],
			'>', \$p{out}, '2>', \$p{err},
			IPC::Run::timeout(120));
		push @procs, \%p;
	}
	ok( $node->poll_query_until(
			'postgres',
			"SELECT count(*) = $n FROM dlock.waiters WHERE resource = 'chain'"),
		"$n waiters queued");
	my $t0 = time;
	$node->safe_psql('postgres', q{SELECT dlock.unlock('chain', 'chain-head')});
	my ($ok, @fences) = (0);
	for my $p (@procs)
	{
		$p->{h}->finish;
		my ($fence, $left) = split /\n/, $p->{out};
		$ok++ if $? == 0 && $p->{err} eq '' && defined $left && $left eq '0';
		push @fences, $fence;
	}
	my $took = time - $t0;
	is($ok, $n, "all $n waiters got the lock and released it");
	my %distinct = map { $_ => 1 } grep { defined && $_ > $first } @fences;
	is(scalar(keys %distinct), $n, "$n distinct fences, all above the head's");
	my %delta = map { $_ => dstat($_) - $before{$_} } keys %before;
	diag(sprintf(
			'chain of %d: %.2fs, wakeups %d, waits %d, acquired %d, timeouts %d',
			$n, $took, $delta{wakeups}, $delta{waits}, $delta{acquired},
			$delta{timeouts}));
	is($delta{acquired}, $n, 'stats: one acquisition per waiter');
	cmp_ok($delta{wakeups}, '>=', $n - 1, 'stats: every hand-off woke a waiter');
	cmp_ok($delta{wakeups}, '<=', 1.5 * $n, 'stats: no thundering herd');
	is($delta{timeouts}, 0, 'stats: no timeouts');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM dlock.waiters'),
		'0', 'no waiters left');
}

# 7. A waiter takes over at the holder's expiry, without the reaper (whose
# interval is an hour here).  One psql takes the lease and then waits, so
# the wait starts well before the expiry however slow psql starts.
{
	$node->safe_psql('postgres', q{SELECT dlock.unlock('busy', 'owner')});
	my ($f1, $old_expiry, $started, $f2, $acquired) = split /\n/,
	  $node->safe_psql('postgres', q{
		SELECT dlock.try_lock('expiring', 'short', '2s');
		SELECT extract(epoch FROM expires_at) FROM dlock.locks
		  WHERE resource = 'expiring';
		SELECT extract(epoch FROM clock_timestamp());
		SELECT dlock.lock('expiring', 'patient', '30s', '20s');
		SELECT extract(epoch FROM acquired_at) FROM dlock.locks
		  WHERE resource = 'expiring' AND holder = 'patient';});
	cmp_ok($started, '<', $old_expiry, 'the wait started before the expiry');
	cmp_ok($f2, '>', $f1, 'the waiter got the lock with a higher fence');
	my $late = $acquired - $old_expiry;
	diag(sprintf('took over %.1f ms after the lease expired', 1000 * $late));
	cmp_ok($late, '>=', 0, 'not before the expiry');
	cmp_ok($late, '<', 0.5, 'promptly at the expiry');
	is(dstat('expired') >= 1 ? 1 : 0, 1, 'stats: counted as an expiry');
}

# 8. A waiter in lock() with no limit behind a pinned holding does not make
# the holder's renew wait for the pin (0.1.1's review: its request, queued
# in the lock manager behind the pin, held up every later renew).  The
# sessions start before the 4 s lease is taken, and the renew is timed in
# its own session: no psql start-up (0.5-2 s now and then on a loaded
# machine) between the take and the renew, nor in the renew's time.
{
	my $pinner = $node->background_psql('postgres', on_error_stop => 0);
	my $waiter = $node->background_psql('postgres', on_error_stop => 0);
	my $holder = $node->background_psql('postgres', on_error_stop => 0);
	$holder->query_safe(q{SET statement_timeout = '30s'});
	my $f = $holder->query_safe(q{SELECT dlock.try_lock('pinned', 'h', '4s')});
	$pinner->query_safe("BEGIN; SELECT dlock.assert_fence('pinned', $f)");
	$waiter->query_until(qr/waiting now/,
		"\\echo waiting now\nSELECT dlock.lock('pinned', 'w', '1h');\n");
	my $waits = 'f';
	for (1 .. 1500)
	{
		$waits = $holder->query_safe(
			q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'pinned'});
		last if $waits eq 't';
		usleep(20_000);
	}
	is($waits, 't', 'a waiter waits for the pinned resource');
	usleep(300_000);
	my ($t0, $renewed, $t1) = split /\n/, $holder->query_safe(q{
		SELECT extract(epoch FROM clock_timestamp());
		SELECT dlock.renew('pinned', 'h', '1h') > clock_timestamp() + interval '50 min';
		SELECT extract(epoch FROM clock_timestamp());});
	is($renewed, 't', 'the holder renews while pinned and waited for');
	cmp_ok($t1 - $t0, '<', 1, 'at once');
	$holder->quit;
	$pinner->query_safe('COMMIT');
	$pinner->quit;
	is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'pinned'}),
		'h', 'the holder still holds it');
	$node->safe_psql('postgres', q{SELECT dlock.unlock('pinned', 'h')});
	ok($node->poll_query_until('postgres',
		q{SELECT holder = 'w' FROM dlock.locks WHERE resource = 'pinned'}),
		'the waiter gets it once released');
	$waiter->quit;
	$node->safe_psql('postgres', q{SELECT dlock.unlock_all('w')});
}

$node->stop;
done_testing();
