'use strict';
// dlock for Node.js: leased locks with fencing tokens and leader elections
// on a PostgreSQL server with dlock (the C extension or the portable
// edition), through the npm registry's `pg`.  See README.md.
const { Lock, acquire, tryAcquire, withLock } = require('./lib/lock');
const { Election, Leadership } = require('./lib/election');
const { DlockError, LockLost, LockTimeout } = require('./lib/errors');

module.exports = {
  acquire, tryAcquire, withLock, Lock, Election, Leadership, DlockError, LockLost, LockTimeout,
};
