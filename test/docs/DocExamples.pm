# DocExamples.pm: the runnable examples of the Markdown docs (README.md and
# docs/**/*.md), for the runners test/t/099_docs.pl (`sql`),
# test/portable/t/096_docs.t (`sql-portable`) and test/mysql/t/090_docs.t
# (`sql-mysql`).  A fenced block with one of those info strings is an
# example; an `output` block right after it (blank lines between allowed)
# is what the client must print for it.  A page's examples run in order,
# in one session, on a fresh database.
package DocExamples;

use strict;
use warnings;
use Cwd ();
use File::Basename ();
use File::Find ();

our $top = $ENV{DLOCK_TOP} // Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../..');

# Printed before each block's statements, so that one session's output can
# be cut into the blocks' parts.
sub marker { return "\@\@dlock-doc-block $_[0]\@\@" }

# doc_files: README.md and every docs/**/*.md, relative to $top, sorted.
# DLOCK_DOCS="docs/a.md docs/b.md" picks some (for trying a page).
sub doc_files {
    return split ' ', $ENV{DLOCK_DOCS} if ($ENV{DLOCK_DOCS} // '') =~ /\S/;
    my @f = -f "$top/README.md" ? ('README.md') : ();
    if (-d "$top/docs") {
        File::Find::find({ no_chdir => 1, wanted => sub {
            push @f, substr($File::Find::name, length($top) + 1) if /\.md$/ && -f $_;
        } }, "$top/docs");
    }
    return sort @f;
}

# blocks FILE: the fenced blocks of FILE, each {lang, text, line} (text
# without the fences, the fence's indentation removed).
sub blocks {
    my ($file) = @_;
    open my $fh, '<', "$top/$file" or die "$top/$file: $!";
    my @lines = <$fh>;
    close $fh;
    my (@out, $cur, $fence, $indent);
    for my $i (0 .. $#lines) {
        my $l = $lines[$i];
        if (!$cur) {
            if ($l =~ /^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)/) {
                ($indent, $fence) = (length $1, $2);
                $cur = { lang => $3, text => '', line => $i + 1 };
            } elsif ($l =~ /\S/) {
                push @out, { lang => '', text => $l, line => $i + 1, prose => 1 };
            }
            next;
        }
        my $f1 = substr($fence, 0, 1);
        if ($l =~ /^ {0,3}(\Q$f1\E{3,})\s*$/ && length($1) >= length($fence)) {
            push @out, $cur;
            undef $cur;
            next;
        }
        $l =~ s/^ {0,$indent}//;
        $cur->{text} .= $l;
    }
    die "$file:$cur->{line}: unclosed fenced block\n" if $cur;
    return @out;
}

# examples FILE LANG: the examples of FILE in LANG, each {text, line,
# output (undef: none shown)}.
sub examples {
    my ($file, $lang) = @_;
    my @b = blocks($file);
    my @ex;
    for my $i (0 .. $#b) {
        next unless !$b[$i]{prose} && $b[$i]{lang} eq $lang;
        my $next = $b[$i + 1];
        push @ex, { text => $b[$i]{text}, line => $b[$i]{line},
                    output => ($next && !$next->{prose} && $next->{lang} eq 'output') ? $next->{text} : undef };
    }
    return @ex;
}

# pages LANG: [file, examples...] of each doc file that has examples in LANG.
sub pages {
    my ($lang) = @_;
    my @p;
    for my $f (doc_files()) {
        my @ex = examples($f, $lang);
        push @p, [$f, @ex] if @ex;
    }
    return @p;
}

# split_output OUT N: the parts of a session's output that follow markers
# 1..N (what came before marker 1 is dropped).
sub split_output {
    my ($out, $n) = @_;
    my @parts = ('') x ($n + 1);
    my $k = 0;
    for my $l (split /^/, $out) {
        if ($l =~ /^\@\@dlock-doc-block (\d+)\@\@\s*$/) { $k = $1; next; }
        $parts[$k] .= $l;
    }
    shift @parts;
    return @parts;
}

# normal TEXT: TEXT with trailing blanks of each line and blank lines at
# its end removed (what the comparison ignores).
sub normal {
    my ($t) = @_;
    $t =~ s/[ \t]+$//mg;
    $t =~ s/\n+\z//;
    $t =~ s/\A\n+//;
    return $t;
}

1;
