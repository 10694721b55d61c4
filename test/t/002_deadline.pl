# 002_deadline.pl: a TAP file that hangs fails alone, in bounded time.
#
# run-tests.sh loads test/perl/DlockTest/Deadline.pm into every perl
# (PERL5OPT).  In a test file it arms a deadline: past it, the file says
# where it was, runs its END blocks (the clusters' teardown), and exits 1,
# even from inside an eval.  In any other perl (prove itself, helpers) it
# does nothing.  Needs no server.
# Promises: none

use strict;
use warnings;

use File::Path qw(make_path);
use FindBin;
use IPC::Run qw(run);
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $lib = "$FindBin::RealBin/../perl";
my $dir = PostgreSQL::Test::Utils::tempdir();
make_path("$dir/test/t");
my $ended = "$dir/end-ran";
my $body = qq{
use Test::More;
END { open(my \$f, '>', '$ended'); print \$f "teardown ran\\n"; close \$f; }
ok(1, 'before the hang');
eval { sleep 600 };
ok(0, 'never reached');
done_testing();
};

# runs FILE: run perl FILE under the deadline DEADLINE; (exit code, output,
# seconds taken).
sub runs
{
	my ($file, $deadline) = @_;
	my $out;
	my $t0 = time;
	local $ENV{PERL5LIB} = $lib;
	local $ENV{PERL5OPT} = '-MDlockTest::Deadline';
	local $ENV{DLOCK_TEST_FILE_DEADLINE} = $deadline;
	run([ $^X, $file ], '<', \undef, '>&', \$out);
	return ($? >> 8, $out, time - $t0);
}

for my $name ('test/t/900_hang.pl', 'test/t/900_hang.t')
{
	open(my $f, '>', "$dir/$name") or die;
	print $f $body;
	close $f;
	unlink $ended;
	my ($code, $out, $secs) = runs("$dir/$name", 2);
	is($code, 1, "$name: exits 1 at its deadline");
	cmp_ok($secs, '<', 60, "$name: within a minute, not the 600 s it sleeps");
	like($out, qr/ran past its deadline of 2 s/,
		"$name: says it ran past its deadline");
	like($out, qr/\Q$name\E line 5/, "$name: and where it was (the sleep in the eval, line 5)");
	unlike($out, qr/never reached/, "$name: the eval did not swallow it");
	ok(-e $ended, "$name: its END blocks ran (teardown)");
}

# Not a test file (prove, helpers): no deadline.
open(my $f, '>', "$dir/helper.pl") or die;
print $f "sleep 3; print qq{helper done\\n};\n";
close $f;
my ($code, $out) = runs("$dir/helper.pl", 1);
is($code, 0, 'a perl that is not a test file has no deadline');
like($out, qr/helper done/, 'and runs to its end');

done_testing();
