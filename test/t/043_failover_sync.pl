# 043_failover_sync.pl: failover to a synchronous standby loses no
# acknowledged acquisition or renewal (promise 3, [ha]).
#
#   1. Eight clients, as a role with synchronous_commit = off, acquire,
#      renew and release sixteen resources at random (DBD::Pg, autocommit)
#      and log every answer they get.  Mid-run the primary's postmaster is
#      killed with SIGKILL and the standby promoted.  On the new primary:
#      for every resource whose last acknowledged operation was an
#      acquisition or renewal (and no release was in flight), that holding
#      is there with its holder and fence and an expiry at least the one
#      acknowledged; a resource whose last acknowledged operation was a
#      release is free, or back with the same holder and fence (a release
#      is asynchronous), never anyone else's with that fence or a lower
#      one; every fence the new primary hands out is above every fence
#      acknowledged before.
#   2. A release, acknowledged but not yet flushed (the walwriter frozen),
#      is lost with the primary: after promotion the holding is back, and
#      stays exclusive until it expires with its lease; then another holder
#      takes it with a higher fence.
# With the standby down an acquisition waits for it: 041_sync_standby.pl.
# Promises: P1 P3 P14

use strict;
use warnings;

use Time::HiRes qw(time usleep);
use POSIX qw(:sys_wait_h);

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/../perl";
use DlockTest::Proc;
use DlockTest::Crash;

plan skip_all => 'DBD::Pg is needed (libdbd-pg-perl)' unless eval { require DBD::Pg; 1 };

my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);
my $CLIENTS = 8;
my $RESOURCES = 16;

my $A = PostgreSQL::Test::Cluster->new('A');
$A->init(allows_streaming => 1);
$A->append_conf('postgresql.conf', q{
shared_preload_libraries = 'dlock'
dlock.database = 'postgres'
dlock.reap_interval = '100ms'
bgwriter_lru_maxpages = 0
});
$A->start;
$A->safe_psql('postgres', q{
CREATE EXTENSION dlock;
CREATE ROLE lazy LOGIN;
ALTER ROLE lazy SET synchronous_commit = off;
});

# sync_standby_of: a synchronous standby of node.
sub sync_standby_of
{
	my ($node, $name) = @_;
	$node->backup("bk_$name");
	my $s = PostgreSQL::Test::Cluster->new($name);
	$s->init_from_backup($node, "bk_$name", has_streaming => 1);
	$s->start;
	$node->safe_psql('postgres', "ALTER SYSTEM SET synchronous_standby_names = '$name'");
	$node->reload;
	ok($node->poll_query_until('postgres',
			"SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = '$name'"),
		"$name is a synchronous standby");
	return $s;
}

# client: run random operations until the connection breaks; log "A r f"
# (acquired), "N r f expiry" (renewed), "u r f" (release sent), "U r f"
# (released), each line as soon as the answer came.
sub client
{
	my ($c, $dsn) = @_;
	my $pid = fork() // die "fork: $!";
	return $pid if $pid;
	srand($$ ^ time);
	open(my $log, '>', "$tmp/client$c.log") or die;
	$log->autoflush(1);
	my $dbh = DBI->connect($dsn, 'lazy', '', { AutoCommit => 1, RaiseError => 0, PrintError => 0 })
	  or POSIX::_exit(2);
	my $h = "c$c";
	my %held;
	while (1)
	{
		my $r = 's' . int(rand($RESOURCES));
		if (!exists $held{$r})
		{
			my $row = $dbh->selectrow_arrayref(
				"SELECT dlock.try_lock(?, ?, '1h')", undef, $r, $h) or last;
			next unless defined $row->[0];
			$held{$r} = $row->[0];
			print $log "A $r $row->[0]\n";
		}
		elsif (rand() < 0.6)
		{
			my $row = $dbh->selectrow_arrayref(
				"SELECT extract(epoch FROM dlock.renew(?, ?, '1h', ?))", undef, $r, $h, $held{$r})
			  or last;
			print $log (defined $row->[0] ? "N $r $held{$r} $row->[0]\n" : "L $r $held{$r}\n");
			delete $held{$r} unless defined $row->[0];
		}
		else
		{
			print $log "u $r $held{$r}\n";
			my $row = $dbh->selectrow_arrayref("SELECT dlock.unlock(?, ?, ?)", undef, $r, $h, $held{$r})
			  or last;
			print $log "U $r $held{$r}\n";
			delete $held{$r};
		}
	}
	POSIX::_exit(0);
}

# ---------- 1. stress, kill -9 mid-run, promote
my $B = sync_standby_of($A, 'B');
my $dsn = 'dbi:Pg:dbname=postgres;host=' . $A->host . ';port=' . $A->port;
my @pids = map { client($_, $dsn) } 1 .. $CLIENTS;
# Until enough was acknowledged (at least 3 s; on a loaded machine the
# synchronous commits take longer), then the crash.
my $t_run = time;
while (time < $t_run + 120)
{
	usleep(200_000);
	next if time < $t_run + 3;
	my ($a, $n) = (0, 0);
	for my $c (1 .. $CLIENTS)
	{
		my $text = slurp("$tmp/client$c.log") // '';
		$a += () = $text =~ /^A /mg;
		$n += () = $text =~ /^N /mg;
	}
	last if $a >= 60 && $n >= 25;
}
$A->kill9;
for my $p (@pids)
{
	my $t = time + 60;
	usleep(50_000) while waitpid($p, WNOHANG) == 0 && time < $t;
}
$B->promote;

my (%last, %inflight, @acked);
my ($nA, $nN, $nU) = (0, 0, 0);
for my $c (1 .. $CLIENTS)
{
	for (split /\n/, slurp("$tmp/client$c.log") // '')
	{
		my ($op, $r, $f, $e) = split / /;
		if ($op eq 'u') { $inflight{$r}{$f} = 1; next; }
		delete $inflight{$r}{$f} if $op eq 'U';
		push @acked, $f if $op eq 'A';
		$nA++ if $op eq 'A';
		$nN++ if $op eq 'N';
		$nU++ if $op eq 'U';
		# per resource, the last acknowledged operation on its newest holding
		$last{$r} = [ $op, $f, $e, "c$c" ]
		  if !exists $last{$r} || fence_lt($last{$r}[1], $f) || $last{$r}[1] eq $f;
	}
}
diag("acknowledged before the kill: $nA acquisitions, $nN renewals, $nU releases");
cmp_ok($nA, '>=', 50, 'the stress run acquired enough');
cmp_ok($nN, '>=', 20, 'and renewed enough');

my %row = map { my @x = split /\|/; $x[0] => [ @x[ 1 .. 3 ] ] } split /\n/,
  $B->safe_psql('postgres',
	q{SELECT resource, coalesce(holder, '-'), fence, coalesce(extract(epoch FROM expires_at), 0) FROM dlock.leases});
my @bad;
my ($held_checked, $came_back) = (0, 0);
for my $r (sort keys %last)
{
	my ($op, $f, $e, $h) = @{ $last{$r} };
	my ($rh, $rf, $re) = @{ $row{$r} // [ 'missing', 0, 0 ] };
	if ($op eq 'A' || $op eq 'N')
	{
		# released, unacknowledged (0.5: a released resource keeps no row)
		next if $inflight{$r}{$f} && ($rh eq '-' || $rh eq 'missing' || fence_lt($f, $rf));
		push @bad, "$r: acknowledged $op by $h fence $f, found $rh fence $rf"
		  unless $rh eq $h && $rf eq $f;
		$held_checked++;
		push @bad, "$r: renewed until $e, found $re" if $op eq 'N' && $re + 0.001 < $e;
	}
	elsif ($op eq 'U')
	{
		push @bad, "$r: released $f by $h, found $rh with fence $rf"
		  unless $rh eq '-' || $rh eq 'missing' || ($rh eq $h && $rf eq $f) || fence_lt($f, $rf);
		$came_back++ if $rh eq $h && $rf eq $f;
	}
}
diag("at the kill: $held_checked resources held (checked), $came_back released ones came back");
cmp_ok($held_checked, '>=', 1, 'some acknowledged holdings were live at the kill');
is(join("\n", @bad), '', 'every acknowledged acquisition and renewal is on the new primary with its fence');

my $max_old = (sort { fence_lt($a, $b) ? -1 : 1 } @acked)[-1];
my @new = split /\n/, $B->safe_psql('postgres',
	q{SELECT dlock.try_lock('new' || i, 'h', '1h') FROM generate_series(1, 20) i});
ok(fence_lt($max_old, $new[0]), "new fences ($new[0]) are above every acknowledged one ($max_old)");

# ---------- 2. a release lost with the primary comes back, then expires
my $C = sync_standby_of($B, 'C');
# The lease must be live at the promotion (to be refreshed there), and
# the refreshed one at the look that follows: so the acquisition (its
# commit flushed by its own backend and the synchronous standby's answer)
# and the release share one psql, after the walwriter is frozen; the
# look and the next holder's wait share another.  (A psql start is 0.5 to
# 2 s now and then on a loaded machine.)
my $LEASE = 4;
my $ww = freeze_wal_writer($B);
my ($f, $released) = split /\n/, $B->safe_psql('postgres', qq{
	SELECT dlock.try_lock('rel', 'hr', '${LEASE}s');
	SELECT dlock.unlock('rel', 'hr');});
is($released, '0', 'B: rel released (asynchronously)');
crash_with($B, $ww);
$C->promote;
my $t_promoted = time;
my ($back, $first) = split /\n/, $C->safe_psql('postgres', q{
	SELECT holder || ' ' || fence FROM dlock.locks WHERE resource = 'rel';
	SELECT dlock.lock('rel', 'other', '10s', '30s');});
my $t_free = ($first // '') ne '' ? time : undef;
is($back, "hr $f", 'the lost release: the holding is back with its holder and fence');
ok(defined $t_free, 'it expires with its lease: another holder takes it');
ok(fence_lt($f, $first), "with a higher fence ($first > $f)");
cmp_ok($t_free - $t_promoted, '<=', $LEASE + 3,
	sprintf('within its lease of the promotion (%.1f s)', $t_free - $t_promoted));

$C->stop;
done_testing();
