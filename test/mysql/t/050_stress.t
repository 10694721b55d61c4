# 050_stress.t: the MariaDB twin of the stress client.  Workers take the
# lock with CALL dlock.lock, read a counter, sleep, and write counter + 1
# in a transaction that first asserts their fence (SELECT
# dlock.assert_fence); a killer SIGKILLs random workers (some while they
# hold the lock, whose lease then runs out) and starts new ones, and pauses
# others (SIGSTOP) past their lease; workers also oversleep it now and then.  Zero lost
# increments (the counter equals the number of committed writes) and fences
# strictly increasing in write order.
# Promises: P1 P2
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use POSIX ();
use Time::HiRes qw(sleep time);

my $seconds = $ENV{DLOCK_MY_STRESS_SECONDS} || 20;
my $workers = 6;
my $my = DlockMy->new;
my $end_all = time + $seconds;
$my->do_root('CREATE DATABASE app',
             'CREATE TABLE app.counter (id INT PRIMARY KEY, n BIGINT NOT NULL, fence BIGINT NOT NULL) ENGINE = InnoDB',
             'INSERT INTO app.counter VALUES (1, 0, 0)',
             'CREATE TABLE app.writes (seq BIGINT AUTO_INCREMENT PRIMARY KEY, fence BIGINT NOT NULL, n BIGINT NOT NULL) ENGINE = InnoDB',
             "GRANT SELECT, INSERT, UPDATE ON app.* TO alice\@'localhost'");

sub worker {
    my ($id) = @_;
    my $c = $my->connect('alice');
    my $holder = "w$id:$$";
    while (time < $end_all) {
        my $f = DlockMy::call_lock($c, 'stress', $holder, 0.6, 2);
        next unless defined $f;
        my $n = DlockMy::one($c, 'SELECT n FROM app.counter WHERE id = 1');
        sleep(rand() < 0.05 ? 0.7 : rand(0.03));    # sometimes past the lease
        eval {
            $c->begin_work;
            DlockMy::one($c, 'SELECT dlock.assert_fence(?, ?)', 'stress', $f);
            $c->do('UPDATE app.counter SET n = ?, fence = ? WHERE id = 1', undef, $n + 1, $f);
            $c->do('INSERT INTO app.writes (fence, n) VALUES (?, ?)', undef, $f, $n + 1);
            $c->commit;
            1;
        } or do { eval { $c->rollback }; };
        DlockMy::one($c, 'SELECT dlock.unlock(?, ?, ?)', 'stress', $holder, $f);
    }
    POSIX::_exit(0);
}

my %kids;
my $next_id = 0;
my $spawn = sub {
    my $id = ++$next_id;
    my $pid = fork // die;
    worker($id) if $pid == 0;
    $kids{$pid} = $id;
};
$spawn->() for 1 .. $workers;
my ($kills, $pauses) = (0, 0);
while (time < $end_all - 1) {
    sleep 0.3 + rand(0.7);
    my @pids = keys %kids;
    my $victim = $pids[int rand @pids];
    if (rand() < 0.3) {    # pause one past its lease, then let it go on
        kill 'STOP', $victim;
        sleep 0.8;
        kill 'CONT', $victim;
        $pauses++;
        next;
    }
    kill 'KILL', $victim;
    waitpid $victim, 0;
    delete $kids{$victim};
    $kills++;
    $spawn->();
}
waitpid $_, 0 for keys %kids;

my $dbh = $my->connect('root');
my ($n) = $dbh->selectrow_array('SELECT n FROM app.counter');
my ($writes) = $dbh->selectrow_array('SELECT count(*) FROM app.writes');
my $log = $dbh->selectall_arrayref('SELECT fence, n FROM app.writes ORDER BY seq');
ok($writes > 50, "$writes committed increments by $next_id workers, $kills killed, $pauses paused");
is($n, $writes, 'zero lost increments: the counter equals the committed writes');
my ($bad_fence, $bad_seq) = (0, 0);
for my $i (1 .. $#$log) {
    $bad_fence++ unless $log->[$i][0] > $log->[$i - 1][0];
    $bad_seq++ unless $log->[$i][1] == $log->[$i - 1][1] + 1;
}
is($bad_fence, 0, 'fences strictly increasing in write order');
is($bad_seq, 0, 'each write saw the previous one');
done_testing;
