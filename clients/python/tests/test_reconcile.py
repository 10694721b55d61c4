# Promises: P16
"""Review of the generated sync API and the reconciled asyncio one
(_leased_aio.py, _flavour_*.py): a dlock.aio release cancelled at once
still releases (it runs on detached, also while it stops the renewal);
release(timeout=) bounds the connection it opens too (a paused server),
in both flavours; a re-campaign after loss gives back a term granted
as it is cancelled."""

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


def _paused_server(admin, app, pause_idle):
    """Pause the backend of APP's connection and the postmaster: a new
    connection then waits for the server's answer, as to a paused VM.
    The backend only while it waits for its client (pause_idle); the
    postmaster holds none of the locks other backends need."""
    pid = backend_pid(admin, app)
    pids = [pid, postmaster_pid(pid)]
    pause_idle(admin, pid)
    os.kill(pids[1], signal.SIGSTOP)
    return pids


@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_release_timeout_bounds_the_connection_it_opens(dsn, admin, name, flavour,
                                                       pause_idle):
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
        pids = _paused_server(admin, app, pause_idle)
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
            pids.extend(_paused_server(admin, app, pause_idle))
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


class FlakyPool:
    """An autocommit pool; ``fail_at``: the statement of the next borrowed
    connection that fails as a cut connection would (0: none)."""

    def __init__(self, dsn):
        self.dsn, self.fail_at = dsn, 0

    @contextlib.contextmanager
    def connection(self, timeout=None):
        fail_at, self.fail_at = self.fail_at, 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            n = [0]

            class Flaky:
                def execute(self, *args, **kwargs):
                    n[0] += 1
                    if n[0] == fail_at:
                        raise psycopg.OperationalError("connection cut (test)")
                    return conn.execute(*args, **kwargs)

                def __getattr__(self, attr):
                    return getattr(conn, attr)
            yield Flaky()


def leader_of(admin, name):
    row = admin.execute("SELECT candidate FROM dlock.leader(%s)", (name,)).fetchone()
    return None if row is None else row[0]


def test_recampaign_after_loss_gives_back_a_failed_grant(dsn, admin, name):
    """An election's leadership is lost (broken); the same object
    campaigns again, waits, is elected, and the renewal dating its term
    fails: campaign() raises, so that term must be given back, as for a
    first campaign (before the fix the lost term's fences made it look
    like a leader's own term again: kept, unrenewed, blocking the others
    for its lease)."""
    lease = 6.0
    pool = FlakyPool(dsn)
    e = dlock.Election(pool, name, candidate="e", lease=lease, wait=30)
    e.campaign()
    admin.execute("SELECT dlock.break_lock(%s)", (name,))
    assert e.lost.wait(30), "the broken leadership was not noticed"
    other = dlock.Election(dsn, name, candidate="other", lease=30)
    other.campaign(wait=10)
    pool.fail_at = 2                        # the campaign, then its dating renewal
    t = threading.Timer(lease / 2, other.resign)   # a wait of lease/3 or more
    t.start()
    with pytest.raises(psycopg.OperationalError):
        e.campaign()
    t.join()
    assert leader_of(admin, name) is None, "the failed campaign's term was kept, unrenewed"


def test_aio_release_from_on_lost(dsn, admin, name):
    """on_lost (run by the renewal that found the lease broken) releases:
    it gets False (lost already), not CancelledError: the detached
    release must not stop, as a renewal, the task that waits for it."""
    got = []

    async def main():
        async def on_lost(lock):
            try:
                got.append(await lock.release())
            except BaseException as e:     # noqa: BLE001 - the test looks at it
                got.append(e)
                raise
        lock = dlock.aio.Lock(dsn, name, lease=3, cancel=None, on_lost=on_lost)
        assert await lock.acquire()
        admin.execute("SELECT dlock.break_lock(%s)", (name,))
        await asyncio.wait_for(lock.lost.wait(), 30)
        for _ in range(200):           # a bound on a hang
            if got:
                break
            await asyncio.sleep(0.05)
    asyncio.run(main())
    assert got == [False], got
