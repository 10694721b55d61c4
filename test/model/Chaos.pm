# Chaos.pm: the model workload (Model.pm) with a chaos actor.
#
# Chaos::run(node => PostgreSQL::Test::Cluster, seed, clients, seconds,
# resources, dir, tag, out) forks the clients of ChaosDriver.pm (roles in
# turn as in Model.pm, odd ids with synchronous_commit = off, plus the
# prober) and, in this process, plays the chaos actor until the end:
# at random moments chosen by the seed it
#  - terminates a client's backend (pg_terminate_backend), preferring one
#    inside a lock() wait or an open transaction;
#  - cancels a client's statement (pg_cancel_backend);
#  - kills a client's backend with SIGKILL (the postmaster then resets
#    every session and recovers: a crash);
#  - restarts the server: a fast stop and start, and an immediate stop
#    (crash) and start (recovery), each at least once per run;
#  - plays two episodes on resources of its own: a session holding a
#    transaction-scoped lock (xact_lock, idle or inside a statement) is
#    terminated or killed, after which the resource must be acquirable
#    ("xact-gone"); a session waiting in lock() (fair or not) behind the
#    actor's holding is terminated, cancelled or killed, after which the
#    waiter holds nothing and, once the actor releases, another lock()
#    gets the resource within dlock.queue_ttl ("waiter-gone").
# Around each restart it takes a holding with a long lease from a session
# with synchronous_commit = off (acknowledged just before the stop), takes
# a fence before the stop and after the start, and right after recovery
# reads dlock.locks (a "snap"): ChaosCheck.pm checks the promises across
# the restarts with these.  The actor logs its operations and markers to
# chaos.log in ModelDriver's format (client id = clients + 1).
# The seed is printed first; the same seed replays the same choices (the
# interleaving differs).  Returns (violations, stats, seed).

package Chaos;

use strict;
use warnings;

use DBD::Pg qw(:async);
use File::Path qw(make_path);
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time usleep);

use ChaosCheck;
use ChaosDriver;
use Model;
use ModelDriver;

my $T = q{(extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8};
my $JSON = JSON::PP->new->canonical;

sub rnd { return int(rand($_[0])); }
sub pick { my @a = @_; return $a[ rnd(scalar @a) ]; }

# The actor's state: node, conninfo, dbh, log, id, seq, unit, tag, counts.
sub new
{
	my ($class, %a) = @_;
	my $self = bless {%a, seq => 0, unit => 0, stats => {}}, $class;
	open($self->{log}, '>', "$a{dir}/chaos.log") or die "$a{dir}/chaos.log: $!\n";
	$self->{log}->autoflush(1);
	return $self;
}

# conn: a new superuser connection (retrying while the server is down).
sub conn
{
	my ($self, $app, $async) = @_;
	my $deadline = time + 90;
	while (1)
	{
		my $dbh = eval { ModelDriver::connect_as($self->{conninfo}, undef) };
		if ($dbh && $dbh->do("SET application_name = '$app'")
			&& (!$async || $dbh->do('SET synchronous_commit = off')))
		{
			return $dbh;
		}
		die "chaos: cannot connect: " . ($DBI::errstr // $@) . "\n" if time > $deadline;
		usleep(100_000);
	}
}

sub dbh
{
	my ($self) = @_;
	$self->{dbh} = $self->conn('chaos-actor') unless $self->{dbh} && $self->{dbh}->ping;
	return $self->{dbh};
}

sub clock
{
	my ($self) = @_;
	for (1 .. 3)
	{
		my ($t) = $self->dbh->selectrow_array("SELECT $T");
		return $t if defined $t;
		$self->{dbh} = undef;
	}
	die "chaos: cannot read the clock\n";
}

# log_rec: write one record (ModelDriver's format).
sub log_rec
{
	my ($self, %r) = @_;
	my $rec = { c => $self->{id}, role => $self->{super}, su => 1, u => ++$self->{unit},
		n => $self->{seq}++, xact => 0, fate => 'commit', ufate => 'commit', %r };
	$rec->{tlo} //= $rec->{t1};
	$rec->{tdone} //= $rec->{t1};
	print { $self->{log} } $JSON->encode($rec), "\n";
	return $rec;
}

# op: one autocommit call on dbh (default: the actor's), logged.
sub op
{
	my ($self, $dbh, $k, $sql, $binds, %f) = @_;
	$dbh //= $self->dbh;
	my $row = $dbh->selectrow_arrayref("SELECT $T, $sql, $T", undef, @$binds);
	my %r = (k => $k, %f);
	if ($row) { ($r{t0}, $r{res}, $r{t1}) = @$row }
	else
	{
		# The actor's own calls run when no restart is under way; one that
		# fails anyway (a client's SIGKILL reset every session) is lost.
		$r{err} = $dbh->state || 'XXXXX';
		$r{msg} = $dbh->errstr;
		$r{lost} = 1;
		$r{fate} = 'maybe';
		$self->{dbh} = undef;
		$r{t1} = $r{t0} = $self->clock;
	}
	my $tdone = $self->clock;
	return $self->log_rec(%r, tdone => $tdone);
}

# victims: the backends of the clients, [pid, in lock() or a transaction].
sub victims
{
	my ($self) = @_;
	my $rows = $self->dbh->selectall_arrayref(
		q{SELECT pid, (query LIKE '%dlock.lock(%' AND state = 'active')
		          OR state LIKE 'idle in transaction%'
		    FROM pg_stat_activity WHERE application_name LIKE 'chaos-c%' ORDER BY pid});
	return @{ $rows || [] };
}

sub victim
{
	my ($self) = @_;
	my @v = $self->victims or return undef;
	my @busy = grep { $_->[1] } @v;
	return (@busy && rnd(3) ? pick(@busy) : pick(@v))->[0];
}

# restart: stop the server (fast, immediate, or by SIGKILL of backend
# pid), start it, and note before and after; then the snapshot.
sub restart
{
	my ($self, $mode, $pid) = @_;
	my $k = ++$self->{restarts};
	my $r = "$self->{tag}/chaos/d$k";
	# A holding acknowledged just before the stop, from a session with
	# synchronous_commit = off (leased, and in a session), and a fence
	# before the stop.
	my $async = $self->conn('chaos-async', 1);
	$self->op($async, 'try_lock', 'dlock.try_lock($1, $2, $3::interval)',
		[ $r, 'chaos/d', '60 seconds' ], r => $r, h => 'chaos/d', lease => 60000, async => 1);
	# And one in a session of a minute, when the edition has sessions.
	$self->{sessions} //= $async->selectrow_array(
		q{SELECT count(*) FROM pg_proc WHERE proname = 'open_session'
		     AND pronamespace = 'dlock'::regnamespace});
	if ($self->{sessions})
	{
		my $o = $self->op($async, 'open_session', 'dlock.open_session($1::interval, $2)',
			[ '60 seconds', 'chaos/s' ], h => 'chaos/s', ttl => 60000, async => 1);
		$self->op($async, 'try_lock', 'dlock.try_lock($1, session => $2::int8)',
			[ "$r/s", $o->{res} ], r => "$r/s", h => 'chaos/s', sess => $o->{res}, async => 1)
		  if defined $o->{res};
	}
	$self->epoch;
	my $tstop = $self->clock;
	$async->disconnect;
	$self->{dbh} = undef;
	if ($mode eq 'sigkill')
	{
		# The crash is under way once a sentinel session is gone (the
		# postmaster ends every session, then recovers).
		my $sentinel = $self->conn('chaos-sentinel');
		kill 'KILL', $pid;
		my $deadline = time + 30;
		usleep(20_000) while time < $deadline && $sentinel->ping;
		eval { $sentinel->disconnect };
	}
	else
	{
		$self->{node}->stop($mode);
		$self->{node}->start;
	}
	# The server is up again once a session can read the clock.
	my $tup = $self->clock;
	$self->{stats}{"restarts $mode"}++;
	$self->log_rec(k => 'restart', mode => $mode, tstop => $tstop, tup => $tup,
		t0 => $tstop, t1 => $tup);
	$self->snap;
	$self->epoch;
}

# epoch: a fence on the actor's resource (taken and released).
sub epoch
{
	my ($self) = @_;
	my $r = "$self->{tag}/chaos/epoch";
	# (A new holder text each time: an unlock undone by a crash leaves the
	# last one holding for its lease, and a re-entry keeps its fence.)
	my $h = 'chaos/e' . ++$self->{epochs};
	my $o = $self->op(undef, 'lock', 'dlock.lock($1, $2, $3::interval, $4::interval)',
		[ $r, $h, '1 second', '5 seconds' ], r => $r, h => $h, lease => 1000, wait => 5000);
	$self->op(undef, 'unlock', 'dlock.unlock($1, $2, $3::int8)', [ $r, $h, $o->{res} ],
		r => $r, h => $h, f => $o->{res})
	  if defined $o->{res};
}

# snap: dlock.locks as the server sees it now (t0 read in an earlier
# statement: what was acknowledged before t0 is in the snapshot).  Owners
# by name as the roles are (owner::text quotes a name like "Dev-User").
sub snap
{
	my ($self) = @_;
	my $t0 = $self->clock;
	my $row = $self->dbh->selectrow_arrayref(
		qq{SELECT (SELECT json_agg(json_build_array(resource, holder, fence::text,
		             (extract(epoch FROM expires_at) * 1000000)::int8, pg_get_userbyid(owner::oid)))
		             FROM dlock.locks), $T});
	return unless $row;
	$self->log_rec(k => 'snap', t0 => $t0, t1 => $row->[1],
		rows => decode_json($row->[0] // '[]'));
}

# kill_session: end session pid: terminate (waiting for its exit),
# cancel, or SIGKILL (a crash: restart() handles it).
sub kill_session
{
	my ($self, $how, $pid) = @_;
	$self->{stats}{"$how"}++;
	if ($how eq 'sigkill') { $self->restart('sigkill', $pid) }
	elsif ($how eq 'terminate')
	{
		$self->dbh->do('SELECT pg_terminate_backend($1, 5000)', undef, $pid);
	}
	else { $self->dbh->do('SELECT pg_cancel_backend($1)', undef, $pid) }
}

# xact_episode: a session holding an xact lock is terminated or killed.
sub xact_episode
{
	my ($self) = @_;
	my $r = "$self->{tag}/chaos/xv";
	my $v = $self->conn('chaos-victim');
	my ($pid) = $v->selectrow_array('SELECT pg_backend_pid()');
	$v->do('BEGIN');
	my $o = $self->op($v, 'xact_lock', 'dlock.xact_lock($1, $2::interval)', [ $r, '1 second' ],
		r => $r, wait => 1000, xact => 1, fate => 'rollback', ufate => 'rollback');
	return unless defined $o->{res};
	$v->do('SELECT pg_sleep(30)', { pg_async => PG_ASYNC }) if rnd(2);
	usleep(rnd(200_000));
	my $how = pick('terminate', 'terminate', 'sigkill');
	$self->kill_session($how, $pid);
	eval { $v->pg_cancel; $v->disconnect };
	$self->op(undef, 'lock', 'dlock.lock($1, $2, $3::interval, $4::interval)',
		[ $r, 'chaos/x', '200 milliseconds', '10 seconds' ], r => $r, h => 'chaos/x',
		lease => 200, wait => 10000, expect => 'xact-gone', how => $how);
	$self->{stats}{'xact-gone episodes'}++;
}

# waiter_episode: a session waiting in lock() behind the actor's holding
# is terminated, cancelled or killed.
sub waiter_episode
{
	my ($self) = @_;
	my $r = "$self->{tag}/chaos/wv";
	my $hold = $self->op(undef, 'try_lock', 'dlock.try_lock($1, $2, $3::interval)',
		[ $r, 'chaos/hold', '60 seconds' ], r => $r, h => 'chaos/hold', lease => 60000);
	return unless defined $hold->{res};
	my $v = $self->conn('chaos-victim');
	my ($pid) = $v->selectrow_array('SELECT pg_backend_pid()');
	my $fair = rnd(2) ? 'true' : 'false';
	my $t0 = $self->clock;
	my $sth = $v->prepare("SELECT dlock.lock(\$1, 'chaos/w', '1 second', '30 seconds', $fair)::text",
		{ pg_async => PG_ASYNC });
	$sth->execute($r);
	usleep(100_000 + rnd(300_000));
	my $how = pick('terminate', 'cancel', 'sigkill');
	$self->kill_session($how, $pid);
	# The waiter's outcome: a cancel answers 57014; the others end it.
	my ($res, $err, $lost);
	if ($how eq 'cancel')
	{
		# A cancel that came before the call began is lost: cancel again.
		for (1 .. 60)
		{
			last if $v->pg_ready;
			usleep(100_000);
			$self->dbh->do('SELECT pg_cancel_backend($1)', undef, $pid) if $_ % 5 == 0;
		}
		my $n = $sth->pg_result;
		if (defined $n) { my $row = $sth->fetchrow_arrayref; $res = $row && $row->[0] }
		else { $err = $v->state || 'XXXXX' }
	}
	else { $lost = 1; $err = '57P01' }
	eval { $sth->finish; $v->disconnect };
	my $t1 = $self->clock;
	$self->log_rec(k => 'lock', r => $r, h => 'chaos/w', lease => 1000, wait => 30000,
		fair => $fair eq 'true' ? 1 : 0, victim => 1, t0 => $t0, t1 => $t1, res => $res,
		(defined $err ? (err => $err) : ()), ($lost ? (lost => 1, fate => 'maybe') : ()));
	$self->op(undef, 'unlock', 'dlock.unlock($1, $2, $3::int8)', [ $r, 'chaos/hold', $hold->{res} ],
		r => $r, h => 'chaos/hold', f => $hold->{res});
	my $n = $self->op(undef, 'lock', 'dlock.lock($1, $2, $3::interval, $4::interval)',
		[ $r, 'chaos/after', '200 milliseconds', '15 seconds' ], r => $r, h => 'chaos/after',
		lease => 200, wait => 15000, expect => 'waiter-gone', how => $how, fair => $fair);
	$self->op(undef, 'look', q{(SELECT count(*) FROM dlock.locks WHERE resource = $1 AND holder = 'chaos/w')
		  + (SELECT count(*) FROM dlock.queue WHERE resource = $1 AND holder = 'chaos/w')},
		[$r], r => $r, expect => 'none-held', how => $how, victim_res => $res);
	$self->op(undef, 'unlock', 'dlock.unlock($1, $2, $3::int8)', [ $r, 'chaos/after', $n->{res} ],
		r => $r, h => 'chaos/after', f => $n->{res})
	  if defined $n->{res};
	$self->{stats}{'waiter-gone episodes'}++;
}

# act: the actor's loop until end (wall clock).
sub act
{
	my ($self, $end) = @_;
	my $span = $end - time;
	# The restarts at random moments; at least one fast and one immediate.
	my @plan = sort { $a->[0] <=> $b->[0] }
	  map { [ time + $span * (0.15 + rand(0.65)), $_ ] } 'fast', 'immediate',
	  (rnd(2) ? pick('fast', 'immediate') : ());
	my @episodes = ('xact', 'waiter', (map { pick('xact', 'waiter') } 1 .. rnd(3)));
	my $sigkills = 0;
	while (time < $end - 1)
	{
		usleep(200_000 + rnd(1_000_000));
		if (@plan && time >= $plan[0][0])
		{
			$self->restart((shift @plan)->[1]);
			next;
		}
		my $x = rnd(100);
		if ($x < 45)
		{
			my $pid = $self->victim or next;
			$self->kill_session('terminate', $pid);
		}
		elsif ($x < 70)
		{
			my $pid = $self->victim or next;
			$self->kill_session('cancel', $pid);
		}
		elsif ($x < 75 && $sigkills < 2)
		{
			my $pid = $self->victim or next;
			$sigkills++;
			$self->kill_session('sigkill', $pid);
		}
		elsif (@episodes)
		{
			my $e = shift @episodes;
			$e eq 'xact' ? $self->xact_episode : $self->waiter_episode;
		}
	}
	# Whatever the loop had no time for: each run has both episodes and
	# both restarts.
	$_ eq 'xact' ? $self->xact_episode : $self->waiter_episode for @episodes;
	$self->restart($_->[1]) for @plan;
	close $self->{log};
}

sub run
{
	my (%a) = @_;
	my $seed = $a{seed} // (time() ^ ($$ << 8)) % 2_000_000_000;
	my $clients = $a{clients} // 6;
	my $seconds = $a{seconds} // 20;
	my $nres = $a{resources} // 3;
	my $dir = $a{dir} // "/tmp/dlock-chaos-$$";
	my $tag = $a{tag} // "k$$";
	my $out = $a{out} // \*STDOUT;
	my $node = $a{node};
	my $conninfo = $node->connstr('postgres');
	print $out "dlock chaos: seed $seed ($clients clients + 1 prober + chaos actor, $seconds s, "
	  . "$nres resources, logs in $dir)\n";
	make_path($dir);
	my ($super) = Model::setup($conninfo);	# (name, is_super)

	my @roles = ([ $super, undef, 1 ], [ $Model::ROLE_A, $Model::ROLE_A, 0 ],
		[ $Model::ROLE_B, $Model::ROLE_B, 0 ]);
	my @res = map { "$tag/r$_" } 0 .. $nres - 1;
	my @pids;
	for my $i (0 .. $clients)
	{
		my $prober = $i == $clients;
		my ($role, $login, $su) = @{ $prober ? $roles[2] : $roles[ $i % 3 ] };
		my $client = ChaosDriver->new(
			id => $i, role => $role, login => $login, is_super => $su, async => $i % 2,
			conninfo => $conninfo, seed => ($seed * 1009 + $i * 7919) % 4294967291,
			seconds => $seconds, resources => \@res, tag => $tag,
			probe => $prober ? "$tag/probe" : undef, logfile => "$dir/client$i.log");
		my $pid = fork;
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			my $ok = eval { $client->run; 1 };
			print STDERR "client $i: $@" unless $ok;
			POSIX::_exit($ok ? 0 : 1);
		}
		push @pids, $pid;
	}
	srand($seed ^ 0x5eed);
	my $actor = Chaos->new(node => $node, conninfo => $conninfo, dir => $dir, tag => $tag,
		id => $clients + 1, super => $super);
	my $actor_ok = eval { $actor->act(time + $seconds); 1 };
	my $actor_err = $@;
	my $failed = 0;
	for my $pid (@pids)
	{
		waitpid($pid, 0);
		$failed++ if $? != 0;
	}
	my ($v, $stats) = ChaosCheck::check_dir($dir, $out);
	$stats->{"chaos $_"} = $actor->{stats}{$_} for keys %{ $actor->{stats} };
	$stats->{'clients that died'} = $failed;
	push @$v, "VIOLATION [client] $failed client(s) died (see stderr)\n" if $failed;
	push @$v, "VIOLATION [actor] the chaos actor died: $actor_err" unless $actor_ok;
	Model::report($out, "seed $seed", $v, $stats);
	return ($v, $stats, $seed);
}

1;
