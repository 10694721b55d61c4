-- Promises: P6 P10
-- semaphore: counting semaphores with leased permits, 0.5: at most
-- max_permits permits held at once, each holding leased, renewed and
-- fenced on its own; a holder acquiring again adds permits; unlock returns
-- all of them; every bad input is an error with its SQLSTATE that changes
-- nothing.
\pset null '(null)'
\set VERBOSITY sqlstate

-- err: the SQLSTATE and message of the statement's error, or 'ok'.
CREATE FUNCTION pg_temp.err(stmt text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE stmt;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
CREATE TEMP TABLE f (name text PRIMARY KEY, fence bigint);

-- Three permits: a takes 2, b takes 1, c finds none free.
INSERT INTO f SELECT 'a', dlock.try_acquire('sem/a', 'a', 3, 2, '1h');
INSERT INTO f SELECT 'b', dlock.try_acquire('sem/a', 'b', 3, lease => '1h');
SELECT (SELECT fence FROM f WHERE name = 'b') > (SELECT fence FROM f WHERE name = 'a') AS own_fences;
SELECT dlock.try_acquire('sem/a', 'c', 3) AS none_free;
SELECT holder, count, mode, permits, max_permits, expired
  FROM dlock.locks WHERE resource = 'sem/a' ORDER BY holder;
-- Acquiring again adds permits to the holding (its fence stays) when free.
SELECT dlock.try_acquire('sem/a', 'b', 3) AS b_adds_refused;
SELECT dlock.unlock('sem/a', 'a') AS a_returns_all;
SELECT dlock.try_acquire('sem/a', 'b', 3, 2) = (SELECT fence FROM f WHERE name = 'b') AS b_adds_same_fence;
SELECT holder, count, permits FROM dlock.locks WHERE resource = 'sem/a';
SELECT dlock.try_acquire('sem/a', 'c', 3) AS still_none_free;
-- check, assert_fence and renew work on a holding of permits.
SELECT dlock.check('sem/a', (SELECT fence FROM f WHERE name = 'b')) AS check_b,
       dlock.check('sem/a', (SELECT fence FROM f WHERE name = 'a')) AS check_a_gone;
BEGIN;
SELECT dlock.assert_fence('sem/a', (SELECT fence FROM f WHERE name = 'b')) AS assert_b;
COMMIT;
SELECT dlock.renew('sem/a', 'b', '2h') > now() + '1h' AS renewed;
SELECT dlock.renew('sem/a', 'b', '2h', (SELECT fence FROM f WHERE name = 'a')) AS renew_wrong_fence;
-- unlock returns all of a holder's permits (3 here), at once.
SELECT dlock.unlock('sem/a', 'b') AS b_left;
SELECT dlock.unlock('sem/a', 'b') AS b_not_held;
SELECT dlock.try_acquire('sem/a', 'c', 3, 3) IS NOT NULL AS all_three_free;
-- Another max_permits while a permit is held: 22023, nothing changed.
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/a', 'd', 4)$$);
SELECT pg_temp.err($$SELECT dlock.acquire('sem/a', 'd', 2, wait => '0')$$);
SELECT holder, permits, max_permits FROM dlock.locks WHERE resource = 'sem/a';
-- unlock_all covers permits; then another max_permits is fine.
SELECT dlock.unlock_all('c') AS released;
SELECT dlock.try_acquire('sem/a', 'd', 5, 5) IS NOT NULL AS new_max;
SELECT dlock.unlock('sem/a', 'd', (SELECT fence FROM f WHERE name = 'a')) AS unlock_wrong_fence;
SELECT dlock.unlock('sem/a', 'd') AS d_left;

-- A name is a lock or a semaphore while it has live holdings: 42809.
SELECT dlock.try_lock('sem/lock', 'x', '1h') IS NOT NULL AS locked;
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/lock', 'y', 2)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/lock', 'x', 2)$$);
SELECT dlock.try_lock('sem/lock', 'x2', '1h', shared => true) AS exclusive_held;
SELECT dlock.unlock('sem/lock', 'x') AS lock_released;
SELECT dlock.try_lock('sem/lock', 'r', '1h', shared => true) IS NOT NULL AS shared_locked;
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/lock', 'y', 2)$$);
SELECT dlock.unlock('sem/lock', 'r') AS shared_released;
SELECT dlock.try_acquire('sem/lock', 'y', 2) IS NOT NULL AS now_a_semaphore;
SELECT pg_temp.err($$SELECT dlock.try_lock('sem/lock', 'x', '1h')$$);
SELECT pg_temp.err($$SELECT dlock.lock('sem/lock', 'x', '1h', wait => '0')$$);
SELECT pg_temp.err($$SELECT dlock.try_lock('sem/lock', 'y', '1h', shared => true)$$);
SELECT pg_temp.err($$SELECT dlock.try_xact_lock('sem/lock')$$);
SELECT holder, mode, permits FROM dlock.locks WHERE resource = 'sem/lock';
SELECT dlock.unlock('sem/lock', 'y') AS semaphore_released;
SELECT dlock.try_lock('sem/lock', 'x', '1h') IS NOT NULL AS a_lock_again;
SELECT dlock.unlock('sem/lock', 'x') AS released;

-- Bad inputs: each an error with its SQLSTATE; nothing is held after.
SELECT pg_temp.err($$SELECT dlock.try_acquire(NULL, 'h', 2)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('', 'h', 2)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire(repeat('x', 1001), 'h', 2)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', NULL, 2)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', '', 2)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', NULL)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 0)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', -1)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2, NULL)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2, 0)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2, -3)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2, 3)$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2, 1, '-1s')$$);
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2, 1, '1h', NULL)$$);
SELECT pg_temp.err($$SELECT dlock.acquire('sem/bad', 'h', 2, 1, '1h', '-1s')$$);
SELECT pg_temp.err($$SELECT dlock.acquire('sem/bad', 'h', 2, 1, '1h', '1s', NULL)$$);
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT dlock.try_acquire('sem/bad', 'h', 2)$$);
ROLLBACK;
SELECT count(*) AS nothing_held FROM dlock.locks WHERE resource = 'sem/bad';

-- acquire with a wait: served at once when free, NULL at the timeout.
SELECT dlock.acquire('sem/w', 'a', 1, wait => '1s') IS NOT NULL AS acquired;
SELECT dlock.acquire('sem/w', 'b', 1, wait => '10ms') AS timed_out;
-- From 1.0 wait comes right after lease, as in lock(): positionally too.
SELECT dlock.acquire('sem/p', 'a', 2, 1, '1h', '1s') IS NOT NULL AS positional_wait;
SELECT dlock.acquire('sem/p', 'b', 2, 2, '1h', '10ms', false) AS positional_timed_out;
SELECT dlock.unlock('sem/p', 'a') AS released;
-- An expired holding's permits are free again (lazy expiry).
SELECT dlock.try_acquire('sem/x', 'a', 2, 2, '10ms') IS NOT NULL AS short_lease;
SELECT pg_sleep(0.05);
SELECT dlock.try_acquire('sem/x', 'b', 2, 2) IS NOT NULL AS taken_after_expiry;
SELECT dlock.renew('sem/x', 'a') AS expired_not_renewed;
SELECT dlock.unlock_all('a') + dlock.unlock_all('b') AS released;

-- Owner checks: another role's holding of the same holder text is another
-- holding (its permits counted too); unlock and renew of it raise 42501.
CREATE ROLE regress_dlock_sem_a;
CREATE ROLE regress_dlock_sem_b;
SET ROLE regress_dlock_sem_a;
SELECT dlock.try_acquire('sem/r', 'same', 3, 2, '1h') IS NOT NULL AS a_holds_two;
SET ROLE regress_dlock_sem_b;
SELECT dlock.unlock('sem/r', 'same');
SELECT dlock.renew('sem/r', 'same');
SELECT dlock.try_acquire('sem/r', 'same', 3, 2) AS b_two_more_refused;
SELECT dlock.try_acquire('sem/r', 'same', 3, 1) IS NOT NULL AS b_holds_one;
SELECT dlock.unlock_all('same') AS b_releases_its_own;
RESET ROLE;
SELECT holder, owner, mode, permits FROM dlock.locks WHERE resource = 'sem/r';
-- break_lock ends every holding of permits.
SELECT dlock.break_lock('sem/r') AS broken, dlock.break_lock('sem/r') AS again;
SELECT count(*) AS left_over FROM dlock.locks WHERE resource = 'sem/r';
DROP ROLE regress_dlock_sem_a;
DROP ROLE regress_dlock_sem_b;

-- The holder's own expired holding of permits, not reaped yet, does not
-- stand in the way of its new one (a new holding, a greater fence).
SELECT dlock.try_acquire('sem/own', 'h', 2, 1, '1h') AS x_first \gset
BEGIN;
UPDATE dlock.permits SET expires_at = now() - interval '1 second' WHERE resource = 'sem/own' AND holder = 'h';
SELECT dlock.try_acquire('sem/own', 'h', 2, 2, '1h') > :x_first AS new_holding_greater_fence;
SELECT count(*) AS rows_of_h, sum(permits) AS permits FROM dlock.permits WHERE resource = 'sem/own' AND holder = 'h';
COMMIT;
SELECT dlock.unlock('sem/own', 'h') AS released;
