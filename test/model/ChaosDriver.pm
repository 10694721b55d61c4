# ChaosDriver.pm: the clients of the model workload when a chaos actor
# (Chaos.pm) kills their backends, cancels their statements and restarts
# the server under them.
#
# A ModelDriver.pm client (same random operations, same log format) that
# survives the loss of its connection: it reconnects (retrying while the
# server restarts) and goes on.  What it logs about the operation that was
# running when the connection died follows ModelCheck.pm's "maybe" rules:
#  - an autocommit operation whose result never came is lost: outcome
#    unknown, bracket [t0, t1] = [the last server clock read on the old
#    connection, the first read on the new one];
#  - a transaction whose connection died before COMMIT was sent rolled
#    back (certain); its transaction was surely open at the last result
#    (tlo);
#  - a transaction whose COMMIT got no answer has fate "maybe".
# Some clients (odd ids) run with synchronous_commit = off: acquisitions
# and renewals must be durable anyway.  Each client's connection carries
# application_name chaos-cN so that the actor can find its backend.

package ChaosDriver;

use strict;
use warnings;

use parent -norequire, 'ModelDriver';
use ModelDriver;
use JSON::PP;
use List::Util ();
use Time::HiRes qw(time usleep);

my $T = q{(extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000)::int8};
my $JSON = JSON::PP->new->canonical;

sub rnd { return int(rand($_[0])); }
sub pick { my @a = @_; return $a[ rnd(scalar @a) ]; }

# is_lost: did the connection die (or the server go away)?
sub is_lost
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	return 1 unless $dbh;
	my $st = $dbh->state // '';
	my $msg = $dbh->errstr // '';
	return 1 if $st =~ /^(?:08|57P0[1-4])/;
	return 1 if $msg =~ /terminating connection|server closed the connection|no connection to the server|connection.*(?:lost|closed|broken)|could not (?:receive|send)/i;
	return $dbh->ping ? 0 : 1;
}

# connect: (re)connect, retrying while the server is down; reads the clock.
sub reconnect
{
	my ($self) = @_;
	eval { $self->{dbh}->disconnect if $self->{dbh} };
	$self->{dbh} = undef;
	my $deadline = time + 90;
	while (1)
	{
		my $dbh = eval { ModelDriver::connect_as($self->{conninfo}, $self->{login}) };
		if ($dbh)
		{
			my $ok = $dbh->do("SET application_name = 'chaos-c$self->{id}'");
			$ok &&= $dbh->do('SET synchronous_commit = off') if $self->{async};
			my ($t) = $ok ? $dbh->selectrow_array("SELECT $T") : ();
			if (defined $t)
			{
				$self->{dbh} = $dbh;
				$self->{tlast} = $t;
				$self->{reconnects}++;
				return $t;
			}
		}
		die "cannot reconnect: " . ($DBI::errstr // $@) . "\n" if time > $deadline;
		usleep(100_000);
	}
}

# detect_kinds: none of the kinds beyond exclusive locks yet: ChaosCheck.pm
# (its snapshots of dlock.locks, one row per resource) and the possible
# holdings of lost calls do not know them.  Sessions when the edition has
# them, with exclusive holdings only (sess_only_exclusive: ModelDriver's
# sess_call).
sub detect_kinds
{
	my ($self) = @_;
	my $k = $self->SUPER::detect_kinds;
	return { shared => 0, sem => 0, multi => 0, sess => $k->{sess}, sess_only_exclusive => 1 };
}

# call: as ModelDriver's, noting the last server clock read.
sub call
{
	my ($self, @a) = @_;
	my $before = $self->{tlast};
	my $rec = $self->SUPER::call(@a);
	$rec->{async} = 1 if $self->{async};
	if (defined $rec->{t1})
	{
		$self->{tlast} = $rec->{t1};
	}
	elsif ($rec->{err} && $self->is_lost)
	{
		$rec->{lost} = 1;
		$rec->{t0} = $before;
	}
	return $rec;
}

# clock: the server clock on this connection, or undef if it is lost.
sub clock
{
	my ($self) = @_;
	my ($t) = $self->{dbh}->selectrow_array("SELECT $T");
	$self->{tlast} = $t if defined $t;
	return $t;
}

# write: log records (fate set) with tdone; reconnects first if needed.
sub write_recs
{
	my ($self, $recs, $fate, $tlo, $lost) = @_;
	my $tdone = $lost ? undef : $self->clock;
	$tdone = $self->reconnect unless defined $tdone;
	for my $rec (@$recs)
	{
		$rec->{fate} = $rec->{undone} ? 'rollback' : $fate;
		$rec->{ufate} = $fate;
		$rec->{tdone} = $tdone;
		if ($rec->{lost})
		{
			# Outcome unknown (autocommit); in a transaction it rolled back.
			$rec->{t1} = $tdone;
			$rec->{fate} = $rec->{xact} ? "rollback" : "maybe";
			$rec->{t0} //= $rec->{t1};
		}
		$rec->{tlo} = $tlo // $rec->{t1};
		print { $self->{log} } $JSON->encode($rec), "\n";
	}
}

sub auto_unit
{
	my ($self) = @_;
	my $rec = $self->random_op(0);
	if (!$rec)
	{
		$self->reconnect if $self->is_lost;
		return;
	}
	$rec->{xact} = 0;
	$rec->{lost} = 1 if $rec->{k} eq 'read' && $self->is_lost;
	$self->write_recs([$rec], 'commit', $rec->{t1}, $rec->{lost});
}

# xact_unit: ModelDriver's, knowing whether COMMIT was sent.
sub xact_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	my $iso = rnd(2) ? 'SERIALIZABLE' : 'READ COMMITTED';
	if (!$dbh->do("BEGIN ISOLATION LEVEL $iso"))
	{
		$self->reconnect if $self->is_lost;
		return;
	}
	my (@recs, $sp_at, $aborted, $tlo, $lost, $open_at);
	$open_at = $self->{tlast};
	my $n = 1 + rnd(5);
	for my $i (1 .. $n)
	{
		if (!defined $sp_at && rnd(4) == 0)
		{
			$dbh->do('SAVEPOINT s') or do { $aborted = 1; last };
			$sp_at = scalar @recs;
		}
		my $rec = $self->random_op(1) or next;
		$rec->{xact} = 1;
		$rec->{iso} = $iso;
		push @recs, $rec;
		$open_at = $rec->{t1} if defined $rec->{t1};
		my $rollback_to = $rec->{err} || rnd(6) == 0;
		if ($rec->{err} && $self->is_lost) { $rec->{lost} = 1; $aborted = 1; last }
		if ($rollback_to && defined $sp_at)
		{
			$dbh->do('ROLLBACK TO SAVEPOINT s') or do { $aborted = 1; last };
			$recs[$_]{undone} = 1 for $sp_at .. $#recs;
			$dbh->do('RELEASE SAVEPOINT s') or do { $aborted = 1; last };
			undef $sp_at;
		}
		elsif ($rec->{err})
		{
			$aborted = 1;
			last;
		}
	}
	my $fate = 'rollback';
	if (!$aborted && defined($tlo = $self->clock))
	{
		if (rnd(10) < 7)
		{
			$fate = $dbh->do('COMMIT') ? 'commit' : 'rollback';
			if ($fate eq 'rollback')
			{
				if ($self->is_lost) { $fate = 'maybe'; $lost = 1 }
				else
				{
					$_->{commit_err} = $dbh->state for @recs;
					$dbh->do('ROLLBACK');
				}
			}
		}
		else
		{
			$dbh->do('ROLLBACK');
		}
	}
	else
	{
		$lost = 1 if $self->is_lost;
		$dbh->do('ROLLBACK') unless $lost;
		$tlo = $open_at;
	}
	$self->write_recs(\@recs, $fate, $tlo, $lost);
}

sub reap_unit
{
	my ($self) = @_;
	my $dbh = $self->{dbh};
	if (!$dbh->do('BEGIN'))
	{
		$self->reconnect if $self->is_lost;
		return;
	}
	my $rec = $self->call('reap', 'dlock.reap()', []);
	$rec->{xact} = 1;
	$rec->{open} = 1;
	$dbh->do('SELECT pg_sleep($1 / 1000.0)', undef, pick(100, 200, 300, 400))
	  unless $rec->{err};
	my $tlo = $rec->{err} ? undef : $self->clock;
	my $ok = defined $tlo && $dbh->do('COMMIT');
	my $fate = $ok ? 'commit' : 'rollback';
	my $lost;
	if (!$ok)
	{
		$lost = $self->is_lost;
		$fate = 'maybe' if $lost && defined $tlo;
		$dbh->do('ROLLBACK') unless $lost;
	}
	$self->write_recs([$rec], $fate, $tlo, $lost);
}

# probe_log: ModelDriver's, for a call whose connection may have died.
sub probe_log
{
	my ($self, $rec) = @_;
	$rec->{xact} = 0;
	$self->write_recs([$rec], 'commit', $rec->{t1}, $rec->{lost});
}

# probe_unit: ModelDriver's prober (probe_take: one round in three in a
# session), surviving lost connections.
sub probe_unit
{
	my ($self) = @_;
	my $r = $self->{probe};
	my $lease = pick(50, 100, 200);
	my ($rec, $h, $until) = $self->probe_take($r, $lease);
	return unless $rec;
	$self->probe_log($rec);
	return if $rec->{err} && !$rec->{lost};
	return if !$rec->{lost} && !defined $rec->{res};
	if (!$rec->{lost} && rnd(4) == 0)
	{
		$self->{unit}++;
		my $u = $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)',
			[ $r, $h, $rec->{res} ], r => $r, h => $h, f => $rec->{res}, probe => 1,
			defined $rec->{sess} ? (sess => $rec->{sess}) : ());
		$self->probe_log($u);
	}
	$until //= $rec->{t1} + $lease * 1000 + 5000;
	while (1)
	{
		my $now = $self->clock // $self->reconnect;
		last if $now >= $until;
		usleep(List::Util::min(($until - $now), 50_000));
	}
	$self->{unit}++;
	my $h2 = "probe/h" . ($self->{unit} % 2);
	my $p = $self->call('try_lock', 'dlock.try_lock($1, $2, $3::interval)',
		[ $r, $h2, ModelDriver::lease_arg($lease) ], r => $r, h => $h2, lease => $lease,
		probe => 1, expect_free => 1);
	$self->probe_log($p);
	if (!$p->{err} && defined $p->{res})
	{
		$self->{unit}++;
		my $u = $self->call('unlock', 'dlock.unlock($1, $2, $3::int8)',
			[ $r, $h2, $p->{res} ], r => $r, h => $h2, f => $p->{res}, probe => 1);
		$self->probe_log($u);
	}
}

# run: the client's main loop; stops at the deadline (wall clock).
sub run
{
	my ($self) = @_;
	srand($self->{seed});
	open($self->{log}, '>', $self->{logfile}) or die "$self->{logfile}: $!\n";
	$self->{log}->autoflush(1);
	$self->reconnect;
	my $end = time + $self->{seconds};
	while (time < $end)
	{
		$self->{unit}++;
		if ($self->{probe}) { $self->probe_unit; next }
		my $x = rnd(100);
		if ($x < 55) { $self->auto_unit }
		elsif ($x < 93) { $self->xact_unit }
		else { $self->reap_unit }
	}
	eval { $self->{dbh}->disconnect };
	close $self->{log};
}

1;
