/*
 * portable/dlock.sql: dlock's portable edition, for PostgreSQL where no C
 * extension can be loaded (Amazon RDS and Aurora, Google Cloud SQL, Azure,
 * Supabase, Neon, Crunchy Bridge): the lock schema of the C extension's
 * [core], [fair], [elect] and [kinds] sections (see ../docs/editions/portable.md),
 * in SQL and PL/pgSQL only, for PostgreSQL 14 to 18.
 * This file is the one to run: it makes the schema and the version row,
 * then includes (\ir, relative to this file) the other files of portable/,
 * in this order, each opening with what it holds and what protects it:
 * tables.sql (tables and sequences), helpers.sql (argument checks, the
 * caller's role, events), nowait.sql (a wait's advisory locks, proven,
 * held and given back, an insert that never waits), fences.sql (fences and the fence epoch),
 * queues.sql (lock-delay and fair queues), acquire.sql (the general path
 * of acquisition and release), core.sql (the public functions of [core]
 * and [fair], with the fast path), xact.sql (transaction-scoped locks),
 * views.sql (dlock.locks, dlock.queue, withdraw), elect.sql ([elect]),
 * grants.sql (internal helpers closed), and kinds.sql (shared locks,
 * semaphores and several resources at once, [kinds]).  Keep them together
 * in one directory.
 *
 *     psql -d DB -f portable/dlock.sql
 *
 * Run it as the role that owns the database (or has CREATE on it), not as a
 * superuser.  It creates schema dlock, owned by that role, in one
 * transaction: an error leaves the database as it was.  Running it again
 * over a portable install replaces the functions and keeps every holding,
 * the fence sequence, the fence epoch and the rights a DBA changed; it
 * takes the locks it needs first, without making callers queue (see
 * $strong$ below), or fails changing nothing.  It refuses a database where the
 * C extension dlock is installed.
 *
 * How it keeps the promises (the C edition's design, in SQL):
 * - Rights.  Users have USAGE on the schema, EXECUTE on the public
 *   functions and SELECT on dlock.locks; no rights on the tables or the
 *   sequence.  The public functions run SECURITY DEFINER as the installing
 *   role with search_path = pg_catalog, pg_temp, name every object with
 *   its schema, and pass every argument as a value: nothing the caller
 *   passes becomes SQL text (no EXECUTE anywhere).  Internal helpers
 *   (dlock._*) are closed to PUBLIC.  The public functions also run with
 *   jit = off and plan_cache_mode = force_generic_plan: a caller's
 *   planner costs (cpu_tuple_cost at its maximum) would otherwise have
 *   every statement compiled, 50-150 ms each, and try_lock's fast path
 *   would be planned anew at each call (~450 us), as the caller's
 *   force_custom_plan, or the plan cache's own choice, would do.
 * - The caller's role.  Inside a SECURITY DEFINER function current_user is
 *   the installing role, so the caller is read from the session: the role
 *   of SET ROLE if one is in force (the "role" setting, which SECURITY
 *   DEFINER does not change and which only members of a role can set),
 *   else session_user.  A call made from inside another SECURITY DEFINER
 *   function is therefore made by the session's role, not that function's
 *   owner (the C edition records the owner there).
 * - The per-resource lock is the resource's row in dlock.leases, and
 *   nothing else: no advisory lock, since any role that can connect can
 *   take any advisory key (issue 35).  A resource that is held by another
 *   live holder is answered from a plain read, so a failed attempt takes
 *   nothing.  Otherwise the row is locked FOR UPDATE SKIP LOCKED, in a
 *   subtransaction rolled back if the attempt is then refused: a row
 *   another transaction is acquiring, changing (unlock, renew, reap) or
 *   pinning (assert_fence) is busy, not waited for, and another session's
 *   uncommitted acquisition makes try_lock return NULL at once.  A new
 *   resource's row is inserted with a 1 ms lock_timeout, ten tries at
 *   most: another transaction inserting it makes the attempt busy.  assert_fence pins
 *   with FOR KEY SHARE, which renew's UPDATE does not conflict with, and
 *   every change of hands locks FOR UPDATE, which it does.  An xact lock
 *   locks the row FOR NO KEY UPDATE SKIP LOCKED to the end of its
 *   transaction (a resource without a row: one inserted and deleted again,
 *   whose key stays taken until then), so acquirers and a renewal in
 *   flight exclude it and it excludes them.
 * - The fast path.  try_lock of an existing free row under default-like
 *   arguments, and unlock of a holding of count 1, run one statement each
 *   (written first in try_lock and unlock; what it does not decide goes on
 *   to the general path): the same rules (the row locked SKIP LOCKED,
 *   lock-delay, tickets and the fair-waiters mark looked at,
 *   the fence drawn after the epoch check), see "The portable fast path"
 *   in docs/how-it-works.md.
 * - Fences: dlock.fences, (epoch << 22) + n, the epoch the clock in
 *   milliseconds since 2020-01-01 UTC when it started (as the C edition).
 *   Before each fence the draw compares (system identifier, database OID,
 *   WAL insertion timeline, postmaster start time, and the xmin of the
 *   dlock.fence_epoch row) with what that row recorded; when anything
 *   differs (a restart, a promotion, PITR, a restore of a dump, which
 *   re-inserts the row and so changes its xmin, a re-installation, which
 *   has no row) it starts a new epoch.  (The full comparison is made once
 *   per backend and epoch row; later draws check a keyed mark of it in a
 *   session setting, see _next_fence for why that catches the same.)  A
 *   new epoch: setval to
 *   max(now, the sequence's epoch + 1, the epoch of the highest fence in
 *   dlock.leases + 1) << 22, non-transactional.  Jumps are serialised by a
 *   row lock on dlock.portable (NOWAIT, retried), held only around the
 *   read and the setval (a subtransaction rolled back after it).
 * - Other roles' advisory locks.  Any role can take any advisory key, so
 *   every advisory lock dlock takes is tried (pg_try_*), never waited
 *   for (issue 33), and none decides who holds a resource (issue 35):
 *   waits publish their tickets and marks as advisory locks, each with a
 *   proof, a second key keyed by a secret only the installing role reads
 *   and bound to the waiter's virtual transaction (nowait.sql), and others
 *   count only proven ones.  A foreign holder of dlock's keys can at most
 *   send a call to its slower path or cost a waiter its place.
 * - Durability: an acquisition or renewal raises synchronous_commit to on
 *   for the rest of its transaction (SET LOCAL through set_config) when it
 *   is weaker (off, local, remote_write); remote_apply is kept.
 * - Events: pg_notify, which PostgreSQL delivers when the transaction
 *   commits and drops when it rolls back.
 * - Fair queues: client-side tickets (try_lock(..., fair => true)) are rows
 *   of dlock.tickets, kept for dlock.queue_ttl after each attempt.  A
 *   session waiting in lock(..., fair => true) or campaign holds its ticket
 *   as session-level advisory locks (_qkey) with their proofs, taken
 *   without waiting, seen by others in pg_locks while its transaction is
 *   open and given back
 *   when the wait ends, also by a cancel anywhere (_let_go reads
 *   pg_locks), or with the session.  A wait retries each attempt in a
 *   subtransaction that is rolled back when it fails, so the resource's
 *   row lock never stays with a waiter that is not served.
 * - Lock-delay and holding values: rows of dlock.delays and
 *   dlock.holding_values tied to a holding by its fence (a row of another
 *   fence is dead), as in the C extension's 0.2 SQL.
 */
\set ON_ERROR_STOP on
\set QUIET on
SET client_min_messages = warning;
BEGIN;

-- Refuse what this script must not touch, before anything changes.
DO $refuse$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'dlock') THEN
        RAISE EXCEPTION 'the dlock extension is installed in database "%"', pg_catalog.current_database()
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'The portable edition (portable/dlock.sql) and the C extension cannot share a database.',
                  HINT = 'Use the C extension here (ALTER EXTENSION dlock UPDATE), or DROP EXTENSION dlock first.';
    END IF;
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN
        RAISE EXCEPTION 'portable/dlock.sql must not be run by a superuser'
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Its functions run with the rights of the role that installs them.',
                  HINT = 'Run it as the role that owns the database (or has CREATE on it).';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'dlock')
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                        WHERE n.nspname OPERATOR(pg_catalog.=) 'dlock' AND c.relname OPERATOR(pg_catalog.=) 'portable') THEN
        RAISE EXCEPTION 'schema "dlock" exists and is not a dlock portable installation'
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'Rename or drop that schema first.';
    END IF;
END
$refuse$;

-- First install, or a re-run (an in-place upgrade)?  Rights are given to
-- PUBLIC only on objects this run creates, so a re-run keeps what a DBA
-- granted or revoked since: noted in settings of this transaction
-- (dlock_portable.new_*), read where the objects are made.
SELECT pg_catalog.set_config('dlock_portable.new_schema',
           (NOT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'dlock'))::text, true),
       pg_catalog.set_config('dlock_portable.new_locks', (pg_catalog.to_regclass('dlock.locks') IS NULL)::text, true),
       pg_catalog.set_config('dlock_portable.new_queue', (pg_catalog.to_regclass('dlock.queue') IS NULL)::text, true),
       pg_catalog.set_config('dlock_portable.new_terms', (pg_catalog.to_regclass('dlock.terms') IS NULL)::text, true),
       pg_catalog.set_config('dlock_portable.new_sessions', (pg_catalog.to_regclass('dlock.sessions') IS NULL)::text, true)
       \gset dlock_unused_

-- A re-run replaces views (CREATE OR REPLACE VIEW) and may add columns:
-- ACCESS EXCLUSIVE locks, which wait for every open transaction that used
-- them, and every caller that comes after queues behind the wait.  So
-- they are taken first, each waiting at most 1 ms (lock_timeout: a caller
-- queues behind it no longer), all again every 10 ms for up to
-- dlock_lock_wait (psql -v dlock_lock_wait=..., default 10s); then the run
-- fails (55P03), having changed nothing.  A view is locked by a no-op
-- ALTER VIEW ... OWNER TO its owner (LOCK TABLE would lock the tables it
-- reads as well).
\if :{?dlock_lock_wait}
\else
\set dlock_lock_wait 10s
\endif
SELECT pg_catalog.set_config('dlock_portable.lock_wait', :'dlock_lock_wait', true) \gset dlock_unused_
DO $strong$
DECLARE
    deadline timestamptz := pg_catalog.clock_timestamp()
                            OPERATOR(pg_catalog.+) pg_catalog.current_setting('dlock_portable.lock_wait')::interval;
    was text := pg_catalog.current_setting('lock_timeout');
    -- Tables a column is added to (tables.sql): only when it is missing.
    no_kinds boolean := pg_catalog.to_regclass('dlock.leases') IS NOT NULL AND NOT EXISTS
        (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('dlock.leases')
            AND a.attname OPERATOR(pg_catalog.=) 'kinds' AND NOT a.attisdropped);
    no_secret boolean := pg_catalog.to_regclass('dlock.fence_epoch_seal') IS NOT NULL AND NOT EXISTS
        (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('dlock.fence_epoch_seal')
            AND a.attname OPERATOR(pg_catalog.=) 'secret' AND NOT a.attisdropped);
    -- 1.1: the column dbrow of dlock.fence_epoch.
    no_dbrow boolean := pg_catalog.to_regclass('dlock.fence_epoch') IS NOT NULL AND NOT EXISTS
        (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('dlock.fence_epoch')
            AND a.attname OPERATOR(pg_catalog.=) 'dbrow' AND NOT a.attisdropped);
    -- 1.1 ([sessions]): the column session of the holdings' tables.
    no_session boolean := pg_catalog.to_regclass('dlock.permits') IS NOT NULL AND NOT EXISTS
        (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('dlock.permits')
            AND a.attname OPERATOR(pg_catalog.=) 'session' AND NOT a.attisdropped);
BEGIN
    LOOP
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', '1ms', true);
            -- Every view of the schema (those of earlier versions too).
            IF pg_catalog.to_regclass('dlock._epoch_mark') IS NOT NULL THEN
                ALTER VIEW dlock._epoch_mark OWNER TO CURRENT_USER;
            END IF;
            IF pg_catalog.to_regclass('dlock.locks') IS NOT NULL THEN
                ALTER VIEW dlock.locks OWNER TO CURRENT_USER;
            END IF;
            IF pg_catalog.to_regclass('dlock.queue') IS NOT NULL THEN
                ALTER VIEW dlock.queue OWNER TO CURRENT_USER;
            END IF;
            IF pg_catalog.to_regclass('dlock.terms') IS NOT NULL THEN
                ALTER VIEW dlock.terms OWNER TO CURRENT_USER;
            END IF;
            IF pg_catalog.to_regclass('dlock.sessions') IS NOT NULL THEN
                ALTER VIEW dlock.sessions OWNER TO CURRENT_USER;
            END IF;
            -- COMMENT ON TABLE (below) takes SHARE UPDATE EXCLUSIVE, which
            -- waits for a VACUUM or ANALYZE of the table: taken here too, so
            -- the run never waits for one holding the views' locks.
            IF pg_catalog.to_regclass('dlock.portable') IS NOT NULL THEN
                LOCK TABLE dlock.portable IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.leases') IS NOT NULL THEN
                LOCK TABLE dlock.leases IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.shares') IS NOT NULL THEN
                LOCK TABLE dlock.shares IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.permits') IS NOT NULL THEN
                LOCK TABLE dlock.permits IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.fence_epoch') IS NOT NULL THEN
                LOCK TABLE dlock.fence_epoch IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.fence_epoch_seal') IS NOT NULL THEN
                LOCK TABLE dlock.fence_epoch_seal IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.tickets') IS NOT NULL THEN
                LOCK TABLE dlock.tickets IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.delays') IS NOT NULL THEN
                LOCK TABLE dlock.delays IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.holding_values') IS NOT NULL THEN
                LOCK TABLE dlock.holding_values IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.term_log') IS NOT NULL THEN
                LOCK TABLE dlock.term_log IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF pg_catalog.to_regclass('dlock.session_rows') IS NOT NULL THEN
                LOCK TABLE dlock.session_rows IN SHARE UPDATE EXCLUSIVE MODE;
            END IF;
            IF no_session THEN
                LOCK TABLE dlock.leases, dlock.shares, dlock.permits IN ACCESS EXCLUSIVE MODE;
            END IF;
            IF no_kinds THEN
                LOCK TABLE dlock.leases IN ACCESS EXCLUSIVE MODE;
            END IF;
            IF no_secret THEN
                LOCK TABLE dlock.fence_epoch_seal IN ACCESS EXCLUSIVE MODE;
            END IF;
            IF no_dbrow THEN
                LOCK TABLE dlock.fence_epoch IN ACCESS EXCLUSIVE MODE;
            END IF;
            PERFORM pg_catalog.set_config('lock_timeout', was, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_catalog.set_config('lock_timeout', was, true);
            IF pg_catalog.clock_timestamp() OPERATOR(pg_catalog.>=) deadline THEN
                RAISE EXCEPTION 'could not lock dlock''s views and tables for the upgrade: open transactions, or a VACUUM or ANALYZE, use them'
                    USING ERRCODE = 'lock_not_available',
                          DETAIL = pg_catalog.format('Tried for %s, each time waiting at most 1 ms (a longer wait would make every dlock caller queue behind the upgrade); nothing was changed.',
                                                     pg_catalog.current_setting('dlock_portable.lock_wait')),
                          HINT = 'Run it again when no long transaction uses dlock, or give it longer: psql -v dlock_lock_wait=60s.';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.01);
        END;
    END LOOP;
END
$strong$;

CREATE SCHEMA IF NOT EXISTS dlock;
-- Functions whose arguments grew ([fair]): a new parameter cannot be added
-- in place, and an overload would make calls ambiguous.
DROP FUNCTION IF EXISTS dlock.try_lock(text, text, interval);
DROP FUNCTION IF EXISTS dlock.lock(text, text, interval, interval);
DROP FUNCTION IF EXISTS dlock._attempt(text, text, interval, oid);
-- Helpers that returned void return true now (called as expressions on the
-- hot path, which is cheaper than PERFORM): a return type cannot change in place.
DROP FUNCTION IF EXISTS dlock._writable(text);
DROP FUNCTION IF EXISTS dlock._sync();
DROP FUNCTION IF EXISTS dlock._event(text, text, bigint);
DROP FUNCTION IF EXISTS dlock._acquired(text, text, oid, bigint, boolean, interval);
-- [kinds] (0.4): try_lock and lock take shared; a wait's attempt and loop
-- take the kind of request.
DROP FUNCTION IF EXISTS dlock.try_lock(text, text, interval, boolean, interval);
DROP FUNCTION IF EXISTS dlock.lock(text, text, interval, interval, boolean, interval);
-- 1.0: the waiting calls take wait right after lease, as lock() does (in
-- 0.5 it came last in acquire and lock_all): the old order is replaced.  A
-- call waiting in one of them while this runs keeps waiting.
DROP FUNCTION IF EXISTS dlock.acquire(text, text, integer, integer, interval, boolean, interval);
DROP FUNCTION IF EXISTS dlock.lock_all(text[], text, interval, boolean, interval);
-- (The old _try and _wait_loop stay, as wrappers, for waits in progress:
-- kinds.sql.)
-- 1.1 ([sessions]): every acquisition takes session; 1.0's _attempt,
-- _try, _wait_loop, _attempt_kind and _attempt_all stay as wrappers for
-- waits in progress (acquire.sql, core.sql, kinds.sql).  _find_held
-- returns the holding's session too.
DROP FUNCTION IF EXISTS dlock.try_lock(text, text, interval, boolean, interval, boolean);
DROP FUNCTION IF EXISTS dlock.lock(text, text, interval, interval, boolean, interval, boolean);
DROP FUNCTION IF EXISTS dlock.try_acquire(text, text, integer, integer, interval, boolean);
DROP FUNCTION IF EXISTS dlock.acquire(text, text, integer, integer, interval, interval, boolean);
DROP FUNCTION IF EXISTS dlock.try_lock_all(text[], text, interval, boolean);
DROP FUNCTION IF EXISTS dlock.lock_all(text[], text, interval, interval, boolean);
DROP FUNCTION IF EXISTS dlock.campaign(text, text, text, interval, interval);
DROP FUNCTION IF EXISTS dlock._find_held(text, text, oid, boolean, text);
COMMENT ON SCHEMA dlock IS
    'dlock (portable edition): leased distributed locks with fencing tokens (see the dlock README)';
DO $usage$
BEGIN
    IF pg_catalog.current_setting('dlock_portable.new_schema') OPERATOR(pg_catalog.=) 'true' THEN
        GRANT USAGE ON SCHEMA dlock TO PUBLIC;     -- first install only
    END IF;
END
$usage$;

-- The edition and version installed (and the mark of a portable install).
CREATE TABLE IF NOT EXISTS dlock.portable (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    version      text NOT NULL,
    installed_at timestamptz NOT NULL
);
-- Its row is also the lock a fence-epoch jump takes (fences.sql): written
-- only when the version changes, so a re-run does not hold it.
INSERT INTO dlock.portable (version, installed_at) VALUES ('1.2', pg_catalog.clock_timestamp())
    ON CONFLICT (one) DO NOTHING;
UPDATE dlock.portable p SET version = '1.2' WHERE p.version OPERATOR(pg_catalog.<>) '1.2';
COMMENT ON TABLE dlock.portable IS 'The dlock portable edition''s version in this database';

\ir tables.sql
\ir helpers.sql
\ir nowait.sql
\ir fences.sql
\ir queues.sql
\ir acquire.sql
\ir core.sql
\ir xact.sql
\ir views.sql
\ir elect.sql
\ir grants.sql

-- Shared locks, semaphores and several resources at once ([kinds]).
\ir kinds.sql

-- Sessions: one keepalive for many holdings ([sessions], 1.1).
\ir sessions.sql

COMMIT;
