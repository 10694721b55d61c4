-- Promises: P7 P8
-- Fair queues, lock-delay and elections (0.2): defects found in review,
-- one section each, in one session (races are in
-- test/isolation/specs/fair_tickets_campaign.spec,
-- test/t/034_fair_handoff.pl and test/t/031_fair_mixed.pl).
SET client_min_messages = warning;
CREATE FUNCTION pg_temp.q(r text) RETURNS TABLE (holder text, "position" bigint)
    LANGUAGE sql AS $$
    SELECT holder, "position" FROM dlock.queue WHERE resource = r ORDER BY "position" $$;

-- A client that queued and then acquires by another path (a non-fair
-- try_lock, lock(), a fair lock(), campaign) leaves the queue: once it
-- releases, a newcomer is not held off by a ticket nobody waits on.
SELECT dlock.try_lock('rv1', 'A') IS NOT NULL;
SELECT dlock.try_lock('rv1', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.unlock('rv1', 'A');
SELECT dlock.try_lock('rv1', 'B') IS NOT NULL AS b_nonfair_served;
SELECT * FROM pg_temp.q('rv1');
SELECT dlock.unlock('rv1', 'B');
SELECT dlock.try_lock('rv1', 'C') IS NOT NULL AS newcomer_served;
SELECT dlock.unlock('rv1', 'C');

SELECT dlock.try_lock('rv1l', 'A') IS NOT NULL;
SELECT dlock.try_lock('rv1l', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.unlock('rv1l', 'A');
SELECT dlock.lock('rv1l', 'B', wait => '10s') IS NOT NULL AS b_lock_served;
SELECT * FROM pg_temp.q('rv1l');
SELECT dlock.unlock('rv1l', 'B');
SELECT dlock.try_lock('rv1l', 'C') IS NOT NULL AS newcomer_served;
SELECT dlock.unlock('rv1l', 'C');

SELECT dlock.try_lock('rv1f', 'A') IS NOT NULL;
SELECT dlock.try_lock('rv1f', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.unlock('rv1f', 'A');
SELECT dlock.lock('rv1f', 'B', wait => '10s', fair => true) IS NOT NULL AS b_fair_lock_served;
SELECT * FROM pg_temp.q('rv1f');
SELECT dlock.unlock('rv1f', 'B');
SELECT dlock.try_lock('rv1f', 'C') IS NOT NULL AS newcomer_served;
SELECT dlock.unlock('rv1f', 'C');

SELECT dlock.try_lock('rv1e', 'A') IS NOT NULL;
SELECT dlock.try_lock('rv1e', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.unlock('rv1e', 'A');
SELECT dlock.campaign('rv1e', 'B', wait => '10s') IS NOT NULL AS b_elected;
SELECT * FROM pg_temp.q('rv1e');
SELECT dlock.resign('rv1e', 'B');
SELECT dlock.try_lock('rv1e', 'C') IS NOT NULL AS newcomer_served;
SELECT dlock.unlock('rv1e', 'C');

-- campaign honours dlock.lock_delay like lock(): the lease of a leader
-- that ran out holds off the next candidate until its end plus the delay.
SET dlock.lock_delay = '1h';
SELECT dlock.campaign('rv2', 'L', lease => '100ms') IS NOT NULL AS l_elected;
RESET dlock.lock_delay;
SELECT pg_sleep(0.3);
SELECT dlock.campaign('rv2', 'M', wait => '0') IS NULL AS m_held_off;
SELECT dlock.campaign('rv2', 'M', wait => '200ms') IS NULL AS m_still_held_off;
SELECT dlock.try_lock('rv2', 'N') IS NULL AS n_held_off;
SELECT count(*) AS leaders FROM dlock.leader('rv2');
-- A clean resign frees at once, delay or not.
SET dlock.lock_delay = '1h';
SELECT dlock.campaign('rv2c', 'L') IS NOT NULL AS l_elected;
RESET dlock.lock_delay;
SELECT dlock.resign('rv2c', 'L');
SELECT dlock.campaign('rv2c', 'M', wait => '0') IS NOT NULL AS m_elected;
SELECT dlock.resign('rv2c', 'M');

-- campaign never re-enters, whichever way the candidate came to lead:
-- one resign (or one unlock) ends its leadership.
SELECT dlock.try_lock('rv3', 'L') AS t3 \gset
SELECT dlock.campaign('rv3', 'L', 'v1') = :t3 AS same_term_immediate;
SELECT dlock.campaign('rv3', 'L', 'v1', wait => '0') = :t3 AS same_term_client_side;
SELECT dlock.campaign('rv3', 'L', 'v2', wait => '1s') = :t3 AS same_term_waiting;
SELECT count, value FROM dlock.locks WHERE resource = 'rv3';
SELECT dlock.unlock('rv3', 'L');
SELECT count(*) AS leaders FROM dlock.leader('rv3');
-- Inside one transaction block, after its own acquisition.
BEGIN;
SELECT dlock.try_lock('rv3x', 'L') AS t3x \gset
SELECT dlock.campaign('rv3x', 'L', wait => '0') = :t3x AS same_term_in_xact;
SELECT dlock.campaign('rv3x', 'L') = :t3x AS same_term_in_xact_wait;
COMMIT;
SELECT count FROM dlock.locks WHERE resource = 'rv3x';
SELECT dlock.unlock('rv3x', 'L');

-- The purge of long-free rows keeps a row whose lock-delay is pending:
-- a broken holding of a long lease is not available before its lease's
-- end plus the delay, even once its row has been free for over an hour.
SELECT dlock.try_lock('rv5', 'A', '2h', lock_delay => '1h') IS NOT NULL;
SELECT dlock.break_lock('rv5');
UPDATE dlock.leases SET released_at = released_at - interval '90 min'
    WHERE resource = 'rv5';
SELECT dlock.reap() >= 0 AS reaped;
SELECT count(*) AS row_kept FROM dlock.leases WHERE resource = 'rv5';
SELECT dlock.try_lock('rv5', 'B') IS NULL AS b_held_off;
SELECT dlock.try_lock('rv5', 'B', fair => true) IS NULL AS b_fair_held_off;
-- A row whose delay is over (or that had none) is purged as before.
SELECT dlock.try_lock('rv5b', 'A', '1h', lock_delay => '1s') IS NOT NULL;
SELECT dlock.break_lock('rv5b');
UPDATE dlock.leases SET released_at = released_at - interval '3h'
    WHERE resource = 'rv5b';
UPDATE dlock.delays SET available_at = available_at - interval '3h'
    WHERE resource = 'rv5b';
SELECT dlock.reap() >= 0 AS reaped;
SELECT count(*) AS row_purged FROM dlock.leases WHERE resource = 'rv5b';
SELECT dlock.try_lock('rv5b', 'B') IS NOT NULL AS b_served;
SELECT dlock.unlock('rv5b', 'B');
