/*
 * dlock--0.1.1--0.2.sql: upgrade from 0.1.1 to 0.2: fair queues and
 * lock-delay (the contract's [fair] section), holding values and leader
 * election ([elect]).  The 0.2 library runs under
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

-- ---- Holding values and leader election (src/elect.c) ----
-- The value of a holding (who leads and where to reach it), tied to the
-- holding by its fence like a lock-delay: a row whose fence is not the
-- resource's current holding is dead.  election: taken by campaign, so
-- that its expiry is announced with candidate, term and value.  Dumped
-- with dlock.leases.
CREATE TABLE dlock.holding_values (
    resource text COLLATE "C" NOT NULL PRIMARY KEY,
    fence    bigint NOT NULL,
    holder   text COLLATE "C" NOT NULL,
    value    text,
    election boolean NOT NULL DEFAULT false
);
SELECT pg_catalog.pg_extension_config_dump('dlock.holding_values', '');

REVOKE ALL ON dlock.ticket_seq, dlock.tickets, dlock.delays, dlock.holding_values
    FROM PUBLIC;

CREATE FUNCTION dlock.campaign(election text,
                               candidate text DEFAULT dlock.session_holder(),
                               value text DEFAULT NULL,
                               lease interval DEFAULT NULL,
                               wait interval DEFAULT NULL)
    RETURNS bigint AS 'MODULE_PATHNAME', 'dlock_campaign' LANGUAGE C VOLATILE;
CREATE FUNCTION dlock.proclaim(election text, candidate text, value text,
                               term bigint DEFAULT NULL)
    RETURNS boolean AS 'MODULE_PATHNAME', 'dlock_proclaim' LANGUAGE C VOLATILE;
CREATE FUNCTION dlock.resign(election text, candidate text, term bigint DEFAULT NULL)
    RETURNS boolean AS 'MODULE_PATHNAME', 'dlock_resign' LANGUAGE C VOLATILE;

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
                ELSE d.available_at END AS available_at,
           v.value
      FROM dlock.leases l
      LEFT JOIN dlock.delays d
        ON d.resource OPERATOR(pg_catalog.=) l.resource
       AND d.fence OPERATOR(pg_catalog.=) l.fence
      LEFT JOIN dlock.holding_values v
        ON v.resource OPERATOR(pg_catalog.=) l.resource
       AND v.fence OPERATOR(pg_catalog.=) l.fence
       AND l.holder IS NOT NULL
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
-- dlock.leader: the current (unexpired) leader of an election, from
-- dlock.locks; no row when there is none.  dlock.channel() checks the
-- argument (NULL, empty, too long: 22023).
CREATE FUNCTION dlock.leader(election text)
    RETURNS TABLE (candidate text, value text, term bigint, elected_at timestamptz,
                   expires_at timestamptz, owner regrole)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    PERFORM dlock.channel(election);
    RETURN QUERY
        SELECT l.holder, l.value, l.fence, l.acquired_at, l.expires_at, l.owner
          FROM dlock.locks l
         WHERE l.resource OPERATOR(pg_catalog.=) (election COLLATE "C")
           AND l.holder IS NOT NULL AND NOT l.expired;
END
$$;

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
-- ---------------------------------------------------------------------------
-- Comments: every object gets a COMMENT ON (0.2)
--
-- \dx+ dlock, \df+ dlock.*, \dv+ and \d+ show them.  Every object that
-- 0.1 and 0.1.1 created is commented here; an object added later gets its
-- COMMENT ON in the script that adds it (test/t/090_upgrade.pl fails for an
-- extension member without one).  Comments take no lock that would wait
-- behind a waiting lock() call.
-- ---------------------------------------------------------------------------
COMMENT ON SCHEMA dlock IS
    'dlock: leased distributed locks with fencing tokens (see the dlock README)';

-- Tables and sequences: users have no rights on them; the functions are the interface.
COMMENT ON TABLE dlock.leases IS
    'One row per resource: the current holding (holder NULL when free); read it through dlock.locks';
COMMENT ON TABLE dlock.fence_epoch IS
    'The current fence epoch and the (system identifier, database, timeline, postmaster start) it started under';
COMMENT ON TABLE dlock.outbox IS
    'Events of prepared transactions, sent by the next reaper round after COMMIT PREPARED';
COMMENT ON TABLE dlock.epoch IS
    'Unused since 0.1.1 (the 0.1 fence epoch); read once when a new epoch starts, to stay above 0.1 fences';
COMMENT ON SEQUENCE dlock.fences IS
    'Fences: (epoch << 22) + n, the epoch in milliseconds since 2020-01-01 UTC';
COMMENT ON SEQUENCE dlock.fence_seq IS
    'Unused since 0.1.1 (the 0.1 fence counter); kept so that updates never wait for a lock on it';

-- Views
COMMENT ON VIEW dlock.locks IS
    'Current holdings; an expired lease stays listed (expired = true) until it is reaped or taken over';
COMMENT ON VIEW dlock.waiters IS
    'Sessions waiting in dlock.lock() or dlock.xact_lock() (needs shared_preload_libraries = ''dlock'')';

-- Functions
COMMENT ON FUNCTION dlock.try_lock(text, text, interval, boolean, interval) IS
    'Acquire or re-enter resource for holder with a lease; returns the fence, or NULL at once if another holder has it, it is under lock-delay, or its fair queue is not headed by the caller (fair => true takes a ticket)';
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval, boolean, interval) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout), in the fair queue with fair => true; NULL on timeout';
COMMENT ON FUNCTION dlock.unlock(text, text, bigint) IS
    'Release one level of holder''s holding (under fence, if given); returns the count left, 0 = released, NULL if not held';
COMMENT ON FUNCTION dlock.renew(text, text, interval, bigint) IS
    'Extend holder''s lease to now + lease (default: the lease it was taken with); returns the new expiry, NULL if the lease was lost';
COMMENT ON FUNCTION dlock.unlock_all(text) IS
    'Release every holding of holder (and of the calling role); returns how many';
COMMENT ON FUNCTION dlock.reap() IS
    'Remove every expired lease now and send its expired event, in a reaper round of its own; returns how many';
COMMENT ON FUNCTION dlock."check"(text, bigint) IS
    'Is fence the current, unexpired holding of resource?';
COMMENT ON FUNCTION dlock.assert_fence(text, bigint) IS
    'Raise 55P03 unless fence is the current holding of resource; then pin the holding until this transaction ends';
COMMENT ON FUNCTION dlock.break_lock(text) IS
    'Force the release of resource (event broken); for administrators, EXECUTE is revoked from PUBLIC';
COMMENT ON FUNCTION dlock.xact_lock(text, interval) IS
    'Transaction-scoped lock on resource, held until the transaction ends, waiting up to wait; returns a fence, NULL on timeout';
COMMENT ON FUNCTION dlock.try_xact_lock(text) IS
    'Transaction-scoped lock on resource, never waits; returns a fence, or NULL if busy';
COMMENT ON FUNCTION dlock.channel(text) IS
    'The LISTEN channel of resource''s events (released, expired, broken): ''dlock_'' || md5(resource)';
COMMENT ON FUNCTION dlock.session_holder() IS
    'The default holder: pid:<pid>:<backend start>, unique to this backend over the server''s lifetime';
COMMENT ON FUNCTION dlock.stats() IS
    'Counters since the server started: acquired, reentered, released, expired, broken, renewed, lost_renewals, waits, wakeups, timeouts';
COMMENT ON FUNCTION dlock.waiters_internal() IS
    'Internal: the shared-memory wait slots behind the view dlock.waiters';
COMMENT ON FUNCTION dlock._next_fence() IS
    'Internal: draws the next fence inside dlock''s own statements; EXECUTE is revoked from PUBLIC';

-- The objects 0.2 adds.
COMMENT ON TABLE dlock.tickets IS
    'Tickets of client-side fair waiters (try_lock(..., fair => true) retried), kept for dlock.queue_ttl after each attempt; read them through dlock.queue';
COMMENT ON SEQUENCE dlock.ticket_seq IS
    'Fair-queue ticket numbers: tickets are served in the order of this sequence';
COMMENT ON TABLE dlock.delays IS
    'Lock-delays of holdings (by fence), and when a resource freed uncleanly becomes available';
COMMENT ON VIEW dlock.queue IS
    'Every live fair-queue ticket, position 1 = served next (in-server waiters listed only with shared_preload_libraries)';
COMMENT ON TABLE dlock.holding_values IS
    'Values of holdings (by fence), set by campaign and proclaim; read them through dlock.locks and dlock.leader()';
COMMENT ON FUNCTION dlock.campaign(text, text, text, interval, interval) IS
    'Wait in election''s fair queue until candidate leads, with value; returns the term (the fence), NULL on timeout; the leader campaigning again gets its term';
COMMENT ON FUNCTION dlock.proclaim(text, text, text, bigint) IS
    'The holder (leader) of a holding changes its value (under term, if given); false if it does not hold it';
COMMENT ON FUNCTION dlock.resign(text, text, bigint) IS
    'The leader steps down (under term, if given), whatever its count; the next candidate is elected at once; false if it does not lead';
COMMENT ON FUNCTION dlock.leader(text) IS
    'The current leader of election: candidate, value, term, elected_at, expires_at, owner; no row when there is none';
COMMENT ON FUNCTION dlock.waiters_internal_0_2() IS
    'Internal: the shared-memory wait slots, with tickets, behind the views dlock.waiters and dlock.queue';
