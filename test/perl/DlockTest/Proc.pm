# DlockTest::Proc: process helpers shared by the CLI TAP tests
# (test/t/050_cli.pl, test/t/051_cli_pgbouncer.pl, test/t/052_run_faults.pl).
#
#   use FindBin; use lib "$FindBin::RealBin/../perl";
#   use DlockTest::Proc;
#   DlockTest::Proc::set_dir($tmp);     # where spawn() writes NAME.out/.err

package DlockTest::Proc;

use strict;
use warnings;

use Exporter 'import';
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Utils;

our @EXPORT = qw(code_of spawn wait_exit slurp fence_lt proc_alive proc_tree wait_gone);

my $dir;

# set_dir: the directory spawn() writes its output files to.
sub set_dir { $dir = shift; return; }

# code_of: the shell's view of a wait status: exit code, or 128 + signal.
sub code_of
{
	my ($st) = @_;
	return WIFSIGNALED($st) ? 128 + WTERMSIG($st) : WEXITSTATUS($st);
}

# spawn: start a command in the background, stdout/stderr to
# DIR/NAME.{out,err}, with extra environment; returns its pid.
sub spawn
{
	my ($name, %env) = @_;
	my @cmd = @{ $env{cmd} };
	delete $env{cmd};
	die "DlockTest::Proc::set_dir was not called" unless defined $dir;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		$ENV{$_} = $env{$_} for keys %env;
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>', "$dir/$name.out");
		open(STDERR, '>', "$dir/$name.err");
		exec(@cmd) or POSIX::_exit(127);
	}
	return $pid;
}

# wait_exit: wait (bounded) for a background process: its exit code, or undef.
sub wait_exit
{
	my ($pid, $secs) = @_;
	my $deadline = time + $secs;
	while (time < $deadline)
	{
		my $r = waitpid($pid, WNOHANG);
		return code_of($?) if $r == $pid;
		usleep(20_000);
	}
	return undef;
}

# slurp: a file's contents, or '' if it does not exist.
sub slurp { my ($f) = @_; return -e $f ? PostgreSQL::Test::Utils::slurp_file($f) : '' }

# fence_lt: numeric < for fences given as decimal strings.
sub fence_lt
{
	my ($a, $b) = @_;
	return length($a) < length($b) || (length($a) == length($b) && $a lt $b);
}

# proc_alive: true if the process exists and is not a zombie (an exited
# process whose parent, maybe init, has not reaped it yet).
sub proc_alive
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $stat = <$fh> // '';
	close($fh);
	my ($state) = $stat =~ /\)\s+(\S)/;
	return defined($state) && $state ne 'Z' && $state ne 'X';
}

# proc_tree: the pids of every live descendant of pid (read from /proc).
sub proc_tree
{
	my ($root) = @_;
	my %kids;
	opendir(my $d, '/proc') or return ();
	for my $p (grep { /^\d+$/ } readdir($d))
	{
		open(my $fh, '<', "/proc/$p/stat") or next;
		my $stat = <$fh> // '';
		close($fh);
		my ($state, $ppid) = $stat =~ /\)\s+(\S)\s+(\d+)/ or next;
		push @{ $kids{$ppid} }, $p unless $state eq 'Z' || $state eq 'X';
	}
	closedir($d);
	my @out;
	my @queue = ($root);
	while (defined(my $p = shift @queue))
	{
		for my $k (@{ $kids{$p} // [] }) { push @out, $k; push @queue, $k }
	}
	return @out;
}

# wait_gone: wait (bounded) until none of the pids is alive; returns the
# ones still alive.
sub wait_gone
{
	my ($secs, @pids) = @_;
	my $deadline = time + $secs;
	my @left = grep { proc_alive($_) } @pids;
	while (@left && time < $deadline)
	{
		usleep(20_000);
		@left = grep { proc_alive($_) } @left;
	}
	return @left;
}

1;
