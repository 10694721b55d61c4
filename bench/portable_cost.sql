/*
 * bench/portable_cost.sql: what each promise of the portable edition's fast
 * path costs, for bench/portable_cost.sh (bench/HISTORY.md, "Portable edition:
 * where a pair's time goes").  Installed by the owner of a database that
 * has the portable edition (portable/dlock.sql), in a schema of its own,
 * dlock_cost; nothing of dlock's is changed (the variants write rows of
 * dlock.leases named cost/<variant> only, which dlock.try_lock creates).
 *
 * Each variant is a lock function and an unlock function, SECURITY DEFINER
 * with SET search_path as the edition's, doing the least a function-based
 * lock can do (one UPDATE of the resource's row each: the "floor") plus
 * ONE of the fast path's parts, written as in portable/core.sql's
 * try_lock and unlock:
 *   floor      the bare UPDATE pair (no never-wait, no event, no epoch)
 *   frame      + one more PL/pgSQL frame with SET search_path per call
 *   prologue   + the checks of the arguments and settings
 *   nowait     + the row locked SKIP LOCKED and "version locked = version
 *              judged" (lock), the holder's row locked FOR UPDATE (unlock)
 *   advisory   + the resource's transaction-level advisory lock
 *   event      + the "released" event (pg_notify, delivered at commit)
 *   epoch      + the fence drawn after the checked-epoch mark
 *   queues     + the kinds flag, lock-delay and ticket probes
 *   waiters    + the "fair waiters" mark (a try and give back)
 *   minimal    nowait + advisory + event + epoch: what never waiting, the
 *              event and fences that never repeat need at least
 * and, for reference, naive (the naive lock table's INSERT ... ON
 * CONFLICT and DELETE) and dlock (dlock.try_lock and dlock.unlock).
 * dlock_cost.loop(variant, n) makes n pairs, each call its own transaction
 * (COMMIT inside the procedure): the server's time alone, without the
 * round trips, which the machine's load blurs far less than pairs/s.
 */
SET client_min_messages = warning;
CREATE SCHEMA IF NOT EXISTS dlock_cost;
CREATE TABLE IF NOT EXISTS dlock_cost.naive (resource text PRIMARY KEY, holder text, expires_at timestamptz);

CREATE OR REPLACE FUNCTION dlock_cost.inner_frame(r text) RETURNS bigint LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN NULL;
END $$;

-- lock_v: the floor's UPDATE plus the part named by v (a text compared
-- once per call in plain PL/pgSQL: the same for every variant).
CREATE OR REPLACE FUNCTION dlock_cost.lock_v(v text, r text, h text) RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    f bigint;
    n timestamptz := clock_timestamp();
    v_md5 text;
    k integer;
    v_role oid;
    l interval;
BEGIN
    IF v = 'floor' THEN
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL RETURNING x.fence INTO f;
    ELSIF v = 'frame' THEN
        f := dlock_cost.inner_frame(r);
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL RETURNING x.fence INTO f;
    ELSIF v = 'prologue' THEN
        v_md5 := md5(r);
        IF coalesce(octet_length(r), 0) BETWEEN 1 AND 1000
           AND coalesce(octet_length(h), 0) BETWEEN 1 AND 255
           AND coalesce(current_setting('dlock.lock_delay', true), '') IN ('', '0')
           AND current_setting('transaction_isolation') = 'read committed'
           AND current_setting('transaction_read_only') = 'off'
           AND coalesce(current_setting('dlock.xact_' || v_md5, true), '') = '' THEN
            l := interval '30 seconds';     -- the lease given, as the benchmarks' calls give it
            IF l > interval '0' AND l <= interval '8766000 hours'
               AND extract(year FROM l) = 0 AND extract(month FROM l) = 0 AND extract(day FROM l) = 0 THEN
                v_role := to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                                      ELSE current_setting('role') END));
                k := ('x' || substr(v_md5, 17, 8))::bit(32)::integer;
                IF k = ANY ('{1684828003,1684828005,1684828006,1684828007}'::integer[]) THEN
                    k := 1684828004;
                END IF;
                UPDATE dlock.leases x SET holder = h, count = 1, lease = l, fence = nextval('dlock.fences'),
                       acquired_at = n, renewed_at = n, expires_at = n + l, released_at = NULL
                 WHERE x.resource = r AND x.holder IS NULL RETURNING x.fence INTO f;
            END IF;
        END IF;
    ELSIF v = 'nowait' THEN
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL
           AND x.xmin = (SELECT y.xmin FROM dlock.leases y WHERE y.resource = r FOR UPDATE SKIP LOCKED)
        RETURNING x.fence INTO f;
    ELSIF v = 'advisory' THEN
        v_md5 := md5(r);
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL
           AND pg_try_advisory_xact_lock(('x' || substr(v_md5, 1, 16))::bit(64)::bigint)
        RETURNING x.fence INTO f;
    ELSIF v = 'event' THEN
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL RETURNING x.fence INTO f;
    ELSIF v = 'epoch' THEN
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s',
               fence = CASE WHEN (SELECT m.mark FROM dlock._epoch_mark m)
                                 = current_setting('dlock_portable.epoch_checked', true)
                            THEN nextval('dlock.fences') ELSE dlock._next_fence() END,
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL RETURNING x.fence INTO f;
    ELSIF v = 'queues' THEN
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL AND NOT x.kinds
           AND NOT EXISTS (SELECT FROM dlock.delays dl
                            WHERE dl.resource = x.resource AND dl.fence = x.fence AND dl.available_at > n)
           AND NOT EXISTS (SELECT FROM dlock.tickets t
                            WHERE t.resource = r AND (t.expires_at > n OR (t.holder = h AND t.owner = x.owner)))
        RETURNING x.fence INTO f;
    ELSIF v = 'waiters' THEN
        k := 12345;
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s', fence = nextval('dlock.fences'),
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL
           AND CASE WHEN NOT pg_try_advisory_lock(k, 0) THEN false
                    WHEN NOT pg_advisory_unlock(k, 0) THEN false ELSE true END
        RETURNING x.fence INTO f;
    ELSIF v = 'minimal' THEN
        v_md5 := md5(r);
        UPDATE dlock.leases x SET holder = h, count = 1, lease = '30s',
               fence = CASE WHEN (SELECT m.mark FROM dlock._epoch_mark m)
                                 = current_setting('dlock_portable.epoch_checked', true)
                            THEN nextval('dlock.fences') ELSE dlock._next_fence() END,
               acquired_at = n, renewed_at = n, expires_at = n + '30s', released_at = NULL
         WHERE x.resource = r AND x.holder IS NULL
           AND CASE WHEN x.xmin IS DISTINCT FROM (SELECT y.xmin FROM dlock.leases y
                                                   WHERE y.resource = r FOR UPDATE SKIP LOCKED) THEN false
                    ELSE pg_try_advisory_xact_lock(('x' || substr(v_md5, 1, 16))::bit(64)::bigint) END
        RETURNING x.fence INTO f;
    ELSE
        RAISE EXCEPTION 'unknown variant %', v USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN f;
END $$;

CREATE OR REPLACE FUNCTION dlock_cost.unlock_v(v text, r text, h text) RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    f bigint;
    ok boolean;
BEGIN
    IF v = 'nowait' OR v = 'minimal' THEN
        UPDATE dlock.leases x SET holder = NULL, count = 0, released_at = clock_timestamp()
         WHERE x.resource = r AND x.holder = h
           AND x.resource = (SELECT y.resource FROM dlock.leases y WHERE y.resource = r AND y.holder = h FOR UPDATE)
        RETURNING x.fence INTO f;
    ELSE
        IF v = 'frame' THEN
            f := dlock_cost.inner_frame(r);
        END IF;
        UPDATE dlock.leases x SET holder = NULL, count = 0, released_at = clock_timestamp()
         WHERE x.resource = r AND x.holder = h RETURNING x.fence INTO f;
    END IF;
    IF v = 'event' OR v = 'minimal' THEN
        ok := pg_notify('dlock_' || md5(r),
                        '{"event":"released","resource":' || to_json(r)::text || ',"fence":' || f::text || '}') IS NOT NULL;
    END IF;
    RETURN CASE WHEN f IS NULL THEN NULL ELSE 0 END;
END $$;

-- loop(v, n): n pairs of variant v, each call its own transaction.
CREATE OR REPLACE PROCEDURE dlock_cost.loop(v text, n integer) LANGUAGE plpgsql AS $$
DECLARE
    r text := 'cost/' || v;
    f bigint;
    u integer;
BEGIN
    IF v NOT IN ('naive', 'dlock') THEN
        -- the row must exist (the variants only update it): dlock makes it
        PERFORM dlock.try_lock(r, 'setup', '30s');
        PERFORM dlock.unlock(r, 'setup');
        COMMIT;
    END IF;
    FOR i IN 1 .. n LOOP
        IF v = 'naive' THEN
            INSERT INTO dlock_cost.naive VALUES (r, 'h', now() + '30s') ON CONFLICT (resource)
                DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
                WHERE naive.expires_at < now()
            RETURNING 1 INTO f;
            COMMIT;
            DELETE FROM dlock_cost.naive WHERE resource = r AND holder = 'h' RETURNING 0 INTO u;
        ELSIF v = 'dlock' THEN
            f := dlock.try_lock(r, 'h', '30s');
            COMMIT;
            u := dlock.unlock(r, 'h');
        ELSE
            f := dlock_cost.lock_v(v, r, 'h');
            COMMIT;
            u := dlock_cost.unlock_v(v, r, 'h');
        END IF;
        COMMIT;
        IF f IS NULL OR u IS DISTINCT FROM 0 THEN
            RAISE EXCEPTION 'variant %: a pair failed (lock %, unlock %)', v, f, u;
        END IF;
    END LOOP;
END $$;
