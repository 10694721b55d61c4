"""Fixtures of dlock's Python tests: DLOCK_TEST_DSN (conninfo to a
server with dlock: a superuser's, with the C extension preloaded, or with
DLOCK_TEST_EDITION=portable the role that installed portable/dlock.sql
and owns the database, no superuser, with CREATEROLE), DLOCK_TEST_BOUNCER
(the same database behind pgbouncer in transaction mode, optional).

``@pytest.mark.c_only("why")``: a test of what only the C extension has,
skipped with that reason on the portable edition; the ``portable``
fixture says which edition a test runs against.

``pause_idle(admin, pid)`` (the fixture of that name): SIGSTOP a backend,
only while it waits for its client; ``one_connection(dsn)``: a pool of one
connection, never replaced (a paused backend then stops everything).  ``loss_clock(event)``: the time a
loss is signalled, taken as it happens (see _loss_clock)."""

import asyncio
import concurrent.futures
import contextlib
import datetime
import os
import signal
import threading
import time
import uuid

import psycopg
import pytest


PORTABLE = os.environ.get("DLOCK_TEST_EDITION", "c") == "portable"


def pytest_configure(config):
    config.addinivalue_line("markers", "c_only(reason): needs the C extension"
                            " (skipped on the portable edition)")
    config.addinivalue_line("markers", "any_sql: a session test that runs on servers"
                            " without sessions too (test_sessions.py)")


def pytest_runtest_setup(item):
    mark = item.get_closest_marker("c_only")
    if mark is not None and PORTABLE:
        pytest.skip("portable edition: " + (mark.args[0] if mark.args else "C extension only"))


@pytest.fixture
def portable() -> bool:
    """True when the server has the portable edition."""
    return PORTABLE


@pytest.fixture
def dsn() -> str:
    value = os.environ.get("DLOCK_TEST_DSN")
    if not value:
        pytest.skip("DLOCK_TEST_DSN is not set")
    return value


@pytest.fixture
def bouncer() -> str:
    value = os.environ.get("DLOCK_TEST_BOUNCER")
    if not value:
        pytest.skip("DLOCK_TEST_BOUNCER is not set (no pgbouncer)")
    return value


@pytest.fixture
def admin(dsn):
    conn = psycopg.connect(dsn, autocommit=True)
    yield conn
    conn.close()


@pytest.fixture
def name() -> str:
    return "pytest/" + uuid.uuid4().hex


def _pause_idle(admin, pid):
    """SIGSTOP backend PID; SIGCONT it and try again until it is caught
    idle, waiting to read from its client (5 s, else the test fails).
    Stopped inside a statement, a backend may hold a lightweight lock
    that every other backend of the cluster needs, and stall them all.
    A backend that is gone is not paused."""
    query = ("SELECT coalesce(state = 'idle' AND wait_event = 'ClientRead', false)"
             " FROM pg_stat_activity WHERE pid = %s")
    pool = concurrent.futures.ThreadPoolExecutor(1)
    paused = False
    try:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            os.kill(pid, signal.SIGSTOP)
            # Bounded here, not by statement_timeout: a reader retries
            # while the backend is stopped updating its pg_stat_activity
            # entry, and may wait on a lightweight lock it holds (no
            # timeout ends that wait). SIGCONT ends both.
            read = pool.submit(lambda: admin.execute(query, (pid,)).fetchone())
            try:
                row = read.result(0.5)
            except concurrent.futures.TimeoutError:
                row = (False,)
            if row is not None and row[0]:
                paused = True
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            if read.result(30) is None:   # also frees the admin connection
                return                    # gone: nothing to pause
            time.sleep(0.007)
        pytest.fail(f"backend {pid} never stopped while idle (waiting for its client)")
    finally:
        if not paused:   # never leave it stopped on an error
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        pool.shutdown(wait=False)


class OneConnection:
    """A pool (the shape dlock uses) of one autocommit connection that is
    never replaced: once its backend is paused, nothing gets through (a
    pool would open another connection, and dlock's own does)."""

    def __init__(self, dsn):
        self.conn = psycopg.connect(dsn, autocommit=True)

    @contextlib.contextmanager
    def connection(self):
        yield self.conn


@pytest.fixture
def one_connection():
    """The function one_connection(dsn): a OneConnection, closed after
    the test."""
    made = []

    def make(dsn):
        made.append(OneConnection(dsn))
        return made[-1]
    yield make
    for pool in made:
        pool.conn.close()


@pytest.fixture
def pause_idle():
    """The function pause_idle(admin, pid): SIGSTOP backend PID, left
    stopped only while it waits for its client (see _pause_idle)."""
    return _pause_idle


def _loss_clock(event):
    """Start timing a loss: event (a lock's or election's ``lost``, a
    threading.Event or an asyncio.Event) is waited on by a thread, or a
    task in the running loop, which notes the wall clock (UTC) the moment
    it is set: compared with the server's clock, so the server must run on
    this machine, as every test server here does (on loopback).  Returns
    a function that gives that time, waiting up to 30 s for it.  A query made after the
    loss (clock_timestamp()) answers late on a loaded machine, and a late
    time could only fail a test that should pass."""
    got = []

    if isinstance(event, asyncio.Event):
        async def watch():
            await event.wait()
            got.append(datetime.datetime.now(datetime.timezone.utc))
        task = asyncio.get_running_loop().create_task(watch())

        async def when():
            await asyncio.wait_for(asyncio.shield(task), 30)
            return got[0]
        return when

    done = threading.Event()

    def wait_and_note():
        event.wait()
        got.append(datetime.datetime.now(datetime.timezone.utc))
        done.set()
    threading.Thread(target=wait_and_note, daemon=True).start()

    def when():
        assert done.wait(30), "the loss was never signalled"
        return got[0]
    return when


@pytest.fixture
def loss_clock():
    """The function loss_clock(event): see _loss_clock."""
    return _loss_clock
