"""What dlock.aio needs of asyncio, under the names _flavour_sync.py gives
the same things for threads.  aio.py uses only these; the generated
_sync.py uses _flavour_sync.py's instead (tools/async_to_sync.py)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from typing import Any, Awaitable, Callable, Optional, Union

import psycopg

from . import _common as c

Event = asyncio.Event
Worker = asyncio.Task
#: The running worker (task) that calls it.
current = asyncio.current_task

#: The task cancelled when the lease is lost (True: the task that enters
#: the block; None: none).
CancelScope = Union[bool, "asyncio.Task[Any]", None]

#: The tasks started by call_later, kept referenced until they end.
_LATER: "set[asyncio.Task[Any]]" = set()


class Mutex:
    """No lock: the event loop runs one task at a time, and dlock.aio
    never awaits while it holds this."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def forget(task: "asyncio.Task[Any]") -> None:
    """Done-callback of an abandoned task: its outcome no longer matters."""
    if not task.cancelled():
        task.exception()


def spawn(fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> "asyncio.Task[Any]":
    """Run FN(*ARGS) as a task of the running loop."""
    return asyncio.get_running_loop().create_task(fn(*args), name=name or None)


async def stop_worker(worker: "asyncio.Task[Any]", timeout: float) -> None:
    """Cancel WORKER (unless it is the caller) and wait up to TIMEOUT s for
    it to end; a statement stuck on an unresponsive server is left behind."""
    if worker is asyncio.current_task():
        return
    worker.cancel()
    done, _ = await asyncio.wait({worker}, timeout=timeout)
    if not done:
        worker.add_done_callback(forget)
    else:
        forget(worker)


class _Later:
    def __init__(self, delay: float, fn: Callable[..., Awaitable[Any]], args: tuple) -> None:
        self._task: "Optional[asyncio.Task[Any]]" = None
        self._handle = asyncio.get_running_loop().call_later(delay, self._fire, fn, args)

    def _fire(self, fn: Callable[..., Awaitable[Any]], args: tuple) -> None:
        self._task = spawn(fn, *args)
        _LATER.add(self._task)
        self._task.add_done_callback(_LATER.discard)
        self._task.add_done_callback(forget)

    def cancel(self) -> None:
        """Before it fires: it never does.  After: the task runs on (it
        checks itself whether it is still current)."""
        self._handle.cancel()


def call_later(delay: float, fn: Callable[..., Awaitable[Any]], *args: Any) -> _Later:
    """Run FN(*ARGS) as a task after DELAY seconds, unless cancelled first."""
    return _Later(delay, fn, args)


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait up to TIMEOUT s for EVENT; whether it is set."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(event.wait(), timeout)
    return event.is_set()


async def call_back(fn: Callable[[Any], Any], obj: Any) -> None:
    """FN(OBJ), awaited when FN is a coroutine function."""
    r = fn(obj)
    if inspect.isawaitable(r):
        await r


async def detached(fn: Callable[..., Awaitable[Any]], *args: Any,
                   orphaned: Optional[Callable[[Any], None]] = None) -> Any:
    """FN(*ARGS) as a task of its own, run to its end even when the caller
    is cancelled meanwhile (the caller then gets CancelledError at once,
    and ORPHANED, if given, gets the task's result when it has one)."""
    task = spawn(fn, *args)
    task.add_done_callback(forget)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if orphaned is not None:
            def then(t: "asyncio.Task[Any]") -> None:
                if not t.cancelled() and t.exception() is None:
                    orphaned(t.result())
            task.add_done_callback(then)
        raise


async def set_autocommit(conn: psycopg.AsyncConnection, value: bool) -> None:
    await conn.set_autocommit(value)


async def wait_readable(fd: int, timeout: float) -> None:
    """Wait up to TIMEOUT s for FD to become readable.  psycopg uses the
    socket's reader itself while a statement runs, so ours is there only
    in between."""
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(fd, readable.set)
    try:
        await wait_event(readable, timeout)
    finally:
        loop.remove_reader(fd)


async def cancel_statement(conn: psycopg.AsyncConnection) -> None:
    """Ask the server to cancel CONN's running statement."""
    safe = getattr(conn, "cancel_safe", None)     # psycopg 3.2
    with contextlib.suppress(Exception):
        if safe is not None:
            await safe()
        else:
            await asyncio.get_running_loop().run_in_executor(None, conn.cancel)


def cut_after(conn: Any, timeout: Optional[float]) -> Any:
    """See _common.cut_after; the cut is a callback of the event loop."""
    return c.cut_after(conn, timeout, asyncio.get_running_loop().call_later)


async def pause(seconds: float) -> None:
    """Sleep SECONDS (the event loop's)."""
    await asyncio.sleep(seconds)
