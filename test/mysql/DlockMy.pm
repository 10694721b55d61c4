# DlockMy.pm: a throwaway MariaDB server for the tests of dlock's MySQL and
# MariaDB edition (test/mysql/t/*.t), with mysql/dlock.sql installed.
#
# Each test file starts its own server: a private datadir in a temporary
# directory, a Unix socket there and a free loopback port, run as the
# current (unprivileged) user; the system service is never used.  Users
# alice, bob (ordinary) and admin (granted break_lock) are created.
#
# Shared state: one object per server, used by one test process (children
# forked by a test open their own connections with ->connect).
package DlockMy;

use strict;
use warnings;
use DBI;
use Fcntl qw(:flock O_RDWR O_CREAT);
use File::Spec;
use File::Temp qw(tempdir);
use IO::Socket::INET;
use POSIX qw(:sys_wait_h);
use Time::HiRes qw(usleep time);

# mariadbd is in /usr/sbin, which Debian leaves out of other users' PATH.
$ENV{PATH} .= ':/usr/local/sbin:/usr/sbin:/sbin' unless ":$ENV{PATH}:" =~ m{:/usr/sbin:};

our $TOP = do { my $d = __FILE__; $d =~ s{/test/mysql/DlockMy\.pm$}{}; $d eq __FILE__ ? '.' : $d };

# free_port: a loopback port nothing listens on, reserved for this process
# while it lives (a file naming its pid in /tmp/dlock-my-ports-UID, under
# flock): test files that run side by side (prove -j) never pick the same
# port, not even for a server that restarts on its own port.
sub free_port {
    my $dir = File::Spec->tmpdir . "/dlock-my-ports-$<";
    mkdir $dir, 0700;
    for (1 .. 200) {
        my $p = 30000 + int(rand(20000));
        my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $p,
                                      Proto => 'tcp', ReuseAddr => 0) or next;
        close $s;
        sysopen(my $fh, "$dir/$p", O_RDWR | O_CREAT, 0600) or die "open $dir/$p: $!";
        flock($fh, LOCK_EX) or die "flock $dir/$p: $!";
        my $pid = <$fh> // 0;
        chomp $pid;
        if ($pid =~ /^\s*(\d+)$/ && $1 > 0 && kill(0, $1)) { close $fh; next; }   # ours too: one port per server
        seek($fh, 0, 0);
        truncate($fh, 0);
        print $fh "$$\n";
        close $fh;
        return $p;
    }
    die "no free port";
}

# new(%opt): init and start; opt{args} extra mariadbd options; opt{install}
# (default 1) installs mysql/dlock.sql and creates the users.
sub new {
    my ($class, %opt) = @_;
    my $dir = tempdir('dlock-my-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{DLOCK_KEEP});
    my $self = bless { owner_pid => $$, dir => $dir, sock => "$dir/mysqld.sock", port => free_port(),
                       args => $opt{args} || [] }, $class;
    # Each server has its own tmpdir: a starting mariadbd deletes every
    # "#sql*" file of its tmpdir, even a running server's temporary tables
    # (with /tmp shared, files run side by side broke each other's servers).
    mkdir "$dir/tmp" or die "mkdir $dir/tmp: $!";
    system("TMPDIR=$dir/tmp mariadb-install-db --no-defaults --datadir=$dir/data --user=" . getpwuid($<) .
           " --auth-root-authentication-method=normal --skip-test-db >$dir/install.log 2>&1") == 0
        or die "mariadb-install-db failed: " . `cat $dir/install.log`;
    $self->start;
    if ($opt{install} // 1) {
        $self->install;
        $self->do_root(
            "CREATE USER alice\@'localhost' IDENTIFIED BY 'pa'",
            "CREATE USER bob\@'localhost' IDENTIFIED BY 'pb'",
            "CREATE USER admin\@'localhost' IDENTIFIED BY 'pc'",
            "GRANT EXECUTE ON FUNCTION dlock.break_lock TO admin\@'localhost'");
    }
    return $self;
}

sub install {
    my ($self) = @_;
    my $out = `mariadb --no-defaults -uroot -S $self->{sock} < $TOP/mysql/dlock.sql 2>&1`;
    $? == 0 or die "install failed: $out";
    return $out;
}

sub start {
    my ($self, @more) = @_;
    my @cmd = ('mariadbd', '--no-defaults', "--datadir=$self->{dir}/data",
               "--socket=$self->{sock}", "--port=$self->{port}", '--bind-address=127.0.0.1',
               "--pid-file=$self->{dir}/mysqld.pid", "--log-error=$self->{dir}/error.log",
               "--tmpdir=$self->{dir}/tmp",
               '--innodb-buffer-pool-size=64M', '--innodb-log-file-size=48M',
               '--event-scheduler=ON', '--max-connections=300', @{ $self->{args} }, @more);
    my $pid = fork // die "fork: $!";
    if ($pid == 0) {
        open STDOUT, '>>', "$self->{dir}/stdout.log";
        open STDERR, '>&', \*STDOUT;
        exec @cmd or die "exec mariadbd: $!";
    }
    $self->{pid} = $pid;
    my $t0 = time;
    while (time - $t0 < 120) {
        my $dbh = eval { $self->connect('root', '', PrintError => 0) };
        return $self if $dbh;
        if (waitpid($pid, WNOHANG) == $pid) { last; }
        usleep(100_000);
    }
    # error.log is missing when mariadbd never ran: stdout.log says why.
    die "mariadbd did not start: " . `tail -n 20 $self->{dir}/stdout.log $self->{dir}/error.log 2>&1`;
}

# connect(user, password, %attr): a DBI handle, autocommit, errors raise.
sub connect {
    my ($self, $user, $pass, %attr) = @_;
    $user //= 'root';
    my %pw = (root => '', alice => 'pa', bob => 'pb', admin => 'pc');
    $pass //= $pw{$user};
    return DBI->connect("DBI:MariaDB:mariadb_socket=$self->{sock}", $user, $pass,
                        { RaiseError => 1, PrintError => 0, AutoCommit => 1,
                          mariadb_multi_statements => 0, AutoInactiveDestroy => 1, %attr });
}

sub do_root {
    my ($self, @sql) = @_;
    my $dbh = $self->connect('root');
    $dbh->do($_) for @sql;
    $dbh->disconnect;
}

sub kill9 {
    my ($self) = @_;
    kill 'KILL', $self->{pid};
    waitpid($self->{pid}, 0);
}

sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    kill 'TERM', $self->{pid};
    waitpid($self->{pid}, 0);
    $self->{pid} = undef;
}

sub DESTROY { my ($self) = @_; local $?; $self->stop if $self->{pid} && $$ == $self->{owner_pid}; }

# err(dbh, sql, binds...): "SQLSTATE: message" of the error, or "no error".
sub err {
    my ($dbh, $sql, @bind) = @_;
    my $ok = eval { $dbh->do($sql, undef, @bind); 1 };
    return 'no error' if $ok;
    return ($dbh->state // '?') . ': ' . ($dbh->errstr // $@);
}

# one(dbh, sql, binds...): the first column of the first row.
sub one {
    my ($dbh, $sql, @bind) = @_;
    my $row = $dbh->selectrow_arrayref($sql, undef, @bind);
    return $row ? $row->[0] : undef;
}

# call_lock(dbh, resource, holder, lease, wait): the fence CALL dlock.lock returns.
sub call_lock { my ($dbh, @args) = @_; return call_one($dbh, 'CALL dlock.lock(?, ?, ?, ?)', @args); }

# call_xact(dbh, resource, wait): the fence CALL dlock.xact_lock returns.
sub call_xact { my ($dbh, @args) = @_; return call_one($dbh, 'CALL dlock.xact_lock(?, ?)', @args); }

# call_one(dbh, sql, binds...): the first column of the first row a CALL returns.
sub call_one {
    my ($dbh, $sql, @args) = @_;
    my $sth = $dbh->prepare($sql);
    $sth->execute(@args);
    my $row = $sth->fetchrow_arrayref;
    my $f = $row ? $row->[0] : undef;
    $sth->finish;
    1 while $sth->more_results;
    return $f;
}

1;
