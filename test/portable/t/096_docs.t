#!/usr/bin/perl
# 096_docs.t: every `sql-portable` example of README.md and docs/**/*.md
# runs on the portable edition, on Debian's own server: one fresh database
# per page, owned by role dbo (no superuser), who installs portable/dlock.sql
# and runs the page's blocks in order in one `psql -X -q` session; a block
# followed by an `output` block prints exactly that (trailing blanks aside),
# one without it raises no error.  See test/docs/DocExamples.pm.
# Promises: none
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..", "$FindBin::Bin/../../docs";
use PortableTest;
use DocExamples;
use Test::More;

my @pages = DocExamples::pages('sql-portable');
plan skip_all => 'no sql-portable example in the docs' unless @pages;
my ($server) = grep { $_->[0] =~ /^Debian / } PortableTest::servers();
plan skip_all => 'no Debian PostgreSQL server' unless $server;

my ($dir, $admin) = start_server(@$server, 'docs');
my $db = 0;
for my $page (@pages) {
    my ($file, @ex) = @$page;
    $db++;
    $admin->do("CREATE DATABASE docs_$db OWNER dbo") or die $admin->errstr;
    my $out = `$client/psql -X -q -h $sock -U dbo -d docs_$db -f $script 2>&1`;
    is($?, 0, "$file: portable/dlock.sql installed in a fresh database") or diag($out);
    my $path = "$dir/docs_$db.sql";
    open my $fh, '>', $path or die "$path: $!";
    for my $i (0 .. $#ex) {
        print $fh "\\echo " . DocExamples::marker($i + 1) . "\n" . $ex[$i]{text};
        print $fh "\n" unless $ex[$i]{text} =~ /\n\z/;
    }
    close $fh;
    $out = `$client/psql -X -q -h $sock -U dbo -d docs_$db -f $path </dev/null 2>&1`;
    $out =~ s/^psql:\Q$path\E:\d+: //mg;
    my @got = DocExamples::split_output($out, scalar @ex);
    for my $i (0 .. $#ex) {
        my $where = "$file:$ex[$i]{line}";
        if (defined $ex[$i]{output}) {
            is(DocExamples::normal($got[$i]), DocExamples::normal($ex[$i]{output}), "$where: output as shown");
        } else {
            unlike($got[$i], qr/^(ERROR|FATAL|PANIC):/m, "$where: runs without error");
        }
    }
    $admin->do("DROP DATABASE docs_$db WITH (FORCE)");
}
stop_server($server->[1], $dir);
done_testing();
