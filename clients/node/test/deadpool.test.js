'use strict';
// A pool whose idle clients' backends were terminated while the event
// loop was busy (the pool has not seen their end yet): an acquisition and
// a release go through on live clients (each failed with 57P01 on a dead
// one, and the release left the lock held), and the dead clients leave
// the pool.
// Promises: P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { execSync } = require('node:child_process');
const dlock = require('..');
const { unique, pool } = require('./helpers');

const admin = pool({ application_name: 'node-test-admin' });
after(() => admin.end());

// fill POOL with N idle clients.
async function fill(p, n) {
  const clients = await Promise.all(Array.from({ length: n }, () => p.connect()));
  for (const c of clients) c.release();
}

// killBlocked APP: terminate APP's idle backends while this process's event
// loop is blocked (psql, then a spin until their ends have arrived).
function killBlocked(app) {
  execSync(`psql -X -q -At -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity ` +
    `WHERE application_name = '${app}' AND state = 'idle'"`, { stdio: 'ignore' });
  const end = Date.now() + 300;
  while (Date.now() < end) { /* the event loop stays blocked */ }
}

const live = async (r) => (await admin.query(
  'SELECT count(*)::int AS n FROM dlock.locks WHERE resource = $1 AND expires_at > clock_timestamp()', [r])).rows[0].n === 1;

test('dead idle clients, unseen by the pool: tryAcquire and release go through on live ones', async () => {
  const app = `node-deadpool-${process.pid}`;
  const p = pool({ application_name: app, max: 6 });
  p.on('error', () => {});
  try {
    const r = unique('deadpool');
    await fill(p, 6);
    killBlocked(app);
    const lock = await dlock.tryAcquire(p, r, { lease: 30000 });
    assert.ok(lock, 'not acquired through dead idle clients');
    assert.ok(await live(r));
    await fill(p, 6);
    killBlocked(app);
    assert.equal(await lock.release(), true);
    assert.equal(await live(r), false, 'held on the server after release');
  } finally {
    await p.end();
  }
});
