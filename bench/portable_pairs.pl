#!/usr/bin/perl
# portable_pairs.pl: uncontended lock+unlock pairs of the portable edition
# against the naive lock table and the C extension, for bench/run.sh (the
# fsync = off pass).  Each of C client processes (its own connection, its
# own resource) does pairs for S seconds with one method:
#   portable  SELECT dlock.try_lock(r, h, '30s'); SELECT dlock.unlock(r, h)
#             in database PDB (portable/dlock.sql, installed by its owner)
#   naive     the naive lock table of bench/pairs.c (INSERT ... ON
#             CONFLICT DO UPDATE WHERE expired; DELETE), in PDB too
#   dlock     the C extension's try_lock/unlock, in database DB
# Prints one line per run: method clients pairs/s p50_us p99_us failed.
# Every statement is prepared on the server and is its own autocommit
# transaction, as in pairs.c.
#
#   portable_pairs.pl CONNINFO DB PDB USER METHOD CLIENTS SECONDS
use strict;
use warnings;
use DBI;
use DBD::Pg;
use POSIX ();
use Time::HiRes qw(time);

my ($conninfo, $db, $pdb, $user, $method, $clients, $seconds) = @ARGV;
die "usage: portable_pairs.pl CONNINFO DB PDB USER METHOD CLIENTS SECONDS\n" unless $seconds;
(my $base = $conninfo) =~ s/\s+/;/g;
$base =~ s/(^|;)(dbname|user)=[^;]*//g;

sub conn {
    my ($dbname) = @_;
    return DBI->connect("dbi:Pg:$base;dbname=$dbname", $user, '',
                        { RaiseError => 1, PrintError => 0, AutoCommit => 1, pg_server_prepare => 1 });
}

my @pipes;
for my $c (1 .. $clients) {
    pipe(my $r, my $w) or die;
    my $pid = fork // die;
    if ($pid == 0) {
        close $r;
        my $dbh = conn($method eq 'dlock' ? $db : $pdb);
        my ($res, $h) = ("bench/$method/$c", "bench:$c");
        my ($lock, $unlock);
        if ($method eq 'naive') {
            $dbh->do("CREATE TABLE IF NOT EXISTS naive (resource text PRIMARY KEY, holder text, expires_at timestamptz)");
            $lock = $dbh->prepare("INSERT INTO naive VALUES (?, ?, now() + '30s') ON CONFLICT (resource) DO UPDATE "
                                  . "SET holder = excluded.holder, expires_at = excluded.expires_at "
                                  . "WHERE naive.expires_at < now() RETURNING 1");
            $unlock = $dbh->prepare("DELETE FROM naive WHERE resource = ? AND holder = ? RETURNING 1");
        } else {
            $lock = $dbh->prepare("SELECT dlock.try_lock(?, ?, '30s')");
            $unlock = $dbh->prepare("SELECT dlock.unlock(?, ?)");
        }
        my @lat;
        my $fail = 0;
        my $end = time + $seconds;
        while ((my $t0 = time) < $end) {
            $lock->execute($res, $h); my ($f) = $lock->fetchrow_array; $fail++ unless $f;
            $unlock->execute($res, $h); my ($u) = $unlock->fetchrow_array;
            $fail++ unless defined $u && ($method eq 'naive' ? $u == 1 : $u == 0);
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
    my ($f, @l) = split ' ', scalar <$r>;
    $fails += $f;
    push @all, @l;
}
wait for 1 .. $clients;
@all = sort { $a <=> $b } @all;
my $p = sub { $all[int($_[0] * $#all)] * 1e6 };
printf "%s %d %.0f %.0f %.0f %d\n", $method, $clients, @all / $seconds, $p->(0.5), $p->(0.99), $fails;
