# 099_docs.pl: the docs cannot rot (issue 35).
#
#  - every `sql` example of README.md and docs/**/*.md runs on the C
#    extension: one fresh database per page (CREATE EXTENSION dlock done),
#    the page's blocks in order in one `psql -X -q` session, and each block
#    followed by an `output` block prints exactly that (trailing blanks
#    aside); a block without one raises no error;
#  - every function of the extension, every dlock.* setting, view and event
#    has its entry in docs/reference/ (the pages' titles, settings.md,
#    views.md, events.md), each function page has the sections of a
#    reference page, and docs/reference/README.md links every page.
# Promises: none

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/../docs";
use DocExamples;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $top = $DocExamples::top;
my $node = PostgreSQL::Test::Cluster->new('docs');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

# run_page FILE EXAMPLES...: the examples in one session of a new database.
my $db = 0;
sub run_page {
    my ($file, @ex) = @_;
    $db++;
    $node->safe_psql('postgres', "CREATE DATABASE docs_$db");
    $node->safe_psql("docs_$db", 'CREATE EXTENSION dlock');
    my $script = '';
    for my $i (0 .. $#ex) {
        $script .= "\\echo " . DocExamples::marker($i + 1) . "\n" . $ex[$i]{text};
        $script .= "\n" unless $script =~ /\n\z/;
    }
    my $path = $node->basedir . "/docs_$db.sql";
    open my $fh, '>', $path or die "$path: $!";
    print $fh $script;
    close $fh;
    my $out = '';
    IPC::Run::run(['psql', '-X', '-q', '-h', $node->host, '-p', $node->port, '-d', "docs_$db", '-f', $path],
                  '<', \'', '>&', \$out);
    # psql prefixes messages with the script's name and line: not shown.
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
    $node->safe_psql('postgres', "DROP DATABASE docs_$db WITH (FORCE)");
}

my @pages = DocExamples::pages('sql');
note("pages with sql examples: " . join(' ', map { $_->[0] } @pages));
run_page(@$_) for @pages;

# Every function, setting, view and event has its reference entry.
sub slurp { my $f = shift; open my $fh, '<', $f or return ''; local $/; return scalar <$fh> }
my @ref = sort grep { !m{/README\.md$} } glob("$top/docs/reference/*.md");
my %title;
for my $f (@ref) {
    my ($t) = slurp($f) =~ /^# (.*)$/m;
    $title{$_} = $f for ($t // '') =~ /\b([a-z_]+)\b/g;
}
for my $fn (split /\n/, $node->safe_psql('postgres', q{
        SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'dlock'::regnamespace
           AND proname NOT LIKE '\_%' AND proname NOT LIKE 'waiters\_internal%' ORDER BY 1})) {
    ok($title{$fn}, "function $fn has a page in docs/reference/ (named in its title)");
}
# Every function page has the sections of a reference page.
my @sections = ('Synopsis', 'Description', 'Return value', 'Errors', 'Notes', 'Examples', 'Editions', 'History');
for my $f (grep { !m{/(?:settings|views|events)\.md$} } @ref) {
    my $t = slurp($f);
    my @missing = grep { $t !~ /^## \Q$_\E\s*$/m } @sections;
    my ($base) = $f =~ m{([^/]+)$};
    is("@missing", '', "$base has the sections " . join(', ', @sections));
}
my $index = slurp("$top/docs/reference/README.md");
for my $f (@ref, map { "$top/docs/reference/$_" } qw(settings.md views.md events.md)) {
    my ($base) = $f =~ m{([^/]+)$};
    like($index, qr/\]\(\Q$base\E(?:#[^)]*)?\)/, "docs/reference/README.md links $base");
}
my $settings = slurp("$top/docs/reference/settings.md");
for my $g (split /\n/, $node->safe_psql('postgres', q{SELECT name FROM pg_settings WHERE name LIKE 'dlock.%' ORDER BY 1})) {
    like($settings, qr/^## `?\Q$g\E`?\s*$/m, "setting $g has its section in settings.md");
}
my $views = slurp("$top/docs/reference/views.md");
for my $v (split /\n/, $node->safe_psql('postgres', q{SELECT viewname FROM pg_views WHERE schemaname = 'dlock' ORDER BY 1})) {
    like($views, qr/^## `?dlock\.\Q$v\E`?\s*$/m, "view dlock.$v has its section in views.md");
}
my $events = slurp("$top/docs/reference/events.md");
my %ev;
for my $c (glob("$top/src/*.c")) {
    $ev{$_} = 1 for slurp($c) =~ /dlock_notify(?:_holding)?\([^,]+,\s*"(\w+)"/g;
}
ok(scalar(keys %ev) >= 5, 'events found in src/: ' . join(' ', sort keys %ev));
like($events, qr/^## `?\Q$_\E`?\s*$/m, "event $_ has its section in events.md") for sort keys %ev;

done_testing();
