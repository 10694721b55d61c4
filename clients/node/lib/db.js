'use strict';
// db.js - argument checks and one-statement calls on a client checked out
// of the caller's pool, each with its own timeout.  A client whose call
// failed for any reason but a server error (a timeout, a lost connection)
// is destroyed, not returned to the pool.  An AbortSignal ends the wait
// for a client, or cancels the statement in the server (a CancelRequest,
// as libpq sends it) and waits for its answer.

const net = require('node:net');
const os = require('node:os');
const { randomUUID } = require('node:crypto');
const { DlockError } = require('./errors');

// invalid: a bad argument, refused before anything is sent (SQLSTATE
// 22023, as the server refuses its own bad arguments).
function invalid(message) {
  return new DlockError(`dlock: ${message}`, { code: '22023' });
}

// duration NAME VALUE: a lease or wait as interval text for a parameter:
// a number of milliseconds, or a PostgreSQL interval string ("30s",
// "1 min"), which the server checks.  undefined and null: NULL (the
// server's default).
function duration(name, value) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw invalid(`${name} must be a finite number of milliseconds`);
    return `${value} milliseconds`;
  }
  if (typeof value === 'string') return value;
  throw invalid(`${name} must be a number of milliseconds or an interval string`);
}

function text(name, value, optional) {
  if (optional && (value === undefined || value === null)) return null;
  if (typeof value !== 'string') throw invalid(`${name} must be a string`);
  return value;
}

// count NAME VALUE: a number of permits, an integer (the server checks
// its range: 22023 for one not positive, or permits above maxPermits).
function count(name, value) {
  if (!Number.isInteger(value)) throw invalid(`${name} must be an integer`);
  return value;
}

// The default holder: unique to one lock object.
function uniqueHolder() {
  return `${os.hostname()}:${process.pid}:${randomUUID()}`;
}

// The longest a release, or the end of a statement cancelled on an abort,
// is waited for.
const RELEASE_TIMEOUT_MS = 10000;

// abortSignal VALUE: an AbortSignal option, or undefined for none.
function abortSignal(value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'object' || typeof value.aborted !== 'boolean' ||
      typeof value.addEventListener !== 'function' || typeof value.removeEventListener !== 'function')
    throw invalid('signal must be an AbortSignal');
  return value;
}

function checkPool(pool) {
  if (!pool || typeof pool.connect !== 'function')
    throw new TypeError('dlock: expected a pg.Pool (an object with connect())');
}

// A server error (the statement ran and was refused) leaves the
// connection usable; anything else may not, a FATAL (the backend ended:
// terminated, shut down) neither.
function isServerError(err) {
  return err && typeof err.severity === 'string' && typeof err.code === 'string' &&
    err.severity !== 'FATAL' && err.severity !== 'PANIC';
}

// unsent ERR: a statement the client's closed socket refused to write
// (EPIPE, a reset met on writing): it never reached a backend.
function unsent(err) {
  return !!err && (err.code === 'EPIPE' || (err.code === 'ECONNRESET' && err.syscall === 'write'));
}

// A rollback the server asks to retry: a serialization failure (40001:
// REPEATABLE READ or SERIALIZABLE, a row changed since the snapshot, as a
// renewal does) or a deadlock (40P01).
function retryable(err) {
  return isServerError(err) && (err.code === '40001' || err.code === '40P01');
}

// How many times an acquisition statement is sent in all when the server
// rolls it back and asks for a retry (retryable): see acquisition().
const ACQUIRE_TRIES = 10;

function timeoutError(what, ms) {
  const err = new Error(`dlock: ${what} took longer than ${ms} ms`);
  err.code = 'ETIMEDOUT';
  return err;
}

// onAbort SIGNAL: a promise resolved when SIGNAL is aborted, and a
// function that stops waiting for it.  One listener per signal however many
// calls wait on it (a signal shared by many calls must not look like a
// listener leak to node, which would print a warning).
const waiting = new WeakMap();   // signal -> { resolvers: Set, listener }
function onAbort(signal) {
  let w = waiting.get(signal);
  if (!w) {
    w = { resolvers: new Set() };
    w.listener = () => {
      waiting.delete(signal);
      for (const resolve of w.resolvers) resolve();
    };
    waiting.set(signal, w);
    signal.addEventListener('abort', w.listener, { once: true });
  }
  let resolver;
  const promise = new Promise((resolve) => { resolver = resolve; });
  w.resolvers.add(resolver);
  const stop = () => {
    w.resolvers.delete(resolver);
    if (w.resolvers.size === 0 && waiting.get(signal) === w) {
      waiting.delete(signal);
      signal.removeEventListener('abort', w.listener);
    }
  };
  return { promise, stop };
}

// connect POOL TIMEOUT SIGNAL: a client of POOL; a client that comes after
// the timeout or the abort goes back to the pool unused.
async function connect(pool, timeoutMs, signal) {
  if (!(timeoutMs > 0) && !signal) return pool.connect();
  let timer, gaveUp = false;
  const abort = signal && onAbort(signal);
  const pending = pool.connect();
  const racers = [pending];
  if (timeoutMs > 0) {
    racers.push(new Promise((_, reject) => {
      timer = later(() => reject(timeoutError('getting a connection', timeoutMs)), timeoutMs);
    }));
  }
  if (abort) racers.push(abort.promise.then(() => { throw signal.reason; }));
  try {
    return await Promise.race(racers);
  } catch (err) {
    gaveUp = true;
    throw err;
  } finally {
    clearTimeout(timer);
    if (abort) abort.stop();
    if (gaveUp) pending.then((c) => c.release(), () => {});
  }
}

// cancelRequest CLIENT MS: asks the server (or pgbouncer) to cancel
// CLIENT's running statement, on a connection of its own, as libpq's
// PQcancel does: unencrypted (it carries only the backend's key), and
// waiting for the other end to close it, by which time the backend has
// been signalled (pgbouncer also takes a client that closes first for one
// that gave up).  Resolves to true once the other end closed it; false
// after MS, or when CLIENT says nothing of its backend's key (another
// Client class).
function cancelRequest(client, ms) {
  const { processID, secretKey, host, port } = client;
  if (!Number.isInteger(processID) || !Number.isInteger(secretKey) || !port) return Promise.resolve(false);
  const packet = Buffer.alloc(16);
  packet.writeInt32BE(16, 0);
  packet.writeInt32BE(80877102, 4); // the CancelRequest code
  packet.writeInt32BE(processID, 8);
  packet.writeInt32BE(secretKey, 12);
  const where = typeof host === 'string' && host.startsWith('/')
    ? { path: `${host}/.s.PGSQL.${port}` } : { host: host || 'localhost', port: Number(port) };
  return new Promise((resolve) => {
    let closedByPeer = false;
    const s = net.connect(where, () => s.write(packet));
    const timer = later(() => s.destroy(), ms);
    s.on('data', () => {});
    s.on('end', () => { closedByPeer = true; s.end(); });
    s.on('error', () => {});
    s.on('close', () => { clearTimeout(timer); resolve(closedByPeer); });
  });
}

// run CLIENT QUERY SIGNAL: { result, unsafe }: CLIENT's result of QUERY
// (a promise).  SIGNAL aborted meanwhile: the statement is cancelled and
// its answer awaited, both within RELEASE_TIMEOUT_MS of the abort (then
// ETIMEDOUT: the outcome is unknown); the answer is returned (or thrown)
// as it came: a grant that beat the cancel is the caller's to give back.
// UNSAFE: a cancel request may still be on its way, so CLIENT must not
// run another statement (the cancel could end that one).
async function run(client, query, signal) {
  const pending = client.query(query);
  if (!signal) return { result: pending, unsafe: false };
  const abort = onAbort(signal);
  const done = pending.then(() => false, () => false);
  try {
    if (!(await Promise.race([done, abort.promise.then(() => true)]))) return { result: pending, unsafe: false };
  } finally {
    abort.stop();
  }
  const deadline = performance.now() + RELEASE_TIMEOUT_MS;
  const delivered = await cancelRequest(client, RELEASE_TIMEOUT_MS);
  let timer;
  const answered = await Promise.race([done.then(() => true),
    new Promise((resolve) => { timer = later(() => resolve(false), deadline - performance.now()); })]);
  clearTimeout(timer);
  if (answered) return { result: pending, unsafe: !delivered };
  pending.catch(() => {});
  throw timeoutError('the end of a cancelled statement', RELEASE_TIMEOUT_MS);
}

// call POOL SQL VALUES TIMEOUT [TIMING [SIGNAL]]: run one statement on a
// client of its own; the rows.  TIMEOUT (ms, or 0 for none) bounds getting
// the client and the statement.  TIMING.sent: when the statement was sent
// (performance.now(), after any wait for a free client of the pool);
// unset when it was not.  SIGNAL (an AbortSignal): aborted before the
// statement is sent, rejects with its reason and sends nothing; aborted
// while it runs, see run().
async function call(pool, sql, values, timeoutMs, timing, signal) {
  // A turn of the event loop first: the pool then sees the end of idle
  // clients whose backend ended while the loop was busy (a terminate, a
  // restart, idle_session_timeout), and drops them. A statement one of
  // them still refused to write goes on another.
  const tries = Math.min(64, ((pool.options && pool.options.max) || 10) + 1);
  for (let n = 1; ; n++) {
    await new Promise((resolve) => setImmediate(resolve));
    try {
      return await callOnce(pool, sql, values, timeoutMs, timing, signal);
    } catch (err) {
      if (n >= tries || !unsent(err) || (signal && signal.aborted)) throw err;
    }
  }
}

async function callOnce(pool, sql, values, timeoutMs, timing, signal) {
  if (signal && signal.aborted) throw signal.reason;
  const client = await connect(pool, timeoutMs, signal);
  let failure, sent = false, unsafe = false;
  // A checked-out client has no 'error' listener of the pool's: a
  // connection lost between statements must not become an uncaught error.
  const onError = (err) => { failure = failure || err; };
  client.on('error', onError);
  try {
    if (signal && signal.aborted) throw signal.reason;
    const query = { text: sql, values };
    if (timeoutMs > 0) query.query_timeout = Math.min(Math.max(1, Math.ceil(timeoutMs)), MAX_TIMER_MS);
    if (timing) timing.sent = performance.now();
    sent = true;
    const ran = await run(client, query, signal);
    unsafe = ran.unsafe;
    return (await ran.result).rows;
  } catch (err) {
    if (sent) failure = err;
    throw err;
  } finally {
    client.removeListener('error', onError);
    if (unsafe) failure = new Error('dlock: a cancel request may still be on its way');
    client.release(failure && !isServerError(failure) ? failure : undefined);
  }
}

// acquisition POOL ST TIMING SIGNAL: call() of an acquisition or
// campaign statement ST ({ sql, values, waitAt, wait }: values[waitAt] is
// its wait, WAIT the caller's: ms, an interval string, or null/undefined
// for no limit); its rows.  Rolled back by the server with a retry asked
// (retryable: 40001, a serializable caller's conflict with another;
// 40P01), it granted nothing: it is sent again, ACQUIRE_TRIES times in
// all, even a try (wait 0), each time with only the wait left until the
// call's deadline (from when acquisition() began); then that error is
// thrown.  Never once SIGNAL is aborted.  TIMING.sent: the last try's
// (unset when that one was not sent: the earlier ones granted nothing).
async function acquisition(pool, st, timing, signal) {
  const start = performance.now();
  let values = st.values, waitMs = st.wait;
  for (let tries = 1; ; tries++) {
    try {
      return await call(pool, st.sql, values, 0, timing, signal);
    } catch (err) {
      if (tries >= ACQUIRE_TRIES || !retryable(err) || (signal && signal.aborted)) throw err;
    }
    // A random pause of up to 2^tries ms (at most 32): serializable callers
    // that conflicted do not meet at once again (ten immediate tries all
    // failed under load).
    await new Promise((resolve) => later(resolve, 0.5 + Math.random() * Math.min(32, 2 ** tries)));
    delete timing.sent;               // that try granted nothing
    if (waitMs !== undefined && waitMs !== null) {
      // An interval string: its length, as the server reads it.
      if (typeof waitMs !== 'number') {
        const rows = await call(pool, 'SELECT extract(epoch FROM $1::interval)::float8 * 1000 AS ms',
          [waitMs], 0, undefined, signal);
        waitMs = Number(rows[0].ms);
      }
      values = [...st.values];
      values[st.waitAt] = duration('wait', Math.max(0, waitMs - (performance.now() - start)));
    }
  }
}

// STARTED: a column an acquisition's statement adds, when it started (µs
// since the epoch, as text); SINCE_STARTED: $4 as that moment, in a give
// back that must leave what the holder had before (acquired earlier).
const STARTED = '(extract(epoch FROM statement_timestamp()) * 1000000)::bigint::text AS started';
const SINCE_STARTED = "timestamptz 'epoch' + $4::bigint * interval '1 microsecond'";

const bigintOrNull = (v) => (v === null || v === undefined ? null : BigInt(v));

// fences V MULTI: an acquisition's result, read as text (never through the
// application's type parsers, which may turn int8 into a rounded Number):
// the fences as bigints, or null for NULL.  MULTI: a comma-separated list.
function fences(v, multi) {
  if (v === null || v === undefined) return null;
  return (multi ? String(v).split(',') : [String(v)]).map((f) => BigInt(f));
}

// later FN MS: setTimeout, but a delay past what a timer holds (2^31 - 1
// ms, about 24.8 days; Node fires a longer one after 1 ms) is cut to it:
// a caller whose timer must not fire early (a loss at a deadline) checks
// the clock when it fires and arms it again.
const MAX_TIMER_MS = 2 ** 31 - 1;
function later(fn, ms) {
  return setTimeout(fn, Math.min(Math.max(0, ms), MAX_TIMER_MS));
}

// The retries of a renewal or keepalive (lock.js, session.js): RETRY_MIN_MS
// of back-off first, doubled after each failure up to retryCap.
const RETRY_MIN_MS = 100;
const retryCap = (leaseMs) => Math.min(leaseMs / 10, 1000);

// tryTimeout: how long one renewal or keepalive begun at T may take before
// it is given up (its client dropped): a third of the lease, never past
// DEADLINE (ms, performance.now()).  (Half the time left was tried: CI
// under load lost more leases with it.)
function tryTimeout(leaseMs, deadline, t = performance.now()) {
  return Math.max(1, Math.min(deadline - t, leaseMs / 3));
}

// retryWait: how long until the try after one that began at STARTED and
// failed: BACKOFF (at most retryCap) from its start, so a try given up at
// its bound is followed at once (from its end, a stalled connection left
// the next try 0.2 s of a 3 s lease); never past DEADLINE.
function retryWait(leaseMs, backoff, started, deadline, t = performance.now()) {
  const at = Math.min(started + Math.min(backoff, retryCap(leaseMs)), deadline);
  return Math.max(0, at - t);
}

module.exports = {
  RETRY_MIN_MS, retryCap, tryTimeout, retryWait,
  invalid, duration, text, count, uniqueHolder, checkPool, abortSignal, isServerError, retryable, call, acquisition, bigintOrNull,
  fences, later, ACQUIRE_TRIES, RELEASE_TIMEOUT_MS, STARTED, SINCE_STARTED,
};
