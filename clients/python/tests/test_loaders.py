# Promises: P16
"""Loaders the application registered globally (psycopg.adapters) for
int8 and timestamptz (issue 33, class tests): fences (above 2^53) stay
exact, renewals keep the holding, assert_fence accepts it, release finds
it; multi-locks and election terms too."""

import asyncio
import os
import subprocess
import sys

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
    with dlock.Lock(dsn, name, lease=6) as lock:
        assert isinstance(lock.fence, int) and lock.fence > 2 ** 53
        assert server_fences(dsn, name) == [lock.fence]
        assert not lock.lost.wait(6.5), lock.lost_reason     # renewed past its lease (6 s: 1.5 s and 3 s leases were lost under load)
        assert lock.check()
        with psycopg.connect(dsn) as conn:
            lock.assert_fence(conn)
        assert lock.release() is True


def test_multilock_and_semaphore_with_global_loaders(dsn, name, loaders):
    with dlock.MultiLock(dsn, [name, name + "/b"], lease=6) as locks:
        assert locks.fences == server_fences(dsn, name) + server_fences(dsn, name + "/b")
        assert not locks.lost.wait(6.5), locks.lost_reason
        with psycopg.connect(dsn) as conn:
            locks.assert_fence(conn)
    with dlock.Semaphore(dsn, name + "/s", max_permits=2, lease=6) as sem:
        assert server_fences(dsn, name + "/s") == [sem.fence]
        assert not sem.lost.wait(6.5), sem.lost_reason


def test_election_with_global_loaders(dsn, name, loaders):
    with dlock.Election(dsn, name, lease=6) as e:
        assert isinstance(e.term, int) and server_fences(dsn, name) == [e.term]
        assert e.leader().term == e.term
        assert not e.lost.wait(6.5), e.lost_reason


def test_aio_lock_with_global_loaders(dsn, name, loaders):
    async def main():
        async with dlock.aio.Lock(dsn, name, lease=6, cancel=None) as lock:
            assert isinstance(lock.fence, int) and server_fences(dsn, name) == [lock.fence]
            await asyncio.sleep(6.5)
            assert not lock.lost.is_set(), lock.lost_reason
            assert await lock.check()
    asyncio.run(main())


# In a process of its own: psycopg has no way to take a dumper back.
ODD_ADAPTERS = r'''
import sys
import psycopg
from psycopg.adapt import Loader
from psycopg.types.numeric import IntNumericDumper
import dlock


class TextLoader(Loader):
    def load(self, data):
        return bytes(data).decode()


psycopg.adapters.register_dumper(int, IntNumericDumper)   # ints sent as numeric
psycopg.adapters.register_loader("bool", TextLoader)       # 't' / 'f', both truthy
dsn, name = sys.argv[1], sys.argv[2]
lock = dlock.Lock(dsn, name, lease=6)
assert lock.acquire()
assert not lock.lost.wait(6.5), lock.lost_reason            # renewals get through
assert lock.check() is True
with psycopg.connect(dsn, autocommit=True) as admin:
    admin.execute("SELECT dlock.break_lock(%s)", (name,))
assert lock.check() is False, "check after break_lock"
assert lock.release() is False and lock.lost.is_set()
with dlock.Semaphore(dsn, name + "/s", max_permits=2, permits=1, lease=6) as sem:
    assert not sem.lost.wait(6.5), sem.lost_reason
with dlock.MultiLock(dsn, [name + "/a", name + "/b"], lease=5) as locks:
    assert locks.check() is True
with dlock.Election(dsn, name + "/e", lease=5) as e:
    assert e.proclaim("v2") is True
e2 = dlock.Election(dsn, name + "/e2", lease=5)
e2.campaign()
with psycopg.connect(dsn, autocommit=True) as admin:    # the term ended by someone else
    admin.execute("SELECT dlock.resign(%s, %s, %s::bigint)", (name + "/e2", e2.holder, e2.term))
assert e2.resign() is False, "resign of a term that had ended"
print("ok")
'''


def test_global_int_dumper_and_bool_loader(dsn, name):
    """A dumper that sends ints as numeric (renew, unlock, check would not
    resolve: 42883) and a loader that reads booleans as 't'/'f' (check
    would say True after a break, resign True for a term that had ended)
    (helper-80, helper-82)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", ODD_ADAPTERS, dsn, name], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
