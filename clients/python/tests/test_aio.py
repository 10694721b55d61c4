# Promises: P1 P6 P8 P9 P16
"""dlock.aio against a real server (asyncio.run in each test)."""

import asyncio
import contextlib
import time

import psycopg
import pytest

import dlock
import dlock.aio


def run(coro):
    return asyncio.run(coro)


def test_aio_happy_path_and_fences(dsn, admin, name):
    async def main():
        fences = []
        for _ in range(3):
            async with dlock.aio.Lock(dsn, name, lease=1.5, wait=5) as lock:
                row = admin.execute("SELECT fence FROM dlock.locks WHERE resource = %s",
                                    (name,)).fetchone()
                assert row[0] == lock.fence
                fences.append(lock.fence)
        await asyncio.sleep(0)
        return fences
    fences = run(main())
    assert fences == sorted(set(fences))


def test_aio_renewal(dsn, admin, name):
    async def main():
        async with dlock.aio.Lock(dsn, name, lease=3) as lock:
            await asyncio.sleep(7)
            assert not lock.lost.is_set()
            assert await lock.check()
    run(main())


def test_aio_wait_timeout(dsn, name):
    async def main():
        async with dlock.aio.Lock(dsn, name, lease=5):
            with pytest.raises(dlock.LockTimeout):
                async with dlock.aio.Lock(dsn, name, wait=0.3):
                    pytest.fail("entered a held lock")
    run(main())


def test_aio_loss_cancels_block_and_raises(dsn, admin, name):
    called = []

    async def on_lost(lock):
        called.append(lock)

    async def main():
        with pytest.raises(dlock.LockLost) as lost:
            async with dlock.aio.Lock(dsn, name, lease=1.5, on_lost=on_lost) as lock:
                admin.execute("SELECT dlock.break_lock(%s)", (name,))
                await asyncio.sleep(30)     # cancelled by the loss
                pytest.fail("the block was not cancelled")
        # The LockLost stands for the cancellation, not for a failure inside.
        ctx = lost.value.__context__
        assert ctx is None or isinstance(ctx, asyncio.CancelledError), repr(ctx)
        assert lock.lost.is_set() and called == [lock]
    t0 = time.monotonic()
    run(main())
    assert time.monotonic() - t0 < 30


def test_aio_assert_fence_stale(dsn, admin, name):
    async def main():
        stale = dlock.aio.Lock(dsn, name, lease=30, cancel=None)
        assert await stale.acquire()
        admin.execute("SELECT dlock.break_lock(%s)", (name,))
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            with pytest.raises(dlock.StaleFence) as info:
                async with conn.transaction():
                    await stale.assert_fence(conn)
            assert info.value.sqlstate == "55P03"
        with pytest.raises(dlock.LockLost):
            await stale.__aexit__(None, None, None)
    run(main())


def test_aio_bad_input(dsn, name):
    async def main():
        with pytest.raises(dlock.InvalidArgument) as info:
            await dlock.aio.Lock(dsn, "").acquire()
        assert info.value.sqlstate == "22023"
    run(main())


def test_aio_election_two_candidates(dsn, name):
    async def main():
        seen = []
        a = dlock.aio.Election(dsn, name, candidate="a", value="1", lease=3)
        b = dlock.aio.Election(dsn, name, candidate="b", value="2", lease=3)
        ta = await a.campaign()

        async def observer():
            async for leader in dlock.aio.observe(dsn, name, poll=0.5, timeout=15):
                seen.append(leader)
                if leader is None and any(s and s.candidate == "b" for s in seen):
                    return
        obs = asyncio.create_task(observer())
        campaign_b = asyncio.create_task(b.campaign(wait=20))
        await asyncio.sleep(0.5)
        assert not campaign_b.done()
        assert await a.resign()
        tb = await asyncio.wait_for(campaign_b, 20)
        assert tb > ta
        assert (await b.leader()).candidate == "b"
        await asyncio.sleep(1)
        assert await b.resign()
        await asyncio.wait_for(obs, 20)
        return ta, tb, seen
    ta, tb, seen = run(main())
    # Between a's resignation and b's election nobody may lead for a moment.
    assert [(s.candidate, s.term) for s in seen if s] == [("a", ta), ("b", tb)]
    assert seen[-1] is None


def test_aio_renewal_blocked_lost_before_server_expiry(dsn, admin, name, pause_idle, loss_clock):
    import os
    import signal
    import uuid
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]

    class OneConnection:
        """A pool of one connection, never replaced (test_lock.py's)."""

        def __init__(self, conn):
            self.conn = conn

        @contextlib.asynccontextmanager
        async def connection(self):
            yield self.conn

    async def main():
        conn = await psycopg.AsyncConnection.connect(dsn + f" application_name={app}",
                                                     autocommit=True)
        lock = dlock.aio.Lock(OneConnection(conn), name, lease=3, cancel=None)
        assert await lock.acquire()
        pid = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                            (app,)).fetchone()[0]
        before = admin.execute("SELECT expires_at FROM dlock.locks WHERE resource = %s",
                               (name,)).fetchone()[0]
        lost_at = loss_clock(lock.lost)
        pause_idle(admin, pid)
        try:
            await asyncio.wait_for(lock.lost.wait(), 10)
            lost_at = await lost_at()
            expires = admin.execute("SELECT expires_at FROM dlock.locks WHERE resource = %s",
                                    (name,)).fetchone()
            expires = expires[0] if expires else None
            assert lost_at < (expires or before), f"lost at {lost_at}, lease ended {expires or before}"
        finally:
            os.kill(pid, signal.SIGCONT)
        with pytest.raises(dlock.LockLost):
            await lock.__aexit__(None, None, None)
        await conn.close()
    run(main())


def test_aio_held_false_past_the_deadline_before_the_loss_is_signalled(dsn, name):
    """The event loop blocked past the lease (no timer runs): ``held`` says
    False at once, judged by the clock, before ``lost`` is set."""
    async def main():
        lock = dlock.aio.Lock(dsn, name, lease=1)
        assert await lock.acquire()
        assert lock.held
        time.sleep(1.2)            # blocks the loop: no renewal, no loss timer
        assert not lock.lost.is_set()
        assert not lock.held
        await asyncio.wait_for(lock.lost.wait(), 5)
        with pytest.raises(dlock.LockLost):
            await lock.__aexit__(None, None, None)
    run(main())


def test_aio_shared_holders_and_writer(dsn, admin, name):
    # Both editions (the portable one has shared locks since its 0.4).
    async def main():
        async with dlock.aio.Lock(dsn, name, lease=5, wait=0, shared=True) as r1, \
                dlock.aio.Lock(dsn, name, lease=5, wait=0, shared=True) as r2:
            modes = admin.execute("SELECT mode FROM dlock.locks WHERE resource = %s",
                                  (name,)).fetchall()
            assert modes == [("shared",), ("shared",)]
            writer = dlock.aio.Lock(dsn, name, lease=5, wait=0)
            assert not await writer.acquire()
            fences = [r1.fence, r2.fence]
        async with dlock.aio.Lock(dsn, name, lease=5, wait=5) as w:
            fences.append(w.fence)
        return fences
    fences = run(main())
    assert fences == sorted(set(fences))
