"""Fixtures of dlock's Python tests: DLOCK_TEST_DSN (conninfo to a
server with dlock: a superuser's, with the C extension preloaded, or with
DLOCK_TEST_EDITION=portable the role that installed portable/dlock.sql
and owns the database, no superuser, with CREATEROLE), DLOCK_TEST_BOUNCER
(the same database behind pgbouncer in transaction mode, optional).

``@pytest.mark.c_only("why")``: a test of what only the C extension has,
skipped with that reason on the portable edition; the ``portable``
fixture says which edition a test runs against."""

import os
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
