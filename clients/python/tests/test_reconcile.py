# Promises: P16
"""Review of the generated sync API and the reconciled asyncio one
(_leased_aio.py, _flavour_*.py): a dlock.aio release cancelled at once
still releases (it runs on detached, also while it stops the renewal);
release(timeout=) bounds the connection it opens too (a paused server),
in both flavours; a re-campaign after loss gives back a term granted
as it is cancelled."""

import asyncio
import os
import signal
import threading
import uuid

import psycopg
import pytest

import dlock
import dlock.aio


def backend_pid(admin, app):
    return admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                         (app,)).fetchone()[0]


def postmaster_pid(pid):
    """The parent of backend PID (the server runs on this machine)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def live_holding(admin, name, holder):
    return admin.execute("SELECT 1 FROM dlock.locks WHERE resource = %s AND holder = %s"
                         " AND NOT expired", (name, holder)).fetchone() is not None


def test_aio_release_cancelled_at_once_still_releases(dsn, admin, name):
    """release() is cancelled at its first await (while it stops the
    renewal): it must run on to its end all the same (before the fix the
    renewal was stopped, nothing was released, and ``held`` stayed true
    with no loss ever signalled while the lease ran out)."""
    async def main():
        lock = dlock.aio.Lock(dsn, name, lease=30, cancel=None)
        assert await lock.acquire()
        task = asyncio.create_task(lock.release())
        await asyncio.sleep(0)          # the release has begun
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(400):            # a bound on a hang: 20 s of a 30 s lease
            if not live_holding(admin, name, lock.holder) and not lock.held:
                break
            await asyncio.sleep(0.05)
        assert not live_holding(admin, name, lock.holder), "the cancelled release released nothing"
        assert not lock.held and lock.fence is None and not lock.lost.is_set()
        assert len(asyncio.all_tasks()) == 1, asyncio.all_tasks()
    asyncio.run(main())


def _paused_server(admin, app):
    """Pause the backend of APP's connection and the postmaster: a new
    connection then waits for the server's answer, as to a paused VM."""
    pid = backend_pid(admin, app)
    pids = [pid, postmaster_pid(pid)]
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    return pids


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_release_timeout_bounds_the_connection_it_opens(dsn, admin, name, flavour):
    """The renewal is stuck on a paused backend (it has the lock's
    connection), then the whole server pauses: release(timeout=1) must
    give up (psycopg.OperationalError) instead of waiting for a new
    connection with no limit (before the fix it waited until the server
    went on; the asyncio release bounded it before the refactor)."""
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    lease = 3.0
    out = []
    pids = []
    if flavour == "sync":
        lock = dlock.Lock(dsn + f" application_name={app}", name, lease=lease)
        assert lock.acquire()
        pids = _paused_server(admin, app)
        try:
            def release():
                # Setup: the first renewal (at lease/3) goes to the paused
                # backend and waits; then release.
                lock.lost.wait(lease)
                try:
                    out.append(lock.release(timeout=1))
                except Exception as e:    # noqa: BLE001 - the test looks at it
                    out.append(e)
            t = threading.Thread(target=release, daemon=True)
            t.start()
            t.join(40)            # a bound on a hang, not a speed assertion
            hung = t.is_alive()
        finally:
            for p in pids:
                os.kill(p, signal.SIGCONT)
        assert not hung, "release(timeout=1) still waiting for a connection to a paused server"
    else:
        async def main():
            lock = dlock.aio.Lock(dsn + f" application_name={app}", name, lease=lease,
                                  cancel=None)
            assert await lock.acquire()
            pids.extend(_paused_server(admin, app))
            try:
                await asyncio.wait_for(lock.lost.wait(), lease)
                try:
                    out.append(await asyncio.wait_for(lock.release(timeout=1), 40))
                except Exception as e:    # noqa: BLE001 - the test looks at it
                    out.append(e)
            finally:
                for p in pids:
                    os.kill(p, signal.SIGCONT)
        asyncio.run(main())
    assert len(out) == 1 and isinstance(out[0], psycopg.OperationalError), out
