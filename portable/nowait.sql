/*
 * portable/nowait.sql: what keeps dlock's calls from waiting on a lock
 * another session holds (issue 33): _held (does this session hold an
 * advisory lock), _let_go (a wait's session-level advisory locks given
 * back, wherever a cancel cut it), _insert_row (a resource's row inserted
 * without waiting for another transaction's change of that row).  Part
 * of dlock.sql, which includes it (\ir) inside its transaction after
 * helpers.sql: run dlock.sql, not this file.
 *
 * Shared state: none of its own.  Any role can take any advisory key, so
 * dlock takes advisory locks only with the pg_try_* functions; its row
 * locks are on its own tables, which other roles cannot lock.
 */
-- _held: does this session hold the two-key advisory lock (k1, k2) in
-- p_mode ('ExclusiveLock' or 'ShareLock')?  Read from pg_locks, so it
-- tells the truth also after a cancel cut a function between taking a
-- lock and noting it.
CREATE OR REPLACE FUNCTION dlock._held(k1 integer, k2 integer, p_mode text)
    RETURNS boolean LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT FROM pg_catalog.pg_locks x
                    WHERE x.locktype OPERATOR(pg_catalog.=) 'advisory'
                      AND x.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
                      AND x.objsubid OPERATOR(pg_catalog.=) 2 AND x.granted
                      AND x.mode OPERATOR(pg_catalog.=) p_mode
                      AND x.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                             WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                      AND x.classid OPERATOR(pg_catalog.=) k1::pg_catalog.bit(32)::bigint::pg_catalog.oid
                      AND x.objid OPERATOR(pg_catalog.=) k2::pg_catalog.bit(32)::bigint::pg_catalog.oid)
$$;

-- _let_go: a wait in lock() (or campaign, acquire) is over, however it
-- ended: give back the session-level advisory locks it may hold on
-- resource: its ticket (p_ticket, the last one it tried to take), the
-- "fair waiters" mark if it tried to take it (p_fair_mark), and the
-- writer's "writer waits" and "upgrade" marks (kinds.sql) if it tried to
-- take them (p_marks).  Each only if this session holds it (_held): an
-- exception handler does not know how far a cancelled wait had come.
-- What the wait never tried to take stays: the caller's session may hold
-- the same keys itself, outside dlock.
CREATE OR REPLACE FUNCTION dlock._let_go(p_resource text, p_holder text, p_role oid, p_ticket bigint,
                                         p_fair_mark boolean, p_marks boolean)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := dlock._qkey(p_resource);
    u integer;
    ok boolean;
BEGIN
    IF p_ticket IS NOT NULL AND p_ticket::bit(32)::integer <> 0
       AND dlock._held(k, p_ticket::bit(32)::integer, 'ExclusiveLock') THEN
        ok := pg_advisory_unlock(k, p_ticket::bit(32)::integer);
    END IF;
    IF p_fair_mark AND dlock._held(k, 0, 'ShareLock') THEN
        ok := pg_advisory_unlock_shared(k, 0);
    END IF;
    IF p_marks THEN
        u := dlock._umark(p_resource, p_holder, p_role);
        IF dlock._held(1684828006, k, 'ShareLock') THEN
            ok := pg_advisory_unlock_shared(1684828006, k);
        END IF;
        IF dlock._held(1684828007, u, 'ShareLock') THEN
            ok := pg_advisory_unlock_shared(1684828007, u);
        END IF;
    END IF;
    RETURN true;
END
$$;

-- _let_go of four arguments: for waits of issue 33's first version that
-- an upgrade finds in progress (_leave, _marks): gives back all three.
CREATE OR REPLACE FUNCTION dlock._let_go(p_resource text, p_holder text, p_role oid, p_ticket bigint)
    RETURNS boolean LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT dlock._let_go(p_resource, p_holder, p_role, p_ticket, true, true)
$$;

-- _insert_row: insert resource's row in dlock.leases (free when p_holder
-- is NULL, else p_holder's new holding), unless a row is there; false if
-- it could not without waiting.  INSERT ... ON CONFLICT waits for another
-- transaction that is inserting, changing or deleting the conflicting row
-- (an open reap(), or under REPEATABLE READ a row newer than the snapshot
-- that a renewal or release has locked): lock_timeout bounds that wait to
-- 1 ms, and the attempt is then busy.  The caller holds the resource's
-- advisory lock, so no other acquirer is inserting it.
CREATE OR REPLACE FUNCTION dlock._insert_row(p_resource text, p_holder text, p_role oid, p_fence bigint,
                                             p_lease interval, p_now timestamptz, p_exp timestamptz)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '1ms' AS $$
BEGIN
    INSERT INTO dlock.leases (resource, holder, owner, count, fence, lease, acquired_at, renewed_at, expires_at)
         VALUES (p_resource, p_holder, p_role::regrole, CASE WHEN p_holder IS NULL THEN 0 ELSE 1 END,
                 p_fence, p_lease, p_now, p_now, p_exp)
    ON CONFLICT (resource) DO NOTHING;
    RETURN FOUND;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;
