#!/usr/bin/perl
# compare-checkers.pl: evidence that ModelCheck.pm decides as an older
# version of it did (a test tool, run by hand; not part of the test suite).
#
#   test/model/compare-checkers.pl [--old-rev main | --old FILE]
#       [--mutants 200] [--seed 1] [--max-edits 3] DIR...
#
# Loads the older checker (ModelCheck.pm at git revision --old-rev, or the
# file --old) under the package name ModelCheckOld, from a temporary file,
# and runs both checkers on the history each DIR holds (the client*.log a
# run-model.pl --dir DIR run left), then on --mutants copies of it altered
# by 1 to --max-edits random edits each (fences shifted or swapped, unlocks
# and other releases dropped, leases lengthened, renews and assert_fence
# calls moved later, operations moved in time, another role's or holder
# text's unlock, fates flipped, ...), each meant to break or bend one of
# the properties checked.  Both must return the same violation texts, in
# the same order, and the same stats.  The one difference allowed: when an
# assert_fence came after several newer holdings were acknowledged, the old
# checker cited whichever came first in Perl's hash order (which changes
# from one process to the next), the new one the first acknowledged; such
# lines are compared with the fence cited masked, and counted.  Prints the
# counts; exits 1 on any difference (and prints the first few).  Only
# Perl's core modules and JSON::PP; no server needed.

use strict;
use warnings;

use FindBin;
use lib $FindBin::Bin;
use File::Temp qw(tempfile);
use Getopt::Long;
use Time::HiRes qw(time);

use ModelCheck;

my %o = (mutants => 200, seed => 1, 'max-edits' => 3, 'old-rev' => 'main');
GetOptions(\%o, 'old-rev=s', 'old=s', 'mutants=i', 'seed=i', 'max-edits=i') or exit 2;
die "usage: $0 [--old-rev REV | --old FILE] [--mutants N] [--seed N] DIR...\n" unless @ARGV;

# The old checker, renamed.
my $src;
if (defined $o{old})
{
	open(my $fh, '<', $o{old}) or die "$o{old}: $!\n";
	local $/;
	$src = <$fh>;
}
else
{
	$src = `git -C "$FindBin::Bin" show "$o{'old-rev'}:test/model/ModelCheck.pm"`;
	die "git show $o{'old-rev'}:test/model/ModelCheck.pm failed\n" if $? || !$src;
}
$src =~ s/^package ModelCheck;/package ModelCheckOld;/m or die "no 'package ModelCheck;' in the old checker\n";
my ($tfh, $tmp) = tempfile('ModelCheckOld-XXXXXX', TMPDIR => 1, SUFFIX => '.pm', UNLINK => 1);
print $tfh $src;
close $tfh;
do $tmp or die "loading the old checker: " . ($@ || $!) . "\n";

$| = 1;
srand($o{seed});
sub pick { my @a = @_; return @a ? $a[ int(rand(@a)) ] : undef; }
sub ok_ { return !defined $_[0]{err}; }
sub is_acq { return $_[0]{k} eq 'try_lock' || $_[0]{k} eq 'lock'; }

# Edits: each takes the ops (a copy) and alters it; returns its name, or
# undef if it found nothing to alter.
my @ROLES = qw(dlock_model_a dlock_model_b postgres);
my %EDITS = (
	'fence-shift' => sub {    # an acquisition gets another's fence, or a near one
		my ($ops) = @_;
		my @a = grep { is_acq($_) && ok_($_) && defined $_->{res} } @$ops;
		my $x = pick(@a) or return;
		$x->{res} = rand() < 0.5 ? pick(@a)->{res} : $x->{res} + pick(-2, -1, 1, 2);
		return 1;
	},
	'fence-swap' => sub {    # two holdings of a resource swap fences
		my ($ops) = @_;
		my $x = pick(grep { is_acq($_) && ok_($_) && defined $_->{res} } @$ops) or return;
		my $y = pick(grep { is_acq($_) && ok_($_) && defined $_->{res} && $_->{r} eq $x->{r}
			  && abs($_->{t0} - $x->{t0}) < 3_000_000 } @$ops) or return;
		($x->{res}, $y->{res}) = ($y->{res}, $x->{res});
		return 1;
	},
	'drop-release' => sub {    # an unlock, unlock_all or break_lock vanishes
		my ($ops) = @_;
		my @i = grep { my $k = $ops->[$_]{k}; ok_($ops->[$_])
			  && ($k eq 'unlock' || $k eq 'unlock_all' || $k eq 'break_lock') } 0 .. $#$ops;
		return unless @i;
		splice(@$ops, pick(@i), 1);
		return 1;
	},
	'release-said-no' => sub {    # an unlock that released says it did not
		my ($ops) = @_;
		my $u = pick(grep { $_->{k} eq 'unlock' && ok_($_) && defined $_->{res} && $_->{res} == 0 } @$ops)
		  or return;
		$u->{res} = 1;
		return 1;
	},
	'long-lease' => sub {    # an acquisition's lease much longer
		my ($ops) = @_;
		my $x = pick(grep { is_acq($_) && ok_($_) && defined $_->{res} } @$ops) or return;
		$x->{lease} *= pick(2, 10, 100, 10_000);
		return 1;
	},
	'acq-earlier' => sub {    # an acquisition returns earlier
		my ($ops) = @_;
		my $x = pick(grep { (is_acq($_) || $_->{k} =~ /xact_lock/) && ok_($_) && defined $_->{res} } @$ops)
		  or return;
		my $d = int(rand(2_000_000));
		$x->{t0} -= $d;
		$x->{t1} -= $d;
		return 1;
	},
	'renew-late' => sub {    # a renew moved past its lease's end
		my ($ops) = @_;
		my $x = pick(grep { $_->{k} eq 'renew' && ok_($_) && defined $_->{res} } @$ops) or return;
		my $d = pick(50_000, 500_000, 2_000_000, 3_600_000_000);
		$x->{$_} += $d for grep { defined $x->{$_} } qw(t0 t1 tlo tdone);
		$x->{res} += $d if rand() < 0.5;
		return 1;
	},
	'assert-late' => sub {    # an assert_fence or check moved later
		my ($ops) = @_;
		my $x = pick(grep { ($_->{k} eq 'assert_fence' || $_->{k} eq 'check') && ok_($_) } @$ops) or return;
		$x->{k} = 'assert_fence';
		my $d = pick(100_000, 1_000_000, 5_000_000);
		$x->{$_} += $d for qw(t0 t1 tlo tdone);
		return 1;
	},
	'other-role' => sub {    # an unlock or renew by another role, or for another holder text
		my ($ops) = @_;
		my $x = pick(grep { ($_->{k} eq 'unlock' || $_->{k} eq 'renew') && ok_($_) && defined $_->{res} } @$ops)
		  or return;
		if (rand() < 0.5) { $x->{role} = pick(grep { $_ ne $x->{role} } @ROLES); $x->{su} = 0 }
		else { $x->{h} = pick(map { $_->{h} } grep { defined $_->{h} && $_->{h} ne $x->{h} } @$ops) // 'x' }
		delete $x->{steal};
		return 1;
	},
	'steal-ok' => sub {    # a steal that succeeded
		my ($ops) = @_;
		my $x = pick(grep { $_->{steal} } @$ops) or return;
		delete $x->{err};
		$x->{res} = 0;
		$x->{su} = 0;
		$x->{$_} //= $x->{tdone} for qw(t0 t1);
		return 1;
	},
	'time-jitter' => sub {    # any operation moved in time
		my ($ops) = @_;
		my $x = pick(grep { defined $_->{t0} } @$ops) or return;
		my $d = int(rand(4_000_000)) - 2_000_000;
		$x->{$_} += $d for grep { defined $x->{$_} } qw(t0 t1 tlo);
		$x->{tdone} += $d if rand() < 0.5;
		return 1;
	},
	'fate-flip' => sub {    # a transaction's fate told the other way
		my ($ops) = @_;
		my $x = pick(grep { defined $_->{fate} } @$ops) or return;
		$x->{fate} = $x->{fate} eq 'commit' ? 'rollback' : 'commit';
		return 1;
	},
	'xact-held' => sub {    # a transaction-scoped lock held longer
		my ($ops) = @_;
		my $x = pick(grep { $_->{k} =~ /xact_lock/ && ok_($_) && defined $_->{res} } @$ops) or return;
		$x->{tlo} += pick(100_000, 1_000_000, 10_000_000);
		delete $x->{undone};
		return 1;
	},
	'count-off' => sub {    # an unlock's count off by one
		my ($ops) = @_;
		my $x = pick(grep { $_->{k} eq 'unlock' && ok_($_) && defined $_->{res} } @$ops) or return;
		$x->{res} += pick(-1, 1);
		return 1;
	},
	'probe-null' => sub {    # the prober refused
		my ($ops) = @_;
		my $x = pick(grep { $_->{expect_free} && defined $_->{res} } @$ops) or return;
		$x->{res} = undef;
		return 1;
	},
	'bad-error' => sub {
		my ($ops) = @_;
		my $x = pick(@$ops) or return;
		$x->{err} = 'XX000';
		return 1;
	},
);
my @EDIT_NAMES = sort keys %EDITS;

# run_both: both checkers on copies of ops; returns (same?, citations
# masked, old violations, new violations); @TIMES: each one's seconds.
our @TIMES;
sub run_both
{
	my ($ops) = @_;
	my ($t0, $copy) = (time, [ map { {%$_} } @$ops ]);
	my ($vo, $so) = ModelCheckOld::check($copy);
	my ($t1, $copy2) = (time, [ map { {%$_} } @$ops ]);
	my ($t2) = time;
	my ($vn, $sn) = ModelCheck::check($copy2);
	@TIMES = ($t1 - $t0, time - $t2);
	my $mask = sub {
		my ($t) = @_;
		return $t =~ /after fence \d+ was acknowledged/
		  ? ($t =~ s/after fence \d+ was acknowledged\n    [^\n]*/after fence N was acknowledged\n    NEWER/r)
		  : $t;
	};
	my $same = join("\0", map { $mask->($_) } @$vo) eq join("\0", map { $mask->($_) } @$vn)
	  && join(',', map { "$_=$so->{$_}" } sort keys %$so) eq join(',', map { "$_=$sn->{$_}" } sort keys %$sn);
	my $masked = grep { $vo->[$_] ne ($vn->[$_] // '') } 0 .. $#$vo;
	return ($same, $same ? $masked : 0, $vo, $vn, $so, $sn);
}

my (%n, %kinds, @bad);
for my $dir (@ARGV)
{
	my @logs = sort glob("$dir/client*.log");
	die "no client*.log in $dir\n" unless @logs;
	my $ops = ModelCheck::load(@logs);
	my ($same, $masked, $vo, $vn) = run_both($ops);
	printf "%s: %d ops, %d violation(s), %s (checked in %.1f s by the old checker, %.1f s by the new)\n",
	  $dir, scalar @$ops, scalar @$vo, $same ? 'same' : 'DIFFERENT', @TIMES;
	$n{histories}++;
	$n{masked} += $masked;
	push @bad, [ $dir, $vo, $vn ] unless $same;
	for my $m (1 .. $o{mutants})
	{
		my $copy = [ map { {%$_} } @$ops ];
		my @done;
		for (1 .. 1 + int(rand($o{'max-edits'})))
		{
			my $e = pick(@EDIT_NAMES);
			push @done, $e if $EDITS{$e}->($copy);
		}
		next unless @done;
		($same, $masked, $vo, $vn) = run_both($copy);
		$n{mutants}++;
		$n{masked} += $masked;
		$n{'mutants with violations'}++ if @$vo;
		$kinds{$_}++ for map { /^VIOLATION \[([^\]]+)\]/ ? $1 : () } @$vo;
		push @bad, [ "$dir mutant $m (@done)", $vo, $vn ] unless $same;
	}
}
print "histories $n{histories}, mutants " . ($n{mutants} // 0) . ", mutants with violations "
  . ($n{'mutants with violations'} // 0) . ", differences " . scalar(@bad)
  . ", assert-fence citations masked " . ($n{masked} // 0) . "\n";
print "violations found by the old checker in the mutants, by kind: "
  . join(', ', map { "$_ $kinds{$_}" } sort keys %kinds) . "\n";
for my $b (@bad[ 0 .. ($#bad < 2 ? $#bad : 2) ])
{
	print "DIFFERENT: $b->[0]\n--- old:\n", @{ $b->[1] }, "--- new:\n", @{ $b->[2] };
}
exit(@bad ? 1 : 0);
