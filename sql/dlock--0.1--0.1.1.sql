/*
 * dlock--0.1--0.1.1.sql: upgrade from 0.1 to 0.1.1 (the fixes of the
 * adversarial review).  CREATE EXTENSION dlock installs 0.1 from its script
 * and applies this one, so every released version's script stays as it was
 * released.  The 0.1.1 library also runs under the 0.1 SQL until
 * ALTER EXTENSION dlock UPDATE: it names no object this script adds or drops
 * unless it has checked that the object exists.
 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION dlock UPDATE TO '0.1.1'" to load this file. \quit

-- session_holder() names this backend: a parallel worker must not answer it.
ALTER FUNCTION dlock.session_holder() PARALLEL RESTRICTED;

-- dlock.leases.took_over (0.1's scratch column) is no longer read or
-- written.  It stays: dropping it takes an ACCESS EXCLUSIVE lock on the
-- table, which would queue behind every lock() that is waiting and stop
-- every dlock call behind it until they are done.  An update must never do
-- that to a live database (test/t/090_upgrade.pl checks that it does not).

-- ---- Fences (fence.c; section kept by the fence's maintainer) ----
-- A fence is now the next value of dlock.fences, read as (epoch << 22) + n
-- with the epoch in milliseconds since 2020-01-01 UTC at the moment it
-- started.  A new epoch starts whenever the data may have been forked or
-- rewound: fence.c compares (system identifier, database, timeline,
-- postmaster start) with the row of dlock.fence_epoch.  pg_dump carries
-- neither, so a restored database always starts a new epoch.  0.1's dlock.fence_seq and
-- dlock.epoch stay: dropping them would take ACCESS EXCLUSIVE locks behind
-- open transactions that drew fences; the library stops using them once
-- dlock.fences exists, and reads dlock.epoch only when it starts an epoch,
-- to keep that epoch above every fence the 0.1 row implies.
CREATE SEQUENCE dlock.fences AS bigint
    MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
CREATE TABLE dlock.fence_epoch (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    sysid       text NOT NULL,         -- system identifier
    dboid       oid NOT NULL,          -- database
    timeline    bigint NOT NULL,       -- WAL insertion timeline
    started     timestamptz NOT NULL,  -- postmaster start time
    first_fence bigint NOT NULL        -- first fence of the epoch
);
REVOKE ALL ON dlock.fences, dlock.fence_epoch FROM PUBLIC;
-- Neither is marked for pg_dump: a data-only restore into this very
-- database must not set the sequence back (a restore elsewhere starts a new
-- epoch, above the clock and above every fence in the restored
-- dlock.leases).

-- ---------------------------------------------------------------------------
-- Events of prepared transactions (issue 8, defect 11).
--
-- A prepared transaction may not NOTIFY, so the events (released, expired,
-- broken) of a transaction that is prepared are written here instead
-- (src/events.c, at PRE_PREPARE), commit with COMMIT PREPARED or vanish
-- with ROLLBACK PREPARED, and the next reaper round (the background worker,
-- or dlock.reap()) deletes them and sends them with NOTIFY, waking one
-- waiter of each resource.  hash is the resource's (the first 64 bits of
-- its md5), for that wakeup.  Rows live from a COMMIT PREPARED to the next
-- round, so the table is not marked with pg_extension_config_dump: an event
-- is for the sessions LISTENing to this server now, and replayed from a dump
-- into another one it would announce a release that happened elsewhere,
-- long ago.  Users have no rights on it; only the C functions, as the
-- owner, write and read it.
-- ---------------------------------------------------------------------------
CREATE TABLE dlock.outbox (
    channel   text NOT NULL,
    payload   text NOT NULL,
    hash      bigint NOT NULL,
    queued_at timestamptz NOT NULL
);
REVOKE ALL ON dlock.outbox FROM PUBLIC;
