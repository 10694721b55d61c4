# ModelKinds.pm: the checker's rules for the kinds of lock beyond one
# exclusive holder (API.md "More kinds of lock"), over the records of
# ModelDriver.pm; ModelCheck.pm calls them and owns the rules every kind
# shares (fences, overlap of exclusive and shared holdings, revival, role,
# assert-fence, count), which know the kinds by a holding's mode (x
# exclusive, s shared, p permits, X transaction-scoped).
#
#  all-or-nothing  try_lock_all/lock_all returned one fence per resource
#                  given, all distinct (expand: then each is an acquisition
#                  of its own resource, checked like a try_lock or lock);
#                  one that returned NULL left none of its resources held
#                  by the caller under a fence it was not handed before (the
#                  driver reads them back: field after).
#  permits         never more than max_permits permits held at once: when
#                  an acquisition of a semaphore's permits returned, the
#                  permits it and its holding's earlier acknowledged
#                  acquisitions asked for, plus those of every other holding
#                  that surely lived then (acknowledged before it started,
#                  its lease surely running past its return, no release
#                  that could have come in between: ModelCheck.pm's bounds),
#                  are at most max_permits; and unlock returns all of a
#                  holding's permits: no acquisition started after an
#                  acknowledged unlock of a holding gets its fence again.
#
# What the checker does not decide: the writer-first rule of shared locks
# (an exclusive request waiting in lock() keeps new shared holders out).
# When a wait begins is not in the record (a lock() waits at first in the
# lock manager while another transaction has the resource, and registers
# as a writer only at its first refused attempt), so no order of records
# proves a shared holder was let in while a writer surely waited; the
# suite's 037_shared.pl and isolation specs test it with known states.
# Nor that crossing upgrades end in 40P01 rather than a hang: every wait
# in the workload is bounded (40P01 is an accepted SQLSTATE; 57014, the
# statement_timeout of a hang, too: see ModelCheck.pm %OK_ERR).
#
# No state outside one call.

package ModelKinds;

use strict;
use warnings;

# expand(ops, viol): the records with each try_lock_all/lock_all that
# returned fences replaced by one acquisition per resource (k try_lock or
# lock, r its resource, res its fence; the rest of the record kept).
sub expand
{
	my ($ops, $viol) = @_;
	my @out;
	for my $o (@$ops)
	{
		if ($o->{k} =~ /^(?:try_lock_all|lock_all)$/ && ref $o->{rs} && !defined $o->{err}
			&& defined $o->{res})
		{
			my @f = ref $o->{res} ? @{ $o->{res} } : ($o->{res});
			my %seen;
			if (@f != @{ $o->{rs} } || grep { !defined } @f)
			{
				$viol->('all-or-nothing', "$o->{k} returned " . scalar(@f) . ' fence(s), '
					  . scalar(grep { defined } @f) . ' not NULL, for ' . scalar(@{ $o->{rs} }) . ' resources', $o);
				push @out, $o;
				next;
			}
			if (grep { $seen{$_}++ } @f)
			{
				$viol->('all-or-nothing', "$o->{k} returned one fence for two resources", $o);
				push @out, $o;
				next;
			}
			push @out, map {
				+{ %$o, k => ($o->{k} eq 'lock_all' ? 'lock' : 'try_lock'), r => $o->{rs}[$_],
					res => $f[$_], part => $_, of => $o->{k} }
			} 0 .. $#f;
			next;
		}
		push @out, $o;
	}
	return \@out;
}

# check(ctx, viol, stats): the rules above; ctx as ModelCheck.pm's extra
# hook gets it.
sub check
{
	my ($cx, $viol, $stats) = @_;
	check_all_or_nothing($cx, $viol, $stats);
	check_permits($cx, $viol, $stats);
}

sub check_all_or_nothing
{
	my ($cx, $viol, $stats) = @_;
	my %lost_c = map { $_->{c} => 1 } grep { $_->{lost} } @{ $cx->{ops} };
	for my $o (@{ $cx->{ops} })
	{
		next unless $o->{k} =~ /^(?:try_lock_all|lock_all)$/ && !defined $o->{err}
		  && !defined $o->{res} && ref $o->{after} && !$lost_c{ $o->{c} };
		$stats->{'all-or-nothing checks'}++;
		for my $rf (@{ $o->{after} })
		{
			my ($r, $f) = @$rf;
			my $hd = $cx->{hold}{$f};
			next if $hd && $hd->{r} eq $r && $hd->{h} eq $o->{h} && $hd->{role} eq $o->{role}
			  && $hd->{acq}{t0} < $o->{t0};
			$viol->('all-or-nothing',
				"$o->{k} returned NULL but left $r held by $o->{h} under fence $f, not handed out before",
				$hd ? $hd->{acq} : (), $o);
		}
	}
}

sub check_permits
{
	my ($cx, $viol, $stats) = @_;
	my $margin = $cx->{margin};
	for my $r (sort keys %{ $cx->{sem_holds} })
	{
		my $hs = $cx->{sem_holds}{$r};
		my %n_rh;
		$n_rh{"$_->{r}\0$_->{h}"}++ for @$hs;
		# Holdings by the start of their acquisition, with the latest they
		# could have lasted (ModelCheck's span index: t0, tdone).
		my $ix = ModelCheck::span_build([ map { +{ t0 => $_->{acq}{t0},
						tdone => $cx->{e_up}->($_, 9e18), hd => $_ } } @$hs ]);
		# sure(hd, t): the permits hd surely held at a decision after t
		# (its acquisitions that committed and were acknowledged by then).
		my $sure = sub {
			my ($hd, $t, $self) = @_;
			my $n = 0;
			$n += $_->{permits} // 1
			  for grep { $_ != ($self // 0) && $_->{fate} eq 'commit' && $_->{tdone} < $t } @{ $hd->{ops} };
			return $n;
		};
		for my $hd (@$hs)
		{
			for my $a (@{ $hd->{ops} })
			{
				next unless $a->{fate} eq 'commit' && defined $a->{max};
				$stats->{'permit checks'}++;
				my $t = $a->{t1};
				my $held = ($a->{permits} // 1) + $sure->($hd, $a->{t0}, $a);
				my @with;
				for my $p (map { $_->{hd} } ModelCheck::span_ops($ix, $t, $t))
				{
					next if $p == $hd;
					my $n = $sure->($p, $a->{t0});
					next unless $n;
					# A renew without a fence met the holder text's holding of
					# its time, maybe a later one than p (seed 1855440093, 17:
					# three holdings of one holder text, one after the other,
					# all counted by the renews of the last): with several,
					# the lesser of the bounds with and without such renews.
					my $e = $cx->{e_lo}->($p, $t, $a);
					if ($n_rh{"$p->{r}\0$p->{h}"} > 1)
					{
						my $e2 = $cx->{e_lo_by}->($p, $t, 0);
						$e = $e2 if $e2 < $e;
					}
					next unless $e > $t + $margin;
					next if $cx->{may_end}->($p, $p->{acq}{t0}, $t, $a);
					$held += $n;
					push @with, $p->{acq};
				}
				$viol->('permits', "semaphore $r: $held permits held at once (max_permits $a->{max}) "
					  . "when fence $hd->{f} got $a->{permits}", @with, $a)
				  if $held > $a->{max};
			}
			# unlock returns all: no acquisition after an acknowledged
			# unlock of the holding gets its fence.
			for my $u (@{ $cx->{by_rh}{"$r\0$hd->{h}"} || [] })
			{
				next unless $u->{k} eq 'unlock' && !defined $u->{err} && defined $u->{res}
				  && $u->{fate} eq 'commit' && $u->{role} eq $hd->{role} && !$u->{steal}
				  && (!defined $u->{f} || $u->{f} == $hd->{f}) && $u->{t0} > $hd->{acq}{tdone};
				my ($a) = grep { $_->{t0} > $u->{tdone} } @{ $hd->{ops} };
				next unless $a;
				$viol->('permits', "semaphore $r: fence $hd->{f} acquired again after its unlock returned $u->{res}",
					$u, $a);
				last;
			}
		}
	}
}

1;
