# PortableTest.pm: what the portable edition's session tests
# (test/portable/t/030_fair.t, 040_elect.t) share: the servers to run on,
# a throwaway cluster with the roles dbo (the database's owner, who installs
# portable/dlock.sql), alice and bob (users), none a superuser but the
# cluster's admin, and DBI helpers.  $label (the server's name, in test
# names) and $sock (its socket directory) are the current server's.
#
#   use lib "$top/test/portable"; use PortableTest;
#   for my $s (PortableTest::servers()) { my ($dir, $admin) = start_server(@$s, 'prefix'); ... stop_server($s->[1], $dir) }
#
# DLOCK_PORTABLE_MAJORS picks the servers as for 010_core.t.
package PortableTest;

use strict;
use warnings;
use DBI;
use DBD::Pg qw(:async);
use Cwd ();
use Exporter 'import';
use File::Basename ();
use File::Temp qw(tempdir);
use Time::HiRes qw(time sleep);
use Test::More;

our @EXPORT = qw($top $script $client $label $sock start_server stop_server
                 conn q1 err queue wait_ready async result queued blocked_by);

our $top = $ENV{DLOCK_TOP} // Cwd::abs_path(File::Basename::dirname(__FILE__) . '/../..');
our $script = "$top/portable/dlock.sql";
my $cache = $ENV{DLOCK_PORTABLE_CACHE} // '/var/cache/dlock-portable';
my $debian_major = $ENV{DLOCK_PG_MAJOR} // 15;
# Client programs come from Debian's PostgreSQL.
our $client = "/usr/lib/postgresql/$debian_major/bin";
our ($label, $sock);

# servers: [label, bindir] of each server to run on (Debian's, npm 14-18).
sub servers {
    my @servers;
    my %want = map { $_ => 1 } split ' ', ($ENV{DLOCK_PORTABLE_MAJORS} // '');
    push @servers, ["Debian $debian_major", "/usr/lib/postgresql/$debian_major/bin"]
        if -x "/usr/lib/postgresql/$debian_major/bin/postgres" && (!%want || $want{debian} || $want{$debian_major});
    for my $n (14 .. 18) {
        next if %want && !$want{$n};
        push @servers, ["npm $n", "$cache/$n/bin"] if -x "$cache/$n/bin/postgres";
    }
    return @servers;
}

# sweep_servers: the servers of the long sweeps (091_settings,
# 092_interrupts, 093_advisory_keys): Debian's and npm's oldest and newest
# (14, 18), which bound what the majors between them do; all of them with
# DLOCK_PORTABLE_SWEEP_ALL=1, those named with DLOCK_PORTABLE_MAJORS.
sub sweep_servers {
    my @all = servers();
    return @all if $ENV{DLOCK_PORTABLE_SWEEP_ALL} || ($ENV{DLOCK_PORTABLE_MAJORS} // '') =~ /\S/;
    return grep { $_->[0] =~ /^Debian / || $_->[0] eq 'npm 14' || $_->[0] eq 'npm 18' } @all;
}

# start_server LABEL BINDIR PREFIX: a cluster (fsync off, 40 connections),
# the roles, database app owned by dbo, the schema installed by dbo (a test
# of its own); sets $label and $sock; returns (its directory, a superuser
# connection to postgres).
sub start_server {
    my ($bindir, $prefix);
    ($label, $bindir, $prefix) = @_;
    my $dir = tempdir("dlock-$prefix-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    $sock = $dir;
    my $out = `$bindir/initdb -D $dir/data -U admin --auth=trust --no-locale -E UTF8 -N 2>&1`;
    die "initdb: $out" if $?;
    $out = `$bindir/pg_ctl -D $dir/data -l $dir/server.log -w -o "-k $dir -c listen_addresses='' -c fsync=off -c max_connections=40" start 2>&1`;
    die "pg_ctl: $out" if $?;
    my $admin = conn('admin', 'postgres');
    $admin->do($_) or die $admin->errstr
        for ("CREATE ROLE dbo LOGIN", "CREATE ROLE alice LOGIN", "CREATE ROLE bob LOGIN",
             "CREATE DATABASE app OWNER dbo");
    $out = `$client/psql -X -q -h $dir -U dbo -d app -f $script 2>&1`;
    is($?, 0, "$label: installed by the database owner") or diag($out);
    note("=== $label");
    return ($dir, $admin);
}

# stop_server BINDIR DIR
sub stop_server {
    my ($bindir, $dir) = @_;
    `$bindir/pg_ctl -D $dir/data -m fast -w stop 2>&1`;
}

sub conn {
    my ($user, $db) = @_;
    my $dbh = DBI->connect("dbi:Pg:dbname=" . ($db // 'app') . ";host=$sock", $user, '',
        { AutoCommit => 1, RaiseError => 0, PrintError => 0, AutoInactiveDestroy => 1, pg_server_prepare => 0 })
        or die "connect $user: $DBI::errstr";
    $dbh->do("SET client_min_messages = warning");
    return $dbh;
}

sub q1 {
    my ($dbh, $sql, @bind) = @_;
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    die "$label: $sql: " . $dbh->errstr . "\n" if $dbh->err;
    return $row ? $row->[0] : undef;
}

sub err {
    my ($dbh, $sql, @bind) = @_;
    my $ok = $dbh->do($sql, undef, @bind);
    return 'no error' if defined $ok;
    my $e = $dbh->state . ': ' . ($dbh->errstr =~ s/^ERROR:\s*//r =~ s/\n.*//sr);
    $dbh->rollback unless $dbh->{AutoCommit};
    return $e;
}

# queue: "holder:position ..." of a resource's queue.
sub queue {
    my ($dbh, $r) = @_;
    my $rows = $dbh->selectall_arrayref(
        "SELECT holder || ':' || position FROM dlock.queue WHERE resource = ? ORDER BY position", undef, $r);
    die "$label: queue: " . $dbh->errstr if $dbh->err;
    return join ' ', map { $_->[0] } @$rows;
}

sub wait_ready {
    my ($dbh, $secs) = @_;
    for (1 .. $secs * 100) { return 1 if $dbh->pg_ready; sleep 0.01; }
    return 0;
}

# async: start a statement on its own connection; returns [dbh, sth].
sub async {
    my ($user, $sql, @bind) = @_;
    my $h = conn($user);
    $h->do("SET statement_timeout = '60s'");
    my $sth = $h->prepare($sql, { pg_async => PG_ASYNC });
    $sth->execute(@bind);
    return [$h, $sth];
}

# queued: whether the fair waiter A (from async) took its ticket within
# 30 s: its backend holds a two-key advisory lock with a ticket as its
# second key (portable/queues.sql), seen through DBH.  A fixed sleep was
# too short under load: the next waiter then queued first.
sub queued {
    my ($dbh, $a) = @_;
    my $pid = $a->[0]{pg_pid};
    for (1 .. 3000) {
        return 1 if q1($dbh, "SELECT count(*) FROM pg_locks WHERE pid = ? AND locktype = 'advisory'
                                AND mode = 'ExclusiveLock' AND granted AND objsubid = 2 AND objid <> 0", $pid);
        sleep 0.01;
    }
    return 0;
}

# blocked_by: whether the connection WAITER waits for BLOCKER (both DBI
# handles) within 30 s, by pg_blocking_pids seen through DBH.
sub blocked_by {
    my ($dbh, $waiter, $blocker) = @_;
    for (1 .. 3000) {
        return 1 if q1($dbh, "SELECT ?::int = ANY(pg_blocking_pids(?))", $blocker->{pg_pid}, $waiter->{pg_pid});
        sleep 0.01;
    }
    return 0;
}

sub result {
    my ($a) = @_;
    return undef unless wait_ready($a->[0], 20);
    $a->[0]->pg_result;
    return undef if $a->[0]->err;
    my ($v) = $a->[1]->fetchrow_array;
    $a->[1]->finish;
    return $v;
}

1;
