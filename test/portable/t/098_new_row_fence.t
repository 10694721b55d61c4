#!/usr/bin/perl
# 098_new_row_fence.t: fences of a resource without a row never go
# backwards.  A lease acquisition of a new resource is held up (a test
# trigger on dlock.leases) just before it inserts the row; meanwhile a
# transaction-scoped lock takes the resource (its row inserted and
# deleted), gets its fence and commits.  The held-up acquisition then
# must return NULL or a fence above the xact lock's, never one below.
# Promises: P1
use strict;
use warnings;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'newfence');
    my $su = conn('admin');
    # The test's hold-up: an insert of holder 'slow' waits while the
    # superuser's session holds advisory key 4242 (polled: no lock wait,
    # no snapshot).
    $su->do($_) or die $su->errstr for (
        "CREATE FUNCTION public.hold_up() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS \$\$
         BEGIN
             IF NEW.holder = 'slow' THEN
                 WHILE NOT (pg_try_advisory_lock_shared(4242) AND pg_advisory_unlock_shared(4242)) LOOP PERFORM pg_sleep(0.01); END LOOP;
             END IF;
             RETURN NEW;
         END \$\$",
        "CREATE TRIGGER hold_up BEFORE INSERT ON dlock.leases FOR EACH ROW EXECUTE FUNCTION public.hold_up()");
    for my $iso ('read committed', 'repeatable read') {
        my $r = "nf/$iso";
        q1($su, "SELECT pg_advisory_lock(4242)");
        my $a = async('alice', "BEGIN ISOLATION LEVEL " . uc($iso) . "; SELECT dlock.try_lock('$r', 'slow', '1h')");
        # Wait until alice's insert is held up (its fence drawn).
        my $seen = 0;
        for (1 .. 500) {
            $seen = q1($su, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'alice' AND wait_event = 'PgSleep'");
            last if $seen;
            sleep 0.01;
        }
        ok($seen, "$label ($iso): the acquisition of a new resource is held up before its insert");
        my $b = conn('bob');
        $b->begin_work;
        my $fx = q1($b, "SELECT dlock.try_xact_lock('$r')");
        ok($fx, "$label ($iso): meanwhile an xact_lock takes it (no row yet)");
        $b->commit;
        q1($su, "SELECT pg_advisory_unlock(4242)");
        ok(wait_ready($a->[0], 20), "$label ($iso): the held-up acquisition ends");
        my $fa = eval { $a->[0]->pg_result; my $row = $a->[1]->fetchrow_arrayref; $row ? $row->[0] : undef };
        my $e = $a->[0]->err ? $a->[0]->state : '';
        eval { $a->[1]->finish };    # (after err: finish clears it)
        ok(($e eq '' && (!defined $fa || $fa > $fx)) || $e eq '40001',
           "$label ($iso): it gets NULL, 40001 or a fence above the xact lock's ("
           . ($e || ($fa // 'NULL')) . " vs $fx)");
        $a->[0]->do("ROLLBACK");
        $a->[0]->disconnect;
        $b->disconnect;
    }
    $_->disconnect for ($su, $admin);
    stop_server($s->[1], $dir);
}
done_testing();
