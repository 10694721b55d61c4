'use strict';
// A call that fails while something is held: a leader whose campaign()
// again fails (here: the query that reads the lease back, on a pool that
// refuses a connection) still leads, or knows at once that it does not.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, elections, noElections } = require('./helpers');

const app = pool({ application_name: 'node-test-failed' });
const admin = pool();
after(() => Promise.all([app.end(), admin.end()]));

// flaky: APP, except that its connect() number failAt rejects (as a
// pool whose connections are refused).
function flaky() {
  return {
    n: 0,
    failAt: 0,
    connect() {
      this.n += 1;
      if (this.n === this.failAt) {
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
