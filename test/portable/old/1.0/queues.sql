/*
 * portable/queues.sql: who may take a free resource next: lock-delay
 * (_lock_delay, the argument and setting; _delayed, a resource still
 * under one) and the fair queues ([fair]: _fair, _queue_ttl, _qkey, the
 * keys of a resource's queue locks, _ahead, is a live ticket of another
 * ahead, and _queue_up, a client-side waiter's ticket).  Part of
 * dlock.sql, which includes it (\ir) inside its transaction after
 * fences.sql: run dlock.sql, not this file.
 *
 * What protects the shared state: client tickets (dlock.tickets) are
 * written by an attempt (the holder's row locked SKIP LOCKED, never
 * waited for); a ticket of a session waiting in lock() is a session-level
 * advisory lock ((_qkey, ticket), exclusive, with its proof, _prove, and
 * the "fair waiters" mark (_qkey, 0), shared), seen by others in pg_locks
 * and given back with the wait or the session.  Any role can take those
 * keys: a ticket counts only with its proof, and the fair-waiters mark
 * is only a hint that sends callers to look (_ahead).  Lock-delays
 * (dlock.delays) are tied to a holding by its fence and written under the
 * resource's row lock.
 */
-- _lock_delay: the lock_delay argument (NULL: dlock.lock_delay), between 0
-- and 1 hour, without months or days; NULL when it is zero.
CREATE OR REPLACE FUNCTION dlock._lock_delay(lock_delay interval)
    RETURNS interval LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    d interval;
BEGIN
    IF lock_delay IS NULL THEN
        d := dlock._setting('dlock.lock_delay', interval '0');
        IF d < interval '0' OR d > interval '1 hour' OR extract(day FROM d) <> 0
           OR extract(month FROM d) <> 0 OR extract(year FROM d) <> 0 THEN
            RAISE EXCEPTION 'invalid value for parameter "dlock.lock_delay": "%"', current_setting('dlock.lock_delay', true)
                USING ERRCODE = 'invalid_parameter_value', DETAIL = 'It must be between 0 and 1 hour.';
        END IF;
    ELSE
        d := lock_delay;
        IF extract(month FROM d) <> 0 OR extract(year FROM d) <> 0 OR extract(day FROM d) <> 0 THEN
            RAISE EXCEPTION 'lock_delay must be between 0 and 1 hour' USING ERRCODE = 'invalid_parameter_value',
                DETAIL = 'A lock_delay is given in hours, minutes and seconds, not in days or months.';
        END IF;
        IF d < interval '0' OR d > interval '1 hour' THEN
            RAISE EXCEPTION 'lock_delay must be between 0 and 1 hour' USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    RETURN CASE WHEN d > interval '0' THEN d END;
END
$$;

-- _shared_arg: the shared argument of try_lock and lock (22023 when NULL);
-- a lock-delay is for exclusive holdings only (issue 33: the C extension
-- raises the same), so an explicit non-zero lock_delay with shared => true
-- is refused with 22023, and dlock.lock_delay does not apply to shared
-- holdings (nor to semaphores' permits).
CREATE OR REPLACE FUNCTION dlock._shared_arg(shared boolean, lock_delay interval)
    RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF shared IS NULL THEN
        RAISE EXCEPTION 'shared must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF shared AND lock_delay IS NOT NULL AND lock_delay <> interval '0' THEN
        RAISE EXCEPTION 'lock_delay applies to exclusive locks only' USING ERRCODE = 'invalid_parameter_value',
            HINT = 'Leave lock_delay out, or give 0, for a shared lock.';
    END IF;
    RETURN shared;
END
$$;

-- _fair: the fair argument.
CREATE OR REPLACE FUNCTION dlock._fair(fair boolean)
    RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF fair IS NULL THEN
        RAISE EXCEPTION 'fair must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN fair;
END
$$;

-- _queue_ttl: dlock.queue_ttl (default 10s), between 1 ms and 1 hour.
CREATE OR REPLACE FUNCTION dlock._queue_ttl()
    RETURNS interval LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t interval := dlock._setting('dlock.queue_ttl', interval '10 seconds');
BEGIN
    IF t < interval '1 millisecond' OR t > interval '1 hour' OR extract(day FROM t) <> 0
       OR extract(month FROM t) <> 0 OR extract(year FROM t) <> 0 THEN
        RAISE EXCEPTION 'invalid value for parameter "dlock.queue_ttl": "%"', current_setting('dlock.queue_ttl', true)
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'It must be between 1 ms and 1 hour.';
    END IF;
    RETURN t;
END
$$;

-- _qkey: the first key of the resource's queue locks (two-key advisory
-- locks): 32 bits of its md5, never dlock's own first keys (1684828003,
-- 1684828005, and kinds.sql's 1684828006 and 1684828007).
-- (_qkey, 0) is the "fair waiters" mark, held shared by every session
-- waiting in lock() with a ticket; (_qkey, low 32 bits of the ticket) is
-- that ticket, held exclusive.  Two resources whose keys collide only
-- hold each other's newcomers off while a waiter of the other waits.
CREATE OR REPLACE FUNCTION dlock._qkey(resource text)
    RETURNS integer LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(resource), 17, 8))::bit(32)::integer;
BEGIN
    RETURN CASE WHEN k OPERATOR(pg_catalog.=) ANY ('{1684828003,1684828005,1684828006,1684828007}'::integer[])
                THEN 1684828004 ELSE k END;
END
$$;

-- _ahead: is a live ticket of someone else ahead of p_ticket (the caller's
-- in-server ticket, or else its holder's live client ticket; with neither,
-- any ticket)?  In-server tickets are looked up in pg_locks only when the
-- "fair waiters" mark is held (by a waiter, or by anyone: the mark is
-- only a hint), count only when proven (_proven), and are compared by
-- their low 32 bits modulo 2^32 (the live tickets of a resource span far
-- fewer).
CREATE OR REPLACE FUNCTION dlock._ahead(p_resource text, p_holder text, p_role oid, p_ticket bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    mine bigint := p_ticket;
    k integer := dlock._qkey(p_resource);
    mark boolean;
BEGIN
    -- One statement for the client tickets (the holder's own, if any, as
    -- the bound): a resource without tickets costs one index probe.
    IF EXISTS (SELECT FROM dlock.tickets t
                WHERE t.resource = p_resource AND t.expires_at > clock_timestamp()
                  AND t.ticket < coalesce(mine,
                                          (SELECT x.ticket FROM dlock.tickets x
                                            WHERE x.resource = p_resource AND x.holder = p_holder
                                              AND x.owner = p_role AND x.expires_at > clock_timestamp()),
                                          9223372036854775807)) THEN
        RETURN true;
    END IF;
    -- Tried and given back in one expression: no cancel between.
    IF pg_try_advisory_lock(k, 0) AND pg_advisory_unlock(k, 0) THEN
        RETURN false;       -- nobody else waits in lock() with a ticket
    END IF;
    IF mine IS NULL AND p_holder IS NOT NULL THEN
        SELECT t.ticket INTO mine FROM dlock.tickets t
         WHERE t.resource = p_resource AND t.holder = p_holder AND t.owner = p_role
           AND t.expires_at > clock_timestamp();
    END IF;
    -- Only proven tickets (_proven): a role without rights on dlock may
    -- hold any (_qkey, n) itself, and holds nobody off with it.
    RETURN EXISTS (SELECT FROM dlock._proven(k, NULL, 'ExclusiveLock') x(objid)
                    WHERE mine IS NULL
                       OR ((x.objid::bigint - (mine & 4294967295) + 6442450944) % 4294967296) - 2147483648 < 0);
END
$$;

-- _queue_up: a client-side fair attempt that did not get the lock takes a
-- ticket, or keeps its live one for another dlock.queue_ttl.  Never waits:
-- the holder's ticket row is locked FOR UPDATE SKIP LOCKED, and one
-- another transaction of the same holder is writing or deleting (another
-- attempt, its acquisition, its withdraw) is left to it, as the C
-- extension's queue.c leaves it; a new row is inserted with a 1 ms
-- lock_timeout (a conflicting uncommitted insert or delete: left too).
-- (Before issue 33 a two-key advisory lock (1684828005, ...) guarded the
-- row, which any role could hold, and the UPDATE waited for a withdraw.)
CREATE OR REPLACE FUNCTION dlock._queue_up(p_resource text, p_holder text, p_role oid)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '1ms' AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    ttl interval := dlock._queue_ttl();
    t dlock.tickets%ROWTYPE;
BEGIN
    SELECT * INTO t FROM dlock.tickets x
     WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = p_role::regrole
       FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF EXISTS (SELECT FROM dlock.tickets x
                    WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = p_role::regrole) THEN
            RETURN;     -- another transaction of the holder's has it
        END IF;
        INSERT INTO dlock.tickets (resource, ticket, holder, owner, queued_at, expires_at)
             VALUES (p_resource, nextval('dlock.ticket_seq'), p_holder, p_role::regrole, v_now, v_now + ttl);
        RETURN;
    END IF;
    IF t.expires_at > v_now THEN
        UPDATE dlock.tickets x SET expires_at = v_now + ttl
         WHERE x.resource = t.resource AND x.ticket = t.ticket;
    ELSE
        -- A lapsed ticket: a new one, at the back of the queue.
        UPDATE dlock.tickets x SET ticket = nextval('dlock.ticket_seq'), queued_at = v_now, expires_at = v_now + ttl
         WHERE x.resource = t.resource AND x.ticket = t.ticket;
    END IF;
EXCEPTION WHEN lock_not_available OR unique_violation OR serialization_failure THEN
    RETURN;         -- another transaction of the holder's is writing it
END
$$;

-- _delayed: is the resource of this (free or expired) row still under a
-- lock-delay?  (Its rule for a free row is copied in try_lock's fast path,
-- core.sql, and so are _ahead's for tickets and the fair-waiters mark:
-- change them together; 080_fast.t's twins compare them.)
CREATE OR REPLACE FUNCTION dlock._delayed(r dlock.leases, p_now timestamptz)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce((SELECT CASE WHEN r.holder IS NOT NULL
                                 THEN r.expires_at OPERATOR(pg_catalog.+) d.lock_delay
                                 ELSE d.available_at END OPERATOR(pg_catalog.>) p_now
                       FROM dlock.delays d
                      WHERE d.resource OPERATOR(pg_catalog.=) r.resource
                        AND d.fence OPERATOR(pg_catalog.=) r.fence), false);
END
$$;
