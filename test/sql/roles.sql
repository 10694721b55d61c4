-- Promises: P4 P6
-- roles: holdings belong to the holder text and the role that took them;
-- ordinary roles need no grants; the table and sequence are closed.
\pset null '(null)'
\set VERBOSITY default
-- The superuser's name is the OS user's that ran initdb: messages show it as
-- <superuser>, so that the expected output holds whoever runs the tests.
CREATE FUNCTION pg_temp.err(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || replace(SQLERRM, format('"%s"', session_user), '"<superuser>"');
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.err(text) TO PUBLIC;
CREATE ROLE regress_dlock_a;
CREATE ROLE regress_dlock_b;
CREATE ROLE regress_dlock_admin;
GRANT EXECUTE ON FUNCTION dlock.break_lock(text) TO regress_dlock_admin;

-- An ordinary role calls everything but break_lock with no grant.
SET ROLE regress_dlock_a;
SELECT dlock.try_lock('roles/r', 'shared-holder', '1h') IS NOT NULL AS a_acquires;
SELECT dlock.try_lock('roles/r', 'shared-holder') IS NOT NULL AS a_reenters;
SELECT dlock.renew('roles/r', 'shared-holder') IS NOT NULL AS a_renews;
SELECT dlock.check('roles/r', (SELECT fence FROM dlock.locks WHERE resource = 'roles/r')) AS a_checks;
SELECT dlock.lock('roles/s', 'a', '1h', '0') IS NOT NULL AS a_lock;
SELECT dlock.xact_lock('roles/x') IS NOT NULL AS a_xact_lock, dlock.try_xact_lock('roles/y') IS NOT NULL AS a_try_xact_lock;
SELECT dlock.reap() >= 0 AS a_reaps;
SELECT dlock.channel('roles/r') IS NOT NULL AS a_channel;
SELECT resource, holder, count, owner FROM dlock.locks WHERE resource LIKE 'roles/%' ORDER BY 1;
SELECT pg_temp.err($$SELECT dlock.break_lock('roles/r')$$) AS a_break;

-- Users cannot touch the table, the sequence or the epoch directly.
SELECT pg_temp.err($$SELECT * FROM dlock.leases$$) AS read_table;
SELECT pg_temp.err($$UPDATE dlock.leases SET holder = 'me'$$) AS write_table;
SELECT pg_temp.err($$DELETE FROM dlock.leases$$) AS delete_table;
SELECT pg_temp.err($$SELECT nextval('dlock.fence_seq')$$) AS nextval;
SELECT pg_temp.err($$SELECT setval('dlock.fence_seq', 1)$$) AS setval;
SELECT pg_temp.err($$UPDATE dlock.epoch SET base = 0$$) AS write_epoch;
SELECT pg_temp.err($$SELECT nextval('dlock.fences')$$) AS nextval_fences;
SELECT pg_temp.err($$SELECT setval('dlock.fences', 1)$$) AS setval_fences;
SELECT pg_temp.err($$DELETE FROM dlock.fence_epoch$$) AS write_fence_epoch;
SELECT pg_temp.err($$INSERT INTO dlock.outbox VALUES ('c', 'p', 0, now())$$) AS write_outbox;

-- Role b presenting the same holder text is another holder.
SET ROLE regress_dlock_b;
SELECT dlock.try_lock('roles/r', 'shared-holder') AS b_same_text;
SELECT pg_temp.err($$SELECT dlock.unlock('roles/r', 'shared-holder')$$) AS b_unlock;
SELECT pg_temp.err($$SELECT dlock.renew('roles/r', 'shared-holder')$$) AS b_renew;
SELECT dlock.unlock_all('shared-holder') AS b_unlock_all;
SELECT dlock.unlock('roles/r', 'other') AS b_unlock_other_text;
SELECT pg_temp.err($$SELECT dlock.break_lock('roles/r')$$) AS b_break;

-- Nothing changed for a.
RESET ROLE;
SELECT resource, holder, count, owner FROM dlock.locks WHERE resource LIKE 'roles/%' ORDER BY 1;

-- A role granted EXECUTE on break_lock may break.
SET ROLE regress_dlock_admin;
SELECT dlock.break_lock('roles/s') AS admin_breaks;
RESET ROLE;

-- unlock_all releases only the caller's role's holdings.
SET ROLE regress_dlock_b;
SELECT dlock.try_lock('roles/t', 'shared-holder', '1h') IS NOT NULL AS b_acquires_t;
RESET ROLE;
SET ROLE regress_dlock_a;
SELECT dlock.unlock_all('shared-holder') AS a_unlock_all;
RESET ROLE;
SELECT resource, holder, count, owner FROM dlock.locks WHERE resource LIKE 'roles/%' ORDER BY 1;

-- Superusers may unlock another role's holding.
SELECT dlock.unlock('roles/t', 'shared-holder') AS superuser_unlocks;
SELECT count(*) FROM dlock.locks WHERE resource LIKE 'roles/%';

-- The extension owner's holdings are the owner's: another role presenting
-- the same holder text cannot release or renew them (the caller's role is
-- read before dlock switches to the table owner for its statements).
SELECT dlock.try_lock('roles/owner', 'app', '1h') IS NOT NULL AS owner_acquires;
SET ROLE regress_dlock_b;
SELECT pg_temp.err($$SELECT dlock.unlock('roles/owner', 'app')$$) AS b_unlocks_owners;
SELECT pg_temp.err($$SELECT dlock.unlock('roles/owner', 'app', (SELECT fence FROM dlock.locks WHERE resource = 'roles/owner'))$$) AS b_unlocks_owners_fence;
SELECT pg_temp.err($$SELECT dlock.renew('roles/owner', 'app', '1s')$$) AS b_renews_owners;
SELECT dlock.unlock_all('app') AS b_unlock_all_owners;
SELECT dlock.try_lock('roles/owner', 'app') AS b_takes_owners;
RESET ROLE;
SELECT holder, count, owner = quote_ident(current_user)::regrole AS owner_is_me, expires_at > clock_timestamp() + interval '50 min' AS lease_kept
  FROM dlock.locks WHERE resource = 'roles/owner';
SELECT dlock.unlock('roles/owner', 'app') AS owner_unlocks;

-- assert_fence pins a holding: only for roles with the privileges of the
-- role that took it.  Another role can check() the fence, not pin it.
SET ROLE regress_dlock_a;
SELECT dlock.try_lock('roles/pin', 'a', '1h') IS NOT NULL AS a_acquires_pin;
RESET ROLE;
SET ROLE regress_dlock_b;
SELECT dlock.check('roles/pin', (SELECT fence FROM dlock.locks WHERE resource = 'roles/pin')) AS b_checks;
SELECT pg_temp.err($$SELECT dlock.assert_fence('roles/pin', (SELECT fence FROM dlock.locks WHERE resource = 'roles/pin'))$$) AS b_pins;
RESET ROLE;
SET ROLE regress_dlock_a;
BEGIN;
SELECT dlock.assert_fence('roles/pin', (SELECT fence FROM dlock.locks WHERE resource = 'roles/pin')) AS a_pins;
SELECT count(*) AS pins_held FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 17484 AND mode = 'AccessShareLock' AND pid = pg_backend_pid();
COMMIT;
RESET ROLE;
GRANT regress_dlock_a TO regress_dlock_b;
SET ROLE regress_dlock_b;
SELECT pg_temp.err($$SELECT dlock.assert_fence('roles/pin', (SELECT fence FROM dlock.locks WHERE resource = 'roles/pin'))$$) AS member_of_a_pins;
RESET ROLE;
REVOKE regress_dlock_a FROM regress_dlock_b;
SELECT dlock.unlock('roles/pin', 'a') AS superuser_unlocks_pin;

-- session_holder() names the backend: never answered by a parallel worker.
SELECT proparallel FROM pg_proc WHERE oid = 'dlock.session_holder()'::regprocedure;

DROP OWNED BY regress_dlock_a, regress_dlock_b, regress_dlock_admin;
DROP ROLE regress_dlock_a, regress_dlock_b, regress_dlock_admin;
