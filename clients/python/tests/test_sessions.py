# Promises: P1 P4 P16
"""dlock.Session against a real server: one keepalive keeps all of a
session's locks (no per-lock renewal); the session's loss is signalled on
every lock before the ttl ends (backend paused or cut off, session closed
by someone else); close() releases all; races an attacker would try.
Skipped where the server has no dlock.open_session(interval,text)."""

import asyncio
import contextlib
import os
import random
import signal
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import dlock
import dlock.aio
from dlock import _leased_sync, _sync

SEED = int(os.environ.get("DLOCK_TEST_SEED", random.randrange(1 << 30)))


@pytest.fixture(autouse=True)
def has_sessions(request, admin):
    if request.node.get_closest_marker("any_sql") is not None:
        return
    if admin.execute("SELECT to_regprocedure('dlock.open_session(interval,text)')"
                     " IS NULL").fetchone()[0]:
        pytest.skip("no sessions: to_regprocedure('dlock.open_session(interval,text)')"
                    " IS NULL on this server")


def app_dsn(dsn):
    app = "dlock-sess-" + uuid.uuid4().hex[:8]
    return dsn + f" application_name={app}", app


def backend(admin, app):
    row = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                        (app,)).fetchone()
    assert row is not None, f"no backend with application_name {app}"
    return row[0]


def session_row(admin, sid):
    return admin.execute("SELECT expires_at, holdings FROM dlock.sessions WHERE id = %s",
                         (sid,)).fetchone()


def live_in(admin, sid):
    return admin.execute("SELECT count(*) FROM dlock.locks WHERE session = %s"
                         " AND holder IS NOT NULL AND NOT expired", (sid,)).fetchone()[0]


class Statements:
    """Counts what the client sends (keepalives, renewals)."""

    def __init__(self, monkeypatch):
        self.sent = []
        real = _leased_sync._row

        def row(conn, sql, params):
            self.sent.append(sql)
            return real(conn, sql, params)
        monkeypatch.setattr(_leased_sync, "_row", row)   # _one's too
        monkeypatch.setattr(_sync, "_row", row)

    def count(self, word):
        return sum(1 for s in self.sent if f"dlock.{word}(" in s)


def take_many(s, name, n):
    locks = [s.try_lock(f"{name}/{i}") for i in range(n)]
    assert all(lock is not None and lock.held for lock in locks)
    return locks


def test_one_keepalive_keeps_many_locks_no_renewals(dsn, admin, name, monkeypatch, portable):
    sent = Statements(monkeypatch)
    with dlock.Session(dsn, ttl=3) as s:
        locks = take_many(s, name, 20)
        sem = s.semaphore(name + "/sem", max_permits=2)
        multi = s.multi_lock([name + "/m1", name + "/m2"])
        assert sem.acquire() and multi.acquire()
        time.sleep(7)       # more than twice the ttl
        assert not s.lost.is_set()
        assert all(x.held and not x.lost.is_set() for x in locks + [sem, multi])
        assert live_in(admin, s.id) == 20 + 1 + 2
        assert session_row(admin, s.id)[1] == 23
        assert all(x.check() for x in locks[:3] + [sem, multi])
    assert sent.count("keepalive") >= 4, sent.sent
    assert sent.count("renew") == 0, ("a lock in a session sent a renewal of its own", sent.sent)
    assert live_in(admin, s.id) == 0 and session_row(admin, s.id) is None


def expect_lost_on_all(s, locks, called, expires):
    assert s.lost.wait(15), "the session's loss was signalled"
    for lock in locks:
        assert lock.lost.wait(5), f"{lock.resource} told of the loss"
        assert "session" in lock.lost_reason
    deadline = time.monotonic() + 5
    while len(called) < len(locks) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sorted(called) == sorted(lock.resource for lock in locks)


def test_keepalive_backend_paused_lost_on_every_lock_before_ttl_end(dsn, admin, name, pause_idle, loss_clock,
                                                                     one_connection):
    """The session's only connection stops answering: no keepalive gets
    through, and the loss is signalled on every lock before the end."""
    d, app = app_dsn(dsn)
    called = []
    s = dlock.Session(one_connection(d), ttl=3).open()
    locks = [s.lock(f"{name}/{i}", on_lost=lambda x: called.append(x.resource))
             for i in range(5)]
    assert all(lock.acquire() for lock in locks)
    time.sleep(1.2)                     # a keepalive has used its connection
    pid = backend(admin, app)
    clocks = [loss_clock(e.lost) for e in [s, *locks]]
    pause_idle(admin, pid)
    try:
        expect_lost_on_all(s, locks, called, None)
        lost_at = max(c() for c in clocks)      # the last of the losses
        expires = session_row(admin, s.id)[0]
        assert lost_at < expires, f"lost signalled at {lost_at}, session ended {expires}"
    finally:
        os.kill(pid, signal.SIGCONT)
    with pytest.raises(dlock.LockLost):
        locks[0].__exit__(None, None, None)
    # The keepalive's time limit cut its only connection: the close cannot
    # be sent (the session ends with its ttl), and says so.
    with pytest.raises(psycopg.OperationalError):
        s.close()


def test_keepalive_backend_paused_kept_through_a_new_connection(dsn, admin, name, pause_idle):
    """The session's own connection stops answering (its backend paused):
    the keepalive is cut after a third of the ttl and sent again on a new
    connection, so the session and its locks are kept (helper-80: it was
    lost at the ttl's end)."""
    d, app = app_dsn(dsn)
    with dlock.Session(d, ttl=3) as s:
        locks = [s.try_lock(f"{name}/{i}") for i in range(3)]
        assert all(lock is not None for lock in locks)
        time.sleep(1.2)                     # a keepalive has used its connection
        pid = backend(admin, app)
        pause_idle(admin, pid)
        try:
            time.sleep(4.5)                 # past the ttl
            assert not s.lost.is_set(), s.lost_reason
            assert all(lock.held for lock in locks)
            assert session_row(admin, s.id)[0] > admin.execute("SELECT clock_timestamp()").fetchone()[0]
        finally:
            os.kill(pid, signal.SIGCONT)


def test_keepalive_backend_terminated_reconnects_then_cut_off_lost(dsn, admin, name, loss_clock):
    """Terminated once: the next keepalive reconnects, all kept.  Then
    terminated with the database closed to new connections: no keepalive
    gets through, and the loss is signalled on every lock before the end."""
    d, app = app_dsn(dsn)
    called = []
    s = dlock.Session(d, ttl=6).open()
    locks = [s.lock(f"{name}/{i}", on_lost=lambda x: called.append(x.resource))
             for i in range(4)]
    assert all(lock.acquire() for lock in locks)
    time.sleep(2.5)
    assert admin.execute("SELECT pg_terminate_backend(%s)", (backend(admin, app),)).fetchone()[0]
    time.sleep(7)                       # past the ttl: kept by a new connection
    assert not s.lost.is_set() and all(lock.check() for lock in locks)
    db = admin.execute("SELECT current_database()").fetchone()[0]
    # From another database: a database's own sessions may not close it.
    other = psycopg.connect(make_conninfo(dsn, dbname="template1" if db == "postgres" else "postgres"),
                            autocommit=True)
    other.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
    try:
        clocks = [loss_clock(e.lost) for e in [s, *locks]]
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE application_name = %s", (app,))
        expect_lost_on_all(s, locks, called, None)
        lost_at = max(c() for c in clocks)      # the last of the losses
        expires = session_row(admin, s.id)[0]
        assert lost_at < expires, f"lost signalled at {lost_at}, session ended {expires}"
    finally:
        other.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        other.close()
    assert not s.close()


def test_closed_by_someone_else_lost_at_once_stale_fence_refused(dsn, admin, name):
    called = []
    s = dlock.Session(dsn, ttl=3).open()
    locks = [s.lock(f"{name}/{i}", on_lost=lambda x: called.append(x.resource))
             for i in range(3)]
    assert all(lock.acquire() for lock in locks)
    assert admin.execute("SELECT dlock.close_session(%s)", (s.id,)).fetchone()[0] == 3
    expect_lost_on_all(s, locks, called, None)
    assert "NULL" in s.lost_reason
    # Someone else takes one; the stale holder's fenced write is refused.
    with dlock.Lock(dsn, locks[0].resource, wait=0) as other:
        assert other.fence > locks[0].fence
        with psycopg.connect(dsn) as conn:
            with pytest.raises(dlock.StaleFence) as e:
                with conn.transaction():
                    locks[0].assert_fence(conn)
            assert e.value.sqlstate == "55P03"
    with pytest.raises(dlock.DatabaseError) as e:
        s.lock(name + "/new")
    assert e.value.sqlstate == "55000"
    assert not s.close()


def test_close_releases_all_unlock_of_one_leaves_others(dsn, admin, name):
    s = dlock.Session(dsn, ttl=3).open()
    locks = take_many(s, name, 5)
    assert locks[0].release()
    assert live_in(admin, s.id) == 4 and session_row(admin, s.id)[1] == 4
    time.sleep(4)                       # past the ttl: the rest are kept
    assert all(lock.held and lock.check() for lock in locks[1:])
    assert locks[1].release()
    assert live_in(admin, s.id) == 3 and not s.lost.is_set()
    assert s.close()
    assert session_row(admin, s.id) is None
    assert admin.execute("SELECT count(*) FROM dlock.locks WHERE resource LIKE %s"
                         " AND holder IS NOT NULL", (name + "/%",)).fetchone()[0] == 0
    assert all(not lock.held and not lock.lost.is_set() for lock in locks)
    # Used after close: clear errors, nothing sent.
    for use in (lambda: s.lock(name), lambda: s.try_lock(name),
                lambda: s.semaphore(name, max_permits=1)):
        with pytest.raises(dlock.DatabaseError) as e:
            use()
        assert e.value.sqlstate == "55000" and "closed" in str(e.value)
    assert s.close()                    # again: what the first said
    with pytest.raises(RuntimeError):
        s.open()
    with dlock.Lock(dsn, name + "/2", wait=0):
        pass                            # free for others


def test_through_pgbouncer_transaction_pooling(bouncer, admin, name):
    with dlock.Session(bouncer, ttl=3) as s:
        locks = take_many(s, name, 6)
        with psycopg.connect(bouncer, autocommit=True, prepare_threshold=None) as other:
            for _ in range(40):
                other.execute("SELECT dlock.try_lock(%s, 'someone', '5s')", (name + "/x",))
                time.sleep(0.15)
        assert not s.lost.is_set() and live_in(admin, s.id) == 6
        assert locks[2].release()
        assert live_in(admin, s.id) == 5
    assert session_row(admin, s.id) is None


def test_lock_acquired_as_the_session_is_lost_is_lost_too(dsn, admin, name):
    """An acquirer takes locks in a loop while the session is closed under
    it at a random moment (seeded) after its first lock: every lock that
    acquire() returned True for is told of the loss; later acquisitions
    fail with 55000.  (The moment counts from the first lock, not from the
    start: an acquisition on a loaded machine, a new connection each, can
    take longer than any fixed delay.)"""
    rng = random.Random(SEED)
    print("seed", SEED)
    for round_ in range(5):
        s = dlock.Session(dsn, ttl=5).open()
        got, errors, stop = [], [], threading.Event()
        first = threading.Event()

        def taker():
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    lock = s.lock(f"{name}/{round_}/{i}", wait=0)
                    if lock.acquire():
                        got.append(lock)
                        first.set()
                except dlock.DatabaseError as e:
                    errors.append(e.sqlstate)
                    first.set()
                    return
        t = threading.Thread(target=taker)
        t.start()
        assert first.wait(60), f"seed {SEED}: no acquisition ended within 60 s"
        time.sleep(rng.uniform(0.0, 0.3))
        admin.execute("SELECT dlock.close_session(%s)", (s.id,))
        assert s.lost.wait(10)
        stop.set()
        t.join(10)
        assert got, f"seed {SEED}: nothing acquired before the close: {errors}"
        for lock in got:
            assert lock.lost.wait(5), f"seed {SEED}: {lock.resource} acquired, loss not told"
        assert set(errors) <= {"55000"}, errors
        with pytest.raises(dlock.DatabaseError):
            s.try_lock(name + "/late")


def test_keepalive_racing_close(dsn, admin, name):
    """close() while a keepalive is due or in flight (ttl 3 s: one every
    second; random moments, seeded): closed cleanly, never reported lost,
    nothing left.  (Shorter ttls were lost on a loaded machine when one
    keepalive's new connection was slow.)"""
    rng = random.Random(SEED + 1)
    print("seed", SEED + 1)
    for i in range(15):
        s = dlock.Session(dsn, ttl=3).open()
        lock = s.try_lock(f"{name}/{i}")
        assert lock is not None
        time.sleep(rng.uniform(0.0, 2.2))
        assert s.close(), f"seed {SEED + 1}: round {i} lost: {s.lost_reason}"
        assert session_row(admin, s.id) is None
    time.sleep(0.5)
    assert not s.lost.is_set() and not lock.lost.is_set()


def test_two_sessions_of_one_holder(dsn, admin, name):
    h = "holder-" + uuid.uuid4().hex
    with dlock.Session(dsn, ttl=3, holder=h) as s1:
        s2 = dlock.Session(dsn, ttl=3, holder=h).open()
        a = s1.try_lock(name)
        assert a is not None
        # The same holder in another session does not re-enter s1's holding.
        with pytest.raises(dlock.DatabaseError) as e:
            s2.try_lock(name)
        assert e.value.sqlstate == "55000"
        b = s2.try_lock(name + "/b")
        assert b is not None
        admin.execute("SELECT dlock.close_session(%s)", (s2.id,))
        assert b.lost.wait(10) and s2.lost.is_set()
        assert not s1.lost.is_set() and a.held and a.check()
        assert not s2.close()
    assert session_row(admin, s1.id) is None


def held_by(admin, resource):
    row = admin.execute("SELECT holder, session FROM dlock.locks WHERE resource = %s"
                        " AND holder IS NOT NULL AND NOT expired", (resource,)).fetchone()
    return row


def test_lock_broken_by_an_admin_is_lost_the_session_lives(dsn, admin, name):
    """An administrator breaks one lock of a live session: that lock is
    lost (its keepalive checks the session's holdings) within about 2.5
    ttl; another holder takes it; the session and its other locks stay
    held.  Before the fix the keepalive kept succeeding and nothing said
    the broken lock was lost."""
    ttl = 1.5
    called, ran = [], threading.Event()
    with dlock.Session(dsn, ttl=ttl) as s:
        a = s.lock(name + "/a", wait=0, on_lost=lambda x: (called.append(x), ran.set()))
        b = s.try_lock(name + "/b")
        sem = s.semaphore(name + "/sem", max_permits=2)
        assert a.acquire() and b is not None and sem.acquire()
        admin.execute("SELECT dlock.break_lock(%s)", (name + "/a",))
        assert a.lost.wait(2.5 * ttl), "the broken lock's loss was not signalled"
        assert ran.wait(5) and called == [a]   # on_lost runs after lost is set
        assert "broken" in a.lost_reason
        with dlock.Lock(dsn, name + "/a", wait=0) as other:
            assert other.fence > a.fence
        time.sleep(ttl)                 # keepalives go on
        assert not s.lost.is_set() and b.held and sem.held
        assert not b.lost.is_set() and not sem.lost.is_set()
        assert b.check() and sem.check() and held_by(admin, name + "/b")[1] == s.id
        assert a.release() is False     # it had been lost
        assert b.release()
    assert s.closed and not s.lost.is_set()


def test_aio_lock_broken_by_an_admin_is_lost_the_session_lives(dsn, admin, name):
    ttl = 1.5

    async def main():
        async with dlock.aio.Session(dsn, ttl=ttl) as s:
            b = await s.try_lock(name + "/b")
            assert b is not None
            slept = []
            with pytest.raises(dlock.LockLost):
                async with s.lock(name + "/a", wait=0) as a:
                    await asyncio.get_running_loop().run_in_executor(
                        None, lambda: admin.execute("SELECT dlock.break_lock(%s)",
                                                    (name + "/a",)))
                    await asyncio.sleep(2.5 * ttl)     # cancelled at the loss
                    slept.append(True)
            assert not slept, "the broken lock's loss was not signalled"
            assert "broken" in a.lost_reason
            await asyncio.sleep(ttl)
            assert not s.lost.is_set() and b.held and await b.check()
            assert held_by(admin, name + "/b")[1] == s.id
        assert s.closed and not s.lost.is_set()
    asyncio.run(main())


def test_multilock_in_a_session_with_one_resource_broken_is_lost(dsn, admin, name):
    ttl = 1.5
    with dlock.Session(dsn, ttl=ttl) as s:
        m = s.multi_lock([name + "/m1", name + "/m2", name + "/m3"], wait=0)
        other = s.try_lock(name + "/x")
        assert m.acquire() and other is not None
        admin.execute("SELECT dlock.break_lock(%s)", (name + "/m2",))
        assert m.lost.wait(2.5 * ttl), "the multi-lock's loss was not signalled"
        assert "m2" in m.lost_reason
        with pytest.raises(dlock.LockLost):
            m.__exit__(None, None, None)            # releases m1 and m3
        assert held_by(admin, name + "/m1") is None and held_by(admin, name + "/m3") is None
        time.sleep(ttl)
        assert not s.lost.is_set() and other.held and other.check()
    assert s.closed and not s.lost.is_set()


class RacingPool:
    """A pool that releases a round's locks as the session's keepalive asks
    for its connection (the keepalive has built its arrays then) and hands
    that connection out once each of those unlocks has committed; each
    release's answer comes back late (a pause after its commit).  So the
    keepalive finds the holdings gone while their releases are under way.
    Staggers and pauses are random (seeded)."""

    def __init__(self, dsn, rng):
        self.dsn, self.rng, self.guard = dsn, rng, threading.Lock()
        self.round = None           # the locks to release at the next keepalive
        self.committed = {}         # releaser thread name -> Event
        self.results = []

    def arm(self, locks):
        with self.guard:
            self.results = []
            self.committed = {f"releaser {i}": threading.Event() for i in range(len(locks))}
            self.round = locks

    def release_round(self, locks):
        for i, lock in enumerate(locks):
            threading.Thread(target=lambda x=lock: self.results.append(x.release()),
                             name=f"releaser {i}", daemon=True).start()
            time.sleep(self.rng.uniform(0.0, 0.02))
        for event in self.committed.values():
            assert event.wait(30), "a release did not commit"
        time.sleep(self.rng.uniform(0.0, 0.02))

    @contextlib.contextmanager
    def connection(self, timeout=None):
        me = threading.current_thread().name
        with self.guard:
            locks = None
            if me.startswith("dlock session") and self.round is not None:
                locks, self.round = self.round, None
        if locks is not None:
            self.release_round(locks)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            yield conn
        event = self.committed.get(me)
        if event is not None:
            event.set()
            time.sleep(0.3 + self.rng.uniform(0.0, 0.1))   # the answer comes back late


def test_release_racing_the_keepalive_is_not_lost(dsn, admin, name):
    """Locks of a session released while a keepalive checks the session's
    holdings (their unlocks commit after the keepalive built its arrays,
    before its statement; their answers come back after the keepalive's):
    a release never makes its lock reported lost, and the session and its
    other lock live on.  Several rounds, seeded."""
    print("seed", SEED + 2)
    ttl = 6                 # the keepalive waits for the releases: slack (3 s was lost under load)
    pool = RacingPool(dsn, random.Random(SEED + 2))
    with dlock.Session(pool, ttl=ttl) as s:
        keep = s.try_lock(name + "/keep")
        assert keep is not None
        for round_ in range(6):
            locks = [s.lock(f"{name}/{round_}/{i}", wait=0) for i in range(4)]
            assert all(lock.acquire() for lock in locks)
            pool.arm(locks)
            deadline = time.monotonic() + 30
            while len(pool.results) < len(locks) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert pool.results == [True] * len(locks), \
                f"seed {SEED + 2}: round {round_}: {pool.results}"
            assert not any(lock.lost.is_set() for lock in locks), \
                f"seed {SEED + 2}: round {round_}: a released lock said lost: " \
                + str([lock.lost_reason for lock in locks if lock.lost.is_set()])
            assert not s.lost.is_set() and keep.held and not keep.lost.is_set()
            assert live_in(admin, s.id) == 1
    assert not s.lost.is_set() and not keep.lost.is_set()


def test_election_in_a_session(dsn, admin, name):
    with dlock.Session(dsn, ttl=3) as s:
        e = s.election(name, value="v")
        term = e.campaign()
        assert term > 0 and e.leader().candidate == s.holder
        time.sleep(4)
        assert not e.lost.is_set() and e.leader().term == term
        assert e.resign()
    assert dlock.leader(dsn, name) is None


def test_aio_session_loss_cancels_the_block(dsn, admin, name):
    async def main():
        async with dlock.aio.Session(dsn, ttl=3) as s:
            with pytest.raises(dlock.LockLost):
                async with s.lock(name) as lock:
                    other = await s.try_lock(name + "/2")
                    assert other is not None
                    await asyncio.get_running_loop().run_in_executor(
                        None, lambda: admin.execute("SELECT dlock.close_session(%s)", (s.id,)))
                    await asyncio.sleep(10)     # cancelled at the loss
            assert lock.lost.is_set() and other.lost.is_set() and s.lost.is_set()
            return s
    with pytest.raises(dlock.LockLost):
        asyncio.run(main())


@pytest.mark.any_sql
@pytest.mark.c_only("installs the C extension's SQL 1.0 in a new database")
def test_session_refused_clearly_on_1_0_sql(dsn, admin, name):
    db = "dlock_py_" + uuid.uuid4().hex[:12]
    admin.execute(f'CREATE DATABASE "{db}"')
    try:
        with psycopg.connect(dsn, dbname=db, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION dlock VERSION '1.0'")
            d = make_conninfo(dsn, dbname=db)
            with pytest.raises(dlock.NotSupported) as e:
                dlock.Session(d).open()
            assert e.value.sqlstate == "0A000" and "open_session" in str(e.value)
            with dlock.Lock(d, name, wait=0) as lock:    # the rest unchanged
                assert lock.check()
    finally:
        admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
