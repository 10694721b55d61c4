"""What dlock.aio's Lock, Semaphore, MultiLock and Election share
(_Leased): connections, acquisition, renewal, loss, release, forks.  The
synchronous API's _leased_sync.py is generated from this file
(tools/async_to_sync.py; see aio.py)."""

from __future__ import annotations

import asyncio  # ASYNC
import contextlib
import logging
import math
import os
import time
import weakref
from typing import Any, AsyncIterator, Callable, Optional

import psycopg

from . import _common as c
from ._errors import Error, LockLost, NotHeld, retryable, translate
from ._flavour_aio import (Event, Mutex, Worker, call_back, call_later, current, cut_after,
                           detached, set_autocommit, spawn, stop_worker, wait_event)

if True:  # ASYNC
    from ._flavour_aio import CancelScope, cancel_statement, forget

log = logging.getLogger("dlock")


class RolledBack(Exception):
    """An acquisition the server rolled back and asks to retry (40001:
    a serializable caller's conflict with another; 40P01): nothing was
    granted.  ERROR is the server's error, raised once the tries run out."""

    def __init__(self, error: Error):
        super().__init__(str(error))
        self.error = error

#: The objects holding something in this process, for _after_fork.
_HELD: "weakref.WeakSet[_Leased]" = weakref.WeakSet()


def _after_fork() -> None:
    """In a forked child: what the parent holds is the parent's."""
    for obj in list(_HELD):
        obj._forked()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Source:
    """Where connections come from: a conninfo string (dlock opens its own,
    autocommit, no server-side prepared statements so that pgbouncer in
    transaction mode is fine), or a pool with a ``connection()`` context
    manager (psycopg_pool's), borrowed per call."""

    def __init__(self, conninfo_or_pool: Any) -> None:
        if isinstance(conninfo_or_pool, str):
            self.conninfo: Optional[str] = conninfo_or_pool
            self.pool = None
        elif callable(getattr(conninfo_or_pool, "connection", None)):
            self.conninfo = None
            self.pool = conninfo_or_pool
        else:
            raise TypeError("dlock needs a conninfo string or a connection pool"
                            " (an object with a connection() context manager),"
                            f" not {type(conninfo_or_pool).__name__}")

    async def connect(self, timeout: Optional[float] = None) -> psycopg.AsyncConnection:
        """A connection of our own; TIMEOUT (seconds, None: libpq's)
        bounds the wait for it (connect_timeout: whole seconds, 2 or more)."""
        assert self.conninfo is not None
        bound = {} if timeout is None else {"connect_timeout": max(2, math.ceil(timeout))}
        return await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True,
                                                     prepare_threshold=None, **bound)

    @contextlib.asynccontextmanager
    async def connection(self, timeout: Optional[float] = None
                         ) -> AsyncIterator[psycopg.AsyncConnection]:
        """A connection; TIMEOUT (seconds) bounds the wait for a new one,
        or for a pool's free one when its connection() takes a timeout
        (psycopg_pool's does: PoolTimeout, an OperationalError)."""
        if self.pool is not None:
            # A connection the server closed while it was idle in the
            # pool is closed and given back (the pool drops it), not used.
            for _ in range(c.pool_tries(self.pool)):
                cm = (self.pool.connection() if timeout is None or not c.takes_timeout(self.pool)
                      else self.pool.connection(timeout=timeout))
                async with cm as conn:
                    if await _usable(conn):
                        yield conn
                        return
                    await conn.close()
            raise psycopg.OperationalError("dlock: every connection the pool gave was closed by the server")
        else:
            conn = await self.connect(timeout)
            try:
                yield conn
            finally:
                await conn.close()


async def _usable(conn: psycopg.AsyncConnection) -> bool:
    """CONN, idle, not closed by its server (c.closed_by_server); when that
    cannot tell, an empty statement asks (in autocommit, as
    psycopg_pool's check does)."""
    closed = c.closed_by_server(conn)
    if closed is not None:
        return not closed
    try:
        if conn.autocommit:
            await conn.execute("")
        else:
            await set_autocommit(conn, True)
            try:
                await conn.execute("")
            finally:
                await set_autocommit(conn, False)
    except psycopg.Error:
        return False
    return True


async def _row(conn: psycopg.AsyncConnection, sql: str, params: tuple) -> Optional[tuple]:
    """Run SQL, return its one row (None: none); dlock errors."""
    try:
        cur = await conn.execute(sql, params, prepare=False)
        return await cur.fetchone()
    except psycopg.Error as e:
        if getattr(e, "sqlstate", None) is None:
            raise  # connection trouble: the caller decides (retry or not)
        raise translate(e) from e


async def _one(conn: psycopg.AsyncConnection, sql: str, params: tuple) -> Any:
    """Run SQL, return the first column of its one row; dlock errors."""
    row = await _row(conn, sql, params)
    return None if row is None else row[0]


def _granted(row: Optional[tuple]) -> "tuple[Optional[list[int]], Optional[int]]":
    """An acquisition's ROW: its fences and when its statement started
    (None when it does not say)."""
    if row is None:
        return None, None
    return c.fences(row[0]), (row[1] if len(row) > 1 else None)


class _Own:
    """A connection of one's own (conninfo) or a pool's, per call: what
    _Leased and Session share.  Needs _source, _mutex and _conn."""

    _source: _Source
    _mutex: Any
    _conn: Optional[psycopg.AsyncConnection]

    # ---- connections
    @contextlib.asynccontextmanager
    async def _connection(self, timeout: Optional[float] = None
                          ) -> AsyncIterator[psycopg.AsyncConnection]:
        """The lock's own connection (conninfo) or a pool's (per call);
        TIMEOUT s bounds the wait for it (see _Source.connection); a
        connection that failed is dropped, the next call opens another."""
        if self._source.pool is not None:
            async with self._source.connection(timeout) as conn:
                yield conn
            return
        with self._mutex:
            conn, self._conn = self._conn, None
        if conn is not None and not await _usable(conn):
            await conn.close()
            conn = None
        if conn is None or conn.closed:
            conn = await self._source.connect(timeout)
        try:
            yield conn
        except BaseException:
            # A statement cut short (cancelled, timed out) leaves the
            # connection busy: only an idle one is kept.
            if conn.broken or conn.closed or \
                    conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await conn.close()
            else:
                with self._mutex:
                    self._conn, conn = conn, self._conn
                if conn is not None:
                    await conn.close()
            raise
        with self._mutex:
            self._conn, conn = conn, self._conn
        if conn is not None:
            await conn.close()

    async def _close(self) -> None:
        with self._mutex:
            conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class _Leased(_Own):
    """Holdings kept alive by renewal (one, or a MultiLock's several, all
    of one holder): what Lock, Semaphore, MultiLock and Election share.

    Each holding has one renewal worker and one deadline timer.  The
    state they share with the caller (fences, lost, the connection) is
    guarded by ``self._mutex``; callbacks run outside it.  A MultiLock's
    holdings are renewed and released together, in one statement; the
    loss of any of them is the loss of the whole.

    In a Session (SESSION given): no lease and no renewal of its own; the
    session's one keepalive keeps it, and the session's loss is its loss."""

    _kind = "lock"

    def __init__(self, conninfo_or_pool: Any, resource: str, *, lease: c.Seconds,
                 holder: Optional[str], on_lost: Optional[Callable[[Any], Any]],
                 cancel: CancelScope,  # ASYNC
                 names: "Optional[tuple[str, ...]]" = None, session: Any = None) -> None:
        self._source = _Source(conninfo_or_pool)
        self._session = session
        self.resource = c.check_text(resource, "resource")
        self._names = names if names is not None else (self.resource,)
        self.holder = c.check_text(holder, "holder") if holder is not None else c.default_holder()
        self._generated_holder = holder is None
        self._holder_pid = os.getpid()   # the process that made it up
        self.lease = c.seconds(lease, "lease")
        assert self.lease is not None
        self.on_lost = on_lost
        self._fences: "Optional[list[int]]" = None  # one per name while held
        self._acquiring: Optional[int] = None  # the pid acquiring or campaigning (_begin_acquisition)
        self.lost = Event()
        self.lost_reason: Optional[str] = None
        self._mutex = Mutex()
        self._conn: Optional[psycopg.AsyncConnection] = None  # conninfo mode: ours
        self._stop = Event()
        self._worker: Optional[Worker] = None
        self._timer: Any = None
        self._valid_from = 0.0  # monotonic: the last acknowledged renewal's sending
        self._pid: Optional[int] = None  # the process that holds it
        if True:  # ASYNC
            self.cancel = cancel
            self._scope: "Optional[asyncio.Task[Any]]" = None
            self._cancelled_scope = False

    @property
    def fence(self) -> Optional[int]:
        """The fencing token of the holding (None while not held)."""
        return None if self._fences is None else self._fences[0]

    @fence.setter
    def fence(self, value: Optional[int]) -> None:
        self._fences = None if value is None else [value]

    # ---- processes
    @property
    def held(self) -> bool:
        """Whether it is held: acquired, not released, not lost, in this
        process, and (a lease of its own) before its deadline, even when
        the loss is not signalled yet (a process paused past it, a busy
        event loop or GIL)."""
        return self._held_here() and not self._past_deadline()

    def _held_here(self) -> bool:
        """``held`` without the clock: acquired, not released, not lost (as
        signalled), in this process."""
        return self._fences is not None and not self.lost.is_set() and self._mine()

    def _past_deadline(self) -> bool:
        """Whether the last acknowledged renewal's lease (less the margin)
        has run out by the local clock; a session's holding: its session's;
        a fence set by hand (never acquired here): never."""
        if self._session is not None:
            return self._session._past_deadline()
        if self.lease is None or self._pid is None:
            return False
        return time.monotonic() >= self._valid_from + self.lease - c.lost_margin(self.lease)

    def _mine(self) -> bool:
        """Whether this process holds it (not a child forked meanwhile;
        a fence set by hand, never acquired here: yes)."""
        return self._pid is None or self._pid == os.getpid()

    def _new_in_child(self) -> None:
        """Before acquiring in a forked child: a holding of the parent is
        forgotten, and a default holder text made up in another process is
        made anew (the parent's, or a sibling's, would re-enter its
        holding, sharing its fence: a lock object made before the fork, as
        at import time, excluded nothing); a holder text the caller chose
        stays."""
        if self._pid is not None and self._pid != os.getpid():
            self._fences, self._pid = None, None
        if self._generated_holder and self._holder_pid != os.getpid():
            self.holder, self._holder_pid = c.default_holder(), os.getpid()

    def _forked(self) -> None:
        """In a forked child: the locks another thread of the parent may
        have held are new, the parent's connection is dropped unused (never
        closed: closing it would end the parent's session), and no renewal
        or timer runs here."""
        self._mutex = Mutex()
        reinit = getattr(self.lost, "_at_fork_reinit", None)  # threading's
        if reinit is not None:
            reinit()
        self._stop = Event()
        self._stop.set()
        self._conn = None
        self._worker = None
        self._timer = None

    def _not_mine(self) -> NotHeld:
        """Forget, in this forked child, the parent's holding."""
        pid, self._fences = self._pid, None
        return NotHeld(f"{self._kind} {self.resource!r} is held by process {pid}, not by this"
                       " forked child: nothing released")

    # ---- acquisition
    if True:  # ASYNC
        async def _statement(self, conn: psycopg.AsyncConnection, sql: str, params: tuple,
                             give_back: bool) -> Any:
            """Run an acquisition SQL (or its dating renewal) on CONN; its
            row.  Cancelled meanwhile: the statement is cancelled in the
            server (closing the connection alone would leave it waiting
            there, to be granted later), and, GIVE_BACK, what was granted
            all the same is given back on CONN."""
            task = spawn(_row, conn, sql, params)
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():
                    await cancel_statement(conn)
                    await asyncio.wait({task}, timeout=c.RELEASE_TIMEOUT)
                if not task.done():   # no answer: the connection is closed
                    task.cancel()
                    task.add_done_callback(forget)
                elif give_back and not task.cancelled() and task.exception() is None:
                    fences, started = _granted(task.result())
                    if fences is not None:
                        await self._give_back_on(conn, fences, started)
                raise

        async def _give_back_on(self, conn: psycopg.AsyncConnection,
                                fences: "list[int]", started: Optional[int]) -> None:
            """Give back FENCES, granted to an acquisition (whose statement
            started at STARTED) cancelled meanwhile."""
            log.warning("dlock: %s %r was granted as its acquisition was cancelled;"
                        " releasing it", self._kind, self.resource)
            self._fences = fences
            statement = c.give_back_statement(self, started)
            try:
                if statement is not None:
                    await asyncio.wait_for(_one(conn, *statement), c.RELEASE_TIMEOUT)
            except (psycopg.Error, Error, OSError, asyncio.TimeoutError) as e:
                log.warning("dlock: releasing %r failed (its lease will end): %s",
                            self.resource, e)
            finally:
                self._fences = None
    else:
        def _statement(self, conn: psycopg.Connection, sql: str, params: tuple,
                       give_back: bool) -> Any:
            return _row(conn, sql, params)

    async def _confirm(self, conn: psycopg.AsyncConnection, sent_at: float,
                       always: bool) -> Optional[float]:
        """The moment (monotonic) the lease just acquired with a statement
        sent at SENT_AT is dated from: SENT_AT after a short wait; after a
        long one (or ALWAYS), when a renewal sent now on CONN was (None:
        the holding was gone already).  _fences are set."""
        assert self.lease is not None
        if self._session is not None:
            return sent_at    # dated by the session's keepalives, not here
        if not always and not c.needs_confirmation(self.lease, sent_at):
            return sent_at
        renewed_at = time.monotonic()
        row = await self._statement(conn, *c.renew_statement(self), False)
        if not c.all_held(None if row is None else row[0]):
            return None
        return renewed_at

    def _begin_acquisition(self, held_ok: bool) -> None:
        """One acquisition (or campaign) at a time on this object: two at
        once would both be granted, one re-entering the other's holding (a
        count no release gives back).  RuntimeError if one is under way in
        this process (one of a parent forked meanwhile is the parent's), or
        (unless HELD_OK) if the object holds already.  The caller clears
        _acquiring when it ends."""
        with self._mutex:
            if not held_ok and self._fences is not None:
                raise RuntimeError(f"{self._kind} {self.resource!r} is already acquired by this object")
            if self._acquiring == os.getpid():
                raise RuntimeError(f"{self._kind} {self.resource!r}: another acquisition on this"
                                   " object is under way")
            self._acquiring = os.getpid()

    async def _take(self, sql: str, params: tuple, confirm: bool = False) -> "Optional[bool]":
        """Run the acquisition SQL, date its lease (_confirm; CONFIRM:
        always by a renewal) and start renewing: True; False when it
        returned NULL; None when the holding was gone before it could be
        dated (the caller may try again).  RolledBack when the server
        rolled the statement back and asks for a retry: nothing was granted."""
        give_back = self._fences is None  # not a leader's own term again
        fences = started = None
        sent = False
        try:
            async with self._connection() as conn:
                sent_at = time.monotonic()    # after a pool's wait for a connection
                try:
                    sent = True
                    row = await self._statement(conn, sql, params, give_back)
                except Error as e:
                    if retryable(e):
                        raise RolledBack(e) from e
                    raise
                fences, started = _granted(row)
                if fences is None:
                    valid_from = None
                else:
                    self._fences = fences
                    valid_from = await self._confirm(conn, sent_at, confirm)
        except BaseException as exc:
            if fences is not None:
                # Granted, but its dating failed (or it was cancelled as
                # the connection went back to a pool): nobody would renew
                # or release it (a retry would re-enter it), so give it back.
                self._fences = None
                if give_back:
                    await detached(self._give_back, fences, started)
            elif sent and give_back and self._generated_holder and self._session is None \
                    and isinstance(exc, psycopg.Error) and getattr(exc, "sqlstate", None) is None:
                # Sent, and no answer (the connection failed): it may have
                # been granted.  The next try gets a holder text of its own
                # (with this one it would re-enter that holding, a count its
                # release leaves), and this one's holdings are given back.
                old, self.holder = self.holder, c.default_holder()
                await detached(self._give_back_holder, old)
            raise
        if fences is None:
            await self._close()
            return False
        if valid_from is None:
            self._fences = None
            return None
        self._started(fences, valid_from)
        if self._session is not None:
            # Its connection goes: the session's locks may be many.
            await self._close()
            if not self._session._adopt(self):
                await self._declare_lost(f"its session {self._session.id} was lost as it was"
                                         f" acquired: {self._session.lost_reason}")
        return True

    def _release_statement(self) -> "tuple[str, tuple]":
        return c.unlock_statement(self)

    async def _give_back(self, fences: "list[int]", started: Optional[int]) -> None:
        """Give back FENCES, granted to an acquisition (whose statement
        started at STARTED) that failed after (best effort, on a connection
        of its own; else the lease ends)."""
        self._fences = fences
        try:
            async with self._connection(c.RELEASE_TIMEOUT) as conn:
                statement = c.give_back_statement(self, started)
                if statement is not None:
                    with cut_after(conn, c.RELEASE_TIMEOUT):
                        await _one(conn, *statement)
        except (psycopg.Error, Error, OSError) as e:
            log.warning("dlock: giving back %r failed (its lease will end): %s",
                        self.resource, e)
        finally:
            self._fences = None
            await self._close()

    async def _give_back_holder(self, holder: str) -> None:
        """Give back what HOLDER, a holder text this object made up and no
        longer uses, holds: an acquisition whose answer was lost (best
        effort, on a connection of its own; else its lease ends)."""
        try:
            async with self._connection(c.RELEASE_TIMEOUT) as conn:
                with cut_after(conn, c.RELEASE_TIMEOUT):
                    await _one(conn, c.SQL_UNLOCK_ALL, (holder,))
        except (psycopg.Error, Error, OSError) as e:
            log.warning("dlock: giving back %r failed (its lease will end): %s",
                        self.resource, e)
        finally:
            await self._close()

    # ---- release
    async def _end(self, sql: str, params: tuple, timeout: Optional[c.Seconds],
                   ok: Callable[[Any], bool], gone: str) -> Any:
        """Send the release (or resignation) SQL, waiting up to TIMEOUT
        seconds for the answer and for the connection (None: no limit);
        then psycopg.OperationalError, and the lease ends by itself.  OK
        says whether an answer released it; GONE is the loss's reason
        when it did not.  Sent again once after a rollback the server asks
        to retry (_errors.retryable)."""
        t = c.seconds(timeout, "timeout", none_ok=True)
        fences = self._fences
        worker = self._stopping()     # here: the caller may be the renewal (on_lost)

        async def send() -> Any:
            async with self._connection(t) as conn:
                with cut_after(conn, t):
                    return await _one(conn, sql, params)

        async def once() -> Any:
            await self._stopped(worker)
            try:
                try:
                    return await send()
                except Error as e:
                    if not retryable(e):
                        raise
                # Rolled back (the caller's default isolation SERIALIZABLE
                # met a renewal under way, or a deadlock): once more.
                return await send()
            except BaseException:
                self._unrenewed()
                raise
            finally:
                await self._close()

        async def lost_meanwhile() -> None:
            await self._declare_lost(gone)
            self._fences = None

        def orphaned(result: Any) -> None:
            """The caller is gone (a cancelled task): what it would have
            concluded from the answer RESULT."""
            if self._fences is fences:
                if ok(result):
                    self._fences = None
                else:
                    call_later(0.0, lost_meanwhile)
        # Detached, from the renewal's stop on: a task cancelled meanwhile
        # (asyncio) does not cut the release short.
        return await detached(once, orphaned=orphaned)

    def _unrenewed(self) -> None:
        """A release (or resignation) that did not get through: the
        holding, if still there, is no longer renewed.  Its loss is
        end; a release retried meanwhile forgets it.  In a session: when
        the session's loss is."""
        with self._mutex:
            fences = self._fences
            if fences is None or self.lost.is_set() or not self._mine():
                return
        if self._session is not None:
            if not self._session._adopt(self):
                call_later(0.0, self._declare_lost, "its session was lost")
            return
        assert self.lease is not None

        async def fire() -> None:
            if self._fences is fences:
                await self._declare_lost("its release got no answer: the lease ends unrenewed")
        delay = self._valid_from + self.lease - c.lost_margin(self.lease) - time.monotonic()
        self._set_timer(call_later(max(0.0, delay), fire))

    # ---- renewal
    def _started(self, fences: "list[int]", sent_at: float) -> None:
        self._fences = list(fences)
        self._pid = os.getpid()
        _HELD.add(self)
        self.lost.clear()
        self.lost_reason = None
        self._cancelled_scope = False  # ASYNC
        # A new event per holding: a renewal of an earlier one, left stuck
        # behind by its release, keeps seeing its own (set) and stops.
        stop = self._stop = Event()
        self._valid_from = sent_at
        if self._session is not None:
            return            # kept by the session, which _take joins it to
        self._arm(sent_at)
        self._worker = spawn(self._renew_loop, stop, name=f"dlock renew {self.resource[:40]}")

    def _set_timer(self, timer: Any) -> None:
        with self._mutex:
            old, self._timer = self._timer, timer
        if old is not None:
            old.cancel()

    def _arm(self, sent_at: float) -> None:
        """The deadline of the lease renewed at SENT_AT: its loss is
        signalled then, even while a renewal is stuck."""
        assert self.lease is not None
        delay = sent_at + self.lease - c.lost_margin(self.lease) - time.monotonic()
        self._set_timer(call_later(max(0.0, delay), self._deadline, sent_at))

    async def _deadline(self, sent_at: float) -> None:
        with self._mutex:
            due = self._valid_from == sent_at and not self._stop.is_set()
        if due:
            await self._declare_lost("no renewal got through within the lease")

    async def _declare_lost(self, reason: str, stop: Optional[Event] = None) -> None:
        """Set ``lost`` (once) and run on_lost; STOP: only if it is still
        the current holding's (a renewal's answer about its own)."""
        with self._mutex:
            if self.lost.is_set() or self._fences is None or \
                    (stop is not None and (stop is not self._stop or stop.is_set())):
                return
            self.lost_reason = reason
            self.lost.set()
            self._stop.set()
            timer = self._timer
        if timer is not None:
            timer.cancel()
        log.warning("dlock: %s %r lost (fences %s): %s", self._kind, self.resource,
                    self._fences, reason)
        if True:  # ASYNC
            if self._scope is not None and not self._scope.done():
                self._cancelled_scope = True
                self._scope.cancel()
        if self.on_lost is not None:
            try:
                await call_back(self.on_lost, self)
            except Exception:
                log.exception("dlock: on_lost callback of %r failed", self.resource)

    async def _renew_loop(self, stop: Event) -> None:
        assert self.lease is not None
        period = self.lease / 3.0
        next_at = self._valid_from + period
        while not await wait_event(stop, max(0.0, next_at - time.monotonic())):
            started = time.monotonic()
            bound = c.try_bound(self.lease, self._valid_from, started)
            try:
                # A connection that stopped answering is cut at the bound
                # and the next try opens another, within the lease.
                async with self._connection(bound) as conn:
                    # After a pool's wait for a connection: the renewal
                    # is dated from when it was sent, not from that wait.
                    sent_at = time.monotonic()
                    with cut_after(conn, c.answer_bound(self.lease, self._valid_from, started + bound, sent_at)):
                        expiry = await _one(conn, *c.renew_statement(self))
            except (psycopg.Error, Error, OSError) as e:
                log.warning("dlock: renewing %r failed, retrying within the lease: %s",
                            self.resource, e)
                next_at = c.retry_at(self.lease, started)
                continue
            if not c.all_held(expiry):
                await self._declare_lost("renew returned NULL: the lease ended or was broken",
                                         stop)
                return
            with self._mutex:
                if stop.is_set():
                    return
                self._valid_from = sent_at
            self._arm(sent_at)
            next_at = sent_at + period

    def _stopping(self) -> Optional[Worker]:
        """Stop renewing (at once, nothing awaited): the renewal worker
        to wait for, None when there is none or it is the caller."""
        _HELD.discard(self)
        if self._session is not None:
            self._session._forget(self)
        self._stop.set()
        with self._mutex:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        worker, self._worker = self._worker, None
        return None if worker is current() else worker

    async def _stopped(self, worker: Optional[Worker]) -> None:
        if worker is not None:
            # A renewal stuck on an unresponsive server is left behind: it
            # cannot change anything any more.
            await stop_worker(worker, max(1.0, min(5.0, (self.lease or 3) / 3)))

    async def _stop_renewal(self) -> None:
        await self._stopped(self._stopping())

    # ---- fenced writes
    async def assert_fence(self, cur: Any) -> None:
        """Run ``dlock.assert_fence(resource, fence)`` with CUR (a psycopg
        cursor or connection) in the caller's transaction: raises
        StaleFence (55P03) unless this holding is current, and then keeps it
        from being taken over until that transaction ends."""
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
        """Is this holding still the current one, as the server sees it?
        (In a child forked while it was held: False, it is the parent's.)"""
        if self._fences is None or not self._mine():
            return False
        async with self._source.connection() as conn:
            return c.truth(await _one(conn, *c.check_statement(self)))

    # ---- blocks
    if True:  # ASYNC
        def _enter_scope(self) -> None:
            if self.cancel is True:
                self._scope = asyncio.current_task()
            elif isinstance(self.cancel, asyncio.Task):
                self._scope = self.cancel
            else:
                self._scope = None

    def _leave(self, released: bool, fences: Any) -> None:
        """The end of a block: LockLost unless released while still held."""
        if True:  # ASYNC
            if self._cancelled_scope and self._scope is not None:
                uncancel = getattr(self._scope, "uncancel", None)
                if uncancel is not None and self._scope is asyncio.current_task():
                    uncancel()
            self._scope = None
        if not released or self.lost.is_set():
            raise LockLost(f"{self._kind} {self.resource!r} (fences {fences}) was lost while held: "
                           f"{self.lost_reason}")
