# ModelSessions.pm: the checker's rules about sessions (API.md "Sessions
# [sessions]"), over the records of ModelDriver.pm (sess: the session's
# id).  A holding taken in a session has no lease: its expiry is its
# session's.  ModelCheck.pm asks this file for a session's bounds where it
# asks a leased holding for its own:
#
#  up(S, t, self)  the latest S could have lasted, from what started
#                  before t: open_session's t1 + ttl, every keepalive's and
#                  every renew's result (whatever its fate), a lost one's
#                  t1 + ttl (the possible life: revival, role, fences).
#  lo(S, t)        the earliest S surely lasted until, from what committed
#                  and started before t: open_session's t0 + ttl, the
#                  results of keepalives and renews.  A session's expiry
#                  only grows (keepalive locks its row, then reads the
#                  clock), so the greatest counts (the sure life: overlap).
#  lo_acked(S, t)  the same from what was acknowledged (tdone) before t:
#                  what a read that starts at t must see.
#  enders          close_session calls that returned a count (or were
#                  lost): each may have ended every holding of S then.
#
# Rules checked here:
#  session-revival  a keepalive, close_session, renew or acquisition in S
#                   succeeded although S had surely ended before it began:
#                   every extension ran out (t0 > up), or its end had been
#                   seen and acknowledged (a committed close_session, or a
#                   keepalive or close_session that returned NULL, once
#                   its open_session had been acknowledged).
#  session-end      check or assert_fence accepted the fence of a holding
#                   of S after S had surely ended (as above).
#  role             another role's keepalive or close_session of S (a
#                   steal, superusers aside) returned non-NULL.
#  fence-unique     a session's id is drawn from the fences: no holding
#                   got it as its fence, no other session as its id.
# "No two exclusive holders" and the fences are ModelCheck.pm's rules,
# with the bounds above.  DLOCK_MODEL_SESSION_STATS=1 adds per-call counts
# of the session operations' outcomes to the stats.

package ModelSessions;

use strict;
use warnings;

# index(ops): the bounds above, per session.
sub index
{
	my ($ops) = @_;
	my (%open, %up, %lo, %closes, %seen_end, %unit_closes);
	# (an open_session's record names its session by its result)
	for my $o (grep { $_->{k} eq 'open_session' && !defined $_->{err} && defined $_->{res} } @$ops)
	{
		$o->{sess} //= $o->{res};
		$open{ $o->{res} } = $o;
	}
	for my $o (grep { defined $_->{sess} && $_->{k} eq 'close_session' } @$ops)
	{
		push @{ $unit_closes{"$o->{c}\0$o->{u}\0$o->{sess}"} }, $o;
	}
	my $ttl = sub { my ($s) = @_; my $op = $open{$s}; return ($op ? $op->{ttl} : 1000) * 1000 };
	my $opened_ok = sub {
		my ($s, $t) = @_;
		my $op = $open{$s};
		return $op && $op->{fate} eq 'commit' && !$op->{undone} && $op->{tdone} < $t;
	};
	for my $o (grep { defined $_->{sess} } @$ops)
	{
		my $s = $o->{sess};
		my $ok = !defined $o->{err};
		my $commit = $ok && ($o->{fate} // '') eq 'commit';
		if ($o->{k} eq 'open_session' && $ok)
		{
			push @{ $up{$s} }, [ $o->{t0}, $o->{t1} + $ttl->($s), $o ];
			push @{ $lo{$s} }, [ $o->{t0}, $o->{t0} + $ttl->($s), $o ] if $commit;
		}
		elsif (($o->{k} eq 'keepalive' || $o->{k} eq 'renew') && $o->{lost})
		{
			push @{ $up{$s} }, [ $o->{t0}, $o->{t1} + $ttl->($s), $o ];
		}
		elsif (($o->{k} eq 'keepalive' || $o->{k} eq 'renew') && $ok && defined $o->{res})
		{
			push @{ $up{$s} }, [ $o->{t0}, $o->{res}, $o ];
			push @{ $lo{$s} }, [ $o->{t0}, $o->{res}, $o ] if $commit;
		}
		if ($o->{k} eq 'close_session' && (($ok && defined $o->{res}) || $o->{lost}))
		{
			push @{ $closes{$s} }, $o;
		}
		# The end seen: a committed close; a NULL from keepalive or close
		# (not after a close of S earlier in its own transaction).
		my $seen;
		$seen = $o->{tdone} if $o->{k} eq 'close_session' && $commit && defined $o->{res} && !$o->{undone};
		if (($o->{k} eq 'keepalive' || $o->{k} eq 'close_session') && $ok && !defined $o->{res}
			&& $opened_ok->($s, $o->{t0})
			&& !grep { $_->{n} < $o->{n} } @{ $unit_closes{"$o->{c}\0$o->{u}\0$s"} || [] })
		{
			$seen = $o->{tdone};
		}
		$seen_end{$s} = $seen if defined $seen && (!defined $seen_end{$s} || $seen < $seen_end{$s});
	}
	my %ix = (up => {}, lo => {}, lo_list => \%lo, closes => \%closes, seen_end => \%seen_end, ttl => $ttl);
	$ix{up}{$_} = ModelCheck::pm_build($up{$_}) for keys %up;
	$ix{lo}{$_} = ModelCheck::pm_build($lo{$_}) for keys %lo;
	$ix{close_span}{$_} = ModelCheck::span_build($closes{$_}) for keys %closes;
	return \%ix;
}

sub up { my ($ix, $s, $t, $self) = @_; return ModelCheck::pm_max($ix->{up}{$s}, $t, $self) // 0; }
sub lo { my ($ix, $s, $t) = @_; return ModelCheck::pm_max($ix->{lo}{$s}, $t) // 0; }
sub lo_acked
{
	my ($ix, $s, $t) = @_;
	my $e = 0;
	for (@{ $ix->{lo_list}{$s} || [] }) { $e = $_->[1] if $_->[2]{tdone} < $t && $_->[1] > $e; }
	return $e;
}
# closes(S, lo, t): the close_session calls of S spanning (lo, t).
sub closes { my ($ix, $s, $lo, $t) = @_; return ModelCheck::span_ops($ix->{close_span}{$s}, $lo, $t); }

# ended(S, o): why S had surely ended before o began (a text), or undef.
sub ended
{
	my ($ix, $s, $o, $margin) = @_;
	my $e = up($ix, $s, $o->{t1}, $o);
	return "every extension of session $s ran out at $e" if $o->{t0} > $e + $margin;
	my $seen = $ix->{seen_end}{$s};
	return "the end of session $s was seen and acknowledged at $seen" if defined $seen && $seen < $o->{t0};
	return undef;
}

# check(ix, ops, hold, viol, stats, margin): the rules above.
sub check
{
	my ($ix, $ops, $hold, $viol, $stats, $margin) = @_;
	my %acq = map { $_ => 1 } qw(try_lock lock try_acquire acquire try_lock_all lock_all);
	my %ids;
	for my $o (grep { $_->{k} eq 'open_session' && !defined $_->{err} && defined $_->{res} } @$ops)
	{
		$viol->('fence-unique', "session id $o->{res} is also the fence of a holding", $hold->{ $o->{res} }{acq}, $o)
		  if $hold->{ $o->{res} };
		$viol->('fence-unique', "session id $o->{res} handed out twice", $ids{ $o->{res} }, $o)
		  if $ids{ $o->{res} };
		$ids{ $o->{res} } = $o;
	}
	for my $o (grep { defined $_->{sess} && !$_->{part} } @$ops)
	{
		my $what = defined $o->{err} ? "error $o->{err}" : defined $o->{res} ? 'ok' : 'NULL';
		$stats->{"session $o->{k}" . ($o->{steal} ? ' (steal)' : '') . ": $what"}++
		  if $ENV{DLOCK_MODEL_SESSION_STATS};
	}
	for my $o (grep { defined $_->{sess} && !defined $_->{err} } @$ops)
	{
		my $s = $o->{sess};
		$stats->{'session ops'}++;
		if ($o->{steal})
		{
			$viol->('role', "role $o->{role} made $o->{k} of another role's session $s return $o->{res}", $o)
			  if defined $o->{res} && !$o->{su};
			next;
		}
		if (($o->{k} =~ /^(?:keepalive|close_session|renew)$/ || $acq{ $o->{k} }) && defined $o->{res})
		{
			$stats->{'session revival checks'}++;
			my $why = ended($ix, $s, $o, $margin);
			$viol->('session-revival', "$o->{k} in session $s succeeded after its end: $why", $o) if $why;
		}
		if (($o->{k} eq 'check' && $o->{res}) || $o->{k} eq 'assert_fence')
		{
			my $hd = $hold->{ $o->{f} };
			next unless $hd && defined $hd->{sess} && $hd->{sess} == $s && $hd->{r} eq $o->{r};
			$stats->{'session fence checks'}++;
			my $why = ended($ix, $s, $o, $margin);
			$viol->('session-end', "$o->{k} accepted fence $o->{f} of session $s after its end: $why",
				$hd->{acq}, $o)
			  if $why;
		}
	}
	my $n_hold = grep { defined $_->{sess} } values %$hold;
	$stats->{'session holdings'} = $n_hold if $n_hold;
	$stats->{'sessions opened'} = scalar grep { $_->{k} eq 'open_session' && !defined $_->{err} } @$ops
	  if grep { $_->{k} eq 'open_session' } @$ops;
}

1;
