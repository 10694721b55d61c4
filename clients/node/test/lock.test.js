'use strict';
// Locks: the happy path, waits, fences, assertFence, bad input, and lease
// loss (broken by an administrator; renewals impossible) on a real server.
// Promises: P1 P2 P6 P9 P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, proxy, within, sleep, aborted, elections, restartWithin, lossClock, endOf,
  assertToldBefore } = require('./helpers');

const app = pool({ application_name: 'node-test-app' });
const admin = pool({ application_name: 'node-test-admin' });
after(() => Promise.all([app.end(), admin.end()]));

const row = async (resource) =>
  (await admin.query('SELECT holder, fence, count, expires_at > clock_timestamp() AS live, ' +
    'extract(epoch FROM lease) * 1000 AS lease_ms FROM dlock.locks WHERE resource = $1', [resource])).rows[0];

test('withLock: holds the resource during the callback, releases it after, returns its result', async () => {
  const r = unique('happy');
  let seen;
  const result = await dlock.withLock(app, r, async (lock) => {
    assert.equal(typeof lock.fence, 'bigint');
    assert.equal(lock.signal.aborted, false);
    seen = await row(r);
    assert.equal(await dlock.tryAcquire(app, r), null, 'another holder cannot take it meanwhile');
    return 42;
  }, { lease: 5000 });
  assert.equal(result, 42);
  assert.ok(seen && seen.live, 'held while the callback ran');
  assert.equal(Number(seen.lease_ms), 5000);
  assert.equal(await row(r), undefined, 'released after');
});

test('acquire/release: explicit; the holder is unique to each lock object; the server default lease', async () => {
  const r = unique('explicit');
  const a = await dlock.acquire(app, r);
  const b = await dlock.tryAcquire(app, r);
  assert.equal(b, null, 'a second lock object of this process does not re-enter');
  assert.equal(a.lease, 30000, 'lease read back from the server (dlock.default_lease)');
  assert.equal((await row(r)).holder, a.holder);
  assert.equal(await a.check(), true);
  assert.equal(await a.release(), true);
  assert.equal(a.released, true);
  assert.equal(await a.check(), false);
  const c = await dlock.acquire(app, r, { holder: 'node-test-holder', lease: '2 min' });
  assert.equal(c.holder, 'node-test-holder');
  assert.equal(c.lease, 120000);
  assert.equal(await c.release(), true);
});

test('withLock: the callback throws: released, the error passes through', async () => {
  const r = unique('throws');
  const boom = new Error('boom');
  await assert.rejects(dlock.withLock(app, r, async () => { throw boom; }), (e) => e === boom);
  assert.equal(await row(r), undefined);
});

test('wait: a busy resource rejects with LockTimeout (55P03) after the wait; tryAcquire gives null', async () => {
  const r = unique('timeout');
  const held = await dlock.acquire(app, r, { lease: 10000 });
  await assert.rejects(dlock.acquire(app, r, { wait: 300 }), (e) =>
    e instanceof dlock.LockTimeout && e.code === '55P03' && e.resource === r);
  await assert.rejects(dlock.withLock(app, r, () => assert.fail('ran without the lock'), { wait: 0 }),
    dlock.LockTimeout);
  assert.equal(await dlock.tryAcquire(app, r), null);
  // a waiter gets it once it is released
  const waiting = dlock.acquire(app, r, { wait: 20000 });
  await sleep(200);
  await held.release();
  const got = await within(20000, waiting, 'the waiter');
  assert.ok(got.fence > held.fence);
  await got.release();
});

test('fences: strictly increasing over successive holders', async () => {
  const r = unique('fences');
  let last = -1n;
  for (let i = 0; i < 5; i++) {
    const f = await dlock.withLock(app, r, async (lock) => lock.fence);
    assert.equal(typeof f, 'bigint');
    assert.ok(f > last, `fence ${f} after ${last}`);
    last = f;
  }
});

test('assertFence: passes in the holder\'s transaction, rejects a stale fence with 55P03 there', async () => {
  const r = unique('fence');
  await admin.query('CREATE TABLE IF NOT EXISTS node_fenced (resource text PRIMARY KEY, fence bigint)');
  const old = await dlock.acquire(app, r, { lease: 10000 });
  await old.release();
  const cur = await dlock.acquire(app, r, { lease: 10000 });
  const c = await app.connect();
  try {
    await c.query('BEGIN');
    await assert.rejects(old.assertFence(c), (e) => e.code === '55P03');
    await c.query('ROLLBACK');
    await c.query('BEGIN');
    await cur.assertFence(c);
    await c.query('INSERT INTO node_fenced VALUES ($1, $2)', [r, cur.fence.toString()]);
    await c.query('COMMIT');
  } finally {
    c.release();
  }
  assert.equal((await admin.query('SELECT fence FROM node_fenced WHERE resource = $1', [r])).rows[0].fence,
    cur.fence.toString());
  await cur.release();
  const c2 = await app.connect();
  try {
    await c2.query('BEGIN');
    await assert.rejects(cur.assertFence(c2), (e) => e.code === '55P03', 'released: stale');
    await c2.query('ROLLBACK');
  } finally {
    c2.release();
  }
});

// sharedLocks: whether the server has lock(..., shared => ...) (the C
// extension's SQL 0.4, the portable edition's 0.4), by argument name: a
// later version's lock() has more arguments (session, 1.1).
async function sharedLocks() {
  const r = await admin.query("SELECT EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace " +
    "WHERE n.nspname = 'dlock' AND p.proname = 'lock' AND 'shared' = ANY (p.proargnames)) AS ok");
  return r.rows[0].ok;
}

test('shared: two shared holders at once, a writer refused while they hold, fences distinct and increasing (0A000 without the server\'s shared mode)', async () => {
  const r = unique('shared');
  if (!(await sharedLocks())) {
    await assert.rejects(dlock.acquire(app, r, { shared: true, wait: 0 }), (e) => e.code === '0A000');
    const n = await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1', [r]);
    assert.equal(n.rows[0].n, 0);
    return;
  }
  const r1 = await dlock.acquire(app, r, { shared: true, wait: 0, lease: 5000 });
  const r2 = await dlock.tryAcquire(app, r, { shared: true, lease: 5000 });
  assert.ok(r2 !== null, 'a second shared holder is let in');
  assert.ok(r2.fence > r1.fence, `fence ${r2.fence} after ${r1.fence}`);
  const rows = await admin.query('SELECT holder, fence::text, mode FROM dlock.locks WHERE resource = $1 ORDER BY fence', [r]);
  assert.deepEqual(rows.rows, [
    { holder: r1.holder, fence: r1.fence.toString(), mode: 'shared' },
    { holder: r2.holder, fence: r2.fence.toString(), mode: 'shared' },
  ]);
  assert.equal(await dlock.tryAcquire(app, r, { lease: 5000 }), null);
  await assert.rejects(dlock.acquire(app, r, { wait: 0 }), (e) => e.code === '55P03');
  assert.equal(await r1.release(), true);
  assert.equal(await dlock.tryAcquire(app, r, { lease: 5000 }), null, 'one reader still holds');
  assert.equal(await r2.release(), true);
  const w = await dlock.tryAcquire(app, r, { lease: 5000 });
  assert.ok(w !== null && w.fence > r2.fence, 'the writer gets it after the last reader');
  assert.equal(await dlock.tryAcquire(app, r, { shared: true }), null, 'readers refused while the writer holds');
  assert.equal(await w.release(), true);
  const f = await dlock.withLock(app, r, async (lock) => lock.fence, { shared: true });
  assert.ok(f > w.fence);
});

test('bad input: rejected with a SQLSTATE, nothing held', async () => {
  const r = unique('bad');
  const cases = [
    [() => dlock.acquire(app, ''), '22023'],
    [() => dlock.acquire(app, 'x'.repeat(1001)), '22023'],
    [() => dlock.acquire(app, r, { holder: '' }), '22023'],
    [() => dlock.acquire(app, r, { holder: 'h'.repeat(256) }), '22023'],
    [() => dlock.acquire(app, r, { lease: -5 }), '22023'],
    [() => dlock.acquire(app, r, { lease: 0 }), '22023'],
    [() => dlock.acquire(app, r, { lease: NaN }), '22023'],
    [() => dlock.acquire(app, r, { lease: Infinity }), '22023'],
    [() => dlock.acquire(app, r, { lease: 'forever' }), '22007'],
    [() => dlock.acquire(app, r, { wait: -1 }), '22023'],
    [() => dlock.acquire(app, r, { lease: {} }), '22023'],
    [() => dlock.acquire(app, 42), '22023'],
    [() => dlock.acquire(app, r, { shared: 'yes' }), '22023'],
    [() => dlock.acquire(app, r, { permits: 2 }), '22023'],
    [() => dlock.tryAcquire(app, r, { fair: 'yes' }), '22023'],
  ];
  if (await elections(admin)) cases.push([() => new dlock.Election(app, '').campaign('v', { wait: 0 }), '22023']);
  for (const [i, [fn, code]] of cases.entries()) {
    await assert.rejects(fn, (e) => {
      assert.equal(e.code, code, `case ${i}: ${e.message}`);
      return true;
    });
  }
  const left = await admin.query("SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1 OR resource = ''", [r]);
  assert.equal(left.rows[0].n, 0);
  await assert.rejects(dlock.withLock(app, r, 'not a function'), TypeError);
});

test('renewal: every third of the lease; failures (connections killed, a partition shorter than the lease) are retried', async () => {
  const r = unique('renew');
  const px = await proxy();
  const p = px.pool({ application_name: 'node-test-renew' });
  try {
    // A 12 s lease: the try due at 4 s hangs in the partition until 8 s,
    // and the retry then has until 10.8 s. With 3 s (0.7 s for the retry),
    // a loaded machine (CI, in a root) once made it too late.
    const lock = await dlock.acquire(p, r, { lease: 12000 });
    const first = await admin.query('SELECT renewed_at FROM dlock.locks WHERE resource = $1', [r]);
    await sleep(700);
    await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'node-test-renew'");
    px.cut();       // the renewal due at 4 s fails ...
    await sleep(4300);
    px.heal();      // ... and a retry gets through before the lease's end
    await sleep(8000);
    assert.equal(lock.lost, false, `lost: ${lock.signal.reason}`);
    const now = await admin.query('SELECT renewed_at, fence, expires_at > clock_timestamp() AS live FROM dlock.locks WHERE resource = $1', [r]);
    assert.ok(now.rows[0].live, 'still held past its first lease');
    assert.ok(now.rows[0].renewed_at > first.rows[0].renewed_at, 'renewed');
    assert.equal(now.rows[0].fence, lock.fence.toString(), 'same holding');
    assert.equal(await lock.release(), true);
  } finally {
    await px.close();
    await p.end().catch(() => {});
  }
});

test('lease broken by an administrator: signal aborted with LockLost, withLock rejects with it after the callback', async () => {
  const r = unique('broken');
  let finished = false, reason;
  await assert.rejects(dlock.withLock(app, r, async (lock) => {
    await admin.query('SELECT dlock.break_lock($1)', [r]);
    reason = await within(10000, aborted(lock.signal), 'the loss signal');
    finished = true;
    return 'done';
  }, { lease: 1500 }), (e) => {
    assert.ok(e instanceof dlock.LockLost, String(e));
    assert.equal(e, reason, 'the signal\'s reason');
    assert.equal(e.resource, r);
    return true;
  });
  assert.ok(finished, 'rejected after the callback finished');
});

test('a lock broken between renewals and released: release() says false, withLock rejects', async () => {
  const r = unique('broken-late');
  const lock = await dlock.acquire(app, r, { lease: 60000 });
  await admin.query('SELECT dlock.break_lock($1)', [r]);
  assert.equal(await lock.release(), false);
  assert.ok(lock.signal.aborted && lock.signal.reason instanceof dlock.LockLost);
  const boom = new Error('boom');
  await assert.rejects(dlock.withLock(app, r, async () => {
    await admin.query('SELECT dlock.break_lock($1)', [r]);
    throw boom;
  }, { lease: 60000 }), (e) => e instanceof dlock.LockLost && e.callbackError === boom);
});

test('renewal impossible (its connections killed, the server unreachable): loss signalled before the lease\'s end', async () => {
  const r = unique('partition');
  const px = await proxy();
  const cut = px.pool({ application_name: 'node-test-cut' });
  try {
    // Asserted after withLock: an error in the callback would become the LockLost's callbackError.
    let told, end, params;
    const endSql = 'SELECT max(expires_at) FROM dlock.locks WHERE resource = $1 AND fence = $2::bigint';
    await assert.rejects(dlock.withLock(cut, r, async (lock) => {
      told = lossClock(lock.signal);
      params = [r, lock.fence.toString()];
      px.cut();
      await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'node-test-cut'");
      end = await endOf(admin, endSql, params);
      await within(20000, aborted(lock.signal), 'the loss signal');
    }, { lease: 4000 }), (e) => {
      assert.ok(e instanceof dlock.LockLost, String(e));
      assert.ok(e.cause, 'the last renewal error is the cause');
      return true;
    });
    await assertToldBefore(told(), end, () => endOf(admin, endSql, params));
  } finally {
    await px.close();
    await cut.end().catch(() => {});
  }
});

test('the server down for a while and restarted within the lease: renewals retried until it is back, the lock kept', async (t) => {
  const pgCtl = process.env.DLOCK_TEST_PG_CTL;
  if (!pgCtl) return t.skip('DLOCK_TEST_PG_CTL (pg_ctl -D DATADIR -l LOG, for this server) unset');
  const r = unique('restart');
  const lease = 12000, start = Date.now();
  const lock = await dlock.acquire(app, r, { lease });
  await sleep(1000);
  // Down past the renewal due a third of the lease after the acquisition.
  await restartWithin(pgCtl, lease, start + lease / 3, async () => {
    const x = await admin.query('SELECT (extract(epoch FROM expires_at) * 1000)::int8::text AS e FROM dlock.locks ' +
      'WHERE resource = $1 ORDER BY fence DESC LIMIT 1', [r]);
    return x.rows.length ? Number(x.rows[0].e) : null;
  });
  assert.equal(lock.lost, false, `lost: ${lock.signal.reason}`);
  const now = await row(r);
  assert.ok(now && now.live, 'still held');
  assert.equal(await lock.check(), true);
  assert.equal(await lock.release(), true);
});

test('a lease longer than a timer holds (30 days, 2^31 ms is 24.8): neither lost at once nor a warning', async () => {
  const warnings = [];
  const onWarning = (w) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    for (const lease of ['30 days', 30 * 24 * 3600 * 1000]) {
      const r = unique('long-lease');
      const lock = await dlock.acquire(app, r, { lease });
      await sleep(300);
      assert.equal(lock.lost, false, `lease ${lease}: lost at once`);
      assert.equal(lock.signal.aborted, false);
      assert.equal((await row(r)).live, true);
      assert.equal(await lock.release(), true);
    }
    await sleep(10);    // warnings are emitted on the next tick
    assert.deepEqual(warnings.filter((n) => n === 'TimeoutOverflowWarning'), []);
  } finally {
    process.off('warning', onWarning);
  }
});

test('the event loop blocked past the lease: lost says so at once, judged by the clock, and aborts signal', async () => {
  const r = unique('blocked');
  // 3 s: not lost when acquire() resolves; with 1 s, an answer 0.9 s late
  // (CI under load) would have been.
  const lock = await dlock.acquire(app, r, { lease: 3000 });
  assert.equal(lock.lost, false);
  let heard = null;
  lock.signal.addEventListener('abort', () => { heard = lock.signal.reason; });
  const until = performance.now() + 3600;
  while (performance.now() < until) { /* no timer, no renewal runs */ }
  assert.equal(lock.signal.aborted, false, 'reading signal judges nothing: a listener added now still hears the abort');
  assert.equal(lock.lost, true, 'past the deadline, before any timer ran');
  assert.ok(heard instanceof dlock.LockLost, 'the listener heard it');
  assert.equal(lock.signal.aborted, true);
  assert.ok(lock.signal.reason instanceof dlock.LockLost);
  assert.equal(await lock.release(), false);
});
