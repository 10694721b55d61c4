# 062_cli_autocommit.t: the CLI's MySQL backend on a server whose sessions
# start with autocommit off (--autocommit=0 in my.cnf, or init_connect).
#
# The CLI used to call dlock.try_lock in the transaction autocommit = 0
# opened and never committed: `dlock try` printed a fence and exited 0,
# the disconnect rolled the acquisition back, and another holder got the
# resource at once.  It now turns autocommit on for its connection.
# Promises: P2 P15
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $cli = "$DlockMy::TOP/cli/dlock";
plan skip_all => "cli/dlock not built" unless -x $cli;
plan skip_all => "cli/dlock built without MySQL support" unless `$cli -d mysql://x\@y/ try r 2>&1` !~ /without MySQL/;

my $my = DlockMy->new(args => ['--autocommit=0']);
my $root = $my->connect('root');
is(DlockMy::one($root, 'SELECT @@global.autocommit'), 0, 'the server starts sessions with autocommit off');
$root->do('SET autocommit = 1');    # this test's own reads and writes
my $url = "mysql://alice:pa\@localhost/dlock?socket=$my->{sock}";

sub dlock {
    my @args = @_;
    my $cmd = join ' ', map { my $a = $_; $a =~ s/'/'\\''/g; "'$a'" } $cli, @args;
    my $out = `$cmd 2>$my->{dir}/cli.err`;
    return ($? >> 8, $out);
}

my ($rc, $out) = dlock('-d', $url, 'try', '--holder', 'me', '--lease', '60s', 'ac/a');
is($rc, 0, 'try: 0');
chomp $out;
is(DlockMy::one($root, "SELECT fence FROM dlock.locks WHERE resource = 'ac/a' AND holder = 'me'"), $out,
   'the acquisition outlives the CLI (committed)');
($rc) = dlock('-d', $url, 'try', '--holder', 'other', '--lease', '60s', 'ac/a');
is($rc, 75, 'another holder does not get it: 75');
($rc, $out) = dlock('-d', $url, 'renew', '--holder', 'me', 'ac/a');
is($rc, 0, 'renew: 0');
($rc, $out) = dlock('-d', $url, 'unlock', '--holder', 'me', 'ac/a');
is("$rc $out", "0 0\n", 'unlock: 0, count 0');
is(DlockMy::one($root, "SELECT COUNT(*) FROM dlock.locks WHERE resource = 'ac/a'"), 0, 'the release is committed');
DlockMy::one($root, "SELECT dlock.try_lock('ac/b', 'x', 0.2)");
select(undef, undef, undef, 0.4);
($rc, $out) = dlock('-d', $url, 'reap');
is("$rc $out", "0 1\n", 'reap runs (not refused as inside a transaction)');
($rc, $out) = dlock('-d', $url, 'run', '--lease', '30s', 'ac/r', '--', 'sh', '-c',
                    "mariadb --no-defaults -uroot -S '$my->{sock}' -N -e \"SELECT dlock.try_lock('ac/r', 'intruder', 60)\"");
is($out, "NULL\n", 'run: another holder gets NULL while COMMAND runs');
is(DlockMy::one($root, "SELECT COUNT(*) FROM dlock.locks WHERE resource = 'ac/r'"), 0, 'run released it');
done_testing;
