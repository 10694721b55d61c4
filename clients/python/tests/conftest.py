"""Fixtures of dlock's Python tests: DLOCK_TEST_DSN (a superuser's
conninfo to a server with dlock preloaded) and DLOCK_TEST_BOUNCER (the
same database behind pgbouncer in transaction mode, optional)."""

import os
import uuid

import psycopg
import pytest


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
