# DlockTest::Bouncer: a throwaway pgbouncer in transaction mode in front of
# a test cluster (test/t/032_fair.pl, 033_elect.pl, 053_cli_fair.pl).
#
#   use DlockTest::Bouncer;
#   my $bport = DlockTest::Bouncer::start($node, $tmp, pool => 3, clients => 50);
#   # undef when pgbouncer is not installed; stopped at the test's end
#
# Listens on 127.0.0.1 only, trusts the current OS user (and the roles in
# users => [...]), logs to $tmp/pgbouncer.log; serves database postgres
# (or dbname => 'x'); one ok() says whether it accepts connections.
# Drivers that send extra_float_digits at startup (lib/pq, JDBC) are let in.

package DlockTest::Bouncer;

use strict;
use warnings;

use DBI;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use Test::More;
use Time::HiRes qw(usleep);

my $binary = '/usr/sbin/pgbouncer';
my @running;

sub start
{
	my ($node, $dir, %o) = @_;
	return undef unless -x $binary;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = getpwuid($<);
	my ($host, $pgport) = ($node->host, $node->port);
	my ($pool, $clients) = ($o{pool} // 3, $o{clients} // 50);
	my $db = $o{dbname} // 'postgres';
	open(my $fh, '>', "$dir/userlist.txt") or die "$dir/userlist.txt: $!";
	print $fh qq{"$_" ""\n} for $user, @{ $o{users} // [] };
	close($fh);
	open($fh, '>', "$dir/pgbouncer.ini") or die "$dir/pgbouncer.ini: $!";
	print $fh <<"EOF";
[databases]
$db = host=$host port=$pgport dbname=$db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
ignore_startup_parameters = extra_float_digits
default_pool_size = $pool
max_client_conn = $clients
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
	close($fh);
	push @running, IPC::Run::start([ $binary, "$dir/pgbouncer.ini" ],
		'>', "$dir/pgbouncer.out", '2>&1');
	my $up = 0;
	for (1 .. 600)
	{
		my $dbh = DBI->connect("dbi:Pg:host=127.0.0.1;port=$port;dbname=$db;sslmode=disable",
			'', '', { PrintError => 0, RaiseError => 0 });
		if ($dbh) { $up = 1; $dbh->disconnect; last }
		usleep(100_000);
	}
	ok($up, 'pgbouncer accepts connections');
	return $port;
}

END { local $?; $_->kill_kill for @running }

1;
