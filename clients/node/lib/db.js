'use strict';
// db.js - argument checks and one-statement calls on a client checked out
// of the caller's pool, each with its own timeout.  A client whose call
// failed for any reason but a server error (a timeout, a lost connection)
// is destroyed, not returned to the pool.

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

function checkPool(pool) {
  if (!pool || typeof pool.connect !== 'function')
    throw new TypeError('dlock: expected a pg.Pool (an object with connect())');
}

// A server error (the statement ran and was refused) leaves the
// connection usable; anything else may not.
function isServerError(err) {
  return err && typeof err.severity === 'string' && typeof err.code === 'string';
}

function timeoutError(what, ms) {
  const err = new Error(`dlock: ${what} took longer than ${ms} ms`);
  err.code = 'ETIMEDOUT';
  return err;
}

// call POOL SQL VALUES TIMEOUT [TIMING]: run one statement on a client of
// its own; the rows.  TIMEOUT (ms, or 0 for none) bounds getting the
// client and the statement.  TIMING.sent: when the statement was sent
// (performance.now(), after any wait for a free client of the pool).
async function call(pool, sql, values, timeoutMs, timing) {
  let client;
  if (timeoutMs > 0) {
    let timer, timedOut = false;
    const pending = pool.connect();
    try {
      client = await Promise.race([
        pending,
        new Promise((_, reject) => {
          timer = setTimeout(() => {
            timedOut = true;
            reject(timeoutError('getting a connection', timeoutMs));
          }, timeoutMs);
        }),
      ]);
    } catch (err) {
      if (timedOut) pending.then((c) => c.release(true), () => {});
      throw err;
    } finally {
      clearTimeout(timer);
    }
  } else {
    client = await pool.connect();
  }
  let failure;
  // A checked-out client has no 'error' listener of the pool's: a
  // connection lost between statements must not become an uncaught error.
  const onError = (err) => { failure = failure || err; };
  client.on('error', onError);
  try {
    const query = { text: sql, values };
    if (timeoutMs > 0) query.query_timeout = Math.max(1, Math.ceil(timeoutMs));
    if (timing) timing.sent = performance.now();
    const res = await client.query(query);
    return res.rows;
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    client.removeListener('error', onError);
    client.release(failure && !isServerError(failure) ? failure : undefined);
  }
}

const bigintOrNull = (v) => (v === null || v === undefined ? null : BigInt(v));

// fences V MULTI: an acquisition's result, read as text (never through the
// application's type parsers, which may turn int8 into a rounded Number):
// the fences as bigints, or null for NULL.  MULTI: a comma-separated list.
function fences(v, multi) {
  if (v === null || v === undefined) return null;
  return (multi ? String(v).split(',') : [String(v)]).map((f) => BigInt(f));
}

module.exports = {
  invalid, duration, text, count, uniqueHolder, checkPool, isServerError, call, bigintOrNull, fences,
};
