'use strict';
// A release whose answer is lost after it committed (the connection dies
// on the way back) is not sent again: sent again, it would take a second
// count of a holding that two lock objects share through one holder
// text, and the other object would think it held a lock anyone can take.
// Promises: P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, proxy, within, sleep } = require('./helpers');

const admin = pool({ application_name: 'node-test-admin' });
after(() => admin.end());

async function count(resource) {
  const r = await admin.query('SELECT coalesce(max(count), 0) AS n FROM dlock.locks ' +
    'WHERE resource = $1 AND holder IS NOT NULL', [resource]);
  return Number(r.rows[0].n);
}

test('a release whose answer was lost is not sent again', async () => {
  const p = await proxy();
  const app = p.pool({ application_name: 'node-test-lostanswer' });
  try {
    const r = unique('lost-release'), holder = unique('shared-holder');
    const a = await dlock.acquire(app, r, { holder, lease: 60000 });
    const b = await dlock.acquire(app, r, { holder, lease: 60000 });
    assert.equal(await count(r), 2);
    p.stall();                      // answers held back on the open connections
    const released = a.release().then(() => 'released', (err) => err);
    const until = Date.now() + 20000;
    while ((await count(r)) !== 1) {
      assert.ok(Date.now() < until, "A's release did not commit");
      await sleep(50);
    }
    p.cut();                        // the answer is lost with its connection ...
    p.heal();                       // ... and a statement sent again would get through
    await within(30000, released, "A's release");
    await sleep(500);
    assert.equal(await count(r), 1, "B's count was taken by A's release sent again");
    assert.equal(await b.check(), true);
    assert.equal(b.lost, false);
    await b.release();
  } finally {
    await app.end().catch(() => {});
    await p.close();
  }
});
