#!/usr/bin/perl
# 010_contract.t: CONTRACT.md, the test files' "Promises:" header lines and
# the generated matrix docs/testing.md agree (test/contract/matrix.pl).
# Fails when an edition claims a promise (holds, holds with limits) that no
# test file of that edition names; when a header names an unknown ID, or a
# test file has none; and when the committed docs/testing.md is not what
# the script writes.  No server needed.
# Promises: none
use strict;
use warnings;
use FindBin;
use Test::More;

my $root = "$FindBin::RealBin/../..";
require "$root/test/contract/matrix.pl";

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
