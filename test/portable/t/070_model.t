#!/usr/bin/perl
# 070_model.t: the randomized, model-checked workload of test/model/ (as
# test/t/095_model.pl runs it on the C extension) against the portable
# edition: installed with psql -f by the role that owns the database (dbo,
# no superuser), and played by six clients and a prober of three roles:
# dbo (the schema's owner, who may break_lock but is no superuser, so its
# "steals" of other roles' holdings must fail too), dlock_model_a (granted
# break_lock by dbo) and dlock_model_b (not).  Then ModelCheck.pm verifies
# fences, overlaps, revivals, roles, counts and errors from the logs.
# The kinds of lock are mixed in as for the C extension (ModelDriver.pm
# finds them in pg_proc: shared holdings, semaphores' permits,
# try_lock_all/lock_all), and ModelKinds.pm checks their rules.
# Sessions are mixed in (ModelDriver.pm: open, holdings of every kind in
# them, keepalive, close, lapses, other roles' keepalives and closes), and
# the checker is shown to fire on this run's logs altered to break each
# session rule (SessionMutations.pm).
# First, step by step, the overlap the model found: a transaction-scoped
# lock under REPEATABLE READ or SERIALIZABLE must not be granted on a
# snapshot older than a lease taken since.
#
# By default on Debian's server and the newest npm major (18); the
# DLOCK_PORTABLE_MAJORS list, as for 010_core.t, picks others.  The seed is
# printed (diag) and DLOCK_MODEL_SEED=N replays its choices;
# DLOCK_MODEL_SECONDS (default 10) is each run's length.  Logs of a run
# that found a violation (every run's, with DLOCK_PORTABLE_MODEL_KEEP=1)
# are kept in $DLOCK_PORTABLE_MODEL_OUT (default
# tmp_check/portable-model/<server> in the tree).
# Promises: P1 P2 P4 P5 P9 P10 P11 P12
use strict;
use warnings;
use File::Temp qw(tempdir);
use File::Path qw(make_path remove_tree);
use DBI;
use Test::More;

my $top;
BEGIN {
    $top = $ENV{DLOCK_TOP} // do { my $d = __FILE__; $d =~ s{/test/portable/t/[^/]*$}{}; $d eq __FILE__ ? '.' : $d };
    $top = `cd '$top' && pwd`; chomp $top;
}
use lib "$top/test/model";
BEGIN {
    eval { require DBD::Pg; 1 } or plan skip_all => 'DBD::Pg (libdbd-pg-perl) is not installed';
}
use Model;
use ModelCheck;
use SessionMutations;

my $cache = $ENV{DLOCK_PORTABLE_CACHE} // '/var/cache/dlock-portable';
my $debian_major = $ENV{DLOCK_PG_MAJOR} // 15;
my $client = "/usr/lib/postgresql/$debian_major/bin";
my $out_root = $ENV{DLOCK_PORTABLE_MODEL_OUT} // "$top/tmp_check/portable-model";
my $seed = $ENV{DLOCK_MODEL_SEED} // int(rand(2_000_000_000));
my $seconds = $ENV{DLOCK_MODEL_SECONDS} // 10;

my @servers;
my %want = map { $_ => 1 } split ' ', ($ENV{DLOCK_PORTABLE_MAJORS} // '');
push @servers, ["Debian $debian_major", "/usr/lib/postgresql/$debian_major/bin"]
    if -x "/usr/lib/postgresql/$debian_major/bin/postgres" && (!%want || $want{debian} || $want{$debian_major});
for my $n (14 .. 18) {
    next if %want ? !$want{$n} : $n != 18;
    push @servers, ["npm $n", "$cache/$n/bin"] if -x "$cache/$n/bin/postgres";
}
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

my $i = 0;
for my $s (@servers) {
    my ($label, $bindir) = @$s;
    my $dir = tempdir("dlock-pmodel-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    my $o = `$bindir/initdb -D $dir/data -U admin --auth=trust --no-locale -E UTF8 -N 2>&1`;
    die "initdb: $o" if $?;
    $o = `$bindir/pg_ctl -D $dir/data -l $dir/server.log -w -o "-k $dir -c listen_addresses='' -c fsync=off -c max_connections=40" start 2>&1`;
    die "pg_ctl: $o" if $?;
    # The superuser only makes the roles and the database.
    $o = `$client/psql -X -q -h $dir -U admin -d postgres -c "CREATE ROLE dbo LOGIN" -c "CREATE ROLE $Model::ROLE_A LOGIN" -c "CREATE ROLE $Model::ROLE_B LOGIN" -c "CREATE DATABASE app OWNER dbo" 2>&1`;
    die "setup: $o" if $?;
    $o = `$client/psql -X -q -h $dir -U dbo -d app -f $top/portable/dlock.sql 2>&1`;
    is($?, 0, "$label: portable/dlock.sql installed by the database's owner") or diag($o);

    stale_snapshot($dir, $label);

    my $logs = "$dir/model";
    my $run_seed = $seed + $i++;
    my $out = '';
    open(my $fh, '>', \$out) or die;
    my ($v, $stats) = Model::run(
        conninfo => "dbname=app;host=$dir;user=dbo", portable => 1, seed => $run_seed,
        clients => 6, seconds => $seconds, resources => 3, dir => $logs,
        tag => 'p', out => $fh);
    close $fh;
    diag("$label:\n$out");
    is(scalar @$v, 0, "$label: no violation (seed $run_seed)") && !$ENV{DLOCK_PORTABLE_MODEL_KEEP} or do {
        my $keep = "$out_root/" . ($label =~ s/ /-/gr);
        remove_tree($keep); make_path($keep);
        system("cp -a $logs/. $keep/");
        diag("$label: the logs are kept in $keep (test/model/run-model.pl --check $keep)");
    };
    cmp_ok($stats->{holdings} // 0, '>', 50, "$label: the workload took holdings");
    cmp_ok($stats->{probes} // 0, '>', 10, "$label: the prober probed");
    cmp_ok($stats->{'ok unlock'} // 0, '>', 10, "$label: unlocks succeeded");
    cmp_ok($stats->{'old-fence calls refused'} // 0, '>', 5, "$label: unlocks and renews under an old fence refused");
    cmp_ok($stats->{'clients that died'} // 0, '==', 0, "$label: no client died");
    # The kinds are mixed in ([kinds]: ModelDriver.pm finds them in pg_proc).
    cmp_ok(($stats->{'ok try_lock shared'} // 0) + ($stats->{'ok lock shared'} // 0), '>', 5,
           "$label: shared holdings were taken");
    cmp_ok(($stats->{'ok try_acquire'} // 0) + ($stats->{'ok acquire'} // 0), '>', 5,
           "$label: permits of semaphores were taken");
    cmp_ok($stats->{'all-or-nothing checks'} // 0, '>', 5,
           "$label: several resources were asked for at once, and checked all or nothing");
    # Sessions ([sessions]: open_session in pg_proc).
    cmp_ok($stats->{'sessions opened'} // 0, '>', 5, "$label: sessions were opened");
    cmp_ok($stats->{'session holdings'} // 0, '>', 10, "$label: holdings were taken in sessions");
    cmp_ok($stats->{'ok keepalive'} // 0, '>', 5, "$label: sessions were kept alive");
    cmp_ok($stats->{'ok close_session'} // 0, '>', 0, "$label: sessions were closed");
    session_mutations($label, $logs);
    `$bindir/pg_ctl -D $dir/data -m fast -w stop 2>&1`;
}
done_testing();

# session_mutations: the run's logs, altered to break each session rule,
# are flagged.
sub session_mutations {
    my ($label, $logs) = @_;
    my $ops = ModelCheck::load(glob("$logs/*.log"));
    for my $m (SessionMutations::list()) {
        my ($kind, $what, $alter) = @$m;
        my $copy = [ map { {%$_} } @$ops ];
        my $done = $alter->($copy);
        my ($v) = ModelCheck::check($copy);
        my $n = grep { /^VIOLATION \[\Q$kind\E\]/ } @$v;
        ok($done && $n, "$label: checker: $what is flagged ($kind)")
            or diag($done ? "not flagged" : "nothing in the logs to alter");
    }
}

# stale_snapshot: what the model found (an overlap: a try_xact_lock in a
# SERIALIZABLE transaction granted while a lease committed after its
# snapshot lived), step by step: a transaction-scoped lock under
# REPEATABLE READ or SERIALIZABLE whose snapshot predates a lease taken,
# or a lease renewed, since gets NULL or 40001, never a fence.
sub stale_snapshot {
    my ($sock, $label) = @_;
    my $conn = sub {
        DBI->connect("dbi:Pg:dbname=app;host=$sock", $_[0], '',
            { AutoCommit => 1, RaiseError => 0, PrintError => 0 }) or die $DBI::errstr;
    };
    my $a = $conn->($Model::ROLE_A);
    my $b = $conn->($Model::ROLE_B);
    for my $iso ('REPEATABLE READ', 'SERIALIZABLE') {
        for my $case ('taken', 'renewed', 'taken over') {
            my $r = "stale/$iso/$case";
            $b->do("SELECT dlock.try_lock(?, 'old', '10ms')", undef, $r) if $case eq 'taken over';
            $b->do("SELECT dlock.try_lock(?, 'b', '1h')", undef, $r) if $case eq 'renewed';
            $b->do("SELECT dlock.unlock(?, 'b')", undef, $r) if $case eq 'renewed';
            select(undef, undef, undef, 0.02);
            $a->do("BEGIN ISOLATION LEVEL $iso");
            $a->do("SELECT count(*) FROM dlock.locks");    # the snapshot
            my ($f) = $b->selectrow_array("SELECT dlock.try_lock(?, 'b', '1h')", undef, $r);
            ok($f, "$label: $iso, lease $case after the snapshot: try_lock by another session") or diag($b->errstr);
            my ($x) = $a->selectrow_array("SELECT dlock.try_xact_lock(?)", undef, $r);
            my $st = $a->state;
            ok(!defined $x && ($st eq '' || $st eq '40001'),
               "$label: $iso, lease $case after the snapshot: try_xact_lock gives NULL or 40001, not a fence")
                or diag("got fence " . ($x // 'NULL') . ", state $st");
            $a->do("ROLLBACK");
            $b->do("SELECT dlock.unlock(?, 'b')", undef, $r);
        }
    }
    $_->disconnect for ($a, $b);
}
