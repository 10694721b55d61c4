#!/usr/bin/perl
# 108_rerun_beside_vacuum.t: a re-run of portable/dlock.sql while the
# database owner's ANALYZE of dlock's tables stays open (helper-74's
# finding 2; autovacuum takes the same lock).  The run's COMMENT ON TABLE
# waits for that lock.  It must not wait holding the views' locks, which
# every fence draw and dlock.locks read: callers would queue behind it.
# It must retry instead, as for the views (1 ms each try), and finish once
# the ANALYZE commits, or fail with 55P03, changing nothing, after
# dlock_lock_wait.  Callers' calls run under a 2 s statement_timeout and
# must answer with their value: 57014 (or any error) is the failure.
# Promises: P5 P17
use strict;
use warnings;
use Test::More;
use Time::HiRes qw(sleep time);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

# answer: run SQL under a 2 s statement_timeout: its value or "SQLSTATE: message".
sub answer {
    my ($dbh, $sql) = @_;
    $dbh->do("SET statement_timeout = '2s'");
    my $row = $dbh->selectrow_arrayref($sql);
    my $e = $dbh->err ? $dbh->state . ': ' . ($dbh->errstr =~ s/^ERROR:\s*//r =~ s/\n.*//sr) : undef;
    $dbh->do("SET statement_timeout = 0");
    return $e // ($row ? $row->[0] // 'NULL' : 'no row');
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'rv');
    my $own = conn('dbo');
    my $bob = conn('bob');
    q1($bob, "SELECT dlock.try_lock('rv/warm', 'b', '1h')");   # every table has a row or a plan

    # 1. The ANALYZE ends while the run retries: it finishes.
    $own->begin_work;
    $own->do("ANALYZE dlock.tickets") or die $own->errstr;
    $own->do("ANALYZE dlock.leases") or die $own->errstr;
    open(my $run, '-|', "$client/psql -X -q -v ON_ERROR_STOP=1 -v dlock_lock_wait=20s -h $dir -U dbo -d app -f $script 2>&1")
        or die "psql: $!";
    sleep 0.5;
    my $n = 0;
    # Each answers with its value (a fence, an id, a count, a boolean):
    # not 57014, nor any other error.
    for my $c (["dlock.try_lock('rv/1', 'b', '1h')", qr/^\d+$/], ["dlock.try_xact_lock('rv/2')", qr/^\d+$/],
               ["dlock.try_acquire('rv/3', 'b', 2, 1, '1h')", qr/^\d+$/], ["dlock.open_session('1h', 'b-s')", qr/^\d+$/],
               ["(SELECT count(*) FROM dlock.locks)", qr/^\d+$/], ["dlock.check('rv/warm', 1)", qr/^[01]$/]) {
        my ($call, $want) = @$c;
        like(answer($bob, "SELECT $call"), $want, "$label: during the re-run: $call answers at once");
    }
    $own->commit;
    my $out = do { local $/; <$run> };
    ok(close($run), "$label: the re-run finishes once the ANALYZE commits") or diag($out);
    like(q1($bob, "SELECT dlock.try_lock('rv/after', 'b', '1h')"), qr/^\d+$/, "$label: ... and dlock works after it");

    # 2. The ANALYZE stays open past dlock_lock_wait: 55P03, nothing changed.
    $own->begin_work;
    $own->do("ANALYZE dlock.leases") or die $own->errstr;
    # (statement_timeout: the unfixed script waited here for good.)
    open($run, '-|', "PGOPTIONS='-c statement_timeout=15s' $client/psql -X -q -v ON_ERROR_STOP=1 -v dlock_lock_wait=2s -h $dir -U dbo -d app -f $script 2>&1")
        or die "psql: $!";
    sleep 0.3;
    like(answer($bob, "SELECT dlock.try_lock('rv/4', 'b', '1h')"), qr/^\d+$/, "$label: ... callers never queue behind it");
    $out = do { local $/; <$run> };
    ok(!close($run), "$label: an ANALYZE open past dlock_lock_wait fails the re-run");
    like($out, qr/could not lock dlock's views and tables/, "$label: ... saying why (55P03)") or diag($out);
    $own->commit;
    stop_server($s->[1], $dir);
}
done_testing;
