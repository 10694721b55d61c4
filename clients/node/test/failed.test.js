'use strict';
// A call that fails while something is held: a leader whose campaign()
// again fails (here: the query that reads the lease back, on a pool that
// refuses a connection) still leads, or knows at once that it does not; a
// release() that fails leaves a lock that is not renewed: its signal is
// aborted before its lease ends, it does not look released.  A release
// that fails with a serialization failure (default_transaction_isolation
// serializable, a renewal under way) is sent again; so is a session's
// close that meets a keepalive under way.
// Promises: P8 P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, elections, noElections, within, sleep, aborted } = require('./helpers');

const app = pool({ application_name: 'node-test-failed' });
const admin = pool();
after(() => Promise.all([app.end(), admin.end()]));

// flaky: APP, except that its connect() number failAt rejects (as a
// pool whose connections are refused).
function flaky() {
  return {
    n: 0,
    failAt: 0,
    down: false,
    connect() {
      this.n += 1;
      if (this.down || this.n === this.failAt) {
        const err = new Error('connection refused (test)');
        err.code = 'ECONNREFUSED';
        return Promise.reject(err);
      }
      return app.connect();
    },
  };
}

async function leader(name) {
  const r = await admin.query('SELECT candidate, term::text AS term FROM dlock.leader($1)', [name]);
  return r.rows.length ? { candidate: r.rows[0].candidate, term: BigInt(r.rows[0].term) } : null;
}

test('failed re-campaign: the leader is not resigned behind its back', async (t) => {
  if (!(await elections(admin))) return t.skip(noElections);
  const name = unique('recampaign');
  const p = flaky();
  const e = new dlock.Election(p, name, { lease: '30 seconds' });   // not a number: read back
  const l = await e.campaign('v');
  p.failAt = p.n + 2;                  // the campaign statement passes, reading the lease fails
  await assert.rejects(e.campaign('v'), /connection refused/);
  const now = await leader(name);
  assert.ok(l.lost || (now && now.candidate === e.candidate && now.term === l.term),
    `no longer the leader (${JSON.stringify(now && now.candidate)}) and not told so`);
  await l.release();
});

test('failed release: loss signalled before the lease ends, not released', async () => {
  const name = unique('release');
  const p = flaky();
  const lock = await dlock.acquire(p, name, { lease: 2000 });
  p.down = true;
  await assert.rejects(lock.release(), /connection refused/);
  p.down = false;
  assert.equal(lock.released, false, 'looks released, yet the server holds it');
  await within(20000, aborted(lock.signal), 'the loss of a lock whose release failed');
  const r = await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1' +
    ' AND holder = $2 AND NOT expired', [name, lock.holder]);
  assert.equal(r.rows[0].n, 1, 'signalled after the lease had ended');
  assert.equal(await lock.release(), false);
});

test('default_transaction_isolation serializable: a release that meets a renewal under way is retried', async () => {
  const name = unique('serializable-release');
  const appName = 'node-test-serializable-release';
  const ser = pool({ application_name: appName, options: '-c default_transaction_isolation=serializable' });
  const c = await admin.connect();
  try {
    const lock = await dlock.acquire(ser, name, { lease: 30000 });
    // A renewal under way: renew() in an open transaction holds the
    // lease's row until it commits, after the release's snapshot.
    await c.query('BEGIN');
    const r = await c.query("SELECT dlock.renew(resource => $1, holder => $2, lease => '30s'," +
      ' fence => $3::bigint) IS NOT NULL AS ok', [name, lock.holder, lock.fence.toString()]);
    assert.equal(r.rows[0].ok, true, 'renewed');
    let done = false;
    const released = lock.release();
    released.then(() => { done = true; }, () => { done = true; });
    // Until the release waits for the row (the portable edition; the C
    // extension takes no row lock: it may be done already).
    const end = Date.now() + 10000;
    while (!done && Date.now() < end) {
      const w = await admin.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1' +
        " AND wait_event_type = 'Lock'", [appName]);
      if (w.rows.length) break;
      await sleep(20);
    }
    await c.query('COMMIT');
    assert.equal(await within(30000, released, 'release()'), true);
    assert.equal(lock.signal.aborted, false, 'reported lost');
    const live = await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1' +
      ' AND NOT expired', [name]);
    assert.equal(live.rows[0].n, 0, 'still live on the server');
  } finally {
    c.release(true);    // closed: never back to the pool inside a transaction
    await ser.end();
  }
});

// underWay(sql, args, appName, action): SQL (a renewal, a keepalive) runs
// in a transaction left open, which holds its row; ACTION starts, and the
// transaction commits once ACTION's backend (appName) waits for the row
// (the portable edition; the C extension takes no row lock: it may be
// done already).  Returns ACTION's promise.
async function underWay(sql, args, appName, action) {
  const c = await admin.connect();
  try {
    await c.query('BEGIN');
    const r = await c.query(sql, args);
    assert.notEqual(r.rows[0].v, null, `under way: ${sql}`);
    let done = false;
    const p = action();
    p.then(() => { done = true; }, () => { done = true; });
    const end = Date.now() + 10000;
    while (!done && Date.now() < end) {
      const w = await admin.query('SELECT 1 FROM pg_stat_activity WHERE application_name = $1' +
        " AND wait_event_type = 'Lock'", [appName]);
      if (w.rows.length) break;
      await sleep(20);
    }
    await c.query('COMMIT');
    return p;
  } finally {
    c.release(true);    // closed: never back to the pool inside a transaction
  }
}

test('default_transaction_isolation serializable: a close that meets a keepalive under way is retried', async () => {
  const name = unique('serializable-close');
  const appName = 'node-test-serializable-close';
  const ser = pool({ application_name: appName, options: '-c default_transaction_isolation=serializable' });
  try {
    const s = await dlock.openSession(ser, { ttl: 30000 });
    const lock = await s.acquire(name);
    assert.ok(lock, 'acquired in the session');
    const closing = underWay('SELECT dlock.keepalive(session => $1::bigint) AS v', [s.id.toString()],
      appName, () => s.close());
    assert.equal(await within(30000, closing, 'close()'), true);
    const live = await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1' +
      ' AND NOT expired', [name]);
    assert.equal(live.rows[0].n, 0, 'still live on the server');
    const row = await admin.query('SELECT 1 FROM dlock.sessions WHERE id = $1::bigint', [s.id.toString()]);
    assert.equal(row.rows.length, 0, 'the session is still listed');
  } finally {
    await ser.end();
  }
});
