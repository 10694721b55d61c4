# 045_fence_epoch.t: fences never repeat and never go backwards across what
# sets the fence counter back: a restore from mariadb-dump into the same
# server and into another one (the dump carries the counter as it was), a
# crash that loses an acquisition made in a transaction that never
# committed (its draw is not on disk), and a re-installation (DROP
# DATABASE, then mysql/dlock.sql again).  Each time the next fence must be
# above every fence handed out before.  And fences follow the clock:
# (milliseconds since 2020-01-01 UTC) << 22.
# Promises: P1
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(time);

my $my = DlockMy->new;
my $root = $my->connect('root');
my $max = 0;        # the largest fence handed out so far
my $n = 0;

# take(dbh, resource): acquire (a new resource each time); the fence.
sub take {
    my ($dbh, $r) = @_;
    my $f = DlockMy::one($dbh, 'SELECT dlock.try_lock(?, ?, 3600)', $r, 'h');
    die "$r not acquired" unless defined $f;
    $max = $f if $f > $max;
    $n++;
    return $f;
}

sub client {
    my ($srv, $sql_in, $what) = @_;
    my $cmd = "mariadb --no-defaults -uroot -S $srv->{sock} dlock < $sql_in > $sql_in.log 2>&1";
    system($cmd) == 0 or die "$what failed: " . `cat $sql_in.log`;
}

# Within one run: strictly increasing, and near the clock.
my @seq = map { take($root, "seq/$_") } 1 .. 50;
my $up = grep { $seq[$_] > $seq[$_ - 1] } 1 .. $#seq;
is($up, $#seq, '50 fences in a row, strictly increasing');
my $ms = int((time - 1577836800) * 1000);       # 2020-01-01 00:00:00 UTC
ok(abs(($seq[-1] >> 22) - $ms) < 60_000, 'a fence is (ms since 2020-01-01 UTC) << 22, near the clock');

# 1. A dump; 50 acquisitions; the dump restored into the same server.
take($root, "a/$_") for 1 .. 5;
my $dump = "$my->{dir}/dump.sql";
system("mariadb-dump --no-defaults -uroot -S $my->{sock} dlock > $dump 2>$dump.err") == 0
    or die 'mariadb-dump failed: ' . `cat $dump.err`;
take($root, "b/$_") for 1 .. 50;
my $before = $max;
client($my, $dump, 'restore');
is(DlockMy::one($root, "SELECT count(*) FROM dlock.leases WHERE resource LIKE 'b/%'"), 0,
   'the restore set the lock table back to the dump');
my $f = take($root, 'after-restore');
ok($f > $before, "after a restore into the same server the next fence ($f) is above every fence before ($before)");

# 2. The same dump restored into another server (dlock installed there).
my $other = DlockMy->new;
client($other, $dump, 'restore into another server');
$before = $max;
$f = take($other->connect('root'), 'after-restore-elsewhere');
ok($f > $before, "restored into another server: the next fence ($f) is above every fence before ($before)");
$other->stop;

# 3. A crash right after acquisitions in a transaction that never commits:
# nothing has flushed the redo of their draws, so the counter comes back
# lower.  Twice.
for my $round (1 .. 2) {
    my $alice = $my->connect('alice');
    $alice->begin_work;
    take($alice, "uncommitted/$round/$_") for 1 .. 20;
    $my->kill9;
    $my->start;
    $root = $my->connect('root');
    is(DlockMy::one($root, "SELECT count(*) FROM dlock.leases WHERE resource LIKE 'uncommitted/$round/%'"), 0,
       "round $round: the uncommitted acquisitions are gone after the crash");
    $before = $max;
    $f = take($root, "after-crash/$round");
    ok($f > $before, "round $round: after the crash the next fence ($f) is above every fence handed out before ($before)");
}

# 4. Re-installation.
$root->do('DROP DATABASE dlock');
$my->install;
$before = $max;
$f = take($root, 'after-reinstall');
ok($f > $before, "after DROP DATABASE and a new install the next fence ($f) is above every fence before ($before)");

# Rollbacks and re-entry draw nothing that goes backwards.
$root->begin_work;
my $g = take($root, 'rolled-back');
$root->rollback;
ok(take($root, 'rolled-back') > $g, 'after a rollback the next fence is larger still');

done_testing;
