'use strict';
// dlock for Node.js: leased locks with fencing tokens and leader elections
// on a PostgreSQL server with dlock (the C extension or the portable
// edition), through the npm registry's `pg`.  See README.md.
const {
  Lock, Semaphore, MultiLock, acquire, tryAcquire, withLock, withSemaphore, withLocks,
} = require('./lib/lock');
const { Election, Leadership } = require('./lib/election');
const { Session, openSession } = require('./lib/session');
const { DlockError, LockLost, LockTimeout, SessionLost } = require('./lib/errors');

module.exports = {
  acquire, tryAcquire, withLock, withSemaphore, withLocks, Lock, Semaphore, MultiLock, Election, Leadership, DlockError, LockLost, LockTimeout,
  Session, openSession, SessionLost,
};
