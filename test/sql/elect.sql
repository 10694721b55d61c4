-- Promises: P4 P6 P8
-- Leader election and holding values (0.2): campaign, proclaim, resign,
-- leader, dlock.locks.value, in one session (client-side campaigns with
-- wait => '0'); rights between roles; every bad input.  Waiting
-- candidates, events and the CLI are in test/t/033_elect.pl.
SET client_min_messages = warning;
CREATE FUNCTION pg_temp.lead(e text)
    RETURNS TABLE (candidate text, value text, count integer, live boolean)
    LANGUAGE sql AS $$
    SELECT l.candidate, l.value, k.count,
           l.expires_at > clock_timestamp() AND l.elected_at <= clock_timestamp()
      FROM dlock.leader(e) l JOIN dlock.locks k ON k.resource = e $$;

-- Nobody leads: no row.
SELECT * FROM dlock.leader('el');
-- The first candidate is elected at once; its term is the fence.
SELECT dlock.campaign('el', 'A', 'host-a:5432', '1h') AS a_term \gset
SELECT * FROM pg_temp.lead('el');
SELECT term = :a_term AS term_is_fence, owner = quote_ident(current_user)::regrole AS own
  FROM dlock.leader('el');
SELECT fence = :a_term AS locks_fence, value FROM dlock.locks WHERE resource = 'el';
-- The leader campaigning again gets its term, without re-entering.
SELECT dlock.campaign('el', 'A') = :a_term AS same_term;
SELECT * FROM pg_temp.lead('el');
-- ... and a new value given then is proclaimed.
SELECT dlock.campaign('el', 'A', 'host-a:6000') = :a_term AS same_term;
SELECT * FROM pg_temp.lead('el');
-- Other candidates queue, in campaign order (wait => '0': one try, which
-- keeps a ticket as try_lock(..., fair => true) does).
SELECT dlock.campaign('el', 'B', 'host-b', wait => '0') IS NULL AS b_queued;
SELECT dlock.campaign('el', 'C', 'host-c', wait => '0') IS NULL AS c_queued;
SELECT holder, "position" FROM dlock.queue WHERE resource = 'el' ORDER BY "position";
-- A newcomer does not jump the queue, campaign or lock.
SELECT dlock.try_lock('el', 'D') IS NULL AS d_refused;
-- proclaim: only the leader (and under its term, if given).
SELECT dlock.proclaim('el', 'B', 'b-says');
SELECT dlock.proclaim('el', 'A', 'wrong-term', :a_term + 1);
SELECT dlock.proclaim('el', 'A', 'host-a:7000', :a_term);
SELECT value FROM dlock.locks WHERE resource = 'el';
SELECT dlock.proclaim('el', 'A', NULL);
SELECT value IS NULL AS cleared FROM dlock.locks WHERE resource = 'el';
SELECT dlock.proclaim('el', 'A', 'host-a:7000');
-- resign: only the leader, under its term; then the head is elected.
SELECT dlock.resign('el', 'B');
SELECT dlock.resign('el', 'A', :a_term + 1);
SELECT * FROM pg_temp.lead('el');
SELECT dlock.resign('el', 'A', :a_term);
SELECT * FROM dlock.leader('el');
SELECT dlock.resign('el', 'A');
SELECT dlock.campaign('el', 'C', 'host-c', wait => '0') IS NULL AS c_still_second;
SELECT dlock.campaign('el', 'B', 'host-b', wait => '0') AS b_term \gset
SELECT :b_term > :a_term AS term_increases;
SELECT * FROM pg_temp.lead('el');
-- renew, check and assert_fence work on elections unchanged.
SELECT dlock.renew('el', 'B', '1h') IS NOT NULL AS renewed;
SELECT dlock.check('el', :b_term) AS b_checks, dlock.check('el', :a_term) AS a_checks;
SELECT dlock.assert_fence('el', :b_term);
-- Resign drops every level of a holding that was re-entered.
SELECT dlock.try_lock('el', 'B') = :b_term AS b_reenters;
SELECT count FROM dlock.locks WHERE resource = 'el';
SELECT dlock.resign('el', 'B', :b_term);
SELECT count(*) FROM dlock.locks WHERE resource = 'el' AND holder IS NOT NULL;
SELECT dlock.campaign('el', 'C', 'host-c', wait => '0') IS NOT NULL AS c_elected;
SELECT * FROM pg_temp.lead('el');
SELECT dlock.unlock('el', 'C');

-- Values on any holding: proclaim works on a plain lock too.
SELECT dlock.try_lock('pv', 'P') IS NOT NULL AS p_holds;
SELECT value IS NULL AS no_value FROM dlock.locks WHERE resource = 'pv';
SELECT dlock.proclaim('pv', 'P', 'hello');
SELECT candidate, value FROM dlock.leader('pv');
-- A value belongs to its holding: a new holding starts without it.
SELECT dlock.unlock('pv', 'P');
SELECT dlock.try_lock('pv', 'Q') IS NOT NULL AS q_holds;
SELECT value IS NULL AS fresh FROM dlock.locks WHERE resource = 'pv';
SELECT dlock.unlock('pv', 'Q');
-- An expired leader is no leader; the next campaign takes over.
SELECT dlock.campaign('ex', 'A', 'a', '100ms') IS NOT NULL AS a_leads;
SELECT pg_sleep(0.2);
SELECT count(*) AS leaders FROM dlock.leader('ex');
SELECT dlock.campaign('ex', 'B', 'b', wait => '0') IS NOT NULL AS b_takes_over;
SELECT candidate, value FROM dlock.leader('ex');
SELECT dlock.resign('ex', 'B');

-- Rights: another role cannot proclaim or resign for a candidate (42501);
-- the same candidate text under another role is another candidate.
CREATE ROLE regress_dlock_elect_a;
CREATE ROLE regress_dlock_elect_b;
SET ROLE regress_dlock_elect_a;
SELECT dlock.campaign('rights', 'X', 'a-value', '1h') IS NOT NULL AS x_leads;
SET ROLE regress_dlock_elect_b;
SELECT dlock.proclaim('rights', 'X', 'b-value');
SELECT dlock.resign('rights', 'X');
SELECT dlock.campaign('rights', 'X', 'b-value', wait => '0') IS NULL AS other_role_queued;
SELECT candidate, value, owner FROM dlock.leader('rights');
SET ROLE regress_dlock_elect_a;
SELECT dlock.resign('rights', 'X');
RESET ROLE;
-- Users cannot write the values table.
SET ROLE regress_dlock_elect_b;
UPDATE dlock.holding_values SET value = 'forged';
RESET ROLE;
DELETE FROM dlock.tickets WHERE resource = 'rights';
DROP ROLE regress_dlock_elect_a;
DROP ROLE regress_dlock_elect_b;

-- Bad input: 22023 naming the argument, and nothing changes.
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
SELECT dlock.campaign('bad', 'L', 'v', '1h') IS NOT NULL AS setup;
CREATE TEMP TABLE before AS
    SELECT (SELECT array_agg(l ORDER BY resource)::text FROM dlock.leases l) AS leases,
           (SELECT array_agg(v ORDER BY resource)::text FROM dlock.holding_values v) AS vals,
           (SELECT array_agg(t ORDER BY resource, ticket)::text FROM dlock.tickets t) AS tickets;
SELECT q, pg_temp.err(q) FROM (VALUES
  ($$SELECT dlock.campaign(NULL, 'B')$$),
  ($$SELECT dlock.campaign('', 'B')$$),
  ($$SELECT dlock.campaign(repeat('x', 1001), 'B')$$),
  ($$SELECT dlock.campaign('bad', NULL)$$),
  ($$SELECT dlock.campaign('bad', '')$$),
  ($$SELECT dlock.campaign('bad', repeat('x', 256))$$),
  ($$SELECT dlock.campaign('bad', 'B', repeat('v', 4001))$$),
  ($$SELECT dlock.campaign('bad', 'B', 'v', '-1s')$$),
  ($$SELECT dlock.campaign('bad', 'B', 'v', '1s', '-1s')$$),
  ($$SELECT dlock.proclaim(NULL, 'L', 'v')$$),
  ($$SELECT dlock.proclaim('bad', NULL, 'v')$$),
  ($$SELECT dlock.proclaim('bad', 'L', repeat('v', 4001))$$),
  ($$SELECT dlock.resign(NULL, 'L')$$),
  ($$SELECT dlock.resign('bad', '')$$),
  ($$SELECT * FROM dlock.leader(NULL)$$),
  ($$SELECT * FROM dlock.leader('')$$),
  ($$SELECT * FROM dlock.leader(repeat('x', 1001))$$)
) AS t(q);
SELECT (SELECT array_agg(l ORDER BY resource)::text FROM dlock.leases l) = leases AS leases_same,
       (SELECT array_agg(v ORDER BY resource)::text FROM dlock.holding_values v) = vals AS values_same,
       (SELECT array_agg(t ORDER BY resource, ticket)::text FROM dlock.tickets t)
           IS NOT DISTINCT FROM tickets AS tickets_same
  FROM before;
-- A value at the limit is taken.
SELECT dlock.proclaim('bad', 'L', repeat('v', 4000));
SELECT length(value) FROM dlock.locks WHERE resource = 'bad';
SELECT dlock.resign('bad', 'L');
-- In a read-only transaction: 25006.
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT dlock.campaign('ro', 'A')$$);
ROLLBACK;

-- dlock.terms (0.3): every term campaign elected in the last ten minutes,
-- readable by everyone (for observers that poll); each new term sweeps old
-- ones, of any election.
INSERT INTO dlock.term_log VALUES
    ('old-e', 1, 'Old', NULL, quote_ident(current_user)::regrole, clock_timestamp() - interval '1 hour');
SELECT dlock.campaign('tl', 'T1', 't1', '1h') AS t1 \gset
SELECT dlock.resign('tl', 'T1');
SELECT dlock.campaign('tl', 'T2', wait => '0') AS t2 \gset
SELECT candidate, value, term = :t1 AS is_t1, term = :t2 AS is_t2
  FROM dlock.terms WHERE election = 'tl' ORDER BY term;
SELECT count(*) AS old_left FROM dlock.term_log WHERE resource = 'old-e';
SELECT dlock.resign('tl', 'T2');
-- A holder that took the lock otherwise and campaigns: a leader's term.
SELECT dlock.try_lock('tl2', 'P', '1h') AS p_fence \gset
SELECT dlock.campaign('tl2', 'P') = :p_fence AS same_term;
SELECT candidate, term = :p_fence AS its_fence FROM dlock.terms WHERE election = 'tl2';
SELECT dlock.campaign('tl2', 'P', 'pv') = :p_fence AS same_term_again;
SELECT count(*) AS logged_once FROM dlock.terms WHERE election = 'tl2';
SELECT dlock.unlock('tl2', 'P');
CREATE ROLE regress_dlock_terms;
SET ROLE regress_dlock_terms;
SELECT count(*) AS readable FROM dlock.terms WHERE election = 'tl';
SELECT count(*) FROM dlock.term_log;   -- closed to users
RESET ROLE;
DROP ROLE regress_dlock_terms;
