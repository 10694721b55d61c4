/*
 * dlock--1.0--1.1.sql: upgrade from 1.0 to 1.1: sessions ([sessions],
 * issue 36).  One keepalive for many holdings, as etcd's leases and
 * ZooKeeper's sessions: open_session, keepalive, close_session; every
 * acquisition takes session => id in place of a lease; the view
 * dlock.sessions and the column dlock.locks.session.
 *
 * A holding taken in a session has its session's id in column session of
 * its row (dlock.leases, dlock.shares, dlock.permits; NULL: a leased
 * holding).  Its expiry is its session's (dlock.session_rows), read with
 * the row: keepalive writes one row however many holdings the session has.
 * Session ids are fences: never handed out twice in the database.
 *
 * The 1.1 library runs under the 1.0 SQL until ALTER EXTENSION dlock
 * UPDATE: the functions keep their C symbols (an old call passes fewer
 * arguments), and a missing session column reads as NULL.
 *
 * A function dropped and created again gets the default privileges
 * (EXECUTE to PUBLIC, as in 1.0): a WARNING names a function whose
 * privileges were changed, to be granted or revoked again.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.1'" to load this file. \quit

-- The holdings' tables get a column (ACCESS EXCLUSIVE), locked first and
-- in the order every attempt reads them (shares, permits, leases): a
-- waiter inside lock() whose attempt holds one of them while it reads the
-- next would otherwise deadlock with the update (40P01, test/t/091).
LOCK TABLE dlock.shares, dlock.permits, dlock.leases IN ACCESS EXCLUSIVE MODE;

CREATE TABLE dlock.session_rows (
    id         bigint NOT NULL PRIMARY KEY,
    holder     text COLLATE "C" NOT NULL,
    owner      regrole NOT NULL,
    ttl        interval NOT NULL,
    opened_at  timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
REVOKE ALL ON dlock.session_rows FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('dlock.session_rows', '');
COMMENT ON TABLE dlock.session_rows IS
    'Sessions (open_session): their holder, role, ttl and expiry; read them through dlock.sessions';

-- NULL: a leased holding.  ADD COLUMN of a NULL column rewrites nothing.
ALTER TABLE dlock.leases ADD COLUMN session bigint;
CREATE INDEX leases_session ON dlock.leases (session) WHERE session IS NOT NULL;
ALTER TABLE dlock.shares ADD COLUMN session bigint;
CREATE INDEX shares_session ON dlock.shares (session) WHERE session IS NOT NULL;
ALTER TABLE dlock.permits ADD COLUMN session bigint;
CREATE INDEX permits_session ON dlock.permits (session) WHERE session IS NOT NULL;

CREATE FUNCTION dlock.open_session(ttl interval DEFAULT NULL,
                                   holder text DEFAULT dlock.session_holder())
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_open_session' LANGUAGE C VOLATILE;
CREATE FUNCTION dlock.keepalive(session bigint)
    RETURNS timestamptz AS 'MODULE_PATHNAME', 'dlock_keepalive' LANGUAGE C VOLATILE;
CREATE FUNCTION dlock.close_session(session bigint)
    RETURNS integer AS 'MODULE_PATHNAME', 'dlock_close_session' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.open_session(interval, text) IS
    'Open a session for holder that lives ttl (default dlock.default_lease) unless kept alive; returns its id, for session => id';
COMMENT ON FUNCTION dlock.keepalive(bigint) IS
    'Extend session, and with it every holding in it, to now + its ttl; returns the new expiry, NULL if it has ended (never revived)';
COMMENT ON FUNCTION dlock.close_session(bigint) IS
    'Close session: release every holding in it (each with its released event); returns how many, NULL if it had already ended';

-- ---- every acquisition takes session => id ----
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::pg_catalog.regprocedure FROM pg_catalog.pg_proc p
              WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                    'dlock.try_lock(text, text, interval, boolean, interval, boolean)'::pg_catalog.regprocedure,
                    'dlock.lock(text, text, interval, interval, boolean, interval, boolean)'::pg_catalog.regprocedure,
                    'dlock.try_acquire(text, text, integer, integer, interval, boolean)'::pg_catalog.regprocedure,
                    'dlock.acquire(text, text, integer, integer, interval, interval, boolean)'::pg_catalog.regprocedure,
                    'dlock.try_lock_all(text[], text, interval, boolean)'::pg_catalog.regprocedure,
                    'dlock.lock_all(text[], text, interval, interval, boolean)'::pg_catalog.regprocedure,
                    'dlock.campaign(text, text, text, interval, interval)'::pg_catalog.regprocedure]::pg_catalog.oid[])
                AND p.proacl IS NOT NULL
    LOOP
        RAISE WARNING 'privileges of % are reset to the default (EXECUTE to PUBLIC)', f
            USING HINT = 'Grant or revoke them again on the new function after the update.';
    END LOOP;
END
$$;

DROP FUNCTION dlock.try_lock(text, text, interval, boolean, interval, boolean);
CREATE FUNCTION dlock.try_lock(resource text,
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL,
                               fair boolean DEFAULT false,
                               lock_delay interval DEFAULT NULL,
                               shared boolean DEFAULT false,
                               session bigint DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_lock' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.try_lock(text, text, interval, boolean, interval, boolean, bigint) IS
    'Acquire or re-enter resource for holder with a lease (shared => true: alongside other shared holders; session => id: in that session); returns the fence, or NULL at once if it is not available';

DROP FUNCTION dlock.lock(text, text, interval, interval, boolean, interval, boolean);
CREATE FUNCTION dlock.lock(resource text,
                           holder text DEFAULT dlock.session_holder(),
                           lease interval DEFAULT NULL,
                           wait interval DEFAULT NULL,
                           fair boolean DEFAULT false,
                           lock_delay interval DEFAULT NULL,
                           shared boolean DEFAULT false,
                           session bigint DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_lock' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval, boolean, interval, boolean, bigint) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout), in the fair queue with fair => true; NULL on timeout';

DROP FUNCTION dlock.try_acquire(text, text, integer, integer, interval, boolean);
CREATE FUNCTION dlock.try_acquire(semaphore text,
                                  holder text,
                                  max_permits integer,
                                  permits integer DEFAULT 1,
                                  lease interval DEFAULT NULL,
                                  fair boolean DEFAULT false,
                                  session bigint DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_acquire' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.try_acquire(text, text, integer, integer, interval, boolean, bigint) IS
    'Acquire permits of semaphore for holder (at most max_permits held at once; added to the holder''s holding), with a lease or in a session; returns the holding''s fence, or NULL at once if they are not free';

DROP FUNCTION dlock.acquire(text, text, integer, integer, interval, interval, boolean);
CREATE FUNCTION dlock.acquire(semaphore text,
                              holder text,
                              max_permits integer,
                              permits integer DEFAULT 1,
                              lease interval DEFAULT NULL,
                              wait interval DEFAULT NULL,
                              fair boolean DEFAULT false,
                              session bigint DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_acquire_semaphore_1_0' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.acquire(text, text, integer, integer, interval, interval, boolean, bigint) IS
    'Like try_acquire, but waits up to wait (NULL: no limit but statement_timeout), in the fair queue with fair => true; NULL on timeout';

DROP FUNCTION dlock.try_lock_all(text[], text, interval, boolean);
CREATE FUNCTION dlock.try_lock_all(resources text[],
                                   holder text DEFAULT dlock.session_holder(),
                                   lease interval DEFAULT NULL,
                                   shared boolean DEFAULT false,
                                   session bigint DEFAULT NULL)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'dlock_try_lock_all' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.try_lock_all(text[], text, interval, boolean, bigint) IS
    'Acquire or re-enter every resource for holder, all or nothing; returns the fences in the order given, or NULL at once with nothing acquired';

DROP FUNCTION dlock.lock_all(text[], text, interval, interval, boolean);
CREATE FUNCTION dlock.lock_all(resources text[],
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL,
                               wait interval DEFAULT NULL,
                               shared boolean DEFAULT false,
                               session bigint DEFAULT NULL)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'dlock_lock_all_1_0' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.lock_all(text[], text, interval, interval, boolean, bigint) IS
    'Like try_lock_all, but waits up to wait (NULL: no limit but statement_timeout) until all can be taken together, holding none meanwhile; NULL on timeout';

DROP FUNCTION dlock.campaign(text, text, text, interval, interval);
CREATE FUNCTION dlock.campaign(election text,
                               candidate text DEFAULT dlock.session_holder(),
                               value text DEFAULT NULL,
                               lease interval DEFAULT NULL,
                               wait interval DEFAULT NULL,
                               session bigint DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_campaign' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.campaign(text, text, text, interval, interval, bigint) IS
    'Wait in election''s fair queue until candidate leads, with value; returns the term (the fence), NULL on timeout; the leader campaigning again gets its term';

-- dlock.locks: a session's holding shows its session (new column, at the
-- end) and the session's ttl (lease), last keepalive and expiry.
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
           NULL::pg_catalog.int4 AS max_permits,
           l.session
      FROM (SELECT x.resource, x.holder, x.count, x.fence, x.owner, x.acquired_at, x.session,
                   CASE WHEN x.session IS NULL THEN x.lease ELSE y.ttl END AS lease,
                   CASE WHEN x.session IS NULL THEN x.renewed_at ELSE y.renewed_at END AS renewed_at,
                   CASE WHEN x.session IS NULL OR x.holder IS NULL THEN x.expires_at
                        ELSE COALESCE(y.expires_at, '-infinity'::pg_catalog.timestamptz) END AS expires_at
              FROM dlock.leases x
              LEFT JOIN dlock.session_rows y ON y.id OPERATOR(pg_catalog.=) x.session) l
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
           NULL::pg_catalog.int4 AS max_permits,
           s.session
      FROM (SELECT x.resource, x.holder, x.count, x.fence, x.owner, x.acquired_at, x.session,
                   CASE WHEN x.session IS NULL THEN x.lease ELSE y.ttl END AS lease,
                   CASE WHEN x.session IS NULL THEN x.renewed_at ELSE y.renewed_at END AS renewed_at,
                   CASE WHEN x.session IS NULL THEN x.expires_at
                        ELSE COALESCE(y.expires_at, '-infinity'::pg_catalog.timestamptz) END AS expires_at
              FROM dlock.shares x
              LEFT JOIN dlock.session_rows y ON y.id OPERATOR(pg_catalog.=) x.session) s
    UNION ALL
    SELECT p.resource, p.holder, p.count, p.fence, p.lease,
           p.acquired_at, p.renewed_at, p.expires_at,
           p.owner::pg_catalog.regrole AS owner,
           p.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           p.expires_at AS available_at,
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
                        ELSE COALESCE(y.expires_at, '-infinity'::pg_catalog.timestamptz) END AS expires_at
              FROM dlock.permits x
              LEFT JOIN dlock.session_rows y ON y.id OPERATOR(pg_catalog.=) x.session) p;

-- dlock.sessions: every session until it is closed or reaped; holdings
-- counts its holdings of every kind (an ended session's until reaped).
CREATE VIEW dlock.sessions AS
    SELECT s.id, s.holder, s.owner, s.ttl, s.expires_at,
           ((SELECT pg_catalog.count(*) FROM dlock.leases l
              WHERE l.session OPERATOR(pg_catalog.=) s.id AND l.holder IS NOT NULL)
            OPERATOR(pg_catalog.+)
            (SELECT pg_catalog.count(*) FROM dlock.shares h WHERE h.session OPERATOR(pg_catalog.=) s.id)
            OPERATOR(pg_catalog.+)
            (SELECT pg_catalog.count(*) FROM dlock.permits h WHERE h.session OPERATOR(pg_catalog.=) s.id))
               AS holdings,
           s.opened_at, s.renewed_at,
           s.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired
      FROM dlock.session_rows s;
GRANT SELECT ON dlock.sessions TO PUBLIC;
COMMENT ON VIEW dlock.sessions IS
    'Sessions (open_session): id, holder, owner, ttl, expires_at, holdings; an ended one stays listed (expired = true) until reaped';
