/*
 * portable/views.sql: what users read of the holdings and the fair queue,
 * the views dlock.locks (every holding, of every kind) and dlock.queue
 * (live client tickets), SELECT granted to PUBLIC, and withdraw (a
 * client-side waiter gives up its ticket).  Part of dlock.sql, which
 * includes it (\ir) inside its transaction after xact.sql (the views
 * after the tables they read): run dlock.sql, not this file.
 *
 * Shared state: the views only read (they run as their owner, the
 * installing role, over tables closed to PUBLIC); withdraw, SECURITY
 * DEFINER, deletes the holder's ticket of the caller's role (a
 * superuser's: of any role) from dlock.tickets, one DELETE.
 */
-- Current holdings; expired ones stay listed (expired = true) until reaped
-- or taken over.  available_at is when the resource becomes available to
-- others if the holding is not released first (its expiry plus its
-- lock-delay); a free resource still under lock-delay stays listed, with a
-- NULL holder, until then (the columns of the C extension's 0.3 SQL).
-- session ([sessions], 1.1): the holding's session, NULL for a leased
-- one; a session's holding shows its session's ttl, renewal and expiry.
CREATE OR REPLACE VIEW dlock.locks AS
    SELECT l.resource, l.holder, l.count, l.fence, CASE WHEN l.session IS NULL THEN l.lease ELSE l.s_ttl END AS lease,
           l.acquired_at, CASE WHEN l.session IS NULL THEN l.renewed_at ELSE l.s_renewed END AS renewed_at,
           l.x_exp AS expires_at,
           l.owner::pg_catalog.regrole AS owner,
           l.x_exp OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           CASE WHEN l.holder IS NOT NULL
                THEN l.x_exp OPERATOR(pg_catalog.+)
                     COALESCE(d.lock_delay, '0'::pg_catalog.interval)
                ELSE d.available_at END AS available_at,
           v.value,
           CASE WHEN l.holder IS NOT NULL THEN 'exclusive' END::pg_catalog.text AS mode,
           NULL::pg_catalog.int4 AS permits,
           NULL::pg_catalog.int4 AS max_permits,
           l.session
      FROM (SELECT x.resource, x.holder, x.count, x.fence, x.lease, x.acquired_at, x.renewed_at, x.owner,
                   xs.session, y.ttl AS s_ttl, y.renewed_at AS s_renewed,
                   CASE WHEN xs.session IS NULL THEN x.expires_at
                        ELSE COALESCE(y.expires_at, '-infinity'::pg_catalog.timestamptz) END AS x_exp
              FROM dlock.leases x
              CROSS JOIN LATERAL (SELECT CASE WHEN x.holder IS NOT NULL THEN x.session END AS session) xs
              LEFT JOIN dlock.session_rows y ON y.id OPERATOR(pg_catalog.=) xs.session) l
      LEFT JOIN dlock.delays d
        ON d.resource OPERATOR(pg_catalog.=) l.resource
       AND d.fence OPERATOR(pg_catalog.=) l.fence
      LEFT JOIN dlock.holding_values v
        ON v.resource OPERATOR(pg_catalog.=) l.resource
       AND v.fence OPERATOR(pg_catalog.=) l.fence
       AND l.holder IS NOT NULL
     WHERE l.holder IS NOT NULL
        OR d.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
    UNION ALL
    SELECT s.resource, s.holder, s.count, s.fence, s.lease,
           s.acquired_at, s.renewed_at, s.x_exp AS expires_at,
           s.owner::pg_catalog.regrole AS owner,
           s.x_exp OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           s.x_exp AS available_at,
           NULL::pg_catalog.text AS value,
           'shared'::pg_catalog.text AS mode,
           NULL::pg_catalog.int4 AS permits,
           NULL::pg_catalog.int4 AS max_permits,
           s.session
      FROM (SELECT x.resource, x.holder, x.count, x.fence, x.owner, x.acquired_at, x.session,
                   CASE WHEN x.session IS NULL THEN x.lease ELSE y.ttl END AS lease,
                   CASE WHEN x.session IS NULL THEN x.renewed_at ELSE y.renewed_at END AS renewed_at,
                   CASE WHEN x.session IS NULL THEN x.expires_at
                        ELSE COALESCE(y.expires_at, '-infinity'::pg_catalog.timestamptz) END AS x_exp
              FROM dlock.shares x
              LEFT JOIN dlock.session_rows y ON y.id OPERATOR(pg_catalog.=) x.session) s
    UNION ALL
    SELECT p.resource, p.holder, p.count, p.fence, p.lease,
           p.acquired_at, p.renewed_at, p.x_exp AS expires_at,
           p.owner::pg_catalog.regrole AS owner,
           p.x_exp OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           p.x_exp AS available_at,
           NULL::pg_catalog.text AS value,
           'semaphore'::pg_catalog.text AS mode,
           p.permits,
           p.max_permits,
           p.session
      FROM (SELECT x.resource, x.holder, x.count, x.fence, x.owner, x.acquired_at, x.session,
                   x.permits, x.max_permits,
                   CASE WHEN x.session IS NULL THEN x.lease ELSE y.ttl END AS lease,
                   CASE WHEN x.session IS NULL THEN x.renewed_at ELSE y.renewed_at END AS renewed_at,
                   CASE WHEN x.session IS NULL THEN x.expires_at
                        ELSE COALESCE(y.expires_at, '-infinity'::pg_catalog.timestamptz) END AS x_exp
              FROM dlock.permits x
              LEFT JOIN dlock.session_rows y ON y.id OPERATOR(pg_catalog.=) x.session) p;
COMMENT ON VIEW dlock.locks IS
    'Current holdings, one row per holding (mode exclusive, shared or semaphore); an expired lease stays listed (expired = true) until it is reaped or taken over';
-- Only when this run made it: a re-run keeps the DBA's grants (dlock.sql).
DO $grant$
BEGIN
    IF pg_catalog.current_setting('dlock_portable.new_locks') OPERATOR(pg_catalog.=) 'true' THEN
        GRANT SELECT ON dlock.locks TO PUBLIC;
    END IF;
END
$grant$;

-- dlock.queue: every live client ticket, position 1 = served next.  A
-- session waiting in lock() holds its ticket as an advisory lock and is
-- not listed (as in the C extension without shared_preload_libraries);
-- pid is always NULL.
CREATE OR REPLACE VIEW dlock.queue AS
    SELECT t.resource, t.holder,
           pg_catalog.row_number() OVER (PARTITION BY t.resource ORDER BY t.ticket) AS "position",
           t.queued_at, t.expires_at, t.owner::pg_catalog.regrole AS owner,
           t.ticket, NULL::integer AS pid
      FROM dlock.tickets t
     WHERE t.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
COMMENT ON VIEW dlock.queue IS
    'Every live client-side fair-queue ticket, position 1 = served next (sessions waiting in lock() are not listed)';
-- Only when this run made it: a re-run keeps the DBA's grants (dlock.sql).
DO $grant$
BEGIN
    IF pg_catalog.current_setting('dlock_portable.new_queue') OPERATOR(pg_catalog.=) 'true' THEN
        GRANT SELECT ON dlock.queue TO PUBLIC;
    END IF;
END
$grant$;

CREATE OR REPLACE FUNCTION dlock.withdraw(resource text,
                                          holder text DEFAULT dlock.session_holder())
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    c record;
    n integer;
    live boolean := false;
    other oid;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    PERFORM dlock._writable('dlock.withdraw()');
    c := dlock._caller();
    -- The caller's role's ticket (a superuser without one: every other
    -- role's of that holder); a lapsed one goes too, but does not count.
    WITH d AS (DELETE FROM dlock.tickets t
                WHERE t.resource = withdraw.resource AND t.holder = withdraw.holder
                  AND (t.owner = c.roleid::regrole
                       OR (c.is_super AND NOT EXISTS
                           (SELECT FROM dlock.tickets o
                             WHERE o.resource = withdraw.resource AND o.holder = withdraw.holder
                               AND o.owner = c.roleid::regrole)))
               RETURNING t.expires_at)
    SELECT coalesce(bool_or(d.expires_at > clock_timestamp()), false) INTO live FROM d;
    IF live THEN
        RETURN true;
    END IF;
    IF NOT c.is_super THEN
        SELECT t.owner INTO other FROM dlock.tickets t
         WHERE t.resource = withdraw.resource AND t.holder = withdraw.holder
           AND t.owner <> c.roleid::regrole AND t.expires_at > clock_timestamp()
         LIMIT 1;
        IF other IS NOT NULL THEN
            RAISE EXCEPTION 'permission denied to withdraw a ticket taken by role "%"', other::regrole::text
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'Only the role that took a ticket, or a superuser, can withdraw it.';
        END IF;
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION dlock.withdraw(text, text) IS
    'The holder gives up its ticket in resource''s fair queue at once (a client-side waiter that stops waiting); false if it had none; 42501 for another role''s';
