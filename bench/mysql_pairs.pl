#!/usr/bin/perl
# mysql_pairs.pl: uncontended lock+unlock pairs against MariaDB, for
# bench/mysql.sh.  Each of C client processes (its own connection, its own
# resource) does pairs for S seconds with one method:
#   dlock   SELECT dlock.try_lock(r, h, 30); SELECT dlock.unlock(r, h, NULL)
#   naive   INSERT ... ON DUPLICATE KEY UPDATE (take if free or expired,
#           NOW()-based) then check the holder; DELETE ... WHERE holder = h
#   getlock SELECT GET_LOCK(r, 0); SELECT RELEASE_LOCK(r)
# Prints one line per run: method clients pairs/s p50_us p99_us.
# Nothing is shared between clients but the server.
use strict;
use warnings;
use DBI;
use POSIX ();
use Time::HiRes qw(time);

my ($sock, $method, $clients, $seconds) = @ARGV;
die "usage: mysql_pairs.pl SOCKET METHOD CLIENTS SECONDS\n" unless $seconds;

sub conn {
    return DBI->connect("DBI:MariaDB:mariadb_socket=$sock;database=bench", 'bench', 'bench',
                        { RaiseError => 1, PrintError => 0, AutoCommit => 1 });
}

my @pipes;
for my $c (1 .. $clients) {
    pipe(my $r, my $w) or die;
    my $pid = fork // die;
    if ($pid == 0) {
        close $r;
        my $dbh = conn();
        my $res = "bench/$method/$c";
        my $h = "h$c";
        my ($lock, $unlock, $check);
        if ($method eq 'dlock') {
            $lock = $dbh->prepare('SELECT dlock.try_lock(?, ?, 30)');
            $unlock = $dbh->prepare('SELECT dlock.unlock(?, ?, NULL)');
        } elsif ($method eq 'naive') {
            $lock = $dbh->prepare(
                'INSERT INTO bench.naive (resource, holder, expires_at) VALUES (?, ?, NOW(6) + INTERVAL 30 SECOND) ' .
                'ON DUPLICATE KEY UPDATE holder = IF(expires_at < NOW(6), VALUES(holder), holder), ' .
                'expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)');
            $check = $dbh->prepare('SELECT holder = ? FROM bench.naive WHERE resource = ?');
            $unlock = $dbh->prepare('DELETE FROM bench.naive WHERE resource = ? AND holder = ?');
        } else {
            $lock = $dbh->prepare('SELECT GET_LOCK(?, 0)');
            $unlock = $dbh->prepare('SELECT RELEASE_LOCK(?)');
        }
        my @lat;
        my $end = time + $seconds;
        my $fail = 0;
        while ((my $t0 = time) < $end) {
            if ($method eq 'getlock') {
                $lock->execute($res); my ($ok) = $lock->fetchrow_array; $fail++ unless $ok;
                $unlock->execute($res); $unlock->fetchrow_array;
            } elsif ($method eq 'dlock') {
                $lock->execute($res, $h); my ($f) = $lock->fetchrow_array; $fail++ unless $f;
                $unlock->execute($res, $h); $unlock->fetchrow_array;
            } else {
                $lock->execute($res, $h);
                $check->execute($h, $res); my ($ok) = $check->fetchrow_array; $fail++ unless $ok;
                $unlock->execute($res, $h);
            }
            push @lat, time - $t0;
        }
        print $w join(' ', $fail, @lat), "\n";
        close $w;
        POSIX::_exit(0);
    }
    close $w;
    push @pipes, $r;
}
my (@all, $fails);
for my $r (@pipes) {
    my $line = <$r>;
    my ($f, @l) = split ' ', $line;
    $fails += $f;
    push @all, @l;
}
wait for 1 .. $clients;
@all = sort { $a <=> $b } @all;
my $p = sub { $all[int($_[0] * $#all)] * 1e6 };
printf "%s %d %.0f %.0f %.0f %d\n", $method, $clients, @all / $seconds, $p->(0.5), $p->(0.99), $fails;
