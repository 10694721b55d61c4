'use strict';
// Through pgbouncer in transaction pooling: locks are renewed and released
// by holder on whatever server connection each statement gets; the
// observer notices the pooler and polls.
// Promises: P8 P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, bouncerPool, bouncerPort, within, sleep, elections, noElections } = require('./helpers');

const skip = bouncerPort ? false : 'no pgbouncer (DLOCK_TEST_BOUNCER_PORT unset)';
const bp = skip ? null : bouncerPool();
const admin = pool();
after(() => Promise.all([bp && bp.end(), admin.end()]));

test('pgbouncer (transaction pooling): a lock held for three leases is renewed and stays the same holding', { skip }, async () => {
  const r = unique('bouncer');
  const other = bouncerPool({ max: 2 });
  try {
    await dlock.withLock(bp, r, async (lock) => {
      const first = (await admin.query('SELECT renewed_at FROM dlock.locks WHERE resource = $1', [r])).rows[0];
      for (let i = 0; i < 12; i++) {   // 9 s: one and a half leases
        await sleep(750);
        assert.equal(await dlock.tryAcquire(other, r), null, 'nobody else gets it');
      }
      assert.equal(lock.lost, false, `lost: ${lock.signal.reason}`);
      const now = (await admin.query('SELECT renewed_at, fence, expires_at > clock_timestamp() AS live FROM dlock.locks WHERE resource = $1', [r])).rows[0];
      assert.ok(now.live);
      assert.ok(now.renewed_at > first.renewed_at, 'renewed');
      assert.equal(now.fence, lock.fence.toString());
    }, { lease: 6000 });   // 6 s: with 1.5 s, a renewal queued for pgbouncer had 0.85 s (CI under load)
    assert.equal((await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1', [r])).rows[0].n, 0,
      'released');
  } finally {
    await other.end();
  }
});

test('pgbouncer: an election observed by polling', { skip }, async (t) => {
  if (!(await elections(admin))) return t.skip(noElections);
  const name = unique('bouncer-elect');
  const e = new dlock.Election(bp, name, { lease: 3000 });
  const ac = new AbortController();
  const it = new dlock.Election(bp, name).observe({ signal: ac.signal, pollInterval: 100 });
  assert.equal((await within(10000, it.next(), 'first state')).value, null);
  const lead = await e.campaign('v1');
  const got = (await within(10000, it.next(), 'elected')).value;
  assert.deepEqual([got.candidate, got.term, got.value], [e.candidate, lead.term, 'v1']);
  await e.resign();
  assert.equal((await within(10000, it.next(), 'resigned')).value, null);
  await it.return();
});
