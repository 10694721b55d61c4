# DlockTest::Counter: fenced-counter clients that live through failovers,
# for test/t/047_patroni.pl (the failover-tolerant cousin of
# test/stress/dlock_stress, which stops at the first lost connection).
#
# Each client is a forked process with its own DBI (DBD::Pg) connection over
# a libpq multi-host connection string.  It loops: dlock.lock('counter') ->
# fence; read the counter; then, in one transaction, assert_fence, write
# value + 1 and log (value, fence, holder); COMMIT; unlock.  On a lost
# connection it reconnects (the connection string finds the new primary) and
# releases whatever it may still hold (unlock_all of its holder).  Each
# client appends what it saw to DIR/counter-N.log, one line per event:
#   ack VALUE FENCE TIME       COMMIT returned: this increment must survive
#   unknown VALUE FENCE TIME   the connection broke during COMMIT
#   fenced FENCE TIME          assert_fence refused (the lease was gone)
#   reconnect TIME             a new connection after a lost one
#   error TEXT                 anything unexpected (a test failure)
# Clients share nothing but the database and their own files; they stop
# when DIR/stop exists.

package DlockTest::Counter;

use strict;
use warnings;

use DBI;
use IO::Handle;
use POSIX ();
use Time::HiRes qw(time usleep);

# setup: create the counter table (one row at 0) and its log, via dbh.
sub setup
{
	my ($dbh) = @_;
	for my $sql (
		'CREATE TABLE fenced_counter (id int PRIMARY KEY, value bigint NOT NULL)',
		'INSERT INTO fenced_counter VALUES (1, 0)',
		'CREATE TABLE counter_log (seq bigserial PRIMARY KEY, value bigint NOT NULL,'
		. ' fence bigint NOT NULL, holder text NOT NULL)')
	{
		$dbh->do($sql) or die "$sql: " . $dbh->errstr;
	}
	return;
}

# start: fork n clients on conninfo, logging into dir; their pids.
sub start
{
	my (%o) = @_;
	my @pids;
	for my $i (1 .. $o{clients})
	{
		my $pid = fork() // die "fork: $!";
		if ($pid == 0)
		{
			my $ok = eval { _client($o{conninfo}, $o{dir}, $i, $o{lease}); 1 };
			POSIX::_exit($ok ? 0 : 1);
		}
		push @pids, $pid;
	}
	return @pids;
}

# stop: ask the clients to stop and wait (bounded) for them.
sub stop
{
	my ($dir, @pids) = @_;
	open(my $fh, '>', "$dir/stop") or die "$dir/stop: $!";
	close($fh);
	my $deadline = time + 60;
	for my $pid (@pids)
	{
		while (time < $deadline && waitpid($pid, POSIX::WNOHANG()) == 0) { usleep(50_000) }
	}
	kill('KILL', grep { waitpid($_, POSIX::WNOHANG()) == 0 } @pids);
	return;
}

# _connect: a connection, retried every 100 ms until it works or we stop.
sub _connect
{
	my ($conninfo, $dir) = @_;
	until (-e "$dir/stop")
	{
		my $dbh = DBI->connect("dbi:Pg:$conninfo", '', '',
			{ AutoCommit => 1, RaiseError => 0, PrintError => 0 });
		return $dbh if $dbh;
		usleep(100_000);
	}
	return undef;
}

# _lost: after a failed call, whether the connection is gone (reconnect)
# rather than the statement refused (a real error).  Read-only (25006)
# and shutdown (57P0x) count as gone: a node on its way down or demoted.
sub _lost
{
	my ($dbh) = @_;
	my $state = $dbh->state // '';
	return 1 if $state =~ /^(08|57P0|25006)/;
	return !$dbh->ping;
}

# _client: one client's loop (see the banner).
sub _client
{
	my ($conninfo, $dir, $i, $lease) = @_;
	my $holder = "counter-$i";
	open(my $log, '>>', "$dir/counter-$i.log") or die "$dir/counter-$i.log: $!";
	$log->autoflush(1);
	my $say = sub { print $log join(' ', @_, sprintf('%.3f', time)), "\n" };
	my $dbh;
	my $fresh = 0;

	until (-e "$dir/stop")
	{
		unless ($dbh)
		{
			$dbh = _connect($conninfo, $dir) or last;
			if ($fresh)
			{
				$say->('reconnect');
				# An acquisition whose answer was lost may be held: let it go.
				$dbh->do('SELECT dlock.unlock_all(?)', undef, $holder);
			}
			$fresh = 1;
		}
		my $row = $dbh->selectrow_arrayref(
			q{SELECT dlock.lock('counter', ?, ?::interval, '2s')}, undef, $holder, $lease);
		if (!$row)
		{
			if (_lost($dbh)) { $dbh = undef; next; }
			$say->('error', 'lock:', $dbh->errstr =~ s/\s+/ /gr);
			last;
		}
		my $fence = $row->[0];
		next unless defined $fence;
		$row = $dbh->selectrow_arrayref('SELECT value FROM fenced_counter WHERE id = 1');
		if (!$row) { $dbh = undef; next; }
		my $value = $row->[0] + 1;
		usleep(2_000);

		# The fenced write, in one transaction.  BEGIN and COMMIT are sent
		# as statements: DBD::Pg's commit() returns true when the server
		# had already closed the connection (FATAL after postmaster death),
		# which would count an increment that never committed.
		if (!$dbh->do('BEGIN')) { $dbh = undef; next; }
		if (!$dbh->do('SELECT dlock.assert_fence(?, ?::bigint)', undef, 'counter', $fence))
		{
			my $state = $dbh->state // '';
			$dbh->do('ROLLBACK');
			if ($state eq '55P03') { $say->('fenced', $fence); next; }
			$dbh = undef;
			next;
		}
		if (!$dbh->do('UPDATE fenced_counter SET value = ? WHERE id = 1', undef, $value)
			|| !$dbh->do('INSERT INTO counter_log (value, fence, holder) VALUES (?, ?, ?)',
				undef, $value, $fence, $holder))
		{
			$dbh->do('ROLLBACK') if !_lost($dbh);
			$dbh = undef;
			next;
		}
		if (!$dbh->do('COMMIT'))
		{
			$say->('unknown', $value, $fence);
			$dbh = undef;
			next;
		}
		$say->('ack', $value, $fence);
		$dbh->do(q{SELECT dlock.unlock('counter', ?, ?::bigint)}, undef, $holder, $fence)
		  or $dbh = undef;
	}
	return;
}

# read_logs: every client's log lines, parsed: a list of hashes
# {client, what, value, fence, time, text}.
sub read_logs
{
	my ($dir) = @_;
	my @ev;
	for my $f (sort glob("$dir/counter-*.log"))
	{
		my ($c) = $f =~ /counter-(\d+)\.log$/;
		open(my $fh, '<', $f) or next;
		while (my $l = <$fh>)
		{
			chomp $l;
			my @w = split / /, $l;
			my %e = (client => $c, what => $w[0], time => $w[-1], text => $l);
			@e{qw(value fence)} = @w[1, 2] if $w[0] =~ /^(ack|unknown)$/;
			$e{fence} = $w[1] if $w[0] eq 'fenced';
			push @ev, \%e;
		}
	}
	return @ev;
}

1;
