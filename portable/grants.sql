/*
 * portable/grants.sql: the portable edition's rights on its functions:
 * every internal helper (dlock._*) closed to PUBLIC, and break_lock kept
 * for administrators (GRANT EXECUTE to an operator role).  The rights on
 * the tables and views are given where they are made (tables.sql,
 * views.sql, elect.sql); kinds.sql closes its own helpers.  Part of
 * dlock.sql, which includes it (\ir) inside its transaction after every
 * function it names: run dlock.sql, not this file.  Shared state: none.
 */
-- Internal helpers are closed; break_lock is for administrators.
REVOKE EXECUTE ON FUNCTION
    dlock._text_arg(text, text, integer), dlock._setting(text, interval),
    dlock._expiry(timestamptz, interval), dlock._lease(interval), dlock._wait(interval),
    dlock._fence_arg(bigint), dlock._writable(text), dlock._may_poll(text), dlock._caller(), dlock._role(), dlock._key(text),
    dlock._sync(), dlock._event(text, text, bigint), dlock._history(), dlock._dbrow(), dlock._next_fence(),
    dlock._attempt(text, text, interval, oid, boolean, interval, bigint), dlock._release(text, bigint, integer, text),
    dlock._lock_delay(interval), dlock._fair(boolean), dlock._queue_ttl(), dlock._qkey(text),
    dlock._ahead(text, text, oid, bigint), dlock._queue_up(text, text, oid), dlock._delayed(dlock.leases, timestamptz),
    dlock._acquired(text, text, oid, bigint, boolean, interval),
    dlock._try(text, text, interval, oid, interval, bigint, text, integer, integer),
    dlock._wait_ticket(text, text, oid, boolean),
    dlock._leave(text, text, oid, bigint, boolean),
    dlock._wait_loop(text, text, interval, interval, boolean, interval, text, text, integer, integer),
    dlock._event_holding(text, text, bigint, text, text), dlock._value(text),
    dlock._value_set(text, bigint, text, text, boolean), dlock._term_log(text, bigint, text, text, oid),
    dlock._still_leader(text, bigint, text, text, oid),
    dlock._may_change(dlock.leases, text, oid, boolean, text), dlock._lock_holding(text, text, bigint, boolean),
    dlock._lock_leader(text, text, oid, boolean, bigint, text),
    dlock._current(text, bigint, boolean), dlock._pin_fresh(text, text, bigint), dlock._wait_ended_row(text),
    dlock._pause(text[], interval, interval, interval, boolean), dlock._xact_attempt(text),
    dlock._held(integer, integer, text), dlock._let_go(text, text, oid, bigint),
    dlock._vxid(), dlock._proof(integer, integer, text), dlock._prove(integer, integer),
    dlock._proven(integer, integer, text), dlock._proven_mark(integer, integer),
    dlock._unprove(integer, integer, text),
    dlock._let_go(text, text, oid, bigint, boolean, boolean),
    dlock._insert_row(text, text, oid, bigint, interval, timestamptz, timestamptz),
    dlock._record_epoch(text, oid, bigint, timestamptz, bigint), dlock._shared_arg(boolean, interval),
    dlock.break_lock(text)
    FROM PUBLIC;
