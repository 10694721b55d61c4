"""What the sync and asyncio halves share: argument checks, default
holders, the leader record, and the SQL they send (always with parameters,
never spliced)."""

from __future__ import annotations

import datetime
import math
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any, Optional, Union

from ._errors import InvalidArgument

Seconds = Union[int, float, datetime.timedelta]

#: Statements.  Positional arguments only: they work on every version of
#: the extension's SQL (0.1 to 0.3), whose parameter lists grew at the end.
SQL_TRY_LOCK = "SELECT dlock.try_lock(%s, %s, %s)"
SQL_LOCK = "SELECT dlock.lock(%s, %s, %s, %s)"
SQL_LOCK_FAIR = "SELECT dlock.lock(%s, %s, %s, %s, true)"
#: A shared holding (extension 0.4): by name, so that a server without
#: shared locks says 42883 (no such function) instead of taking an
#: exclusive lock.
SQL_LOCK_SHARED = "SELECT dlock.lock(%s, %s, %s, %s, fair => %s, shared => true)"
SQL_RENEW = "SELECT dlock.renew(%s, %s, %s, %s)"
SQL_UNLOCK = "SELECT dlock.unlock(%s, %s, %s)"
SQL_ASSERT_FENCE = "SELECT dlock.assert_fence(%s, %s)"
SQL_CHECK = 'SELECT dlock."check"(%s, %s)'
SQL_CAMPAIGN = "SELECT dlock.campaign(%s, %s, %s, %s, %s)"
SQL_PROCLAIM = "SELECT dlock.proclaim(%s, %s, %s, %s)"
SQL_RESIGN = "SELECT dlock.resign(%s, %s, %s)"
SQL_LEADER = ("SELECT candidate, value, term, elected_at, expires_at"
              " FROM dlock.leader(%s)")
SQL_CHANNEL = "SELECT dlock.channel(%s)"
SQL_WITHDRAW = "SELECT dlock.withdraw(%s, %s)"


def lock_statement(lock: Any, wait: Optional[float]) -> "tuple[str, tuple]":
    """The statement (and its parameters) that acquires LOCK (a sync or
    asyncio Lock), waiting up to WAIT seconds; it returns the fence or NULL."""
    params = (lock.resource, lock.holder, interval(lock.lease), interval(wait))
    if lock.shared:
        return SQL_LOCK_SHARED, params + (lock.fair,)
    return (SQL_LOCK_FAIR if lock.fair else SQL_LOCK), params


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
    return None if row is None else Leader(*row)


def lost_margin(lease: float) -> float:
    """How long before the lease's end (as the client measures it from the
    moment it sent the last successful acquisition or renewal) the lock is
    declared lost when no renewal got through: a sixth of the lease, at
    most two seconds: slack for a busy client whose timer fires late.  The
    server's lease began after that moment, so loss is signalled before
    the server's expiry, never after."""
    return min(2.0, lease / 6.0)
