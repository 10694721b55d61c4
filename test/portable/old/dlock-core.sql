/*
 * portable/dlock.sql: dlock's portable edition, for PostgreSQL where no C
 * extension can be loaded (Amazon RDS and Aurora, Google Cloud SQL, Azure,
 * Supabase, Neon, Crunchy Bridge): the lock schema of the C extension's
 * [core] section (see ../README.md, "Portable edition"), in SQL and
 * PL/pgSQL only, for PostgreSQL 14 to 18.
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
 *   and every change of hands locks FOR UPDATE, which it does.
 * - Fences: dlock.fences, (epoch << 22) + n, the epoch the clock in
 *   milliseconds since 2020-01-01 UTC when it started (as the C edition).
 *   Before each fence the draw compares (system identifier, database OID,
 *   WAL insertion timeline, postmaster start time, and the xmin of the
 *   dlock.fence_epoch row) with what that row recorded; when anything
 *   differs (a restart, a promotion, PITR, a restore of a dump, which
 *   re-inserts the row and so changes its xmin, a re-installation, which
 *   has no row) it starts a new epoch: setval to
 *   max(now, the sequence's epoch + 1, the epoch of the highest fence in
 *   dlock.leases + 1) << 22, non-transactional.  Jumps are serialised by a
 *   session advisory lock held only around the read and the setval.
 * - Durability: an acquisition or renewal raises synchronous_commit to on
 *   for the rest of its transaction (SET LOCAL through set_config) when it
 *   is weaker (off, local, remote_write); remote_apply is kept.
 * - Events: pg_notify, which PostgreSQL delivers when the transaction
 *   commits and drops when it rolls back.
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
COMMENT ON SCHEMA dlock IS
    'dlock (portable edition): leased distributed locks with fencing tokens (see the dlock README)';
GRANT USAGE ON SCHEMA dlock TO PUBLIC;

-- The edition and version installed (and the mark of a portable install).
CREATE TABLE IF NOT EXISTS dlock.portable (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    version      text NOT NULL,
    installed_at timestamptz NOT NULL
);
INSERT INTO dlock.portable (version, installed_at) VALUES ('0.3', pg_catalog.clock_timestamp())
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
COMMENT ON TABLE dlock.fence_epoch_seal IS
    'The xmin of the dlock.fence_epoch row as written: a restored copy of the row has another, and starts a new epoch';

REVOKE ALL ON dlock.portable, dlock.leases, dlock.fences, dlock.fence_epoch, dlock.fence_epoch_seal
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
BEGIN
    PERFORM dlock._expiry(clock_timestamp(), l);
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
    RETURNS void LANGUAGE plpgsql STABLE
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
END
$$;

-- _caller: the calling role (see the header): SET ROLE's role, else the
-- session user; and whether it is a superuser.
CREATE OR REPLACE FUNCTION dlock._caller(OUT roleid oid, OUT is_super boolean)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT r.oid, r.rolsuper
      FROM pg_catalog.pg_roles r
     WHERE r.rolname OPERATOR(pg_catalog.=)
           CASE WHEN pg_catalog.current_setting('role') OPERATOR(pg_catalog.=) 'none'
                THEN session_user::text
                ELSE pg_catalog.current_setting('role') END
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
CREATE OR REPLACE FUNCTION dlock._key(resource text)
    RETURNS bigint LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT ('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(resource), 1, 16))::bit(64)::bigint
$$;

-- _sync: make this transaction's commit durable (at least synchronous_commit
-- = on, a stronger setting kept), after an acquisition or renewal.
CREATE OR REPLACE FUNCTION dlock._sync()
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF current_setting('synchronous_commit') IN ('off', 'local', 'remote_write') THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
END
$$;

-- _event: NOTIFY the resource's channel, sent when the transaction commits.
CREATE OR REPLACE FUNCTION dlock._event(event text, resource text, fence bigint)
    RETURNS void LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_notify('dlock_' || md5(resource),
                      '{"event":' || to_json(event)::text || ',"resource":' || to_json(resource)::text
                      || ',"fence":' || fence::text || '}');
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

-- _next_fence: draw a fence; call only after the resource's row is locked
-- (or, for a new resource, its advisory lock taken).
CREATE OR REPLACE FUNCTION dlock._next_fence()
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    h record;
    same boolean;
    cur bigint;
    epoch bigint;
    fence bigint;
BEGIN
    SELECT * INTO h FROM dlock._history();
    SELECT e.sysid = h.sysid AND e.dboid = h.dboid AND e.timeline = h.timeline
           AND e.started = h.started AND s.epoch_xmin = e.xmin::text
      INTO same
      FROM dlock.fence_epoch e, dlock.fence_epoch_seal s;
    IF same THEN
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

-- _attempt: one acquisition attempt that never waits: the fence if
-- acquired or re-entered, NULL if the resource is busy.
CREATE OR REPLACE FUNCTION dlock._attempt(p_resource text, p_holder text, p_lease interval, p_role oid)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    r dlock.leases%ROWTYPE;
    v_now timestamptz;
    v_fence bigint;
    v_count integer;
    v_exp timestamptz;
    rc boolean := current_setting('transaction_isolation') = 'read committed';
BEGIN
    -- Held by another live holder: answered without taking anything.
    IF rc THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
        IF FOUND AND r.holder IS NOT NULL AND r.expires_at > clock_timestamp()
           AND NOT (r.holder = p_holder AND r.owner = p_role) THEN
            RETURN NULL;
        END IF;
    END IF;
    IF NOT pg_try_advisory_xact_lock(dlock._key(p_resource)) THEN
        RETURN NULL;        -- another transaction is acquiring it
    END IF;
    -- Look again now that no other acquirer can move (a new snapshot).
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    IF NOT FOUND THEN
        v_now := clock_timestamp();
        v_exp := dlock._expiry(v_now, p_lease);
        v_fence := dlock._next_fence();
        INSERT INTO dlock.leases (resource, holder, owner, count, fence, lease,
                                  acquired_at, renewed_at, expires_at)
             VALUES (p_resource, p_holder, p_role::regrole, 1, v_fence, p_lease, v_now, v_now, v_exp)
        ON CONFLICT (resource) DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        PERFORM dlock._sync();
        RETURN v_fence;
    END IF;
    IF r.holder IS NOT NULL AND r.expires_at > clock_timestamp()
       AND NOT (r.holder = p_holder AND r.owner = p_role) THEN
        RETURN NULL;
    END IF;
    -- Lock the row; one another transaction is changing or pinning is busy.
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_now := clock_timestamp();
    IF r.holder IS NOT NULL AND r.expires_at > v_now THEN
        IF NOT (r.holder = p_holder AND r.owner = p_role) THEN
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
        PERFORM dlock._sync();
        RETURN r.fence;
    END IF;
    -- Free, or expired (lazy expiry): take it with a new fence.
    v_exp := dlock._expiry(v_now, p_lease);
    v_fence := dlock._next_fence();
    UPDATE dlock.leases l
       SET holder = p_holder, owner = p_role::regrole, count = 1, fence = v_fence, lease = p_lease,
           acquired_at = v_now, renewed_at = v_now, expires_at = v_exp, released_at = NULL
     WHERE l.resource = p_resource;
    PERFORM dlock._sync();
    RETURN v_fence;
END
$$;

-- _release: end (or count down) a locked row's holding; the count left.
CREATE OR REPLACE FUNCTION dlock._release(p_resource text, p_fence bigint, p_left integer, p_event text)
    RETURNS integer LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF p_left > 0 THEN
        UPDATE dlock.leases l SET count = p_left WHERE l.resource = p_resource;
    ELSE
        UPDATE dlock.leases l SET holder = NULL, count = 0, released_at = clock_timestamp()
         WHERE l.resource = p_resource;
        PERFORM dlock._event(p_event, p_resource, p_fence);
    END IF;
    RETURN p_left;
END
$$;

-- _may_change: may the caller unlock or renew this row of holder's?  true
-- if it is holder's live holding taken by the caller's role (or the caller
-- is a superuser); 42501 for another role's; false if it is not holder's
-- live holding at all.
CREATE OR REPLACE FUNCTION dlock._may_change(r dlock.leases, p_holder text, p_role oid, p_super boolean,
                                             action text)
    RETURNS boolean LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF r.resource IS NULL OR r.holder IS NULL OR r.expires_at <= clock_timestamp()
       OR r.holder <> p_holder THEN
        RETURN false;
    END IF;
    IF r.owner = p_role OR p_super THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION 'permission denied to % a lock held by role "%"', action, r.owner::text
        USING ERRCODE = 'insufficient_privilege',
              DETAIL = format('Only the role that took a lock, or a superuser, can %s it.', action);
END
$$;

-- ---------------------------------------------------------------------------
-- The public functions ([core]).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION dlock.session_holder()
    RETURNS text LANGUAGE sql STABLE PARALLEL RESTRICTED
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT 'pid:' OPERATOR(pg_catalog.||) pg_catalog.pg_backend_pid()::text OPERATOR(pg_catalog.||) ':'
           OPERATOR(pg_catalog.||)
           ((EXTRACT(epoch FROM a.backend_start) OPERATOR(pg_catalog.-) 946684800)
            OPERATOR(pg_catalog.*) 1000000)::bigint::text
      FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) a
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
                                          lease interval DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l interval;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    l := dlock._lease(lease);
    PERFORM dlock._writable('dlock.try_lock()');
    RETURN dlock._attempt(resource, holder, l, (dlock._caller()).roleid);
END
$$;
COMMENT ON FUNCTION dlock.try_lock(text, text, interval) IS
    'Acquire or re-enter resource for holder with a lease; returns the fence, or NULL at once if another holder has it';

CREATE OR REPLACE FUNCTION dlock.lock(resource text,
                                      holder text DEFAULT dlock.session_holder(),
                                      lease interval DEFAULT NULL,
                                      wait interval DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l interval;
    w interval;
    v_role oid;
    deadline timestamptz;
    fence bigint;
    pause interval := interval '1 millisecond';
    poll interval;
    left_ interval;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    l := dlock._lease(lease);
    w := dlock._wait(wait);
    PERFORM dlock._writable('dlock.lock()');
    v_role := (dlock._caller()).roleid;
    poll := greatest(dlock._setting('dlock.poll_interval', interval '100 milliseconds'),
                     interval '1 millisecond');
    deadline := clock_timestamp() + w;
    LOOP
        fence := dlock._attempt(resource, holder, l, v_role);
        IF fence IS NOT NULL THEN
            RETURN fence;
        END IF;
        IF deadline IS NOT NULL THEN
            left_ := deadline - clock_timestamp();
            IF left_ <= interval '0' THEN
                RETURN NULL;
            END IF;
        END IF;
        PERFORM dlock._may_poll('dlock.lock()');
        -- Bounded backoff: 1 ms doubling up to dlock.poll_interval, never
        -- past the deadline.  pg_sleep is interrupted by cancel and
        -- statement_timeout, which end the call (nothing is held).
        PERFORM pg_sleep(extract(epoch FROM least(pause, coalesce(left_, pause))));
        pause := least(pause * 2, poll);
    END LOOP;
END
$$;
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout), polling; NULL on timeout';

CREATE OR REPLACE FUNCTION dlock.unlock(resource text,
                                        holder text DEFAULT dlock.session_holder(),
                                        fence bigint DEFAULT NULL)
    RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c record;
    r dlock.leases%ROWTYPE;
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._text_arg(holder, 'holder', 255);
    PERFORM dlock._writable('dlock.unlock()');
    c := dlock._caller();
    -- A look first: not this holder's (or another role's) needs no lock.
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = unlock.resource;
    IF NOT dlock._may_change(r, holder, c.roleid, c.is_super, 'unlock') THEN
        RETURN NULL;
    END IF;
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = unlock.resource FOR UPDATE;
    IF NOT dlock._may_change(r, holder, c.roleid, c.is_super, 'unlock')
       OR (fence IS NOT NULL AND fence <> r.fence) THEN
        RETURN NULL;
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
        RETURN NULL;
    END IF;
    -- FOR NO KEY UPDATE: an assert_fence pin (FOR KEY SHARE) never makes
    -- the holder's renewal wait.
    SELECT * INTO r FROM dlock.leases x WHERE x.resource = renew.resource FOR NO KEY UPDATE;
    v_now := clock_timestamp();
    IF NOT dlock._may_change(r, holder, c.roleid, c.is_super, 'renew')
       OR (fence IS NOT NULL AND fence <> r.fence) THEN
        RETURN NULL;
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
    RETURN n;
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
    -- Rows free for over an hour go.
    DELETE FROM dlock.leases l
     WHERE l.ctid = ANY (ARRAY(SELECT x.ctid FROM dlock.leases x
                                WHERE x.holder IS NULL
                                  AND x.released_at < clock_timestamp() - interval '1 hour'
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
    IF NOT FOUND OR r.holder IS NULL OR r.expires_at <= clock_timestamp() THEN
        RETURN false;
    END IF;
    PERFORM dlock._release(r.resource, r.fence, 0, 'broken');
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
    IF NOT pg_try_advisory_xact_lock(dlock._key(p_resource)) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
    IF FOUND AND r.holder IS NOT NULL AND r.expires_at > clock_timestamp() THEN
        RETURN NULL;
    END IF;
    -- The advisory lock, held to the end of the transaction, keeps lease
    -- acquirers out; nothing is written but the fence sequence.
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
-- or taken over.
CREATE OR REPLACE VIEW dlock.locks AS
    SELECT l.resource, l.holder, l.count, l.fence, l.lease,
           l.acquired_at, l.renewed_at, l.expires_at,
           l.owner::pg_catalog.regrole AS owner,
           l.expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AS expired
      FROM dlock.leases l
     WHERE l.holder IS NOT NULL;
COMMENT ON VIEW dlock.locks IS
    'Current holdings; an expired lease stays listed (expired = true) until it is reaped or taken over';
GRANT SELECT ON dlock.locks TO PUBLIC;

-- Internal helpers are closed; break_lock is for administrators.
REVOKE EXECUTE ON FUNCTION
    dlock._text_arg(text, text, integer), dlock._setting(text, interval),
    dlock._expiry(timestamptz, interval), dlock._lease(interval), dlock._wait(interval),
    dlock._fence_arg(bigint), dlock._writable(text), dlock._may_poll(text), dlock._caller(), dlock._key(text),
    dlock._sync(), dlock._event(text, text, bigint), dlock._history(), dlock._next_fence(),
    dlock._attempt(text, text, interval, oid), dlock._release(text, bigint, integer, text),
    dlock._may_change(dlock.leases, text, oid, boolean, text),
    dlock._current(text, bigint, boolean), dlock._xact_attempt(text),
    dlock.break_lock(text)
    FROM PUBLIC;

COMMIT;
