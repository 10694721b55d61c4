# DlockTest::Patroni: a throwaway Patroni cluster for the TAP tests
# (test/t/047_patroni.pl): one etcd member and N Patroni-managed PostgreSQL
# nodes with dlock preloaded, all on 127.0.0.1 ports reserved with
# PostgreSQL::Test::Cluster::get_free_port(), all files under one private
# directory.  Nothing here needs root or touches a system etcd or Patroni.
#
#   use FindBin; use lib "$FindBin::RealBin/../perl";
#   use DlockTest::Patroni;
#   my $pc = DlockTest::Patroni->new(nodes => 2, dir => $tmp);
#   $pc->start;                       # etcd, the nodes, a leader, CREATE EXTENSION
#   my $leader = $pc->wait_leader;    # node name, e.g. "node1"
#   my $dbh = $pc->connect($leader);  # DBI handle (DBD::Pg) to that node
#   $pc->kill_postmaster($leader);    # SIGKILL of its postmaster
#   $pc->teardown;                    # also run at exit, even after a die
#
# The PostgreSQL binaries are taken from PATH (pg_config --bindir), so that
# the tests use whatever PostgreSQL dlock was installed into.  The state of
# an object (ports, pids) belongs to the test process that created it; a
# small guard process kills everything if that test process dies without
# running its END blocks (SIGKILL by a timeout).

package DlockTest::Patroni;

use strict;
use warnings;

use DBI;
use File::Path qw(mkpath);
use HTTP::Tiny;
use JSON::PP;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

my @live;    # clusters to tear down at exit

# new: a cluster description; nothing is started.  Options: nodes (2),
# dir (a new temporary directory), scope ("dlock"), ttl (10), loop_wait (1),
# retry_timeout (4), parameters (extra postgresql.parameters, a hash).
sub new
{
	my ($class, %o) = @_;
	my $self = bless {
		n => $o{nodes} // 2,
		dir => $o{dir} // PostgreSQL::Test::Utils::tempdir(),
		scope => $o{scope} // 'dlock',
		ttl => $o{ttl} // 10,
		loop_wait => $o{loop_wait} // 1,
		retry_timeout => $o{retry_timeout} // 4,
		parameters => $o{parameters} // {},
		http => HTTP::Tiny->new(timeout => 3),
		owner => $$,
		nodes => {},
	}, $class;
	my $bindir = `pg_config --bindir 2>/dev/null`;
	chomp $bindir;
	die "DlockTest::Patroni: pg_config --bindir failed (is PostgreSQL on PATH?)"
	  unless $bindir ne '' && -x "$bindir/postgres";
	$self->{bindir} = $bindir;
	$self->{etcd_client} = PostgreSQL::Test::Cluster::get_free_port();
	$self->{etcd_peer} = PostgreSQL::Test::Cluster::get_free_port();
	for my $i (1 .. $self->{n})
	{
		my $name = "node$i";
		$self->{nodes}{$name} = {
			name => $name,
			pg_port => PostgreSQL::Test::Cluster::get_free_port(),
			api_port => PostgreSQL::Test::Cluster::get_free_port(),
			data_dir => "$self->{dir}/$name/data",
			yml => "$self->{dir}/$name.yml",
			log => "$self->{dir}/$name.log",
		};
	}
	return $self;
}

# names: the node names, in order.
sub names { my $self = shift; return map { "node$_" } 1 .. $self->{n}; }

# node: a node's description (name, pg_port, api_port, data_dir, yml, log).
sub node { my ($self, $name) = @_; return $self->{nodes}{$name} // die "no node $name"; }

# start: etcd, then every node's Patroni; waits for a leader and for every
# replica to stream, and creates the dlock extension on the leader.
sub start
{
	my ($self) = @_;
	push @live, $self;
	$self->_start_guard;
	$self->_start_etcd;
	for my $name ($self->names)
	{
		$self->_write_yml($name);
		$self->start_node($name);
		# Let the first node bootstrap alone, so that it is the leader.
		$self->wait_leader(timeout => 120) if $name eq 'node1';
	}
	my $leader = $self->wait_leader(timeout => 120);
	$self->wait_members(timeout => 180);
	my $dbh = $self->connect($leader);
	$dbh->do('CREATE EXTENSION IF NOT EXISTS dlock') or die $dbh->errstr;
	$dbh->disconnect;
	return $leader;
}

# _spawn: fork and exec cmd with stdout and stderr appended to log; returns
# the pid.
sub _spawn
{
	my ($self, $log, @cmd) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>>', $log);
		open(STDERR, '>&', \*STDOUT);
		POSIX::setsid();    # out of the test's process group
		exec(@cmd) or POSIX::_exit(127);
	}
	return $pid;
}

# _write_pid: record a pid for the guard process.
sub _write_pid
{
	my ($file, $pid) = @_;
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh "$pid\n";
	close($fh);
	return;
}

# _start_etcd: one etcd member on the reserved loopback ports, its data in
# dir/etcd; waits until it reports healthy.
sub _start_etcd
{
	my ($self) = @_;
	my $c = "http://127.0.0.1:$self->{etcd_client}";
	my $p = "http://127.0.0.1:$self->{etcd_peer}";
	mkpath("$self->{dir}/etcd");
	$self->{etcd_pid} = $self->_spawn(
		"$self->{dir}/etcd.log", 'etcd',
		'--name' => 'e1',
		'--data-dir' => "$self->{dir}/etcd/data",
		'--listen-client-urls' => $c,
		'--advertise-client-urls' => $c,
		'--listen-peer-urls' => $p,
		'--initial-advertise-peer-urls' => $p,
		'--initial-cluster' => "e1=$p",
		'--initial-cluster-state' => 'new',
		'--initial-cluster-token' => "dlock-test-$$",
		'--heartbeat-interval' => 100,
		'--election-timeout' => 1000);
	_write_pid("$self->{dir}/etcd.pid", $self->{etcd_pid});
	my $deadline = time + 60;
	while (time < $deadline)
	{
		my $r = $self->{http}->get("$c/health");
		return if $r->{success} && $r->{content} =~ /"health"\s*:\s*"true"/;
		die "etcd exited; see $self->{dir}/etcd.log"
		  if waitpid($self->{etcd_pid}, WNOHANG) == $self->{etcd_pid};
		usleep(100_000);
	}
	die "etcd did not become healthy; see $self->{dir}/etcd.log";
}

# _write_yml: the Patroni configuration of a node.
sub _write_yml
{
	my ($self, $name) = @_;
	my $n = $self->node($name);
	my %params = (
		shared_preload_libraries => 'dlock',
		'dlock.database' => 'postgres',
		max_prepared_transactions => 4,
		wal_level => 'replica',
		hot_standby => 'on',
		max_wal_senders => 10,
		max_replication_slots => 10,
		max_connections => 60,
		wal_keep_size => '128MB',
		%{ $self->{parameters} });
	my $params = join('', map { "        $_: '$params{$_}'\n" } sort keys %params);
	mkpath("$self->{dir}/$name");
	chmod(0700, "$self->{dir}/$name");
	open(my $fh, '>', $n->{yml}) or die "$n->{yml}: $!";
	print $fh <<"EOF";
scope: $self->{scope}
name: $name
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$n->{api_port}
  connect_address: 127.0.0.1:$n->{api_port}
etcd3:
  host: 127.0.0.1:$self->{etcd_client}
bootstrap:
  dcs:
    ttl: $self->{ttl}
    loop_wait: $self->{loop_wait}
    retry_timeout: $self->{retry_timeout}
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
$params
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication replicator 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$n->{pg_port}
  connect_address: 127.0.0.1:$n->{pg_port}
  data_dir: $n->{data_dir}
  bin_dir: $self->{bindir}
  pgpass: $self->{dir}/$name/pgpass
  authentication:
    superuser:
      username: postgres
      password: dlock-test-su
    replication:
      username: replicator
      password: dlock-test-rep
  parameters:
    unix_socket_directories: '$self->{dir}/$name'
watchdog:
  mode: off
EOF
	close($fh);
	return;
}

# start_node: start (or restart) a node's Patroni.
sub start_node
{
	my ($self, $name) = @_;
	my $n = $self->node($name);
	$n->{patroni_pid} = $self->_spawn($n->{log}, 'patroni', $n->{yml});
	_write_pid("$self->{dir}/$name.patroni.pid", $n->{patroni_pid});
	return;
}

# api: GET path from a node's REST API; the decoded JSON, or undef.
sub api
{
	my ($self, $name, $path) = @_;
	my $r = $self->{http}->get("http://127.0.0.1:" . $self->node($name)->{api_port} . $path);
	return undef unless $r->{status} < 600 && $r->{content} =~ /^\s*\{/;
	return eval { decode_json($r->{content}) };
}

# cluster: the members as a live node's REST API reports them (/cluster):
# a hash name -> {role, state, timeline, lag, ...}, or undef if no node
# answers.
sub cluster
{
	my ($self) = @_;
	for my $name ($self->names)
	{
		my $c = $self->api($name, '/cluster') or next;
		return { map { $_->{name} => $_ } @{ $c->{members} // [] } };
	}
	return undef;
}

# wait_leader: wait until one member is the running leader (and, with
# not => NAME, not that one); its name.  Dies after timeout (60 s).
sub wait_leader
{
	my ($self, %o) = @_;
	my $deadline = time + ($o{timeout} // 60);
	while (time < $deadline)
	{
		my $c = $self->cluster;
		for my $m (values %{ $c // {} })
		{
			next unless $m->{role} eq 'leader' && $m->{state} eq 'running';
			next if defined $o{not} && $m->{name} eq $o{not};
			# The REST API of the leader itself must agree (GET /leader: 200),
			# and the server must be out of recovery (promotion done).
			my $r = $self->{http}->get(
				"http://127.0.0.1:" . $self->node($m->{name})->{api_port} . '/leader');
			next unless $r->{status} == 200;
			my $dbh = DBI->connect(dsn($self->conninfo($m->{name})), '', '',
				{ AutoCommit => 1, RaiseError => 0, PrintError => 0 }) or next;
			my $row = $dbh->selectrow_arrayref('SELECT pg_is_in_recovery()');
			$dbh->disconnect;
			return $m->{name} if $row && !$row->[0];
		}
		usleep(100_000);
	}
	die "no leader" . (defined $o{not} ? " other than $o{not}" : '') . " after the timeout";
}

# wait_members: wait until every node is a member, the leader running and
# every other one streaming, with one of them a sync standby; the cluster.
sub wait_members
{
	my ($self, %o) = @_;
	my $deadline = time + ($o{timeout} // 60);
	while (time < $deadline)
	{
		my $c = $self->cluster // {};
		my @ok = grep {
			my $m = $c->{$_};
			$m && ($m->{role} eq 'leader' ? $m->{state} eq 'running'
				: $m->{state} =~ /^(running|streaming)$/ && defined $m->{lag} && $m->{lag} =~ /^\d+$/)
		} $self->names;
		my $sync = grep { $_->{role} eq 'sync_standby' } values %$c;
		return $c if @ok == $self->{n} && $sync >= 1;
		usleep(200_000);
	}
	die "the members did not all come up streaming: " . encode_json($self->cluster // {});
}

# sync_standby: the name of the current sync standby, or undef.
sub sync_standby
{
	my ($self) = @_;
	my $c = $self->cluster // {};
	my ($s) = grep { $c->{$_}{role} eq 'sync_standby' } sort keys %$c;
	return $s;
}

# conninfo: libpq connection string of one node (dbname postgres).
sub conninfo
{
	my ($self, $name, $extra) = @_;
	return "host=127.0.0.1 port=" . $self->node($name)->{pg_port}
	  . " dbname=postgres user=postgres connect_timeout=3" . ($extra ? " $extra" : '');
}

# multi_conninfo: a libpq multi-host connection string over every node,
# target_session_attrs=read-write (what an application would use).
sub multi_conninfo
{
	my ($self, $app) = @_;
	my @n = map { $self->node($_) } $self->names;
	return 'host=' . join(',', map { '127.0.0.1' } @n)
	  . ' port=' . join(',', map { $_->{pg_port} } @n)
	  . ' dbname=postgres user=postgres connect_timeout=2 target_session_attrs=read-write'
	  . ($app ? " application_name=$app" : '');
}

# dsn: a DBI data source for a connection string.
sub dsn { my ($conninfo) = @_; return "dbi:Pg:$conninfo"; }

# connect: a DBI handle to one node (dies on failure).
sub connect
{
	my ($self, $name) = @_;
	my $dbh = DBI->connect(dsn($self->conninfo($name)), '', '',
		{ AutoCommit => 1, RaiseError => 0, PrintError => 0 })
	  or die "connect to $name: $DBI::errstr";
	return $dbh;
}

# query: the first column of the first row of sql on a node (dies on error).
sub query
{
	my ($self, $name, $sql, @bind) = @_;
	my $dbh = $self->connect($name);
	my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
	die "$name: $sql: " . $dbh->errstr if $dbh->err;
	$dbh->disconnect;
	return $row ? $row->[0] : undef;
}

# postmaster_pid: the pid in a node's postmaster.pid, or undef.
sub postmaster_pid
{
	my ($self, $name) = @_;
	open(my $fh, '<', $self->node($name)->{data_dir} . '/postmaster.pid') or return undef;
	my $pid = <$fh>;
	close($fh);
	return undef unless defined $pid && $pid =~ /^(\d+)/;
	return $1;
}

# kill_postmaster: SIGKILL a node's postmaster (Patroni stays up); returns
# the time of the kill.
sub kill_postmaster
{
	my ($self, $name) = @_;
	my $pid = $self->postmaster_pid($name) // die "$name has no postmaster";
	kill('KILL', $pid) or die "kill $pid: $!";
	return time;
}

# _alive: the process exists (and is not a zombie).
sub _alive
{
	my ($pid) = @_;
	return 0 unless $pid;
	waitpid($pid, WNOHANG);
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $stat = <$fh> // '';
	close($fh);
	my ($state) = $stat =~ /\)\s+(\S)/;
	return defined($state) && $state ne 'Z' && $state ne 'X';
}

# _kill_all: SIGKILL every Patroni, SIGQUIT (then SIGKILL) every postmaster,
# stop etcd.  Used by teardown and by the guard process.
sub _kill_all
{
	my ($self) = @_;
	my @pm;
	for my $name ($self->names)
	{
		my $n = $self->node($name);
		kill('KILL', $n->{patroni_pid}) if $n->{patroni_pid};
	}
	for my $name ($self->names)
	{
		my $pid = $self->postmaster_pid($name);
		next unless $pid && _alive($pid);
		# Only a postgres process of ours: its data directory is ours.
		my $cmd = '';
		if (open(my $fh, '<', "/proc/$pid/cmdline")) { local $/; $cmd = <$fh> // ''; close $fh; }
		next unless $cmd =~ /postgres/;
		kill('QUIT', $pid);
		push @pm, $pid;
	}
	my $deadline = time + 10;
	usleep(100_000) while time < $deadline && grep { _alive($_) } @pm;
	kill('KILL', $_) for grep { _alive($_) } @pm;
	if ($self->{etcd_pid})
	{
		kill('TERM', $self->{etcd_pid});
		$deadline = time + 5;
		usleep(100_000) while time < $deadline && _alive($self->{etcd_pid});
		kill('KILL', $self->{etcd_pid}) if _alive($self->{etcd_pid});
	}
	return;
}

# _start_guard: a process that waits for the test process to go away and
# then kills the cluster (for a test killed before its END blocks ran).
sub _start_guard
{
	my ($self) = @_;
	my $parent = $$;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		POSIX::setsid();
		open(STDIN, '<', '/dev/null');
		open(STDOUT, '>', '/dev/null');
		open(STDERR, '>', '/dev/null');
		sleep(1) while kill(0, $parent);
		# The pids are not known here yet: read them from the files.
		for my $name ($self->names)
		{
			my $pidfile = "$self->{dir}/$name.patroni.pid";
			if (open(my $fh, '<', $pidfile)) { my $p = <$fh>; close $fh; $self->node($name)->{patroni_pid} = $1 if $p && $p =~ /(\d+)/; }
		}
		if (open(my $fh, '<', "$self->{dir}/etcd.pid")) { my $p = <$fh>; close $fh; $self->{etcd_pid} = $1 if $p && $p =~ /(\d+)/; }
		$self->_kill_all;
		POSIX::_exit(0);
	}
	$self->{guard_pid} = $pid;
	return;
}

# teardown: stop everything (idempotent).
sub teardown
{
	my ($self) = @_;
	return if $self->{down} || $$ != $self->{owner};
	$self->{down} = 1;
	$self->_kill_all;
	if ($self->{guard_pid})
	{
		kill('KILL', $self->{guard_pid});
		waitpid($self->{guard_pid}, 0);
	}
	@live = grep { $_ != $self } @live;
	return;
}

END
{
	my $rc = $?;
	$_->teardown for @live;
	$? = $rc;
}

1;
