// ESM entry point: the CommonJS module's exports.
import dlock from './index.js';

export const {
  acquire, tryAcquire, withLock, withSemaphore, withLocks, Lock, Semaphore, MultiLock, Election, Leadership, DlockError, LockLost, LockTimeout,
  Session, openSession, SessionLost,
} = dlock;
export default dlock;
