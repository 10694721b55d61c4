#!/usr/bin/perl
# 010_contract.t: CONTRACT.md, the test files' "Promises:" header lines and
# the generated matrix docs/testing.md agree (test/contract/matrix.pl).
# Fails when an edition claims a promise (holds, holds with limits) that no
# test file of that edition names; when a header names an unknown ID, or a
# test file has none, two, or one below its opening comment; when a file the
# suite runs is read by no kind, or a file the matrix does not read has a
# header; and when the committed docs/testing.md is not what the script
# writes.  Scratch trees first show that each of these checks fires.
# No server needed.
# Promises: none
use strict;
use warnings;
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";
require "$root/test/contract/matrix.pl";

# Scratch trees: a contract of one promise, one good test file, and one
# way to fool the check each.  The good tree has no problem; each other
# tree has the problem named.
use File::Temp qw(tempdir);
use File::Path qw(make_path);
sub scratch
{
	my (%files) = @_;
	my $dir = tempdir(CLEANUP => 1);
	my %all = (
		'CONTRACT.md' => "| ID | promise | C | portable | MySQL |\n|---|---|---|---|---|\n"
		  . "| P1 | one | holds | not offered | not offered |\n",
		'test/t/010_ok.pl' => "#!/usr/bin/perl\n# 010_ok.pl: fine.\n# Promises: P1\nuse strict;\n",
		%files);
	for my $f (sort keys %all)
	{
		next unless defined $all{$f};
		(my $d = "$dir/$f") =~ s{/[^/]*$}{};
		make_path($d);
		open(my $fh, '>', "$dir/$f") or die "$dir/$f: $!";
		print $fh $all{$f};
		close $fh;
	}
	my $s = Matrix::load($dir);
	return join("\n", map { @{ $s->{problems}{$_} } } qw(contract headers unchecked));
}
is(scratch(), '', 'scratch: a good tree has no problem');
my $code = "use strict;\nmy \$x = 1;\n";
my %fool = (
	'a header inside the code' => [ { 'test/t/020_mid.pl' => "# 020_mid.pl\n$code# Promises: P1\n" },
		qr{020_mid\.pl: its Promises: line \(line 4\) is not in the comment that opens} ],
	'a second header far down' => [ { 'test/t/020_two.pl' => "# Promises: none\n$code" . ("\n" x 80) . "# Promises: P1\n" },
		qr{020_two\.pl: more than one Promises: line \(lines 1, 84\)} ],
	'a header below line 60 only' => [ { 'test/t/020_low.pl' => ("#\n" x 70) . "# Promises: P1\n" },
		qr{020_low\.pl: its Promises: line \(line 71\) is not in the comment} ],
	'a file the runner runs but no kind reads' => [ { 'test/mysql/t/020_x.pl' => "# Promises: P1\n" },
		qr{test/mysql/t/020_x\.pl: run by the suite but read by no kind} ],
	'a header in a directory nobody scans' => [ { 'test/extra/t/020_x.t' => "# Promises: P1\n" },
		qr{test/extra/t/020_x\.t: has a Promises: line \(line 1\) but is no test file} ],
	'a test of test/docs without a header' => [ { 'test/docs/020_x.t' => "# 020_x.t\n$code" },
		qr{test/docs/020_x\.t: no Promises: line} ],
	'a test of test/docs claiming a promise' => [ { 'test/docs/020_x.t' => "# Promises: P1\n" },
		qr{test/docs/020_x\.t: names promises, but its files count for no edition} ],
	'an expected output whose header differs from its test' => [
		{ 'test/sql/a.sql' => "-- Promises: P1\nSELECT 1;\n", 'test/expected/a.out' => "-- Promises: P1 P2\n" },
		qr{test/expected/a\.out: its Promises: line is not that of test/sql/a\.sql} ],
	'an edition claiming a promise no test names' => [ { 'test/t/010_ok.pl' => "# Promises: none\n" },
		qr{P1 \(one\): the C edition claims 'holds', but no test file} ],
);
for my $case (sort keys %fool)
{
	my ($files, $want) = @{ $fool{$case} };
	like(scratch(%$files), $want, "scratch: $case is found");
}

my $d = Matrix::load($root);
cmp_ok(scalar @{ $d->{promises} }, '>=', 6, 'CONTRACT.md lists the promises')
  or diag("no promise table in CONTRACT.md");
cmp_ok(scalar @{ $d->{tests} }, '>=', 100, 'test files found') or diag("found none");

my %p = %{ $d->{problems} };
is(scalar @{ $p{contract} }, 0, 'CONTRACT.md: every promise has a known status per edition')
  or diag(join("\n", @{ $p{contract} }));
is(scalar @{ $p{headers} }, 0, 'every test file has one Promises: line, of known IDs')
  or diag(join("\n", @{ $p{headers} }));
is(scalar @{ $p{unchecked} }, 0, 'every promise an edition claims is named by a test of that edition')
  or diag(join("\n", @{ $p{unchecked} }));

my $want = Matrix::render($d);
my $have = -f "$root/docs/testing.md" ? Matrix::slurp("$root/docs/testing.md") : '';
ok($have eq $want, 'docs/testing.md is what test/contract/matrix.pl writes')
  or diag('regenerate it: perl test/contract/matrix.pl --write');

done_testing();
