-- ---------------------------------------------------------------------------
-- Comments: every object gets a COMMENT ON (0.2)
--
-- \dx+ dlock, \df+ dlock.*, \dv+ and \d+ show them.  Every object that
-- 0.1 and 0.1.1 created is commented here; an object added later gets its
-- COMMENT ON in the script that adds it (test/t/090_upgrade.pl fails for an
-- extension member without one).  Comments take no lock that would wait
-- behind a waiting lock() call.
-- ---------------------------------------------------------------------------
COMMENT ON SCHEMA dlock IS
    'dlock: leased distributed locks with fencing tokens (see the dlock README)';

-- Tables and sequences: users have no rights on them; the functions are the interface.
COMMENT ON TABLE dlock.leases IS
    'One row per resource: the current holding (holder NULL when free); read it through dlock.locks';
COMMENT ON TABLE dlock.fence_epoch IS
    'The current fence epoch and the (system identifier, database, timeline, postmaster start) it started under';
COMMENT ON TABLE dlock.outbox IS
    'Events of prepared transactions, sent by the next reaper round after COMMIT PREPARED';
COMMENT ON TABLE dlock.epoch IS
    'Unused since 0.1.1 (the 0.1 fence epoch); read once when a new epoch starts, to stay above 0.1 fences';
COMMENT ON SEQUENCE dlock.fences IS
    'Fences: (epoch << 22) + n, the epoch in milliseconds since 2020-01-01 UTC';
COMMENT ON SEQUENCE dlock.fence_seq IS
    'Unused since 0.1.1 (the 0.1 fence counter); kept so that updates never wait for a lock on it';

-- Views
COMMENT ON VIEW dlock.locks IS
    'Current holdings; an expired lease stays listed (expired = true) until it is reaped or taken over';
COMMENT ON VIEW dlock.waiters IS
    'Sessions waiting in dlock.lock() or dlock.xact_lock() (needs shared_preload_libraries = ''dlock'')';

-- Functions
COMMENT ON FUNCTION dlock.try_lock(text, text, interval) IS
    'Acquire or re-enter resource for holder with a lease; returns the fence, or NULL at once if another holder has it';
COMMENT ON FUNCTION dlock.lock(text, text, interval, interval) IS
    'Like try_lock, but waits up to wait (NULL: no limit but statement_timeout); NULL on timeout';
COMMENT ON FUNCTION dlock.unlock(text, text, bigint) IS
    'Release one level of holder''s holding (under fence, if given); returns the count left, 0 = released, NULL if not held';
COMMENT ON FUNCTION dlock.renew(text, text, interval, bigint) IS
    'Extend holder''s lease to now + lease (default: the lease it was taken with); returns the new expiry, NULL if the lease was lost';
COMMENT ON FUNCTION dlock.unlock_all(text) IS
    'Release every holding of holder (and of the calling role); returns how many';
COMMENT ON FUNCTION dlock.reap() IS
    'Remove every expired lease now and send its expired event, in a reaper round of its own; returns how many';
COMMENT ON FUNCTION dlock."check"(text, bigint) IS
    'Is fence the current, unexpired holding of resource?';
COMMENT ON FUNCTION dlock.assert_fence(text, bigint) IS
    'Raise 55P03 unless fence is the current holding of resource; then pin the holding until this transaction ends';
COMMENT ON FUNCTION dlock.break_lock(text) IS
    'Force the release of resource (event broken); for administrators, EXECUTE is revoked from PUBLIC';
COMMENT ON FUNCTION dlock.xact_lock(text, interval) IS
    'Transaction-scoped lock on resource, held until the transaction ends, waiting up to wait; returns a fence, NULL on timeout';
COMMENT ON FUNCTION dlock.try_xact_lock(text) IS
    'Transaction-scoped lock on resource, never waits; returns a fence, or NULL if busy';
COMMENT ON FUNCTION dlock.channel(text) IS
    'The LISTEN channel of resource''s events (released, expired, broken): ''dlock_'' || md5(resource)';
COMMENT ON FUNCTION dlock.session_holder() IS
    'The default holder: pid:<pid>:<backend start>, unique to this backend over the server''s lifetime';
COMMENT ON FUNCTION dlock.stats() IS
    'Counters since the server started: acquired, reentered, released, expired, broken, renewed, lost_renewals, waits, wakeups, timeouts';
COMMENT ON FUNCTION dlock.waiters_internal() IS
    'Internal: the shared-memory wait slots behind the view dlock.waiters';
COMMENT ON FUNCTION dlock._next_fence() IS
    'Internal: draws the next fence inside dlock''s own statements; EXECUTE is revoked from PUBLIC';
