'use strict';
// lock.js - leased holdings: acquire(), withLock(), withSemaphore(),
// withLocks(), and the Lock object (and its kinds: Semaphore, MultiLock)
// that renews its lease in the background and says when it is lost.
//
// Kinds (the C extension's SQL 0.4 and 0.5): a shared lock is lock(...,
// shared => true); a semaphore's permits are acquire(semaphore, holder,
// max_permits, permits, ...) and are renewed and released like a lock
// (renew, unlock by holder and fence); a MultiLock is lock_all(resources,
// ...), all or nothing, whose holdings are renewed and released together
// in one statement, and the loss of any of them is the loss of the whole.
//
// Renewal: every third of the lease, dlock.renew(resource, holder, lease,
// fence) on a client checked out of the pool for that one statement
// (holder-based, so it works behind pgbouncer in transaction pooling and
// never queues behind the caller's own work on its connection).  Each try
// is bounded (db.tryTimeout: a stalled connection leaves time for another
// try); a failed renewal is retried with back-off (db.retryWait) until shortly before the lease's end
// as this process measures it (from when the last acknowledged renewal was
// sent, after any wait for a free client of the pool, minus a margin); then, or at once when renew() returns NULL (the
// lock was broken, or it expired and someone took it), the lock is lost:
// `signal` is aborted with a LockLost, before the lease's end.
//
// Acquisition: the lease starts when the server grants it, somewhere in
// the statement's wait.  After a short wait it is dated from when the
// statement was sent; after one of a third of the lease or more, from a
// renewal sent at once (confirm()): never later than the server's expiry,
// and not so early that a long wait is taken for a lost lease.
//
// Fences are read as text (::text, lock_all's as a comma-separated list)
// and parsed to BigInt here: a type parser the application set for int8
// (pg.types.setTypeParser(20, parseInt)) must not round them.
//
// State: each Lock's own fields, touched only from this event loop; a
// renewal that returns after release() or loss is ignored.

// The statements on one holding ($1 resource, $2 holder, $3 lease, $4 or
// $3 fence), and on a MultiLock's several ($1 resources, $4 or $3 fences:
// arrays, one result for all: NULL when any holding was gone).  Booleans
// are read as text: a type parser the application set for bool must not
// turn 'f' into something truthy.
const ONE = {
  renew: 'SELECT dlock.renew($1, $2, $3::interval, $4::bigint) AS expiry',
  release: 'SELECT dlock.unlock($1, $2, $3::bigint) AS r',
  assertFence: 'SELECT dlock.assert_fence($1, $2::bigint)',
  check: 'SELECT dlock.check($1, $2::bigint)::text AS ok',
};
const EACH = ' FROM unnest($1::text[], ';
const MANY = {
  renew: 'SELECT nullif(bool_and(dlock.renew(t.r, $2, $3::interval, t.f) IS NOT NULL), false) AS expiry' +
    EACH + '$4::bigint[]) AS t(r, f)',
  release: 'SELECT nullif(bool_and(dlock.unlock(t.r, $2, t.f) IS NOT NULL), false)::text AS r' + EACH +
    '$3::bigint[]) AS t(r, f)',
  assertFence: 'SELECT count(dlock.assert_fence(t.r, t.f))' + EACH + '$2::bigint[]) AS t(r, f)',
  check: 'SELECT bool_and(dlock.check(t.r, t.f))::text AS ok' + EACH + '$2::bigint[]) AS t(r, f)',
};

const { LockLost, LockTimeout, DlockError } = require('./errors');
const db = require('./db');

const { RETRY_MIN_MS } = db;
const { RELEASE_TIMEOUT_MS } = db;

// margin: how much before the lease's end a lock whose renewals fail is
// declared lost (a tenth of the lease, at most one second): room for the
// caller to stop, and for clock-rate differences with the server.
const margin = (leaseMs) => Math.min(leaseMs / 10, 1000);

const now = () => performance.now();

const PAST_DEADLINE = 'renewals failed until just before the lease\'s end';
const UNRELEASED = 'its release got no answer: the lease ends unrenewed';

class Lock {
  // Made by acquire() and Election#campaign(), not by callers.
  constructor(pool, spec) {
    this._pool = pool;
    this._resource = spec.resource;
    this._holder = spec.holder;
    this._fence = spec.fence;
    this._leaseParam = spec.leaseParam;
    this._leaseMs = spec.leaseMs;
    this._releaseSql = spec.releaseSql;
    this._controller = new AbortController();
    this._state = 'held';          // held, released, lost
    this._lastError = undefined;
    this._renewTimer = null;
    this._lossTimer = null;
    this._releases = 0;            // releases begun (a session's keepalive checks it)
    // In a session: no lease or renewal of its own; the session's loss is its loss.
    this._session = spec.session || null;
    if (!this._session) this._renewed(spec.sentAt);
  }

  /** The Session it was taken in, or null. */
  get session() { return this._session; }

  // What the statements take for the resource and the fence (a
  // MultiLock: arrays), and which statements.
  _target() { return [this._resource, this._fence.toString()]; }
  get _sql() { return ONE; }

  get resource() { return this._resource; }
  get holder() { return this._holder; }
  /** The fencing token (bigint). */
  get fence() { return this._fence; }
  /** The lease in milliseconds. */
  get lease() { return this._leaseMs; }
  /** Aborted (with a LockLost as its reason) when the lease is lost.  (Not
   * judged by the clock here: a listener added right after reading it
   * would miss an abort made while reading.) */
  get signal() { return this._controller.signal; }
  /** Lost: also once the deadline has passed, even before its timer ran
   * (a process paused past it, a busy event loop). */
  get lost() { this._judge(); return this._state === 'lost'; }
  get released() { return this._state === 'released'; }

  // _renewed SENT: a renewal (or the acquisition) sent at SENT was
  // acknowledged: the lease lasts until SENT + lease at least.
  _renewed(sent) {
    if (this._state !== 'held') return;
    this._lastError = undefined;
    this._deadline = sent + this._leaseMs - margin(this._leaseMs);
    this._armLoss(PAST_DEADLINE);
    this._schedule(Math.max(0, sent + this._leaseMs / 3 - now()));
  }

  // _armLoss REASON: the loss at the deadline (a timer holds at most about
  // 24.8 days: a longer lease's fires early, finds time left, and re-arms).
  _armLoss(reason) {
    this._lossReason = reason;
    clearTimeout(this._lossTimer);
    this._lossTimer = db.later(() => {
      if (now() < this._deadline) this._armLoss(reason);
      else this._lose(reason);
    }, this._deadline - now());
  }

  // _judge: past the deadline by the clock, the loss is declared now
  // (its timer may not have run yet).  A session's lock: its session's.
  _judge() {
    if (this._state !== 'held') return;
    if (this._session) this._session._judge();
    else if (now() >= this._deadline) this._lose(this._lossReason);
  }

  _schedule(delay) {
    clearTimeout(this._renewTimer);
    this._renewTimer = db.later(() => { this._renewLater(RETRY_MIN_MS); }, delay);
  }

  // _renewLater: a renewal from a timer; never an unhandled rejection.
  _renewLater(backoff) {
    this._renewOnce(backoff).catch((err) => {
      this._lastError = err;
      this._lose(`renewal failed unexpectedly: ${err && err.message}`);
    });
  }

  async _renewOnce(backoff) {
    if (this._state !== 'held') return;
    const timing = {};
    const started = now();
    let rows;
    const [resource, fence] = this._target();
    try {
      rows = await db.call(this._pool, this._sql.renew,
        [resource, this._holder, this._leaseParam, fence],
        db.tryTimeout(this._leaseMs, this._deadline), timing);
    } catch (err) {
      if (this._state !== 'held') return;
      this._lastError = err;
      const wait = db.retryWait(this._leaseMs, backoff, started, this._deadline);
      clearTimeout(this._renewTimer);
      this._renewTimer = setTimeout(() => { this._renewLater(Math.min(backoff * 2, db.retryCap(this._leaseMs))); }, wait);
      return;
    }
    if (this._state !== 'held') return;
    if (rows[0].expiry === null) this._lose('renew() found it no longer held (broken, or expired and taken)');
    else this._renewed(timing.sent);
  }

  _stop(state) {
    this._state = state;
    clearTimeout(this._renewTimer);
    clearTimeout(this._lossTimer);
  }

  // _unreleased: a release that did not get through.  The holding (if the
  // server still has it) is not renewed any more: it is held, not released,
  // and lost at the renewal deadline, unless release() is retried first.
  _unreleased() {
    if (this._state !== 'released') return;
    this._state = 'held';
    if (this._session) return;       // lost with its session, if ever
    clearTimeout(this._renewTimer);
    this._armLoss(UNRELEASED);
  }

  _lose(reason) {
    if (this._state !== 'held') return;
    const err = new LockLost(this._resources ? this._resources.join(', ') : this._resource, this._fence,
      reason, this._lastError);
    this._stop('lost');
    if (this._session) this._session._forget(this);
    this._controller.abort(err);
  }

  /**
   * Gives the lock back (one count of it).  Resolves to true if it was
   * still held, false if the lease had been lost (then signal is aborted
   * too, if it was not already).  A lost lock is released too, in case the
   * server still has it (its renewals failed, not its lease).  Rejects if
   * the release did not get through or its answer was lost (it may have
   * released: it is not sent again); the lock is then no longer renewed.
   */
  async release() {
    if (this._state === 'released') return true;
    this._releases += 1;
    const wasLost = this._state === 'lost';
    if (!wasLost) this._stop('released');
    const [resource, fence] = this._target();
    const args = [resource, this._holder, fence];
    let rows;
    try {
      // A lost lock's release is a courtesy: bounded by a third of the lease.
      rows = await db.call(this._pool, this._releaseSql, args,
        wasLost ? Math.min(this._leaseMs / 3, RELEASE_TIMEOUT_MS) : RELEASE_TIMEOUT_MS);
    } catch (err) {
      if (wasLost) return false;
      // Rolled back (the caller's default isolation SERIALIZABLE met a
      // renewal under way): once more.  Never after a failed connection
      // or a timeout: it may have committed, and again it would take a
      // second count of a holding shared through one holder text.
      if (!db.retryable(err)) { this._unreleased(); throw err; }
      try {
        rows = await db.call(this._pool, this._releaseSql, args, RELEASE_TIMEOUT_MS);
      } catch (again) {
        this._unreleased();
        throw again;
      }
    }
    if (wasLost) return false;
    const r = rows[0].r;
    if (r === null || r === false) {
      this._state = 'held';
      this._lose('it was no longer held at release (broken, or expired and taken)');
      return false;
    }
    if (this._session) this._session._forget(this);
    return true;
  }

  /**
   * Runs dlock.assert_fence(resource, fence) on CLIENT, in the caller's
   * transaction: raises SQLSTATE 55P03 there unless this holding is still
   * current, and then keeps it from being taken over until that
   * transaction ends, so that a write fenced in it is atomic with the check.
   */
  async assertFence(client) {
    if (!client || typeof client.query !== 'function')
      throw new TypeError('dlock: assertFence needs the client of your transaction');
    await client.query(this._sql.assertFence, this._target());
  }

  /** dlock.check(resource, fence): whether this holding is current. */
  async check() {
    const rows = await db.call(this._pool, this._sql.check, this._target(), 0);
    return rows[0].ok === 'true';
  }
}

/** Permits of a counting semaphore (acquire(..., { maxPermits })): a Lock. */
class Semaphore extends Lock {
  constructor(pool, spec) {
    super(pool, spec);
    this._permits = spec.permits;
    this._maxPermits = spec.maxPermits;
  }

  get permits() { return this._permits; }
  get maxPermits() { return this._maxPermits; }
}
// unlock gives back every permit of the holder: a give back (giveBack)
// ends the holding only if it has just the permits this call took (it had
// none before, and no other call of the holder added any meanwhile);
// else they stay with it.  ARGS: resource, holder, fence.
Semaphore.giveBackStatement = (args, info) => [
  'SELECT dlock.unlock($1, $2, $3::bigint) AS r FROM dlock.locks ' +
  'WHERE resource = $1 AND holder = $2 AND fence = $3::bigint AND permits = $4::integer',
  [...args, info.permits]];

/**
 * Several resources held together (acquire(pool, [r1, r2, ...])): fences
 * in the order given; renewed and released together; lost when any of
 * its holdings is.  `resource` and `fence` are the first one's.
 */
class MultiLock extends Lock {
  constructor(pool, spec) {
    super(pool, spec);
    this._resources = spec.resources;
    this._fences = spec.fences;
  }

  _target() { return [this._resources, this._fences.map(String)]; }
  get _sql() { return MANY; }

  get resources() { return [...this._resources]; }
  /** The fencing tokens (bigint), in the order of `resources`. */
  get fences() { return [...this._fences]; }
}

// kindOf RESOURCE OPTS: 'multi' for an array of resources, 'semaphore'
// with opts.maxPermits (or permits), 'shared' with shared: true, else
// 'lock'; what does not fit the kind is refused (22023) before sending.
function kindOf(resource, opts) {
  if (opts.shared !== undefined && typeof opts.shared !== 'boolean')
    throw db.invalid('shared must be a boolean');
  if (opts.fair !== undefined && typeof opts.fair !== 'boolean') throw db.invalid('fair must be a boolean');
  const semaphore = opts.maxPermits !== undefined || opts.permits !== undefined;
  if (Array.isArray(resource)) {
    if (semaphore) throw db.invalid('permits and maxPermits are for one semaphore, not several resources');
    if (opts.fair !== undefined || (opts.lockDelay !== undefined && opts.lockDelay !== null))
      throw db.invalid('several resources at once (lock_all) take no fair or lockDelay option');
    resource.forEach((r) => db.text('each resource', r));
    return 'multi';
  }
  db.text('resource', resource);
  if (semaphore) {
    if (opts.shared !== undefined || (opts.lockDelay !== undefined && opts.lockDelay !== null))
      throw db.invalid('a semaphore takes no shared or lockDelay option');
    db.count('maxPermits', opts.maxPermits);
    if (opts.permits !== undefined) db.count('permits', opts.permits);
    return 'semaphore';
  }
  return opts.shared === true ? 'shared' : 'lock';
}

// What each kind needs of the server, for the 0A000 that replaces 42883
// (no such function) from a server without it.
const NEEDS = {
  shared: 'the "shared" option needs dlock\'s shared locks (the C extension\'s SQL 0.4',
  semaphore: 'semaphores need dlock\'s acquire(semaphore, ...) (the C extension\'s SQL 0.5',
  multi: 'several resources at once need dlock\'s lock_all (the C extension\'s SQL 0.5',
};

// acquisitionSql KIND OPTS: the statement that takes a holding of KIND
// ($1 resource or resources, $2 holder, $3 lease, $4 wait), with the
// values of its further parameters.  shared: true is lock(..., shared =>
// true) (SQL 0.4); a semaphore acquire(...) and several resources
// lock_all(...) (SQL 0.5).  wait and what follows it by name: 0.5 has wait
// last, 1.0 right after lease.
function acquisitionSql(kind, opts) {
  if (kind === 'semaphore') {
    return {
      sql: 'SELECT dlock.acquire($1, $2, $5::integer, $6::integer, $3::interval, wait => $4::interval, fair => $7::boolean)::text AS f, ' + db.STARTED,
      extra: [opts.maxPermits, opts.permits === undefined ? 1 : opts.permits, opts.fair === true],
    };
  }
  if (kind === 'multi') {
    return {
      sql: "SELECT array_to_string(dlock.lock_all($1::text[], $2, $3::interval, wait => $4::interval, shared => $5::boolean), ',') AS f, " + db.STARTED,
      extra: [opts.shared === true],
    };
  }
  let sql = 'SELECT dlock.lock($1, $2, $3::interval, $4::interval';
  const extra = [];
  if (opts.fair !== undefined) {
    sql += `, fair => $${5 + extra.length}::boolean`;
    extra.push(opts.fair);
  }
  if (opts.lockDelay !== undefined && opts.lockDelay !== null) {
    sql += `, lock_delay => $${5 + extra.length}::interval`;
    extra.push(db.duration('lockDelay', opts.lockDelay));
  }
  // Named only when asked for: exclusive locks keep working on servers
  // without shared mode (the 0.3 SQL and older, the portable edition).
  if (opts.shared === true) sql += ', shared => true';
  return { sql: `${sql})::text AS f, ${db.STARTED}`, extra };
}

// leaseOf: the lease in ms of a holding just taken: the number given, or
// what the server recorded (its default, or an interval string).
async function leaseOf(pool, resource, holder, fence, leaseOpt) {
  if (typeof leaseOpt === 'number') return leaseOpt;
  const rows = await db.call(pool,
    'SELECT extract(epoch FROM lease)::float8 * 1000 AS ms FROM dlock.locks ' +
    'WHERE resource = $1 AND holder = $2 AND fence = $3::bigint',
    [resource, holder, fence.toString()], 0);
  if (rows.length === 0 || rows[0].ms === null)
    throw new LockLost(resource, fence, 'gone right after it was acquired');
  return Number(rows[0].ms);
}

// confirm POOL SQL ARGS: a renewal of a holding just acquired after a
// long wait, which dates its lease: when it was sent; LockLost if the
// holding was gone already.
async function confirm(pool, sql, args, leaseMs, what, fence) {
  const timing = {};
  const rows = await db.call(pool, sql, args, Math.max(1, Math.min(leaseMs / 3, RELEASE_TIMEOUT_MS)), timing);
  if (rows[0].expiry === null)
    throw new LockLost(what, fence, 'its lease had ended before its acquisition was answered');
  return timing.sent;
}

// take: run an acquisition or campaign statement ST ({ sql, values,
// waitAt, wait }: db.acquisition, which sends it again when the server
// rolled it back); the Lock, or null when it returned NULL.  A lost
// connection leaves the outcome unknown: a
// holder made up here is then released (best effort), since nobody else
// can use it.  A grant whose dating failed, or that opts.signal aborted
// (the statement is cancelled; take then rejects with the signal's
// reason), is given back (giveBack).
// KIND's constructor gets the spec with `more` added (a MultiLock: its
// resources and fences; a Semaphore: its permits).  LEASEPARAM: the lease
// as sent (renewals send it again).  LEADING: the term of a leadership
// this candidate holds already (a leader campaigning again gets it back):
// not released on an unknown outcome.  CONFIRM: date
// the lease from a renewal whatever the wait (a campaign: the server gives
// a leader its term back with the old expiry, not a new lease).
async function take(pool, Kind, resource, holder, generated, opts, st, releaseSql, more, leaseParam,
  leading, confirmAlways) {
  const signal = db.abortSignal(opts.signal);
  const mine = leading !== undefined && leading !== null;
  const timing = {};
  let rows;
  try {
    rows = await db.acquisition(pool, st, timing, signal);
  } catch (err) {
    if (timing.sent === undefined) throw err;   // nothing sent
    if (generated && !mine && !db.isServerError(err) && !(opts.alone && !opts.alone())) {
      await db.call(pool, 'SELECT dlock.unlock_all($1)', [holder], RELEASE_TIMEOUT_MS).catch(() => {});
    }
    throw signal && signal.aborted ? signal.reason : err;
  }
  const multi = Array.isArray(resource);
  const fences = db.fences(rows[0].f, multi);
  if (fences === null) {
    if (signal && signal.aborted) throw signal.reason;
    return null;
  }
  const resources = multi ? resource : [resource];
  const target = multi ? [resources, fences.map(String)] : [resource, fences[0].toString()];
  let leaseMs, sentAt = timing.sent;
  try {
    if (signal && signal.aborted) throw signal.reason;
    leaseMs = await leaseOf(pool, resources[0], holder, fences[0], opts.lease);
    if (confirmAlways || now() - sentAt >= leaseMs / 3) {
      sentAt = await confirm(pool, (multi ? MANY : ONE).renew, [target[0], holder, leaseParam, target[1]],
        leaseMs, resources.join(', '), fences[0]);
    }
    if (signal && signal.aborted) throw signal.reason;
  } catch (err) {
    await giveBack(pool, Kind, [target[0], holder, target[1]],
      { started: rows[0].started, permits: more.permits, alone: opts.alone }, releaseSql);
    throw signal && signal.aborted ? signal.reason : err;
  }
  return new Kind(pool, {
    resource: resources[0], holder, fence: fences[0], leaseParam, leaseMs, sentAt,
    releaseSql, resources, fences, ...more,
  });
}

// giveBack POOL KIND ARGS INFO RELEASESQL: gives back what the server
// granted to an acquisition that will not return it (aborted, or its
// dating failed).  ARGS: resource or resources, holder, fence or fences.
// RELEASESQL takes one count off, a re-entry's; a kind whose release ends
// more than that (a semaphore's permits, a term) has a giveBackStatement
// (ARGS, INFO: this call's permits, its statement's `started`, and
// `alone`, whether no other call of the process shares its claim) that
// ends only what this call got, or null.  Best effort.
function giveBack(pool, Kind, args, info, releaseSql) {
  const st = Kind.giveBackStatement ? Kind.giveBackStatement(args, info) : [releaseSql, args];
  if (!st) return undefined;
  return db.call(pool, st[0], st[1], RELEASE_TIMEOUT_MS).catch(() => {});
}

function checkOpts(opts) {
  if (opts === undefined || opts === null) return {};
  if (typeof opts !== 'object') throw new TypeError('dlock: options must be an object');
  return opts;
}

/**
 * Takes RESOURCE, waiting up to opts.wait (ms or an interval string;
 * default: no limit but statement_timeout), with opts.lease (default: the
 * server's dlock.default_lease) and opts.holder (default: unique to this
 * lock).  Rejects with LockTimeout (55P03) if the wait ends first.
 * opts.maxPermits (and opts.permits, default 1): permits of the semaphore
 * RESOURCE, a Semaphore.  RESOURCE an array: every one of them or none, a
 * MultiLock.
 */
async function acquire(pool, resource, opts) {
  db.checkPool(pool);
  opts = checkOpts(opts);
  const lock = await tryTake(pool, resource, opts, opts.wait);
  if (lock === null) throw new LockTimeout(resource);
  return lock;
}

/** One attempt, no waiting: the Lock, or null if someone else has it. */
async function tryAcquire(pool, resource, opts) {
  db.checkPool(pool);
  opts = checkOpts(opts);
  return tryTake(pool, resource, opts, 0);
}

async function tryTake(pool, resource, opts, wait) {
  const kind = kindOf(resource, opts);
  const generated = opts.holder === undefined || opts.holder === null;
  const holder = generated ? db.uniqueHolder() : db.text('holder', opts.holder);
  const { sql, extra } = acquisitionSql(kind, opts);
  const values = [kind === 'multi' ? [...resource] : resource, holder, db.duration('lease', opts.lease),
    db.duration('wait', wait), ...extra];
  const Kind = kind === 'multi' ? MultiLock : kind === 'semaphore' ? Semaphore : Lock;
  const more = kind === 'semaphore' ? { maxPermits: extra[0], permits: extra[1] } : {};
  try {
    return await take(pool, Kind, values[0], holder, generated, opts, { sql, values, waitAt: 3, wait },
      (kind === 'multi' ? MANY : ONE).release, more, values[2]);
  } catch (err) {
    if (kind !== 'lock' && err && err.code === '42883')
      throw new DlockError(`dlock: ${NEEDS[kind]}: ALTER EXTENSION dlock UPDATE); this server's dlock does not have it`,
        { code: '0A000', cause: err });
    throw err;
  }
}

/**
 * Runs FN(lock) holding RESOURCE and releases it after; FN's result.  If
 * the lease was lost meanwhile, rejects with the LockLost (after FN has
 * settled; FN should watch lock.signal), whatever FN did; its own error is
 * then the LockLost's `callbackError`.
 */
async function withLock(pool, resource, fn, opts) {
  if (typeof fn !== 'function') throw new TypeError('dlock: withLock needs a function');
  const lock = await acquire(pool, resource, opts);
  let result, failure, failed = false;
  try {
    result = await fn(lock);
  } catch (err) {
    failed = true;
    failure = err;
  }
  let held;
  try {
    held = await lock.release();
  } catch {
    // Not released (a lost connection or answer, or the server refused): the
    // lease then runs out.  FN ran under a held lease all the same.
  }
  if (lock.lost || held === false) {
    const lost = lock.signal.reason;
    if (failed) lost.callbackError = failure;
    throw lost;
  }
  if (failed) throw failure;
  return result;
}

/** withLock for the permits of semaphore NAME: opts.maxPermits is required. */
async function withSemaphore(pool, name, fn, opts) {
  opts = checkOpts(opts);
  if (opts.maxPermits === undefined) throw db.invalid('withSemaphore needs options.maxPermits');
  if (Array.isArray(name)) throw db.invalid('withSemaphore takes one semaphore name');
  return withLock(pool, name, fn, opts);
}

/** withLock for every resource of RESOURCES at once (all or none). */
async function withLocks(pool, resources, fn, opts) {
  if (!Array.isArray(resources)) throw db.invalid('withLocks needs an array of resources');
  return withLock(pool, resources, fn, opts);
}

const LOCK_SQL = { one: ONE, many: MANY };

module.exports = {
  LOCK_SQL, Lock, Semaphore, MultiLock, acquire, tryAcquire, withLock, withSemaphore, withLocks, take, giveBack,
  checkOpts,
};
