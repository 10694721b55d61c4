'use strict';
// errors.js - dlock's error classes.  Every error dlock itself raises
// carries a SQLSTATE in `code` where one applies (the server's own errors
// reach the caller unchanged: pg's DatabaseError, with `code`).

class DlockError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'DlockError';
    if (options.code !== undefined) this.code = options.code;
    else if (options.cause && typeof options.cause.code === 'string') this.code = options.cause.code;
  }
}

// The lease was lost: renew() said so (the lock was broken, or expired
// while renewals failed), or renewals kept failing until just before the
// lease's end.  `cause` is the last renewal error, if any.
class LockLost extends DlockError {
  constructor(resource, fence, reason, cause) {
    super(`dlock: lease on "${resource}" lost: ${reason}`, { cause });
    this.name = 'LockLost';
    this.resource = resource;
    this.fence = fence;
  }
}

// No lock within `wait` (lock() or campaign() returned NULL).  SQLSTATE
// 55P03 (lock_not_available), as PostgreSQL's own NOWAIT and lock_timeout.
class LockTimeout extends DlockError {
  constructor(resource) {
    super(`dlock: "${resource}" not acquired within the wait`, { code: '55P03' });
    this.name = 'LockTimeout';
    this.resource = resource;
  }
}

// A session was lost: keepalive() returned NULL (closed by someone else,
// or ended), or keepalives kept failing until just before its ttl's end.
// Each lock of the session is lost with it (a LockLost on its signal).
class SessionLost extends DlockError {
  constructor(id, reason, cause) {
    super(`dlock: session ${id} lost: ${reason}`, { cause });
    this.name = 'SessionLost';
    this.session = id;
  }
}

module.exports = { DlockError, LockLost, LockTimeout, SessionLost };
