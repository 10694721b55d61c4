/*
 * portable/tables.sql: the portable edition's tables and sequences: the
 * holdings (dlock.leases, and [kinds]' dlock.shares and dlock.permits),
 * the fence sequence and the fence epoch with its seal, the fair queue's
 * ticket sequence and client tickets, lock-delays, holding values and the
 * log of elected terms; every one closed to PUBLIC (users read them
 * through the views, views.sql and elect.sql, and change them only through
 * the functions).  Part of dlock.sql, which includes it (\ir) inside its
 * transaction after the schema and the version row: run dlock.sql, not
 * this file.
 *
 * What protects their rows: nothing here runs at call time.  The functions
 * that write a resource's rows hold its row in dlock.leases locked
 * (dlock.sql's header, "The per-resource lock"); the fence
 * sequence and epoch rows are written by _next_fence only (fences.sql).
 * Every object is created IF NOT EXISTS (columns added only when missing):
 * a re-run keeps every holding, the fence sequence and the fence epoch.
 */
-- One row per resource ever locked; a release keeps the row (holder NULL).
CREATE TABLE IF NOT EXISTS dlock.leases (
    resource    text COLLATE "C" NOT NULL PRIMARY KEY,
    holder      text COLLATE "C",
    owner       regrole,   -- regrole, so that a dump restores it by name
    count       integer NOT NULL DEFAULT 0,
    fence       bigint,
    lease       interval,
    acquired_at timestamptz,
    renewed_at  timestamptz,
    expires_at  timestamptz,
    released_at timestamptz
) WITH (fillfactor = 50);
COMMENT ON TABLE dlock.leases IS
    'One row per resource: the current holding (holder NULL when free); read it through dlock.locks';
-- kinds ([kinds], 0.4): the resource has (or had) shared holdings or
-- permits in dlock.shares or dlock.permits; the exclusive path then asks
-- kinds.sql's rules first.  Set by every acquisition of those under the
-- row's lock, cleared when none are left (kinds.sql).  A constant default:
-- adding it rewrites nothing.
-- Only when missing: ADD COLUMN takes an ACCESS EXCLUSIVE lock even with
-- IF NOT EXISTS, and a re-run should not wait behind open transactions.
DO $kinds$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute
                    WHERE attrelid OPERATOR(pg_catalog.=) 'dlock.leases'::pg_catalog.regclass
                      AND attname OPERATOR(pg_catalog.=) 'kinds' AND NOT attisdropped) THEN
        ALTER TABLE dlock.leases ADD COLUMN kinds boolean NOT NULL DEFAULT false;
    END IF;
END
$kinds$;

-- Shared holdings ([kinds], try_lock(..., shared => true)) and a
-- semaphore's holdings of permits (try_acquire): several per resource, one
-- per holder and role, each with its own count, fence and lease; the
-- columns of the C extension's 0.4 and 0.5 tables.  The resource's row in
-- dlock.leases stays their anchor (locked by every acquisition).
CREATE TABLE IF NOT EXISTS dlock.shares (
    resource    text COLLATE "C" NOT NULL,
    holder      text COLLATE "C" NOT NULL,
    owner       regrole NOT NULL,
    count       integer NOT NULL,
    fence       bigint NOT NULL,
    lease       interval NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (resource, holder, owner)
) WITH (fillfactor = 50);
COMMENT ON TABLE dlock.shares IS
    'Shared holdings (try_lock(..., shared => true)), one per holder and role; read them through dlock.locks';
CREATE TABLE IF NOT EXISTS dlock.permits (
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
COMMENT ON TABLE dlock.permits IS
    'Holdings of a semaphore''s permits (try_acquire), one per holder and role; read them through dlock.locks';

CREATE SEQUENCE IF NOT EXISTS dlock.fences AS bigint
    MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
COMMENT ON SEQUENCE dlock.fences IS
    'Fences: (epoch << 22) + n, the epoch in milliseconds since 2020-01-01 UTC';

CREATE TABLE IF NOT EXISTS dlock.fence_epoch (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    sysid       text NOT NULL,         -- system identifier ('' if unreadable)
    dboid       oid NOT NULL,          -- database
    timeline    bigint NOT NULL,       -- WAL insertion timeline
    started     timestamptz NOT NULL,  -- postmaster start time
    first_fence bigint NOT NULL        -- first fence of the epoch
);
COMMENT ON TABLE dlock.fence_epoch IS
    'The current fence epoch and the (system identifier, database, timeline, postmaster start) it started under';
-- dbrow (1.1): the xmin of the database's own pg_database row when the
-- epoch started.  A database dropped and made again from a copy of itself
-- (CREATE DATABASE ... TEMPLATE ... OID) keeps everything else the epoch
-- test reads; its pg_database row is new.  NULL (a row of an earlier
-- version): not compared, until the next epoch writes it.  Only when
-- missing (as kinds above).
DO $dbrow$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute
                    WHERE attrelid OPERATOR(pg_catalog.=) 'dlock.fence_epoch'::pg_catalog.regclass
                      AND attname OPERATOR(pg_catalog.=) 'dbrow' AND NOT attisdropped) THEN
        ALTER TABLE dlock.fence_epoch ADD COLUMN dbrow text;
    END IF;
END
$dbrow$;
-- The xmin the dlock.fence_epoch row had when it was written: a copy of
-- the row (a restored dump) has another.
CREATE TABLE IF NOT EXISTS dlock.fence_epoch_seal (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    epoch_xmin text NOT NULL
);
-- secret: the key of the per-session mark of a checked epoch (see
-- _next_fence); random, readable only by the installing role.
-- Only when missing (as kinds above): ADD COLUMN IF NOT EXISTS takes its
-- ACCESS EXCLUSIVE lock even when the column is there.
DO $secret$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute
                    WHERE attrelid OPERATOR(pg_catalog.=) 'dlock.fence_epoch_seal'::pg_catalog.regclass
                      AND attname OPERATOR(pg_catalog.=) 'secret' AND NOT attisdropped) THEN
        ALTER TABLE dlock.fence_epoch_seal ADD COLUMN
            secret text NOT NULL DEFAULT pg_catalog.md5(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text);
    END IF;
END
$secret$;
-- The secret exists from the install on (the proofs of waits, nowait.sql,
-- are keyed by it): a seal row that matches no epoch row, which the first
-- fence drawn replaces (_record_epoch).  Nothing when the row is there.
INSERT INTO dlock.fence_epoch_seal (epoch_xmin) VALUES ('') ON CONFLICT (one) DO NOTHING;
COMMENT ON TABLE dlock.fence_epoch_seal IS
    'The xmin of the dlock.fence_epoch row as written: a restored copy of the row has another, and starts a new epoch; and the key of the sessions'' checked-epoch marks';

-- Fair queues ([fair]).  Tickets are drawn from one sequence, so their
-- order is the order in which they were taken.  A client that waits on its
-- own side (try_lock(..., fair => true) retried) keeps its ticket here for
-- dlock.queue_ttl after each attempt.  A session waiting in lock(...,
-- fair => true) holds its ticket as a session-level advisory lock instead
-- (see _ahead), which other sessions see while its transaction is open and
-- which goes with the wait (timeout, cancel, disconnect).
CREATE SEQUENCE IF NOT EXISTS dlock.ticket_seq AS bigint
    MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
COMMENT ON SEQUENCE dlock.ticket_seq IS
    'Fair-queue ticket numbers: tickets are served in the order of this sequence';
CREATE TABLE IF NOT EXISTS dlock.tickets (
    resource   text COLLATE "C" NOT NULL,
    ticket     bigint NOT NULL,
    holder     text COLLATE "C" NOT NULL,
    owner      regrole NOT NULL,
    queued_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,   -- last attempt + dlock.queue_ttl
    PRIMARY KEY (resource, ticket),
    UNIQUE (resource, holder, owner)
);
COMMENT ON TABLE dlock.tickets IS
    'Tickets of client-side fair waiters (try_lock(..., fair => true) retried), kept for dlock.queue_ttl after each attempt; read them through dlock.queue';

-- Lock-delay (Chubby): a holding taken with a lock-delay has a row here,
-- tied to it by its fence.  When it ends uncleanly (its lease runs out, or
-- it is broken) the resource is not available before the end of the lease
-- plus lock_delay: from the holding's expires_at while it is in
-- dlock.leases, from available_at once reaped or broken.  A clean unlock
-- leaves available_at NULL: free at once.
CREATE TABLE IF NOT EXISTS dlock.delays (
    resource     text COLLATE "C" NOT NULL PRIMARY KEY,
    fence        bigint NOT NULL,
    lock_delay   interval NOT NULL,
    available_at timestamptz
);
COMMENT ON TABLE dlock.delays IS
    'Lock-delays of holdings (by fence), and when a resource freed uncleanly becomes available';

-- Holding values and leader election ([elect]).  The value of a holding
-- (who leads and where to reach it), tied to the holding by its fence like
-- a lock-delay: a row whose fence is not the resource's current holding is
-- dead.  election: taken by campaign, so that its expiry is announced with
-- candidate, term and value.
CREATE TABLE IF NOT EXISTS dlock.holding_values (
    resource text COLLATE "C" NOT NULL PRIMARY KEY,
    fence    bigint NOT NULL,
    holder   text COLLATE "C" NOT NULL,
    value    text,
    election boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE dlock.holding_values IS
    'Values of holdings (by fence), set by campaign and proclaim; read them through dlock.locks and dlock.leader()';
-- Every term campaign elects, kept for ten minutes (view dlock.terms), so
-- that an observer that polls sees every term.
CREATE TABLE IF NOT EXISTS dlock.term_log (
    resource   text COLLATE "C" NOT NULL,
    term       bigint NOT NULL,
    candidate  text COLLATE "C" NOT NULL,
    value      text,
    owner      regrole NOT NULL,
    elected_at timestamptz NOT NULL,
    PRIMARY KEY (resource, term)
);
COMMENT ON TABLE dlock.term_log IS
    'Terms elected by campaign in the last ten minutes; read them through dlock.terms';

-- Sessions ([sessions], 1.1): one keepalive for many holdings (etcd's
-- leases, ZooKeeper's sessions).  A holding taken with session => id has
-- its session in its row (dlock.leases, dlock.shares, dlock.permits:
-- column session) and no expiry of its own: its expiry is its session's
-- (_exp, helpers.sql), so keepalive updates one row however many holdings
-- hang off it.  Ids are fences (_next_fence): never reused, not across a
-- restore or a re-installation either.  A row leaves when the session is
-- closed, or by reap() once it has expired and has no holding left.
-- dlock.leases.session counts only while holder is not NULL: a release
-- leaves it, so that the session taking the row again changes no indexed
-- column (a HOT update, as a leased pair's).
CREATE TABLE IF NOT EXISTS dlock.session_rows (
    id         bigint NOT NULL PRIMARY KEY,
    holder     text COLLATE "C" NOT NULL,
    owner      regrole NOT NULL,
    ttl        interval NOT NULL,
    opened_at  timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
COMMENT ON TABLE dlock.session_rows IS
    'Sessions (open_session): their holder, role, ttl and expiry; read them through dlock.sessions';
-- Only when missing (as kinds above).  NULL: a leased holding.
DO $session$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['leases', 'shares', 'permits'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute
                        WHERE attrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('dlock.' OPERATOR(pg_catalog.||) t)
                          AND attname OPERATOR(pg_catalog.=) 'session' AND NOT attisdropped) THEN
            IF t OPERATOR(pg_catalog.=) 'leases' THEN
                ALTER TABLE dlock.leases ADD COLUMN session bigint;
                CREATE INDEX leases_session ON dlock.leases (session) WHERE session IS NOT NULL;
            ELSIF t OPERATOR(pg_catalog.=) 'shares' THEN
                ALTER TABLE dlock.shares ADD COLUMN session bigint;
                CREATE INDEX shares_session ON dlock.shares (session) WHERE session IS NOT NULL;
            ELSE
                ALTER TABLE dlock.permits ADD COLUMN session bigint;
                CREATE INDEX permits_session ON dlock.permits (session) WHERE session IS NOT NULL;
            END IF;
        END IF;
    END LOOP;
END
$session$;

REVOKE ALL ON dlock.portable, dlock.leases, dlock.fences, dlock.fence_epoch, dlock.fence_epoch_seal,
    dlock.ticket_seq, dlock.tickets, dlock.delays, dlock.holding_values, dlock.term_log,
    dlock.shares, dlock.permits, dlock.session_rows
    FROM PUBLIC;
