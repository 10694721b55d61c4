# 020_errors_roles.t: every bad input signals SQLSTATE 22023 naming the
# argument and changes nothing (not even the fence counter); read-only
# servers and transactions refuse changes with 25006; rights between two
# users (alice, bob) and an administrator; the tables are closed to users;
# binary logging: the install refuses what would not work.
# Promises: P4 P6
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/..";
use DlockMy;
use Test::More;

my $my = DlockMy->new;
my $root = $my->connect('root');
my $alice = $my->connect('alice');
my $bob = $my->connect('bob');
my $admin = $my->connect('admin');
sub err { DlockMy::err(@_) }
sub one { DlockMy::one(@_) }

ok(one($alice, "SELECT dlock.try_lock('err/held', 'h', 3600)"), 'setup');
my $snapshot = sub {
    join "\n", map { join ',', map { $_ // 'NULL' } @$_ }
        @{ $root->selectall_arrayref('SELECT * FROM dlock.leases ORDER BY resource') },
        [ one($root, "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'dlock' AND TABLE_NAME = 'fences'") ];
};
my $before = $snapshot->();

my @cases = (
  ["SELECT dlock.try_lock(NULL, 'h', NULL)", 'resource must not be null'],
  ["SELECT dlock.try_lock('', 'h', NULL)", 'resource must not be empty'],
  ["SELECT dlock.try_lock(REPEAT('x', 1001), 'h', NULL)", 'resource must be at most 1000 bytes long'],
  ["SELECT dlock.try_lock(REPEAT(UNHEX('C3A9'), 501), 'h', NULL)", 'resource must be at most 1000 bytes long'],
  ["SELECT dlock.try_lock(REPEAT('x', 100000), 'h', NULL)", 'resource must be at most 1000 bytes long'],
  ["SELECT dlock.try_lock('err/x', '', NULL)", 'holder must not be empty'],
  ["SELECT dlock.try_lock('err/x', REPEAT('h', 256), NULL)", 'holder must be at most 255 bytes long'],
  ["SELECT dlock.try_lock('err/x', 'h', 0)", 'lease must be positive'],
  ["SELECT dlock.try_lock('err/x', 'h', -1)", 'lease must be positive'],
  ["SELECT dlock.try_lock('err/x', 'h', 0.0000004)", 'lease must be positive'],
  ["SELECT dlock.try_lock('err/x', 'h', 31557600001)", 'lease must be finite and at most 1000 years'],
  ["SELECT dlock.try_lock('err/x', 'h', 1e300)", 'lease must be finite and at most 1000 years'],
  ["CALL dlock.lock(NULL, 'h', NULL, NULL)", 'resource must not be null'],
  ["CALL dlock.lock('err/x', '', 1, NULL)", 'holder must not be empty'],
  ["CALL dlock.lock('err/x', 'h', -300, NULL)", 'lease must be positive'],
  ["CALL dlock.lock('err/x', 'h', 1, -1)", 'wait must not be negative'],
  ["SELECT dlock.unlock(NULL, 'h', NULL)", 'resource must not be null'],
  ["SELECT dlock.unlock('err/held', '', NULL)", 'holder must not be empty'],
  ["SELECT dlock.unlock('err/held', REPEAT('h', 256), NULL)", 'holder must be at most 255 bytes long'],
  ["SELECT dlock.renew('', 'h', NULL, NULL)", 'resource must not be empty'],
  ["SELECT dlock.renew('err/held', '', NULL, NULL)", 'holder must not be empty'],
  ["SELECT dlock.renew('err/held', 'h', 0, NULL)", 'lease must be positive'],
  ["SELECT dlock.renew('err/held', 'h', -0.001, NULL)", 'lease must be positive'],
  ["SELECT dlock.renew('err/held', 'h', 1e12, NULL)", 'lease must be finite and at most 1000 years'],
  ["SELECT dlock.unlock_all('')", 'holder must not be empty'],
  ["SELECT dlock.check_fence(NULL, 1)", 'resource must not be null'],
  ["SELECT dlock.check_fence('err/held', NULL)", 'fence must not be null'],
  ["SELECT dlock.assert_fence('', 1)", 'resource must not be empty'],
  ["SELECT dlock.assert_fence('err/held', NULL)", 'fence must not be null'],
  ["CALL dlock.xact_lock('', NULL)", 'resource must not be empty'],
  ["CALL dlock.xact_lock('err/x', -1)", 'wait must not be negative'],
  ["SELECT dlock.try_xact_lock(NULL)", 'resource must not be null'],
  # Durations and fences that are not numbers, or beyond range: 22023 too,
  # not MariaDB's conversion errors (1265, 1366, 1264, 1367).
  ["SELECT dlock.try_lock('err/x', 'h', 'abc')", 'lease must be a number of seconds'],
  ["SELECT dlock.try_lock('err/x', 'h', '12abc')", 'lease must be a number of seconds'],
  ["SELECT dlock.try_lock('err/x', 'h', '')", 'lease must be a number of seconds'],
  ["SELECT dlock.try_lock('err/x', 'h', '1e999')", 'lease must be a number of seconds'],
  ["CALL dlock.lock('err/x', 'h', 'x', NULL)", 'lease must be a number of seconds'],
  ["CALL dlock.lock('err/x', 'h', 1, 'soon')", 'wait must be a number of seconds'],
  ["CALL dlock.lock('err/x', 'h', 1, '1e400')", 'wait must be a number of seconds'],
  ["CALL dlock.xact_lock('err/x', '5s')", 'wait must be a number of seconds'],
  ["SELECT dlock.renew('err/held', 'h', 'long', NULL)", 'lease must be a number of seconds'],
  ["SELECT dlock.renew('err/held', 'h', NULL, 'abc')", 'fence must be an integer (BIGINT)'],
  ["SELECT dlock.unlock('err/held', 'h', '12abc')", 'fence must be an integer (BIGINT)'],
  ["SELECT dlock.unlock('err/held', 'h', 1e30)", 'fence must be an integer (BIGINT)'],
  ["SELECT dlock.unlock('err/held', 'h', '9223372036854775808')", 'fence must be an integer (BIGINT)'],
  ["SELECT dlock.check_fence('err/held', 'abc')", 'fence must be an integer (BIGINT)'],
  ["SELECT dlock.check_fence('err/held', 1.5)", 'fence must be an integer (BIGINT)'],
  ["SELECT dlock.assert_fence('err/held', '-99999999999999999999')", 'fence must be an integer (BIGINT)'],
);
for my $c (@cases) {
    is(err($alice, $c->[0]), "22023: $c->[1]", $c->[0]);
}
is(err($root, "SELECT dlock.break_lock(NULL)"), '22023: resource must not be null', 'break_lock(NULL)');
is($snapshot->(), $before, 'nothing changed, the fence counter untouched');

# 1000 years is the longest lease.
ok(one($alice, "SELECT dlock.try_lock('err/long', 'h', 31557600000)"), '1000 years is accepted');
is(one($alice, "SELECT dlock.unlock('err/long', 'h', NULL)"), 0, 'released');

$before = $snapshot->();

# Numbers given as text, and the ends of the ranges, are fine.
is(one($alice, "SELECT dlock.check_fence('err/held', ' 9223372036854775807 ')"), 0, 'the largest fence, as text');
is(one($alice, "SELECT dlock.unlock('err/held', 'h', -9223372036854775808)"), undef, 'the smallest fence: not held');
ok(one($alice, "SELECT dlock.renew('err/held', 'h', '3600.5', NULL)"), 'a lease as text');

$before = $snapshot->();

# assert_fence's own error, naming the resource (as hex when it is not
# UTF-8, where it used to fail with 1300 instead).
is(err($alice, "SELECT dlock.assert_fence('err/held', 1)"),
   '55P03: fence 1 is not the current holding of resource "err/held"', 'assert_fence 55P03');
is(err($alice, "SELECT dlock.assert_fence(UNHEX('FF00E9'), 1)"),
   "55P03: fence 1 is not the current holding of resource x'FF00E9'", 'assert_fence 55P03 for a resource that is not UTF-8');
is(err($alice, "SELECT dlock.assert_fence(REPEAT(UNHEX('C3A9'), 150), 1)"),
   '55P03: fence 1 is not the current holding of resource "' . ("\x{e9}" x 100) . '..."', 'a long one is cut');

# Read-only transactions and servers: 25006, and reads still work.
$alice->do('START TRANSACTION READ ONLY');
like(err($alice, "SELECT dlock.try_lock('err/ro', 'h', NULL)"), qr/^25006: /, 'try_lock in a READ ONLY transaction: 25006');
like(err($alice, "SELECT dlock.unlock('err/held', 'h', NULL)"), qr/^25006: /, 'unlock in a READ ONLY transaction: 25006');
$alice->do('COMMIT');
$root->do('SET GLOBAL read_only = 1');
my $f = one($alice, "SELECT fence FROM dlock.locks WHERE resource = 'err/held'");
# Functions are refused by the server itself before they run (the tables
# they write are opened with the statement, and their definer has no
# READ_ONLY ADMIN); procedures, and callers with READ_ONLY ADMIN, get 25006.
my $ro = qr/^(HY000: The MariaDB server is running with the --read-only option|25006: cannot execute dlock\.\w+\(\) on a read-only server)/;
like(err($alice, "SELECT dlock.try_lock('err/ro', 'h', NULL)"), $ro, 'read-only server: try_lock refused');
like(err($alice, "SELECT dlock.renew('err/held', 'h', NULL, NULL)"), $ro, 'renew refused');
like(err($alice, "SELECT dlock.unlock('err/held', 'h', NULL)"), $ro, 'unlock refused');
like(err($alice, "SELECT dlock.try_xact_lock('err/held')"), $ro, 'try_xact_lock refused');
is(err($alice, "CALL dlock.lock('err/ro', 'h', NULL, 0)"), '25006: cannot execute dlock.lock() on a read-only server', 'lock');
is(err($alice, "CALL dlock.reap()"), '25006: cannot execute dlock.reap() on a read-only server', 'reap');
is(err($root, "SELECT dlock.try_lock('err/ro', 'h', NULL)"), '25006: cannot execute dlock.try_lock() on a read-only server',
   'even for root, though the definer could bypass read_only');
is(one($alice, "SELECT dlock.check_fence('err/held', ?)", $f), 1, 'check_fence works read-only');
$root->do('SET GLOBAL read_only = 0');
is($snapshot->(), $before, 'still nothing changed');

# The reap event keeps quiet on a read-only server (it used to fail every
# second, each time with lines in the error log), and reaps again after.
ok(one($alice, "SELECT dlock.try_lock('err/expiring', 'h', 0.2)"), 'a lease about to expire');
$root->do('SET GLOBAL read_only = 1');
my $log_size = -s "$my->{dir}/error.log";
sleep 3.5;
my $log_new = do { open my $lf, '<', "$my->{dir}/error.log"; seek $lf, $log_size, 0; local $/; <$lf> } // '';
is($log_new, '', 'read-only: the reap event writes nothing to the error log') or diag $log_new;
is(one($root, "SELECT holder FROM dlock.leases WHERE resource = 'err/expiring' AND tail = 0"), 'h', 'and reaps nothing');
$root->do('SET GLOBAL read_only = 0');
my $reaped;
for (1 .. 100) {
    $reaped = !defined one($root, "SELECT holder FROM dlock.leases WHERE resource = 'err/expiring' AND tail = 0");
    last if $reaped;
    select undef, undef, undef, 0.1;
}
ok($reaped, 'writable again: the event reaps it');
$before = $snapshot->();

# ---- Rights between users ----
ok(one($alice, "SELECT dlock.try_lock('roles/r', 'shared', 3600)"), 'alice acquires');
ok(one($alice, "SELECT dlock.try_lock('roles/r', 'shared', NULL)"), 'alice re-enters');
is(one($bob, "SELECT dlock.try_lock('roles/r', 'shared', NULL)"), undef, 'bob with the same holder text is another holder');
is(err($bob, "SELECT dlock.unlock('roles/r', 'shared', NULL)"), '42501: permission denied: the holding belongs to another user', 'bob cannot unlock');
my $rf = one($alice, "SELECT fence FROM dlock.locks WHERE resource = 'roles/r'");
is(err($bob, "SELECT dlock.unlock('roles/r', 'shared', ?)", $rf), '42501: permission denied: the holding belongs to another user', 'not even with the fence');
is(err($bob, "SELECT dlock.renew('roles/r', 'shared', 1, NULL)"), '42501: permission denied: the holding belongs to another user', 'bob cannot renew');
is(err($bob, "SELECT dlock.assert_fence('roles/r', ?)", $rf), '42501: permission denied: the holding belongs to another user', 'bob cannot pin');
is(one($bob, "SELECT dlock.check_fence('roles/r', ?)", $rf), 1, 'bob may check the fence');
is(one($bob, "SELECT dlock.unlock_all('shared')"), 0, 'bob unlock_all releases nothing of alice');
is(one($bob, "SELECT dlock.unlock('roles/r', 'other', NULL)"), undef, 'other holder text: NULL');
is(err($root, "SELECT dlock.unlock('roles/r', 'shared', NULL)"), '42501: permission denied: the holding belongs to another user',
   'root is another user too (no superuser override)');
like(err($bob, "SELECT dlock.break_lock('roles/r')"), qr/^42000: execute command denied/i, 'bob may not break');
is_deeply($root->selectrow_arrayref("SELECT holder, count, owner FROM dlock.locks WHERE resource = 'roles/r'"),
          ['shared', 2, 'alice'], 'nothing changed for alice');
is(one($admin, "SELECT dlock.break_lock('roles/r')"), 1, 'admin (granted EXECUTE) breaks');

# The owner is the caller, not the routines' definer (CURRENT_USER() inside
# an SQL SECURITY DEFINER routine is dlock@localhost).
ok(one($bob, "SELECT dlock.try_lock('roles/b', 'hb', 3600)"), 'bob acquires');
is(one($root, "SELECT owner FROM dlock.leases WHERE resource = 'roles/b' AND tail = 0"), 'bob', 'owner recorded as bob');
ok(one($alice, "SELECT dlock.try_lock('roles/a', 'hb', 3600)"), 'alice uses the same holder text elsewhere');
is(one($alice, "SELECT dlock.unlock_all('hb')"), 1, 'alice unlock_all releases only hers');
is(one($bob, "SELECT holder FROM dlock.locks WHERE resource = 'roles/b'"), 'hb', "bob's holding stays");
is(one($bob, "SELECT dlock.unlock_all('hb')"), 1, 'bob releases his');

# Tables and internals are closed; the view is open.
for my $q ("SELECT * FROM dlock.leases", "UPDATE dlock.leases SET holder = 'me'",
           "DELETE FROM dlock.leases", "INSERT INTO dlock.leases (resource) VALUES ('x')",
           "INSERT INTO dlock.fences () VALUES ()", "SELECT dlock._fence()",
           "SELECT * FROM dlock.fence_lock",
           "SELECT dlock._reap_one('x')", "CALL dlock._reap(\@n)",
           "SELECT dlock._reap_name('x')", "CALL dlock._reaper_wait('x')",
           "SELECT dlock._take('x', 'h', 'alice', 1)", "CALL dlock._create('x')",
           "DELETE FROM dlock.gates", "ALTER TABLE dlock.fences AUTO_INCREMENT = 1",
           "DROP EVENT dlock.reap") {
    like(err($alice, $q), qr/^42000: /, "alice: $q denied");
}
ok(defined one($alice, "SELECT count(*) FROM dlock.locks"), 'alice reads dlock.locks');
# A locking read through the view locks nothing acquirers see.
ok(one($alice, "SELECT dlock.try_lock('roles/v', 'h', 1)") && defined one($alice, "SELECT dlock.unlock('roles/v', 'h', NULL)"), 'row made');
$bob->begin_work;
$bob->selectall_arrayref('SELECT * FROM dlock.locks FOR UPDATE');
ok(one($alice, "SELECT dlock.try_lock('roles/v', 'h', 1)"), 'a FOR UPDATE of the view blocks no acquisition');
$bob->rollback;

# ---- Anonymous accounts: the install warns ----
# Through an anonymous account (User = '') a client names itself: USER()
# is the name it gave, and dlock takes that for the owner.
my $an = DlockMy->new(install => 0);
my $anon = $an->connect('root')->selectall_arrayref("SELECT Host FROM mysql.user WHERE User = ''");
$an->do_root(map { "DROP USER ''\@'$_->[0]'" } @$anon);
my $inst = $an->install;
unlike($inst, qr/anonymous/, 'no anonymous accounts: no warning');
$an->do_root('DROP DATABASE dlock', "CREATE USER ''\@'localhost'");
$inst = $an->install;
like($inst, qr/WARNING: anonymous accounts exist/, 'an anonymous account: the install warns');
$an->stop;

# ---- Binary logging: the install checks what it needs ----
my $bl = DlockMy->new(install => 0, args => ['--log-bin=mysql-bin', '--server-id=1', '--log-bin-trust-function-creators=0']);
my $out = eval { $bl->install; 'ok' } // $@;
like($out, qr/binary logging is on: set log_bin_trust_function_creators = 1/, 'install refuses: log_bin without log_bin_trust_function_creators');
$bl->do_root('SET GLOBAL log_bin_trust_function_creators = 1', "SET GLOBAL binlog_format = 'STATEMENT'", 'DROP DATABASE dlock');
$out = eval { $bl->install; 'ok' } // $@;
like($out, qr/binlog_format = STATEMENT: dlock needs ROW/, 'install refuses: binlog_format STATEMENT');
$bl->do_root("SET GLOBAL binlog_format = 'ROW'", 'DROP DATABASE dlock');
is(eval { $bl->install; 'ok' } // $@, 'ok', 'installs with log_bin_trust_function_creators = 1 and ROW');
my $bd = $bl->connect('root');
my $f1 = one($bd, "SELECT dlock.try_lock('bl/a', 'h', 60)");
ok($f1 && one($bd, "SELECT dlock.unlock('bl/a', 'h', NULL)") == 0, 'works with binary logging on');
my $events = join ' ', map { ($_->[2] // '') . ' ' . ($_->[5] // '') } @{ $bd->selectall_arrayref("SHOW BINLOG EVENTS IN 'mysql-bin.000001'") };
like($events, qr/Write_rows|NAME_CONST\('v_now',TIMESTAMP'/, "dlock calls are logged with the primary's clock (rows, or its time as a constant)");
$bl->stop;

done_testing;
