-- Promises: none
-- rows: the direct row access of rows.c keeps dlock.leases as the SQL
-- statements did: every index a superuser adds is maintained (expression
-- and partial ones too) and every CHECK constraint is checked.
\pset null '(null)'

-- An expression index: maintained on insert, on a takeover and on release
-- (a lock-delay keeps a released row: else it goes, rows.c's row_needed).
CREATE INDEX leases_lower_holder ON dlock.leases (lower(holder));
SELECT dlock.try_lock('rows/x', 'H1', '10s', lock_delay => '1 ms') IS NOT NULL AS acquired;
SET enable_seqscan = off; SET enable_bitmapscan = off;
SELECT resource FROM dlock.leases WHERE lower(holder) = 'h1';
SELECT dlock.unlock('rows/x', 'H1');
SELECT resource FROM dlock.leases WHERE lower(holder) = 'h1';
SELECT dlock.try_lock('rows/x', 'H2', '10s') IS NOT NULL AS acquired;
SELECT resource FROM dlock.leases WHERE lower(holder) = 'h2';
SELECT dlock.unlock('rows/x', 'H2');
RESET enable_seqscan; RESET enable_bitmapscan;
DROP INDEX dlock.leases_lower_holder;

-- A partial index: a freed row (holder NULL) has no entry in it.
CREATE INDEX leases_held_expiry ON dlock.leases (expires_at) WHERE holder IS NOT NULL;
SELECT dlock.try_lock('rows/p', 'h1', '10s') IS NOT NULL AS acquired;
SELECT dlock.unlock('rows/p', 'h1');
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (COSTS off) SELECT resource FROM dlock.leases WHERE holder IS NOT NULL AND expires_at IS NULL;
SELECT resource FROM dlock.leases WHERE holder IS NOT NULL AND expires_at IS NULL;
RESET enable_seqscan; RESET enable_bitmapscan;
DROP INDEX dlock.leases_held_expiry;

-- A CHECK constraint refuses a row as the statements did (23514), and the
-- refused acquisition changes nothing.
ALTER TABLE dlock.leases ADD CONSTRAINT short_holder CHECK (length(holder) < 10);
\set VERBOSITY terse
SELECT dlock.try_lock('rows/c', 'a-long-holder-name', '10s');
SELECT dlock.try_lock('rows/x', 'a-long-holder-name', '10s');
\set VERBOSITY default
SELECT count(*) FROM dlock.leases WHERE resource = 'rows/c';
SELECT holder FROM dlock.leases WHERE resource = 'rows/x';
ALTER TABLE dlock.leases DROP CONSTRAINT short_holder;

-- Savepoints: a direct write rolled back is gone for the reads that
-- follow in the transaction; a store session cut by an error (after it
-- entered SPI for the fair queue) leaves nothing behind for the next call.
ALTER TABLE dlock.leases ADD CONSTRAINT short_holder CHECK (length(holder) < 10);
BEGIN;
SELECT dlock.try_lock('rows/s', 'h', '10s') IS NOT NULL AS acquired;
SAVEPOINT a;
SELECT dlock.unlock('rows/s', 'h');
SELECT dlock.try_lock('rows/s2', 'h', '10s') IS NOT NULL AS acquired;
ROLLBACK TO SAVEPOINT a;
SELECT resource, holder, count FROM dlock.leases WHERE resource LIKE 'rows/s%' ORDER BY 1;
SELECT dlock.try_lock('rows/s', 'h', '10s') IS NOT NULL AS reentered;
SAVEPOINT b;
\set VERBOSITY terse
SELECT dlock.try_lock('rows/s3', 'a-long-holder-name', '10s', fair => true);
\set VERBOSITY default
ROLLBACK TO SAVEPOINT b;
SELECT dlock.try_lock('rows/s3', 'h', '10s', fair => true) IS NOT NULL AS acquired;
SELECT resource, holder, count FROM dlock.leases WHERE resource LIKE 'rows/s%' ORDER BY 1;
COMMIT;
ALTER TABLE dlock.leases DROP CONSTRAINT short_holder;

-- Nested: from plpgsql (inside SPI), with an exception block around a
-- call that acquired; break_lock then a new holder in one transaction.
CREATE FUNCTION pg_temp.nested(r text) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
  PERFORM dlock.try_lock(r, 'n', '10s', fair => true);
  PERFORM dlock.try_lock(r, 'n', '10s');
  PERFORM dlock.unlock(r, 'n');
  BEGIN
    PERFORM dlock.try_lock(r || '/e', 'n', '10s');
    RAISE EXCEPTION 'undo';
  EXCEPTION WHEN raise_exception THEN NULL;
  END;
  RETURN (SELECT count FROM dlock.leases WHERE resource = r);
END $$;
SELECT pg_temp.nested('rows/n');
SELECT count(*) AS undone FROM dlock.leases WHERE resource = 'rows/n/e';
BEGIN;
SELECT dlock.break_lock('rows/n');
SELECT dlock.try_lock('rows/n', 'm', '10s') IS NOT NULL AS taken_after_break;
SELECT holder, count FROM dlock.leases WHERE resource = 'rows/n';
COMMIT;
SELECT dlock.unlock('rows/n', 'm'), dlock.unlock_all('h');

-- Columns a superuser adds: a new row gets their defaults (a NOT NULL one
-- too), and a stored generated column is computed on every write, as the
-- statements' INSERT and UPDATE did (a lock-delay keeps the released row).
ALTER TABLE dlock.leases ADD COLUMN team text NOT NULL DEFAULT 'core';
ALTER TABLE dlock.leases ADD COLUMN held boolean GENERATED ALWAYS AS (holder IS NOT NULL) STORED;
SELECT dlock.try_lock('rows/d', 'h', '10s', lock_delay => '1 ms') IS NOT NULL AS acquired;
SELECT team, held FROM dlock.leases WHERE resource = 'rows/d';
SELECT dlock.unlock('rows/d', 'h');
SELECT team, held FROM dlock.leases WHERE resource = 'rows/d';
SELECT dlock.try_lock('rows/d', 'h', '10s') IS NOT NULL AS acquired;
SELECT team, held FROM dlock.leases WHERE resource = 'rows/d';
SELECT dlock.unlock('rows/d', 'h');
ALTER TABLE dlock.leases DROP COLUMN team, DROP COLUMN held;

-- What the table's constraints, defaults and index expressions run is
-- run as the table's owner, as the statements ran it: an ordinary role
-- needs no rights on the functions or sequences they use.
CREATE ROLE dlock_rows_user;
CREATE FUNCTION public.rows_holder_ok(h text) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS 'SELECT length(h) < 100';
REVOKE EXECUTE ON FUNCTION public.rows_holder_ok(text) FROM PUBLIC;
ALTER TABLE dlock.leases ADD CONSTRAINT holder_ok CHECK (public.rows_holder_ok(holder));
CREATE INDEX leases_holder_ok ON dlock.leases (public.rows_holder_ok(holder));
ALTER TABLE dlock.leases ADD COLUMN serial bigserial;
SET ROLE dlock_rows_user;
SELECT dlock.try_lock('rows/o', 'h', '10s', lock_delay => '1 ms') IS NOT NULL AS acquired;
SELECT dlock.unlock('rows/o', 'h');
SELECT dlock.try_lock('rows/o', 'h', '10s') IS NOT NULL AS acquired;
SELECT dlock.unlock('rows/o', 'h');
RESET ROLE;
SELECT serial IS NOT NULL AS serial_set FROM dlock.leases WHERE resource = 'rows/o';
ALTER TABLE dlock.leases DROP COLUMN serial, DROP CONSTRAINT holder_ok;
DROP INDEX dlock.leases_holder_ok;
DROP FUNCTION public.rows_holder_ok(text);
DROP ROLE dlock_rows_user;

-- A deferrable unique constraint: dlock checks it at once (it fires no
-- trigger to check it at commit), with the executor's error.
SELECT count(dlock.break_lock(resource)) >= 0 AS all_free FROM dlock.leases WHERE holder IS NOT NULL;
ALTER TABLE dlock.leases ADD CONSTRAINT one_per_holder UNIQUE (holder) DEFERRABLE INITIALLY DEFERRED;
SELECT dlock.try_lock('rows/u1', 'uh', '10s') IS NOT NULL AS acquired;
SELECT dlock.try_lock('rows/u2', 'uh', '10s');
SELECT dlock.try_lock('rows/u1', 'uh2', '10s') AS other;
SELECT resource, holder FROM dlock.leases WHERE resource LIKE 'rows/u%' ORDER BY 1;
ALTER TABLE dlock.leases DROP CONSTRAINT one_per_holder;
SELECT dlock.unlock('rows/u1', 'uh');

-- Many columns: 60 added and dropped (they stay in the row, dropped).
DO $$ BEGIN
  FOR i IN 1..60 LOOP
    EXECUTE format('ALTER TABLE dlock.leases ADD COLUMN extra%s integer DEFAULT %s', i, i);
  END LOOP;
END $$;
SELECT dlock.try_lock('rows/m', 'h', '10s') IS NOT NULL AS acquired;
SELECT dlock.try_lock('rows/m', 'h', '10s') IS NOT NULL AS reentered;
SELECT extra1, extra60, count FROM dlock.leases WHERE resource = 'rows/m';
DO $$ BEGIN
  FOR i IN 1..60 LOOP
    EXECUTE format('ALTER TABLE dlock.leases DROP COLUMN extra%s', i);
  END LOOP;
END $$;
SELECT dlock.unlock('rows/m', 'h'), dlock.unlock('rows/m', 'h');
SELECT dlock.try_lock('rows/m', 'h', '10s') IS NOT NULL AS acquired;
SELECT dlock.unlock_all('h');
