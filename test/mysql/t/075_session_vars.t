# 075_session_vars.t: no session variable a user may set breaks a promise
# (issue 33, "close the class").  Every variable of
# information_schema.SYSTEM_VARIABLES with session scope, set by alice (no
# rights but the routines'), one at a time, to unusual values: numbers at
# their minimum, maximum and a seeded value between; every value of an
# enum; each flag of a set alone, none and all; odd time zones, character
# sets, collations, locales.  Then alice runs the core operations (try_lock,
# re-entry, lock with a wait, renew, check_fence, assert_fence, unlock,
# unlock_all, xact_lock twice in a transaction, try_xact_lock, reap, and
# another user's holding), and bob checks: fences strictly increasing and
# near the clock, bob's holding excluded and refused to her (42501),
# never-wait calls do not wait (max_statement_time = 5 unless that is the
# variable), her own calls answer as documented, or with a clear error
# (a SQLSTATE), after which nothing is held: once her connection is gone
# every resource she touched is acquired at once.  Seeded: DLOCK_SEED=N.
# Promises: P1 P2 P4 P5
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(time sleep);

my $seed = $ENV{DLOCK_SEED} // int(rand(1_000_000));
diag("seed $seed");
srand($seed);
my $my = DlockMy->new;
my $root = $my->connect('root');
my $bob = $my->connect('bob');
$bob->do('SET SESSION max_statement_time = 5');
my $clean = $my->connect('alice');
$clean->do('SET SESSION max_statement_time = 5');
sub one { DlockMy::one(@_) }

# Known defects left as a TODO, not a failure (none now: issue 33's 7,
# system_versioning_asof, is fixed by _xid's FOR SYSTEM_TIME ALL read).
my %todo = ();

my %special = (
    time_zone => ["'+14:00'", "'-12:59'", "'+00:00'", 'SYSTEM', "'+05:45'"],
    timestamp => [1, 2147483647, 1000000000.999999],
    max_statement_time => ['0.000001', '0.0001', '0.002'],
    character_set_connection => ['latin1', 'binary', 'utf16', 'ascii', 'utf32'],
    character_set_client => ['latin1', 'binary', 'ascii'],
    character_set_results => ['latin1', 'binary', 'utf16', 'NULL'],
    collation_connection => ['latin1_swedish_ci', 'utf8mb4_general_ci', 'binary', 'utf8mb4_nopad_bin', 'utf16_bin'],
    lc_time_names => ['ja_JP', 'ar_SA'],
    lc_messages => ['ja_JP', 'de_DE'],
    system_versioning_asof => ["'1970-01-01 00:00:01'", "'2038-01-01 00:00:00'"],
    insert_id => [1, '9223372036854775807', '18446744073709551615'],
    last_insert_id => [1, '18446744073709551615'],
    identity => [1, '18446744073709551615'],
);

# values(row): the values to try for one variable.
sub values_for {
    my ($v) = @_;
    my $name = lc $v->{VARIABLE_NAME};
    return @{ $special{$name} } if $special{$name};
    my $t = $v->{VARIABLE_TYPE};
    my @list = split /,/, ($v->{ENUM_VALUE_LIST} // '');
    if ($t eq 'BOOLEAN') { return ('ON', 'OFF'); }
    if ($t eq 'ENUM') { return map { "'$_'" } @list; }
    if ($t eq 'SET') { return ("''", (map { "'$_'" } @list), "'" . join(',', @list) . "'"); }
    if ($t eq 'FLAGSET') {
        my @f = grep { $_ ne 'default' } @list;
        return ("'" . join(',', map { "$_=off" } @f) . "'", "'" . join(',', map { "$_=on" } @f) . "'");
    }
    if ($t =~ /INT|DOUBLE/) {
        my ($lo, $hi) = ($v->{NUMERIC_MIN_VALUE}, $v->{NUMERIC_MAX_VALUE});
        my @x = ($lo, $hi);
        push @x, ($t =~ /DOUBLE/ ? $lo + rand() * ($hi - $lo) : int($lo + rand() * ($hi - $lo < 1e15 ? $hi - $lo : 1e15)))
            if defined $lo && defined $hi;
        return grep { defined } @x;
    }
    return ("''", "'x'");
}

my $vars = $root->selectall_arrayref(
    "SELECT VARIABLE_NAME, VARIABLE_TYPE, NUMERIC_MIN_VALUE, NUMERIC_MAX_VALUE, ENUM_VALUE_LIST
       FROM information_schema.SYSTEM_VARIABLES
      WHERE VARIABLE_SCOPE IN ('SESSION', 'SESSION ONLY') AND READ_ONLY = 'NO'
      ORDER BY VARIABLE_NAME", { Slice => {} });
my %names = map { lc($_->{VARIABLE_NAME}) => 1 } @$vars;
push @$vars, map { { VARIABLE_NAME => $_ } } grep { !$names{$_} } sort keys %special;

my $max = 0;
my ($pairs, $settable, $clean_errors) = (0, 0, 0);
my $i = 0;
my $now_ms = sub { int((time - 1577836800) * 1000) };

# fence(f, what, why): f must be above every fence before and near the clock.
sub fence {
    my ($f, $what, $why) = @_;
    return unless defined $f && $f ne '';
    if ($f !~ /^\d+$/) { push @$why, "$what: not a fence: $f"; return; }
    push @$why, "$what: fence $f not above $max" if $f <= $max;
    push @$why, "$what: fence $f far from the clock" if abs(($f >> 22) - $now_ms->()) > 600_000;
    $max = $f if $f > $max;
}

for my $v (@$vars) {
    my $name = lc $v->{VARIABLE_NAME};
    for my $val (values_for($v)) {
        $i++;
        $pairs++;
        my $o = $my->connect('alice');
        $o->do('SET SESSION max_statement_time = 5');
        next unless eval { $o->do("SET SESSION $name = $val"); 1 };
        $settable++;
        my @why;
        my $p = "sw/$i";
        my %err;
        my $hex = sub { unpack 'H*', $_[0] };
        # call(key, sql, args...): alice's call; the result, or undef with the
        # error kept in %err (a clear error: one with a SQLSTATE).
        my $call = sub {
            my ($key, $sql, @args) = @_;
            my $res;
            # Variables that change only how results reach the client: the
            # result is kept in a user variable and read with it reset.
            my $via = $name =~ /^(sql_select_limit|character_set_results)$/;
            if ($via && $sql =~ /^CALL/ && $name eq 'character_set_results') {
                eval { my $sth = $o->prepare($sql); $sth->execute; 1 while $sth->more_results; 1 }
                    or $err{$key} = ($o->err // '') . '/' . ($o->state // '');
                $err{$key} //= 'unread';
                return undef;
            }
            if ($via && $sql =~ /^SELECT (.*)$/s) {
                my $ok = eval { $o->do("SET \@dlock_t = $1"); 1 };
                if ($ok) {
                    $o->do("SET SESSION $name = DEFAULT");
                    $res = one($o, 'SELECT @dlock_t');
                    $o->do("SET SESSION $name = $val");
                    return $res;
                }
                $sql = "SET \@dlock_t = $1";
            }
            my $ok = eval {
                my $sth = $o->prepare($sql);
                $sth->execute(@args);
                my $row = $sth->{NUM_OF_FIELDS} ? $sth->fetchrow_arrayref : undef;
                $res = $row ? $row->[0] : undef;
                $res =~ s/\0//g if defined $res;
                $sth->finish;
                1 while $sth->more_results;
                1;
            };
            if (!$ok) {
                my ($state, $code) = ($o->state // '', $o->err // '');
                $err{$key} = "$code/$state";
                push @why, "$key: waited (error $code)" if ($code == 1969 || $code == 1205) && $name ne 'max_statement_time'
                    && $key !~ /^(renew|unlock|unlock_all|assert)/;
                push @why, "$key: an error without a SQLSTATE: " . ($o->errstr // $@) if $state eq '' || $state eq '00000';
            }
            return $res;
        };
        my $R = sub { ("UNHEX('" . $hex->("$p/$_[0]") . "')") };
        my $H = "UNHEX('" . $hex->('ho') . "')";
        my $HB = "UNHEX('" . $hex->('hb') . "')";

        # bob holds one resource.
        my $fb = one($bob, 'SELECT dlock.try_lock(?, ?, 600)', "$p/busy", 'hb');
        fence($fb, 'bob', \@why);
        my $x = $call->('busy', "SELECT dlock.try_lock(" . $R->('busy') . ", $H, 30)");
        push @why, "alice acquired bob's resource ($x)" if defined $x;
        my $f1 = $call->('try_lock', "SELECT dlock.try_lock(" . $R->('a') . ", $H, 30)");
        fence($f1, 'try_lock', \@why);
        push @why, 'try_lock of a free resource: NULL' if !defined $f1 && !$err{try_lock};
        if (defined $f1) {
            my $f2 = $call->('reenter', "SELECT dlock.try_lock(" . $R->('a') . ", $H, 30)");
            push @why, "re-entry: $f2, not $f1" if !$err{reenter} && (!defined $f2 || $f2 ne $f1);
            my $e = $call->('renew', "SELECT dlock.renew(" . $R->('a') . ", $H, 40, NULL)");
            push @why, 'renew of her holding: NULL' if !$err{renew} && !defined $e;
            my $c = $call->('check', "SELECT dlock.check_fence(" . $R->('a') . ", $f1)");
            push @why, "check_fence of her fence: " . ($c // 'NULL') if !$err{check} && !($c // 0);
            my $a = $call->('assert', "SELECT dlock.assert_fence(" . $R->('a') . ", $f1)");
            push @why, 'assert_fence of her fence refused' if !$err{assert} && !$a;
            my $u1 = $call->('unlock', "SELECT dlock.unlock(" . $R->('a') . ", $H, NULL)");
            my $u2 = $call->('unlock2', "SELECT dlock.unlock(" . $R->('a') . ", $H, NULL)");
            # A re-entry cut off by the setting (max_statement_time) added
            # no count: then the first unlock leaves 0 and the second finds
            # nothing (NULL).
            my @want = $err{reenter} ? (0, undef) : (1, 0);
            push @why, 'unlock counts: ' . join('/', map { $_ // 'NULL' } $u1, $u2)
                . ($err{reenter} ? ' after a failed re-entry' : '')
                if !$err{unlock} && !$err{unlock2}
                && !(defined $u1 && $u1 == $want[0] && (defined $want[1] ? defined $u2 && $u2 == $want[1] : !defined $u2));
        }
        my $fl = $call->('lock', "CALL dlock.lock(" . $R->('b') . ", $H, 30, 1)");
        fence($fl, 'lock', \@why);
        push @why, 'lock of a free resource: NULL' if !defined $fl && !$err{lock};
        my $n = $call->('unlock_all', "SELECT dlock.unlock_all($H)");
        push @why, 'unlock_all: ' . ($n // 'NULL') . ', not 1' if defined $fl && !$err{unlock_all} && !(defined $n && $n == 1);
        # bob's holding: refused to her.
        my $rb = $call->('renew_bob', "SELECT dlock.renew(" . $R->('busy') . ", $HB, 60, NULL)");
        push @why, "renewed bob's holding" if defined $rb;
        my $ub = $call->('unlock_bob', "SELECT dlock.unlock(" . $R->('busy') . ", $HB, NULL)");
        push @why, "released bob's holding" if defined $ub;
        # xact_lock twice in one transaction, then try_xact_lock.
        my $tx = eval { $o->begin_work; 1 };
        my $fx = $call->('xact_lock', "CALL dlock.xact_lock(" . $R->('x') . ", 1)");
        fence($fx, 'xact_lock', \@why);
        if (defined $fx) {
            my $fy = $call->('xact_again', "CALL dlock.xact_lock(" . $R->('x') . ", 1)");
            my $fz = $call->('try_xact', "SELECT dlock.try_xact_lock(" . $R->('x') . ")");
            TODO: {
                local $TODO = $todo{$name};
                my $same = (!defined $fy || $fy eq $fx) && (!defined $fz || $fz eq $fx) && (defined $fy || $err{xact_again}) && (defined $fz || $err{try_xact});
                if (!$same) {
                    if ($todo{$name}) { fail("$name = $val: xact_lock again: " . join('/', map { $_ // 'NULL' } $fx, $fy, $fz)); }
                    else { push @why, 'xact_lock again: ' . join('/', map { $_ // 'NULL' } $fx, $fy, $fz); }
                }
            }
            fence($fy, 'xact_again', \@why) if defined $fy && $fy ne $fx;
        }
        eval { $o->rollback } if $tx;
        $call->('reap', 'CALL dlock.reap()');

        # Her connection gone: nothing of hers is held; every resource she
        # touched is bob's at once; bob's holding was not changed.
        $o->disconnect;
        my $left = eval { one($clean, "SELECT dlock.unlock_all('ho')") } // 'error';
        $clean_errors++ if $left eq 'error';
        for my $r ('a', 'b', 'x', 'new') {
            my $g = eval { one($bob, 'SELECT dlock.try_lock(?, ?, 60)', "$p/$r", 'hc') };
            push @why, "afterwards $p/$r not acquired at once: " . ($@ ? $bob->errstr : 'NULL') unless $g;
            fence($g, "bob $r", \@why);
        }
        my $still = one($bob, 'SELECT dlock.check_fence(?, ?)', "$p/busy", $fb);
        push @why, "bob's holding was lost" unless $still;
        eval { one($bob, "SELECT dlock.unlock_all('hc')"); one($bob, "SELECT dlock.unlock_all('hb')") };
        my $errs = join ' ', map { "$_=$err{$_}" } sort keys %err;
        ok(!@why, "$name = $val" . ($errs ? " (errors: $errs)" : '')) or diag(join "\n", @why);
    }
}
diag("$settable of $pairs settings accepted from an unprivileged user");
ok($settable > 200, "$settable settings swept");
is($clean_errors, 0, 'the cleaning calls never failed');
done_testing;
