-- Promises: P12
-- xact: acquisitions inside transaction blocks and transaction-scoped
-- locks.
\pset null '(null)'
\set VERBOSITY sqlstate

-- An acquisition that rolls back leaves nothing.
BEGIN;
SELECT dlock.try_lock('xact/a', 'h', '1h') IS NOT NULL AS in_block;
SELECT count(*) AS visible_inside FROM dlock.locks WHERE resource = 'xact/a';
ROLLBACK;
SELECT count(*) AS after_rollback FROM dlock.locks WHERE resource = 'xact/a';

-- ... and one that commits stays.
BEGIN;
SELECT dlock.try_lock('xact/a', 'h', '1h') IS NOT NULL AS in_block;
COMMIT;
SELECT holder FROM dlock.locks WHERE resource = 'xact/a';

-- A failed savepoint undoes its acquisition only.
BEGIN;
SAVEPOINT s;
SELECT dlock.try_lock('xact/b', 'h', '1h') IS NOT NULL AS in_savepoint;
ROLLBACK TO s;
SELECT dlock.unlock('xact/a', 'h') AS released_in_block;
COMMIT;
SELECT count(*) AS held FROM dlock.locks WHERE resource IN ('xact/a', 'xact/b');

-- Transaction-scoped locks: a fence, held until the transaction ends,
-- re-entry in the same transaction keeps the fence, nothing left behind.
CREATE TEMP TABLE f (name text PRIMARY KEY, fence bigint);
BEGIN;
INSERT INTO f SELECT 'x1', dlock.xact_lock('xact/x');
SELECT dlock.xact_lock('xact/x') = (SELECT fence FROM f WHERE name = 'x1') AS reentry_same_fence;
SELECT dlock.try_xact_lock('xact/x') = (SELECT fence FROM f WHERE name = 'x1') AS try_reentry_same_fence;
SELECT dlock.check('xact/x', (SELECT fence FROM f WHERE name = 'x1')) AS check_inside;
SELECT dlock.assert_fence('xact/x', (SELECT fence FROM f WHERE name = 'x1')) AS assert_inside;
-- A lease on the same resource is excluded, even for this transaction.
SELECT dlock.try_lock('xact/x', 'h') AS lease_excluded;
COMMIT;
SELECT dlock.check('xact/x', (SELECT fence FROM f WHERE name = 'x1')) AS check_after_commit;
SELECT count(*) AS rows_left FROM dlock.leases WHERE resource = 'xact/x';

-- A transaction lock taken in a rolled-back savepoint is gone with it.
BEGIN;
SAVEPOINT s;
SELECT dlock.xact_lock('xact/y') AS y \gset
SELECT dlock.check('xact/y', :y) AS check_in_savepoint;
ROLLBACK TO s;
SELECT dlock.check('xact/y', :y) AS check_after_savepoint_rollback;
COMMIT;

-- A live lease excludes a transaction lock.
SELECT dlock.try_lock('xact/z', 'h', '1h') IS NOT NULL AS lease;
SELECT dlock.try_xact_lock('xact/z') AS xact_excluded;
SELECT dlock.xact_lock('xact/z', '20ms') AS xact_times_out;
SELECT dlock.unlock('xact/z', 'h');
SELECT dlock.try_xact_lock('xact/z') > (SELECT fence FROM f WHERE name = 'x1') AS xact_after_release;

-- Transaction-lock fences are in the same order as lease fences.
SELECT dlock.try_lock('xact/z', 'h', '1h') > (SELECT max(fence) FROM f) AS lease_after;
SELECT dlock.unlock('xact/z', 'h');

-- Durability: synchronous_commit = off does not weaken an acquisition's
-- commit (TAP test 010 proves it with a crash); here: the setting the
-- session sees is untouched afterwards.
SET synchronous_commit = off;
SELECT dlock.try_lock('xact/d', 'h') IS NOT NULL AS acquired;
SHOW synchronous_commit;
SELECT dlock.unlock('xact/d', 'h');
SHOW synchronous_commit;
RESET synchronous_commit;

-- Lease arithmetic uses the clock at the call, not the transaction start.
BEGIN;
SELECT pg_sleep(0.3);
SELECT dlock.try_lock('xact/clock', 'h', '10s') IS NOT NULL AS acquired;
SELECT expires_at - now() >= interval '10.3s' AS from_clock_not_xact_start,
       acquired_at > now() AS acquired_after_xact_start
  FROM dlock.locks WHERE resource = 'xact/clock';
COMMIT;
SELECT dlock.unlock('xact/clock', 'h');
