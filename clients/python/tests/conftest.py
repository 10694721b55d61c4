"""Fixtures of dlock's Python tests: DLOCK_TEST_DSN (conninfo to a
server with dlock: a superuser's, with the C extension preloaded, or with
DLOCK_TEST_EDITION=portable the role that installed portable/dlock.sql
and owns the database, no superuser, with CREATEROLE), DLOCK_TEST_BOUNCER
(the same database behind pgbouncer in transaction mode, optional).

``@pytest.mark.c_only("why")``: a test of what only the C extension has,
skipped with that reason on the portable edition; the ``portable``
fixture says which edition a test runs against.

``pause_idle(admin, pid)`` (the fixture of that name): SIGSTOP a backend,
only while it waits for its client."""

import concurrent.futures
import contextlib
import os
import signal
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


@pytest.fixture
def pause_idle():
    """The function pause_idle(admin, pid): SIGSTOP backend PID, left
    stopped only while it waits for its client (see _pause_idle)."""
    return _pause_idle
