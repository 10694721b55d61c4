#!/usr/bin/perl
# 050_regress.t: the C extension's regression tests of the shared contract
# (test/sql/*.sql) run unchanged against the portable edition, with the
# same expected output (test/expected/*.out), on every server 010_core.t
# uses.  As pg_regress runs them: one database for all, in order, psql -X
# -a -q as a superuser, PGTZ/PGDATESTYLE/LC_MESSAGES as pg_regress sets
# them, compared with diff -w.  Two differences: the schema comes from
# portable/dlock.sql, installed by a non-superuser role that owns the
# database, instead of CREATE EXTENSION; and psql runs with SHOW_CONTEXT
# never (PL/pgSQL adds a CONTEXT line to the errors it raises, the C
# functions' errors have none; messages, SQLSTATEs, details and hints are
# compared as they are).  The tests of C-only behaviour are skipped, each
# with its reason.  Output and diffs: $DLOCK_PORTABLE_REGRESS_OUT
# (default tmp_check/portable-regress/<version> in the tree: a fixed path
# in /tmp was another user's after a run as root).
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t.
# Promises: P1 P2 P4 P5 P6 P7 P8 P9 P10 P11 P12
use strict;
use warnings;
use File::Temp qw(tempdir);
use File::Path qw(make_path remove_tree);
use Test::More;

my $top = $ENV{DLOCK_TOP} // do { my $d = __FILE__; $d =~ s{/test/portable/t/[^/]*$}{}; $d eq __FILE__ ? '.' : $d };
$top = `cd '$top' && pwd`; chomp $top;
my $cache = $ENV{DLOCK_PORTABLE_CACHE} // '/var/cache/dlock-portable';
my $debian_major = $ENV{DLOCK_PG_MAJOR} // 15;
my $client = "/usr/lib/postgresql/$debian_major/bin";
my $out_root = $ENV{DLOCK_PORTABLE_REGRESS_OUT} // "$top/tmp_check/portable-regress";

# The tests of the shared contract, in pg_regress's (alphabetical) order.
my @shared = qw(elect errors expiry fair_delay_campaign multi search_path semaphore shared xact);
# The tests of C-only behaviour, and why.
my %skipped = (
    api   => 'dlock.waiters and dlock.stats() (shared memory), and HOT updates of dlock.leases counted in pg_stat',
    fair  => 'GUC range checks of dlock.lock_delay and dlock.queue_ttl at SET time, and dlock.queue_ttl settable by superusers only (the portable edition checks settings when they are used; any role may SET them)',
    roles => "the C extension's own objects (dlock.fence_seq, dlock.epoch, dlock.outbox) and its extension owner's rights",
    rows  => "rows.c's direct row access of dlock.leases (indexes and constraints the test adds)",
    stats => 'dlock.stats() (shared memory), counted when transactions commit',
    scale => "rows deleted at release (extension 0.5): the portable edition keeps a released row for an hour, as the C extension did before",
    session_rows => "rows.c's remembered place of a session's row (the portable edition reads the row by statement)",
    sessions => "the C extension's sessions (dlock.session_rows read by rows.c, its messages and its lock-manager lock); the portable edition's rules and errors are 100_sessions.t's and 103_sessions_attacks.t's",
);

my @servers;
my %want = map { $_ => 1 } split ' ', ($ENV{DLOCK_PORTABLE_MAJORS} // '');
push @servers, ["Debian $debian_major", "/usr/lib/postgresql/$debian_major/bin"]
    if -x "/usr/lib/postgresql/$debian_major/bin/postgres" && (!%want || $want{debian} || $want{$debian_major});
for my $n (14 .. 18) {
    next if %want && !$want{$n};
    push @servers, ["npm $n", "$cache/$n/bin"] if -x "$cache/$n/bin/postgres";
}
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

# Every file of test/sql is either shared or skipped with a reason.
for my $f (sort glob("$top/test/sql/*.sql")) {
    my ($name) = $f =~ m{([^/]+)\.sql$};
    ok((grep { $_ eq $name } @shared) || $skipped{$name}, "test/sql/$name.sql is run here or skipped with a reason");
}
note("skipped (C-only): $_: $skipped{$_}") for sort keys %skipped;

for my $s (@servers) {
    my ($label, $bindir) = @$s;
    my $dir = tempdir("dlock-preg-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    my $out = "$out_root/" . ($label =~ s/ /-/gr);
    remove_tree($out); make_path($out);
    my $o = `$bindir/initdb -D $dir/data -U admin --auth=trust --no-locale -E UTF8 -N 2>&1`;
    die "initdb: $o" if $?;
    $o = `$bindir/pg_ctl -D $dir/data -l $dir/server.log -w -o "-k $dir -c listen_addresses='' -c fsync=off -c max_prepared_transactions=4" start 2>&1`;
    die "pg_ctl: $o" if $?;
    my @psql = ("$client/psql", '-X', '-h', $dir);
    $o = `@psql -U admin -d postgres -q -c "CREATE ROLE dlock_owner LOGIN" -c "CREATE DATABASE contrib_regression OWNER dlock_owner" 2>&1`;
    die "setup: $o" if $?;
    $o = `@psql -U dlock_owner -d contrib_regression -q -f $top/portable/dlock.sql 2>&1`;
    is($?, 0, "$label: portable/dlock.sql installed by the database's owner") or diag($o);
    for my $t (@shared) {
        local $ENV{PGTZ} = 'PST8PDT';
        local $ENV{PGDATESTYLE} = 'Postgres, MDY';
        local $ENV{LC_MESSAGES} = 'C';
        local $ENV{LC_ALL} = 'C';
        local $ENV{PGAPPNAME} = "pg_regress/$t";
        system("cd $top/test && @psql -U admin -d contrib_regression -a -q -v SHOW_CONTEXT=never < sql/$t.sql > $out/$t.out 2>&1");
        my $diff = `diff -w -U3 $top/test/expected/$t.out $out/$t.out`;
        ok($diff eq '', "$label: test/sql/$t.sql gives test/expected/$t.out") or do {
            open my $fh, '>', "$out/$t.diff"; print $fh $diff; close $fh;
            diag(substr($diff, 0, 3000));
        };
    }
    `$bindir/pg_ctl -D $dir/data -m fast -w stop 2>&1`;
}
done_testing();
