# 035_listeners.pl: events go to NOTIFY only when someone may LISTEN.
#
# NOTIFY serialises every notifying commit of the cluster (PreCommit_Notify
# holds a lock on "database 0" until the commit's locks are released), so
# with dlock preloaded a release hands its event to NOTIFY only if a
# session listens on the resource's channel (src/listeners.c).  A session
# X that NOTIFYs and then waits in its commit for a synchronous standby
# that does not exist holds that lock; an unlock that notifies waits
# behind X ("Lock: object"), one that does not completes.  That tells,
# for each resource, whether its release notified.  Checked:
#
#  - nobody listening, a LISTEN undone by a committed UNLISTEN, by DISCARD
#    ALL, or by a listener that exited: no NOTIFY;
#  - listening (plain; through EXECUTE in a DO block; UNLISTEN * then
#    LISTEN in one transaction; UNLISTEN in a savepoint rolled back, or in
#    a transaction rolled back; two sessions, one of which exits): the
#    release notifies and the listener gets the event;
#  - not preloaded, nothing is counted and every event is sent;
#  - the race: a release that found nobody listening commits in a block,
#    waiting for the synchronous standby that is not there, and a LISTEN
#    of its channel comes meanwhile.  The LISTEN returns at once, the
#    resource is still held, and once the release has committed the
#    listener gets its event (from dlock.outbox, by the next reaper round:
#    here dlock.reap()) and finds the resource free.  (0.3: the LISTEN
#    waited for as long as the standby was away; without any wait and
#    without the outbox the look would find the resource busy, with no
#    event to come);
#  - a LISTEN of another resource's channel returns at once, and so does
#    one of the channel of a stuck release that sends its event (the new
#    listener gets it once the release commits); a stuck release of 18
#    channels nobody listens on holds up none of their LISTENs, and each
#    listener gets its event.
# Promises: P5 P13

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('listeners');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '1h'
max_connections = 40
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');
$node->safe_psql('postgres', 'CREATE TABLE blk (i int)');

sub channel { $node->safe_psql('postgres', "SELECT dlock.channel('$_[0]')") }

sub session
{
	my $s = $node->background_psql('postgres', timeout => 300, on_error_stop => 0);
	$s->{pid} = $s->query_safe('SELECT pg_backend_pid()');
	return $s;
}

# send_sql: start sql in session s without waiting for it to finish; psql
# echoes "doneN" when it has.
my $sent = 0;
sub send_sql
{
	my ($s, $sql) = @_;
	$sent++;
	$s->{done} = "done$sent";
	my $out = $s->query_until(qr/sent$sent/, "\\echo sent$sent\n$sql\n\\echo done$sent\n");
	$s->{stdout} = $out . $s->{stdout};    # it may be done already
}

# state_of: 'idle' if what send_sql sent is done, else the wait event of
# the session's backend ('running' if none).
sub state_of
{
	my ($s) = @_;
	$s->{run}->pump_nb;
	return 'idle' if $s->{stdout} =~ /$s->{done}\b/;
	return $node->safe_psql('postgres',
		"SELECT coalesce(wait_event, 'running') FROM pg_stat_activity WHERE pid = $s->{pid}");
}

# settle: wait until each session is idle or waiting on one of @events.
sub settle
{
	my ($ss, @events) = @_;
	my %want = map { $_ => 1 } ('idle', @events);
	my %st;
	for (my $i = 0; $i < 600; $i++)
	{
		%st = map { $_->{pid} => state_of($_) } @$ss;
		last unless grep { !$want{ $st{ $_->{pid} } } } @$ss;
		usleep(50_000);
	}
	return %st;
}

# The blocker: a NOTIFY whose commit (it writes: an INSERT) waits for a
# standby that is not there.
my $blocker;
sub block
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'nosuch'; SELECT pg_reload_conf()");
	# Until the checkpointer has read the setting, commits do not wait.
	$blocker = session();
	my %st;
	$blocker->set_query_timer_restart;
	for (my $i = 0; $i < 100; $i++)
	{
		send_sql($blocker, 'BEGIN; NOTIFY blocker; INSERT INTO blk VALUES (1); COMMIT;');
		%st = settle([$blocker], 'SyncRep');
		last if $st{ $blocker->{pid} } eq 'SyncRep';
		usleep(100_000);
	}
	is($st{ $blocker->{pid} }, 'SyncRep', 'the blocker waits in its commit, holding the NOTIFY lock');
}

sub unblock
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
	my %st = settle([$blocker]);
	is($st{ $blocker->{pid} }, 'idle', 'the blocker committed');
	$blocker->quit;
}

# received: the payloads session s has been sent so far, by channel.
sub received
{
	my ($s, $into) = @_;
	my ($out) = $s->query('SELECT 1');
	while ($out =~ /Asynchronous notification "([^"]+)" with payload "(.*)" received/g)
	{
		push @{ $into->{$1} }, $2;
	}
}

my @res = map { "r$_" } 1 .. 10;
my %fence;
$fence{$_} = $node->safe_psql('postgres', "SELECT dlock.try_lock('$_', 'a', '1h')") for @res;
my %ch = map { $_ => channel($_) } @res, 'r11', 'r12', 'r13';

# The listeners.
my $l1 = session();    # r2 and r8
$l1->query_safe(qq{LISTEN "$ch{r2}"; LISTEN "$ch{r8}"});
my $l2 = session();    # r3: a LISTEN rolled back (counted or not: not checked)
$l2->query_safe(qq{BEGIN; LISTEN "$ch{r3}"; ROLLBACK});
my $l3 = session();    # r4: UNLISTEN * then LISTEN in one transaction
$l3->query_safe(qq{LISTEN "$ch{r4}"});
$l3->query_safe(qq{BEGIN; UNLISTEN *; LISTEN "$ch{r4}"; COMMIT});
my $l4 = session();    # r5: UNLISTEN in a savepoint rolled back
$l4->query_safe(qq{LISTEN "$ch{r5}"});
$l4->query_safe(qq{BEGIN; SAVEPOINT s; UNLISTEN "$ch{r5}"; ROLLBACK TO s; COMMIT});
my $l5 = session();    # r6: UNLISTEN in a transaction rolled back
$l5->query_safe(qq{LISTEN "$ch{r6}"});
$l5->query_safe(qq{BEGIN; UNLISTEN "$ch{r6}"; ROLLBACK});
my $l6 = session();    # r7: LISTEN, then UNLISTEN committed
$l6->query_safe(qq{LISTEN "$ch{r7}"});
$l6->query_safe(qq{UNLISTEN "$ch{r7}"});
my $l7 = session();    # r8 (with l1), then exits; r1: LISTEN, then exits
$l7->query_safe(qq{LISTEN "$ch{r8}"; LISTEN "$ch{r1}"});
$l7->quit;
my $l8 = session();    # r9: LISTEN, then DISCARD ALL
$l8->query_safe(qq{LISTEN "$ch{r9}"});
$l8->query_safe('DISCARD ALL');
my $l9 = session();    # r10: LISTEN through EXECUTE in a DO block
$l9->query_safe(qq{DO \$\$ BEGIN EXECUTE format('LISTEN %I', dlock.channel('r10')); END \$\$});
# Give l7's exit time to happen.
$node->poll_query_until('postgres', "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $l7->{pid}")
  or die 'l7 did not exit';

# Every release while the blocker holds the NOTIFY lock, each in a session.
block();
my %unlocker;
for my $r (@res)
{
	$unlocker{$r} = session();
	send_sql($unlocker{$r}, "SELECT dlock.unlock('$r', 'a');");
}
my %st = settle([ map { $unlocker{$_} } @res ], 'object');
my %notified = map { $_ => ($st{ $unlocker{$_}{pid} } eq 'object') } @res;
diag("r3 (LISTEN rolled back): " . ($notified{r3} ? 'notified' : 'not notified'));
ok(!$notified{r1}, 'nobody listening (the listener exited): the release did not NOTIFY');
ok(!$notified{r7}, 'LISTEN then UNLISTEN: no NOTIFY');
ok(!$notified{r9}, 'LISTEN then DISCARD ALL: no NOTIFY');
ok($notified{$_}, "$_ has a listener: the release waits for the NOTIFY lock") for qw(r2 r4 r5 r6 r8 r10);
unblock();
%st = settle([ map { $unlocker{$_} } @res ]);
is(scalar(grep { $st{ $unlocker{$_}{pid} } eq 'idle' } @res), scalar(@res), 'every release finished');
$unlocker{$_}->quit for @res;
is($node->safe_psql('postgres', 'SELECT count(*) FROM dlock.locks'), '0', 'nothing is held');

# The listeners got their events.
my %got;
for my $try (1 .. 50)
{
	%got = ();
	received($_, \%got) for $l1, $l3, $l4, $l5, $l9;
	last if 6 == grep { @{ $got{ $ch{$_} } // [] } } qw(r2 r4 r5 r6 r8 r10);
	usleep(100_000);
}
for my $r (qw(r2 r4 r5 r6 r8 r10))
{
	is_deeply($got{ $ch{$r} }, [qq({"event":"released","resource":"$r","fence":$fence{$r}})],
		"the listener of $r got its released event");
}

# The race: a release decided before the LISTEN, committing after it.
my $f11 = $node->safe_psql('postgres', "SELECT dlock.try_lock('r11', 'a', '1h')");
my $f13 = $node->safe_psql('postgres', "SELECT dlock.try_lock('r13', 'a', '1h')");
my $l12 = session();    # r13, listened before any release is under way
$l12->query_safe(qq{LISTEN "$ch{r13}"});
block();    # (to wait for the setting; its NOTIFY does not matter here)
my $rel = session();
send_sql($rel, "BEGIN; SELECT dlock.unlock('r11', 'a'); COMMIT;");
%st = settle([$rel], 'SyncRep');
is($st{ $rel->{pid} }, 'SyncRep', 'the release (in a block: a synchronous commit) waits for the standby');
my $l10 = session();
send_sql($l10, qq{LISTEN "$ch{r11}";});
%st = settle([$l10], 'Extension');
is($st{ $l10->{pid} }, 'idle',
	'LISTEN of the channel of a release stuck in its commit (nobody listened) returns at once');
is($node->safe_psql('postgres', "SELECT holder FROM dlock.locks WHERE resource = 'r11'"),
	'a', 'the resource is still held meanwhile');
is(state_of($rel), 'SyncRep', 'the release still waits for the standby');

# A LISTEN of another resource's channel returns at once, though the
# release of r11 is stuck in its commit; so does a LISTEN of r13's channel
# while a release of r13 that sends its event (l12 listens) is stuck: the
# notification is delivered to the new listener when it commits.
my $l11 = session();
send_sql($l11, qq{LISTEN "$ch{r12}";});
%st = settle([$l11], 'Extension');
is($st{ $l11->{pid} }, 'idle', 'LISTEN of an unrelated channel does not wait for the stuck release');
my $rel13 = session();
send_sql($rel13, "BEGIN; SELECT dlock.unlock('r13', 'a'); COMMIT;");
%st = settle([$rel13], 'object', 'SyncRep');
like($st{ $rel13->{pid} }, qr/^(object|SyncRep)$/, 'a release of r13 (listened: it notifies) is stuck in its commit');
my $l13 = session();
send_sql($l13, qq{LISTEN "$ch{r13}";});
%st = settle([$l13], 'Extension');
is($st{ $l13->{pid} }, 'idle', 'LISTEN of the channel of a stuck release that notifies does not wait');

unblock();
%st = settle([ $l10, $rel, $rel13 ]);
is($st{ $rel13->{pid} }, 'idle', 'the release of r13 committed');
is($st{ $rel->{pid} }, 'idle', 'the release of r11 committed');
# Its event went to the outbox, for a reaper round (dlock.reap_interval is
# 1h here, but the reload in unblock() may have started one already).
$node->safe_psql('postgres', 'SELECT dlock.reap()');
my %got11;
for my $try (1 .. 50)
{
	received($l10, \%got11);
	last if @{ $got11{ $ch{r11} } // [] };
	usleep(100_000);
}
is_deeply($got11{ $ch{r11} }, [qq({"event":"released","resource":"r11","fence":$f11})],
	'the listener that came while the release of r11 was stuck gets its event');
my %got13;
for my $try (1 .. 50)
{
	received($_, \%got13) for $l12, $l13;    # (what is read is gone: keep it)
	last if 2 == @{ $got13{ $ch{r13} } // [] };
	usleep(100_000);
}
is_deeply($got13{ $ch{r13} }, [ (qq({"event":"released","resource":"r13","fence":$f13})) x 2 ],
	'both listeners of r13, the one that came while the release was stuck too, got its event');
my ($look) = $l10->query("SELECT dlock.try_lock('r11', 'l', '1h') > $f11");
like($look, qr/^t$/m, 'the listener\'s first look after LISTEN finds the resource free');

# A LISTEN with no release under way returns at once (and is counted).
my ($out) = $l10->query(qq{LISTEN "$ch{r1}"; SELECT 'listening'});
like($out, qr/listening/, 'LISTEN with nothing under way');

$_->quit for $l1, $l2, $l3, $l4, $l5, $l6, $l8, $l9, $l10, $l11, $l12, $l13, $rel, $rel13;

# A release of more channels than a commit decides on (16), stuck in its
# commit: every listener that comes meanwhile returns at once and gets its
# event once the release committed and a round delivered it.
my @many = map { "m$_" } 1 .. 18;
$node->safe_psql('postgres', "SELECT dlock.try_lock('$_', 'm', '1h')") for @many;
my %mfence = split /[|\n]/,
  $node->safe_psql('postgres', "SELECT resource, fence FROM dlock.locks WHERE holder = 'm'");
block();
my $relm = session();
send_sql($relm, "BEGIN; SELECT dlock.unlock_all('m'); COMMIT;");
%st = settle([$relm], 'object', 'SyncRep');
like($st{ $relm->{pid} }, qr/^(object|SyncRep)$/, 'a release of 18 resources is stuck in its commit');
my %lm;
for my $r (@many)
{
	$lm{$r} = session();
	send_sql($lm{$r}, qq{LISTEN "@{[ channel($r) ]}";});
}
%st = settle([ values %lm ], 'Extension');
my @at_once = grep { $st{ $lm{$_}{pid} } eq 'idle' } @many;
is(scalar(@at_once), scalar(@many), 'each LISTEN returned at once');
unblock();
%st = settle([ $relm, values %lm ]);
is(scalar(grep { $_ eq 'idle' } values %st), @many + 1, 'the release and every LISTEN finished');
$node->safe_psql('postgres', 'SELECT dlock.reap()');
my %gotm;
for my $try (1 .. 50)
{
	received($lm{$_}, \%gotm) for @at_once;
	last if @at_once == grep { @{ $gotm{ channel($_) } // [] } } @at_once;
	usleep(100_000);
}
is_deeply($gotm{ channel($_) }, [qq({"event":"released","resource":"$_","fence":$mfence{$_}})],
	"$_: its LISTEN returned at once, and it got the event") for @at_once;
$_->quit for $relm, values %lm;
$node->stop;

# Not preloaded: no counting, every event is sent, as before.
my $plain = PostgreSQL::Test::Cluster->new('listeners_plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION dlock');
my $pl = $plain->background_psql('postgres', timeout => 300);
$pl->query_safe(q{DO $$ BEGIN EXECUTE format('LISTEN %I', dlock.channel('p1')); END $$});
my $pf = $plain->safe_psql('postgres', "SELECT dlock.try_lock('p1', 'a', '1h')");
$plain->safe_psql('postgres', "SELECT dlock.unlock('p1', 'a')");
my %pgot;
for my $try (1 .. 50)
{
	received($pl, \%pgot);
	last if %pgot;
	usleep(100_000);
}
is_deeply([ map { @$_ } values %pgot ], [qq({"event":"released","resource":"p1","fence":$pf})],
	'not preloaded: the listener gets the released event');
$pl->quit;
$plain->stop;
done_testing();
