/*
 * portable/dlock.sql: dlock's portable edition, for PostgreSQL where no C
 * extension can be loaded (Amazon RDS and Aurora, Google Cloud SQL, Azure,
 * Supabase, Neon, Crunchy Bridge): the lock schema of the C extension's
 * [core], [fair], [elect] and [kinds] sections (see ../README.md,
 * "Portable edition"), in SQL and PL/pgSQL only, for PostgreSQL 14 to 18.
 * This file has the schema, [core], [fair] and [elect]; shared locks,
 * semaphores and several resources at once ([kinds]) are in kinds.sql,
 * next to it, which this script includes (\ir): run this one.
 *
 *     psql -d DB -f portable/dlock.sql
 *
 * Run it as the role that owns the database (or has CREATE on it), not as a
 * superuser.  It creates schema dlock, owned by that role, in one
 * transaction: an error leaves the database as it was.  Running it again
 * over a portable install replaces the functions and keeps every holding,
 * the fence sequence and the fence epoch.  It refuses a database where the
 * C extension dlock is installed.
 *
 * How it keeps the promises (the C edition's design, in SQL):
 * - Rights.  Users have USAGE on the schema, EXECUTE on the public
 *   functions and SELECT on dlock.locks; no rights on the tables or the
 *   sequence.  The public functions run SECURITY DEFINER as the installing
 *   role with search_path = pg_catalog, pg_temp, name every object with
 *   its schema, and pass every argument as a value: nothing the caller
 *   passes becomes SQL text (no EXECUTE anywhere).  Internal helpers
 *   (dlock._*) are closed to PUBLIC.
 * - The caller's role.  Inside a SECURITY DEFINER function current_user is
 *   the installing role, so the caller is read from the session: the role
 *   of SET ROLE if one is in force (the "role" setting, which SECURITY
 *   DEFINER does not change and which only members of a role can set),
 *   else session_user.  A call made from inside another SECURITY DEFINER
 *   function is therefore made by the session's role, not that function's
 *   owner (the C edition records the owner there).
 * - The per-resource lock.  Every acquisition first takes a
 *   transaction-level advisory lock keyed by the first 64 bits of
 *   md5(resource) with pg_try_advisory_xact_lock, never waiting, and keeps
 *   it to the end of its transaction when it acquires: another session's
 *   uncommitted acquisition makes try_lock return NULL at once instead of
 *   waiting for its row.  A resource that is held by another live holder
 *   is answered from a plain read, before that lock is tried, so a failed
 *   attempt leaves nothing behind (except after a race with another
 *   acquirer between the two reads: then the advisory lock stays until
 *   the attempt's transaction ends).  The row is then locked FOR UPDATE
 *   SKIP LOCKED: a row another transaction is changing (unlock, renew,
 *   reap) or pinning (assert_fence) is busy, not waited for.  assert_fence
 *   pins with FOR KEY SHARE, which renew's UPDATE does not conflict with,
 *   and every change of hands locks FOR UPDATE, which it does.  An xact
 *   lock locks an existing row FOR SHARE SKIP LOCKED, so a renewal in
 *   flight of a lease that has run out meanwhile makes it busy too.
 * - The fast path.  try_lock of an existing free row under default-like
 *   arguments, and unlock of a holding of count 1, run one statement each
 *   (_fast_lock, _fast_unlock, called first; NULL sends the call on to the
 *   general path): the same rules (the advisory lock tried, the row locked
 *   SKIP LOCKED, lock-delay, tickets and the fair-waiters mark looked at,
 *   the fence drawn after the epoch check), see "The fast path" below.
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
 *   session advisory lock held only around the read and the setval.
 * - Durability: an acquisition or renewal raises synchronous_commit to on
 *   for the rest of its transaction (SET LOCAL through set_config) when it
 *   is weaker (off, local, remote_write); remote_apply is kept.
 * - Events: pg_notify, which PostgreSQL delivers when the transaction
 *   commits and drops when it rolls back.
 * - Fair queues: client-side tickets (try_lock(..., fair => true)) are rows
 *   of dlock.tickets, kept for dlock.queue_ttl after each attempt.  A
 *   session waiting in lock(..., fair => true) or campaign holds its ticket
 *   as session-level advisory locks (_qkey), seen by others in pg_locks
 *   while its transaction is open and given back when the wait ends, also
 *   by cancel, or with the session.  A wait retries each attempt in a
 *   subtransaction that is rolled back when it fails, so the resource's
 *   advisory lock never stays with a waiter that is not served.
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
-- (The old _try and _wait_loop stay, as wrappers, for waits in progress:
-- kinds.sql.)
COMMENT ON SCHEMA dlock IS
    'dlock (portable edition): leased distributed locks with fencing tokens (see the dlock README)';
GRANT USAGE ON SCHEMA dlock TO PUBLIC;

-- The edition and version installed (and the mark of a portable install).
CREATE TABLE IF NOT EXISTS dlock.portable (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    version      text NOT NULL,
    installed_at timestamptz NOT NULL
);
INSERT INTO dlock.portable (version, installed_at) VALUES ('0.4', pg_catalog.clock_timestamp())
    ON CONFLICT (one) DO UPDATE SET version = excluded.version;
COMMENT ON TABLE dlock.portable IS 'The dlock portable edition''s version in this database';

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
-- The xmin the dlock.fence_epoch row had when it was written: a copy of
-- the row (a restored dump) has another.
CREATE TABLE IF NOT EXISTS dlock.fence_epoch_seal (
    one        boolean PRIMARY KEY DEFAULT true CHECK (one),
    epoch_xmin text NOT NULL
);
-- secret: the key of the per-session mark of a checked epoch (see
-- _next_fence); random, readable only by the installing role.
ALTER TABLE dlock.fence_epoch_seal ADD COLUMN IF NOT EXISTS
    secret text NOT NULL DEFAULT pg_catalog.md5(pg_catalog.gen_random_uuid()::text || pg_catalog.gen_random_uuid()::text);
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

REVOKE ALL ON dlock.portable, dlock.leases, dlock.fences, dlock.fence_epoch, dlock.fence_epoch_seal,
    dlock.ticket_seq, dlock.tickets, dlock.delays, dlock.holding_values, dlock.term_log,
    dlock.shares, dlock.permits
    FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- Internal helpers (EXECUTE revoked from PUBLIC; called by the functions
-- below, which run as the installing role).
-- ---------------------------------------------------------------------------

-- _text_arg: NULL, empty and over-long resource, holder: 22023 naming it.
CREATE OR REPLACE FUNCTION dlock._text_arg(val text, what text, maxlen integer)
    RETURNS text LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF val IS NULL THEN
        RAISE EXCEPTION '% must not be null', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(val) = 0 THEN
        RAISE EXCEPTION '% must not be empty', what USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(val) > maxlen THEN
        RAISE EXCEPTION '% must be at most % bytes long', what, maxlen
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('The %s given is %s bytes long.', what, octet_length(val));
    END IF;
    RETURN val;
END
$$;

-- _setting: a setting of the C edition (an integer of milliseconds, or
-- a value with a unit such as '30s' or '1min'), read with
-- current_setting(name, true); dflt when unset.
CREATE OR REPLACE FUNCTION dlock._setting(name text, dflt interval)
    RETURNS interval LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v text := btrim(current_setting(name, true));
BEGIN
    IF v IS NULL OR v = '' THEN
        RETURN dflt;
    END IF;
    IF v ~ '^[0-9]+$' THEN
        RETURN make_interval(secs => v::numeric / 1000);
    END IF;
    BEGIN       -- a block (a subtransaction) only when the setting is set with a unit
        RETURN v::interval;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'invalid value for parameter "%": "%"', name, v
            USING ERRCODE = 'invalid_parameter_value';
    END;
END
$$;

-- _expiry: now + lease as the calendar applies it, refused (22023) unless
-- it ends after now and at most 1000 years (of 365.25 days) later.
-- Components so large that the sum could leave the timestamp range are
-- refused first, so every bad lease is 22023, never 22008.
CREATE OR REPLACE FUNCTION dlock._expiry(now timestamptz, lease interval)
    RETURNS timestamptz LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    months numeric := extract(year FROM lease) * 12 + extract(month FROM lease);
    days   numeric;
    usecs  numeric;
    expires timestamptz;
    max_usecs constant numeric := 1000 * 36525 * 86400000000::numeric / 100;
BEGIN
    IF abs(months) > 24000 THEN
        RAISE EXCEPTION 'lease must be finite and at most 1000 years' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    days := extract(day FROM lease);
    IF abs(days) > 732000 THEN
        RAISE EXCEPTION 'lease must be finite and at most 1000 years' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- extract(epoch) counts a year as 365.25 days and a month as 30.
    usecs := (extract(epoch FROM lease)
              - extract(year FROM lease) * 36525 * 864
              - extract(month FROM lease) * 30 * 86400
              - days * 86400) * 1000000;
    IF abs(usecs) > max_usecs THEN
        RAISE EXCEPTION 'lease must be finite and at most 1000 years' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    expires := now + lease;
    IF expires <= now THEN
        RAISE EXCEPTION 'lease must be positive' USING ERRCODE = 'invalid_parameter_value',
            DETAIL = 'The lease given ends at or before the moment of the call.';
    END IF;
    IF extract(epoch FROM expires) - extract(epoch FROM now) > max_usecs / 1000000 THEN
        RAISE EXCEPTION 'lease must be finite and at most 1000 years' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN expires;
END
$$;

-- _lease: the lease argument (NULL: dlock.default_lease), checked now.
CREATE OR REPLACE FUNCTION dlock._lease(lease interval)
    RETURNS interval LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l interval := coalesce(lease, dlock._setting('dlock.default_lease', interval '30 seconds'));
    e timestamptz;
BEGIN
    e := dlock._expiry(clock_timestamp(), l);
    RETURN l;
END
$$;

-- _wait: the wait argument: NULL (no limit) stays NULL; negative: 22023.
CREATE OR REPLACE FUNCTION dlock._wait(wait interval)
    RETURNS interval LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF wait IS NOT NULL AND extract(epoch FROM wait) < 0 THEN
        RAISE EXCEPTION 'wait must not be negative' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF wait IS NOT NULL AND extract(epoch FROM wait) > 100 * 365.25 * 86400 THEN
        RETURN NULL;        -- beyond a century: no limit
    END IF;
    RETURN wait;
END
$$;

-- _fence_arg: check's and assert_fence's fence.
CREATE OR REPLACE FUNCTION dlock._fence_arg(fence bigint)
    RETURNS bigint LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF fence IS NULL THEN
        RAISE EXCEPTION 'fence must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN fence;
END
$$;

-- _writable: state changes on a standby or in a read-only transaction: 25006.
CREATE OR REPLACE FUNCTION dlock._writable(fname text)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF pg_is_in_recovery() THEN
        RAISE EXCEPTION 'cannot execute % during recovery', fname
            USING ERRCODE = 'read_only_sql_transaction', HINT = 'Locks are taken on the primary server.';
    END IF;
    IF current_setting('transaction_read_only') = 'on' THEN
        RAISE EXCEPTION 'cannot execute % in a read-only transaction', fname
            USING ERRCODE = 'read_only_sql_transaction';
    END IF;
    RETURN true;
END
$$;

-- _role: the calling role (see the header): SET ROLE's role, else the
-- session user.  _caller: that role and whether it is a superuser.
-- (The helpers on the hot path are PL/pgSQL, not SQL functions: a SQL
-- function that cannot be inlined, as none with SET search_path can, is
-- planned again at every call, PL/pgSQL keeps its plans for the session.)
CREATE OR REPLACE FUNCTION dlock._role()
    RETURNS oid LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- By name through regrole (a catalog cache lookup, cheaper than a scan
    -- of pg_roles; quote_ident keeps any name exact).
    RETURN pg_catalog.to_regrole(pg_catalog.quote_ident(
               CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
                    THEN session_user::text
                    ELSE pg_catalog.current_setting('role') END));
END
$$;

CREATE OR REPLACE FUNCTION dlock._caller(OUT roleid oid, OUT is_super boolean)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    roleid := dlock._role();
    SELECT r.rolsuper INTO is_super FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) roleid;
END
$$;

-- _may_poll: a wait polls, and only READ COMMITTED statements see what
-- committed since the transaction began: under REPEATABLE READ and
-- SERIALIZABLE a wait could never see the release it waits for, so it is
-- refused (0A000) rather than left to sleep.  One try (wait '0') is fine.
CREATE OR REPLACE FUNCTION dlock._may_poll(fname text)
    RETURNS void LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION '% cannot wait in a % transaction', fname, upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'feature_not_supported',
                  DETAIL = 'The portable edition waits by polling, and this transaction''s snapshot would never see the release.',
                  HINT = 'Wait in a READ COMMITTED transaction (or autocommit), or use try_lock.';
    END IF;
END
$$;

-- _key: the resource's advisory lock key (the first 64 bits of its md5).
-- (_key, _qkey, _role, _sync and _event are copied inline in _fast_lock
-- and _fast_unlock: change them together.)
CREATE OR REPLACE FUNCTION dlock._key(resource text)
    RETURNS bigint LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(resource), 1, 16))::bit(64)::bigint;
END
$$;

-- _sync: make this transaction's commit durable (at least synchronous_commit
-- = on, a stronger setting kept), after an acquisition or renewal.
CREATE OR REPLACE FUNCTION dlock._sync()
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    RETURN true;
END
$$;

-- _event: NOTIFY the resource's channel, sent when the transaction commits.
CREATE OR REPLACE FUNCTION dlock._event(event text, resource text, fence bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('dlock_' || md5(resource),
                      '{"event":' || to_json(event)::text || ',"resource":' || to_json(resource)::text
                      || ',"fence":' || fence::text || '}');
    RETURN true;
END
$$;

-- _event_holding: an event of a holding that carries its holder and value
-- (elections: elected, proclaimed, resigned, expired): resource and fence
-- as _event's, with candidate, term (the fence) and value; a value that
-- would make the payload longer than NOTIFY takes is left out
-- ("value_omitted": true; dlock.leader() has it).
CREATE OR REPLACE FUNCTION dlock._event_holding(event text, resource text, fence bigint,
                                                candidate text, value text)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    head text := '{"event":' || to_json(event)::text || ',"resource":' || to_json(resource)::text
                 || ',"fence":' || fence::text || ',"candidate":' || to_json(candidate)::text
                 || ',"term":' || fence::text;
    payload text := head || ',"value":' || coalesce(to_json(value)::text, 'null') || '}';
BEGIN
    IF octet_length(payload) >= 8192 - 64 - 128 THEN
        payload := head || ',"value_omitted":true}';
    END IF;
    PERFORM pg_notify('dlock_' || md5(resource), payload);
END
$$;

-- _history: (system identifier, database, timeline, postmaster start) now.
CREATE OR REPLACE FUNCTION dlock._history(OUT sysid text, OUT dboid oid, OUT timeline bigint,
                                          OUT started timestamptz)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- pg_control_system() is open to PUBLIC in PostgreSQL; a service that
    -- closes it (or has no WAL of its own to name, as Aurora may) leaves the
    -- others, and the epoch row's xmin, to tell: '' and -1 stand for unknown.
    BEGIN
        IF has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE') THEN
            SELECT s.system_identifier::text INTO sysid FROM pg_control_system() s;
        END IF;
        -- The WAL file name's first 8 hex digits: the insertion timeline.
        timeline := ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::bigint;
    EXCEPTION WHEN feature_not_supported OR insufficient_privilege OR object_not_in_prerequisite_state THEN
        NULL;
    END;
    sysid := coalesce(sysid, '');
    timeline := coalesce(timeline, -1);
    SELECT d.oid INTO dboid FROM pg_database d WHERE d.datname = current_database();
    started := pg_postmaster_start_time();
END
$$;

-- _epoch_mark: the checked-epoch mark _next_fence makes and compares (see
-- there); no row when the seal does not match the epoch row.  A view, so
-- that a statement can read it without a function call (_fast_lock does);
-- closed to PUBLIC.
CREATE OR REPLACE VIEW dlock._epoch_mark AS
    SELECT pg_catalog.md5(s.secret OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) e.xmin::text
                          OPERATOR(pg_catalog.||) ':'
                          OPERATOR(pg_catalog.||) extract(epoch FROM pg_catalog.pg_postmaster_start_time())::text
                          OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.pg_backend_pid()::text
                          OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) pg_catalog.current_database()) AS mark
      FROM dlock.fence_epoch e, dlock.fence_epoch_seal s
     WHERE s.epoch_xmin OPERATOR(pg_catalog.=) e.xmin::text;
REVOKE ALL ON dlock._epoch_mark FROM PUBLIC;

-- _next_fence: draw a fence; call only after the resource's row is locked
-- (or, for a new resource, its advisory lock taken).
--
-- The full epoch check (_history: the control file's system identifier,
-- the database, the WAL timeline, the postmaster start, against the
-- dlock.fence_epoch row and its seal) is made once per backend and epoch
-- row; it then leaves a mark in the session setting
-- dlock_portable.epoch_checked: md5(secret, the row's xmin, postmaster
-- start, backend pid, database name; the view _epoch_mark), the secret a random key in
-- dlock.fence_epoch_seal that only the installing role can read.  Each
-- later draw reads the row (as before) and, when the mark matches, skips
-- the rest.  Why that is safe: of what _history reads, the system
-- identifier, the postmaster start and the database cannot change while a
-- backend lives; the timeline changes only at the end of recovery, before
-- any fence can be drawn (_writable refuses during recovery), so never
-- after a mark was made in that postmaster's life.  Everything else that
-- calls for a new epoch replaces or rewrites the row: a new epoch (the
-- row rewritten: a new xmin), a restore of a dump or of copied data (a
-- new xmin), a re-installation (a new row and a new secret), a restart,
-- PITR or a restored base backup (a new postmaster start), and the mark
-- names the row's xmin and the postmaster start.  A caller can set the
-- setting, but without the secret cannot make a mark that matches; a mark
-- copied from another session matches only if it names this row,
-- postmaster and database, for which the check it records holds as well.
CREATE OR REPLACE FUNCTION dlock._next_fence()
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h record;
    same boolean;
    mark text;
    cur bigint;
    epoch bigint;
    fence bigint;
BEGIN
    -- The checked-epoch mark (see the comment above): valid only for this
    -- very epoch row, postmaster, backend and database, and only with the
    -- secret, which the caller cannot read.
    SELECT m.mark INTO mark FROM dlock._epoch_mark m;
    IF mark IS NOT NULL AND current_setting('dlock_portable.epoch_checked', true) = mark THEN
        RETURN nextval('dlock.fences');
    END IF;
    SELECT * INTO h FROM dlock._history();
    SELECT e.sysid = h.sysid AND e.dboid = h.dboid AND e.timeline = h.timeline
           AND e.started = h.started AND s.epoch_xmin = e.xmin::text
      INTO same
      FROM dlock.fence_epoch e, dlock.fence_epoch_seal s;
    IF same THEN
        -- Session-level: a rollback of this transaction takes it back.
        PERFORM set_config('dlock_portable.epoch_checked', mark, false);
        RETURN nextval('dlock.fences');
    END IF;

    -- A new epoch.  Jumps take this session-level lock for the read and the
    -- setval only, so that no two jumps interleave (the second would set
    -- the sequence back); it is given back whatever happens.  dlock's own
    -- advisory locks use the two-key form: no resource's key (one bigint)
    -- can collide with them.
    PERFORM pg_advisory_lock(1684828003, 1);
    BEGIN
        SELECT CASE WHEN f.is_called THEN f.last_value ELSE f.last_value - 1 END
          INTO cur FROM dlock.fences f;
        epoch := greatest((cur >> 22) + 1,
                          floor(extract(epoch FROM clock_timestamp() - timestamptz '2020-01-01 00:00:00+00')
                                * 1000)::bigint,
                          (SELECT (max(l.fence) >> 22) + 1 FROM dlock.leases l));
        IF epoch >= (1::bigint << 41) THEN
            RAISE EXCEPTION 'fence epoch % is out of range', epoch
                USING ERRCODE = 'program_limit_exceeded',
                      DETAIL = 'Fence epochs are milliseconds since 2020-01-01 and end in 2089.';
        END IF;
        fence := epoch << 22;
        PERFORM setval('dlock.fences', fence, true);
    EXCEPTION
        WHEN query_canceled THEN
            PERFORM pg_advisory_unlock(1684828003, 1);
            RAISE;
        WHEN OTHERS THEN
            PERFORM pg_advisory_unlock(1684828003, 1);
            RAISE;
    END;
    PERFORM pg_advisory_unlock(1684828003, 1);
    RAISE LOG 'dlock: new fence epoch in database %, first fence %', h.dboid, fence
        USING DETAIL = format('System identifier %s, timeline %s.', h.sysid, h.timeline);

    -- Record it, unless another transaction is recording one right now
    -- (never wait for its uncommitted row).
    IF pg_try_advisory_xact_lock(1684828003, 2) THEN
        INSERT INTO dlock.fence_epoch AS e (sysid, dboid, timeline, started, first_fence)
             VALUES (h.sysid, h.dboid, h.timeline, h.started, fence)
        ON CONFLICT (one) DO UPDATE
               SET sysid = excluded.sysid, dboid = excluded.dboid, timeline = excluded.timeline,
                   started = excluded.started, first_fence = excluded.first_fence;
        INSERT INTO dlock.fence_epoch_seal AS s (epoch_xmin)
             SELECT e.xmin::text FROM dlock.fence_epoch e
        ON CONFLICT (one) DO UPDATE SET epoch_xmin = excluded.epoch_xmin;
    END IF;
    RETURN fence;
END
$$;

-- _lock_delay: the lock_delay argument (NULL: dlock.lock_delay), between 0
-- and 1 hour, without months or days; NULL when it is zero.
CREATE OR REPLACE FUNCTION dlock._lock_delay(lock_delay interval)
    RETURNS interval LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    d interval;
BEGIN
    IF lock_delay IS NULL THEN
        d := dlock._setting('dlock.lock_delay', interval '0');
        IF d < interval '0' OR d > interval '1 hour' OR extract(day FROM d) <> 0
           OR extract(month FROM d) <> 0 OR extract(year FROM d) <> 0 THEN
            RAISE EXCEPTION 'invalid value for parameter "dlock.lock_delay": "%"', current_setting('dlock.lock_delay', true)
                USING ERRCODE = 'invalid_parameter_value', DETAIL = 'It must be between 0 and 1 hour.';
        END IF;
    ELSE
        d := lock_delay;
        IF extract(month FROM d) <> 0 OR extract(year FROM d) <> 0 OR extract(day FROM d) <> 0 THEN
            RAISE EXCEPTION 'lock_delay must be between 0 and 1 hour' USING ERRCODE = 'invalid_parameter_value',
                DETAIL = 'A lock_delay is given in hours, minutes and seconds, not in days or months.';
        END IF;
        IF d < interval '0' OR d > interval '1 hour' THEN
            RAISE EXCEPTION 'lock_delay must be between 0 and 1 hour' USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    RETURN CASE WHEN d > interval '0' THEN d END;
END
$$;

-- _fair: the fair argument.
CREATE OR REPLACE FUNCTION dlock._fair(fair boolean)
    RETURNS boolean LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF fair IS NULL THEN
        RAISE EXCEPTION 'fair must not be null' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN fair;
END
$$;

-- _queue_ttl: dlock.queue_ttl (default 10s), between 1 ms and 1 hour.
CREATE OR REPLACE FUNCTION dlock._queue_ttl()
    RETURNS interval LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    t interval := dlock._setting('dlock.queue_ttl', interval '10 seconds');
BEGIN
    IF t < interval '1 millisecond' OR t > interval '1 hour' OR extract(day FROM t) <> 0
       OR extract(month FROM t) <> 0 OR extract(year FROM t) <> 0 THEN
        RAISE EXCEPTION 'invalid value for parameter "dlock.queue_ttl": "%"', current_setting('dlock.queue_ttl', true)
            USING ERRCODE = 'invalid_parameter_value', DETAIL = 'It must be between 1 ms and 1 hour.';
    END IF;
    RETURN t;
END
$$;

-- _qkey: the first key of the resource's queue locks (two-key advisory
-- locks): 32 bits of its md5, never dlock's own first keys (1684828003,
-- 1684828005, and kinds.sql's 1684828006 and 1684828007).
-- (_qkey, 0) is the "fair waiters" mark, held shared by every session
-- waiting in lock() with a ticket; (_qkey, low 32 bits of the ticket) is
-- that ticket, held exclusive.  Two resources whose keys collide only
-- hold each other's newcomers off while a waiter of the other waits.
CREATE OR REPLACE FUNCTION dlock._qkey(resource text)
    RETURNS integer LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(resource), 17, 8))::bit(32)::integer;
BEGIN
    RETURN CASE WHEN k OPERATOR(pg_catalog.=) ANY ('{1684828003,1684828005,1684828006,1684828007}'::integer[])
                THEN 1684828004 ELSE k END;
END
$$;

-- _ahead: is a live ticket of someone else ahead of p_ticket (the caller's
-- in-server ticket, or else its holder's live client ticket; with neither,
-- any ticket)?  In-server tickets are looked up in pg_locks only when the
-- "fair waiters" mark says there are any, and compared by their low 32
-- bits modulo 2^32 (the live tickets of a resource span far fewer).
CREATE OR REPLACE FUNCTION dlock._ahead(p_resource text, p_holder text, p_role oid, p_ticket bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    mine bigint := p_ticket;
    k integer := dlock._qkey(p_resource);
    mark boolean;
BEGIN
    -- One statement for the client tickets (the holder's own, if any, as
    -- the bound): a resource without tickets costs one index probe.
    IF EXISTS (SELECT FROM dlock.tickets t
                WHERE t.resource = p_resource AND t.expires_at > clock_timestamp()
                  AND t.ticket < coalesce(mine,
                                          (SELECT x.ticket FROM dlock.tickets x
                                            WHERE x.resource = p_resource AND x.holder = p_holder
                                              AND x.owner = p_role AND x.expires_at > clock_timestamp()),
                                          9223372036854775807)) THEN
        RETURN true;
    END IF;
    IF pg_try_advisory_lock(k, 0) THEN
        mark := pg_advisory_unlock(k, 0);
        RETURN false;       -- nobody else waits in lock() with a ticket
    END IF;
    IF mine IS NULL AND p_holder IS NOT NULL THEN
        SELECT t.ticket INTO mine FROM dlock.tickets t
         WHERE t.resource = p_resource AND t.holder = p_holder AND t.owner = p_role
           AND t.expires_at > clock_timestamp();
    END IF;
    RETURN EXISTS (SELECT FROM pg_locks x
                    WHERE x.locktype = 'advisory' AND x.objsubid = 2 AND x.granted
                      AND x.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND x.classid = k::bit(32)::bigint::oid AND x.objid <> 0::oid
                      AND x.pid <> pg_backend_pid() AND x.mode = 'ExclusiveLock'
                      AND (mine IS NULL
                           OR ((x.objid::bigint - (mine & 4294967295) + 6442450944) % 4294967296) - 2147483648 < 0));
END
$$;

-- _queue_up: a client-side fair attempt that did not get the lock takes a
-- ticket, or keeps its live one for another dlock.queue_ttl.  The holder's
-- ticket row is written under its writer lock (a two-key advisory lock
-- taken without waiting, to the end of the transaction): another
-- transaction of the same holder writing it meanwhile is left to do so.
CREATE OR REPLACE FUNCTION dlock._queue_up(p_resource text, p_holder text, p_role oid)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    ttl interval := dlock._queue_ttl();
BEGIN
    IF NOT pg_try_advisory_xact_lock(1684828005,
                                     hashtext(p_resource || chr(1) || p_holder || chr(1) || p_role::text)) THEN
        RETURN;
    END IF;
    UPDATE dlock.tickets t SET expires_at = v_now + ttl
     WHERE t.resource = p_resource AND t.holder = p_holder AND t.owner = p_role::regrole
       AND t.expires_at > v_now;
    IF FOUND THEN
        RETURN;
    END IF;
    DELETE FROM dlock.tickets t
     WHERE t.resource = p_resource AND t.holder = p_holder AND t.owner = p_role::regrole;
    INSERT INTO dlock.tickets (resource, ticket, holder, owner, queued_at, expires_at)
         VALUES (p_resource, nextval('dlock.ticket_seq'), p_holder, p_role::regrole, v_now, v_now + ttl);
END
$$;

-- _delayed: is the resource of this (free or expired) row still under a
-- lock-delay?
CREATE OR REPLACE FUNCTION dlock._delayed(r dlock.leases, p_now timestamptz)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN coalesce((SELECT CASE WHEN r.holder IS NOT NULL
                                 THEN r.expires_at OPERATOR(pg_catalog.+) d.lock_delay
                                 ELSE d.available_at END OPERATOR(pg_catalog.>) p_now
                       FROM dlock.delays d
                      WHERE d.resource OPERATOR(pg_catalog.=) r.resource
                        AND d.fence OPERATOR(pg_catalog.=) r.fence), false);
END
$$;

-- _acquired: a new holding (or a re-entry) of holder: its client ticket
-- leaves the queue, and a new holding records its lock-delay.
CREATE OR REPLACE FUNCTION dlock._acquired(p_resource text, p_holder text, p_role oid, p_fence bigint,
                                           p_new boolean, p_delay interval)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    DELETE FROM dlock.tickets t
     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                WHERE x.resource = p_resource AND x.holder = p_holder
                                  AND x.owner = p_role::regrole
                                  FOR UPDATE SKIP LOCKED));
    IF p_new AND p_delay IS NOT NULL THEN
        INSERT INTO dlock.delays AS d (resource, fence, lock_delay, available_at)
             VALUES (p_resource, p_fence, p_delay, NULL)
        ON CONFLICT (resource) DO UPDATE
               SET fence = excluded.fence, lock_delay = excluded.lock_delay, available_at = NULL;
    END IF;
    RETURN true;
END
$$;

-- _attempt: one acquisition attempt that never waits: the fence if
-- acquired or re-entered, NULL if the resource is busy (held by another,
-- under lock-delay, or its queue headed by someone else).  p_ticket: the
-- ticket of a wait in lock() (NULL: none); a fair attempt without one
-- (client-side) that does not get the lock takes or keeps a client ticket.
CREATE OR REPLACE FUNCTION dlock._attempt(p_resource text, p_holder text, p_lease interval, p_role oid,
                                          p_fair boolean, p_delay interval, p_ticket bigint)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
    v_now timestamptz;
    v_fence bigint;
    v_exp timestamptz;
    rc boolean := current_setting('transaction_isolation') = 'read committed';
    client boolean := p_fair AND p_ticket IS NULL;
    ok boolean;
BEGIN
    -- This transaction's own transaction-scoped lock excludes a lease, even
    -- one of this transaction (as in the C extension).
    IF coalesce(current_setting('dlock.xact_' || md5(p_resource), true), '') <> '' THEN
        RETURN NULL;
    END IF;
    -- Held by another live holder, delayed or queued for: answered without
    -- taking anything (but a client-side fair attempt's ticket).
    IF rc THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
        v_now := clock_timestamp();
        IF FOUND AND r.holder IS NOT NULL AND r.expires_at > v_now THEN
            IF NOT (r.holder = p_holder AND r.owner = p_role) THEN
                IF client THEN
                    PERFORM dlock._queue_up(p_resource, p_holder, p_role);
                END IF;
                RETURN NULL;
            END IF;
        ELSIF (FOUND AND dlock._delayed(r, v_now)) OR dlock._ahead(p_resource, p_holder, p_role, p_ticket)
              OR (FOUND AND r.kinds AND NOT dlock._gate(p_resource, p_holder, p_role, p_ticket, false)) THEN
            IF client THEN
                PERFORM dlock._queue_up(p_resource, p_holder, p_role);
            END IF;
            RETURN NULL;
        END IF;
    END IF;
    IF NOT pg_try_advisory_xact_lock(dlock._key(p_resource)) THEN
        -- Another transaction is acquiring it; a fair attempt still takes
        -- its place (unless it is the holder's re-entry).
        IF client AND NOT (r.holder IS NOT NULL AND r.holder = p_holder AND r.owner = p_role) THEN
            PERFORM dlock._queue_up(p_resource, p_holder, p_role);
        END IF;
        RETURN NULL;
    END IF;
    -- Look again now that no other acquirer can move (a new snapshot).
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    v_now := clock_timestamp();
    IF FOUND AND r.holder IS NOT NULL AND r.expires_at > v_now THEN
        IF NOT (r.holder = p_holder AND r.owner = p_role) THEN
            IF client THEN
                PERFORM dlock._queue_up(p_resource, p_holder, p_role);
            END IF;
            RETURN NULL;
        END IF;
    ELSIF (FOUND AND dlock._delayed(r, v_now)) OR dlock._ahead(p_resource, p_holder, p_role, p_ticket) THEN
        IF client THEN
            PERFORM dlock._queue_up(p_resource, p_holder, p_role);
        END IF;
        RETURN NULL;
    END IF;
    IF NOT FOUND THEN
        v_exp := dlock._expiry(v_now, p_lease);
        v_fence := dlock._next_fence();
        INSERT INTO dlock.leases (resource, holder, owner, count, fence, lease,
                                  acquired_at, renewed_at, expires_at)
             VALUES (p_resource, p_holder, p_role::regrole, 1, v_fence, p_lease, v_now, v_now, v_exp)
        ON CONFLICT (resource) DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        ok := dlock._acquired(p_resource, p_holder, p_role, v_fence, true, p_delay) AND dlock._sync();
        RETURN v_fence;
    END IF;
    -- Lock the row; one another transaction is changing or pinning is busy.
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        IF client THEN
            PERFORM dlock._queue_up(p_resource, p_holder, p_role);
        END IF;
        RETURN NULL;
    END IF;
    v_now := clock_timestamp();
    -- Shared holdings or permits by that name ([kinds]): kinds.sql's rules
    -- first (other kind: 42809; others' shared holdings: busy).
    IF r.kinds AND NOT dlock._gate(p_resource, p_holder, p_role, p_ticket) THEN
        IF client THEN
            PERFORM dlock._queue_up(p_resource, p_holder, p_role);
        END IF;
        RETURN NULL;
    END IF;
    IF r.holder IS NOT NULL AND r.expires_at > v_now THEN
        IF NOT (r.holder = p_holder AND r.owner = p_role) THEN
            IF client THEN
                PERFORM dlock._queue_up(p_resource, p_holder, p_role);
            END IF;
            RETURN NULL;
        END IF;
        -- Re-entry: count + 1, expiry at least now + lease, same fence.
        IF r.count >= 2147483647 THEN
            RAISE EXCEPTION 'holder "%" has re-entered resource "%" too many times', p_holder, p_resource
                USING ERRCODE = 'program_limit_exceeded',
                      DETAIL = 'A holding is re-entered at most 2147483646 times.';
        END IF;
        v_exp := greatest(r.expires_at, dlock._expiry(v_now, p_lease));
        UPDATE dlock.leases l SET count = l.count + 1, expires_at = v_exp, renewed_at = v_now
         WHERE l.resource = p_resource;
        ok := dlock._acquired(p_resource, p_holder, p_role, r.fence, false, NULL) AND dlock._sync();
        RETURN r.fence;
    END IF;
    IF dlock._delayed(r, v_now) THEN
        IF client THEN
            PERFORM dlock._queue_up(p_resource, p_holder, p_role);
        END IF;
        RETURN NULL;
    END IF;
    -- Free, or expired (lazy expiry): take it with a new fence.
    v_exp := dlock._expiry(v_now, p_lease);
    v_fence := dlock._next_fence();
    UPDATE dlock.leases l
       SET holder = p_holder, owner = p_role::regrole, count = 1, fence = v_fence, lease = p_lease,
           acquired_at = v_now, renewed_at = v_now, expires_at = v_exp, released_at = NULL
     WHERE l.resource = p_resource;
    ok := dlock._acquired(p_resource, p_holder, p_role, v_fence, true, p_delay) AND dlock._sync();
    RETURN v_fence;
END
$$;

-- _release: end (or count down) a locked row's holding; the count left.
CREATE OR REPLACE FUNCTION dlock._release(p_resource text, p_fence bigint, p_left integer, p_event text)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v dlock.holding_values%ROWTYPE;
    v_holder text;
    ok boolean;
BEGIN
    IF p_left > 0 THEN
        UPDATE dlock.leases l SET count = p_left WHERE l.resource = p_resource;
    ELSE
        -- Ended uncleanly: a lock-delay holds the resource off until the
        -- end of the lease plus the delay.
        IF p_event IN ('expired', 'broken') THEN
            UPDATE dlock.delays d SET available_at = l.expires_at + d.lock_delay
              FROM dlock.leases l
             WHERE d.resource = p_resource AND d.fence = p_fence AND l.resource = p_resource;
        END IF;
        -- An election's expiry, and a resignation, carry candidate, term
        -- and value (read only for those events).
        IF p_event IN ('resigned', 'expired') THEN
            SELECT l.holder INTO v_holder FROM dlock.leases l WHERE l.resource = p_resource;
            SELECT * INTO v FROM dlock.holding_values x WHERE x.resource = p_resource AND x.fence = p_fence;
        END IF;
        UPDATE dlock.leases l SET holder = NULL, count = 0, released_at = clock_timestamp()
         WHERE l.resource = p_resource;
        IF p_event = 'resigned' OR (p_event = 'expired' AND v.election IS TRUE) THEN
            PERFORM dlock._event_holding(p_event, p_resource, p_fence, v_holder, v.value);
        ELSE
            ok := dlock._event(p_event, p_resource, p_fence);
        END IF;
    END IF;
    RETURN p_left;
END
$$;

-- _may_change: may the caller unlock or renew this row of holder's?  true
-- if it is holder's live holding taken by the caller's role (or the caller
-- is a superuser; p_super NULL: look it up); 42501 for another role's;
-- false if it is not holder's live holding at all.
CREATE OR REPLACE FUNCTION dlock._may_change(r dlock.leases, p_holder text, p_role oid, p_super boolean,
                                             action text)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF r.resource IS NULL OR r.holder IS NULL OR r.expires_at <= clock_timestamp()
       OR r.holder <> p_holder THEN
        RETURN false;
    END IF;
    IF r.owner = p_role THEN
        RETURN true;
    END IF;
    IF p_super IS NULL THEN     -- looked up only when it matters
        SELECT x.rolsuper INTO p_super FROM pg_roles x WHERE x.oid = p_role;
    END IF;
    IF p_super THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'permission denied to % a lock held by role "%"', action, r.owner::text
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = format('Only the role that took a lock, or a superuser, can %s it.', action);
END
$$;

-- ---------------------------------------------------------------------------
-- The fast path (issue 22): try_lock and unlock of the common case in a
-- few statements, called first by try_lock and unlock; NULL means "not
-- decided here": the caller goes on with the general path (_attempt,
-- unlock's own body), which decides every case, this one included.
--
-- _fast_lock takes only an existing row that is free (released or
-- reaped: holder NULL), under default-like arguments (fair false, no
-- lock-delay given or set, a lease of hours, minutes and seconds only, a
-- READ COMMITTED read-write transaction that holds no transaction-scoped
-- lock of the resource), with no lock-delay in force for the row's last
-- fence, no live ticket and no ticket of the holder's own, and no session
-- waiting in lock() with a ticket (the "fair waiters" mark), and no shared
-- holdings or permits ever recorded on the row (kinds: try_lock calls it
-- for exclusive requests only).  Anything else -- a new resource, a
-- re-entry, an expired holding not yet reaped, a busy row, a row of
-- kinds.sql's -- goes to the general path.  The promises, as the general path keeps them:
-- - One UPDATE decides (see there): the row is judged on the version its
--   snapshot sees; then locked FOR UPDATE SKIP LOCKED, and taken only if
--   the version locked is the one judged (the same xmin), so what was
--   checked still holds (a lock-delay is written with the release of its
--   fence's holding, a row version the check saw or not at all); only then
--   is the resource's advisory lock tried, with
--   pg_try_advisory_xact_lock, as every acquirer does.
-- - Never waiting: nothing in it waits (SKIP LOCKED, try locks): another
--   transaction's uncommitted acquisition, renewal, release or pin of
--   the row makes it busy, and the general path answers (NULL).  As in
--   the general path, a failed attempt leaves nothing behind except after
--   a race (the row changed between the snapshot and the lock, or another
--   acquirer holds the advisory lock): then the row lock and the advisory
--   lock may stay to the end of the attempt's transaction.
-- - Fences: drawn in the UPDATE's SET list, after the row is locked, from
--   the one sequence, after the epoch check: the session's checked-epoch
--   mark (the view _epoch_mark, as _next_fence compares it), else
--   _next_fence itself.
-- - Owner: the caller's role (_role) is recorded; durability: _sync.
--   (_role, _qkey, _key, _sync, _event and _setting of an unset
--   dlock.default_lease are copied inline, not called: each frame costs
--   ~2 us; set_config and pg_notify are called in assignments, not
--   PERFORMed, which saves an executor run each.)
-- _fast_unlock releases a holding of count 1 of holder and the caller's
-- role that has not expired (and has the fence given, if one is), locking
-- the row FOR UPDATE as unlock does (only when it is that holder's, so
-- another's pin is not waited for), with the "released" event; anything
-- else (a re-entered holding, another role's, a superuser's call for
-- another role's holding, not held) goes to unlock's general path.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION dlock._fast_lock(p_resource text, p_holder text, p_lease interval,
                                            p_fair boolean, p_delay interval)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role oid;
    v_lease interval;
    v_now timestamptz;
    v_fence bigint;
    k integer;
    v_md5 text;
    v_set text;
BEGIN
    IF p_fair IS NOT FALSE OR p_delay IS NOT NULL
       OR coalesce(octet_length(p_resource), 0) NOT BETWEEN 1 AND 1000
       OR coalesce(octet_length(p_holder), 0) NOT BETWEEN 1 AND 255
       OR coalesce(current_setting('dlock.lock_delay', true), '') NOT IN ('', '0')
       OR current_setting('transaction_isolation') <> 'read committed'
       OR current_setting('transaction_read_only') <> 'off'
       OR coalesce(current_setting('dlock.xact_' || md5(p_resource), true), '') <> '' THEN
        RETURN NULL;
    END IF;
    -- The helpers of the hot path inlined (a PL/pgSQL frame with SET
    -- search_path costs ~2 us each): _setting when dlock.default_lease is
    -- unset, _role, _qkey, _key, _sync.  Each copy must compute what its
    -- helper does: change them together.
    IF p_lease IS NOT NULL THEN
        v_lease := p_lease;
    ELSIF coalesce(current_setting('dlock.default_lease', true), '') = '' THEN
        v_lease := interval '30 seconds';
    ELSE
        v_lease := dlock._setting('dlock.default_lease', interval '30 seconds');
    END IF;
    IF NOT (v_lease > interval '0' AND v_lease <= interval '8766000 hours'     -- _expiry's 1000 years
            AND extract(year FROM v_lease) = 0 AND extract(month FROM v_lease) = 0
            AND extract(day FROM v_lease) = 0) THEN
        RETURN NULL;
    END IF;
    v_role := to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                          ELSE current_setting('role') END));
    v_md5 := md5(p_resource);
    k := ('x' || substr(v_md5, 17, 8))::bit(32)::integer;
    IF k = ANY ('{1684828003,1684828005,1684828006,1684828007}'::integer[]) THEN
        k := 1684828004;
    END IF;
    -- One statement.  The row is judged on the version the statement's
    -- snapshot sees: free, no lock-delay in force (_delayed of a free row),
    -- no ticket that _ahead would count or _acquired would remove, nobody
    -- waiting in lock() with a ticket (the "fair waiters" mark of _ahead).
    -- Only then is it locked, FOR UPDATE SKIP LOCKED, and only if the
    -- version locked is the one judged (the same xmin: nothing changed it
    -- since the snapshot) is the resource's advisory lock tried.  CASE
    -- keeps that order.  The fence is drawn in the SET list, after the
    -- row is locked: nextval when this session's checked-epoch mark
    -- matches (as in _next_fence), else _next_fence itself.
    v_now := clock_timestamp();
    UPDATE dlock.leases l
       SET holder = p_holder, owner = v_role::regrole, count = 1, lease = v_lease,
           fence = CASE WHEN (SELECT m.mark FROM dlock._epoch_mark m)
                             = current_setting('dlock_portable.epoch_checked', true)
                        THEN nextval('dlock.fences') ELSE dlock._next_fence() END,
           acquired_at = v_now, renewed_at = v_now, expires_at = v_now + v_lease, released_at = NULL
     WHERE l.resource = p_resource
       AND CASE WHEN l.holder IS NULL AND l.fence IS NOT NULL AND NOT l.kinds
                     AND NOT EXISTS (SELECT FROM dlock.delays d
                                      WHERE d.resource = l.resource AND d.fence = l.fence
                                        AND d.available_at > v_now)
                     AND NOT EXISTS (SELECT FROM dlock.tickets t
                                      WHERE t.resource = p_resource
                                        AND (t.expires_at > v_now
                                             OR (t.holder = p_holder AND t.owner = v_role::regrole)))
                THEN CASE WHEN NOT pg_try_advisory_lock(k, 0) THEN false
                          WHEN NOT pg_advisory_unlock(k, 0) THEN false
                          WHEN l.xmin IS DISTINCT FROM (SELECT x.xmin FROM dlock.leases x
                                                         WHERE x.resource = p_resource
                                                           FOR UPDATE SKIP LOCKED) THEN false
                          ELSE pg_try_advisory_xact_lock(('x' || substr(v_md5, 1, 16))::bit(64)::bigint) END
                ELSE false END
    RETURNING l.fence INTO v_fence;
    IF v_fence IS NULL THEN
        RETURN NULL;
    END IF;
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        v_set := set_config('synchronous_commit', 'on', true);     -- an expression, not PERFORM
    END IF;
    RETURN v_fence;
END
$$;

CREATE OR REPLACE FUNCTION dlock._fast_unlock(p_resource text, p_holder text, p_fence bigint)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role oid;
    v_fence bigint;
    ok boolean;
BEGIN
    IF coalesce(octet_length(p_resource), 0) NOT BETWEEN 1 AND 1000
       OR coalesce(octet_length(p_holder), 0) NOT BETWEEN 1 AND 255
       OR current_setting('transaction_read_only') <> 'off' THEN
        RETURN NULL;
    END IF;
    v_role := to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                          ELSE current_setting('role') END));
    UPDATE dlock.leases l SET holder = NULL, count = 0, released_at = clock_timestamp()
     WHERE l.resource = p_resource AND l.holder = p_holder AND l.owner = v_role::regrole AND l.count = 1
       AND NOT l.kinds
       AND l.expires_at > clock_timestamp() AND (p_fence IS NULL OR l.fence = p_fence)
       AND l.resource = (SELECT x.resource FROM dlock.leases x
                          WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = v_role::regrole
                            FOR UPDATE)
    RETURNING l.fence INTO v_fence;
    IF v_fence IS NULL THEN
        RETURN NULL;
    END IF;
    -- _event's 'released', as an expression (no executor run, as PERFORM is).
    ok := pg_notify('dlock_' || md5(p_resource),
                    '{"event":"released","resource":' || to_json(p_resource)::text
                    || ',"fence":' || v_fence::text || '}') IS NOT NULL;
    RETURN 0;
END
$$;
REVOKE EXECUTE ON FUNCTION dlock._fast_lock(text, text, interval, boolean, interval),
    dlock._fast_unlock(text, text, bigint) FROM PUBLIC;

-- ---------------------------------------------------------------------------
-- The public functions ([core]).
-- ---------------------------------------------------------------------------

-- version: the portable edition's version in this database (the C
-- extension's is in pg_extension); dlock --version reads it.
CREATE OR REPLACE FUNCTION dlock.version()
RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.version FROM dlock.portable p
$$;

CREATE OR REPLACE FUNCTION dlock.session_holder()
    RETURNS text LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN (SELECT 'pid:' OPERATOR(pg_catalog.||) pg_catalog.pg_backend_pid()::text OPERATOR(pg_catalog.||) ':'
                   OPERATOR(pg_catalog.||)
                   ((EXTRACT(epoch FROM a.backend_start) OPERATOR(pg_catalog.-) 946684800)
                    OPERATOR(pg_catalog.*) 1000000)::bigint::text
              FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a);
END
$$;
COMMENT ON FUNCTION dlock.session_holder() IS
    'The default holder: pid:<pid>:<backend start>, unique to this backend over the server''s lifetime';

CREATE OR REPLACE FUNCTION dlock.channel(resource text)
    RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN 'dlock_' || md5(dlock._text_arg(resource, 'resource', 1000));
END
$$;
COMMENT ON FUNCTION dlock.channel(text) IS
    'The LISTEN channel of resource''s events (released, expired, broken): ''dlock_'' || md5(resource)';

CREATE OR REPLACE FUNCTION dlock.try_lock(resource text,
                                          holder text DEFAULT dlock.session_holder(),
                                          lease interval DEFAULT NULL,
                                          fair boolean DEFAULT false,
                                          lock_delay interval DEFAULT NULL,
                                          shared boolean DEFAULT false)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l interval;
    f boolean;
    d interval;
    ok boolean;
    fence bigint;
BEGIN
    -- The fast path: exclusive requests only (shared ones, and a resource
    -- with shared holdings or permits, are kinds.sql's).
    IF shared IS FALSE THEN
        fence := dlock._fast_lock(resource, holder, lease, fair, lock_delay);
        IF fence IS NOT NULL THEN
            RETURN fence;
        END IF;
    END IF;
    -- Checks called as expressions, not PERFORMed (no executor run each).
    resource := dlock._text_arg(resource, 'resource', 1000);
    holder := dlock._text_arg(holder, 'holder', 255);
    l := dlock._lease(lease);
    f := dlock._fair(fair);
    d := dlock._lock_delay(lock_delay);
    ok := dlock._writable('dlock.try_lock()');
    IF dlock._bool_arg(shared, 'shared') THEN     -- [kinds], kinds.sql
        RETURN dlock._attempt_kind('shared', resource, holder, l, dlock._role(), f, NULL, NULL, NULL);
    END IF;
    RETURN dlock._attempt(resource, holder, l, dlock._role(), f, d, NULL);
END
$$;
COMMENT ON FUNCTION dlock.try_lock(text, text, interval, boolean, interval, boolean) IS
    'Acquire or re-enter resource for holder with a lease (shared => true: alongside other shared holders); returns the fence, or NULL at once if it is not available';

-- _try: one attempt of a wait (lock(), campaign), in a subtransaction
-- that is rolled back when it fails, so that the resource's advisory lock
-- it may have taken is given back at once instead of holding the head of
-- the queue off for the rest of the wait.
CREATE OR REPLACE FUNCTION dlock._try(p_resource text, p_holder text, p_lease interval, p_role oid,
                                      p_delay interval, p_ticket bigint,
                                      p_kind text, p_max integer, p_permits integer)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    f bigint;
BEGIN
    BEGIN
        IF p_kind = 'exclusive' THEN
            f := dlock._attempt(p_resource, p_holder, p_lease, p_role, false, p_delay, p_ticket);
        ELSE        -- [kinds]: shared, semaphore (kinds.sql)
            f := dlock._attempt_kind(p_kind, p_resource, p_holder, p_lease, p_role, false, p_ticket,
                                     p_max, p_permits);
        END IF;
        IF f IS NULL THEN
            RAISE SQLSTATE 'DL001';
        END IF;
        RETURN f;
    EXCEPTION WHEN SQLSTATE 'DL001' THEN
        RETURN NULL;
    END;
END
$$;

-- _wait_ticket: the ticket a wait in lock() holds from its first failed
-- attempt: its holder's live client ticket (adopted: it keeps its place),
-- or for a fair wait a new one; NULL for a wait that is not fair and has
-- none.  Held as session-level advisory locks (_qkey): given back by
-- _leave, or by the end of the session.
CREATE OR REPLACE FUNCTION dlock._wait_ticket(p_resource text, p_holder text, p_role oid, p_fair boolean)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := dlock._qkey(p_resource);
    t bigint;
BEGIN
    SELECT x.ticket INTO t FROM dlock.tickets x
     WHERE x.resource = p_resource AND x.holder = p_holder AND x.owner = p_role::regrole
       AND x.expires_at > clock_timestamp();
    IF t IS NOT NULL AND t::bit(32)::integer <> 0 AND pg_try_advisory_lock(k, t::bit(32)::integer) THEN
        PERFORM pg_advisory_lock_shared(k, 0);
        RETURN t;
    END IF;
    IF NOT p_fair THEN
        RETURN NULL;
    END IF;
    LOOP
        t := nextval('dlock.ticket_seq');
        EXIT WHEN t::bit(32)::integer <> 0 AND pg_try_advisory_lock(k, t::bit(32)::integer);
    END LOOP;
    PERFORM pg_advisory_lock_shared(k, 0);
    RETURN t;
END
$$;

-- _leave: a wait is over: its ticket leaves the queue.  An adopted client
-- ticket goes with it when the wait gave up (timeout).
CREATE OR REPLACE FUNCTION dlock._leave(p_resource text, p_holder text, p_role oid, p_ticket bigint,
                                        p_gave_up boolean)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    k integer := dlock._qkey(p_resource);
BEGIN
    IF p_ticket IS NULL THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_unlock(k, p_ticket::bit(32)::integer);
    PERFORM pg_advisory_unlock_shared(k, 0);
    IF p_gave_up THEN
        DELETE FROM dlock.tickets t
         WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                    WHERE x.resource = p_resource AND x.ticket = p_ticket
                                      FOR UPDATE SKIP LOCKED));
    END IF;
END
$$;

-- _wait_loop: lock()'s, campaign's and acquire()'s wait: attempts of the
-- kind p_kind ('exclusive', or [kinds]' 'shared' and 'semaphore' with
-- p_max and p_permits), polling with bounded backoff (1 ms doubling up to
-- dlock.poll_interval, never past the deadline), in the fair queue from
-- the first failed attempt when fair.  An exclusive wait also holds the
-- writer's marks from then on (kinds.sql's _marks: new shared holders keep
-- out, and a crossing upgrade sees it).  pg_sleep is interrupted by cancel
-- and statement_timeout, which end the call: its ticket and marks are
-- given back, nothing is held.
CREATE OR REPLACE FUNCTION dlock._wait_loop(p_resource text, p_holder text, p_lease interval, p_wait interval,
                                       p_fair boolean, p_delay interval, p_fname text,
                                       p_kind text, p_max integer, p_permits integer)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role oid := (dlock._caller()).roleid;
    deadline timestamptz := clock_timestamp() + p_wait;
    pause interval := interval '1 millisecond';
    poll interval := greatest(dlock._setting('dlock.poll_interval', interval '100 milliseconds'),
                              interval '1 millisecond');
    left_ interval;
    ticket bigint;
    tried boolean := false;
    marked boolean := false;
    fence bigint;
BEGIN
    BEGIN
        LOOP
            fence := dlock._try(p_resource, p_holder, p_lease, v_role, p_delay, ticket, p_kind, p_max, p_permits);
            IF fence IS NOT NULL THEN
                PERFORM dlock._leave(p_resource, p_holder, v_role, ticket, false);
                PERFORM dlock._marks(p_resource, p_holder, v_role, marked, false);
                RETURN fence;
            END IF;
            IF deadline IS NOT NULL THEN
                left_ := deadline - clock_timestamp();
                IF left_ <= interval '0' THEN
                    PERFORM dlock._leave(p_resource, p_holder, v_role, ticket, true);
                    PERFORM dlock._marks(p_resource, p_holder, v_role, marked, false);
                    RETURN NULL;
                END IF;
            END IF;
            PERFORM dlock._may_poll(p_fname);
            IF NOT tried THEN
                tried := true;
                marked := p_kind = 'exclusive';
                PERFORM dlock._marks(p_resource, p_holder, v_role, marked, true);
                ticket := dlock._wait_ticket(p_resource, p_holder, v_role, p_fair);
                CONTINUE WHEN ticket IS NOT NULL;   -- with its place, it may be its turn
            END IF;
            PERFORM pg_sleep(extract(epoch FROM least(pause, coalesce(left_, pause))));
            pause := least(pause * 2, poll);
        END LOOP;
    EXCEPTION WHEN query_canceled OR OTHERS THEN
        IF ticket IS NOT NULL THEN
            PERFORM pg_advisory_unlock(dlock._qkey(p_resource), ticket::bit(32)::integer);
            PERFORM pg_advisory_unlock_shared(dlock._qkey(p_resource), 0);
        END IF;
        PERFORM dlock._marks(p_resource, p_holder, v_role, marked, false);
        RAISE;
    END;
END
$$;

CREATE OR REPLACE FUNCTION dlock.lock(resource text,
                                      holder text DEFAULT dlock.session_holder(),
                                      lease interval DEFAULT NULL,
                                      wait interval DEFAULT NULL,
                                      fair boolean DEFAULT false,
                                      lock_delay interval DEFAULT NULL,
                                      shared boolean DEFAULT false)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l interval;
    w interval;
    f boolean;
    d interval;
    k text;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    f := dlock._fair(fair);
    d := dlock._lock_delay(lock_delay);
    k := CASE WHEN dlock._bool_arg(shared, 'shared') THEN 'shared' ELSE 'exclusive' END;
    PERFORM dlock._writable('dlock.lock()');
    RETURN dlock._wait_loop(resource, holder, l, w, f, d, 'dlock.lock()', k, NULL, NULL);
END
$$;
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval, boolean, interval, boolean) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout), polling, in the fair queue with fair => true (shared => true: alongside other shared holders); NULL on timeout';

CREATE OR REPLACE FUNCTION dlock.unlock(resource text,
                                        holder text DEFAULT dlock.session_holder(),
                                        fence bigint DEFAULT NULL)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role oid;
    r dlock.leases%ROWTYPE;
    ok boolean;
    n integer := dlock._fast_unlock(resource, holder, fence);  -- the fast path
BEGIN
    IF n IS NOT NULL THEN
        RETURN n;
    END IF;
    resource := dlock._text_arg(resource, 'resource', 1000);
    holder := dlock._text_arg(holder, 'holder', 255);
    ok := dlock._writable('dlock.unlock()');
    v_role := dlock._role();
    -- A look first: not this holder's (or another role's) needs no lock.
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = unlock.resource;
    IF NOT dlock._may_change(r, holder, v_role, NULL, 'unlock') THEN
        -- Not an exclusive holding of holder's: a shared one, or permits?
        RETURN CASE WHEN r.kinds THEN dlock._unlock_held(unlock.resource, holder, v_role, fence) END;
    END IF;
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = unlock.resource FOR UPDATE;
    IF NOT dlock._may_change(r, holder, v_role, NULL, 'unlock')
       OR (fence IS NOT NULL AND fence <> r.fence) THEN
        RETURN CASE WHEN r.kinds THEN dlock._unlock_held(unlock.resource, holder, v_role, fence) END;
    END IF;
    RETURN dlock._release(unlock.resource, r.fence, r.count - 1, 'released');
END
$$;
COMMENT ON FUNCTION dlock.unlock(text, text, bigint) IS
    'Release one level of holder''s holding (under fence, if given); returns the count left, 0 = released, NULL if not held';

CREATE OR REPLACE FUNCTION dlock.renew(resource text,
                                       holder text DEFAULT dlock.session_holder(),
                                       lease interval DEFAULT NULL,
                                       fence bigint DEFAULT NULL)
    RETURNS timestamptz LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
    l interval;
    v_now timestamptz;
    v_exp timestamptz;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    IF lease IS NOT NULL THEN
        l := dlock._lease(lease);
    END IF;
    PERFORM dlock._writable('dlock.renew()');
    c := dlock._caller();
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = renew.resource;
    IF NOT dlock._may_change(r, holder, c.roleid, c.is_super, 'renew') THEN
        -- Not an exclusive holding of holder's: a shared one, or permits?
        RETURN CASE WHEN r.kinds THEN dlock._renew_held(renew.resource, holder, c.roleid, c.is_super, l, fence) END;
    END IF;
    -- FOR NO KEY UPDATE: an assert_fence pin (FOR KEY SHARE) never makes
    -- the holder's renewal wait.
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = renew.resource FOR NO KEY UPDATE;
    v_now := clock_timestamp();
    IF NOT dlock._may_change(r, holder, c.roleid, c.is_super, 'renew')
       OR (fence IS NOT NULL AND fence <> r.fence) THEN
        RETURN CASE WHEN r.kinds THEN dlock._renew_held(renew.resource, holder, c.roleid, c.is_super, l, fence) END;
    END IF;
    v_exp := dlock._expiry(v_now, coalesce(l, r.lease));
    UPDATE dlock.leases x SET expires_at = v_exp, renewed_at = v_now, lease = coalesce(l, r.lease)
     WHERE x.resource = renew.resource;
    PERFORM dlock._sync();
    RETURN v_exp;
END
$$;
COMMENT ON FUNCTION dlock.renew(text, text, interval, bigint) IS
    'Extend holder''s lease to now + lease (default: the lease it was taken with); returns the new expiry, NULL if the lease was lost';

CREATE OR REPLACE FUNCTION dlock.unlock_all(holder text DEFAULT dlock.session_holder())
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_role oid;
    r dlock.leases%ROWTYPE;
    n integer := 0;
BEGIN
    PERFORM dlock._text_arg(holder, 'holder', 255);
    PERFORM dlock._writable('dlock.unlock_all()');
    v_role := (dlock._caller()).roleid;
    FOR r IN SELECT * FROM dlock.leases l
              WHERE l.holder = unlock_all.holder AND l.owner = v_role
                AND l.expires_at > clock_timestamp()
              ORDER BY l.resource
                FOR UPDATE
    LOOP
        IF r.holder = unlock_all.holder AND r.owner = v_role AND r.expires_at > clock_timestamp() THEN
            PERFORM dlock._release(r.resource, r.fence, 0, 'released');
            n := n + 1;
        END IF;
    END LOOP;
    -- Shared holdings and permits ([kinds], kinds.sql).
    RETURN n + dlock._unlock_all_held(unlock_all.holder, v_role);
END
$$;
COMMENT ON FUNCTION dlock.unlock_all(text) IS
    'Release every holding of holder (and of the calling role); returns how many';

CREATE OR REPLACE FUNCTION dlock.reap()
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
    n integer := 0;
BEGIN
    PERFORM dlock._writable('dlock.reap()');
    -- Rows another transaction is changing or pinning are skipped.
    FOR r IN SELECT * FROM dlock.leases l
              WHERE l.holder IS NOT NULL AND l.expires_at <= clock_timestamp()
              ORDER BY l.resource
                FOR UPDATE SKIP LOCKED
    LOOP
        PERFORM dlock._release(r.resource, r.fence, 0, 'expired');
        n := n + 1;
    END LOOP;
    -- Expired shared holdings and permits ([kinds], kinds.sql).
    n := n + dlock._reap_held();
    -- Rows free for over an hour go, unless a lock-delay is still pending
    -- or shared holdings or permits may be there; lapsed tickets and the
    -- delays of gone rows too.
    DELETE FROM dlock.leases l
     WHERE l.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.leases x
                                WHERE x.holder IS NULL AND NOT x.kinds
                                  AND x.released_at < clock_timestamp() - interval '1 hour'
                                  AND NOT dlock._delayed(x, clock_timestamp())
                                  FOR UPDATE SKIP LOCKED));
    DELETE FROM dlock.delays d
     WHERE d.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.delays x
                                WHERE NOT EXISTS (SELECT FROM dlock.leases l WHERE l.resource = x.resource)
                                  FOR UPDATE SKIP LOCKED));
    DELETE FROM dlock.holding_values v
     WHERE v.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.holding_values x
                                WHERE NOT EXISTS (SELECT FROM dlock.leases l WHERE l.resource = x.resource)
                                  FOR UPDATE SKIP LOCKED));
    DELETE FROM dlock.tickets t
     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                WHERE x.expires_at <= clock_timestamp()
                                  FOR UPDATE SKIP LOCKED));
    RETURN n;
END
$$;
COMMENT ON FUNCTION dlock.reap() IS
    'Remove every expired lease now and send its expired event; returns how many (call it in a transaction of its own, as pg_cron does)';

-- _current: is fence the current, unexpired holding of resource (a lease,
-- or a transaction-scoped lock of this transaction)?  Locks the row FOR
-- KEY SHARE (assert_fence's pin) when pin.
CREATE OR REPLACE FUNCTION dlock._current(p_resource text, p_fence bigint, pin boolean,
                                          OUT is_current boolean, OUT owner oid)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    own text := current_setting('dlock.xact_' || md5(p_resource), true);
    r dlock.leases%ROWTYPE;
BEGIN
    IF own IS NOT NULL AND own <> '' THEN
        is_current := own::bigint = p_fence;
        RETURN;
    END IF;
    IF pin THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR KEY SHARE;
    ELSE
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    END IF;
    is_current := FOUND AND r.holder IS NOT NULL AND r.expires_at > clock_timestamp()
               AND r.fence = p_fence;
    owner := r.owner;
    -- Any current holder's fence: a shared holding's, or permits' ([kinds]).
    IF NOT is_current AND r.kinds THEN
        SELECT h.is_current, h.owner INTO is_current, owner FROM dlock._current_held(p_resource, p_fence, pin) h;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION dlock."check"(resource text, fence bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._fence_arg(fence);
    RETURN (dlock._current(resource, fence, false)).is_current;
END
$$;
COMMENT ON FUNCTION dlock."check"(text, bigint) IS
    'Is fence the current, unexpired holding of resource?';

CREATE OR REPLACE FUNCTION dlock.assert_fence(resource text, fence bigint)
    RETURNS void LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    cur record;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._fence_arg(fence);
    c := dlock._caller();
    cur := dlock._current(resource, fence, true);
    IF NOT cur.is_current THEN
        RAISE EXCEPTION 'fence % is not the current holding of resource "%"', fence, resource
            USING ERRCODE = 'lock_not_available',
                  DETAIL = 'The lease expired, was released or broken, or was taken over by a newer holder.';
    END IF;
    IF cur.owner IS NOT NULL AND NOT c.is_super AND NOT pg_has_role(c.roleid, cur.owner, 'USAGE') THEN
        RAISE EXCEPTION 'permission denied to assert the fence of a lock held by role "%"', cur.owner::regrole::text
            USING ERRCODE = 'insufficient_privilege',
                  DETAIL = 'Only roles with the privileges of the role that took a lock can pin it with assert_fence; use dlock.check() to test a fence without pinning it.';
    END IF;
END
$$;
COMMENT ON FUNCTION dlock.assert_fence(text, bigint) IS
    'Raise 55P03 unless fence is the current holding of resource; then pin the holding until this transaction ends';

CREATE OR REPLACE FUNCTION dlock.break_lock(resource text)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._writable('dlock.break_lock()');
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = break_lock.resource FOR UPDATE;
    -- Every shared holding and permit too ([kinds], kinds.sql).
    IF NOT FOUND OR r.holder IS NULL OR r.expires_at <= clock_timestamp() THEN
        RETURN CASE WHEN r.kinds THEN dlock._break_held(break_lock.resource) > 0 ELSE false END;
    END IF;
    PERFORM dlock._release(r.resource, r.fence, 0, 'broken');
    IF r.kinds THEN
        PERFORM dlock._break_held(break_lock.resource);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.break_lock(text) IS
    'Force the release of resource (event broken); for administrators, EXECUTE is revoked from PUBLIC';

-- _xact_attempt: one try at a transaction-scoped lock: the fence, or NULL.
CREATE OR REPLACE FUNCTION dlock._xact_attempt(p_resource text)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    own text := current_setting('dlock.xact_' || md5(p_resource), true);
    r dlock.leases%ROWTYPE;
    v_fence bigint;
BEGIN
    IF own IS NOT NULL AND own <> '' THEN
        RETURN own::bigint;
    END IF;
    -- Held, delayed or queued for: answered before taking anything.
    IF current_setting('transaction_isolation') = 'read committed' THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
        IF FOUND AND ((r.holder IS NOT NULL AND r.expires_at > clock_timestamp())
                      OR dlock._delayed(r, clock_timestamp())) THEN
            RETURN NULL;
        END IF;
        IF dlock._ahead(p_resource, NULL, NULL, NULL) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF NOT pg_try_advisory_xact_lock(dlock._key(p_resource)) THEN
        RETURN NULL;
    END IF;
    -- Under REPEATABLE READ or SERIALIZABLE the reads below see the
    -- transaction's snapshot, which may predate a holding committed since
    -- (a lease path writes the row and so gets 40001; this one only
    -- reads): lock the row, which raises 40001 if it changed since the
    -- snapshot, or insert it free, which raises 40001 if it appeared since.
    -- No other acquirer can be writing it now (the advisory lock); one
    -- that renews, releases or reaps it makes it busy.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR SHARE SKIP LOCKED;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = p_resource) THEN
                RETURN NULL;
            END IF;
            INSERT INTO dlock.leases (resource) VALUES (p_resource) ON CONFLICT (resource) DO NOTHING;
        END IF;
    END IF;
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    IF FOUND AND ((r.holder IS NOT NULL AND r.expires_at > clock_timestamp())
                  OR dlock._delayed(r, clock_timestamp())) THEN
        RETURN NULL;
    END IF;
    IF dlock._ahead(p_resource, NULL, NULL, NULL) THEN
        RETURN NULL;
    END IF;
    -- Under READ COMMITTED the row read above is its last committed
    -- version: a renewal (or unlock, or reap) in flight may be changing it,
    -- and an expired lease being renewed is not free.  Lock it FOR SHARE
    -- (kept to the end of the transaction, as above): a row another
    -- transaction is changing is busy; then look at what it is now.
    IF r.resource IS NOT NULL AND current_setting('transaction_isolation') = 'read committed' THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR SHARE SKIP LOCKED;
        IF NOT FOUND OR (r.holder IS NOT NULL AND r.expires_at > clock_timestamp())
           OR dlock._delayed(r, clock_timestamp()) THEN
            RETURN NULL;
        END IF;
    END IF;
    -- Shared holdings or permits by that name ([kinds], kinds.sql).
    IF r.kinds AND dlock._admit('xact', p_resource, NULL, NULL, NULL, NULL, NULL, true) <> 'new' THEN
        RETURN NULL;
    END IF;
    -- The advisory lock, held to the end of the transaction, keeps lease
    -- acquirers out; nothing is written but the fence sequence (and a row
    -- lock on an existing row, or under REPEATABLE READ or SERIALIZABLE a
    -- free row inserted above).
    v_fence := dlock._next_fence();
    PERFORM set_config('dlock.xact_' || md5(p_resource), v_fence::text, true);
    RETURN v_fence;
END
$$;

CREATE OR REPLACE FUNCTION dlock.xact_lock(resource text, wait interval DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    w interval;
    deadline timestamptz;
    fence bigint;
    pause interval := interval '1 millisecond';
    poll interval;
    left_ interval;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    w := dlock._wait(wait);
    PERFORM dlock._writable('dlock.xact_lock()');
    poll := greatest(dlock._setting('dlock.poll_interval', interval '100 milliseconds'),
                     interval '1 millisecond');
    deadline := clock_timestamp() + w;
    LOOP
        fence := dlock._xact_attempt(resource);
        IF fence IS NOT NULL THEN
            RETURN fence;
        END IF;
        IF deadline IS NOT NULL THEN
            left_ := deadline - clock_timestamp();
            IF left_ <= interval '0' THEN
                RETURN NULL;
            END IF;
        END IF;
        PERFORM dlock._may_poll('dlock.xact_lock()');
        PERFORM pg_sleep(extract(epoch FROM least(pause, coalesce(left_, pause))));
        pause := least(pause * 2, poll);
    END LOOP;
END
$$;
COMMENT ON FUNCTION dlock.xact_lock(text, interval) IS
    'Transaction-scoped lock on resource, held until the transaction ends, waiting up to wait; returns a fence, NULL on timeout';

CREATE OR REPLACE FUNCTION dlock.try_xact_lock(resource text)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._writable('dlock.try_xact_lock()');
    RETURN dlock._xact_attempt(resource);
END
$$;
COMMENT ON FUNCTION dlock.try_xact_lock(text) IS
    'Transaction-scoped lock on resource, never waits; returns a fence, or NULL if busy';

-- Current holdings; expired ones stay listed (expired = true) until reaped
-- or taken over.  available_at is when the resource becomes available to
-- others if the holding is not released first (its expiry plus its
-- lock-delay); a free resource still under lock-delay stays listed, with a
-- NULL holder, until then (the columns of the C extension's 0.3 SQL).
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
           NULL::pg_catalog.int4 AS max_permits
      FROM dlock.leases l
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
           NULL::pg_catalog.int4 AS max_permits
      FROM dlock.shares s
    UNION ALL
    SELECT p.resource, p.holder, p.count, p.fence, p.lease,
           p.acquired_at, p.renewed_at, p.expires_at,
           p.owner::pg_catalog.regrole AS owner,
           p.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired,
           p.expires_at AS available_at,
           NULL::pg_catalog.text AS value,
           'semaphore'::pg_catalog.text AS mode,
           p.permits,
           p.max_permits
      FROM dlock.permits p;
COMMENT ON VIEW dlock.locks IS
    'Current holdings, one row per holding (mode exclusive, shared or semaphore); an expired lease stays listed (expired = true) until it is reaped or taken over';
GRANT SELECT ON dlock.locks TO PUBLIC;

-- dlock.queue: every live client ticket, position 1 = served next.  A
-- session waiting in lock() holds its ticket as an advisory lock and is
-- not listed (as in the C extension without shared_preload_libraries);
-- pid is always NULL.
CREATE OR REPLACE VIEW dlock.queue AS
    SELECT t.resource, t.holder,
           pg_catalog.row_number() OVER (PARTITION BY t.resource ORDER BY t.ticket) AS "position",
           t.queued_at, t.expires_at, t.owner::pg_catalog.regrole AS owner,
           t.ticket, NULL::integer AS pid
      FROM dlock.tickets t
     WHERE t.expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp();
COMMENT ON VIEW dlock.queue IS
    'Every live client-side fair-queue ticket, position 1 = served next (sessions waiting in lock() are not listed)';
GRANT SELECT ON dlock.queue TO PUBLIC;

CREATE OR REPLACE FUNCTION dlock.withdraw(resource text,
                                          holder text DEFAULT dlock.session_holder())
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    n integer;
    live boolean := false;
    other oid;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    PERFORM dlock._writable('dlock.withdraw()');
    c := dlock._caller();
    -- The caller's role's ticket (a superuser without one: every other
    -- role's of that holder); a lapsed one goes too, but does not count.
    WITH d AS (DELETE FROM dlock.tickets t
                WHERE t.resource = withdraw.resource AND t.holder = withdraw.holder
                  AND (t.owner = c.roleid::regrole
                       OR (c.is_super AND NOT EXISTS
                           (SELECT FROM dlock.tickets o
                             WHERE o.resource = withdraw.resource AND o.holder = withdraw.holder
                               AND o.owner = c.roleid::regrole)))
               RETURNING t.expires_at)
    SELECT coalesce(bool_or(d.expires_at > clock_timestamp()), false) INTO live FROM d;
    IF live THEN
        RETURN true;
    END IF;
    IF NOT c.is_super THEN
        SELECT t.owner INTO other FROM dlock.tickets t
         WHERE t.resource = withdraw.resource AND t.holder = withdraw.holder
           AND t.owner <> c.roleid::regrole AND t.expires_at > clock_timestamp()
         LIMIT 1;
        IF other IS NOT NULL THEN
            RAISE EXCEPTION 'permission denied to withdraw a ticket taken by role "%"', other::regrole::text
                USING ERRCODE = 'insufficient_privilege',
                      DETAIL = 'Only the role that took a ticket, or a superuser, can withdraw it.';
        END IF;
    END IF;
    RETURN false;
END
$$;
COMMENT ON FUNCTION dlock.withdraw(text, text) IS
    'The holder gives up its ticket in resource''s fair queue at once (a client-side waiter that stops waiting); false if it had none; 42501 for another role''s';

-- ---------------------------------------------------------------------------
-- Leader election ([elect]): an election is a resource whose holder is the
-- leader; the term is the holding's fence, so renew, check and
-- assert_fence work on elections unchanged.  campaign is a fair lock()
-- (with wait => '0' a client-side fair attempt, as try_lock(..., fair =>
-- true)) that never re-enters: the current leader campaigning again gets
-- its current term.
-- ---------------------------------------------------------------------------

-- _value: the value argument: NULL, or at most 4000 bytes (an event
-- carrying it fits a NOTIFY).
CREATE OR REPLACE FUNCTION dlock._value(val text)
    RETURNS text LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF octet_length(val) > 4000 THEN
        RAISE EXCEPTION 'value must be at most 4000 bytes long' USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('The value given is %s bytes long.', octet_length(val));
    END IF;
    RETURN val;
END
$$;

-- _value_set: the holding fence of resource now has value; p_election:
-- campaign took it (false keeps what the row says for this holding).
-- Called with the resource's row locked.
CREATE OR REPLACE FUNCTION dlock._value_set(p_resource text, p_fence bigint, p_holder text, p_value text,
                                            p_election boolean)
    RETURNS void LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    INSERT INTO dlock.holding_values AS v (resource, fence, holder, value, election)
         VALUES (p_resource, p_fence, p_holder, p_value, p_election)
    ON CONFLICT (resource) DO UPDATE
           SET value = excluded.value, holder = excluded.holder,
               election = excluded.election OR (v.election AND v.fence OPERATOR(pg_catalog.=) excluded.fence),
               fence = excluded.fence
$$;

-- _term_log: a new term: appended to dlock.term_log; up to 64 terms (of
-- any election) older than ten minutes go, skipping rows another sweep has
-- locked.
CREATE OR REPLACE FUNCTION dlock._term_log(p_resource text, p_term bigint, p_candidate text, p_value text,
                                           p_owner oid)
    RETURNS void LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
    WITH old AS (DELETE FROM dlock.term_log t
                  WHERE t.ctid OPERATOR(pg_catalog.=) ANY (ARRAY(
                        SELECT o.ctid FROM dlock.term_log o
                         WHERE o.elected_at OPERATOR(pg_catalog.<)
                               (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) interval '10 minutes')
                         LIMIT 64 FOR UPDATE SKIP LOCKED)))
    INSERT INTO dlock.term_log (resource, term, candidate, value, owner, elected_at)
         VALUES (p_resource, p_term, p_candidate, p_value, p_owner::regrole, pg_catalog.clock_timestamp())
    ON CONFLICT DO NOTHING
$$;

-- _still_leader: candidate leads already under term (its row locked): a
-- value given (and different) is proclaimed, and the holding becomes an
-- election's however it was taken (a try_lock, say), with its term logged.
CREATE OR REPLACE FUNCTION dlock._still_leader(p_resource text, p_term bigint, p_candidate text,
                                               p_value text, p_role oid)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v dlock.holding_values%ROWTYPE;
    proclaimed boolean;
    was_election boolean;
BEGIN
    SELECT * INTO v FROM dlock.holding_values x WHERE x.resource = p_resource AND x.fence = p_term;
    was_election := FOUND AND v.election;
    proclaimed := p_value IS NOT NULL AND v.value IS DISTINCT FROM p_value;
    IF proclaimed OR NOT was_election THEN
        PERFORM dlock._value_set(p_resource, p_term, p_candidate,
                                 CASE WHEN proclaimed THEN p_value ELSE v.value END, true);
        IF NOT was_election THEN
            PERFORM dlock._term_log(p_resource, p_term, p_candidate,
                                    CASE WHEN proclaimed THEN p_value ELSE v.value END, p_role);
        END IF;
    END IF;
    IF proclaimed THEN
        PERFORM dlock._event_holding('proclaimed', p_resource, p_term, p_candidate, p_value);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION dlock.campaign(election text,
                                          candidate text DEFAULT dlock.session_holder(),
                                          value text DEFAULT NULL,
                                          lease interval DEFAULT NULL,
                                          wait interval DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l interval;
    w interval;
    d interval;
    v_role oid;
    r dlock.leases%ROWTYPE;
    term bigint;
    deadline timestamptz;
    pause interval := interval '1 millisecond';
BEGIN
    PERFORM dlock._text_arg(election, 'election', 1000);
    PERFORM dlock._text_arg(candidate, 'candidate', 255);
    PERFORM dlock._value(value);
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    d := dlock._lock_delay(NULL);
    PERFORM dlock._writable('dlock.campaign()');
    v_role := (dlock._caller()).roleid;
    -- The leader campaigning again: its term, never a re-entry (its row
    -- locked within the wait; a first look takes nothing).
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election;
    IF FOUND AND r.holder = candidate AND r.owner = v_role AND r.expires_at > clock_timestamp() THEN
        deadline := clock_timestamp() + w;
        LOOP
            SELECT * INTO r FROM dlock.leases x WHERE x.resource = election FOR UPDATE SKIP LOCKED;
            EXIT WHEN FOUND;
            IF deadline IS NOT NULL AND clock_timestamp() >= deadline THEN
                RETURN NULL;
            END IF;
            PERFORM pg_sleep(extract(epoch FROM pause));
            pause := least(pause * 2, interval '100 milliseconds');
        END LOOP;
        IF r.holder = candidate AND r.owner = v_role AND r.expires_at > clock_timestamp() THEN
            PERFORM dlock._still_leader(election, r.fence, candidate, value, v_role);
            RETURN r.fence;
        END IF;
    END IF;
    IF w = interval '0' THEN
        term := dlock._attempt(election, candidate, l, v_role, true, d, NULL);
    ELSE
        term := dlock._wait_loop(election, candidate, l, w, true, d, 'dlock.campaign()', 'exclusive', NULL, NULL);
    END IF;
    IF term IS NULL THEN
        RETURN NULL;
    END IF;
    -- The row is ours (locked) until the transaction ends.  A re-entry
    -- (the candidate came to lead since the first look) is undone.
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election;
    IF r.count > 1 THEN
        UPDATE dlock.leases x SET count = x.count - 1 WHERE x.resource = election;
        PERFORM dlock._still_leader(election, term, candidate, value, v_role);
        RETURN term;
    END IF;
    PERFORM dlock._value_set(election, term, candidate, value, true);
    PERFORM dlock._term_log(election, term, candidate, value, v_role);
    PERFORM dlock._event_holding('elected', election, term, candidate, value);
    RETURN term;
END
$$;
COMMENT ON FUNCTION dlock.campaign(text, text, text, interval, interval) IS
    'Wait in election''s fair queue until candidate leads, with value; returns the term (the fence), NULL on timeout; the leader campaigning again gets its term';

CREATE OR REPLACE FUNCTION dlock.proclaim(election text, candidate text, value text,
                                          term bigint DEFAULT NULL)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(election, 'election', 1000);
    PERFORM dlock._text_arg(candidate, 'candidate', 255);
    PERFORM dlock._value(value);
    PERFORM dlock._writable('dlock.proclaim()');
    c := dlock._caller();
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election;
    IF NOT dlock._may_change(r, candidate, c.roleid, c.is_super, 'proclaim') THEN
        RETURN false;
    END IF;
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election FOR UPDATE;
    IF NOT dlock._may_change(r, candidate, c.roleid, c.is_super, 'proclaim')
       OR (term IS NOT NULL AND term <> r.fence) THEN
        RETURN false;
    END IF;
    PERFORM dlock._value_set(election, r.fence, candidate, value, false);
    PERFORM dlock._event_holding('proclaimed', election, r.fence, candidate, value);
    RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.proclaim(text, text, text, bigint) IS
    'The holder (leader) of a holding changes its value (under term, if given); false if it does not hold it';

CREATE OR REPLACE FUNCTION dlock.resign(election text, candidate text, term bigint DEFAULT NULL)
    RETURNS boolean LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(election, 'election', 1000);
    PERFORM dlock._text_arg(candidate, 'candidate', 255);
    PERFORM dlock._writable('dlock.resign()');
    c := dlock._caller();
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election;
    IF NOT dlock._may_change(r, candidate, c.roleid, c.is_super, 'resign') THEN
        RETURN false;
    END IF;
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = election FOR UPDATE;
    IF NOT dlock._may_change(r, candidate, c.roleid, c.is_super, 'resign')
       OR (term IS NOT NULL AND term <> r.fence) THEN
        RETURN false;
    END IF;
    -- Whatever its count; a clean end (no lock-delay); its client ticket goes.
    PERFORM dlock._release(election, r.fence, 0, 'resigned');
    DELETE FROM dlock.tickets t
     WHERE t.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.tickets x
                                WHERE x.resource = election AND x.holder = candidate AND x.owner = r.owner
                                  FOR UPDATE SKIP LOCKED));
    RETURN true;
END
$$;
COMMENT ON FUNCTION dlock.resign(text, text, bigint) IS
    'The leader steps down (under term, if given), whatever its count; the next candidate is elected at once; false if it does not lead';

CREATE OR REPLACE FUNCTION dlock.leader(election text)
    RETURNS TABLE (candidate text, value text, term bigint, elected_at timestamptz,
                   expires_at timestamptz, owner regrole)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
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
           AND l.holder IS NOT NULL AND NOT l.expired AND l.mode OPERATOR(pg_catalog.=) 'exclusive';
END
$$;
COMMENT ON FUNCTION dlock.leader(text) IS
    'The current leader of election: candidate, value, term, elected_at, expires_at, owner; no row when there is none';

CREATE OR REPLACE VIEW dlock.terms AS
    SELECT t.resource AS election, t.term, t.candidate, t.value, t.elected_at, t.owner
      FROM dlock.term_log t;
COMMENT ON VIEW dlock.terms IS
    'Terms elected by campaign in the last ten minutes (election, term, candidate, value at election, elected_at, owner), for observers that poll';
GRANT SELECT ON dlock.terms TO PUBLIC;

-- Internal helpers are closed; break_lock is for administrators.
REVOKE EXECUTE ON FUNCTION
    dlock._text_arg(text, text, integer), dlock._setting(text, interval),
    dlock._expiry(timestamptz, interval), dlock._lease(interval), dlock._wait(interval),
    dlock._fence_arg(bigint), dlock._writable(text), dlock._may_poll(text), dlock._caller(), dlock._role(), dlock._key(text),
    dlock._sync(), dlock._event(text, text, bigint), dlock._history(), dlock._next_fence(),
    dlock._attempt(text, text, interval, oid, boolean, interval, bigint), dlock._release(text, bigint, integer, text),
    dlock._lock_delay(interval), dlock._fair(boolean), dlock._queue_ttl(), dlock._qkey(text),
    dlock._ahead(text, text, oid, bigint), dlock._queue_up(text, text, oid), dlock._delayed(dlock.leases, timestamptz),
    dlock._acquired(text, text, oid, bigint, boolean, interval),
    dlock._try(text, text, interval, oid, interval, bigint, text, integer, integer),
    dlock._wait_ticket(text, text, oid, boolean),
    dlock._leave(text, text, oid, bigint, boolean),
    dlock._wait_loop(text, text, interval, interval, boolean, interval, text, text, integer, integer),
    dlock._event_holding(text, text, bigint, text, text), dlock._value(text),
    dlock._value_set(text, bigint, text, text, boolean), dlock._term_log(text, bigint, text, text, oid),
    dlock._still_leader(text, bigint, text, text, oid),
    dlock._may_change(dlock.leases, text, oid, boolean, text),
    dlock._current(text, bigint, boolean), dlock._xact_attempt(text),
    dlock.break_lock(text)
    FROM PUBLIC;

-- Shared locks, semaphores and several resources at once ([kinds]).
\ir kinds.sql

COMMIT;
