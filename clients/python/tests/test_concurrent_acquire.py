# Promises: P16
"""Two acquisitions at once on one lock object (two threads, two tasks)
while another holder holds: the second raises RuntimeError at once, the
first gets the lock, and the server has one count, which one release
gives back.  Before, both waited and both were granted: one re-entered
the other's holding, a count no release gave back."""

import asyncio
import threading
import time

import pytest

import dlock
import dlock.aio


def count(admin, resource):
    row = admin.execute("SELECT count FROM dlock.locks WHERE resource = %s AND NOT expired",
                        (resource,)).fetchone()
    return None if row is None else row[0]


def waiting(admin, app):
    """A statement of application APP is running (the acquisition waits)."""
    return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                         " AND state = 'active'", (app,)).fetchone()[0] >= 1


def wait_for(cond, what, limit=10.0):
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"{limit} s without {what}"
        time.sleep(0.02)


def test_two_threads(dsn, admin, name):
    blocker = dlock.Lock(dsn, name, lease=30)
    assert blocker.acquire()
    app = "py-two-threads"
    lock = dlock.Lock(f"{dsn} application_name={app}", name, lease=30, wait=20)
    results = []
    first = threading.Thread(target=lambda: results.append(lock.acquire()))
    first.start()
    try:
        wait_for(lambda: waiting(admin, app), "the first acquisition waiting")
        with pytest.raises(RuntimeError, match="another acquisition"):
            lock.acquire()
    finally:
        blocker.release()
        first.join(30)
    assert results == [True]
    assert count(admin, name) == 1
    assert lock.release()
    assert count(admin, name) is None, "a count was left on the server"


def test_two_tasks(dsn, admin, name):
    async def main():
        blocker = dlock.aio.Lock(dsn, name, lease=30)
        assert await blocker.acquire()
        app = "py-two-tasks"
        lock = dlock.aio.Lock(f"{dsn} application_name={app}", name, lease=30, wait=20)
        first = asyncio.ensure_future(lock.acquire())
        try:
            end = time.monotonic() + 10
            while not waiting(admin, app):
                assert time.monotonic() < end, "the first acquisition is not waiting"
                await asyncio.sleep(0.02)
            with pytest.raises(RuntimeError, match="another acquisition"):
                await lock.acquire()
        finally:
            await blocker.release()
        assert await asyncio.wait_for(first, 30) is True
        assert count(admin, name) == 1
        assert await lock.release()
        assert count(admin, name) is None, "a count was left on the server"
    asyncio.run(main())


def test_after_refusal_acquires_again(dsn, admin, name):
    """The guard is cleared when an acquisition ends, whatever its end."""
    blocker = dlock.Lock(dsn, name, lease=30)
    assert blocker.acquire()
    lock = dlock.Lock(dsn, name, lease=30)
    assert lock.acquire(wait=0) is False
    with pytest.raises(ValueError):
        lock.acquire(wait=-1)
    blocker.release()
    assert lock.acquire(wait=5)
    with pytest.raises(RuntimeError, match="already acquired"):
        lock.acquire()
    assert lock.release()


def _child_try(lock, out):
    try:
        out.put(("ok", lock.acquire(wait=0)))
    except BaseException as e:   # reported to the parent
        out.put(("error", repr(e)))


def test_fork_during_acquisition(dsn, admin, name):
    """A process forked while a thread of its parent waits in acquire():
    the child's own acquire() on that object is a try of its own, not
    refused as under way (that acquisition is the parent's)."""
    import multiprocessing
    blocker = dlock.Lock(dsn, name, lease=30)
    assert blocker.acquire()
    app = "py-fork-acquiring"
    lock = dlock.Lock(f"{dsn} application_name={app}", name, lease=30, wait=20)
    results = []
    first = threading.Thread(target=lambda: results.append(lock.acquire()))
    first.start()
    try:
        wait_for(lambda: waiting(admin, app), "the first acquisition waiting")
        ctx = multiprocessing.get_context("fork")
        out = ctx.Queue()
        child = ctx.Process(target=_child_try, args=(lock, out))
        child.start()
        verdict = out.get(timeout=30)
        child.join(30)
        assert verdict == ("ok", False), f"the child's try: {verdict}"
    finally:
        blocker.release()
        first.join(30)
    assert results == [True]
    assert lock.release()
