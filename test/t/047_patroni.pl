# 047_patroni.pl: dlock through the failovers of a real Patroni cluster.
#
# One etcd member and two Patroni-managed PostgreSQL nodes (Patroni and etcd
# from Debian; DlockTest::Patroni), dlock preloaded, synchronous_mode: true,
# all on loopback.  While two "dlock run" loops hand a resource to each
# other and three clients (DlockTest::Counter) increment a fenced counter,
# all through a multi-host connection string (target_session_attrs =
# read-write), the leader's postmaster is SIGKILLed; Patroni promotes the
# sync standby.  Checked after each failover: the new leader is the former
# sync standby; every holding acknowledged before the kill is there with its
# holder and fence; the first acquisition after the kill gets a fence above
# every fence handed out before it (its delay is printed as the failover
# time); the new leader's reaper reaps a lease that expires there; the
# counter goes on; the old leader rejoins as a replica (pg_rewind if its WAL
# went further).  Then the same again the other way round (back to the
# first node).  At the end: no acknowledged increment lost, the counter's
# log is 1..N in write order with strictly increasing fences, every row in
# it acknowledged or of a COMMIT whose answer was lost; the "dlock run"
# COMMANDs never overlapped, their fences increased, and the ones running
# at a kill either kept their lock (COMMAND completed, exit 0) or lost it
# cleanly (COMMAND killed, exit 76); no other exit status: a run that
# starts while no primary is up retries its connection (--wait 60s).
# Promises: P1 P2 P3 P14 P15

use strict;
use warnings;

use DBI;
use File::Spec;
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Proc;
use DlockTest::Patroni;
use DlockTest::Counter;

for my $prog (qw(patroni etcd pg_config))
{
	plan skip_all => "$prog not found on PATH (apt-get install patroni etcd-server)"
	  unless grep { -x "$_/$prog" } File::Spec->path;
}
my $cli = $ENV{DLOCK_CLI}
  // (defined $ENV{TESTDIR} ? "$ENV{TESTDIR}/cli/dlock" : 'cli/dlock');
$cli = File::Spec->rel2abs($cli);
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;




my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);

my $pc = DlockTest::Patroni->new(
	nodes => 2,
	dir => $tmp,
	parameters => { 'dlock.reap_interval' => '200ms', log_min_messages => 'warning' });
my $t0 = time;
my $leader = $pc->start;
is($leader, 'node1', 'node1 bootstrapped the cluster and leads it');
my $sync = $pc->sync_standby;
is($sync, 'node2', 'node2 is the sync standby');
note sprintf('cluster up in %.1f s', time - $t0);

{
	my $dbh = $pc->connect($leader);
	DlockTest::Counter::setup($dbh);
	$dbh->disconnect;
}

# ---------- the clients, all through the multi-host connection string
mkdir "$tmp/counter";
my @counters = DlockTest::Counter::start(
	clients => 3,
	conninfo => $pc->multi_conninfo('counter'),
	dir => "$tmp/counter",
	lease => '5s');

# Two "dlock run" loops on one resource: each COMMAND logs its start and
# end with its fence; the loop logs each exit status.
my $stop = "$tmp/run.stop";
my @runs;
for my $r (1, 2)
{
	push @runs, spawn("run$r",
		cmd => [ 'sh', '-c', q{
			while [ ! -e "$STOP" ]; do
				"$CLI" -v -d "$CONN" run --lease 6s --wait 60s handover -- \
					sh -c 'echo "start $DLOCK_FENCE $(date +%s.%N)" >> "$LOG"; sleep 4;
					       echo "end $DLOCK_FENCE $(date +%s.%N)" >> "$LOG"'
				echo "exit $? $(date +%s.%N)" >> "$LOG"
			done } ],
		STOP => $stop, CLI => $cli, CONN => $pc->multi_conninfo("run$r"),
		LOG => "$tmp/run$r.log");
}

# run_events: the "dlock run" log lines of both loops, in time order:
# {run, what (start|end|exit), fence or code, time}.
sub run_events
{
	my @ev;
	for my $r (1, 2)
	{
		for my $l (split /\n/, slurp("$tmp/run$r.log"))
		{
			my ($what, $x, $t) = split / /, $l;
			next unless defined $t;
			push @ev, { run => $r, what => $what, x => $x, time => $t };
		}
	}
	return sort { $a->{time} <=> $b->{time} } @ev;
}

# acks_after: the counter's acknowledged increments after time t.
sub acks_after
{
	my ($t) = @_;
	return grep { $_->{what} eq 'ack' && $_->{time} > $t }
	  DlockTest::Counter::read_logs("$tmp/counter");
}

# wait_until: poll code every 100 ms for up to secs; its last value.
sub wait_until
{
	my ($secs, $code) = @_;
	my $deadline = time + $secs;
	my $v;
	until (($v = $code->()) || time > $deadline) { usleep(100_000) }
	return $v;
}

# max_fence: the largest of some fences (decimal strings).
sub max_fence
{
	my $m = '0';
	for (@_) { $m = $_ if defined $_ && fence_lt($m, $_) }
	return $m;
}

my @failover_times;
my @at_kill;    # the "dlock run" COMMAND running at each kill: [run, fence]

# failover: kill the leader's postmaster while everything runs, and check
# what the new leader has.
sub failover
{
	my ($round, $victim) = @_;
	my $heir = $pc->sync_standby;
	ok(defined $heir && $heir ne $victim, "round $round: $victim leads, $heir is the sync standby");

	# Acknowledged holdings on the leader: long ones that must survive with
	# their fences, and a short one that the new leader must reap.
	my %held;
	{
		my $dbh = $pc->connect($victim);
		for my $i (1 .. 10)
		{
			($held{"held-$round-$i"}) = $dbh->selectrow_array(
				q{SELECT dlock.try_lock(?, 'keeper', '10min')}, undef, "held-$round-$i");
		}
		$dbh->disconnect;
	}
	is(scalar(grep { defined } values %held), 10, "round $round: 10 holdings acknowledged");

	# The counter moves and a "dlock run" COMMAND has just started.
	my $since = time;
	ok(wait_until(60, sub { acks_after($since) >= 10 }),
		"round $round: the counter moves on $victim");
	my $started = wait_until(60, sub {
		my ($s) = grep { $_->{what} eq 'start' && $_->{time} > $since } run_events();
		return $s;
	});
	ok($started, "round $round: a dlock run COMMAND started");
	usleep(500_000);
	my $fences_before = max_fence(values %held,
		map { $_->{fence} } grep { $_->{what} =~ /^(ack|unknown|fenced)$/ }
		  DlockTest::Counter::read_logs("$tmp/counter"));
	$fences_before = max_fence($fences_before,
		map { $_->{x} } grep { $_->{what} eq 'start' } run_events());
	push @at_kill, [ $started->{run}, $started->{x} ] if $started;
	# A lease that ends after the promotion (refreshed there to promotion
	# time + 4 s): the new leader's reaper must remove it.
	my $short = $pc->query($victim, q{SELECT dlock.try_lock(?, 'short', '4s')}, "reap-$round");
	ok(defined $short, "round $round: a 4 s lease taken just before the kill");

	# Kill; probe for the first acquisition anywhere writable.
	my $killed = $pc->kill_postmaster($victim);
	# The connection that gets it also looks at the 4 s lease (refreshed at
	# the promotion) and the expired counter: connections of their own,
	# after the checks below, came once it was reaped on a loaded machine.
	my ($probe_fence, $probe_port, $short_holder, $expired0);
	my $conninfo = $pc->multi_conninfo('probe') =~ s/connect_timeout=\d+/connect_timeout=1/r;
	while (time < $killed + 120)
	{
		my $dbh = DBI->connect("dbi:Pg:$conninfo", '', '',
			{ AutoCommit => 1, RaiseError => 0, PrintError => 0 });
		if ($dbh)
		{
			($probe_fence, $probe_port) = $dbh->selectrow_array(
				q{SELECT dlock.try_lock(?, 'probe', '1min'), inet_server_port()},
				undef, "probe-$round");
			($short_holder, $expired0) = $dbh->selectrow_array(
				q{SELECT (SELECT holder FROM dlock.leases WHERE resource = ?), (dlock.stats()).expired},
				undef, "reap-$round") if defined $probe_fence;
			$dbh->disconnect;
			last if defined $probe_fence;
		}
		usleep(50_000);
	}
	my $took = time - $killed;
	ok(defined $probe_fence, "round $round: an acquisition succeeded after the kill");
	push @failover_times, $took;
	diag(sprintf('failover %d (%s -> %s): primary killed -> first acquisition on the new leader: %.2f s',
		$round, $victim, $heir, $took));

	my $new = $pc->wait_leader(not => $victim, timeout => 60);
	is($new, $heir, "round $round: Patroni promoted the sync standby $heir");
	is($probe_port, $pc->node($new)->{pg_port}, "round $round: that acquisition was on $new");
	ok(fence_lt($fences_before, $probe_fence // 0),
		"round $round: its fence $probe_fence is above every fence before the kill ($fences_before)");

	my $dbh = $pc->connect($new);
	my $rows = $dbh->selectall_hashref(
		q{SELECT resource, holder, fence::text AS fence FROM dlock.locks
		  WHERE resource LIKE 'held-' || ? || '-%' AND NOT expired}, 'resource', undef, $round);
	is_deeply({ map { $_ => $rows->{$_}{fence} } keys %$rows }, \%held,
		"round $round: every acknowledged holding is on $new with its fence");
	is(scalar(grep { $_->{holder} ne 'keeper' } values %$rows), 0,
		"round $round: and with its holder");
	$dbh->disconnect;

	is($short_holder, 'short', "round $round: the 4 s lease is live on $new after the promotion");
	ok(wait_until(30, sub {
		$pc->query($new, q{SELECT count(*) = 0 FROM dlock.leases WHERE resource = ? AND holder IS NOT NULL},
			"reap-$round") }),
		"round $round: the expired lease is gone on $new");
	cmp_ok($pc->query($new, 'SELECT (dlock.stats()).expired'), '>', $expired0,
		"round $round: removed by the reaper of $new (its expired counter)");

	ok(wait_until(60, sub { acks_after($killed + $took) >= 10 }),
		"round $round: the counter moves on $new");

	# The old leader rejoins as a replica and becomes the sync standby.
	my $c = $pc->wait_members(timeout => 150);
	is($c->{$victim}{role}, 'sync_standby', "round $round: $victim rejoined as the sync standby");
	cmp_ok($c->{$victim}{timeline}, '>', $round, "round $round: on the new timeline $c->{$victim}{timeline}");
	my $rewound = slurp($pc->node($victim)->{log}) =~ /running pg_rewind from/ ? 'with' : 'without';
	note "round $round: $victim rejoined $rewound pg_rewind";
	return;
}

failover(1, 'node1');
failover(2, 'node2');
my $final = $pc->wait_leader;
is($final, 'node1', 'the cluster failed back to node1');

# ---------- stop the clients, then check the whole history
DlockTest::Counter::stop("$tmp/counter", @counters);
open(my $fh, '>', $stop) or die;
close($fh);
is(scalar(wait_gone(60, @runs)), 0, 'the dlock run loops ended');
waitpid($_, 0) for @runs;

my @ev = DlockTest::Counter::read_logs("$tmp/counter");
my @acks = grep { $_->{what} eq 'ack' } @ev;
my %unknown = map { ("$_->{client}/$_->{value}/$_->{fence}" => 1) } grep { $_->{what} eq 'unknown' } @ev;
is(join("\n", map { $_->{text} } grep { $_->{what} eq 'error' } @ev), '', 'no counter client error');
note sprintf('counter: %d acknowledged, %d unknown, %d fenced off, %d reconnections',
	scalar(@acks), scalar(keys %unknown), scalar(grep { $_->{what} eq 'fenced' } @ev),
	scalar(grep { $_->{what} eq 'reconnect' } @ev));
cmp_ok(scalar(grep { $_->{what} eq 'reconnect' } @ev), '>=', 2, 'the counter clients reconnected');

my $dbh = $pc->connect($final);
my $log = $dbh->selectall_arrayref(
	'SELECT value, fence::text, holder FROM counter_log ORDER BY seq');
my ($value) = $dbh->selectrow_array('SELECT value FROM fenced_counter WHERE id = 1');
$dbh->disconnect;
my %in_db = map { my ($c) = $_->[2] =~ /(\d+)$/; ("$c/$_->[0]/$_->[1]" => 1) } @$log;
my @lost = grep { !$in_db{"$_->{client}/$_->{value}/$_->{fence}"} } @acks;
is(scalar(@lost), 0, 'no acknowledged increment was lost')
  or diag('lost: ' . join(', ', map { $_->{text} } @lost));
my %acked = map { ("$_->{client}/$_->{value}/$_->{fence}" => 1) } @acks;
my @phantom = grep { !$acked{$_} && !$unknown{$_} } keys %in_db;
is(scalar(@phantom), 0, 'every logged increment was acknowledged or its COMMIT answer lost')
  or diag("phantoms: @phantom");
is($value, scalar(@$log), "the counter ($value) counts the logged increments");
is(join(',', map { $_->[0] } @$log), join(',', 1 .. scalar(@$log)),
	'the logged values are 1..N in write order: no lost update');
my @bad = grep { !fence_lt($log->[ $_ - 1 ][1], $log->[$_][1]) } 1 .. $#$log;
is(scalar(@bad), 0, 'fences strictly increase in write order, across both failovers')
  or diag("first bad row: $bad[0]");

# ---------- the dlock run history
my @rev = run_events();
my @bad_exit = grep { $_->{what} eq 'exit' && $_->{x} !~ /^(0|76)$/ } @rev;
is(join(' ', map { "run$_->{run}:$_->{x}" } @bad_exit), '',
	'every dlock run exited 0 (kept its lock) or 76 (lost it, COMMAND killed)');
# Intervals: start .. end (or the run's exit, if COMMAND was killed).
my (@iv, %open);
for my $e (@rev)
{
	if ($e->{what} eq 'start') { $open{ $e->{run} } = { fence => $e->{x}, from => $e->{time} } }
	elsif ($e->{what} =~ /^(end|exit)$/ && $open{ $e->{run} })
	{
		my $i = delete $open{ $e->{run} };
		$i->{to} = $e->{time};
		$i->{run} = $e->{run};
		$i->{how} = $e->{what};
		push @iv, $i;
	}
}
cmp_ok(scalar(grep { $_->{run} == 1 } @iv), '>=', 2, 'run loop 1 ran COMMAND repeatedly');
cmp_ok(scalar(grep { $_->{run} == 2 } @iv), '>=', 2, 'run loop 2 ran COMMAND repeatedly');
my @overlap = grep { $iv[$_]{from} < $iv[ $_ - 1 ]{to} } 1 .. $#iv;
is(scalar(@overlap), 0, 'the dlock run COMMANDs never overlapped');
my @fdown = grep { !fence_lt($iv[ $_ - 1 ]{fence}, $iv[$_]{fence}) } 1 .. $#iv;
is(scalar(@fdown), 0, 'each COMMAND ran with a higher fence than the one before');
for my $k (@at_kill)
{
	my ($run, $fence) = @$k;
	my ($i) = grep { $_->{run} == $run && $_->{fence} eq $fence } @iv;
	my ($exit) = grep { $_->{run} == $run && $_->{what} eq 'exit' && $i && $_->{time} >= $i->{to} } @rev;
	my $how = !$i || !$exit ? 'unfinished'
	  : $i->{how} eq 'end' && $exit->{x} == 0 ? 'kept'
	  : $i->{how} eq 'exit' && $exit->{x} == 76 ? 'lost'
	  : "exit $exit->{x} after $i->{how}";
	like($how, qr/^(kept|lost)$/,
		"the dlock run holding fence $fence at a kill kept its lock or lost it cleanly ($how)");
}

my $total = time - $t0;
diag(sprintf('failover times: %s s; whole test %.0f s',
	join(', ', map { sprintf('%.2f', $_) } @failover_times), $total));
$pc->teardown;
done_testing();
