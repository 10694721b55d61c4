/*
 * dlock--0.2--0.3.sql: upgrade from 0.2 to 0.3: withdraw (a client-side
 * fair waiter gives up its ticket at once), dlock.queue lists a ticket
 * once while a lock() call waits with it, dlock.leader() names its own
 * argument in its errors, and the recent terms of elections (view
 * dlock.terms) for observers that poll.  The 0.3 library runs under the 0.2 SQL until
 * ALTER EXTENSION dlock UPDATE: dlock_withdraw is only reached from here.
 *
 * Like 0.2's, nothing here locks dlock.leases (test/t/090_upgrade.pl).
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.3'" to load this file. \quit

-- ---- withdraw (src/queue.c) ----
CREATE FUNCTION dlock.withdraw(resource text,
                               holder text DEFAULT dlock.session_holder())
    RETURNS boolean AS 'MODULE_PATHNAME', 'dlock_withdraw' LANGUAGE C VOLATILE;
COMMENT ON FUNCTION dlock.withdraw(text, text) IS
    'The holder gives up its ticket in resource''s fair queue at once (a client-side waiter that stops waiting); false if it had none; 42501 for another role''s';

-- ---- dlock.queue: one row per ticket ----
-- A backend waiting in lock() (or campaign) that adopted its holder's
-- client ticket holds that ticket's number in shared memory as well: it is
-- listed once, as the waiter (with its pid), queued since the ticket was
-- taken.
CREATE OR REPLACE VIEW dlock.queue AS
    WITH w AS (
        SELECT w.resource, w.holder, w.waiting_since, w.wait_deadline,
               w.owner, w.ticket, w.pid
          FROM dlock.waiters_internal_0_2() w
         WHERE w.ticket IS NOT NULL)
    SELECT q.resource, q.holder,
           pg_catalog.row_number() OVER (PARTITION BY q.resource ORDER BY q.ticket)
               AS "position",
           q.queued_at, q.expires_at, q.owner::pg_catalog.regrole AS owner,
           q.ticket, q.pid
      FROM (SELECT t.resource, t.holder, t.queued_at, t.expires_at,
                   t.owner::pg_catalog.oid AS owner, t.ticket, NULL::integer AS pid
              FROM dlock.tickets t
             WHERE t.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
               AND NOT EXISTS (SELECT FROM w
                                WHERE w.ticket OPERATOR(pg_catalog.=) t.ticket
                                  AND w.resource OPERATOR(pg_catalog.=) t.resource)
            UNION ALL
            SELECT w.resource, w.holder,
                   COALESCE(t.queued_at, w.waiting_since), w.wait_deadline,
                   w.owner, w.ticket, w.pid
              FROM w
              LEFT JOIN dlock.tickets t
                ON t.ticket OPERATOR(pg_catalog.=) w.ticket
               AND t.resource OPERATOR(pg_catalog.=) w.resource) q;

-- ---- dlock.leader: its own argument's name in its errors ----
CREATE OR REPLACE FUNCTION dlock.leader(election text)
    RETURNS TABLE (candidate text, value text, term bigint, elected_at timestamptz,
                   expires_at timestamptz, owner regrole)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF election IS NULL THEN
        RAISE EXCEPTION 'election must not be null' USING ERRCODE = '22023';
    ELSIF election OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'election must not be empty' USING ERRCODE = '22023';
    ELSIF pg_catalog.octet_length(election) OPERATOR(pg_catalog.>) 1000 THEN
        RAISE EXCEPTION 'election must be at most 1000 bytes long' USING ERRCODE = '22023',
            DETAIL = pg_catalog.format('The election given is %s bytes long.',
                                       pg_catalog.octet_length(election));
    END IF;
    RETURN QUERY
        SELECT l.holder, l.value, l.fence, l.acquired_at, l.expires_at, l.owner
          FROM dlock.locks l
         WHERE l.resource OPERATOR(pg_catalog.=) (election COLLATE "C")
           AND l.holder IS NOT NULL AND NOT l.expired;
END
$$;

-- ---- Recent terms of elections (src/elect.c) ----
-- Every term campaign elects, kept for ten minutes, so that an observer
-- that cannot LISTEN (behind a pooler) and polls sees every term, also one
-- that began and ended between two of its looks.  Not dumped: history.
CREATE TABLE dlock.term_log (
    resource   text COLLATE "C" NOT NULL,
    term       bigint NOT NULL,
    candidate  text COLLATE "C" NOT NULL,
    value      text,
    owner      regrole NOT NULL,
    elected_at timestamptz NOT NULL,
    PRIMARY KEY (resource, term)
);
REVOKE ALL ON dlock.term_log FROM PUBLIC;
COMMENT ON TABLE dlock.term_log IS
    'Terms elected by campaign in the last ten minutes; read them through dlock.terms';

CREATE VIEW dlock.terms AS
    SELECT t.resource AS election, t.term, t.candidate, t.value, t.elected_at,
           t.owner
      FROM dlock.term_log t;
GRANT SELECT ON dlock.terms TO PUBLIC;
COMMENT ON VIEW dlock.terms IS
    'Terms elected by campaign in the last ten minutes (election, term, candidate, value at election, elected_at, owner), for observers that poll';
