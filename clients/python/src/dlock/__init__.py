"""dlock: leased distributed locks with fencing tokens, in PostgreSQL.

The client library for the dlock extension (and its portable edition):

    import dlock

    with dlock.Lock("dbname=app", "nightly-report", lease=30, wait=10) as lock:
        ...                        # renewed in the background
        with conn.transaction():   # a fenced write
            lock.assert_fence(conn)
            conn.execute("UPDATE ...")

``dlock.Semaphore(conn, "slots", max_permits=3)`` takes permits of a
counting semaphore, ``dlock.MultiLock(conn, ["a", "b"])`` several
resources at once (all or nothing, ``.fences``), with the same renewal.
``dlock.aio`` has the same for asyncio; ``dlock.Election`` runs elections;
``dlock.tooz`` is a driver for OpenStack's tooz (URL ``dlock://...``).
Nothing is printed: the library logs to the ``dlock`` logger."""

import logging as _logging

from ._common import Leader
from ._errors import (DatabaseError, Error, InvalidArgument, LockLost, LockTimeout,
                      NotHeld, NotSupported, PermissionDenied, StaleFence, WrongKind)
from ._sync import Election, Lock, MultiLock, Semaphore, Session, leader, observe

__version__ = "1.2.0"

# Nothing is printed: without a handler configured by the application,
# Python's last-resort handler would write dlock's warnings to stderr.
_logging.getLogger("dlock").addHandler(_logging.NullHandler())

__all__ = [
    "Lock", "Semaphore", "MultiLock", "Election", "Session", "leader", "observe", "Leader",
    "Error", "DatabaseError", "InvalidArgument", "WrongKind", "StaleFence", "PermissionDenied",
    "NotSupported", "LockTimeout", "LockLost", "NotHeld", "__version__",
]
