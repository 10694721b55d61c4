-- Promises: P1 P2 P4 P5
-- api: the lease functions on the happy path and their edge cases.
-- Fences are compared, not printed: their values depend on the epoch.
\pset null '(null)'
CREATE TEMP TABLE f (name text PRIMARY KEY, fence bigint);

-- First acquisition, re-entry keeps the fence, another holder is refused.
INSERT INTO f SELECT 'a1', dlock.try_lock('api/a', 'h1', '10s');
SELECT fence IS NOT NULL AS acquired FROM f WHERE name = 'a1';
SELECT dlock.try_lock('api/a', 'h1', '10s') = (SELECT fence FROM f WHERE name = 'a1') AS reentry_keeps_fence;
SELECT dlock.try_lock('api/a', 'h2') AS other_holder;
SELECT resource, holder, count, lease, owner = quote_ident(current_user)::regrole AS mine, expired,
       expires_at > clock_timestamp() + '9s' AS expiry_about_10s
  FROM dlock.locks WHERE resource = 'api/a';

-- Resources and holders are bytes: case and spaces matter.
SELECT dlock.try_lock('API/A', 'h2') IS NOT NULL AS other_case_is_other_resource;
SELECT dlock.try_lock('api/a', 'H1') AS other_case_is_other_holder;
SELECT dlock.unlock('API/A', 'h2');

-- unlock counts down; NULL once not held; a wrong fence changes nothing.
SELECT dlock.unlock('api/a', 'h1', (SELECT fence FROM f WHERE name = 'a1') + 1) AS wrong_fence;
SELECT dlock.unlock('api/a', 'h2') AS not_holder;
SELECT dlock.unlock('api/a', 'h1', (SELECT fence FROM f WHERE name = 'a1')) AS left_after_first;
SELECT dlock.unlock('api/a', 'h1') AS left_after_second;
SELECT dlock.unlock('api/a', 'h1') AS after_release;
SELECT count(*) AS rows_in_view FROM dlock.locks WHERE resource = 'api/a';

-- A new holder gets a larger fence; fences grow across resources too.
INSERT INTO f SELECT 'a2', dlock.try_lock('api/a', 'h2', '10s');
INSERT INTO f SELECT 'b1', dlock.try_lock('api/b', 'h2', '10s');
SELECT (SELECT fence FROM f WHERE name = 'a2') > (SELECT fence FROM f WHERE name = 'a1') AS a2_gt_a1,
       (SELECT fence FROM f WHERE name = 'b1') > (SELECT fence FROM f WHERE name = 'a2') AS b1_gt_a2;

-- renew: new expiry from now, default the lease it was taken with.
SELECT dlock.renew('api/a', 'h2') BETWEEN clock_timestamp() + '9s' AND clock_timestamp() + '10s' AS renew_default_lease;
SELECT dlock.renew('api/a', 'h2', '1h') > clock_timestamp() + '59 min' AS renew_new_lease;
SELECT lease FROM dlock.locks WHERE resource = 'api/a';
SELECT dlock.renew('api/a', 'h2', NULL, (SELECT fence FROM f WHERE name = 'a1')) AS renew_stale_fence;
SELECT dlock.renew('api/a', 'h1') AS renew_not_holder;
SELECT dlock.renew('api/nothing', 'h1') AS renew_unknown;

-- check: the current fence of an unexpired holding only.
SELECT dlock.check('api/a', (SELECT fence FROM f WHERE name = 'a2')) AS current,
       dlock.check('api/a', (SELECT fence FROM f WHERE name = 'a1')) AS stale,
       dlock.check('api/nothing', 1) AS unknown;

-- assert_fence: silent when current, 55P03 when not.
SELECT dlock.assert_fence('api/a', (SELECT fence FROM f WHERE name = 'a2'));
\set VERBOSITY sqlstate
SELECT dlock.assert_fence('api/a', (SELECT fence FROM f WHERE name = 'a1'));
\set VERBOSITY default

-- unlock_all: every holding of the holder, whatever its count.
SELECT dlock.try_lock('api/b', 'h2') IS NOT NULL AS reenter_b;
SELECT dlock.unlock_all('h2') AS released;
SELECT dlock.unlock_all('h2') AS released_again;
SELECT count(*) FROM dlock.locks WHERE resource LIKE 'api/%';

-- break_lock: true when it ended a holding.
SELECT dlock.try_lock('api/c', 'h3') IS NOT NULL AS taken;
SELECT dlock.break_lock('api/c') AS broken, dlock.break_lock('api/c') AS again;
SELECT dlock.try_lock('api/c', 'h4') IS NOT NULL AS free_after_break;
SELECT dlock.unlock('api/c', 'h4');

-- lock(): acquires a free resource at once; with wait '0' one try.
SELECT dlock.lock('api/d', 'h5', '10s') IS NOT NULL AS lock_free;
SELECT dlock.lock('api/d', 'h6', '10s', '0') AS lock_held_no_wait;
SELECT dlock.lock('api/d', 'h6', '10s', '50ms') AS lock_held_timeout;
-- lock_timeout bounds the wait like any lock wait, with its error.
SET lock_timeout = '50ms';
\set VERBOSITY sqlstate
SELECT dlock.lock('api/d', 'h6', '10s');
\set VERBOSITY default
RESET lock_timeout;
SELECT count(*) AS waiters_left FROM dlock.waiters;
SELECT dlock.unlock('api/d', 'h5');

-- Defaults: holder dlock.session_holder(), lease dlock.default_lease.
SET dlock.default_lease = '5min';
SELECT dlock.try_lock('api/e') IS NOT NULL AS default_holder;
SELECT holder = dlock.session_holder() AS is_session_holder,
       lease, dlock.session_holder() ~ '^pid:[0-9]+:[0-9]+$' AS holder_format
  FROM dlock.locks WHERE resource = 'api/e';
SELECT dlock.unlock('api/e');
RESET dlock.default_lease;

-- Limits are inclusive: 1000-byte resource, 255-byte holder.
SELECT dlock.try_lock(repeat('r', 1000), repeat('h', 255)) IS NOT NULL AS max_sizes;
SELECT dlock.unlock(repeat('r', 1000), repeat('h', 255));
SELECT dlock.try_lock(repeat('é', 500), 'h') IS NOT NULL AS multibyte_1000_bytes;
SELECT dlock.unlock(repeat('é', 500), 'h');

-- channel: an identifier of at most 63 bytes, one per resource.
SELECT dlock.channel('api/a') AS channel,
       length(dlock.channel(repeat('x', 1000))) AS long_resource_len,
       dlock.channel('a') <> dlock.channel('A') AS distinct_by_case,
       dlock.channel('api/a') = 'dlock_' || md5('api/a') AS md5_rule;

-- A released resource's row goes with its holding when nothing needs it
-- (no lock-delay, holding value or queued ticket): no free row is left.
SELECT count(*) AS free_rows_left FROM dlock.leases WHERE holder IS NULL;

-- A held row churns: re-entries and partial releases are HOT updates
-- (nothing indexed changes), so the table does not bloat.
SELECT dlock.try_lock('api/hot', 'h') IS NOT NULL AS row_made;
BEGIN;
SELECT count(dlock.try_lock('api/hot', 'h')) + count(dlock.unlock('api/hot', 'h')) AS calls
  FROM generate_series(1, 10);
-- (The counters also hold this session's not yet reported earlier updates.)
SELECT pg_stat_get_xact_tuples_updated('dlock.leases'::regclass) >= 20 AS counted,
       pg_stat_get_xact_tuples_updated('dlock.leases'::regclass) =
       pg_stat_get_xact_tuples_hot_updated('dlock.leases'::regclass) AS all_hot;
COMMIT;
SELECT dlock.unlock('api/hot', 'h');
