# 060_pg_cron.pl: expiry without preloading dlock, by dlock.reap() from pg_cron.
#
# The contract: without shared_preload_libraries = 'dlock' everything still
# works, expiry is lazy, and reap() is safe to call from pg_cron at any rate.
# Here only pg_cron is preloaded; a job runs SELECT dlock.reap() every second
# (pg_cron 1.4's seconds syntax) and removes an expired lease.
# Promises: P2

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('cron');
$node->init;

my $pkglibdir = $node->config_data('--pkglibdir');
plan skip_all => "pg_cron is not installed ($pkglibdir/pg_cron.so missing)"
  unless -f "$pkglibdir/pg_cron.so";

$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'pg_cron'
cron.database_name = 'postgres'
# Run jobs in background workers: no libpq connection (host, auth) needed.
cron.use_background_workers = on
max_worker_processes = 16
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock; CREATE EXTENSION pg_cron');

is( $node->safe_psql(
		'postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'dlock reaper'}),
	'0',
	'no dlock reaper without preloading');

# Two leases that expire, with nothing to reap them yet, and a live one.
my $fence = $node->safe_psql('postgres',
	q{SELECT dlock.try_lock('cron-res', 'short', '200ms')});
like($fence, qr/^\d+$/, "took a 200ms lease, fence $fence");
$node->safe_psql('postgres',
	q{SELECT dlock.try_lock('cron-res2', 'short', '200ms'), dlock.try_lock('cron-live', 'long', '1h')});
ok( $node->poll_query_until(
		'postgres',
		q{SELECT bool_and(expired) FROM dlock.locks WHERE resource IN ('cron-res', 'cron-res2')}),
	'the leases have expired and are still listed (lazy expiry)');

# Schedule the reaping job every second (pg_cron 1.5 and later); pg_cron 1.4
# (Debian 12's) knows only minutes, so fall back to every minute there: the
# first run then comes at the next minute boundary, within 60 seconds.
my ($ret, $jobid, $err) = $node->psql('postgres',
	q{SELECT cron.schedule('dlock-reap', '1 second', 'SELECT dlock.reap()')});
if ($err =~ /invalid schedule/)
{
	diag('this pg_cron has no seconds schedules; reaping every minute instead');
	$jobid = $node->safe_psql('postgres',
		q{SELECT cron.schedule('dlock-reap', '* * * * *', 'SELECT dlock.reap()')});
}
like($jobid, qr/^\d+$/, "scheduled job $jobid");

ok( $node->poll_query_until(
		'postgres',
		q{SELECT count(*) = 0 FROM dlock.leases WHERE resource = 'cron-res' AND holder IS NOT NULL}),
	'the pg_cron job reaped the expired lease');
ok( $node->poll_query_until(
		'postgres',
		"SELECT count(*) > 0 FROM cron.job_run_details WHERE jobid = $jobid AND status = 'succeeded'"),
	'pg_cron recorded a successful run');

ok( $node->poll_query_until(
		'postgres',
		q{SELECT count(*) = 0 FROM dlock.leases WHERE resource = 'cron-res2' AND holder IS NOT NULL}),
	'the second expired lease is reaped as well');
is($node->safe_psql('postgres', q{SELECT holder FROM dlock.locks WHERE resource = 'cron-live'}),
	'long', 'a live lease is left alone');
is( $node->safe_psql(
		'postgres',
		"SELECT count(*) FROM cron.job_run_details WHERE jobid = $jobid AND status = 'failed'"),
	'0',
	'no failed runs');

$node->safe_psql('postgres', q{SELECT cron.unschedule('dlock-reap')});
$node->stop;
done_testing();
