-- Promises: none
-- sessions (1.1): open_session, keepalive, close_session; holdings taken
-- with session => id live as long as their session; every rule and error
-- path of docs/reference/sessions.md with its SQLSTATE, another role's
-- session, and nothing changed after an error.
\pset null '(null)'
\set VERBOSITY default
-- err: the SQLSTATE and message of q, ids and the superuser's name masked.
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(replace(SQLERRM, format('"%s"', session_user), '"<superuser>"'),
                                              '[0-9]{6,}', 'N', 'g');
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.err(text) TO PUBLIC;
CREATE ROLE regress_dlock_sa;
CREATE ROLE regress_dlock_sb;
CREATE TEMP TABLE v (name text PRIMARY KEY, x bigint);
GRANT ALL ON v TO PUBLIC;

-- open_session: an id drawn from the fences, above every fence before it.
INSERT INTO v SELECT 'f0', dlock.try_lock('sess/f0', 'h0', '1h');
INSERT INTO v SELECT 's', dlock.open_session('1h', 'worker-1');
SELECT (SELECT x FROM v WHERE name = 's') > (SELECT x FROM v WHERE name = 'f0') AS id_above_fences;
SELECT holder, owner = quote_ident(session_user)::regrole AS mine, ttl, holdings, expired,
       expires_at = renewed_at + ttl AS expiry, opened_at = renewed_at AS fresh
  FROM dlock.sessions WHERE id = (SELECT x FROM v WHERE name = 's');
-- ttl NULL: dlock.default_lease; holder defaults to session_holder().
INSERT INTO v SELECT 'dflt', dlock.open_session();
SELECT s.ttl, s.holder = dlock.session_holder() AS default_holder
  FROM dlock.sessions s WHERE s.id = (SELECT x FROM v WHERE name = 'dflt');
-- Bad arguments: 22023; nothing opened.
SELECT count(*) AS sessions_before FROM dlock.sessions;
SELECT pg_temp.err($$SELECT dlock.open_session('0s', 'w')$$) AS ttl_zero;
SELECT pg_temp.err($$SELECT dlock.open_session('-1s', 'w')$$) AS ttl_negative;
SELECT pg_temp.err($$SELECT dlock.open_session('1001 years', 'w')$$) AS ttl_too_long;
SELECT pg_temp.err($$SELECT dlock.open_session('1h', NULL)$$) AS holder_null;
SELECT pg_temp.err($$SELECT dlock.open_session('1h', '')$$) AS holder_empty;
SELECT pg_temp.err($$SELECT dlock.open_session('1h', repeat('h', 256))$$) AS holder_too_long;
SELECT count(*) AS sessions_after FROM dlock.sessions;
-- A read-only transaction: 25006 for all three.
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT dlock.open_session('1h', 'w')$$) AS open_read_only;
SELECT pg_temp.err(format('SELECT dlock.keepalive(%s)', (SELECT x FROM v WHERE name = 's'))) AS keepalive_read_only;
SELECT pg_temp.err(format('SELECT dlock.close_session(%s)', (SELECT x FROM v WHERE name = 's'))) AS close_read_only;
ROLLBACK;
-- Rolled back: the session is gone with its transaction.
BEGIN;
INSERT INTO v SELECT 'rb', dlock.open_session('1h', 'rb');
ROLLBACK;
SELECT count(*) AS rolled_back FROM dlock.sessions WHERE holder = 'rb';

-- Acquisitions in the session: the holder is the session's.
SELECT x AS s FROM v WHERE name = 's' \gset
SELECT dlock.try_lock('sess/a', session => :s) > :s AS a_fence_above_id,
       dlock.try_lock('sess/b', NULL, session => :s) > 0 AS b_holder_null,
       dlock.try_lock('sess/c', 'worker-1', session => :s) > 0 AS c_holder_given,
       dlock.lock('sess/d', session => :s, wait => '0s') > 0 AS d_lock;
SELECT resource, l.holder, count, lease, mode, session = :s AS in_s, l.expires_at = s.expires_at AS session_expiry,
       l.renewed_at = s.renewed_at AS session_renewed
  FROM dlock.locks l, dlock.sessions s WHERE s.id = :s AND l.resource LIKE 'sess/%' AND l.session IS NOT NULL
 ORDER BY resource;
SELECT holdings FROM dlock.sessions WHERE id = :s;
-- The errors of an acquisition in a session; nothing taken.
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/e', 'other', session => %s)$$, :s)) AS other_holder;
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/e', session => %s, lease => '10s')$$, :s)) AS with_lease;
SELECT pg_temp.err(format($$SELECT dlock.lock('sess/e', session => %s, lease => '10s')$$, :s)) AS lock_with_lease;
SELECT pg_temp.err($$SELECT dlock.try_lock('sess/e', session => 1)$$) AS never_opened;
SELECT pg_temp.err(format($$SELECT dlock.try_lock(NULL, session => %s)$$, :s)) AS resource_null;
SELECT count(*) AS taken FROM dlock.locks WHERE resource = 'sess/e';
-- Re-entry: in the same session (count 2, same fence), not another way.
SELECT dlock.try_lock('sess/a', session => :s) = (SELECT fence FROM dlock.locks WHERE resource = 'sess/a') AS same_fence;
SELECT count FROM dlock.locks WHERE resource = 'sess/a';
SELECT pg_temp.err($$SELECT dlock.try_lock('sess/a', 'worker-1', '1h')$$) AS reenter_with_lease;
INSERT INTO v SELECT 'leased', dlock.try_lock('sess/leased', 'worker-1', '1h');
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/leased', session => %s)$$, :s)) AS reenter_leased_in_session;
SELECT count, session = :s AS in_s FROM dlock.locks WHERE resource IN ('sess/a', 'sess/leased') ORDER BY resource;
-- Another holder is refused as ever (NULL), in a session or not.
SELECT dlock.try_lock('sess/a', 'intruder', '1h') IS NULL AS busy;
INSERT INTO v SELECT 's2', dlock.open_session('1h', 'worker-2');
SELECT x AS s2 FROM v WHERE name = 's2' \gset
SELECT dlock.try_lock('sess/a', session => :s2) IS NULL AS busy_for_other_session;

-- keepalive: one row written, every holding's expiry moves with it.
CREATE TEMP TABLE xmins AS SELECT resource, xmin::text AS x FROM dlock.leases WHERE session = :s;
SELECT dlock.keepalive(:s) AS e \gset
SELECT count(*) AS moved FROM dlock.locks WHERE session = :s AND expires_at = :'e';
SELECT count(*) AS rows_untouched FROM dlock.leases l JOIN xmins x USING (resource) WHERE l.xmin::text = x.x;
SELECT expires_at = :'e' AS session_row FROM dlock.sessions WHERE id = :s;
-- A keepalive rolled back leaves the expiry as it was.
BEGIN;
SELECT dlock.keepalive(:s) > :'e' AS kept_in_xact;
ROLLBACK;
SELECT expires_at = :'e' AS rolled_back_keepalive FROM dlock.sessions WHERE id = :s;
-- renew of a holding in a session keeps the session alive.
SELECT dlock.renew('sess/b', 'worker-1') > :'e' AS renew_moves_session;
SELECT count(*) AS moved_again FROM dlock.locks l JOIN dlock.sessions s ON s.id = l.session
 WHERE l.session = :s AND l.expires_at = s.expires_at AND s.expires_at > :'e';
SELECT pg_temp.err($$SELECT dlock.renew('sess/b', 'worker-1', '10s')$$) AS renew_with_lease;
SELECT pg_temp.err('SELECT dlock.keepalive(NULL)') AS keepalive_null;
SELECT pg_temp.err('SELECT dlock.close_session(NULL)') AS close_null;
SELECT dlock.keepalive(1) AS keepalive_never_opened, dlock.close_session(1) AS close_never_opened;

-- check and assert_fence see the session.
SELECT dlock.check('sess/a', fence) AS checks FROM dlock.locks WHERE resource = 'sess/a';
BEGIN;
SELECT dlock.assert_fence('sess/a', fence) FROM dlock.locks WHERE resource = 'sess/a';
COMMIT;

-- unlock of one holding leaves the session and its other holdings.
SELECT dlock.unlock('sess/a', 'worker-1') AS one_level, dlock.unlock('sess/a', 'worker-1') AS released;
SELECT count(*) AS left_in_s, (SELECT count(*) FROM dlock.sessions WHERE id = :s) AS session_stays
  FROM dlock.locks WHERE session = :s;
-- break_lock of one holding leaves the session.
SELECT dlock.break_lock('sess/b') AS broken;
SELECT count(*) AS left_after_break, (SELECT holdings FROM dlock.sessions WHERE id = :s) AS holdings
  FROM dlock.locks WHERE session = :s;
SELECT dlock.keepalive(:s) IS NOT NULL AS still_alive;

-- Another role: 42501 for keepalive, close and acquisitions; nothing changed.
SELECT expires_at AS before_e FROM dlock.sessions WHERE id = :s \gset
SET ROLE regress_dlock_sa;
SELECT pg_temp.err(format('SELECT dlock.keepalive(%s)', :s)) AS other_role_keepalive;
SELECT pg_temp.err(format('SELECT dlock.close_session(%s)', :s)) AS other_role_close;
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/x', session => %s)$$, :s)) AS other_role_acquire;
INSERT INTO v SELECT 'sa', dlock.open_session('1h', 'worker-a');
SELECT x AS sa FROM v WHERE name = 'sa' \gset
SELECT dlock.try_lock('sess/sa', session => :sa) > 0 AS a_acquires_in_own;
RESET ROLE;
SELECT expires_at = :'before_e' AS unchanged, holdings FROM dlock.sessions WHERE id = :s;
SELECT count(*) AS nothing_taken FROM dlock.locks WHERE resource = 'sess/x';
SELECT owner::text AS sa_owner FROM dlock.sessions WHERE id = :sa;
-- A superuser keeps another role's session alive and closes it, but does
-- not acquire in it (SET ROLE for that).
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/x', session => %s)$$, :sa)) AS superuser_acquire;
SELECT dlock.keepalive(:sa) IS NOT NULL AS superuser_keepalive;
SET ROLE regress_dlock_sb;
SELECT pg_temp.err(format($$SELECT dlock.unlock('sess/sa', 'worker-a')$$)) AS other_role_unlock;
SELECT pg_temp.err(format($$SELECT dlock.renew('sess/sa', 'worker-a')$$)) AS other_role_renew;
RESET ROLE;
SELECT dlock.close_session(:sa) AS superuser_close;

-- close_session: every holding released, the session gone, never revived.
SELECT dlock.try_lock('sess/a', session => :s) > 0 AS again;
SELECT dlock.close_session(:s) AS closed;
SELECT count(*) AS left_after_close FROM dlock.locks WHERE session = :s;
SELECT dlock.close_session(:s) AS close_again, dlock.keepalive(:s) AS keepalive_after_close;
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/a', session => %s)$$, :s)) AS acquire_after_close;
SELECT dlock.try_lock('sess/a', 'next', '1h') > (SELECT x FROM v WHERE name = 's2') AS next_holder_higher;
-- close_session in a transaction that rolls back changes nothing.
SELECT dlock.try_lock('sess/r', session => :s2) > 0 AS r_taken;
BEGIN;
SELECT dlock.close_session(:s2) AS closed_in_xact;
ROLLBACK;
SELECT count(*) AS kept, (SELECT holdings FROM dlock.sessions WHERE id = :s2) FROM dlock.locks WHERE session = :s2;

-- The ttl passes: the holdings end at that instant, for everyone.  (One
-- statement opens and acquires, well within the ttl on a loaded machine.)
WITH o AS MATERIALIZED (SELECT dlock.open_session('500ms', 'short') AS id)
INSERT INTO v SELECT 'short', id FROM o
    UNION ALL SELECT 'shf', dlock.try_lock('sess/short', session => id) FROM o;
SELECT x AS sh FROM v WHERE name = 'short' \gset
SELECT pg_sleep_until(expires_at + interval '10ms') FROM dlock.sessions WHERE id = :sh;
SELECT expired, holdings FROM dlock.sessions WHERE id = :sh;
SELECT expired FROM dlock.locks WHERE resource = 'sess/short';
SELECT dlock.keepalive(:sh) AS never_revived, dlock.close_session(:sh) AS close_ended;
SELECT dlock.check('sess/short', (SELECT x FROM v WHERE name = 'shf')) AS check_after_end;
SELECT pg_temp.err(format('SELECT dlock.assert_fence(%L, %s)', 'sess/short', (SELECT x FROM v WHERE name = 'shf'))) AS assert_after_end;
SELECT dlock.renew('sess/short', 'short') AS renew_after_end;
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/z', session => %s)$$, :sh)) AS acquire_in_ended;
SELECT dlock.try_lock('sess/short', 'taker', '1h') > (SELECT x FROM v WHERE name = 'shf') AS taken_over_higher;
SELECT dlock.keepalive(:sh) AS still_not_revived;
SELECT holder, session FROM dlock.locks WHERE resource = 'sess/short';

-- Every kind of acquisition takes session => id.
INSERT INTO v SELECT 'k', dlock.open_session('1h', 'kinds');
SELECT x AS k FROM v WHERE name = 'k' \gset
INSERT INTO v SELECT 'k2', dlock.open_session('1h', 'kinds-2');
SELECT x AS k2 FROM v WHERE name = 'k2' \gset
-- Shared: beside another session's shared holding, re-entered in its session.
SELECT dlock.try_lock('sess/sh', session => :k, shared => true) > 0 AS shared_1,
       dlock.try_lock('sess/sh', session => :k2, shared => true) > 0 AS shared_2,
       dlock.lock('sess/sh', NULL, wait => '0s', shared => true, session => :k) > 0 AS shared_reentered;
SELECT holder, count, mode, session = :k AS in_k FROM dlock.locks WHERE resource = 'sess/sh' ORDER BY holder;
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/sh', 'kinds', '1h', shared => true)$$)) AS shared_reenter_with_lease;
SELECT pg_temp.err(format($$SELECT dlock.try_lock('sess/sh', shared => true, lease => '1h', session => %s)$$, :k)) AS shared_with_lease;
-- Semaphores: holder NULL is the session's; permits added in the session.
SELECT dlock.try_acquire('sess/pool', NULL, 10, 2, session => :k) > 0 AS permits,
       dlock.acquire('sess/pool', 'kinds', 10, 1, wait => '0s', session => :k) > 0 AS more_permits,
       dlock.try_acquire('sess/pool', NULL, 10, 3, session => :k2) > 0 AS other_session_permits;
SELECT holder, permits, session = :k AS in_k FROM dlock.locks WHERE resource = 'sess/pool' ORDER BY holder;
SELECT pg_temp.err($$SELECT dlock.try_acquire('sess/pool', 'kinds', 10, 1, '1h')$$) AS permits_reenter_with_lease;
SELECT pg_temp.err(format($$SELECT dlock.try_acquire('sess/pool', 'x', 10, 1, session => %s)$$, :k)) AS permits_other_holder;
SELECT pg_temp.err(format($$SELECT dlock.acquire('sess/pool', NULL, 10, 1, '1h', session => %s)$$, :k)) AS acquire_with_lease;
-- Several at once: all in the session, or none.
SELECT array_length(dlock.try_lock_all(ARRAY['sess/m1', 'sess/m2'], session => :k), 1) AS all_taken,
       array_length(dlock.lock_all(ARRAY['sess/m3'], NULL, wait => '0s', session => :k), 1) AS lock_all_taken;
SELECT dlock.try_lock_all(ARRAY['sess/m4', 'sess/m1'], session => :k2) IS NULL AS none_when_one_held;
SELECT count(*) AS m4_free FROM dlock.locks WHERE resource = 'sess/m4';
SELECT pg_temp.err(format($$SELECT dlock.try_lock_all(ARRAY['sess/m5'], session => %s, lease => '1h')$$, :k)) AS all_with_lease;
SELECT pg_temp.err(format($$SELECT dlock.lock_all(ARRAY['sess/m5'], 'other', session => %s)$$, :k)) AS all_other_holder;
SELECT pg_temp.err($$SELECT dlock.lock_all(ARRAY['sess/m5'], session => 1)$$) AS all_never_opened;
-- campaign: the candidate is the session's holder; campaigning again, its term.
SELECT dlock.campaign('sess/e', value => 'v1', session => :k) AS term \gset
SELECT dlock.campaign('sess/e', NULL, 'v1', session => :k) = :term AS same_term;
SELECT candidate, value, term = :term AS current FROM dlock.leader('sess/e');
SELECT pg_temp.err(format($$SELECT dlock.campaign('sess/e2', session => %s, lease => '1h')$$, :k)) AS campaign_with_lease;
SELECT pg_temp.err(format($$SELECT dlock.campaign('sess/e2', 'other', session => %s)$$, :k)) AS campaign_other_candidate;
-- One keepalive moves every kind; dlock.sessions counts them all.
SELECT dlock.keepalive(:k) AS ke \gset
SELECT mode, count(*) FROM dlock.locks WHERE session = :k AND expires_at = :'ke' GROUP BY mode ORDER BY mode;
SELECT holdings FROM dlock.sessions WHERE id = :k;
-- renew of a shared or semaphore holding in a session renews the session.
SELECT dlock.renew('sess/pool', 'kinds') > :'ke' AS renew_permits_keeps_alive;
-- close_session releases every kind; the other session's holdings stay.
SELECT dlock.close_session(:k) AS closed_kinds;
SELECT count(*) AS left_in_k FROM dlock.locks WHERE session = :k;
SELECT count(*) AS leader_after_close FROM dlock.leader('sess/e');
SELECT mode, holder FROM dlock.locks WHERE session = :k2 ORDER BY mode;
SELECT dlock.try_lock('sess/m1', 'after', '1h') > :term AS m1_free_higher;
SELECT dlock.close_session(:k2) AS closed_k2;

-- reap(): an ended session's holdings of every kind go (one expired
-- event each), then the session; a lock-delay runs from the session's end.
WITH o AS MATERIALIZED (SELECT dlock.open_session('500ms', 'reaped') AS id),
     i AS (INSERT INTO v SELECT 'r', id FROM o)
SELECT dlock.try_lock('sess/r1', session => id, lock_delay => '1h') > 0 AS r1,
       dlock.try_lock('sess/r2', session => id, shared => true) > 0 AS r2,
       dlock.try_acquire('sess/r3', NULL, 2, 1, session => id) > 0 AS r3
  FROM o;
SELECT x AS r FROM v WHERE name = 'r' \gset
SELECT pg_sleep_until(expires_at + interval '10ms') FROM dlock.sessions WHERE id = :r;
SELECT dlock.try_lock('sess/r1', 'other', '1h') IS NULL AS delayed,
       dlock.try_lock('sess/r2', 'other', '1h') > 0 AS shared_free,
       dlock.try_acquire('sess/r3', 'other', 2, 2, '1h') > 0 AS permits_free;
SELECT available_at = s.expires_at + interval '1 hour' AS delay_from_session_end
  FROM dlock.locks l, dlock.sessions s WHERE l.resource = 'sess/r1' AND s.id = :r;
SELECT count(*) AS listed_until_reaped FROM dlock.sessions WHERE id = :r AND expired;
SELECT dlock.reap() >= 1 AS reaped;
SELECT count(*) AS session_gone FROM dlock.sessions WHERE id = :r;
SELECT holder, available_at > now() + interval '50 minutes' AS still_delayed FROM dlock.locks WHERE resource = 'sess/r1';
SELECT dlock.try_lock('sess/r1', 'other', '1h') IS NULL AS delayed_after_reap;
SELECT dlock.unlock_all('other') AS other_released;

SELECT dlock.close_session(:s2) AS close_s2;
SELECT dlock.unlock_all('worker-1') + dlock.unlock_all('h0') + dlock.unlock_all('next') + dlock.unlock_all('taker') + dlock.unlock_all('after') >= 0 AS cleaned;
DROP ROLE regress_dlock_sa;
DROP ROLE regress_dlock_sb;
