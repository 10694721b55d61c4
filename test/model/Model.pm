# Model.pm: one run of dlock's randomized, model-checked workload.
#
# Model::run(conninfo => ..., seed => ..., clients => ..., seconds => ...,
# resources => ..., dir => ...) prepares the database (the extension, and
# two login roles besides the connecting superuser, which is the extension's
# owner: ROLE_A, who may break_lock, and ROLE_B, who may not), forks the
# clients of ModelDriver.pm (roles in turn: superuser, A, B; plus one prober
# of role B; each runs `seconds`, or up to twice that on a loaded machine:
# ModelDriver::owes_calls), waits for them, and hands their logs to ModelCheck.pm.  It
# prints the seed first; the same seed replays the same random choices
# (the interleaving, set by the scheduler, differs).  Returns
# (violations, stats, seed).  With portable => 1 the database holds the
# portable edition (portable/dlock.sql), installed by the conninfo's user,
# which owns it and need not be a superuser; ROLE_A and ROLE_B must then
# exist already unless that user may create roles.  The logs stay in dir; Model::check_dir(dir)
# checks them again offline.

package Model;

use strict;
use warnings;

use File::Path qw(make_path);
use POSIX ();
use Time::HiRes ();

use ModelCheck;
use ModelDriver;

our $ROLE_A = 'dlock_model_a';
our $ROLE_B = 'dlock_model_b';

# setup: extension, roles and grants, as the superuser of conninfo (or,
# portable, as the owner of the portable schema); returns the owner's name
# and whether it is a superuser.
sub setup
{
	my ($conninfo, $portable) = @_;
	my $dbh = ModelDriver::connect_as($conninfo, undef);
	$dbh->{RaiseError} = 1;
	if ($portable)
	{
		my ($owner) = $dbh->selectrow_array(
			q{SELECT pg_get_userbyid(n.nspowner) FROM pg_namespace n
			   WHERE n.nspname = 'dlock' AND to_regclass('dlock.portable') IS NOT NULL});
		die "no portable edition in this database (psql -f portable/dlock.sql first)\n"
		  unless defined $owner;
		my ($me) = $dbh->selectrow_array('SELECT current_user');
		die "the portable schema is owned by $owner, not $me\n" unless $owner eq $me;
	}
	else
	{
		$dbh->do('CREATE EXTENSION IF NOT EXISTS dlock');
	}
	for my $role ($ROLE_A, $ROLE_B)
	{
		my ($exists) = $dbh->selectrow_array('SELECT count(*) FROM pg_roles WHERE rolname = $1',
			undef, $role);
		$dbh->do("CREATE ROLE $role LOGIN") unless $exists;
	}
	$dbh->do("GRANT EXECUTE ON FUNCTION dlock.break_lock(text) TO $ROLE_A");
	my ($super, $is_super) = $dbh->selectrow_array(
		'SELECT current_user, rolsuper::int FROM pg_roles WHERE rolname = current_user');
	$dbh->disconnect;
	return ($super, $is_super);
}

sub run
{
	my (%a) = @_;
	my $seed = $a{seed} // (time() ^ ($$ << 8)) % 2_000_000_000;
	my $clients = $a{clients} // 6;
	my $seconds = $a{seconds} // 10;
	my $nres = $a{resources} // 3;
	my $dir = $a{dir} // "/tmp/dlock-model-$$";
	# The tag begins the run's resources and ends its holder texts: runs
	# sharing a database need distinct tags (this process's by default).
	my $tag = $a{tag} // "m$$";
	my $out = $a{out} // \*STDOUT;
	print $out "dlock model: seed $seed ($clients clients + 1 prober, $seconds s, $nres resources, logs in $dir)\n";
	make_path($dir);
	my ($super, $is_super) = setup($a{conninfo}, $a{portable});

	my @roles = ([ $super, undef, $is_super ], [ $ROLE_A, $ROLE_A, 0 ], [ $ROLE_B, $ROLE_B, 0 ]);
	my @res = map { "$tag/r$_" } 0 .. $nres - 1;
	my (@pids, @logs);
	for my $i (0 .. $clients)
	{
		my $prober = $i == $clients;
		my ($role, $login, $su) = @{ $prober ? $roles[2] : $roles[ $i % 3 ] };
		my $log = "$dir/client$i.log";
		push @logs, $log;
		my $client = ModelDriver->new(
			id => $i, role => $role, login => $login, is_super => $su,
			conninfo => $a{conninfo}, seed => ($seed * 1009 + $i * 7919) % 4294967291,
			seconds => $seconds, resources => \@res, tag => $tag,
			probe => $prober ? "$tag/probe" : undef, logfile => $log,
			portable => $a{portable});
		my $pid = fork;
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			my $ok = eval { $client->run; 1 };
			print STDERR "client $i: $@" unless $ok;
			POSIX::_exit($ok ? 0 : 1);
		}
		push @pids, $pid;
	}
	my $failed_clients = 0;
	for my $pid (@pids)
	{
		waitpid($pid, 0);
		$failed_clients++ if $? != 0;
	}
	my ($v, $stats) = check_logs($out, @logs);
	$stats->{'clients that died'} = $failed_clients;
	push @$v, "VIOLATION [client] $failed_clients client(s) died (see stderr)\n"
	  if $failed_clients;
	report($out, "seed $seed", $v, $stats);
	return ($v, $stats, $seed);
}

# check_logs: load and check the logs, printing how long the check took.
sub check_logs
{
	my ($out, @logs) = @_;
	my $start = Time::HiRes::time();
	my $ops = ModelCheck::load(@logs);
	my ($v, $stats) = ModelCheck::check($ops);
	printf $out "dlock model: checked %d ops of %d logs in %.1f s\n", scalar @$ops,
	  scalar @logs, Time::HiRes::time() - $start;
	return ($v, $stats);
}

sub report
{
	my ($out, $what, $v, $stats) = @_;
	print $out "dlock model: " . join(', ', map { "$_ $stats->{$_}" } sort keys %$stats) . "\n";
	print $out $_ for @$v;
	print $out "dlock model: $what: " . (@$v ? scalar(@$v) . " violation(s)" : 'PASS') . "\n";
}

# check_dir: check again, offline, the logs a run left in dir (Model::run's
# dir, kept); returns (violations, stats).
sub check_dir
{
	my ($dir, $out) = @_;
	$out //= \*STDOUT;
	my @logs = sort glob("$dir/client*.log");
	die "no client*.log in $dir\n" unless @logs;
	my ($v, $stats) = check_logs($out, @logs);
	report($out, $dir, $v, $stats);
	return ($v, $stats);
}

1;
