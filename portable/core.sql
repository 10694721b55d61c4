/*
 * portable/core.sql: the portable edition's public functions of [core]
 * and [fair] (version, session_holder, channel, try_lock, lock with its
 * waits, unlock, renew, unlock_all, reap, check, assert_fence, break_lock),
 * with the fast path of try_lock and unlock.  Part of dlock.sql, which
 * includes it (\ir) inside its transaction after acquire.sql: run
 * dlock.sql, not this file.
 *
 * What protects the shared state: the public functions run SECURITY
 * DEFINER as the installing role; each change of a holding holds the
 * resource's row lock (FOR UPDATE SKIP LOCKED to take, FOR UPDATE to
 * release, FOR NO KEY UPDATE to renew, FOR KEY SHARE for assert_fence's
 * pin), as dlock.sql's header says; no advisory lock guards a resource.
 * A wait in lock() holds no lock between its attempts; each attempt runs
 * in a subtransaction rolled back when it fails.
 */
-- The fast path (issue 22): try_lock and unlock of the common case, in
-- one statement each, at the top of both; what it does not decide goes
-- on to the general path, which decides every case.  Its rules and
-- why they hold: docs/how-it-works.md, "The portable fast path".
-- (0.4 had them as functions of their own, _fast_lock and _fast_unlock,
-- which cost a PL/pgSQL frame each per call; 0.5 has them inline.)
DROP FUNCTION IF EXISTS dlock._fast_lock(text, text, interval, boolean, interval);
DROP FUNCTION IF EXISTS dlock._fast_unlock(text, text, bigint);

-- ---------------------------------------------------------------------------
-- The public functions ([core]).
-- ---------------------------------------------------------------------------

-- version: the portable edition's version in this database (the C
-- extension's is in pg_extension); dlock --version reads it.
CREATE OR REPLACE FUNCTION dlock.version()
RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
    SELECT p.version FROM dlock.portable p
$$;

CREATE OR REPLACE FUNCTION dlock.session_holder()
    RETURNS text LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v text := current_setting('dlock_portable.holder', true);
BEGIN
    -- Worked out once per backend and kept in a setting of its session:
    -- the backend's start costs a read of every backend's status (~25 us).
    -- A value set by hand is taken if it has this backend's pid: it names
    -- the caller's holder only, which the caller may pass as it likes.
    IF starts_with(v, 'pid:' || pg_backend_pid()::text || ':') THEN
        RETURN v;
    END IF;
    v := (SELECT 'pid:' || pg_backend_pid()::text || ':'
                 || ((EXTRACT(epoch FROM a.backend_start) - 946684800) * 1000000)::bigint::text
            FROM pg_stat_get_activity(pg_backend_pid()) a);
    -- NULL where the backend's start is hidden (SET ROLE to another role).
    RETURN CASE WHEN v IS NOT NULL THEN set_config('dlock_portable.holder', v, false) END;
END
$$;
COMMENT ON FUNCTION dlock.session_holder() IS
    'The default holder: pid:<pid>:<backend start>, unique to this backend over the server''s lifetime';

CREATE OR REPLACE FUNCTION dlock.channel(resource text)
    RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN 'dlock_' || md5(dlock._text_arg(resource, 'resource', 1000));
END
$$;
COMMENT ON FUNCTION dlock.channel(text) IS
    'The LISTEN channel of resource''s events (released, expired, broken): ''dlock_'' || md5(resource)';

CREATE OR REPLACE FUNCTION dlock.try_lock(resource text,
                                          holder text DEFAULT dlock.session_holder(),
                                          lease interval DEFAULT NULL,
                                          fair boolean DEFAULT false,
                                          lock_delay interval DEFAULT NULL,
                                          shared boolean DEFAULT false,
                                          session bigint DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l interval;
    f boolean;
    d interval;
    ok boolean;
    fence bigint;
    s record;
    v_role oid;
    v_now timestamptz;
    k integer;
    v_md5 text := md5(resource);     -- the fast path's key (_qkey) and xact marker
    v_set text;
BEGIN
    -- The fast path (above): exclusive requests only (shared ones, and a
    -- resource with shared holdings or permits, are kinds.sql's), under
    -- default-like arguments.
    IF shared IS FALSE AND fair IS FALSE AND lock_delay IS NULL
       AND coalesce(octet_length(try_lock.resource), 0) BETWEEN 1 AND 1000
       AND (try_lock.session IS NOT NULL OR coalesce(octet_length(try_lock.holder), 0) BETWEEN 1 AND 255)
       AND coalesce(current_setting('dlock.lock_delay', true), '') IN ('', '0')
       AND current_setting('transaction_isolation') = 'read committed'
       AND current_setting('transaction_read_only') = 'off'
       AND coalesce(current_setting('dlock.xact_' || v_md5, true), '') = '' THEN
        -- The helpers of the hot path inlined: _setting when
        -- dlock.default_lease is unset, _lease's bounds, _role, _qkey,
        -- _sync, and _session_use's checks.  Each copy must compute what
        -- its helper does: change them together.
        v_role := to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                              ELSE current_setting('role') END));
        IF try_lock.session IS NOT NULL THEN
            NULL;     -- [sessions]: the session's ttl, read by the UPDATE below
        ELSIF lease IS NOT NULL THEN
            l := lease;
        ELSIF coalesce(current_setting('dlock.default_lease', true), '') = '' THEN
            l := interval '30 seconds';
        ELSE
            l := dlock._setting('dlock.default_lease', interval '30 seconds');
        END IF;
        k := ('x' || substr(v_md5, 17, 8))::bit(32)::integer;
        IF k = ANY ('{1684828003,1684828005,1684828006,1684828007}'::integer[]) THEN
            k := 1684828004;
        END IF;
        -- One statement.  Its holder and lease (a): h and l, or with a
        -- session, the session's, if it is a live session of the caller's
        -- role, no lease given, holder left out or the session's (else:
        -- not here), read here rather than by a statement of its own.
        -- The lease within _expiry's 1000 years, in hours at most.  The
        -- row is judged on the version the statement's snapshot sees:
        -- free or its holding ended (a lease past its expiry, a session
        -- past its end), no lock-delay in force (_delayed of a free row;
        -- an ended holding with a lock-delay is the general path's), no ticket
        -- that _ahead would count or _acquired would remove, nobody
        -- waiting in lock() with a ticket (the "fair waiters" mark of
        -- _ahead).  Only then is it locked, FOR UPDATE SKIP LOCKED, and
        -- taken only if the version locked is the one judged (the same
        -- xmin: nothing changed it since the snapshot), and a session's
        -- row is locked FOR KEY SHARE SKIP LOCKED with its end still
        -- ahead (as _session_live); an ended session's holding is taken
        -- over only with that session's end locked in (_lapsed), as
        -- _attempt does.  CASE keeps that order.  (The
        -- fair-waiters mark held by anyone sends the call to the general
        -- path, which looks at proven tickets only.)  The fence is drawn
        -- in the SET list, after the row is locked: nextval when this
        -- session's checked-epoch mark matches (as in _next_fence), else
        -- _next_fence itself.
        v_now := clock_timestamp();
        -- In a subtransaction: a refusal after the row (or the session's
        -- row, _lapsed) was locked gives those locks back, as _attempt's
        -- refusals do; else another role's NULL answer inside an open
        -- transaction would hold the row, stalling its holder's renew.
        BEGIN
            UPDATE dlock.leases x
               SET holder = a.sh, owner = v_role::regrole, count = 1, lease = a.sl,
                   fence = CASE WHEN (SELECT m.mark FROM dlock._epoch_mark m)
                                     = current_setting('dlock_portable.epoch_checked', true)
                                THEN nextval('dlock.fences') ELSE dlock._next_fence() END,
                   acquired_at = v_now, renewed_at = v_now, expires_at = v_now + a.sl, released_at = NULL,
                   session = try_lock.session
              FROM (SELECT try_lock.holder, l WHERE try_lock.session IS NULL
                    UNION ALL
                    SELECT z.holder, z.ttl FROM dlock.session_rows z
                     WHERE z.id = try_lock.session AND z.owner = v_role::regrole AND try_lock.lease IS NULL
                       AND z.expires_at > v_now
                       AND (try_lock.holder IS NULL OR try_lock.holder = z.holder
                            OR starts_with(try_lock.holder, 'pid:' || pg_backend_pid()::text || ':'))) a (sh, sl)
             WHERE a.sl > interval '0' AND a.sl <= interval '8766000 hours'
               AND extract(year FROM a.sl) = 0 AND extract(month FROM a.sl) = 0 AND extract(day FROM a.sl) = 0
               AND x.resource = try_lock.resource
               AND CASE WHEN x.fence IS NOT NULL AND NOT x.kinds
                             AND (x.holder IS NULL
                                  OR (x.session IS NULL AND x.expires_at <= v_now)
                                  OR (x.session IS NOT NULL
                                      AND NOT EXISTS (SELECT FROM dlock.session_rows e
                                                       WHERE e.id = x.session AND e.expires_at > v_now)))
                             AND NOT EXISTS (SELECT FROM dlock.delays dl
                                              WHERE dl.resource = x.resource AND dl.fence = x.fence
                                                AND (x.holder IS NOT NULL OR dl.available_at > v_now))
                             AND NOT EXISTS (SELECT FROM dlock.tickets t
                                              WHERE t.resource = try_lock.resource
                                                AND (t.expires_at > v_now
                                                     OR (t.holder = a.sh AND t.owner = v_role::regrole)))
                        THEN CASE WHEN NOT pg_try_advisory_lock(k, 0) THEN false
                                  WHEN NOT pg_advisory_unlock(k, 0) THEN false
                                  WHEN x.xmin IS DISTINCT FROM (SELECT y.xmin FROM dlock.leases y
                                                                 WHERE y.resource = try_lock.resource
                                                                   FOR UPDATE SKIP LOCKED) THEN false
                                  WHEN x.holder IS NOT NULL AND x.session IS NOT NULL
                                       AND NOT dlock._lapsed(x.session) THEN false
                                  ELSE try_lock.session IS NULL
                                       OR EXISTS (SELECT FROM dlock.session_rows w
                                                   WHERE w.id = try_lock.session AND w.expires_at > v_now
                                                     FOR KEY SHARE SKIP LOCKED) END
                        ELSE false END
            RETURNING x.fence INTO fence;
            IF fence IS NULL THEN
                RAISE SQLSTATE 'DL004';
            END IF;
        EXCEPTION WHEN SQLSTATE 'DL004' THEN
            fence := NULL;
        END;
        IF fence IS NOT NULL THEN
            IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
                v_set := set_config('synchronous_commit', 'on', true);     -- an expression, not PERFORM
            END IF;
            RETURN fence;
        END IF;
    END IF;
    -- The general path.  Checks called as expressions, not PERFORMed (no
    -- executor run each).
    resource := dlock._text_arg(resource, 'resource', 1000);
    IF try_lock.session IS NULL THEN     -- with one, holder may be NULL: the session's
        holder := dlock._text_arg(holder, 'holder', 255);
    END IF;
    l := dlock._lease(lease);
    f := dlock._fair(fair);
    d := dlock._lock_delay(lock_delay);
    ok := dlock._writable('dlock.try_lock()');
    -- [sessions]: the session's holder and ttl (sessions.sql).
    IF try_lock.session IS NOT NULL THEN
        s := dlock._session_use(try_lock.session, holder, lease);
        holder := s.holder;
        l := s.ttl;
    END IF;
    IF dlock._shared_arg(shared, lock_delay) THEN     -- [kinds], kinds.sql
        RETURN dlock._attempt_kind('shared', resource, holder, l, dlock._role(), f, NULL, NULL, NULL,
                                   try_lock.session);
    END IF;
    RETURN dlock._attempt(resource, holder, l, dlock._role(), f, d, NULL, try_lock.session);
END
$$;
COMMENT ON FUNCTION dlock.try_lock(text, text, interval, boolean, interval, boolean, bigint) IS
    'Acquire or re-enter resource for holder with a lease, or in a session (session => id) (shared => true: alongside other shared holders); returns the fence, or NULL at once if it is not available';

-- _try: one attempt of a wait (lock(), campaign), in a subtransaction
-- that is rolled back when it fails, so that whatever it may have taken
-- is given back at once instead of holding the head of the queue off for
-- the rest of the wait.
CREATE OR REPLACE FUNCTION dlock._try(p_resource text, p_holder text, p_lease interval, p_role oid,
                                      p_delay interval, p_ticket bigint,
                                      p_kind text, p_max integer, p_permits integer, p_session bigint)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    f bigint;
BEGIN
    BEGIN
        IF p_kind = 'exclusive' THEN
            f := dlock._attempt(p_resource, p_holder, p_lease, p_role, false, p_delay, p_ticket, p_session);
        ELSE        -- [kinds]: shared, semaphore (kinds.sql)
            f := dlock._attempt_kind(p_kind, p_resource, p_holder, p_lease, p_role, false, p_ticket,
                                     p_max, p_permits, p_session);
        END IF;
        IF f IS NULL THEN
            RAISE SQLSTATE 'DL001';
        END IF;
        RETURN f;
    EXCEPTION WHEN SQLSTATE 'DL001' THEN
        RETURN NULL;
    END;
END
$$;
-- 1.0's signature, for a wait an upgrade finds in progress: leased.
CREATE OR REPLACE FUNCTION dlock._try(p_resource text, p_holder text, p_lease interval, p_role oid,
                                      p_delay interval, p_ticket bigint,
                                      p_kind text, p_max integer, p_permits integer)
    RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._try(p_resource, p_holder, p_lease, p_role, p_delay, p_ticket, p_kind, p_max, p_permits, NULL)
$$;

-- _wait_ticket and _leave: a wait's ticket taken and given back, as
-- _wait_loop did before issue 33 (it does both inline now, so that a
-- cancel cannot cut between taking a lock and noting it); kept for waits
-- that an upgrade finds in progress, taking nothing that waits.
CREATE OR REPLACE FUNCTION dlock._wait_ticket(p_resource text, p_holder text, p_role oid, p_fair boolean)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := dlock._qkey(p_resource);
    t bigint;
BEGIN
    SELECT x.ticket INTO t FROM dlock.tickets x
     WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = p_role::regrole
       AND x.expires_at > clock_timestamp();
    IF t IS NOT NULL AND t::bit(32)::integer <> 0 AND pg_try_advisory_lock(k, t::bit(32)::integer) THEN
        PERFORM pg_try_advisory_lock_shared(k, 0);
        RETURN t;
    END IF;
    IF NOT p_fair THEN
        RETURN NULL;
    END IF;
    LOOP
        t := nextval('dlock.ticket_seq');
        EXIT WHEN t::bit(32)::integer <> 0 AND pg_try_advisory_lock(k, t::bit(32)::integer);
    END LOOP;
    PERFORM pg_try_advisory_lock_shared(k, 0);
    RETURN t;
END
$$;

CREATE OR REPLACE FUNCTION dlock._leave(p_resource text, p_holder text, p_role oid, p_ticket bigint,
                                        p_gave_up boolean)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := dlock._qkey(p_resource);
BEGIN
    IF p_ticket IS NULL THEN
        RETURN;
    END IF;
    PERFORM dlock._let_go(p_resource, p_holder, p_role, p_ticket);
    IF p_gave_up THEN
        DELETE FROM dlock.tickets t
         WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                    WHERE x.resource = p_resource AND x.ticket = p_ticket
                                      FOR UPDATE SKIP LOCKED));
    END IF;
END
$$;

-- _wait_loop: lock()'s, campaign's and acquire()'s wait: attempts of the
-- kind p_kind ('exclusive', or [kinds]' 'shared' and 'semaphore' with
-- p_max and p_permits), polling with bounded backoff (1 ms doubling up to
-- dlock.poll_interval, never past the deadline), in the fair queue from
-- the first failed attempt when fair.  An exclusive wait also holds the
-- writer's marks from then on (kinds.sql's header: new shared holders
-- keep out, and a crossing upgrade sees it).  Its ticket and marks are
-- session-level advisory locks taken without waiting (any role can hold
-- any key), each with its proof (_prove; others count only proven ones):
-- a mark held by someone else is tried again at every turn, a ticket
-- number held by someone else is skipped.  pg_sleep is interrupted
-- by cancel and statement_timeout, which end the call: _let_go gives back
-- what the wait took or tried to take (read from pg_locks, so also what a
-- cancel cut in between), nothing stays with the session, and advisory
-- locks the caller holds itself on the same keys are left alone.
CREATE OR REPLACE FUNCTION dlock._wait_loop(p_resource text, p_holder text, p_lease interval, p_wait interval,
                                       p_fair boolean, p_delay interval, p_fname text,
                                       p_kind text, p_max integer, p_permits integer, p_session bigint)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role oid := (dlock._caller()).roleid;
    deadline timestamptz := clock_timestamp() + p_wait;
    pause interval := interval '1 millisecond';
    poll interval := greatest(dlock._setting('dlock.poll_interval', interval '100 milliseconds'),
                              interval '1 millisecond');
    left_ interval;
    k integer := dlock._qkey(p_resource);
    u integer;
    cand bigint;            -- the holder's client ticket, or a new one
    tkt bigint;             -- the ticket last tried (what _let_go looks for)
    held bigint;            -- the ticket held
    tried boolean := false;
    marked boolean := p_kind = 'exclusive';
    fair_mark boolean := false;
    writer_mark boolean := false;
    upgrade_mark boolean := false;
    writer_proof boolean := false;
    upgrade_proof boolean := false;
    -- Whether the wait tried to take the "fair waiters" mark, and the
    -- writer's marks: _let_go gives back only these (the caller's session
    -- may hold the same keys itself, outside dlock).
    fair_tried boolean := false;
    marks_tried boolean := false;
    fence bigint;
    ok boolean;
    probed boolean := false;     -- the last pause was a probe's wait (_pause)
BEGIN
    BEGIN
        LOOP
            fence := dlock._try(p_resource, p_holder, p_lease, v_role, p_delay, held, p_kind, p_max, p_permits,
                                p_session);
            IF fence IS NOT NULL THEN
                ok := dlock._let_go(p_resource, p_holder, v_role, tkt, fair_tried, marks_tried);
                RETURN fence;
            END IF;
            IF deadline IS NOT NULL THEN
                left_ := deadline - clock_timestamp();
                IF left_ <= interval '0' THEN
                    ok := dlock._let_go(p_resource, p_holder, v_role, tkt, fair_tried, marks_tried);
                    -- An adopted client ticket leaves the queue with the wait.
                    DELETE FROM dlock.tickets t
                     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                                WHERE x.resource = p_resource AND x.ticket = held
                                                  FOR UPDATE SKIP LOCKED));
                    RETURN NULL;
                END IF;
            END IF;
            PERFORM dlock._may_poll(p_fname);
            -- The writer's marks (until held), then a crossing upgrade.
            IF marked THEN
                u := dlock._umark(p_resource, p_holder, v_role);
                marks_tried := true;
                -- Each with its proof (_prove), which is what others count
                -- (_proven_mark): taken once, even while the mark's keys
                -- are held exclusive by someone else.
                IF NOT writer_mark THEN
                    writer_mark := pg_try_advisory_lock_shared(1684828006, k);
                END IF;
                IF NOT writer_proof THEN
                    writer_proof := dlock._prove(1684828006, k);
                END IF;
                IF NOT upgrade_mark THEN
                    upgrade_mark := pg_try_advisory_lock_shared(1684828007, u);
                END IF;
                IF NOT upgrade_proof THEN
                    upgrade_proof := dlock._prove(1684828007, u);
                END IF;
                IF NOT tried THEN
                    PERFORM dlock._crossing(p_resource, p_holder, v_role);
                END IF;
            END IF;
            IF NOT tried THEN
                tried := true;
                -- The holder's live client ticket (adopted: it keeps its
                -- place), or for a fair wait a new one.
                SELECT x.ticket INTO cand FROM dlock.tickets x
                 WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = v_role::regrole
                   AND x.expires_at > clock_timestamp();
                IF cand IS NOT NULL AND cand::bit(32)::integer <> 0 THEN
                    tkt := cand;
                    IF pg_try_advisory_lock(k, cand::bit(32)::integer) THEN
                        held := cand;
                        ok := dlock._prove(k, cand::bit(32)::integer);
                    END IF;
                END IF;
                IF held IS NULL AND p_fair THEN
                    LOOP
                        cand := nextval('dlock.ticket_seq');
                        CONTINUE WHEN cand::bit(32)::integer = 0;
                        tkt := cand;
                        EXIT WHEN pg_try_advisory_lock(k, cand::bit(32)::integer);
                    END LOOP;
                    held := cand;
                    ok := dlock._prove(k, cand::bit(32)::integer);
                END IF;
            END IF;
            -- The "fair waiters" mark, shared, until held.
            IF held IS NOT NULL AND NOT fair_mark THEN
                fair_tried := true;
                fair_mark := pg_try_advisory_lock_shared(k, 0);
                CONTINUE WHEN fair_mark;    -- with its place, it may be its turn
            END IF;
            SELECT * INTO pause, probed FROM dlock._pause(ARRAY[p_resource], left_, poll, pause, probed);
        END LOOP;
    EXCEPTION WHEN query_canceled OR OTHERS THEN
        -- A second cancel may come while they are given back (a client
        -- can send more than one): then they are given back again.
        BEGIN
            ok := dlock._let_go(p_resource, p_holder, v_role, tkt, fair_tried, marks_tried);
        EXCEPTION WHEN query_canceled THEN
            ok := dlock._let_go(p_resource, p_holder, v_role, tkt, fair_tried, marks_tried);
        END;
        RAISE;
    END;
END
$$;
-- 1.0's signature, for a wait an upgrade finds in progress: leased.
CREATE OR REPLACE FUNCTION dlock._wait_loop(p_resource text, p_holder text, p_lease interval, p_wait interval,
                                       p_fair boolean, p_delay interval, p_fname text,
                                       p_kind text, p_max integer, p_permits integer)
    RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._wait_loop(p_resource, p_holder, p_lease, p_wait, p_fair, p_delay, p_fname,
                            p_kind, p_max, p_permits, NULL)
$$;

CREATE OR REPLACE FUNCTION dlock.lock(resource text,
                                      holder text DEFAULT dlock.session_holder(),
                                      lease interval DEFAULT NULL,
                                      wait interval DEFAULT NULL,
                                      fair boolean DEFAULT false,
                                      lock_delay interval DEFAULT NULL,
                                      shared boolean DEFAULT false,
                                      session bigint DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l interval;
    w interval;
    f boolean;
    d interval;
    k text;
    s record;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    IF lock.session IS NULL THEN     -- with one, holder may be NULL: the session's
        PERFORM dlock._text_arg(holder, 'holder', 255);
    END IF;
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    f := dlock._fair(fair);
    d := dlock._lock_delay(lock_delay);
    k := CASE WHEN dlock._shared_arg(shared, lock_delay) THEN 'shared' ELSE 'exclusive' END;
    PERFORM dlock._writable('dlock.lock()');
    IF lock.session IS NOT NULL THEN      -- [sessions], sessions.sql
        s := dlock._session_use(lock.session, holder, lease);
        holder := s.holder;
        l := s.ttl;
    END IF;
    RETURN dlock._wait_loop(resource, holder, l, w, f, d, 'dlock.lock()', k, NULL, NULL, lock.session);
END
$$;
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval, boolean, interval, boolean, bigint) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout), polling, in the fair queue with fair => true (shared => true: alongside other shared holders); NULL on timeout';

CREATE OR REPLACE FUNCTION dlock.unlock(resource text,
                                        holder text DEFAULT dlock.session_holder(),
                                        fence bigint DEFAULT NULL)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_role oid;
    r dlock.leases%ROWTYPE;
    ok boolean;
    v_fence bigint;
BEGIN
    -- The fast path (above): a live holding of count 1 of holder and the
    -- caller's role (_role inline; a session's holding lives while its
    -- session does, _exp inline), released in one statement with its
    -- "released" event (_event inline, an expression, not PERFORMed).
    -- The free row keeps its session id, as _release leaves it (tables.sql).
    -- A holding that has ended, or of another fence, is not locked (the
    -- locking sub-select checks it too: the quals' order is the
    -- planner's), nor a row another transaction has locked (SKIP LOCKED):
    -- the general path waits for it (_lock_holding).  A refused unlock in
    -- an open transaction must not hold off the holder's renew or pin.
    IF coalesce(octet_length(unlock.resource), 0) BETWEEN 1 AND 1000
       AND coalesce(octet_length(unlock.holder), 0) BETWEEN 1 AND 255
       AND current_setting('transaction_read_only') = 'off' THEN
        v_role := to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                              ELSE current_setting('role') END));
        UPDATE dlock.leases x SET holder = NULL, count = 0, released_at = clock_timestamp()
         WHERE x.resource = unlock.resource AND x.holder = unlock.holder AND x.owner = v_role::regrole
           AND x.count = 1 AND NOT x.kinds
           AND CASE WHEN x.session IS NULL THEN x.expires_at > clock_timestamp()
                    ELSE EXISTS (SELECT FROM dlock.session_rows z
                                  WHERE z.id = x.session AND z.expires_at > clock_timestamp()) END
           AND (unlock.fence IS NULL OR x.fence = unlock.fence)
           AND x.resource = (SELECT y.resource FROM dlock.leases y
                              WHERE y.resource = unlock.resource AND y.holder = unlock.holder
                                AND y.owner = v_role::regrole
                                AND (unlock.fence IS NULL OR y.fence = unlock.fence)
                                AND CASE WHEN y.session IS NULL THEN y.expires_at > clock_timestamp()
                                         ELSE EXISTS (SELECT FROM dlock.session_rows z
                                                       WHERE z.id = y.session
                                                         AND z.expires_at > clock_timestamp()) END
                                FOR UPDATE SKIP LOCKED)
        RETURNING x.fence INTO v_fence;
        IF v_fence IS NOT NULL THEN
            ok := pg_notify('dlock_' || md5(unlock.resource),
                            '{"event":"released","resource":' || to_json(unlock.resource)::text
                            || ',"fence":' || v_fence::text || '}') IS NOT NULL;
            RETURN 0;
        END IF;
    END IF;
    -- The general path.
    resource := dlock._text_arg(resource, 'resource', 1000);
    holder := dlock._text_arg(holder, 'holder', 255);
    ok := dlock._writable('dlock.unlock()');
    v_role := dlock._role();
    -- A look first: not this holder's (or another role's), or of another
    -- fence, needs no lock.  Then that holding's row is locked, or, if it
    -- changed hands or ended meanwhile, looked at again.
    LOOP
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = unlock.resource;
        IF NOT dlock._may_change(r, holder, v_role, NULL, 'unlock')
           OR (fence IS NOT NULL AND fence <> r.fence) THEN
            -- Not an exclusive holding of holder's: a shared one, or permits?
            RETURN CASE WHEN r.kinds THEN dlock._unlock_held(unlock.resource, holder, v_role, fence) END;
        END IF;
        r := dlock._lock_holding(unlock.resource, holder, r.fence, false);
        EXIT WHEN r.resource IS NOT NULL;
    END LOOP;
    RETURN dlock._release(unlock.resource, r.fence, r.count - 1, 'released');
END
$$;
COMMENT ON FUNCTION dlock.unlock(text, text, bigint) IS
    'Release one level of holder''s holding (under fence, if given); returns the count left, 0 = released, NULL if not held';

CREATE OR REPLACE FUNCTION dlock.renew(resource text,
                                       holder text DEFAULT dlock.session_holder(),
                                       lease interval DEFAULT NULL,
                                       fence bigint DEFAULT NULL)
    RETURNS timestamptz LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
    l interval;
    v_now timestamptz;
    v_exp timestamptz;
    v_fence bigint;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    IF lease IS NOT NULL THEN
        l := dlock._lease(lease);
    END IF;
    PERFORM dlock._writable('dlock.renew()');
    c := dlock._caller();
    LOOP
        SELECT * INTO r FROM dlock.leases x WHERE x.resource = renew.resource;
        IF NOT dlock._may_change(r, holder, c.roleid, c.is_super, 'renew')
           OR (fence IS NOT NULL AND fence <> r.fence) THEN
            -- Not an exclusive holding of holder's: a shared one, or permits?
            RETURN CASE WHEN r.kinds THEN dlock._renew_held(renew.resource, holder, c.roleid, c.is_super, l, fence) END;
        END IF;
        -- [sessions]: a session's holding renews its session (sessions.sql),
        -- without locking the holding's row: close_session locks the session
        -- first and the rows next, so the other order could deadlock.
        -- The holding may end while keepalive waits for the session's row (an
        -- unlock, a break_lock): looked at again after it, NULL if it has.
        IF r.session IS NOT NULL THEN
            v_exp := dlock._renew_session(r.session, lease);
            IF v_exp IS NULL OR NOT EXISTS (SELECT FROM dlock.leases x
                                             WHERE x.resource = renew.resource AND x.fence = r.fence
                                               AND x.holder IS NOT NULL AND x.session = r.session) THEN
                RETURN NULL;
            END IF;
            RETURN v_exp;
        END IF;
        -- FOR NO KEY UPDATE: an assert_fence pin (FOR KEY SHARE) never makes
        -- the holder's renewal wait.  Only while it is that live holding (a
        -- refusal keeps nothing locked): at once here, else _lock_holding;
        -- if it changed hands or ended meanwhile, looked at again.
        v_fence := r.fence;
        SELECT * INTO r FROM dlock.leases x
         WHERE x.resource = renew.resource AND x.holder = renew.holder AND x.fence = v_fence
           AND x.session IS NULL AND x.expires_at > clock_timestamp()
           FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            r := dlock._lock_holding(renew.resource, holder, v_fence, true);
        END IF;
        EXIT WHEN r.resource IS NOT NULL;
    END LOOP;
    v_now := clock_timestamp();
    -- [sessions]: it came to be a session's holding since the look.
    IF r.session IS NOT NULL THEN
        RETURN dlock._renew_session(r.session, lease);
    END IF;
    v_exp := dlock._expiry(v_now, coalesce(l, r.lease));
    UPDATE dlock.leases x SET expires_at = v_exp, renewed_at = v_now, lease = coalesce(l, r.lease)
     WHERE x.resource = renew.resource AND x.fence = r.fence;
    PERFORM dlock._sync();
    RETURN v_exp;
END
$$;
COMMENT ON FUNCTION dlock.renew(text, text, interval, bigint) IS
    'Extend holder''s lease to now + lease (default: the lease it was taken with); returns the new expiry, NULL if the lease was lost';

CREATE OR REPLACE FUNCTION dlock.unlock_all(holder text DEFAULT dlock.session_holder())
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_role oid;
    r dlock.leases%ROWTYPE;
    n integer := 0;
BEGIN
    PERFORM dlock._text_arg(holder, 'holder', 255);
    PERFORM dlock._writable('dlock.unlock_all()');
    v_role := (dlock._caller()).roleid;
    FOR r IN SELECT * FROM dlock.leases l
              WHERE l.holder = unlock_all.holder AND l.owner = v_role
                AND dlock._exp(l.session, l.expires_at) > clock_timestamp()
              ORDER BY l.resource
                FOR UPDATE
    LOOP
        IF r.holder = unlock_all.holder AND r.owner = v_role
           AND dlock._exp(r.session, r.expires_at) > clock_timestamp() THEN
            PERFORM dlock._release(r.resource, r.fence, 0, 'released');
            n := n + 1;
        END IF;
    END LOOP;
    -- Shared holdings and permits ([kinds], kinds.sql).
    RETURN n + dlock._unlock_all_held(unlock_all.holder, v_role);
END
$$;
COMMENT ON FUNCTION dlock.unlock_all(text) IS
    'Release every holding of holder (and of the calling role); returns how many';

CREATE OR REPLACE FUNCTION dlock.reap()
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r dlock.leases%ROWTYPE;
    n integer := 0;
BEGIN
    PERFORM dlock._writable('dlock.reap()');
    -- Rows another transaction is changing or pinning are skipped.
    FOR r IN SELECT * FROM dlock.leases l
              WHERE l.holder IS NOT NULL AND dlock._exp(l.session, l.expires_at) <= clock_timestamp()
              ORDER BY l.resource
                FOR UPDATE SKIP LOCKED
    LOOP
        -- A session's holding: only with the session's end locked in
        -- (_lapsed; a keepalive or close in flight: skipped).
        CONTINUE WHEN r.session IS NOT NULL AND NOT dlock._lapsed(r.session);
        PERFORM dlock._release(r.resource, r.fence, 0, 'expired');
        n := n + 1;
    END LOOP;
    -- Expired shared holdings and permits ([kinds], kinds.sql).
    n := n + dlock._reap_held();
    -- Sessions that have ended with no holding left ([sessions]).
    PERFORM dlock._reap_sessions();
    -- Rows free for over an hour go, unless a lock-delay is still pending
    -- or shared holdings or permits may be there; lapsed tickets and the
    -- delays of gone rows too.
    DELETE FROM dlock.leases l
     WHERE l.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.leases x
                                WHERE x.holder IS NULL AND NOT x.kinds
                                  AND x.released_at < clock_timestamp() - interval '1 hour'
                                  AND NOT dlock._delayed(x, clock_timestamp())
                                  FOR UPDATE SKIP LOCKED));
    DELETE FROM dlock.delays d
     WHERE d.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.delays x
                                WHERE NOT EXISTS (SELECT FROM dlock.leases l WHERE l.resource = x.resource)
                                  FOR UPDATE SKIP LOCKED));
    DELETE FROM dlock.holding_values v
     WHERE v.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.holding_values x
                                WHERE NOT EXISTS (SELECT FROM dlock.leases l WHERE l.resource = x.resource)
                                  FOR UPDATE SKIP LOCKED));
    DELETE FROM dlock.tickets t
     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                WHERE x.expires_at <= clock_timestamp()
                                  FOR UPDATE SKIP LOCKED));
    RETURN n;
END
$$;
COMMENT ON FUNCTION dlock.reap() IS
    'Remove every expired lease now and send its expired event; returns how many (call it in a transaction of its own, as pg_cron does)';

-- _pin_fresh: under REPEATABLE READ or SERIALIZABLE, 40001 if the pinned
-- row (tbl 'leases': resource's; 'shares' or 'permits': fence's) has a
-- version newer than the transaction's snapshot (a FOR SHARE lock, which
-- no update passes, taken in a subtransaction rolled back at once; it
-- waits for a change in flight, as a pin does).
CREATE OR REPLACE FUNCTION dlock._pin_fresh(p_tbl text, p_resource text, p_fence bigint)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    BEGIN
        IF p_tbl = 'leases' THEN
            PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR SHARE;
        ELSIF p_tbl = 'shares' THEN
            PERFORM FROM dlock.shares s WHERE s.resource = p_resource AND s.fence = p_fence FOR SHARE;
        ELSE
            PERFORM FROM dlock.permits p WHERE p.resource = p_resource AND p.fence = p_fence FOR SHARE;
        END IF;
        RAISE SQLSTATE 'DL007';
    EXCEPTION WHEN SQLSTATE 'DL007' THEN
        NULL;   -- the probe's lock is given back
    END;
END
$$;

-- _wait_ended_row: if resource's exclusive holding has ended, with no
-- shared holdings or permits beside it (kinds), and another transaction
-- has its row locked (a pin, most likely), wait for that lock (FOR UPDATE
-- in a subtransaction rolled back at once) and return true if that wait
-- lasted 1 ms or more (look again at once); else false.  A probe takes a
-- transaction id, so a caller probes at most once between two sleeps
-- (a probe's true is followed by an attempt, then a sleep), and readers
-- who passed over the ended holding (kinds) leave nothing to probe.  Not
-- under lock_timeout: the probe would end the wait with 55P03, which the
-- poll does not.
CREATE OR REPLACE FUNCTION dlock._wait_ended_row(p_resource text)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t0 timestamptz;
BEGIN
    IF current_setting('lock_timeout') <> '0'
       OR NOT EXISTS (SELECT FROM dlock.leases l
                       WHERE l.resource = p_resource AND l.holder IS NOT NULL AND NOT l.kinds
                         AND dlock._exp(l.session, l.expires_at) <= clock_timestamp()) THEN
        RETURN false;
    END IF;
    BEGIN
        PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE NOWAIT;
        RAISE SQLSTATE 'DL007';
    EXCEPTION WHEN SQLSTATE 'DL007' THEN
        RETURN false;   -- nobody has it locked: the probe's lock is given back
    WHEN lock_not_available THEN
        NULL;
    END;
    t0 := clock_timestamp();
    BEGIN
        PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE;
        RAISE SQLSTATE 'DL007';
    EXCEPTION WHEN SQLSTATE 'DL007' THEN
        NULL;
    END;
    RETURN clock_timestamp() - t0 >= interval '1 millisecond';
END
$$;

-- _pause: what a wait does between two looks.  Without a limit (left
-- NULL), behind an ended exclusive holding of one of resources whose row
-- another transaction has locked (a pin), it waits for that row in the
-- lock manager (_wait_ended_row), so a cycle through the pinner is a
-- deadlock PostgreSQL finds (C: wait.c); probed says it did, and the next
-- pause is a sleep: at most one probe between two sleeps.  Else it sleeps
-- pause (never past left) and doubles pause, up to poll.
CREATE OR REPLACE FUNCTION dlock._pause(p_resources text[], p_left interval, p_poll interval,
                                        INOUT pause interval, INOUT probed boolean)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_left IS NULL AND NOT probed THEN
        FOR i IN 1 .. cardinality(p_resources) LOOP
            IF dlock._wait_ended_row(p_resources[i]) THEN
                probed := true;
                RETURN;
            END IF;
        END LOOP;
    END IF;
    probed := false;
    PERFORM pg_sleep(extract(epoch FROM least(pause, coalesce(p_left, pause))));
    pause := least(pause * 2, p_poll);
END
$$;

-- _current: is fence the current, unexpired holding of resource (a lease,
-- or a transaction-scoped lock of this transaction)?  When pin, locks the
-- pinned holding's row FOR KEY SHARE (assert_fence's pin): the resource's
-- row only for its exclusive holding.  A reader passes over an ended
-- exclusive holding with that row FOR UPDATE (kinds.sql), which a pin of
-- a shared holding or of permits (their own rows, _current_held) must not
-- hold off: it kept every new reader out while it lasted.
CREATE OR REPLACE FUNCTION dlock._current(p_resource text, p_fence bigint, pin boolean,
                                          OUT is_current boolean, OUT owner oid)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    own text := current_setting('dlock.xact_' || md5(p_resource), true);
    r dlock.leases%ROWTYPE;
BEGIN
    IF own IS NOT NULL AND own <> '' THEN
        is_current := own::bigint = p_fence;
        RETURN;
    END IF;
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    IF pin AND FOUND AND r.fence = p_fence THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR KEY SHARE;
        -- FOR KEY SHARE lets a no-key update committed since the
        -- statement's snapshot pass (a release sets holder NULL) and
        -- returns the version that snapshot saw; it locks the newer ones
        -- too.  So read the row again: under READ COMMITTED the latest
        -- version; under REPEATABLE READ, a newer one is 40001 (_pin_fresh).
        IF FOUND AND r.holder IS NOT NULL AND r.fence = p_fence THEN
            IF current_setting('transaction_isolation') IN ('read committed', 'read uncommitted') THEN
                SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
            ELSE
                PERFORM dlock._pin_fresh('leases', p_resource, p_fence);
            END IF;
        END IF;
    END IF;
    is_current := r.resource IS NOT NULL AND r.holder IS NOT NULL AND dlock._exp(r.session, r.expires_at) > clock_timestamp()
               AND r.fence = p_fence;
    owner := r.owner;
    -- Any current holder's fence: a shared holding's, or permits' ([kinds]).
    IF NOT is_current AND r.kinds THEN
        SELECT h.is_current, h.owner INTO is_current, owner FROM dlock._current_held(p_resource, p_fence, pin) h;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION dlock."check"(resource text, fence bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._fence_arg(fence);
    RETURN (dlock._current(resource, fence, false)).is_current;
END
$$;
COMMENT ON FUNCTION dlock."check"(text, bigint) IS
    'Is fence the current, unexpired holding of resource?';

CREATE OR REPLACE FUNCTION dlock.assert_fence(resource text, fence bigint)
    RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    c record;
    cur record;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._fence_arg(fence);
    c := dlock._caller();
    cur := dlock._current(resource, fence, true);
    IF NOT cur.is_current THEN
        RAISE EXCEPTION 'fence % is not the current holding of resource "%"', fence, resource
            USING ERRCODE = 'lock_not_available',
                  DETAIL = 'The lease expired, was released or broken, or was taken over by a newer holder.';
    END IF;
    IF cur.owner IS NOT NULL AND NOT c.is_super AND NOT pg_has_role(c.roleid, cur.owner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied to assert the fence of a lock held by role "%"', cur.owner::regrole::text
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only roles with the privileges of the role that took a lock can pin it with assert_fence; use dlock.check() to test a fence without pinning it.';
    END IF;
END
$$;
COMMENT ON FUNCTION dlock.assert_fence(text, bigint) IS
    'Raise 55P03 unless fence is the current holding of resource; then pin the holding until this transaction ends';

CREATE OR REPLACE FUNCTION dlock.break_lock(resource text)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._writable('dlock.break_lock()');
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = break_lock.resource FOR UPDATE;
    -- Every shared holding and permit too ([kinds], kinds.sql).
    IF NOT FOUND OR r.holder IS NULL OR dlock._exp(r.session, r.expires_at) <= clock_timestamp() THEN
        RETURN CASE WHEN r.kinds THEN dlock._break_held(break_lock.resource) > 0 ELSE false END;
    END IF;
    PERFORM dlock._release(r.resource, r.fence, 0, 'broken');
    IF r.kinds THEN
        PERFORM dlock._break_held(break_lock.resource);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.break_lock(text) IS
    'Force the release of resource (event broken); for administrators, EXECUTE is revoked from PUBLIC';

