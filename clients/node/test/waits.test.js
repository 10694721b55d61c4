'use strict';
// Waits longer than the lease (issue 33, 17): behind a holder, or for a
// free client of an exhausted pool.  The lease starts when the server
// grants it: such a holding is not lost, its renewals keep it, its fence
// checks.  The safety side: renewals impossible (the pool exhausted, the
// connection cut), loss is signalled before the lease ends on the server.
// Promises: P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, sleep, aborted, within, elections, noElections, kinds, noKinds, lossClock, endOf,
  assertToldBefore } = require('./helpers');

const app = pool({ application_name: 'node-test-waits' });
const admin = pool();
after(() => Promise.all([app.end(), admin.end()]));

const LEASE = 3000; // ms; the waits below are longer (1.5 s left a renewal 0.85 s: CI under load)
const BLOCKED = 5000; // how long the first holder keeps it

const live = async (resource) => (await admin.query(
  'SELECT holder, fence::text AS fence FROM dlock.locks WHERE resource = $1 AND NOT expired ORDER BY fence',
  [resource])).rows;

// notLostWithin LOCK MS: LOCK's signal is not aborted for MS.
async function notLostWithin(lock, ms) {
  const r = await Promise.race([aborted(lock.signal), sleep(ms).then(() => 'kept')]);
  assert.equal(r, 'kept', `lost: ${r && r.message}`);
}

// Each kind: how to take it (with opts) and how the first holder lets go.
const KINDS = {
  lock: { take: (r, o) => dlock.acquire(app, r, o) },
  semaphore: { take: (r, o) => dlock.acquire(app, r, { maxPermits: 1, ...o }), needs: kinds, skip: noKinds },
  multi: { take: (r, o) => dlock.acquire(app, [r, `${r}/b`], o), needs: kinds, skip: noKinds },
  election: {
    take: (r, o) => new dlock.Election(app, r, { lease: o.lease }).campaign('v', { wait: o.wait }),
    needs: elections, skip: noElections,
  },
};

for (const [kind, k] of Object.entries(KINDS)) {
  test(`${kind}: acquired after a wait longer than its lease, it is not lost, renewals keep it, its fence checks`, async (t) => {
    if (k.needs && !(await k.needs(admin))) return t.skip(k.skip);
    const r = unique(`long-wait-${kind}`);
    const first = await k.take(r, { lease: 30000 });
    const freed = sleep(BLOCKED).then(() => first.release());
    const second = await within(30000, k.take(r, { lease: LEASE, wait: 30000 }), 'the second holder');
    await freed;
    await notLostWithin(second, 2 * LEASE);
    assert.equal(await second.check(), true);
    assert.ok((await live(r)).some((x) => x.holder === second.holder && x.fence === second.fence.toString()));
    const c = await app.connect();
    try {
      await c.query('BEGIN');
      await second.assertFence(c);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
    assert.equal(await second.release(), true);
  });
}

test('pool: an acquisition that waits for a free client longer than its lease is not lost', async () => {
  const small = pool({ max: 1 });
  try {
    const r = unique('pool-wait');
    const busy = await small.connect();
    setTimeout(() => busy.release(), BLOCKED);
    const lock = await within(30000, dlock.acquire(small, r, { lease: LEASE }), 'the acquisition');
    await notLostWithin(lock, 2 * LEASE);
    assert.deepEqual(await live(r), [{ holder: lock.holder, fence: lock.fence.toString() }]);
    assert.equal(await lock.release(), true);
  } finally {
    await small.end();
  }
});

test('pool: exhausted while held (no renewal can get a client): lost before the lease ends on the server', async () => {
  const small = pool({ max: 1 });
  try {
    const r = unique('pool-exhausted');
    const lock = await dlock.acquire(small, r, { lease: 3000 });
    const told = lossClock(lock.signal);
    const busy = await small.connect();
    try {
      // No renewal can land once the pool's one client is taken.
      const endSql = 'SELECT max(expires_at) FROM dlock.locks WHERE resource = $1 AND fence = $2::bigint';
      const params = [r, lock.fence.toString()];
      const end = await endOf(admin, endSql, params);
      const err = await within(10000, aborted(lock.signal), 'the loss');
      assert.ok(err instanceof dlock.LockLost);
      await assertToldBefore(told(), end, () => endOf(admin, endSql, params));
    } finally {
      busy.release();
    }
    assert.equal(await lock.release(), false);
  } finally {
    await small.end();
  }
});
