"""What the sync and asyncio halves share: argument checks, default
holders, the leader record, and the SQL they send (always with parameters,
never spliced)."""

from __future__ import annotations

import contextlib
import datetime
import inspect
import math
import os
import random
import select
import socket
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union

import psycopg

from ._errors import InvalidArgument

Seconds = Union[int, float, datetime.timedelta]

#: Statements.  Positional arguments only: they work on every version of
#: the extension's SQL (0.1 to 0.3), whose parameter lists grew at the end.
#: Fences and terms are read as text and parsed here (fences()): a loader
#: the application registered for int8 (one returning float or str) must
#: not round them.  So are booleans (truth()), and every parameter that is
#: not text has a cast: a dumper the application registered for int (one
#: sending numeric) must not make the call ambiguous (42883).
#: A second column of a campaign, whose give back must spare a term the
#: candidate led before (give_back_statement): when the statement started,
#: in microseconds since the epoch, as text (an int8 loader of the
#: application must not change it).
_STARTED = ", (extract(epoch FROM statement_timestamp()) * 1000000)::bigint::text"
SQL_TRY_LOCK = "SELECT dlock.try_lock(%s, %s, %s::interval)::text"
SQL_LOCK = "SELECT dlock.lock(%s, %s, %s::interval, %s::interval)::text"
SQL_LOCK_FAIR = "SELECT dlock.lock(%s, %s, %s::interval, %s::interval, true)::text"
#: A shared holding (extension 0.4): by name, so that a server without
#: shared locks says 42883 (no such function) instead of taking an
#: exclusive lock.
SQL_LOCK_SHARED = ("SELECT dlock.lock(%s, %s, %s::interval, %s::interval, fair => %s::boolean,"
                   " shared => true)::text")
#: Permits of a semaphore (extension 0.5): semaphore, holder, max_permits,
#: permits, lease, fair, wait; a server without them says 42883.
SQL_ACQUIRE = ("SELECT dlock.acquire(%s, %s, %s::integer, %s::integer, %s::interval,"
               " fair => %s::boolean, wait => %s::interval)::text")
#: Several resources at once (extension 0.5), all or nothing: resources,
#: holder, lease, shared, wait; the fences in the order given, or NULL.
SQL_LOCK_ALL = ("SELECT dlock.lock_all(%s::text[], %s, %s::interval, shared => %s::boolean,"
                " wait => %s::interval)::text[]")
SQL_RENEW = "SELECT dlock.renew(%s, %s, %s::interval, %s::bigint)"
SQL_UNLOCK = "SELECT dlock.unlock(%s, %s, %s::bigint)"
SQL_UNLOCK_ALL = "SELECT dlock.unlock_all(%s)"
SQL_ASSERT_FENCE = "SELECT dlock.assert_fence(%s, %s::bigint)"
SQL_CHECK = 'SELECT dlock."check"(%s, %s::bigint)::text'
#: The same for every holding of a multi-lock, in one statement (one
#: round trip, one transaction): an array with one result per holding.
_EACH = " FROM unnest(%s::text[], %s::bigint[]) AS t(r, f)"
SQL_RENEW_EACH = "SELECT array_agg(dlock.renew(t.r, %s, %s::interval, t.f))" + _EACH
SQL_UNLOCK_EACH = "SELECT array_agg(dlock.unlock(t.r, %s, t.f))" + _EACH
SQL_ASSERT_FENCE_EACH = "SELECT count(dlock.assert_fence(t.r, t.f))" + _EACH
SQL_CHECK_EACH = 'SELECT bool_and(dlock."check"(t.r, t.f))::text' + _EACH
SQL_CAMPAIGN = "SELECT dlock.campaign(%s, %s, %s, %s::interval, %s::interval)::text" + _STARTED
SQL_PROCLAIM = "SELECT dlock.proclaim(%s, %s, %s, %s::bigint)::text"
SQL_RESIGN = "SELECT dlock.resign(%s, %s, %s::bigint)::text"
SQL_LEADER = ("SELECT candidate, value, term::text, elected_at, expires_at"
              " FROM dlock.leader(%s)")
SQL_CHANNEL = "SELECT dlock.channel(%s)"
SQL_WITHDRAW = "SELECT dlock.withdraw(%s, %s)::text"
SQL_BREAK_LOCK = "SELECT dlock.break_lock(%s)::text"
SQL_PING = "SELECT 1"
#: Sessions (dlock 1.1): open, keep alive, close; a server without them
#: says 42883 to open_session.  Acquisitions in a session name their
#: arguments (every server with sessions has those names) and pass no
#: lease: the holding lives as long as its session.
SQL_OPEN_SESSION = "SELECT dlock.open_session(%s::interval, %s)::text"
#: The keepalive, which also checks the session's holdings in the same
#: statement: the expiry (NULL: the session ended), and the 1-based
#: positions of the (resource, fence) pairs given that are no longer the
#: session's (broken, or released by someone else), as 'i,j' (NULL: none).
SQL_KEEPALIVE = (
    "SELECT dlock.keepalive(%s::bigint),"
    " (SELECT string_agg(t.i::text, ',')"
    " FROM unnest(%s::text[], %s::bigint[]) WITH ORDINALITY AS t(r, f, i)"
    " WHERE NOT EXISTS (SELECT FROM dlock.locks l"
    " WHERE l.resource = t.r AND l.fence = t.f AND l.session = %s::bigint))")
SQL_CLOSE_SESSION = "SELECT dlock.close_session(%s::bigint)"
SQL_LOCK_IN = ("SELECT dlock.lock(%s, %s, wait => %s::interval, fair => %s::boolean,"
               " shared => %s::boolean, session => %s::bigint)::text")
SQL_ACQUIRE_IN = ("SELECT dlock.acquire(%s, %s, %s::integer, %s::integer, wait => %s::interval,"
                  " fair => %s::boolean, session => %s::bigint)::text")
SQL_LOCK_ALL_IN = ("SELECT dlock.lock_all(%s::text[], %s, wait => %s::interval,"
                   " shared => %s::boolean, session => %s::bigint)::text[]")
SQL_CAMPAIGN_IN = ("SELECT dlock.campaign(%s, %s, %s, wait => %s::interval, session => %s::bigint)::text"
                   + _STARTED)
#: Give backs that end only what the acquisition got: a semaphore's
#: holding if it has just the permits this call took (unlock takes every
#: permit of the holder; when the holder had some before, or another call
#: added some, they all stay until it is released), a term elected since
#: the campaign's statement began (the last parameter).
SQL_GIVE_BACK_PERMITS = ("SELECT dlock.unlock(l.resource, l.holder, l.fence) FROM dlock.locks l"
                         " WHERE l.resource = %s AND l.holder = %s AND l.fence = %s::bigint"
                         " AND l.permits = %s::integer")
SQL_GIVE_BACK_TERM = ("SELECT dlock.resign(%s, %s, l.term) FROM dlock.leader(%s) l"
                      " WHERE l.term = %s::bigint"
                      " AND l.elected_at >= timestamptz 'epoch' + %s::bigint * interval '1 microsecond'")
#: Whether the server's dlock.lock takes ``shared`` (SQL 0.4).
SQL_HAS_SHARED = ("SELECT EXISTS (SELECT FROM pg_catalog.pg_proc p"
                  " JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
                  " WHERE n.nspname = 'dlock' AND p.proname = 'lock'"
                  " AND 'shared' = ANY (p.proargnames))::text")
#: Reads of dlock.locks (the tooz driver's groups and members): live
#: holdings of one resource, or of every resource under a prefix; with
#: the prefix twice, only those directly under it (no further '/').
_LIVE = " AND holder IS NOT NULL AND NOT expired"
SQL_IS_HELD = "SELECT EXISTS (SELECT FROM dlock.locks WHERE resource = %s" + _LIVE + ")::text"
SQL_HOLDING = "SELECT value, acquired_at, renewed_at FROM dlock.locks WHERE resource = %s" + _LIVE
SQL_HOLDINGS_UNDER = ("SELECT resource, value, acquired_at, renewed_at FROM dlock.locks"
                      " WHERE starts_with(resource, %s)" + _LIVE)
SQL_RESOURCES_JUST_UNDER = ("SELECT resource FROM dlock.locks WHERE starts_with(resource, %s)"
                            " AND strpos(substr(resource, length(%s) + 1), '/') = 0" + _LIVE)
SQL_COUNT = "SELECT count FROM dlock.locks WHERE resource = %s"


def lock_statement(lock: Any, wait: Optional[float]) -> "tuple[str, tuple]":
    """The statement (and its parameters) that acquires LOCK (a sync or
    asyncio Lock), waiting up to WAIT seconds; it returns the fence or NULL."""
    if lock._session is not None:
        return SQL_LOCK_IN, (lock.resource, lock.holder, interval(wait), lock.fair,
                             lock.shared, lock._session.id)
    params = (lock.resource, lock.holder, interval(lock.lease), interval(wait))
    if lock.shared:
        return SQL_LOCK_SHARED, params + (lock.fair,)
    return (SQL_LOCK_FAIR if lock.fair else SQL_LOCK), params


def semaphore_statement(sem: Any, wait: Optional[float]) -> "tuple[str, tuple]":
    """The statement that takes SEM's permits (a sync or asyncio Semaphore)."""
    if sem._session is not None:
        return SQL_ACQUIRE_IN, (sem.resource, sem.holder, sem.max_permits, sem.permits,
                                interval(wait), sem.fair, sem._session.id)
    return SQL_ACQUIRE, (sem.resource, sem.holder, sem.max_permits, sem.permits,
                         interval(sem.lease), sem.fair, interval(wait))


def lock_all_statement(multi: Any, wait: Optional[float]) -> "tuple[str, tuple]":
    """The statement that takes every resource of MULTI (a MultiLock)."""
    if multi._session is not None:
        return SQL_LOCK_ALL_IN, (list(multi.resources), multi.holder, interval(wait),
                                 multi.shared, multi._session.id)
    return SQL_LOCK_ALL, (list(multi.resources), multi.holder, interval(multi.lease),
                          multi.shared, interval(wait))


# What renewal, release, assert_fence and check send for a leased object's
# holdings (one or several); every rule about them is here, once.
def campaign_statement(e: Any, wait: Optional[float]) -> "tuple[str, tuple]":
    """The statement that campaigns in E's election (an Election)."""
    if e._session is not None:
        return SQL_CAMPAIGN_IN, (e.resource, e.holder, e.value, interval(wait), e._session.id)
    return SQL_CAMPAIGN, (e.resource, e.holder, e.value, interval(e.lease), interval(wait))


def keepalive_statement(sid: int, pairs: "list[tuple]") -> "tuple[str, tuple]":
    """The keepalive of session SID, checking PAIRS ((resource, fence,
    ...) of its holdings)."""
    return SQL_KEEPALIVE, (sid, [p[0] for p in pairs], [p[1] for p in pairs], sid)


def renew_statement(obj: Any) -> "tuple[str, tuple]":
    if len(obj._fences) == 1:
        return SQL_RENEW, (obj._names[0], obj.holder, interval(obj.lease), obj._fences[0])
    return SQL_RENEW_EACH, (obj.holder, interval(obj.lease), list(obj._names), list(obj._fences))


def unlock_statement(obj: Any) -> "tuple[str, tuple]":
    if len(obj._fences) == 1:
        return SQL_UNLOCK, (obj._names[0], obj.holder, obj._fences[0])
    return SQL_UNLOCK_EACH, (obj.holder, list(obj._names), list(obj._fences))


def give_back_statement(obj: Any, started: Optional[int]) -> "Optional[tuple[str, tuple]]":
    """What gives back OBJ's holding (_fences) granted to an acquisition
    that will not return it (cancelled, or its dating failed); STARTED: its
    statement's second column (a campaign's start).  A release takes a
    re-entry's count off; a semaphore's or a term's give back ends only
    what this call got, and a term's none while another Election object
    of this process campaigns for or leads with the same candidate (it may
    have won that very term): None, nothing to send."""
    if obj._kind == "semaphore":
        return SQL_GIVE_BACK_PERMITS, (obj._names[0], obj.holder, obj._fences[0], obj.permits)
    if obj._kind == "election" and started is not None:
        if not campaign_alone(obj):
            return None
        return SQL_GIVE_BACK_TERM, (obj._names[0], obj.holder, obj._names[0], obj._fences[0],
                                    started)
    return obj._release_statement()


#: Every Election object of this process (sync and asyncio), for
#: campaign_alone.
_elections: "weakref.WeakSet[Any]" = weakref.WeakSet()
_elections_lock = threading.Lock()


def register_election(e: Any) -> None:
    with _elections_lock:
        _elections.add(e)


def campaign_alone(e: Any) -> bool:
    """Whether no other Election object of this process campaigns in E's
    election for E's candidate or leads it (a session's campaigns share
    the session's holder)."""
    with _elections_lock:
        return not any(o is not e and o.resource == e.resource and o.holder == e.holder
                       and (o._campaigning or o._fences is not None) for o in _elections)


def assert_fence_statement(obj: Any) -> "tuple[str, tuple]":
    if len(obj._fences) == 1:
        return SQL_ASSERT_FENCE, (obj._names[0], obj._fences[0])
    return SQL_ASSERT_FENCE_EACH, (list(obj._names), list(obj._fences))


def check_statement(obj: Any) -> "tuple[str, tuple]":
    if len(obj._fences) == 1:
        return SQL_CHECK, (obj._names[0], obj._fences[0])
    return SQL_CHECK_EACH, (list(obj._names), list(obj._fences))


def truth(value: Any) -> bool:
    """A boolean the server sent as text (``::text``): true only for
    'true' (NULL, None, is false)."""
    return value == "true"


def all_held(result: Any) -> bool:
    """Whether a renewal's or release's RESULT (one value, or an array of
    one per holding) says every holding was still there: a NULL for any
    of them means that one was lost, and so the whole object is."""
    if isinstance(result, list):
        return bool(result) and all(r is not None for r in result)
    return result is not None


def check_count(value: Any, what: str) -> int:
    """A number of permits: an int (the server checks its range, 22023)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an int, not {type(value).__name__}", "22023")
    return value


def check_resources(value: Any) -> "tuple[str, ...]":
    """A multi-lock's resources: a list or tuple of str (the server refuses
    an empty one, a resource named twice and bad names, 22023)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidArgument("resources must be a list of str, not "
                              f"{type(value).__name__}", "22023")
    return tuple(check_text(r, "each resource") for r in value)


def seconds(value: Optional[Seconds], what: str, *, zero_ok: bool = False,
            none_ok: bool = False) -> Optional[float]:
    """VALUE as seconds, checked like the server checks it (22023)."""
    if value is None:
        if none_ok:
            return None
        raise InvalidArgument(f"{what} must not be None", "22023")
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(f"{what} must be a number of seconds or a timedelta, "
                              f"not {type(value).__name__}", "22023")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise InvalidArgument(f"{what} must be {'a non-negative' if zero_ok else 'a positive'}"
                              f" finite number of seconds, not {value!r}", "22023")
    return value


def interval(value: Optional[float]) -> Optional[datetime.timedelta]:
    return None if value is None else datetime.timedelta(seconds=value)


def default_holder() -> str:
    """A holder text unique to one lock object: host, pid and a UUID."""
    host = socket.gethostname()[:100]
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex}"


def check_text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{what} must be a str, not {type(value).__name__}", "22023")
    return value


@dataclass(frozen=True)
class Leader:
    """The leader of an election, as ``dlock.leader()`` shows it."""

    candidate: str
    value: Optional[str]
    term: int
    elected_at: datetime.datetime
    expires_at: datetime.datetime


def leader_from_row(row: Optional[tuple]) -> Optional[Leader]:
    if row is None:
        return None
    candidate, value, term, elected_at, expires_at = row
    return Leader(candidate, value, int(term), elected_at, expires_at)


def fences(value: Any) -> "Optional[list[int]]":
    """An acquisition's result read as text (one fence, or a multi-lock's
    array of them) as a list of ints; None for NULL (not acquired)."""
    if value is None:
        return None
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value)]


def lost_margin(lease: float) -> float:
    """How long before the lease's end (as the client measures it from the
    moment it sent the last successful acquisition or renewal) the lock is
    declared lost when no renewal got through: a sixth of the lease, at
    most two seconds: slack for a busy client whose timer fires late.  The
    server's lease began after that moment, so loss is signalled before
    the server's expiry, never after."""
    return min(2.0, lease / 6.0)


def try_bound(lease: float, valid_from: float, now: float) -> float:
    """How long one renewal or keepalive try may take, for its connection
    and its answer, before it is cut: a third of the lease, never past the
    moment the loss is declared (lost_margin).  (Half the time left was
    tried: CI under load lost more leases with it.)"""
    left = valid_from + lease - lost_margin(lease) - now
    return max(0.01, min(left, lease / 3.0))


def answer_bound(lease: float, valid_from: float, ends: float, sent_at: float) -> float:
    """How long the statement of a try that ENDS (try_bound) waits for its
    answer, sent at SENT_AT: to the try's end, but a sixth of the lease at
    least (not past the loss) when the connection took most of the try: a
    new connection that got through is not wasted (libpq's connect_timeout,
    2 s at least, may outlast the try)."""
    left = valid_from + lease - lost_margin(lease) - sent_at
    return max(0.01, ends - sent_at, min(lease / 6.0, left))


def retry_at(lease: float, started: float) -> float:
    """When the try after a failed one starts: a ninth of the lease (at most
    a second) after the failed one started, so a try that failed slowly
    (cut at its bound) is followed at once.  Counted from its end, the
    retry after a stalled connection had 0.17 s of a 3 s lease left."""
    return started + max(0.05, min(1.0, lease / 9.0))


def needs_confirmation(lease: float, sent_at: float) -> bool:
    """Whether an acquisition sent at SENT_AT (monotonic) came back too
    late to date its lease from SENT_AT: it waited a third of the lease or
    more (behind a holder, or for the server).  The server granted it at
    some moment of that wait, unknown here; dating the lease from SENT_AT
    would declare it lost at once.  A renewal sent now, on the same
    connection, dates it instead (the first renewal was due anyway)."""
    return time.monotonic() - sent_at >= lease / 3.0


#: How long release() waits for the server by default (seconds); then
#: the connection is cut and the lease ends by itself.
RELEASE_TIMEOUT = 10.0
# How many times an acquisition is sent in all when the server rolls it
# back and asks for a retry (40001, 40P01: _errors.retryable).
ACQUIRE_TRIES = 10


def retry_pause(tries: int) -> float:
    """Seconds to wait before sending again an acquisition the server rolled
    back (40001, 40P01) for the TRIES-th time: random, up to 2**TRIES ms (at
    most 32), so that serializable callers that conflicted do not meet at
    once again (ten immediate tries all failed under load)."""
    return random.uniform(0.0005, 0.001 * min(32, 2 ** tries))


def cut_socket(conn: Any) -> None:
    """Shut CONN's socket down: a statement waiting on it fails at once
    (psycopg.OperationalError).  A dup of the socket is shut down, so the
    connection itself is closed only by its owner."""
    try:
        s = socket.socket(fileno=os.dup(conn.fileno()))
    except Exception:  # noqa: BLE001 - closed meanwhile: OSError or psycopg's
        return
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    s.close()


def takes_timeout(pool: Any) -> bool:
    """Whether POOL.connection() takes a timeout (psycopg_pool's does)."""
    try:
        return "timeout" in inspect.signature(pool.connection).parameters
    except (TypeError, ValueError):
        return False


@contextlib.contextmanager
def cut_after(conn: Any, timeout: Optional[float],
              later: Callable[[float, Callable[[], None]], Any]) -> Iterator[None]:
    """Shut CONN's socket down if the block lasts longer than TIMEOUT
    seconds (None: no limit): a statement waiting for an unresponsive
    server then fails (psycopg.OperationalError) instead of hanging.
    LATER(delay, fn) schedules the cut (a thread's timer, or the event
    loop's) and returns something with cancel()."""
    if timeout is None:
        yield
        return
    guard = threading.Lock()
    state = {"done": False, "cut": False}

    def cut() -> None:
        with guard:
            if not state["done"]:
                state["cut"] = True
                cut_socket(conn)
    handle = later(timeout, cut)
    try:
        yield
    except psycopg.OperationalError as e:
        if state["cut"]:
            raise psycopg.OperationalError(
                f"dlock: no answer within {timeout} s; the connection was cut") from e
        raise
    finally:
        with guard:
            state["done"] = True
        handle.cancel()


def closed_by_server(conn: Any) -> Optional[bool]:
    """Whether CONN, idle, was closed by its server (terminated, restarted,
    failed over, idle_session_timeout, a proxy's timeout), without a round
    trip: True when its socket shows the end of the connection; False when
    it has nothing to read (an idle connection has nothing unless the
    server ended it, or sent a notice or a notification); None when it
    had something but no end yet (a notification, or a FATAL whose end is
    still on its way): the caller pings it (usable)."""
    if conn.closed or conn.broken:
        return True
    unsure = False
    for _ in range(4):
        try:
            if not readable(conn.fileno(), 0):
                return None if unsure else False
        except OSError:
            return True
        try:
            conn.pgconn.consume_input()
        except psycopg.OperationalError:
            return True
        if conn.pgconn.status != psycopg.pq.ConnStatus.OK:
            return True
        unsure = True
    return None


def pool_tries(pool: Any) -> int:
    """How many of POOL's connections a call tries while they were closed
    by the server (closed_by_server): each it may hold, and one more."""
    size = getattr(pool, "max_size", None)
    return min(64, size + 1) if isinstance(size, int) and size > 0 else 16


def readable(fd: int, timeout: float) -> bool:
    """Whether FD is readable (or its peer hung up) within TIMEOUT s; poll
    where there is one: no limit on the descriptor's number (select's is
    1024); select elsewhere (Windows)."""
    if not hasattr(select, "poll"):
        return bool(select.select([fd], [], [], max(0.0, timeout))[0])
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLPRI)
    return bool(p.poll(max(0, math.ceil(timeout * 1000))))
