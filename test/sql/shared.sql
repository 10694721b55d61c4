-- Promises: P4 P6 P9
-- shared: shared (read-write) locks, 0.4: any number of shared holders,
-- each with its own fence, or one exclusive holder; downgrade, upgrade
-- when the only holder, writers keep new readers out.
\pset null '(null)'
\set VERBOSITY sqlstate

CREATE TEMP TABLE f (name text PRIMARY KEY, fence bigint);

-- Two readers share; each has its own fence, newer than the last one.
INSERT INTO f SELECT 'r1', dlock.try_lock('sh/a', 'r1', '1h', shared => true);
INSERT INTO f SELECT 'r2', dlock.try_lock('sh/a', 'r2', '1h', shared => true);
SELECT (SELECT fence FROM f WHERE name = 'r2') > (SELECT fence FROM f WHERE name = 'r1') AS own_fences;
-- Re-entry keeps the fence.
SELECT dlock.try_lock('sh/a', 'r1', '1h', shared => true) = (SELECT fence FROM f WHERE name = 'r1') AS reentry_same_fence;
SELECT holder, count, mode FROM dlock.locks WHERE resource = 'sh/a' ORDER BY holder;
-- A writer is kept out while readers hold it; so is a transaction-scoped lock.
SELECT dlock.try_lock('sh/a', 'w', '1h') AS writer_refused;
SELECT dlock.try_xact_lock('sh/a') AS xact_lock_refused;
-- check and assert_fence accept any current holder's fence.
SELECT dlock.check('sh/a', (SELECT fence FROM f WHERE name = 'r1')) AS check_r1,
       dlock.check('sh/a', (SELECT fence FROM f WHERE name = 'r2')) AS check_r2;
BEGIN;
SELECT dlock.assert_fence('sh/a', (SELECT fence FROM f WHERE name = 'r2')) AS assert_r2;
COMMIT;
-- Renew and unlock work on a shared holding.
SELECT dlock.renew('sh/a', 'r2', '2h') > now() + '1h' AS renewed;
SELECT dlock.renew('sh/a', 'r2', '2h', (SELECT fence FROM f WHERE name = 'r1')) AS renew_wrong_fence;
SELECT dlock.unlock('sh/a', 'r1') AS r1_left_1;
SELECT dlock.unlock('sh/a', 'r1') AS r1_left_0;
SELECT dlock.unlock('sh/a', 'r1') AS r1_not_held;
SELECT dlock.check('sh/a', (SELECT fence FROM f WHERE name = 'r1')) AS check_r1_released;
-- An upgrade succeeds only when the caller is the only holder.
SELECT dlock.try_lock('sh/a', 'r2', '1h') > (SELECT fence FROM f WHERE name = 'r2') AS upgraded;
SELECT holder, mode FROM dlock.locks WHERE resource = 'sh/a' ORDER BY mode;
-- ... and then readers are kept out.
SELECT dlock.try_lock('sh/a', 'r3', '1h', shared => true) AS reader_refused;
SELECT dlock.unlock('sh/a', 'r2') AS exclusive_released;
SELECT dlock.unlock('sh/a', 'r2') AS shared_released;
SELECT count(*) AS left_over FROM dlock.locks WHERE resource = 'sh/a';

-- Downgrade: the exclusive holder also takes shared; others still wait.
SELECT dlock.try_lock('sh/b', 'w', '1h') IS NOT NULL AS exclusive;
SELECT dlock.try_lock('sh/b', 'w', '1h', shared => true) IS NOT NULL AS downgrade;
SELECT dlock.try_lock('sh/b', 'r', '1h', shared => true) AS reader_waits;
SELECT dlock.unlock('sh/b', 'w') AS exclusive_released;
SELECT dlock.try_lock('sh/b', 'r', '1h', shared => true) IS NOT NULL AS reader_joins;
SELECT dlock.unlock_all('w') + dlock.unlock_all('r') AS released;

-- Bad input: shared must not be null.
SELECT dlock.try_lock('sh/c', 'r', '1h', shared => NULL);
SELECT dlock.lock('sh/c', 'r', '1h', '0', shared => NULL);

-- Another role's shared holding of the same holder text is another holder:
-- unlock and renew of it raise 42501 and change nothing.
CREATE ROLE regress_dlock_sh_a;
CREATE ROLE regress_dlock_sh_b;
SET ROLE regress_dlock_sh_a;
SELECT dlock.try_lock('sh/r', 'same', '1h', shared => true) IS NOT NULL AS a_shares;
SET ROLE regress_dlock_sh_b;
SELECT dlock.unlock('sh/r', 'same');
SELECT dlock.renew('sh/r', 'same');
SELECT dlock.try_lock('sh/r', 'same', '1h', shared => true) IS NOT NULL AS b_shares_too;
SELECT dlock.unlock_all('same') AS b_releases_its_own;
RESET ROLE;
SELECT holder, owner, mode FROM dlock.locks WHERE resource = 'sh/r';
-- break_lock ends every shared holding.
SELECT dlock.break_lock('sh/r') AS broken, dlock.break_lock('sh/r') AS again;
SELECT count(*) AS left_over FROM dlock.locks WHERE resource = 'sh/r';
DROP ROLE regress_dlock_sh_a;
DROP ROLE regress_dlock_sh_b;

-- An expired shared holding is free at once and reaped like a lease.
SELECT dlock.try_lock('sh/e', 'r', '10ms', shared => true) IS NOT NULL AS short_share;
SELECT pg_sleep(0.05);
SELECT dlock.try_lock('sh/e', 'w', '1h') IS NOT NULL AS writer_takes_over;
SELECT dlock.reap() >= 1 AS reaped;
SELECT holder, mode FROM dlock.locks WHERE resource = 'sh/e';
SELECT dlock.unlock('sh/e', 'w') AS released;

-- The holder's own expired shared holding, not reaped yet, does not stand
-- in the way of its new one (it ended: a new holding, a greater fence).
-- The expiry is moved back by hand inside the transaction, so the reaper
-- cannot get there first.
SELECT dlock.try_lock('sh/own', 'h', '1h', shared => true) AS x_first \gset
BEGIN;
UPDATE dlock.shares SET expires_at = now() - interval '1 second' WHERE resource = 'sh/own' AND holder = 'h';
SELECT dlock.try_lock('sh/own', 'h', '1h', shared => true) > :x_first AS new_share_greater_fence;
SELECT count(*) AS rows_of_h FROM dlock.shares WHERE resource = 'sh/own';
COMMIT;
-- The same under a live exclusive holding of the holder (a downgrade).
SELECT dlock.try_lock('sh/own2', 'h', '1h') IS NOT NULL AS exclusive;
SELECT dlock.try_lock('sh/own2', 'h', '1h', shared => true) AS y_share \gset
BEGIN;
UPDATE dlock.shares SET expires_at = now() - interval '1 second' WHERE resource = 'sh/own2' AND holder = 'h';
SELECT dlock.try_lock('sh/own2', 'h', '1h', shared => true) > :y_share AS downgrade_again;
COMMIT;
SELECT dlock.unlock_all('h') AS released;

-- lock_delay applies to exclusive locks only (issue 33): an explicit
-- non-zero one with shared => true is refused (22023), and nothing changes.
\set VERBOSITY sqlstate
SELECT dlock.try_lock('sh/delay', 'h', '1h', lock_delay => '20s', shared => true);
SELECT dlock.lock('sh/delay', 'h', '1h', wait => '0', lock_delay => '20s', shared => true);
\set VERBOSITY default
SELECT dlock.try_lock('sh/delay', 'h', '1h', lock_delay => '20s', shared => true);
SELECT count(*) AS rows FROM dlock.locks WHERE resource = 'sh/delay';
-- A lock_delay of 0 is none: accepted.
SELECT dlock.try_lock('sh/delay', 'h', '1h', lock_delay => '0', shared => true) IS NOT NULL AS zero_delay;
-- dlock.lock_delay applies to exclusive holdings only: shared ones (and
-- lock_all's shared ones) take none, and are not refused.
SET dlock.lock_delay = '1h';
SELECT dlock.try_lock('sh/delay', 'h2', '1h', shared => true) IS NOT NULL AS under_setting;
SELECT dlock.try_lock_all(ARRAY['sh/delay3', 'sh/delay4'], 'h', '1h', shared => true) IS NOT NULL AS all_under_setting;
RESET dlock.lock_delay;
SELECT count(*) AS delays FROM dlock.delays WHERE resource LIKE 'sh/delay%';
SELECT dlock.unlock_all('h') AS released, dlock.unlock_all('h2') AS released2;
