# DlockTest::Proc: process helpers shared by the CLI TAP tests
# (test/t/050_cli.pl, test/t/051_cli_pgbouncer.pl).
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

our @EXPORT = qw(code_of spawn wait_exit slurp fence_lt);

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

1;
