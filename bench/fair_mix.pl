#!/usr/bin/perl
# bench/fair_mix.pl: one hot resource, fair waiters of both kinds.
#
#   perl bench/fair_mix.pl CONNINFO_DSN SERVER CLIENT SECONDS
#   e.g. perl bench/fair_mix.pl "dbi:Pg:host=/tmp;port=5432;dbname=postgres" 8 4 4
#
# SERVER clients loop lock(fair => true) (waiting in the server), CLIENT
# clients loop try_lock(fair => true) retried every 10 ms (waiting on their
# side, as the CLI does behind a pooler); each holds 50 us and unlocks.
# Prints the acquisitions of all of them in SECONDS (they start together).
# A lost wakeup shows as a collapse: the head of the queue asleep until the
# 5 s safety net while the resource is free (see CHANGELOG 0.2).
use strict;
use warnings;
use DBI;
use Time::HiRes qw(time usleep);

my ($dsn, $nsrv, $ncli, $secs) = @ARGV;
die "usage: perl bench/fair_mix.pl DSN SERVER CLIENT SECONDS\n" unless defined $secs;
my $go = time + 2;
my @pids;
pipe(my $r, my $w) or die;
for my $i (1 .. $nsrv + $ncli)
{
	my $pid = fork() // die "fork: $!";
	if ($pid) { push @pids, $pid; next; }
	close $r;
	my $dbh = DBI->connect($dsn, '', '', { AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	my $lk = $dbh->prepare($i <= $nsrv
		? q{SELECT dlock.lock($1, $2, '30s', '60s', fair => true)}
		: q{SELECT dlock.try_lock($1, $2, '30s', fair => true)});
	my $ul = $dbh->prepare(q{SELECT dlock.unlock($1, $2)});
	usleep(1000) while time < $go;
	my ($n, $end) = (0, $go + $secs);
	while (time < $end)
	{
		my $f;
		until (defined $f)
		{
			$lk->execute('bench/fair_mix', "m$i");
			($f) = $lk->fetchrow_array;
			usleep(10_000) unless defined $f;
		}
		my $t = time;
		1 while time - $t < 50e-6;
		$ul->execute('bench/fair_mix', "m$i");
		$ul->fetchrow_array;
		$n++;
	}
	print $w "$n\n";
	exit 0;
}
close $w;
my $total = 0;
$total += $_ for <$r>;
waitpid($_, 0) for @pids;
printf "%d acquisitions in %d s (%d in-server, %d client-side fair waiters)\n",
	$total, $secs, $nsrv, $ncli;
