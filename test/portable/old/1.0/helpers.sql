/*
 * portable/helpers.sql: the portable edition's small internal helpers,
 * called by every public function: the checks of arguments (_text_arg,
 * _expiry, _lease, _wait, _fence_arg) and of the transaction (_writable,
 * _may_poll), the settings (_setting), the calling role (_role, _caller),
 * the old advisory-lock key (_key), durability (_sync) and events
 * (_event, _event_holding).  Part of dlock.sql, which includes it (\ir)
 * inside its transaction after tables.sql: run dlock.sql, not this file.
 *
 * Shared state: none of their own.  They read settings and catalogs; _sync
 * changes only this transaction's synchronous_commit (SET LOCAL), and
 * _event's pg_notify is delivered when the transaction commits.  The
 * resource's rows are protected by the callers' locks (dlock.sql's
 * header).  EXECUTE is revoked from PUBLIC in grants.sql.
 */
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
-- refused first, so every bad lease is 22023, never 22008.  (Its bounds
-- for a lease of hours, minutes and seconds are copied in try_lock's fast
-- path, core.sql: change them together; 080_fast.t's twins compare them.)
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

-- _key: the first 64 bits of the resource's md5: the advisory lock key
-- that guarded a resource before issue 35 (any role could hold it, and so
-- keep the resource busy); nothing calls it now but calls of the old code
-- in progress while an upgrade runs.  (_qkey, _role, _sync and _event are
-- copied inline in the fast path of try_lock and unlock: change them
-- together.)
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
