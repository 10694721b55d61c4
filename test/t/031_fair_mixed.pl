# 031_fair_mixed.pl - a holder that queued client-side (try_lock(...,
# fair => true), campaign(..., wait => '0')) and then waits in the server
# (lock(), campaign with a wait) keeps its place in the queue: it is served
# before the in-server fair waiters that queued after it, at once when the
# resource is released, not after its client ticket lapses (the in-server
# waiters took it for someone else's turn and slept until then).
#
# Such a lock() that times out leaves the queue.
#
# Latch waits are invisible to isolationtester: the waits here run
# asynchronously through DBD::Pg, and the order in which they return is
# what is checked (the first to return holds a long lease, so the other
# cannot return before it is released).
# Promises: P7
use strict;
use warnings;

use DBI;
use DBD::Pg qw(:async);
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('fairmixed');
$node->init;
$node->append_conf(
	'postgresql.conf', qq{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.queue_ttl = '3s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $dsn = 'dbi:Pg:host=' . $node->host . ';port=' . $node->port . ';dbname=postgres';

sub conn
{
	return DBI->connect($dsn, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
}
sub sql { return $node->safe_psql('postgres', $_[0]) }

# wait_first: which of the async handles returns first (name => dbh)
sub wait_first
{
	my (%h) = @_;
	my $deadline = time + 120;
	while (time < $deadline)
	{
		for my $name (sort keys %h)
		{
			return $name if $h{$name}->pg_ready;
		}
		usleep(5_000);
	}
	return 'none';
}

sub waiting
{
	my ($resource, $n) = @_;
	for (1 .. 1200)
	{
		return 1 if sql("SELECT count(*) FROM dlock.waiters WHERE resource = '$resource'") >= $n;
		usleep(50_000);
	}
	return 0;
}

for my $how ('lock', 'campaign')
{
	my $r = "mixed-$how";
	sql("SELECT dlock.try_lock('$r', 'A', '60s')");
	my $queued = $how eq 'lock'
	  ? sql("SELECT dlock.try_lock('$r', 'B', fair => true) IS NULL")
	  : sql("SELECT dlock.campaign('$r', 'B', wait => '0') IS NULL");
	is($queued, 't', "$how: B queued client-side");

	# W waits fairly in the server, behind B's client ticket
	my $w = conn();
	my $ws = $w->prepare("SELECT dlock.lock('$r', 'W', '60s', wait => '60s', fair => true)",
		{ pg_async => PG_ASYNC });
	$ws->execute;
	ok(waiting($r, 1), "$how: W waits in the server");
	# B now waits in the server too
	my $b = conn();
	my $bs = $b->prepare($how eq 'lock'
		? "SELECT dlock.lock('$r', 'B', '60s', wait => '60s')"
		: "SELECT dlock.campaign('$r', 'B', lease => '60s', wait => '60s')",
		{ pg_async => PG_ASYNC });
	$bs->execute;
	ok(waiting($r, 2), "$how: B waits in the server");

	my $t0 = time;
	sql("SELECT dlock.unlock('$r', 'A')");
	my $first = wait_first(B => $b, W => $w);
	my $took = time - $t0;
	is($first, 'B', "$how: B, first in the queue, is served first");
	diag(sprintf('%s: %s served %.0f ms after the release', $how, $first, 1000 * $took));
	if ($first eq 'B')
	{
		$bs->pg_result;
		my ($fence) = $bs->fetchrow_array;
		ok(defined $fence, "$how: B acquired");
	}
	# let the other one through
	if ($first eq 'B')
	{
		sql("SELECT dlock.unlock_all('B')");
		is(wait_first(W => $w), 'W', "$how: then W");
		$ws->pg_result;
		my ($wf) = $ws->fetchrow_array;
		ok(defined $wf, "$how: W acquired");
		sql("SELECT dlock.unlock_all('W')");
	}
	else
	{
		$ws->pg_result if $first eq 'W';
		sql("SELECT dlock.unlock_all('W')");
		wait_first(B => $b);
		$bs->pg_result;
		sql("SELECT dlock.unlock_all('B')");
	}
	is(sql("SELECT count(*) FROM dlock.queue WHERE resource = '$r'"), '0',
		"$how: the queue is empty");
	undef $bs;
	undef $ws;
	$b->disconnect;
	$w->disconnect;
}

# A holder whose lock() (adopting its client ticket) times out leaves the
# queue: the ticket does not stay at the head until it lapses.
sql("SELECT dlock.try_lock('mixed-timeout', 'A', '60s')");
is(sql("SELECT dlock.try_lock('mixed-timeout', 'B', fair => true) IS NULL"), 't',
	'timeout: B queued client-side');
is(sql("SELECT dlock.lock('mixed-timeout', 'B', wait => '300ms') IS NULL"), 't',
	'timeout: B\'s lock() times out');
is(sql("SELECT count(*) FROM dlock.queue WHERE resource = 'mixed-timeout'"), '0',
	'timeout: B left the queue');
sql("SELECT dlock.unlock('mixed-timeout', 'A')");
is(sql("SELECT dlock.try_lock('mixed-timeout', 'C') IS NOT NULL"), 't',
	'timeout: a newcomer is served at once');

$node->stop;
done_testing();
