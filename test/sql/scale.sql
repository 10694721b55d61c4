-- Promises: P1 P7 P8 P12
-- scale: a resource nobody holds costs no row (issue 25).  A holding's row
-- goes when it ends, unless something still needs it; each case below
-- would fail if the row went too early.

-- Lock-delay, broken holding: the row stays, and the resource with it.
SELECT dlock.try_lock('sc/broken', 'A', '1h', lock_delay => '10 min') IS NOT NULL AS a_holds;
SELECT dlock.break_lock('sc/broken');
SELECT dlock.reap() >= 0 AS reaped;
SELECT count(*) AS row_kept FROM dlock.leases WHERE resource = 'sc/broken';
SELECT dlock.try_lock('sc/broken', 'B') IS NULL AS b_held_off;

-- Lock-delay, expired holding reaped: the same.
SELECT dlock.try_lock('sc/expired', 'A', '10 ms', lock_delay => '10 min') IS NOT NULL AS a_holds;
SELECT pg_sleep(0.05);
SELECT dlock.reap() >= 1 AS reaped;
SELECT count(*) AS row_kept, count(holder) AS held FROM dlock.leases WHERE resource = 'sc/expired';
SELECT dlock.try_lock('sc/expired', 'B') IS NULL AS b_held_off;

-- An expired holding without lock-delay, reaped: the row goes, and the
-- next holder's fence is greater.
SELECT dlock.try_lock('sc/gone', 'A', '10 ms') AS fence_a \gset
SELECT pg_sleep(0.05);
SELECT dlock.reap() >= 1 AS reaped;
SELECT count(*) AS rows_left FROM dlock.leases WHERE resource = 'sc/gone';
SELECT dlock.try_lock('sc/gone', 'B') > :fence_a AS b_fence_above;
SELECT dlock.unlock('sc/gone', 'B');

-- A queued client ticket: the released row stays for the head of the
-- queue, who takes it next; a newcomer does not jump the queue.
SELECT dlock.try_lock('sc/queued', 'A') AS fence_q \gset
SELECT dlock.try_lock('sc/queued', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.unlock('sc/queued', 'A');
SELECT count(*) AS row_kept FROM dlock.leases WHERE resource = 'sc/queued';
SELECT dlock.try_lock('sc/queued', 'C') IS NULL AS c_held_off;
SELECT dlock.try_lock('sc/queued', 'B', fair => true) > :fence_q AS b_served_above;
SELECT dlock.unlock('sc/queued', 'B');
SELECT count(*) AS rows_left FROM dlock.leases WHERE resource = 'sc/queued';

-- An election's value: the row stays after resign (the value is read by
-- the last term's fence), and goes with the purge of long-free rows.
SELECT dlock.campaign('sc/elect', 'L', 'v1') AS term \gset
SELECT dlock.resign('sc/elect', 'L');
SELECT count(*) AS row_kept FROM dlock.leases WHERE resource = 'sc/elect';
SELECT dlock.campaign('sc/elect', 'M', 'v2') > :term AS next_term_above;
SELECT dlock.resign('sc/elect', 'M');

-- A release rolled back: the holding is back with its row and fence.
SELECT dlock.try_lock('sc/rb', 'A') AS fence_rb \gset
BEGIN;
SELECT dlock.unlock('sc/rb', 'A') AS released;
SELECT count(*) AS rows_in_xact FROM dlock.leases WHERE resource = 'sc/rb';
ROLLBACK;
SELECT holder, fence = :fence_rb AS same_fence FROM dlock.locks WHERE resource = 'sc/rb';
SELECT dlock.unlock('sc/rb', 'A');

-- Re-entry: only the last release ends the holding.
SELECT dlock.try_lock('sc/re', 'A') IS NOT NULL, dlock.try_lock('sc/re', 'A') IS NOT NULL;
SELECT dlock.unlock('sc/re', 'A') AS left_1;
SELECT count(holder) AS still_held FROM dlock.leases WHERE resource = 'sc/re';
SELECT dlock.unlock('sc/re', 'A') AS left_0;
SELECT count(*) AS rows_left FROM dlock.leases WHERE resource = 'sc/re';

-- Churn over many resources, each its own transaction: the table keeps
-- no row for them, and after a vacuum the heap is small again (it held
-- 20,000 free rows, about 6 MB at fillfactor 50, when released rows
-- stayed for an hour).
CREATE PROCEDURE sc_churn(n int) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. n LOOP
        PERFORM dlock.try_lock('sc/churn/' || i, 'h');
        PERFORM dlock.unlock('sc/churn/' || i, 'h');
        COMMIT;
    END LOOP;
END $$;
CALL sc_churn(20000);
SELECT count(*) AS churn_rows FROM dlock.leases WHERE resource LIKE 'sc/churn/%';
VACUUM dlock.leases;
SELECT pg_relation_size('dlock.leases') < 256 * 1024 AS heap_small;
DROP PROCEDURE sc_churn(int);

SELECT dlock.unlock_all('A') + dlock.unlock_all('B') + dlock.unlock_all('L') AS cleanup;
