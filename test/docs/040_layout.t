# 040_layout.t: the C code's shape (issue 34).  Every C file of the
# extension and the CLI (src/, cli/) has at most 800 lines, and its header
# comment (the first comment, from the first line) under 40: what the file
# is for in a few lines; design essays go to docs/how-it-works.md.
# No server needed:  prove test/docs/040_layout.t
# Promises: none
use strict;
use warnings;
use Cwd qw(abs_path);
use File::Basename qw(dirname);
use Test::More;

my $top = abs_path(dirname(__FILE__) . '/../..');
my @files = sort(glob("$top/src/*.[ch]"), glob("$top/cli/*.[ch]"));
cmp_ok(scalar(@files), '>', 20, 'the C files of src/ and cli/ are found');

for my $path (@files)
{
	(my $name = $path) =~ s{^\Q$top\E/}{};
	open(my $fh, '<', $path) or die "$path: $!\n";
	my @lines = <$fh>;
	close($fh);
	cmp_ok(scalar(@lines), '<=', 800, "$name: at most 800 lines");
	my $header = 0;
	if (@lines && $lines[0] =~ m{^/\*})
	{
		$header++ until $header > $#lines || $lines[$header] =~ m{\*/};
		$header++;
	}
	ok($header > 0, "$name: starts with a header comment");
	cmp_ok($header, '<', 40, "$name: a header under 40 lines");
}

done_testing();
