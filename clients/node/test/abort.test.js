'use strict';
// An AbortSignal on an acquisition (opts.signal): it ends the wait for a
// client of the pool or cancels the statement in the server; what the
// server granted all the same is given back; the promise rejects with
// the signal's reason.  The attacks: an abort while the server waits, one
// already made, one while the pool has no client, one after the grant
// but before its answer arrives (a stalled proxy), aborts racing a
// release (seeded), through pgbouncer, and a bad signal.
// Promises: P16
const { test, after } = require('node:test');
const { getEventListeners } = require('node:events');
const assert = require('node:assert/strict');
const dlock = require('..');
const {
  pg, unique, pool, bouncerPool, bouncerPort, proxy, within, sleep, elections, noElections, kinds, noKinds,
} = require('./helpers');

const APP = 'node-test-abort';
const app = pool({ application_name: APP });
const admin = pool();
after(() => Promise.all([app.end(), admin.end()]));

// running NAME: acquisitions and campaigns of application NAME running
// now (not its renewals and keepalives).
const running = async (name) => (await admin.query(
  "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' " +
  "AND query ~ 'dlock\\.(lock|acquire|lock_all|campaign)\\('", [name])).rows[0].n;

// stopped: APP's acquisitions have all ended (cancelled, not left to
// wait).  Polled: the server sends a statement's error before its backend
// shows as idle in pg_stat_activity.  A statement left waiting would wait
// for a minute, far past the poll's 10 s.
const stopped = () => until('its statement ended', async () => (await running(APP)) === 0);

// until WHAT FN: polls FN until it is true (10 s, else a failure).
async function until(what, fn) {
  const end = Date.now() + 10000;
  while (Date.now() < end) {
    if (await fn()) return;
    await sleep(20);
  }
  assert.fail(`${what}: not within 10 s`);
}

// live RESOURCE: the holders of RESOURCE's live holdings.
const live = async (resource) => (await admin.query(
  'SELECT holder FROM dlock.locks WHERE resource = $1 AND NOT expired ORDER BY holder', [resource]))
  .rows.map((x) => x.holder);

// Each kind: how the first holder takes it (on admin), how a waiter
// takes it with opts (on app), and a third one's try once both are done.
const plain = (r, o) => dlock.acquire(admin, r, o);
const KINDS = {
  lock: { hold: plain, take: (r, o) => dlock.acquire(app, r, o), third: (r) => dlock.tryAcquire(admin, r) },
  semaphore: {
    hold: (r, o) => dlock.acquire(admin, r, { maxPermits: 1, ...o }),
    take: (r, o) => dlock.acquire(app, r, { maxPermits: 1, ...o }),
    third: (r) => dlock.tryAcquire(admin, r, { maxPermits: 1 }),
    needs: kinds, skip: noKinds,
  },
  multi: {
    hold: (r, o) => dlock.acquire(admin, [r, `${r}/b`], o),
    take: (r, o) => dlock.acquire(app, [r, `${r}/b`], o),
    third: (r) => dlock.tryAcquire(admin, [r, `${r}/b`]),
    needs: kinds, skip: noKinds,
  },
  withLock: {
    hold: plain,
    take: (r, o) => dlock.withLock(app, r, async () => { throw new Error('ran without the lock'); }, o),
    third: (r) => dlock.tryAcquire(admin, r),
  },
  election: {
    hold: (r, o) => new dlock.Election(admin, r, { lease: o.lease }).campaign('first'),
    take: (r, o) => new dlock.Election(app, r, { lease: o.lease }).campaign('v', o),
    third: (r) => new dlock.Election(admin, r).campaign('third', { wait: 0 }).catch(() => null),
    needs: elections, skip: noElections,
  },
};

for (const [kind, k] of Object.entries(KINDS)) {
  test(`${kind}: an abort while the server waits cancels the statement; nothing is held; the reason rejects`, async (t) => {
    if (k.needs && !(await k.needs(admin))) return t.skip(k.skip);
    const r = unique(`abort-${kind}`);
    const first = await k.hold(r, { lease: 30000 });
    const ac = new AbortController();
    const reason = new Error('shutting down');
    const outcome = k.take(r, { lease: 30000, wait: 60000, signal: ac.signal }).then(() => 'resolved', (err) => err);
    await until('the waiter runs in the server', async () => (await running(APP)) === 1);
    ac.abort(reason);
    assert.equal(await within(5000, outcome, 'the aborted acquisition'), reason);
    await stopped();
    const holders = await live(r);
    assert.equal(holders.length, 1, `only the first holder: ${holders}`);
    await first.release();
    // Were its statement still waiting, it would take it now.
    const third = await k.third(r);
    assert.ok(third, 'free once the first holder released it');
    await third.release();
    assert.equal((await app.query('SELECT 1 AS one')).rows[0].one, 1, 'the pool still works');
  });
}

test('session: an abort cancels a lock and a campaign waiting in a session; the session lives', async (t) => {
  const s = await dlock.openSession(app, { ttl: 30000 });
  try {
    const r = unique('abort-session');
    const first = await dlock.acquire(admin, r, { lease: 30000 });
    const ac = new AbortController();
    const outcome = s.acquire(r, { wait: 60000, signal: ac.signal }).then(() => 'resolved', (err) => err);
    await until('the waiter runs in the server', async () => (await running(APP)) === 1);
    ac.abort();
    const err = await within(5000, outcome, 'the aborted acquisition');
    assert.equal(err.name, 'AbortError', `the default reason: ${err}`);
    await stopped();
    assert.deepEqual(await live(r), [first.holder]);
    await first.release();
    assert.equal(s.lost, false);
    const again = await s.acquire(r, { wait: 5000 });
    assert.ok(again, 'the session still acquires');
    await again.release();

    if (!(await elections(admin))) return t.skip(noElections);
    const e = unique('abort-session-election');
    const leader = await new dlock.Election(admin, e, { lease: 30000 }).campaign('a');
    const ac2 = new AbortController();
    const campaign = s.campaign(e, 'b', { wait: 60000, signal: ac2.signal }).then(() => 'resolved', (x) => x);
    await until('the campaign runs in the server', async () => (await running(APP)) === 1);
    ac2.abort('enough');
    assert.equal(await within(5000, campaign, 'the aborted campaign'), 'enough');
    await stopped();
    await leader.resign();
    assert.equal(s.lost, false);
  } finally {
    await s.close();
  }
});

test('a campaign again, aborted after the grant, does not resign the term it leads (session or not)', async (t) => {
  if (!(await elections(admin))) return t.skip(noElections);
  const px = await proxy();
  const p = px.pool({ application_name: `${APP}-leading` });
  try {
    for (const kind of ['election', 'session']) {
      const e = unique(`abort-leading-${kind}`);
      const s = kind === 'session' ? await dlock.openSession(p, { ttl: 30000 }) : null;
      const el = s ? null : new dlock.Election(p, e, { lease: 30000 });
      const campaign = (o) => (s ? s.campaign(e, 'v', o) : el.campaign('v', o));
      const leading = await campaign({});
      px.stall();
      const ac = new AbortController();
      const outcome = campaign({ signal: ac.signal }).then(() => 'resolved', (x) => x);
      await sleep(300); // answered, held back by the proxy
      ac.abort('late');
      px.resume();
      assert.equal(await within(15000, outcome, 'the aborted campaign'), 'late');
      const leader = (await admin.query('SELECT term::text AS term FROM dlock.leader($1)', [e])).rows[0];
      assert.equal(leader && leader.term, leading.term.toString(), `${kind}: still the leader, same term`);
      assert.equal(leading.lost, false);
      if (s) await s.close();
      else await leading.resign();
    }
  } finally {
    await p.end();
    await px.close();
  }
});

test('an abort made already rejects at once with its reason, sends nothing', async () => {
  let connects = 0;
  const counting = { connect: () => { connects += 1; return app.connect(); } };
  const ac = new AbortController();
  ac.abort('no');
  await assert.rejects(dlock.acquire(counting, unique('abort-before'), { signal: ac.signal }), (e) => e === 'no');
  await assert.rejects(dlock.tryAcquire(counting, unique('abort-before'), { signal: ac.signal }), (e) => e === 'no');
  await assert.rejects(new dlock.Election(counting, unique('abort-before')).campaign('v', { signal: ac.signal }),
    (e) => e === 'no');
  assert.equal(connects, 0);
});

test('a bad signal is refused (22023) before anything is sent', async () => {
  let connects = 0;
  const counting = { connect: () => { connects += 1; return app.connect(); } };
  for (const signal of ['x', 5, {}, { aborted: false }]) {
    await assert.rejects(dlock.acquire(counting, unique('abort-bad'), { signal }), { code: '22023' });
  }
  const s = await dlock.openSession(app, { ttl: 30000 });
  try {
    await assert.rejects(s.acquire(unique('abort-bad'), { signal: 'x' }), { code: '22023' });
    await assert.rejects(s.campaign(unique('abort-bad'), 'v', { signal: 'x' }), { code: '22023' });
  } finally {
    await s.close();
  }
  assert.equal(connects, 0);
});

test('an abort while the pool has no free client: rejects; the client comes back to the pool', async () => {
  const small = pool({ max: 1, application_name: `${APP}-small` });
  try {
    const busy = await small.connect();
    const ac = new AbortController();
    const r = unique('abort-pool');
    const outcome = dlock.acquire(small, r, { signal: ac.signal }).then(() => 'resolved', (e) => e);
    await sleep(100);
    ac.abort('pool');
    assert.equal(await within(5000, outcome, 'the aborted acquisition'), 'pool');
    busy.release();
    await until('the client is idle in the pool again', () => small.idleCount === 1 && small.waitingCount === 0);
    assert.equal(small.totalCount, 1);
    assert.deepEqual(await live(r), []);
    const l = await dlock.acquire(small, r, { wait: 5000 });
    await l.release();
  } finally {
    await small.end();
  }
});

test('an abort after the grant, before its answer arrives: the grant is given back', async () => {
  const px = await proxy();
  const p = px.pool({ application_name: `${APP}-stalled` });
  try {
    for (const kind of ['lock', 'session']) {
      const r = unique(`abort-granted-${kind}`);
      const first = await dlock.acquire(admin, r, { lease: 30000 });
      const s = kind === 'session' ? await dlock.openSession(p, { ttl: 30000 }) : null;
      const ac = new AbortController();
      const outcome = (s ? s.acquire(r, { wait: 60000, signal: ac.signal })
        : dlock.acquire(p, r, { lease: 30000, wait: 60000, signal: ac.signal })).then(() => 'resolved', (e) => e);
      await until('the waiter runs in the server', async () => (await running(`${APP}-stalled`)) === 1);
      px.stall();
      await first.release();
      await until('granted in the server', async () => (await live(r)).length === 1);
      ac.abort('late');
      await sleep(200); // the cancel request comes too late: nothing runs
      px.resume();
      assert.equal(await within(15000, outcome, 'the aborted acquisition'), 'late');
      assert.deepEqual(await live(r), [], 'the grant was given back');
      if (s) {
        assert.equal(s.lost, false);
        await s.close();
      }
    }
  } finally {
    await p.end();
    await px.close();
  }
});

test('aborts racing releases (seeded): rejected, nothing of it left; resolved, it is held', async () => {
  let seed = Number(process.env.DLOCK_TEST_SEED || Date.now() % 1000000);
  console.log(`# seed ${seed}`);
  const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
  const seen = { resolved: 0, rejected: 0 };
  for (let i = 0; i < 20; i++) {
    const r = unique('abort-race');
    const first = await dlock.acquire(admin, r, { lease: 30000 });
    const ac = new AbortController();
    const outcome = dlock.acquire(app, r, { lease: 30000, wait: 60000, signal: ac.signal })
      .then((l) => l, (e) => e);
    await until('the waiter runs in the server', async () => (await running(APP)) === 1);
    const releaseAt = rand() * 20, abortAt = rand() * 20;
    await Promise.all([sleep(releaseAt).then(() => first.release()), sleep(abortAt).then(() => ac.abort('race'))]);
    const got = await within(15000, outcome, 'the acquisition');
    if (got === 'race') {
      seen.rejected += 1;
      assert.deepEqual(await live(r), [], `round ${i}: rejected, yet held`);
    } else {
      seen.resolved += 1;
      assert.ok(got instanceof dlock.Lock, `round ${i}: ${got}`);
      assert.equal(await got.check(), true, `round ${i}: resolved but not held`);
      await got.release();
    }
    await stopped();
  }
  console.log(`# outcomes ${JSON.stringify(seen)}`);
});

test('pgbouncer: an abort cancels the waiting statement through the pooler', { skip: bouncerPort ? false : 'no pgbouncer (DLOCK_TEST_BOUNCER_PORT unset)' }, async () => {
  const bp = bouncerPool({ application_name: `${APP}-bouncer` });
  try {
    const r = unique('abort-bouncer');
    const first = await dlock.acquire(admin, r, { lease: 30000 });
    const ac = new AbortController();
    const outcome = dlock.acquire(bp, r, { wait: 60000, signal: ac.signal }).then(() => 'resolved', (e) => e);
    // pgbouncer passes application_name on to the server.
    await until('the waiter runs in the server', async () => (await running(`${APP}-bouncer`)) === 1);
    ac.abort('bouncer');
    assert.equal(await within(5000, outcome, 'the aborted acquisition'), 'bouncer');
    assert.equal((await bp.query('SELECT 1 AS one')).rows[0].one, 1, 'pgbouncer still answers');
    await first.release();
    const third = await dlock.tryAcquire(admin, r);
    assert.ok(third, 'no statement left waiting to take it');
    await third.release();
  } finally {
    await bp.end();
  }
});

test('a grant aborted before its answer leaves what the holder had: semaphore permits, a term', async (t) => {
  if (!(await kinds(admin))) return t.skip(noKinds);
  const px = await proxy();
  const p = px.pool({ application_name: `${APP}-had` });
  // late: takes with a signal aborted once the server answered (held back).
  const late = async (take) => {
    px.stall();
    const ac = new AbortController();
    const outcome = take(ac.signal).then(() => 'resolved', (e) => e);
    await sleep(300);
    ac.abort('late');
    px.resume();
    return within(15000, outcome, 'the aborted acquisition');
  };
  const permits = async (r, h) => (await admin.query(
    'SELECT sum(permits)::int AS n FROM dlock.locks WHERE resource = $1 AND holder = $2 AND NOT expired', [r, h]))
    .rows[0].n;
  try {
    const r = unique('abort-had-semaphore');
    const held = await dlock.acquire(p, r, { maxPermits: 3, holder: 'h', lease: 30000 });
    assert.equal(await late((signal) => dlock.acquire(p, r, { maxPermits: 3, holder: 'h', lease: 30000, signal })),
      'late');
    assert.equal(await held.check(), true, 'the permits the holder had are still held');
    assert.ok((await permits(r, 'h')) >= 1);
    await held.release();
    // With nothing before it, the late grant is given back.
    assert.equal(await late((signal) => dlock.acquire(p, r, { maxPermits: 3, holder: 'h', lease: 30000, signal })),
      'late');
    assert.equal(await permits(r, 'h'), null, 'given back');

    const s = await dlock.openSession(p, { ttl: 30000 });
    try {
      const sem = await s.acquire(r, { maxPermits: 3 });
      assert.equal(await late((signal) => s.acquire(r, { maxPermits: 3, signal })), 'late');
      assert.equal(await sem.check(), true, 'in a session: the permits it had are still held');
    } finally {
      await s.close();
    }

    if (!(await elections(admin))) return;
    const e = unique('abort-had-term');
    const leading = await new dlock.Election(p, e, { candidate: 'c', lease: 30000 }).campaign('v');
    const other = new dlock.Election(p, e, { candidate: 'c', lease: 30000 });
    assert.equal(await late((signal) => other.campaign('v', { signal })), 'late');
    const leader = (await admin.query('SELECT term::text AS term FROM dlock.leader($1)', [e])).rows[0];
    assert.equal(leader && leader.term, leading.term.toString(), 'the same candidate\'s term is not resigned');
    await leading.resign();
  } finally {
    await p.end();
    await px.close();
  }
});

test('one signal for many waits: no listener left, nothing printed', async () => {
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  try {
    const r = unique('abort-many');
    const first = await dlock.acquire(admin, r, { lease: 30000 });
    const many = pool({ max: 20, application_name: `${APP}-many` });
    try {
      const ac = new AbortController();
      const outcomes = Array.from({ length: 15 }, () =>
        dlock.acquire(many, r, { wait: 60000, signal: ac.signal }).then(() => 'resolved', (e) => e));
      await until('all wait in the server', async () => (await running(`${APP}-many`)) === 15);
      ac.abort('all');
      assert.deepEqual(await within(10000, Promise.all(outcomes), 'the aborted acquisitions'), Array(15).fill('all'));
      const again = new AbortController();
      for (let i = 0; i < 50; i++) await (await dlock.tryAcquire(many, unique('abort-many'), { signal: again.signal })).release();
      assert.equal(getEventListeners(again.signal, 'abort').length, 0, 'no listener left');
    } finally {
      await many.end();
    }
    await first.release();
    await sleep(50); // a warning is emitted on the next tick
    assert.deepEqual(warnings.map(String), []);
  } finally {
    process.off('warning', onWarning);
  }
});

test('a cancel that cannot get through: the call rejects within its 10 s bound and drops the connection', async () => {
  const px = await proxy();
  const name = `${APP}-swallowed`;
  const p = px.pool({ application_name: name });
  try {
    const r = unique('abort-swallowed');
    const first = await dlock.acquire(admin, r, { lease: 30000 });
    const ac = new AbortController();
    const outcome = dlock.acquire(p, r, { holder: 'mine', lease: 30000, wait: 60000, signal: ac.signal })
      .then(() => 'resolved', (e) => e);
    await until('the waiter runs in the server', async () => (await running(name)) === 1);
    px.swallowNew(); // the cancel request's connection goes nowhere
    ac.abort('swallowed');
    assert.equal(await within(13000, outcome, 'the aborted acquisition'), 'swallowed');
    assert.equal(p.totalCount, 0, 'the connection was dropped, not pooled');
    await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [name]);
    await first.release();
  } finally {
    await p.end();
    await px.close();
  }
});

test('an abort while a late grant is dated rejects with the reason, not the LockLost of its dating', async () => {
  let ctrl = null;
  // The acquisition's answer comes after its 300 ms lease; the caller
  // aborts as the dating renewal's answer (NULL: ended) arrives.
  class SlowClient extends pg.Client {
    query(q, ...rest) {
      const p = super.query(q, ...rest);
      const text = q && q.text;
      if (!p || typeof p.then !== 'function' || !text) return p;
      if (/dlock\.lock\(/.test(text)) return p.then(async (r) => { await sleep(400); return r; });
      if (ctrl && /dlock\.renew\(/.test(text)) {
        const c = ctrl;
        ctrl = null;
        return p.then((r) => { c.abort('dated'); return r; });
      }
      return p;
    }
  }
  const slow = pool({ Client: SlowClient });
  try {
    ctrl = new AbortController();
    const signal = ctrl.signal;
    const r = unique('abort-dated');
    const e = await dlock.acquire(slow, r, { lease: 300, signal }).then(() => null, (x) => x);
    assert.equal(signal.aborted, true);
    assert.equal(e, 'dated');
    assert.deepEqual(await live(r), []);
  } finally {
    await slow.end();
  }
});

// AbortingClient: aborts the armed controller the moment the answer of an
// acquisition whose parameters include ARMED.tag arrives (the grant beat
// any cancel).
const armed = { ctrl: null, tag: null };
class AbortingClient extends pg.Client {
  query(q, ...rest) {
    const p = super.query(q, ...rest);
    const values = (q && q.values) || [];
    if (armed.ctrl && p && typeof p.then === 'function' && /dlock\.(acquire|lock|lock_all|campaign)\(/.test(q.text) &&
        values.includes(armed.tag)) {
      const ctrl = armed.ctrl;
      armed.ctrl = null;
      return p.then((r) => { ctrl.abort('after the grant'); return r; });
    }
    return p;
  }
}

test('concurrent calls of one holder or candidate: an abort after its grant leaves the other call\'s holding', async (t) => {
  if (!(await kinds(admin)) || !(await elections(admin))) return t.skip(noKinds);
  const name = `${APP}-concurrent`;
  const p = pool({ Client: AbortingClient, max: 6, application_name: name });
  // Each call waits on the server before the next is made (a fixed 200 ms
  // was a guess; under load the later call could get ahead).
  const waiting = (n) => until(`${n} calls waiting`, async () => (await running(name)) === n);
  const leaderTerm = async (e) => (await admin.query('SELECT term::text AS t FROM dlock.leader($1)', [e])).rows[0]?.t;
  try {
    // A semaphore: B (2 permits, aborted) waits; A (1 permit, same holder)
    // gets in meanwhile; B re-enters A's holding once there is room.
    for (const inSession of [false, true]) {
      const r = unique('abort-concurrent-semaphore');
      const other = await dlock.acquire(admin, r, { maxPermits: 3, permits: 2, lease: 30000 });
      const s = inSession ? await dlock.openSession(p, { ttl: 30000 }) : null;
      const take = (o) => (s ? s.acquire(r, { maxPermits: 3, ...o })
        : dlock.acquire(p, r, { maxPermits: 3, holder: 'h', lease: 30000, ...o }));
      const ac = new AbortController();
      Object.assign(armed, { ctrl: ac, tag: 2 });
      const b = take({ permits: 2, signal: ac.signal }).then(() => 'resolved', (e) => e);
      await waiting(1);
      const a = await take({ permits: 1 });
      await other.release();
      assert.equal(await within(15000, b, 'B'), 'after the grant');
      assert.equal(await a.check(), true, `${inSession ? 'session' : 'holder'}: A's permit is still held`);
      if (s) await s.close();
      else await a.release();
    }
    // A term: two Election objects of one candidate, and two campaigns in
    // one session.  A (plain) is first in campaign order and wins the
    // term; B then gets it back, as its candidate leads, and is aborted.
    for (const kind of ['elections', 'session']) {
      const e = unique(`abort-concurrent-${kind}`);
      const blocker = await new dlock.Election(admin, e, { lease: 30000 }).campaign('blocker');
      const s = kind === 'session' ? await dlock.openSession(p, { ttl: 30000 }) : null;
      const es = [0, 1].map(() => new dlock.Election(p, e, { candidate: 'c', lease: 30000 }));
      const campaign = (i, v, o) => (s ? s.campaign(e, v, o) : es[i].campaign(v, o));
      const a = campaign(0, 'plain', {}).then((l) => l, (x) => x);
      await waiting(1);
      const ac = new AbortController();
      Object.assign(armed, { ctrl: ac, tag: 'signalled' });
      const b = campaign(1, 'signalled', { signal: ac.signal }).then(() => 'resolved', (x) => x);
      await waiting(2);
      await blocker.resign();
      const [la, rb] = await within(15000, Promise.all([a, b]), 'the campaigns');
      assert.equal(rb, 'after the grant');
      assert.equal(await leaderTerm(e), String(la.term), `${kind}: the resolved leadership still leads`);
      if (s) await s.close();
      else await la.resign();
    }
  } finally {
    await p.end();
  }
});

test('an aborted campaign whose outcome stays unknown leaves a leadership of the same Election', async (t) => {
  if (!(await elections(admin))) return t.skip(noElections);
  const px = await proxy();
  const p = px.pool({ application_name: `${APP}-unknown` });
  try {
    const e = unique('abort-unknown-campaign');
    const blocker = await new dlock.Election(admin, e, { lease: 30000 }).campaign('blocker');
    // B: a made-up candidate, through the proxy; A: the same candidate,
    // on a connection of its own (the proxy holds back only B's).
    const el = new dlock.Election(p, e, { lease: 30000 });
    const a = new dlock.Election(app, e, { candidate: el.candidate, lease: 30000 }).campaign('a')
      .then((l) => l, (x) => x);
    await sleep(200);
    const ac = new AbortController();
    const b = el.campaign('b', { signal: ac.signal }).then(() => 'resolved', (x) => x);
    await sleep(200);
    px.stall(); // B's answer is held back ...
    await blocker.resign();
    const la = await within(10000, a, 'A');
    px.swallowNew(1); // ... and its cancel request goes nowhere: its outcome stays unknown
    ac.abort('unknown');
    assert.equal(await within(25000, b, 'B'), 'unknown');
    const leader = (await admin.query('SELECT term::text AS t FROM dlock.leader($1)', [e])).rows[0];
    assert.equal(leader && leader.t, String(la.term), 'A still leads');
    px.resume();
    await la.resign();
  } finally {
    await p.end();
    await px.close();
  }
});
