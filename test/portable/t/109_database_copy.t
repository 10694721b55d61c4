#!/usr/bin/perl
# 109_database_copy.t: a database dropped and made again from an earlier
# copy of itself (CREATE DATABASE snap TEMPLATE app; more fences; DROP
# DATABASE app; CREATE DATABASE app TEMPLATE snap OID <app's old OID>).
# The copy keeps the sequence, the epoch row, its seal, the system
# identifier, the timeline and the postmaster start; with the OID option
# (PostgreSQL 15 and later) the database OID too.  Fences drawn after it
# must still be above every earlier one (helper-79: they repeated).  The
# database's own pg_database row is new (_dbrow), which starts an epoch.
# Promises: P1
use strict;
use warnings;
use Test::More;
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => 'no PostgreSQL server binaries' unless @servers;

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'dbcopy');
    my $major = q1($admin, "SELECT current_setting('server_version_num')::int / 10000");
    my $max = 0;
    my $draw = sub {
        my ($holder) = @_;
        my $b = conn('bob');
        my $f = q1($b, "SELECT dlock.try_lock('res', ?, '1h')", $holder);
        $b->do("SELECT dlock.unlock('res', ?)", undef, $holder);
        $b->disconnect;
        return $f;
    };
    $max = $draw->('h1');
    my $oid = q1($admin, "SELECT oid FROM pg_database WHERE datname = 'app'");
    $admin->do("CREATE DATABASE snap TEMPLATE app") or die $admin->errstr;
    for my $h ('h2', 'h3') {
        my $f = $draw->($h);
        ok($f > $max, "$label: ${h}'s fence is above the earlier ones");
        $max = $f;
    }
    $admin->do("DROP DATABASE app") or die $admin->errstr;
    my $with_oid = $major >= 15 ? " OID $oid" : '';
    $admin->do("CREATE DATABASE app TEMPLATE snap$with_oid") or die $admin->errstr;
    is(q1($admin, "SELECT oid FROM pg_database WHERE datname = 'app'"), $oid,
       "$label: app made again with its old OID") if $with_oid;
    for my $h ('h4', 'h5') {
        my $f = $draw->($h);
        ok($f > $max, "$label: after the copy, ${h}'s fence ($f) is above every earlier one ($max)");
        $max = $f if $f > $max;
    }
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
