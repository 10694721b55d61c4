/*
 * dlock--0.1.1--0.2.sql: upgrade from 0.1.1 to 0.2: fair queues and
 * lock-delay (the contract's [fair] section).  The 0.2 library runs under
 * the 0.1 and 0.1.1 SQL until ALTER EXTENSION dlock UPDATE: it uses the
 * objects below only once it has seen dlock.tickets (src/queue.c).
 *
 * Nothing here locks dlock.leases: a live database's waiters hold locks on
 * it for as long as they wait, and an update must not queue behind them
 * (test/t/090_upgrade.pl).  So the new state lives in tables of its own.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.2'" to load this file. \quit

-- ---- Fair queues (src/queue.c) ----
-- Tickets are drawn from one sequence, so their order is the order in which
-- they were taken.  A client that waits on its own side (try_lock(...,
-- fair => true) retried) keeps its ticket here, committed with its attempt,
-- for dlock.queue_ttl after each attempt.  A backend waiting in lock()
-- keeps its ticket in the lock manager instead (it must be visible while
-- its transaction is open); dlock.queue shows both.  Tickets are not
-- dumped: they belong to clients waiting now.
CREATE SEQUENCE dlock.ticket_seq AS bigint
    MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
CREATE TABLE dlock.tickets (
    resource   text COLLATE "C" NOT NULL,
    ticket     bigint NOT NULL,
    holder     text COLLATE "C" NOT NULL,
    owner      regrole NOT NULL,
    queued_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,   -- last attempt + dlock.queue_ttl
    PRIMARY KEY (resource, ticket),
    UNIQUE (resource, holder, owner)
);

-- ---- Lock-delay (Chubby) ----
-- A holding taken with a lock-delay has a row here, tied to it by its
-- fence.  When the holding ends uncleanly (its lease runs out, or it is
-- broken), the resource is not available before the end of the lease plus
-- lock_delay: lazily from the holding's expires_at, and once reaped or
-- broken from available_at.  A clean unlock leaves available_at NULL: free
-- at once.  Dumped with dlock.leases, so a restored expired holding keeps
-- its delay.
CREATE TABLE dlock.delays (
    resource     text COLLATE "C" NOT NULL PRIMARY KEY,
    fence        bigint NOT NULL,
    lock_delay   interval NOT NULL,
    available_at timestamptz
);
SELECT pg_catalog.pg_extension_config_dump('dlock.delays', '');

REVOKE ALL ON dlock.ticket_seq, dlock.tickets, dlock.delays FROM PUBLIC;

-- ---- try_lock and lock take fair and lock_delay ----
-- A new parameter cannot be added in place, and an overload would make
-- try_lock('r') ambiguous, so the functions are replaced.  Grants made on
-- them are not kept (they are PUBLIC by default).
DROP FUNCTION dlock.try_lock(text, text, interval);
CREATE FUNCTION dlock.try_lock(resource text,
                               holder text DEFAULT dlock.session_holder(),
                               lease interval DEFAULT NULL,
                               fair boolean DEFAULT false,
                               lock_delay interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_try_lock' LANGUAGE C VOLATILE;

DROP FUNCTION dlock.lock(text, text, interval, interval);
CREATE FUNCTION dlock.lock(resource text,
                           holder text DEFAULT dlock.session_holder(),
                           lease interval DEFAULT NULL,
                           wait interval DEFAULT NULL,
                           fair boolean DEFAULT false,
                           lock_delay interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_lock' LANGUAGE C VOLATILE;

-- ---- Views ----
-- dlock.locks: available_at is when the resource becomes available to
-- others if the holding is not released first (its expiry plus its
-- lock-delay); a free resource still under lock-delay stays listed, with a
-- NULL holder, until then.
CREATE OR REPLACE VIEW dlock.locks AS
    SELECT l.resource, l.holder, l.count, l.fence, l.lease,
           l.acquired_at, l.renewed_at, l.expires_at,
           l.owner::pg_catalog.regrole AS owner,
           l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           CASE WHEN l.holder IS NOT NULL
                THEN l.expires_at OPERATOR(pg_catalog.+)
                     COALESCE(d.lock_delay, '0'::pg_catalog.interval)
                ELSE d.available_at END AS available_at
      FROM dlock.leases l
      LEFT JOIN dlock.delays d
        ON d.resource OPERATOR(pg_catalog.=) l.resource
       AND d.fence OPERATOR(pg_catalog.=) l.fence
     WHERE l.holder IS NOT NULL
        OR d.available_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();

-- The backends waiting in lock() with their tickets (fair waiters only
-- have one); the 0.1 function stays for the 0.1 SQL.
CREATE FUNCTION dlock.waiters_internal_0_2(OUT pid integer, OUT resource text,
                                           OUT holder text,
                                           OUT waiting_since timestamptz,
                                           OUT wait_deadline timestamptz,
                                           OUT ticket bigint, OUT owner oid)
    RETURNS SETOF record AS 'MODULE_PATHNAME', 'dlock_waiters_0_2'
    LANGUAGE C VOLATILE;

-- dlock.queue: every live ticket, position 1 = served next.  Tickets of
-- client-side waiters come from dlock.tickets, those of backends waiting
-- in lock() from shared memory (with shared_preload_libraries; without it
-- they queue correctly but are not listed, like dlock.waiters).
CREATE VIEW dlock.queue AS
    SELECT q.resource, q.holder,
           pg_catalog.row_number() OVER (PARTITION BY q.resource ORDER BY q.ticket)
               AS "position",
           q.queued_at, q.expires_at, q.owner::pg_catalog.regrole AS owner,
           q.ticket, q.pid
      FROM (SELECT t.resource, t.holder, t.queued_at, t.expires_at,
                   t.owner::pg_catalog.oid AS owner, t.ticket, NULL::integer AS pid
              FROM dlock.tickets t
             WHERE t.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
            UNION ALL
            SELECT w.resource, w.holder, w.waiting_since, w.wait_deadline,
                   w.owner, w.ticket, w.pid
              FROM dlock.waiters_internal_0_2() w
             WHERE w.ticket IS NOT NULL) q;
GRANT SELECT ON dlock.queue TO PUBLIC;

CREATE OR REPLACE VIEW dlock.waiters AS
    SELECT w.pid, w.resource, w.holder, w.waiting_since, w.wait_deadline,
           w.ticket IS NOT NULL AS fair, q."position"
      FROM dlock.waiters_internal_0_2() w
      LEFT JOIN dlock.queue q
        ON q.pid OPERATOR(pg_catalog.=) w.pid
       AND q.ticket OPERATOR(pg_catalog.=) w.ticket;
