'use strict';
// A call that fails while something is held: a leader whose campaign()
// again fails (here: the query that reads the lease back, on a pool that
// refuses a connection) still leads, or knows at once that it does not; a
// release() that fails leaves a lock that is not renewed: its signal is
// aborted before its lease ends, it does not look released.  A release
// that fails with a serialization failure (default_transaction_isolation
// serializable, a renewal under way) is sent again; so is a session's
// close that meets a keepalive under way.  An acquisition or campaign the
// server rolled back (40001: a serializable caller's conflict with
// another) granted nothing: it is sent again, ACQUIRE_TRIES (10) tries in all, within
// its wait.
// Promises: P8 P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { ACQUIRE_TRIES } = require('../lib/db');
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
  // 6 s: the query below must land before the lease ends on the server,
  // a tenth of the lease after the loss (0.2 s with 2 s: CI under load).
  const lock = await dlock.acquire(p, name, { lease: 6000 });
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
  try {
    const lock = await dlock.acquire(ser, name, { lease: 30000 });
    // A renewal under way: renew() in an open transaction holds the
    // lease's row until it commits, after the release's snapshot.
    const released = underWay("SELECT dlock.renew(resource => $1, holder => $2, lease => '30s'," +
      ' fence => $3::bigint) AS v', [name, lock.holder, lock.fence.toString()], appName, () => lock.release());
    assert.equal(await within(30000, released, 'release()'), true);
    assert.equal(lock.signal.aborted, false, 'reported lost');
    const live = await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1' +
      ' AND NOT expired', [name]);
    assert.equal(live.rows[0].n, 0, 'still live on the server');
  } finally {
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

// Acquisitions the server rolls back.  The statements that acquire (and
// campaign), by their text: node-postgres sends the text as given.
const ACQUISITION = /dlock\.(try_lock|lock|acquire|lock_all|campaign)\(/;
const ROLLED_BACK = "DO $$BEGIN RAISE EXCEPTION 'conflict (test)' USING ERRCODE = 'serialization_failure'; END$$";

// rollingBack N: APP, except that its clients' first N acquisition
// statements are rolled back by the server with 40001 (a statement raising
// it is sent in their place), as a serializable caller's conflict with
// another is.  `sent`: how many were; `waits`: the wait parameter of each
// acquisition statement sent as it was (its 'milliseconds' text).
function rollingBack(n) {
  const p = {
    left: n,
    sent: 0,
    waits: [],
    async connect() {
      const c = await app.connect();
      return new Proxy(c, {
        get(target, prop) {
          if (prop === 'query') {
            return (q, ...rest) => {
              if (q && typeof q.text === 'string' && ACQUISITION.test(q.text)) {
                if (p.left > 0) {
                  p.left -= 1;
                  p.sent += 1;
                  q = { ...q, text: ROLLED_BACK, values: undefined };
                } else {
                  p.waits.push(q.values);
                }
              }
              return target.query(q, ...rest);
            };
          }
          const v = Reflect.get(target, prop, target);
          return typeof v === 'function' ? v.bind(target) : v;
        },
      });
    },
  };
  return p;
}

async function held(name) {
  const r = await admin.query('SELECT count(*)::int AS n, coalesce(sum(count), 0)::int AS c FROM dlock.locks' +
    ' WHERE resource = $1 AND NOT expired', [name]);
  return r.rows[0];
}

for (const [what, wait] of [['a try (wait 0)', 0], ['a waiting acquisition', 5000]]) {
  test(`an acquisition the server rolled back (40001) is sent again: ${what}`, async () => {
    const name = unique('rolled-back');
    const p = rollingBack(2);
    const lock = wait === 0 ? await dlock.tryAcquire(p, name, { lease: 30000 })
      : await dlock.acquire(p, name, { lease: 30000, wait });
    assert.ok(lock, 'not acquired');
    assert.equal(p.sent, 2, 'rolled back');
    assert.equal(p.left, 0);
    assert.deepEqual(await held(name), { n: 1, c: 1 }, 'held once on the server');
    assert.equal(await lock.check(), true);
    assert.equal(await lock.release(), true);
  });

  test(`an acquisition the server rolled back at every try rejects with 40001: ${what}`, async () => {
    const name = unique('rolled-back-3');
    const p = rollingBack(ACQUIRE_TRIES);
    await assert.rejects(wait === 0 ? dlock.tryAcquire(p, name, { lease: 30000 })
      : dlock.acquire(p, name, { lease: 30000, wait }), (err) => {
      assert.equal(err.code, '40001');
      assert.match(err.message, /conflict \(test\)/);
      return true;
    });
    assert.equal(p.sent, ACQUIRE_TRIES, 'rolled back');
    const r = await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1', [name]);
    assert.equal(r.rows[0].n, 0, 'something is held on the server');
    // Nothing is left behind: the next one takes it.
    const lock = await dlock.tryAcquire(p, name, { lease: 30000 });
    assert.ok(lock, 'not acquired afterwards');
    assert.equal(await lock.release(), true);
  });
}

test('a waiting acquisition the server rolled back is sent with only what is left of its wait', async () => {
  const name = unique('rolled-back-wait');
  for (const wait of [5000, '5 seconds']) {
    const p = rollingBack(2);
    const lock = await dlock.acquire(p, `${name}:${wait}`, { lease: 30000, wait });
    assert.equal(p.sent, 2);
    assert.equal(p.waits.length, 1);
    const m = /^([0-9.e+-]+) milliseconds$/.exec(p.waits[0][3]);
    assert.ok(m, `the wait sent again: ${p.waits[0][3]}`);
    assert.ok(Number(m[1]) < 5000 && Number(m[1]) > 0, `the wait sent again, less than asked: ${p.waits[0][3]}`);
    assert.equal(await lock.release(), true);
  }
});

test('an acquisition in a session the server rolled back (40001) is sent again', async (t) => {
  const r = await admin.query("SELECT to_regproc('dlock.open_session') IS NOT NULL AS ok");
  if (!r.rows[0].ok) return t.skip('this server has no sessions (dlock 1.1)');
  const name = unique('rolled-back-session');
  const p = rollingBack(0);
  const s = await dlock.openSession(p, { ttl: 30000 });
  try {
    p.left = 2;
    const lock = await s.tryAcquire(name);
    assert.ok(lock, 'not acquired');
    assert.equal(p.sent, 2);
    assert.deepEqual(await held(name), { n: 1, c: 1 }, 'held once on the server');
    p.left = ACQUIRE_TRIES;
    p.sent = 0;
    await assert.rejects(s.acquire(`${name}:2`, { wait: 5000 }), { code: '40001' });
    assert.equal(p.sent, ACQUIRE_TRIES);
    assert.deepEqual(await held(`${name}:2`), { n: 0, c: 0 }, 'held on the server');
    assert.equal(await lock.release(), true);
  } finally {
    await s.close();
  }
});

test('a campaign the server rolled back (40001) is sent again', async (t) => {
  if (!(await elections(admin))) return t.skip(noElections);
  const name = unique('rolled-back-campaign');
  const p = rollingBack(2);
  const e = new dlock.Election(p, name, { lease: 30000 });
  const l = await e.campaign('v', { wait: 0 });
  assert.equal(p.sent, 2);
  assert.ok(l.term > 0n);
  const now = await leader(name);
  assert.equal(now && now.candidate, e.candidate, 'not elected');
  assert.equal(await e.resign(), true);
});

test('default_transaction_isolation serializable: callers at once acquire without errors', async () => {
  // SSI rolls back about 1 acquisition in 100 of callers acquiring and
  // releasing distinct resources at once (40001); none reaches the caller.
  const name = unique('serializable-acquire');
  const pools = [0, 1, 2, 3].map((k) => pool({ application_name: `node-test-serializable-${k}`,
    options: '-c default_transaction_isolation=serializable' }));
  const errors = [];
  let done = 0;
  try {
    await Promise.all(pools.map(async (p, k) => {
      for (let i = 0; i < 60; i++) {
        let step = 'acquire';
        try {
          const lock = await dlock.acquire(p, `${name}/${k}/${i}`, { lease: 30000, wait: 0 });
          step = 'release';
          assert.equal(await lock.release(), true);
          done += 1;
        } catch (err) {
          errors.push(`${step}: ${err.code}: ${err.message}`);
        }
      }
    }));
  } finally {
    await Promise.all(pools.map((p) => p.end()));
  }
  assert.deepEqual(errors, []);
  assert.equal(done, 240);
  const r = await admin.query("SELECT count(*)::int AS n FROM dlock.locks WHERE resource LIKE $1 || '/%'" +
    ' AND NOT expired', [name]);
  assert.equal(r.rows[0].n, 0, 'still held on the server');
});
