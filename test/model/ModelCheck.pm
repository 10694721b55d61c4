# ModelCheck.pm: the checker of dlock's randomized workload (the model).
#
# Input: the operation records ModelDriver.pm logged (see there), each with
# its server-clock bracket [t0, t1] (the call happened inside it, so did its
# lease arithmetic), the fate of its transaction, tlo (the transaction was
# still open then) and tdone (its end had been acknowledged by then).
# Commit times are only known as intervals, so every check is written to
# fire only when no order of events consistent with the record could
# explain it (no false alarms):
#
# Holdings have a mode: x exclusive, s shared (sh set: try_lock/lock with
# shared => true), p a semaphore's permits (try_acquire/acquire), X a
# transaction-scoped lock; one holder text and role may hold a resource in
# both x and s (a downgrade, or the only holder's upgrade).  The rules of
# permits and of several resources at once are ModelKinds.pm's (which also
# turns each try_lock_all/lock_all into one acquisition per resource).
#
#  fence-unique   a fence returned by an acquisition belongs to one holding
#                 (resource, holder, role, mode; or one transaction's xact
#                 lock).
#  fence-order    per resource, a holding acknowledged (tdone) before
#                 another's acquisition started has the smaller fence.
#  overlap        per resource, in fence order, a holding's acquisition
#                 returned (t1) while an earlier one it may not share the
#                 resource with surely still lived (an exclusive or xact
#                 holding: any since the last such one; a shared holding:
#                 the last such one; never one of the other mode of the
#                 same holder text and role): its lease surely ran past that (t0 + lease of a
#                 committed acquisition, or a committed renew's expiry) and
#                 no unlock of its holder, unlock_all or break_lock that
#                 returned "released" could have come in between (nor a
#                 renew that shortened it, earlier in the next holding's
#                 own transaction, which saw it, whatever that
#                 transaction's fate); for an xact lock, its transaction
#                 surely still open (tlo).
#  revival        a renew with a fence, or a re-entry, succeeded although
#                 every extension of that holding (t1 + lease of its
#                 acquisitions, renew results) had run out before it
#                 started (t0).
#  role           a role other than the owner (superusers aside) never
#                 unlocks or renews a holding: a steal (another role's
#                 holder text read from dlock.locks) never succeeds, and an
#                 unlock or renew succeeds only if the caller's own role
#                 might then hold that holder text on that resource.
#  free-at-once   the prober's try_lock of its own resource, started after
#                 its previous lease there surely ended, never gets NULL
#                 (only reap(), the worker and the prober touch it).  In
#                 the portable edition (records marked pt) a reap() that
#                 removes leases holds their rows to its commit, and an
#                 acquirer meanwhile finds the row busy: a probe refused
#                 while such a reap() ran (their times overlapping) is
#                 counted, not flagged (the README's portable table says
#                 so).
#  assert-fence   assert_fence succeeds only for a live holding: not after
#                 its every extension ran out, not after a newer holding of
#                 the resource that ends it was acknowledged (for a shared
#                 one: an exclusive one of another holder; for an exclusive
#                 one: any but a shared one of its own holder) (a transaction-scoped one
#                 only if its transaction committed: one that rolled back
#                 may have taken what its own rolled-back break freed), not
#                 after it was released under its fence.
#  stale-fence    an unlock or renew under a fence succeeds only for a live
#                 holding of that fence, by assert-fence's rules (a renew
#                 after its lease ended is a revival), and not once its
#                 holder text took the resource again in that mode under a
#                 newer fence (acknowledged; a re-entry keeps the fence).
#  count          per client, private holder text and mode, replaying the
#                 client's own operations (undoing what rolled back):
#                 unlock of a holding of count n returns n - 1 (see
#                 check_counts for a holder text holding in both modes).
#  error          no SQLSTATE outside those the workload provokes on
#                 purpose (42501, 55P03, 40001, 40P01, 57014; 0A000 of a
#                 lock() or xact_lock() under REPEATABLE READ or
#                 SERIALIZABLE in a portable edition's record, pt; or those
#                 the caller's ok_error decides, for the MySQL edition).
#  no-wait        no call marked nowait (one the contract says never waits
#                 for another transaction) is marked waited (the MySQL
#                 driver marks both; ModelDriver.pm marks neither).
#  shared-db      no steal touched a resource outside the run's own (those
#                 its other operations use).  One that did shows another
#                 run (another tag) shared the database with this one, as
#                 the drivers before their steals kept to their own
#                 resources did: the other run's steals (a superuser's
#                 renew) and unlock_all calls (holder texts were equal
#                 across runs) then changed this run's holdings without a
#                 record here, and its revival, overlap, role and
#                 assert-fence verdicts may be false alarms (a 2026-11
#                 history, s1001, had 11 of them, every one explained by a
#                 concurrent run's logged renews and unlock_all calls).
#
# Sessions (ModelSessions.pm): a holding taken in a session (sess) has
# its session's bounds for its life in every rule above (and a
# close_session of it among the releases that may end it); the rules of
# keepalive, close_session and a session's end are that file's.
#
# Unknown outcomes ("maybe"; only runs with kills and restarts log them,
# test/model/ChaosDriver.pm; logs without them check exactly as before).
# An operation whose connection died before its result came back is
# marked lost: it may or may not have taken effect, at some time within
# its bracket [t0, t1] (t0: the last server clock read on that connection
# before the call; t1: one read after reconnecting).  A transaction whose
# COMMIT got no answer has fate "maybe": its operations' results are known
# but it may or may not have committed, between tlo and tdone.  (A
# transaction whose connection died before COMMIT was sent rolled back:
# fate "rollback", certain.)  The rule, for every check above: a maybe is
# never the ground of a violation, and excuses one only as far as it could
# have happened (within its bracket, with its bounds).
#   - A maybe acquisition (lost, or in a maybe transaction) is a possible
#     holding: it is not one of the holdings whose overlap, order or
#     durability is checked (its fence may be unknown), until an operation
#     that surely took effect shows it (a committed re-entry returning its
#     fence, a committed renew of it): from then on it is certain.  So two
#     holdings are reported overlapping only when both are certain; a
#     certain one overlapping a possible one is no violation, since the
#     possible one may never have existed.
#   - A maybe release (unlock, unlock_all, break_lock: lost, or reporting
#     a release in a maybe transaction) may have ended a holding: it
#     excuses a later acquisition (overlap) like a committed one; but an
#     assert_fence after it is no violation.
#   - A maybe renew may have moved a holding's expiry anywhere between its
#     t0 + lease (the least lease, 50 ms, if none was given) and its t1 +
#     lease (1 s if none): the sure life (overlap, durability) ends no later
#     than the former, the possible life (revival, role, assert-fence) no
#     earlier than the latter; a lost acquisition likewise extends the
#     possible life of its holder text's holding and of its role's claim
#     (role) to t1 + lease.  A renew that answered in a maybe transaction
#     may not have happened at all: it may lower the sure life to its
#     result, never raise it.
#   - count: after a maybe operation on a private holder text, its count is
#     unknown (not checked) until an unlock returns 0 (or a renew without
#     a fence returns NULL, or unlock_all runs); a unit that rolled back
#     restores what was unknown at its start.
#   - free-at-once: a lost prober acquisition may hold until t1 + lease.
# Each lost operation's SQLSTATE (the connection's end: 57P01, 57P02,
# 08006 ...) is the caller's to accept (ok_error).  check()'s extra hook
# lets ChaosCheck.pm add the rules about restarts with the same bounds.
#
# MARGIN_US absorbs rounding of the clock to microseconds.
#
# Cost: the operations are indexed once (holdings by fence; per resource
# and holder text, the renews by t0; the releases by what they release;
# per resource, holder text and role, the holdings' extensions), so a check
# costs O(n log n) plus the operations inside the time spans it asks about
# (a holding's life), not a scan of the whole history per operation: the
# 82,000 operations of a 10-minute run (6 clients) check in seconds, where
# rescanning took more than 45 minutes.  test/model/compare-checkers.pl
# compares the decisions with those of an older version of this file.
# The state is local to one call of check().

package ModelCheck;

use strict;
use warnings;

use JSON::PP;

use ModelKinds;
use ModelSessions;

my $MARGIN_US = 2000;
my %OK_ERR = map { $_ => 1 } qw(42501 55P03 40001 40P01 57014);

# load: the records of every log file, in each client's order.
sub load
{
	my @files = @_;
	my @ops;
	for my $f (@files)
	{
		open(my $fh, '<', $f) or die "$f: $!\n";
		while (my $line = <$fh>)
		{
			chomp $line;
			next if $line eq '';
			my $op = eval { decode_json($line) };
			push @ops, $op if $op;    # a client killed mid-line loses one op
		}
		close $fh;
	}
	@ops = sort { $a->{c} <=> $b->{c} || $a->{n} <=> $b->{n} } @ops;
	return \@ops;
}

sub ok { my ($o) = @_; return !defined $o->{err}; }
sub committed { my ($o) = @_; return ok($o) && $o->{fate} eq 'commit'; }
# maybe_committed: committed, or its transaction's end is unknown.
sub maybe_committed { my ($o) = @_; return ok($o) && ($o->{fate} eq 'commit' || $o->{fate} eq 'maybe'); }
sub lost { my ($o) = @_; return $o->{lost} ? 1 : 0; }
# is_acq: an acquisition of a leased holding: a lock (exclusive, or shared
# with sh set), a semaphore's permits, or one resource of a lock_all
# (ModelKinds::expand made it a try_lock or lock of its own).
sub is_acq { my ($o) = @_; return $o->{k} =~ /^(?:try_lock|lock|try_acquire|acquire)$/; }
sub is_sem_acq { my ($o) = @_; return $o->{k} eq 'try_acquire' || $o->{k} eq 'acquire'; }
# mode: a lease holding's kind: x exclusive, s shared, p permits.
sub mode { my ($o) = @_; return is_sem_acq($o) ? 'p' : $o->{sh} ? 's' : 'x'; }
sub is_xact_acq { my ($o) = @_; return $o->{k} eq 'xact_lock' || $o->{k} eq 'try_xact_lock'; }

sub show
{
	my ($o) = @_;
	return 'none' unless $o;
	my @a = map { defined $o->{$_} ? "$_=$o->{$_}" : () }
	  qw(c role k r h sh permits max lease sess ttl wait f res err t0 t1 tlo tdone fate steal blocker);
	push @a, 'rs=' . join(',', @{ $o->{rs} }) if ref $o->{rs};
	push @a, 'res=' . join(',', map { $_ // 'NULL' } @{ $o->{res} }) if ref $o->{res};
	return "{@a}";
}

# Indexes.  The checks ask, per operation or per holding, questions about
# the operations of one resource, holder text or holding before some time;
# these indexes answer them without scanning the whole history, so a check
# costs O(n log n) plus the operations inside the time spans asked about.

# n_below: how many of the sorted numbers in keys are < t.
sub n_below
{
	my ($keys, $t) = @_;
	my ($lo, $hi) = (0, scalar @$keys);
	while ($lo < $hi)
	{
		my $mid = ($lo + $hi) >> 1;
		if ($keys->[$mid] < $t) { $lo = $mid + 1 }
		else { $hi = $mid }
	}
	return $lo;
}

# pm_build: a prefix-maximum index over items [key, value, op];
# pm_max(index, t, self): the greatest value of the items with key < t,
# leaving out op self (the two greatest of each prefix are kept for that);
# undef if there is none.
sub pm_build
{
	my ($items) = @_;
	my %ix = (keys => [], best => [], op => [], second => []);
	my ($best, $op, $second);
	for my $it (sort { $a->[0] <=> $b->[0] } @$items)
	{
		my ($k, $v, $o) = @$it;
		if (!defined $best || $v > $best) { ($second, $best, $op) = ($best, $v, $o) }
		elsif (!defined $second || $v > $second) { $second = $v }
		push @{ $ix{keys} }, $k;
		push @{ $ix{best} }, $best;
		push @{ $ix{op} }, $op;
		push @{ $ix{second} }, $second;
	}
	return \%ix;
}

sub pm_max
{
	my ($ix, $t, $self) = @_;
	return undef unless $ix;
	my $i = n_below($ix->{keys}, $t) - 1;
	return undef if $i < 0;
	return $ix->{second}[$i] if $self && $ix->{op}[$i] == $self;
	return $ix->{best}[$i];
}

# span_build: operations sorted by t0, with the running maximum of tdone;
# span_ops(index, lo, t): those with t0 < t and tdone > lo, found by walking
# back from t until t0 and every earlier tdone are <= lo.
sub span_build
{
	my ($ops) = @_;
	my @s = sort { $a->{t0} <=> $b->{t0} } @$ops;
	my ($m, @mx);
	for my $o (@s)
	{
		$m = $o->{tdone} if !defined $m || $o->{tdone} > $m;
		push @mx, $m;
	}
	return { ops => \@s, keys => [ map { $_->{t0} } @s ], mx => \@mx };
}

sub span_ops
{
	my ($ix, $lo, $t) = @_;
	return () unless $ix;
	my @r;
	for (my $i = n_below($ix->{keys}, $t) - 1; $i >= 0; $i--)
	{
		last if $ix->{keys}[$i] <= $lo && $ix->{mx}[$i] <= $lo;
		push @r, $ix->{ops}[$i] if $ix->{ops}[$i]{tdone} > $lo;
	}
	return @r;
}

# extension: the latest a holding's acquisition op could have made it last.
sub extension { my ($o) = @_; return $o->{t1} + ($o->{lease} // 0) * 1000; }

# session_ended_error: an acquisition in a session that has ended (or
# whose open_session rolled back): 55000, an error the workload provokes.
sub session_ended_error
{
	my ($o) = @_;
	return defined $o->{sess} && $o->{err} eq '55000'
	  && $o->{k} =~ /^(?:try_lock|lock|try_acquire|acquire|try_lock_all|lock_all)$/;
}

# check(ops, ok_error => sub { my ($op) = @_; ... }): run every check;
# returns (list of violation texts, stats).  ok_error, if given, says which
# failed operations the workload provoked on purpose (default: those with
# a SQLSTATE of %OK_ERR).
sub check
{
	my ($ops, %opt) = @_;
	my $ok_error = $opt{ok_error} // sub {
		my ($o) = @_;
		return 1 if $OK_ERR{ $o->{err} } || session_ended_error($o);
		# The portable edition waits by polling, which a snapshot held for
		# the whole transaction would never see end: a wait under
		# REPEATABLE READ or SERIALIZABLE is refused there (0A000), for
		# every kind (lock, xact_lock, acquire, lock_all).
		return $o->{pt} && $o->{err} eq '0A000' && $o->{k} =~ /^(?:lock|xact_lock|acquire|lock_all)$/
		  && ($o->{iso} // 'READ COMMITTED') ne 'READ COMMITTED';
	};
	my @v;
	my %stats;
	my $viol = sub {
		my ($kind, $text, @involved) = @_;
		$stats{"violation $kind"}++;
		push @v, "VIOLATION [$kind] $text\n" . join('', map { "    " . show($_) . "\n" } @involved);
	};

	$stats{ops} = scalar @$ops;
	$stats{"ok $_->{k}" . ($_->{sh} ? ' shared' : '')}++ for grep { ok($_) && defined $_->{res} } @$ops;
	# Calls under the fence the client saw before its last (ModelDriver.pm).
	$stats{'old-fence calls refused'}++ for grep { $_->{old} && ok($_) && !defined $_->{res} } @$ops;
	# Several resources at once: one acquisition per resource (and the
	# all-or-nothing rule of ModelKinds.pm).
	$ops = ModelKinds::expand($ops, $viol);
	# Sessions: a holding in one lives as long as it (ModelSessions.pm).
	my $sx = ModelSessions::index($ops);

	# shared-db first (it says what the verdicts below are worth): the
	# run's resources are those its operations other than steals use
	# (steals pick from dlock.locks).
	my %own_res = map { $_->{r} => 1 } grep { defined $_->{r} && !$_->{steal} } @$ops;
	my %foreign;
	for my $o (grep { $_->{steal} && defined $_->{r} && !$own_res{ $_->{r} } } @$ops)
	{
		next if $foreign{ $o->{r} }++;
		$viol->('shared-db', "a steal touched resource $o->{r}, not one of this run's: another run "
			  . "shared the database, and its steals and unlock_all may have changed this run's "
			  . "holdings unrecorded (other verdicts may be false alarms)", $o);
	}

	# Holdings by fence.
	my (%hold, %by_rh);
	for my $o (@$ops)
	{
		push @{ $by_rh{"$o->{r}\0$o->{h}"} }, $o if defined $o->{r} && defined $o->{h};
		next unless ok($o) && defined $o->{res};
		my $key;
		if (is_acq($o)) { $key = "L\0$o->{r}\0$o->{h}\0$o->{role}\0" . mode($o) }
		elsif (is_xact_acq($o)) { $key = "X\0$o->{r}\0$o->{c}\0$o->{u}" }
		else { next }
		my $f = $o->{res};
		my $hd = $hold{$f};
		if ($hd && $hd->{key} ne $key)
		{
			$viol->('fence-unique', "fence $f returned to two holdings", $hd->{acq}, $o);
			next;
		}
		$hd = $hold{$f} //= { key => $key, f => $f, r => $o->{r}, h => $o->{h},
			role => $o->{role}, xact => is_xact_acq($o), ops => [], sess => $o->{sess},
			mode => is_xact_acq($o) ? 'X' : mode($o),
			who => is_xact_acq($o) ? "X\0$f" : "$o->{h}\0$o->{role}" };
		push @{ $hd->{ops} }, $o;
		$hd->{acq} = $o if !$hd->{acq} || $o->{t0} < $hd->{acq}{t0};
		$hd->{committed} = 1 if committed($o) || $hd->{xact};
	}

	# Per holder text on a resource: the renews that succeeded (by t0, for
	# e_up) and those that committed (for e_lo).
	my (%renew_pm, %renew_span, %lost_pm, %lost_renew_span);
	for my $rh (keys %by_rh)
	{
		my @rn = grep { $_->{k} eq 'renew' && ok($_) && defined $_->{res} } @{ $by_rh{$rh} };
		# Lost acquisitions and renews of the holder text (maybe).
		my @lr = grep { lost($_) && ($_->{k} eq 'renew' || is_acq($_)) } @{ $by_rh{$rh} };
		if (@lr)
		{
			$lost_pm{$rh} = pm_build([ map { [ $_->{t0}, $_->{t1} + ($_->{lease} // 1000) * 1000, $_ ] } @lr ]);
			my @lrn = grep { $_->{k} eq 'renew' } @lr;
			$lost_renew_span{$rh} = span_build(\@lrn) if @lrn;
		}
		next unless @rn;
		$renew_pm{$rh} = pm_build([ map { [ $_->{t0}, $_->{res}, $_ ] } @rn ]);
		my @rc = grep { maybe_committed($_) } @rn;
		$renew_span{$rh} = span_build(\@rc) if @rc;
	}
	# hold_pm: per holding, its extensions by t0.
	my $hold_pm = sub {
		my ($hd) = @_;
		return $hd->{pm} //= pm_build([ map { [ $_->{t0}, extension($_), $_ ] } @{ $hd->{ops} } ]);
	};

	# e_up: the latest this holding could have lasted, from its extensions
	# started before time t (excluding op $self): its acquisitions' t1 +
	# lease and the results of every renew of its holder text there.
	my $e_up = sub {
		my ($hd, $t, $self) = @_;
		return ModelSessions::up($sx, $hd->{sess}, $t, $self) if defined $hd->{sess};
		my $e = 0;
		for my $x (pm_max($hold_pm->($hd), $t, $self),
			pm_max($renew_pm{"$hd->{r}\0$hd->{h}"}, $t, $self),
			pm_max($lost_pm{"$hd->{r}\0$hd->{h}"}, $t, $self))
		{
			$e = $x if defined $x && $x > $e;
		}
		return $e;
	};
	# e_lo: the earliest this committed lease surely lasted until, given
	# what happened before time t.  An acquisition or re-entry sets the
	# expiry to at least t0 + lease; a renew sets it to its result, which
	# may be earlier.  Any committed renew of this holder text on this
	# resource (under this fence or none) may have been the last one; so
	# with renews the bound is the least result among those not surely
	# followed by another (one is, if another started after it was done).
	# With na (the next holding's acquisition), a renew that ran earlier
	# in na's own transaction and that na saw (not rolled back to a
	# savepoint without na), whatever the transaction's fate, may lower
	# the bound to its result: it may have shortened the lease, which then
	# ran out before na took the resource; a rollback undoes both.  (Only
	# lower: such a renew never makes the bound later.)
	my $e_lo_na;
	my $e_lo = sub {
		my ($hd, $t, $na) = @_;
		my $e = $e_lo_na->($hd, $t);
		return $e unless $na;
		for my $x (@{ $by_rh{"$hd->{r}\0$hd->{h}"} || [] })
		{
			next unless $x->{k} eq 'renew' && ok($x) && defined $x->{res}
			  && $x->{c} == $na->{c} && $x->{u} == $na->{u} && $x->{n} < $na->{n}
			  && (!$x->{undone} || $na->{undone})
			  && $x->{t0} >= $hd->{acq}{t0} && (!defined $x->{f} || $x->{f} == $hd->{f});
			$e = $x->{res} if $x->{res} < $e;
		}
		return $e;
	};
	# A renew without a fence meets whichever holding of its holder text
	# is live; one that has held the resource in both modes (a downgrade,
	# an upgrade) leaves the checker unsure which: the bound is then the
	# lesser of the two readings, with such renews and without them (seed
	# 301343419: a fenceless renew of the shared holding to 1 s, then the
	# upgrade's exclusive one of 50 ms; readers joined once it ended).
	my %modes;
	$modes{"$_->{r}\0$_->{h}"}{ $_->{mode} } = 1 for grep { !$_->{xact} } values %hold;
	my $e_lo_by;
	$e_lo_na = sub {
		my ($hd, $t) = @_;
		my $e = $e_lo_by->($hd, $t, 1);
		return $e unless keys %{ $modes{"$hd->{r}\0$hd->{h}"} || {} } > 1;
		my $e2 = $e_lo_by->($hd, $t, 0);
		return $e2 < $e ? $e2 : $e;
	};
	$e_lo_by = sub {
		my ($hd, $t, $fenceless) = @_;
		return ModelSessions::lo($sx, $hd->{sess}, $t) if defined $hd->{sess};
		my $e = 0;
		for my $o (@{ $hd->{ops} })
		{
			# (adding permits may not extend a semaphore holding's lease)
			next unless committed($o) && ($hd->{mode} ne 'p' || $o == $hd->{acq});
			my $x = $o->{t0} + $o->{lease} * 1000;
			$e = $x if $x > $e;
		}
		my @span = grep { defined $_->{f} ? $_->{f} == $hd->{f} : $fenceless }
		  span_ops($renew_span{"$hd->{r}\0$hd->{h}"}, $hd->{acq}{t0}, $t);
		# Renews that committed set the bound; one whose transaction's end
		# is unknown (fate maybe) may not have happened: it may only lower
		# the bound, to its result, unless a committed one surely followed
		# it (seed 635791428: a maybe renew to 1.76 s, not committed, read
		# as the lease's sure end; an xact lock took the resource at 1.58 s,
		# after the lease's end without it, 1.51 s).
		my @renews = grep { committed($_) } @span;
		my @maybes = grep { !committed($_) } @span;
		my $min;
		if (@renews)
		{
			my $last;
			for my $x (@renews) { $last = $x->{t0} if !defined $last || $x->{t0} > $last }
			for my $x (@renews)
			{
				next if $last > $x->{tdone};
				$min = $x->{res} if !defined $min || $x->{res} < $min;
			}
			return 0 unless defined $min;
		}
		else
		{
			$min = $e;
		}
		for my $x (@maybes)
		{
			next if grep { $_->{t0} > $x->{tdone} } @renews;
			$min = $x->{res} if $x->{res} < $min;
		}
		# A lost renew may have set the expiry as early as t0 + lease.
		for my $x (grep { !defined $_->{f} || $_->{f} == $hd->{f} }
			span_ops($lost_renew_span{"$hd->{r}\0$hd->{h}"}, $hd->{acq}{t0}, $t))
		{
			my $lo = $x->{t0} + ($x->{lease} // 50) * 1000;
			$min = $lo if $lo < $min;
		}
		return $min;
	};

	# Committed holdings per resource, in fence order: locks (exclusive,
	# shared, transaction-scoped) and semaphores' permits apart.
	my (%res_holds, %sem_holds);
	push @{ ($_->{mode} eq 'p' ? \%sem_holds : \%res_holds)->{ $_->{r} } }, $_
	  for grep { $_->{committed} } values %hold;
	@$_ = sort { $a->{f} <=> $b->{f} } @$_ for values %res_holds, values %sem_holds;

	# Releases that might end a holding: they said so, and committed (or
	# ran earlier in the transaction of the next holding, which saw them).
	# Indexed by what they release: B resource (break_lock), A holder text
	# (unlock_all), U resource and holder text (unlock).  The committed
	# unlocks under a fence, by resource and fence, in log order.
	my @enders = grep {
		(ok($_) && (($_->{k} eq 'unlock' && defined $_->{res} && $_->{res} == 0)
			|| ($_->{k} eq 'unlock_all' && $_->{res} > 0)
			|| ($_->{k} eq 'break_lock' && $_->{res})))
		|| (lost($_) && $_->{k} =~ /^(?:unlock|unlock_all|break_lock)$/)
	} @$ops;
	my (%enders_by, %ender_span, %fence_unlocks);
	for my $u (@enders)
	{
		my $key = $u->{k} eq 'break_lock' ? "B\0$u->{r}"
		  : $u->{k} eq 'unlock_all' ? "A\0$u->{h}" : "U\0$u->{r}\0$u->{h}";
		push @{ $enders_by{$key} }, $u;
		push @{ $fence_unlocks{ "$u->{r}\0" . (0 + $u->{f}) } }, $u
		  if committed($u) && $u->{k} eq 'unlock' && defined $u->{f};
	}
	$ender_span{$_} = span_build($enders_by{$_}) for keys %enders_by;
	# may_end(hd, lo, t, na): the releases that may have ended holding hd
	# between lo and t (committed, maybe, or of na's own transaction).
	my $may_end = sub {
		my ($hd, $lo, $t, $na) = @_;
		return grep {
			maybe_committed($_) || lost($_)
			  || ($na && $_->{c} == $na->{c} && $_->{u} == $na->{u})
		} (map { span_ops($ender_span{$_}, $lo, $t) }
		  ("B\0$hd->{r}", "A\0$hd->{h}", "U\0$hd->{r}\0$hd->{h}")),
		  (defined $hd->{sess} ? ModelSessions::closes($sx, $hd->{sess}, $lo, $t) : ());
	};

	for my $r (sort(keys %res_holds), sort(keys %sem_holds))
	{
		my @hs = @{ $res_holds{$r} || $sem_holds{$r} };
		$stats{holdings} += @hs;

		# fence-order: scan from the largest fence down.
		my $min;
		for my $hd (reverse @hs)
		{
			if ($min && $min->{acq}{tdone} < $hd->{acq}{t0})
			{
				$viol->('fence-order',
					"resource $r: fence $min->{f} acknowledged before fence $hd->{f} was asked for",
					$min->{acq}, $hd->{acq});
			}
			$min = $hd if !$min || $hd->{acq}{tdone} < $min->{acq}{tdone};
		}

		# overlap: each holding against the earlier ones (in fence order)
		# it may not share the resource with: an exclusive or
		# transaction-scoped holding against every holding since the last
		# such one before it (that one included), a shared one against that
		# last one; never an exclusive and a shared one of one holder text
		# and role (a downgrade, or the only holder's upgrade, keeps both).  Semaphores: check_permits.
		next unless $res_holds{$r};
		my $last_x;
		for my $i (0 .. $#hs)
		{
			my $n = $hs[$i];
			my @ps = $n->{mode} eq 's' ? (defined $last_x ? ($hs[$last_x]) : ())
			  : @hs[ ($last_x // 0) .. $i - 1 ];
			$last_x = $i unless $n->{mode} eq 's';
			for my $p (@ps)
			{
				# (two exclusive holdings of one holder text: the first ended)
				next if $p->{who} eq $n->{who} && $p->{mode} ne $n->{mode};
				my $t = $n->{acq}{t1};
				if ($p->{xact})
				{
					my $a = $p->{acq};
					my $end = $a->{undone} ? $a->{t1} : $a->{tlo};
					$viol->('overlap', "resource $r: fence $n->{f} ($n->{mode}) taken while xact lock $p->{f} was held",
						$a, $n->{acq})
					  if $end > $t + $MARGIN_US;
					next;
				}
				my $na = $n->{acq};
				my $e = $e_lo->($p, $t, $na);
				next unless $e > $t + $MARGIN_US;
				next if $may_end->($p, $p->{acq}{t0}, $t, $na);
				$viol->('overlap',
					"resource $r: fence $n->{f} ($n->{mode}) taken while fence $p->{f} ($p->{mode}, holder $p->{h}) surely lived until $e",
					$p->{acq}, $n->{acq});
			}
		}
	}

	# For assert-fence, per resource: from each position of its fence
	# order on, the holdings acknowledged first (tdone) among those that
	# count as newer (a transaction-scoped one only if it committed: one
	# that rolled back may have taken what its own rolled-back break_lock or
	# unlock freed, and the rollback put the older holding back), apart for
	# exclusive (E: exclusive and transaction-scoped) and shared (S) ones:
	# the first, and the first of another holder text or role than the
	# first's (a newer holding of the other mode by the same holder, a
	# downgrade or upgrade, leaves the older one current; so does a newer
	# shared one of another holder beside a shared one).
	my %newer_first;
	for my $r (keys %res_holds)
	{
		my $hs = $res_holds{$r};
		my %first = (E => [], S => []);
		my %best = (E => [], S => []);
		for (my $i = $#$hs; $i >= 0; $i--)
		{
			my $n = $hs->[$i];
			my $cat = $n->{mode} eq 's' ? 'S' : 'E';
			if (!($n->{xact} && ($n->{acq}{fate} // '') ne 'commit'))
			{
				my $b = $best{$cat};
				if (!$b->[0] || $n->{acq}{tdone} <= $b->[0]{acq}{tdone})
				{
					$b->[1] = $b->[0] if $b->[0] && $b->[0]{who} ne $n->{who};
					$b->[0] = $n;
				}
				elsif ($n->{who} ne $b->[0]{who}
					&& (!$b->[1] || $n->{acq}{tdone} <= $b->[1]{acq}{tdone}))
				{
					$b->[1] = $n;
				}
			}
			$first{$_}[$i] = [ @{ $best{$_} } ] for qw(E S);
		}
		$newer_first{$r} = { keys => [ map { $_->{f} } @$hs ], first => \%first };
	}

	# For role: the non-transactional holdings per resource, holder text
	# and role (group).  An unlock or renew by that role passes if one of
	# them has an op started before it returned (t1) that committed or is
	# of the caller's own transaction, and lasted (e_up) to its start (t0).
	# Per group: the first t0 of a committed op; the extensions of each
	# holding once it has a committed op by then (key: the later t0 of the
	# two); and the ops per transaction (client and unit).
	my (%grp_first_c, %grp_pm, %grp_unit, %grp_lost_pm);
	{
		my %items;
		for my $hd (values %hold)
		{
			next if $hd->{xact};
			my $g = "$hd->{r}\0$hd->{h}\0$hd->{role}";
			my $fc;
			for my $o (@{ $hd->{ops} })
			{
				push @{ $grp_unit{"$g\0$o->{c}\0$o->{u}"} }, [ $o, $hd ];
				$fc = $o->{t0} if maybe_committed($o) && (!defined $fc || $o->{t0} < $fc);
			}
			next unless defined $fc;
			$grp_first_c{$g} = $fc if !defined $grp_first_c{$g} || $fc < $grp_first_c{$g};
			push @{ $items{$g} }, map { [ $_->{t0} > $fc ? $_->{t0} : $fc, extension($_), $_ ] }
			  @{ $hd->{ops} };
		}
		$grp_pm{$_} = pm_build($items{$_}) for keys %items;
		# Lost acquisitions: a possible holding until t1 + lease.
		my %li;
		push @{ $li{"$_->{r}\0$_->{h}\0$_->{role}"} }, [ $_->{t0}, $_->{t1} + ($_->{lease} // 1000) * 1000, $_ ]
		  for grep { lost($_) && is_acq($_) } @$ops;
		$grp_lost_pm{$_} = pm_build($li{$_}) for keys %li;
	}
	my $might_hold = sub {
		my ($o) = @_;
		my ($g, $t) = ("$o->{r}\0$o->{h}\0$o->{role}", $o->{t1});
		my $lasted = sub { my ($e) = @_; return defined $e && $e + $MARGIN_US >= $o->{t0} };
		# In a session: the session might have lived then.
		return $lasted->(ModelSessions::up($sx, $o->{sess}, $t, $o)) if defined $o->{sess};
		my @own = grep { $_->[0]{t0} < $t } @{ $grp_unit{"$g\0$o->{c}\0$o->{u}"} || [] };
		# A committed holding's own extensions, or an own-transaction one's.
		return 1 if $lasted->(pm_max($grp_pm{$g}, $t));
		return 1 if $lasted->(pm_max($grp_lost_pm{$g}, $t));
		return 1 if grep { $lasted->(pm_max($hold_pm->($_->[1]), $t)) } @own;
		# Or any such holding and the renews of the holder text (or 0).
		return 0 unless @own || (defined $grp_first_c{$g} && $grp_first_c{$g} < $t);
		return $lasted->(0) || $lasted->(pm_max($renew_pm{"$o->{r}\0$o->{h}"}, $t, $o));
	};

	my %by_key;
	push @{ $by_key{ $_->{key} } }, $_ for values %hold;
	# fence_dead(hd, o): why holding hd surely had ended when o started,
	# as [witness, text, why] (why: lease, newer, release, retaken); none if it may
	# have lived.  For assert_fence and the unlock or renew under a fence.
	my $fence_dead = sub {
		my ($hd, $o) = @_;
		my @dead;
		my $e = $e_up->($hd, $o->{t1}, $o);
		push @dead, [ $hd->{acq}, "after its lease ended at $e", 'lease' ]
		  if $o->{t0} > $e + $MARGIN_US;
		if (my $nf = $newer_first{ $o->{r} })
		{
			# The first holding with a larger fence (keys: fences, sorted).
			my ($lo, $hi) = (0, scalar @{ $nf->{keys} });
			while ($lo < $hi)
			{
				my $mid = ($lo + $hi) >> 1;
				if ($nf->{keys}[$mid] > $o->{f}) { $hi = $mid }
				else { $lo = $mid + 1 }
			}
			# Those that end hd: E of any holder for an exclusive hd (its
			# holder's own newer one came after it ended), else of
			# another; S of another holder for an exclusive hd.
			my $other = sub {
				my ($b) = @_;
				return undef unless $b && $b->[0];
				return $b->[0]{who} ne $hd->{who} ? $b->[0] : $b->[1];
			};
			my @n = grep { defined } $hd->{mode} eq 's'
			  ? ($other->($nf->{first}{E}[$lo]))
			  : (($nf->{first}{E}[$lo] || [])->[0], $other->($nf->{first}{S}[$lo]));
			my ($n) = sort { $a->{acq}{tdone} <=> $b->{acq}{tdone} } @n;
			push @dead, [ $n->{acq}, "($hd->{mode}) after fence $n->{f} ($n->{mode}) was acknowledged", 'newer' ]
			  if $n && $n->{acq}{tdone} < $o->{t0};
		}
		my ($u) = grep { $_->{tdone} < $o->{t0} } @{ $fence_unlocks{ "$o->{r}\0" . (0 + $o->{f}) } || [] };
		push @dead, [ $u, 'after its release', 'release' ] if $u;
		# A newer holding of the same holder text, role and mode: a
		# re-entry keeps the fence, so hd had ended before it was taken.
		my ($m) = sort { $a->{tdone} <=> $b->{tdone} } grep { $_->{tdone} < $o->{t0} }
		  map { $_->{acq} } grep { $_->{f} > $hd->{f} && committed($_->{acq}) } @{ $by_key{ $hd->{key} } };
		push @dead, [ $m, "after its holder took fence $m->{res}", 'retaken' ] if $m && !$hd->{xact};
		return @dead;
	};

	# revival, role, assert-fence, stale-fence, free-at-once, error.
	my %probe_last;
	my @pt_reaps;    # the portable edition's reaps that removed leases
	for my $o (@$ops)
	{
		if (defined $o->{err} && !$ok_error->($o))
		{
			$viol->('error', "unexpected SQLSTATE $o->{err}: " . ($o->{msg} // ''), $o);
		}
		if ($o->{waited})
		{
			$stats{"waited $o->{k}"}++;
			$viol->('no-wait', "$o->{k} waited for another transaction"
				  . (defined $o->{err} ? " (until error $o->{err}: " . ($o->{msg} // '') . ')' : ''), $o)
			  if $o->{nowait};
		}
		if ($o->{k} eq 'renew' && ok($o) && defined $o->{res} && defined $o->{f}
			&& (my $hd = $hold{ $o->{f} }))
		{
			if (!$hd->{xact} && $hd->{r} eq $o->{r})
			{
				my $e = $e_up->($hd, $o->{t1}, $o);
				$viol->('revival', "renew of fence $o->{f} after its lease ended at $e", $hd->{acq}, $o)
				  if $e && $o->{t0} > $e + $MARGIN_US;
			}
		}
		if (is_acq($o) && ok($o) && defined $o->{res} && (my $hd = $hold{ $o->{res} }))
		{
			if ($hd->{acq} != $o)
			{
				my $e = $e_up->($hd, $o->{t1}, $o);
				$viol->('revival', "re-entry kept fence $o->{res} after its lease ended at $e",
					$hd->{acq}, $o)
				  if $o->{t0} > $e + $MARGIN_US;
			}
		}
		if (($o->{k} eq 'unlock' || $o->{k} eq 'renew') && ok($o) && defined $o->{res}
			&& !$o->{su})
		{
			if ($o->{steal})
			{
				$viol->('role', "role $o->{role} changed another role's holding of $o->{r}", $o);
			}
			elsif (!$might_hold->($o))
			{
				$viol->('role', "role $o->{role} changed $o->{r} for holder $o->{h} without holding it", $o);
			}
		}
		if ($o->{k} eq 'assert_fence' && ok($o) && (my $hd = $hold{ $o->{f} }))
		{
			next if $hd->{xact};
			for my $d ($fence_dead->($hd, $o))
			{
				$viol->('assert-fence', "assert_fence of fence $o->{f} $d->[1]", $d->[0], $o);
			}
		}
		# An unlock or renew under a fence acts on that holding only, so
		# it succeeds only while that holding lives (a renew after its
		# lease is a revival, above).
		if (($o->{k} eq 'unlock' || $o->{k} eq 'renew') && ok($o) && defined $o->{res}
			&& defined $o->{f} && (my $hd = $hold{ $o->{f} }))
		{
			if (!$hd->{xact} && $hd->{r} eq $o->{r})
			{
				for my $d ($fence_dead->($hd, $o))
				{
					next if $d->[2] eq 'lease' && $o->{k} eq 'renew';
					$viol->('stale-fence', "$o->{k} of fence $o->{f} $d->[1]", $d->[0], $o);
				}
			}
		}
		if ($o->{probe})
		{
			@pt_reaps = grep { $_->{k} eq 'reap' && $_->{pt} && ($_->{res} // 0) > 0 } @$ops
			  if $o->{pt} && !@pt_reaps;
			if ($o->{expect_free})
			{
				$stats{probes}++;
				my $last = $probe_last{ $o->{r} };
				$stats{'probes after a session holding'}++ if $last && defined $last->{sess};
				# a holding in a session: as long as its session may have lasted
				my $end = $last && ($last->{end} // ModelSessions::up($sx, $last->{sess}, $o->{t0}, $last->{op}));
				my $sure = $last && (!$last->{res} || $o->{t0} > $end + $MARGIN_US);
				if ($sure && ok($o) && !defined $o->{res} && $o->{pt}
					&& grep { $_->{t0} <= $o->{t1} && ($_->{tdone} // $_->{t1}) >= $o->{t0} } @pt_reaps)
				{
					# the portable edition's known gap (see the header)
					$stats{'probes refused during a reap (portable)'}++;
				}
				elsif ($sure && ok($o) && !defined $o->{res})
				{
					$viol->('free-at-once', "try_lock of $o->{r} got NULL although its last lease ended at $end",
						$last->{op}, $o);
				}
			}
			if (is_acq($o) && ((ok($o) && defined $o->{res}) || lost($o)))
			{
				$probe_last{ $o->{r} } = { op => $o, res => 1, sess => $o->{sess},
					end => defined $o->{sess} ? undef : $o->{t1} + $o->{lease} * 1000 };
			}
			elsif ($o->{k} eq 'unlock' && ok($o) && defined $o->{res} && $o->{res} == 0)
			{
				$probe_last{ $o->{r} }{end} = $o->{tdone};
			}
		}
	}

	check_counts($ops, $viol, \%stats);
	ModelSessions::check($sx, $ops, \%hold, $viol, \%stats, $MARGIN_US);
	ModelKinds::check({ ops => $ops, hold => \%hold, sem_holds => \%sem_holds, by_rh => \%by_rh,
			e_lo => $e_lo, e_lo_by => $e_lo_by, e_up => $e_up, may_end => $may_end,
			margin => $MARGIN_US }, $viol, \%stats);
	$stats{'maybe ops'} = scalar grep { lost($_) || ($_->{fate} // '') eq 'maybe' } @$ops
	  if grep { lost($_) || ($_->{fate} // '') eq 'maybe' } @$ops;
	# extra(context, viol, stats): more rules over the same bounds.
	$opt{extra}->({ ops => $ops, hold => \%hold, res_holds => \%res_holds, e_lo => $e_lo,
			e_up => $e_up, may_end => $may_end, sx => $sx, margin => $MARGIN_US }, $viol, \%stats)
	  if $opt{extra};
	return (\@v, \%stats);
}

# check_counts: replay each client's own private holdings (undoing what
# rolled back) and compare unlock's count with the model's.  A holder text
# may hold a resource twice, exclusive and shared (a downgrade, or the
# only holder's upgrade): counts are per mode; unlock without a fence
# releases the exclusive holding first (a live one: the model, which has
# no clock, also accepts the shared count then), so it is compared only
# when the model knows which holding it met.  Semaphores' permits are not
# counts.
sub check_counts
{
	my ($ops, $viol, $stats) = @_;
	my (%count, %fence, %unknown);
	my %sem_r = map { $_->{r} => 1 } grep { is_sem_acq($_) } @$ops;
	my $both = sub { my ($k) = @_; return ("$k\0x", "$k\0s"); };
	my $flush = sub {
		my ($client, $unit_ops) = @_;
		return unless @$unit_ops;
		my $start = { count => {%count}, fence => {%fence}, unknown => {%unknown} };
		for my $o (@$unit_ops)
		{
			my $k = defined $o->{r} && defined $o->{h} ? "$o->{r}\0$o->{h}" : undef;
			next if $o->{steal} || $o->{probe} || $o->{undone};
			next if defined $o->{r} && $sem_r{ $o->{r} };
			my $private = defined $o->{h} && $o->{h} =~ m{^\Q$o->{role}\E/c\Q$o->{c}\E/};
			if (lost($o) || ($o->{ufate} // $o->{fate}) eq 'maybe')
			{
				# Unknown outcome: the count is unknown until re-read.
				if ($o->{k} eq 'unlock_all')
				{
					$unknown{$_} = 1 for grep { (split /\0/, $_)[1] eq $o->{h} } keys %count;
				}
				elsif ($private && $k) { $unknown{$_} = 1 for $both->($k) }
				next;
			}
			next unless ok($o);
			# The holding of k an unlock or renew under fence f met (the
			# mode's key), '' if none of the model's, undef if unknown.
			my $target = sub {
				my ($f) = @_;
				my ($kx, $ks) = $both->($k);
				if (defined $f)
				{
					my ($m) = grep { ($count{$_} // 0) > 0 && $fence{$_} == $f } $kx, $ks;
					return $m // '';
				}
				return undef if $unknown{$kx};
				return $kx if ($count{$kx} // 0) > 0;
				return undef if $unknown{$ks};
				return $ks;
			};
			if (is_acq($o) && $private && defined $o->{res})
			{
				my $km = "$k\0" . mode($o);
				next if $unknown{$km};
				if (($count{$km} // 0) > 0 && $fence{$km} == $o->{res}) { $count{$km}++ }
				else { $count{$km} = 1; $fence{$km} = $o->{res} }
			}
			elsif ($o->{k} eq 'unlock' && $private)
			{
				if (defined $o->{res})
				{
					my ($kx, $ks) = $both->($k);
					my ($cx, $cs) = ($count{$kx} // 0, $count{$ks} // 0);
					if (!defined $o->{f} && $cx > 0 && $cs > 0 && !$unknown{$kx} && !$unknown{$ks})
					{
						# Both held as far as the model knows, but the exclusive
						# one may have expired (the model has no clock): then
						# the shared one was met.
						if ($o->{res} == $cx - 1 && $o->{res} == $cs - 1)
						{
							$unknown{$kx} = $unknown{$ks} = 1;
							next;
						}
						if ($o->{res} == $cs - 1)
						{
							($count{$kx}, $count{$ks}) = (0, $o->{res});
							next;
						}
					}
					my $km = $target->($o->{f});
					if (!defined $km) { $unknown{$_} = 1 for $both->($k); next }
					next if $km eq '';
					my $c = $count{$km} // 0;
					if ($c > 0 && !$unknown{$km})
					{
						# The count is known here: the self-test alters such an unlock.
						$stats->{'count checks'}++;
						$o->{count_known} = 1;
						$viol->('count', "unlock returned $o->{res} for a holding of count $c", $o)
						  if $o->{res} != $c - 1;
					}
					$count{$km} = $o->{res};
					delete $unknown{$km} if $o->{res} == 0;
				}
			}
			if ($o->{k} eq 'renew' && $private && !defined $o->{res})
			{
				# A renew's NULL may be one that met another transaction
				# changing hands and did not wait (MariaDB): a break_lock
				# that then rolled back leaves the holding and its count
				# (seed 262211867): unknown until re-read.
				if (!defined $o->{f}) { $unknown{$_} = 1 for $both->($k) }
				elsif (my $km = $target->($o->{f})) { $unknown{$km} = 1 }
			}
			elsif ($o->{k} eq 'unlock' && $private && !defined $o->{res})
			{
				# NULL: no holding of the holder text (under that fence).
				if (!defined $o->{f})
				{
					for my $km ($both->($k)) { $count{$km} = 0; delete $unknown{$km} }
				}
				elsif (my $km = $target->($o->{f})) { $count{$km} = 0 }
			}
			elsif ($o->{k} eq 'unlock_all' && defined $o->{res})
			{
				for my $kk (keys %count, keys %unknown)
				{
					next unless (split /\0/, $kk)[1] eq $o->{h};
					$count{$kk} = 0;
					delete $unknown{$kk};
				}
			}
		}
		# A rolled-back unit restores the state at its start (operations
		# undone by ROLLBACK TO were skipped above).
		if (($unit_ops->[0]{ufate} // $unit_ops->[0]{fate}) ne 'commit')
		{
			%count = %{ $start->{count} };
			%fence = %{ $start->{fence} };
			%unknown = %{ $start->{unknown} };
			# A maybe unit: the counts it touched are unknown (see above).
			if (($unit_ops->[0]{ufate} // '') eq 'maybe')
			{
				for my $o (grep { !$_->{undone} && defined $_->{h} } @$unit_ops)
				{
					$unknown{$_} = 1 for grep { (split /\0/, $_)[1] eq $o->{h} }
					  $o->{k} eq 'unlock_all' ? (keys %count)
					  : (defined $o->{r} ? $both->("$o->{r}\0$o->{h}") : ());
				}
			}
		}
	};
	my @unit;
	my $prev = '';
	for my $o (@$ops)
	{
		my $id = "$o->{c}/$o->{u}";
		if ($id ne $prev)
		{
			$flush->($prev, \@unit);
			@unit = ();
			if ($prev ne '' && (split m{/}, $prev)[0] != $o->{c}) { %count = (); %fence = (); %unknown = () }
			$prev = $id;
		}
		push @unit, $o;
	}
	$flush->($prev, \@unit);
}

1;
