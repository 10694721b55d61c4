/*
 * portable/xact.sql: transaction-scoped locks (xact_lock, try_xact_lock,
 * and _xact_attempt, one try), released by the end of the transaction.
 * Part of dlock.sql, which includes it (\ir) inside its transaction after
 * core.sql: run dlock.sql, not this file.
 *
 * What protects the shared state: the resource's row of dlock.leases,
 * locked FOR NO KEY UPDATE SKIP LOCKED to the end of the transaction (or,
 * when there is none, one inserted and deleted, whose key in the primary
 * key stays taken until then), which every acquirer of the resource locks
 * or inserts too (a renewal in flight makes it busy; an assert_fence pin,
 * FOR KEY SHARE, does not wait for it, and a pin of a holding whose lease
 * has run out makes it busy, probed FOR UPDATE SKIP LOCKED in a
 * subtransaction); no advisory lock, which any role could hold.
 * The session setting dlock.xact_<md5> records this transaction's own
 * holding (a fence).
 */
-- _xact_attempt: one try at a transaction-scoped lock: the fence, or NULL.
CREATE OR REPLACE FUNCTION dlock._xact_attempt(p_resource text)
    RETURNS bigint LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    own text := current_setting('dlock.xact_' || md5(p_resource), true);
    r dlock.leases%ROWTYPE;
    v_fence bigint;
    pinned boolean;
BEGIN
    IF own IS NOT NULL AND own <> '' THEN
        RETURN own::bigint;
    END IF;
    -- Held, delayed or queued for: answered before taking anything.
    IF current_setting('transaction_isolation') = 'read committed' THEN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource;
        IF FOUND AND ((r.holder IS NOT NULL AND dlock._exp(r.session, r.expires_at) > clock_timestamp())
                      OR dlock._delayed(r, clock_timestamp())) THEN
            RETURN NULL;
        END IF;
        IF dlock._ahead(p_resource, NULL, NULL, NULL) THEN
            RETURN NULL;
        END IF;
    END IF;
    -- The row, locked FOR NO KEY UPDATE SKIP LOCKED and kept to the end of
    -- the transaction, is the lock: it keeps out every acquirer (each locks
    -- it FOR UPDATE SKIP LOCKED, or this one FOR NO KEY UPDATE), and a
    -- row another transaction is changing or locking (a renewal, release,
    -- reap or acquisition in flight) makes it busy.  A resource without a
    -- row gets a free one, inserted without waiting (_insert_row) and
    -- deleted again, whose key stays taken to the end of the transaction.  No
    -- advisory lock: any role could hold its key.  In a subtransaction
    -- rolled back when the try is refused, so nothing stays behind.  Under
    -- REPEATABLE READ or SERIALIZABLE, a row changed (or inserted) since
    -- the snapshot raises 40001.
    BEGIN
        SELECT * INTO r FROM dlock.leases l WHERE l.resource = p_resource FOR NO KEY UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            IF EXISTS (SELECT FROM dlock.leases l WHERE l.resource = p_resource)
               OR NOT dlock._insert_row(p_resource, NULL, NULL, NULL, NULL, NULL, NULL) THEN
                RAISE SQLSTATE 'DL005';
            END IF;
            -- Deleted again at once: a row this transaction inserted and
            -- deleted still holds its key in the primary key's index until
            -- the transaction ends (another insert of it waits for this
            -- transaction: busy, _insert_row), and leaves no row behind.
            DELETE FROM dlock.leases l WHERE l.resource = p_resource;
        END IF;
        IF (r.holder IS NOT NULL AND dlock._exp(r.session, r.expires_at) > clock_timestamp())
           OR dlock._delayed(r, clock_timestamp()) OR dlock._ahead(p_resource, NULL, NULL, NULL) THEN
            RAISE SQLSTATE 'DL005';
        END IF;
        -- [sessions]: the holding of a session that has ended, only with
        -- that end locked in to the end of the transaction (_lapsed: a
        -- keepalive in flight makes it busy, a later one sees the end).
        IF r.holder IS NOT NULL AND r.session IS NOT NULL AND NOT dlock._lapsed(r.session) THEN
            RAISE SQLSTATE 'DL005';
        END IF;
        -- A holding whose lease has run out may still be pinned by its
        -- holder's assert_fence (FOR KEY SHARE, to the end of that
        -- transaction), which FOR NO KEY UPDATE does not conflict with:
        -- probed FOR UPDATE SKIP LOCKED in a subtransaction rolled back
        -- at once (the lock kept stays FOR NO KEY UPDATE, which no pin
        -- waits for).  Pinned: busy, as for a lease (test/portable/t/086).
        IF r.holder IS NOT NULL THEN
            BEGIN
                PERFORM FROM dlock.leases l WHERE l.resource = p_resource FOR UPDATE SKIP LOCKED;
                pinned := NOT FOUND;
                RAISE SQLSTATE 'DL006';
            EXCEPTION WHEN SQLSTATE 'DL006' THEN
                NULL;
            END;
            IF pinned THEN
                RAISE SQLSTATE 'DL005';
            END IF;
        END IF;
        -- Shared holdings or permits by that name ([kinds], kinds.sql).
        IF r.kinds AND dlock._admit('xact', p_resource, NULL, NULL, NULL, NULL, NULL, true) <> 'new' THEN
            RAISE SQLSTATE 'DL005';
        END IF;
        -- Nothing is written but the fence sequence (and a row lock, or the
        -- key of a row inserted and deleted).  The commit is durable, as an
        -- acquisition's (_sync): with the caller's synchronous_commit = off,
        -- a crash could take with it a release it was granted on that this
        -- transaction wrote (a break_lock), and the old holding came back.
        v_fence := dlock._next_fence();
        PERFORM set_config('dlock.xact_' || md5(p_resource), v_fence::text, true);
        PERFORM dlock._sync();
        RETURN v_fence;
    EXCEPTION WHEN SQLSTATE 'DL005' THEN
        RETURN NULL;
    END;
END
$$;

CREATE OR REPLACE FUNCTION dlock.xact_lock(resource text, wait interval DEFAULT NULL)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    w interval;
    deadline timestamptz;
    fence bigint;
    pause interval := interval '1 millisecond';
    poll interval;
    left_ interval;
    probed boolean := false;     -- the last pause was a probe's wait (_pause)
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
        SELECT * INTO pause, probed FROM dlock._pause(ARRAY[resource], left_, poll, pause, probed);
    END LOOP;
END
$$;
COMMENT ON FUNCTION dlock.xact_lock(text, interval) IS
    'Transaction-scoped lock on resource, held until the transaction ends, waiting up to wait; returns a fence, NULL on timeout';

CREATE OR REPLACE FUNCTION dlock.try_xact_lock(resource text)
    RETURNS bigint LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp SET jit = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    PERFORM dlock._text_arg(resource, 'resource', 1000);
    PERFORM dlock._writable('dlock.try_xact_lock()');
    RETURN dlock._xact_attempt(resource);
END
$$;
COMMENT ON FUNCTION dlock.try_xact_lock(text) IS
    'Transaction-scoped lock on resource, never waits; returns a fence, or NULL if busy';
