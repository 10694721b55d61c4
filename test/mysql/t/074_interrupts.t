# 074_interrupts.t: an interrupted call leaves nothing held (issue 33, 3).
# Every routine, in autocommit mode and inside a transaction rolled back
# afterwards, interrupted at varied points: by max_statement_time swept
# from 1 microsecond up, and by KILL QUERY after a varied delay.  After
# each: no named lock anywhere (metadata_lock_info), none of the rows the
# call touched is locked (a NOWAIT read of its rows in dlock.leases,
# dlock.pins, dlock.gates and dlock.reapers), the next caller of another
# session acquires at once (max_statement_time = 5) a fence above every
# fence handed out before, and what the call left is a whole holding or
# none.  Seeded: DLOCK_SEED=N.
# Promises: P1 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(sleep);

my $seed = $ENV{DLOCK_SEED} // int(rand(1_000_000));
diag("seed $seed");
srand($seed);
my $my = DlockMy->new;
$my->do_root("INSTALL SONAME 'metadata_lock_info'");
my $root = $my->connect('root');
my $alice = $my->connect('alice');
my $bob = $my->connect('bob');
$bob->do('SET SESSION max_statement_time = 5');
my $alice_id = DlockMy::one($alice, 'SELECT CONNECTION_ID()');
my $max = 0;
my $n = 0;
my ($bad, $interrupted, $runs) = (0, 0, 0);

sub one { DlockMy::one(@_) }
sub fence_ok {
    my ($f, $what) = @_;
    return 1 unless defined $f;
    if ($f <= $max) { $bad++; diag("$what: fence $f not above $max"); return 0; }
    $max = $f;
    return 1;
}

# The routines, each: [name, setup(resource), call sql, binds(resource), in a transaction?]
my @routines = (
    ['try_lock new', sub { }, 'SELECT dlock.try_lock(?, ?, 60)', sub { ($_[0], 'ha') }],
    ['try_lock released', sub { one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'); one($alice, 'SELECT dlock.unlock(?, ?, NULL)', $_[0], 'ha') },
     'SELECT dlock.try_lock(?, ?, 60)', sub { ($_[0], 'ha') }],
    ['try_lock expired', sub { fence_ok(one($bob, 'SELECT dlock.try_lock(?, ?, 0.001)', $_[0], 'hb'), 'setup'); sleep 0.01 },
     'SELECT dlock.try_lock(?, ?, 60)', sub { ($_[0], 'ha') }],
    ['re-entry', sub { fence_ok(one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'), 'setup') },
     'SELECT dlock.try_lock(?, ?, 60)', sub { ($_[0], 'ha') }],
    ['lock busy', sub { fence_ok(one($bob, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'hb'), 'setup') },
     'CALL dlock.lock(?, ?, 60, 0.05)', sub { ($_[0], 'ha') }],
    ['lock free', sub { }, 'CALL dlock.lock(?, ?, 60, 1)', sub { ($_[0], 'ha') }],
    ['renew', sub { fence_ok(one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'), 'setup') },
     'SELECT dlock.renew(?, ?, 120, NULL)', sub { ($_[0], 'ha') }],
    ['unlock', sub { fence_ok(one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'), 'setup') },
     'SELECT dlock.unlock(?, ?, NULL)', sub { ($_[0], 'ha') }],
    ['unlock_all', sub { fence_ok(one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'), 'setup') },
     'SELECT dlock.unlock_all(?)', sub { ('ha') }],
    ['check_fence', sub { fence_ok(one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'), 'setup') },
     'SELECT dlock.check_fence(?, ?)', sub { ($_[0], $max) }],
    ['assert_fence', sub { fence_ok(one($alice, 'SELECT dlock.try_lock(?, ?, 60)', $_[0], 'ha'), 'setup') },
     'SELECT dlock.assert_fence(?, ?)', sub { ($_[0], $max) }, 1],
    ['xact_lock', sub { }, 'CALL dlock.xact_lock(?, 1)', sub { ($_[0]) }, 1],
    ['try_xact_lock', sub { }, 'SELECT dlock.try_xact_lock(?)', sub { ($_[0]) }, 1],
    ['try_lock in a transaction', sub { }, 'SELECT dlock.try_lock(?, ?, 60)', sub { ($_[0], 'ha') }, 1],
    ['reap', sub { for my $j (1 .. 3) { fence_ok(one($bob, 'SELECT dlock.try_lock(?, ?, 0.001)', "$_[0]/$j", 'hb'), 'setup') } sleep 0.01 },
     'CALL dlock.reap()', sub { () }],
);

# locked(resource): which of the call's rows another session finds locked.
sub locked {
    my ($r) = @_;
    my @l;
    for my $q (["leases", "SELECT 1 FROM dlock.leases WHERE resource = ? AND tail = 0 FOR UPDATE NOWAIT", $r],
               ["pins", "SELECT 1 FROM dlock.pins WHERE resource = ? AND tail = 0 FOR UPDATE NOWAIT", $r],
               ["gates", "SELECT 1 FROM dlock.gates WHERE slot = CRC32(?) % 4096 FOR UPDATE NOWAIT", $r],
               ["reapers", "SELECT 1 FROM dlock.reapers WHERE slot = CRC32(?) % 4096 FOR UPDATE NOWAIT", $r]) {
        my ($what, $sql, @b) = @$q;
        next if $what eq 'reapers' && !one($root, "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'dlock' AND TABLE_NAME = 'reapers'");
        my $ok = eval { $root->begin_work; $root->selectall_arrayref($sql, undef, @b); 1 };
        eval { $root->rollback };
        push @l, $what unless $ok;
    }
    return @l;
}

# after(name, resource): the checks after one interrupted (or not) call.
sub after {
    my ($name, $r, $err) = @_;
    my @why;
    my $named = one($root, "SELECT count(*) FROM information_schema.METADATA_LOCK_INFO WHERE LOCK_TYPE = 'User lock'");
    push @why, "$named named locks held" if $named;
    my @l = locked($r);
    @l = do { sleep 0.2; locked($r) } if @l;    # the dlock.reap event's own statement, not the call
    push @why, "rows locked: @l" if @l;
    my $g = eval { one($bob, 'SELECT dlock.try_lock(?, ?, 60)', "fresh/$n", 'hb') };
    push @why, 'the next caller was not served: ' . ($@ || 'NULL') unless $g;
    push @why, "fence $g not above $max" if $g && $g <= $max;
    $max = $g if $g && $g > $max;
    my $holding = $root->selectrow_hashref('SELECT holder, owner, count, fence, expires_at > UTC_TIMESTAMP(6) AS live FROM dlock.leases WHERE resource = ? AND tail = 0', undef, $r);
    if ($holding && defined $holding->{holder}) {
        push @why, 'a half holding' unless $holding->{owner} && $holding->{count} >= 1 && $holding->{fence};
    }
    if (@why) {
        $bad++;
        diag("$name ($err): @why");
    }
    eval { one($bob, 'SELECT dlock.unlock_all(?)', 'hb') };
    eval { one($alice, 'SELECT dlock.unlock_all(?)', 'ha') };
}

# run(routine, how): one call of it, interrupted by how->(sth) or not.
sub run {
    my ($rt, $limit, $kill_after) = @_;
    my ($name, $setup, $sql, $binds, $xact) = @$rt;
    $n++;
    my $r = "int/$n";
    $setup->($r);
    $alice->begin_work if $xact;
    my $err = 'none';
    my $v;
    if (defined $limit) {
        $alice->do("SET SESSION max_statement_time = $limit");
        $v = eval { $sql =~ /^CALL/ ? DlockMy::call_one($alice, $sql, $binds->($r)) : one($alice, $sql, $binds->($r)) };
        $err = ($alice->err // '') . '' if $@;
        $alice->do('SET SESSION max_statement_time = 0');
    } else {
        my $sth = $alice->prepare($sql, { mariadb_async => 1 });
        $sth->execute($binds->($r));
        sleep $kill_after;
        $root->do("KILL QUERY $alice_id");
        eval { $sth->mariadb_async_result; my $row = $sth->fetchrow_arrayref; $v = $row->[0] if $row; 1 while $sth->more_results; 1 }
            or $err = ($alice->err // '?') . '';
        eval { $alice->do('DO 1') };    # a kill that came after the call
    }
    $runs++;
    $interrupted++ if $err ne 'none';
    if ($err ne 'none' && $err !~ /^(1969|1317|1644|1927)$/) {
        $bad++;
        diag("$name: unexpected error $err: " . ($alice->errstr // ''));
    }
    $alice->rollback if $xact && $alice->{BegunWork};
    $max = $v if $v && $v =~ /^\d{12,}$/ && $v > $max;
    after($name, $r, $err);
}

for my $rt (@routines) {
    for my $i (0 .. 24) {
        my $t = sprintf '%.6f', 10 ** (-6 + 4.6 * ($i + rand()) / 25);
        run($rt, $t);
    }
    for my $i (0 .. 9) {
        run($rt, undef, rand() * 0.004);
    }
}
ok($interrupted > $runs / 4, "$interrupted of $runs calls interrupted");
is($bad, 0, 'after every interrupted call nothing was held, the next caller was served at once, fences increased');
done_testing;
