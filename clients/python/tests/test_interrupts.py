# Promises: P5 P16
"""Interrupted calls (issue 33): release() on an unresponsive server ends
after its timeout (sync and asyncio); a cancelled dlock.aio acquire()
cancels its statement in the server, which then grants nothing."""

import asyncio
import os
import signal
import threading
import time
import uuid

import psycopg
import pytest

import dlock
import dlock.aio


def backend_pid(admin, app):
    return admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                         (app,)).fetchone()[0]


def test_release_timeout_on_a_paused_backend(dsn, admin, name, pause_idle):
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    lock = dlock.Lock(dsn + f" application_name={app}", name, lease=30)
    assert lock.acquire()
    pid = backend_pid(admin, app)
    out = []
    pause_idle(admin, pid)
    try:
        def release():
            try:
                out.append(lock.release(timeout=1))
            except Exception as e:    # noqa: BLE001 - the test looks at it
                out.append(e)
        t = threading.Thread(target=release, daemon=True)
        t.start()
        t.join(30)            # a bound on a hang, not a speed assertion
        assert not t.is_alive(), "release() still waiting for a paused server"
    finally:
        os.kill(pid, signal.SIGCONT)
    assert len(out) == 1 and isinstance(out[0], psycopg.OperationalError), out
    assert "no answer within 1.0 s" in str(out[0])


def test_aio_release_timeout_on_a_paused_backend(dsn, admin, name, pause_idle):
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]

    async def main():
        lock = dlock.aio.Lock(dsn + f" application_name={app}", name, lease=30, cancel=None)
        assert await lock.acquire()
        pid = backend_pid(admin, app)
        pause_idle(admin, pid)
        try:
            with pytest.raises(psycopg.OperationalError):
                await asyncio.wait_for(lock.release(timeout=1), 30)
        finally:
            os.kill(pid, signal.SIGCONT)
    asyncio.run(main())


@pytest.mark.parametrize("kind", ["lock", "election"])
def test_aio_cancelled_acquire_leaves_nothing(dsn, admin, name, kind):
    """A holder keeps NAME; a dlock.aio acquisition waits for it and is
    cancelled; then the holder lets go: the next one is served at once
    (before the fix the cancelled statement kept waiting in the server,
    was granted, and kept the resource for its lease)."""
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    first = dlock.Lock(dsn, name, lease=30) if kind == "lock" else dlock.Election(dsn, name, lease=30)
    first.acquire() if kind == "lock" else first.campaign()

    async def main():
        src = dsn + f" application_name={app}"
        obj = (dlock.aio.Lock(src, name, lease=60, cancel=None) if kind == "lock"
               else dlock.aio.Election(src, name, lease=60, cancel=None))
        task = asyncio.create_task(obj.acquire() if kind == "lock" else obj.campaign())
        for _ in range(200):  # until its statement waits in the server
            await asyncio.sleep(0.05)
            row = admin.execute("SELECT state FROM pg_stat_activity WHERE application_name = %s",
                                (app,)).fetchone()
            if row and row[0] == "active":
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(main())
    first.release() if kind == "lock" else first.resign()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET statement_timeout = '20s'")
        if kind == "lock":
            got = conn.execute("SELECT dlock.lock(%s, 'third', '5s', '5s')::text",
                               (name,)).fetchone()[0]
        else:
            got = conn.execute("SELECT dlock.campaign(%s, 'third', NULL, '5s', '5s')::text",
                               (name,)).fetchone()[0]
        assert got is not None, "the cancelled acquisition was granted and kept it"


def test_stuck_renewal_of_a_released_holding_leaves_the_next_alone(dsn, admin, name, pause_idle):
    """A renewal stuck on a paused backend is left behind by release();
    the same object acquires again; then the stuck renewal answers (NULL:
    its holding was released).  That answer is about the old holding: the
    new one must not be declared lost (before the fix it was, falsely)."""
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    lease = 3.0
    lock = dlock.Lock(dsn + f" application_name={app}", name, lease=lease)
    assert lock.acquire()
    pid = backend_pid(admin, app)
    pause_idle(admin, pid)
    try:
        # Setup, not an assertion: the first renewal (at lease/3) is sent
        # to the paused backend and waits for its answer.
        time.sleep(lease / 3 + 0.5)
        assert lock.release(timeout=5)            # on a connection of its own
        assert lock.acquire()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert not lock.lost.wait(2 * lease), lock.lost_reason
    assert lock.held and lock.check()
    assert lock.release()
