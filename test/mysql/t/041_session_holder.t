# 041_session_holder.t: dlock.session_holder() is unique to its connection
# over the server's lifetime and across restarts.  It used to be
# conn:<connection id>:<server start rounded to 10 s>, so after a crash and
# a restart within the same 10 s a new connection that got the same id
# re-entered the dead connection's live lease.  Here the server starts just
# after a multiple of 5 s past a multiple of 10 s (where that rounding goes
# up), crashes, and starts again a few seconds later: in the same window.
# Promises: P2
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(sleep time);

my $my = DlockMy->new;
my $t = time;
my $wait = 5.2 - ($t - 10 * int($t / 10));
$wait += 10 if $wait < 0;
sleep $wait;
$my->stop;
$my->start;

# A connection with an id the restarted server will hand out again.
my ($c, $id);
for (1 .. 100) {
    $c = $my->connect('alice');
    $id = DlockMy::one($c, 'SELECT CONNECTION_ID()');
    last if $id >= 40;
    $c->disconnect;
}
my $h = DlockMy::one($c, 'SELECT dlock.session_holder()');
like($h, qr/^conn:$id:\S+$/, "session_holder() is conn:<connection id>:... ($h)");
ok(length($h) <= 64, 'at most 64 bytes');
my $f = DlockMy::one($c, "SELECT dlock.try_lock('sh/r', NULL, 3600)");
ok(defined $f, 'the default holder acquires');
is(DlockMy::one($c, 'SELECT dlock.session_holder()'), $h, 'the same text at every call of the connection');
is(DlockMy::one($c, "SELECT dlock.try_lock('sh/r', NULL, 3600)"), $f, 'and it re-enters');
my $c2 = $my->connect('alice');
isnt(DlockMy::one($c2, 'SELECT dlock.session_holder()'), $h, "another connection's differs");

$my->kill9;
$my->start;
my ($d, $did);
for (1 .. 100) {
    $d = $my->connect('alice');
    $did = DlockMy::one($d, 'SELECT CONNECTION_ID()');
    last if $did >= $id;
    $d->disconnect;
}
is($did, $id, "after the crash, a connection gets the dead connection's id ($id)");
isnt(DlockMy::one($d, 'SELECT dlock.session_holder()'), $h, "its session holder is not the dead connection's");
is(DlockMy::one($d, "SELECT dlock.try_lock('sh/r', NULL, 3600)"), undef,
   "it does not re-enter the dead connection's live lease");
is(DlockMy::one($d, "SELECT holder FROM dlock.locks WHERE resource = 'sh/r'"), $h, 'which is still there');

done_testing;
