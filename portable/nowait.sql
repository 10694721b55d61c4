/*
 * portable/nowait.sql: what keeps dlock's calls from waiting on a lock
 * another session holds (issue 33), and from trusting an advisory lock a
 * role without rights on dlock may hold (issue 35): _held (does this
 * session hold an advisory lock), _vxid, _proof, _prove and _proven (a
 * wait's marks and tickets, proven by a second key that only dlock can
 * compute), _let_go (a wait's session-level advisory locks given back,
 * wherever a cancel cut it), _insert_row (a resource's row inserted
 * without waiting for another transaction's change of that row).  Part
 * of dlock.sql, which includes it (\ir) inside its transaction after
 * helpers.sql: run dlock.sql, not this file.
 *
 * Shared state: none of its own.  Any role can take any advisory key, so
 * dlock takes advisory locks only with the pg_try_* functions, and none
 * of them guards a resource: its row locks (on its own tables, which
 * other roles cannot lock) do.  A wait's advisory locks only tell others
 * that it waits, and count only when proven (_proven).
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

-- _vxid: this session's virtual transaction ID, as pg_locks shows it on
-- every lock the session holds (a session-level one too) while this
-- transaction lasts.  PostgreSQL never gives a virtual transaction ID
-- twice in a server's life (the local part is kept across backends).
CREATE OR REPLACE FUNCTION dlock._vxid()
    RETURNS text LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT x.virtualtransaction FROM pg_catalog.pg_locks x
     WHERE x.locktype OPERATOR(pg_catalog.=) 'virtualxid'
       AND x.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
     LIMIT 1
$$;

-- _proof: the proof key of the wait mark (c, o) (inlined in _proven:
-- change them together) (a two-key advisory lock:
-- a ticket, the fair-waiters, writer-waits or upgrade mark) held by the
-- transaction p_vxid: 64 bits of an md5 keyed by the seal's secret, which
-- only the installing role can read.  A role without rights on dlock can
-- take the mark's keys but cannot compute the proof, and cannot replay one
-- it sees in pg_locks: it is bound to the waiter's virtual transaction.
CREATE OR REPLACE FUNCTION dlock._proof(c integer, o integer, p_vxid text)
    RETURNS bigint LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(
                s.secret OPERATOR(pg_catalog.||) ':wait:' OPERATOR(pg_catalog.||) c::text
                OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) o::text
                OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) p_vxid
                OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) s.secret), 1, 16))::pg_catalog.bit(64)::bigint
      FROM dlock.fence_epoch_seal s
$$;

-- _prove: this session has just taken the wait mark (c, o): take its
-- proof (shared, without waiting).  false if it could not (someone holds
-- that 64-bit key exclusive): the mark then counts for nobody, which costs
-- the wait its place, never another caller's progress.
CREATE OR REPLACE FUNCTION dlock._prove(c integer, o integer)
    RETURNS boolean LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT pg_catalog.pg_try_advisory_lock_shared(dlock._proof(c, o, dlock._vxid()))
$$;

-- _proven: the wait marks (c, o) held in p_mode by other sessions (o NULL:
-- any second key but 0) that hold their proof too; their second keys.
-- A mark without its proof is someone else's advisory lock: ignored.
CREATE OR REPLACE FUNCTION dlock._proven(c integer, o integer, p_mode text)
    RETURNS SETOF oid LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    WITH l AS MATERIALIZED (
        SELECT x.pid, x.classid, x.objid, x.objsubid, x.mode, x.virtualtransaction
          FROM pg_catalog.pg_locks x
         WHERE x.locktype OPERATOR(pg_catalog.=) 'advisory' AND x.granted
           AND x.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
           AND x.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                  WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())),
    -- _proof inlined (one call per mark would cost ~15 us each, and a
    -- role may hold thousands of marks): it must compute what _proof does.
    m AS (
        SELECT l.pid, l.objid,
               ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(
                    s.secret OPERATOR(pg_catalog.||) ':wait:' OPERATOR(pg_catalog.||) c::text
                    OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) (l.objid::bigint::pg_catalog.bit(32)::integer)::text
                    OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) l.virtualtransaction
                    OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) s.secret), 1, 16))::pg_catalog.bit(64)::bigint AS p
          FROM l, dlock.fence_epoch_seal s
         WHERE l.objsubid OPERATOR(pg_catalog.=) 2 AND l.mode OPERATOR(pg_catalog.=) p_mode
           AND l.classid OPERATOR(pg_catalog.=) c::pg_catalog.bit(32)::bigint::pg_catalog.oid
           AND CASE WHEN o IS NULL THEN l.objid OPERATOR(pg_catalog.<>) 0::pg_catalog.oid
                    ELSE l.objid OPERATOR(pg_catalog.=) o::pg_catalog.bit(32)::bigint::pg_catalog.oid END),
    -- The 64-bit keys held (proofs or not), as one bigint each: a hash
    -- join, not a scan of every lock for every mark (a role may hold
    -- thousands of either).
    k AS MATERIALIZED (
        SELECT l.pid, (l.classid::bigint OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) l.objid::bigint AS key
          FROM l
         WHERE l.objsubid OPERATOR(pg_catalog.=) 1)
    SELECT m.objid FROM m
     WHERE EXISTS (SELECT FROM k WHERE k.pid OPERATOR(pg_catalog.=) m.pid AND k.key OPERATOR(pg_catalog.=) m.p)
$$;

-- _proven_mark: does another session wait with the mark (c, o) (the
-- writer-waits or an upgrade mark), as its proof says?  The proof alone
-- counts, held or not the mark's own keys: a role without rights on dlock
-- may hold those exclusive, so that the waiter cannot take them.
CREATE OR REPLACE FUNCTION dlock._proven_mark(c integer, o integer)
    RETURNS boolean LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    WITH l AS MATERIALIZED (
        SELECT x.classid, x.objid, x.virtualtransaction
          FROM pg_catalog.pg_locks x
         WHERE x.locktype OPERATOR(pg_catalog.=) 'advisory' AND x.granted
           AND x.objsubid OPERATOR(pg_catalog.=) 1 AND x.mode OPERATOR(pg_catalog.=) 'ShareLock'
           AND x.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()
           AND x.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                  WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()))
    -- One proof computed per transaction (not per lock: a session may
    -- hold thousands of keys), then looked up among its locks.
    SELECT EXISTS (SELECT FROM (SELECT DISTINCT l.virtualtransaction FROM l) v,
                               LATERAL (SELECT dlock._proof(c, o, v.virtualtransaction) AS p) q
                    WHERE EXISTS (SELECT FROM l y
                                   WHERE y.virtualtransaction OPERATOR(pg_catalog.=) v.virtualtransaction
                                     AND y.classid::bigint OPERATOR(pg_catalog.=) ((q.p OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)
                                     AND y.objid::bigint OPERATOR(pg_catalog.=) (q.p OPERATOR(pg_catalog.&) 4294967295)))
$$;

-- _unprove: give back this session's proof of the wait mark (c, o) in its
-- transaction p_vxid (_vxid), if it holds it (the mark itself is given
-- back by the caller).
CREATE OR REPLACE FUNCTION dlock._unprove(c integer, o integer, p_vxid text)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    p bigint := dlock._proof(c, o, p_vxid);
BEGIN
    IF EXISTS (SELECT FROM pg_locks x
                WHERE x.locktype = 'advisory' AND x.pid = pg_backend_pid() AND x.granted
                  AND x.objsubid = 1 AND x.mode = 'ShareLock'
                  AND x.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                  AND x.classid::bigint = ((p >> 32) & 4294967295) AND x.objid::bigint = (p & 4294967295)) THEN
        RETURN pg_advisory_unlock_shared(p);
    END IF;
    RETURN false;
END
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
    v text;
    ok boolean;
BEGIN
    IF p_ticket IS NOT NULL AND p_ticket::bit(32)::integer <> 0
       AND dlock._held(k, p_ticket::bit(32)::integer, 'ExclusiveLock') THEN
        ok := pg_advisory_unlock(k, p_ticket::bit(32)::integer);
    END IF;
    IF p_ticket IS NOT NULL AND p_ticket::bit(32)::integer <> 0 THEN
        v := dlock._vxid();
        ok := dlock._unprove(k, p_ticket::bit(32)::integer, v);
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
        v := coalesce(v, dlock._vxid());
        ok := dlock._unprove(1684828006, k, v);
        ok := dlock._unprove(1684828007, u, v);
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
-- 1 ms, and the attempt is then busy.  Another acquirer inserting it at
-- the same time is such a transaction: one of the two inserts it, the
-- other is busy (or, when the first has committed, finds the row: false).
-- lock_timeout also ends a wait for no row at all: another backend
-- extending the table or its index (most likely what refused a new
-- resource on a loaded machine, Go's TestSessionKeepalivePaused in CI).
-- So a timed-out insert is tried again, up to 10 times in about 20 ms,
-- unless the row has come in meanwhile.
CREATE OR REPLACE FUNCTION dlock._insert_row(p_resource text, p_holder text, p_role oid, p_fence bigint,
                                             p_lease interval, p_now timestamptz, p_exp timestamptz)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '1ms' AS $$
BEGIN
    FOR i IN 1 .. 10 LOOP
        BEGIN
            INSERT INTO dlock.leases (resource, holder, owner, count, fence, lease, acquired_at, renewed_at, expires_at)
                 VALUES (p_resource, p_holder, p_role::regrole, CASE WHEN p_holder IS NULL THEN 0 ELSE 1 END,
                         p_fence, p_lease, p_now, p_now, p_exp)
            ON CONFLICT (resource) DO NOTHING;
            RETURN FOUND;
        EXCEPTION WHEN lock_not_available THEN
            IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = p_resource) THEN
                RETURN false;
            END IF;
        END;
        PERFORM pg_sleep(0.001);
    END LOOP;
    RETURN false;
END
$$;
