#!/usr/bin/perl
# 030_links.t: every relative link of README.md, CONTRACT.md, docs/**/*.md
# and clients/*/README.md resolves: its file (or directory) exists, and a
# #anchor names a heading of the target Markdown file (GitHub's slugs:
# lower case, punctuation dropped, spaces to hyphens, -1, -2 for repeats).
# Links in code blocks and code spans are not links.  No server needed:
# `prove test/docs/030_links.t`.
# Promises: none
use strict;
use warnings;
use FindBin;
use lib $FindBin::Bin;
use DocExamples;
use File::Basename qw(dirname);
use File::Spec;
use Test::More;

my $top = $DocExamples::top;
# DLOCK_LINK_FILES="a.md b.md" checks those instead (for trying the test).
my @files = ($ENV{DLOCK_LINK_FILES} // '') =~ /\S/ ? split(' ', $ENV{DLOCK_LINK_FILES})
    : grep { -f "$top/$_" } ('README.md', 'CONTRACT.md',
        (map { substr($_, length($top) + 1) } glob("$top/clients/*/README.md")),
        grep { m{^docs/} } DocExamples::doc_files());

# text FILE: FILE's Markdown with fenced blocks blanked (lines kept).
sub text {
    my ($file) = @_;
    open my $fh, '<', $file or return undef;
    my ($out, $fence) = ('', undef);
    while (my $l = <$fh>) {
        if (!$fence && $l =~ /^ {0,3}(`{3,}|~{3,})/) { $fence = $1; $out .= "\n"; next; }
        if ($fence && $l =~ /^ {0,3}(\Q${\ substr($fence, 0, 1)}\E{3,})\s*$/ && length($1) >= length($fence)) {
            undef $fence; $out .= "\n"; next;
        }
        $out .= $fence ? "\n" : $l;
    }
    return $out;
}

# slug HEADING: GitHub's anchor of a heading's text.
sub slug {
    my ($h) = @_;
    $h =~ s/!?\[([^\]]*)\]\([^)]*\)/$1/g;        # links: their text
    $h =~ s/<[^>]+>//g;                           # HTML tags
    $h = lc $h;
    $h =~ s/[^\w\- ]//g;                          # punctuation (not - and _)
    $h =~ s/ /-/g;
    return $h;
}

my %anchors;
sub anchors {
    my ($file) = @_;
    return $anchors{$file} //= do {
        my %a; my %seen;
        for my $l (split /\n/, text($file) // '') {
            next unless $l =~ /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/;
            my $s = slug($1);
            my $k = $seen{$s}++;
            $a{$k ? "$s-$k" : $s} = 1;
        }
        \%a;
    };
}

my $links = 0;
for my $f (@files) {
    my $t = text("$top/$f");
    ok(defined $t, "$f is readable") or next;
    $t =~ s/(`+).*?\1//gs;                        # code spans
    my @targets = $t =~ /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
    push @targets, $t =~ /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$/mg;
    for my $target (@targets) {
        next if $target =~ m{^[a-z][a-z0-9+.-]*:}i;  # http:, mailto: ...
        $links++;
        my ($path, $anchor) = $target =~ /^([^#]*)(?:#(.*))?$/;
        my $abs = $path eq '' ? "$top/$f" : File::Spec->canonpath(dirname("$top/$f") . "/$path");
        if (!ok(-e $abs, "$f: link $target: $path exists")) { next; }
        next unless defined $anchor && $anchor ne '' && $abs =~ /\.md$/;
        ok(anchors($abs)->{$anchor}, "$f: link $target: heading #$anchor exists");
    }
}
note("$links relative links in " . scalar(@files) . " files");
done_testing();
