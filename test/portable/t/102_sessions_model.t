#!/usr/bin/perl
# 102_sessions_model.t: a seeded random walk over sessions and leases on the
# portable edition, each answer checked against a model: two roles open
# sessions with short ttls, keep them alive, close them, let them expire,
# and take holdings in them or with leases of their own; unlock, reap and
# the other role's keepalives mix in.  The model knows that a session's end
# ends all its holdings at that instant and that a keepalive never
# revives.  Each call is bracketed by the server's clock (t0, t1): what
# must hold at t0 and t1 is checked, the instant between is let go either
# way.  Checked: fences only grow per resource (re-entry keeps it), never
# two live holders, a free or ended resource is taken at once, keepalive
# and close answer NULL exactly for ended sessions, close releases exactly
# the session's holdings, acquisitions in an ended session raise 55000,
# other roles get 42501.
#
# DLOCK_PORTABLE_MAJORS as for 010_core.t; DLOCK_MODEL_SEED=N replays a
# walk (the seed is printed); DLOCK_SESSIONS_STEPS (default 400) its length.
# Promises: P1 P2 P4 P5
use strict;
use warnings;
use DBI;
use Time::HiRes qw(sleep);
use Test::More;

use FindBin;
use lib "$FindBin::RealBin/..";
use PortableTest;

my @servers = PortableTest::servers();
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

my $seed = $ENV{DLOCK_MODEL_SEED} // int(rand(2**31));
my $steps = $ENV{DLOCK_SESSIONS_STEPS} // 400;
diag("seed $seed (DLOCK_MODEL_SEED=$seed replays it)");

for my $srv (@servers) {
    my ($dir, $admin) = start_server(@$srv, 'smodel');
    srand($seed);
    my %c = (alice => conn('alice'), bob => conn('bob'));
    my (%sess, %hold, %last);  # model: sessions, holdings by resource, last fence by resource
    my @bad;
    my @res = map { "m/$_" } 1 .. 6;
    my $nl = 0;
    # call: (t0, value, t1, sqlstate) of one statement.
    my $call = sub {
        my ($who, $sql, @bind) = @_;
        my $dbh = $c{$who};
        my $t0 = $dbh->selectrow_array("SELECT extract(epoch FROM clock_timestamp())");
        my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
        my $state = $dbh->err ? $dbh->state : '';
        my $t1 = $dbh->selectrow_array("SELECT extract(epoch FROM clock_timestamp())");
        return ($t0, $row ? $row->[0] : undef, $t1, $state);
    };
    # exp: a holding's expiry (epoch) as bounds (lo, hi), 0 once its session
    # is closed.  A session's is exact (read from the server); a lease's
    # is known between t0 + lease and t1 + lease of the call that set it.
    # "Ended" is claimed only when hi has passed, "live" only while lo has not.
    my $exp = sub {
        my ($h) = @_;
        return ($h->{lease_lo}, $h->{lease_hi}) unless defined $h->{session};
        my $s = $sess{$h->{session}};
        return $s->{closed} ? (0, 0) : ($s->{exp}, $s->{exp});
    };
    my $bad = sub { push @bad, "step $_[0]: $_[1]" };
    for my $step (1 .. $steps) {
        my $op = int(rand(100));
        my @live = grep { !$sess{$_}{closed} } keys %sess;
        if ($op < 10 || !%sess) {                                     # open
            my $who = (qw(alice bob))[int(rand(2))];
            my $ttl = (200, 400, 800)[int(rand(3))];
            my $h = "S$step";
            my ($t0, $id, $t1, $st) = $call->($who, "SELECT dlock.open_session(?::interval, ?)", "$ttl ms", $h);
            my $e = $c{$who}->selectrow_array("SELECT extract(epoch FROM expires_at) FROM dlock.sessions WHERE id = ?", undef, $id);
            $sess{$id} = { who => $who, holder => $h, exp => $e, closed => 0 };
        } elsif ($op < 25) {                                          # keepalive
            my $id = (sort keys %sess)[int(rand(keys %sess))];
            my $s = $sess{$id};
            my $who = rand() < 0.1 ? ($s->{who} eq 'alice' ? 'bob' : 'alice') : $s->{who};
            my ($t0, $v, $t1, $st) = $call->($who, "SELECT extract(epoch FROM dlock.keepalive(?))", $id);
            if ($who ne $s->{who}) {
                $bad->($step, "another role's keepalive of $id: $st") unless $st eq '42501' || ($st eq '' && !defined $v);
                next;
            }
            if (defined $v) {
                $bad->($step, "keepalive revived $id") if $s->{closed} || $s->{exp} <= $t0;
                $s->{exp} = $v;
            } else {
                $bad->($step, "keepalive of live $id: NULL ($st)") if !$s->{closed} && $s->{exp} > $t1;
                $s->{exp} = 0 unless $s->{closed} || $s->{exp} > $t1;   # ended in [t0, t1]
            }
        } elsif ($op < 32) {                                          # close
            my $id = (sort keys %sess)[int(rand(keys %sess))];
            my $s = $sess{$id};
            my @mine = grep { defined $hold{$_}{session} && $hold{$_}{session} == $id } keys %hold;
            my ($t0, $n, $t1, $st) = $call->($s->{who}, "SELECT dlock.close_session(?)", $id);
            if (defined $n) {
                $bad->($step, "close of ended $id answered $n") if $s->{closed} || $s->{exp} <= $t0;
                $bad->($step, "close of $id released $n, the model has " . scalar(@mine)) if $n != @mine;
            } else {
                $bad->($step, "close of live $id: NULL ($st)") if !$s->{closed} && $s->{exp} > $t1;
            }
            $s->{closed} = 1;
            delete $hold{$_} for @mine;
        } elsif ($op < 75) {                                          # acquire
            my $r = $res[int(rand(@res))];
            my ($who, $holder, $sid, $sql, @bind);
            if (@live && rand() < 0.7) {
                $sid = $live[int(rand(@live))];
                ($who, $holder) = ($sess{$sid}{who}, $sess{$sid}{holder});
                ($sql, @bind) = ("SELECT dlock.try_lock(?, session => ?)", $r, $sid);
            } else {
                $who = (qw(alice bob))[int(rand(2))];
                $holder = "L" . int(rand(3)) . $who;
                ($sql, @bind) = ("SELECT dlock.try_lock(?, ?, ?::interval)", $r, $holder, (300, 600)[int(rand(2))] . " ms");
            }
            my $h = $hold{$r};
            my ($hlo, $hhi) = $h ? $exp->($h) : (0, 0);
            my ($t0, $f, $t1, $st) = $call->($who, $sql, @bind);
            if ($st eq '55000') {
                my $s = $sess{$sid // 0};
                if (!defined $sid) {
                    $bad->($step, "55000 for a leased try_lock of $r");
                } elsif ($h && $h->{holder} eq $holder && $h->{who} eq $who
                         && (defined $h->{session} ? $h->{session} : -1) != $sid && $hhi > $t0) {
                    # re-entry another way than taken: 55000 is right
                } elsif (!$s->{closed} && $s->{exp} > $t1) {
                    $bad->($step, "55000 for live session $sid");
                } else {
                    $s->{exp} = 0 unless $s->{closed};
                }
                next;
            }
            $bad->($step, "try_lock error $st") if $st;
            my $same = $h && $h->{holder} eq $holder && $h->{who} eq $who
                       && (defined $h->{session} ? $h->{session} : -1) == (defined $sid ? $sid : -1);
            if (defined $f) {
                if ($same && $hhi > $t0 && $f == $h->{fence}) {
                    $h->{count}++;
                    if (!defined $sid) {      # extended to at least now + lease (t0 <= now <= t1)
                        my $lease = $bind[2] =~ /^(\d+)/ ? $1 / 1000 : 0;
                        $h->{lease_lo} = $t0 + $lease if $t0 + $lease > $h->{lease_lo};
                        $h->{lease_hi} = $t1 + $lease if $t1 + $lease > $h->{lease_hi};
                    }
                    next;
                }
                $bad->($step, "$r taken by $holder while held live by $h->{holder}") if $h && $hlo > $t1;
                $bad->($step, "$r fence $f not above $last{$r}") if defined $last{$r} && $f <= $last{$r};
                $last{$r} = $f;
                my ($lo, $hi);
                if (!defined $sid) {       # taken at the server's now, in [t0, t1]
                    my $lease = $bind[2] =~ /^(\d+)/ ? $1 / 1000 : 0;
                    ($lo, $hi) = ($t0 + $lease, $t1 + $lease);
                }
                $hold{$r} = { holder => $holder, who => $who, session => $sid, lease_lo => $lo, lease_hi => $hi,
                              fence => $f, count => 1 };
            } else {
                $bad->($step, "$r refused to $holder though " . ($h ? "its holding ended" : "free"))
                    if !$h || $hhi <= $t0;
            }
        } elsif ($op < 90) {                                          # unlock
            my @held = sort keys %hold;
            next unless @held;
            my $r = $held[int(rand(@held))];
            my $h = $hold{$r};
            my ($hlo, $hhi) = $exp->($h);
            my ($t0, $n, $t1, $st) = $call->($h->{who}, "SELECT dlock.unlock(?, ?)", $r, $h->{holder});
            $bad->($step, "unlock error $st") if $st;
            if (defined $n) {
                $bad->($step, "unlock of ended $r answered $n") if $hhi <= $t0;
                $bad->($step, "unlock of $r left $n, the model $h->{count} - 1") if $n != $h->{count} - 1;
                $h->{count} = $n;
                delete $hold{$r} if $n == 0;
            } else {
                $bad->($step, "unlock of live $r: NULL") if $hlo > $t1;
                delete $hold{$r};
            }
        } elsif ($op < 95) {                                          # reap
            my ($t0, $n, $t1, $st) = $call->('alice', "SELECT dlock.reap()");
            $bad->($step, "reap error $st") if $st;
        } else {                                                      # time passes
            sleep(rand(0.3));
        }
        # Never two live holders, as the server shows them.
        my $dup = $c{alice}->selectrow_array(
            "SELECT count(*) FROM (SELECT resource FROM dlock.locks WHERE NOT expired AND holder IS NOT NULL"
            . " GROUP BY resource HAVING count(*) > 1) x");
        $bad->($step, "$dup resources with two live holders") if $dup;
    }
    is(scalar(@bad), 0, "$label: $steps steps (seed $seed), every answer as the model allows") or diag(join "\n", @bad[0 .. ($#bad < 20 ? $#bad : 19)]);
    my $n = $c{alice}->selectrow_array("SELECT count(*) FROM dlock.sessions");
    ok(defined $n, "$label: the walk left $n sessions listed");
    $_->disconnect for values %c;
    $admin->disconnect;
    stop_server($srv->[1], $dir);
}
done_testing();
