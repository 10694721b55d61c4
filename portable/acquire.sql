/*
 * portable/acquire.sql: the general path of an exclusive acquisition and
 * of a release, which every public function uses: _acquired (a new
 * holding's bookkeeping), _attempt (one attempt that never waits: the
 * fence, or NULL when busy), _release (end or count down a holding) and
 * _may_change (may the caller unlock or renew this holding).  Part of
 * dlock.sql, which includes it (\ir) inside its transaction after
 * queues.sql: run dlock.sql, not this file.
 *
 * What protects the shared state: _attempt locks the resource's row in
 * dlock.leases FOR UPDATE SKIP LOCKED (or inserts it, never waiting more
 * than about 20 ms for another transaction's insert) before it changes
 * anything, in a subtransaction rolled back when it is refused; no
 * advisory lock guards a resource (any role could hold its key).
 * _release and _may_change are called with the row already locked by
 * their caller (dlock.sql's header, "The per-resource lock").
 */
-- _acquired: a new holding (or a re-entry) of holder: its client ticket
-- leaves the queue, and a new holding records its lock-delay.  (try_lock's
-- fast path, core.sql, leaves every case where this has anything to do --
-- a ticket of the holder's, a lock-delay -- to the general path.)
CREATE OR REPLACE FUNCTION dlock._acquired(p_resource text, p_holder text, p_role oid, p_fence bigint,
                                           p_new boolean, p_delay interval)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM dlock.tickets t
     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                WHERE x.resource = p_resource AND x.holder = p_holder
                                  AND x.owner = p_role::regrole
                                  FOR UPDATE SKIP LOCKED));
    IF p_new AND p_delay IS NOT NULL THEN
        INSERT INTO dlock.delays AS d (resource, fence, lock_delay, available_at)
             VALUES (p_resource, p_fence, p_delay, NULL)
        ON CONFLICT (resource) DO UPDATE
               SET fence = excluded.fence, lock_delay = excluded.lock_delay, available_at = NULL;
    END IF;
    RETURN true;
END
$$;

-- _attempt: one acquisition attempt that never waits: the fence if
-- acquired or re-entered, NULL if the resource is busy (held by another,
-- under lock-delay, or its queue headed by someone else).  p_ticket: the
-- ticket of a wait in lock() (NULL: none); a fair attempt without one
-- (client-side) that does not get the lock takes or keeps a client ticket.
-- p_session ([sessions]): the holding's session (NULL: leased), whose
-- holder, role and ttl the caller passes; an ended session raises 55000.
CREATE OR REPLACE FUNCTION dlock._attempt(p_resource text, p_holder text, p_lease interval, p_role oid,
                                          p_fair boolean, p_delay interval, p_ticket bigint,
                                          p_session bigint)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
    v_now timestamptz;
    v_fence bigint;
    v_exp timestamptz;
    rc boolean := current_setting('transaction_isolation') = 'read committed';
    client boolean := p_fair AND p_ticket IS NULL;
    mine boolean;
    ok boolean;
BEGIN
    -- This transaction's own transaction-scoped lock excludes a lease, even
    -- one of this transaction (as in the C extension).
    IF coalesce(current_setting('dlock.xact_' || md5(p_resource), true), '') <> '' THEN
        RETURN NULL;
    END IF;
    -- A session that has ended takes nothing (also between a wait's
    -- attempts); its row is locked only by an attempt that takes (below).
    IF p_session IS NOT NULL THEN
        PERFORM dlock._session_alive(p_session);
    END IF;
    -- Held by another live holder, delayed or queued for: answered without
    -- taking anything (but a client-side fair attempt's ticket).
    IF rc THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
        v_now := clock_timestamp();
        IF FOUND AND r.holder IS NOT NULL AND dlock._exp(r.session, r.expires_at) > v_now THEN
            IF NOT (r.holder = p_holder AND r.owner = p_role) THEN
                IF client THEN
                    PERFORM dlock._queue_up(p_resource, p_holder, p_role);
                END IF;
                RETURN NULL;
            END IF;
        ELSIF (FOUND AND dlock._delayed(r, v_now)) OR dlock._ahead(p_resource, p_holder, p_role, p_ticket)
              OR (FOUND AND r.kinds AND NOT dlock._gate(p_resource, p_holder, p_role, p_ticket, false)) THEN
            IF client THEN
                PERFORM dlock._queue_up(p_resource, p_holder, p_role);
            END IF;
            RETURN NULL;
        END IF;
    END IF;
    -- Not held by another: lock the row, which decides (no advisory lock:
    -- any role could hold its key).  In a subtransaction, rolled back when
    -- the attempt is refused, so a refusal leaves no row lock behind.
    mine := coalesce(r.holder = p_holder AND r.owner = p_role, false);
    BEGIN
        -- [sessions]: the session's row FOR KEY SHARE, given back by a
        -- refusal (a wait holds nothing that close_session waits for).
        IF p_session IS NOT NULL THEN
            PERFORM dlock._session_live(p_session);
        END IF;
        -- A row another transaction is changing, pinning or locking (an
        -- acquisition, a renewal, a release, a reap, an assert_fence, a
        -- transaction-scoped lock) is busy, not waited for.  Under READ
        -- COMMITTED the row locked is its last version.
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = p_resource)
               OR dlock._ahead(p_resource, p_holder, p_role, p_ticket) THEN
                RAISE SQLSTATE 'DL004';
            END IF;
            -- A new resource: inserted with its holding, without waiting
            -- for another transaction's insert or change of that row
            -- (_insert_row): busy then.  The fence is drawn once the row
            -- is in: one drawn before could be passed meanwhile by a
            -- transaction-scoped lock, whose row leaves no trace.
            v_now := clock_timestamp();
            v_exp := dlock._expiry(v_now, p_lease);
            IF NOT dlock._insert_row(p_resource, p_holder, p_role, NULL, p_lease, v_now, v_exp) THEN
                RAISE SQLSTATE 'DL004';
            END IF;
            v_fence := dlock._next_fence();
            UPDATE dlock.leases l SET fence = v_fence, session = p_session WHERE l.resource = p_resource;
            ok := dlock._acquired(p_resource, p_holder, p_role, v_fence, true, p_delay) AND dlock._sync();
            RETURN v_fence;
        END IF;
        v_now := clock_timestamp();
        -- Shared holdings or permits by that name ([kinds]): kinds.sql's rules
        -- first (other kind: 42809; others' shared holdings: busy).
        IF r.kinds AND NOT dlock._gate(p_resource, p_holder, p_role, p_ticket) THEN
            RAISE SQLSTATE 'DL004';
        END IF;
        IF r.holder IS NOT NULL AND dlock._exp(r.session, r.expires_at) > v_now THEN
            IF NOT (r.holder = p_holder AND r.owner = p_role) THEN
                RAISE SQLSTATE 'DL004';
            END IF;
            -- [sessions]: a re-entry stays in the holding's session, or
            -- stays leased.
            IF r.session IS DISTINCT FROM p_session THEN
                RAISE EXCEPTION 'holder "%" holds resource "%" %', p_holder, p_resource,
                                CASE WHEN r.session IS NULL THEN 'with a lease of its own'
                                     ELSE format('in session %s', r.session) END
                    USING ERRCODE = 'object_not_in_prerequisite_state',
                          HINT = 'Re-enter a holding the way it was taken: in its session, or with a lease.';
            END IF;
            -- Re-entry: count + 1, expiry at least now + lease, same fence.
            IF r.count >= 2147483647 THEN
                RAISE EXCEPTION 'holder "%" has re-entered resource "%" too many times', p_holder, p_resource
                    USING ERRCODE = 'program_limit_exceeded',
                          DETAIL = 'A holding is re-entered at most 2147483646 times.';
            END IF;
            v_exp := CASE WHEN r.session IS NULL THEN greatest(r.expires_at, dlock._expiry(v_now, p_lease))
                          ELSE r.expires_at END;     -- a session's holding: the session's expiry
            UPDATE dlock.leases l SET count = l.count + 1, expires_at = v_exp, renewed_at = v_now
             WHERE l.resource = p_resource;
            ok := dlock._acquired(p_resource, p_holder, p_role, r.fence, false, NULL) AND dlock._sync();
            RETURN r.fence;
        END IF;
        IF dlock._delayed(r, v_now) OR dlock._ahead(p_resource, p_holder, p_role, p_ticket) THEN
            RAISE SQLSTATE 'DL004';
        END IF;
        -- The holding of a session that has ended: taken over only with the
        -- session's row locked FOR SHARE, so a keepalive in flight makes it
        -- busy and a later one sees the end (_lapsed).
        IF r.holder IS NOT NULL AND r.session IS NOT NULL AND NOT dlock._lapsed(r.session) THEN
            RAISE SQLSTATE 'DL004';
        END IF;
        -- Free, or expired (lazy expiry): take it with a new fence.
        v_exp := dlock._expiry(v_now, p_lease);
        v_fence := dlock._next_fence();
        UPDATE dlock.leases l
           SET holder = p_holder, owner = p_role::regrole, count = 1, fence = v_fence, lease = p_lease,
               acquired_at = v_now, renewed_at = v_now, expires_at = v_exp, released_at = NULL,
               session = p_session
         WHERE l.resource = p_resource;
        ok := dlock._acquired(p_resource, p_holder, p_role, v_fence, true, p_delay) AND dlock._sync();
        RETURN v_fence;
    EXCEPTION WHEN SQLSTATE 'DL004' THEN
        -- Refused (its row lock given back); a fair attempt still takes its
        -- place (unless it is the holder's re-entry).
        IF client AND NOT mine THEN
            PERFORM dlock._queue_up(p_resource, p_holder, p_role);
        END IF;
        RETURN NULL;
    END;
END
$$;
-- 1.0's signature, for a wait an upgrade finds in progress: leased.
CREATE OR REPLACE FUNCTION dlock._attempt(p_resource text, p_holder text, p_lease interval, p_role oid,
                                          p_fair boolean, p_delay interval, p_ticket bigint)
    RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._attempt(p_resource, p_holder, p_lease, p_role, p_fair, p_delay, p_ticket, NULL)
$$;

-- _release: end (or count down) a locked row's holding; the count left.
CREATE OR REPLACE FUNCTION dlock._release(p_resource text, p_fence bigint, p_left integer, p_event text)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v dlock.holding_values%ROWTYPE;
    v_holder text;
    ok boolean;
BEGIN
    IF p_left > 0 THEN
        UPDATE dlock.leases l SET count = p_left WHERE l.resource = p_resource;
    ELSE
        -- Ended uncleanly: a lock-delay holds the resource off until the
        -- end of the lease plus the delay.
        IF p_event IN ('expired', 'broken') THEN
            UPDATE dlock.delays d SET available_at = dlock._exp(l.session, l.expires_at) + d.lock_delay
              FROM dlock.leases l
             WHERE d.resource = p_resource AND d.fence = p_fence AND l.resource = p_resource;
        END IF;
        -- An election's expiry, and a resignation, carry candidate, term
        -- and value (read only for those events).
        IF p_event IN ('resigned', 'expired') THEN
            SELECT l.holder INTO v_holder FROM dlock.leases l WHERE l.resource = p_resource;
            SELECT * INTO v FROM dlock.holding_values x WHERE x.resource = p_resource AND x.fence = p_fence;
        END IF;
        -- session stays (tables.sql: read only with a holder), so that the
        -- session's next acquisition of the row changes no indexed column.
        UPDATE dlock.leases l SET holder = NULL, count = 0, released_at = clock_timestamp()
         WHERE l.resource = p_resource;
        IF p_event = 'resigned' OR (p_event = 'expired' AND v.election IS TRUE) THEN
            PERFORM dlock._event_holding(p_event, p_resource, p_fence, v_holder, v.value);
        ELSE
            ok := dlock._event(p_event, p_resource, p_fence);
        END IF;
    END IF;
    RETURN p_left;
END
$$;

-- _may_change: may the caller unlock or renew this row of holder's?  true
-- if it is holder's live holding taken by the caller's role (or the caller
-- is a superuser; p_super NULL: look it up); 42501 for another role's;
-- false if it is not holder's live holding at all.
CREATE OR REPLACE FUNCTION dlock._may_change(r dlock.leases, p_holder text, p_role oid, p_super boolean,
                                             action text)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF r.resource IS NULL OR r.holder IS NULL OR dlock._exp(r.session, r.expires_at) <= clock_timestamp()
       OR r.holder <> p_holder THEN
        RETURN false;
    END IF;
    IF r.owner = p_role THEN
        RETURN true;
    END IF;
    IF p_super IS NULL THEN     -- looked up only when it matters
        SELECT x.rolsuper INTO p_super FROM pg_roles x WHERE x.oid = p_role;
    END IF;
    IF p_super THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'permission denied to % a lock held by role "%"', action, r.owner::text
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = format('Only the role that took a lock, or a superuser, can %s it.', action);
END
$$;

-- _lock_holding: lock resource's row FOR UPDATE (p_no_key: FOR NO KEY
-- UPDATE) while it is still holder's live holding of fence p_fence, and
-- return it; NULL (every field) if it is not, locking nothing: it changed
-- hands or ended since the caller's look, which the caller takes again.
-- A refusal in an open transaction must hold off nobody (C gives its lock
-- back).  A row another transaction has locked is waited for in a
-- subtransaction, rolled back if the row is no longer that holding: after
-- a wait, PostgreSQL locks the row's newest version before it checks the
-- quals again, and keeps that lock when they fail.  One window is left
-- (helper-76): a change committed between a statement's snapshot and its
-- lock of the row (microseconds) does the same to the first, SKIP LOCKED
-- try here, renew's and unlock's fast path.  A subtransaction around
-- every try would close it, at a cost on every renewal.
CREATE OR REPLACE FUNCTION dlock._lock_holding(p_resource text, p_holder text, p_fence bigint,
                                               p_no_key boolean)
    RETURNS dlock.leases LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
BEGIN
    IF p_no_key THEN
        SELECT * INTO r FROM dlock.leases l
         WHERE l.resource = p_resource AND l.holder = p_holder AND l.fence = p_fence
           AND dlock._exp(l.session, l.expires_at) > clock_timestamp()
           FOR NO KEY UPDATE SKIP LOCKED;
    ELSE
        SELECT * INTO r FROM dlock.leases l
         WHERE l.resource = p_resource AND l.holder = p_holder AND l.fence = p_fence
           AND dlock._exp(l.session, l.expires_at) > clock_timestamp()
           FOR UPDATE SKIP LOCKED;
    END IF;
    IF FOUND THEN
        RETURN r;
    END IF;
    BEGIN
        IF p_no_key THEN
            SELECT * INTO r FROM dlock.leases l
             WHERE l.resource = p_resource AND l.holder = p_holder AND l.fence = p_fence
               AND dlock._exp(l.session, l.expires_at) > clock_timestamp()
               FOR NO KEY UPDATE;
        ELSE
            SELECT * INTO r FROM dlock.leases l
             WHERE l.resource = p_resource AND l.holder = p_holder AND l.fence = p_fence
               AND dlock._exp(l.session, l.expires_at) > clock_timestamp()
               FOR UPDATE;
        END IF;
        IF FOUND THEN
            RETURN r;       -- the subtransaction's lock is kept
        END IF;
        RAISE SQLSTATE 'DL007';
    EXCEPTION WHEN SQLSTATE 'DL007' THEN
        RETURN NULL;        -- its lock is given back
    END;
END
$$;
