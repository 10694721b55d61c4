'use strict';
// Semaphores (acquire/withSemaphore with maxPermits) and several resources
// at once (acquire/withLocks with an array: a MultiLock) on a real server:
// never more than maxPermits permits held, permits returned on release,
// all or nothing, loss of one holding is the loss of the whole, errors
// with their SQLSTATE, on both editions.  Where the server has neither
// (the C extension's 0.4 SQL): 0A000 and nothing taken.
// Promises: P6 P10 P11 P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, within, sleep, aborted, kinds: serverKinds } = require('./helpers');

const app = pool({ application_name: 'node-test-kinds', max: 8 });
const admin = pool({ application_name: 'node-test-kinds-admin' });
after(() => Promise.all([app.end(), admin.end()]));

let hasKinds;
async function kinds() {
  if (hasKinds === undefined) hasKinds = await serverKinds(admin);
  return hasKinds;
}

const permitsHeld = async (name) => (await admin.query(
  "SELECT coalesce(sum(permits), 0)::int AS n FROM dlock.locks WHERE resource = $1 AND mode = 'semaphore' AND NOT expired",
  [name])).rows[0].n;
const holdings = async (names) => Object.fromEntries((await admin.query(
  'SELECT resource, holder, fence::text FROM dlock.locks WHERE resource = ANY($1) AND NOT expired', [names]))
  .rows.map((x) => [x.resource, `${x.holder}/${x.fence}`]));

// lostCleanly E: withLock's rejection is the LockLost and the callback
// itself succeeded (a failed assertion in it would be the LockLost's
// callbackError, not a rejection of its own).
const lostCleanly = (e) => {
  assert.ok(e instanceof dlock.LockLost, e);
  assert.equal(e.callbackError, undefined, e.callbackError && e.callbackError.stack);
  return true;
};

async function refused(names) {
  await assert.rejects(dlock.acquire(app, names[0], { maxPermits: 2, wait: 0 }), (e) => e.code === '0A000');
  await assert.rejects(dlock.acquire(app, names, { wait: 0 }), (e) => e.code === '0A000');
  assert.deepEqual(await holdings(names), {});
}

test('semaphore: never more than maxPermits held across lock objects; permits come back on release; a waiter is let in', async () => {
  const s = unique('sem');
  if (!(await kinds())) return refused([s, `${s}/b`]);
  const held = [];
  for (let i = 1; i <= 3; i++) {
    held.push(await dlock.acquire(app, s, { maxPermits: 3, lease: 5000, wait: 0 }));
    assert.equal(await permitsHeld(s), i);
  }
  assert.ok(held[0] instanceof dlock.Semaphore && held[0].maxPermits === 3 && held[0].permits === 1);
  assert.equal(new Set(held.map((h) => h.fence)).size, 3);
  assert.equal(await dlock.tryAcquire(app, s, { maxPermits: 3 }), null);
  await assert.rejects(dlock.acquire(app, s, { maxPermits: 3, wait: 0 }), (e) => e.code === '55P03');
  assert.equal(await held[0].release(), true);
  assert.equal(await permitsHeld(s), 2);
  assert.equal(await dlock.tryAcquire(app, s, { maxPermits: 3, permits: 2 }), null, '2 + 2 > 3');
  const waiting = dlock.acquire(app, s, { maxPermits: 3, permits: 2, wait: 20000, lease: 5000 });
  await sleep(300);
  assert.equal(await permitsHeld(s), 2);
  assert.equal(await held[1].release(), true);
  const two = await within(20000, waiting, 'the waiter for two permits');
  assert.equal(await permitsHeld(s), 3);
  assert.equal(await two.release(), true);
  assert.equal(await held[2].release(), true);
  assert.equal(await permitsHeld(s), 0);
  const n = await dlock.withSemaphore(app, s, async (sem) => {
    assert.equal(await permitsHeld(s), 3);
    return sem.permits;
  }, { maxPermits: 3, permits: 3, wait: 0 });
  assert.equal(n, 3);
  assert.equal(await permitsHeld(s), 0);
});

test('semaphore: six concurrent withSemaphore calls on two permits: never more than two inside, all served', async () => {
  const s = unique('sem-concurrent');
  if (!(await kinds())) return refused([s, `${s}/b`]);
  let inside = 0, most = 0;
  const seen = [];
  await within(60000, Promise.all(Array.from({ length: 6 }, () => dlock.withSemaphore(app, s, async () => {
    inside++;
    most = Math.max(most, inside);
    seen.push(await permitsHeld(s));
    await sleep(100);
    inside--;
  }, { maxPermits: 2, lease: 5000, wait: 30000 }))), 'six semaphore users');
  assert.equal(seen.length, 6);
  assert.ok(most <= 2 && Math.max(...seen) <= 2, `most ${most}, server ${seen}`);
  assert.equal(await permitsHeld(s), 0);
});

test('semaphore: renewed past its lease; a broken holding is reported lost', async () => {
  const s = unique('sem-renew');
  if (!(await kinds())) return refused([s, `${s}/b`]);
  await assert.rejects(dlock.withSemaphore(app, s, async (sem) => {
    const first = (await admin.query('SELECT expires_at FROM dlock.locks WHERE resource = $1', [s])).rows[0].expires_at;
    await sleep(5000);   // past the lease: renewed
    const now = (await admin.query('SELECT expires_at, permits FROM dlock.locks WHERE resource = $1 AND NOT expired', [s])).rows[0];
    assert.ok(now.expires_at > first && now.permits === 2);
    assert.equal(await sem.check(), true);
    await admin.query('SELECT dlock.break_lock($1)', [s]);
    const reason = await within(10000, aborted(sem.signal), 'the loss');
    assert.ok(reason instanceof dlock.LockLost);
  }, { maxPermits: 2, permits: 2, lease: 3000 }), lostCleanly);   // 1.2 s left a renewal 0.68 s (CI under load)
  assert.equal(await permitsHeld(s), 0);
});

test('semaphore errors carry the SQLSTATE: bad counts, another maxPermits (22023), a lock\'s name (42809)', async () => {
  const s = unique('sem-bad');
  if (!(await kinds())) return refused([s, `${s}/b`]);
  const cases = [
    [() => dlock.acquire(app, s, { maxPermits: 0 }), '22023'],
    [() => dlock.acquire(app, s, { maxPermits: 2, permits: 0 }), '22023'],
    [() => dlock.acquire(app, s, { maxPermits: 2, permits: 3 }), '22023'],
    [() => dlock.acquire(app, s, { maxPermits: 1.5 }), '22023'],
    [() => dlock.acquire(app, s, { maxPermits: '2' }), '22023'],
    [() => dlock.acquire(app, s, { maxPermits: 2, shared: true }), '22023'],
    [() => dlock.withSemaphore(app, s, async () => 1, {}), '22023'],
  ];
  for (const [i, [fn, code]] of cases.entries())
    await assert.rejects(fn, (e) => { assert.equal(e.code, code, `case ${i}: ${e.message}`); return true; });
  assert.deepEqual(await holdings([s]), {});
  const sem = await dlock.acquire(app, s, { maxPermits: 3, lease: 5000 });
  await assert.rejects(dlock.acquire(app, s, { maxPermits: 4, wait: 0 }), (e) => e.code === '22023');
  await assert.rejects(dlock.acquire(app, s, { wait: 0 }), (e) => e.code === '42809', 'a semaphore taken as a lock');
  assert.deepEqual(await holdings([s]), { [s]: `${sem.holder}/${sem.fence}` });
  await sem.release();
  const lock = await dlock.acquire(app, s, { lease: 5000 });
  await assert.rejects(dlock.acquire(app, s, { maxPermits: 3, wait: 0 }), (e) => e.code === '42809', 'a lock taken as a semaphore');
  assert.deepEqual(await holdings([s]), { [s]: `${lock.holder}/${lock.fence}` });
  await lock.release();
});

test('several resources: all or nothing; fences in the order given; waits holding none', async () => {
  const base = unique('multi');
  const names = [`${base}/c`, `${base}/a`, `${base}/b`];
  if (!(await kinds())) return refused(names);
  const other = await dlock.acquire(app, names[2], { lease: 5000 });
  assert.equal(await dlock.tryAcquire(app, names), null);
  await assert.rejects(dlock.acquire(app, names, { wait: 0 }), (e) => e.code === '55P03');
  assert.deepEqual(await holdings(names), { [names[2]]: `${other.holder}/${other.fence}` }, 'nothing else taken');
  const waiting = dlock.acquire(app, names, { wait: 20000, lease: 5000 });
  await sleep(300);
  assert.deepEqual(Object.keys(await holdings(names)), [names[2]], 'the waiter holds none meanwhile');
  await other.release();
  const multi = await within(20000, waiting, 'the multi-lock waiter');
  assert.ok(multi instanceof dlock.MultiLock);
  assert.deepEqual(multi.resources, names);
  assert.equal(multi.fences.length, 3);
  assert.ok(multi.fences.every((f) => typeof f === 'bigint'));
  assert.deepEqual(await holdings(names),
    Object.fromEntries(names.map((r, i) => [r, `${multi.holder}/${multi.fences[i]}`])));
  assert.equal(await multi.check(), true);
  assert.equal(await dlock.tryAcquire(app, [`${base}/d`, names[1]]), null);
  assert.deepEqual(await holdings([`${base}/d`]), {});
  assert.equal(await multi.release(), true);
  assert.deepEqual(await holdings(names), {});
  const fences = await dlock.withLocks(app, names, async (m) => m.fences, { shared: true, lease: 5000 });
  assert.ok(fences.every((f, i) => f > multi.fences[i]));
});

test('several resources: renewed together past the lease; one broken: signal aborted, withLocks rejects with LockLost, the others released', async () => {
  const base = unique('multi-lost');
  const names = [`${base}/a`, `${base}/b`, `${base}/c`];
  if (!(await kinds())) return refused(names);
  await assert.rejects(dlock.withLocks(app, names, async (multi) => {
    const first = (await admin.query('SELECT max(expires_at) AS e FROM dlock.locks WHERE resource = ANY($1)', [names])).rows[0].e;
    await sleep(5000);   // past the lease: renewed together
    const rows = (await admin.query('SELECT expires_at FROM dlock.locks WHERE resource = ANY($1) AND NOT expired', [names])).rows;
    assert.equal(rows.length, 3);
    assert.ok(rows.every((x) => x.expires_at > first), 'every holding renewed');
    await admin.query('SELECT dlock.break_lock($1)', [names[1]]);
    const reason = await within(10000, aborted(multi.signal), 'the loss');
    assert.ok(reason instanceof dlock.LockLost);
    assert.equal(multi.lost, true);
    assert.equal(await multi.check(), false);
  }, { lease: 3000 }), lostCleanly);   // 1.2 s left a renewal 0.68 s (CI under load)
  assert.deepEqual(await holdings(names), {});
});

test('several resources: assertFence checks every fence in the caller\'s transaction (55P03 once one is broken)', async () => {
  const base = unique('multi-fence');
  const names = [`${base}/a`, `${base}/b`];
  if (!(await kinds())) return refused(names);
  const multi = await dlock.acquire(app, names, { lease: 5000 });
  const c = await app.connect();
  try {
    await c.query('BEGIN');
    await multi.assertFence(c);
    await c.query('COMMIT');
    await admin.query('SELECT dlock.break_lock($1)', [names[1]]);
    await c.query('BEGIN');
    await assert.rejects(multi.assertFence(c), (e) => e.code === '55P03');
    await c.query('ROLLBACK');
  } finally {
    c.release();
  }
  assert.equal(await multi.release(), false, 'one holding was gone: lost');
  assert.deepEqual(await holdings(names), {});
});

test('several resources: bad arrays rejected with 22023, nothing held', async () => {
  const base = unique('multi-bad');
  if (!(await kinds())) return refused([base, `${base}/b`]);
  const cases = [
    [() => dlock.acquire(app, []), '22023'],
    [() => dlock.acquire(app, [base, base]), '22023'],
    [() => dlock.acquire(app, [base, '']), '22023'],
    [() => dlock.acquire(app, [base, 7]), '22023'],
    [() => dlock.acquire(app, [base], { fair: true }), '22023'],
    [() => dlock.acquire(app, [base], { maxPermits: 2 }), '22023'],
    [() => dlock.withLocks(app, base, async () => 1), '22023'],
  ];
  for (const [i, [fn, code]] of cases.entries())
    await assert.rejects(fn, (e) => { assert.equal(e.code, code, `case ${i}: ${e.message}`); return true; });
  assert.deepEqual(await holdings([base]), {});
});
