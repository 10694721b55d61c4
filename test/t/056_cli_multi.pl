# 056_cli_multi.pl - "dlock run R1 R2 ... -- COMMAND": several resources
# taken together (try_lock_all, 0.5), all or nothing.
#
# Covers: COMMAND's environment (DLOCK_RESOURCE and DLOCK_FENCE
# space-separated, in the order given; each fence the resource's current
# one), release of all when COMMAND exits, renewal of all while it runs, a
# busy resource (--wait 0: exit 75, none of the others taken), a wait woken
# by the release of the busy one (LISTEN on every channel), a lease lost on
# one of them (exit 76), usage errors (a resource named twice, --fair).
#
# Env: DLOCK_CLI (default $TESTDIR/cli/dlock, else cli/dlock).
# Promises: P11 P15
use strict;
use warnings;

use File::Spec;

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

my $node = PostgreSQL::Test::Cluster->new('cli_multi');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

$ENV{CONN} = $node->connstr('postgres');    # for COMMANDs' psql
my $tmp = PostgreSQL::Test::Utils::tempdir();
DlockTest::Proc::set_dir($tmp);

sub conn { return $node->connstr('postgres') . ' application_name=' . ($_[0] // 'dlock_multi') }
sub sql { return $node->safe_psql('postgres', $_[0]) }

sub cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ $cli, @_ ], '<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	return (DlockTest::Proc::code_of($?), $out, $err);
}

my ($rc, $out, $err);

# ---------- COMMAND's environment; everything released afterwards
($rc, $out, $err) = cli('-d', conn(), 'run', '--holder', 'h1', '--lease', '1h', 'm/b', 'm/a "q"', 'm/c', '--',
	'sh', '-c', 'echo "$DLOCK_RESOURCE|$DLOCK_FENCE"; psql -X -A -t -d "$CONN" -c "'
	  . q{SELECT string_agg(fence::text, ' ' ORDER BY array_position(ARRAY['m/b', 'm/a \"q\"', 'm/c'], resource)) FROM dlock.locks WHERE holder = 'h1'}
	  . '"; exit 3');
is($rc, 3, "COMMAND's exit status");
my ($env_line, $held) = split /\n/, $out;
like($env_line, qr/^m\/b m\/a "q" m\/c\|\d+ \d+ \d+$/,
	'DLOCK_RESOURCE and DLOCK_FENCE: space-separated, in the order given');
my ($fences) = $env_line =~ /\|(.*)$/;
is($held, $fences, 'each fence is its resource\'s current holding');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 'h1'}), '0', 'all released when COMMAND exits');

# ---------- All or nothing: a busy resource, --wait 0
is(sql(q{SELECT dlock.try_lock('m/busy', 'other', '1h') IS NOT NULL}), 't', 'another holder has m/busy');
($rc, $out, $err) = cli('-d', conn(), 'run', '--holder', 'h2', '--wait', '0', 'm/x', 'm/busy', '--', 'true');
is($rc, 75, 'busy: exit 75');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 'h2'}), '0', 'none of the others taken');

# ---------- A wait woken by the release of the busy one
my $mark = "$tmp/waited";
my $pid = DlockTest::Proc::spawn('waiter', cmd => [ $cli, '-d', conn('dlock_multi_wait'), 'run', '--holder', 'h3',
		'--lease', '1h', '--wait', '60s', 'm/x', 'm/busy', '--', 'sh', '-c', 'echo "$DLOCK_FENCE" > "$MARK"' ],
	MARK => $mark);
ok($node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'dlock_multi_wait' AND query ~ '^(ROLLBACK|LISTEN)'}),
	'the CLI waits');
is(sql(q{SELECT count(*) FROM dlock.locks WHERE holder = 'h3'}), '0', '... holding nothing meanwhile');
is(sql(q{SELECT dlock.unlock('m/busy', 'other')}), '0', 'the busy one is released');
is(DlockTest::Proc::wait_exit($pid, 60), 0, 'the waiting CLI ran COMMAND');
like(DlockTest::Proc::slurp($mark), qr/^\d+ \d+$/, '... with both fences');

# ---------- Renewed together while COMMAND runs; a lost lease on one
($rc, $out, $err) = cli('-d', conn(), 'run', '--holder', 'h4', '--lease', '3s', 'm/r1', 'm/r2', '--',
	'sh', '-c', 'sleep 4; psql -X -A -t -d "$CONN" -c "'
	  . q{SELECT count(*) FROM dlock.locks WHERE holder = 'h4' AND NOT expired}
	  . '"');
is($rc, 0, 'a COMMAND outliving the first lease');
is($out, "2\n", 'both leases renewed while it ran');
($rc, $out, $err) = cli('-d', conn(), 'run', '--holder', 'h5', '--lease', '3s', '--grace', '1s', 'm/l1', 'm/l2', '--',
	'sh', '-c', 'psql -X -q -d "$CONN" -c "'
	  . q{SELECT dlock.unlock('m/l2', 'h5')}
	  . '" >/dev/null; exec sleep 60');
is($rc, 76, 'one of them lost (renew says NULL): exit 76') or diag($err);

# ---------- Usage errors
($rc, $out, $err) = cli('-d', conn(), 'run', 'm/x', 'm/y', 'm/x', '--', 'true');
is($rc, 64, 'a resource named twice: exit 64');
like($err, qr/named twice/, '... says so');
($rc, $out, $err) = cli('-d', conn(), 'run', '--fair', 'm/x', 'm/y', '--', 'true');
is($rc, 64, '--fair with several resources: exit 64');

$node->stop;
done_testing();
