"""A tooz coordination driver backed by dlock (entry point ``dlock`` of
``tooz.backends``):

    coord = tooz.coordination.get_coordinator(
        "dlock://user@host:5432/dbname?timeout=30", b"member-1")

How tooz's objects map onto dlock holdings (all with the server's clock):

- a lock is a holding of ``tooz/lock/NAME`` by a holder unique to the lock
  object, leased for ``lock_timeout`` seconds (default: ``timeout``) and
  renewed by ``heartbeat()`` (run it, or ``start(start_heart=True)``);
- a group is a holding of ``tooz/group/G`` by the holder ``tooz`` with a
  lease of 100 years (it lives until ``delete_group``);
- a member is a holding of ``tooz/group/G/member/M`` by ``tooz:M``, leased
  for ``timeout`` seconds (default 30) and renewed by ``heartbeat()``: a
  member that stops beating leaves its groups when its lease ends; its
  capabilities are the holding's value (msgpack, base64);
- the leader of group G is the leader of the election ``tooz/group/G/leader``
  (``dlock.campaign`` with ``wait => 0``, retried by ``run_watchers``, so
  candidates are served in the order they first ran: dlock's fair queue).

Ids are percent-encoded into resource names.  Connections come from a
small pool of the driver's own (autocommit, no server-side prepared
statements: fine behind pgbouncer in transaction mode), so that several
threads can wait for locks at once.  Shared locks are the server's shared
holdings (``lock(..., shared => true)``, the C extension's SQL 0.4): each
shared ``acquire`` of one lock object re-enters its holding, each
``release`` gives one back (both editions; the portable one from its
0.4).  On a server without them (older SQL) ``acquire(shared=True)``
raises tooz.NotImplemented.

``acquire(blocking, shared, timeout)`` takes its arguments as every tooz
Debian ships calls them (tooz 9's context manager passes all three
positionally)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import logging
import threading
import time
import uuid
import weakref
from concurrent import futures
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple
from urllib.parse import quote, unquote_to_bytes

import psycopg
import psycopg.conninfo
import tooz
from tooz import coordination, locking, utils

from . import _common as c
from ._errors import Error as DlockError
from ._errors import retryable

log = logging.getLogger("dlock.tooz")

GROUP_HOLDER = "tooz"
GROUP_LEASE = datetime.timedelta(days=36500)
_OWN_OPTIONS = {"timeout", "lock_timeout", "pool_size"}


def _enc(value: Any) -> str:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return quote(bytes(value), safe="")


def _dec(text: str) -> bytes:
    return unquote_to_bytes(text)


def _holder(text: str) -> str:
    return text if len(text.encode()) <= 255 else "tooz:#" + hashlib.sha256(text.encode()).hexdigest()


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except psycopg.OperationalError as e:
        if getattr(e, "sqlstate", None) is None or str(getattr(e, "sqlstate", "")).startswith("08"):
            utils.raise_with_cause(coordination.ToozConnectionError, str(e), cause=e)
        utils.raise_with_cause(tooz.ToozError, str(e), cause=e)
    except (psycopg.Error, DlockError) as e:
        utils.raise_with_cause(tooz.ToozError, str(e), cause=e)


def _row(conn: psycopg.Connection, sql: str, params: tuple = ()) -> Optional[Tuple[Any, ...]]:
    """Run one of the client's statements (_common.SQL_*); its first row.
    psycopg's errors pass unchanged (_translated makes them tooz's)."""
    return conn.execute(sql, params, prepare=False).fetchone()


def _value(conn: psycopg.Connection, sql: str, params: tuple = ()) -> Any:
    row = _row(conn, sql, params)
    return None if row is None else row[0]


def _again(send: Callable[[], Any]) -> Any:
    """SEND's answer, sent again while the server rolls it back and asks
    for a retry (40001: a serializable caller's conflict; 40P01): that
    try did nothing.  _common.ACQUIRE_TRIES tries in all."""
    for n in range(1, c.ACQUIRE_TRIES + 1):
        try:
            return send()
        except psycopg.Error as e:
            if n == c.ACQUIRE_TRIES or not retryable(e):
                raise
    raise AssertionError("unreachable")


def _left(deadline: Optional[float]) -> Optional[datetime.timedelta]:
    """The wait left until DEADLINE (monotonic; None: no limit)."""
    return None if deadline is None else datetime.timedelta(
        seconds=max(0.0, deadline - time.monotonic()))


def _result(fn: Callable[..., Any], *args: Any) -> coordination.CoordAsyncResult:
    """Run FN now; its result (or exception) comes out of .get()."""
    fut: futures.Future = futures.Future()
    try:
        with _translated():
            fut.set_result(fn(*args))
    except BaseException as e:  # noqa: B902 -- handed to .get()
        fut.set_exception(e)
    return coordination.CoordinatorResult(fut)


class _Pool:
    """Idle connections, reused; each borrower has one to itself."""

    def __init__(self, conninfo: str, keep: int) -> None:
        self.conninfo = conninfo
        self.keep = keep
        self._idle: List[psycopg.Connection] = []
        self._mutex = threading.Lock()
        self._closed = False

    def open(self) -> None:
        with self._mutex:
            self._closed = False
        with self.connection() as conn:
            _row(conn, c.SQL_PING)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with self._mutex:
            conn = self._idle.pop() if self._idle else None
        if conn is None or conn.closed:
            conn = psycopg.connect(self.conninfo, autocommit=True, prepare_threshold=None)
        ok = False
        try:
            yield conn
            ok = True
        finally:
            if ok or not (conn.broken or conn.closed):
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.close()
                with self._mutex:
                    if not self._closed and not conn.closed and len(self._idle) < self.keep:
                        self._idle.append(conn)
                        conn = None  # type: ignore[assignment]
            if conn is not None:
                conn.close()

    def close(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
            self._closed = True
        for conn in idle:
            conn.close()


class DlockLock(locking.Lock):
    """A tooz lock: exclusive, not re-entrant (a second acquire of the same
    object waits for its release, or returns False when not blocking)."""

    def __init__(self, coord: "DlockDriver", name: Any) -> None:
        super().__init__(name)
        self._coord = coord
        self.resource = "tooz/lock/" + _enc(name)
        self.holder = _holder(f"tooz:{_enc(coord._member_id)}:{uuid.uuid4().hex}")
        self._local = threading.Lock()
        self._fence: Optional[int] = None
        self._shared = 0

    def acquire(self, blocking: Any = True, shared: bool = False,
                timeout: Optional[float] = None) -> bool:
        """BLOCKING: True (wait), False (one try) or seconds to wait at
        most; TIMEOUT (tooz 9's context manager passes it, positionally
        after SHARED): seconds to wait at most when blocking."""
        blocking, wait_at_most = utils.convert_blocking(blocking)
        timeout = wait_at_most if timeout is None or not blocking else float(timeout)
        if shared:
            return self._acquire_shared(blocking, timeout)
        if not self._local.acquire(blocking, -1 if timeout is None else timeout):
            return False
        deadline = (time.monotonic() if not blocking else
                    None if timeout is None else time.monotonic() + timeout)

        def send() -> Any:
            with self._coord._pool.connection() as conn:
                return _value(conn, c.SQL_LOCK, (self.resource, self.holder,
                                                 self._coord._lock_lease, _left(deadline)))
        try:
            with _translated():
                fence = _again(send)
        except BaseException:
            self._local.release()
            raise
        if fence is None:
            self._local.release()
            return False
        self._fence = int(fence)   # read as text: an int8 loader cannot round it
        self._coord._acquired.add(self)
        return True

    def _acquire_shared(self, blocking: bool, timeout: Optional[float]) -> bool:
        if not self._coord._has_shared():
            raise tooz.NotImplemented(
                "shared locks need dlock's shared mode (lock(..., shared => true): the C"
                " extension's SQL 0.4), which this server's dlock does not have")
        # The server's shared mode (try_lock/lock with shared => true):
        # every shared acquisition by this object re-enters its holding.
        deadline = (time.monotonic() if not blocking else
                    None if timeout is None else time.monotonic() + timeout)

        def send() -> Any:
            with self._coord._pool.connection() as conn:
                return _value(conn, c.SQL_LOCK_SHARED, (self.resource, self.holder,
                                                        self._coord._lock_lease, _left(deadline), False))
        with _translated():
            fence = _again(send)
        if fence is None:
            return False
        self._fence = int(fence)   # read as text: an int8 loader cannot round it
        self._shared += 1
        self._coord._acquired.add(self)
        return True

    def release(self) -> bool:
        if self._fence is None:
            return False
        def send() -> Any:
            with self._coord._pool.connection() as conn:
                return _value(conn, c.SQL_UNLOCK, (self.resource, self.holder, self._fence))
        with _translated():
            left = _again(send)
        if self._shared:
            self._shared -= 1
            if self._shared and left:
                return True
        self._fence = None
        self._shared = 0
        self._coord._acquired.discard(self)
        if self._local.locked():
            self._local.release()
        return left is not None

    def heartbeat(self) -> bool:
        """Renew the lease; False if not held (any more)."""
        if self._fence is None:
            return False
        with _translated(), self._coord._pool.connection() as conn:
            expiry = _value(conn, c.SQL_RENEW, (self.resource, self.holder,
                                                self._coord._lock_lease, self._fence))
        return expiry is not None

    def is_still_owner(self) -> bool:
        if self._fence is None:
            return False
        with _translated(), self._coord._pool.connection() as conn:
            return c.truth(_value(conn, c.SQL_CHECK, (self.resource, self._fence)))

    def break_(self) -> bool:
        with _translated(), self._coord._pool.connection() as conn:
            return c.truth(_value(conn, c.SQL_BREAK_LOCK, (self.resource,)))


class DlockDriver(coordination.CoordinationDriverCachedRunWatchers):
    """tooz on dlock: see the module's documentation."""

    CHARACTERISTICS = (
        coordination.Characteristics.DISTRIBUTED_ACROSS_THREADS,
        coordination.Characteristics.DISTRIBUTED_ACROSS_PROCESSES,
        coordination.Characteristics.DISTRIBUTED_ACROSS_HOSTS,
        coordination.Characteristics.LINEARIZABLE,
        coordination.Characteristics.SEQUENTIAL,
        coordination.Characteristics.SAME_VIEW_ACROSS_CLIENTS,
    )

    def __init__(self, member_id: Any, parsed_url: Any, options: Dict[str, List[str]]) -> None:
        super().__init__(member_id, parsed_url, options)
        opts = {k: v[-1] if isinstance(v, list) else v for k, v in (options or {}).items()}
        self.timeout = float(opts.get("timeout", 30))
        self._lock_lease = datetime.timedelta(seconds=float(opts.get("lock_timeout", self.timeout)))
        self._member_lease = datetime.timedelta(seconds=self.timeout)
        params: Dict[str, Any] = {k: v for k, v in opts.items() if k not in _OWN_OPTIONS}
        if parsed_url.hostname:
            params.setdefault("host", parsed_url.hostname)
        if parsed_url.port:
            params.setdefault("port", parsed_url.port)
        if parsed_url.username:
            params.setdefault("user", parsed_url.username)
        if parsed_url.password:
            params.setdefault("password", parsed_url.password)
        dbname = (parsed_url.path or "").lstrip("/")
        if dbname:
            params.setdefault("dbname", dbname)
        self._conninfo = psycopg.conninfo.make_conninfo(**params)
        self._pool = _Pool(self._conninfo, int(opts.get("pool_size", 4)))
        self._candidate = _holder("tooz:" + _enc(member_id))
        self._leading: Dict[Any, int] = {}
        self._acquired: "weakref.WeakSet[DlockLock]" = weakref.WeakSet()
        self._shared_ok: Optional[bool] = None

    # ---- names
    @staticmethod
    def _group(group_id: Any) -> str:
        return "tooz/group/" + _enc(group_id)

    def _member(self, group_id: Any, member_id: Any = None) -> str:
        return self._group(group_id) + "/member/" + _enc(
            self._member_id if member_id is None else member_id)

    def _election(self, group_id: Any) -> str:
        return self._group(group_id) + "/leader"

    def _member_holder(self, member_id: Any = None) -> str:
        return _holder("tooz:" + _enc(self._member_id if member_id is None else member_id))

    # ---- life cycle
    def _start(self) -> None:
        with _translated():
            self._pool.open()
        self._leading = {}

    def _stop(self) -> None:
        for lock in list(self._acquired):
            with contextlib.suppress(tooz.ToozError):
                lock.release()
        with contextlib.suppress(tooz.ToozError), _translated(), self._pool.connection() as conn:
            for group_id in list(self._leading):
                _row(conn, c.SQL_RESIGN, (self._election(group_id), self._candidate, None))
            self._leading = {}
            for group_id in list(self._hooks_elected_leader):
                with contextlib.suppress(psycopg.errors.UndefinedFunction):
                    _row(conn, c.SQL_WITHDRAW, (self._election(group_id), self._candidate))
        self._pool.close()

    def _has_shared(self) -> bool:
        if self._shared_ok is None:
            with _translated(), self._pool.connection() as conn:
                self._shared_ok = c.truth(_value(conn, c.SQL_HAS_SHARED))
        return self._shared_ok

    # ---- helpers (in a connection of the pool)
    def _group_exists(self, conn: psycopg.Connection, group_id: Any) -> bool:
        return c.truth(_value(conn, c.SQL_IS_HELD, (self._group(group_id),)))

    def _members(self, conn: psycopg.Connection, group_id: Any) -> List[Tuple[Any, ...]]:
        prefix = self._group(group_id) + "/member/"
        return conn.execute(c.SQL_HOLDINGS_UNDER, (prefix,), prepare=False).fetchall()

    @staticmethod
    def _dump(capabilities: Any) -> str:
        return base64.b64encode(utils.dumps(capabilities)).decode("ascii")

    @staticmethod
    def _load(value: Optional[str]) -> Any:
        return b"" if value is None else utils.loads(base64.b64decode(value))

    # ---- groups
    def create_group(self, group_id: Any) -> coordination.CoordAsyncResult:
        def create() -> None:
            with self._pool.connection() as conn, conn.transaction():
                _row(conn, c.SQL_TRY_LOCK, (self._group(group_id), GROUP_HOLDER, GROUP_LEASE))
                count = _row(conn, c.SQL_COUNT, (self._group(group_id),))
                if count is None or count[0] != 1:
                    raise _Rollback(coordination.GroupAlreadyExist(group_id))
        return _result(_unwrap(create))

    def get_groups(self) -> coordination.CoordAsyncResult:
        def groups() -> List[bytes]:
            with self._pool.connection() as conn:
                rows = conn.execute(c.SQL_RESOURCES_JUST_UNDER, ("tooz/group/", "tooz/group/"),
                                    prepare=False).fetchall()
            return [_dec(r[0][len("tooz/group/"):]) for r in rows]
        return _result(groups)

    def delete_group(self, group_id: Any) -> coordination.CoordAsyncResult:
        def delete() -> None:
            with self._pool.connection() as conn:
                if not self._group_exists(conn, group_id):
                    raise coordination.GroupNotCreated(group_id)
                if self._members(conn, group_id):
                    raise coordination.GroupNotEmpty(group_id)
                _row(conn, c.SQL_UNLOCK, (self._group(group_id), GROUP_HOLDER, None))
        return _result(delete)

    def _destroy_group(self, group_id: Any) -> None:
        """Make a group vanish with its members (tooz's tests use it); the
        members' holdings are broken where the caller may (else they end
        with their leases)."""
        with _translated(), self._pool.connection() as conn:
            _row(conn, c.SQL_UNLOCK, (self._group(group_id), GROUP_HOLDER, None))
            for row in self._members(conn, group_id):
                with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
                    _row(conn, c.SQL_BREAK_LOCK, (row[0],))

    def join_group(self, group_id: Any, capabilities: Any = b"") -> coordination.CoordAsyncResult:
        def join() -> None:
            with self._pool.connection() as conn, conn.transaction():
                if not self._group_exists(conn, group_id):
                    raise _Rollback(coordination.GroupNotCreated(group_id))
                member = self._member(group_id)
                fence = _value(conn, c.SQL_TRY_LOCK,
                               (member, self._member_holder(), self._member_lease))
                count = _row(conn, c.SQL_COUNT, (member,))
                if fence is None or count is None or count[0] != 1:
                    raise _Rollback(coordination.MemberAlreadyExist(group_id, self._member_id))
                _row(conn, c.SQL_PROCLAIM,
                     (member, self._member_holder(), self._dump(capabilities), None))
            self._joined_groups.add(group_id)
        return _result(_unwrap(join))

    def leave_group(self, group_id: Any) -> coordination.CoordAsyncResult:
        def leave() -> None:
            with self._pool.connection() as conn:
                left = _value(conn, c.SQL_UNLOCK,
                              (self._member(group_id), self._member_holder(), None))
                self._joined_groups.discard(group_id)
                if left is None:
                    if not self._group_exists(conn, group_id):
                        raise coordination.GroupNotCreated(group_id)
                    raise coordination.MemberNotJoined(group_id, self._member_id)
        return _result(leave)

    def get_members(self, group_id: Any) -> coordination.CoordAsyncResult:
        def members() -> Set[bytes]:
            with self._pool.connection() as conn:
                rows = self._members(conn, group_id)
                if not rows and not self._group_exists(conn, group_id):
                    raise coordination.GroupNotCreated(group_id)
            prefix = len(self._group(group_id) + "/member/")
            return {_dec(r[0][prefix:]) for r in rows}
        return _result(members)

    def get_members_with_capabilities(self, group_id: Any) -> coordination.CoordAsyncResult:
        """Every member with its capabilities, in one query (tooz 9's API;
        None for a member that joined without any)."""
        def members() -> Dict[bytes, Any]:
            with self._pool.connection() as conn:
                rows = self._members(conn, group_id)
                if not rows and not self._group_exists(conn, group_id):
                    raise coordination.GroupNotCreated(group_id)
            prefix = len(self._group(group_id) + "/member/")
            result = {}
            for r in rows:
                capabilities = self._load(r[1])
                result[_dec(r[0][prefix:])] = None if capabilities == b"" else capabilities
            return result
        return _result(members)

    def _member_row(self, conn: psycopg.Connection, group_id: Any, member_id: Any) -> Tuple[Any, ...]:
        row = _row(conn, c.SQL_HOLDING, (self._member(group_id, member_id),))
        if row is None:
            if not self._group_exists(conn, group_id):
                raise coordination.GroupNotCreated(group_id)
            raise coordination.MemberNotJoined(group_id, member_id)
        return row

    def get_member_capabilities(self, group_id: Any, member_id: Any) -> coordination.CoordAsyncResult:
        def capabilities() -> Any:
            with self._pool.connection() as conn:
                return self._load(self._member_row(conn, group_id, member_id)[0])
        return _result(capabilities)

    def get_member_info(self, group_id: Any, member_id: Any) -> coordination.CoordAsyncResult:
        def info() -> Dict[str, Any]:
            with self._pool.connection() as conn:
                value, created, updated = self._member_row(conn, group_id, member_id)
            return {"capabilities": self._load(value), "created_at": created,
                    "updated_at": updated or created}
        return _result(info)

    def update_capabilities(self, group_id: Any, capabilities: Any) -> coordination.CoordAsyncResult:
        def update() -> None:
            with self._pool.connection() as conn:
                ok = _value(conn, c.SQL_PROCLAIM, (self._member(group_id), self._member_holder(),
                                                   self._dump(capabilities), None))
                if not c.truth(ok):
                    if not self._group_exists(conn, group_id):
                        raise coordination.GroupNotCreated(group_id)
                    raise coordination.MemberNotJoined(group_id, self._member_id)
        return _result(update)

    # ---- leaders
    def get_leader(self, group_id: Any) -> coordination.CoordAsyncResult:
        def leader() -> Optional[bytes]:
            with self._pool.connection() as conn:
                row = _row(conn, c.SQL_LEADER, (self._election(group_id),))
                if row is None and not self._group_exists(conn, group_id):
                    raise coordination.GroupNotCreated(group_id)
            if row is None:
                return None
            return _dec(row[0][len("tooz:"):])
        return _result(leader)

    def run_elect_coordinator(self) -> List[Any]:
        results: List[Any] = []
        for group_id, hooks in list(self._hooks_elected_leader.items()):
            with _translated(), self._pool.connection() as conn:
                text = _value(conn, c.SQL_CAMPAIGN,
                              (self._election(group_id), self._candidate, None,
                               self._member_lease, datetime.timedelta(0)))
            term = None if text is None else int(text)   # read as text: never rounded
            if term is None:
                self._leading.pop(group_id, None)
            elif self._leading.get(group_id) != term:
                self._leading[group_id] = term
                results.extend(hooks.run(coordination.LeaderElected(group_id, self._member_id)))
        return results

    def run_watchers(self, timeout: Optional[float] = None) -> List[Any]:
        result = super().run_watchers(timeout=timeout)
        result.extend(self.run_elect_coordinator())
        return result

    def stand_down_group_leader(self, group_id: Any) -> None:
        with _translated(), self._pool.connection() as conn:
            _row(conn, c.SQL_RESIGN, (self._election(group_id), self._candidate, None))
        self._leading.pop(group_id, None)

    def watch_join_group(self, group_id: Any, callback: Callable[..., Any]) -> None:
        self._require_group(group_id)
        super().watch_join_group(group_id, callback)

    def watch_leave_group(self, group_id: Any, callback: Callable[..., Any]) -> None:
        self._require_group(group_id)
        super().watch_leave_group(group_id, callback)

    def _require_group(self, group_id: Any) -> None:
        with _translated(), self._pool.connection() as conn:
            if not self._group_exists(conn, group_id):
                raise coordination.GroupNotCreated(group_id)

    # ---- locks and liveness
    def get_lock(self, name: Any) -> DlockLock:
        return DlockLock(self, name)

    def heartbeat(self) -> float:
        """Renew this member's memberships, leaderships and locks; returns
        how long until the next beat is due."""
        with _translated(), self._pool.connection() as conn:
            for group_id in list(self._joined_groups):
                expiry = _value(conn, c.SQL_RENEW, (self._member(group_id),
                                                    self._member_holder(), self._member_lease,
                                                    None))
                if expiry is None:
                    log.warning("dlock.tooz: membership of %r ended (lease lost)", group_id)
                    self._joined_groups.discard(group_id)
            for group_id, term in list(self._leading.items()):
                expiry = _value(conn, c.SQL_RENEW, (self._election(group_id), self._candidate,
                                                    self._member_lease, term))
                if expiry is None:
                    log.warning("dlock.tooz: leadership of %r ended (lease lost)", group_id)
                    self._leading.pop(group_id, None)
        for lock in list(self._acquired):
            if not lock.heartbeat():
                log.warning("dlock.tooz: lock %r was lost", lock.name)
        return self.timeout / 2.0


class _Rollback(Exception):
    """Carries a tooz error out of a transaction block (rolling it back)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _unwrap(fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        try:
            return fn()
        except _Rollback as r:
            raise r.error from None
    return run
