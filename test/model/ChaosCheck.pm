# ChaosCheck.pm: the checker of the model workload with kills and
# restarts (Chaos.pm, ChaosDriver.pm).
#
# It runs ModelCheck.pm's checks, every one unweakened for the operations
# whose outcome is known, with ModelCheck's rules for unknown outcomes
# ("maybe", see its header): an operation whose connection died is lost
# (its SQLSTATE is accepted, its effect may or may not have happened), a
# transaction whose COMMIT got no answer may or may not have committed.
# Before that, one more source of "maybe": a release may commit
# asynchronously (the contract: outside a transaction block, and any
# transaction of a session with synchronous_commit = off), so a crash
# (immediate stop, or a SIGKILL of a backend) may undo it.  A committed
# unit (transaction or autocommit call) that released (unlock,
# unlock_all, break_lock, reap, close_session) without acquiring,
# renewing or keeping a session alive (those force a flush, which carries
# the releases before them too) and was acknowledged within UNDO_US
# before the stop began, or during the crash, gets fate "maybe".
#
# Then the rules about restarts and killed sessions:
#  fence-restart  per resource, every fence handed out (returned by an
#                 acquisition, committed or not, lease or xact) by a call
#                 started after a restart was up again exceeds every fence
#                 handed out before the stop began (fences never repeat or
#                 go backwards: the fence sequence's epoch).
#  durable        right after each restart the actor reads dlock.locks (a
#                 snap, whose t0 is read in an earlier statement): every
#                 certain lease holding acknowledged (a committed op's
#                 tdone) before t0, that no renew of its holder text could
#                 have changed since it was taken, that no maybe or
#                 certain release could have ended (ModelCheck's may_end)
#                 and that surely lived past the snap (the latest t0 +
#                 lease of its committed, acknowledged acquisitions) is in
#                 it with its fence and owner, its expiry no earlier than
#                 that and no later than its latest possible extension
#                 (the lease runs on the server's clock across the
#                 restart, neither lost nor restarted); a session's
#                 holding by its session's sure life from what was
#                 acknowledged before the snap (ModelSessions'
#                 lo_acked).  The actor's own holding taken just before
#                 each stop, from a session with synchronous_commit =
#                 off, is one of them.
#  xact-gone      after a session holding an xact lock was terminated or
#                 killed, lock() of that resource (wait 10 s) gets it.
#  waiter-gone    after a session waiting in lock() was terminated,
#                 cancelled or killed, it holds nothing and has no ticket
#                 (unless its lock() returned a fence), and once the
#                 resource is released another lock() (wait 15 s, above
#                 dlock.queue_ttl) gets it.

package ChaosCheck;

use strict;
use warnings;

use ModelCheck;

our $UNDO_US = 3_000_000;
my %OK_ERR = map { $_ => 1 } qw(42501 55P03 40001 40P01 57014);

sub ok { return !defined $_[0]{err}; }
sub is_acq { return $_[0]{k} =~ /^(?:try_lock|lock|xact_lock|try_xact_lock)$/; }

# load_dir: the logs of a chaos run.
sub load_dir
{
	my ($dir) = @_;
	my @logs = sort glob("$dir/client*.log");
	push @logs, "$dir/chaos.log" if -e "$dir/chaos.log";
	die "no client*.log in $dir\n" unless @logs;
	return ModelCheck::load(@logs);
}

# undo_async: releases acknowledged shortly before a crash become maybe.
sub undo_async
{
	my ($ops, $stats) = @_;
	my @crashes = map { [ $_->{tstop} - $UNDO_US, $_->{tup} ] }
	  grep { $_->{k} eq 'restart' && $_->{mode} ne 'fast' } @$ops;
	return unless @crashes;
	my %unit;
	push @{ $unit{"$_->{c}/$_->{u}"} }, $_ for grep { defined $_->{u} } @$ops;
	for my $u (values %unit)
	{
		next unless ($u->[0]{ufate} // '') eq 'commit' && defined $u->[0]{tdone};
		next if grep { ok($_) && defined $_->{res} && (is_acq($_) || $_->{k} =~ /^(?:renew|keepalive)$/) } @$u;
		next unless grep { ok($_) && $_->{k} =~ /^(?:unlock|unlock_all|break_lock|reap|close_session)$/ } @$u;
		my $td = $u->[0]{tdone};
		next unless grep { $td >= $_->[0] && $td <= $_->[1] } @crashes;
		$stats->{'releases maybe undone by a crash'}++;
		for my $o (@$u)
		{
			$o->{ufate} = 'maybe';
			$o->{fate} = 'maybe' if $o->{fate} eq 'commit';
		}
	}
}

# rules: the extra rules (ModelCheck::check's extra hook).
sub rules
{
	my ($cx, $viol, $stats) = @_;
	my $ops = $cx->{ops};
	my $M = $cx->{margin};
	my @restarts = grep { $_->{k} eq 'restart' } @$ops;

	# fence-restart.  A re-entry after the restart of a holding that lived
	# through it (same resource, holder text and role) keeps its fence: it
	# hands out no new fence.  So does one of a lost acquisition's holding
	# (its fence unseen): a call after the restart under the key of a lost
	# acquisition started before the stop is not compared.
	my (%acq, %first, %lost_key);
	$lost_key{"$_->{r}\0$_->{h}\0$_->{role}"} = $_->{t0}
	  for sort { $b->{t0} <=> $a->{t0} } grep { $_->{lost} && $_->{k} =~ /^(?:try_lock|lock)$/ } @$ops;
	for my $o (sort { $a->{t1} <=> $b->{t1} } grep { is_acq($_) && ok($_) && defined $_->{res} } @$ops)
	{
		push @{ $acq{ $o->{r} } }, $o;
		$first{ $o->{res} } //= $o;
	}
	my $same = sub {
		my ($a, $b) = @_;
		return $a->{k} !~ /xact/ && $b->{k} !~ /xact/ && $a->{r} eq $b->{r} && $a->{h} eq $b->{h}
		  && $a->{role} eq $b->{role};
	};
	for my $rs (@restarts)
	{
		for my $r (sort keys %acq)
		{
			my ($before, $after);
			for my $o (@{ $acq{$r} })
			{
				$before = $o if $o->{t1} < $rs->{tstop} && (!$before || $o->{res} > $before->{res});
				my $f = $first{ $o->{res} };
				next if $f && $f->{t1} < $rs->{tstop} && $same->($f, $o);
				my $lk = $o->{k} =~ /xact/ ? undef : $lost_key{"$o->{r}\0$o->{h}\0$o->{role}"};
				next if defined $lk && $lk < $rs->{tstop};
				$after = $o if $o->{t0} > $rs->{tup} && (!$after || $o->{res} < $after->{res});
			}
			next unless $before && $after;
			$stats->{'fence-restart comparisons'}++;
			$viol->('fence-restart', "resource $r: fence $after->{res} handed out after the $rs->{mode} "
				  . "restart does not exceed fence $before->{res} handed out before it", $before, $after)
			  if $after->{res} <= $before->{res};
		}
	}

	# durable.
	my %renews;
	push @{ $renews{"$_->{r}\0$_->{h}"} }, $_
	  for grep { $_->{k} eq 'renew' && ($_->{lost} || (ok($_) && defined $_->{res}))
		  && $_->{fate} ne 'rollback' } @$ops;
	for my $s (grep { $_->{k} eq 'snap' } @$ops)
	{
		my %row = map { ("$_->[0]\0$_->[1]" => $_) } @{ $s->{rows} };
		for my $hd (sort { $a->{f} <=> $b->{f} } values %{ $cx->{hold} })
		{
			next if $hd->{xact} || !$hd->{committed};
			my @c = grep { ModelCheck::committed($_) && $_->{tdone} < $s->{t0} } @{ $hd->{ops} };
			next unless @c;
			my $rh = "$hd->{r}\0$hd->{h}";
			next if grep { $_->{t0} < $s->{t1} && $_->{tdone} > $hd->{acq}{t0} } @{ $renews{$rh} || [] };
			my $e = 0;
			if (defined $hd->{sess})
			{
				# A session's holding: its session's sure life from what was
				# acknowledged before the snap (a keepalive that started
				# before it but committed after it is not in it; seed
				# 1010123371).
				$e = ModelSessions::lo_acked($cx->{sx}, $hd->{sess}, $s->{t0});
			}
			else
			{
				for (@c) { my $x = $_->{t0} + $_->{lease} * 1000; $e = $x if $x > $e }
			}
			next unless $e > $s->{t1} + $M;
			next if $cx->{may_end}->($hd, $hd->{acq}{t0}, $s->{t1});
			$stats->{'durable checks'}++;
			$stats->{'durable checks in sessions'}++ if defined $hd->{sess};
			my $up = $cx->{e_up}->($hd, $s->{t1});
			my $row = $row{$rh};
			my $what = !$row ? 'is missing'
			  : $row->[2] != $hd->{f} ? "has fence $row->[2]"
			  : $row->[4] ne $hd->{role} ? "has owner $row->[4]"
			  : $row->[3] < $e - $M ? "expires at $row->[3], before $e"
			  : $row->[3] > $up + $M ? "expires at $row->[3], after its latest extension $up"
			  : next;
			$viol->('durable', "after a restart, holding $hd->{f} of $hd->{r} (holder $hd->{h}) $what",
				$hd->{acq}, $s);
		}
	}

	# xact-gone, waiter-gone.
	for my $o (grep { defined $_->{expect} && !$_->{lost} } @$ops)
	{
		if ($o->{expect} eq 'none-held')
		{
			$viol->('waiter-gone', "the $o->{how} waiter still holds or queues for $o->{r}", $o)
			  if ok($o) && $o->{res} > 0 && !defined $o->{victim_res};
			next;
		}
		$stats->{"$o->{expect} checks"}++;
		$viol->($o->{expect}, "lock() of $o->{r} after its $o->{how} "
			  . ($o->{expect} eq 'xact-gone' ? 'xact holder' : 'waiter')
			  . " got " . (ok($o) ? 'NULL' : "error $o->{err}"), $o)
		  if !ok($o) || !defined $o->{res};
	}
}

# check(ops): (violations, stats).
sub check
{
	my ($ops) = @_;
	my %pre;
	undo_async($ops, \%pre);
	my ($v, $stats) = ModelCheck::check($ops,
		ok_error => sub { $OK_ERR{ $_[0]{err} } || $_[0]{lost} || ModelCheck::session_ended_error($_[0]) },
		extra => \&rules);
	$stats->{$_} = $pre{$_} for keys %pre;
	$stats->{'lost ops'} = scalar grep { $_->{lost} } @$ops;
	return ($v, $stats);
}

sub check_dir
{
	my ($dir, $out) = @_;
	$out //= \*STDOUT;
	my $ops = load_dir($dir);
	my ($v, $stats) = check($ops);
	printf $out "dlock chaos: checked %d ops\n", scalar @$ops;
	return ($v, $stats);
}

1;
