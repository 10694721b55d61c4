#!/usr/bin/perl
# matrix.pl: the promise matrix, docs/testing.md, from CONTRACT.md's
# table (each promise's status per edition) and the test files' header
# lines ("# Promises: P1 P2", "-- Promises: ..." in SQL, "// ..." in JS and Java).
#
#   perl test/contract/matrix.pl           print docs/testing.md as it should be
#   perl test/contract/matrix.pl --write   write it
#   perl test/contract/matrix.pl --check   exit 1 and say why when the
#                                          contract, the headers or the file disagree
#
# A test file's editions follow from its path (@KINDS below).
# test/docs/010_contract.t runs the same checks.  Only Perl's core modules.
package Matrix;

use strict;
use warnings;
use File::Basename qw(dirname);
use File::Spec;

our @EDITIONS = ('C', 'portable', 'MySQL');
our %STATUS = map { $_ => 1 } ('holds', 'holds with limits', 'not offered');

# [glob, editions, what runs it]; the first matching glob decides.
our @KINDS = (
	[ 'test/t/*.pl', ['C'], 'TAP, `bash test/run-tests.sh tap`' ],
	[ 'test/sql/*.sql', ['C'], 'pg_regress, part `regress` (and `test/portable/t/050_regress.t`)' ],
	[ 'test/isolation/specs/*.spec', ['C'], 'isolationtester, part `isolation`' ],
	[ 'test/portable/t/*.t', ['portable'], 'TAP, part `portable`' ],
	[ 'test/mysql/t/*.t', ['MySQL'], 'TAP, part `mysql`' ],
	[ 'test/clients/t/020_tooz.t', ['C'], 'TAP, part `clients` (the C extension only)' ],
	[ 'test/clients/t/*.t', ['C', 'portable'], 'TAP, part `clients`' ],
	[ 'clients/python/tests/test_*.py', ['C', 'portable'], 'pytest, run by `test/clients/t/010_python.t`' ],
	[ 'clients/node/test/*.test.js', ['C', 'portable'], 'node:test, run by `test/clients/t/030_node.t`' ],
	[ 'clients/go/*_test.go', ['C', 'portable'], 'go test, run by `test/clients/t/040_go.t`' ],
	[ 'clients/java/src/test/java/io/github/dlockpg/dlock/*Test.java', ['C', 'portable'],
	  'JUnit 5, run by `test/clients/t/050_java.t`' ],
	[ 'test/docs/*.t', [], 'TAP, part `docs` (no edition: links, versions, this matrix)' ],
);
# The directories the runners run every file of (prove DIR/*, pg_regress's
# and isolationtester's globs): each file there is read by a kind above.
# Modules (*.pm) beside the tests are not run.
our @RUN_DIRS = qw(test/t test/sql test/isolation/specs test/portable/t test/mysql/t
  test/clients/t test/docs);
our $HEADER = qr{^\s*(?:#|--|//)\s*Promises:(.*)$};
our $LINES = 60;    # the header line must be among a file's first lines
# What may come before the header: blank lines, a #! line, comment lines,
# JavaScript's 'use strict'.  So the header is in the file's opening comment.
our $BEFORE = qr{^\s*$|^#!|^\s*(?:#|--|//)|^\s*['"]use strict['"];\s*$};
# Files that may show a header line without being a test: pg_regress's
# expected output echoes the test's comments (checked against the test).
our $ECHOES = qr{^test/expected/([^/]+)\.out$};
# The files searched for stray Promises: lines (sources, not logs or output).
our $SOURCE = qr{\.(?:pl|t|pm|sql|spec|py|js|mjs|cjs|ts|sh|java|go)$};

sub slurp
{
	my ($path) = @_;
	open(my $fh, '<', $path) or die "$path: $!\n";
	local $/;
	my $t = <$fh>;
	close $fh;
	return $t;
}

# contract(root): the promises of CONTRACT.md, in order:
# [{id, title, status => {edition => status}}], and problems found.
sub contract
{
	my ($root) = @_;
	my (@promises, @problems, %seen);
	for my $line (split /\n/, slurp("$root/CONTRACT.md"))
	{
		next unless $line =~ /^\|\s*(P\d+)\s*\|/;
		my @cell = map { s/^\s+|\s+$//gr } split /\|/, $line;
		shift @cell;
		my ($id, $title, @status) = @cell;
		push @problems, "CONTRACT.md: $id listed twice" if $seen{$id}++;
		push @problems, "CONTRACT.md: $id needs a status for each of @EDITIONS"
		  unless @status == @EDITIONS;
		my %st;
		for my $i (0 .. $#EDITIONS)
		{
			my $s = $status[$i] // '';
			push @problems, "CONTRACT.md: $id, $EDITIONS[$i]: unknown status '$s'"
			  unless $STATUS{$s};
			$st{ $EDITIONS[$i] } = $s;
		}
		push @promises, { id => $id, title => $title, status => \%st };
	}
	push @problems, "CONTRACT.md: no promise table" unless @promises;
	return (\@promises, \@problems);
}

# tests(root, known ids): [{path, editions, runner, ids}] and problems:
# a file with no header line, with two, or naming an unknown ID.
sub tests
{
	my ($root, $known) = @_;
	my (@tests, @problems, %taken);
	for my $kind (@KINDS)
	{
		my ($pattern, $editions, $runner) = @$kind;
		for my $full (sort glob("$root/$pattern"))
		{
			my $path = File::Spec->abs2rel($full, $root);
			next if $taken{$path}++ || !-f $full;    # glob gives back a plain name
			my @all = split /\n/, slurp($full);
			my @at = grep { $all[$_] =~ $HEADER } 0 .. $#all;
			if (@at != 1)
			{
				push @problems,
				  @at
				  ? "$path: more than one Promises: line (lines " . join(', ', map { $_ + 1 } @at) . ')'
				  : "$path: no Promises: line (add one at its top, e.g. '# Promises: P1 P2', or 'none')";
				next;
			}
			if ($at[0] >= $LINES || grep { $all[$_] !~ $BEFORE } 0 .. $at[0] - 1)
			{
				push @problems, "$path: its Promises: line (line " . ($at[0] + 1)
				  . ") is not in the comment that opens the file";
				next;
			}
			my @headers = ($all[ $at[0] ]);
			my ($list) = $headers[0] =~ $HEADER;
			my @ids = split ' ', $list;
			if (@ids == 1 && $ids[0] eq 'none')
			{
				@ids = ();
			}
			else
			{
				for my $id (@ids)
				{
					push @problems, "$path: unknown promise ID '$id' (CONTRACT.md has none such)"
					  unless $known->{$id};
				}
				push @problems, "$path: empty Promises: line (write 'none')" unless @ids;
				push @problems, "$path: names promises, but its files count for no edition (write 'none')"
				  if @ids && !@$editions;
			}
			push @tests,
			  { path => $path, editions => $editions, runner => $runner, ids => \@ids };
		}
	}
	push @problems, strays($root, \%taken);
	return (\@tests, \@problems);
}

# strays(root, {path => 1} of the test files read): a file the runners run
# that no kind reads, and a Promises: line in a file the matrix never reads
# (a test in a directory nobody scans, a copy, a renamed file).
sub strays
{
	my ($root, $taken) = @_;
	my @problems;
	for my $dir (@RUN_DIRS)
	{
		for my $full (sort glob("$root/$dir/*"))
		{
			my $path = File::Spec->abs2rel($full, $root);
			next if !-f $full || $path =~ /\.pm$/ || $taken->{$path};
			push @problems, "$path: run by the suite but read by no kind of test/contract/matrix.pl";
		}
	}
	for my $path (files($root))
	{
		next if $taken->{$path} || ($path !~ $SOURCE && $path !~ $ECHOES);
		my $full = "$root/$path";
		next unless -f $full;
		my @all = split /\n/, slurp($full);
		my @at = grep { $all[$_] =~ $HEADER } 0 .. $#all;
		next unless @at;
		if ($path =~ $ECHOES && -f "$root/test/sql/$1.sql")
		{
			my ($want) = grep { /$HEADER/ } split /\n/, slurp("$root/test/sql/$1.sql");
			push @problems, "$path: its Promises: line is not that of test/sql/$1.sql"
			  unless @at == 1 && defined $want && $all[ $at[0] ] eq $want;
			next;
		}
		push @problems, "$path: has a Promises: line (line " . ($at[0] + 1)
		  . ") but is no test file the matrix reads (see \@KINDS in test/contract/matrix.pl)";
	}
	return @problems;
}

# files(root): the repository's files, relative: git's list when root is a
# work tree, else every file below root but .git and build output.
sub files
{
	my ($root) = @_;
	if (-e "$root/.git" && open(my $git, '-|', 'git', '-C', $root, 'ls-files', '-z'))
	{
		local $/;
		my $list = <$git>;
		return grep { length } split /\0/, ($list // '') if close $git;
	}
	my @out;
	my @todo = ('');
	while (defined(my $dir = shift @todo))
	{
		opendir(my $dh, "$root/$dir") or next;
		for my $e (sort readdir $dh)
		{
			next if $e =~ /^(?:\..*|tmp_check|tmp_check_iso|results|output_iso|log|node_modules|__pycache__)$/;
			my $rel = $dir eq '' ? $e : "$dir/$e";
			if (-d "$root/$rel") { push @todo, $rel unless -l "$root/$rel" }
			else { push @out, $rel }
		}
		closedir $dh;
	}
	return @out;
}

# load(root): everything the matrix needs, and every problem found:
# contract, headers, and editions claiming a promise no test of theirs names.
sub load
{
	my ($root) = @_;
	my ($promises, $p1) = contract($root);
	my %known = map { $_->{id} => 1 } @$promises;
	my ($tests, $p2) = tests($root, \%known);
	my %by;    # id -> edition -> [paths]
	for my $t (@$tests)
	{
		for my $id (@{ $t->{ids} })
		{
			push @{ $by{$id}{$_} }, $t->{path} for @{ $t->{editions} };
		}
	}
	my @unchecked;
	for my $p (@$promises)
	{
		for my $e (@EDITIONS)
		{
			next if $p->{status}{$e} eq 'not offered' || !$STATUS{ $p->{status}{$e} };
			push @unchecked,
			  "$p->{id} ($p->{title}): the $e edition claims '$p->{status}{$e}', "
			  . "but no test file of that edition names $p->{id}"
			  unless $by{ $p->{id} }{$e};
		}
	}
	return {
		promises => $promises,
		tests => $tests,
		by => \%by,
		problems => { contract => $p1, headers => $p2, unchecked => \@unchecked },
	};
}

# render(data): docs/testing.md.
sub render
{
	my ($d) = @_;
	my @o;
	push @o, "# Testing: the promise matrix", "",
	  "<!-- Generated by test/contract/matrix.pl from CONTRACT.md and the test",
	  "files' Promises: lines. Do not edit: run `perl test/contract/matrix.pl --write`. -->",
	  "",
	  "For each promise of [CONTRACT.md](../CONTRACT.md) and each edition: its",
	  "status there, and the test files that check it. A test file names the",
	  "promises it checks in one header line, in the comment that opens it:",
	  "`# Promises: P1 P2` (`-- Promises:` in SQL, `// Promises:` in",
	  "JavaScript; `none` when it checks no promise). A file names a promise",
	  "only if one of its assertions fails when the promise breaks.",
	  "`prove test/docs/010_contract.t` fails when an edition claims a promise",
	  "that no test of that edition names, when a header names an unknown ID,",
	  "is missing, repeated or below the opening comment, when a file the",
	  "suite runs is not read here, when a file that is not read here has a",
	  "header, and when this file is not what the script writes.", "",
	  "`bash test/run-tests.sh` runs them all. Which edition a test checks",
	  "follows from its path:", "",
	  "| test files | editions | run by |", "|---|---|---|";
	for my $k (@KINDS)
	{
		my ($pattern, $editions, $runner) = @$k;
		push @o, "| `$pattern` | " . (join(', ', @$editions) || 'none') . " | $runner |";
	}
	push @o, "",
	  "The client libraries' tests run against the C extension and again",
	  "against the portable edition, so they count for both. The drivers",
	  "under `test/model/` and `test/stress/` are run by the test files that",
	  "name them (`095_model.pl`, `098_model_chaos.pl`, `070_stress.pl`, the",
	  "MySQL and portable `070_model.t`); those files carry the header.", "",
	  "## Summary", "",
	  "| ID | promise | " . join(' | ', @EDITIONS) . " |",
	  "|---|---|" . ('---|' x @EDITIONS);
	for my $p (@{ $d->{promises} })
	{
		my @cells;
		for my $e (@EDITIONS)
		{
			my $n = scalar @{ $d->{by}{ $p->{id} }{$e} // [] };
			my $s = $p->{status}{$e};
			push @cells, $s eq 'not offered' ? $s : "$s ($n " . ($n == 1 ? 'file' : 'files') . ')';
		}
		push @o, "| $p->{id} | $p->{title} | " . join(' | ', @cells) . " |";
	}
	for my $p (@{ $d->{promises} })
	{
		push @o, "", "## $p->{id}. $p->{title}";
		for my $e (@EDITIONS)
		{
			my $s = $p->{status}{$e};
			my @files = @{ $d->{by}{ $p->{id} }{$e} // [] };
			push @o, "", "$e: $s.";
			push @o, "", map { "- `$_`" } @files if @files;
		}
	}
	my @none = map { $_->{path} } grep { !@{ $_->{ids} } } @{ $d->{tests} };
	push @o, "", "## Test files that check no promise", "",
	  "They check the code's structure, the model checker itself, the",
	  "packages, statistics, or robustness beyond the promises.",
	  "", map { "- `$_`" } @none;
	return join("\n", @o) . "\n";
}

sub root { return File::Spec->rel2abs(dirname(__FILE__) . '/../..') }

sub main
{
	my $mode = shift @ARGV // '';
	my $root = root();
	my $d = load($root);
	my $text = render($d);
	if ($mode eq '--write')
	{
		my $path = "$root/docs/testing.md";
		mkdir "$root/docs";
		open(my $fh, '>', $path) or die "$path: $!\n";
		print $fh $text;
		close $fh;
	}
	elsif ($mode eq '--check')
	{
		my @p = map { @{ $d->{problems}{$_} } } qw(contract headers unchecked);
		my $file = "$root/docs/testing.md";
		push @p, "docs/testing.md is not what test/contract/matrix.pl writes "
		  . "(run: perl test/contract/matrix.pl --write)"
		  unless -f $file && slurp($file) eq $text;
		print STDERR "$_\n" for @p;
		return @p ? 1 : 0;
	}
	elsif ($mode eq '')
	{
		print $text;
	}
	else
	{
		print STDERR "usage: $0 [--write | --check]\n";
		return 2;
	}
	return 0;
}

exit(main()) unless caller;
1;
