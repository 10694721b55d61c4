-- Promises: P2 P5
-- expiry: expired leases are free at once (lazy expiry), reap() removes
-- them, and an expired lease is never revived.
\pset null '(null)'
CREATE TEMP TABLE f (name text PRIMARY KEY, fence bigint);
-- (The background reaper runs in database postgres, not here.)

INSERT INTO f SELECT 'e1', dlock.try_lock('exp/a', 'old', '10ms');
INSERT INTO f SELECT 'e2', dlock.try_lock('exp/b', 'old', '10ms');
SELECT pg_sleep(0.05);
SELECT dlock.check('exp/a', (SELECT fence FROM f WHERE name = 'e1')) AS expired_check;
SELECT dlock.renew('exp/a', 'old') AS renew_expired;
SELECT dlock.unlock('exp/a', 'old') AS unlock_expired;
SELECT dlock.try_lock('exp/a', 'old') IS NOT NULL AS old_holder_gets_new_holding;

-- Lazy takeover by another holder, with a larger fence.
INSERT INTO f SELECT 'e3', dlock.try_lock('exp/b', 'new', '1h');
SELECT (SELECT fence FROM f WHERE name = 'e3') > (SELECT fence FROM f WHERE name = 'e2') AS takeover_fence_larger;
SELECT holder, count FROM dlock.locks WHERE resource = 'exp/b';

-- lock() takes over the moment the holder's lease ends.
SELECT dlock.try_lock('exp/c', 'old', '300ms') IS NOT NULL AS short_lease;
SELECT dlock.lock('exp/c', 'waiter', '1h', '10s') IS NOT NULL AS took_over;
SELECT holder FROM dlock.locks WHERE resource = 'exp/c';

-- reap(): removes expired leases, once.
SELECT dlock.try_lock('exp/d', 'old', '10ms') IS NOT NULL AS short;
SELECT pg_sleep(0.05);
SELECT dlock.reap() AS reaped, dlock.reap() AS reaped_again;
SELECT count(*) AS expired_left FROM dlock.locks WHERE expired;
SELECT count(*) AS held FROM dlock.leases WHERE resource = 'exp/d' AND holder IS NOT NULL;

SELECT dlock.unlock_all('old') + dlock.unlock_all('new') + dlock.unlock_all('waiter') AS cleanup;

-- A released row goes at once unless something needs it (here a
-- lock-delay, over at the clean unlock); rows kept free for over a minute
-- (the portable edition: an hour) are deleted by reap(), recent ones stay.
SELECT dlock.try_lock('exp/old-free', 'h', lock_delay => '1 ms') IS NOT NULL, dlock.unlock('exp/old-free', 'h');
SELECT dlock.try_lock('exp/new-free', 'h', lock_delay => '1 ms') IS NOT NULL, dlock.unlock('exp/new-free', 'h');
SELECT resource FROM dlock.leases WHERE resource IN ('exp/old-free', 'exp/new-free') ORDER BY 1;
UPDATE dlock.leases SET released_at = clock_timestamp() - interval '61 min' WHERE resource = 'exp/old-free';
SELECT dlock.reap() AS reaped_expired;
SELECT resource FROM dlock.leases WHERE resource IN ('exp/old-free', 'exp/new-free');
