#!/usr/bin/perl
# 060_cli.t: the README's quick start and the dlock CLI (cli/dlock, built by
# test/run-tests.sh; DLOCK_CLI overrides) against the portable edition, as a
# new user on a managed service would: no superuser anywhere, the schema
# installed with psql -f by the role that owns the database, everything
# else done by another ordinary role.  On every server 010_core.t uses:
# - the SQL of "Getting started" (README.md, read from it), run with psql
#   as alice: its output is the README's output block, the row is written,
#   nothing stays held, and the released fence is refused afterwards;
# - [kinds]: run --shared, run --semaphore N --permits K, run R1 R2 R3 --;
# - --version (the client's version and the portable edition's, no warning
#   that the extension is missing), try, lock, renew, status, unlock, reap,
#   watch (the release event);
# - run: COMMAND's status and environment (DLOCK_FENCE the holding's
#   fence), a second run on the held resource refused (--wait 0: 75) or
#   waiting until the first ends (then a greater fence), the lease lost
#   (break_lock by the database owner: COMMAND stopped, exit 76, the
#   resource free), --fair, --poll;
# - elect: COMMAND leads with DLOCK_ELECTION, DLOCK_TERM, DLOCK_VALUE and
#   resigns when it exits; observe prints the leader;
# - a SERIALIZABLE default: four run loops at once, none fails.
#
# The CLI is one client whatever the major, and 010-050 test the SQL it
# calls on every major: this runs on Debian's server and on the oldest and
# newest npm majors (14, 18), or on those DLOCK_PORTABLE_MAJORS names (as
# for 010_core.t).
# Promises: P15
use strict;
use warnings;
use DBI;
use File::Temp qw(tempdir);
use IPC::Run;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time sleep);
use Test::More;

my $top = $ENV{DLOCK_TOP} // do { my $d = __FILE__; $d =~ s{/test/portable/t/[^/]*$}{}; $d eq __FILE__ ? '.' : $d };
$top = `cd '$top' && pwd`; chomp $top;
my $script = "$top/portable/dlock.sql";
my $cache = $ENV{DLOCK_PORTABLE_CACHE} // '/var/cache/dlock-portable';
my $debian_major = $ENV{DLOCK_PG_MAJOR} // 15;
my $client = "/usr/lib/postgresql/$debian_major/bin";
my $cli = $ENV{DLOCK_CLI} // "$top/cli/dlock";
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;

my @servers;
my %want = map { $_ => 1 } split ' ', ($ENV{DLOCK_PORTABLE_MAJORS} // '');
push @servers, ["Debian $debian_major", "/usr/lib/postgresql/$debian_major/bin"]
    if -x "/usr/lib/postgresql/$debian_major/bin/postgres" && (!%want || $want{debian} || $want{$debian_major});
for my $n (14 .. 18) {
    next if %want ? !$want{$n} : $n != 14 && $n != 18;
    push @servers, ["npm $n", "$cache/$n/bin"] if -x "$cache/$n/bin/postgres";
}
plan skip_all => "no PostgreSQL server found (run test/portable/servers.sh)" unless @servers;

# The client's version, as dlock.control says (the CLI is built with it).
my ($client_version) = `cat $top/dlock.control` =~ /default_version\s*=\s*'([^']+)'/;
# The portable edition's version, as its script records it.
my ($portable_version) = `cat $script` =~ /INSERT INTO dlock\.portable \(version, installed_at\) VALUES \('([^']+)'/;
# The quick start: the SQL block of "Getting started" and its output block.
my ($quick_sql, $quick_out) = do {
    open my $fh, '<', "$top/README.md" or die "README.md: $!";
    my $text = do { local $/; <$fh> };
    $text =~ /^## Getting started\n+```sql\n(.*?)^```\n+```output\n(.*?)^```/ms
        or die "README.md: no Getting started SQL with its output";
    ($1, $2);
};

my ($label, $sock, $tmp);

for my $s (@servers) {
    run_server(@$s);
}
done_testing();

sub conn { my ($user, $app) = @_; return "host=$sock dbname=app user=$user application_name=" . ($app // 'dlock_test'); }

sub dbh {
    my ($user) = @_;
    my $dbh = DBI->connect("dbi:Pg:dbname=app;host=$sock", $user, '',
        { AutoCommit => 1, RaiseError => 0, PrintError => 0, AutoInactiveDestroy => 1 })
        or die "connect $user: $DBI::errstr";
    return $dbh;
}

sub q1 {
    my ($dbh, $sql, @bind) = @_;
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    die "$label: $sql: " . $dbh->errstr . "\n" if $dbh->err;
    return $row ? $row->[0] : undef;
}

# cli ARGS: run the CLI to its end as alice: (exit code, stdout, stderr).
sub cli {
    my @args = @_;
    my ($out, $err) = ('', '');
    IPC::Run::run([$cli, '-d', conn('alice'), @args], '<', \undef, '>', \$out, '2>', \$err,
        IPC::Run::timeout(120));
    return (code_of($?), $out, $err);
}

sub code_of { my ($st) = @_; return WIFSIGNALED($st) ? 128 + WTERMSIG($st) : WEXITSTATUS($st); }

# spawn NAME CMD...: start CMD with output to $tmp/NAME.{out,err}; its pid.
sub spawn {
    my ($name, @cmd) = @_;
    my $pid = fork() // die "fork: $!";
    if ($pid == 0) {
        open(STDIN, '<', '/dev/null');
        open(STDOUT, '>', "$tmp/$name.out");
        open(STDERR, '>', "$tmp/$name.err");
        exec(@cmd) or POSIX::_exit(127);
    }
    return $pid;
}

sub wait_exit {
    my ($pid, $secs) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) {
        return code_of($?) if waitpid($pid, WNOHANG) == $pid;
        sleep 0.02;
    }
    kill 'KILL', $pid;
    waitpid($pid, 0);
    return undef;
}

sub slurp { my ($f) = @_; open my $fh, '<', $f or return ''; local $/; return <$fh>; }

# until_true SECS CODE: poll CODE every 20 ms until it is true (bounded).
sub until_true {
    my ($secs, $code) = @_;
    my $deadline = time + $secs;
    while (time < $deadline) { return 1 if $code->(); sleep 0.02; }
    return 0;
}

sub run_server {
    my $bindir;
    ($label, $bindir) = @_;
    my $dir = tempdir("dlock-pcli-XXXXXX", TMPDIR => 1, CLEANUP => 1);
    $sock = $tmp = $dir;
    my $out = `$bindir/initdb -D $dir/data -U admin --auth=trust --no-locale -E UTF8 -N 2>&1`;
    die "initdb: $out" if $?;
    $out = `$bindir/pg_ctl -D $dir/data -l $dir/server.log -w -o "-k $dir -c listen_addresses='' -c fsync=off" start 2>&1`;
    die "pg_ctl: $out" if $?;
    note("=== $label");
    # The only superuser work: the roles and the database, as a managed
    # service's console makes them.
    $out = `$client/psql -X -q -h $dir -U admin -d postgres -c "CREATE ROLE dbo LOGIN" -c "CREATE ROLE alice LOGIN" -c "CREATE DATABASE app OWNER dbo" 2>&1`;
    die "setup: $out" if $?;
    $out = `$client/psql -X -q -h $dir -U dbo -d app -f $script 2>&1`;
    is($?, 0, "$label: psql -f portable/dlock.sql as the database owner") or diag($out);
    my $dbo = dbh('dbo');
    # The quick start creates its own table, as a user would in her schema.
    $out = `$client/psql -X -q -h $dir -U admin -d app -c "GRANT CREATE ON SCHEMA public TO alice" 2>&1`;
    die "grant: $out" if $?;

    quick_start();
    commands($dbo);
    run_cmd($dbo);
    kinds($dbo);
    elect($dbo);
    serializable($dbo);
    is(q1($dbo, "SELECT string_agg(resource, ',') FROM dlock.locks"), undef,
       "$label: every command released what it took");

    $dbo->disconnect;
    `$bindir/pg_ctl -D $dir/data -m fast -w stop 2>&1`;
}

# The SQL of "Getting started", run with psql as alice, as a user would.
sub quick_start {
    my ($out, $err) = ('', '');
    IPC::Run::run(["$client/psql", '-X', '-q', '-h', $sock, '-U', 'alice', '-d', 'app'],
        '<', \"$quick_sql\n\\echo fence :fence\n", '>', \$out, '2>', \$err, IPC::Run::timeout(60));
    my ($fence) = $out =~ s/^fence (\d+)\n\z//m ? ($1) : ();
    $out =~ s/\n+\z/\n/;   # psql ends each result with a blank line
    like($fence // '', qr/^\d+$/, "$label: quick start: try_lock gave a fence");
    is($out, $quick_out, "$label: quick start: psql prints the README's output block");
    is($err, '', "$label: quick start: no error or notice") or diag($err);
    my $al = dbh('alice');
    is(q1($al, "SELECT count(*) FROM report"), 1, "$label: quick start: the fenced write is there");
    is(q1($al, "SELECT count(*) FROM dlock.locks WHERE resource = 'nightly-report'"), 0,
       "$label: quick start: nothing left held");
    # The same assert_fence after the release refuses the stale fence.
    $al->do("BEGIN");
    ok(!defined $al->do("SELECT dlock.assert_fence('nightly-report', ?)", undef, $fence)
       && $al->state eq '55P03', "$label: quick start: the released fence is refused (55P03)");
    $al->do("ROLLBACK");
    $al->disconnect;
}

# --version, try, lock, renew, status, unlock, reap, watch.
sub commands {
    my ($dbo) = @_;
    my $al = dbh('alice');   # sees the query text of alice's own sessions
    my ($rc, $out, $err) = cli('--version');
    is($rc, 0, "$label: --version exits 0");
    like($out, qr/^dlock \Q$client_version\E$/m, "$label: --version prints the client's version");
    like($out, qr/^server portable edition dlock \Q$portable_version\E \(SQL only\)$/m,
         "$label: --version prints the portable edition's version");
    unlike($err, qr/not installed/, "$label: --version does not say dlock is missing") or diag($err);

    ($rc, $out, $err) = cli('try', 'one', '--holder', 'h1', '--lease', '30s');
    is($rc, 0, "$label: try acquires") or diag($err);
    my ($f) = $out =~ /^(\d+)$/;
    ok($f, "$label: try prints the fence");
    ($rc) = cli('try', 'one', '--holder', 'h2');
    is($rc, 75, "$label: try on a held resource: 75");
    ($rc, $out) = cli('renew', 'one', '--holder', 'h1', '--lease', '40s', '--fence', $f);
    is($rc, 0, "$label: renew");
    like($out, qr/^\d{4}-\d\d-\d\d/, "$label: renew prints the expiry");
    ($rc) = cli('renew', 'one', '--holder', 'h2');
    is($rc, 76, "$label: renew by another holder: 76");
    ($rc, $out) = cli('status');
    is($rc, 0, "$label: status");
    like($out, qr/^one\s+\|\s*h1\s*\|\s*1\s*\|\s*$f\s*\|/m, "$label: status lists the holding");
    ($rc, $out) = cli('unlock', 'one', '--holder', 'h1', '--fence', $f);
    is("$rc $out", "0 0\n", "$label: unlock prints 0");
    ($rc) = cli('unlock', 'one', '--holder', 'h1');
    is($rc, 76, "$label: unlock of a lock not held: 76");

    # lock waits for an expiry; reap frees an expired lease
    q1($dbo, "SELECT dlock.try_lock('exp', 'dead', '1s')");
    ($rc, $out) = cli('lock', 'exp', '--wait', '30s', '--holder', 'me', '--lease', '30s');
    is($rc, 0, "$label: lock waits for an expiry and acquires");
    is(q1($dbo, "SELECT holder FROM dlock.locks WHERE resource = 'exp'"), 'me', "$label: ... held by me");
    ($rc) = cli('lock', 'exp', '--wait', '200ms', '--holder', 'you');
    is($rc, 75, "$label: lock times out: 75");
    ($rc, $out) = cli('unlock', 'exp', '--holder', 'me');
    is("$rc $out", "0 0\n", "$label: unlock after lock");
    q1($dbo, "SELECT dlock.try_lock('expired/' || i, 'dead', '10ms') FROM generate_series(1, 2) i");
    sleep 0.05;
    ($rc, $out) = cli('reap');
    is("$rc $out", "0 2\n", "$label: reap frees the two expired leases");

    # watch prints the release event (once its LISTEN is done: idle after it)
    my $pid = spawn('watch', $cli, '-d', conn('alice', 'watcher'), 'watch', 'wr');
    ok(until_true(30, sub { q1($al, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'watcher' AND query ~ '^LISTEN' AND state = 'idle'") }),
       "$label: watch listens");
    q1($dbo, "SELECT dlock.try_lock('wr', 'a', '30s')");
    q1($dbo, "SELECT dlock.unlock('wr', 'a')");
    until_true(30, sub { slurp("$tmp/watch.out") =~ /released/ });
    kill 'TERM', $pid;
    is(wait_exit($pid, 30), 0, "$label: watch exits 0 on SIGTERM");
    like(slurp("$tmp/watch.out"), qr/^\{.*"event"\s*:\s*"released".*"resource"\s*:\s*"wr".*\}$/m,
         "$label: watch printed the release event");
}

# dlock run.
sub run_cmd {
    my ($dbo) = @_;
    my $al = dbh('alice');   # sees the query text of alice's own sessions
    local @ENV{qw(PATH PGHOST PGDATABASE PGUSER)} = ("$client:$ENV{PATH}", $sock, 'app', 'alice');
    my ($rc, $out, $err) = cli('run', '--holder', 'r1', '--lease', '5s', 'job', '--',
        'sh', '-c', 'echo "$DLOCK_RESOURCE|$DLOCK_HOLDER|$DLOCK_FENCE"; psql -XAtq -c "SELECT holder || \' \' || fence FROM dlock.locks WHERE resource = \'job\'"; exit 3');
    is($rc, 3, "$label: run: COMMAND's exit status") or diag($err);
    my ($line, $seen) = split /\n/, $out;
    my ($rf) = ($line // '') =~ /^job\|r1\|(\d+)$/;
    ok($rf, "$label: run: DLOCK_RESOURCE, DLOCK_HOLDER, DLOCK_FENCE");
    is($seen, "r1 " . ($rf // ''), "$label: run: DLOCK_FENCE is the holding's fence in dlock.locks");
    is(q1($dbo, "SELECT count(*) FROM dlock.locks WHERE resource = 'job'"), 0, "$label: run released the lock");

    # A first run holds "job" until told to go on; a second one is refused,
    # a third waits and runs after it with a greater fence.
    my $pid = spawn('first', $cli, '-d', conn('alice'), 'run', '--lease', '1s', 'job', '--',
        'sh', '-c', "echo \$DLOCK_FENCE > $tmp/first.fence; while [ ! -e $tmp/go ]; do sleep 0.05; done");
    ok(until_true(30, sub { -s "$tmp/first.fence" }), "$label: run: the first run's COMMAND starts");
    ($rc, $out, $err) = cli('run', '--wait', '0', 'job', '--', 'touch', "$tmp/second.ran");
    is($rc, 75, "$label: run: a second run on the held resource with --wait 0: 75");
    ok(!-e "$tmp/second.ran", "$label: ... and its COMMAND did not run");
    my $third = spawn('third', $cli, '-d', conn('alice', 'third'), 'run', '--wait', '60s', 'job', '--',
        'sh', '-c', 'echo $DLOCK_FENCE');
    ok(until_true(30, sub { q1($al, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'third' AND query ~ 'try_lock|LISTEN|ROLLBACK'") }),
       "$label: run: the third run has tried and waits");
    sleep 1.5;   # past the first's lease: only its renewals keep it
    ok(!-s "$tmp/third.out", "$label: run: the third has not run while the first renews");
    open my $go, '>', "$tmp/go"; close $go;
    is(wait_exit($pid, 30), 0, "$label: run: the first run exits 0");
    is(wait_exit($third, 30), 0, "$label: run: the third run then acquires and exits 0");
    my ($f1) = slurp("$tmp/first.fence") =~ /(\d+)/;
    my ($f3) = slurp("$tmp/third.out") =~ /(\d+)/;
    ok($f1 && $f3 && $f3 > $f1, "$label: run: the third's fence is greater than the first's");

    # The lease lost: the owner breaks the lock; COMMAND is stopped, 76.
    $pid = spawn('lost', $cli, '-d', conn('alice'), 'run', '--lease', '1s', '--grace', '1s', 'lost', '--',
        'sh', '-c', "echo \$\$ > $tmp/lost.pid; sleep 60; touch $tmp/lost.survived");
    ok(until_true(30, sub { -s "$tmp/lost.pid" }), "$label: run: COMMAND runs");
    is(q1($dbo, "SELECT dlock.break_lock('lost')"), 1, "$label: run: the database owner breaks the lock");
    my $t0 = time;
    is(wait_exit($pid, 30), 76, "$label: run: lease lost: exit 76");
    my ($cpid) = slurp("$tmp/lost.pid") =~ /(\d+)/;
    ok($cpid && !kill(0, $cpid), "$label: run: COMMAND was stopped");
    ok(!-e "$tmp/lost.survived", "$label: run: COMMAND did not go on");
    is(q1($dbo, "SELECT count(*) FROM dlock.locks WHERE resource = 'lost'"), 0, "$label: run: nothing left held");

    # --fair (a fair ticket queued while another holds it) and --poll
    q1($dbo, "SELECT dlock.try_lock('fair', 'other', '30s')");
    $pid = spawn('fair', $cli, '-d', conn('alice', 'fairy'), 'run', '--fair', '--wait', '60s', 'fair', '--', 'sh', '-c', 'echo $DLOCK_FENCE');
    ok(until_true(30, sub { q1($dbo, "SELECT count(*) FROM dlock.queue WHERE resource = 'fair'") == 1 }),
       "$label: run --fair: queued in dlock.queue");
    is(q1($dbo, "SELECT dlock.try_lock('fair', 'newcomer', '30s')"), undef, "$label: run --fair: a newcomer is refused");
    q1($dbo, "SELECT dlock.unlock('fair', 'other')");
    is(wait_exit($pid, 30), 0, "$label: run --fair: served after the release");
    like(slurp("$tmp/fair.out"), qr/^\d+$/, "$label: run --fair: COMMAND ran with its fence");
    ($rc, $out) = cli('--poll', 'run', '--wait', '10s', 'polled', '--', 'sh', '-c', 'echo $DLOCK_FENCE');
    is($rc, 0, "$label: run --poll");
}

# [kinds]: run --shared (readers together, a writer kept out), run
# --semaphore N --permits K (at most N permits), and several resources
# before -- (all taken, fences in order, all released).
sub kinds {
    my ($dbo) = @_;
    local @ENV{qw(PATH PGHOST PGDATABASE PGUSER)} = ("$client:$ENV{PATH}", $sock, 'app', 'alice');
    my $go = "$tmp/kinds.go";
    unlink $go;
    my $hold = "echo \$DLOCK_FENCE; while [ ! -e $go ]; do sleep 0.02; done";
    my @r = map { spawn("sh$_", $cli, '-d', conn('alice'), 'run', '--shared', '--lease', '5s', '--holder', "r$_",
                        'kshared', '--', 'sh', '-c', $hold) } 1 .. 2;
    ok(until_true(30, sub { q1($dbo, "SELECT count(*) FROM dlock.locks WHERE resource = 'kshared' AND mode = 'shared'") == 2 }),
       "$label: run --shared: two readers hold kshared together");
    my ($rc) = cli('run', '--wait', '0', 'kshared', '--', 'true');
    is($rc, 75, "$label: run --shared: a writer's run with --wait 0 is refused (75)");
    my @s = map { spawn("sem$_", $cli, '-d', conn('alice'), 'run', '--semaphore', '3', '--permits', '2',
                        '--lease', '5s', '--holder', "p$_", 'ksem', '--', 'sh', '-c', $hold) } 1;
    ok(until_true(30, sub { q1($dbo, "SELECT coalesce(sum(permits), 0) FROM dlock.locks WHERE resource = 'ksem'") == 2 }),
       "$label: run --semaphore 3 --permits 2: two permits held");
    is(q1($dbo, "SELECT string_agg(concat_ws(' ', mode, permits, max_permits), ',') FROM dlock.locks WHERE resource = 'ksem'"),
       'semaphore 2 3', "$label: run --semaphore: dlock.locks shows mode, permits and max_permits");
    ($rc) = cli('run', '--semaphore', '3', '--permits', '2', '--wait', '0', 'ksem', '--', 'true');
    is($rc, 75, "$label: run --semaphore: two more permits of three are refused (75)");
    my ($rc1, $out1) = cli('run', '--semaphore', '3', '--wait', '0', 'ksem', '--', 'sh', '-c', 'echo $DLOCK_FENCE');
    is($rc1, 0, "$label: run --semaphore: the third permit is served");
    like($out1, qr/^\d+$/, "$label: run --semaphore: COMMAND ran with its fence");
    my ($rcm, $outm, $errm) = cli('run', '--lease', '5s', 'km1', 'km2', 'km3', '--', 'sh', '-c',
        'echo "$DLOCK_RESOURCE|$DLOCK_FENCE"; psql -XAtq -c "SELECT string_agg(resource || \' \' || fence, \',\' ORDER BY resource) FROM dlock.locks WHERE resource LIKE \'km_\'"');
    is($rcm, 0, "$label: run with three resources: COMMAND ran and exited 0") or diag($errm);
    my ($env, $seen) = split /\n/, $outm;
    my ($res, $fences) = split /\|/, $env // '';
    is($res, 'km1 km2 km3', "$label: run with three resources: DLOCK_RESOURCE lists them");
    my @f = split / /, $fences // '';
    is($seen, join(',', map { "km$_ $f[$_ - 1]" } 1 .. 3),
       "$label: run with three resources: all held while COMMAND runs, DLOCK_FENCE in their order");
    is(q1($dbo, "SELECT dlock.try_lock('km2', 'blocker', '30s') IS NOT NULL"), 1, "$label: ... released after");
    ($rc) = cli('run', '--wait', '0', 'km1', 'km2', '--', 'touch', "$tmp/km.ran");
    is($rc, 75, "$label: run with several resources, one of them held: refused (75), all or nothing");
    ok(!-e "$tmp/km.ran", "$label: ... and COMMAND did not run");
    is(q1($dbo, "SELECT count(*) FROM dlock.locks WHERE resource = 'km1'"), 0, "$label: ... km1 was not kept");
    q1($dbo, "SELECT dlock.unlock('km2', 'blocker')");
    open my $fh, '>', $go or die; close $fh;
    is(wait_exit($_, 30), 0, "$label: run --shared / --semaphore: exits 0 when COMMAND does") for @r, @s;
}

# dlock elect and observe.
sub elect {
    my ($dbo) = @_;
    local @ENV{qw(PATH PGHOST PGDATABASE PGUSER)} = ("$client:$ENV{PATH}", $sock, 'app', 'alice');
    my $obs = spawn('observe', $cli, '-d', conn('alice'), 'observe', 'el');
    # its first line comes once it listens: an election before it would be missed
    ok(until_true(30, sub { slurp("$tmp/observe.out") =~ /\n/ }), "$label: observe prints the current state")
        or diag(slurp("$tmp/observe.err"));
    my ($rc, $out, $err) = cli('elect', '--holder', 'c1', '--lease', '5s', 'el', 'v1', '--',
        'sh', '-c', 'echo "$DLOCK_ELECTION|$DLOCK_TERM|$DLOCK_VALUE"; psql -XAtq -c "SELECT candidate || \' \' || term FROM dlock.leader(\'el\')"');
    is($rc, 0, "$label: elect: COMMAND ran and exited 0") or diag($err);
    my ($line, $leader) = split /\n/, $out;
    my ($term) = ($line // '') =~ /^el\|(\d+)\|v1$/;
    ok($term, "$label: elect: DLOCK_ELECTION, DLOCK_TERM, DLOCK_VALUE");
    is($leader, "c1 " . ($term // ''), "$label: elect: dlock.leader() names c1 under DLOCK_TERM while COMMAND runs");
    is(q1($dbo, "SELECT count(*) FROM dlock.leader('el')"), 0, "$label: elect: resigned when COMMAND exited");
    ok(until_true(30, sub { slurp("$tmp/observe.out") =~ /"candidate"\s*:\s*"c1"/ }),
       "$label: observe printed the leader c1") or diag(slurp("$tmp/observe.out") . slurp("$tmp/observe.err"));
    kill 'TERM', $obs;
    is(wait_exit($obs, 30), 0, "$label: observe exits 0 on SIGTERM");
}

# Callers whose transactions default to SERIALIZABLE: four `dlock run`
# loops at once on distinct resources.  Concurrent attempts failed each
# other with 40001 ("could not serialize access"); an attempt runs READ
# COMMITTED, and a release rolled back that way is sent again.
sub serializable {
    my ($dbo) = @_;
    my $ser = conn('alice', 'dlock_ssi') . " options='-c default_transaction_isolation=serializable'";
    my @kids;
    for my $k (1 .. 4) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $failed = 0;
            for my $i (1 .. 40) {
                my ($out, $err) = ('', '');
                IPC::Run::run([$cli, '-d', $ser, 'run', '--lease', '30s', "ssi/$k/$i", '--', 'true'],
                    '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
                if ($? != 0) { $failed++; print STDERR "ssi/$k/$i: exit " . code_of($?) . ": $err"; }
            }
            POSIX::_exit($failed > 99 ? 99 : $failed);
        }
        push @kids, $pid;
    }
    my $failed = 0;
    for my $pid (@kids) { waitpid($pid, 0); $failed += $? >> 8; }
    is($failed, 0, "$label: SERIALIZABLE by default: 160 runs in four loops at once, none failed");
    is(q1($dbo, "SELECT count(*) FROM dlock.locks WHERE resource LIKE 'ssi/%'"), 0,
       "$label: SERIALIZABLE by default: every run released its lock");
}
