'use strict';
// election.js - leader election on dlock's campaign/proclaim/resign and
// an async iterator of leader changes.
//
// A leadership is a Lock (lock.js) on the election whose fence is the
// term: it is renewed the same way, its `signal` is aborted when the lease
// is lost, and releasing it resigns.
//
// Observing: a client checked out of the pool for the iterator's life
// LISTENs on dlock.channel(election) and reads dlock.leader(election) at
// each event, and every few seconds besides (an expiry the reaper has not
// announced yet).  Behind a pooler (pgbouncer in transaction mode, where
// notifications go astray: detected, as the CLI does, by the backend pid
// the pooler makes up) it polls instead.  A lost connection is replaced,
// with back-off, until the caller stops.  State: each iterator's own
// variables, on this event loop.

const { Lock, take, checkOpts } = require('./lock');
const { LockTimeout, LockLost, DlockError } = require('./errors');
const db = require('./db');

class Leadership extends Lock {
  /** The term (bigint): the holding's fence. */
  get term() { return this._fence; }

  // _stop: released or lost, it no longer claims its election (claim).
  _stop(state) {
    super._stop(state);
    if (this._claim) this._claim();
  }

  /** Changes the leader's value; false if it no longer leads. */
  async proclaim(value) {
    db.text('value', value, true);
    const rows = await db.call(this._pool, 'SELECT dlock.proclaim($1, $2, $3, $4::bigint)::text AS ok',
      [this._resource, this._holder, value, this._fence.toString()], 0);
    return rows[0].ok === 'true';
  }

  /** Steps down (the next candidate is elected at once); false if it no longer led. */
  resign() { return this.release(); }
}
// A campaign gets back a term its candidate leads already (this call's
// or another's of the same candidate): a give back (giveBack in lock.js)
// resigns only a term elected since its statement began, and only when
// no other campaign or leadership of this process claims that election
// and candidate (claim).  ARGS: election, candidate, term.
Leadership.giveBackStatement = (args, info) => (info.alone && !info.alone() ? null : [
  'SELECT nullif(dlock.resign($1, $2, $3::bigint), false)::text AS r FROM dlock.leader($1) l ' +
  `WHERE l.term = $3::bigint AND l.elected_at >= ${db.SINCE_STARTED}`,
  [...args, info.started]]);

// claim ELECTION CANDIDATE: counts a campaign of this process, then the
// leadership it got, until it ends; the function that ends the claim, with
// `alone()`: whether it is the only one.  Two Election objects of one
// candidate, or two campaigns of one object, are two claims.
const claims = new Map();
function claim(election, candidate) {
  const key = JSON.stringify([election, candidate]);
  claims.set(key, (claims.get(key) || 0) + 1);
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    const n = claims.get(key) - 1;
    if (n > 0) claims.set(key, n);
    else claims.delete(key);
  };
  end.alone = () => claims.get(key) === 1;
  return end;
}

// The term as text: see lock.js (type parsers).
const LEADER_SQL =
  'SELECT candidate, value, term::text AS term, elected_at, expires_at FROM dlock.leader($1)';

function toLeader(row) {
  return {
    candidate: row.candidate,
    value: row.value,
    term: BigInt(row.term),
    electedAt: row.elected_at,
    expiresAt: row.expires_at,
  };
}

const sleep = (ms, signal, wake) => new Promise((resolve) => {
  const timer = db.later(done, ms);
  function done() {
    clearTimeout(timer);
    signal?.removeEventListener('abort', done);
    wake.fn = null;
    resolve();
  }
  wake.fn = done;
  signal?.addEventListener('abort', done);
});

class Election {
  /**
   * opts.candidate: this candidate's holder text (default: unique to this
   * object); opts.lease: the leadership's lease (default: the server's).
   */
  constructor(pool, name, opts) {
    db.checkPool(pool);
    db.text('election', name);
    opts = checkOpts(opts);
    this._pool = pool;
    this._name = name;
    this._generated = opts.candidate === undefined || opts.candidate === null;
    this._candidate = this._generated ? db.uniqueHolder() : db.text('candidate', opts.candidate);
    this._lease = opts.lease;
    db.duration('lease', opts.lease);
    this._leadership = null;
  }

  get name() { return this._name; }
  get candidate() { return this._candidate; }
  /** The Leadership of the last successful campaign(), or null. */
  get leadership() { return this._leadership; }

  /**
   * Campaigns, waiting up to opts.wait (default: no limit) behind earlier
   * candidates; the Leadership once elected.  Rejects with LockTimeout
   * (55P03) if the wait ends first.  A leader campaigning again gets its
   * current term.  The server does not extend the lease of a term it gives
   * back: a renewal sent right after the campaign dates the lease.
   */
  async campaign(value, opts) {
    db.text('value', value, true);
    opts = checkOpts(opts);
    const values = [this._name, this._candidate, value ?? null,
      db.duration('lease', this._lease), db.duration('wait', opts.wait)];
    const cur = this._leadership;
    const leading = cur && !cur.lost && !cur.released ? cur.term : null;
    const mine = claim(this._name, this._candidate);
    let l;
    try {
      l = await take(this._pool, Leadership, this._name, this._candidate, this._generated,
        { lease: this._lease, signal: opts.signal, alone: mine.alone },
        { sql: `SELECT dlock.campaign($1, $2, $3, $4::interval, $5::interval)::text AS f, ${db.STARTED}`, values,
          waitAt: 4, wait: opts.wait },
        'SELECT nullif(dlock.resign($1, $2, $3::bigint), false)::text AS r', {}, values[3], leading, true);
    } catch (err) {
      mine();
      // The renewal found the term it leads in gone: that leadership is lost.
      if (err instanceof LockLost && leading !== null && err.fence === leading) cur._lose('campaigning again, a renewal found its term gone');
      throw err;
    }
    if (l === null) {
      mine();
      throw new LockTimeout(this._name);
    }
    l._claim = mine;
    if (this._leadership && this._leadership.term === l.term && !this._leadership.lost &&
        !this._leadership.released) {
      // Campaigning again while leading: one leadership, renewed once.
      l._stop('released');
      return this._leadership;
    }
    this._leadership = l;
    return l;
  }

  _current() {
    if (!this._leadership) throw new DlockError('dlock: not campaigned yet', { code: '55000' });
    return this._leadership;
  }

  /** The leader changes its value; false if this candidate does not lead. */
  proclaim(value) { return this._current().proclaim(value); }

  /** Steps down; false if this candidate did not lead. */
  resign() { return this._current().resign(); }

  /** The current leader ({candidate, value, term, electedAt, expiresAt}), or null. */
  async leader() {
    const rows = await db.call(this._pool, LEADER_SQL, [this._name], 0);
    return rows.length ? toLeader(rows[0]) : null;
  }

  /**
   * The leader now, then each change (another candidate, term or value;
   * null: no leader), until opts.signal aborts or the loop is left.
   * opts.pollInterval (ms, default 200): polling behind a pooler;
   * opts.recheckInterval (ms, default 5000): re-reads while listening.
   */
  async *observe(opts) {
    opts = checkOpts(opts);
    const signal = opts.signal;
    const pollMs = opts.pollInterval ?? 200;
    const recheckMs = opts.recheckInterval ?? 5000;
    for (const [k, v] of [['pollInterval', pollMs], ['recheckInterval', recheckMs]]) {
      if (typeof v !== 'number' || !(v > 0) || !Number.isFinite(v)) throw db.invalid(`${k} must be a positive number of milliseconds`);
    }
    let client = null, channel = null, pooled = false, pending = false, broken = null;
    let last;
    let backoff = 100;
    const wake = { fn: null };
    const onNotify = (msg) => {
      if (msg.channel === channel) { pending = true; wake.fn?.(); }
    };
    const onError = (err) => { broken = err; wake.fn?.(); };
    const drop = (err) => {
      if (!client) return;
      client.removeListener('notification', onNotify);
      client.removeListener('error', onError);
      client.release(err || true);
      client = null;
    };
    try {
      while (!signal?.aborted) {
        try {
          if (broken) throw broken;
          if (!client) {
            client = await this._pool.connect();
            client.on('error', onError);
            client.on('notification', onNotify);
            const r = await client.query('SELECT dlock.channel($1) AS c, pg_backend_pid() AS pid', [this._name]);
            channel = r.rows[0].c;
            pooled = client.processID !== null && client.processID !== undefined &&
              Number(r.rows[0].pid) !== client.processID;
            if (!pooled) await client.query(`LISTEN ${client.escapeIdentifier(channel)}`);
          }
          pending = false;
          const r = await client.query(LEADER_SQL, [this._name]);
          backoff = 100;
          const leader = r.rows.length ? toLeader(r.rows[0]) : null;
          const key = leader ? JSON.stringify([leader.candidate, String(leader.term), leader.value]) : '';
          if (key !== last) {
            last = key;
            yield leader;
            continue;
          }
          if (!pending) await sleep(pooled ? pollMs : recheckMs, signal, wake);
        } catch (err) {
          if (signal?.aborted) break;
          if (db.isServerError(err) && !/^(08|57P)/.test(err.code)) throw err;
          drop(err);
          broken = null;
          await sleep(backoff, signal, wake);
          backoff = Math.min(backoff * 2, 5000);
        }
      }
    } finally {
      if (client && !broken) {
        const c = client;
        c.removeListener('notification', onNotify);
        try {
          if (!pooled) await c.query('UNLISTEN *');
          c.removeListener('error', onError);
          c.release();
        } catch (err) {
          c.removeListener('error', onError);
          c.release(err);
        }
        client = null;
      } else {
        drop(broken);
      }
    }
  }

  [Symbol.asyncIterator]() { return this.observe(); }
}

module.exports = { claim, Election, Leadership };
