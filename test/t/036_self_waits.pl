# 036_self_waits.pl: two calls on one resource inside one transaction never
# wait for that transaction itself.
#
# Every ordered pair of try_lock, lock (with and without a wait limit),
# campaign, xact_lock, try_xact_lock and assert_fence on one resource, in
# one transaction, with the same holder as the first call and another one,
# fair and not, on a server with dlock preloaded (waiters sleep on their
# latch) and on one without (they poll).  Each statement runs under
# statement_timeout, so a wait that can never end shows as 57014 and fails.
# The rule (README, "Transactions"):
#
#  - the same holder re-enters (its fence), a candidate that leads gets its
#    term, a transaction-scoped lock re-entered keeps its fence, and
#    assert_fence of the current fence pins it;
#  - anything else is in the way of the second call, and only the end of
#    the transaction can move it (the transaction holds the resource's lock:
#    it took, changed or pinned the holding), so try_lock and try_xact_lock
#    return NULL at once, and lock, xact_lock and campaign, whatever their
#    wait limit, raise 40P01 at once, with a hint.
#
# A lock-delay the transaction's own release left is a wait that only time
# ends: lock() waits it out and takes the resource, as it would outside.
# Promises: P5 P12

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# What the first call leaves, by kind: a lease of h1 taken in the
# transaction, a transaction-scoped lock, or a pin of h1's lease taken
# before the transaction.
my @firsts = (
	[ 'try_lock(h1)',      "dlock.try_lock(:'r', 'h1', '1h')",                  'lease' ],
	[ 'try_lock(h1, fair)', "dlock.try_lock(:'r', 'h1', '1h', fair => true)",   'lease' ],
	[ 'lock(h1)',          "dlock.lock(:'r', 'h1', '1h')",                      'lease' ],
	[ 'lock(h1, fair)',    "dlock.lock(:'r', 'h1', '1h', fair => true)",        'lease' ],
	[ 'campaign(h1)',      "dlock.campaign(:'r', 'h1', lease => '1h')",         'lease' ],
	[ 'xact_lock',         "dlock.xact_lock(:'r')",                             'xact' ],
	[ 'try_xact_lock',     "dlock.try_xact_lock(:'r')",                         'xact' ],
	[ 'assert_fence',      "dlock.assert_fence(:'r', :f)",                      'pin' ]);

# The second calls: [name, expression, kind, holder].
my @seconds;
for my $h ('h1', 'h2')
{
	push @seconds,
	  [ "try_lock($h)",       "dlock.try_lock(:'r', '$h', '1h')",                    'try',  $h ],
	  [ "try_lock($h, fair)", "dlock.try_lock(:'r', '$h', '1h', fair => true)",      'try',  $h ],
	  [ "lock($h)",           "dlock.lock(:'r', '$h', '1h')",                        'wait', $h ],
	  [ "lock($h, fair)",     "dlock.lock(:'r', '$h', '1h', fair => true)",          'wait', $h ],
	  [ "lock($h, wait 1h)",  "dlock.lock(:'r', '$h', '1h', wait => '1h')",          'wait', $h ],
	  [ "campaign($h)",       "dlock.campaign(:'r', '$h', lease => '1h')",           'wait', $h ];
}
push @seconds,
  [ 'xact_lock',          "dlock.xact_lock(:'r')",                 'xact_wait' ],
  [ 'xact_lock(wait 1h)', "dlock.xact_lock(:'r', '1h')",           'xact_wait' ],
  [ 'try_xact_lock',      "dlock.try_xact_lock(:'r')",             'xact_try' ],
  [ 'assert_fence',       "'ok' || dlock.assert_fence(:'r', :f)",  'assert' ];

# expected: 'same' (the first call's fence), 'null', 'ok' or '40P01'.
sub expected
{
	my ($state, $kind, $holder) = @_;
	return 'ok' if $kind eq 'assert';
	if ($kind eq 'try' || $kind eq 'wait')
	{
		return 'same' if $state ne 'xact' && $holder eq 'h1';
		return $kind eq 'try' ? 'null' : '40P01';
	}
	return 'same' if $state eq 'xact';
	return $kind eq 'xact_try' ? 'null' : '40P01';
}

# walk: every pair on node, each on a resource of its own, rolled back.
sub walk
{
	my ($node, $label) = @_;
	my $script = "\\set VERBOSITY sqlstate\n";
	my %want;
	my $n = 0;
	for my $first (@firsts)
	{
		for my $second (@seconds)
		{
			$n++;
			my $pair = "$first->[0] then $second->[0]";
			$want{$n} = [ $pair, expected($first->[2], $second->[2], $second->[3] // '') ];
			$script .= "\\set r 'self/$label/$n'\n";
			# assert_fence pins a lease of h1 taken (and committed) before.
			$script .= $first->[2] eq 'pin'
			  ? "SELECT dlock.try_lock(:'r', 'h1', '1h') AS f \\gset\nBEGIN;\n"
			  . "SET LOCAL statement_timeout = '2s';\nSELECT $first->[1];\n"
			  : "BEGIN;\nSET LOCAL statement_timeout = '2s';\nSELECT $first->[1] AS f \\gset\n";
			$script .= "\\echo first $n :SQLSTATE\n\\set s none\n"
			  . "SELECT coalesce(($second->[1])::text, 'null') AS s \\gset\n"
			  . "\\echo pair $n :SQLSTATE :s :f\nROLLBACK;\n";
		}
	}
	my ($out, $err) = ('', '');
	$node->psql('postgres', $script, stdout => \$out, stderr => \$err,
		on_error_stop => 0, timeout => 1800);
	my %first = $out =~ /^first (\d+) (\S+)$/mg;
	my %got;
	while ($out =~ /^pair (\d+) (\S+) (\S+) (\S+)$/mg)
	{
		my ($i, $state, $s, $f) = ($1, $2, $3, $4);
		$got{$i} =
		    $state ne '00000' ? $state
		  : $s eq 'ok'        ? 'ok'
		  : $s eq 'null'      ? 'null'
		  : $s eq $f          ? 'same'
		  :                     "fence $s (the first call's: $f)";
	}
	for my $i (1 .. $n)
	{
		my ($pair, $want) = @{ $want{$i} };
		is($first{$i} // 'missing', '00000', "$label: $pair: the first call succeeds");
		is($got{$i} // 'missing', $want, "$label: $pair: $want");
	}
}

my $pre = PostgreSQL::Test::Cluster->new('self_pre');
$pre->init;
$pre->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '1h'
});
$pre->start;
$pre->safe_psql('postgres', 'CREATE EXTENSION dlock');
walk($pre, 'preloaded');

# The error says what is in the way and what to do.
my ($ret, $out, $err) = $pre->psql('postgres',
	"SET statement_timeout = '5s'; BEGIN; SELECT dlock.xact_lock('self/hint'); SELECT dlock.lock('self/hint', 'h');");
like($err, qr/ERROR:  deadlock detected/, 'the error is a deadlock');
like($err, qr/DETAIL:  .*transaction-scoped lock on resource "self\/hint"/,
	'its detail names the resource and what holds it');
like($err, qr/HINT:  /, 'with a hint');
($ret, $out, $err) = $pre->psql('postgres',
	"SET statement_timeout = '5s'; BEGIN; SELECT dlock.lock('self/hint2', 'a', '1h'); SELECT dlock.xact_lock('self/hint2');");
like($err, qr/DETAIL:  Resource "self\/hint2" has a holding/, 'a lease in the way: the detail names the resource');

# Lock-delay left by the transaction's own release ends with time alone:
# lock() waits it out (not 40P01) and takes the resource.
is( $pre->safe_psql(
		'postgres', q{
SELECT dlock.lock('self/delay', 'a', '1h', lock_delay => '300ms') IS NOT NULL;
BEGIN;
SET LOCAL statement_timeout = '20s';
SELECT dlock.unlock('self/delay', 'a');
SELECT dlock.lock('self/delay', 'b', '1h') IS NOT NULL;
COMMIT;
SELECT holder FROM dlock.locks WHERE resource = 'self/delay';
}), "t\n0\nt\nb", 'after its own release under lock-delay, lock() waits the delay out');

# Nothing is left behind by the pairs: no waiter, no lock, no queue.
is($pre->safe_psql('postgres', q{SELECT count(*) FROM dlock.waiters}), '0', 'no waiter left');
is( $pre->safe_psql(
		'postgres', q{SELECT count(*) FROM dlock.locks WHERE resource LIKE 'self/preloaded/%' AND holder <> 'h1'}),
	'0', 'no holding of the rolled-back transactions left');
$pre->stop;

my $plain = PostgreSQL::Test::Cluster->new('self_plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION dlock');
walk($plain, 'not preloaded');
$plain->stop;

done_testing();
