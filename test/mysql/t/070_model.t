# 070_model.t: the randomized, model-checked workload on the MySQL/MariaDB
# edition, in the default suite (about 35 s).  The workload
# (test/model/MyModelDriver.pm), checked by the checker of the PostgreSQL
# edition's (test/model/ModelCheck.pm, see there for each property: fences
# unique and increasing per resource, no overlapping holdings, an xact lock
# and a lease of one transaction included, no revival of an expired lease,
# only the owner changes its holding, counts, the prober's expired lease
# free at once, assert_fence only for a live holding, no unexpected error)
# plus no-wait: no call the contract says never waits (try_lock,
# try_xact_lock, check_fence; lock, xact_lock and reap, which poll or skip)
# waits for another transaction's row lock, and renew, unlock and
# unlock_all wait only for a transaction that pinned or changed that very
# holding (the holder's own other transaction, an uncommitted break_lock),
# as seen by a monitor polling INNODB_LOCK_WAITS (see MyModelDriver.pm).
#
# Six clients of three users (admin, granted break_lock; alice; bob) play
# random operations on three resources (and now and then one new to the
# table, the same for all clients for a quarter of a second) with leases of 50 ms to 1 s, in
# autocommit and in transactions (REPEATABLE READ and READ COMMITTED,
# savepoints, ROLLBACK TO, rollbacks), steal other users' holdings, keep
# CALL dlock.reap() open in transactions, while a prober (bob) checks that
# its expired lease is free at once.
#
# The seed is printed (diag); DLOCK_MODEL_SEED=N replays its choices (the
# interleaving differs).  DLOCK_MODEL_SECONDS (default 30) sets the run's
# length; DLOCK_KEEP=1 keeps the server's directory and the logs.
# Promises: P1 P2 P4 P5 P12
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use lib "$FindBin::Bin/../../model";
use DlockMy;
use Test::More;
use POSIX ();
use File::Path qw(make_path remove_tree);
use File::Temp qw(tempdir);
use Time::HiRes ();
use JSON::PP ();

use ModelCheck;
use MyModelDriver;

my $seed = $ENV{DLOCK_MODEL_SEED} // int(rand(2_000_000_000));
my $seconds = $ENV{DLOCK_MODEL_SECONDS} // 30;
my $clients = 6;
my $tag = 'my';

my $my = DlockMy->new;
# The logs go to test/mysql/tmp_check/model-*, removed when every test
# passed (and DLOCK_KEEP is not set): a failed run keeps its history.
make_path("$FindBin::Bin/../tmp_check");
my $dir = tempdir('model-XXXXXX', DIR => "$FindBin::Bin/../tmp_check", CLEANUP => 0);
END { remove_tree($dir) if $dir && !$ENV{DLOCK_KEEP} && Test::More->builder->is_passing }
my %pass = (alice => 'pa', bob => 'pb', admin => 'pc', root => '');
my @users = qw(admin alice bob);
my @res = map { "$tag/r$_" } 0 .. 2;
diag("dlock model (MariaDB): seed $seed ($clients clients + 1 prober, $seconds s, "
	  . scalar(@res) . " resources, logs in $dir)");

# ok_error: the errors the workload provokes on purpose: another user's
# holding (42501), a stale fence in assert_fence (55P03), break_lock by a
# user not granted it (1370, SQLSTATE 42000), and waits that ran into the
# lock wait timeout or a deadlock (no-wait decides whether the call may
# wait at all), and CALL dlock.reap() inside a transaction, which is
# refused (25001; in autocommit that would be a violation).  Inside a
# transaction (README, MySQL "Traps"): CALL dlock.lock() on a resource the
# transaction holds with xact_lock (40P01), and an acquisition whose
# REPEATABLE READ snapshot is older than the resource's change of holder
# (error 1020, the transaction rolled back); the same for a holder's renew,
# unlock, unlock_all and assert_fence from such a snapshot, which would
# otherwise keep the row or its pin locked (046_stale_caller).
my %ACQ = map { $_ => 1 } qw(try_lock lock xact_lock try_xact_lock renew unlock unlock_all assert_fence);
sub ok_error
{
	my ($o) = @_;
	my ($s, $n) = ($o->{err}, $o->{errno} // 0);
	return 1 if $s eq '42501' || $s eq '55P03';
	return 1 if $s eq '25001' && $o->{k} eq 'reap' && $o->{xact};
	return 1 if $s eq '40P01' && $o->{k} eq 'lock' && $o->{xact};
	return 1 if $n == 1020 && $ACQ{ $o->{k} } && $o->{xact};
	return 1 if $n == 1370 && $o->{k} eq 'break_lock' && $o->{role} ne 'admin';
	return 1 if $n == 1205 || $n == 1213;
	return 0;
}

my @pids;
my @logs;
my $start = Time::HiRes::time() + 0.5;
for my $i (0 .. $clients)
{
	my $prober = $i == $clients;
	my $user = $prober ? 'bob' : $users[ $i % 3 ];
	my $log = "$dir/client$i.log";
	push @logs, $log;
	my $client = MyModelDriver->new(
		id => $i, user => $user, pass => $pass{$user}, sock => $my->{sock},
		seed => ($seed * 1009 + $i * 7919) % 4294967291, seconds => $seconds,
		resources => \@res, tag => $tag, probe => $prober ? "$tag/probe" : undef,
		logfile => $log, start => $start);
	my $pid = fork // die "fork: $!";
	if ($pid == 0)
	{
		my $ok = eval { $client->run; 1 };
		print STDERR "client $i: $@" unless $ok;
		POSIX::_exit($ok ? 0 : 1);
	}
	push @pids, $pid;
}
my $mon = fork // die "fork: $!";
if ($mon == 0)
{
	my $ok = eval { MyModelDriver::monitor($my->{sock}, 'root', '', "$dir/waits.log", $seconds + 1); 1 };
	print STDERR "monitor: $@" unless $ok;
	POSIX::_exit($ok ? 0 : 1);
}
my $died = 0;
for my $pid (@pids, $mon)
{
	waitpid($pid, 0);
	$died++ if $? != 0;
}
is($died, 0, 'every client and the waits monitor ran to the end');

my $ops = ModelCheck::load(@logs);
my ($stray, $ambiguous, $queued, $reaper) = MyModelDriver::mark_waits($ops, "$dir/waits.log");
my ($v, $stats) = ModelCheck::check($ops, ok_error => \&ok_error);
$stats->{'waits outside operations'} = $stray;
$stats->{'waits of an ambiguous transaction id'} = $ambiguous;
$stats->{'lock requests queued, not waited for (SKIP LOCKED)'} = $queued;
$stats->{'waits for the reaper (allowed)'} = $reaper;
diag('dlock model: ' . join(', ', map { "$_ $stats->{$_}" } sort keys %$stats));
my %kinds;
for (@$v) { $kinds{$1}++ if /^VIOLATION \[([^\]]+)\]/ }
if (@$v)
{
	# The first few of each kind.
	my %shown;
	diag($_) for grep { my ($k) = /^VIOLATION \[([^\]]+)\]/; ($shown{$k}++ // 0) < 3 } @$v;
}
is(scalar @$v, 0, "no violation (seed $seed)")
  or diag('violations by kind: ' . join(', ', map { "$_ $kinds{$_}" } sort keys %kinds)
	  . "; logs kept in $dir");
if ($kinds{'no-wait'})
{
	my %nw;
	$nw{ $_->{k} }++ for grep { $_->{nowait} && $_->{waited} } @$ops;
	diag('no-wait violations by call: ' . join(', ', map { "$_ $nw{$_}" } sort keys %nw));
}
explain_refusals($ops) if $kinds{'free-at-once'};
explain_waits($ops) if $kinds{'no-wait'};

# open_units: the transactions of the run, {c, t0, tdone, ops}.
sub open_units
{
	my ($ops) = @_;
	my %unit;
	for my $o (grep { $_->{xact} } @$ops)
	{
		my $u = $unit{"$o->{c}/$o->{u}"} //= { c => $o->{c}, t0 => $o->{t0}, tdone => $o->{tdone}, ops => [] };
		$u->{t0} = $o->{t0} if $o->{t0} < $u->{t0};
		push @{ $u->{ops} }, $o;
	}
	return values %unit;
}

# unit_text: a transaction's operations started before time t.
sub unit_text
{
	my ($u, $t) = @_;
	return "c$u->{c} ($u->{ops}[0]{iso}): "
	  . join(' ', map { $_->{k} . (defined $_->{r} ? "($_->{r}" . (defined $_->{h} ? " $_->{h}" : '')
		  . (defined $_->{err} ? " error $_->{err}" : defined $_->{res} ? '' : ' NULL') . ')' : '') }
		  grep { $_->{t0} <= $t } @{ $u->{ops} });
}

# explain_waits: for the first nowait calls seen waiting, the transaction
# of the connection they waited for.
sub explain_waits
{
	my ($ops) = @_;
	my @units = open_units($ops);
	my %shown;
	for my $w (grep { $_->{nowait} && $_->{waited} } @$ops)
	{
		next if ($shown{ $w->{k} }++ // 0) >= 3;
		my %bc = map { $_ => 1 } ($w->{blocker} // '') =~ /c(\d+)/g;    # c2|c3: either
		my @by = grep { $bc{ $_->{c} } && $_->{t0} <= $w->{t1} && $w->{t0} <= $_->{tdone} } @units;
		diag("$w->{k} (c$w->{c} $w->{role}" . (defined $w->{r} ? " $w->{r}" : '')
			  . (defined $w->{err} ? " error $w->{err}" : '') . ") waited"
			  . (defined $w->{wq} ? " in: $w->{wq}" : '') . (defined $w->{wlock} ? " [$w->{wlock}]" : '') . "; for: "
			  . (@by ? join('; ', map { unit_text($_, $w->{t1}) } @by) : $w->{blocker} // 'unknown'));
	}
}

# explain_refusals: for each refused probe, the transactions of other
# clients open at that moment and what they had done by then.
sub explain_refusals
{
	my ($ops) = @_;
	my @units = open_units($ops);
	my $n = 0;
	for my $p (grep { $_->{expect_free} && !defined $_->{err} && !defined $_->{res} } @$ops)
	{
		last if $n++ >= 5;
		my @open = grep { $_->{t0} <= $p->{t0} && $p->{t0} <= $_->{tdone} } @units;
		diag("refused probe at $p->{t0}: open transactions then: "
			  . join('; ', map { unit_text($_, $p->{t0}) } @open));
	}
}
cmp_ok($stats->{holdings} // 0, '>', 50, 'the workload took holdings');
cmp_ok($stats->{probes} // 0, '>', 10, 'the prober probed');
cmp_ok($stats->{'ok unlock'} // 0, '>', 10, 'unlocks succeeded');
cmp_ok($stats->{'old-fence calls refused'} // 0, '>', 5, 'unlocks and renews under an old fence refused');
cmp_ok($stats->{'ok try_xact_lock'} // 0, '>', 5, 'transaction-scoped locks were taken');

# The checker fires on this edition's records: a nowait call marked waited,
# an error not provoked on purpose, two holdings given one fence.
my $flagged = sub {
	my ($kind, $alter) = @_;
	my $copy = [ map { {%$_} } @$ops ];
	my $done = $alter->($copy);
	my ($v2) = ModelCheck::check($copy, ok_error => \&ok_error);
	ok($done && grep({ /^VIOLATION \[$kind\]/ } @$v2), "checker: an altered log breaks '$kind'");
};
$flagged->('no-wait', sub {
	my ($o) = grep { $_->{nowait} && !$_->{waited} && $_->{k} eq 'try_lock' } @{ $_[0] };
	return 0 unless $o;
	$o->{waited} = 1;
	return 1;
});
$flagged->('error', sub {
	my ($o) = grep { $_->{k} eq 'break_lock' } @{ $_[0] };
	return 0 unless $o;
	@$o{qw(err errno msg)} = ('HY000', 1020, 'Record has changed since last read');
	return 1;
});
$flagged->('fence-unique', sub {
	my @a = grep { ($_->{k} eq 'try_lock' || $_->{k} eq 'lock')
		  && !defined $_->{err} && defined $_->{res} } @{ $_[0] };
	my ($x) = grep { $_->{h} ne $a[0]{h} || $_->{r} ne $a[0]{r} } @a;
	return 0 unless $x;
	$x->{res} = $a[0]{res};
	return 1;
});

# mark_waits on a made-up history: an unlock_all seen waiting for a
# blocking transaction id INNODB_TRX lists under two connections, one of
# which pinned that holding (assert_fence of its fence) in a transaction
# still open: allowed (this flagged an unlock_all of seed 1686648822, whose
# wait was for its own user's pin, listed under one id with two unrelated
# connections); with a second blocker of another id that touched nothing:
# not allowed.  The rows of one poll have their own times: still one
# sighting (seed 1118433950, MariaDB 11.8: id 0, that of every transaction
# that wrote nothing, listed an unrelated one first and the pin 0.1 ms
# later).  A pin of another fence, or of another resource than the one the
# waiting statement names, does not allow it.
{
	my $hist = sub {
		my (%pin) = @_;
		return [ { c => 0, tid => 100, u => 1, k => 'unlock_all', role => 'admin', h => 'x', res => 1, t0 => 1000, t1 => 2000, tdone => 2000, xact => 0 },
			{ c => 1, tid => 101, u => 1, k => 'assert_fence', role => 'admin', r => 'r', f => 5, res => 1, t0 => 900, t1 => 950, tdone => 2100, xact => 1, %pin },
			{ c => 2, tid => 102, u => 1, k => 'sleep', role => 'bob', t0 => 900, t1 => 2100, tdone => 2100, xact => 1 },
			{ c => 3, tid => 103, u => 1, k => 'sleep', role => 'bob', t0 => 900, t1 => 2100, tdone => 2100, xact => 1 },
			{ c => 4, tid => 104, u => 1, k => 'try_lock', role => 'admin', r => 'r', h => 'x', res => 5, t0 => 800, t1 => 850, tdone => 850, xact => 0 },
			{ c => 4, tid => 104, u => 2, k => 'try_lock', role => 'admin', r => 's', h => 'y', res => 6, t0 => 860, t1 => 870, tdone => 870, xact => 0 } ];
	};
	my $q = q{UPDATE dlock.pins SET fence = NULL WHERE resource = 'r' AND tail = 0};
	my $seen = sub {
		my ($pin, @lines) = @_;
		my $ops = $hist->(%$pin);
		my $f = "$dir/waits-selftest.log";
		open(my $fh, '>', $f) or die "$f: $!";
		print $fh JSON::PP->new->canonical->encode({ t => 1500, tid => 100, q => $q, same => 1, %$_ }), "\n" for @lines;
		close $fh;
		MyModelDriver::mark_waits($ops, $f);
		return $ops->[0];
	};
	my $o = $seen->({}, { by => 102, btrx => 7, bsame => 2 }, { by => 101, btrx => 7, bsame => 2 });
	ok($o->{waited} && !$o->{nowait}, 'checker: a wait for an ambiguous blocking id, one of whose connections pinned the holding, is allowed');
	$o = $seen->({}, { by => 102, btrx => 7, bsame => 2 }, { by => 101, btrx => 7, bsame => 2 }, { by => 103, btrx => 8, bsame => 1 });
	ok($o->{waited} && $o->{nowait}, 'checker: ... but not with another blocker that touched nothing');
	my @poll = ({ p => 9, t => 1500, by => 102, btrx => 0, bsame => 2 }, { p => 9, t => 1501, by => 101, btrx => 0, bsame => 2 });
	$o = $seen->({}, @poll);
	ok($o->{waited} && !$o->{nowait}, 'checker: ... also when the rows of one poll have different times');
	is($o->{blocker}, 'c1|c2', 'checker: ... and both connections are named as its blocker');
	$o = $seen->({}, map { +{ %$_, p => $_->{t} } } @poll);
	ok($o->{waited} && $o->{nowait}, 'checker: ... not when they are two polls');
	my $pin = $poll[1];
	$o = $seen->({}, $pin);
	ok($o->{waited} && !$o->{nowait}, 'checker: a wait for a pin of the holding alone is allowed');
	$o = $seen->({ f => 6 }, $pin);
	ok($o->{waited} && $o->{nowait}, 'checker: a pin of another fence does not allow the wait');
	$o = $seen->({ r => 's', f => 6 }, { %$pin, q => $q =~ s/'r'/'s'/r });
	ok($o->{waited} && $o->{nowait}, 'checker: ... nor one of another holder on the resource the statement names');
	$o = $seen->({}, { %$pin, q => $q =~ s/'r'/'s'/r });
	ok($o->{waited} && $o->{nowait}, 'checker: ... nor a pin of the holding on another resource than the one the statement names');
}

# mark_waits and a lock() seen in INNODB_LOCK_WAITS in its SKIP LOCKED read
# of a row another transaction holds: without a wait start (ws null), a
# request MariaDB queued and withdrew without waiting (test
# 042_skip_locked_queue.t), not a wait (this was flagged as a no-wait
# violation of a lock() that polled on time, MariaDB 11.8); with one, a
# wait, flagged.  Unless that wait start is a second older than the call:
# InnoDB keeps a transaction's last wait start, so a request queued and
# withdrawn shows the connection's earlier wait (seed 1307336578, MariaDB
# 10.11: a lock(wait 0) seen at 12:40:54.708 in its SKIP LOCKED read with
# a wait start of 12:40:48, flagged).  A wait start in the second the call
# began may be its own: a wait.
{
	my $q = q{SELECT 1, holder, owner, fence, expires_at INTO v_found, v_h, v_owner, v_fence, v_exp FROM dlock.leases AS skipping WHERE resource = 'r' AND tail = 0 FOR UPDATE SKIP LOCKED};
	my $seen = sub {
		my ($line, $query, $base) = @_;
		$base //= 0;    # the epoch of the made-up history, in microseconds
		my $ops = [ { c => 0, tid => 100, u => 1, k => 'lock', r => 'r', h => 'h', wait => 100, res => 7, nowait => 1,
				t0 => $base + 1000, t1 => $base + 2000, tdone => $base + 2000, xact => 1 },
			{ c => 1, tid => 101, u => 1, k => 'try_lock', r => 'r', h => 'g', res => 6, nowait => 1,
				t0 => $base + 900, t1 => $base + 950, tdone => $base + 1900, xact => 1 } ];
		my $f = "$dir/waits-selftest.log";
		open(my $fh, '>', $f) or die "$f: $!";
		print $fh JSON::PP->new->canonical->encode({ t => $base + 1500, tid => 100, q => $query // $q, by => 101, btrx => 7, bsame => 1, same => 1, %$line }), "\n";
		close $fh;
		my @n = MyModelDriver::mark_waits($ops, $f);
		return ($ops->[0], $n[2]);
	};
	my ($o, $queued) = $seen->({ ws => undef });
	ok(!$o->{waited} && $queued == 1, 'checker: a lock() request seen queued without a wait start is not a wait');
	($o, $queued) = $seen->({ ws => '2026-11-27 09:00:00' });
	ok($o->{waited} && $o->{nowait} && $queued == 0, 'checker: ... with a wait start, a wait of a call that never waits');
	(my $plain = $q) =~ s/ SKIP LOCKED//;
	($o, $queued) = $seen->({ ws => undef }, $plain);
	ok($o->{waited} && $o->{nowait} && $queued == 0, 'checker: ... and without one in a read that skips nothing (no SKIP LOCKED), a wait');
	# The call began at 2026-11-28 12:40:54.706 UTC.
	my $base = 1795869654705999;
	($o, $queued) = $seen->({ ws => '2026-11-28 12:40:48' }, undef, $base);
	ok(!$o->{waited} && $queued == 1, 'checker: a lock() request seen queued with a wait start 6 s before the call began is not a wait');
	($o, $queued) = $seen->({ ws => '2026-11-28 12:40:53' }, undef, $base);
	ok(!$o->{waited} && $queued == 1, 'checker: ... nor with one in the second before the call began');
	($o, $queued) = $seen->({ ws => '2026-11-28 12:40:54' }, undef, $base);
	ok($o->{waited} && $o->{nowait} && $queued == 0, 'checker: ... with one in the second the call began, a wait');
	my $reap = q{SELECT 1 INTO v_one FROM dlock.reapers AS waiting WHERE slot = dlock._slot( NAME_CONST('p_resource',_binary'r' COLLATE 'binary')) LOCK IN SHARE MODE};
	($o) = $seen->({ ws => '2026-11-27 09:00:00' }, $reap);
	ok(!$o->{waited}, 'checker: a wait for the reaper in _reaper_wait (dlock.reapers AS waiting) is allowed (seed 1223718088)');
	($o, $queued) = $seen->({ ws => '2026-11-28 12:40:48' }, $plain, $base);
	ok($o->{waited} && $o->{nowait} && $queued == 0, 'checker: ... and with an old one in a read that skips nothing, a wait');
}

done_testing();
