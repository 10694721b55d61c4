# 069_random_roles.pl: a random workload of three roles at once (alice,
# bob and a superuser, pgbench clients of each), in autocommit and in
# two-call transactions: try_lock shared and exclusive, renew, unlock,
# try_acquire, assert_fence held 30 ms, unlock_all, break_lock, reap,
# sessions, renew and unlock in one call, try_xact_lock.  Each call checks
# what it can see at once: no exclusive holding beside another's shared
# one, at most 3 permits, a pinned holding never gone while pinned, no
# live holding under a transaction-scoped lock.  And no call waits until
# statement_timeout (60 s: a wait the deadlock detector never sees, as a
# pinner that spun in stop 52, lasts for ever), no unexpected SQLSTATE.
# DLOCK_ROLES_SEED=N replays pgbench's random choices (not the timing).
# Promises: P2 P5 P9 P10 P12

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seed = $ENV{DLOCK_ROLES_SEED} // int(rand(2_000_000_000));
my $seconds = $ENV{DLOCK_ROLES_SECONDS} // 20;
diag("seed $seed ($seconds s)");

my $node = PostgreSQL::Test::Cluster->new('random_roles');
$node->init;
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = 'dlock'
dlock.reap_interval = '50ms'
max_connections = 40
});
$node->start;
$node->safe_psql('postgres', q{
CREATE EXTENSION dlock;
CREATE ROLE alice LOGIN;
CREATE ROLE bob LOGIN;
});

# rv.op(op, resource, holder): one dlock call; what is wrong goes to rv.log.
$node->safe_psql('postgres', <<'EOSQL');
CREATE SCHEMA rv;
GRANT USAGE ON SCHEMA rv TO PUBLIC;
CREATE TABLE rv.log (at timestamptz DEFAULT clock_timestamp(), who text DEFAULT current_user,
                     op int, r text, h text, state text, msg text);
GRANT INSERT, SELECT ON rv.log TO PUBLIC;
CREATE TABLE rv.done (who text DEFAULT current_user, op int, ok boolean);
GRANT INSERT ON rv.done TO PUBLIC;
CREATE FUNCTION rv.note(p_op int, p_r text, p_h text, p_state text, p_msg text) RETURNS void
    LANGUAGE sql AS
$$ INSERT INTO rv.log (op, r, h, state, msg) VALUES (p_op, p_r, p_h, p_state, p_msg) $$;
-- rv.inv: what a snapshot of resource r may never show.
CREATE FUNCTION rv.inv(p_r text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE ex int; sh int; shh int; pm bigint;
BEGIN
  SELECT count(*) FILTER (WHERE mode = 'exclusive'), count(*) FILTER (WHERE mode = 'shared'),
         count(*) FILTER (WHERE mode = 'shared' AND (holder, owner) NOT IN (
             SELECT holder, owner FROM dlock.locks x
              WHERE x.resource = p_r AND x.mode = 'exclusive' AND NOT x.expired)),
         coalesce(sum(permits) FILTER (WHERE mode = 'semaphore' OR permits IS NOT NULL), 0)
    INTO ex, sh, shh, pm FROM dlock.locks WHERE resource = p_r AND NOT expired;
  IF ex > 1 OR (ex = 1 AND shh > 0) THEN
    PERFORM rv.note(0, p_r, NULL, 'INV', format('ex=%s sh=%s shh=%s', ex, sh, shh));
  END IF;
  IF pm > 3 THEN PERFORM rv.note(0, p_r, NULL, 'INVSEM', format('permits=%s', pm)); END IF;
END $$;
CREATE FUNCTION rv.op(p_op int, p_r text, p_h text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE f bigint; res text; n int; su boolean := (SELECT rolsuper FROM pg_roles WHERE rolname = current_user);
BEGIN
  BEGIN
    CASE
    WHEN p_op <= 3 THEN res := dlock.try_lock(p_r, p_h, '1s', shared => true);
    WHEN p_op = 4 THEN res := dlock.renew(p_r, p_h);
    WHEN p_op = 5 THEN res := dlock.unlock(p_r, p_h);
    WHEN p_op = 6 THEN res := dlock.try_acquire('s' || p_r, p_h, 3, 1, lease => '1s');
    WHEN p_op = 7 THEN
      SELECT fence, mode || ' ' || resource || ' ' || owner || ' ' || holder || ' exp=' || expires_at::time
        INTO f, res FROM dlock.locks
       WHERE resource IN (p_r, 's' || p_r) AND NOT expired AND (su OR owner = (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)::regrole)
       ORDER BY random() LIMIT 1;
      IF f IS NOT NULL THEN
        BEGIN
          PERFORM dlock.assert_fence(CASE WHEN EXISTS (SELECT FROM dlock.locks WHERE resource = p_r AND fence = f)
                                          THEN p_r ELSE 's' || p_r END, f);
        EXCEPTION WHEN lock_not_available THEN RETURN 'gone';
        END;
        PERFORM pg_sleep(0.03);
        SELECT count(*) INTO n FROM dlock.locks WHERE fence = f;
        IF n = 0 THEN
          PERFORM rv.note(p_op, p_r, p_h, 'PIN', 'pinned fence ' || f || ' vanished: ' || res);
        END IF;
        PERFORM rv.inv(p_r);
        PERFORM rv.inv('s' || p_r);
        res := 'pinned';
      END IF;
    WHEN p_op = 8 THEN res := dlock.try_lock(p_r, p_h, '1s');
    WHEN p_op = 9 THEN res := dlock.unlock_all(p_h);
    WHEN p_op = 10 THEN IF su THEN res := dlock.break_lock(p_r); END IF;
    WHEN p_op = 11 THEN res := dlock.reap();
    WHEN p_op = 12 THEN
      f := dlock.open_session('2s', p_h);
      res := dlock.try_lock(p_r, session => f, shared => true);
      PERFORM pg_sleep(0.01);
      res := dlock.close_session(f);
    WHEN p_op = 13 THEN
      res := dlock.renew(p_r, p_h);
      PERFORM pg_sleep(0.02);
      res := dlock.unlock(p_r, p_h);
    WHEN p_op = 15 THEN
      f := dlock.try_xact_lock(p_r);
      IF f IS NOT NULL THEN
        PERFORM pg_sleep(0.02);
        SELECT count(*), string_agg(mode || ' ' || holder || ' ' || owner, ',') INTO n, res
          FROM dlock.locks WHERE resource = p_r AND NOT expired;
        IF n > 0 THEN PERFORM rv.note(p_op, p_r, p_h, 'XACT', 'live holdings under xact lock: ' || res); END IF;
      END IF;
      res := f;
    ELSE
      PERFORM rv.inv(p_r);
      PERFORM rv.inv('s' || p_r);
    END CASE;
  EXCEPTION WHEN query_canceled THEN
    PERFORM rv.note(p_op, p_r, p_h, '57014', SQLERRM);
    RETURN '57014';
  WHEN OTHERS THEN
    -- Expected refusals: another role's holding (42501), a fence gone
    -- (55P03), a deadlock the detector broke (40P01), a session's
    -- holding (42809), a session ended (55000), a conflict (40001).
    IF SQLSTATE NOT IN ('42501', '55P03', '40P01', '42809', '55000', '40001') THEN
      PERFORM rv.note(p_op, p_r, p_h, SQLSTATE, SQLERRM);
    END IF;
    INSERT INTO rv.done (op, ok) VALUES (p_op, false);
    RETURN SQLSTATE;
  END;
  INSERT INTO rv.done (op, ok) VALUES (p_op, res IS NOT NULL);
  RETURN res;
END $$;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA rv TO PUBLIC;
EOSQL

my $dir = PostgreSQL::Test::Utils::tempdir('roles');
PostgreSQL::Test::Utils::append_to_file("$dir/one.pgb", <<'EOS');
\set r random(1, 2)
\set h random(1, 2)
\set op random(1, 14)
SELECT rv.op(:op, 'r' || :r, 'h' || :h);
EOS
# Two calls in one transaction (no reap: it waits for the worker).
PostgreSQL::Test::Utils::append_to_file("$dir/two.pgb", <<'EOS');
\set r random(1, 2)
\set h random(1, 2)
\set op random(1, 15)
\set op2 random(1, 15)
\if :op = 11
\set op 14
\endif
\if :op2 = 11
\set op2 14
\endif
BEGIN;
SELECT rv.op(:op, 'r' || :r, 'h' || :h);
SELECT rv.op(:op2, 'r' || :r, 'h' || :h);
SELECT pg_sleep(0.005);
COMMIT;
EOS

my %run;
my $i = 0;
for my $role ('alice', 'bob', $node->safe_psql('postgres', 'SELECT current_user'))
{
	my ($out, $err) = ('', '');
	local $ENV{PGOPTIONS} = '-c statement_timeout=60s';
	$run{$role} = [ IPC::Run::start(
			[ 'pgbench', '-n', '-c', '4', '-j', '4', '-T', $seconds, "--random-seed=" . ($seed + $i++),
			  '-f', "$dir/one.pgb\@3", '-f', "$dir/two.pgb\@1",
			  '-h', $node->host, '-p', $node->port, '-U', $role, 'postgres' ],
			'>', \$out, '2>', \$err),
		\$out, \$err ];
}
for my $role (sort keys %run)
{
	my ($h, $out, $err) = @{ $run{$role} };
	$h->finish;
	my ($tx) = $$out =~ /number of transactions actually processed: (\d+)/;
	diag("$role: " . ($tx // 'no count') . ' transactions');
	ok($h->result == 0 && $$err !~ /aborted/, "$role: no pgbench client aborted")
	  or diag($$err);
	cmp_ok($tx // 0, '>', 50, "$role: the clients ran");
}

my $bad = $node->safe_psql('postgres',
	q{SELECT string_agg(format('%s %s op %s %s/%s: %s', state, who, op, r, h, msg), E'\n' ORDER BY at)
	    FROM rv.log});
is($bad, '', 'no invariant broken, no wait until statement_timeout, no unexpected SQLSTATE');

# The workload did what it says: each kind of call succeeded, by each role.
my %done = map { split /\|/ } split /\n/, $node->safe_psql('postgres',
	q{SELECT op || '|' || count(*) FILTER (WHERE ok) FROM rv.done GROUP BY op});
my %name = (1 => 'try_lock shared', 4 => 'renew', 5 => 'unlock', 6 => 'try_acquire',
	7 => 'assert_fence (pinned)', 8 => 'try_lock', 9 => 'unlock_all', 10 => 'break_lock',
	12 => 'a session', 13 => 'renew and unlock', 15 => 'try_xact_lock');
cmp_ok($done{$_} // 0, '>', 0, "calls of $name{$_} succeeded") for sort { $a <=> $b } keys %name;
is($node->safe_psql('postgres', q{SELECT count(DISTINCT who) FROM rv.done WHERE ok AND op IN (1, 2, 3, 8)}),
	'3', 'each role took holdings');

done_testing();
