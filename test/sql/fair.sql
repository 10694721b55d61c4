-- Promises: P4 P6 P7
-- Fair queues and lock-delay (0.2): the SQL surface, in one session.
-- Client-side tickets (try_lock(..., fair => true)) and every bad input;
-- in-server waiters are in test/t/032_fair.pl.
SET client_min_messages = warning;
CREATE FUNCTION pg_temp.q(r text) RETURNS TABLE (holder text, "position" bigint)
    LANGUAGE sql AS $$
    SELECT holder, "position" FROM dlock.queue WHERE resource = r ORDER BY "position" $$;

-- A queue forms behind a holding; a non-fair attempt takes no ticket.
SELECT dlock.try_lock('fq', 'A') IS NOT NULL AS a_holds;
SELECT dlock.try_lock('fq', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.try_lock('fq', 'C', fair => true) IS NULL AS c_queued;
SELECT dlock.try_lock('fq', 'D') IS NULL AS d_refused;
SELECT * FROM pg_temp.q('fq');
-- Re-entry by the holder never queues, queue or not.
SELECT dlock.try_lock('fq', 'A', fair => true) IS NOT NULL AS a_reenters;
SELECT count FROM dlock.locks WHERE resource = 'fq';
SELECT dlock.unlock('fq', 'A'), dlock.unlock('fq', 'A');
-- Free, but queued: newcomers (fair or not, and transaction-scoped locks)
-- and the second ticket are refused; the head is served.
SELECT dlock.try_lock('fq', 'D') IS NULL AS newcomer_refused;
SELECT dlock.try_lock('fq', 'E', fair => true) IS NULL AS fair_newcomer_queued;
SELECT dlock.try_xact_lock('fq') IS NULL AS xact_refused;
SELECT dlock.try_lock('fq', 'C', fair => true) IS NULL AS second_refused;
SELECT * FROM pg_temp.q('fq');
SELECT dlock.try_lock('fq', 'B', fair => true) IS NOT NULL AS head_served;
SELECT * FROM pg_temp.q('fq');
SELECT dlock.unlock('fq', 'B');
SELECT dlock.try_lock('fq', 'C', fair => true) IS NOT NULL AS next_served;
SELECT dlock.unlock('fq', 'C');
SELECT dlock.try_lock('fq', 'E', fair => true) IS NOT NULL AS last_served;
SELECT dlock.unlock('fq', 'E');
SELECT count(*) AS queue_left FROM dlock.queue WHERE resource = 'fq';
SELECT dlock.try_lock('fq', 'D') IS NOT NULL AS empty_queue_nonfair_ok;
SELECT dlock.unlock('fq', 'D');

-- A ticket nobody keeps alive expires after dlock.queue_ttl and blocks no
-- one; its holder coming back later queues again, at the back.
SET dlock.queue_ttl = '1s';
SELECT dlock.try_lock('ft', 'A') IS NOT NULL;
SELECT dlock.try_lock('ft', 'B', fair => true) IS NULL AS b_queued;
SELECT pg_sleep(1.2);
SELECT dlock.try_lock('ft', 'C', fair => true) IS NULL AS c_queued;
SELECT * FROM pg_temp.q('ft');
SELECT dlock.try_lock('ft', 'B', fair => true) IS NULL AS b_requeued;
SELECT * FROM pg_temp.q('ft');
SELECT dlock.unlock('ft', 'A');
SELECT dlock.try_lock('ft', 'B', fair => true) IS NULL AS b_not_head;
SELECT dlock.try_lock('ft', 'C', fair => true) IS NOT NULL AS c_served;
SELECT dlock.unlock('ft', 'C');
SELECT pg_sleep(1.2);
SELECT dlock.try_lock('ft', 'Z') IS NOT NULL AS dead_queue_blocks_nobody;
SELECT dlock.unlock('ft', 'Z');
RESET dlock.queue_ttl;

-- A ticket is the holder's and its role's: another role's same holder
-- text is another ticket.
CREATE ROLE dlock_fair_other;
SELECT dlock.try_lock('fr', 'A') IS NOT NULL;
SELECT dlock.try_lock('fr', 'B', fair => true) IS NULL;
SET ROLE dlock_fair_other;
SELECT dlock.try_lock('fr', 'B', fair => true) IS NULL AS other_role_queued;
-- (The superuser's name is the OS user's that ran initdb: shown as <superuser>.)
SELECT holder, "position",
       CASE WHEN owner = quote_ident(session_user)::regrole THEN '<superuser>' ELSE owner::text END AS owner
  FROM dlock.queue WHERE resource = 'fr' ORDER BY 2;
SELECT count(*) FROM dlock.tickets;   -- closed to users
RESET ROLE;
SELECT dlock.unlock('fr', 'A');
SET ROLE dlock_fair_other;
SELECT dlock.try_lock('fr', 'B', fair => true) IS NULL AS not_my_turn;
RESET ROLE;
SELECT dlock.try_lock('fr', 'B', fair => true) IS NOT NULL AS owner_b_served;
SELECT dlock.unlock('fr', 'B');
DELETE FROM dlock.tickets;  -- as superuser: clean up the other role's ticket
DROP ROLE dlock_fair_other;

-- Lock-delay: an expired holding keeps the resource until its end plus the
-- delay; dlock.locks says until when.
SELECT dlock.try_lock('fd', 'A', '200ms', lock_delay => '30s') IS NOT NULL;
SELECT pg_sleep(1.2);
SELECT holder, expired, available_at = expires_at + '30s' AS delayed_by_30s
  FROM dlock.locks WHERE resource = 'fd';
SELECT dlock.try_lock('fd', 'B') IS NULL AS delayed_refused;
SELECT dlock.try_xact_lock('fd') IS NULL AS xact_delayed_refused;
SELECT dlock.renew('fd', 'A') IS NULL AS lost_holder_cannot_renew;
-- Reaped, it stays delayed, and listed with no holder until then.
SELECT dlock.reap() >= 0;
SELECT holder, available_at > clock_timestamp() AS still_delayed
  FROM dlock.locks WHERE resource = 'fd';
SELECT dlock.try_lock('fd', 'B') IS NULL AS still_refused;
-- A short delay runs out and the resource is taken.
SELECT dlock.try_lock('fe', 'A', '100ms', lock_delay => '300ms') IS NOT NULL;
SELECT pg_sleep_until(available_at) FROM dlock.locks WHERE resource = 'fe';
SELECT pg_sleep(0.05);
SELECT dlock.try_lock('fe', 'B') IS NOT NULL AS taken_after_delay;
SELECT dlock.unlock('fe', 'B');
-- A clean unlock frees at once.
SELECT dlock.try_lock('fc', 'A', lock_delay => '1h') IS NOT NULL;
SELECT dlock.unlock('fc', 'A');
SELECT dlock.try_lock('fc', 'B') IS NOT NULL AS clean_unlock_free_at_once;
SELECT dlock.unlock('fc', 'B');
-- break_lock: not before the broken lease's end plus the delay.
SELECT dlock.try_lock('fb', 'A', '1h', lock_delay => '1s') IS NOT NULL;
SELECT dlock.break_lock('fb');
SELECT dlock.try_lock('fb', 'B') IS NULL AS broken_delayed;
SELECT holder, available_at >= clock_timestamp() + '59 min' AS until_lease_end_plus_delay
  FROM dlock.locks WHERE resource = 'fb';
-- The default comes from dlock.lock_delay.
SET dlock.lock_delay = '30s';
SELECT dlock.try_lock('fg', 'A', '100ms') IS NOT NULL;
RESET dlock.lock_delay;
SELECT pg_sleep(0.2);
SELECT dlock.try_lock('fg', 'B') IS NULL AS guc_delay_refused;
-- Re-entry keeps the first delay; a new holding has its own (none here).
SELECT dlock.try_lock('fh', 'A', '1h', lock_delay => '300ms') IS NOT NULL;
SELECT dlock.try_lock('fh', 'A', '1h', lock_delay => '0') IS NOT NULL;
SELECT lock_delay FROM dlock.delays WHERE resource = 'fh';
SELECT dlock.unlock('fh', 'A') AS one_level, dlock.unlock('fh', 'A') AS released;

-- Bad input: 22023 naming the argument, and nothing changes.
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    -- PostgreSQL 17 names the unit in a setting's range ("0 ms .. 3600000 ms").
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '\((-?\d+) ms \.\. (-?\d+) ms\)$', '(\1 .. \2)');
END $$;
SELECT dlock.try_lock('fx', 'A', '1h') IS NOT NULL AS setup;
SELECT dlock.try_lock('fx', 'Q', fair => true) IS NULL AS setup_ticket;
CREATE TEMP TABLE before AS
    SELECT (SELECT array_agg(l ORDER BY resource)::text FROM dlock.leases l) AS leases,
           (SELECT array_agg(t ORDER BY resource, ticket)::text FROM dlock.tickets t) AS tickets,
           (SELECT array_agg(d ORDER BY resource)::text FROM dlock.delays d) AS delays,
           (SELECT last_value FROM dlock.fences) AS fences,
           (SELECT last_value FROM dlock.ticket_seq) AS ticket_seq;
SELECT q, pg_temp.err(q) FROM (VALUES
  ($$SELECT dlock.try_lock('fx', 'B', fair => NULL)$$),
  ($$SELECT dlock.lock('fx', 'B', wait => '0', fair => NULL)$$),
  ($$SELECT dlock.lock('fx', 'B', wait => '1s', fair => NULL)$$),
  ($$SELECT dlock.try_lock('fx', 'B', lock_delay => '-1s')$$),
  ($$SELECT dlock.try_lock('fx', 'B', lock_delay => '1h 0.000001s')$$),
  ($$SELECT dlock.try_lock('fx', 'B', lock_delay => '1 day')$$),
  ($$SELECT dlock.try_lock('fx', 'B', lock_delay => '1 mon')$$),
  ($$SELECT dlock.try_lock('fx', 'B', lock_delay => '-1 day 25 hours')$$),
  ($$SELECT dlock.try_lock('fx', 'B', fair => true, lock_delay => '2h')$$),
  ($$SET dlock.lock_delay = '2h'$$),
  ($$SET dlock.lock_delay = '-1'$$),
  ($$SET dlock.queue_ttl = 0$$),
  ($$SELECT dlock.withdraw(NULL, 'Q')$$),
  ($$SELECT dlock.withdraw('', 'Q')$$),
  ($$SELECT dlock.withdraw(repeat('x', 1001), 'Q')$$),
  ($$SELECT dlock.withdraw('fx', NULL)$$),
  ($$SELECT dlock.withdraw('fx', '')$$),
  ($$SELECT dlock.withdraw('fx', repeat('x', 256))$$)
) AS t(q);
SELECT b.leases = (SELECT array_agg(l ORDER BY resource)::text FROM dlock.leases l) AS leases_same,
       b.tickets = (SELECT array_agg(t ORDER BY resource, ticket)::text FROM dlock.tickets t) AS tickets_same,
       b.delays IS NOT DISTINCT FROM (SELECT array_agg(d ORDER BY resource)::text FROM dlock.delays d) AS delays_same,
       b.fences = (SELECT last_value FROM dlock.fences) AS fences_same,
       b.ticket_seq = (SELECT last_value FROM dlock.ticket_seq) AS ticket_seq_same
  FROM before b;
SELECT dlock.unlock('fx', 'A');
SELECT dlock.try_lock('fx', 'B', lock_delay => '1h') IS NULL AS b_behind_ticket_q;
DELETE FROM dlock.tickets WHERE resource = 'fx';
SELECT dlock.try_lock('fx', 'B', lock_delay => '1h') IS NOT NULL AS one_hour_is_allowed;
SELECT dlock.unlock('fx', 'B');

-- withdraw (0.3): a client-side waiter gives up its ticket at once, and
-- the next ticket heads the queue; false if it had none.
SELECT dlock.try_lock('fw', 'A') IS NOT NULL AS a_holds;
SELECT dlock.try_lock('fw', 'B', fair => true) IS NULL AS b_queued;
SELECT dlock.try_lock('fw', 'C', fair => true) IS NULL AS c_queued;
SELECT dlock.withdraw('fw', 'B') AS b_withdrawn;
SELECT * FROM pg_temp.q('fw');
SELECT dlock.withdraw('fw', 'B') AS b_again;
SELECT dlock.withdraw('fw', 'A') AS holder_has_none;
SELECT dlock.withdraw('fw-none', 'B') AS no_queue;
SELECT dlock.unlock('fw', 'A');
SELECT dlock.try_lock('fw', 'C', fair => true) IS NOT NULL AS c_served_next;
SELECT dlock.unlock('fw', 'C');
-- The session's holder is the default.
SELECT dlock.try_lock('fw', 'A') IS NOT NULL AS a_holds;
SELECT dlock.try_lock('fw', fair => true) IS NULL AS session_queued;
SELECT dlock.withdraw('fw') AS session_withdrawn;
SELECT count(*) AS left_in_queue FROM dlock.queue WHERE resource = 'fw';
-- Owner checks as for unlock: another role's ticket of the same holder
-- text raises 42501 and stays; a superuser withdraws it.
CREATE ROLE dlock_fw_a;
CREATE ROLE dlock_fw_b;
SET ROLE dlock_fw_a;
SELECT dlock.try_lock('fw', 'X', fair => true) IS NULL AS x_queued_by_a;
SET ROLE dlock_fw_b;
SELECT pg_temp.err($$SELECT dlock.withdraw('fw', 'X')$$);
SELECT holder, owner FROM dlock.queue WHERE resource = 'fw';
-- dlock.queue_ttl bounds how long a dead ticket blocks everybody: it is
-- the administrator's, not a session's (42501), and stays as it was.
SELECT pg_temp.err($$SET dlock.queue_ttl = '1h'$$);
SELECT current_setting('dlock.queue_ttl') AS queue_ttl;
SET ROLE dlock_fw_a;
SELECT dlock.withdraw('fw', 'X') AS own_withdrawn;
RESET ROLE;
SELECT dlock.try_lock('fw', 'Y', fair => true) IS NULL AS y_queued;
SET ROLE dlock_fw_a;
SELECT dlock.try_lock('fw', 'Y', fair => true) IS NULL AS y_queued_by_a;
RESET ROLE;
SELECT dlock.withdraw('fw', 'Y') AS own_role_first;
SELECT holder, owner FROM dlock.queue WHERE resource = 'fw';
SELECT dlock.withdraw('fw', 'Y') AS superuser_withdraws_other_role;
SELECT count(*) AS left_in_queue FROM dlock.queue WHERE resource = 'fw';
SELECT dlock.unlock('fw', 'A');
DROP ROLE dlock_fw_a;
DROP ROLE dlock_fw_b;
-- In a read-only transaction: 25006.
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT dlock.withdraw('fw', 'B')$$);
ROLLBACK;
