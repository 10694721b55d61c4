# 038_semaphore.pl: semaphores (0.5) with waiters in acquire().
#
#  - a release wakes one waiter per permit it frees, not a herd: with four
#    waiters for one permit each, a release of two permits wakes two
#    (dlock.stats().wakeups), both get a permit, and the other two still
#    sleep on their latch (pg_stat_activity: wait_event Extension); a
#    release of three permits then wakes the two left, and one permit
#    stays free;
#  - a crashed holder's permits come back when its lease ends: its
#    session is terminated, a waiter in acquire() gets them once the lease
#    has ended (it looks again then: lazy expiry), with a newer fence, and
#    the reaper removes the expired holding;
#  - fair waiters are served in the order they came;
#  - renew extends a holding of permits on its own, and check accepts its
#    fence until it is released.
# Promises: P5 P7 P10

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('semaphore');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'dlock'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION dlock');

sub sql { return $node->safe_psql('postgres', shift) }

# Five permits, all held: h1 three, h2 two.
is(sql(q{SELECT dlock.try_acquire('sem', 'h1', 5, 3, '1h') IS NOT NULL
           AND dlock.try_acquire('sem', 'h2', 5, 2, '1h') IS NOT NULL}),
	't', 'five permits held by two holders');

# Four waiters, one permit each.
my @w;
for my $i (1 .. 4)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_until(qr/waiting/,
		"\\echo waiting\nSELECT dlock.acquire('sem', 'w$i', 5, 1, '1h', wait => '120s');\n");
	push @w, $s;
}
my $sleeping = q{SELECT count(*) FROM pg_stat_activity
                  WHERE wait_event_type = 'Extension' AND wait_event = 'Extension'
                    AND query LIKE '%dlock.acquire(%' AND pid <> pg_backend_pid()};
ok($node->poll_query_until('postgres',
		qq{SELECT ($sleeping) = 4 AND (SELECT count(*) FROM dlock.waiters WHERE resource = 'sem') = 4}),
	'four waiters sleep in acquire()');

my $wakeups = sql(q{SELECT wakeups FROM dlock.stats()});
is(sql(q{SELECT dlock.unlock('sem', 'h2')}), '0', 'h2 returns its two permits');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM dlock.locks WHERE resource = 'sem' AND holder LIKE 'w%'}),
	'two waiters get a permit each');
is(sql(q{SELECT wakeups FROM dlock.stats()}) - $wakeups, 2,
	'the release of two permits woke two waiters, not all four');
is(sql($sleeping), '2', 'the other two still sleep on their latch');
is(sql(q{SELECT count(*) FROM dlock.waiters WHERE resource = 'sem'}), '2',
	'... and are still listed as waiting');
is(sql(q{SELECT sum(permits) FROM dlock.locks WHERE resource = 'sem'}), '5',
	'never more than max_permits held');

$wakeups = sql(q{SELECT wakeups FROM dlock.stats()});
is(sql(q{SELECT dlock.unlock('sem', 'h1')}), '0', 'h1 returns its three permits');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 4 FROM dlock.locks WHERE resource = 'sem' AND holder LIKE 'w%'}),
	'the two left get a permit each');
is(sql(q{SELECT wakeups FROM dlock.stats()}) - $wakeups, 2,
	'three permits freed, two waiters there: two woken');
is(sql(q{SELECT count(*) FROM dlock.waiters WHERE resource = 'sem'}), '0', 'nobody waits');
is(sql(q{SELECT dlock.try_acquire('sem', 'h3', 5) IS NOT NULL}), 't',
	'the fifth permit is free');
$_->quit for @w;

# Fair waiters are served in the order they came.
is(sql(q{SELECT dlock.try_acquire('sem/f', 'h', 2, 2, '1h') IS NOT NULL}), 't', 'both permits of sem/f held');
my @f;
for my $i (1 .. 3)
{
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	$s->query_until(qr/waiting/,
		"\\echo waiting\nSELECT dlock.acquire('sem/f', 'f$i', 2, 1, '1h', fair => true, wait => '120s');\n");
	ok($node->poll_query_until('postgres',
			qq{SELECT count(*) = $i FROM dlock.waiters WHERE resource = 'sem/f'}),
		"fair waiter f$i queues");
	push @f, $s;
}
is(sql(q{SELECT dlock.unlock('sem/f', 'h')}), '0', 'h returns both permits');
ok($node->poll_query_until('postgres',
		q{SELECT string_agg(holder, ',' ORDER BY holder) = 'f1,f2' FROM dlock.locks WHERE resource = 'sem/f'}),
	'the first two fair waiters get them');
is(sql(q{SELECT string_agg(holder, ',') FROM dlock.waiters WHERE resource = 'sem/f'}), 'f3',
	'the third still waits');
is(sql(q{SELECT dlock.unlock('sem/f', 'f1')}), '0', 'f1 returns its permit');
ok($node->poll_query_until('postgres',
		q{SELECT string_agg(holder, ',' ORDER BY holder) = 'f2,f3' FROM dlock.locks WHERE resource = 'sem/f'}),
	'the third fair waiter gets it');
$_->quit for @f;

# A crashed holder's permits come back when its lease ends.  A 4 s lease,
# and one psql terminates the holder's session, looks and waits: psqls of
# their own, slow to start on a loaded machine, came after a 2 s lease
# (and its reaping).
my $c = $node->background_psql('postgres', on_error_stop => 0);
my $cpid = $c->query_safe('SELECT pg_backend_pid()');
my $crashed = $c->query_safe(
	q{SELECT dlock.try_acquire('sem/c', 'crashed', 2, 2, '4s')});
like($crashed, qr/^\d+$/, 'a holder takes both permits');
my ($terminated, $outlives, $fence) = split /\n/, sql(qq{
	SELECT pg_terminate_backend($cpid, 30000);
	SELECT holder FROM dlock.locks WHERE resource = 'sem/c';
	SELECT dlock.acquire('sem/c', 'next', 2, 2, '1h', wait => '120s');});
is($terminated, 't', "the holder's session is terminated");
is($outlives, 'crashed', 'its holding outlives its session');
cmp_ok($fence, '>', $crashed, 'a waiter gets both permits once the lease ended, with a newer fence');
is(sql(q{SELECT string_agg(holder || ':' || permits, ',') FROM dlock.locks WHERE resource = 'sem/c' AND NOT expired}),
	'next:2', 'the crashed holder\'s permits are its now');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM dlock.permits WHERE resource = 'sem/c' AND holder = 'crashed'}),
	'the reaper removes the expired holding');

# renew extends one holding on its own.
my $f = sql(q{SELECT dlock.try_acquire('sem/r', 'a', 3, 1, '1min')});
sql(q{SELECT dlock.try_acquire('sem/r', 'b', 3, 1, '1min')});
is(sql(q{SELECT dlock.renew('sem/r', 'a', '2h') > now() + '1h'}), 't', 'renew extends a\'s lease');
is(sql(q{SELECT string_agg(holder, ',' ORDER BY holder) FROM dlock.locks
          WHERE resource = 'sem/r' AND expires_at > now() + '1h'}),
	'a', 'only a\'s holding was extended');
is(sql("SELECT dlock.check('sem/r', $f)"), 't', 'check accepts its fence');
is(sql(q{SELECT dlock.unlock('sem/r', 'a')}), '0', 'a returns its permit');
is(sql("SELECT dlock.check('sem/r', $f)"), 'f', 'its fence is no longer current');

$node->stop;
done_testing();
