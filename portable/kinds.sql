/*
 * portable/kinds.sql: the portable edition's [kinds] (0.4): shared locks
 * (try_lock/lock(..., shared => true)), counting semaphores with leased
 * permits (try_acquire, acquire) and several resources at once
 * (try_lock_all, lock_all), with the C extension's names, arguments,
 * results, SQLSTATEs and events (its 0.4 and 0.5 SQL).  Included by
 * dlock.sql (\ir), inside its transaction, after the tables (dlock.shares,
 * dlock.permits, dlock.leases.kinds) and the functions of [core], [fair]
 * and [elect]; not to be run on its own.
 *
 * How a request of a kind is decided: _admit reads the resource's state
 * (its exclusive holding in dlock.leases, its shared holdings, its
 * permits, this transaction's transaction-scoped lock) and gives the
 * verdict for the kind, in the C extension's order (src/admit.c):
 * 'new', 'reenter', or why not.  It is asked first without any lock (a
 * failed attempt takes nothing), then again under the resource's locks;
 * _attempt_kind then writes what it said.  The exclusive path (_attempt
 * in acquire.sql) keeps its own rules and asks _gate (_admit for an
 * exclusive request) only for a resource whose row says it has or had
 * shared holdings or permits (dlock.leases.kinds); so does _xact_attempt.
 *
 * What protects the shared state: the same lock as the exclusive path.
 * Every acquisition of any kind locks the resource's row in dlock.leases
 * SKIP LOCKED (inserting a free row if there is none, which another
 * acquirer's insert makes busy), and writes that row (kinds = true), so
 * that a REPEATABLE READ or SERIALIZABLE acquirer whose snapshot predates
 * it gets 40001 rather than a stale count; its shared holding or permits
 * are written under it.  A shared or permits acquisition locks the row
 * FOR NO KEY UPDATE, so another holder's pin (assert_fence, FOR KEY
 * SHARE) neither waits for it nor makes it busy; FOR UPDATE only when the
 * row has an exclusive holding (it may have ended, and a pin of it keeps
 * it from changing hands).  No advisory lock guards a
 * resource (any role could hold its key).  An attempt runs in a
 * subtransaction that is rolled back when it is refused, so the row lock
 * goes with it.  Expired
 * rows that an acquirer disregards are locked FOR UPDATE SKIP LOCKED
 * first: one that another transaction pins (assert_fence, FOR KEY SHARE),
 * renews or releases makes the resource busy, as for the exclusive row.
 * unlock, renew, unlock_all, reap and break_lock change a shared holding
 * or permits under that row's own lock (FOR UPDATE; renew FOR NO KEY
 * UPDATE, so a pin never makes the holder wait).
 *
 * Writers do not starve: a session waiting in lock() (or campaign) for an
 * exclusive holding holds, from its first failed attempt, the "writer
 * waits" mark, a session-level advisory lock (1684828006, _qkey) in SHARE
 * mode, which new shared holders test (a fair ticket keeps them out
 * through _ahead as for every request).  It also holds its "upgrade"
 * mark (1684828007, _umark(resource, holder, role)): an upgrade that
 * starts waiting in lock() and finds another shared holder's mark held
 * would wait for a holder that waits for it, and raises 40P01 instead of
 * waiting forever (_crossing).  Each mark counts only with its proof
 * (nowait.sql's _prove, _proven_mark): any role can take the marks' keys,
 * and keeps no reader out and makes no upgrade fail with them.  The proof
 * is taken even when the mark cannot be (its keys held exclusive by such
 * a role), and is what others count (test/portable/t/099).
 * Both marks go when the wait ends (also by cancel or error) or with the
 * session.
 */

-- _bool_arg: a boolean argument (shared): 22023 when NULL.
CREATE OR REPLACE FUNCTION dlock._bool_arg(val boolean, what text)
    RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF val IS NULL THEN
        RAISE EXCEPTION '% must not be null', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN val;
END
$$;

-- _umark: the second key of holder's "upgrade" mark on resource (see the
-- header); a collision only makes an upgrade think another one waits.
CREATE OR REPLACE FUNCTION dlock._umark(p_resource text, p_holder text, p_role oid)
    RETURNS integer LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN hashtext(p_resource || chr(1) || p_holder || chr(1) || p_role::text);
END
$$;

-- _marks: an exclusive wait takes (p_take) or gives back its "writer
-- waits" and "upgrade" marks; nothing when p_on is false.  Taking them,
-- it looks for a crossing upgrade (_crossing: 40P01).  (_wait_loop takes
-- and gives them back itself since issue 33; this stays for waits that
-- an upgrade finds in progress.)
CREATE OR REPLACE FUNCTION dlock._marks(p_resource text, p_holder text, p_role oid, p_on boolean,
                                        p_take boolean)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT p_on THEN
        RETURN;
    ELSIF p_take THEN       -- without waiting (any role can hold the keys)
        -- Each proof taken even when its mark is not (a foreign role
        -- holds the mark's keys): the proof is what others count.
        PERFORM pg_try_advisory_lock_shared(1684828006, dlock._qkey(p_resource));
        PERFORM dlock._prove(1684828006, dlock._qkey(p_resource));
        PERFORM pg_try_advisory_lock_shared(1684828007, dlock._umark(p_resource, p_holder, p_role));
        PERFORM dlock._prove(1684828007, dlock._umark(p_resource, p_holder, p_role));
        PERFORM dlock._crossing(p_resource, p_holder, p_role);
    ELSE
        PERFORM dlock._let_go(p_resource, p_holder, p_role, NULL);
    END IF;
END
$$;

-- _crossing: a wait for an exclusive holding has just taken its marks:
-- if its holder has a live shared holding, and another shared holder of
-- the resource waits (its upgrade mark held) to upgrade too, each would
-- wait for the other: 40P01 now, for the later of the two (the earlier
-- one looked before this one's mark was there; if both look at once,
-- both get it: never a hang).
CREATE OR REPLACE FUNCTION dlock._crossing(p_resource text, p_holder text, p_role oid)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    o record;
    k integer;
BEGIN
    IF NOT EXISTS (SELECT FROM dlock.shares x
                    WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = p_role
                      AND dlock._exp(x.session, x.expires_at) > clock_timestamp()) THEN
        RETURN;
    END IF;
    FOR o IN SELECT x.holder, x.owner FROM dlock.shares x
              WHERE x.resource = p_resource AND dlock._exp(x.session, x.expires_at) > clock_timestamp()
                AND NOT (x.holder = p_holder AND x.owner = p_role)
    LOOP
        k := dlock._umark(p_resource, o.holder, o.owner);
        -- Tried and given back in one expression: no cancel between.
        IF NOT (pg_try_advisory_lock(1684828007, k) AND pg_advisory_unlock(1684828007, k))
           AND dlock._proven_mark(1684828007, k) THEN
            RAISE EXCEPTION 'deadlock detected'
                USING ERRCODE = 'deadlock_detected',
                      DETAIL = format('Holder "%s" waits to upgrade its shared lock on resource "%s" to exclusive, and another shared holder waits to upgrade too: each waits for the other.',
                                      p_holder, p_resource),
                      HINT = 'Release the shared lock and take the exclusive one afresh.';
        END IF;
    END LOOP;
END
$$;

-- _other_kind: 42809, a name held as the other kind.
CREATE OR REPLACE FUNCTION dlock._other_kind(p_resource text, p_semaphore boolean)
    RETURNS void LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_semaphore THEN
        RAISE EXCEPTION 'resource "%" is held as a lock, not as a semaphore', p_resource
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'A name is a lock or a semaphore while it has live holdings, not both.',
                  HINT = 'Use another name for the semaphore.';
    END IF;
    RAISE EXCEPTION 'resource "%" is held as a semaphore, not as a lock', p_resource
        USING ERRCODE = 'wrong_object_type',
              DETAIL = 'A name is a lock or a semaphore while it has live holdings, not both.',
              HINT = 'Use another name for the lock.';
END
$$;

-- _admit: the verdict on a request of kind p_kind ('exclusive', 'shared',
-- 'semaphore' with p_max and p_permits, 'xact' without a holder) for
-- resource, in the C extension's order (src/admit.c):
--   'new' (a new holding), 'reenter' (the holder's own: count + 1, or
--   permits added), 'busy' (not now; a fair request queues), 'busy_mine'
--   (not now, and the holder has a holding: no queueing), 'own_xact'
--   (this transaction's transaction-scoped lock excludes it),
--   'contended' (under p_locked: an expired row another transaction has
--   locked);
-- or an error: 42809 (the other kind), 22023 (another max_permits).  p_locked:
-- the caller holds the resource's row lock (the verdict stands), else it
-- is a look that takes nothing.
CREATE OR REPLACE FUNCTION dlock._admit(p_kind text, p_resource text, p_holder text, p_role oid,
                                        p_ticket bigint, p_max integer, p_permits integer,
                                        p_locked boolean)
    RETURNS text LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    r dlock.leases%ROWTYPE;
    own_xact boolean := coalesce(current_setting('dlock.xact_' || md5(p_resource), true), '') <> '';
    ended boolean;
    ex_mine boolean;
    sh_live integer;
    sh_others integer;
    sh_mine boolean;
    sh_expired integer;
    pm_live integer;
    pm_held bigint;
    pm_max integer;
    pm_mine boolean;
    pm_expired integer;
    n integer;
    k integer;
BEGIN
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    ended := r.holder IS NULL OR dlock._exp(r.session, r.expires_at) <= v_now;
    ex_mine := NOT ended AND r.holder = p_holder AND r.owner = p_role;
    SELECT count(*) FILTER (WHERE x.live), count(*) FILTER (WHERE x.live AND NOT x.mine),
           coalesce(bool_or(x.live AND x.mine), false), count(*) FILTER (WHERE NOT x.live)
      INTO sh_live, sh_others, sh_mine, sh_expired
      FROM (SELECT dlock._exp(s.session, s.expires_at) > v_now AS live,
                   coalesce(s.holder = p_holder AND s.owner = p_role, false) AS mine
              FROM dlock.shares s WHERE s.resource = p_resource) x;
    SELECT count(*) FILTER (WHERE x.live), coalesce(sum(x.permits) FILTER (WHERE x.live), 0),
           max(x.max_permits) FILTER (WHERE x.live),
           coalesce(bool_or(x.live AND x.mine), false), count(*) FILTER (WHERE NOT x.live)
      INTO pm_live, pm_held, pm_max, pm_mine, pm_expired
      FROM (SELECT dlock._exp(p.session, p.expires_at) > v_now AS live, p.permits, p.max_permits,
                   coalesce(p.holder = p_holder AND p.owner = p_role, false) AS mine
              FROM dlock.permits p WHERE p.resource = p_resource) x;
    -- Expired rows are disregarded only when nobody else has them locked
    -- (a pin, a renewal or a release in flight), and a session's only with
    -- its end locked in (_lapsed: no keepalive in flight).
    IF p_locked AND r.holder IS NOT NULL AND ended AND r.session IS NOT NULL
       AND NOT dlock._lapsed(r.session) THEN
        RETURN 'contended';
    END IF;
    -- An upgrade passes over the holder's own live shared holding only
    -- with its row locked, which a pin of it (assert_fence, FOR KEY SHARE)
    -- makes busy: the pinner's fenced write is a reader's (as in C, where
    -- CHANGE waits for PIN).
    IF p_locked AND p_kind = 'exclusive' AND sh_mine THEN
        PERFORM FROM dlock.shares s
         WHERE s.resource = p_resource AND s.holder = p_holder AND s.owner = p_role
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN 'contended';
        END IF;
    END IF;
    IF p_locked AND sh_expired > 0 THEN
        SELECT count(*) INTO n FROM (SELECT s.session FROM dlock.shares s
                                      WHERE s.resource = p_resource AND dlock._exp(s.session, s.expires_at) <= v_now
                                        FOR UPDATE SKIP LOCKED) x
         WHERE x.session IS NULL OR dlock._lapsed(x.session);
        IF n < sh_expired THEN
            RETURN 'contended';
        END IF;
    END IF;
    IF p_locked AND pm_expired > 0 THEN
        SELECT count(*) INTO n FROM (SELECT p.session FROM dlock.permits p
                                      WHERE p.resource = p_resource AND dlock._exp(p.session, p.expires_at) <= v_now
                                        FOR UPDATE SKIP LOCKED) x
         WHERE x.session IS NULL OR dlock._lapsed(x.session);
        IF n < pm_expired THEN
            RETURN 'contended';
        END IF;
    END IF;

    IF p_kind = 'xact' THEN
        IF pm_live > 0 THEN
            PERFORM dlock._other_kind(p_resource, false);
        END IF;
        RETURN CASE WHEN sh_live > 0 THEN 'busy' ELSE 'new' END;
    ELSIF p_kind = 'semaphore' THEN
        IF own_xact OR sh_live > 0 OR NOT ended THEN
            PERFORM dlock._other_kind(p_resource, true);
        END IF;
        IF pm_max IS NOT NULL AND pm_max <> p_max THEN
            RAISE EXCEPTION 'semaphore "%" has max_permits %, not %', p_resource, pm_max, p_max
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Every caller of a semaphore passes the same max_permits while any permit is held.';
        END IF;
        IF pm_held + p_permits > p_max THEN
            RETURN CASE WHEN pm_mine THEN 'busy_mine' ELSE 'busy' END;
        END IF;
        IF pm_mine THEN
            RETURN 'reenter';
        END IF;
    ELSE
        IF own_xact THEN
            RETURN 'own_xact';
        END IF;
        IF pm_live > 0 THEN
            PERFORM dlock._other_kind(p_resource, false);
        END IF;
        IF p_kind = 'shared' THEN
            IF sh_mine THEN
                RETURN 'reenter';
            ELSIF ex_mine THEN
                RETURN 'new';           -- a downgrade, beside its exclusive holding
            END IF;
        ELSE
            IF ex_mine THEN
                RETURN 'reenter';
            END IF;
            IF sh_others > 0 THEN
                -- (An upgrade crossing another: _crossing, when its wait starts.)
                RETURN 'busy';
            END IF;
        END IF;
        IF NOT ended THEN
            RETURN 'busy';
        END IF;
    END IF;
    IF r.resource IS NOT NULL AND dlock._delayed(r, v_now) THEN
        RETURN 'busy';
    END IF;
    -- Writers do not starve: an exclusive request waiting in lock() keeps
    -- new shared holders out.
    IF p_kind = 'shared' THEN
        k := dlock._qkey(p_resource);
        -- Tried and given back in one expression: no cancel between.
        -- Held: by a writer that waits, or by anyone (who may keep the
        -- writer from taking it): then the writer's proof decides
        -- (_proven_mark).
        IF NOT (pg_try_advisory_lock(1684828006, k) AND pg_advisory_unlock(1684828006, k))
           AND dlock._proven_mark(1684828006, k) THEN
            RETURN 'busy';
        END IF;
    END IF;
    IF dlock._ahead(p_resource, p_holder, p_role, p_ticket) THEN
        RETURN 'busy';
    END IF;
    RETURN 'new';
END
$$;

-- _gate: the exclusive path's question for a resource with shared
-- holdings or permits (dlock.leases.kinds): may an exclusive request of
-- holder have it, as far as they go?  Under p_locked (the row locked),
-- a resource none are left in loses its kinds mark.
CREATE OR REPLACE FUNCTION dlock._gate(p_resource text, p_holder text, p_role oid, p_ticket bigint,
                                       p_locked boolean DEFAULT true)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF dlock._admit('exclusive', p_resource, p_holder, p_role, p_ticket, NULL, NULL, p_locked)
       NOT IN ('new', 'reenter') THEN
        RETURN false;
    END IF;
    IF p_locked AND NOT EXISTS (SELECT FROM dlock.shares s WHERE s.resource = p_resource)
       AND NOT EXISTS (SELECT FROM dlock.permits p WHERE p.resource = p_resource) THEN
        UPDATE dlock.leases l SET kinds = false WHERE l.resource = p_resource;
    END IF;
    RETURN true;
END
$$;

-- _attempt_kind: one attempt at a shared holding (p_kind 'shared') or at
-- p_permits permits of a semaphore of p_max ('semaphore') that never
-- waits: the holding's fence, or NULL.  p_ticket: the ticket of a wait
-- (NULL: none); a fair attempt without one (client-side) that does not
-- get it takes or keeps a client ticket, unless the holder has a holding
-- there.
CREATE OR REPLACE FUNCTION dlock._attempt_kind(p_kind text, p_resource text, p_holder text, p_lease interval,
                                               p_role oid, p_fair boolean, p_ticket bigint,
                                               p_max integer, p_permits integer, p_session bigint)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v text;
    v_now timestamptz;
    v_fence bigint;
    v_count integer;
    v_exp timestamptz;
    v_session bigint;
    ok boolean;
BEGIN
    -- [sessions]: a session that has ended takes nothing; its row is
    -- locked only inside the attempt (a refusal gives it back).
    IF p_session IS NOT NULL THEN
        PERFORM dlock._session_alive(p_session);
    END IF;
    -- A look that takes nothing first (READ COMMITTED: it sees the last commits).
    IF current_setting('transaction_isolation') = 'read committed' THEN
        v := dlock._admit(p_kind, p_resource, p_holder, p_role, p_ticket, p_max, p_permits, false);
    END IF;
    IF v IS NULL OR v IN ('new', 'reenter') THEN
        BEGIN
            IF p_session IS NOT NULL THEN
                PERFORM dlock._session_live(p_session);
            END IF;
            v := 'contended';
            PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR NO KEY UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                -- No row yet (a free one is made: the anchor), or another
                -- transaction has it locked (busy: a row this snapshot sees,
                -- or one _insert_row cannot insert without waiting, as
                -- behind an open reap() deleting it).  Under REPEATABLE READ
                -- a row committed since the snapshot: 40001.
                IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = p_resource)
                   OR NOT dlock._insert_row(p_resource, NULL, NULL, NULL, NULL, NULL, NULL) THEN
                    RAISE SQLSTATE 'DL002';
                END IF;
                PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR NO KEY UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    RAISE SQLSTATE 'DL002';
                END IF;
            END IF;
            -- An exclusive holding, even one that has ended, is passed
            -- over only with the row locked FOR UPDATE, which a pin of it
            -- (assert_fence, FOR KEY SHARE) makes busy.  Readers joining
            -- readers lock it FOR NO KEY UPDATE, which a pin of another
            -- holding does not conflict with (see the header).
            IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = p_resource AND l.holder IS NOT NULL) THEN
                PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    RAISE SQLSTATE 'DL002';
                END IF;
            END IF;
            v := dlock._admit(p_kind, p_resource, p_holder, p_role, p_ticket, p_max, p_permits, true);
            IF v NOT IN ('new', 'reenter') THEN
                RAISE SQLSTATE 'DL002';
            END IF;
            v_now := clock_timestamp();
            IF v = 'reenter' THEN
                -- count + 1 (and the permits added), expiry at least now + lease, same fence.
                IF p_kind = 'shared' THEN
                    SELECT s.fence, s.count, s.expires_at, s.session INTO v_fence, v_count, v_exp, v_session
                      FROM dlock.shares s
                     WHERE s.resource = p_resource AND s.holder = p_holder AND s.owner = p_role
                       FOR NO KEY UPDATE SKIP LOCKED;
                ELSE
                    SELECT p.fence, p.count, p.expires_at, p.session INTO v_fence, v_count, v_exp, v_session
                      FROM dlock.permits p
                     WHERE p.resource = p_resource AND p.holder = p_holder AND p.owner = p_role
                       FOR NO KEY UPDATE SKIP LOCKED;
                END IF;
                IF v_fence IS NULL THEN
                    v := 'contended';
                    RAISE SQLSTATE 'DL002';
                END IF;
                IF v_count >= 2147483647 THEN
                    RAISE EXCEPTION 'holder "%" has re-entered resource "%" too many times', p_holder, p_resource
                        USING ERRCODE = 'program_limit_exceeded',
                              DETAIL = 'A holding is re-entered at most 2147483646 times.';
                END IF;
                -- A re-entry stays in the holding's session, or stays leased.
                IF v_session IS DISTINCT FROM p_session THEN
                    RAISE EXCEPTION 'holder "%" holds resource "%" %', p_holder, p_resource,
                                    CASE WHEN v_session IS NULL THEN 'with a lease of its own'
                                         ELSE format('in session %s', v_session) END
                        USING ERRCODE = 'object_not_in_prerequisite_state',
                              HINT = 'Re-enter a holding the way it was taken: in its session, or with a lease.';
                END IF;
                IF p_session IS NULL THEN
                    v_exp := greatest(v_exp, dlock._expiry(v_now, p_lease));
                END IF;
                IF p_kind = 'shared' THEN
                    UPDATE dlock.shares s SET count = s.count + 1, expires_at = v_exp, renewed_at = v_now
                     WHERE s.resource = p_resource AND s.holder = p_holder AND s.owner = p_role;
                ELSE
                    UPDATE dlock.permits p SET count = p.count + 1, permits = p.permits + p_permits,
                                               expires_at = v_exp, renewed_at = v_now
                     WHERE p.resource = p_resource AND p.holder = p_holder AND p.owner = p_role;
                END IF;
            ELSE
                -- A new holding (an expired one of the holder's, locked
                -- by _admit, is replaced), with a new fence.
                v_exp := dlock._expiry(v_now, p_lease);
                v_fence := dlock._next_fence();
                IF p_kind = 'shared' THEN
                    INSERT INTO dlock.shares AS s (resource, holder, owner, count, fence, lease,
                                                   acquired_at, renewed_at, expires_at, session)
                         VALUES (p_resource, p_holder, p_role::regrole, 1, v_fence, p_lease, v_now, v_now, v_exp,
                                 p_session)
                    ON CONFLICT (resource, holder, owner) DO UPDATE
                           SET count = 1, fence = excluded.fence, lease = excluded.lease,
                               acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,
                               expires_at = excluded.expires_at, session = excluded.session;
                ELSE
                    INSERT INTO dlock.permits AS p (resource, holder, owner, count, fence, lease,
                                                    acquired_at, renewed_at, expires_at, permits, max_permits,
                                                    session)
                         VALUES (p_resource, p_holder, p_role::regrole, 1, v_fence, p_lease, v_now, v_now, v_exp,
                                 p_permits, p_max, p_session)
                    ON CONFLICT (resource, holder, owner) DO UPDATE
                           SET count = 1, fence = excluded.fence, lease = excluded.lease,
                               acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at,
                               expires_at = excluded.expires_at, permits = excluded.permits,
                               max_permits = excluded.max_permits, session = excluded.session;
                END IF;
            END IF;
            -- The row is written by every acquisition (see the header).
            UPDATE dlock.leases l SET kinds = true WHERE l.resource = p_resource;
            ok := dlock._acquired(p_resource, p_holder, p_role, v_fence, false, NULL) AND dlock._sync();
            RETURN v_fence;
        EXCEPTION WHEN SQLSTATE 'DL002' THEN
            NULL;       -- refused: what the attempt took is given back
        END;
    END IF;
    IF p_fair AND p_ticket IS NULL AND v IN ('busy', 'contended') THEN
        PERFORM dlock._queue_up(p_resource, p_holder, p_role);
    END IF;
    RETURN NULL;
END
$$;
-- 1.0's signature, for a wait an upgrade finds in progress: leased.
CREATE OR REPLACE FUNCTION dlock._attempt_kind(p_kind text, p_resource text, p_holder text, p_lease interval,
                                               p_role oid, p_fair boolean, p_ticket bigint,
                                               p_max integer, p_permits integer)
    RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._attempt_kind(p_kind, p_resource, p_holder, p_lease, p_role, p_fair, p_ticket,
                               p_max, p_permits, NULL)
$$;

-- _find_held: the caller's live shared holding of resource, else its
-- holding of permits (tbl 'shares' or 'permits'; NULL: none); another
-- role's of the same holder text raises 42501 (superusers aside:
-- p_super, NULL to look it up), by _may_change's rule.
CREATE OR REPLACE FUNCTION dlock._find_held(p_resource text, p_holder text, p_role oid, p_super boolean,
                                            p_action text, OUT tbl text, OUT fence bigint, OUT count integer,
                                            OUT lease interval, OUT owner oid, OUT session bigint)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    x record;
    r dlock.leases%ROWTYPE;
BEGIN
    FOR x IN SELECT * FROM (
                 SELECT 'shares' AS t, s.fence, s.count, s.lease, s.owner, s.expires_at, s.session
                   FROM dlock.shares s
                  WHERE s.resource = p_resource AND s.holder = p_holder AND dlock._exp(s.session, s.expires_at) > v_now
                 UNION ALL
                 SELECT 'permits', p.fence, p.count, p.lease, p.owner, p.expires_at, p.session
                   FROM dlock.permits p
                  WHERE p.resource = p_resource AND p.holder = p_holder AND dlock._exp(p.session, p.expires_at) > v_now) u
              ORDER BY u.owner = p_role::regrole DESC, u.t DESC
    LOOP
        -- The caller's own first; another role's through _may_change.
        r.resource := p_resource;
        r.holder := p_holder;
        r.owner := x.owner;
        r.expires_at := x.expires_at;
        r.session := x.session;
        IF dlock._may_change(r, p_holder, p_role, p_super, p_action) THEN
            session := x.session;
            tbl := x.t;
            fence := x.fence;
            count := x.count;
            lease := x.lease;
            owner := x.owner;
        END IF;
        RETURN;
    END LOOP;
END
$$;

-- _end_held: a shared holding or holding of permits (fence) is over: its
-- row goes, with the event; a release also gives back its client ticket.
-- Called with the row locked.
CREATE OR REPLACE FUNCTION dlock._end_held(p_tbl text, p_resource text, p_fence bigint, p_event text)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h text;
    o regrole;
BEGIN
    IF p_tbl = 'shares' THEN
        DELETE FROM dlock.shares s WHERE s.resource = p_resource AND s.fence = p_fence
        RETURNING s.holder, s.owner INTO h, o;
    ELSE
        DELETE FROM dlock.permits p WHERE p.resource = p_resource AND p.fence = p_fence
        RETURNING p.holder, p.owner INTO h, o;
    END IF;
    IF p_event = 'released' THEN
        DELETE FROM dlock.tickets t
         WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                    WHERE x.resource = p_resource AND x.holder = h AND x.owner = o
                                      FOR UPDATE SKIP LOCKED));
    END IF;
    PERFORM dlock._event(p_event, p_resource, p_fence);
END
$$;

-- _unlock_held: unlock of the caller's shared holding (one level) or
-- holding of permits (all of them), under fence if given; the count left,
-- NULL if there is none.
CREATE OR REPLACE FUNCTION dlock._unlock_held(p_resource text, p_holder text, p_role oid, p_fence bigint)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h record;
    c integer;
    left_ integer;
BEGIN
    h := dlock._find_held(p_resource, p_holder, p_role, NULL, 'unlock');
    IF h.tbl IS NULL OR (p_fence IS NOT NULL AND p_fence <> h.fence) THEN
        RETURN NULL;
    END IF;
    -- Lock it, and look again: it may have ended meanwhile.
    IF h.tbl = 'shares' THEN
        SELECT s.count INTO c FROM dlock.shares s
         WHERE s.resource = p_resource AND s.fence = h.fence
           AND dlock._exp(s.session, s.expires_at) > clock_timestamp() FOR UPDATE;
    ELSE
        SELECT p.count INTO c FROM dlock.permits p
         WHERE p.resource = p_resource AND p.fence = h.fence
           AND dlock._exp(p.session, p.expires_at) > clock_timestamp() FOR UPDATE;
    END IF;
    IF c IS NULL THEN
        RETURN NULL;
    END IF;
    left_ := CASE WHEN h.tbl = 'permits' THEN 0 ELSE c - 1 END;
    IF left_ > 0 THEN
        UPDATE dlock.shares s SET count = left_ WHERE s.resource = p_resource AND s.fence = h.fence;
    ELSE
        PERFORM dlock._end_held(h.tbl, p_resource, h.fence, 'released');
    END IF;
    RETURN left_;
END
$$;

-- _renew_held: renew of the caller's shared holding or holding of
-- permits, under fence if given: the new expiry, NULL if it has none.
CREATE OR REPLACE FUNCTION dlock._renew_held(p_resource text, p_holder text, p_role oid, p_super boolean,
                                             p_lease interval, p_fence bigint)
    RETURNS timestamptz LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h record;
    l interval;
    v_now timestamptz;
    v_exp timestamptz;
BEGIN
    h := dlock._find_held(p_resource, p_holder, p_role, p_super, 'renew');
    IF h.tbl IS NULL OR (p_fence IS NOT NULL AND p_fence <> h.fence) THEN
        RETURN NULL;
    END IF;
    -- [sessions]: a session's holding renews its session (sessions.sql).
    -- The holding may end while keepalive waits for the session's row:
    -- looked at again after it, NULL if it has.
    IF h.session IS NOT NULL THEN
        v_exp := dlock._renew_session(h.session, p_lease);
        IF h.tbl = 'shares' THEN
            PERFORM FROM dlock.shares s WHERE s.resource = p_resource AND s.fence = h.fence AND s.session = h.session;
        ELSE
            PERFORM FROM dlock.permits p WHERE p.resource = p_resource AND p.fence = h.fence AND p.session = h.session;
        END IF;
        RETURN CASE WHEN FOUND THEN v_exp END;
    END IF;
    -- FOR NO KEY UPDATE: an assert_fence pin (FOR KEY SHARE) never makes
    -- the renewal wait; an expired lease is never revived.
    IF h.tbl = 'shares' THEN
        SELECT s.lease INTO l FROM dlock.shares s
         WHERE s.resource = p_resource AND s.fence = h.fence FOR NO KEY UPDATE;
        v_now := clock_timestamp();
        PERFORM FROM dlock.shares s WHERE s.resource = p_resource AND s.fence = h.fence AND s.expires_at > v_now;
    ELSE
        SELECT p.lease INTO l FROM dlock.permits p
         WHERE p.resource = p_resource AND p.fence = h.fence FOR NO KEY UPDATE;
        v_now := clock_timestamp();
        PERFORM FROM dlock.permits p WHERE p.resource = p_resource AND p.fence = h.fence AND p.expires_at > v_now;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    l := coalesce(p_lease, l);
    v_exp := dlock._expiry(v_now, l);
    IF h.tbl = 'shares' THEN
        UPDATE dlock.shares s SET expires_at = v_exp, renewed_at = v_now, lease = l
         WHERE s.resource = p_resource AND s.fence = h.fence;
    ELSE
        UPDATE dlock.permits p SET expires_at = v_exp, renewed_at = v_now, lease = l
         WHERE p.resource = p_resource AND p.fence = h.fence;
    END IF;
    PERFORM dlock._sync();
    RETURN v_exp;
END
$$;

-- _unlock_all_held: unlock_all's shared holdings and holdings of permits
-- (holder's, of the caller's role, live): how many.
CREATE OR REPLACE FUNCTION dlock._unlock_all_held(p_holder text, p_role oid)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    x record;
    n integer := 0;
BEGIN
    FOR x IN SELECT 'shares' AS t, s.resource, s.fence FROM dlock.shares s
              WHERE s.holder = p_holder AND s.owner = p_role AND dlock._exp(s.session, s.expires_at) > clock_timestamp()
             UNION ALL
             SELECT 'permits', p.resource, p.fence FROM dlock.permits p
              WHERE p.holder = p_holder AND p.owner = p_role AND dlock._exp(p.session, p.expires_at) > clock_timestamp()
             ORDER BY 2, 1
    LOOP
        IF x.t = 'shares' THEN
            PERFORM FROM dlock.shares s WHERE s.resource = x.resource AND s.fence = x.fence
                                          AND dlock._exp(s.session, s.expires_at) > clock_timestamp() FOR UPDATE;
        ELSE
            PERFORM FROM dlock.permits p WHERE p.resource = x.resource AND p.fence = x.fence
                                           AND dlock._exp(p.session, p.expires_at) > clock_timestamp() FOR UPDATE;
        END IF;
        IF FOUND THEN
            PERFORM dlock._end_held(x.t, x.resource, x.fence, 'released');
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- _reap_held: reap()'s expired shared holdings and holdings of permits
-- (rows another transaction has locked are skipped): how many.  Then
-- resources none are left in lose their kinds mark (each looked at again
-- under its row's lock, which every acquisition holds).
CREATE OR REPLACE FUNCTION dlock._reap_held()
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    x record;
    n integer := 0;
BEGIN
    FOR x IN SELECT s.resource, s.fence, s.session FROM dlock.shares s
              WHERE dlock._exp(s.session, s.expires_at) <= clock_timestamp() ORDER BY s.resource FOR UPDATE SKIP LOCKED
    LOOP
        CONTINUE WHEN x.session IS NOT NULL AND NOT dlock._lapsed(x.session);
        PERFORM dlock._end_held('shares', x.resource, x.fence, 'expired');
        n := n + 1;
    END LOOP;
    FOR x IN SELECT p.resource, p.fence, p.session FROM dlock.permits p
              WHERE dlock._exp(p.session, p.expires_at) <= clock_timestamp() ORDER BY p.resource FOR UPDATE SKIP LOCKED
    LOOP
        CONTINUE WHEN x.session IS NOT NULL AND NOT dlock._lapsed(x.session);
        PERFORM dlock._end_held('permits', x.resource, x.fence, 'expired');
        n := n + 1;
    END LOOP;
    FOR x IN SELECT l.resource FROM dlock.leases l
              WHERE l.kinds
                AND NOT EXISTS (SELECT FROM dlock.shares s WHERE s.resource = l.resource)
                AND NOT EXISTS (SELECT FROM dlock.permits p WHERE p.resource = l.resource)
              LIMIT 1000 FOR UPDATE SKIP LOCKED
    LOOP
        IF NOT EXISTS (SELECT FROM dlock.shares s WHERE s.resource = x.resource)
           AND NOT EXISTS (SELECT FROM dlock.permits p WHERE p.resource = x.resource) THEN
            UPDATE dlock.leases l SET kinds = false WHERE l.resource = x.resource;
        END IF;
    END LOOP;
    RETURN n;
END
$$;

-- _break_held: break_lock's shared holdings and holdings of permits of
-- resource (every live one, event broken): how many.
CREATE OR REPLACE FUNCTION dlock._break_held(p_resource text)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    x record;
    n integer := 0;
BEGIN
    FOR x IN SELECT s.fence FROM dlock.shares s
              WHERE s.resource = p_resource AND dlock._exp(s.session, s.expires_at) > clock_timestamp()
              ORDER BY s.fence FOR UPDATE
    LOOP
        PERFORM dlock._end_held('shares', p_resource, x.fence, 'broken');
        n := n + 1;
    END LOOP;
    FOR x IN SELECT p.fence FROM dlock.permits p
              WHERE p.resource = p_resource AND dlock._exp(p.session, p.expires_at) > clock_timestamp()
              ORDER BY p.fence FOR UPDATE
    LOOP
        PERFORM dlock._end_held('permits', p_resource, x.fence, 'broken');
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- _current_held: is fence a current shared holding or holding of permits
-- of resource?  Pins it (FOR KEY SHARE) when pin.  As in _current, the
-- pin lets a no-key update committed since the statement's snapshot pass
-- (a renew to a shorter lease) and returns the version that snapshot saw,
-- so a pinned row is looked at again: under READ COMMITTED its latest
-- version; under REPEATABLE READ, a newer one is 40001 (_pin_fresh).
CREATE OR REPLACE FUNCTION dlock._current_held(p_resource text, p_fence bigint, pin boolean,
                                               OUT is_current boolean, OUT owner oid)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tbl text;
BEGIN
    IF pin THEN
        PERFORM FROM dlock.shares s
         WHERE s.resource = p_resource AND s.fence = p_fence AND dlock._exp(s.session, s.expires_at) > clock_timestamp() FOR KEY SHARE;
        IF FOUND THEN
            tbl := 'shares';
        ELSE
            PERFORM FROM dlock.permits p
             WHERE p.resource = p_resource AND p.fence = p_fence AND dlock._exp(p.session, p.expires_at) > clock_timestamp() FOR KEY SHARE;
            tbl := CASE WHEN FOUND THEN 'permits' END;
        END IF;
        IF tbl IS NULL THEN
            is_current := false;
            RETURN;
        END IF;
        IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted') THEN
            PERFORM dlock._pin_fresh(tbl, p_resource, p_fence);
        END IF;
    END IF;
    IF tbl IS DISTINCT FROM 'permits' THEN
        SELECT s.owner INTO owner FROM dlock.shares s
         WHERE s.resource = p_resource AND s.fence = p_fence AND dlock._exp(s.session, s.expires_at) > clock_timestamp();
        is_current := FOUND;
    END IF;
    IF NOT coalesce(is_current, false) AND tbl IS DISTINCT FROM 'shares' THEN
        SELECT p.owner INTO owner FROM dlock.permits p
         WHERE p.resource = p_resource AND p.fence = p_fence AND dlock._exp(p.session, p.expires_at) > clock_timestamp();
        is_current := FOUND;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- Counting semaphores with leased permits.
-- ---------------------------------------------------------------------------

-- _permits_args: max_permits and permits, checked (22023).
CREATE OR REPLACE FUNCTION dlock._permits_args(max_permits integer, permits integer)
    RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF max_permits IS NULL THEN
        RAISE EXCEPTION 'max_permits must not be null' USING ERRCODE = 'invalid_parameter_value';
    ELSIF max_permits <= 0 THEN
        RAISE EXCEPTION 'max_permits must be greater than zero' USING ERRCODE = 'invalid_parameter_value';
    ELSIF permits IS NULL THEN
        RAISE EXCEPTION 'permits must not be null' USING ERRCODE = 'invalid_parameter_value';
    ELSIF permits <= 0 THEN
        RAISE EXCEPTION 'permits must be greater than zero' USING ERRCODE = 'invalid_parameter_value';
    ELSIF permits > max_permits THEN
        RAISE EXCEPTION 'permits must be at most max_permits' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION dlock.try_acquire(semaphore text,
                                             holder text,
                                             max_permits integer,
                                             permits integer DEFAULT 1,
                                             lease interval DEFAULT NULL,
                                             fair boolean DEFAULT false,
                                             session bigint DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l interval;
    f boolean;
    ok boolean;
    s_ttl interval;
BEGIN
    -- [sessions]: the session's holder and ttl (sessions.sql); first, since
    -- holder may be NULL with a session.
    IF try_acquire.session IS NOT NULL THEN
        SELECT x.holder, x.ttl INTO holder, s_ttl FROM dlock._session_use(try_acquire.session, holder, lease) x;
    END IF;
    semaphore := dlock._text_arg(semaphore, 'semaphore', 1000);
    holder := dlock._text_arg(holder, 'holder', 255);
    ok := dlock._permits_args(max_permits, permits);
    l := dlock._lease(lease);
    f := dlock._fair(fair);
    ok := dlock._writable('dlock.try_acquire()');
    RETURN dlock._attempt_kind('semaphore', semaphore, holder, coalesce(s_ttl, l), dlock._role(), f, NULL,
                               max_permits, permits, try_acquire.session);
END
$$;
COMMENT ON FUNCTION dlock.try_acquire(text, text, integer, integer, interval, boolean, bigint) IS
    'Acquire permits of semaphore for holder (at most max_permits held at once; added to the holder''s holding), with a lease; returns the holding''s fence, or NULL at once if they are not free';

CREATE OR REPLACE FUNCTION dlock.acquire(semaphore text,
                                         holder text,
                                         max_permits integer,
                                         permits integer DEFAULT 1,
                                         lease interval DEFAULT NULL,
                                         wait interval DEFAULT NULL,
                                         fair boolean DEFAULT false,
                                         session bigint DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l interval;
    w interval;
    f boolean;
    ok boolean;
    s_ttl interval;
BEGIN
    -- [sessions]: the session's holder and ttl (sessions.sql); first, since
    -- holder may be NULL with a session.
    IF acquire.session IS NOT NULL THEN
        SELECT x.holder, x.ttl INTO holder, s_ttl FROM dlock._session_use(acquire.session, holder, lease) x;
    END IF;
    semaphore := dlock._text_arg(semaphore, 'semaphore', 1000);
    holder := dlock._text_arg(holder, 'holder', 255);
    ok := dlock._permits_args(max_permits, permits);
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    f := dlock._fair(fair);
    ok := dlock._writable('dlock.acquire()');
    RETURN dlock._wait_loop(semaphore, holder, coalesce(s_ttl, l), w, f, NULL, 'dlock.acquire()', 'semaphore',
                            max_permits, permits, acquire.session);
END
$$;
COMMENT ON FUNCTION dlock.acquire(text, text, integer, integer, interval, interval, boolean, bigint) IS
    'Like try_acquire, but waits up to wait (NULL: no limit but statement_timeout), polling, in the fair queue with fair => true; NULL on timeout';

-- ---------------------------------------------------------------------------
-- Several resources at once.
-- ---------------------------------------------------------------------------

-- _resources_arg: the resources argument: a one-dimensional array of
-- valid resource names, not empty, without NULLs or duplicates (22023).
CREATE OR REPLACE FUNCTION dlock._resources_arg(resources text[])
    RETURNS text[] LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    x text;
BEGIN
    IF resources IS NULL THEN
        RAISE EXCEPTION 'resources must not be null' USING ERRCODE = 'invalid_parameter_value';
    ELSIF array_ndims(resources) > 1 THEN
        RAISE EXCEPTION 'resources must be a one-dimensional array' USING ERRCODE = 'invalid_parameter_value';
    ELSIF cardinality(resources) = 0 THEN
        RAISE EXCEPTION 'resources must not be empty' USING ERRCODE = 'invalid_parameter_value';
    ELSIF array_position(resources, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'resources must not contain null elements' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH x IN ARRAY resources LOOP
        PERFORM dlock._text_arg(x, 'resource', 1000);
    END LOOP;
    IF (SELECT count(DISTINCT u COLLATE "C") FROM unnest(resources) u) < cardinality(resources) THEN
        RAISE EXCEPTION 'resources must not contain duplicates' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN resources;
END
$$;

-- _attempt_all: one all-or-nothing attempt at every resource (exclusive,
-- or shared): the fences in the order given, or NULL with nothing taken.
-- A look that takes nothing first, so that a refusal draws no fence; then
-- the attempts, in a subtransaction rolled back when one is refused.
-- Nothing is waited for while something is held, so callers naming the
-- same resources in other orders cannot deadlock.  p_wait: a refusal by
-- this transaction's own transaction-scoped lock raises 40P01 (lock_all
-- would wait for itself).
CREATE OR REPLACE FUNCTION dlock._attempt_all(p_resources text[], p_holder text, p_lease interval, p_role oid,
                                              p_shared boolean, p_delay interval, p_wait boolean,
                                              p_session bigint)
    RETURNS bigint[] LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k text := CASE WHEN p_shared THEN 'shared' ELSE 'exclusive' END;
    x text;
    v text;
    f bigint;
    fences bigint[] := '{}';
BEGIN
    -- [sessions]: a session that has ended takes nothing, also between a
    -- wait's rounds (the looks below may refuse before any attempt).
    IF p_session IS NOT NULL THEN
        PERFORM dlock._session_alive(p_session);
    END IF;
    FOREACH x IN ARRAY p_resources LOOP
        IF coalesce(current_setting('dlock.xact_' || md5(x), true), '') <> '' THEN
            IF p_wait THEN
                RAISE EXCEPTION 'deadlock detected'
                    USING ERRCODE = 'deadlock_detected',
                          DETAIL = format('This transaction holds a transaction-scoped lock on resource "%s" until it ends, and that excludes every lease, the caller''s too.', x),
                          HINT = 'Take the lease in another transaction, or use try_lock_all(), which returns NULL at once.';
            END IF;
            RETURN NULL;
        END IF;
        IF current_setting('transaction_isolation') = 'read committed' THEN
            v := dlock._admit(k, x, p_holder, p_role, NULL, NULL, NULL, false);
            IF v NOT IN ('new', 'reenter') THEN
                RETURN NULL;
            END IF;
        END IF;
    END LOOP;
    BEGIN
        FOREACH x IN ARRAY p_resources LOOP
            IF p_shared THEN
                f := dlock._attempt_kind('shared', x, p_holder, p_lease, p_role, false, NULL, NULL, NULL, p_session);
            ELSE
                f := dlock._attempt(x, p_holder, p_lease, p_role, false, p_delay, NULL, p_session);
            END IF;
            IF f IS NULL THEN
                RAISE SQLSTATE 'DL003';
            END IF;
            fences := fences || f;
        END LOOP;
        RETURN fences;
    EXCEPTION WHEN SQLSTATE 'DL003' THEN
        RETURN NULL;
    END;
END
$$;
-- 1.0's signature, for a wait an upgrade finds in progress: leased.
CREATE OR REPLACE FUNCTION dlock._attempt_all(p_resources text[], p_holder text, p_lease interval, p_role oid,
                                              p_shared boolean, p_delay interval, p_wait boolean)
    RETURNS bigint[] LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._attempt_all(p_resources, p_holder, p_lease, p_role, p_shared, p_delay, p_wait, NULL)
$$;

CREATE OR REPLACE FUNCTION dlock.try_lock_all(resources text[],
                                              holder text DEFAULT dlock.session_holder(),
                                              lease interval DEFAULT NULL,
                                              shared boolean DEFAULT false,
                                              session bigint DEFAULT NULL)
    RETURNS bigint[] LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    l interval;
    s boolean;
    d interval;
    ok boolean;
    s_ttl interval;
BEGIN
    -- [sessions]: the session's holder and ttl (sessions.sql); first, since
    -- holder may be NULL with a session.
    IF try_lock_all.session IS NOT NULL THEN
        SELECT x.holder, x.ttl INTO holder, s_ttl FROM dlock._session_use(try_lock_all.session, holder, lease) x;
    END IF;
    resources := dlock._resources_arg(resources);
    holder := dlock._text_arg(holder, 'holder', 255);
    l := dlock._lease(lease);
    s := dlock._bool_arg(shared, 'shared');
    d := dlock._lock_delay(NULL);
    ok := dlock._writable('dlock.try_lock_all()');
    RETURN dlock._attempt_all(resources, holder, coalesce(s_ttl, l), dlock._role(), s, d, false,
                              try_lock_all.session);
END
$$;
COMMENT ON FUNCTION dlock.try_lock_all(text[], text, interval, boolean, bigint) IS
    'Acquire or re-enter every resource for holder, all or nothing; returns the fences in the order given, or NULL at once with nothing acquired';

CREATE OR REPLACE FUNCTION dlock.lock_all(resources text[],
                                          holder text DEFAULT dlock.session_holder(),
                                          lease interval DEFAULT NULL,
                                          wait interval DEFAULT NULL,
                                          shared boolean DEFAULT false,
                                          session bigint DEFAULT NULL)
    RETURNS bigint[] LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    s_ttl interval;
    l interval;
    s boolean;
    w interval;
    d interval;
    v_role oid;
    deadline timestamptz;
    pause interval := interval '1 millisecond';
    poll interval;
    left_ interval;
    fences bigint[];
    probed boolean := false;     -- the last pause was a probe's wait (_pause)
BEGIN
    -- [sessions]: the session's holder and ttl (sessions.sql); first, since
    -- holder may be NULL with a session.
    IF lock_all.session IS NOT NULL THEN
        SELECT x.holder, x.ttl INTO holder, s_ttl FROM dlock._session_use(lock_all.session, holder, lease) x;
    END IF;
    resources := dlock._resources_arg(resources);
    holder := dlock._text_arg(holder, 'holder', 255);
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    s := dlock._bool_arg(shared, 'shared');
    d := dlock._lock_delay(NULL);
    PERFORM dlock._writable('dlock.lock_all()');
    v_role := dlock._role();
    poll := greatest(dlock._setting('dlock.poll_interval', interval '100 milliseconds'),
                     interval '1 millisecond');
    deadline := clock_timestamp() + w;
    LOOP
        fences := dlock._attempt_all(resources, holder, coalesce(s_ttl, l), v_role, s, d, true, lock_all.session);
        IF fences IS NOT NULL THEN
            RETURN fences;
        END IF;
        IF deadline IS NOT NULL THEN
            left_ := deadline - clock_timestamp();
            IF left_ <= interval '0' THEN
                RETURN NULL;
            END IF;
        END IF;
        PERFORM dlock._may_poll('dlock.lock_all()');
        SELECT * INTO pause, probed FROM dlock._pause(resources, left_, poll, pause, probed);
    END LOOP;
END
$$;
COMMENT ON FUNCTION dlock.lock_all(text[], text, interval, interval, boolean, bigint) IS
    'Like try_lock_all, but waits up to wait (NULL: no limit but statement_timeout) until all can be taken together, holding none meanwhile; NULL on timeout';

-- ---------------------------------------------------------------------------
-- Upgrade from 0.3: a lock() or campaign waiting while the script runs
-- keeps calling 0.3's _try and _wait_loop (its plans name them): they stay,
-- as the exclusive request they were.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION dlock._try(p_resource text, p_holder text, p_lease interval, p_role oid,
                                      p_delay interval, p_ticket bigint)
    RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._try(p_resource, p_holder, p_lease, p_role, p_delay, p_ticket, 'exclusive', NULL, NULL)
$$;
CREATE OR REPLACE FUNCTION dlock._wait_loop(p_resource text, p_holder text, p_lease interval, p_wait interval,
                                            p_fair boolean, p_delay interval, p_fname text)
    RETURNS bigint LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._wait_loop(p_resource, p_holder, p_lease, p_wait, p_fair, p_delay, p_fname, 'exclusive', NULL, NULL)
$$;

REVOKE EXECUTE ON FUNCTION
    dlock._try(text, text, interval, oid, interval, bigint),
    dlock._wait_loop(text, text, interval, interval, boolean, interval, text),
    dlock._bool_arg(boolean, text), dlock._umark(text, text, oid),
    dlock._marks(text, text, oid, boolean, boolean), dlock._crossing(text, text, oid),
    dlock._other_kind(text, boolean),
    dlock._admit(text, text, text, oid, bigint, integer, integer, boolean),
    dlock._gate(text, text, oid, bigint, boolean),
    dlock._attempt_kind(text, text, text, interval, oid, boolean, bigint, integer, integer),
    dlock._attempt_kind(text, text, text, interval, oid, boolean, bigint, integer, integer, bigint),
    dlock._attempt_all(text[], text, interval, oid, boolean, interval, boolean, bigint),
    dlock._find_held(text, text, oid, boolean, text), dlock._end_held(text, text, bigint, text),
    dlock._unlock_held(text, text, oid, bigint),
    dlock._renew_held(text, text, oid, boolean, interval, bigint),
    dlock._unlock_all_held(text, oid), dlock._reap_held(), dlock._break_held(text),
    dlock._current_held(text, bigint, boolean), dlock._permits_args(integer, integer),
    dlock._resources_arg(text[]),
    dlock._attempt_all(text[], text, interval, oid, boolean, interval, boolean)
    FROM PUBLIC;
