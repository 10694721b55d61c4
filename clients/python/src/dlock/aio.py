"""dlock for asyncio: the same Lock, Semaphore, MultiLock and Election as
the synchronous API, on psycopg's AsyncConnection (a conninfo string) or
an async pool (psycopg_pool.AsyncConnectionPool).

The renewal is a task of the event loop that entered the lock; when the
lease is lost, ``lost`` (an asyncio.Event) is set, ``on_lost(lock)`` runs
(a coroutine function is awaited), and the task chosen with ``cancel``
(by default the task that entered ``async with``) is cancelled; leaving
the block then raises dlock.LockLost instead of CancelledError.

A cancelled acquire() or campaign() cancels its statement in the server
and gives back what the server granted meanwhile.  In a child forked while
something is held, that holding is the parent's: release() raises NotHeld
and leaving the block sends nothing.

This file and _leased_aio.py are the source of the synchronous API too:
tools/async_to_sync.py writes _sync.py and _leased_sync.py from them
(``if True:  # ASYNC`` blocks and lines ending in ``# ASYNC`` are
asyncio's own; what differs otherwise is in _flavour_aio.py)."""

from __future__ import annotations

import contextlib
import logging
import time
from types import TracebackType
from typing import Any, AsyncIterator, Callable, Optional, Sequence, Type

import psycopg
from psycopg import sql as pgsql

from . import _common as c
from ._common import Leader
from ._errors import (DatabaseError, Error, LockLost, LockTimeout, NotHeld, retryable,
                      translate, unsupported)
from ._flavour_aio import (Event, Mutex, call_back, call_later, cut_after, pause, set_autocommit,
                           spawn, stop_worker, wait_event, wait_readable)
from ._leased_aio import _Leased, _one, _Own, RolledBack, _row, _Source

if True:  # ASYNC
    from ._flavour_aio import CancelScope

log = logging.getLogger("dlock")

__all__ = ["Lock", "Semaphore", "MultiLock", "Election", "Session", "observe", "leader",
           "Leader"]


class Lock(_Leased):
    """A leased lock on RESOURCE, renewed in the background.

    ``async with dlock.aio.Lock(conninfo_or_pool, "resource", lease=30,
    wait=10) as lock:`` acquires (waiting up to WAIT seconds, None: no
    limit, 0: one try; LockTimeout otherwise), renews every third of LEASE
    on its own connection, sets ``lock.lost`` and calls ``on_lost(lock)``
    when the lease is lost, and raises LockLost when the block is left
    after a loss.  HOLDER defaults to a text unique to this object.
    SHARED: a shared (read) holding alongside other shared holders,
    refused while a writer holds or waits (the C extension's SQL 0.4;
    NotSupported, 0A000, on a server without it)."""

    def __init__(self, conninfo_or_pool: Any, resource: str, *, lease: c.Seconds = 30,
                 wait: Optional[c.Seconds] = None, holder: Optional[str] = None,
                 fair: bool = False, shared: bool = False,
                 on_lost: Optional[Callable[["Lock"], Any]] = None,
                 cancel: CancelScope = True,  # ASYNC
                 _names: "Optional[tuple[str, ...]]" = None, _session: Any = None) -> None:
        super().__init__(conninfo_or_pool, resource, lease=lease, holder=holder,
                         cancel=cancel,  # ASYNC
                         on_lost=on_lost, names=_names, session=_session)
        self.wait = c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        self.fair = bool(fair)
        self.shared = bool(shared)

    #: What the acquisition needs of the server (errors.NEEDS), for
    #: NotSupported when it lacks it; None: an exclusive lock.
    @property
    def _needs(self) -> Optional[str]:
        return "shared" if self.shared else None

    def _acquire_statement(self, wait: Optional[float]) -> "tuple[str, tuple]":
        """The statement that acquires, returning the fence (or a
        MultiLock's fences) or NULL.  ``shared=True``: ``lock(..., shared
        => true)`` (extension 0.4).  Semaphore and MultiLock return their
        own statement here; renewal, loss and release stay the same."""
        return c.lock_statement(self, wait)

    async def acquire(self, wait: Optional[c.Seconds] = ...) -> bool:  # type: ignore[assignment]
        """Acquire; True when held, False when WAIT ran out."""
        self._new_in_child()
        w = self.wait if wait is ... else c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        self._begin_acquisition(held_ok=False)
        try:
            return await self._acquire(w)
        finally:
            self._acquiring = None

    async def _acquire(self, w: Optional[float]) -> bool:
        start = time.monotonic()
        tries = 0
        while True:
            left = None if w is None else max(0.0, w - (time.monotonic() - start))
            tries += 1
            try:
                got = await self._take(*self._acquire_statement(left))
            except RolledBack as e:
                if tries < c.ACQUIRE_TRIES:
                    await pause(c.retry_pause(tries))
                    continue              # nothing was granted: send it again
                raise e.error from e.error.__cause__
            except Error as e:
                if self._needs is not None:
                    raise unsupported(e, self._needs) from e.__cause__
                raise
            if got is not None:
                return got
            # Granted, but gone before it could be dated: try again.
            if left == 0:
                return False

    async def release(self, timeout: Optional[c.Seconds] = c.RELEASE_TIMEOUT) -> bool:
        """Release.  True if released; False if the lease had been lost
        (``lost`` is set then).  No answer within TIMEOUT seconds (None: no
        limit): psycopg.OperationalError, and the lease ends by itself.
        In a child forked while it was held: NotHeld, nothing sent."""
        if self._fences is None:
            raise NotHeld(f"{self._kind} {self.resource!r} is not held")
        if not self._mine():
            raise self._not_mine()
        gone = "unlock found the holding gone: the lease had been lost"
        left = await self._end(*c.unlock_statement(self), timeout, c.all_held, gone)
        released = c.all_held(left)
        if not released:
            await self._declare_lost(gone)
        self._fences = None
        return released

    async def __aenter__(self) -> "Lock":
        if not await self.acquire():
            raise LockTimeout(f"{self._kind} {self.resource!r} not acquired within {self.wait} s")
        self._enter_scope()  # ASYNC
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        fences = self._fences
        if fences is not None and not self._mine():
            self._not_mine()      # a forked child leaves the parent's holding alone
            return
        if fences is None and self._session is not None:
            self._leave(not self.lost.is_set(), fences)   # its session's close released it
            return
        try:
            released = await self.release()
        except (psycopg.Error, Error, OSError) as e:
            # The release did not get through: the lease ends by itself.
            log.warning("dlock: releasing %r failed (its lease will end): %s",
                        self.resource, e)
            released = not self.lost.is_set()
            self._fences = None
        self._leave(released, fences)


class Semaphore(Lock):
    """PERMITS (default 1) of the counting semaphore NAME, of which at most
    MAX_PERMITS are held at once by all holders together (the C extension's
    SQL 0.5: ``dlock.acquire``; NotSupported, 0A000, elsewhere).

    ``async with dlock.aio.Semaphore(conninfo_or_pool, "pool-slots",
    max_permits=3, lease=30, wait=10) as sem:`` -- waits, renews, reports
    loss and releases (all of this object's permits at once) as Lock does;
    FAIR waits in ticket order.  Every user of NAME passes the same
    MAX_PERMITS while any permit is held (InvalidArgument, 22023,
    otherwise); a name held as a lock raises WrongKind (42809)."""

    _kind = "semaphore"
    _needs = "semaphore"  # type: ignore[assignment]

    def __init__(self, conninfo_or_pool: Any, name: str, *, max_permits: int, permits: int = 1,
                 lease: c.Seconds = 30, wait: Optional[c.Seconds] = None,
                 holder: Optional[str] = None, fair: bool = False,
                 on_lost: Optional[Callable[["Semaphore"], Any]] = None,
                 cancel: CancelScope = True,  # ASYNC
                 _session: Any = None) -> None:
        super().__init__(conninfo_or_pool, name, lease=lease, wait=wait, holder=holder,
                         cancel=cancel,  # ASYNC
                         fair=fair, on_lost=on_lost, _session=_session)  # type: ignore[arg-type]
        self.max_permits = c.check_count(max_permits, "max_permits")
        self.permits = c.check_count(permits, "permits")

    def _acquire_statement(self, wait: Optional[float]) -> "tuple[str, tuple]":
        return c.semaphore_statement(self, wait)


class MultiLock(Lock):
    """Every resource of RESOURCES, all or nothing (the C extension's SQL
    0.5: ``dlock.lock_all``; NotSupported, 0A000, elsewhere).

    ``async with dlock.aio.MultiLock(conninfo_or_pool, ["a", "b"],
    lease=30, wait=10) as locks:`` -- ``locks.fences`` are the fences in
    the order given (``fence`` is the first one's).  While it waits it
    holds none of them.  The holdings are renewed and released together;
    when any of them is lost, the MultiLock is (``lost``, ``on_lost``,
    LockLost on leaving the block), and ``assert_fence(cur)`` asserts every
    fence.  SHARED: shared holdings.  A resource named twice, an empty
    list or a bad name: InvalidArgument (22023) from the server."""

    _kind = "multi-lock"
    _needs = "multi"  # type: ignore[assignment]

    def __init__(self, conninfo_or_pool: Any, resources: "Sequence[str]", *,
                 lease: c.Seconds = 30, wait: Optional[c.Seconds] = None,
                 holder: Optional[str] = None, shared: bool = False,
                 on_lost: Optional[Callable[["MultiLock"], Any]] = None,
                 cancel: CancelScope = True,  # ASYNC
                 _session: Any = None) -> None:
        names = c.check_resources(resources)
        super().__init__(conninfo_or_pool, ", ".join(names), lease=lease, wait=wait,
                         holder=holder, shared=shared, on_lost=on_lost,  # type: ignore[arg-type]
                         cancel=cancel,  # ASYNC
                         _names=names, _session=_session)

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
    """Campaign in ELECTION as CANDIDATE (default: unique to this object).

    ``term = await e.campaign(value, wait=...)`` waits to lead (LockTimeout
    after WAIT); the leadership is then renewed like a Lock's, ``lost`` and
    ``on_lost`` say when it ends; its lease is dated from a renewal sent
    as the campaign is answered (a leader's campaign gets its term back
    with the old expiry).  ``proclaim(value)``, ``resign()``,
    ``leader()``; ``observe()`` iterates over leader changes.  As a
    context manager it campaigns on entry and resigns on exit (LockLost if
    leadership was lost meanwhile)."""

    _kind = "election"

    def __init__(self, conninfo_or_pool: Any, election: str, *, candidate: Optional[str] = None,
                 value: Optional[str] = None, lease: c.Seconds = 30,
                 wait: Optional[c.Seconds] = None,
                 on_lost: Optional[Callable[["Election"], Any]] = None,
                 cancel: CancelScope = True,  # ASYNC
                 _session: Any = None) -> None:
        super().__init__(conninfo_or_pool, election, lease=lease, holder=candidate,
                         cancel=cancel,  # ASYNC
                         on_lost=on_lost, session=_session)
        self.value = value
        self.wait = c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        self._campaigning = False    # see c.campaign_alone
        c.register_election(self)

    @property
    def election(self) -> str:
        return self.resource

    @property
    def candidate(self) -> str:
        return self.holder

    @property
    def term(self) -> Optional[int]:
        return self.fence

    async def campaign(self, value: Optional[str] = ..., wait: Optional[c.Seconds] = ...) -> int:  # type: ignore[assignment]
        """Wait to lead; return the term.  LockTimeout after WAIT."""
        self._new_in_child()
        w = self.wait if wait is ... else c.seconds(wait, "wait", zero_ok=True, none_ok=True)
        self._begin_acquisition(held_ok=True)
        try:
            if value is not ...:
                self.value = value
            leading = self._fences if self._held_here() else None
            if leading is not None:
                await self._stop_renewal()
            else:
                # A lost term is forgotten: what this campaign is granted is a
                # new term, given back if the campaign fails after all.
                self._fences = None
            start = time.monotonic()
            self._campaigning = True
            tries = 0
            try:
                while True:
                    left = None if w is None else max(0.0, w - (time.monotonic() - start))
                    tries += 1
                    # A leader's campaign (even one whose loss was signalled)
                    # returns its term with the old expiry: a renewal dates it.
                    try:
                        got = await self._take(*c.campaign_statement(self, left), confirm=True)
                    except RolledBack as e:
                        if tries < c.ACQUIRE_TRIES:
                            await pause(c.retry_pause(tries))
                            continue          # nothing was granted: send it again
                        raise e.error from e.error.__cause__
                    if got:
                        assert self._fences is not None
                        return self._fences[0]
                    if got is False or left == 0:
                        raise LockTimeout(f"not elected in {self.resource!r} within {w} s")
            except BaseException:
                # A leader's campaign that failed: its leadership is renewed
                # again (or declared lost at its deadline), never left to run out.
                if leading is not None and self._worker is None:
                    self._started(leading, self._valid_from)
                raise
            finally:
                self._campaigning = False
        finally:
            self._acquiring = None

    async def proclaim(self, value: Optional[str]) -> bool:
        """Change the leader's value; False if no longer the leader.  In a
        child forked while leading: NotHeld (the leadership is the parent's)."""
        if self._fences is not None and not self._mine():
            raise self._not_mine()
        async with self._connection() as conn:
            ok = c.truth(await _one(conn, c.SQL_PROCLAIM, (self.resource, self.holder, value,
                                                        self.fence)))
        if ok:
            self.value = value
        return ok

    def _release_statement(self) -> "tuple[str, tuple]":
        return c.SQL_RESIGN, (self.resource, self.holder, self.fence)

    async def resign(self, timeout: Optional[c.Seconds] = c.RELEASE_TIMEOUT) -> bool:
        """Step down (the next candidate is elected at once); False if this
        candidate did not lead (any more).  TIMEOUT as for Lock.release; in
        a child forked while leading: NotHeld, nothing sent."""
        if self._fences is not None and not self._mine():
            raise self._not_mine()
        gone = "resign found this candidate no longer leading"
        ok = c.truth(await self._end(*self._release_statement(), timeout, c.truth, gone))
        if not ok and self._fences is not None:
            await self._declare_lost(gone)
        self._fences = None
        return ok

    async def leader(self) -> Optional[Leader]:
        return await leader(self._source, self.resource)

    def observe(self, *, poll: float = 1.0,
                timeout: Optional[float] = None) -> AsyncIterator[Optional[Leader]]:
        return observe(self._source, self.resource, poll=poll, timeout=timeout)

    async def __aenter__(self) -> "Election":
        await self.campaign()
        self._enter_scope()  # ASYNC
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        term = self.fence
        if term is not None and not self._mine():
            self._not_mine()      # a forked child leaves the parent's leadership alone
            return
        try:
            ok = await self.resign()
        except (psycopg.Error, Error, OSError) as e:
            log.warning("dlock: resigning from %r failed (the lease will end): %s",
                        self.resource, e)
            ok = not self.lost.is_set()
            self._fences = None
        self._leave(ok, term)


class Session(_Own):
    """A session (dlock 1.1): one keepalive for many locks, lost together.

    ``async with dlock.aio.Session(conninfo_or_pool, ttl=30) as s:`` opens
    it (``dlock.open_session``) and keeps it alive with one
    ``dlock.keepalive`` every third of TTL, on a connection taken per
    keepalive (a pool's, or one of its own).  ``s.lock(resource)``,
    ``s.semaphore(...)``, ``s.multi_lock(...)`` and ``s.election(...)``
    make a Lock, Semaphore, MultiLock or Election in the session (use it
    as usual: a block, acquire(), release()); ``s.try_lock(resource)``
    tries once and returns the held Lock or None.  They have no lease and
    send no renewal of their own.  Releasing one leaves the others.  Each
    keepalive also checks the session's holdings: a lock whose holding is
    gone (broken by an administrator) is lost, the others live on.

    When the session is lost (keepalive returned NULL, or none got through
    before its ttl's end minus a margin), ``lost`` is set on the session
    and on each of its locks, and their ``on_lost`` run: before the ttl
    ends on the server.  ``close()`` (leaving the block) closes it and
    releases its locks.  HOLDER defaults to a text unique to this object.
    A server without sessions: NotSupported (0A000)."""

    def __init__(self, conninfo_or_pool: Any, *, ttl: c.Seconds = 30,
                 holder: Optional[str] = None,
                 on_lost: Optional[Callable[["Session"], Any]] = None) -> None:
        self._source = _Source(conninfo_or_pool)
        self._given = conninfo_or_pool
        self.ttl = c.seconds(ttl, "ttl")
        assert self.ttl is not None
        self.holder = c.check_text(holder, "holder") if holder is not None else c.default_holder()
        self.on_lost = on_lost
        #: The session's id while open (None before).
        self.id: Optional[int] = None
        #: Its expiry as the server's last keepalive gave it (None before one).
        self.expires_at: Any = None
        self.closed = False
        self.lost = Event()
        self.lost_reason: Optional[str] = None
        self._locks: "set[_Leased]" = set()
        self._mutex = Mutex()
        self._conn: Optional[psycopg.AsyncConnection] = None
        self._stop = Event()
        self._worker: Any = None
        self._timer: Any = None
        self._valid_from = 0.0

    def _past_deadline(self) -> bool:
        """Whether the last acknowledged keepalive's ttl (less the margin)
        has run out by the local clock: its holdings' ``held`` is False
        from then on, even before the loss is signalled."""
        return self.id is not None and \
            time.monotonic() >= self._valid_from + self.ttl - c.lost_margin(self.ttl)

    # ---- opening and closing
    async def open(self) -> "Session":
        """Open the session (once)."""
        if self.id is not None or self.closed:
            raise RuntimeError(f"session {self.id} was opened already")
        try:
            async with self._connection() as conn:
                sent_at = time.monotonic()
                sid = await _one(conn, c.SQL_OPEN_SESSION, (c.interval(self.ttl), self.holder))
        except Error as e:
            raise unsupported(e, "session") from e.__cause__
        self.id = int(sid)
        self._valid_from = sent_at
        self._arm(sent_at)
        self._worker = spawn(self._keepalive_loop, self._stop, name=f"dlock session {self.id}")
        return self

    async def close(self, timeout: Optional[c.Seconds] = c.RELEASE_TIMEOUT) -> bool:
        """Close the session, releasing its locks (``dlock.close_session``).
        True if closed; False if it had been lost (``lost`` is set then;
        what the server may still hold of it is released all the same).
        No answer within TIMEOUT seconds (None: no limit):
        psycopg.OperationalError, and the session ends by itself (its loss
        is signalled before its ttl ends).  Again: what the first said."""
        if self.id is None:
            raise NotHeld("the session is not open")
        if self.closed:
            return not self.lost.is_set()
        t = c.seconds(timeout, "timeout", none_ok=True)
        self.closed = True
        self._stop.set()              # the keepalive's answers are ignored from now on
        with self._mutex:
            timer, self._timer = self._timer, None
            worker, self._worker = self._worker, None
        if timer is not None:
            timer.cancel()
        if worker is not None:
            await stop_worker(worker, max(1.0, min(5.0, self.ttl / 3)))

        async def send() -> Any:
            async with self._connection(t) as conn:
                with cut_after(conn, t):
                    return await _one(conn, c.SQL_CLOSE_SESSION, (self.id,))

        try:
            try:
                n = await send()
            except Error as e:
                if not retryable(e):
                    raise
                n = await send()     # rolled back (40001, 40P01): once more
        except BaseException:
            # Unanswered: the session's end is signalled before its ttl's.
            delay = self._valid_from + self.ttl - c.lost_margin(self.ttl) - time.monotonic()
            self._timer = call_later(max(0.0, delay), self._declare_lost,
                                     "its close got no answer: the session ends unrenewed")
            raise
        finally:
            await self._close()
        if n is None:
            await self._declare_lost("close_session found the session ended")
            return False
        if self.lost.is_set():
            return False        # lost first: its locks were told; the server's are gone now
        with self._mutex:
            locks, self._locks = list(self._locks), set()
        for lock in locks:
            if not lock.lost.is_set():
                lock._stopping()
                lock._fences = None   # released with the session
        return True

    async def __aenter__(self) -> "Session":
        return await self.open()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            closed = await self.close()
        except (psycopg.Error, Error, OSError) as e:
            log.warning("dlock: closing session %s failed (it will end): %s", self.id, e)
            closed = not self.lost.is_set()
        if not closed or self.lost.is_set():
            raise LockLost(f"session {self.id} was lost while open: {self.lost_reason}")

    # ---- locks in the session
    def _usable(self) -> None:
        if self.id is None:
            raise NotHeld("the session is not open: open() it first")
        if self.closed or self.lost.is_set():
            why = "closed" if not self.lost.is_set() else f"lost: {self.lost_reason}"
            raise DatabaseError(f"session {self.id} is {why}", "55000")

    def lock(self, resource: str, *, wait: Optional[c.Seconds] = None, fair: bool = False,
             shared: bool = False, on_lost: Optional[Callable[["Lock"], Any]] = None,
             cancel: CancelScope = True,  # ASYNC
             ) -> Lock:
        """A Lock on RESOURCE in this session (not acquired yet)."""
        self._usable()
        return Lock(self._given, resource, lease=self.ttl, wait=wait, holder=self.holder,
                    cancel=cancel,  # ASYNC
                    fair=fair, shared=shared, on_lost=on_lost, _session=self)

    async def try_lock(self, resource: str, *, shared: bool = False,
                       on_lost: Optional[Callable[["Lock"], Any]] = None) -> Optional[Lock]:
        """One try: the held Lock on RESOURCE, or None if it is busy."""
        lock = self.lock(resource, wait=0, shared=shared, on_lost=on_lost,
                         cancel=None,  # ASYNC
                         )
        return lock if await lock.acquire() else None

    def semaphore(self, name: str, *, max_permits: int, permits: int = 1,
                  wait: Optional[c.Seconds] = None, fair: bool = False,
                  on_lost: Optional[Callable[["Semaphore"], Any]] = None,
                  cancel: CancelScope = True,  # ASYNC
                  ) -> Semaphore:
        """A Semaphore's PERMITS in this session (not acquired yet)."""
        self._usable()
        return Semaphore(self._given, name, max_permits=max_permits, permits=permits,
                         lease=self.ttl, wait=wait, holder=self.holder, fair=fair,
                         cancel=cancel,  # ASYNC
                         on_lost=on_lost, _session=self)

    def multi_lock(self, resources: "Sequence[str]", *, wait: Optional[c.Seconds] = None,
                   shared: bool = False, on_lost: Optional[Callable[["MultiLock"], Any]] = None,
                   cancel: CancelScope = True,  # ASYNC
                   ) -> MultiLock:
        """A MultiLock of RESOURCES in this session (not acquired yet)."""
        self._usable()
        return MultiLock(self._given, resources, lease=self.ttl, wait=wait, holder=self.holder,
                         cancel=cancel,  # ASYNC
                         shared=shared, on_lost=on_lost, _session=self)

    def election(self, election: str, *, value: Optional[str] = None,
                 wait: Optional[c.Seconds] = None,
                 on_lost: Optional[Callable[["Election"], Any]] = None,
                 cancel: CancelScope = True,  # ASYNC
                 ) -> "Election":
        """An Election in this session, its candidate the session's holder."""
        self._usable()
        return Election(self._given, election, candidate=self.holder, value=value,
                        lease=self.ttl, wait=wait,
                        cancel=cancel,  # ASYNC
                        on_lost=on_lost, _session=self)

    def _adopt(self, lock: _Leased) -> bool:
        """Keep LOCK (just acquired) with the session; False when the
        session was lost or closed meanwhile: the lock is lost too."""
        with self._mutex:
            if self.lost.is_set() or self.closed:
                return False
            self._locks.add(lock)
            return True

    def _forget(self, lock: _Leased) -> None:
        with self._mutex:
            self._locks.discard(lock)

    # ---- keepalive and loss
    def _arm(self, sent_at: float) -> None:
        """The session's deadline, from the keepalive sent at SENT_AT."""
        delay = sent_at + self.ttl - c.lost_margin(self.ttl) - time.monotonic()
        timer = call_later(max(0.0, delay), self._deadline, sent_at)
        with self._mutex:
            old, self._timer = self._timer, timer
        if old is not None:
            old.cancel()

    async def _deadline(self, sent_at: float) -> None:
        with self._mutex:
            due = self._valid_from == sent_at and not self._stop.is_set()
        if due:
            await self._declare_lost("no keepalive got through within the ttl")

    async def _keepalive_loop(self, stop: Any) -> None:
        period = self.ttl / 3.0
        next_at = self._valid_from + period
        while not await wait_event(stop, max(0.0, next_at - time.monotonic())):
            # The holdings as known now: each keepalive also checks them.
            pairs = self._holdings()
            started = time.monotonic()
            bound = c.try_bound(self.ttl, self._valid_from, started)
            try:
                # Bounded as a renewal is (see _Leased._renew_loop).
                async with self._connection(bound) as conn:
                    sent_at = time.monotonic()
                    with cut_after(conn, c.answer_bound(self.ttl, self._valid_from, started + bound, sent_at)):
                        row = await _row(conn, *c.keepalive_statement(self.id, pairs))
            except (psycopg.Error, Error, OSError) as e:
                log.warning("dlock: keepalive of session %s failed, retrying within the ttl: %s",
                            self.id, e)
                next_at = c.retry_at(self.ttl, started)
                continue
            expiry, missing = row if row is not None else (None, None)
            if expiry is None:
                await self._declare_lost("keepalive returned NULL: the session had ended", stop)
                return
            with self._mutex:
                if stop.is_set():
                    return
                self._valid_from = sent_at
                self.expires_at = expiry
            self._arm(sent_at)
            next_at = sent_at + period
            await self._gone(pairs, missing)

    def _holdings(self) -> "list[tuple[str, int, _Leased, Any]]":
        """(resource, fence, lock, its holding's stop event) for each
        holding of the session's locks, those being released left out."""
        pairs: "list[tuple[str, int, _Leased, Any]]" = []
        with self._mutex:
            for lock in self._locks:
                fences, stop = lock._fences, lock._stop
                if fences is not None and not stop.is_set():
                    pairs += [(r, f, lock, stop) for r, f in zip(lock._names, fences)]
        return pairs

    async def _gone(self, pairs: "list[tuple[str, int, _Leased, Any]]",
                    missing: Optional[str]) -> None:
        """The locks of PAIRS whose holding a keepalive found missing (its
        1-based positions, as 'i,j') are lost; the session lives on.  One
        whose release began since (or acquired again) is left alone."""
        if not missing:
            return
        done: "set[int]" = set()
        for i in missing.split(","):
            resource, fence, lock, stop = pairs[int(i) - 1]
            if id(lock) in done:
                continue
            done.add(id(lock))
            await lock._declare_lost(f"its holding of {resource!r} (fence {fence}) is no longer"
                                     f" session {self.id}'s: broken by an administrator, or"
                                     " released by someone else", stop)

    async def _declare_lost(self, reason: str, stop: Any = None) -> None:
        """Set ``lost`` (once) on the session and on each of its locks, run
        their on_lost; STOP: only if the session is not being closed."""
        with self._mutex:
            if self.lost.is_set() or (stop is not None and stop.is_set()):
                return
            self.lost_reason = reason
            self.lost.set()
            self._stop.set()
            timer, self._timer = self._timer, None
            locks = list(self._locks)
        if timer is not None:
            timer.cancel()
        log.warning("dlock: session %s lost (%d locks): %s", self.id, len(locks), reason)
        for lock in locks:
            await lock._declare_lost(f"its session {self.id} was lost: {reason}")
        if self.on_lost is not None:
            try:
                await call_back(self.on_lost, self)
            except Exception:
                log.exception("dlock: on_lost callback of session %s failed", self.id)


async def leader(conninfo_or_pool: Any, election: str) -> Optional[Leader]:
    """The current leader of ELECTION, or None."""
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
    """Yield the leader of ELECTION (None: nobody leads) now and after each
    change: a new term, a new value, or no leader.  Listens on
    ``dlock.channel(election)`` on a connection of its own and also looks
    every POLL seconds (so it works where notifications do not arrive,
    behind pgbouncer in transaction mode).  Ends after TIMEOUT seconds
    without a change (None: never)."""
    source = conninfo_or_pool if isinstance(conninfo_or_pool, _Source) else _Source(conninfo_or_pool)
    async with source.connection() as conn:
        autocommit = conn.autocommit
        if not autocommit:    # a pool's connection: given back as it came
            await conn.commit()
            await set_autocommit(conn, True)
        channel = await _one(conn, c.SQL_CHANNEL, (election,))
        await conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)),
                           prepare=False)
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
                # Wait for a notification (the socket becomes readable) or POLL.
                await wait_readable(conn.fileno(), poll)
        finally:
            if not conn.closed and not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("UNLISTEN *", prepare=False)
                    await set_autocommit(conn, autocommit)
