/*
 * portable/elect.sql: leader election ([elect]): campaign, proclaim,
 * resign, leader and the view dlock.terms, with their helpers (_value,
 * _value_set, _term_log, _still_leader).  Part of dlock.sql, which
 * includes it (\ir) inside its transaction after views.sql: run
 * dlock.sql, not this file.
 *
 * What protects the shared state: an election is a resource, so its
 * holding is changed under the resource's row lock as any lock's (campaign is a fair lock()); its value (dlock.holding_values)
 * is written with the row locked and tied to the holding by its fence;
 * dlock.term_log is appended to, and swept SKIP LOCKED.
 */
-- ---------------------------------------------------------------------------
-- Leader election ([elect]): an election is a resource whose holder is the
-- leader; the term is the holding's fence, so renew, check and
-- assert_fence work on elections unchanged.  campaign is a fair lock()
-- (with wait => '0' a client-side fair attempt, as try_lock(..., fair =>
-- true)) that never re-enters: the current leader campaigning again gets
-- its current term.
-- ---------------------------------------------------------------------------

-- _value: the value argument: NULL, or at most 4000 bytes (an event
-- carrying it fits a NOTIFY).
CREATE OR REPLACE FUNCTION dlock._value(val text)
    RETURNS text LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF octet_length(val) > 4000 THEN
        RAISE EXCEPTION 'value must be at most 4000 bytes long' USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('The value given is %s bytes long.', octet_length(val));
    END IF;
    RETURN val;
END
$$;

-- _value_set: the holding fence of resource now has value; p_election:
-- campaign took it (false keeps what the row says for this holding).
-- Called with the resource's row locked.
CREATE OR REPLACE FUNCTION dlock._value_set(p_resource text, p_fence bigint, p_holder text, p_value text,
                                            p_election boolean)
    RETURNS void LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO dlock.holding_values AS v (resource, fence, holder, value, election)
         VALUES (p_resource, p_fence, p_holder, p_value, p_election)
    ON CONFLICT (resource) DO UPDATE
           SET value = excluded.value, holder = excluded.holder,
               election = excluded.election OR (v.election AND v.fence OPERATOR(pg_catalog.=) excluded.fence),
               fence = excluded.fence
$$;

-- _term_log: a new term: appended to dlock.term_log; up to 64 terms (of
-- any election) older than ten minutes go, skipping rows another sweep has
-- locked.
CREATE OR REPLACE FUNCTION dlock._term_log(p_resource text, p_term bigint, p_candidate text, p_value text,
                                           p_owner oid)
    RETURNS void LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    WITH old AS (DELETE FROM dlock.term_log t
                  WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
                        SELECT o.ctid FROM dlock.term_log o
                         WHERE o.elected_at OPERATOR(pg_catalog.<)
                               (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) interval '10 minutes')
                         LIMIT 64 FOR UPDATE SKIP LOCKED)))
    INSERT INTO dlock.term_log (resource, term, candidate, value, owner, elected_at)
         VALUES (p_resource, p_term, p_candidate, p_value, p_owner::regrole, pg_catalog.clock_timestamp())
    ON CONFLICT DO NOTHING
$$;

-- _still_leader: candidate leads already under term (its row locked): a
-- value given (and different) is proclaimed, and the holding becomes an
-- election's however it was taken (a try_lock, say), with its term logged.
CREATE OR REPLACE FUNCTION dlock._still_leader(p_resource text, p_term bigint, p_candidate text,
                                               p_value text, p_role oid)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v dlock.holding_values%ROWTYPE;
    proclaimed boolean;
    was_election boolean;
BEGIN
    SELECT * INTO v FROM dlock.holding_values x WHERE x.resource = p_resource AND x.fence = p_term;
    was_election := FOUND AND v.election;
    proclaimed := p_value IS NOT NULL AND v.value IS DISTINCT FROM p_value;
    IF proclaimed OR NOT was_election THEN
        PERFORM dlock._value_set(p_resource, p_term, p_candidate,
                                 CASE WHEN proclaimed THEN p_value ELSE v.value END, true);
        IF NOT was_election THEN
            PERFORM dlock._term_log(p_resource, p_term, p_candidate,
                                    CASE WHEN proclaimed THEN p_value ELSE v.value END, p_role);
        END IF;
    END IF;
    IF proclaimed THEN
        PERFORM dlock._event_holding('proclaimed', p_resource, p_term, p_candidate, p_value);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION dlock.campaign(election text,
                                          candidate text DEFAULT dlock.session_holder(),
                                          value text DEFAULT NULL,
                                          lease interval DEFAULT NULL,
                                          wait interval DEFAULT NULL,
                                          session bigint DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s record;
    l interval;
    w interval;
    d interval;
    v_role oid;
    r dlock.leases%ROWTYPE;
    term bigint;
    deadline timestamptz;
    pause interval := interval '1 millisecond';
BEGIN
    PERFORM dlock._text_arg(election, 'election', 1000);
    IF campaign.session IS NULL THEN     -- with one, candidate may be NULL: the session's holder
        PERFORM dlock._text_arg(candidate, 'candidate', 255);
    END IF;
    PERFORM dlock._value(value);
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    d := dlock._lock_delay(NULL);
    PERFORM dlock._writable('dlock.campaign()');
    v_role := (dlock._caller()).roleid;
    IF campaign.session IS NOT NULL THEN      -- [sessions], sessions.sql
        s := dlock._session_use(campaign.session, candidate, lease);
        candidate := s.holder;
        l := s.ttl;
    END IF;
    -- The leader campaigning again: its term, never a re-entry (its row
    -- locked within the wait; a first look takes nothing).
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election;
    IF FOUND AND r.holder = candidate AND r.owner = v_role
       AND dlock._exp(r.session, r.expires_at) > clock_timestamp() THEN
        deadline := clock_timestamp() + w;
        LOOP
            SELECT * INTO r FROM dlock.leases x WHERE x.resource = election FOR UPDATE SKIP LOCKED;
            EXIT WHEN FOUND;
            IF deadline IS NOT NULL AND clock_timestamp() >= deadline THEN
                RETURN NULL;
            END IF;
            PERFORM pg_sleep(extract(epoch FROM pause));
            pause := least(pause * 2, interval '100 milliseconds');
        END LOOP;
        IF r.holder = candidate AND r.owner = v_role
           AND dlock._exp(r.session, r.expires_at) > clock_timestamp() THEN
            -- [sessions]: its term only the way it leads, in its session
            -- or with a lease, as a re-entry (else it would think the
            -- leadership kept alive by a session it is not in).
            IF r.session IS DISTINCT FROM campaign.session THEN
                RAISE EXCEPTION 'holder "%" holds resource "%" %', candidate, election,
                                CASE WHEN r.session IS NULL THEN 'with a lease of its own'
                                     ELSE format('in session %s', r.session) END
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          HINT = 'Campaign again the way it leads: in its session, or with a lease.';
            END IF;
            PERFORM dlock._still_leader(election, r.fence, candidate, value, v_role);
            RETURN r.fence;
        END IF;
    END IF;
    IF w = interval '0' THEN
        term := dlock._attempt(election, candidate, l, v_role, true, d, NULL, campaign.session);
    ELSE
        term := dlock._wait_loop(election, candidate, l, w, true, d, 'dlock.campaign()', 'exclusive', NULL, NULL,
                                 campaign.session);
    END IF;
    IF term IS NULL THEN
        RETURN NULL;
    END IF;
    -- The row is ours (locked) until the transaction ends.  A re-entry
    -- (the candidate came to lead since the first look) is undone.
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election;
    IF r.count > 1 THEN
        UPDATE dlock.leases x SET count = x.count - 1 WHERE x.resource = election;
        PERFORM dlock._still_leader(election, term, candidate, value, v_role);
        RETURN term;
    END IF;
    PERFORM dlock._value_set(election, term, candidate, value, true);
    PERFORM dlock._term_log(election, term, candidate, value, v_role);
    PERFORM dlock._event_holding('elected', election, term, candidate, value);
    RETURN term;
END
$$;
COMMENT ON FUNCTION dlock.campaign(text, text, text, interval, interval, bigint) IS
    'Wait in election''s fair queue until candidate leads, with value; returns the term (the fence), NULL on timeout; the leader campaigning again gets its term';

-- _lock_leader: lock election's row for candidate's p_action (proclaim,
-- resign) while candidate leads (under p_term, if given), and return it;
-- NULL (every field) if it does not lead, locking nothing.  A look, then
-- that holding's row locked (_lock_holding), or, if it changed hands or
-- ended meanwhile, a look again.  42501 for another role's (_may_change).
CREATE OR REPLACE FUNCTION dlock._lock_leader(p_election text, p_candidate text, p_role oid, p_super boolean,
                                              p_term bigint, p_action text)
    RETURNS dlock.leases LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
BEGIN
    LOOP
        SELECT * INTO r FROM dlock.leases x WHERE x.resource = p_election;
        IF NOT dlock._may_change(r, p_candidate, p_role, p_super, p_action)
           OR (p_term IS NOT NULL AND p_term <> r.fence) THEN
            RETURN NULL;
        END IF;
        r := dlock._lock_holding(p_election, p_candidate, r.fence, false);
        IF r.resource IS NOT NULL THEN
            RETURN r;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION dlock.proclaim(election text, candidate text, value text,
                                          term bigint DEFAULT NULL)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(election, 'election', 1000);
    PERFORM dlock._text_arg(candidate, 'candidate', 255);
    PERFORM dlock._value(value);
    PERFORM dlock._writable('dlock.proclaim()');
    c := dlock._caller();
    r := dlock._lock_leader(election, candidate, c.roleid, c.is_super, term, 'proclaim');
    IF r.resource IS NULL THEN
        RETURN false;
    END IF;
    PERFORM dlock._value_set(election, r.fence, candidate, value, false);
    PERFORM dlock._event_holding('proclaimed', election, r.fence, candidate, value);
    RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.proclaim(text, text, text, bigint) IS
    'The holder (leader) of a holding changes its value (under term, if given); false if it does not hold it';

CREATE OR REPLACE FUNCTION dlock.resign(election text, candidate text, term bigint DEFAULT NULL)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(election, 'election', 1000);
    PERFORM dlock._text_arg(candidate, 'candidate', 255);
    PERFORM dlock._writable('dlock.resign()');
    c := dlock._caller();
    r := dlock._lock_leader(election, candidate, c.roleid, c.is_super, term, 'resign');
    IF r.resource IS NULL THEN
        RETURN false;
    END IF;
    -- Whatever its count; a clean end (no lock-delay); its client ticket goes.
    PERFORM dlock._release(election, r.fence, 0, 'resigned');
    DELETE FROM dlock.tickets t
     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                WHERE x.resource = election AND x.holder = candidate AND x.owner = r.owner
                                  FOR UPDATE SKIP LOCKED));
    RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.resign(text, text, bigint) IS
    'The leader steps down (under term, if given), whatever its count; the next candidate is elected at once; false if it does not lead';

CREATE OR REPLACE FUNCTION dlock.leader(election text)
    RETURNS TABLE (candidate text, value text, term bigint, elected_at timestamptz,
                   expires_at timestamptz, owner regrole)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF election IS NULL THEN
        RAISE EXCEPTION 'election must not be null' USING ERRCODE = '22023';
    ELSIF election OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'election must not be empty' USING ERRCODE = '22023';
    ELSIF pg_catalog.octet_length(election) OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION 'election must be at most 1000 bytes long' USING ERRCODE = '22023',
            DETAIL = pg_catalog.format('The election given is %s bytes long.',
                                       pg_catalog.octet_length(election));
    END IF;
    RETURN QUERY
        SELECT l.holder, l.value, l.fence, l.acquired_at, l.expires_at, l.owner
          FROM dlock.locks l
         WHERE l.resource OPERATOR(pg_catalog.=) (election COLLATE "C")
           AND l.holder IS NOT NULL AND NOT l.expired AND l.mode OPERATOR(pg_catalog.=) 'exclusive';
END
$$;
COMMENT ON FUNCTION dlock.leader(text) IS
    'The current leader of election: candidate, value, term, elected_at, expires_at, owner; no row when there is none';

CREATE OR REPLACE VIEW dlock.terms AS
    SELECT t.resource AS election, t.term, t.candidate, t.value, t.elected_at, t.owner
      FROM dlock.term_log t;
COMMENT ON VIEW dlock.terms IS
    'Terms elected by campaign in the last ten minutes (election, term, candidate, value at election, elected_at, owner), for observers that poll';
-- Only when this run made it: a re-run keeps the DBA's grants (dlock.sql).
DO $grant$
BEGIN
    IF pg_catalog.current_setting('dlock_portable.new_terms') OPERATOR(pg_catalog.=) 'true' THEN
        GRANT SELECT ON dlock.terms TO PUBLIC;
    END IF;
END
$grant$;
