'use strict';
// session.js - sessions (dlock 1.1): openSession() and the Session that
// keeps many holdings alive with one keepalive and loses them together.
//
// Keepalive: every third of the ttl, dlock.keepalive(id) on a client
// checked out of the pool for that one statement (so it works behind
// pgbouncer in transaction pooling), bounded and retried as a renewal is
// (db.tryTimeout, db.retryWait) until shortly before the ttl's end as this process measures it (from
// when the last acknowledged keepalive was sent, minus a margin); then,
// or at once when keepalive() returns NULL (closed by someone else, or
// ended), the session is lost: its `signal` is aborted with a SessionLost
// and each of its locks' `signal` with a LockLost, before the ttl's end.
// The same statement reads which of the session's holdings (resource,
// fence: as known when it was sent) are gone: a lock broken by an
// administrator is lost alone; the session and its other locks live on.
// A lock whose release began meanwhile is not lost (its unlock may be
// what removed it), nor one taken after the statement was sent.
//
// Holdings: acquire(), tryAcquire(), withLock() and campaign() pass
// `session => id` and no lease; their Locks renew nothing of their own.
// Releasing one leaves the others; close() releases them all.
//
// State: the Session's own fields, on this event loop; a keepalive that
// returns after close() or loss is ignored.

const { Lock, Semaphore, MultiLock, LOCK_SQL, giveBack } = require('./lock');
const { LockTimeout, DlockError, SessionLost } = require('./errors');
const db = require('./db');

const { RETRY_MIN_MS } = db;
const { RELEASE_TIMEOUT_MS } = db;
const margin = (ttlMs) => Math.min(ttlMs / 10, 1000);
const now = () => performance.now();
const PAST_DEADLINE = 'no keepalive got through before the ttl\'s end';

const SQL = {
  open: 'SELECT dlock.open_session($1::interval, $2)::text AS id',
  // The keepalive, and which of the pairs ($2 resources, $3 fences) of its
  // holdings the session no longer has (their ordinals, comma-separated).
  keepalive: 'SELECT dlock.keepalive($1::bigint) AS e, ' +
    '(SELECT string_agg(t.i::text, \',\') FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS t(r, f, i) ' +
    'WHERE NOT EXISTS (SELECT FROM dlock.locks l WHERE l.resource = t.r AND l.fence = t.f ' +
    'AND l.session = $1::bigint)) AS gone',
  close: 'SELECT dlock.close_session($1::bigint) AS n',
  lock: 'SELECT dlock.lock($1, $2, wait => $3::interval, fair => $4::boolean, shared => $5::boolean, ' +
    'lock_delay => $6::interval, session => $7::bigint)::text AS f, ' + db.STARTED,
  semaphore: 'SELECT dlock.acquire($1, $2, $3::integer, $4::integer, wait => $5::interval, fair => $6::boolean, ' +
    'session => $7::bigint)::text AS f, ' + db.STARTED,
  multi: "SELECT array_to_string(dlock.lock_all($1::text[], $2, wait => $3::interval, shared => $4::boolean, " +
    "session => $5::bigint), ',') AS f, " + db.STARTED,
  campaign: 'SELECT dlock.campaign($1, $2, $3, wait => $4::interval, session => $5::bigint)::text AS f, ' + db.STARTED,
};

class Session {
  // Made by openSession(), not by callers.
  constructor(pool, id, holder, ttlMs, sentAt) {
    this._pool = pool;
    this._id = id;
    this._holder = holder;
    this._ttlMs = ttlMs;
    this._state = 'open';          // open, closed, lost
    this._locks = new Set();
    this._controller = new AbortController();
    this._lastError = undefined;
    this._timer = null;
    this._lossTimer = null;
    this._expiresAt = null;
    this._kept(sentAt);
  }

  /** The expiry the server's last keepalive gave (a Date; null before one). */
  get expiresAt() { return this._expiresAt; }

  /** The session's id (bigint). */
  get id() { return this._id; }
  get holder() { return this._holder; }
  /** The ttl in milliseconds. */
  get ttl() { return this._ttlMs; }
  /** Aborted (with a SessionLost as its reason) when the session is lost. */
  get signal() { return this._controller.signal; }
  /** Lost: also once the deadline has passed, even before its timer ran. */
  get lost() { this._judge(); return this._state === 'lost'; }
  get closed() { return this._state === 'closed'; }

  _kept(sent) {
    if (this._state !== 'open') return;
    this._lastError = undefined;
    this._deadline = sent + this._ttlMs - margin(this._ttlMs);
    this._armLoss();
    clearTimeout(this._timer);
    this._timer = db.later(() => this._keepLater(RETRY_MIN_MS), sent + this._ttlMs / 3 - now());
  }

  // _armLoss: the loss at the deadline (see Lock#_armLoss).
  _armLoss() {
    clearTimeout(this._lossTimer);
    this._lossTimer = db.later(() => {
      if (now() < this._deadline) this._armLoss();
      else this._lose(PAST_DEADLINE);
    }, this._deadline - now());
  }

  // _judge: past the deadline by the clock, the loss is declared now.
  _judge() {
    if (this._state === 'open' && now() >= this._deadline) this._lose(PAST_DEADLINE);
  }

  _keepLater(backoff) {
    this._keepOnce(backoff).catch((err) => {
      this._lastError = err;
      this._lose(`keepalive failed unexpectedly: ${err && err.message}`);
    });
  }

  async _keepOnce(backoff) {
    if (this._state !== 'open') return;
    const timing = {};
    const started = now();
    let rows;
    // The (resource, fence) pairs of the holdings known now, and whose each is.
    const resources = [], fences = [], owners = [];
    for (const lock of this._locks) {
      const [r, f] = lock._target();
      const rs = Array.isArray(r) ? r : [r];
      const fs = Array.isArray(f) ? f : [f];
      const owner = { lock, releases: lock._releases };
      for (let i = 0; i < rs.length; i++) {
        resources.push(rs[i]);
        fences.push(fs[i]);
        owners.push(owner);
      }
    }
    try {
      rows = await db.call(this._pool, SQL.keepalive, [this._id.toString(), resources, fences],
        db.tryTimeout(this._ttlMs, this._deadline), timing);
    } catch (err) {
      if (this._state !== 'open') return;
      this._lastError = err;
      const wait = db.retryWait(this._ttlMs, backoff, started, this._deadline);
      clearTimeout(this._timer);
      this._timer = setTimeout(() => this._keepLater(Math.min(backoff * 2, db.retryCap(this._ttlMs))), wait);
      return;
    }
    if (this._state !== 'open') return;
    if (rows[0].e === null) this._lose('keepalive() returned NULL: the session had ended');
    else {
      this._expiresAt = rows[0].e;
      this._kept(timing.sent);
      if (rows[0].gone !== null) this._gone(String(rows[0].gone).split(',').map((i) => owners[Number(i) - 1]));
    }
  }

  // _gone OWNERS: holdings the keepalive found missing: lost, unless their
  // release began meanwhile (its unlock may be what removed them).
  _gone(owners) {
    for (const { lock, releases } of owners) {
      if (!this._locks.has(lock) || lock._state !== 'held' || lock._releases !== releases) continue;
      lock._lose(`session ${this._id} no longer has it (broken, or released by someone else)`);
    }
  }

  _stop(state) {
    this._state = state;
    clearTimeout(this._timer);
    clearTimeout(this._lossTimer);
  }

  _lose(reason) {
    if (this._state !== 'open' && this._state !== 'closing') return;
    this._stop('lost');
    this._controller.abort(new SessionLost(this._id, reason, this._lastError));
    const locks = [...this._locks];
    this._locks.clear();
    for (const lock of locks) lock._lose(`its session ${this._id} was lost: ${reason}`);
  }

  // _adopt LOCK: keep a holding just taken; false (and LOCK lost) when the
  // session was lost or closed meanwhile.
  _adopt(lock) {
    if (this._state !== 'open') {
      lock._lose(`its session ${this._id} was ${this._state} as it was acquired`);
      return false;
    }
    this._locks.add(lock);
    return true;
  }

  _forget(lock) { this._locks.delete(lock); }

  _usable() {
    if (this._state !== 'open')
      throw new DlockError(`dlock: session ${this._id} is ${this._state}`, { code: '55000' });
  }

  // _take: run an acquisition or campaign ST ({ sql, values, waitAt,
  // wait }: db.acquisition, which sends it again when the server rolled it
  // back) in this session; the lock, or null.  SIGNAL aborted: the
  // statement is cancelled, what was granted
  // all the same given back (giveBack), and _take rejects with the
  // signal's reason.
  async _take(Kind, resource, st, releaseSql, more, signal) {
    this._usable();
    const timing = {};
    let rows;
    try {
      rows = await db.acquisition(this._pool, st, timing, signal);
    } catch (err) {
      throw signal && signal.aborted && timing.sent !== undefined ? signal.reason : err;
    }
    const multi = Array.isArray(resource);
    const fences = db.fences(rows[0].f, multi);
    if (signal && signal.aborted) {
      if (fences !== null) {
        await giveBack(this._pool, Kind, [resource, this._holder, multi ? fences.map(String) : fences[0].toString()],
          { started: rows[0].started, permits: more.permits, alone: more.alone }, releaseSql);
      }
      throw signal.reason;
    }
    if (fences === null) return null;
    const resources = multi ? resource : [resource];
    const lock = new Kind(this._pool, {
      resource: resources[0], holder: this._holder, fence: fences[0], leaseMs: this._ttlMs,
      releaseSql, resources, fences, session: this, ...more,
    });
    this._adopt(lock);
    return lock;
  }

  async _try(resource, opts, wait) {
    opts = opts === undefined || opts === null ? {} : opts;
    if (typeof opts !== 'object') throw new TypeError('dlock: options must be an object');
    if (opts.lease !== undefined || opts.holder !== undefined)
      throw db.invalid('a lock in a session has no lease or holder of its own (the session\'s)');
    const w = db.duration('wait', wait);
    const signal = db.abortSignal(opts.signal);
    const id = this._id.toString();
    if (Array.isArray(resource)) {
      resource.forEach((r) => db.text('each resource', r));
      return this._take(MultiLock, [...resource], { sql: SQL.multi,
        values: [[...resource], this._holder, w, opts.shared === true, id], waitAt: 2, wait },
      LOCK_SQL.many.release, {}, signal);
    }
    db.text('resource', resource);
    if (opts.maxPermits !== undefined) {
      db.count('maxPermits', opts.maxPermits);
      const permits = opts.permits === undefined ? 1 : db.count('permits', opts.permits);
      return this._take(Semaphore, resource, { sql: SQL.semaphore,
        values: [resource, this._holder, opts.maxPermits, permits, w, opts.fair === true, id], waitAt: 4, wait },
      LOCK_SQL.one.release, { maxPermits: opts.maxPermits, permits }, signal);
    }
    return this._take(Lock, resource, { sql: SQL.lock,
      values: [resource, this._holder, w, opts.fair === true, opts.shared === true,
        db.duration('lockDelay', opts.lockDelay), id], waitAt: 2, wait }, LOCK_SQL.one.release, {}, signal);
  }

  /**
   * Takes RESOURCE in this session (as acquire(): opts.wait, fair, shared,
   * lockDelay; maxPermits/permits for a semaphore; an array for several):
   * no lease of its own.  LockTimeout (55P03) when the wait ends first.
   */
  async acquire(resource, opts) {
    const lock = await this._try(resource, opts, opts && opts.wait);
    if (lock === null) throw new LockTimeout(resource);
    return lock;
  }

  /** One attempt: the Lock in this session, or null if someone else has it. */
  tryAcquire(resource, opts) { return this._try(resource, opts, 0); }

  /** withLock() in this session: FN(lock), then the lock is released. */
  async withLock(resource, fn, opts) {
    if (typeof fn !== 'function') throw new TypeError('dlock: withLock needs a function');
    const lock = await this.acquire(resource, opts);
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
      // Not released: it ends with the session.
    }
    if (lock.lost || held === false) {
      const lost = lock.signal.reason;
      if (failed) lost.callbackError = failure;
      throw lost;
    }
    if (failed) throw failure;
    return result;
  }

  /**
   * Campaigns in ELECTION in this session (the session's holder is the
   * candidate), waiting up to opts.wait; the Leadership once elected.
   */
  async campaign(election, value, opts) {
    db.text('election', election);
    db.text('value', value, true);
    opts = opts || {};
    const signal = db.abortSignal(opts.signal);
    const { Leadership, claim } = require('./election');
    const mine = claim(election, this._holder);
    let l;
    try {
      l = await this._take(Leadership, election, { sql: SQL.campaign,
        values: [election, this._holder, value ?? null, db.duration('wait', opts.wait), this._id.toString()],
        waitAt: 3, wait: opts.wait }, 'SELECT nullif(dlock.resign($1, $2, $3::bigint), false)::text AS r', { alone: mine.alone }, signal);
    } finally {
      if (!l) mine();
    }
    if (l === null) throw new LockTimeout(election);
    l._claim = mine;
    return l;
  }

  /**
   * Closes the session (dlock.close_session), releasing its holdings.
   * True if closed; false if it had been lost (what the server may still
   * hold of it is released all the same).  Again: what the first said.
   */
  async close() {
    if (this._state === 'closed') return true;
    if (this._state === 'lost') {
      // What the server may still hold of it (its keepalives failed, not
      // its ttl) is released all the same, best effort.
      if (!this._courtesy) {
        this._courtesy = db.call(this._pool, SQL.close, [this._id.toString()], Math.min(this._ttlMs / 3, RELEASE_TIMEOUT_MS))
          .catch(() => {});
      }
      await this._courtesy;
      return false;
    }
    if (this._closing) return this._closing;
    this._state = 'closing';
    clearTimeout(this._timer);
    this._closing = (async () => {
      const close = () => db.call(this._pool, SQL.close, [this._id.toString()], RELEASE_TIMEOUT_MS);
      let rows;
      try {
        // Rolled back (40001, 40P01): once more.
        rows = await close().catch((err) => { if (db.retryable(err)) return close(); throw err; });
      } catch (err) {
        // Unanswered: the session is lost at the deadline, as if unrenewed.
        this._closing = null;
        this._lastError = err;
        if (this._state === 'closing') this._state = 'open';
        clearTimeout(this._timer);
        throw err;
      }
      if (this._state === 'lost') return false;
      if (rows[0].n === null) {
        this._lose('close_session() found the session ended');
        return false;
      }
      this._stop('closed');
      for (const lock of this._locks) lock._stop('released');
      this._locks.clear();
      return true;
    })();
    return this._closing;
  }
}

/**
 * Opens a session (dlock 1.1): opts.ttl (ms or an interval string;
 * default: the server's dlock.default_lease), opts.holder (default:
 * unique to this session).  On a server without sessions: a DlockError
 * with code 0A000.
 */
async function openSession(pool, opts) {
  db.checkPool(pool);
  opts = opts === undefined || opts === null ? {} : opts;
  if (typeof opts !== 'object') throw new TypeError('dlock: options must be an object');
  const holder = opts.holder === undefined || opts.holder === null ? db.uniqueHolder() : db.text('holder', opts.holder);
  const timing = {};
  let rows;
  try {
    rows = await db.call(pool, SQL.open, [db.duration('ttl', opts.ttl), holder], 0, timing);
  } catch (err) {
    if (err && err.code === '42883')
      throw new DlockError('dlock: sessions need dlock 1.1\'s open_session(ttl, holder): ALTER EXTENSION dlock ' +
        'UPDATE; this server\'s dlock does not have it', { code: '0A000', cause: err });
    throw err;
  }
  const id = BigInt(rows[0].id);
  let ttlMs = opts.ttl;
  if (typeof ttlMs !== 'number') {
    const r = await db.call(pool, 'SELECT extract(epoch FROM ttl)::float8 * 1000 AS ms FROM dlock.sessions ' +
      'WHERE id = $1::bigint', [id.toString()], 0);
    if (r.length === 0) throw new SessionLost(id, 'gone right after it was opened');
    ttlMs = Number(r[0].ms);
  }
  return new Session(pool, id, holder, ttlMs, timing.sent);
}

module.exports = { Session, openSession };
