# 060_cli.t: the dlock command line against MariaDB (-d mysql://...):
# exit codes, `dlock run` mutual exclusion, renewal, kill on loss, linger,
# and the one-shot subcommands.
# Promises: P2 P15
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(sleep time);
use POSIX ();

my $cli = "$DlockMy::TOP/cli/dlock";
plan skip_all => "cli/dlock not built" unless -x $cli;
plan skip_all => "cli/dlock built without MySQL support" unless `$cli -d mysql://x\@y/ try r 2>&1` !~ /without MySQL/;

my $my = DlockMy->new;
my $root = $my->connect('root');
my $url = "mysql://alice:pa\@localhost/dlock?socket=$my->{sock}";
my $tcp = "mysql://alice:pa\@127.0.0.1:$my->{port}/dlock";
$my->do_root("CREATE USER alice\@'127.0.0.1' IDENTIFIED BY 'pa'");

# dlock(args...): exit code, stdout, stderr.
# poll: F's first true value, asked every 20 ms for 30 s (undef: none).
sub poll { my ($f) = @_; for (1 .. 1500) { my $v = $f->(); return $v if $v; sleep 0.02; } return; }

sub dlock {
    my @args = @_;
    my $cmd = join ' ', map { my $a = $_; $a =~ s/'/'\\''/g; "'$a'" } $cli, @args;
    my $out = `$cmd 2>$my->{dir}/cli.err`;
    my $rc = $? >> 8;
    my $err = do { local $/; open my $f, '<', "$my->{dir}/cli.err"; <$f> } // '';
    return ($rc, $out, $err);
}

my ($rc, $out, $err) = dlock('-d', $url, '--version');
my ($version) = do { local (@ARGV, $/) = "$DlockMy::TOP/dlock.control"; <> } =~ /^default_version = '([^']+)'/m;
like($out, qr/server schema dlock \Q$version\E /, '--version reports the server schema');
($rc, $out) = dlock('-d', $url, 'try', '--holder', 'me', '--lease', '5s', 'cli/a');
is($rc, 0, 'try: 0');
like($out, qr/^\d+$/, 'try prints the fence');
my $fence = $out; chomp $fence;
($rc) = dlock('-d', $tcp, 'try', '--holder', 'other', 'cli/a');
is($rc, 75, 'try of a held resource over TCP: 75');
($rc, $out) = dlock('-d', $url, 'status', 'cli/');
like($out, qr/cli\/a \| me \| 1 \| $fence /, 'status lists it');
($rc, $out) = dlock('-d', $url, 'renew', '--holder', 'me', '--fence', $fence, 'cli/a');
is($rc, 0, 'renew: 0');
($rc) = dlock('-d', $url, 'unlock', '--holder', 'me', '--fence', $fence + 1, 'cli/a');
is($rc, 76, 'unlock with a wrong fence: 76');
($rc, $out) = dlock('-d', $url, 'unlock', '--holder', 'me', 'cli/a');
is("$rc $out", "0 0\n", 'unlock: 0, count 0');
($rc) = dlock('-d', $url, 'unlock', '--holder', 'me', 'cli/a');
is($rc, 76, 'unlock of what is not held: 76');
($rc) = dlock('-d', $url, 'renew', '--holder', 'me', 'cli/a');
is($rc, 76, 'renew of what is not held: 76');
my $t0 = time;
DlockMy::one($root, "SELECT dlock.try_lock('cli/w', 'x', 0.8)");
($rc) = dlock('-d', $url, 'lock', '--wait', '3s', '--holder', 'y', 'cli/w');
my $took = time - $t0;
is($rc, 0, 'lock waits (polling) for an expiring lease');
ok($took > 0.5 && $took < 3, "and gets it when it expires ($took s)");
($rc) = dlock('-d', $url, 'lock', '--wait', '300ms', '--holder', 'z', 'cli/w');
is($rc, 75, 'lock --wait 300ms on a held resource: 75');
($rc, $out) = dlock('-d', $url, 'reap');
is($rc, 0, 'reap: 0');
($rc) = dlock('-d', "mysql://alice:wrong\@localhost/?socket=$my->{sock}", 'try', 'cli/a');
is($rc, 69, 'wrong password: 69');
($rc) = dlock('-d', "mysql://alice\@localhost/?sock=x", 'try', 'cli/a');
is($rc, 64, 'malformed URL: 64');
($rc) = dlock('-d', $url, 'watch', 'cli/a');
is($rc, 64, 'watch (needs LISTEN): 64');
# No elections in the MySQL schema: elect and observe are refused, saying so.
($rc, $out, $err) = dlock('-d', $url, 'elect', 'cli/e', 'v', '--', 'true');
is($rc, 64, 'elect: 64');
like($err, qr/"elect" is not available in the MySQL edition: mysql\/dlock\.sql has no elections/, 'elect says why');
($rc, $out, $err) = dlock('-d', $url, 'observe', 'cli/e');
is($rc, 64, 'observe: 64');
like($err, qr/"observe" is not available in the MySQL edition: mysql\/dlock\.sql has no elections/, 'observe says why');
($rc) = dlock('-d', $url, 'run', 'cli/r', '--', 'sh', '-c', 'exit 3');
is($rc, 3, "run: COMMAND's exit status");
($rc) = dlock('-d', $url, 'run', 'cli/r', '--', 'sh', '-c', 'kill -TERM $$');
is($rc, 143, 'run: 128 + the signal that killed COMMAND');
($rc) = dlock('-d', $url, 'run', 'cli/r', '--', '/nonexistent/command');
is($rc, 127, 'run: COMMAND not found: 127');
($rc, $out) = dlock('-d', $url, 'run', 'cli/r', '--', 'sh', '-c', 'echo "$DLOCK_RESOURCE $DLOCK_HOLDER $DLOCK_FENCE"');
like($out, qr/^cli\/r \S+ \d+$/, 'run: DLOCK_RESOURCE, DLOCK_HOLDER, DLOCK_FENCE in the environment');
is(DlockMy::one($root, "SELECT count(*) FROM dlock.locks WHERE resource = 'cli/r'"), 0, 'released after each run');

# Mutual exclusion: 4 runners, 3 times each, a critical section that fails
# (exit 99) if another is inside.
my $dir = "$my->{dir}/cs";
my @kids;
for my $k (1 .. 4) {
    my $pid = fork // die;
    if ($pid == 0) {
        my $bad = 0;
        for (1 .. 3) {
            my ($r) = dlock('-d', $url, 'run', '--lease', '2s', '--wait', '60s', 'cli/mx', '--',
                            'sh', '-c', "mkdir '$dir' || exit 99; sleep 0.2; rmdir '$dir'");
            $bad++ if $r != 0;
        }
        POSIX::_exit($bad);
    }
    push @kids, $pid;
}
my $bad = 0;
for (@kids) { waitpid $_, 0; $bad += $? >> 8; }
is($bad, 0, 'run: 12 runs of 4 contenders, never two COMMANDs at once');

# Renewal: a 1 s lease outlives a 3 s COMMAND; meanwhile others are refused.
my $pid = fork // die;
if ($pid == 0) {
    my ($r) = dlock('-d', $url, 'run', '--lease', '1s', '--holder', 'long', 'cli/renew', '--', 'sleep', '5');
    POSIX::_exit($r);
}
# Twice the lease from the moment it is held (a start late under load
# would otherwise be taken for a lease not renewed).
ok(poll(sub { DlockMy::one($root, "SELECT holder FROM dlock.locks WHERE resource = 'cli/renew'") }), 'run takes it');
sleep 2.2;
($rc) = dlock('-d', $url, 'try', '--holder', 'other', 'cli/renew');
is($rc, 75, 'run renews: still held after twice the lease');
waitpid $pid, 0;
is($? >> 8, 0, 'run with renewals: exit 0');

# Kill on loss: the lock is broken under a running COMMAND.
$pid = fork // die;
if ($pid == 0) {
    my ($r) = dlock('-d', $url, 'run', '--lease', '1500ms', '--grace', '1s', 'cli/loss', '--',
                    'sh', '-c', "echo \$\$ > '$my->{dir}/loss.pid'; exec sleep 30");
    POSIX::_exit($r);
}
ok(poll(sub { -s "$my->{dir}/loss.pid" }), 'COMMAND runs');
is(DlockMy::one($root, "SELECT dlock.break_lock('cli/loss')"), 1, 'the lock is broken under it');
$t0 = time;
waitpid $pid, 0;
is($? >> 8, 76, 'run: lease lost, exit 76');
ok(time - $t0 < 4, 'within a renewal interval and the grace period');
my $cmdpid = do { open my $f, '<', "$my->{dir}/loss.pid"; local $/; <$f> } // 0;
chomp $cmdpid;
ok($cmdpid && !kill(0, $cmdpid), 'COMMAND was stopped');

# Linger: the resource stays busy for --linger after COMMAND exits.
($rc) = dlock('-d', $url, 'run', '--linger', '1500ms', 'cli/linger', '--', 'true');
is($rc, 0, 'run --linger: 0');
($rc) = dlock('-d', $url, 'try', '--holder', 'next', 'cli/linger');
is($rc, 75, 'busy right after');
sleep 1.7;
($rc) = dlock('-d', $url, 'try', '--holder', 'next', 'cli/linger');
is($rc, 0, 'free after the linger');

# A routine's error reaches stderr with the server's message and SQLSTATE
# (it arrives at the fetch, not at the execute), as with PostgreSQL.
my $bobc = $my->connect('bob');
DlockMy::one($bobc, "SELECT dlock.try_lock('cli/bobs', 'shared-h', 60)");
($rc, $out, $err) = dlock('-d', $url, 'unlock', '--holder', 'shared-h', 'cli/bobs');
is($rc, 69, "unlock of another user's holding: 69");
like($err, qr/permission denied: the holding belongs to another user \(SQLSTATE 42501\)/,
     'and the server says why, with the SQLSTATE');
($rc, $out, $err) = dlock('-d', $url, 'renew', '--holder', 'shared-h', 'cli/bobs');
is($rc, 69, "renew of another user's holding: 69");
like($err, qr/\(SQLSTATE 42501\)/, 'with the SQLSTATE');

# A renewal that meets a lock wait timeout (1205: the holder's own user
# renews the holding in a transaction that lasts longer than
# innodb_lock_wait_timeout; an assert_fence pin no longer makes a renewal
# wait) is reported and retried, not taken for a lost lease.
$root->do('SET GLOBAL innodb_lock_wait_timeout = 1');
$pid = fork // die;
if ($pid == 0) {
    my ($r, undef, $e) = dlock('-d', $url, 'run', '--lease', '6s', 'cli/pin', '--', 'sleep', '5');
    open my $f, '>', "$my->{dir}/pin.err" or die;
    print $f $e;
    close $f;
    POSIX::_exit($r);
}
my $pin_holder;
for (1 .. 200) {
    $pin_holder = DlockMy::one($root, "SELECT holder FROM dlock.locks WHERE resource = 'cli/pin'");
    last if $pin_holder;
    sleep 0.02;
}
my $alice = $my->connect('alice');
$alice->begin_work;
ok(DlockMy::one($alice, "SELECT dlock.renew('cli/pin', ?, 6, NULL)", $pin_holder), 'the holding is renewed in an open transaction');
# The renewal at 2 s waits for it 1 s and fails with 1205; committed once
# that wait is over, the retry gets through.
my $mine = DlockMy::one($alice, 'SELECT CONNECTION_ID()');
my $rid = poll(sub { DlockMy::one($root, "SELECT id FROM information_schema.processlist"
                                  . " WHERE command = 'Execute' AND id <> ?", $mine) });
ok($rid, 'the renewal of dlock run waits for it');
poll(sub { !DlockMy::one($root, "SELECT count(*) FROM information_schema.processlist"
                         . " WHERE id = ? AND command = 'Execute'", $rid) });
$alice->commit;
waitpid $pid, 0;
is($? >> 8, 0, "run: a renewal's lock wait timeout is retried; COMMAND's exit status");
my $pin_err = do { local $/; open my $f, '<', "$my->{dir}/pin.err"; <$f> } // '';
like($pin_err, qr/Lock wait timeout exceeded.*\(SQLSTATE HY000\)/, 'the lock wait timeout is reported');
unlike($pin_err, qr/lost/, 'no lease loss reported');
$root->do('SET GLOBAL innodb_lock_wait_timeout = 50');

# COMMAND ends as the CLI sends the watchdog a renewal's deadline (issue 33,
# defect 12): the watchdog exits with it unread, Linux reports ECONNRESET
# on the CLI's end before the watchdog's last message (COMMAND's status).
# An LD_PRELOAD shim (test/shim/wd_reset.c) makes that certain.  A 3 s
# lease: its renewal at 1 s falls in the watchdog's 1.5 s hold (a 600 ms
# lease was lost under load).
{
    my $shim = "$my->{dir}/wd_reset.so";
    system('cc', '-shared', '-fPIC', '-O1', '-o', $shim, "$DlockMy::TOP/test/shim/wd_reset.c", '-ldl') == 0
        or BAIL_OUT('cannot build test/shim/wd_reset.c');
    local $ENV{LD_PRELOAD} = $shim;
    my ($r, undef, $e) = dlock('-v', '-d', $url, 'run', '--lease', '3s', 'cli/reset', '--',
        'sh', '-c', 'sleep 0.3; exit 3');
    is($r, 3, "run: COMMAND's status when the watchdog's socket was reset") or diag($e);
    unlike($e, qr/watchdog process died/, 'run: the watchdog is not taken for dead');
    is(DlockMy::one($root, "SELECT count(*) FROM dlock.locks WHERE resource = 'cli/reset'"), 0,
        'run: the lock was released, not left to expire');
}

done_testing;
