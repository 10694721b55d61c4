/*
 * dlock--0.4--0.5.sql: upgrade from 0.4 to 0.5.  Each part below is one
 * block: counting semaphores with leased permits (try_acquire, acquire;
 * table dlock.permits; dlock.locks shows the permits); several resources
 * at once (try_lock_all, lock_all: functions only).  Every holding and
 * fence of the 0.4 SQL stays where it is.  The 0.5 library runs under the
 * 0.4 SQL (and older) until ALTER EXTENSION dlock UPDATE: what is new is
 * only reached through the functions created here.
 *
 * Like 0.2's to 0.4's, nothing here waits for the locks that a waiter in
 * lock() holds on dlock.leases and dlock.shares until its transaction ends
 * (test/t/090_upgrade.pl): only [scale]'s SET (fillfactor) locks
 * dlock.leases, in SHARE UPDATE EXCLUSIVE mode, which does not conflict
 * with them.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.5'" to load this file. \quit

-- [sema] counting semaphores with leased permits: try_acquire, acquire.
-- A semaphore's holdings are rows of dlock.permits: the columns of
-- dlock.shares, and the holding's permits and the semaphore's max_permits.
-- Leased, renewed, fenced, released and reaped like shared holdings.
CREATE TABLE dlock.permits (
    resource    text COLLATE "C" NOT NULL,
    holder      text COLLATE "C" NOT NULL,
    owner       regrole NOT NULL,
    count       integer NOT NULL,
    fence       bigint NOT NULL,
    lease       interval NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    permits     integer NOT NULL,
    max_permits integer NOT NULL,
    PRIMARY KEY (resource, holder, owner)
) WITH (fillfactor = 50);
REVOKE ALL ON dlock.permits FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('dlock.permits', '');
COMMENT ON TABLE dlock.permits IS
    'Holdings of a semaphore''s permits (try_acquire), one per holder and role; read them through dlock.locks';

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
           'shared'::pg_catalog.text AS mode,
           NULL::pg_catalog.int4 AS permits,
           NULL::pg_catalog.int4 AS max_permits
      FROM dlock.shares s
    UNION ALL
    SELECT p.resource, p.holder, p.count, p.fence, p.lease,
           p.acquired_at, p.renewed_at, p.expires_at,
           p.owner::pg_catalog.regrole AS owner,
           p.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           p.expires_at AS available_at,
           NULL::pg_catalog.text AS value,
           'semaphore'::pg_catalog.text AS mode,
           p.permits,
           p.max_permits
      FROM dlock.permits p;
-- end [sema]

-- [scale] per-entity locks at scale (issue 25): a holding's row now goes
-- when the holding ends (unless a lock-delay, a holding value or a queued
-- ticket needs it), so rows are inserted and deleted, as in the naive lock
-- table, rather than kept free and updated in place.  fillfactor 100 (the
-- default) instead of 50: a page that inserts filled only to half never
-- looks full enough for a read to prune it (heap_page_prune_opt), so the
-- deleted rows' space came back only with VACUUM and the heap grew by the
-- churn (61 MB after a minute of pairs on a thousand resources, against 8 MB
-- for the naive table; BENCHMARKS.md).  Re-entries and renewals are still
-- HOT updates once a read has pruned the page.  SET (fillfactor) takes a
-- SHARE UPDATE EXCLUSIVE lock, which the locks of lock() waiters do not
-- conflict with, rewrites nothing, and applies to pages filled from now on.
ALTER TABLE dlock.leases SET (fillfactor = 100);
-- end [scale]

-- [multi] several resources at once: try_lock_all and lock_all.
-- New functions only: no table changes, nothing held is touched.
CREATE FUNCTION dlock.try_lock_all(resources text[],
                                   holder text DEFAULT dlock.session_holder(),
                                   lease interval DEFAULT NULL,
                                   shared boolean DEFAULT false)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'dlock_try_lock_all' LANGUAGE C VOLATILE;
CREATE FUNCTION dlock.lock_all(resources text[],
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL,
                               shared boolean DEFAULT false,
                               wait interval DEFAULT NULL)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'dlock_lock_all' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.try_lock_all(text[], text, interval, boolean) IS
    'Acquire or re-enter every resource for holder, all or nothing; returns the fences in the order given, or NULL at once with nothing acquired';
COMMENT ON FUNCTION dlock.lock_all(text[], text, interval, boolean, interval) IS
    'Like try_lock_all, but waits up to wait (NULL: no limit but statement_timeout) until all can be taken together, holding none meanwhile; NULL on timeout';
-- end [multi]
