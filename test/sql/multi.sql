-- Promises: P2 P6 P11
-- multi: several resources at once, 0.5: try_lock_all and lock_all take
-- every resource or none; each is an ordinary holding afterwards.
\pset null '(null)'
\set VERBOSITY sqlstate

CREATE TEMP TABLE f AS SELECT dlock.try_lock_all(ARRAY['m/b', 'm/a', 'm/c'], 'h', '1h') AS fences;
-- The fences come in the order given, each the resource's own, all new.
SELECT array_length(fences, 1) AS n,
       fences[1] = (SELECT fence FROM dlock.locks WHERE resource = 'm/b') AS b_first,
       fences[2] = (SELECT fence FROM dlock.locks WHERE resource = 'm/a') AS a_second,
       fences[3] = (SELECT fence FROM dlock.locks WHERE resource = 'm/c') AS c_third,
       (SELECT count(DISTINCT x) FROM unnest(fences) x) AS distinct_fences
  FROM f;
SELECT resource, holder, count, mode FROM dlock.locks WHERE resource LIKE 'm/%' ORDER BY resource;

-- All or nothing: one busy resource and none of the others is taken.
SELECT dlock.try_lock('m/busy', 'other', '1h') IS NOT NULL AS other_holds_busy;
SELECT last_value AS seq0 FROM dlock.fences \gset
SELECT dlock.try_lock_all(ARRAY['m/x', 'm/busy', 'm/y'], 'h', '1h') AS all_or_nothing;
SELECT count(*) AS x_y_not_taken FROM dlock.locks WHERE resource IN ('m/x', 'm/y');
SELECT dlock.lock_all(ARRAY['m/x', 'm/busy', 'm/y'], 'h', '1h', wait => '0') AS one_try;
SELECT dlock.lock_all(ARRAY['m/y', 'm/busy'], 'h', '1h', wait => '50ms') AS timed_out;
SELECT count(*) AS still_not_taken FROM dlock.locks WHERE resource IN ('m/x', 'm/y');
SELECT last_value = :'seq0' AS no_fence_drawn FROM dlock.fences;
-- From 1.0 wait comes right after lease, as in lock(): positionally too.
SELECT dlock.lock_all(ARRAY['m/y', 'm/busy'], 'h', '5s', '50ms') AS positional_timed_out;
SELECT dlock.lock_all(ARRAY['m/y', 'm/busy'], 'h', '5s', '50ms', true) AS positional_shared_timed_out;
SELECT array_length(dlock.lock_all(ARRAY['m/pa', 'm/pb'], 'h', '5s', '5s'), 1) AS positional_wait;
SELECT dlock.unlock('m/pa', 'h') + dlock.unlock('m/pb', 'h') AS released;

-- Re-entry follows the single-lock rules: count + 1, fence kept; a new
-- resource beside held ones gets a new fence.
SELECT dlock.try_lock_all(ARRAY['m/a', 'm/d'], 'h', '1h') AS g \gset
SELECT (:'g'::bigint[])[1] = (SELECT fences[2] FROM f) AS reentry_same_fence,
       (:'g'::bigint[])[2] > (SELECT max(x) FROM f, unnest(fences) x) AS new_fence_newer;
SELECT resource, count FROM dlock.locks WHERE resource IN ('m/a', 'm/d') ORDER BY resource;

-- Each is an ordinary holding: check, renew, unlock, unlock_all.
SELECT dlock.check('m/b', (SELECT fences[1] FROM f)) AS check_b;
SELECT dlock.renew('m/c', 'h', '2h', (SELECT fences[3] FROM f)) > now() + '1h' AS renewed_c;
SELECT dlock.unlock('m/b', 'h') AS b_released;
SELECT dlock.check('m/b', (SELECT fences[1] FROM f)) AS check_b_released;
-- Owner checks: another holder text changes nothing.
SELECT dlock.unlock('m/c', 'nobody') AS not_yours;
-- Another role: the same holder text is another holder (refused, nothing
-- taken), and it cannot release the holding (42501).
CREATE ROLE regress_multi_other;
SET ROLE regress_multi_other;
SELECT dlock.try_lock_all(ARRAY['m/c', 'm/o'], 'h', '1h') AS other_role_refused;
SELECT dlock.unlock('m/c', 'h') AS other_role_unlock;
RESET ROLE;
SELECT count(*) AS o_not_taken FROM dlock.locks WHERE resource = 'm/o';
DROP ROLE regress_multi_other;
SELECT dlock.unlock_all('h') AS released_all;
SELECT count(*) AS none_left FROM dlock.locks WHERE holder = 'h';

-- A new holding takes the lock-delay of dlock.lock_delay, as try_lock's:
-- broken, it stays unavailable.
SET dlock.lock_delay = '1h';
SELECT array_length(dlock.try_lock_all(ARRAY['m/d1', 'm/d2'], 'h', '1h'), 1) AS with_delay;
RESET dlock.lock_delay;
SELECT dlock.break_lock('m/d1') AS broken;
SELECT dlock.try_lock('m/d1', 'next', '1h') AS d1_delayed;
SELECT dlock.unlock('m/d2', 'h') AS d2_released_cleanly;
SELECT dlock.try_lock('m/d2', 'next', '1h') IS NOT NULL AS d2_free_at_once;
SELECT dlock.unlock('m/d2', 'next') AS d2_released;

-- Shared: several resources shared, beside another reader; a writer is
-- kept out of all of them.
SELECT dlock.try_lock('m/s1', 'r0', '1h', shared => true) IS NOT NULL AS r0_reads;
SELECT array_length(dlock.try_lock_all(ARRAY['m/s1', 'm/s2'], 'r1', '1h', shared => true), 1) AS r1_reads_both;
SELECT dlock.try_lock_all(ARRAY['m/s2', 'm/s3'], 'w', '1h') AS writer_refused;
SELECT resource, holder, mode FROM dlock.locks WHERE resource LIKE 'm/s%' ORDER BY resource, holder;
SELECT dlock.unlock_all('r0') + dlock.unlock_all('r1') AS readers_gone;

-- A resource with a queued fair ticket is not free.
SELECT dlock.try_lock('m/q', 'holder', '1h') IS NOT NULL AS q_held;
SELECT dlock.try_lock('m/q', 'queued', '1h', fair => true) AS queued_ticket;
SELECT dlock.unlock('m/q', 'holder') AS q_released;
SELECT dlock.try_lock_all(ARRAY['m/q', 'm/r'], 'h', '1h') AS queue_ahead;
SELECT count(*) AS r_not_taken FROM dlock.locks WHERE resource = 'm/r';
SELECT dlock.withdraw('m/q', 'queued') AS withdrawn;
SELECT array_length(dlock.try_lock_all(ARRAY['m/q', 'm/r'], 'h', '1h'), 1) AS free_now;
SELECT dlock.unlock_all('h') AS released;

-- Under lock-delay is not free either: a broken holding keeps it delayed.
SELECT dlock.try_lock('m/delay', 'gone', '1h', lock_delay => '1h') IS NOT NULL AS delay_held;
SELECT dlock.break_lock('m/delay') AS broken;
SELECT dlock.try_lock_all(ARRAY['m/delay', 'm/e'], 'h', '1h') AS delayed;
SELECT count(*) AS e_not_taken FROM dlock.locks WHERE resource = 'm/e';

-- In a transaction block the acquisition takes effect at commit, and
-- vanishes with a rollback.
BEGIN;
SELECT array_length(dlock.try_lock_all(ARRAY['m/t1', 'm/t2'], 'h', '1h'), 1) AS in_block;
ROLLBACK;
SELECT count(*) AS rolled_back FROM dlock.locks WHERE resource IN ('m/t1', 'm/t2');
-- This transaction's transaction-scoped lock on one of them: try says
-- NULL, a wait would wait for the transaction itself (40P01 at once).
BEGIN;
SELECT dlock.try_xact_lock('m/t1') IS NOT NULL AS xact_locked;
SELECT dlock.try_lock_all(ARRAY['m/t2', 'm/t1'], 'h', '1h') AS own_xact_lock;
SELECT dlock.lock_all(ARRAY['m/t2', 'm/t1'], 'h', '1h');
ROLLBACK;

-- Bad input: a clear error with its SQLSTATE, and nothing changes (no
-- holding, no fence drawn).
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT last_value AS seq_before FROM dlock.fences \gset
SELECT q, pg_temp.err(q) FROM (VALUES
  ($$SELECT dlock.try_lock_all(ARRAY['m/x', 'm/y', 'm/x'], 'h')$$),
  ($$SELECT dlock.try_lock_all(ARRAY[]::text[], 'h')$$),
  ($$SELECT dlock.try_lock_all(NULL, 'h')$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x', NULL], 'h')$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x', ''], 'h')$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x', repeat('r', 1001)], 'h')$$),
  ($$SELECT dlock.try_lock_all(ARRAY[['m/x'], ['m/y']], 'h')$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x'], NULL)$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x'], '')$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x'], repeat('h', 256))$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x'], 'h', '-1s')$$),
  ($$SELECT dlock.try_lock_all(ARRAY['m/x'], 'h', shared => NULL)$$),
  ($$SELECT dlock.lock_all(ARRAY['m/x', 'm/x'], 'h', wait => '1s')$$),
  ($$SELECT dlock.lock_all(ARRAY['m/x'], 'h', wait => '-1s')$$),
  ($$SELECT dlock.lock_all(ARRAY['m/x'], NULL, wait => '1s')$$),
  ($$SELECT dlock.lock_all(ARRAY['m/x'], 'h', '0', wait => '1s')$$)
) AS t(q);
SELECT count(*) AS nothing_changed FROM dlock.locks WHERE resource IN ('m/x', 'm/y');
SELECT last_value = :'seq_before' AS no_fence_drawn_on_error FROM dlock.fences;
-- On a read-only transaction: 25006.
BEGIN READ ONLY;
SELECT dlock.try_lock_all(ARRAY['m/x'], 'h');
ROLLBACK;

-- Clean up.
SELECT dlock.unlock('m/busy', 'other') AS busy_released;
SELECT count(*) AS left_over FROM dlock.locks WHERE resource LIKE 'm/%' AND resource NOT IN ('m/delay', 'm/d1');
