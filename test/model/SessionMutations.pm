# SessionMutations.pm: the session rules' mutations of a real run's logs,
# for the tests that show the checker fires (070_model.t, 095_model.pl).
#
# SessionMutations::list() returns [kind, what, alter] triples: alter(ops)
# changes a copy of the logged records so that they break a rule of
# ModelSessions.pm (or the overlap rule, with a session's expiry), and
# returns 1 if it could (0: the logs had nothing to alter).  The caller
# checks the altered records and expects a violation of that kind.
# has_sessions(ops): did the run open sessions at all?

package SessionMutations;

use strict;
use warnings;

use ModelCheck;

my $HOUR = 3_600_000_000;

sub has_sessions { my ($ops) = @_; return scalar grep { $_->{k} eq 'open_session' && defined $_->{res} } @$ops; }

# flags(ops, kind): the checker reports kind on ops.
sub flags
{
	my ($ops, $kind) = @_;
	my ($v) = ModelCheck::check($ops);
	return scalar grep { /^VIOLATION \[\Q$kind\E\]/ } @$v;
}

# next_n(ops, c): a sequence number after every record of client c.
sub next_n
{
	my ($ops, $c) = @_;
	my $n = 0;
	$_->{n} >= $n and $n = $_->{n} + 1 for grep { $_->{c} == $c } @$ops;
	return $n;
}

sub list
{
	return (
		# A keepalive an hour later than it ran: the session had ended.
		[ 'session-revival', 'a keepalive after its session ran out', sub {
			my ($ops) = @_;
			my ($k) = grep { $_->{k} eq 'keepalive' && !$_->{steal} && !defined $_->{err}
				  && defined $_->{res} } @$ops;
			return 0 unless $k;
			$k->{$_} += $HOUR for qw(t0 t1 tlo tdone);
			$k->{res} += $HOUR;
			return 1;
		} ],
		# A keepalive returned NULL (the end seen); another, right after,
		# is made to return an expiry.
		[ 'session-revival', 'a keepalive returning an expiry after one returned NULL', sub {
			my ($ops) = @_;
			my %opened = map { $_->{res} => $_ } grep { $_->{k} eq 'open_session' && defined $_->{res}
				  && $_->{fate} eq 'commit' } @$ops;
			my ($k) = grep { $_->{k} eq 'keepalive' && !$_->{steal} && !defined $_->{err}
				  && !defined $_->{res} && $opened{ $_->{sess} }
				  && $opened{ $_->{sess} }{tdone} < $_->{t0} } @$ops;
			return 0 unless $k;
			my $t = $k->{tdone} + 1000;
			push @$ops, { %$k, n => next_n($ops, $k->{c}), u => -1, xact => 0, fate => 'commit',
				ufate => 'commit', t0 => $t, t1 => $t + 1000, tlo => $t + 1000, tdone => $t + 2000,
				res => $t + $opened{ $k->{sess} }{ttl} * 1000 };
			@$ops = sort { $a->{c} <=> $b->{c} || $a->{n} <=> $b->{n} } @$ops;
			return 1;
		} ],
		# check or assert_fence of a session's holding, an hour later.
		[ 'session-end', "a holding's fence accepted after its session ended", sub {
			my ($ops) = @_;
			my @c = grep { defined $_->{sess} && !defined $_->{err}
				  && ($_->{k} eq 'assert_fence' || ($_->{k} eq 'check' && $_->{res})) } @$ops;
			for my $o (@c[ 0 .. ($#c < 9 ? $#c : 9) ])
			{
				$o->{$_} += $HOUR for qw(t0 t1 tlo tdone);
				return 1 if flags($ops, 'session-end');
				$o->{$_} -= $HOUR for qw(t0 t1 tlo tdone);
			}
			# None in the logs: a check of a committed holding's fence an
			# hour after it was taken.
			my ($p) = grep { defined $_->{sess} && $_->{k} =~ /^(?:try_lock|lock)$/ && !defined $_->{err}
				  && defined $_->{res} && $_->{fate} eq 'commit' } @$ops;
			return 0 unless $p;
			push @$ops, { c => $p->{c}, role => $p->{role}, su => $p->{su}, u => -1, n => next_n($ops, $p->{c}),
				k => 'check', r => $p->{r}, f => $p->{res}, res => 1, sess => $p->{sess}, xact => 0,
				fate => 'commit', ufate => 'commit', map { $_ => $p->{$_} + $HOUR } qw(t0 t1 tlo tdone) };
			@$ops = sort { $a->{c} <=> $b->{c} || $a->{n} <=> $b->{n} } @$ops;
			return 1;
		} ],
		# Two exclusive holders: the checker is told that a session whose
		# holding was taken over after it lapsed (nothing released it) had
		# been kept alive for an hour, by a keepalive logged when the
		# holding was taken.  Flagged: an overlap with that holding.
		[ 'overlap', "a resource taken while its holding's session was kept alive", sub {
			my ($ops) = @_;
			my @x = grep { ($_->{k} =~ /^(?:try_lock|lock|xact_lock|try_xact_lock)$/) && !$_->{sh}
				  && !defined $_->{err} && defined $_->{res} && $_->{fate} eq 'commit' } @$ops;
			# First a holding nothing released; else one whose releases
			# the checker is also told never happened.
			for my $pass (0, 1)
			{
				my $tried = 0;
				for my $p (grep { defined $_->{sess} } @x)
				{
					my ($n) = sort { $a->{res} <=> $b->{res} }
					  grep { $_->{r} eq $p->{r} && $_->{res} > $p->{res} && ($_->{h} // '') ne $p->{h} } @x;
					next unless $n;
					my %end = map { $_ => 1 } grep {
						($_->{k} eq 'break_lock' && $_->{r} eq $p->{r} && $_->{res})
						  || ($_->{k} eq 'unlock' && $_->{r} eq $p->{r} && $_->{h} eq $p->{h} && defined $_->{res})
						  || ($_->{k} eq 'close_session' && $_->{sess} == $p->{sess} && defined $_->{res})
					} grep { !defined $_->{err} && defined $_->{t0} && $_->{t0} > $p->{t0} && $_->{t0} < $n->{t1} } @$ops;
					next if %end && !$pass;
					last if ++$tried > 10;
					my $copy = [ map { my $o = {%$_}; $o->{k} = 'sleep' if $end{$_}; $o } @$ops ];
					push @$copy, { %$p, k => 'keepalive', n => next_n($copy, $p->{c}), u => -1, xact => 0,
						fate => 'commit', ufate => 'commit', res => $p->{t1} + $HOUR,
						map { $_ => undef } qw(r h sh f wait) };
					@$copy = sort { $a->{c} <=> $b->{c} || $a->{n} <=> $b->{n} } @$copy;
					my ($v) = ModelCheck::check($copy);
					next unless grep { /^VIOLATION \[overlap\] .* while fence \Q$p->{res}\E \(/ } @$v;
					@$ops = @$copy;
					return 1;
				}
			}
			return 0;
		} ],
		# A holding given a session's id as its fence (ids are fences).
		[ 'fence-unique', "a holding given a session's id as its fence", sub {
			my ($ops) = @_;
			my ($o) = grep { $_->{k} eq 'open_session' && !defined $_->{err} && defined $_->{res} } @$ops;
			my ($a) = grep { $_->{k} eq 'try_lock' && !defined $_->{err} && defined $_->{res} && !$_->{probe} } @$ops;
			return 0 unless $o && $a;
			$a->{res} = $o->{res};
			return 1;
		} ],
		# Another role's keepalive or close_session that succeeded.
		[ 'role', "another role's keepalive or close_session succeeded", sub {
			my ($ops) = @_;
			my ($s) = grep { $_->{steal} && defined $_->{sess} && !$_->{su} } @$ops;
			return 0 unless $s;
			delete $s->{err};
			$s->{res} = $s->{k} eq 'keepalive' ? ($s->{tdone} // 0) + 1000 : 0;
			$s->{$_} //= $s->{tdone} for qw(t0 t1);
			return 1;
		} ],
	);
}

1;
