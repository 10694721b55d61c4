# 052_run_faults.pl - "dlock run" keeps COMMAND's whole process tree inside
# the lease whatever happens to the CLI (issue 8, defects 13 and 14).
#
#   1. The CLI is SIGKILLed while COMMAND has started background processes
#      (in its process group, in a new session with setsid, and daemonized
#      by a double fork): within lease + grace every one of them is gone.
#      What COMMAND leaves behind when it exits is stopped before the lock
#      is released.
#   2. The CLI is SIGSTOPped while COMMAND writes a timestamp every 50 ms:
#      COMMAND stops writing by the lease's end (the expiry the server holds
#      once no renewal can come), although the CLI is still stopped; at
#      SIGCONT the CLI exits with the lease-lost code, 76.
#   3. A seeded randomized fault run: several "dlock run" contenders for one
#      resource, each COMMAND writing its start, a tick every 20 ms and its
#      end into its own file, while CLIs and COMMANDs are SIGKILLed,
#      SIGTERMed, SIGSTOPped and resumed, and the server is restarted, at
#      random moments (the first fault of each kind, and once a stop of the
#      CLI for longer than the lease, hit the current holder).  Checked
#      from outside: no two COMMANDs' intervals (first to last write)
#      overlap, fences grow in the order COMMANDs started, and no
#      COMMAND wrote past the lease it knew (its start +
#      the lease, or the expiry of its last acknowledged renewal, from the
#      CLI's -v output) by more than $MARGIN; and that it did exercise
#      something (acquisitions, faults of every kind, lost leases, the
#      watchdog acting).  The seed is printed; DLOCK_FAULT_SEED=N replays
#      the same schedule of faults (their moments depend on timing).
#
# Env: DLOCK_CLI (default $TESTDIR/cli/dlock, else cli/dlock),
# DLOCK_FAULT_SEED.
# Promises: P2 P15
use strict;
use warnings;

use File::Spec;
use List::Util qw(max shuffle);
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);

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

my $node = PostgreSQL::Test::Cluster->new('runfaults');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);

sub conn { return $node->connstr('postgres') . " application_name=" . ($_[0] // 'dlock_test') }
sub sql { return $node->safe_psql('postgres', $_[0]) }

# The CLI's -v output gives expiries as timestamptz text: make it UTC, ISO.
my %cli_env = (PGTZ => 'UTC', PGDATESTYLE => 'ISO');

# worker.pl OUT SECONDS INTERVAL: COMMAND of tests 2 and 3.  Appends
# "S time pid fence", then "T time" every INTERVAL, then after SECONDS
# (0: never) "E time", to OUT; times are CLOCK_REALTIME (Time::HiRes).
my $worker = "$tmp/worker.pl";
{
	open(my $fh, '>', $worker) or die;
	print $fh <<'EOF';
use strict; use warnings; use IO::Handle; use Time::HiRes qw(time sleep);
my ($out, $secs, $every) = @ARGV;
open(my $f, '>>', $out) or die "$out: $!";
$f->autoflush(1);
my $t0 = time;
printf $f "S %.6f %d %s\n", $t0, $$, $ENV{DLOCK_FENCE} // '';
while ($secs == 0 || time - $t0 < $secs) { sleep $every; printf $f "T %.6f\n", time; }
printf $f "E %.6f\n", time;
EOF
	close($fh);
}

# read_log: (start, last write, pid, fence, ended) of a worker's file, or ().
sub read_log
{
	my ($file) = @_;
	my @l = split /\n/, slurp($file);
	return () unless @l && $l[0] =~ /^S (\S+) (\d+) (\d*)$/;
	my ($start, $pid, $fence) = ($1, $2, $3);
	my ($last) = $l[-1] =~ /^[STE] (\S+)/;
	return ($start, $last, $pid, $fence, $l[-1] =~ /^E / ? 1 : 0);
}

# epoch: a timestamptz text (ISO, with a zone offset) in seconds.
sub epoch
{
	my ($ts) = @_;
	my ($y, $mo, $d, $h, $mi, $s, $frac, $sign, $oh, $om) =
	  $ts =~ /^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)?([+-])(\d\d)(?::?(\d\d))?$/
	  or die "cannot parse timestamp \"$ts\"";
	my $off = ($oh * 3600 + ($om // 0) * 60) * ($sign eq '-' ? -1 : 1);
	return timegm($s, $mi, $h, $d, $mo - 1, $y) + ($frac // 0) - $off;
}

# wait_for: wait (bounded) until code returns true.
sub wait_for
{
	my ($secs, $code) = @_;
	my $deadline = time + $secs;
	while (time < $deadline)
	{
		return 1 if $code->();
		usleep(20_000);
	}
	return 0;
}

# ---------- 1. defect 13: a SIGKILLed CLI takes COMMAND's whole tree along
my %variants = (
	'background child in the process group' =>
	  'sleep 300 & echo $! > "$PIDF"; wait',
	'grandchild in a new session (setsid)' =>
	  'setsid sleep 300 & echo $! > "$PIDF"; wait',
	'daemon re-parented by a double fork' =>
	  '(setsid sleep 300 & echo $! > "$PIDF"); exec sleep 299',
);
for my $v (sort keys %variants)
{
	(my $tag = $v) =~ s/\W+/_/g;
	my $pidf = "$tmp/$tag.pid";
	my $t_lease = 2;
	my $t_grace = 1;
	my $pid = spawn("d13_$tag",
		cmd => [ $cli, '-d', conn(), 'run', '--lease', "${t_lease}s", '--grace', "${t_grace}s",
			"d13_$tag", '--', 'sh', '-c', $variants{$v} ],
		PIDF => $pidf, %cli_env);
	ok(wait_for(30, sub { slurp($pidf) =~ /^\d+\n/ }), "$v: COMMAND started");
	chomp(my $bg = slurp($pidf));
	# the tree as it is now, and the escaped one (a double fork leaves it
	# to whoever reaps orphans: the watchdog, or init without one)
	my %tree = map { $_ => 1 } (proc_tree($pid), $bg);
	ok(proc_alive($bg), "$v: the background process runs ($bg)");
	kill 'KILL', $pid;
	is(wait_exit($pid, 10), 137, "$v: CLI killed with SIGKILL");
	my @left = wait_gone($t_lease + $t_grace + 1, keys %tree);
	is_deeply(\@left, [], "$v: every descendant is gone within lease + grace")
	  or diag("still running: "
		  . join(', ', map { "$_ (" . (slurp("/proc/$_/cmdline") =~ s/\0/ /gr) . ')' } @left));
	kill 'KILL', @left if @left;
	like(slurp("$tmp/d13_$tag.err"), qr/watchdog: the client is gone/,
		"$v: the watchdog says why it stopped COMMAND");
}

# ---------- what COMMAND leaves behind when it exits is stopped before the
# lock is released (else it would run on without the lock)
{
	my $pidf = "$tmp/leftover.pid";
	my $pid = spawn('leftover',
		cmd => [ $cli, '-d', conn(), 'run', '--grace', '1s', 'leftover', '--',
			'sh', '-c', '(setsid sleep 300 & echo $! > "$PIDF"); sleep 300 & exit 3' ],
		PIDF => $pidf, %cli_env);
	is(wait_exit($pid, 30), 3, "leftover: COMMAND's exit status");
	chomp(my $bg = slurp($pidf));
	like($bg, qr/^\d+$/, 'leftover: COMMAND started a daemon');
	ok(!proc_alive($bg), 'leftover: it was stopped before the CLI exited');
	is(sql("SELECT count(*) FROM dlock.locks WHERE resource = 'leftover'"), '0',
		'leftover: the lock was released');
}

# ---------- 2. defect 14: a SIGSTOPped CLI does not let COMMAND run past its lease
{
	my $out = "$tmp/d14.log";
	my $pid = spawn('d14',
		cmd => [ $cli, '-v', '-d', conn(), 'run', '--lease', '2s', '--grace', '5s', 'd14', '--',
			'perl', $worker, $out, 0, 0.05 ],
		%cli_env);
	ok(wait_for(30, sub { scalar(() = read_log($out)) }), 'd14: COMMAND started');
	# let a renewal or two happen, so the deadline comes from a renewal
	ok(wait_for(30, sub { slurp("$tmp/d14.err") =~ /renewed until/ }), 'd14: the lease was renewed');
	# The expiry is read in a session started beforehand: a psql started
	# after the stop (0.5-2 s now and then on a loaded machine) came once
	# the lease, at most 2 s from the last renewal, had run out and been
	# reaped.
	my $look = $node->background_psql('postgres');
	usleep(300_000);
	my $stopped = time;
	kill 'STOP', $pid;
	usleep(200_000);			# a renewal already sent lands meanwhile
	my $expiry = $look->query_safe("SELECT extract(epoch FROM expires_at) FROM dlock.locks WHERE resource = 'd14'");
	$look->quit;
	like($expiry, qr/^\d+(\.\d+)?$/, 'd14: the server still has the lease');
	my ($start, $last, $cmdpid) = read_log($out);
	ok(wait_for(10, sub { !proc_alive($cmdpid) }), 'd14: COMMAND stopped while the CLI is still stopped');
	ok($node->poll_query_until('postgres',
			"SELECT dlock.try_lock('d14', 'next', '60s') IS NOT NULL"),
		'd14: the next holder takes the resource');
	my $next = time;
	usleep(500_000);
	($start, $last) = read_log($out);
	my $past = $last - $expiry;
	ok($past <= 0.2,
		sprintf('d14: the last write is at most 200 ms past the lease end (%+.3f s; '
			  . 'the CLI was stopped %.3f s before it)', $past, $expiry - $stopped));
	ok($last < $next, 'd14: nothing written once the next holder had the resource');
	kill 'CONT', $pid;
	is(wait_exit($pid, 30), 76, 'd14: at SIGCONT the CLI exits with the lease-lost code');
	my $err = slurp("$tmp/d14.err");
	like($err, qr/watchdog: the lease deadline passed/, 'd14: the watchdog stopped COMMAND');
	like($err, qr/lease on "d14" .* lost/, 'd14: the CLI reports the lost lease');
	sql("SELECT dlock.unlock('d14', 'next')");
}

# ---------- 3. randomized faults
my $seed = ($ENV{DLOCK_FAULT_SEED} // '') =~ /^(\d+)$/ ? $1 : int(rand(1 << 30)) ^ $$;
diag("randomized fault run: DLOCK_FAULT_SEED=$seed");
srand($seed);
{
	my $LEASE = 2.0;     # seconds
	my $GRACE = 0.5;
	my $MARGIN = 0.25;   # how far past its known lease a COMMAND may write
	my $SLOTS = 4;
	my $CHAOS = 25;      # seconds of faults
	my @kinds = qw(kill_cli term_cli stop_cli kill_cmd term_cmd stop_cmd restart);
	my %weight = (kill_cli => 3, term_cli => 2, stop_cli => 4, kill_cmd => 2,
		term_cmd => 1, stop_cmd => 3, restart => 2);
	my @pool = map { ($_) x $weight{$_} } @kinds;
	# every kind at least once, in a random order, then random ones
	my @schedule = (shuffle(@kinds), map { $pool[ int(rand(@pool)) ] } 1 .. 200);
	my $dir = "$tmp/faults";
	mkdir $dir or die;

	# act: send a signal (or restart) and keep a line about it, shown if
	# the checker complains
	my @events;
	my $act = sub {
		my ($k, $sig, $what, $pid, $more) = @_;
		kill $sig, $pid if $pid;
		push @events, sprintf('%.3f instance %d: %s %s %s', time, $k, $sig, $what, $more);
	};
	my $n = 0;
	my %inst;    # k => { cli => pid, out => file, code => exit code }
	my @slot;    # slot => k
	my @resume;  # [when, instance, 'cli' or 'COMMAND', pid] to SIGCONT
	my %applied;
	my $long_stop_done = 0;
	my $long_k;    # the instance whose CLI was stopped past its lease
	my $start_instance = sub {
		my $k = ++$n;
		# every third COMMAND lasts longer than a lease plus a bit
		my $dur = sprintf('%.2f', $k % 3 == 0 ? 3.5 + rand(1) : 0.2 + rand(2.8));
		$inst{$k} = { out => "$dir/w$k.log", dur => $dur };
		$inst{$k}{cli} = spawn("fault_cli$k",
			cmd => [ $cli, '-v', '-d', conn(), 'run', '--lease', "${LEASE}s",
				'--grace', "${GRACE}s", '--wait', '20s', 'fr', '--',
				'perl', $worker, $inst{$k}{out}, $dur, 0.02 ],
			%cli_env);
		return $k;
	};
	# running: instances whose CLI still runs; holders: those whose
	# COMMAND wrote its start and no end yet and still runs
	# (an instance whose CLI was stopped past its lease is left alone until
	# it has been resumed)
	my $running = sub {
		grep { !defined $inst{$_}{code} && ($inst{$_}{spare} // 0) < time }
		  map { $slot[$_] } 0 .. $#slot;
	};
	my $holders = sub {
		grep {
			my @r = read_log($inst{$_}{out});
			@r && !$r[4] && proc_alive($r[2])
		} $running->();
	};
	my $pick = sub { my @c = @_; return @c ? $c[ int(rand(@c)) ] : undef };
	my $reap = sub {
		for my $k (keys %inst)
		{
			next if defined $inst{$k}{code};
			my $r = waitpid($inst{$k}{cli}, WNOHANG);
			$inst{$k}{code} = code_of($?) if $r == $inst{$k}{cli};
		}
	};

	# left: how long a holder's COMMAND would still run on its own
	my $left = sub {
		my ($k) = @_;
		my @r = read_log($inst{$k}{out});
		return @r ? $inst{$k}{dur} - (time - $r[0]) : 0;
	};

	$slot[$_] = $start_instance->() for 0 .. $SLOTS - 1;
	my $t_end = time + $CHAOS;
	# once, at a random moment, the CLI of a holder whose COMMAND would run
	# on past its lease is stopped for longer than the lease: the case of
	# defect 14, which the checker must see if the lease is not enforced
	# (not a CLI already stopped: the resume of that shorter stop would let
	# it renew, and no watchdog would reach its deadline)
	my $long_stop_at = time + rand($CHAOS / 2);
	my $next_fault = time + 0.5 + rand(0.5);
	# (the chaos goes on for up to 15 s more until the long stop happened,
	# and until its resume is due: the wind-down below resumes every
	# stopped CLI at once, which would cut the long stop short)
	my $long_resume = 0;
	while (time < $t_end || (!$long_stop_done && time < $t_end + 15) || time < $long_resume)
	{
		$reap->();
		for my $s (0 .. $#slot)
		{
			$slot[$s] = $start_instance->() if defined $inst{ $slot[$s] }{code};
		}
		for my $r (grep { $_->[0] <= time } @resume)
		{
			$act->($r->[1], 'CONT', $r->[2], $r->[3], '') if proc_alive($r->[3]);
		}
		@resume = grep { $_->[0] > time } @resume;
		if (time >= $next_fault && !$long_stop_done && time >= $long_stop_at
			and my @long = grep { $left->($_) > $LEASE + 0.6 && ($inst{$_}{cli_stopped} // 0) < time }
			$holders->())
		{
			my $k = $long_k = $pick->(@long);
			$act->($k, 'STOP', 'cli', $inst{$k}{cli},
				sprintf('for %.1f s, its COMMAND has %.1f s to go', $LEASE + 1, $left->($k)));
			$long_resume = time + $LEASE + 1;
			push @resume, [ $long_resume, $k, 'cli', $inst{$k}{cli} ];
			$inst{$k}{spare} = $inst{$k}{cli_stopped} = time + $LEASE + 1.5;
			$long_stop_done = 1;
			$applied{stop_cli}++;
			$next_fault = time + 0.3 + rand(0.9);
		}
		elsif (time >= $next_fault && @schedule)
		{
			my $kind = shift @schedule;
			# a stopped CLI is not stopped again (its resume is set)
			my $ok = sub { $kind ne 'stop_cli' || ($inst{ $_[0] }{cli_stopped} // 0) < time };
			my @h = grep { $ok->($_) } $holders->();
			# the first fault of a kind hits a holder (or waits for one);
			# later ones hit the holder three times out of four
			my $k =
			    !$applied{$kind} ? $pick->(@h)
			  : (@h && rand() < 0.75) ? $pick->(@h)
			  :                         $pick->(grep { $ok->($_) } $running->());
			my ($cmdpid) = defined $k ? (read_log($inst{$k}{out}))[2] : ();
			my $done = 1;
			if ($kind eq 'restart')
			{
				my $mode = rand() < 0.5 ? 'fast' : 'immediate';
				$act->(0, 'restart', "server ($mode)", 0, '');
				if ($mode eq 'fast') { $node->restart }
				else { $node->stop('immediate'); $node->start }
			}
			elsif (!defined $k) { $done = 0 }
			elsif ($kind eq 'kill_cli') { $act->($k, 'KILL', 'cli', $inst{$k}{cli}, '') }
			elsif ($kind eq 'term_cli') { $act->($k, 'TERM', 'cli', $inst{$k}{cli}, '') }
			elsif ($kind eq 'stop_cli')
			{
				my $pause = 0.3 + rand($LEASE + 1.5);
				$act->($k, 'STOP', 'cli', $inst{$k}{cli}, sprintf('for %.1f s', $pause));
				push @resume, [ time + $pause, $k, 'cli', $inst{$k}{cli} ];
				$inst{$k}{cli_stopped} = time + $pause + 0.1;
			}
			elsif (!defined $cmdpid || !proc_alive($cmdpid)) { $done = 0 }
			elsif ($kind eq 'kill_cmd') { $act->($k, 'KILL', 'COMMAND', $cmdpid, '') }
			elsif ($kind eq 'term_cmd') { $act->($k, 'TERM', 'COMMAND', $cmdpid, '') }
			elsif ($kind eq 'stop_cmd')
			{
				my $pause = 0.2 + rand(2.8);
				$act->($k, 'STOP', 'COMMAND', $cmdpid, sprintf('for %.1f s', $pause));
				push @resume, [ time + $pause, $k, 'COMMAND', $cmdpid ];
			}
			if ($done) { $applied{$kind}++ }
			else { unshift @schedule, $kind }    # no target now: later
			$next_fault = time + 0.3 + rand(0.9);
		}
		usleep(10_000);
	}

	# wind down: resume everything, let the contenders finish
	$act->($_->[1], 'CONT', $_->[2], $_->[3], '') for grep { proc_alive($_->[3]) } @resume;
	ok(wait_for(90, sub { $reap->(); !grep { !defined $inst{$_}{code} } keys %inst }),
		'faults: every CLI finished');
	kill 'KILL', $inst{$_}{cli} for grep { !defined $inst{$_}{code} } keys %inst;

	# the checker
	my @runs;
	for my $k (sort { $a <=> $b } keys %inst)
	{
		my ($start, $last, $pid, $fence, $ended) = read_log($inst{$k}{out});
		next unless defined $start;
		my @renewed = map { epoch($_) } slurp("$tmp/fault_cli$k.err") =~ /renewed until (\S+ \S+)/g;
		push @runs, { k => $k, start => $start, last => $last, pid => $pid, fence => $fence,
			ended => $ended, known => max($start + $LEASE, @renewed), code => $inst{$k}{code} };
	}
	@runs = sort { $a->{start} <=> $b->{start} } @runs;
	my ($overlaps, $overruns, $fence_bad) = (0, 0, 0);
	my ($prev, $before);
	my $worst;    # the largest write past the known lease (negative: before)
	for my $r (@runs)
	{
		if ($prev && $r->{start} < $prev->{last})
		{
			$overlaps++;
			diag(sprintf('overlap: instance %d (fence %s) ran %.6f..%.6f, instance %d (fence %s) '
				  . 'started at %.6f', $prev->{k}, $prev->{fence}, $prev->{start}, $prev->{last},
				  $r->{k}, $r->{fence}, $r->{start}));
		}
		if ($before && !fence_lt($before->{fence}, $r->{fence}))
		{
			$fence_bad++;
			diag("fence order: instance $before->{k} ($before->{fence}) before $r->{k} ($r->{fence})");
		}
		$before = $r;
		$worst = $r->{last} - $r->{known} if !defined $worst || $r->{last} - $r->{known} > $worst;
		if ($r->{last} > $r->{known} + $MARGIN)
		{
			$overruns++;
			diag(sprintf('overrun: instance %d (fence %s, exit %s) wrote %.3f s past its lease',
				  $r->{k}, $r->{fence}, $r->{code} // '?', $r->{last} - $r->{known}));
		}
		$prev = $r if !$prev || $r->{last} > $prev->{last};
	}
	diag(join("\n", 'faults:', @events)) if $overlaps || $overruns || $fence_bad;
	is($overlaps, 0, 'faults: no two COMMANDs ran at the same time');
	is($fence_bad, 0, 'faults: fences grow in the order COMMANDs started');
	is($overruns, 0, "faults: no COMMAND wrote more than $MARGIN s past its known lease");
	my @alive = grep { proc_alive($_->{pid}) } @runs;
	is(scalar(@alive), 0, 'faults: no COMMAND is left running');

	# it did exercise something
	my %codes;
	$codes{ $_->{code} // 'none' }++ for values %inst;
	my $faults = 0;
	$faults += $_ for values %applied;
	diag('faults applied: ' . join(', ', map { "$_=" . ($applied{$_} // 0) } @kinds)
		  . '; COMMANDs run: ' . scalar(@runs) . ' (' . scalar(grep { $_->{ended} } @runs)
		  . ' to their end); CLI exit codes: '
		  . join(', ', map { "$_ x$codes{$_}" } sort keys %codes)
		  . sprintf('; latest write relative to its known lease: %+.3f s', $worst // 0));
	cmp_ok(scalar(@runs), '>=', 10, 'faults: at least 10 acquisitions ran COMMAND');
	cmp_ok(scalar(grep { $_->{ended} } @runs), '>=', 3, 'faults: some COMMANDs ran to their end');
	cmp_ok($faults, '>=', 12, 'faults: at least 12 faults were injected');
	is(scalar(grep { !$applied{$_} } @kinds), 0,
		'faults: every kind of fault happened (the first of each to a holder)');
	ok($long_stop_done, "faults: a holder's CLI was stopped past its lease");
	ok($codes{76}, 'faults: some CLI exited with the lease-lost code');
	my $errs = join('', map { slurp("$tmp/fault_cli$_.err") } keys %inst);
	ok($errs =~ /watchdog: the lease deadline passed/,
		'faults: a watchdog stopped COMMAND at its deadline')
	  or diag(join("\n", 'faults:', @events,
			  defined $long_k
			  ? ("instance $long_k, stopped past its lease:", slurp("$tmp/fault_cli$long_k.err"),
				  slurp($inst{$long_k}{out}) =~ s/(T \S+\n)+/T...\n/gr)
			  : ()));
	ok($errs =~ /watchdog: the client is gone/, 'faults: a watchdog outlived its CLI');
}

$node->stop;
done_testing();
