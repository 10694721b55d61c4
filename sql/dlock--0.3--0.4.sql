/*
 * dlock--0.3--0.4.sql: upgrade from 0.3 to 0.4: shared (read-write) locks.
 * try_lock and lock take shared => true; a resource then has any number of
 * shared holdings (table dlock.shares, one row per holder and role, each
 * with its own count, lease, fence and owner) or one exclusive holding (its
 * row in dlock.leases, as before); dlock.locks shows one row per holding
 * with its mode.  Every holding and fence of the 0.3 SQL is an exclusive
 * one and stays where it is.  The 0.4 library runs under the 0.3 SQL (and
 * older) until ALTER EXTENSION dlock UPDATE: shared => true is only
 * reached through the functions created here.
 *
 * Like 0.2's and 0.3's, nothing here locks dlock.leases
 * (test/t/090_upgrade.pl).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.4'" to load this file. \quit

-- ---- Shared holdings ----
-- The resource's row in dlock.leases stays its anchor: its exclusive
-- holding, or none (holder NULL) while only shared holders have it.
CREATE TABLE dlock.shares (
    resource    text COLLATE "C" NOT NULL,
    holder      text COLLATE "C" NOT NULL,
    owner       regrole NOT NULL,
    count       integer NOT NULL,
    fence       bigint NOT NULL,
    lease       interval NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (resource, holder, owner)
) WITH (fillfactor = 50);
REVOKE ALL ON dlock.shares FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('dlock.shares', '');
COMMENT ON TABLE dlock.shares IS
    'Shared holdings (try_lock(..., shared => true)), one per holder and role; read them through dlock.locks';

-- ---- try_lock and lock take shared ----
-- As in 0.2: a new parameter cannot be added in place, and an overload
-- would make try_lock('r') ambiguous, so the functions are replaced.
DROP FUNCTION dlock.try_lock(text, text, interval, boolean, interval);
CREATE FUNCTION dlock.try_lock(resource text,
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL,
                               fair boolean DEFAULT false,
                               lock_delay interval DEFAULT NULL,
                               shared boolean DEFAULT false)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_lock' LANGUAGE C VOLATILE;

DROP FUNCTION dlock.lock(text, text, interval, interval, boolean, interval);
CREATE FUNCTION dlock.lock(resource text,
                           holder text DEFAULT dlock.session_holder(),
                           lease interval DEFAULT NULL,
                           wait interval DEFAULT NULL,
                           fair boolean DEFAULT false,
                           lock_delay interval DEFAULT NULL,
                           shared boolean DEFAULT false)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_lock' LANGUAGE C VOLATILE;

COMMENT ON FUNCTION dlock.try_lock(text, text, interval, boolean, interval, boolean) IS
    'Acquire or re-enter resource for holder with a lease (shared => true: alongside other shared holders); returns the fence, or NULL at once if it is not available';
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval, boolean, interval, boolean) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout), in the fair queue with fair => true; NULL on timeout';

-- ---- dlock.locks: one row per holding, with its mode ----
-- Columns can only be added at the end of a view.
CREATE OR REPLACE VIEW dlock.locks AS
    SELECT l.resource, l.holder, l.count, l.fence, l.lease,
           l.acquired_at, l.renewed_at, l.expires_at,
           l.owner::pg_catalog.regrole AS owner,
           l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           CASE WHEN l.holder IS NOT NULL
                THEN l.expires_at OPERATOR(pg_catalog.+)
                     COALESCE(d.lock_delay, '0'::pg_catalog.interval)
                ELSE d.available_at END AS available_at,
           v.value,
           CASE WHEN l.holder IS NOT NULL THEN 'exclusive' END::pg_catalog.text AS mode
      FROM dlock.leases l
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
           s.acquired_at, s.renewed_at, s.expires_at,
           s.owner::pg_catalog.regrole AS owner,
           s.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           s.expires_at AS available_at,
           NULL::pg_catalog.text AS value,
           'shared'::pg_catalog.text AS mode
      FROM dlock.shares s;
