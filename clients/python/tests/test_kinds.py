# Promises: P6 P10 P11 P16
"""dlock.Semaphore and dlock.MultiLock (sync and asyncio) against a real
server: the C extension's SQL 0.5 (try_acquire/acquire, lock_all) and the
portable edition 0.4; under the C extension's SQL 0.4 they raise
NotSupported (0A000) and take nothing."""

import asyncio
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import dlock
import dlock.aio


def permits_held(admin, name):
    """The permits the server counts as held (live holdings) on NAME."""
    return admin.execute("SELECT coalesce(sum(permits), 0) FROM dlock.locks"
                         " WHERE resource = %s AND mode = 'semaphore' AND NOT expired",
                         (name,)).fetchone()[0]


def held(admin, resources):
    """{resource: (holder, fence)} of the live holdings of RESOURCES."""
    rows = admin.execute("SELECT resource, holder, fence FROM dlock.locks"
                         " WHERE resource = ANY(%s) AND NOT expired", (list(resources),)).fetchall()
    return {r: (h, f) for r, h, f in rows}


def count_all(admin, names):
    return admin.execute("SELECT count(*) FROM dlock.locks WHERE resource = ANY(%s)",
                         (list(names),)).fetchone()[0]


def clean(lost):
    """The LockLost (pytest.raises' info) came from leaving the block, not
    on top of a failure inside it (which it would otherwise hide)."""
    ctx = lost.value.__context__
    assert ctx is None or isinstance(ctx, asyncio.CancelledError), repr(ctx)


def kinds_refused(dsn, admin, name):
    """Where the server has neither (the C extension's 0.4 SQL):
    NotSupported (0A000), nothing taken."""
    for obj in (dlock.Semaphore(dsn, name, max_permits=2, lease=5, wait=0),
                dlock.MultiLock(dsn, [name, name + "/b"], lease=5, wait=0)):
        with pytest.raises(dlock.NotSupported) as e:
            obj.acquire()
        assert e.value.sqlstate == "0A000"
        assert not obj.held
    assert count_all(admin, [name, name + "/b"]) == 0


def test_semaphore_never_more_than_max_permits_released_permits_return(dsn, admin, name):
    """Three objects take the three permits; a fourth (and one asking for
    two) is refused while they hold; each release gives its permits back:
    the server's count follows, and a waiter gets the freed permit."""
    sems = [dlock.Semaphore(dsn, name, max_permits=3, lease=5, wait=0) for _ in range(3)]
    for i, s in enumerate(sems, 1):
        assert s.acquire()
        assert permits_held(admin, name) == i
    assert len({s.fence for s in sems}) == 3
    assert not dlock.Semaphore(dsn, name, max_permits=3, lease=5, wait=0).acquire()
    assert permits_held(admin, name) == 3
    assert sems[0].release()
    assert permits_held(admin, name) == 2
    two = dlock.Semaphore(dsn, name, max_permits=3, permits=2, lease=5, wait=0)
    assert not two.acquire()           # 2 + 2 > 3
    assert permits_held(admin, name) == 2
    # A waiter is let in by a release.
    got = []
    waiter = dlock.Semaphore(dsn, name, max_permits=3, permits=2, lease=5, wait=10)
    t = threading.Thread(target=lambda: got.append(waiter.acquire()))
    t.start()
    time.sleep(0.3)
    assert got == [] and permits_held(admin, name) == 2
    assert sems[1].release()
    t.join(15)
    assert got == [True]
    assert permits_held(admin, name) == 3
    assert waiter.release() and sems[2].release()
    assert permits_held(admin, name) == 0
    with dlock.Semaphore(dsn, name, max_permits=3, permits=3, lease=5, wait=0) as all3:
        assert all3.held and permits_held(admin, name) == 3
    assert count_all(admin, [name]) == 0


def test_semaphore_threads_never_exceed_max_permits(dsn, admin, name):
    """Six threads, each with its own Semaphore object, take one of two
    permits in turn: never more than two inside at once, as counted here
    and by the server; every one gets in."""
    inside, most, done, seen = [0], [0], [], []
    mutex = threading.Lock()

    def worker():
        with dlock.Semaphore(dsn, name, max_permits=2, lease=5, wait=30):
            with mutex:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            with psycopg.connect(dsn, autocommit=True) as conn:
                seen.append(permits_held(conn, name))
            time.sleep(0.1)
            with mutex:
                inside[0] -= 1
        done.append(1)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(done) == 6
    assert most[0] <= 2 and max(seen) <= 2
    assert permits_held(admin, name) == 0


def test_semaphore_renewed_past_its_lease_and_loss_reported(dsn, admin, name):
    called, ran = [], threading.Event()
    with pytest.raises(dlock.LockLost) as lost:
        with dlock.Semaphore(dsn, name, max_permits=2, permits=2, lease=3,
                             on_lost=lambda x: (called.append(x), ran.set())) as sem:
            first = admin.execute("SELECT expires_at FROM dlock.locks WHERE resource = %s",
                                  (name,)).fetchone()[0]
            time.sleep(4)
            row = admin.execute("SELECT fence, expires_at, permits FROM dlock.locks"
                                " WHERE resource = %s AND NOT expired", (name,)).fetchone()
            assert row[0] == sem.fence and row[1] > first and row[2] == 2
            assert sem.held and sem.check()
            assert admin.execute("SELECT dlock.break_lock(%s)", (name,)).fetchone()[0]
            assert sem.lost.wait(5)
            assert ran.wait(5) and called == [sem]   # on_lost runs after lost is set
    clean(lost)
    assert permits_held(admin, name) == 0


@pytest.mark.c_only("semaphores are the C extension's")
@pytest.mark.parametrize("kwargs", [
    {"max_permits": 0}, {"max_permits": -1},
    {"max_permits": 2, "permits": 0}, {"max_permits": 2, "permits": 3},
])
def test_semaphore_bad_counts_from_the_server(dsn, admin, name, kwargs):
    sem = dlock.Semaphore(dsn, name, lease=5, **kwargs)
    with pytest.raises(dlock.InvalidArgument) as e:
        sem.acquire()
    assert e.value.sqlstate == "22023"
    assert e.value.__cause__.diag.sqlstate == "22023"
    assert count_all(admin, [name]) == 0


@pytest.mark.parametrize("kwargs", [
    {"max_permits": "3"}, {"max_permits": True}, {"max_permits": 3, "permits": 1.0},
])
def test_semaphore_bad_counts_refused_before_sending(dsn, name, kwargs):
    with pytest.raises(dlock.InvalidArgument) as e:
        dlock.Semaphore(dsn, name, **kwargs)
    assert e.value.sqlstate == "22023"


@pytest.mark.c_only("semaphores are the C extension's")
def test_semaphore_other_max_permits_and_lock_name_refused(dsn, admin, name):
    """Another max_permits while permits are held: 22023; a lock's name
    taken as a semaphore, and a semaphore's as a lock: 42809 (WrongKind);
    nothing taken by the refused calls."""
    with dlock.Semaphore(dsn, name, max_permits=3, lease=5) as sem:
        with pytest.raises(dlock.InvalidArgument) as e:
            dlock.Semaphore(dsn, name, max_permits=4, lease=5, wait=0).acquire()
        assert e.value.sqlstate == "22023"
        with pytest.raises(dlock.WrongKind) as e:
            dlock.Lock(dsn, name, lease=5, wait=0).acquire()
        assert e.value.sqlstate == "42809"
        assert held(admin, [name]) == {name: (sem.holder, sem.fence)}
    with dlock.Lock(dsn, name, lease=5) as lock:
        with pytest.raises(dlock.WrongKind) as e:
            dlock.Semaphore(dsn, name, max_permits=3, lease=5, wait=0).acquire()
        assert e.value.sqlstate == "42809"
        assert isinstance(e.value, dlock.DatabaseError)
        assert held(admin, [name]) == {name: (lock.holder, lock.fence)}


def test_multilock_all_or_nothing_fences_in_order(dsn, admin, name):
    """One resource held elsewhere: nothing of the others is taken; once
    it is free, all are, with their fences in the order given."""
    names = [name + "/c", name + "/a", name + "/b"]
    with dlock.Lock(dsn, names[2], lease=5) as other:
        multi = dlock.MultiLock(dsn, names, lease=5, wait=0)
        assert not multi.acquire()
        assert multi.fences is None and not multi.held
        assert held(admin, names) == {names[2]: (other.holder, other.fence)}
    with dlock.MultiLock(dsn, names, lease=5, wait=0) as multi:
        assert multi.resources == names
        assert len(multi.fences) == 3 and len(set(multi.fences)) == 3
        assert held(admin, names) == {r: (multi.holder, f) for r, f in zip(names, multi.fences)}
        assert multi.check()
        # a held resource keeps another multi-lock out, entirely
        assert not dlock.MultiLock(dsn, [name + "/d", names[1]], lease=5, wait=0).acquire()
        assert count_all(admin, [name + "/d"]) == 0
    assert count_all(admin, names) == 0


def test_multilock_waits_holding_nothing(dsn, admin, name):
    a, b = name + "/a", name + "/b"
    other = dlock.Lock(dsn, b, lease=5)
    assert other.acquire()
    got = []
    multi = dlock.MultiLock(dsn, [a, b], lease=5, wait=10)
    t = threading.Thread(target=lambda: got.append(multi.acquire()))
    t.start()
    time.sleep(0.3)
    assert got == [] and count_all(admin, [a]) == 0
    other.release()
    t.join(15)
    assert got == [True] and set(held(admin, [a, b])) == {a, b}
    assert multi.release()
    assert count_all(admin, [a, b]) == 0


def test_multilock_renewed_and_loss_of_one_is_loss(dsn, admin, name):
    """Every holding is renewed past its lease; when one is broken the
    multi-lock is lost (lost, on_lost, LockLost on leaving), and leaving
    releases the others."""
    names = [name + "/a", name + "/b", name + "/c"]
    called, ran = [], threading.Event()
    with pytest.raises(dlock.LockLost) as lost:
        with dlock.MultiLock(dsn, names, lease=3,
                             on_lost=lambda x: (called.append(x), ran.set())) as multi:
            first = admin.execute("SELECT max(expires_at) FROM dlock.locks WHERE resource = ANY(%s)",
                                  (names,)).fetchone()[0]
            time.sleep(4)
            rows = admin.execute("SELECT resource, expires_at FROM dlock.locks"
                                 " WHERE resource = ANY(%s) AND NOT expired", (names,)).fetchall()
            assert len(rows) == 3 and all(e > first for _, e in rows)
            assert multi.held
            assert admin.execute("SELECT dlock.break_lock(%s)", (names[1],)).fetchone()[0]
            assert multi.lost.wait(5)
            assert ran.wait(5) and called == [multi] and not multi.held
            assert not multi.check()
    clean(lost)
    assert count_all(admin, names) == 0


def test_multilock_assert_fence_every_fence(dsn, admin, name):
    names = [name + "/a", name + "/b"]
    with pytest.raises(dlock.LockLost) as lost:
        with dlock.MultiLock(dsn, names, lease=5) as multi:
            with psycopg.connect(dsn) as conn:
                multi.assert_fence(conn)
                conn.commit()
                admin.execute("SELECT dlock.break_lock(%s)", (names[1],))
                with pytest.raises(dlock.StaleFence) as e:
                    multi.assert_fence(conn)
                assert e.value.sqlstate == "55P03"
    clean(lost)


@pytest.mark.c_only("multi-locks are the C extension's")
@pytest.mark.parametrize("resources", [[], ["x", "x"], ["x", ""]])
def test_multilock_bad_resources_from_the_server(dsn, admin, name, resources):
    resources = [name + r if r else r for r in resources]
    with pytest.raises(dlock.InvalidArgument) as e:
        dlock.MultiLock(dsn, resources, lease=5).acquire()
    assert e.value.sqlstate == "22023"
    assert count_all(admin, [r for r in resources if r]) == 0


@pytest.mark.parametrize("resources", ["ab", None, [1, 2]])
def test_multilock_bad_resources_refused_before_sending(dsn, resources):
    with pytest.raises(dlock.InvalidArgument) as e:
        dlock.MultiLock(dsn, resources)
    assert e.value.sqlstate == "22023"


@pytest.mark.c_only("installs the C extension's SQL 0.4 in a new database")
def test_kinds_refused_without_the_servers_0_5_sql(dsn, admin, name):
    db = "dlock_py_" + uuid.uuid4().hex[:12]
    admin.execute(f'CREATE DATABASE "{db}"')
    try:
        with psycopg.connect(dsn, dbname=db, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION dlock VERSION '0.4'")
            kinds_refused(make_conninfo(dsn, dbname=db), conn, name)
            assert conn.execute("SELECT count(*) FROM dlock.locks").fetchone()[0] == 0
    finally:
        admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')


def test_aio_semaphore_and_multilock(dsn, admin, name):
    """asyncio: permits counted and returned; a multi-lock all or nothing,
    and the loss of one of its holdings cancels the block and raises."""
    a, b = name + "/a", name + "/b"

    async def main():
        async with dlock.aio.Semaphore(dsn, name, max_permits=2, lease=5) as s1:
            async with dlock.aio.Semaphore(dsn, name, max_permits=2, lease=5) as s2:
                assert s1.fence != s2.fence and permits_held(admin, name) == 2
                assert not await dlock.aio.Semaphore(dsn, name, max_permits=2, wait=0).acquire()
            assert permits_held(admin, name) == 1
        assert permits_held(admin, name) == 0
        async with dlock.aio.Lock(dsn, b, lease=5):
            assert not await dlock.aio.MultiLock(dsn, [a, b], wait=0).acquire()
            assert count_all(admin, [a]) == 0
        with pytest.raises(dlock.LockLost) as lost:
            async with dlock.aio.MultiLock(dsn, [a, b], lease=1.5) as multi:
                assert held(admin, [a, b]) == {a: (multi.holder, multi.fences[0]),
                                               b: (multi.holder, multi.fences[1])}
                admin.execute("SELECT dlock.break_lock(%s)", (a,))
                await asyncio.sleep(30)      # cancelled by the loss
        clean(lost)
        assert multi.lost.is_set()
        assert count_all(admin, [a, b]) == 0
    asyncio.run(main())
