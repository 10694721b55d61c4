# 063_cli_run_faults.t: `dlock run` against MariaDB when the server fails
# under it: a renewal's query killed (KILL QUERY) is retried, not taken for
# a lost lease; SIGTERM while waiting ends the wait with 143 even when the
# server hangs; the lock is released when COMMAND ends although the server
# restarted or closed the idle connection meanwhile, or the answer to the
# acquisition was lost.  With --wait, a server down at the start is waited
# for; a login it refuses (a wrong password, a locked account) is tried
# once.
# Promises: P15
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;
use Time::HiRes qw(sleep);
use POSIX ();

my $cli = "$DlockMy::TOP/cli/dlock";
plan skip_all => "cli/dlock not built" unless -x $cli;
plan skip_all => "cli/dlock built without MySQL support" unless `$cli -d mysql://x\@y/ try r 2>&1` !~ /without MySQL/;

my $my = DlockMy->new;
my $root = $my->connect('root');
my $url = "mysql://alice:pa\@localhost/dlock?socket=$my->{sock}";

# bg(tag, args...): dlock in the background, its stderr in DIR/tag.err.
sub bg {
    my ($tag, @args) = @_;
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>', "$my->{dir}/$tag.out" or die;
        open STDERR, '>', "$my->{dir}/$tag.err" or die;
        exec $cli, @args or die "exec: $!";
    }
    return $pid;
}
sub slurp { local $/; open my $f, '<', $_[0] or return ''; return <$f> // ''; }
sub rows { DlockMy::one($root, "SELECT count(*) FROM dlock.locks WHERE resource = ? AND NOT expired", $_[0]) }
# poll(sub): until it returns true (at most 30 s; progress, not timing, is tested).
sub poll { my ($f) = @_; for (1 .. 1500) { my $v = $f->(); return $v if $v; sleep 0.02; } return; }
# catches_term(pid): whether PID (exec'd: the CLI) has a SIGTERM handler.
sub catches_term {
    return 0 unless ((split /\0/, slurp("/proc/$_[0]/cmdline"))[0] // '') eq $cli;
    my $st = slurp("/proc/$_[0]/status");
    my ($cgt) = $st =~ /^SigCgt:\s*([0-9a-f]+)/m or return 0;
    return (hex(substr($cgt, -4)) >> 14) & 1;
}
sub finish { my ($pid) = @_; waitpid $pid, 0; return $? >> 8; }

# 1. KILL QUERY of a renewal (it waits for the holder's own other
# transaction, which renewed the holding and is still open): the server
# said nothing about the lease, which lasts on; COMMAND runs to its end.
{
    my $pid = bg('kq', '-v', '-d', $url, 'run', '--lease', '6s', 'f/kq', '--', 'sleep', '7');
    my $holder = poll(sub { DlockMy::one($root, "SELECT holder FROM dlock.locks WHERE resource = 'f/kq'") });
    my $alice = $my->connect('alice');
    $alice->begin_work;
    ok(DlockMy::one($alice, "SELECT dlock.renew('f/kq', ?, 6, NULL)", $holder), 'the holding is renewed in an open transaction');
    my $mine = DlockMy::one($alice, 'SELECT CONNECTION_ID()');
    my $id = poll(sub { DlockMy::one($root, "SELECT id FROM information_schema.processlist"
                                     . " WHERE command = 'Execute' AND id <> ?", $mine) });
    ok($id, 'the renewal of dlock run waits for it');
    $root->do("KILL QUERY $id");
    poll(sub { !DlockMy::one($root, "SELECT count(*) FROM information_schema.processlist"
                             . " WHERE id = ? AND command = 'Execute'", $id) });
    $alice->commit;
    is(finish($pid), 0, "KILL QUERY of a renewal: COMMAND's exit status, not 76");
    my $err = slurp("$my->{dir}/kq.err");
    unlike($err, qr/lost/, 'no lease loss reported') or diag($err);
    like($err, qr/renewal failed \(will retry\)/, 'the failed renewal is reported and retried');
}

# 2. SIGTERM while waiting for a held resource, the server hanging
# (SIGSTOP): the wait ends with 128 + 15 once the call in progress gives
# up, not with 69 because reconnecting failed too.
{
    DlockMy::one($root, "SELECT dlock.try_lock('f/term', 'other', 600)");
    my $pid = bg('term', '-v', '-d', $url, 'run', '--wait', '60s', 'f/term', '--', 'true');
    poll(sub { slurp("$my->{dir}/term.err") =~ /connected/ });
    kill 'STOP', $my->{pid};
    sleep 1;        # it tries every 200 ms at most: a try now hangs (5 s timeouts)
    kill 'TERM', $pid;
    my $rc = finish($pid);
    kill 'CONT', $my->{pid};
    is($rc, 143, 'SIGTERM while waiting, the server hanging: 143') or diag(slurp("$my->{dir}/term.err"));

    # The same while connecting, before the wait (as with PostgreSQL).
    kill 'STOP', $my->{pid};
    $pid = bg('term2', '-d', $url, 'run', 'f/term2', '--', 'true');
    ok(poll(sub { catches_term($pid) }), 'the CLI catches SIGTERM');
    kill 'TERM', $pid;
    $rc = finish($pid);
    kill 'CONT', $my->{pid};
    is($rc, 143, 'SIGTERM while connecting to a hanging server: 143') or diag(slurp("$my->{dir}/term2.err"));
}

# 3. The server restarts while COMMAND runs (the holding survives it):
# the release at COMMAND's end reconnects instead of leaving the lock to
# expire.  The restart waits for COMMAND to start, not only for the row:
# on a loaded machine the row was there while the acquisition's answer was
# still on its way, the restart lost it, and the CLI exited 69 (CI, 17).
{
    my $go = "$my->{dir}/restart.go";
    my $started = "$my->{dir}/restart.started";
    my $pid = bg('restart', '-v', '-d', $url, 'run', '--lease', '60s', 'f/restart', '--',
                 'sh', '-c', "touch '$started'; while [ ! -e '$go' ]; do sleep 0.05; done");
    ok(poll(sub { -e $started }), 'COMMAND started');
    $my->stop;
    $my->start;
    $root = $my->connect('root');
    is(rows('f/restart'), 1, 'the holding survived the restart');
    open my $f, '>', $go or die;
    close $f;
    is(finish($pid), 0, 'run: 0');
    is(rows('f/restart'), 0, 'released when COMMAND ended, after the restart')
        or diag(slurp("$my->{dir}/restart.err"));
}

# 3b. The same when the server closed the idle connection (wait_timeout
# shorter than the time from the last renewal to COMMAND's end).
{
    my $go = "$my->{dir}/idle.go";
    my $started = "$my->{dir}/idle.started";
    $root->do('SET GLOBAL wait_timeout = 1');
    my $pid = bg('idle', '-v', '-d', $url, 'run', '--lease', '60s', 'f/idle', '--',
                 'sh', '-c', "touch '$started'; while [ ! -e '$go' ]; do sleep 0.05; done");
    ok(poll(sub { -e $started }), 'COMMAND started');
    ok(poll(sub { !DlockMy::one($root, "SELECT count(*) FROM information_schema.processlist WHERE user = 'alice'") }),
       "the server closed the client's idle connection");
    $root->do('SET GLOBAL wait_timeout = 28800');
    open my $f, '>', $go or die;
    close $f;
    is(finish($pid), 0, 'run: 0');
    is(rows('f/idle'), 0, 'released when COMMAND ended, after wait_timeout') or diag(slurp("$my->{dir}/idle.err"));
}

# 4. The answer to the acquisition is lost: try_lock waits (a table lock)
# past the client's read timeout, the client reconnects and tries again,
# and the first call still commits once the table is unlocked.  The
# holding is one, released when COMMAND ends: not re-entered (count 2) by
# the retry and left held after the unlock.
{
    my $locker = $my->connect('root');
    $locker->do('LOCK TABLES dlock.leases WRITE');
    my $pid = bg('lost', '-v', '-d', $url, 'run', '--lease', '60s', 'f/lost', '--', 'true');
    ok(poll(sub { slurp("$my->{dir}/lost.err") =~ /connection to MySQL\/MariaDB lost/ }),
       'the first try_lock timed out on the client');
    ok(poll(sub { DlockMy::one($root, "SELECT count(*) FROM information_schema.processlist"
                               . " WHERE info LIKE 'SELECT dlock.try_lock%'") >= 2 }),
       'it waits on the server still, and the second try too');
    $locker->do('UNLOCK TABLES');
    is(finish($pid), 0, 'run: 0');
    is(rows('f/lost'), 0, 'released when COMMAND ended') or diag(slurp("$my->{dir}/lost.err"));
}

# 5. The server down when `dlock run --wait` starts: it retries the
# connection while the wait lasts and runs once the server is up.  A wrong
# password is tried once, whatever the wait: the server counts one denial
# (MariaDB's max_password_errors would lock out a role retried for long).
{
    $root->disconnect;
    $my->stop;
    my $pid = bg('down', '-d', $url, 'run', '--wait', '120s', 'f/down', '--',
                 'sh', '-c', "echo \$DLOCK_FENCE > $my->{dir}/down.fence");
    ok(poll(sub { slurp("$my->{dir}/down.err") =~ /retrying the connection while the wait lasts/ }),
       'the server down at the start: run --wait retries the connection');
    $my->start;
    $root = $my->connect('root');
    is(finish($pid), 0, 'and runs COMMAND once the server is up') or diag(slurp("$my->{dir}/down.err"));
    like(slurp("$my->{dir}/down.fence"), qr/^\d+$/, 'with its fence');

    my $denied = sub { DlockMy::one($root, "SELECT variable_value FROM information_schema.global_status"
                                    . " WHERE variable_name = 'ACCESS_DENIED_ERRORS'") };
    my $before = $denied->();
    (my $bad = $url) =~ s/alice:pa\@/alice:wrong\@/;
    $pid = bg('denied', '-d', $bad, 'run', '--wait', '600s', 'f/denied', '--', 'true');
    is(finish($pid), 69, 'a wrong password with --wait 600s: 69');
    unlike(slurp("$my->{dir}/denied.err"), qr/retrying/, 'without retrying');
    is($denied->() - $before, 1, 'the server denied one login');

    # a locked account (MariaDB 4151): refused for good, one try
    $my->do_root("CREATE USER carol\@'localhost' IDENTIFIED BY 'pd' ACCOUNT LOCK");
    (my $carol = $url) =~ s/alice:pa\@/carol:pd\@/;
    $pid = bg('locked', '-d', $carol, 'run', '--wait', '600s', 'f/locked', '--', 'true');
    is(finish($pid), 69, 'a locked account with --wait 600s: 69');
    like(slurp("$my->{dir}/locked.err"), qr/locked/i, 'the server says the account is locked');
    unlike(slurp("$my->{dir}/locked.err"), qr/retrying/, 'without retrying');
}

done_testing;
