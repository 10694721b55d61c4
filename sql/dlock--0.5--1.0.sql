/*
 * dlock--0.5--1.0.sql: upgrade from 0.5 to 1.0: one parameter order for
 * the waiting calls.  Every waiting call takes wait right after lease, as
 * lock() and campaign() do: acquire(semaphore, holder, max_permits,
 * permits, lease, wait, fair) and lock_all(resources, holder, lease, wait,
 * shared).  In 0.5 wait came last, so lock_all(ARRAY['a','b'], 'h', '5s',
 * '5s') read the second '5s' as shared (22P02).  Calls in named notation
 * (wait => ...) work before and after.  No table changes; every holding,
 * waiter and fence stays where it is.
 *
 * The 1.0 library runs under the 0.5 SQL until ALTER EXTENSION dlock
 * UPDATE: the 0.5 functions keep their C symbols (old order), the 1.0
 * ones get new symbols (src/semaphore.c, src/multi.c).
 *
 * DROP FUNCTION takes an ACCESS EXCLUSIVE lock on the function only; a
 * waiter inside acquire() or lock_all() does not hold it (test/t/090).
 * A function dropped and created again gets the default privileges
 * (EXECUTE to PUBLIC, as in 0.5): a WARNING names a function whose
 * privileges were changed, to be granted or revoked again.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '1.0'" to load this file. \quit

DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::pg_catalog.regprocedure FROM pg_catalog.pg_proc p
              WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                    'dlock.acquire(text, text, integer, integer, interval, boolean, interval)'::pg_catalog.regprocedure,
                    'dlock.lock_all(text[], text, interval, boolean, interval)'::pg_catalog.regprocedure]::pg_catalog.oid[])
                AND p.proacl IS NOT NULL
    LOOP
        RAISE WARNING 'privileges of % are reset to the default (EXECUTE to PUBLIC)', f
            USING HINT = 'Grant or revoke them again on the new function after the update.';
    END LOOP;
END
$$;

DROP FUNCTION dlock.acquire(text, text, integer, integer, interval, boolean, interval);
CREATE FUNCTION dlock.acquire(semaphore text,
                              holder text,
                              max_permits integer,
                              permits integer DEFAULT 1,
                              lease interval DEFAULT NULL,
                              wait interval DEFAULT NULL,
                              fair boolean DEFAULT false)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_acquire_semaphore_1_0' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.acquire(text, text, integer, integer, interval, interval, boolean) IS
    'Like try_acquire, but waits up to wait (NULL: no limit but statement_timeout), in the fair queue with fair => true; NULL on timeout';

DROP FUNCTION dlock.lock_all(text[], text, interval, boolean, interval);
CREATE FUNCTION dlock.lock_all(resources text[],
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL,
                               wait interval DEFAULT NULL,
                               shared boolean DEFAULT false)
    RETURNS bigint[] AS 'MODULE_PATHNAME', 'dlock_lock_all_1_0' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.lock_all(text[], text, interval, interval, boolean) IS
    'Like try_lock_all, but waits up to wait (NULL: no limit but statement_timeout) until all can be taken together, holding none meanwhile; NULL on timeout';
