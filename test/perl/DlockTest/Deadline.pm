# DlockTest::Deadline: a deadline for each TAP file, so that a test that
# hangs fails alone, with where it hung, instead of holding up the whole
# run until CI gives up.  run-tests.sh loads it into every perl it starts
# (PERL5OPT); it arms only in a test file (test/.../t/*.pl|*.t, test/docs/).
# DLOCK_TEST_FILE_DEADLINE: the seconds allowed (default 1800; the slowest
# file has taken 855 s, in a root).

package DlockTest::Deadline;

use strict;
use warnings;

use Carp ();
use POSIX ();

my $limit = $ENV{DLOCK_TEST_FILE_DEADLINE} // 1800;

if ($limit =~ /^[1-9]\d*$/ && $0 =~ m{(?:^|/)test/(?:(?:mysql/|portable/|clients/)?t|docs)/[^/]+\.(?:pl|t)\z})
{
	$SIG{ALRM} = sub {
		# exit, not die: an eval cannot catch it, and END blocks (the
		# clusters' teardown) still run.
		my $msg = "dlock: $0 ran past its deadline of $limit s"
		  . " (DLOCK_TEST_FILE_DEADLINE); it was here:\n"
		  . join('', map { "  $_\n" } split /\n/, Carp::longmess('at the deadline'));
		# diag reaches prove's output (PostgreSQL::Test::Utils sends
		# STDERR to the file's log only).
		if (Test::Builder->can('new')) { Test::Builder->new->diag($msg) }
		else                           { print STDERR $msg }
		$SIG{ALRM} = sub { POSIX::_exit(1) };
		alarm 120;    # the teardown itself gets two minutes
		exit 1;
	};
	alarm $limit;
}

1;
