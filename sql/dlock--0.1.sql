/*
 * dlock--0.1.sql: install script for dlock 0.1.
 *
 * Objects users never touch directly (the lease table, the fence sequence,
 * the epoch row) are owned by the installing superuser and closed to PUBLIC;
 * every change goes through the C functions below, which switch to the
 * extension owner only around their own fully qualified SPI statements.
 */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION dlock" to load this file. \quit

-- Refuse a database where the portable edition (portable/dlock.sql) is
-- installed, before anything changes: its schema dlock, marked by its
-- table dlock.portable, holds live holdings this script would collide
-- with.  Every install walks through this script first.
DO $refuse$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                WHERE n.nspname OPERATOR(pg_catalog.=) 'dlock'
                  AND c.relname OPERATOR(pg_catalog.=) 'portable') THEN
        RAISE EXCEPTION 'the dlock portable edition is installed in database "%"', pg_catalog.current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The C extension and the portable edition (portable/dlock.sql) cannot share a database.',
                  HINT = 'Keep using the portable edition here, or DROP SCHEMA dlock CASCADE first (its holdings go with it).';
    END IF;
END
$refuse$;

/*
 * One row per resource ever locked.  A release keeps the row (holder NULL)
 * so that the next acquisition is a HOT update in place; only the primary
 * key is indexed and it never changes.  fillfactor leaves room on each page
 * for those updates.
 */
CREATE TABLE dlock.leases (
    resource    text COLLATE "C" NOT NULL PRIMARY KEY,
    holder      text COLLATE "C",
    owner       regrole,   -- regrole, so that a dump restores it by name
    count       integer NOT NULL DEFAULT 0,
    fence       bigint,
    lease       interval,
    acquired_at timestamptz,
    renewed_at  timestamptz,
    expires_at  timestamptz,
    released_at timestamptz,
    took_over   boolean NOT NULL DEFAULT false  -- last acquisition took over an expired lease
) WITH (fillfactor = 50);

/*
 * Fence counter: the low 44 bits of every fence.  CACHE 1 so that no backend
 * sits on a block of values, NO CYCLE so it can never wrap, owned by nothing.
 */
CREATE SEQUENCE dlock.fence_seq AS bigint
    MINVALUE 1 MAXVALUE 17592186044415 START 1 CACHE 1 NO CYCLE;

/*
 * The fence epoch (high bits) is the WAL insertion timeline plus base.  base
 * moves when the data is found in a cluster with another system identifier
 * (a dump restored, pg_upgrade), so epochs keep increasing across that too.
 */
CREATE TABLE dlock.epoch (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    sysid      text NOT NULL,
    base       integer NOT NULL,
    last_epoch integer NOT NULL
);

REVOKE ALL ON dlock.leases, dlock.fence_seq, dlock.epoch FROM PUBLIC;

-- Keep locks, the fence counter and the epoch in pg_dump output.
SELECT pg_catalog.pg_extension_config_dump('dlock.leases', '');
SELECT pg_catalog.pg_extension_config_dump('dlock.fence_seq', '');
SELECT pg_catalog.pg_extension_config_dump('dlock.epoch', '');

GRANT USAGE ON SCHEMA dlock TO PUBLIC;

-- Internal: draws a fence inside dlock's own statements.
CREATE FUNCTION dlock._next_fence() RETURNS bigint
    AS 'MODULE_PATHNAME', 'dlock_next_fence_sql' LANGUAGE C VOLATILE;
REVOKE EXECUTE ON FUNCTION dlock._next_fence() FROM PUBLIC;

CREATE FUNCTION dlock.session_holder() RETURNS text
    AS 'MODULE_PATHNAME', 'dlock_session_holder' LANGUAGE C STABLE PARALLEL SAFE;

CREATE FUNCTION dlock.channel(resource text) RETURNS text
    AS 'MODULE_PATHNAME', 'dlock_channel' LANGUAGE C IMMUTABLE PARALLEL SAFE;

CREATE FUNCTION dlock.try_lock(resource text,
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_lock' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.lock(resource text,
                           holder text DEFAULT dlock.session_holder(),
                           lease interval DEFAULT NULL,
                           wait interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_lock' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.unlock(resource text,
                             holder text DEFAULT dlock.session_holder(),
                             fence bigint DEFAULT NULL)
    RETURNS integer AS 'MODULE_PATHNAME', 'dlock_unlock' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.renew(resource text,
                            holder text DEFAULT dlock.session_holder(),
                            lease interval DEFAULT NULL,
                            fence bigint DEFAULT NULL)
    RETURNS timestamptz AS 'MODULE_PATHNAME', 'dlock_renew' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.unlock_all(holder text DEFAULT dlock.session_holder())
    RETURNS integer AS 'MODULE_PATHNAME', 'dlock_unlock_all' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.reap() RETURNS integer
    AS 'MODULE_PATHNAME', 'dlock_reap' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock."check"(resource text, fence bigint) RETURNS boolean
    AS 'MODULE_PATHNAME', 'dlock_check' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.assert_fence(resource text, fence bigint) RETURNS void
    AS 'MODULE_PATHNAME', 'dlock_assert_fence' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.break_lock(resource text) RETURNS boolean
    AS 'MODULE_PATHNAME', 'dlock_break_lock' LANGUAGE C VOLATILE;
REVOKE EXECUTE ON FUNCTION dlock.break_lock(text) FROM PUBLIC;

CREATE FUNCTION dlock.xact_lock(resource text, wait interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_xact_lock' LANGUAGE C VOLATILE;

CREATE FUNCTION dlock.try_xact_lock(resource text)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_xact_lock' LANGUAGE C VOLATILE;

/* Current holdings; expired ones stay listed (expired = true) until reaped. */
CREATE VIEW dlock.locks AS
    SELECT l.resource, l.holder, l.count, l.fence, l.lease,
           l.acquired_at, l.renewed_at, l.expires_at,
           l.owner::pg_catalog.regrole AS owner,
           l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired
      FROM dlock.leases l
     WHERE l.holder IS NOT NULL;
GRANT SELECT ON dlock.locks TO PUBLIC;

/* Waiting and statistics (shared memory; see README for preloading). */
CREATE FUNCTION dlock.waiters_internal(OUT pid integer, OUT resource text,
                                       OUT holder text,
                                       OUT waiting_since timestamptz,
                                       OUT wait_deadline timestamptz)
    RETURNS SETOF record AS 'MODULE_PATHNAME', 'dlock_waiters'
    LANGUAGE C VOLATILE;

CREATE VIEW dlock.waiters AS
    SELECT pid, resource, holder, waiting_since, wait_deadline
      FROM dlock.waiters_internal();
GRANT SELECT ON dlock.waiters TO PUBLIC;

CREATE FUNCTION dlock.stats(OUT acquired bigint, OUT reentered bigint,
                            OUT released bigint, OUT expired bigint,
                            OUT broken bigint, OUT renewed bigint,
                            OUT lost_renewals bigint, OUT waits bigint,
                            OUT wakeups bigint, OUT timeouts bigint)
    RETURNS record AS 'MODULE_PATHNAME', 'dlock_stats' LANGUAGE C VOLATILE;
