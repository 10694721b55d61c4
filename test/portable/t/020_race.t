#!/usr/bin/perl
# 020_race.t: the portable edition under real contention, on every server
# 010_core.t uses.  Eight processes of two roles race for three resources
# (300 rounds each) with short leases (takeovers at expiry, releases, waits
# in lock(), reap() alongside); every holder then writes through
# assert_fence into a table, under "last_fence <= fence".  Checked: no
# fenced write is ever refused for a newer fence having written first (at
# most one holder at a time, fences increasing per resource in the order
# the writes commit), every new holding's fence is new, and nothing raises
# an error but 55P03 (a lease that ran out before its write).
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t; DLOCK_RACE_ROUNDS per worker (300).
# Promises: P1 P2
use strict;
use warnings;
use DBI;
use File::Temp qw(tempdir);
use Time::HiRes qw(time sleep);
use Test::More;

my $top = $ENV{DLOCK_TOP} // '.';
my $script = "$top/portable/dlock.sql";
my $cache = $ENV{DLOCK_PORTABLE_CACHE} // '/var/cache/dlock-portable';
my $debian_major = $ENV{DLOCK_PG_MAJOR} // 15;
my $client = "/usr/lib/postgresql/$debian_major/bin";
my $rounds = $ENV{DLOCK_RACE_ROUNDS} // 300;

my @servers;
my %want = map { $_ => 1 } split ' ', ($ENV{DLOCK_PORTABLE_MAJORS} // '');
push @servers, ["Debian $debian_major", "/usr/lib/postgresql/$debian_major/bin"]
    if -x "/usr/lib/postgresql/$debian_major/bin/postgres" && (!%want || $want{debian} || $want{$debian_major});
for my $n (14 .. 18) {
    next if %want && !$want{$n};
    push @servers, ["npm $n", "$cache/$n/bin"] if -x "$cache/$n/bin/postgres";
}
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    race(@$s);
}
done_testing();

sub race {
    my ($label, $bindir) = @_;
    my $dir = tempdir("dlock-race-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    my $out = `$bindir/initdb -D $dir/data -U admin --auth=trust --no-locale -E UTF8 -N 2>&1`;
    die "initdb: $out" if $?;
    $out = `$bindir/pg_ctl -D $dir/data -l $dir/server.log -w -o "-k $dir -c listen_addresses='' -c fsync=off" start 2>&1`;
    die "pg_ctl: $out" if $?;
    my $conn = sub {
        my ($user, $db) = @_;
        DBI->connect("dbi:Pg:dbname=" . ($db // 'app') . ";host=$dir", $user, '',
                     { AutoCommit => 1, RaiseError => 0, PrintError => 0, AutoInactiveDestroy => 1 }) or die $DBI::errstr;
    };
    my $admin = $conn->('admin', 'postgres');
    $admin->do($_) or die $admin->errstr
        for ("CREATE ROLE dbo LOGIN", "CREATE ROLE alice LOGIN", "CREATE ROLE bob LOGIN",
             "CREATE DATABASE app OWNER dbo");
    $out = `$client/psql -X -q -h $dir -U dbo -d app -f $script 2>&1`;
    die "install: $out" if $?;
    my $db = $conn->('dbo');
    $db->do($_) or die $db->errstr for (
        "CREATE TABLE work (resource text PRIMARY KEY, last_fence bigint NOT NULL, writes integer NOT NULL)",
        "INSERT INTO work VALUES ('race/0', 0, 0), ('race/1', 0, 0), ('race/2', 0, 0)",
        "GRANT SELECT, UPDATE ON work TO alice, bob");

    my @kids;
    for my $w (0 .. 7) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $h = $conn->($w % 2 ? 'bob' : 'alice');
            open my $log, '>', "$dir/worker$w" or die $!;
            srand($$);
            my $holder = "w$w";
            for (1 .. $rounds) {
                my $r = 'race/' . int(rand 3);
                my $lease = (20 + int(rand 80)) . 'ms';
                my $op = rand;
                if ($op < 0.05) {
                    $h->do("SELECT dlock.reap()") or print $log "error reap: ", $h->state, " ", $h->errstr, "\n";
                    next;
                }
                my $sql = $op < 0.5 ? "SELECT dlock.try_lock(?, ?, ?::interval)"
                                    : "SELECT dlock.lock(?, ?, ?::interval, '100ms')";
                my ($f) = $h->selectrow_array($sql, undef, $r, $holder, $lease);
                if ($h->err) { print $log "error acquire: ", $h->state, " ", $h->errstr, "\n"; next; }
                next unless defined $f;
                my ($count) = $h->selectrow_array(
                    "SELECT count FROM dlock.locks WHERE resource = ? AND fence = ?", undef, $r, $f);
                print $log "acquired $r $f ", ($count // 0), "\n";
                $h->begin_work;
                if ($h->do("SELECT dlock.assert_fence(?, ?)", undef, $r, $f)) {
                    my $n = $h->do("UPDATE work SET last_fence = ?, writes = writes + 1
                                     WHERE resource = ? AND last_fence <= ?", undef, $f, $r, $f);
                    print $log ($n && $n == 1 ? "wrote $r $f\n" : "STALE $r $f\n");
                    $h->commit or print $log "error commit: ", $h->state, "\n";
                } else {
                    print $log ($h->state eq '55P03' ? "lost $r $f\n" : "error assert: " . $h->state . " " . $h->errstr . "\n");
                    $h->rollback;
                }
                my $end_op = rand;
                if ($end_op < 0.4) {
                    $h->selectrow_array("SELECT dlock.unlock(?, ?, ?)", undef, $r, $holder, $f);
                } elsif ($end_op < 0.8) {
                    $h->selectrow_array("SELECT dlock.unlock_all(?)", undef, $holder);
                }                                   # else: left to expire
                print $log "error unlock: ", $h->state, "\n" if $h->err;
            }
            close $log;
            exit 0;
        }
        push @kids, $pid;
    }
    waitpid $_, 0 for @kids;

    my (%new, $writes, $stale, $lost, @errors, $dups);
    for my $w (0 .. 7) {
        open my $log, '<', "$dir/worker$w" or die $!;
        while (<$log>) {
            if (/^acquired (\S+) (\d+) 1$/) { $dups++ if $new{$2}++; }
            elsif (/^wrote /) { $writes++; }
            elsif (/^STALE /) { $stale++; }
            elsif (/^lost /) { $lost++; }
            elsif (/^error /) { push @errors, "w$w: $_"; }
        }
    }
    note("$label: " . scalar(keys %new) . " new holdings, " . ($writes // 0) . " fenced writes, "
         . ($lost // 0) . " leases lost before their write");
    ok(keys %new > 5, "$label: the resources changed hands (" . scalar(keys %new) . " new holdings)");
    ok(($writes // 0) > 5, "$label: fenced writes went through");
    is($stale // 0, 0, "$label: no fenced write found a newer fence written before it");
    is($dups // 0, 0, "$label: every new holding's fence is new");
    is(scalar @errors, 0, "$label: no errors but 55P03") or diag(join '', @errors[0 .. ($#errors < 9 ? $#errors : 9)]);
    my $total = $db->selectrow_array("SELECT sum(writes) FROM work");
    is($total, $writes // 0, "$label: every acknowledged write is in the table");
    $db->disconnect;
    $admin->disconnect;
    `$bindir/pg_ctl -D $dir/data -m fast -w stop 2>&1`;
}
