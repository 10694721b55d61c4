"""What the synchronous API needs of threads, under the names
_flavour_aio.py gives the same things for asyncio (the generated _sync.py
imports this module where aio.py imports that one)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import psycopg

from . import _common as c

Event = threading.Event
Mutex = threading.RLock
Worker = threading.Thread
#: The running worker (thread) that calls it.
current = threading.current_thread


def spawn(fn: Callable[..., Any], *args: Any, name: str = "") -> threading.Thread:
    """Run FN(*ARGS) in a daemon thread."""
    t = threading.Thread(target=fn, args=args, daemon=True, name=name or None)
    t.start()
    return t


def stop_worker(worker: threading.Thread, timeout: float) -> None:
    """Wait up to TIMEOUT s for WORKER (told to stop) to end, unless it is
    the caller; one stuck on an unresponsive server is left behind (a
    daemon thread: it cannot change anything any more)."""
    if worker is not threading.current_thread():
        worker.join(timeout=timeout)


def call_later(delay: float, fn: Callable[..., Any], *args: Any) -> threading.Timer:
    """Run FN(*ARGS) in a thread after DELAY seconds, unless cancelled first."""
    timer = threading.Timer(delay, fn, args=args)
    timer.daemon = True
    timer.start()
    return timer


def wait_event(event: threading.Event, timeout: float) -> bool:
    """Wait up to TIMEOUT s for EVENT; whether it is set."""
    return event.wait(timeout)


def call_back(fn: Callable[[Any], Any], obj: Any) -> None:
    fn(obj)


def detached(fn: Callable[..., Any], *args: Any,
             orphaned: Optional[Callable[[Any], None]] = None) -> Any:
    """FN(*ARGS) (a thread is never cancelled: ORPHANED is never called)."""
    return fn(*args)


def set_autocommit(conn: psycopg.Connection, value: bool) -> None:
    conn.autocommit = value


def wait_readable(fd: int, timeout: float) -> None:
    """Wait up to TIMEOUT s for FD to become readable (poll: no limit on
    the descriptor's number, as select has at 1024)."""
    c.readable(fd, timeout)


def cut_after(conn: Any, timeout: Optional[float]) -> Any:
    """See _common.cut_after; the cut runs in a timer's thread."""
    return c.cut_after(conn, timeout, call_later)


def pause(seconds: float) -> None:
    """Sleep SECONDS (this thread)."""
    time.sleep(seconds)
