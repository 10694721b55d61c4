# Promises: P9 P16
"""dlock's tooz driver beyond tooz's own suite (020_tooz.t runs that): the
calling conventions of every tooz version Debian ships, and shared locks."""

import time
import uuid

import psycopg
import psycopg.conninfo
import pytest

tooz_coordination = pytest.importorskip("tooz.coordination")


@pytest.fixture
def url(dsn):
    p = psycopg.conninfo.conninfo_to_dict(dsn)
    host = p.get("host", "127.0.0.1")
    if host.startswith("/"):
        return f"dlock://{p.get('user', '')}@/{p.get('dbname', 'postgres')}?host={host}&port={p.get('port', 5432)}"
    return f"dlock://{p.get('user', '')}@{host}:{p.get('port', 5432)}/{p.get('dbname', 'postgres')}"


@pytest.fixture
def coords(url):
    made = []

    def make():
        c = tooz_coordination.get_coordinator(url + ("&" if "?" in url else "?") + "timeout=10",
                                              uuid.uuid4().hex.encode())
        c.start()
        made.append(c)
        return c
    yield make
    for c in made:
        c.stop()


def test_acquire_blocking_shared_timeout_positionally(coords):
    """tooz 9's Lock.__enter__ calls acquire(blocking, shared, timeout)."""
    name = uuid.uuid4().hex.encode()
    mine, theirs = coords().get_lock(name), coords().get_lock(name)
    assert mine.acquire(True, False, None)
    started = time.monotonic()
    assert theirs.acquire(True, False, 0.3) is False
    assert time.monotonic() - started >= 0.3
    assert theirs.acquire(False, False, 5) is False
    assert mine.release()
    assert theirs.acquire(True, False, 5)
    assert theirs.release()


def test_shared_readers_together_writer_refused(coords):
    # Both editions (the portable one has shared locks since its 0.4).
    name = uuid.uuid4().hex.encode()
    r1, r2, w = (coords().get_lock(name) for _ in range(3))
    assert r1.acquire(True, True, None)
    assert r2.acquire(blocking=False, shared=True)
    assert r1._fence != r2._fence
    assert not w.acquire(blocking=False)
    assert r1.release()
    assert not w.acquire(blocking=False)
    assert r2.release()
    assert w.acquire(blocking=False)
    assert not r1.acquire(blocking=False, shared=True)
    assert w.release()


@pytest.mark.c_only("installs the C extension's SQL 0.3 in a new database")
def test_shared_not_implemented_without_the_servers_shared_mode(dsn, admin, url):
    """Under the 0.3 SQL: tooz.NotImplemented, nothing taken; exclusive
    locks still work."""
    import tooz
    db = "dlock_tooz_" + uuid.uuid4().hex[:12]
    admin.execute(f'CREATE DATABASE "{db}"')
    try:
        with psycopg.connect(dsn, dbname=db, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION dlock VERSION '0.3'")
            base, _, query = url.partition("?")
            old = base.rsplit("/", 1)[0] + "/" + db + ("?" + query if query else "")
            coord = tooz_coordination.get_coordinator(old, b"m")
            coord.start()
            try:
                lock = coord.get_lock(b"l")
                with pytest.raises(tooz.NotImplemented):
                    lock.acquire(shared=True)
                assert conn.execute("SELECT count(*) FROM dlock.locks").fetchone()[0] == 0
                assert lock.acquire(blocking=False)
                assert lock.release()
            finally:
                coord.stop()
    finally:
        admin.execute(f'DROP DATABASE "{db}" WITH (FORCE)')


def test_get_members_with_capabilities(coords):
    """tooz 9's get_members_with_capabilities (tooz's own tests skip it
    as not implemented without it): one call, None for no capabilities."""
    a, b = coords(), coords()
    group = uuid.uuid4().hex.encode()
    with pytest.raises(tooz_coordination.GroupNotCreated):
        a.get_members_with_capabilities(group).get()
    a.create_group(group).get()
    assert a.get_members_with_capabilities(group).get() == {}
    a.join_group(group, {"role": "primary"}).get()
    b.join_group(group).get()
    assert a.get_members_with_capabilities(group).get() == {
        a._member_id: {"role": "primary"}, b._member_id: None}


@pytest.mark.parametrize("blocking", [False, True])
def test_rolled_back_lock_and_release_are_sent_again(coords, admin, monkeypatch, blocking):
    """A lock or release the server rolled back (40001: a serializable
    caller's conflict) did nothing: it is sent again, ACQUIRE_TRIES times in all;
    a blocking lock waits no longer for it than its timeout."""
    from dlock import _common as c
    from dlock import tooz as driver
    real = driver._row
    armed = {"n": 0}

    def row(conn, sql, params=()):
        if armed["n"] > 0 and ("dlock.lock(" in sql or "dlock.unlock(" in sql):
            armed["n"] -= 1
            return real(conn, "DO $$BEGIN RAISE EXCEPTION 'conflict (test)'"
                        " USING ERRCODE = 'serialization_failure'; END$$")
        return real(conn, sql, params)
    monkeypatch.setattr(driver, "_row", row)
    lock = coords().get_lock(uuid.uuid4().hex.encode())
    armed["n"] = 2
    assert lock.acquire(blocking, False, 5 if blocking else None) is True
    assert armed["n"] == 0 and lock.is_still_owner()
    armed["n"] = 2
    assert lock.release() is True
    assert admin.execute("SELECT count(*) FROM dlock.locks WHERE resource = %s AND NOT expired",
                         (lock.resource,)).fetchone()[0] == 0
    armed["n"] = c.ACQUIRE_TRIES
    with pytest.raises(Exception) as e:
        lock.acquire(blocking, False, 5 if blocking else None)
    assert "conflict (test)" in str(e.value) and armed["n"] == 0
    assert admin.execute("SELECT count(*) FROM dlock.locks WHERE resource = %s",
                         (lock.resource,)).fetchone()[0] == 0
    assert lock.acquire(False) is True and lock.release() is True
