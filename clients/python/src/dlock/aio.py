"""dlock for asyncio: the same Lock, Semaphore, MultiLock and Election as
the synchronous API,
on psycopg's AsyncConnection (a conninfo string) or an async pool
(psycopg_pool.AsyncConnectionPool).

The renewal is a task of the event loop that entered the lock; when the
lease is lost, ``lost`` (an asyncio.Event) is set, ``on_lost(lock)`` runs
(a coroutine function is awaited), and the task chosen with ``cancel``
(by default the task that entered ``async with``) is cancelled; leaving
the block then raises dlock.LockLost instead of CancelledError.

A cancelled acquire() or campaign() cancels its statement in the server
and gives back what the server granted meanwhile.  In a child forked while
something is held, that holding is the parent's: release() raises NotHeld
and leaving the block sends nothing."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Optional, Sequence, Type, Union

import psycopg
from psycopg import sql as pgsql

from . import _common as c
from ._common import Leader
from ._errors import Error, LockLost, LockTimeout, NotHeld, translate, unsupported

log = logging.getLogger("dlock")

__all__ = ["Lock", "Semaphore", "MultiLock", "Election", "observe", "leader", "Leader"]

CancelScope = Union[bool, "asyncio.Task[Any]", None]


class _Source:
    def __init__(self, conninfo_or_pool: Any) -> None:
        if isinstance(conninfo_or_pool, str):
            self.conninfo: Optional[str] = conninfo_or_pool
            self.pool = None
        elif callable(getattr(conninfo_or_pool, "connection", None)):
            self.conninfo = None
            self.pool = conninfo_or_pool
        else:
            raise TypeError("dlock.aio needs a conninfo string or an async connection pool,"
                            f" not {type(conninfo_or_pool).__name__}")

    async def connect(self) -> psycopg.AsyncConnection:
        assert self.conninfo is not None
        return await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                     prepare_threshold=None)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        if self.pool is not None:
            async with self.pool.connection() as conn:
                yield conn
        else:
            conn = await self.connect()
            try:
                yield conn
            finally:
                await conn.close()


async def _one(conn: psycopg.AsyncConnection, sql: str, params: tuple) -> Any:
    try:
        cur = await conn.execute(sql, params, prepare=False)
        row = await cur.fetchone()
    except psycopg.Error as e:
        if getattr(e, "sqlstate", None) is None:
            raise
        raise translate(e) from e
    return None if row is None else row[0]


async def _cancel_statement(conn: psycopg.AsyncConnection) -> None:
    """Ask the server to cancel CONN's running statement."""
    safe = getattr(conn, "cancel_safe", None)     # psycopg 3.2
    with contextlib.suppress(Exception):
        if safe is not None:
            await safe()
        else:
            await asyncio.get_running_loop().run_in_executor(None, conn.cancel)


def _forget(task: "asyncio.Task[Any]") -> None:
    """Done-callback of an abandoned renewal: its outcome no longer matters."""
    if not task.cancelled():
        task.exception()


class _Leased:
    _kind = "lock"

    def __init__(self, conninfo_or_pool: Any, resource: str, *, lease: c.Seconds,
                 holder: Optional[str], on_lost: Optional[Callable[[Any], Any]],
                 cancel: CancelScope, names: "Optional[tuple[str, ...]]" = None) -> None:
        self._source = _Source(conninfo_or_pool)
        self.resource = c.check_text(resource, "resource")
        self._names = names if names is not None else (self.resource,)
        self.holder = c.check_text(holder, "holder") if holder is not None else c.default_holder()
        self._generated_holder = holder is None
        self.lease = c.seconds(lease, "lease")
        self.on_lost = on_lost
        self.cancel = cancel
        self._fences: "Optional[list[int]]" = None  # one per name while held
        self.lost = asyncio.Event()
        self.lost_reason: Optional[str] = None
        self._conn: Optional[psycopg.AsyncConnection] = None
        self._task: Optional[asyncio.Task[Any]] = None
        self._scope: Optional[asyncio.Task[Any]] = None
        self._cancelled_scope = False
        self._pid: Optional[int] = None  # the process that holds it
        self._valid_from = 0.0  # monotonic: the last acknowledged renewal's sending

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the holding (None while not held)."""
        return None if self._fences is None else self._fences[0]

    @fence.setter
    def fence(self, value: Optional[int]) -> None:
        self._fences = None if value is None else [value]

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection]:
        if self._source.pool is not None:
            async with self._source.connection() as conn:
                yield conn
            return
        conn, self._conn = self._conn, None
        if conn is None or conn.closed:
            conn = await self._source.connect()
        try:
            yield conn
        except BaseException:
            # A statement cut short (cancelled, timed out) leaves the
            # connection busy: only an idle one is kept.
            if conn.broken or conn.closed or \
                    conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await conn.close()
            else:
                self._conn, conn = conn, self._conn
                if conn is not None:
                    await conn.close()
            raise
        self._conn, conn = conn, self._conn
        if conn is not None:
            await conn.close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    @property
    def held(self) -> bool:
        return self._fences is not None and not self.lost.is_set() and self._mine()

    def _mine(self) -> bool:
        """Whether this process holds it (not a child forked meanwhile;
        a fence set by hand, never acquired here: yes)."""
        return self._pid is None or self._pid == os.getpid()

    def _new_in_child(self) -> None:
        """Before acquiring in a child forked while the parent held: the
        parent's holding is forgotten and a default holder text is made
        anew (the parent's would re-enter the parent's holding, sharing
        its fence); a holder text the caller chose stays."""
        if self._pid is not None and self._pid != os.getpid():
            self._fences, self._pid = None, None
            if self._generated_holder:
                self.holder = c.default_holder()

    def _not_mine(self) -> NotHeld:
        """Forget, in a forked child, the parent's holding; its connection
        is dropped unused (closing it would end the parent's session)."""
        pid, self._fences, self._conn, self._task = self._pid, None, None, None
        return NotHeld(f"{self._kind} {self.resource!r} is held by process {pid}, not by this"
                       " forked child: nothing released")

    def _release_statement(self) -> "tuple[str, tuple]":
        return c.unlock_statement(self)

    async def _statement(self, conn: psycopg.AsyncConnection, sql: str, params: tuple,
                         give_back: bool, granted: "Optional[list[int]]" = None) -> Any:
        """Run an acquisition SQL (or, GRANTED already, its confirming
        renewal) on CONN.  Cancelled meanwhile: the statement is cancelled
        in the server (closing the connection alone would leave it waiting
        there, to be granted later), and, GIVE_BACK, what was granted all
        the same is released."""
        task = asyncio.get_running_loop().create_task(_one(conn, sql, params))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                await _cancel_statement(conn)
                await asyncio.wait({task}, timeout=c.RELEASE_TIMEOUT)
            if not task.done():   # no answer: the connection is closed
                task.cancel()
                task.add_done_callback(_forget)
            elif give_back:
                ok = not task.cancelled() and task.exception() is None
                await self._give_back(conn, granted or (c.fences(task.result()) if ok else None))
            raise

    async def _give_back(self, conn: psycopg.AsyncConnection,
                         fences: "Optional[list[int]]") -> None:
        """Release FENCES, granted to an acquisition cancelled meanwhile."""
        if fences is None:
            return
        log.warning("dlock: %s %r was granted as its acquisition was cancelled;"
                    " releasing it", self._kind, self.resource)
        self._fences = fences
        try:
            await asyncio.wait_for(_one(conn, *self._release_statement()), c.RELEASE_TIMEOUT)
        except (psycopg.Error, Error, OSError, asyncio.TimeoutError) as e:
            log.warning("dlock: releasing %r failed (its lease will end): %s", self.resource, e)
        finally:
            self._fences = None

    async def _give_back_shielded(self, fences: "list[int]") -> None:
        """_give_back on a connection of its own, run to its end even if
        the caller is cancelled again meanwhile."""
        async def run() -> None:
            async with self._connection() as conn:
                await self._give_back(conn, fences)
        task = asyncio.get_running_loop().create_task(run())
        task.add_done_callback(_forget)
        with contextlib.suppress(psycopg.Error, OSError):
            await asyncio.shield(task)

    async def _take(self, sql: str, params: tuple) -> "Optional[bool]":
        """See dlock.Lock._take: True (held, renewing), False (NULL), None
        (gone before its lease could be dated)."""
        assert self.lease is not None
        give_back = self._fences is None  # not a leader's own term again
        fences: "Optional[list[int]]" = None
        valid_from: Optional[float] = None
        cm = self._connection()
        conn = await cm.__aenter__()
        try:
            sent_at = time.monotonic()    # after a pool's wait for a connection
            fences = c.fences(await self._statement(conn, sql, params, give_back))
            valid_from = sent_at
            if fences is not None and c.needs_confirmation(self.lease, sent_at):
                # A long wait: the lease is dated from a renewal sent now.
                saved, self._fences = self._fences, fences
                try:
                    valid_from = time.monotonic()
                    renewed = await self._statement(conn, *c.renew_statement(self),
                                                    give_back, fences)
                    if not c.all_held(renewed):
                        valid_from = None
                finally:
                    if self._fences is fences:
                        self._fences = saved
        except BaseException as e:
            try:
                suppressed = await cm.__aexit__(type(e), e, e.__traceback__)
            finally:
                # Granted, but its dating renewal failed (a cancel gave it
                # back already): nobody would renew or release it.
                if give_back and fences is not None and \
                        not isinstance(e, asyncio.CancelledError):
                    await self._give_back_shielded(fences)
            if not suppressed:
                raise
        else:
            try:
                await cm.__aexit__(None, None, None)
            except asyncio.CancelledError:
                # Granted, then cancelled as the connection went back (a
                # pool's commit or reset): what was granted is given back.
                if give_back and fences is not None:
                    await self._give_back_shielded(fences)
                raise
        if fences is None:
            await self._close()
            return False
        if valid_from is None:
            return None
        self._started(fences, valid_from)
        return True

    async def _end(self, sql: str, params: tuple, timeout: Optional[c.Seconds]) -> Any:
        """Send the release (or resignation) SQL, waiting up to TIMEOUT
        seconds for the answer (None: no limit); then
        psycopg.OperationalError, and the lease ends by itself."""
        t = c.seconds(timeout, "timeout", none_ok=True)
        await self._stop_renewal()

        async def once() -> Any:
            async with self._connection() as conn:
                return await _one(conn, sql, params)
        attempt = asyncio.get_running_loop().create_task(once())
        try:
            done, _ = await asyncio.wait({attempt}, timeout=t)
            if not done:
                attempt.cancel()
                attempt.add_done_callback(_forget)
                raise psycopg.OperationalError(f"dlock: no answer within {t} s")
            return attempt.result()
        except BaseException:
            self._unrenewed()
            raise
        finally:
            await self._close()

    def _unrenewed(self) -> None:
        """See dlock.Lock._unrenewed: a release that did not get through;
        the holding's loss is signalled at its renewal deadline unless a
        release retried meanwhile gets through."""
        fences = self._fences
        if fences is None or self.lost.is_set() or not self._mine():
            return
        assert self.lease is not None
        deadline = self._valid_from + self.lease - c.lost_margin(self.lease)

        async def watch() -> None:
            await asyncio.sleep(max(0.0, deadline - time.monotonic()))
            if self._fences is fences:
                await self._declare_lost("its release got no answer: the lease ends unrenewed")
        self._task = asyncio.get_running_loop().create_task(watch())

    def _started(self, fences: "list[int]", sent_at: float) -> None:
        self._fences = list(fences)
        self._pid = os.getpid()
        self.lost.clear()
        self.lost_reason = None
        self._cancelled_scope = False
        self._valid_from = sent_at
        self._task = asyncio.get_running_loop().create_task(self._renew_loop(sent_at))

    async def _declare_lost(self, reason: str) -> None:
        if self.lost.is_set() or self._fences is None:
            return
        self.lost_reason = reason
        self.lost.set()
        log.warning("dlock: %s %r lost (fences %s): %s", self._kind, self.resource,
                    self._fences, reason)
        if self._scope is not None and not self._scope.done():
            self._cancelled_scope = True
            self._scope.cancel()
        if self.on_lost is not None:
            try:
                r = self.on_lost(self)
                if inspect.isawaitable(r):
                    await r
            except Exception:
                log.exception("dlock: on_lost callback of %r failed", self.resource)

    async def _renew_loop(self, valid_from: float) -> None:
        assert self.lease is not None
        period = self.lease / 3.0
        retry = max(0.05, min(1.0, period / 3.0))
        margin = c.lost_margin(self.lease)
        next_at = valid_from + period
        while True:
            deadline = valid_from + self.lease - margin
            now = time.monotonic()
            if now >= deadline:
                await self._declare_lost("no renewal got through within the lease")
                return
            await asyncio.sleep(max(0.0, min(next_at, deadline) - now))
            if time.monotonic() >= deadline:
                continue
            # The attempt runs as a task of its own, waited for no longer
            # than the deadline: a statement stuck on an unresponsive
            # server may not end promptly even when cancelled (psycopg
            # first tries to cancel it in the server), and the loss must
            # not wait for that.
            attempt = asyncio.get_running_loop().create_task(self._renew_once())
            done, _ = await asyncio.wait({attempt},
                                         timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                attempt.cancel()
                attempt.add_done_callback(_forget)
                log.warning("dlock: renewing %r got no answer within the lease", self.resource)
                continue
            try:
                sent_at, expiry = attempt.result()
            except (psycopg.Error, Error, OSError) as e:
                log.warning("dlock: renewing %r failed, retrying within the lease: %s",
                            self.resource, e)
                next_at = time.monotonic() + retry
                continue
            if not c.all_held(expiry):
                await self._declare_lost("renew returned NULL: the lease ended or was broken")
                return
            valid_from = self._valid_from = sent_at
            next_at = sent_at + period

    async def _renew_once(self) -> "tuple[float, Any]":
        """One renewal: when it was sent (after a pool's wait for a
        connection) and its result."""
        async with self._connection() as conn:
            sent_at = time.monotonic()
            return sent_at, await _one(conn, *c.renew_statement(self))

    async def _stop_renewal(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def assert_fence(self, cur: Any) -> None:
        """``dlock.assert_fence(resource, fence)`` with CUR (an async cursor
        or connection) in the caller's transaction (StaleFence, 55P03)."""
        if self._fences is None:
            raise NotHeld(f"{self._kind} {self.resource!r} is not held")
        if not self._mine():
            raise self._not_mine()
        try:
            await cur.execute(*c.assert_fence_statement(self), prepare=False)
        except psycopg.Error as e:
            if getattr(e, "sqlstate", None) is None:
                raise
            raise translate(e) from e

    async def check(self) -> bool:
        if self._fences is None or not self._mine():
            return False
        async with self._source.connection() as conn:
            return bool(await _one(conn, *c.check_statement(self)))

    def _enter_scope(self) -> None:
        if self.cancel is True:
            self._scope = asyncio.current_task()
        elif isinstance(self.cancel, asyncio.Task):
            self._scope = self.cancel
        else:
            self._scope = None

    def _exit_error(self, exc: Optional[BaseException], released: bool, fence: Any) -> None:
        if self._cancelled_scope and self._scope is not None:
            uncancel = getattr(self._scope, "uncancel", None)
            if uncancel is not None and self._scope is asyncio.current_task():
                uncancel()
        self._scope = None
        if not released or self.lost.is_set():
            raise LockLost(f"{self._kind} {self.resource!r} (fences {fence}) was lost while held: "
                           f"{self.lost_reason}")


class Lock(_Leased):
    """``async with dlock.aio.Lock(conninfo_or_pool, "r", lease=30, wait=10)
    as lock:`` -- see dlock.Lock.  CANCEL: the task cancelled when the
    lease is lost (True: the task that enters the block; None: none)."""

    def __init__(self, conninfo_or_pool: Any, resource: str, *, lease: c.Seconds = 30,
                 wait: Optional[c.Seconds] = None, holder: Optional[str] = None,
                 fair: bool = False, shared: bool = False,
                 on_lost: Optional[Callable[["Lock"], Any]] = None,
                 cancel: CancelScope = True,
                 _names: "Optional[tuple[str, ...]]" = None) -> None:
        super().__init__(conninfo_or_pool, resource, lease=lease, holder=holder,
                         on_lost=on_lost, cancel=cancel, names=_names)
        self.wait = c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        self.fair = bool(fair)
        self.shared = bool(shared)

    @property
    def _needs(self) -> Optional[str]:
        """See dlock.Lock._needs."""
        return "shared" if self.shared else None

    def _acquire_statement(self, wait: Optional[float]) -> "tuple[str, tuple]":
        """See dlock.Lock._acquire_statement."""
        return c.lock_statement(self, wait)

    async def acquire(self, wait: Optional[c.Seconds] = ...) -> bool:  # type: ignore[assignment]
        self._new_in_child()
        if self._fences is not None:
            raise RuntimeError(f"{self._kind} {self.resource!r} is already acquired by this object")
        w = self.wait if wait is ... else c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        start = time.monotonic()
        while True:
            left = None if w is None else max(0.0, w - (time.monotonic() - start))
            try:
                got = await self._take(*self._acquire_statement(left))
            except Error as e:
                if self._needs is not None:
                    raise unsupported(e, self._needs) from e.__cause__
                raise
            if got is not None:
                return got
            if left == 0:         # granted, but gone before it could be dated
                return False

    async def release(self, timeout: Optional[c.Seconds] = c.RELEASE_TIMEOUT) -> bool:
        """See dlock.Lock.release."""
        if self._fences is None:
            raise NotHeld(f"{self._kind} {self.resource!r} is not held")
        if not self._mine():
            raise self._not_mine()
        left = await self._end(*c.unlock_statement(self), timeout)
        released = c.all_held(left)
        if not released:
            await self._declare_lost("unlock found the holding gone: the lease had been lost")
        self._fences = None
        return released

    async def __aenter__(self) -> "Lock":
        if not await self.acquire():
            raise LockTimeout(f"{self._kind} {self.resource!r} not acquired within {self.wait} s")
        self._enter_scope()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        fences = self._fences
        if fences is not None and not self._mine():
            self._not_mine()      # a forked child leaves the parent's holding alone
            return
        try:
            released = await self.release()
        except (psycopg.Error, Error, OSError) as e:
            log.warning("dlock: releasing %r failed (its lease will end): %s", self.resource, e)
            released = not self.lost.is_set()
            self._fences = None
        self._exit_error(exc, released, fences)


class Semaphore(Lock):
    """``async with dlock.aio.Semaphore(conninfo_or_pool, "slots",
    max_permits=3, permits=1, lease=30, wait=10) as sem:`` -- see
    dlock.Semaphore; CANCEL as for Lock."""

    _kind = "semaphore"
    _needs = "semaphore"  # type: ignore[assignment]

    def __init__(self, conninfo_or_pool: Any, name: str, *, max_permits: int, permits: int = 1,
                 lease: c.Seconds = 30, wait: Optional[c.Seconds] = None,
                 holder: Optional[str] = None, fair: bool = False,
                 on_lost: Optional[Callable[["Semaphore"], Any]] = None,
                 cancel: CancelScope = True) -> None:
        super().__init__(conninfo_or_pool, name, lease=lease, wait=wait, holder=holder,
                         fair=fair, on_lost=on_lost, cancel=cancel)  # type: ignore[arg-type]
        self.max_permits = c.check_count(max_permits, "max_permits")
        self.permits = c.check_count(permits, "permits")

    def _acquire_statement(self, wait: Optional[float]) -> "tuple[str, tuple]":
        return c.semaphore_statement(self, wait)


class MultiLock(Lock):
    """``async with dlock.aio.MultiLock(conninfo_or_pool, ["a", "b"],
    lease=30, wait=10) as locks:`` -- see dlock.MultiLock (``fences`` in
    the order given; the loss of any holding is the loss of the whole);
    CANCEL as for Lock."""

    _kind = "multi-lock"
    _needs = "multi"  # type: ignore[assignment]

    def __init__(self, conninfo_or_pool: Any, resources: "Sequence[str]", *,
                 lease: c.Seconds = 30, wait: Optional[c.Seconds] = None,
                 holder: Optional[str] = None, shared: bool = False,
                 on_lost: Optional[Callable[["MultiLock"], Any]] = None,
                 cancel: CancelScope = True) -> None:
        names = c.check_resources(resources)
        super().__init__(conninfo_or_pool, ", ".join(names), lease=lease, wait=wait,
                         holder=holder, shared=shared, on_lost=on_lost,  # type: ignore[arg-type]
                         cancel=cancel, _names=names)

    @property
    def resources(self) -> "list[str]":
        return list(self._names)

    @property
    def fences(self) -> "Optional[list[int]]":
        """The fences, in the order of ``resources`` (None while not held)."""
        return None if self._fences is None else list(self._fences)

    def _acquire_statement(self, wait: Optional[float]) -> "tuple[str, tuple]":
        return c.lock_all_statement(self, wait)


class Election(_Leased):
    """See dlock.Election; all methods are coroutines, observe() an async
    iterator."""

    _kind = "election"

    def __init__(self, conninfo_or_pool: Any, election: str, *, candidate: Optional[str] = None,
                 value: Optional[str] = None, lease: c.Seconds = 30,
                 wait: Optional[c.Seconds] = None,
                 on_lost: Optional[Callable[["Election"], Any]] = None,
                 cancel: CancelScope = True) -> None:
        super().__init__(conninfo_or_pool, election, lease=lease, holder=candidate,
                         on_lost=on_lost, cancel=cancel)
        self.value = value
        self.wait = c.seconds(wait, "wait", zero_ok=True, none_ok=True)

    @property
    def term(self) -> Optional[int]:
        return self.fence

    @property
    def candidate(self) -> str:
        return self.holder

    async def campaign(self, value: Optional[str] = ..., wait: Optional[c.Seconds] = ...) -> int:  # type: ignore[assignment]
        self._new_in_child()
        if value is not ...:
            self.value = value
        w = self.wait if wait is ... else c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        leading = self._fences if self.held else None
        await self._stop_renewal()
        start = time.monotonic()
        try:
            while True:
                left = None if w is None else max(0.0, w - (time.monotonic() - start))
                got = await self._take(c.SQL_CAMPAIGN, (self.resource, self.holder, self.value,
                                                        c.interval(self.lease), c.interval(left)))
                if got:
                    assert self._fences is not None
                    return self._fences[0]
                if got is False or left == 0:
                    raise LockTimeout(f"not elected in {self.resource!r} within {w} s")
        except BaseException:
            # A leader's campaign that failed: its leadership is renewed
            # again (or declared lost at its deadline), never left to run out.
            if leading is not None and self._task is None:
                self._started(leading, self._valid_from)
            raise

    async def proclaim(self, value: Optional[str]) -> bool:
        if self._fences is not None and not self._mine():
            raise self._not_mine()
        async with self._connection() as conn:
            ok = bool(await _one(conn, c.SQL_PROCLAIM, (self.resource, self.holder, value,
                                                        self.fence)))
        if ok:
            self.value = value
        return ok

    def _release_statement(self) -> "tuple[str, tuple]":
        return c.SQL_RESIGN, (self.resource, self.holder, self.fence)

    async def resign(self, timeout: Optional[c.Seconds] = c.RELEASE_TIMEOUT) -> bool:
        """See dlock.Election.resign."""
        if self._fences is not None and not self._mine():
            raise self._not_mine()
        ok = bool(await self._end(c.SQL_RESIGN, (self.resource, self.holder, self.fence),
                                  timeout))
        if not ok and self._fences is not None:
            await self._declare_lost("resign found this candidate no longer leading")
        self._fences = None
        return ok

    async def leader(self) -> Optional[Leader]:
        return await leader(self._source, self.resource)

    def observe(self, *, poll: float = 1.0,
                timeout: Optional[float] = None) -> AsyncIterator[Optional[Leader]]:
        return observe(self._source, self.resource, poll=poll, timeout=timeout)

    async def __aenter__(self) -> "Election":
        await self.campaign()
        self._enter_scope()
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        term = self.fence
        if term is not None and not self._mine():
            self._not_mine()
            return
        try:
            ok = await self.resign()
        except (psycopg.Error, Error, OSError) as e:
            log.warning("dlock: resigning from %r failed (the lease will end): %s",
                        self.resource, e)
            ok = not self.lost.is_set()
            self._fences = None
        self._exit_error(exc, ok, term)


async def leader(conninfo_or_pool: Any, election: str) -> Optional[Leader]:
    source = conninfo_or_pool if isinstance(conninfo_or_pool, _Source) else _Source(conninfo_or_pool)
    async with source.connection() as conn:
        try:
            cur = await conn.execute(c.SQL_LEADER, (election,), prepare=False)
            row = await cur.fetchone()
        except psycopg.Error as e:
            if getattr(e, "sqlstate", None) is None:
                raise
            raise translate(e) from e
    return c.leader_from_row(row)


async def observe(conninfo_or_pool: Any, election: str, *, poll: float = 1.0,
                  timeout: Optional[float] = None) -> AsyncIterator[Optional[Leader]]:
    """See dlock.observe."""
    source = conninfo_or_pool if isinstance(conninfo_or_pool, _Source) else _Source(conninfo_or_pool)
    async with source.connection() as conn:
        autocommit = conn.autocommit
        if not autocommit:    # a pool's connection: given back as it came
            await conn.commit()
            await conn.set_autocommit(True)
        channel = await _one(conn, c.SQL_CHANNEL, (election,))
        await conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)), prepare=False)
        loop = asyncio.get_running_loop()
        readable = asyncio.Event()
        fd = conn.fileno()
        try:
            last: Any = ...
            quiet_since = time.monotonic()
            while True:
                cur = await conn.execute(c.SQL_LEADER, (election,), prepare=False)
                now = c.leader_from_row(await cur.fetchone())
                key = None if now is None else (now.candidate, now.term, now.value)
                if last is ... or key != last:
                    last = key
                    quiet_since = time.monotonic()
                    yield now
                elif timeout is not None and time.monotonic() - quiet_since >= timeout:
                    return
                # Wait for a notification (the socket becomes readable) or
                # POLL; psycopg uses the socket's reader itself while a
                # statement runs, so ours is there only in between.
                readable.clear()
                loop.add_reader(fd, readable.set)
                try:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(readable.wait(), poll)
                finally:
                    loop.remove_reader(fd)
        finally:
            if not conn.closed and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("UNLISTEN *", prepare=False)
                    await conn.set_autocommit(autocommit)
