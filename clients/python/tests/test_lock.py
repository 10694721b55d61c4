# Promises: P1 P2 P4 P6 P9 P16
"""dlock.Lock against a real server (DLOCK_TEST_DSN)."""

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import dlock


def holding(admin, resource):
    return admin.execute("SELECT holder, fence, expires_at, renewed_at, acquired_at"
                         " FROM dlock.locks WHERE resource = %s AND NOT expired",
                         (resource,)).fetchone()


def backend_pid(admin, app):
    row = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                        (app,)).fetchone()
    assert row is not None, f"no backend with application_name {app}"
    return row[0]


def test_the_edition_is_the_one_named(admin, portable):
    """DLOCK_TEST_EDITION says the truth, so that what is skipped or asserted
    as missing on the portable edition is so only there."""
    row = admin.execute("SELECT to_regclass('dlock.portable') IS NOT NULL,"
                        " EXISTS (SELECT FROM pg_extension WHERE extname = 'dlock')").fetchone()
    assert row == ((True, False) if portable else (False, True))


def test_happy_path(dsn, admin, name):
    with dlock.Lock(dsn, name, lease=3, wait=5) as lock:
        assert isinstance(lock.fence, int)
        row = holding(admin, name)
        assert row[0] == lock.holder and row[1] == lock.fence
        assert lock.held and not lock.lost.is_set()
        assert lock.check()
    assert holding(admin, name) is None
    assert lock.fence is None


def test_default_holders_are_unique(dsn, name):
    a, b = dlock.Lock(dsn, name), dlock.Lock(dsn, name)
    assert a.holder != b.holder


def test_renewal_keeps_lease_past_its_length(dsn, admin, name):
    with dlock.Lock(dsn, name, lease=3) as lock:
        first = holding(admin, name)
        time.sleep(7)   # well past the lease: only renewals keep it
        now = holding(admin, name)
        assert now is not None and now[1] == lock.fence
        assert now[2] > first[2], "expiry moved forward"
        assert not lock.lost.is_set()


def test_wait_timeout(dsn, name):
    with dlock.Lock(dsn, name, lease=5):
        other = dlock.Lock(dsn, name, wait=0.5)
        t0 = time.monotonic()
        with pytest.raises(dlock.LockTimeout):
            with other:
                pytest.fail("entered a lock held by another holder")
        assert time.monotonic() - t0 >= 0.45
        assert other.acquire(wait=0) is False
        assert other.fence is None


def test_waiter_gets_lock_after_release(dsn, name):
    first = dlock.Lock(dsn, name, lease=5)
    assert first.acquire()
    got = {}

    def wait():
        with dlock.Lock(dsn, name, lease=5, wait=20) as second:
            got["fence"] = second.fence
    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    assert "fence" not in got
    first_fence = first.fence
    assert first.release() is True
    t.join(20)
    assert got["fence"] > first_fence


def test_fences_increase(dsn, name):
    fences = []
    for _ in range(4):
        with dlock.Lock(dsn, name, lease=5) as lock:
            fences.append(lock.fence)
    with dlock.Lock(dsn, name + "/other", lease=5) as lock:
        fences.append(lock.fence)
    assert fences == sorted(fences) and len(set(fences)) == len(fences)


def test_break_lock_sets_lost_runs_on_lost_raises(dsn, admin, name):
    called, ran = [], threading.Event()
    with pytest.raises(dlock.LockLost) as lost:
        with dlock.Lock(dsn, name, lease=1.5,
                        on_lost=lambda x: (called.append(x), ran.set())) as lock:
            assert admin.execute("SELECT dlock.break_lock(%s)", (name,)).fetchone()[0]
            assert lock.lost.wait(5), "loss noticed by the next renewal"
            assert ran.wait(5) and called == [lock]   # on_lost runs after lost is set
            assert "NULL" in lock.lost_reason
    # The LockLost came from leaving the block, not on top of a failed
    # assertion inside it (which it would otherwise hide).
    assert lost.value.__context__ is None, repr(lost.value.__context__)


def test_renewal_blocked_lost_before_server_expiry(dsn, admin, name, pause_idle, loss_clock,
                                                  one_connection):
    """The only connection's backend is paused (SIGSTOP): no renewal gets
    through, and loss is signalled before the lease ends on the server."""
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    called, ran = [], threading.Event()
    pool = one_connection(dsn + f" application_name={app}")
    lock = dlock.Lock(pool, name, lease=3, on_lost=lambda x: (called.append(x), ran.set()))
    assert lock.acquire()
    pid = backend_pid(admin, app)
    expires = holding(admin, name)[2]
    lost_at = loss_clock(lock.lost)
    pause_idle(admin, pid)
    try:
        assert lock.lost.wait(10)
        lost_at = lost_at()
        expires = holding(admin, name)[2] if holding(admin, name) else expires
        assert lost_at < expires, f"lost signalled at {lost_at}, lease ended {expires}"
        assert ran.wait(5) and called == [lock]   # on_lost runs after lost is set
    finally:
        os.kill(pid, signal.SIGCONT)
    with pytest.raises(dlock.LockLost):
        lock.__exit__(None, None, None)


def test_renewal_backend_paused_renews_on_another_connection(dsn, admin, name, pause_idle):
    """The lock's own connection stops answering (its backend paused):
    the renewal is cut after a third of the lease and sent again on a new
    connection, so the lock is kept (it was lost at the lease's end)."""
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    with dlock.Lock(dsn + f" application_name={app}", name, lease=3) as lock:
        pid = backend_pid(admin, app)
        pause_idle(admin, pid)
        try:
            time.sleep(4.5)    # past the lease
            assert not lock.lost.is_set(), lock.lost_reason
            assert lock.held
            live = admin.execute("SELECT fence, expires_at > clock_timestamp() FROM dlock.locks"
                                 " WHERE resource = %s", (name,)).fetchone()
            assert live == (lock.fence, True)
        finally:
            os.kill(pid, signal.SIGCONT)


def test_renewal_connection_killed_reconnects(dsn, admin, name):
    app = "dlock-pytest-" + uuid.uuid4().hex[:8]
    with dlock.Lock(dsn + f" application_name={app}", name, lease=3) as lock:
        pid = backend_pid(admin, app)
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        time.sleep(4)    # past the lease: renewals on a new connection
        assert not lock.lost.is_set()
        assert lock.check()
        assert holding(admin, name)[1] == lock.fence


def test_through_pgbouncer_transaction_pooling(bouncer, admin, name):
    with dlock.Lock(bouncer, name, lease=3, wait=5) as lock:
        # Other clients' statements share the two server connections.
        with psycopg.connect(bouncer, autocommit=True, prepare_threshold=None) as other:
            for _ in range(40):
                other.execute("SELECT dlock.try_lock(%s, 'someone', '5s')", (name + "/x",))
                time.sleep(0.15)
        assert not lock.lost.is_set()
        assert holding(admin, name)[1] == lock.fence
    assert holding(admin, name) is None


class TinyPool:
    """The shape of psycopg_pool.ConnectionPool that dlock uses."""

    def __init__(self, dsn):
        self.dsn = dsn
        self.borrowed = 0

    @contextlib.contextmanager
    def connection(self):
        self.borrowed += 1
        with psycopg.connect(self.dsn) as conn:   # commits on exit
            yield conn


def test_with_a_pool(dsn, admin, name):
    pool = TinyPool(dsn)
    # 6 s: each renewal opens a connection, within a third of the lease
    # (3 s leases: 1 s, too little under load).
    with dlock.Lock(pool, name, lease=6) as lock:
        time.sleep(7)
        assert holding(admin, name)[1] == lock.fence
    assert holding(admin, name) is None
    assert pool.borrowed >= 4   # acquire, renewals, release


def test_assert_fence_in_callers_transaction(dsn, admin, name):
    admin.execute("CREATE TABLE IF NOT EXISTS pytest_writes (resource text, fence bigint)")
    stale = dlock.Lock(dsn, name, lease=30)
    assert stale.acquire()
    admin.execute("SELECT dlock.break_lock(%s)", (name,))
    with dlock.Lock(dsn, name, lease=30) as current:
        assert current.fence > stale.fence
        current_fence = current.fence
        with psycopg.connect(dsn) as conn:
            with pytest.raises(dlock.StaleFence) as info:
                with conn.transaction():
                    conn.execute("INSERT INTO pytest_writes VALUES (%s, %s)", (name, stale.fence))
                    stale.assert_fence(conn)
            assert info.value.sqlstate == "55P03"
            assert isinstance(info.value.__cause__, psycopg.Error)
            with conn.transaction():
                current.assert_fence(conn.cursor())
                conn.execute("INSERT INTO pytest_writes VALUES (%s, %s)", (name, current.fence))
    rows = admin.execute("SELECT fence FROM pytest_writes WHERE resource = %s", (name,)).fetchall()
    assert rows == [(current_fence,)], "the stale write was rolled back"
    with pytest.raises(dlock.LockLost):
        stale.__exit__(None, None, None)


@pytest.mark.parametrize("kwargs", [
    {"resource": ""},
    {"resource": "x" * 1001},
    {"holder": ""},
    {"holder": "h" * 256},
])
def test_bad_inputs_from_the_server(dsn, admin, name, kwargs):
    resource = kwargs.pop("resource", name)
    lock = dlock.Lock(dsn, resource, **kwargs)
    with pytest.raises(dlock.InvalidArgument) as info:
        lock.acquire()
    assert info.value.sqlstate == "22023"
    assert isinstance(info.value.__cause__, psycopg.Error)
    assert info.value.__cause__.diag.sqlstate == "22023"
    assert admin.execute("SELECT count(*) FROM dlock.locks WHERE resource = %s",
                         (resource,)).fetchone()[0] == 0


@pytest.mark.parametrize("kwargs", [
    {"lease": -1}, {"lease": 0}, {"lease": float("inf")}, {"lease": "30"},
    {"wait": -1}, {"wait": float("nan")},
])
def test_bad_inputs_refused_before_sending(dsn, name, kwargs):
    with pytest.raises(dlock.InvalidArgument) as info:
        dlock.Lock(dsn, name, **kwargs)
    assert info.value.sqlstate == "22023"


def test_not_a_connection_source(name):
    with pytest.raises(TypeError):
        dlock.Lock(42, name)


def test_unlock_of_other_roles_holding_has_sqlstate(dsn, admin, name):
    role = "pytest_" + uuid.uuid4().hex[:8]
    admin.execute(f"CREATE ROLE {role} LOGIN")
    admin.execute(f"GRANT USAGE ON SCHEMA dlock TO {role}")
    try:
        with dlock.Lock(dsn, name, lease=30) as lock:
            other = dlock.Lock(dsn + f" user={role}", name, holder=lock.holder)
            other.fence = lock.fence
            with pytest.raises(dlock.PermissionDenied) as info:
                other.release()
            assert info.value.sqlstate == "42501"
    finally:
        admin.execute(f"REVOKE USAGE ON SCHEMA dlock FROM {role}")
        admin.execute(f"DROP ROLE {role}")


def test_nothing_printed(dsn, name):
    """A lost lease logs a warning, but with no logging configured the
    library prints nothing (no last-resort handler output)."""
    script = f"""
import psycopg, dlock
admin = psycopg.connect({dsn!r}, autocommit=True)
try:
    with dlock.Lock({dsn!r}, {name!r}, lease=1.5) as lock:
        admin.execute("SELECT dlock.break_lock(%s)", ({name!r},))
        assert lock.lost.wait(5)
except dlock.LockLost:
    pass
else:
    raise SystemExit(3)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd="/", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == ""


def test_shared_holders_together_writer_refused_fences_increase(dsn, admin, name):
    """Two shared holders at once; a writer refused while they hold, let in
    after; every fence distinct and greater than the ones before (both
    editions: the portable one has shared locks since its 0.4)."""
    r1 = dlock.Lock(dsn, name, lease=5, wait=0, shared=True)
    r2 = dlock.Lock(dsn, name, lease=5, wait=0, shared=True)
    writer = dlock.Lock(dsn, name, lease=5, wait=0)
    with r1, r2:
        rows = admin.execute("SELECT holder, fence, mode FROM dlock.locks"
                             " WHERE resource = %s AND NOT expired ORDER BY fence",
                             (name,)).fetchall()
        assert rows == [(r1.holder, r1.fence, "shared"), (r2.holder, r2.fence, "shared")]
        assert r1.check() and r2.check()
        assert not writer.acquire()
        assert writer.fence is None
        readers = (r1.fence, r2.fence)
    with writer:
        w = writer.fence
        assert w > readers[1] > readers[0]
        assert not dlock.Lock(dsn, name, lease=5, wait=0, shared=True).acquire()
    with dlock.Lock(dsn, name, lease=5, wait=0, shared=True) as r3:
        assert r3.fence > w
    assert admin.execute("SELECT count(*) FROM dlock.locks WHERE resource = %s",
                         (name,)).fetchone()[0] == 0


def test_shared_renewed_past_its_lease(dsn, admin, name):
    with dlock.Lock(dsn, name, lease=3, shared=True) as lock:
        first = holding(admin, name)[2]
        time.sleep(4)
        row = holding(admin, name)
        assert row is not None and row[1] == lock.fence and row[2] > first
        assert lock.held


@pytest.mark.c_only("installs the C extension's SQL 0.3 in a new database")
def test_shared_refused_without_the_servers_shared_mode(dsn, admin, name):
    """Under the 0.3 SQL (no lock(..., shared => ...)): NotSupported, 0A000,
    and nothing taken; an exclusive Lock still works."""
    db = "dlock_py_" + uuid.uuid4().hex[:12]
    admin.execute(f'CREATE DATABASE "{db}"')
    try:
        with psycopg.connect(dsn, dbname=db, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION dlock VERSION '0.3'")
            old = make_conninfo(dsn, dbname=db)
            with pytest.raises(dlock.NotSupported) as e:
                dlock.Lock(old, name, lease=5, shared=True).acquire()
            assert e.value.sqlstate == "0A000"
            assert conn.execute("SELECT count(*) FROM dlock.locks").fetchone()[0] == 0
            with dlock.Lock(old, name, lease=5) as lock:
                assert lock.fence is not None
    finally:
        admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')
