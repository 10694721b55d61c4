/*
 * dlock--0.4--0.5.sql: upgrade from 0.4 to 0.5.  Each part below is one
 * block; the 0.5 library runs under the 0.4 SQL (and older) until ALTER
 * EXTENSION dlock UPDATE: what is new is only reached through the
 * functions created here.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.5'" to load this file. \quit

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
