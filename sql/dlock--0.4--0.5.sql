/*
 * dlock--0.4--0.5.sql: upgrade from 0.4 to 0.5.  Each part below is one
 * block: counting semaphores with leased permits (try_acquire, acquire;
 * dlock.shares gets the permit columns, dlock.locks shows the permits).
 * Every holding and fence of the 0.4 SQL stays where it is.  The 0.5
 * library runs under the 0.4 SQL (and older) until ALTER EXTENSION dlock
 * UPDATE: what is new is only reached through the functions created here.
 *
 * Like 0.2's to 0.4's, nothing here locks dlock.leases
 * (test/t/090_upgrade.pl); dlock.shares gets two nullable columns
 * without a default (a change of the catalog only, no rewrite).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.5'" to load this file. \quit

-- [sema] counting semaphores with leased permits: try_acquire, acquire.
-- A semaphore's holding is a row of dlock.shares with its permits and the
-- semaphore's max_permits (both NULL for a shared lock's holding): leased,
-- renewed, fenced, released and reaped like a shared holding.
ALTER TABLE dlock.shares ADD COLUMN permits integer,
                         ADD COLUMN max_permits integer;
COMMENT ON TABLE dlock.shares IS
    'Shared holdings (try_lock(..., shared => true)) and holdings of a semaphore''s permits (try_acquire), one per holder and role; read them through dlock.locks';

CREATE FUNCTION dlock.try_acquire(semaphore text,
                                  holder text,
                                  max_permits integer,
                                  permits integer DEFAULT 1,
                                  lease interval DEFAULT NULL,
                                  fair boolean DEFAULT false)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_acquire' LANGUAGE C VOLATILE;
CREATE FUNCTION dlock.acquire(semaphore text,
                              holder text,
                              max_permits integer,
                              permits integer DEFAULT 1,
                              lease interval DEFAULT NULL,
                              fair boolean DEFAULT false,
                              wait interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_acquire_semaphore' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.try_acquire(text, text, integer, integer, interval, boolean) IS
    'Acquire permits of semaphore for holder (at most max_permits held at once; added to the holder''s holding), with a lease; returns the holding''s fence, or NULL at once if they are not free';
COMMENT ON FUNCTION dlock.acquire(text, text, integer, integer, interval, boolean, interval) IS
    'Like try_acquire, but waits up to wait (NULL: no limit but statement_timeout), in the fair queue with fair => true; NULL on timeout';

-- dlock.locks: a semaphore's holdings have mode 'semaphore', their permits
-- and max_permits (new columns, at the end; NULL for a lock's holdings).
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
           CASE WHEN l.holder IS NOT NULL THEN 'exclusive' END::pg_catalog.text AS mode,
           NULL::pg_catalog.int4 AS permits,
           NULL::pg_catalog.int4 AS max_permits
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
           CASE WHEN s.permits IS NULL THEN 'shared' ELSE 'semaphore' END::pg_catalog.text AS mode,
           s.permits,
           s.max_permits
      FROM dlock.shares s;
-- end [sema]
