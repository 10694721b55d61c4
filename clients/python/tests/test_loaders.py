# Promises: P16
"""Loaders the application registered globally (psycopg.adapters) for
int8 and timestamptz (issue 33, class tests): fences (above 2^53) stay
exact, renewals keep the holding, assert_fence accepts it, release finds
it; multi-locks and election terms too."""

import asyncio

import psycopg
import pytest
from psycopg.adapt import Loader
from psycopg.pq import Format

import dlock
import dlock.aio


class FloatLoader(Loader):
    """int8 as float, as an application wanting JSON-friendly numbers may."""

    def load(self, data):
        return float(bytes(data).decode())


class StrLoader(Loader):
    def load(self, data):
        return bytes(data).decode()


@pytest.fixture(params=["float", "str"])
def loaders(request):
    """Global loaders for int8 and timestamptz; the originals put back."""
    types = psycopg.adapters.types
    saved = {t: psycopg.adapters.get_loader(types[t].oid, Format.TEXT)
             for t in ("int8", "timestamptz")}
    psycopg.adapters.register_loader("int8", FloatLoader if request.param == "float" else StrLoader)
    psycopg.adapters.register_loader("timestamptz", StrLoader)
    yield request.param
    for t, cls in saved.items():
        psycopg.adapters.register_loader(t, cls)


def server_fences(dsn, resource):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [int(r[0]) for r in conn.execute(
            "SELECT fence::text FROM dlock.locks WHERE resource = %s AND NOT expired"
            " ORDER BY fence", (resource,))]


def test_lock_with_global_loaders(dsn, name, loaders):
    with dlock.Lock(dsn, name, lease=1.5) as lock:
        assert isinstance(lock.fence, int) and lock.fence > 2 ** 53
        assert server_fences(dsn, name) == [lock.fence]
        assert not lock.lost.wait(3), lock.lost_reason     # renewed past two leases
        assert lock.check()
        with psycopg.connect(dsn) as conn:
            lock.assert_fence(conn)
        assert lock.release() is True


def test_multilock_and_semaphore_with_global_loaders(dsn, name, loaders):
    with dlock.MultiLock(dsn, [name, name + "/b"], lease=1.5) as locks:
        assert locks.fences == server_fences(dsn, name) + server_fences(dsn, name + "/b")
        assert not locks.lost.wait(3), locks.lost_reason
        with psycopg.connect(dsn) as conn:
            locks.assert_fence(conn)
    with dlock.Semaphore(dsn, name + "/s", max_permits=2, lease=1.5) as sem:
        assert server_fences(dsn, name + "/s") == [sem.fence]
        assert not sem.lost.wait(3), sem.lost_reason


def test_election_with_global_loaders(dsn, name, loaders):
    with dlock.Election(dsn, name, lease=1.5) as e:
        assert isinstance(e.term, int) and server_fences(dsn, name) == [e.term]
        assert e.leader().term == e.term
        assert not e.lost.wait(3), e.lost_reason


def test_aio_lock_with_global_loaders(dsn, name, loaders):
    async def main():
        async with dlock.aio.Lock(dsn, name, lease=1.5, cancel=None) as lock:
            assert isinstance(lock.fence, int) and server_fences(dsn, name) == [lock.fence]
            await asyncio.sleep(3)
            assert not lock.lost.is_set(), lock.lost_reason
            assert await lock.check()
    asyncio.run(main())
