# 090_docs.t: every `sql-mysql` example of README.md and docs/**/*.md runs
# on the MariaDB edition: per page, dlock re-installed (DROP DATABASE dlock,
# then mysql/dlock.sql) and a fresh database `app`, the page's blocks in
# order in one `mariadb --table` session as alice (an ordinary user); a
# block followed by an `output` block prints exactly that (trailing blanks
# aside; " at line N" of error messages left out), one without it raises
# no error.  See test/docs/DocExamples.pm.
# Promises: none
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..", "$FindBin::Bin/../../docs";
use DlockMy;
use DocExamples;
use Test::More;

my @pages = DocExamples::pages('sql-mysql');
plan skip_all => 'no sql-mysql example in the docs' unless @pages;

my $my = DlockMy->new;
my $n = 0;
for my $page (@pages) {
    my ($file, @ex) = @$page;
    $n++;
    if ($n > 1) {
        $my->do_root('DROP DATABASE dlock', 'DROP DATABASE IF EXISTS app');
        $my->install;
    }
    $my->do_root('CREATE DATABASE app', "GRANT ALL ON app.* TO alice\@'localhost'");
    my $path = "$my->{dir}/docs_$n.sql";
    open my $fh, '>', $path or die "$path: $!";
    for my $i (0 .. $#ex) {
        # A marker: `system` output is written at once (--unbuffered
        # flushes the client's own output after each statement).
        print $fh "system echo '" . DocExamples::marker($i + 1) . "'\n" . $ex[$i]{text};
        print $fh "\n" unless $ex[$i]{text} =~ /\n\z/;
    }
    close $fh;
    my $out = `mariadb --no-defaults --table --unbuffered --force -ualice -ppa -S $my->{sock} app < $path 2>&1`;
    $out =~ s/^(ERROR \d+ \(\w+\)) at line \d+:/$1:/mg;
    my @got = DocExamples::split_output($out, scalar @ex);
    for my $i (0 .. $#ex) {
        my $where = "$file:$ex[$i]{line}";
        if (defined $ex[$i]{output}) {
            is(DocExamples::normal($got[$i]), DocExamples::normal($ex[$i]{output}), "$where: output as shown");
        } else {
            unlike($got[$i], qr/^ERROR /m, "$where: runs without error");
        }
    }
}
done_testing();
