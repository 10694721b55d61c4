-- rows: the direct row access of rows.c keeps dlock.leases as the SQL
-- statements did: every index a superuser adds is maintained (expression
-- and partial ones too) and every CHECK constraint is checked.
\pset null '(null)'

-- An expression index: maintained on insert, on a takeover and on release.
CREATE INDEX leases_lower_holder ON dlock.leases (lower(holder));
SELECT dlock.try_lock('rows/x', 'H1', '10s') IS NOT NULL AS acquired;
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
