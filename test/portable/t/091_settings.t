# 091_settings.t: the caller's own settings (issue 33, "close the class"):
# every setting of pg_settings that any role may SET (context 'user', with
# plpgsql's once loaded) and dlock's own dlock.* settings, set one at a
# time to unusual values (each bool, each enum value, the minimum and the
# maximum of a number, chosen strings: search_path to a schema of planted
# functions and operators, time zones, date styles, encodings...), by the
# users alice and bob on fresh connections; then the core operations
# (try_lock, lock with wait, renew, unlock, unlock_all, xact_lock, check,
# assert_fence, shared, try_acquire, a fair ticket and withdraw, a session
# with a holding kept alive and closed, reap).
# The promises checked: fences strictly increasing across everything,
# exclusion, owner rules (bob cannot renew or unlock alice's holding),
# never-wait calls never reach the 5 s statement_timeout guard (unless
# the setting swept is statement_timeout itself), an acquisition raises
# synchronous_commit for its transaction, no planted object is ever
# called, and after each setting nothing is left: no advisory lock, no
# open transaction, no holding, no ticket, and a normal caller is served
# at once.  A setting that makes a call fail with a clear error passes
# when that holds.  Seeded (DLOCK_SEED): the order of the settings.
# Promises: P1 P2 P3 P4 P5 P6
use strict;
use warnings;
use Test::More;
use List::Util qw(shuffle);
use Time::HiRes qw(time);
use File::Basename ();
use lib File::Basename::dirname(__FILE__) . '/..';
use PortableTest;

my @servers = PortableTest::sweep_servers();    # Debian's, npm 14 and 18
plan skip_all => 'no PostgreSQL server binaries' unless @servers;
my $seed = $ENV{DLOCK_SEED} || int(rand(2**31));
diag("091_settings: seed $seed (DLOCK_SEED=$seed to repeat)");

my %strings = (
    search_path => ['planted, pg_catalog', 'planted', '"$user", planted', ''],
    TimeZone => ['Pacific/Kiritimati', 'America/St_Johns', '<-1245>+1245'],
    DateStyle => ['SQL, DMY', 'German', 'Postgres, YMD'],
    client_encoding => ['LATIN1', 'SQL_ASCII'],
    application_name => ["x' OR '1'='1"],
    default_text_search_config => ['pg_catalog.simple'],
    lc_monetary => ['POSIX'], lc_numeric => ['POSIX'], lc_time => ['POSIX'],
    default_tablespace => ['pg_global'],
    temp_tablespaces => ['pg_global'],
    restrict_nonsystem_relation_kind => ['view', 'foreign-table'],
    timezone_abbreviations => ['Australia', 'India'],
    default_table_access_method => ['heap'],
    local_preload_libraries => [''],
    'plpgsql.extra_errors' => ['all', 'shadowed_variables', 'strict_multi_assignment, too_many_rows'],
    'plpgsql.extra_warnings' => ['all'],
    'dlock.default_lease' => ['1ms', '1 hour', '999 years', '-1s', '0', 'garbage'],
    'dlock.lock_delay' => ['1h', '2h', '1ms', 'garbage'],
    'dlock.queue_ttl' => ['1ms', '1h', '2h', 'garbage'],
    'dlock.poll_interval' => ['1ms', '1h', '-5s', 'garbage'],
);
# Numbers whose extremes would take the statement guard away.
my %numbers = (
    statement_timeout => [1, 10, 100, 1000],
    lock_timeout => [1, 0, 2147483647],
    idle_in_transaction_session_timeout => [1, 2147483647],
    idle_session_timeout => [1, 2147483647],
);

my ($max, $n, %errors, %took) = (0, 0);

# sess: a connection of user with the statement guard and the setting.
sub sess {
    my ($user, $name, $value) = @_;
    my $h = conn($user);
    $h->{PrintWarn} = 0;        # client_min_messages = debug5 and others: quiet
    $h->do("SET statement_timeout = '5s'");
    my $ok = $h->selectrow_arrayref("SELECT set_config(?, ?, false)", undef, $name, $value);
    return { dbh => $h, user => $user, refused => $ok ? undef : ($h->state . ' ' . $h->errstr) };
}

# op: run a statement; {v => first column, e => "SQLSTATE message"}.
sub op {
    my ($s, $sql, @bind) = @_;
    my $h = $s->{dbh};
    my $row = eval { $h->selectrow_arrayref($sql, undef, @bind) };
    return { v => $row ? $row->[0] : undef, e => '' } if $row && !$h->err;
    my $e = ($h->state // 'none') . ' ' . (($h->errstr // $@ // '') =~ s/\n.*//sr);
    return { v => undef, e => $e };
}

sub tx {
    my ($s, $what) = @_;
    my $h = $s->{dbh};
    eval { $what eq 'begin' ? $h->begin_work : $what eq 'commit' ? $h->commit : $h->rollback; 1 } or return 0;
    return !$h->err;
}

sub fence_ok {
    my ($tag, $what, $r) = @_;
    return unless defined $r->{v};
    my $ok = $r->{v} > $max;
    ok($ok, "$label: $tag: ${what}'s fence $r->{v} above every earlier one ($max)") unless $ok;
    $max = $r->{v} if $r->{v} > $max;
    return 1;
}

sub answered {
    my ($tag, $what, $r, $timeouts_ok) = @_;
    return 1 unless $r->{e} =~ /^57014/ && !$timeouts_ok;
    fail("$label: $tag: $what waited past the 5 s guard ($r->{e})");
    return 0;
}

sub run_case {
    my ($obs, $name, $value) = @_;
    my $t0 = time;
    run_case1($obs, $name, $value);
    $took{"$name = '$value'"} = time - $t0;
}

sub run_case1 {
    my ($obs, $name, $value) = @_;
    $n++;
    my $tag = "$name = '$value'";
    my $r = "g$n";
    my $to = $name eq 'statement_timeout';
    my $A = sess('alice', $name, $value);
    my $B = sess('bob', $name, $value);
    my @pids = ($A->{dbh}{pg_pid}, $B->{dbh}{pg_pid});
    my @res;
    my $rec = sub { my ($what, $x) = @_; push @res, [$what, $x]; return $x };

    # Exclusive: try_lock inside a transaction (synchronous_commit raised).
    tx($A, 'begin');
    my $f1 = $rec->('try_lock', op($A, "SELECT dlock.try_lock(?, 'a', '1h')", $r));
    my $sync = op($A, "SELECT current_setting('synchronous_commit')");
    # (A failed statement after it rolls the acquisition back at COMMIT.)
    my $committed = tx($A, 'commit');
    my $held = !$sync->{e} && $committed && defined $f1->{v};
    answered($tag, 'try_lock', $f1, $to);
    if ($held) {
        fence_ok($tag, 'try_lock', $f1);
        ok($sync->{v} =~ /^(on|remote_apply)$/, "$label: $tag: an acquisition commits with synchronous_commit on")
            or diag("synchronous_commit: $sync->{v} $sync->{e}") if $sync->{v};
        my $row = q1($obs, "SELECT holder || ' ' || owner || ' ' || fence FROM dlock.locks WHERE resource = ?", $r);
        is($row, "a alice $f1->{v}", "$label: $tag: the holding is alice's, with its fence");
    }
    my $b1 = $rec->('bob try_lock', op($B, "SELECT dlock.try_lock(?, 'b', '1h')", $r));
    answered($tag, "bob's try_lock", $b1, $to);
    ok(!defined $b1->{v}, "$label: $tag: exclusion (bob's try_lock of alice's holding)") if $held;
    for my $call ("renew(?, 'a')", "unlock(?, 'a')") {
        my $x = $rec->("bob $call", op($B, "SELECT dlock.$call", $r));
        answered($tag, "bob's $call", $x, $to);
        ok(!defined $x->{v}, "$label: $tag: bob cannot $call alice's holding") or diag($x->{v}) if $held;
    }
    $rec->('renew', op($A, "SELECT dlock.renew(?, 'a')", $r));
    $rec->('check', op($A, "SELECT dlock.check(?, ?)", $r, $f1->{v} // 1));
    tx($A, 'begin');
    $rec->('assert_fence', op($A, "SELECT dlock.assert_fence(?, ?)", $r, $f1->{v} // 1));
    tx($A, 'rollback');
    my $u = $rec->('unlock', op($A, "SELECT dlock.unlock(?, 'a')", $r));
    my $f2 = $rec->('bob try_lock 2', op($B, "SELECT dlock.try_lock(?, 'b', '1h')", $r));
    answered($tag, "bob's second try_lock", $f2, $to);
    fence_ok($tag, "bob's try_lock", $f2);
    # A wait that times out, a fair ticket withdrawn.
    my $w = $rec->('lock wait', op($A, "SELECT dlock.lock(?, 'a2', '1h', '20ms')", $r));
    answered($tag, "lock(wait => 20ms)", $w, $to);
    ok(!defined $w->{v}, "$label: $tag: lock() does not get bob's holding") if defined $f2->{v};
    $rec->('fair try_lock', op($A, "SELECT dlock.try_lock(?, 'a3', '1h', fair => true)", $r));
    $rec->('withdraw', op($A, "SELECT dlock.withdraw(?, 'a3')", $r));
    # Transaction-scoped.
    tx($A, 'begin');
    my $x = $rec->('xact_lock', op($A, "SELECT dlock.xact_lock(?, '20ms')", "$r/x"));
    fence_ok($tag, 'xact_lock', $x);
    my $bx = op($B, "SELECT dlock.try_lock(?, 'b', '1h')", "$r/x");
    answered($tag, "bob's try_lock beside an xact_lock", $bx, $to);
    ok(!defined $bx->{v}, "$label: $tag: an xact_lock excludes a lease") if defined $x->{v} && $A->{dbh}->ping;
    tx($A, 'commit');
    $B->{dbh}->do("SELECT dlock.unlock(?, 'b')", undef, "$r/x");
    # Shared and semaphore.
    my $s1 = $rec->('shared', op($A, "SELECT dlock.try_lock(?, 'a', '1h', shared => true)", "$r/s"));
    my $s2 = $rec->('bob shared', op($B, "SELECT dlock.try_lock(?, 'b', '1h', shared => true)", "$r/s"));
    answered($tag, 'shared try_lock', $_, $to) for $s1, $s2;
    fence_ok($tag, 'shared', $_) for $s1, $s2;
    my $sx = op($B, "SELECT dlock.try_lock(?, 'c', '1h')", "$r/s");
    ok(!defined $sx->{v}, "$label: $tag: no exclusive holding beside shared ones") if defined $s1->{v};
    my $m1 = $rec->('try_acquire', op($A, "SELECT dlock.try_acquire(?, 'a', 2, 1, '1h')", "$r/m"));
    my $m2 = $rec->('bob try_acquire', op($B, "SELECT dlock.try_acquire(?, 'b', 2, 2, '1h')", "$r/m"));
    answered($tag, 'try_acquire', $_, $to) for $m1, $m2;
    fence_ok($tag, 'try_acquire', $_) for $m1, $m2;
    ok(!defined $m2->{v}, "$label: $tag: never more than max_permits") if defined $m1->{v};
    # Sessions ([sessions], portable 1.1): a holding in alice's session,
    # which bob can neither keep alive, close, nor take; closed with it.
    my $sid = $rec->('open_session', op($A, "SELECT dlock.open_session('1h', 'as')"));
    if (defined $sid->{v}) {
        my $q1 = $rec->('try_lock in a session', op($A, "SELECT dlock.try_lock(?, session => ?)", "$r/q", $sid->{v}));
        answered($tag, 'try_lock in a session', $q1, $to);
        fence_ok($tag, 'try_lock in a session', $q1);
        for my $call ("keepalive(?)", "close_session(?)") {
            my $x = op($B, "SELECT dlock.$call", $sid->{v});
            ok(!defined $x->{v}, "$label: $tag: bob cannot $call alice's session") or diag($x->{v});
        }
        my $bq = op($B, "SELECT dlock.try_lock(?, 'b', '1h')", "$r/q");
        answered($tag, "bob's try_lock of a session's holding", $bq, $to);
        ok(!defined $bq->{v}, "$label: $tag: exclusion (a session's holding)") if defined $q1->{v};
        $rec->('keepalive', op($A, "SELECT dlock.keepalive(?)", $sid->{v}));
        my $cl = $rec->('close_session', op($A, "SELECT dlock.close_session(?)", $sid->{v}));
        is($cl->{v}, 1, "$label: $tag: close_session releases its holding") if defined $q1->{v} && !$cl->{e};
    }
    $rec->('reap', op($A, "SELECT dlock.reap()"));
    $rec->('unlock_all', op($A, "SELECT dlock.unlock_all('a')"));
    op($B, "SELECT dlock.unlock_all('b')");
    op($B, "SELECT dlock.unlock_all('c')");

    # Errors: clear ones are fine; none from a planted object, none internal.
    for (@res) {
        my ($what, $x) = @$_;
        next unless $x->{e};
        unlike($x->{e}, qr/planted|^XX/, "$label: $tag: $what: no planted object called, no internal error");
        $errors{"$tag: $what: " . substr($x->{e}, 0, 90)}++;
    }
    # Nothing left: no advisory lock, no open transaction.
    is(q1($obs, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid IN (?, ?)", @pids), 0,
       "$label: $tag: no advisory lock left with the callers' sessions");
    is(q1($obs, "SELECT count(*) FROM pg_stat_activity WHERE pid IN (?, ?) AND state <> 'idle'", @pids), 0,
       "$label: $tag: no transaction left open");
    $_->{dbh}->disconnect for $A, $B;
    # Normal callers clean up what the calls left held (their right), then
    # nothing is held, queued or delayed, and each resource is served at once.
    my $na = conn('alice'); my $nb = conn('bob');
    $_->do("SET statement_timeout = '5s'") for $na, $nb;
    $na->do("SELECT dlock.unlock_all(h) FROM unnest('{a,a2,a3,as}'::text[]) h");
    $nb->do("SELECT dlock.unlock_all(h) FROM unnest('{b,c}'::text[]) h");
    is(q1($obs, "SELECT count(*) FROM dlock.locks WHERE resource LIKE ? || '%'", $r), 0, "$label: $tag: nothing held after");
    is(q1($obs, "SELECT count(*) FROM dlock.tickets WHERE resource LIKE ? || '%'", $r), 0, "$label: $tag: no ticket after");
    for my $res ($r, "$r/x", "$r/s", "$r/m", "$r/q") {
        my $f = op({ dbh => $na }, "SELECT dlock.try_lock(?, 'n', '1h')", $res);
        ok(defined $f->{v}, "$label: $tag: the next normal caller gets $res at once") or diag($f->{e});
        fence_ok($tag, 'the next caller', $f);
        $na->do("SELECT dlock.unlock(?, 'n')", undef, $res);
    }
    $_->disconnect for $na, $nb;
}

for my $s (@servers) {
    my ($dir, $admin) = start_server(@$s, 'settings');
    srand($seed);
    ($max, $n, %errors, %took) = (0, 0);
    my $obs = conn('admin', 'app');
    # Planted objects: functions and operators named as pg_catalog's, which
    # dlock's code would call if it followed the caller's search_path.
    $obs->do($_) or die $obs->errstr for
        "CREATE SCHEMA planted",
        "GRANT USAGE ON SCHEMA planted TO PUBLIC",
        (map { my ($f, $args, $ret) = @$_;
               "CREATE FUNCTION planted.$f($args) RETURNS $ret LANGUAGE plpgsql AS \$\$BEGIN RAISE EXCEPTION 'planted $f called'; END\$\$" }
         ['md5', 'text', 'text'], ['clock_timestamp', '', 'timestamptz'], ['now', '', 'timestamptz'],
         ['current_setting', 'text, boolean', 'text'], ['current_setting', 'text', 'text'],
         ['set_config', 'text, text, boolean', 'text'], ['nextval', 'regclass', 'bigint'],
         ['pg_try_advisory_xact_lock', 'bigint', 'boolean'], ['pg_backend_pid', '', 'integer'],
         ['to_regrole', 'text', 'regrole'], ['quote_ident', 'text', 'text'], ['substr', 'text, integer, integer', 'text'],
         ['hashtext', 'text', 'integer'], ['pg_notify', 'text, text', 'void'], ['to_json', 'anyelement', 'json'],
         ['texteq', 'text, text', 'boolean'], ['textcat', 'text, text', 'text'], ['greatest', 'bigint, bigint', 'bigint']),
        "CREATE OPERATOR planted.= (LEFTARG = text, RIGHTARG = text, FUNCTION = planted.texteq)",
        "CREATE OPERATOR planted.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = planted.textcat)";
    # The settings any role may set, as alice sees them (plpgsql loaded).
    my $alice = conn('alice');
    q1($alice, "SELECT dlock.session_holder()");
    my $rows = $alice->selectall_arrayref(
        "SELECT name, vartype, min_val, max_val, enumvals FROM pg_settings WHERE context = 'user' ORDER BY name");
    $alice->disconnect;
    my @cases;
    for my $row (@$rows) {
        my ($name, $type, $min, $max_, $enum) = @$row;
        my @v;
        if ($strings{$name}) { @v = @{$strings{$name}} }
        elsif ($numbers{$name}) { @v = @{$numbers{$name}} }
        elsif ($type eq 'bool') { @v = ('on', 'off') }
        elsif ($type eq 'enum') { @v = @$enum }
        elsif ($type eq 'integer' || $type eq 'real') { @v = ($min, $max_) }
        else { @v = ('') }
        push @cases, map { [$name, $_] } @v;
    }
    push @cases, map { my $k = $_; map { [$k, $_] } @{$strings{$k}} } grep { /^dlock\./ } sort keys %strings;
    my %names = map { $_->[0] => 1 } @cases;
    note("$label: " . scalar(@cases) . " values of " . scalar(keys %names) . " settings");
    ok(@cases > 200 && $names{search_path} && $names{default_transaction_isolation} && $names{'plpgsql.extra_errors'},
       "$label: the sweep covers the user settings (" . scalar(keys %names) . ")");
    # DLOCK_SETTING=name: replay the cases of one setting only.
    @cases = grep { $_->[0] eq $ENV{DLOCK_SETTING} } @cases if $ENV{DLOCK_SETTING};
    run_case($obs, @$_) for shuffle @cases;
    note("$label: clear errors (setting: call: error):\n" . join "\n", map { "  $_" } sort keys %errors);
    my @slow = (sort { $took{$b} <=> $took{$a} } keys %took)[0 .. 9];
    my $all = 0;
    $all += $_ for values %took;
    diag(sprintf("%s: %d cases in %.0f s; the slowest:\n", $label, scalar(keys %took), $all)
         . join "\n", map { sprintf("  %.2f s  %s", $took{$_}, $_) } grep { defined } @slow);
    $obs->disconnect;
    $admin->disconnect;
    stop_server($s->[1], $dir);
}
done_testing();
