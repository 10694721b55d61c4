# 044_owner_bytes.t: owners, holders and resources compare as bytes
# (issue 33, 5).  Accounts `Alice` and `alicé` are other users than
# `alice`: they cannot renew, re-enter, pin, release or unlock_all her
# holding of the same holder text (42501, NULL or 0, and her holding
# unchanged).  Holder and resource texts that differ in case, accents or
# trailing spaces are other holders and other resources.
# Promises: P4
use strict;
use warnings;
use utf8;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new;
$my->do_root("CREATE USER 'Alice'\@'localhost' IDENTIFIED BY 'pA'",
             "CREATE USER 'alic\x{e9}'\@'localhost' IDENTIFIED BY 'pE'");
my $alice = $my->connect('alice');
my $root = $my->connect('root');
my %others = ('Alice' => $my->connect('Alice', 'pA'),
              "alic\x{e9}" => $my->connect("alic\x{e9}", 'pE'));
sub one { DlockMy::one(@_) }
sub err { DlockMy::err(@_) }

my $f = one($alice, "SELECT dlock.try_lock('ob/r', 'h', 3600)");
ok($f, 'alice holds ob/r as holder h');
my $state = sub { join ',', map { $_ // 'NULL' } @{ $root->selectrow_arrayref(
    "SELECT holder, owner, count, fence, expires_at FROM dlock.leases WHERE resource = 'ob/r' AND tail = 0") } };
my $before = $state->();
for my $name (sort keys %others) {
    my $o = $others{$name};
    $o->do('SET SESSION max_statement_time = 10');
    is(one($o, "SELECT dlock.try_lock('ob/r', 'h', 3600)"), undef, "$name: try_lock of alice's holding is busy (no re-entry)");
    like(err($o, "SELECT dlock.renew('ob/r', 'h', 7200, NULL)"), qr/^42501/, "$name: renew refused (42501)");
    like(err($o, "SELECT dlock.unlock('ob/r', 'h', NULL)"), qr/^42501/, "$name: unlock refused (42501)");
    like(err($o, "SELECT dlock.assert_fence('ob/r', ?)", $f), qr/^42501/, "$name: assert_fence refused (42501)");
    is(one($o, "SELECT dlock.unlock_all('h')"), 0, "$name: unlock_all releases nothing of alice's");
    is(one($o, "SELECT count(*) FROM dlock.locks WHERE resource = 'ob/r' AND owner = ?", $name), 0, "$name: does not own ob/r");
}
is($state->(), $before, "alice's holding unchanged");
is(one($alice, "SELECT dlock.renew('ob/r', 'h', 3600, NULL)") ? 1 : 0, 1, 'alice herself renews');

# Holders: case, accents, trailing spaces, bytes.
for my $h ('H', 'h ', "h\x{e9}", "\x{c9}") {
    is(one($alice, "SELECT dlock.try_lock('ob/r', ?, 60)", $h), undef, "holder '$h' is not holder 'h'");
    is(one($alice, "SELECT dlock.unlock('ob/r', ?, NULL)", $h), undef, "holder '$h' cannot release h's holding");
}
# Resources: each its own.
my %fences;
for my $r ('ob/R', 'ob/r ', "ob/r\x{e9}", 'OB/r') {
    my $g = one($alice, "SELECT dlock.try_lock(?, 'other', 60)", $r);
    ok($g, "resource '$r' is another resource than 'ob/r'");
    $fences{$g}++ if $g;
}
is(one($alice, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'ob/%' OR resource LIKE 'OB/%'"), 5, 'five holdings');
done_testing;
