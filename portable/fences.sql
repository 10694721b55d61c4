/*
 * portable/fences.sql: the portable edition's fences and fence epoch:
 * _history (what the server is now: system identifier, database, WAL
 * timeline, postmaster start), _dbrow (the database's own catalog row),
 * the view _epoch_mark (the session's
 * checked-epoch mark) and _next_fence (draw a fence, starting a new epoch
 * when the server's history changed).  Part of dlock.sql, which includes
 * it (\ir) inside its transaction after helpers.sql: run dlock.sql, not
 * this file.
 *
 * What protects the shared state (the sequence dlock.fences and the rows
 * of dlock.fence_epoch and dlock.fence_epoch_seal): a fence is drawn only
 * under the resource's row lock (for a new resource, once its row is
 * inserted: never before, which a transaction-scoped lock could pass,
 * test/portable/t/098); a jump to a new epoch locks the row of dlock.portable (NOWAIT,
 * in a subtransaction) around the read and the setval only, and the
 * epoch row is written under its own row lock, tried, never waited for
 * (_record_epoch).  No advisory lock: any role could hold its key.  The checked-epoch mark is keyed by the seal's secret,
 * which only the installing role can read (see _next_fence's comment).
 */
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

-- _dbrow: the xmin of this database's own pg_database row.  A copy of the
-- database made into a new one (CREATE DATABASE ... TEMPLATE, even with the
-- old OID) has a new row; so do ALTER DATABASE and GRANT ... ON DATABASE
-- (a new epoch then: harmless).
CREATE OR REPLACE FUNCTION dlock._dbrow()
    RETURNS text LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp AS $$
    SELECT d.xmin::text FROM pg_database d WHERE d.datname = current_database()
$$;

-- _epoch_mark: the checked-epoch mark _next_fence makes and compares (see
-- there); no row when the seal does not match the epoch row.  A view, so
-- that a statement can read it without a function call (try_lock's fast
-- path does);
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
-- (or, for a new resource, inserted).
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
-- PITR or a restored base backup (a new postmaster start), a database
-- made again from a copy of itself (a new pg_database row, _dbrow, and
-- only new backends, since DROP DATABASE needs none), and the mark
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
    ok boolean;
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
           AND (e.dbrow IS NULL OR e.dbrow = dlock._dbrow())
      INTO same
      FROM dlock.fence_epoch e, dlock.fence_epoch_seal s;
    IF same THEN
        -- Session-level: a rollback of this transaction takes it back.
        PERFORM set_config('dlock_portable.epoch_checked', mark, false);
        RETURN nextval('dlock.fences');
    END IF;

    -- A new epoch.  Jumps lock the row of dlock.portable (FOR UPDATE
    -- NOWAIT: no other role can lock it) for the read and the setval
    -- only, so that no two jumps interleave (the second would set the
    -- sequence back): in a subtransaction rolled back right after the
    -- setval, which is not transactional, so the row lock goes at once,
    -- also with a cancel.  Another jump holds it for microseconds: retried
    -- every millisecond for up to a second, then 55P03.  (Before issue 33
    -- this was the session advisory lock (1684828003, 1), which any role
    -- could hold and so make every acquisition wait.)
    FOR attempt IN 1 .. 1000 LOOP
        BEGIN
            PERFORM FROM dlock.portable p FOR UPDATE NOWAIT;
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
            RAISE SQLSTATE 'DL003';     -- give the row lock back (the setval stays)
        EXCEPTION
            WHEN SQLSTATE 'DL003' THEN
                EXIT;
            WHEN lock_not_available THEN
                IF attempt = 1000 THEN
                    RAISE EXCEPTION 'could not start a new fence epoch: another session keeps starting one'
                        USING ERRCODE = 'lock_not_available';
                END IF;
                PERFORM pg_sleep(0.001);
        END;
    END LOOP;
    RAISE LOG 'dlock: new fence epoch in database %, first fence %', h.dboid, fence
        USING DETAIL = format('System identifier %s, timeline %s.', h.sysid, h.timeline);

    -- Record it, unless another transaction is recording one right now
    -- (never wait for its uncommitted row): _record_epoch.  Then this
    -- backend has jumped in this postmaster's life past the committed row
    -- it read: it marks that row as checked (mark, read before the jump),
    -- so that its later draws do not jump again while the other
    -- transaction stays open (any role can keep it open; every draw of
    -- every session jumped then, one epoch each, under the row lock of
    -- dlock.portable).  What calls for a new epoch changes the row or the
    -- postmaster, which the mark names.  (No mark when the seal does not
    -- match the row: then each draw jumps, until the record commits.)
    ok := dlock._record_epoch(h.sysid, h.dboid, h.timeline, h.started, fence);
    IF NOT ok AND mark IS NOT NULL THEN
        PERFORM set_config('dlock_portable.epoch_checked', mark, false);
    END IF;
    RETURN fence;
END
$$;

-- _record_epoch: write the new epoch's row and its seal, unless another
-- transaction has them locked or is inserting them (then it records one:
-- false).  The row is locked FOR UPDATE NOWAIT first; with no row yet,
-- the insert waits at most lock_timeout (1 ms) for another transaction's
-- insert of it.  A REPEATABLE READ snapshot older than the row: 40001,
-- caught: the next draw looks again.  (Before issue 33 this was the
-- transaction advisory lock (1684828003, 2), which any role could hold.)
CREATE OR REPLACE FUNCTION dlock._record_epoch(p_sysid text, p_dboid oid, p_timeline bigint,
                                               p_started timestamptz, p_fence bigint)
    RETURNS boolean LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '1ms' AS $$
BEGIN
    PERFORM FROM dlock.fence_epoch e FOR UPDATE NOWAIT;
    INSERT INTO dlock.fence_epoch AS e (sysid, dboid, timeline, started, first_fence, dbrow)
         VALUES (p_sysid, p_dboid, p_timeline, p_started, p_fence, dlock._dbrow())
    ON CONFLICT (one) DO UPDATE
           SET sysid = excluded.sysid, dboid = excluded.dboid, timeline = excluded.timeline,
               started = excluded.started, first_fence = excluded.first_fence,
               dbrow = excluded.dbrow;
    INSERT INTO dlock.fence_epoch_seal AS s (epoch_xmin)
         SELECT e.xmin::text FROM dlock.fence_epoch e
    ON CONFLICT (one) DO UPDATE SET epoch_xmin = excluded.epoch_xmin;
    RETURN true;
EXCEPTION WHEN lock_not_available OR serialization_failure OR unique_violation THEN
    RETURN false;
END
$$;
