# Promises: P16
"""Waits longer than the lease (issue 33, 17): behind a holder, or for a
free connection of an exhausted pool.  The lease starts when the server
grants it, not when the call was sent: such a holding is not declared
lost, its renewals keep it, its fence checks.  And the safety side: loss
is still signalled before the lease's end on the server."""

import asyncio
import contextlib
import os
import signal
import threading
import uuid

import psycopg
import pytest

import dlock
import dlock.aio

LEASE = 3       # seconds; the waits below are longer (1.5 s leases were
                # lost under load: these pools open a connection per call)
BLOCKED = 4     # how long the first holder keeps it
# Through the pools below each renewal opens a connection, which must be
# made within a third of the lease: 3 s leases were lost under load.
POOL_LEASE, POOL_BLOCKED = 6, 7


def live(admin, resource):
    """(holder, fence) of the live holdings of RESOURCE, as text."""
    return admin.execute("SELECT holder, fence::text FROM dlock.locks"
                         " WHERE resource = %s AND NOT expired ORDER BY fence",
                         (resource,)).fetchall()


def make(kind, source, name, **kw):
    """A holder of kind KIND on NAME (multi: NAME, then NAME/b)."""
    mod = kw.pop("mod", dlock)
    if kind == "lock":
        return mod.Lock(source, name, **kw)
    if kind == "semaphore":
        return mod.Semaphore(source, name, max_permits=1, **kw)
    if kind == "multi":
        return mod.MultiLock(source, [name, name + "/b"], **kw)
    return mod.Election(source, name, **kw)


def take(obj):
    return obj.campaign() if isinstance(obj, dlock.Election) else obj.acquire()


def give_back(obj):
    return obj.resign() if isinstance(obj, dlock.Election) else obj.release()


def fenced_write(dsn, obj):
    """assert_fence in a transaction of the caller's: accepted."""
    with psycopg.connect(dsn) as conn:
        obj.assert_fence(conn)


@pytest.mark.parametrize("kind", ["lock", "semaphore", "multi", "election"])
def test_wait_longer_than_the_lease_is_not_lost(dsn, admin, name, kind):
    """The first holder keeps NAME for BLOCKED s; the second waits for it
    with a lease of LEASE s (shorter): once acquired it is held, renewed
    past several leases, its fence checks, and its release finds it."""
    first = make(kind, dsn, name, lease=30)
    take(first)
    threading.Timer(BLOCKED, lambda: give_back(first)).start()
    second = make(kind, dsn, name, lease=LEASE, wait=30)
    take(second)
    try:
        assert not second.lost.wait(2 * LEASE), second.lost_reason
        assert second.held and second.check()
        assert (second.holder, str(second.fence)) in live(admin, name)
        fenced_write(dsn, second)
    finally:
        assert give_back(second) is True


@pytest.mark.parametrize("kind", ["lock", "election"])
def test_aio_wait_longer_than_the_lease_is_not_lost(dsn, admin, name, kind):
    async def main():
        first = make(kind, dsn, name, lease=30)
        take(first)
        threading.Timer(BLOCKED, lambda: give_back(first)).start()
        second = make(kind, dsn, name, lease=LEASE, wait=30, mod=dlock.aio, cancel=None)
        await (second.campaign() if kind == "election" else second.acquire())
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(second.lost.wait(), 2 * LEASE)
        assert not second.lost.is_set(), second.lost_reason
        assert second.held and await second.check()
        assert (second.holder, str(second.fence)) in live(admin, name)
        assert await (second.resign() if kind == "election" else second.release()) is True
    asyncio.run(main())


def test_paused_renewal_after_a_long_wait_lost_before_expiry(dsn, admin, name, pause_idle, loss_clock,
                                                            one_connection):
    """Safety: acquired after a wait longer than its lease, then its only
    connection's backend is paused (SIGSTOP): loss is signalled before
    the lease ends on the server."""
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    first = dlock.Lock(dsn, name, lease=30)
    assert first.acquire()
    threading.Timer(BLOCKED, first.release).start()
    lock = dlock.Lock(one_connection(dsn + f" application_name={app}"), name, lease=LEASE,
                      wait=30)
    assert lock.acquire()
    pid = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                        (app,)).fetchone()[0]
    before = admin.execute("SELECT expires_at FROM dlock.locks WHERE resource = %s"
                           " AND NOT expired", (name,)).fetchone()[0]
    lost_at = loss_clock(lock.lost)
    pause_idle(admin, pid)
    try:
        assert lock.lost.wait(10)
        lost_at = lost_at()
        expires = admin.execute("SELECT (SELECT expires_at FROM dlock.locks"
                                " WHERE resource = %s AND NOT expired)", (name,)).fetchone()[0]
        assert lost_at < (expires or before), f"lost at {lost_at}, lease ended {expires or before}"
    finally:
        os.kill(pid, signal.SIGCONT)
    with pytest.raises(dlock.LockLost):
        lock.__exit__(None, None, None)


class BoundedPool:
    """A pool (psycopg_pool's shape) of at most SIZE connections at once:
    connection() waits for a free one."""

    def __init__(self, dsn, size=1):
        self.dsn = dsn
        self.free = threading.Semaphore(size)

    @contextlib.contextmanager
    def connection(self):
        with self.free:
            with psycopg.connect(self.dsn) as conn:   # commits on exit
                yield conn


class AsyncBoundedPool:
    def __init__(self, dsn, size=1):
        self.dsn = dsn
        self.free = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def connection(self):
        async with self.free:
            async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
                yield conn


def test_wait_for_a_pool_connection_longer_than_the_lease(dsn, admin, name):
    """The pool's one connection is busy for POOL_BLOCKED s: the
    acquisition waits for it longer than its lease, and is not lost."""
    pool = BoundedPool(dsn)
    busy, done = threading.Event(), threading.Event()

    def borrow():
        with pool.connection():
            busy.set()
            done.wait(POOL_BLOCKED)
    t = threading.Thread(target=borrow)
    t.start()
    assert busy.wait(10)
    with dlock.Lock(pool, name, lease=POOL_LEASE, wait=30) as lock:
        assert not lock.lost.wait(2 * POOL_LEASE), lock.lost_reason
        assert lock.check()
        assert (lock.holder, str(lock.fence)) in live(admin, name)
    t.join()


def test_aio_wait_for_a_pool_connection_longer_than_the_lease(dsn, admin, name):
    async def main():
        pool = AsyncBoundedPool(dsn)

        async def borrow(busy):
            async with pool.connection():
                busy.set()
                await asyncio.sleep(POOL_BLOCKED)
        busy = asyncio.Event()
        other = asyncio.create_task(borrow(busy))
        await busy.wait()
        async with dlock.aio.Lock(pool, name, lease=POOL_LEASE, wait=30, cancel=None) as lock:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(lock.lost.wait(), 2 * POOL_LEASE)
            assert not lock.lost.is_set(), lock.lost_reason
            assert (lock.holder, str(lock.fence)) in live(admin, name)
        await other
    asyncio.run(main())


def test_exhausted_pool_renewal_fails_safe(dsn, admin, name, loss_clock):
    """Held through a pool whose one connection someone else then keeps:
    no renewal can get through, and loss is signalled before the lease
    ends on the server."""
    pool = BoundedPool(dsn)
    lock = dlock.Lock(pool, name, lease=3)
    assert lock.acquire()
    expires = admin.execute("SELECT expires_at FROM dlock.locks WHERE resource = %s",
                            (name,)).fetchone()[0]
    lost_at = loss_clock(lock.lost)
    with pool.connection():
        assert lock.lost.wait(10)
        lost_at = lost_at()
        now_expires = admin.execute("SELECT (SELECT expires_at FROM dlock.locks"
                                    " WHERE resource = %s AND NOT expired)", (name,)).fetchone()[0]
        assert lost_at < (now_expires or expires), f"lost at {lost_at}, lease ended {now_expires or expires}"
    with pytest.raises(dlock.LockLost):
        lock.__exit__(None, None, None)
