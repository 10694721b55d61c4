'use strict';
// The renewal's retry budget (db.tryTimeout, db.retryWait), no server: a
// try that stalls is given up at its bound and leaves the next try, on a
// new client, at least a sixth of the lease before the loss is declared
// (a third of the lease per try left 0.2 s of a 3 s lease after the
// back-off: on a loaded machine it came too late, CI).
// Promises: P16
const { test } = require('node:test');
const assert = require('node:assert/strict');
const db = require('../lib/db');

const margin = (leaseMs) => Math.min(leaseMs / 10, 1000);   // lock.js's

test('a stalled try leaves a sixth of the lease for the next; a fast failure backs off', () => {
  for (const lease of [300, 1500, 3000, 30000, 3600000]) {
    const t = 1000000;                                       // a fixed clock: no timing here
    const deadline = t - lease / 3 + lease - margin(lease);   // the renewal is due at t
    const bound = db.tryTimeout(lease, deadline, t);
    assert.ok(bound >= lease / 6 && t + bound <= deadline, `lease ${lease}: bound ${bound}`);
    // Stalled to its bound: the next try at once, with a sixth or more.
    assert.equal(db.retryWait(lease, 100, t, deadline, t + bound), 0);
    const next = db.tryTimeout(lease, deadline, t + bound);
    assert.ok(next >= lease / 6, `lease ${lease}: next ${next}`);
    // Refused at once: the back-off, at most a tenth of the lease, from the try's start.
    assert.equal(db.retryWait(lease, 800, t, deadline, t + 10), Math.min(800, lease / 10) - 10);
    assert.equal(db.retryWait(lease, 800, t, deadline, t), Math.min(800, lease / 10));
  }
});
