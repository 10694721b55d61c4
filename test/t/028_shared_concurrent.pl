# 028_shared_concurrent.pl: shared holders (0.4) in concurrent
# transactions never wait for, nor are refused because of, each other.
#
#  - reader B's open transaction (its shared acquisition uncommitted) does
#    not make reader A's renew or unlock wait, nor refuse reader C's
#    try_lock; an exclusive try_lock is refused while a reader's
#    acquisition is uncommitted (and invisible), and gets the resource once
#    it rolls back;
#  - the same holder text on two connections: the second try_lock returns
#    NULL at once instead of waiting on the first's uncommitted row;
#  - two readers releasing at once, each in an open transaction, neither
#    seeing the other's release: the writer waiting in lock() (with a long
#    wait) still gets the resource once both commit;
#  - two readers that each upgrade inside the transaction that took their
#    shared holding: one gets 40P01 (the lock manager's deadlock
#    detection), the other the exclusive lock; never a hang;
#  - such an upgrade held off by another reader waits for its release and
#    then has it; held off by a shared holding of its own transaction's
#    (another holder text), 40P01 at once;
#  - a seeded random run of three readers (open transactions, try_lock,
#    renew, unlock, commit, rollback) and a writer (try_lock, unlock): never
#    a writer with a reader; a reader is never refused while only readers
#    hold; reader statements never wait (statement_timeout makes a wait an
#    error).
# No timing assertions: a wait shows as a statement_timeout error (57014).
# Promises: P2 P5 P9

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('shared_concurrent');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'dlock'\ndeadlock_timeout = '100ms'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', shift) }

# A session whose statements give up after 3 s: a wait becomes an error.
sub session
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_safe(q{SET statement_timeout = '3s'});
	return $s;
}

# st: run one statement; (output, error text).
sub st
{
	my ($s, $query) = @_;
	$s->{stderr} = '';
	my $out = $s->query($query);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

# 1. Reader B's open transaction.
my ($a, $b, $c) = (session(), session(), session());
is(sql(q{SELECT dlock.try_lock('c', 'A', '1h', shared => true) IS NOT NULL}), 't', 'A shares');
st($b, 'BEGIN');
is((st($b, q{SELECT dlock.try_lock('c', 'B', '1h', shared => true) IS NOT NULL}))[0], 't',
	'B shares in an open transaction');
my ($out, $err) = st($a, q{SELECT dlock.renew('c', 'A', '2h') > now() + '1h'});
is("$out$err", 't', "A's renew does not wait for B's transaction");
($out, $err) = st($c, q{SELECT dlock.try_lock('c', 'C', '1h', shared => true) IS NOT NULL});
is("$out$err", 't', "C's try_lock is not refused because of B's transaction");
($out, $err) = st($a, q{SELECT dlock.unlock('c', 'A')});
is("$out$err", '0', "A's unlock does not wait for B's transaction");
($out, $err) = st($c, q{SELECT dlock.unlock('c', 'C')});
is("$out$err", '0', "C's unlock does not wait for B's transaction");
st($b, 'COMMIT');
is(sql(q{SELECT string_agg(holder || ':' || mode, ',') FROM dlock.locks WHERE resource = 'c'}),
	'B:shared', 'only B shares after the commit');

# An exclusive try_lock is refused while a reader's acquisition is in flight.
st($b, 'BEGIN');
st($b, q{SELECT dlock.try_lock('x', 'B', '1h', shared => true)});
($out, $err) = st($a, q{SELECT dlock.try_lock('x', 'W', '1h')});
is("$out$err", '', 'an exclusive try_lock is refused while a reader acquires in an open transaction');
st($b, 'ROLLBACK');
is(sql(q{SELECT dlock.try_lock('x', 'W', '1h') IS NOT NULL}), 't',
	'and gets the resource once that rolls back');

# 2. The same holder on two connections at once.
st($b, 'BEGIN');
st($b, q{SELECT dlock.try_lock('d', 'S', '1h', shared => true)});
($out, $err) = st($a, q{SELECT dlock.try_lock('d', 'S', '1h', shared => true)});
is("$out$err", '', 'the same holder on another connection gets NULL at once');
st($b, 'COMMIT');
is(sql(q{SELECT dlock.try_lock('d', 'S', '1h', shared => true) IS NOT NULL}), 't',
	'and re-enters once the first committed');
is(sql(q{SELECT count FROM dlock.locks WHERE resource = 'd'}), '2', 'count 2');

# 3. Concurrent last-reader releases wake the waiting writer.
sql(q{SELECT dlock.try_lock('e', 'R1', '1h', shared => true), dlock.try_lock('e', 'R2', '1h', shared => true)});
my $w = $node->background_psql('postgres', on_error_stop => 0);
$w->query_until(qr/waiting/, "\\echo waiting\nSELECT dlock.lock('e', 'W', '1h', '1h') IS NOT NULL AS got;\n");
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'e'}),
	'the writer waits in lock()');
st($a, 'BEGIN');
st($b, 'BEGIN');
($out, $err) = st($a, q{SELECT dlock.unlock('e', 'R1')});
is("$out$err", '0', 'R1 releases in an open transaction');
($out, $err) = st($b, q{SELECT dlock.unlock('e', 'R2')});
is("$out$err", '0', 'R2 releases at the same time, without waiting for R1');
st($a, 'COMMIT');
st($b, 'COMMIT');
ok($node->poll_query_until('postgres',
		q{SELECT holder = 'W' AND mode = 'exclusive' FROM dlock.locks WHERE resource = 'e'}),
	'the writer has it once both releases committed');
$w->quit;

# 4. Crossing upgrades inside open transactions: 40P01 for one, never a hang.
st($a, 'BEGIN');
st($b, 'BEGIN');
st($a, q{SELECT dlock.try_lock('u', 'a', '1h', shared => true)});
($out, $err) = st($b, q{SELECT dlock.try_lock('u', 'b', '1h', shared => true) IS NOT NULL});
is("$out$err", 't', 'b shares beside a, both in open transactions');
st($a, q{SET statement_timeout = '60s'});
st($b, q{SET statement_timeout = '60s'});
$a->{stderr} = '';
$b->{stderr} = '';
$a->{stdin} .= "SELECT dlock.lock('u', 'a', '1h') IS NOT NULL AS a_up;\n\\echo a_done\n\\warn a_done\n";
$b->{stdin} .= "SELECT dlock.lock('u', 'b', '1h') IS NOT NULL AS b_up;\n\\echo b_done\n\\warn b_done\n";
$a->{run}->pump_nb();
$b->{run}->pump_nb();
$a->{run}->pump until $a->{stderr} =~ /a_done/ || $a->{timeout}->is_expired;
$b->{run}->pump until $b->{stderr} =~ /b_done/ || $b->{timeout}->is_expired;
my @errs = grep { /deadlock detected/ } ($a->{stderr}, $b->{stderr});
my @ups = grep { /^t$/m } ($a->{stdout}, $b->{stdout});
is(scalar(@errs), 1, 'one of the crossing upgrades gets 40P01');
is(scalar(@ups), 1, 'the other upgrades');
$a->{stdout} = $b->{stdout} = $a->{stderr} = $b->{stderr} = '';
st($a, 'COMMIT');
st($b, 'COMMIT');
st($a, q{SET statement_timeout = '3s'});
st($b, q{SET statement_timeout = '3s'});
is(sql(q{SELECT string_agg(mode, ',' ORDER BY mode) FROM dlock.locks WHERE resource = 'u'}),
	'exclusive,shared', 'the winner holds it exclusive (and its share), alone');
sql(q{SELECT dlock.unlock_all('a'), dlock.unlock_all('b')});

# 4b. An upgrade inside the transaction that took the shared holding waits
# for another reader's release (it can come), and gets it; but an
# exclusive request held off by a shared holding its own transaction took
# is 40P01 at once (only the end of the transaction can free that).
sql(q{SELECT dlock.try_lock('v', 'C', '1h', shared => true)});
st($a, 'BEGIN');
st($a, q{SELECT dlock.try_lock('v', 'A', '1h', shared => true)});
st($a, q{SET statement_timeout = '60s'});
$a->{stdin} .= "SELECT dlock.lock('v', 'A', '1h', '60s') IS NOT NULL AS a_up;\n\\echo a_done\n\\warn a_done\n";
$a->{run}->pump_nb();
ok($node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.waiters WHERE resource = 'v'}),
	'the upgrade waits for the other reader');
is(sql(q{SELECT dlock.unlock('v', 'C')}), '0', 'the other reader releases');
$a->{run}->pump until $a->{stderr} =~ /a_done/ || $a->{timeout}->is_expired;
like($a->{stdout}, qr/^t$/m, 'the upgrade inside the open transaction gets the exclusive lock');
is($a->{stderr} =~ s/a_done\n//r, '', 'without an error');
$a->{stdout} = $a->{stderr} = '';
st($a, 'COMMIT');
st($a, q{SET statement_timeout = '3s'});
sql(q{SELECT dlock.unlock_all('A')});
st($b, 'BEGIN');
st($b, q{SELECT dlock.try_lock('v2', 'A', '1h', shared => true)});
($out, $err) = st($b, q{SELECT dlock.lock('v2', 'B', '1h')});
like($err, qr/deadlock detected/, "held off by its own transaction's shared holding: 40P01 at once");
st($b, 'ROLLBACK');

# 5. Seeded random run: three readers and a writer on one resource.
srand(37);
my @r = ($a, $b, $c);
my @held = (0, 0, 0);       # committed shared count
my @intx = (0, 0, 0);       # open transaction
my @txcount = (0, 0, 0);    # count as the open transaction sees it
my @touched = (0, 0, 0);    # the open transaction changed its holding
my $writer = 0;             # the writer holds it (autocommit)
my $bad = 0;
for my $step (1 .. 80)
{
	my $i = int(rand(4));
	if ($i == 3)
	{
		# The writer: release if it holds, else try.
		if ($writer)
		{
			$writer = 0 if sql(q{SELECT dlock.unlock('rnd', 'W')}) eq '0';
			next;
		}
		my $got = sql(q{SELECT dlock.try_lock('rnd', 'W', '1h') IS NOT NULL});
		my $readers = grep { $_ } map { $held[$_] || ($intx[$_] && $touched[$_]) } 0 .. 2;
		if ($got eq 't')
		{
			$writer = 1;
			if ($readers) { $bad++; diag("step $step: the writer got it beside readers"); }
		}
		next;
	}
	my $s = $r[$i];
	my $act = int(rand(5));
	if (!$intx[$i] && $act == 0)
	{
		st($s, 'BEGIN');
		$intx[$i] = 1;
		$touched[$i] = 0;
		$txcount[$i] = $held[$i];
	}
	elsif ($act <= 1)
	{
		($out, $err) = st($s, qq{SELECT dlock.try_lock('rnd', 'R$i', '1h', shared => true) IS NOT NULL});
		my $cnt = $intx[$i] ? \$txcount[$i] : \$held[$i];
		if ($err ne '') { $bad++; diag("step $step: R$i try_lock: $err"); }
		elsif ($out eq 't') { $$cnt++; $touched[$i] = 1; }
		elsif (!$writer) { $bad++; diag("step $step: R$i refused while only readers hold"); }
	}
	elsif ($act == 2)
	{
		($out, $err) = st($s, qq{SELECT dlock.renew('rnd', 'R$i')});
		my $cnt = $intx[$i] ? $txcount[$i] : $held[$i];
		if ($err ne '') { $bad++; diag("step $step: R$i renew: $err"); }
		elsif (($out ne '') != ($cnt > 0)) { $bad++; diag("step $step: R$i renew gave '$out' with count $cnt"); }
		elsif ($out ne '') { $touched[$i] = 1; }
	}
	elsif ($act == 3)
	{
		($out, $err) = st($s, qq{SELECT dlock.unlock('rnd', 'R$i')});
		my $cnt = $intx[$i] ? \$txcount[$i] : \$held[$i];
		if ($err ne '') { $bad++; diag("step $step: R$i unlock: $err"); }
		elsif ($$cnt > 0)
		{
			if ($out ne $$cnt - 1) { $bad++; diag("step $step: R$i unlock gave '$out' with count $$cnt"); }
			$$cnt--;
			$touched[$i] = 1;
		}
	}
	elsif ($intx[$i])
	{
		my $end = rand() < 0.7 ? 'COMMIT' : 'ROLLBACK';
		st($s, $end);
		$held[$i] = $txcount[$i] if $end eq 'COMMIT';
		$intx[$i] = 0;
	}
	# Never a writer beside a reader, as the database sees it.
	my $mix = sql(q{SELECT count(*) FILTER (WHERE mode = 'exclusive') > 0
	                   AND count(*) FILTER (WHERE mode = 'shared') > 0
	              FROM dlock.locks WHERE resource = 'rnd'});
	if ($mix eq 't') { $bad++; diag("step $step: a writer beside a reader"); }
}
is($bad, 0, 'random run: no writer beside a reader, no reader refused or kept waiting by readers');
for my $i (0 .. 2) { st($r[$i], 'COMMIT') if $intx[$i]; }

$_->quit for @r;
$node->stop;
done_testing();
