# 040_crash.t: kill -9 of mariadbd while clients acquire and renew.  After
# restart every acknowledged acquisition and renewal is there, and the next
# fence is above every fence handed out before the crash (the AUTO_INCREMENT
# counter is persistent; the fences table itself is empty).  Twice.
# Promises: P1 P3
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep time);

my $my = DlockMy->new;
my $clients = 4;
my $max_before = 0;

for my $round (1 .. 2) {
    my @logs = map { "$my->{dir}/acked.$round.$_" } 1 .. $clients;
    my @kids;
    for my $k (1 .. $clients) {
        my $pid = fork // die;
        if ($pid == 0) {
            open my $log, '>', $logs[$k - 1] or die;
            $log->autoflush(1);
            my $c = $my->connect('alice');
            for my $i (1 .. 1_000_000) {
                my $r = "crash/$round/$k/$i";
                my $f = eval { DlockMy::one($c, "SELECT dlock.try_lock(?, ?, 3600)", $r, "c$k") };
                last unless defined $f;
                print $log "acq $r $f\n";
                if ($i > 1) {
                    my $e = eval { DlockMy::one($c, "SELECT dlock.renew(?, ?, 7200, NULL)", "crash/$round/$k/" . ($i - 1), "c$k") };
                    last unless defined $e;
                    print $log "ren crash/$round/$k/" . ($i - 1) . " $e\n";
                }
            }
            POSIX::_exit(0);
        }
        push @kids, $pid;
    }
    sleep 1.5 + rand(1);
    $my->kill9;
    waitpid $_, 0 for @kids;
    $my->start;
    my $dbh = $my->connect('root');

    my (%acq, %ren);
    for my $l (@logs) {
        open my $fh, '<', $l or die;
        while (<$fh>) {
            my ($what, $r, @v) = split ' ', $_, 3;
            chomp @v;
            if ($what eq 'acq') { $acq{$r} = $v[0]; } else { $ren{$r} = $v[0]; }
        }
    }
    my $n = keys %acq;
    ok($n > 20, "round $round: $n acknowledged acquisitions before the crash, " . scalar(keys %ren) . ' renewals');
    my $rows = $dbh->selectall_hashref("SELECT resource, holder, fence, expires_at FROM dlock.leases WHERE resource LIKE 'crash/$round/%' AND tail = 0", 'resource');
    my @lost = grep { !$rows->{$_} || !defined $rows->{$_}{fence} || $rows->{$_}{fence} != $acq{$_} } keys %acq;
    is(scalar(@lost), 0, "round $round: every acknowledged acquisition is there with its fence") or diag "lost: @lost[0 .. ($#lost < 5 ? $#lost : 5)]";
    my @lost_ren = grep { !$rows->{$_} || $rows->{$_}{expires_at} lt $ren{$_} } keys %ren;
    is(scalar(@lost_ren), 0, "round $round: every acknowledged renewal is there");
    my $max = 0;
    for (values %acq) { $max = $_ if $_ > $max; }
    ok($max > $max_before, "round $round: fences above the previous round's");
    is($dbh->selectrow_array('SELECT count(*) FROM dlock.fences'), 0, 'the fences table holds no rows');
    my $next = DlockMy::one($dbh, "SELECT dlock.try_lock('crash/next', ?, 60)", "r$round");
    ok($next > $max, "round $round: the next fence ($next) is above every fence before the crash ($max)");
    DlockMy::one($dbh, "SELECT dlock.unlock('crash/next', ?, NULL)", "r$round");
    $max_before = $next;
}

# A clean restart keeps the counter too.
$my->stop;
$my->start;
my $after = DlockMy::one($my->connect('root'), "SELECT dlock.try_lock('crash/next', 'z', 60)");
ok($after > $max_before, 'after a clean restart the next fence is larger still');

done_testing;
