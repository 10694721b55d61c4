'use strict';
// Type parsers the application set globally (issue 33, 18): node-postgres
// documents pg.types.setTypeParser(20, parseInt); with it (or one giving
// Numbers or strings, for int8 and int8[]), fences above 2^53 stay exact:
// renewals keep the holding, assertFence accepts it, release finds it;
// multi-locks' fences and election terms too.  This file's process only.
// Promises: P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { pg, unique, pool, sleep, aborted, elections, noElections, kinds, noKinds } = require('./helpers');

const app = pool({ application_name: 'node-test-parsers' });
const admin = pool();
after(() => Promise.all([app.end(), admin.end()]));

const PARSERS = {
  parseInt: (v) => parseInt(v, 10),
  Number: (v) => Number(v),
  string: (v) => String(v),
};
const ARRAY = (f) => (v) => v.slice(1, -1).split(',').map(f);

const serverFences = async (resource) => (await admin.query(
  'SELECT fence::text AS f FROM dlock.locks WHERE resource = $1 AND NOT expired ORDER BY fence',
  [resource])).rows.map((x) => BigInt(x.f));

async function keptAndFenced(lock) {
  const r = await Promise.race([aborted(lock.signal), sleep(6000).then(() => 'kept')]);   // twice the lease
  assert.equal(r, 'kept', `lost: ${r && r.message}`);
  assert.equal(await lock.check(), true);
  const c = await app.connect();
  try {
    await c.query('BEGIN');
    await lock.assertFence(c);
    await c.query('COMMIT');
  } finally {
    c.release();
  }
}

for (const [label, parse] of Object.entries(PARSERS)) {
  test(`global int8 parser ${label}: fences exact, renewed, fenced, released`, async (t) => {
    pg.types.setTypeParser(20, parse);
    pg.types.setTypeParser(1016, ARRAY(parse));
    const r = unique(`parser-${label}`);
    // 3 s leases: 1.5 s left a renewal 0.85 s (CI under load).
    const lock = await dlock.acquire(app, r, { lease: 3000 });
    assert.equal(typeof lock.fence, 'bigint');
    assert.ok(lock.fence > 2n ** 53n, `a clock-based fence: ${lock.fence}`);
    assert.deepEqual(await serverFences(r), [lock.fence]);
    await keptAndFenced(lock);
    assert.equal(await lock.release(), true);

    if (await kinds(admin)) {
      const m = await dlock.acquire(app, [r + '/a', r + '/b'], { lease: 3000 });
      assert.deepEqual(m.fences, [...await serverFences(r + '/a'), ...await serverFences(r + '/b')]);
      await keptAndFenced(m);
      assert.equal(await m.release(), true);
    } else {
      t.diagnostic(noKinds);
    }
    if (await elections(admin)) {
      const e = new dlock.Election(app, r + '/e', { lease: 3000 });
      const lead = await e.campaign('v');
      assert.deepEqual(await serverFences(r + '/e'), [lead.term]);
      assert.equal((await e.leader()).term, lead.term);
      await keptAndFenced(lead);
      assert.equal(await lead.resign(), true);
    } else {
      t.diagnostic(noElections);
    }
  });
}

test('global bool parser giving the text (\'t\', \'f\': both truthy): check, release, proclaim judge right', async (t) => {
  const original = pg.types.getTypeParser(16);
  pg.types.setTypeParser(16, (v) => v);
  try {
    const r = unique('parser-bool');
    const lock = await dlock.acquire(app, r, { lease: 5000 });
    assert.equal(await lock.check(), true);
    await admin.query('SELECT dlock.break_lock($1)', [r]);
    assert.equal(await lock.check(), false, 'check after break_lock');
    assert.equal(await lock.release(), false);
    assert.equal(lock.lost, true);
    if (await kinds(admin)) {
      const m = await dlock.acquire(app, [r + '/a', r + '/b'], { lease: 5000 });
      assert.equal(await m.check(), true);
      await admin.query('SELECT dlock.break_lock($1)', [r + '/b']);
      assert.equal(await m.check(), false, 'check after one holding was broken');
      assert.equal(await m.release(), false, 'release after one holding was broken');
      assert.equal(m.lost, true);
    } else {
      t.diagnostic(noKinds);
    }
    if (await elections(admin)) {
      const e = new dlock.Election(app, r + '/e', { lease: 5000 });
      const lead = await e.campaign('v');
      assert.equal(await lead.proclaim('w'), true);
      assert.equal(await lead.resign(), true);
    } else {
      t.diagnostic(noElections);
    }
  } finally {
    pg.types.setTypeParser(16, original);
  }
});
