"""dlock's exceptions.  Every error that comes from the server carries its
SQLSTATE (``exc.sqlstate``, psycopg's ``diag.sqlstate``) and the psycopg
error as ``__cause__``."""

from __future__ import annotations

from typing import Optional

import psycopg

__all__ = [
    "Error", "DatabaseError", "InvalidArgument", "WrongKind", "StaleFence",
    "PermissionDenied", "NotSupported", "LockTimeout", "LockLost", "NotHeld",
]


class Error(Exception):
    """Base class of dlock's exceptions."""

    sqlstate: Optional[str] = None


class DatabaseError(Error):
    """The server refused a call; ``sqlstate`` says why (e.g. 22023, 55P03,
    42501, 25006) and ``diag`` is psycopg's diagnostic."""

    def __init__(self, message: str, sqlstate: Optional[str] = None,
                 diag: Optional[psycopg.errors.Diagnostic] = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.diag = diag


class InvalidArgument(DatabaseError, ValueError):
    """SQLSTATE 22023: a bad resource, holder, lease or wait."""


class WrongKind(DatabaseError):
    """SQLSTATE 42809: the name is held as the other kind (a lock's name
    taken as a semaphore, or a semaphore's as a lock)."""


class StaleFence(DatabaseError):
    """SQLSTATE 55P03: ``assert_fence`` refused a fence that is no longer
    the current holding's."""


class PermissionDenied(DatabaseError, PermissionError):
    """SQLSTATE 42501: the holding belongs to another role, or the caller
    may not call the function (``break_lock``)."""


class NotSupported(DatabaseError):
    """SQLSTATE 0A000: the server's dlock lacks a feature asked for
    (``shared=True`` needs the C extension's SQL 0.4, Semaphore and
    MultiLock its SQL 0.5: ``ALTER EXTENSION dlock UPDATE``; the portable
    edition has them all from its 0.4)."""


#: What each kind needs from the server, for NotSupported's message.
NEEDS = {
    "shared": "shared locks need dlock 0.4's shared mode (lock(..., shared => true))",
    "semaphore": "semaphores need dlock 0.5's acquire(semaphore, holder, max_permits, ...)",
    "multi": "multi-locks need dlock 0.5's lock_all(resources, ...)",
    "session": "sessions need dlock 1.1's open_session(ttl, holder)",
}


def unsupported(exc: "Error", kind: Optional[str]) -> "Error":
    """EXC (from an acquisition of KIND: a key of NEEDS, or None for an
    exclusive lock) as NotSupported when it says the server has no such
    function (42883), else EXC."""
    if kind is None or getattr(exc, "sqlstate", None) != "42883":
        return exc
    return NotSupported(f"{NEEDS[kind]}; this server's dlock does not have it"
                        " (ALTER EXTENSION dlock UPDATE, or an edition without it)", "0A000",
                        getattr(exc, "diag", None))


class LockTimeout(Error, TimeoutError):
    """The lock (or election) was not obtained within ``wait``."""


class LockLost(Error):
    """The lease was lost while the block ran (it expired, or an
    administrator broke it): work done in the block was not protected to
    its end.  Raised when leaving the block."""


class NotHeld(Error):
    """An operation that needs the lock held (``assert_fence``,
    ``release``) was called on a lock that is not held."""


_BY_SQLSTATE = {
    "22023": InvalidArgument,
    "42809": WrongKind,
    "55P03": StaleFence,
    "42501": PermissionDenied,
}


def translate(exc: psycopg.Error) -> Error:
    """The dlock exception for a psycopg error (raise it ``from exc``)."""
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate is None:
        diag = getattr(exc, "diag", None)
        sqlstate = getattr(diag, "sqlstate", None)
    cls = _BY_SQLSTATE.get(sqlstate or "", DatabaseError)
    return cls(str(exc).strip() or type(exc).__name__, sqlstate,
               getattr(exc, "diag", None))


def retryable(exc: BaseException) -> bool:
    """A rollback the server asks to retry: a serialization failure
    (40001: REPEATABLE READ or SERIALIZABLE, a row changed since the
    snapshot, as a renewal does) or a deadlock (40P01)."""
    return getattr(exc, "sqlstate", None) in ("40001", "40P01")
