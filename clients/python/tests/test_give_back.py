# Promises: P16
"""What a cancelled dlock.aio acquisition gives back when the server
granted it before the cancel: only what this call got.  A semaphore's
unlock takes every permit of the holder and a resignation ends the term,
so permits the same holder held before (another object, or a call that
got in during the wait) and a term the same candidate already led stay.
The cancel lands exactly after the grant's answer arrived (the statement
runner is wrapped), so each case is deterministic."""

import asyncio

import psycopg

import pytest

import dlock.aio
from dlock import _leased_aio


@pytest.fixture
def after_grant(monkeypatch):
    """arm(task, tag): cancel TASK as soon as the answer of an acquisition
    whose parameters include TAG arrives."""
    real = _leased_aio._row
    armed = {}

    async def row(conn, sql, params):
        r = await real(conn, sql, params)
        task = armed.get("task")
        if task is not None and armed["tag"] in params and "dlock.renew" not in sql:
            armed.clear()
            task.cancel()
            await asyncio.sleep(0.1)  # the caller's cancel lands while this still runs
        return r
    monkeypatch.setattr(_leased_aio, "_row", row)

    def arm(task, tag):
        armed.update(task=task, tag=tag)
    return arm


def permits(admin, name, holder):
    return admin.execute("SELECT permits FROM dlock.locks WHERE resource = %s AND holder = %s"
                         " AND NOT expired", (name, holder)).fetchone()


def term(admin, name):
    row = admin.execute("SELECT term FROM dlock.leader(%s)", (name,)).fetchone()
    return None if row is None else row[0]


def test_semaphore_keeps_the_permits_held_before(dsn, admin, name, after_grant):
    async def main():
        a = dlock.aio.Semaphore(dsn, name, max_permits=3, holder="h", lease=30, cancel=None)
        assert await a.acquire()
        b = dlock.aio.Semaphore(dsn, name, max_permits=3, permits=2, holder="h", lease=30,
                                cancel=None)
        task = asyncio.create_task(b.acquire())
        after_grant(task, 2)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await a.check(), "the permit the holder had before is gone"
        await a.release()
        # Nothing held before: the late grant is given back.
        task = asyncio.create_task(b.acquire())
        after_grant(task, 2)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert permits(admin, name, "h") is None, "the late grant was not given back"
    asyncio.run(main())


def test_semaphore_keeps_a_concurrent_calls_permits(dsn, admin, name, after_grant):
    """B (2 permits) waits; A (1 permit, same holder) gets in meanwhile;
    B re-enters A's holding once there is room and is cancelled."""
    other = dlock.Semaphore(dsn, name, max_permits=3, permits=2, lease=30)
    assert other.acquire()

    async def main():
        b = dlock.aio.Semaphore(dsn, name, max_permits=3, permits=2, holder="h", lease=30,
                                cancel=None)
        task = asyncio.create_task(b.acquire())
        after_grant(task, 2)
        await asyncio.sleep(0.3)
        a = dlock.aio.Semaphore(dsn, name, max_permits=3, holder="h", lease=30, cancel=None)
        assert await a.acquire()
        await asyncio.to_thread(other.release)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)
        assert await a.check(), "a call that got in during the wait lost its permit"
        await a.release()
    asyncio.run(main())


@pytest.mark.parametrize("concurrent", [False, True])
def test_campaign_keeps_a_term_the_candidate_leads(dsn, admin, name, after_grant, concurrent):
    """Another Election object of the same candidate leads (or wins the
    term while this campaign waits); this campaign gets that term back and
    is cancelled: the term is not resigned."""
    blocker = dlock.Election(dsn, name, lease=30)
    if concurrent:
        blocker.campaign()

    async def main():
        a = dlock.aio.Election(dsn, name, candidate="c", lease=30, cancel=None)
        a_task = asyncio.create_task(a.campaign("a"))
        await asyncio.sleep(0.2)
        b = dlock.aio.Election(dsn, name, candidate="c", lease=30, cancel=None)
        task = asyncio.create_task(b.campaign("b"))
        after_grant(task, "b")
        await asyncio.sleep(0.2)
        if concurrent:
            await asyncio.to_thread(blocker.resign)
        led = await asyncio.wait_for(a_task, 20)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 20)
        assert term(admin, name) == led, "the term the candidate led was resigned"
        await a.resign()
        # A fresh term of a cancelled campaign is resigned.
        task = asyncio.create_task(b.campaign("b"))
        after_grant(task, "b")
        with pytest.raises(asyncio.CancelledError):
            await task
        assert term(admin, name) is None, "the cancelled campaign's fresh term was kept"
    asyncio.run(main())


@pytest.mark.parametrize("as_type", [float, str])
def test_campaign_give_back_with_an_int8_loader(dsn, admin, name, after_grant, as_type):
    """An int8 loader the application registered globally (float or str)
    does not break the give back: the fresh term is still resigned."""
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class AppLoader(Loader):
        def load(self, data):
            return as_type(bytes(data).decode())

    oid = psycopg.adapters.types["int8"].oid
    saved = psycopg.adapters.get_loader(oid, Format.TEXT)
    psycopg.adapters.register_loader("int8", AppLoader)
    try:
        async def main():
            b = dlock.aio.Election(dsn, name, lease=30, cancel=None)
            task = asyncio.create_task(b.campaign("b"))
            after_grant(task, "b")
            with pytest.raises(asyncio.CancelledError):
                await task
        asyncio.run(main())
    finally:
        psycopg.adapters.register_loader("int8", saved)
    assert term(admin, name) is None, "the cancelled campaign's fresh term was kept"
