-- Promises: P4
-- search_path: objects planted on the caller's search_path, ahead of
-- pg_catalog, must not change what any dlock function does.
\pset null '(null)'
CREATE ROLE regress_dlock_evil;
CREATE SCHEMA evil AUTHORIZATION regress_dlock_evil;
SET ROLE regress_dlock_evil;
-- An = for text that says everything is equal, a clock stuck in the past,
-- fake nextval/set_config, and a table shadowing the lease table's name.
CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always);
CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$SELECT '2000-01-01'::timestamptz$$;
CREATE FUNCTION evil.nextval(regclass) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint';
CREATE FUNCTION evil.md5(text) RETURNS text LANGUAGE sql AS $$SELECT 'same'$$;
CREATE TABLE evil.leases (resource text);
SET search_path = evil, pg_catalog;

SELECT dlock.try_lock('sp/one', 'h1', '1h') IS NOT NULL AS one;
SELECT dlock.try_lock('sp/two', 'h2', '1h') IS NOT NULL AS two_is_another_resource;
SELECT dlock.try_lock('sp/one', 'h2') AS other_holder_refused;
SELECT dlock.channel('sp/one') <> dlock.channel('sp/two') AS channels_differ;
SELECT dlock.renew('sp/one', 'h1') > '2020-01-01' AS renew_uses_real_clock;
SELECT dlock.unlock('sp/two', 'h1') AS wrong_holder;
SELECT dlock.unlock('sp/one', 'h1') AS released, dlock.unlock('sp/two', 'h2') AS released_two;
SELECT dlock.reap() >= 0 AS reap_runs;
SELECT count(*) AS evil_rows FROM evil.leases;
RESET search_path;
RESET ROLE;
SELECT count(*) AS held FROM dlock.locks WHERE resource LIKE 'sp/%';
DROP SCHEMA evil CASCADE;
DROP ROLE regress_dlock_evil;
