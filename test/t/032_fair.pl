# 032_fair.pl: fair queues and lock-delay with real waiters.
#
# 20 fair waiters of three kinds queue behind a holder: backends waiting in
# dlock.lock(..., fair => true), clients retrying try_lock(..., fair =>
# true) on their own side, and such clients through a real pgbouncer in
# transaction mode.  Some are cancelled, terminated or killed mid-queue.
# Released one by one, the rest are served exactly in arrival order, and
# nobody waits longer than dlock.queue_ttl behind a dead client's ticket.
# Then lock-delay: an expired holder's resource is refused until its expiry
# plus the delay and a sleeping waiter takes it right after; a clean unlock
# frees at once.  The order is checked again without shared_preload_libraries
# (waits poll).
# Promises: P7

use strict;
use warnings;

use DBI;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Bouncer;
use Time::HiRes qw(time usleep);

my $QUEUE_TTL = 1.0;    # seconds, set server-wide below

# ---------- a preloaded node and pgbouncer in transaction mode
my $node = PostgreSQL::Test::Cluster->new('fair');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.queue_ttl = '${QUEUE_TTL}s'
max_connections = 80
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
$node->safe_psql('postgres',
	'CREATE TABLE served (who text, fence bigint, got timestamptz, released timestamptz, asked timestamptz)');
$node->safe_psql('postgres', 'GRANT ALL ON served TO PUBLIC');

my $tmp = PostgreSQL::Test::Utils::tempdir();
my $bport = DlockTest::Bouncer::start($node, $tmp, pool => 4, clients => 100);

sub dsn_direct
{
	my ($n) = @_;
	return 'dbi:Pg:host=' . $n->host . ';port=' . $n->port . ';dbname=postgres';
}
my $dsn_bouncer = defined $bport
  ? "dbi:Pg:host=127.0.0.1;port=$bport;dbname=postgres;sslmode=disable" : undef;

# waiter KIND DSN RESOURCE WHO: fork a waiter.  "server" waits in
# dlock.lock(..., fair => true); "client" retries try_lock(..., fair =>
# true) every 50 ms.  Once served it records itself in "served" (with
# when it first asked, by its session's clock), holds the lock 30 ms and
# unlocks.  Returns the child's pid.
sub waiter
{
	my ($kind, $dsn, $resource, $who) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return $pid if $pid;
	my $code = 0;
	eval {
		my $dbh = DBI->connect($dsn, '', '',
			{ AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0 });
		my $fence;
		my ($asked) = $dbh->selectrow_array(q{SELECT clock_timestamp()});
		if ($kind eq 'server')
		{
			($fence) = $dbh->selectrow_array(
				q{SELECT dlock.lock($1, $2, '30s', '60s', fair => true)},
				undef, $resource, $who);
		}
		else
		{
			my $until = time + 60;
			while (time < $until)
			{
				($fence) = $dbh->selectrow_array(
					q{SELECT dlock.try_lock($1, $2, '30s', fair => true)},
					undef, $resource, $who);
				last if defined $fence;
				usleep(50_000);
			}
		}
		die "not served\n" unless defined $fence;
		$dbh->do(q{INSERT INTO served (who, fence, got, asked) VALUES ($1, $2, clock_timestamp(), $3)},
			undef, $who, $fence, $asked);
		usleep(30_000);
		$dbh->do(q{UPDATE served SET released = clock_timestamp() WHERE who = $1}, undef, $who);
		$dbh->selectrow_array(q{SELECT dlock.unlock($1, $2)}, undef, $resource, $who);
		$dbh->disconnect;
	};
	$code = 1 if $@;
	POSIX::_exit($code);
}

sub wait_child
{
	my ($pid, $timeout) = @_;
	my $until = time + $timeout;
	while (time < $until)
	{
		my $r = waitpid($pid, POSIX::WNOHANG());
		return $? >> 8 if $r == $pid;
		usleep(20_000);
	}
	kill 'KILL', $pid;
	waitpid($pid, 0);
	return -1;
}

# queued N RESOURCE WHO COUNT: wait until WHO has its ticket: with shared
# memory it shows in dlock.queue; without, only client tickets do, and a
# backend's ticket is its lock in pg_locks (class 0x444C + 5): wait until
# COUNT tickets in all exist.
sub queued
{
	my ($n, $resource, $who, $count, $preloaded) = @_;
	return $n->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM dlock.queue WHERE resource = '$resource' AND holder = '$who'")
	  if $preloaded;
	return $n->poll_query_until('postgres',
		"SELECT (SELECT count(*) FROM dlock.queue WHERE resource = '$resource')
		      + (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		            AND objsubid = 17489 AND granted) = $count");
}

# run_queue NODE RESOURCE KINDS FATES: queue one waiter per KINDS entry in
# that order behind a holder, apply FATES (index => 'cancel' | 'terminate' |
# 'kill') while all wait, release, and check the order.  Returns the
# (who => served-at) rows.
sub run_queue
{
	my ($n, $resource, $kinds, $fates, $label, $preloaded) = @_;
	my $fence0 = $n->safe_psql('postgres', "SELECT dlock.try_lock('$resource', 'holder', '1h')");
	ok($fence0 ne '', "$label: the holder has $resource");
	my (@who, %pid);
	for my $i (0 .. $#$kinds)
	{
		my $who = sprintf('w%02d', $i + 1);
		my ($kind, $via) = @{ $kinds->[$i] };
		my $dsn = $via eq 'bouncer' ? $dsn_bouncer : dsn_direct($n);
		$pid{$who} = waiter($kind, $dsn, $resource, $who);
		ok(queued($n, $resource, $who, $i + 1, $preloaded), "$label: $who ($kind, $via) is queued");
		push @who, $who;
	}
	is($n->safe_psql('postgres',
			"SELECT string_agg(holder, ' ' ORDER BY position) FROM dlock.queue WHERE resource = '$resource'"),
		join(' ', @who), "$label: dlock.queue lists them in arrival order")
	  if $preloaded;

	# The fates, while everyone waits.
	my %gone;
	for my $i (sort { $a <=> $b } keys %$fates)
	{
		my $who = $who[$i];
		my $fate = $fates->{$i};
		if ($fate eq 'kill')
		{
			kill 'KILL', $pid{$who};
			waitpid($pid{$who}, 0);
		}
		else
		{
			my $bpid = $n->safe_psql('postgres',
				"SELECT pid FROM dlock.waiters WHERE holder = '$who' AND fair");
			my $fn = $fate eq 'cancel' ? 'pg_cancel_backend' : 'pg_terminate_backend';
			$n->safe_psql('postgres', "SELECT $fn($bpid)");
			is(wait_child($pid{$who}, 30), 1, "$label: the wait of $who ends by $fate");
			ok($n->poll_query_until('postgres',
					"SELECT count(*) = 0 FROM dlock.queue WHERE holder = '$who'"),
				"$label: $who ($fate) leaves the queue at once");
		}
		$gone{$who} = $fate;
	}
	my @live = grep { !$gone{$_} } @who;

	my $t0 = time;
	$n->safe_psql('postgres', "SELECT dlock.unlock('$resource', 'holder')");
	for my $who (@live)
	{
		is(wait_child($pid{$who}, 90), 0, "$label: $who was served");
	}
	diag(sprintf('%s: %d waiters served in %.2f s', $label, scalar @live, time - $t0));
	is($n->safe_psql('postgres',
			"SELECT string_agg(who, ' ' ORDER BY fence) FROM served WHERE who LIKE 'w%'"),
		join(' ', @live), "$label: served exactly in arrival order");
	is($n->safe_psql('postgres',
			"SELECT count(*) FROM served s JOIN served t ON s.who < t.who
			  WHERE s.got < t.released AND t.got < s.released"),
		'0', "$label: no two holdings overlap");

	# Behind a dead client ticket nobody waits much longer than queue_ttl.
	for my $i (grep { $fates->{$_} eq 'kill' } keys %$fates)
	{
		my ($prev) = grep { $_ lt $who[$i] } reverse @live;
		my ($next) = grep { $_ gt $who[$i] } @live;
		next unless defined $next;
		my $gap = $n->safe_psql('postgres',
			"SELECT extract(epoch FROM n.got - " . (defined $prev ? 'p.released' : "'-infinity'::timestamptz")
			  . ") FROM served n" . (defined $prev ? ", served p WHERE p.who = '$prev' AND" : ' WHERE')
			  . " n.who = '$next'");
		$gap = 0 if $gap eq '-Infinity' || $gap < 0;
		diag("$label: behind the dead ticket of $who[$i], $next waited ${gap}s");
		cmp_ok($gap, '<', $QUEUE_TTL + 3,
			"$label: behind a dead ticket the queue moved on within queue_ttl (+ slack)");
	}
	$n->safe_psql('postgres', 'DELETE FROM served');
	return;
}

# ---------- 20 waiters, mixed, with cancel / terminate / kill
my @kinds;
for my $i (0 .. 19)
{
	my $k = $i % 3;
	push @kinds,
	  $k == 0 ? [ 'server', 'direct' ]
	  : $k == 1 ? [ 'client', 'direct' ]
	  : [ 'client', defined $dsn_bouncer ? 'bouncer' : 'direct' ];
}
run_queue($node, 'fair/r', \@kinds,
	{ 1 => 'kill', 3 => 'cancel', 5 => 'kill', 9 => 'terminate', 10 => 'kill' }, 'preloaded', 1);

# ---------- steady contention: everyone re-queues right after releasing
# 12 clients (8 waiting in lock(), 4 retrying try_lock) loop lock / 50 us /
# unlock for 8 s.  While all of them loop, no client ever gets the lock
# twice in a row: a releaser that asks again is a newcomer and queues at the
# back, whatever the timing (this found a race between a ticket being
# taken by a contended attempt and a newcomer's look at the queue).  They
# connect first and start together (a go file), so that on a loaded machine
# slow connections do not shrink the time when all of them loop.
sub looper
{
	my ($kind, $dsn, $resource, $who, $secs, $out) = @_;
	my $go = "$tmp/loop.go";
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	return $pid if $pid;
	my $code = 0;
	eval {
		my $dbh = DBI->connect($dsn, '', '',
			{ AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0 });
		my $lk = $dbh->prepare($kind eq 'server'
			? q{SELECT dlock.lock($1, $2, '30s', '60s', fair => true)}
			: q{SELECT dlock.try_lock($1, $2, '30s', fair => true)});
		my $ul = $dbh->prepare(q{SELECT dlock.unlock($1, $2)});
		open(my $fh, '>', $out) or die "$out: $!";
		open(my $rf, '>', "$out.ready") or die "$out.ready: $!";
		close($rf);
		usleep(5_000) until -e $go;
		my $end = time + $secs;
		while (time < $end)
		{
			my $f;
			until (defined $f)
			{
				$lk->execute($resource, $who);
				($f) = $lk->fetchrow_array;
				usleep(10_000) unless defined $f;
			}
			my $t = time;
			1 while time - $t < 50e-6;
			$ul->execute($resource, $who);
			$ul->fetchrow_array;
			printf $fh "%s %s %.6f\n", $f, $who, $t;
		}
		close($fh);
	};
	$code = 1 if $@;
	POSIX::_exit($code);
}
{
	my @pids;
	for my $i (1 .. 12)
	{
		push @pids, looper($i <= 8 ? 'server' : 'client', dsn_direct($node), 'fair/loop', "l$i", 8,
			"$tmp/loop.$i");
	}
	my $ready_by = time + 60;
	usleep(20_000) while grep({ !-e "$tmp/loop.$_.ready" } 1 .. 12) && time < $ready_by;
	open(my $gf, '>', "$tmp/loop.go") or die;
	close($gf);
	is(wait_child($_, 90), 0, "looper $_ finished") for @pids;
	my @acq;
	for my $i (1 .. 12)
	{
		open(my $fh, '<', "$tmp/loop.$i") or die;
		push @acq, map { [ split ] } <$fh>;
		close($fh);
	}
	@acq = sort { $a->[0] <=> $b->[0] } @acq;
	my (%first, %last);
	for (@acq) { $first{ $_->[1] } //= $_->[2]; $last{ $_->[1] } = $_->[2]; }
	my ($from) = sort { $b <=> $a } values %first;
	my ($to) = sort { $a <=> $b } values %last;
	my ($steady, $repeats, $gap) = (0, 0, 0);
	for my $k (1 .. $#acq)
	{
		next unless $acq[$k][2] > $from && $acq[$k][2] < $to;
		$steady++;
		$repeats++ if $acq[$k][1] eq $acq[ $k - 1 ][1];
		$gap = $acq[$k][2] - $acq[ $k - 1 ][2] if $acq[$k][2] - $acq[ $k - 1 ][2] > $gap;
	}
	diag(sprintf('steady contention: %d acquisitions in %.1f s, longest gap %.3f s',
		$steady, $to - $from, $gap));
	cmp_ok($steady, '>', 50, "steady contention: $steady acquisitions while all 12 looped");
	# A lost wakeup leaves the resource free with the head asleep until the
	# 5 s safety net (waiters.c): the longest gap shows it.
	cmp_ok($gap, '<', 4, 'steady contention: the resource never sat free for the safety net');
	is($repeats, 0, 'steady contention: no client got the lock twice in a row');
}

# A fair waiter's position shows in dlock.waiters.
{
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/w', 'holder', '1h')");
	my $p1 = waiter('server', dsn_direct($node), 'fair/w', 'v1');
	ok(queued($node, 'fair/w', 'v1', 1, 1), 'v1 queued');
	my $p2 = waiter('server', dsn_direct($node), 'fair/w', 'v2');
	ok(queued($node, 'fair/w', 'v2', 2, 1), 'v2 queued');
	is($node->safe_psql('postgres',
			"SELECT string_agg(holder || ':' || fair || ':' || position, ' ' ORDER BY position)
			   FROM dlock.waiters WHERE resource = 'fair/w'"),
		'v1:true:1 v2:true:2', 'dlock.waiters says which waiters are fair, and their positions');
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/w', 'holder')");
	is(wait_child($p1, 60), 0, 'v1 served');
	is(wait_child($p2, 60), 0, 'v2 served');
	$node->safe_psql('postgres', 'DELETE FROM served');
}

# ---------- lock-delay
{
	# Its expiry is read in the psql that took it: read by a psql of its
	# own, slow to start on a loaded machine, the reaper had freed it first.
	my ($fence, $times, $delay) = split /\n/, $node->safe_psql('postgres', q{
		SELECT dlock.try_lock('fair/d', 'dead', '1s', lock_delay => '3s');
		SELECT expires_at, available_at FROM dlock.locks WHERE resource = 'fair/d';
		SELECT available_at - expires_at FROM dlock.locks WHERE resource = 'fair/d';});
	ok(($fence // '') ne '', 'a holder takes fair/d with a lock-delay and then dies (never renews)');
	my ($exp, $avail) = split /\|/, $times // '';
	is($delay, '00:00:03', 'dlock.locks: available at expiry + lock_delay');
	# (Against the expiry read above: once reaped, the row has none.)
	$node->poll_query_until('postgres', "SELECT clock_timestamp() > '$exp'::timestamptz");
	# Refused by the delay alone (nobody is queued yet).  On a machine so
	# loaded that the 3 s window passed already, there is nothing to check.
	my $refused = $node->safe_psql('postgres',
		"SELECT CASE WHEN clock_timestamp() < '$avail'::timestamptz
		        THEN CASE WHEN dlock.try_lock('fair/d', 'other') IS NULL THEN 't' ELSE 'f' END
		        ELSE 'late' END");
	diag('the lock-delay window had passed before the check') if $refused eq 'late';
	ok($refused eq 't' || $refused eq 'late', 'expired but within its lock-delay: refused');
	my $w = waiter('server', dsn_direct($node), 'fair/d', 'next');
	is(wait_child($w, 30), 0, 'the sleeping waiter is served');
	# How late: after the delay's end, or after the waiter first asked if
	# that was later (its connection, made after the checks above, may
	# come after the end on a loaded machine).
	my ($after, $late) = split /\|/, $node->safe_psql('postgres',
		"SELECT extract(epoch FROM got - '$avail'::timestamptz),
		        extract(epoch FROM got - greatest('$avail'::timestamptz, asked))
		   FROM served WHERE who = 'next'");
	cmp_ok($after, '>=', 0, 'not before expiry + lock-delay');
	cmp_ok($late, '<', 2, 'and taken soon after (liveness)');
	diag(sprintf('lock-delay: taken %.1f ms after the delay ended, %.1f ms after it was both over and asked for',
		$after * 1000, $late * 1000));
	cmp_ok($node->safe_psql('postgres', "SELECT fence FROM served WHERE who = 'next'"),
		'>', $fence, 'with a higher fence');

	# A clean unlock frees at once, whatever the delay.
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/c', 'a', '1h', lock_delay => '1h')");
	my $w2 = waiter('server', dsn_direct($node), 'fair/c', 'b');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'fair/c'");
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/c', 'a')");
	is(wait_child($w2, 30), 0, 'after a clean unlock the waiter is served at once');
	$node->safe_psql('postgres', 'DELETE FROM served');
}

# ---------- a waiter in lock(..., fair => true) whose client is killed
# (SIGKILL of the client process, not of its backend), with
# client_connection_check_interval off: its backend must not be served (it
# would take the lock for its lease and only then die); the next waiter is.
{
	is($node->safe_psql('postgres', 'SHOW client_connection_check_interval'), '0',
		'client_connection_check_interval is off');
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/k', 'holder', '1h')");
	my $dead = waiter('server', dsn_direct($node), 'fair/k', 'k1');
	ok(queued($node, 'fair/k', 'k1', 1, 1), 'k1 waits in lock(fair)');
	my $next = waiter('server', dsn_direct($node), 'fair/k', 'k2');
	ok(queued($node, 'fair/k', 'k2', 2, 1), 'k2 waits behind it');
	kill 'KILL', $dead;
	waitpid($dead, 0);
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/k', 'holder')");
	ok($node->poll_query_until('postgres',
			"SELECT EXISTS (SELECT FROM served WHERE who = 'k2')
			     OR EXISTS (SELECT FROM dlock.locks WHERE resource = 'fair/k' AND holder = 'k1')"),
		'after the release, somebody took fair/k');
	is($node->safe_psql('postgres', "SELECT string_agg(who, ' ') FROM served"), 'k2',
		'the next live waiter k2 was served, not the killed client\'s backend');
	is(wait_child($next, 60), 0, 'k2 done');
	is($node->safe_psql('postgres', "SELECT count(*) FROM dlock.queue WHERE resource = 'fair/k'"),
		'0', 'nothing is left in the queue');
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM dlock.locks WHERE resource = 'fair/k' AND holder IS NOT NULL"),
		'0', 'nor in dlock.locks');
	$node->safe_psql('postgres', 'DELETE FROM served');
}

# ---------- a holder that queued client-side and then waits in lock()
# (which adopts its ticket) is one ticket: dlock.queue lists it once.
{
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/a', 'holder', '1h')");
	$node->safe_psql('postgres',
		"SET dlock.queue_ttl = '1h'; SELECT dlock.try_lock('fair/a', 'ad', fair => true)");
	my $bg = $node->background_psql('postgres');
	$bg->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock.lock('fair/a', 'ad', '1h', '60s');\n");
	ok($node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'fair/a' AND holder = 'ad' AND fair"),
		'ad waits in lock() with its client ticket');
	is($node->safe_psql('postgres',
			"SELECT string_agg(holder || ':' || position || ':' || (pid IS NOT NULL), ' ')
			   FROM dlock.queue WHERE resource = 'fair/a'"),
		'ad:1:true', 'dlock.queue lists its ticket once, as the waiter');
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/a', 'holder')");
	ok($node->poll_query_until('postgres',
			"SELECT holder = 'ad' FROM dlock.locks WHERE resource = 'fair/a'"), 'ad is served');
	$bg->quit;
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/a', 'ad')");
}

# ---------- withdraw: a client ticket at the head leaves, and a waiter in
# lock() behind it is served at once (not after dlock.queue_ttl, 1 h here).
{
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/x', 'holder', '1h')");
	$node->safe_psql('postgres',
		"SET dlock.queue_ttl = '1h'; SELECT dlock.try_lock('fair/x', 'c1', fair => true)");
	my $w = waiter('server', dsn_direct($node), 'fair/x', 'x2');
	ok(queued($node, 'fair/x', 'x2', 2, 1), 'x2 waits in lock(fair) behind client ticket c1');
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/x', 'holder')");
	is($node->safe_psql('postgres',
			"SELECT string_agg(holder, ' ' ORDER BY position) FROM dlock.queue WHERE resource = 'fair/x'"),
		'c1 x2', 'released: c1 heads the queue, x2 waits');
	is($node->safe_psql('postgres', "SELECT dlock.withdraw('fair/x', 'c1')"), 't', 'c1 withdraws');
	is(wait_child($w, 60), 0, 'x2 is served');
	$node->safe_psql('postgres', 'DELETE FROM served');
}

# ---------- client tickets are rows: a queue survives a restart
{
	$node->safe_psql('postgres', "ALTER SYSTEM SET dlock.queue_ttl = '1h'");
	$node->reload;
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/rs', 'holder', '1h')");
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/rs', 'c1', fair => true)");
	$node->safe_psql('postgres', "SELECT dlock.try_lock('fair/rs', 'c2', fair => true)");
	$node->restart;
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/rs', 'holder')");
	is($node->safe_psql('postgres', "SELECT dlock.try_lock('fair/rs', 'c2', fair => true) IS NULL"),
		't', 'after a restart the queue holds: c2 waits behind c1');
	isnt($node->safe_psql('postgres', "SELECT dlock.try_lock('fair/rs', 'c1', fair => true)"),
		'', 'c1 is served');
	$node->safe_psql('postgres', "SELECT dlock.unlock('fair/rs', 'c1')");
	isnt($node->safe_psql('postgres', "SELECT dlock.try_lock('fair/rs', 'c2', fair => true)"),
		'', 'then c2');
	$node->safe_psql('postgres', "ALTER SYSTEM RESET dlock.queue_ttl");
	$node->reload;
}

# ---------- without shared_preload_libraries: waits poll, the order holds
my $plain = PostgreSQL::Test::Cluster->new('fair_plain');
$plain->init;
$plain->append_conf('postgresql.conf', qq{
dlock.queue_ttl = '${QUEUE_TTL}s'
dlock.poll_interval = '20ms'
});
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION dlock');
$plain->safe_psql('postgres',
	'CREATE TABLE served (who text, fence bigint, got timestamptz, released timestamptz, asked timestamptz)');
$plain->safe_psql('postgres', 'GRANT ALL ON served TO PUBLIC');
my @pkinds = map { $_ % 2 ? [ 'client', 'direct' ] : [ 'server', 'direct' ] } 0 .. 7;
run_queue($plain, 'fair/p', \@pkinds, { 1 => 'kill' }, 'not preloaded', 0);
$plain->stop;
$node->stop;
done_testing();
