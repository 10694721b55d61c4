# Promises: P6 P8 P16
"""dlock.Election and dlock.observe against a real server."""

import queue
import threading
import time

import pytest

import dlock


def follow(dsn, election, out, stop_after):
    for leader in dlock.observe(dsn, election, poll=0.5, timeout=15):
        out.put(leader)
        if stop_after(leader):
            return


def next_leader(q, timeout=15):
    return q.get(timeout=timeout)


def test_two_candidates_campaign_observe_resign(dsn, name):
    seen = queue.Queue()
    done = threading.Event()
    a = dlock.Election(dsn, name, candidate="a", value="http://a", lease=3)
    b = dlock.Election(dsn, name, candidate="b", value="http://b", lease=3)
    term_a = a.campaign()
    assert a.term == term_a and a.held

    def observer():
        follow(dsn, name, seen, lambda leader: done.is_set() and leader is None)
    obs = threading.Thread(target=observer, daemon=True)
    obs.start()
    first = next_leader(seen)
    assert (first.candidate, first.value, first.term) == ("a", "http://a", term_a)

    got = {}
    campaigner = threading.Thread(target=lambda: got.update(term=b.campaign(wait=20)))
    campaigner.start()
    time.sleep(0.5)
    assert "term" not in got, "b waits while a leads"
    assert a.resign() is True
    campaigner.join(20)
    assert got["term"] > term_a
    second = next_leader(seen)
    if second is None:  # nobody led for a moment between the two terms
        second = next_leader(seen)
    assert (second.candidate, second.term) == ("b", got["term"])
    assert dlock.leader(dsn, name).candidate == "b"

    assert b.proclaim("http://b:2") is True
    third = next_leader(seen)
    assert (third.candidate, third.value) == ("b", "http://b:2")
    assert a.proclaim("x") is False, "a no longer leads"

    done.set()
    assert b.resign() is True
    assert next_leader(seen) is None
    obs.join(15)


def test_election_context_manager_and_loss(dsn, admin, name):
    lost = []
    with pytest.raises(dlock.LockLost):
        with dlock.Election(dsn, name, lease=1.5, on_lost=lost.append) as e:
            assert e.term is not None
            admin.execute("SELECT dlock.break_lock(%s)", (name,))
            assert e.lost.wait(5)
    assert lost == [e]


def test_campaign_timeout(dsn, name):
    with dlock.Election(dsn, name, candidate="leader", lease=5):
        with pytest.raises(dlock.LockTimeout):
            dlock.Election(dsn, name, candidate="other").campaign(wait=0.3)


def test_bad_election_name(dsn):
    with pytest.raises(dlock.InvalidArgument) as info:
        dlock.leader(dsn, "")
    assert info.value.sqlstate == "22023"


def test_observe_through_a_pool(dsn, name):
    import contextlib

    import psycopg

    class TinyPool:
        @contextlib.contextmanager
        def connection(self):
            with psycopg.connect(dsn) as conn:     # not autocommit, like a pool's
                yield conn
                assert conn.autocommit is False, "given back as it came"

    with dlock.Election(dsn, name, candidate="p", value="v", lease=5) as e:
        seen = list(dlock.observe(TinyPool(), name, poll=0.2, timeout=0.5))
        assert [(s.candidate, s.term) for s in seen] == [("p", e.term)]
