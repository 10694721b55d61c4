/*
 * portable/sessions.sql: sessions ([sessions], 1.1): open_session,
 * keepalive, close_session, the view dlock.sessions, and the helpers every
 * acquisition and expiry uses for a session's holding (_exp, _lapsed,
 * _session_use, _session_live, _renew_session, _reap_sessions).  Part of
 * dlock.sql, which includes it (\ir) inside its transaction last: run
 * dlock.sql, not this file.
 *
 * A holding taken with session => id has that id in its row (column
 * session of dlock.leases, dlock.shares, dlock.permits); its expiry is its
 * session's (_exp), never copied, so keepalive writes one row.
 * What protects the session's row (dlock.session_rows):
 * - keepalive locks it FOR NO KEY UPDATE and then looks at the clock: an
 *   ended session is never revived;
 * - whoever acts on a session's end (an acquirer taking over, reap,
 *   xact_lock) first locks it FOR SHARE SKIP LOCKED (_lapsed): a keepalive
 *   in flight makes it busy, and a later keepalive waits for that
 *   transaction and then sees the end;
 * - an acquisition in a session locks it FOR KEY SHARE SKIP LOCKED
 *   (_session_live) when it takes something, which keepalive does not
 *   conflict with;
 *   close_session locks it FOR UPDATE: an acquisition in flight finishes
 *   first and its holding is released with the others.
 */

-- _exp: a holding's expiry: its own (p_exp) when leased, its session's
-- when it has one (-infinity once the session's row is gone).
CREATE OR REPLACE FUNCTION dlock._exp(p_session bigint, p_exp timestamptz)
    RETURNS timestamptz LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN p_session IS NULL THEN p_exp
                ELSE coalesce((SELECT s.expires_at FROM dlock.session_rows s WHERE s.id = p_session),
                              '-infinity'::timestamptz) END
$$;

-- _lapsed: has the session ended, with that end locked in?  true when its
-- row is gone, or locked FOR SHARE (to the end of the transaction) and past
-- its expiry; false while it lives or another transaction is changing it
-- (a keepalive or close in flight: busy).
CREATE OR REPLACE FUNCTION dlock._lapsed(p_session bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    e timestamptz;
BEGIN
    SELECT s.expires_at INTO e FROM dlock.session_rows s WHERE s.id = p_session FOR SHARE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NOT EXISTS (SELECT FROM dlock.session_rows s WHERE s.id = p_session);
    END IF;
    RETURN e <= clock_timestamp();
END
$$;

-- _session_alive: raise 55000 unless the session lives, locking nothing
-- (an acquisition's first look, and between a wait's attempts).
CREATE OR REPLACE FUNCTION dlock._session_alive(p_session bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF dlock._exp(p_session, NULL) <= clock_timestamp() THEN
        RAISE EXCEPTION 'session % has ended', p_session
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'It was closed, its ttl passed, or it was never opened; its holdings are gone.',
                  HINT = 'Open a new session (dlock.open_session()).';
    END IF;
    RETURN true;
END
$$;

-- _session_live: raise 55000 unless the session lives; locks its row FOR
-- KEY SHARE (a close in flight: ended).  Called by an attempt inside the
-- subtransaction that a refusal rolls back: a wait in lock() holds no
-- lock on the session between its attempts, so close_session does not
-- wait for it (its next attempt raises 55000).
CREATE OR REPLACE FUNCTION dlock._session_live(p_session bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM FROM dlock.session_rows s WHERE s.id = p_session FOR KEY SHARE SKIP LOCKED;
    IF NOT FOUND OR dlock._exp(p_session, NULL) <= clock_timestamp() THEN
        RAISE EXCEPTION 'session % has ended', p_session
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'It was closed, its ttl passed, or it was never opened; its holdings are gone.',
                  HINT = 'Open a new session (dlock.open_session()).';
    END IF;
    RETURN true;
END
$$;

-- _session_use: an acquisition's session argument: the holder and ttl of
-- the holding.  22023 for a lease given too, or a holder that is neither
-- the session's nor the default; 55000 for a session that has ended (or
-- never was); 42501 for another role's session.
CREATE OR REPLACE FUNCTION dlock._session_use(p_session bigint, p_holder text, p_lease interval,
                                              OUT holder text, OUT ttl interval)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s dlock.session_rows%ROWTYPE;
    v_role oid := dlock._role();
BEGIN
    IF p_lease IS NOT NULL THEN
        RAISE EXCEPTION 'session and lease cannot both be given'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A holding in a session lives as long as its session: it has no lease of its own.';
    END IF;
    SELECT * INTO s FROM dlock.session_rows x WHERE x.id = p_session;
    IF FOUND AND s.owner <> v_role THEN
        RAISE EXCEPTION 'permission denied to acquire in session % of role "%"', p_session, s.owner::text
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only the role that opened a session acquires in it.';
    END IF;
    PERFORM dlock._session_alive(p_session);
    -- The default holder (session_holder(), evaluated by the caller) is
    -- told apart by this backend's pid: inside SECURITY DEFINER,
    -- session_holder() cannot read another role's backend start.  A text
    -- that merely looks like it is taken as the default too: harmless, the
    -- holding is the session's holder's either way.
    IF p_holder IS NOT NULL AND p_holder <> s.holder
       AND NOT starts_with(p_holder, 'pid:' || pg_backend_pid()::text || ':') THEN
        RAISE EXCEPTION 'holder "%" is not the holder of session %', p_holder, p_session
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('A session''s holdings are its holder''s ("%s").', s.holder),
                  HINT = 'Leave holder out (or NULL) when you pass session.';
    END IF;
    holder := s.holder;
    ttl := s.ttl;
END
$$;

-- _session_arg: the session argument of keepalive and close_session.
CREATE OR REPLACE FUNCTION dlock._session_arg(p_session bigint)
    RETURNS bigint LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_session IS NULL THEN
        RAISE EXCEPTION 'session must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN p_session;
END
$$;

-- _session_owner: 42501 unless the caller is the session's role or a
-- superuser (action: what it tried).
CREATE OR REPLACE FUNCTION dlock._session_owner(s dlock.session_rows, action text)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record := dlock._caller();
BEGIN
    IF s.owner <> c.roleid AND NOT c.is_super THEN
        RAISE EXCEPTION 'permission denied to % session % of role "%"', action, s.id, s.owner::text
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = format('Only the role that opened a session, or a superuser, can %s it.', action);
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION dlock.open_session(ttl interval DEFAULT NULL,
                                              holder text DEFAULT dlock.session_holder())
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l interval;
    v_now timestamptz;
    id bigint;
BEGIN
    holder := dlock._text_arg(holder, 'holder', 255);
    BEGIN
        l := dlock._lease(ttl);
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION '%', replace(SQLERRM, 'lease', 'ttl') USING ERRCODE = 'invalid_parameter_value';
    END;
    PERFORM dlock._writable('dlock.open_session()');
    -- A fence: never drawn twice, not across a restore or re-installation.
    id := dlock._next_fence();
    v_now := clock_timestamp();
    INSERT INTO dlock.session_rows (id, holder, owner, ttl, opened_at, renewed_at, expires_at)
         VALUES (id, holder, dlock._role()::regrole, l, v_now, v_now, dlock._expiry(v_now, l));
    PERFORM dlock._sync();
    RETURN id;
END
$$;
COMMENT ON FUNCTION dlock.open_session(interval, text) IS
    'Open a session for holder that lives ttl (default dlock.default_lease) unless kept alive; returns its id, for session => id';

CREATE OR REPLACE FUNCTION dlock.keepalive(session bigint)
    RETURNS timestamptz LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s dlock.session_rows%ROWTYPE;
    v_now timestamptz;
    v_exp timestamptz;
BEGIN
    PERFORM dlock._session_arg(session);
    PERFORM dlock._writable('dlock.keepalive()');
    -- A look first: an ended session (or another role's) takes no lock.
    SELECT * INTO s FROM dlock.session_rows x WHERE x.id = keepalive.session;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM dlock._session_owner(s, 'keep alive');
    IF s.expires_at <= clock_timestamp() THEN
        RETURN NULL;
    END IF;
    -- Locked, then the clock: whoever took over a holding at the end has
    -- the row FOR SHARE (_lapsed) until its transaction ends.
    SELECT * INTO s FROM dlock.session_rows x WHERE x.id = keepalive.session FOR NO KEY UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND OR s.expires_at <= v_now THEN
        RETURN NULL;
    END IF;
    v_exp := dlock._expiry(v_now, s.ttl);
    UPDATE dlock.session_rows x SET expires_at = v_exp, renewed_at = v_now WHERE x.id = keepalive.session;
    PERFORM dlock._sync();
    RETURN v_exp;
END
$$;
COMMENT ON FUNCTION dlock.keepalive(bigint) IS
    'Extend session, and with it every holding in it, to now + its ttl; returns the new expiry, NULL if it has ended (never revived)';

-- _renew_session: renew() of a session's holding keeps the session alive.
CREATE OR REPLACE FUNCTION dlock._renew_session(p_session bigint, p_lease interval)
    RETURNS timestamptz LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_lease IS NOT NULL THEN
        RAISE EXCEPTION 'a holding in a session has no lease of its own'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('It lives as long as session %s.', p_session),
                  HINT = 'Renew it without lease (or call dlock.keepalive()): that keeps its session alive.';
    END IF;
    RETURN dlock.keepalive(p_session);
END
$$;

CREATE OR REPLACE FUNCTION dlock.close_session(session bigint)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s dlock.session_rows%ROWTYPE;
    x record;
    n integer := 0;
BEGIN
    PERFORM dlock._session_arg(session);
    PERFORM dlock._writable('dlock.close_session()');
    SELECT * INTO s FROM dlock.session_rows y WHERE y.id = close_session.session;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM dlock._session_owner(s, 'close');
    IF s.expires_at <= clock_timestamp() THEN
        RETURN NULL;
    END IF;
    -- FOR UPDATE: keepalives, acquisitions in it (FOR KEY SHARE) and
    -- takeovers (FOR SHARE) in flight end first.  Under REPEATABLE READ
    -- or SERIALIZABLE this snapshot would not see the holdings of an
    -- acquisition waited for (it leaves the row as it was): 40001 then.
    SELECT * INTO s FROM dlock.session_rows y WHERE y.id = close_session.session FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        SELECT * INTO s FROM dlock.session_rows y WHERE y.id = close_session.session FOR UPDATE;
        IF FOUND AND current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'could not serialize access due to a concurrent change of session %', close_session.session
                USING ERRCODE = 'serialization_failure',
                      DETAIL = 'This transaction''s snapshot is older than what close_session waited for.',
                      HINT = 'Retry the transaction.';
        END IF;
    END IF;
    IF NOT FOUND OR s.expires_at <= clock_timestamp() THEN
        RETURN NULL;
    END IF;
    -- Every holding, each with its event (as unlock; a pinned one is
    -- waited for, as unlock waits).
    FOR x IN SELECT l.resource, l.fence FROM dlock.leases l
              WHERE l.session = close_session.session AND l.holder IS NOT NULL
              ORDER BY l.resource FOR UPDATE
    LOOP
        IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = x.resource AND l.fence = x.fence
                      AND l.session = close_session.session AND l.holder IS NOT NULL) THEN
            PERFORM dlock._release(x.resource, x.fence, 0, 'released');
            n := n + 1;
        END IF;
    END LOOP;
    FOR x IN SELECT 'shares' AS t, h.resource, h.fence FROM dlock.shares h WHERE h.session = close_session.session
             UNION ALL
             SELECT 'permits', h.resource, h.fence FROM dlock.permits h WHERE h.session = close_session.session
             ORDER BY 2, 1
    LOOP
        IF x.t = 'shares' THEN
            PERFORM FROM dlock.shares h WHERE h.resource = x.resource AND h.fence = x.fence
                                          AND h.session = close_session.session FOR UPDATE;
        ELSE
            PERFORM FROM dlock.permits h WHERE h.resource = x.resource AND h.fence = x.fence
                                           AND h.session = close_session.session FOR UPDATE;
        END IF;
        IF FOUND THEN
            PERFORM dlock._end_held(x.t, x.resource, x.fence, 'released');
            n := n + 1;
        END IF;
    END LOOP;
    DELETE FROM dlock.session_rows y WHERE y.id = close_session.session;
    RETURN n;
END
$$;
COMMENT ON FUNCTION dlock.close_session(bigint) IS
    'Close session: release every holding in it (each with its released event); returns how many, NULL if it had already ended';

-- _reap_sessions: reap()'s sessions that have ended with no holding left
-- (rows another transaction has locked are skipped): how many.  Locked
-- first, then looked at again by a statement of its own: its snapshot sees
-- every acquisition in them that committed before the lock (one in flight
-- keeps its row locked, FOR KEY SHARE: skipped).  Under REPEATABLE READ or
-- SERIALIZABLE the snapshot is older: none are removed then (a later
-- reap() does), since a session removed under a holding it did not see
-- would take that holding's lock-delay with it.
CREATE OR REPLACE FUNCTION dlock._reap_sessions()
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n integer;
    ids bigint[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN 0;
    END IF;
    ids := ARRAY(SELECT x.id FROM dlock.session_rows x
                  WHERE x.expires_at <= clock_timestamp()
                    AND NOT EXISTS (SELECT FROM dlock.leases l WHERE l.session = x.id AND l.holder IS NOT NULL)
                    AND NOT EXISTS (SELECT FROM dlock.shares h WHERE h.session = x.id)
                    AND NOT EXISTS (SELECT FROM dlock.permits h WHERE h.session = x.id)
                    FOR UPDATE SKIP LOCKED);
    DELETE FROM dlock.session_rows s
     WHERE s.id = ANY (ids)
       AND NOT EXISTS (SELECT FROM dlock.leases l WHERE l.session = s.id AND l.holder IS NOT NULL)
       AND NOT EXISTS (SELECT FROM dlock.shares h WHERE h.session = s.id)
       AND NOT EXISTS (SELECT FROM dlock.permits h WHERE h.session = s.id);
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- dlock.sessions: every session until it is closed or reaped; holdings
-- counts its holdings of every kind (an ended session's until reaped).
CREATE OR REPLACE VIEW dlock.sessions AS
    SELECT s.id, s.holder, s.owner::pg_catalog.regrole AS owner, s.ttl, s.expires_at,
           ((SELECT pg_catalog.count(*) FROM dlock.leases l
              WHERE l.session OPERATOR(pg_catalog.=) s.id AND l.holder IS NOT NULL)
            OPERATOR(pg_catalog.+)
            (SELECT pg_catalog.count(*) FROM dlock.shares h WHERE h.session OPERATOR(pg_catalog.=) s.id)
            OPERATOR(pg_catalog.+)
            (SELECT pg_catalog.count(*) FROM dlock.permits h WHERE h.session OPERATOR(pg_catalog.=) s.id))
               AS holdings,
           s.opened_at, s.renewed_at,
           s.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired
      FROM dlock.session_rows s;
COMMENT ON VIEW dlock.sessions IS
    'Sessions (open_session): id, holder, owner, ttl, expires_at, holdings; an ended one stays listed (expired = true) until reaped';
-- Only when this run made it: a re-run keeps the DBA's grants (dlock.sql).
DO $grant$
BEGIN
    IF pg_catalog.current_setting('dlock_portable.new_sessions') OPERATOR(pg_catalog.=) 'true' THEN
        GRANT SELECT ON dlock.sessions TO PUBLIC;
    END IF;
END
$grant$;

REVOKE EXECUTE ON FUNCTION
    dlock._exp(bigint, timestamptz), dlock._lapsed(bigint), dlock._session_live(bigint),
    dlock._session_alive(bigint),
    dlock._session_use(bigint, text, interval), dlock._session_arg(bigint),
    dlock._session_owner(dlock.session_rows, text), dlock._renew_session(bigint, interval),
    dlock._reap_sessions(),
    dlock._attempt(text, text, interval, oid, boolean, interval, bigint, bigint),
    dlock._try(text, text, interval, oid, interval, bigint, text, integer, integer, bigint),
    dlock._wait_loop(text, text, interval, interval, boolean, interval, text, text, integer, integer, bigint)
    FROM PUBLIC;
