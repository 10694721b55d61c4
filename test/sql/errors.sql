-- Promises: P6
-- errors: every bad input raises 22023 naming the argument and changes
-- nothing.
\set VERBOSITY default
\pset null '(null)'
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT dlock.try_lock('err/held', 'h', '1h') IS NOT NULL AS setup;
CREATE TEMP TABLE before AS SELECT * FROM dlock.leases;
SELECT last_value AS seq_before FROM dlock.fences \gset

SELECT q, pg_temp.err(q) FROM (VALUES
  ($$SELECT dlock.try_lock(NULL, 'h')$$),
  ($$SELECT dlock.try_lock('', 'h')$$),
  ($$SELECT dlock.try_lock(repeat('x', 1001), 'h')$$),
  ($$SELECT dlock.try_lock('err/x', NULL)$$),
  ($$SELECT dlock.try_lock('err/x', '')$$),
  ($$SELECT dlock.try_lock('err/x', repeat('h', 256))$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '0')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '-1s')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '1 day -25 hours')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '1001 years')$$),
  -- Leases are checked as the calendar applies them (calendar months), at
  -- the call: none of these may pass as positive, or as 1000 years or less
  -- ('-1 year 362 days' is 2 days long with 30-day months, and -3 or -4
  -- days on any date of the calendar).
  ($$SELECT dlock.try_lock('err/x', 'h', '-1 year 362 days 12 hours')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '-1 month 20 days')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '3000000 months -89640000 days')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '4000000 months -119640000 days')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '-178000000 years')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '-20000 years -7000000 days')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '-20000 years 7300000 days')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '-2000 years -732000 days -8765000 hours')$$),
  ($$SELECT dlock.try_lock('err/x', 'h', '1000 years 1 month')$$),
  ($$SELECT dlock.renew('err/held', 'h', '-1 year 362 days 12 hours')$$),
  ($$SELECT dlock.renew('err/held', 'h', '4000000 months -119640000 days')$$),
  ($$SELECT dlock.lock(NULL, 'h')$$),
  ($$SELECT dlock.lock('err/x', '', '1s')$$),
  ($$SELECT dlock.lock('err/x', 'h', '-5 min')$$),
  ($$SELECT dlock.lock('err/x', 'h', '1s', '-1s')$$),
  ($$SELECT dlock.unlock(NULL, 'h')$$),
  ($$SELECT dlock.unlock('err/held', NULL)$$),
  ($$SELECT dlock.unlock('err/held', repeat('h', 256))$$),
  ($$SELECT dlock.renew('', 'h')$$),
  ($$SELECT dlock.renew('err/held', '')$$),
  ($$SELECT dlock.renew('err/held', 'h', '0')$$),
  ($$SELECT dlock.renew('err/held', 'h', '-1 ms')$$),
  ($$SELECT dlock.unlock_all(NULL)$$),
  ($$SELECT dlock.unlock_all('')$$),
  ($$SELECT dlock.check(NULL, 1)$$),
  ($$SELECT dlock.check('err/held', NULL)$$),
  ($$SELECT dlock.assert_fence('', 1)$$),
  ($$SELECT dlock.assert_fence('err/held', NULL)$$),
  ($$SELECT dlock.break_lock(NULL)$$),
  ($$SELECT dlock.channel(NULL)$$),
  ($$SELECT dlock.channel(repeat('x', 1001))$$),
  ($$SELECT dlock.xact_lock('')$$),
  ($$SELECT dlock.xact_lock('err/x', '-1s')$$),
  ($$SELECT dlock.try_xact_lock(NULL)$$)
) AS t(q);

-- The 1001-byte check counts bytes, not characters.
SELECT pg_temp.err($$SELECT dlock.try_lock(repeat('é', 501), 'h')$$);

-- Nothing changed, and the fence sequence was not touched by any of it.
SELECT count(*) AS changed_rows FROM (
  (SELECT * FROM dlock.leases EXCEPT SELECT * FROM before)
  UNION ALL
  (SELECT * FROM before EXCEPT SELECT * FROM dlock.leases)) d;
SELECT last_value = :seq_before AS fence_seq_untouched FROM dlock.fences;

-- 1000 calendar years is the longest lease; it is written as given.
SELECT dlock.try_lock('err/long', 'h', '1000 years') IS NOT NULL AS thousand_years;
SELECT expires_at = acquired_at + interval '1000 years' AS written_as_given
  FROM dlock.locks WHERE resource = 'err/long';
SELECT dlock.unlock('err/long', 'h');

-- Re-entry at the largest count: 54000, and the holding is unchanged.
SELECT dlock.try_lock('err/count', 'h', '1h') IS NOT NULL AS taken;
UPDATE dlock.leases SET count = 2147483647 WHERE resource = 'err/count';
SELECT pg_temp.err($$SELECT dlock.try_lock('err/count', 'h')$$);
SELECT count, holder FROM dlock.leases WHERE resource = 'err/count';
UPDATE dlock.leases SET count = 1 WHERE resource = 'err/count';
SELECT dlock.unlock('err/count', 'h');

-- assert_fence's own error: SQLSTATE 55P03 with a detail.
SELECT pg_temp.err($$SELECT dlock.assert_fence('err/held', 1)$$);

-- Read-only transactions: state changes raise 25006.
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT dlock.try_lock('err/ro', 'h')$$);
SELECT pg_temp.err($$SELECT dlock.unlock('err/held', 'h')$$);
SELECT pg_temp.err($$SELECT dlock.reap()$$);
SELECT dlock.check('err/held', 1) AS check_is_read_only;
COMMIT;

SELECT dlock.unlock('err/held', 'h');
