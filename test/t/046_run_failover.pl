# 046_run_failover.pl: the dlock CLI through failovers, with a libpq
# multi-host connection string (host=a,b target_session_attrs=read-write).
#
# A chain of nodes, each promoted after its primary is killed (SIGKILL of
# the whole server, "immediate" stop):
#   1. A -> B: a "dlock run" whose lease outlasts the failover reconnects to
#      B, renews there, and COMMAND completes; a "dlock run" waiting for the
#      same resource reconnects and keeps waiting, then runs with a higher
#      fence; "dlock watch" reconnects and prints the release made on B.
#   2. B -> C, C cut off from B first: the COMMIT of a "dlock run"
#      acquisition waits for a synchronous standby when B dies, so its
#      outcome is unknown; C never saw that transaction.  The CLI finds
#      out on C (the holding is not there, the transaction is not running
#      there), acquires again on C, and COMMAND runs with C's fence.
#   3. C -> D with the promotion 6 s after the kill: a "dlock run" with a
#      3 s lease cannot renew in time; its own clock ends the lease and
#      COMMAND is killed (exit 76); on D the resource is free.
#   4. No primary when a "dlock run" starts (D killed, its standby E not
#      yet promoted): with --wait it retries the connection while the wait
#      lasts and runs on E once E is promoted; without --wait it exits 69
#      after one try; a signal ends the retries.  A login the server
#      refuses for good (a wrong password, an unknown database) is tried
#      once, whatever the wait: the server logs one failure.
# Promises: P1 P14 P15

use strict;
use warnings;

use File::Spec;
use Time::HiRes qw(time usleep);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Proc;

my $cli = $ENV{DLOCK_CLI}
  // (defined $ENV{TESTDIR} ? "$ENV{TESTDIR}/cli/dlock" : 'cli/dlock');
$cli = File::Spec->rel2abs($cli);
plan skip_all => "dlock client not built at $cli (make -C cli)" unless -x $cli;

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);

my $conf = q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
};

# multi: a multi-host connection string for nodes (primary first).
sub multi
{
	my ($app, @nodes) = @_;
	return 'host=' . join(',', map { $_->host } @nodes)
	  . ' port=' . join(',', map { $_->port } @nodes)
	  . " dbname=postgres target_session_attrs=read-write application_name=$app";
}

# standby_of: a streaming standby of node, caught up.
sub standby_of
{
	my ($node, $name) = @_;
	$node->backup("bk_$name");
	my $s = PostgreSQL::Test::Cluster->new($name);
	$s->init_from_backup($node, "bk_$name", has_streaming => 1);
	$s->start;
	$node->wait_for_catchup($s);
	return $s;
}

# waiting_on: poll node until a session of application app runs a query
# matching re (its text or its wait event).
sub waiting_on
{
	my ($node, $app, $cond) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = '$app' AND $cond");
}

sub slurp_chomp { my $s = slurp($_[0]) // ''; chomp $s; return $s; }

my $A = PostgreSQL::Test::Cluster->new('A');
$A->init(allows_streaming => 1);
$A->append_conf('postgresql.conf', $conf);
$A->start;
$A->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $B = standby_of($A, 'B');

# ---------- 1. A -> B: run survives, a waiter keeps waiting, watch reconnects
my $m1 = "$tmp/r1";
my $run1 = spawn('run1',
	cmd => [ $cli, '-v', '-d', multi('run1', $A, $B), 'run', '--lease', '10s', 'r1', '--',
		'sh', '-c', 'echo "$DLOCK_FENCE" > "$M.start"; sleep 9; echo ok > "$M.end"' ],
	M => $m1);
ok($B->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.locks WHERE resource = 'r1'}),
	'the holding of run1 reached the standby');
my $waiter = spawn('waiter',
	cmd => [ $cli, '-v', '-d', multi('waiter', $A, $B), 'run', '--wait', '120s', 'r1', '--',
		'sh', '-c', 'echo "$DLOCK_FENCE" > "$M.fence"' ],
	M => "$tmp/w1");
ok(waiting_on($A, 'waiter', q{query ~ '^(ROLLBACK|LISTEN)'}), 'a second run waits for r1');
my $watch = spawn('watch', cmd => [ $cli, '-d', multi('watcher', $A, $B), 'watch', 'r1' ]);
ok(waiting_on($A, 'watcher', q{query ~ '^LISTEN' AND state = 'idle'}), 'watch listens');

$A->stop('immediate');
usleep(2_000_000);
$B->promote;
is(wait_exit($run1, 60), 0, 'run1: COMMAND completed across the failover (exit 0)');
ok(-e "$m1.end", 'run1: COMMAND ran to its end');
like(slurp("$tmp/run1.err"), qr/reconnected/, 'run1: the CLI reconnected');
my $f1 = slurp_chomp("$m1.start");
like(slurp("$tmp/run1.err"), qr/reconnected.*renewed until/s, 'run1: and renewed on B');
is(wait_exit($waiter, 60), 0, 'the waiter acquired r1 on B and ran');
my $fw = slurp_chomp("$tmp/w1.fence");
ok(fence_lt($f1, $fw), "the waiter's fence ($fw) is above run1's ($f1)");
like(slurp("$tmp/waiter.err"), qr/reconnect/, 'the waiter reconnected');
my $deadline = time + 30;
usleep(100_000) while time < $deadline && (slurp("$tmp/watch.out") // '') !~ /"released".*"fence"\s*:\s*$f1/;
like(slurp("$tmp/watch.out"), qr/"event"\s*:\s*"released".*"resource"\s*:\s*"r1".*"fence"\s*:\s*$f1/,
	"watch reconnected and printed run1's release made on B");
kill 'TERM', $watch;
is(wait_exit($watch, 30), 0, 'watch exits 0 on SIGTERM');

# ---------- 2. B -> C: a COMMIT of unknown outcome, lost in the failover
my $C = standby_of($B, 'C');
$C->safe_psql('postgres', q{ALTER SYSTEM SET primary_conninfo = ''});
$C->reload;
ok($C->poll_query_until('postgres', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver'),
	'C is cut off from B');
$B->safe_psql('postgres', q{ALTER SYSTEM SET synchronous_standby_names = 'nosuchstandby'});
$B->reload;
ok($B->poll_query_until('postgres', 'SHOW synchronous_standby_names', 'nosuchstandby'),
	'B waits for a synchronous standby that does not exist');
my $run3 = spawn('run3',
	# --linger: the holding stays after COMMAND, so its fence can be read
	# on C (0.5 deletes a released resource's row)
	cmd => [ $cli, '-v', '-d', multi('run3', $B, $C), 'run', '--lease', '30s', '--linger', '5m', 'r3', '--',
		'sh', '-c', 'echo "$DLOCK_FENCE" > "$M"' ],
	M => "$tmp/r3.fence");
ok(waiting_on($B, 'run3', q{wait_event = 'SyncRep'}),
	"run3's COMMIT waits for the synchronous standby");
my $fb = $B->safe_psql('postgres', q{SELECT fence FROM dlock.leases WHERE resource = 'r3'});
is($fb, '', 'B: the acquisition is not visible yet');
$B->stop('immediate');
$C->promote;
is(wait_exit($run3, 60), 0, 'run3 ran COMMAND after the failover');
my $e3 = slurp("$tmp/run3.err");
like($e3, qr/checking whether transaction \d+ committed/, 'run3: the unknown outcome was noticed');
like($e3, qr/did not commit here/, 'run3: C does not have it');
my $f3 = slurp_chomp("$tmp/r3.fence");
is($C->safe_psql('postgres', q{SELECT fence FROM dlock.leases WHERE resource = 'r3'}), $f3,
	"COMMAND ran with the fence of the acquisition made on C ($f3)");
ok(fence_lt($fw, $f3), 'which is above every earlier fence');

# ---------- 3. C -> D, the lease too short for the failover: COMMAND killed
$C->safe_psql('postgres', q{ALTER SYSTEM RESET primary_conninfo});    # D inherits it
my $D = standby_of($C, 'D');
my $m4 = "$tmp/r4";
my $run4 = spawn('run4',
	cmd => [ $cli, '-v', '-d', multi('run4', $C, $D), 'run', '--lease', '3s', '--grace', '1s', 'r4', '--',
		'sh', '-c', 'echo started > "$M.start"; sleep 30; echo ok > "$M.end"' ],
	M => $m4);
ok($D->poll_query_until('postgres', q{SELECT count(*) = 1 FROM dlock.locks WHERE resource = 'r4'}),
	'the holding of run4 reached D');
$deadline = time + 30;
usleep(50_000) while time < $deadline && !-e "$m4.start";
my $t_kill = time;
$C->stop('immediate');
is(wait_exit($run4, 30), 76, 'run4: the lease ran out while no primary existed: exit 76');
my $el = time - $t_kill;
ok($el < 6, sprintf('run4 ended before the promotion (%.1f s after the kill)', $el));
ok(!-e "$m4.end", 'run4: COMMAND was killed');
like(slurp("$tmp/run4.err"), qr/lost: its deadline passed/, 'run4: the local clock ended the lease');
usleep(int((6 - $el) * 1_000_000)) if $el < 6;
$D->promote;
is($D->safe_psql('postgres', q{SELECT dlock.try_lock('r4', 'next', '10s') IS NOT NULL}), 't',
	'on D the expired holding was not refreshed: another holder takes r4');

# ---------- 4. no primary at the start: with --wait, the run waits for one
my $E = standby_of($D, 'E');
$D->stop('immediate');
my $nowait = spawn('nowait',
	cmd => [ $cli, '-d', multi('nowait', $D, $E), 'run', 'r5', '--', 'true' ]);
is(wait_exit($nowait, 60), 69, 'without --wait, a run with no primary exits 69');
unlike(slurp("$tmp/nowait.err"), qr/retrying/, 'after one try');
my $run5 = spawn('run5',
	cmd => [ $cli, '-v', '-d', multi('run5', $D, $E), 'run', '--wait', '60s', 'r5', '--',
		'sh', '-c', 'echo "$DLOCK_FENCE" > "$M"' ],
	M => "$tmp/r5.fence");
$deadline = time + 30;
usleep(50_000) while time < $deadline && slurp("$tmp/run5.err") !~ /retrying the connection/;
like(slurp("$tmp/run5.err"), qr/retrying the connection while the wait lasts/,
	'with --wait 60s, a run with only a standby up retries');
like(slurp("$tmp/run5.err"), qr/not in hot standby mode|read-only|Connection refused/,
	'(the standby is not a primary, the old primary is gone)');
$E->promote;
is(wait_exit($run5, 60), 0, 'once the standby is promoted the run acquires r5 and runs COMMAND');
like(slurp_chomp("$tmp/r5.fence"), qr/^\d+$/, 'COMMAND had its fence');

# a signal ends the retries: nothing listens on D's port.  -d is a plain
# database name (not a connection string), the server from PGHOST/PGPORT.
my $sig = spawn('sig',
	cmd => [ $cli, '-d', 'postgres', 'run', '--wait', '600s', 'r6', '--', 'sh', '-c', 'touch "$M"' ],
	M => "$tmp/r6.ran", PGHOST => $E->host, PGPORT => $D->port);
$deadline = time + 30;
usleep(50_000) while time < $deadline && slurp("$tmp/sig.err") !~ /retrying the connection/;
kill 'TERM', $sig;
is(wait_exit($sig, 60), 143, 'SIGTERM during the retries: exit 143, before the wait ends');
ok(!-e "$tmp/r6.ran", 'and COMMAND never started');

# a connection string libpq cannot read: one try, whatever the wait
my $bad = spawn('badconn', cmd => [ $cli, '-d', 'host=' . $E->host . ' no_such_option=1',
	'run', '--wait', '600s', 'r6', '--', 'true' ]);
is(wait_exit($bad, 60), 69, 'a connection string with an unknown option exits 69 with --wait 600s');
unlike(slurp("$tmp/badconn.err"), qr/retrying/, 'without retrying');

# refused for good: one try, whatever the wait
$E->safe_psql('postgres', q{CREATE ROLE pw_user LOGIN PASSWORD 'right'});
my $hba = $E->data_dir . '/pg_hba.conf';
my $hba_text = slurp($hba);
open(my $fh, '>', $hba) or die "$hba: $!";
print $fh "local all pw_user scram-sha-256\n", $hba_text;
close($fh);
$E->reload;
my $base = 'host=' . $E->host . ' port=' . $E->port;
for my $case ([ 'pw', "$base dbname=postgres user=pw_user password=wrong",
		qr/password authentication failed for user "pw_user"/ ],
	[ 'db', "$base dbname=no_such_db", qr/database "no_such_db" does not exist/ ])
{
	my ($name, $conninfo, $logged) = @$case;
	my $offset = -s $E->logfile;
	my $p = spawn("refused_$name", cmd => [ $cli, '-d', $conninfo, 'run', '--wait', '600s', 'r7', '--', 'true' ]);
	is(wait_exit($p, 120), 69, "$name: a login refused for good exits 69 with --wait 600s");
	unlike(slurp("$tmp/refused_$name.err"), qr/retrying/, "$name: without retrying");
	like(slurp("$tmp/refused_$name.err"), qr/FATAL:  (28P01|3D000): /, "$name: the message has the SQLSTATE");
	unlike(slurp("$tmp/refused_$name.err"), qr/LOCATION/, "$name: and no LOCATION line");
	my $log = substr(slurp($E->logfile), $offset);
	my $n = () = $log =~ /$logged/g;
	is($n, 1, "$name: the server saw one failed login");
}

# a refusal met on a retry (the server was down at the first try) ends
# the retries at once, and says why
$E->stop;
my $late = spawn('late', cmd => [ $cli, '-d', "$base dbname=postgres user=pw_user password=wrong",
	'run', '--wait', '600s', 'r7', '--', 'true' ]);
$deadline = time + 30;
usleep(50_000) while time < $deadline && slurp("$tmp/late.err") !~ /retrying the connection/;
like(slurp("$tmp/late.err"), qr/retrying the connection/, 'the server down: the run retries');
my $offset = -s $E->logfile;
$E->start;
is(wait_exit($late, 120), 69, 'a wrong password met on a retry: 69 with --wait 600s');
like(slurp("$tmp/late.err"), qr/could not connect: .*28P01: password authentication failed/,
	'the refusal is reported');
my $late_n = () = substr(slurp($E->logfile), $offset) =~ /password authentication failed for user "pw_user"/g;
is($late_n, 1, 'the server saw one failed login');

$E->stop;
done_testing();
