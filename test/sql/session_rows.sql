-- Promises: none
-- A session's row as the C extension reads it (1.1): a backend remembers
-- where it last found a session's row and looks there first.  Whatever
-- happened to the row since (keepalives, a superuser's UPDATE or DELETE
-- by hand, the table rewritten or truncated, another session's row in
-- its place), every read sees the row as it is now: acquisitions,
-- check, renew, unlock and the holdings' expiry in dlock.locks.
\pset null '(null)'
-- err: the SQLSTATE and message of q, ids masked.
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, '[0-9]{6,}', 'N', 'g');
END $$;
-- seen: what the extension reads of the holding of r (its holder and
-- whether check finds it live), and whether its expiry is its session's
-- expiry as the table has it now.
CREATE FUNCTION pg_temp.seen(r text, f bigint)
RETURNS TABLE (holder text, live boolean, session_expiry boolean) LANGUAGE sql AS $$
    SELECT l.holder, dlock.check(r, f),
           l.expires_at IS NOT DISTINCT FROM (SELECT s.expires_at FROM dlock.session_rows s
                                               WHERE s.id = l.session)
      FROM dlock.locks l WHERE l.resource = r
$$;
CREATE TEMP TABLE v (name text PRIMARY KEY, x bigint);

-- Three sessions, in this order in the table.
INSERT INTO v SELECT 'a', dlock.open_session('1h', 'ha');
INSERT INTO v SELECT 'b', dlock.open_session('1h', 'hb');
INSERT INTO v SELECT 'c', dlock.open_session('2h', 'hc');
SELECT x AS a FROM v WHERE name = 'a' \gset
SELECT x AS b FROM v WHERE name = 'b' \gset
SELECT x AS c FROM v WHERE name = 'c' \gset
SELECT dlock.try_lock('srow/a', session => :a) AS fa \gset
SELECT dlock.try_lock('srow/c', session => :c) AS fc \gset
SELECT dlock.try_lock('srow/b', session => :b) AS fb \gset
SELECT * FROM pg_temp.seen('srow/b', :fb);

-- A superuser moves session a's end into the past by hand: seen at once.
SELECT * FROM pg_temp.seen('srow/a', :fa);
UPDATE dlock.session_rows SET expires_at = clock_timestamp() - interval '1 s' WHERE id = :a;
SELECT * FROM pg_temp.seen('srow/a', :fa);
SELECT pg_temp.err(format('SELECT dlock.try_lock(%L, session => %s)', 'srow/a2', :a));
SELECT dlock.renew('srow/a', 'ha') AS renewed, dlock.keepalive(:a) AS kept;
-- ... and deletes it: the holding is gone with it.
DELETE FROM dlock.session_rows WHERE id = :a;
SELECT * FROM pg_temp.seen('srow/a', :fa);
SELECT dlock.unlock('srow/a', 'ha') AS unlocked;

-- The table rewritten with a's row gone: b's row moves to where a's was,
-- c's to where b's was.  A read of b (the last row read) that looked
-- where b's row was would find c's (another holder, another ttl).
SELECT * FROM pg_temp.seen('srow/b', :fb);
VACUUM FULL dlock.session_rows;
SELECT * FROM pg_temp.seen('srow/b', :fb);
SELECT dlock.try_lock('srow/b2', session => :b) IS NOT NULL AS taken_in_b;
SELECT holder, session = :b AS in_b FROM dlock.locks WHERE resource = 'srow/b2';
SELECT dlock.renew('srow/b', 'hb') AS e \gset
SELECT :'e'::timestamptz = (SELECT expires_at FROM dlock.session_rows WHERE id = :b) AS renew_is_b;
SELECT * FROM pg_temp.seen('srow/c', :fc);

-- The owner changed by hand (a HOT update): another role's session now.
CREATE ROLE regress_dlock_srow;
UPDATE dlock.session_rows SET owner = 'regress_dlock_srow'::regrole WHERE id = :b;
SELECT pg_temp.err(format('SELECT dlock.try_lock(%L, session => %s)', 'srow/o', :b));
UPDATE dlock.session_rows SET owner = quote_ident(session_user)::regrole WHERE id = :b;
SELECT pg_temp.err(format('SELECT dlock.try_lock(%L, session => %s)', 'srow/o', :b));
SELECT dlock.unlock('srow/o', 'hb') AS unlocked;
DROP ROLE regress_dlock_srow;
-- Changes rolled back, whole or to a savepoint: seen while they last.
BEGIN;
UPDATE dlock.session_rows SET expires_at = clock_timestamp() - interval '1 s' WHERE id = :b;
SELECT dlock.check('srow/b', :fb) AS in_xact;
ROLLBACK;
SELECT dlock.check('srow/b', :fb) AS after_rollback;
BEGIN;
SAVEPOINT p;
DELETE FROM dlock.session_rows WHERE id = :b;
SELECT dlock.check('srow/b', :fb) AS deleted;
ROLLBACK TO p;
SELECT dlock.check('srow/b', :fb) AS back;
COMMIT;
-- Moved away under another id and back (updates of the key: not HOT).
UPDATE dlock.session_rows SET id = id + 1000000 WHERE id = :b;
SELECT dlock.check('srow/b', :fb) AS moved_away;
UPDATE dlock.session_rows SET id = id - 1000000 WHERE id = :b + 1000000;
SELECT dlock.check('srow/b', :fb) AS moved_back;

-- Keepalives, each a new version of b's row (HOT updates, then pages
-- pruned or filled): every read sees the latest.
SELECT count(dlock.keepalive(:b)) FROM generate_series(1, 300);
SELECT * FROM pg_temp.seen('srow/b', :fb);
SELECT dlock.renew('srow/b', 'hb') AS e \gset
SELECT :'e'::timestamptz = (SELECT expires_at FROM dlock.session_rows WHERE id = :b) AS renew_is_b;
SELECT * FROM pg_temp.seen('srow/b', :fb);
SELECT dlock.unlock('srow/b2', 'hb') AS unlocked;

-- The table shrinks under a row read last on a later page: no read
-- looks past its end.
SELECT count(dlock.open_session('1h', 'filler')) FROM generate_series(1, 300);
INSERT INTO v SELECT 'd', dlock.open_session('1h', 'hd');
SELECT x AS d FROM v WHERE name = 'd' \gset
SELECT pg_relation_size('dlock.session_rows') > 2 * current_setting('block_size')::int AS pages;
SELECT dlock.try_lock('srow/d', session => :d) AS fd \gset
SELECT count(dlock.close_session(id)) FROM dlock.session_rows WHERE holder = 'filler';
VACUUM FULL dlock.session_rows;
SELECT pg_relation_size('dlock.session_rows') = current_setting('block_size')::int AS one_page;
SELECT * FROM pg_temp.seen('srow/d', :fd);
SELECT dlock.try_lock('srow/d2', session => :d) IS NOT NULL AS taken_in_d;

-- More sessions than a backend remembers, read in turn, the table
-- clustered between rounds: each read is its own session's.
CREATE TEMP TABLE many AS
    SELECT i, dlock.open_session('1h', 'many' || i) AS s FROM generate_series(1, 40) i;
SELECT count(dlock.try_lock('srow/many' || i, session => s)) FROM many;
SELECT bool_and(l.holder = 'many' || m.i AND dlock.check(l.resource, l.fence)) AS each_its_own
  FROM many m JOIN dlock.locks l ON l.resource = 'srow/many' || m.i, generate_series(1, 3);
CLUSTER dlock.session_rows USING session_rows_pkey;
SELECT bool_and(l.holder = 'many' || m.i AND dlock.check(l.resource, l.fence)) AS each_its_own
  FROM many m JOIN dlock.locks l ON l.resource = 'srow/many' || m.i, generate_series(1, 3);
SELECT count(dlock.close_session(s)) FROM many;

-- Truncated by hand: no session is left, nor any holding in one.
TRUNCATE dlock.session_rows;
SELECT * FROM pg_temp.seen('srow/d', :fd);
SELECT pg_temp.err(format('SELECT dlock.try_lock(%L, session => %s)', 'srow/d3', :d));
SELECT dlock.keepalive(:d) AS kept, dlock.close_session(:d) AS closed;
SELECT * FROM pg_temp.seen('srow/c', :fc);
SELECT dlock.unlock_all('hb') + dlock.unlock_all('hc') + dlock.unlock_all('hd') AS released;
-- Nothing left for the tests after this one (the holdings' rows of the
-- sessions truncated away would go with the reaper).
DELETE FROM dlock.leases WHERE resource LIKE 'srow/%';
