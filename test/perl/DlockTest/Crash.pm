# DlockTest::Crash: a crash that throws away the WAL buffers, for the TAP
# tests of durability (test/t/010_crash_restart.pl, 043_failover_sync.pl,
# 061_sessions_crash.pl).
#
#   my $ww = freeze_wal_writer($node);  # async commits now stay in memory
#   ... acknowledged work ...
#   crash_with($node, $ww);             # kill -9 the walwriter: down it goes
#   $node->start;                       # (or promote a standby instead)

package DlockTest::Crash;

use strict;
use warnings;

use Exporter 'import';
use Test::More;
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;

our @EXPORT = qw(freeze_wal_writer crash_with);

# stopped PID: has PID stopped (state T in /proc/PID/stat)?
sub stopped
{
	my ($pid) = @_;
	my $stat = eval { slurp_file("/proc/$pid/stat") } // return 0;
	return $stat =~ /^\d+ \(.*\) T /s;
}

# freeze_wal_writer NODE: SIGSTOP NODE's walwriter; returns its pid.  From
# then on an asynchronous commit stays in the WAL buffers: only what a
# backend flushes itself reaches the WAL files.  The walwriter is stopped
# only asleep in its main loop (wait event WalWriterMain), where it holds no
# lock.  Stopped in the middle of a write it would hold WALWriteLock, and
# every backend that flushes WAL would wait for it forever (seen in CI: a
# run that hung in 061_sessions_crash.pl; by hand, 1 stop in 150 under
# asynchronous-commit load caught it in WALInitWrite).  So: stop, look,
# and let it go on and try again if it was busy.
sub freeze_wal_writer
{
	my ($node) = @_;
	my $pid = $node->safe_psql('postgres',
		q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'});
	die "no walwriter" unless $pid =~ /^\d+$/;
	for (my $try = 0; $try < 500; $try++)
	{
		kill 'STOP', $pid or die "cannot stop walwriter $pid";
		usleep(1_000) until stopped($pid);
		my $event = $node->safe_psql('postgres',
			"SELECT wait_event FROM pg_stat_activity WHERE pid = $pid");
		return $pid if $event eq 'WalWriterMain';
		kill 'CONT', $pid;
		usleep(20_000);
	}
	die "walwriter $pid was never found asleep in 500 tries";
}

# crash_with NODE WALWRITER: kill -9 the frozen walwriter.  The postmaster
# treats that as a crash (shared memory, WAL buffers with it, is thrown
# away) and, restart_after_crash being off in these clusters, exits.  One
# test that it went down; the node is then stopped as far as
# PostgreSQL::Test::Cluster knows.
sub crash_with
{
	my ($node, $walwriter) = @_;
	my ($postmaster) = split /\n/, slurp_file($node->data_dir . '/postmaster.pid');
	kill 'KILL', $walwriter;
	for (my $i = 0; $i < 600 && kill(0, $postmaster); $i++)
	{
		usleep(50_000);
	}
	ok(!kill(0, $postmaster), $node->name . ': the server went down with its walwriter');
	$node->stop('immediate', fail_ok => 1);    # just forgets the old pid
	return;
}

1;
