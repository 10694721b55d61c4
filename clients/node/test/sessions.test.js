'use strict';
// Sessions (openSession): one keepalive keeps many holdings (no per-lock
// renewal); the session's loss is signalled on every lock before its ttl
// ends (partition, closed by someone else, server down); a lock broken by
// an administrator is lost alone; close() releases all; release of one
// leaves the rest; pgbouncer; races (an acquisition as the session is
// lost, a keepalive racing close() or a release, two sessions of one
// holder).  Skipped where dlock.open_session(interval,text) is missing.
// Promises: P1 P4 P16
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const dlock = require('..');
const { unique, pool, bouncerPool, bouncerPort, proxy, within, sleep, aborted, pauseIdle, lossClock, endOf,
  assertToldBefore } = require('./helpers');

const app = pool({ application_name: 'node-test-sess' });
const admin = pool({ application_name: 'node-test-sess-admin' });
after(() => Promise.all([app.end(), admin.end()]));

const SEED = Number(process.env.DLOCK_TEST_SEED || Math.floor(Math.random() * 2 ** 30));
console.log(`# seed ${SEED}`);
// rng: a seeded generator (mulberry32), for the moments of the races.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6D2B79F5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

let has;
async function sessions(t) {
  if (has === undefined) {
    has = (await admin.query("SELECT to_regprocedure('dlock.open_session(interval,text)') IS NOT NULL AS ok"))
      .rows[0].ok;
  }
  if (!has) t.skip("no sessions: to_regprocedure('dlock.open_session(interval,text)') IS NULL on this server");
  return has;
}

const live = async (id) => (await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE session = $1::bigint ' +
  'AND holder IS NOT NULL AND NOT expired', [id.toString()])).rows[0].n;
const sessionRow = async (id) => (await admin.query('SELECT expires_at, holdings::int AS holdings, ' +
  'expires_at > clock_timestamp() AS live FROM dlock.sessions WHERE id = $1::bigint', [id.toString()])).rows[0];

// counting POOL: a pool whose clients count the statements they run.
function counting(p) {
  const sent = [];
  return {
    sent,
    count: (word) => sent.filter((s) => s.includes(`dlock.${word}(`)).length,
    async connect() {
      const c = await p.connect();
      if (!c._dlockCounted) {
        const q = c.query.bind(c);
        c.query = (config, ...rest) => { sent.push(typeof config === 'string' ? config : config.text); return q(config, ...rest); };
        c._dlockCounted = true;
      }
      return c;
    },
  };
}

async function expectLostOnAll(s, locks) {
  const why = await within(15000, aborted(s.signal), 'the session\'s loss');
  assert.ok(why instanceof dlock.SessionLost, String(why));
  for (const l of locks) {
    const r = await within(5000, aborted(l.signal), `${l.resource}'s loss`);
    assert.ok(r instanceof dlock.LockLost && /session/.test(r.message), String(r));
    assert.equal(l.lost, true);
  }
  return why;
}

test('one keepalive keeps many locks of every kind; no renewal per lock', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('many');
  const cp = counting(app);
  // ttl 3 s: 1.5 s was lost once during the 22 acquisitions on a loaded
  // machine.
  const s = await dlock.openSession(cp, { ttl: 3000 });
  const locks = [];
  for (let i = 0; i < 20; i++) locks.push(await s.tryAcquire(`${r}/${i}`));
  locks.push(await s.acquire(`${r}/sem`, { maxPermits: 2 }));
  locks.push(await s.acquire([`${r}/m1`, `${r}/m2`]));
  assert.ok(locks.every((l) => l !== null && l.session === s));
  await sleep(5000);
  assert.equal(s.lost, false, `lost: ${s.signal.reason}`);
  assert.ok(locks.every((l) => !l.lost));
  assert.equal(await live(s.id), 23);
  assert.equal((await sessionRow(s.id)).holdings, 23);
  assert.ok(s.expiresAt instanceof Date);
  assert.equal(await locks[0].check(), true);
  assert.equal(await s.close(), true);
  assert.ok(cp.count('keepalive') >= 4, cp.sent.join('\n'));
  assert.equal(cp.count('renew'), 0, 'a lock in a session sent a renewal of its own');
  assert.equal(await live(s.id), 0);
  assert.equal(await sessionRow(s.id), undefined);
  assert.ok(locks.every((l) => l.released && !l.lost));
});

test('partition (keepalive connections killed, the server unreachable): lost on every lock before the ttl ends', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('cut');
  const px = await proxy();
  const p = px.pool({ application_name: 'node-test-sess-cut' });
  try {
    const s = await dlock.openSession(p, { ttl: 3000 });
    const locks = [await s.acquire(`${r}/a`), await s.acquire(`${r}/b`), await s.acquire(`${r}/c`)];
    const told = lossClock(s.signal);
    const endSql = 'SELECT expires_at FROM dlock.sessions WHERE id = $1::bigint';
    px.cut();
    await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'node-test-sess-cut'");
    const end = await endOf(admin, endSql, [s.id.toString()]);
    await expectLostOnAll(s, locks);
    await assertToldBefore(told(), end, () => endOf(admin, endSql, [s.id.toString()]));
  } finally {
    await px.close();
    await p.end().catch(() => {});
  }
});

test('keepalive backend paused (SIGSTOP): kept through a new connection, or lost before the ttl ends', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('stop');
  const p = pool({ application_name: 'node-test-sess-stop', max: 1 });
  const s = await dlock.openSession(p, { ttl: 3000 });
  const locks = [await s.acquire(`${r}/a`), await s.acquire(`${r}/b`)];
  const pid = (await admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = 'node-test-sess-stop'")).rows[0].pid;
  // The server's expiry before the pause: the session's, if no keepalive
  // was acknowledged since (expiresAt is null before the first one).
  const opened = (await sessionRow(s.id)).expires_at;
  await pauseIdle(admin, pid);
  try {
    let lostAt = null;
    s.signal.addEventListener('abort', () => { lostAt = new Date(); });
    await sleep(4000);
    if (s.lost) {
      const expiry = s.expiresAt ?? opened;
      assert.ok(lostAt < expiry, `lost at ${lostAt}, session expiry ${expiry}`);
      assert.ok(locks.every((l) => l.lost));
    } else {
      assert.ok((await sessionRow(s.id)).live, 'not lost: the server keeps it');
      assert.ok(locks.every((l) => !l.lost));
    }
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  await s.close();
  await p.end().catch(() => {});
});

test('closed by someone else: lost at once on every lock; a stale fenced write is refused (55P03)', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('closed');
  const s = await dlock.openSession(app, { ttl: 3000 });
  const locks = [await s.acquire(`${r}/a`), await s.acquire(`${r}/b`)];
  assert.equal((await admin.query('SELECT dlock.close_session($1::bigint) AS n', [s.id.toString()])).rows[0].n, 2);
  const why = await expectLostOnAll(s, locks);
  assert.match(why.message, /NULL/);
  const other = await dlock.acquire(app, `${r}/a`, { wait: 0 });
  assert.ok(other.fence > locks[0].fence);
  const c = await app.connect();
  try {
    await c.query('BEGIN');
    await assert.rejects(locks[0].assertFence(c), (e) => e.code === '55P03');
    await c.query('ROLLBACK');
  } finally {
    c.release();
  }
  await other.release();
  await assert.rejects(s.tryAcquire(`${r}/new`), (e) => e.code === '55000');
  assert.equal(await s.close(), false);
});

test('release of one leaves the others; close() releases all; a session used after close: 55000', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('close');
  // ttl 3 s: 1.5 s left a keepalive 0.85 s (CI under load).
  const s = await dlock.openSession(app, { ttl: 3000 });
  const locks = [];
  for (let i = 0; i < 5; i++) locks.push(await s.tryAcquire(`${r}/${i}`));
  assert.equal(await locks[0].release(), true);
  assert.equal(await live(s.id), 4);
  await sleep(4000);   // past the ttl: the rest are kept
  assert.ok(locks.slice(1).every((l) => !l.lost));
  assert.equal(await locks[1].check(), true);
  const got = await s.withLock(`${r}/w`, async (l) => (await live(s.id)) + (l.session === s ? 100 : 0));
  assert.equal(got, 105);
  assert.equal(await live(s.id), 4);
  assert.equal(await s.close(), true);
  assert.equal(await sessionRow(s.id), undefined);
  assert.equal((await admin.query('SELECT count(*)::int AS n FROM dlock.locks WHERE resource LIKE $1 AND holder IS NOT NULL',
    [`${r}/%`])).rows[0].n, 0);
  assert.ok(locks.every((l) => !l.lost));
  for (const use of [() => s.acquire(r), () => s.tryAcquire(r), () => s.campaign(r)])
    await assert.rejects(use(), (e) => e.code === '55000' && /closed/.test(e.message));
  assert.equal(await s.close(), true, 'again: what the first said');
  const free = await dlock.tryAcquire(app, `${r}/2`);
  assert.ok(free, 'free for others');
  await free.release();
  await assert.rejects(s.acquire(r, { lease: 1000 }), (e) => e.code === '22023' || e.code === '55000');
});

test('pgbouncer (transaction pooling): a session and its locks kept past their ttl', { skip: bouncerPort ? false : 'no pgbouncer (DLOCK_TEST_BOUNCER_PORT unset)' }, async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('bouncer');
  const bp = bouncerPool();
  try {
    // ttl 6 s: with 1.5 s, a keepalive queued for pgbouncer had 0.85 s (CI under load).
    const s = await dlock.openSession(bp, { ttl: 6000 });
    const locks = [];
    for (let i = 0; i < 6; i++) locks.push(await s.tryAcquire(`${r}/${i}`));
    await sleep(8000);   // past the ttl
    assert.equal(s.lost, false, `lost: ${s.signal.reason}`);
    assert.equal(await live(s.id), 6);
    assert.equal(await locks[2].release(), true);
    assert.equal(await live(s.id), 5);
    assert.equal(await s.close(), true);
    assert.equal(await sessionRow(s.id), undefined);
  } finally {
    await bp.end();
  }
});

test('attack: locks acquired as the session is closed under them are all told of the loss', async (t) => {
  if (!(await sessions(t))) return;
  const rand = rng(SEED);
  for (let round = 0; round < 5; round++) {
    const r = unique(`race${round}`);
    const s = await dlock.openSession(app, { ttl: 5000 });
    const got = [];
    const errors = [];
    let stop = false;
    let first;
    const firstDone = new Promise((resolve) => { first = resolve; });
    const taker = (async () => {
      for (let i = 0; !stop; i++) {
        try {
          const l = await s.tryAcquire(`${r}/${i}`);
          if (l) got.push(l);
        } catch (e) {
          errors.push(e.code);
          return;
        } finally {
          first();
        }
      }
    })();
    // The close's moment counts from the first acquisition's end: on a
    // loaded machine that one can take longer than any fixed delay.
    await within(60000, firstDone, `seed ${SEED}: the first acquisition`);
    await sleep(rand() * 300);
    await admin.query('SELECT dlock.close_session($1::bigint)', [s.id.toString()]);
    await within(10000, aborted(s.signal), 'the session\'s loss');
    stop = true;
    await taker;
    assert.ok(got.length > 0, `seed ${SEED}: nothing acquired: ${errors.join()}`);
    for (const l of got) await within(5000, aborted(l.signal), `seed ${SEED}: ${l.resource} told`);
    assert.ok(errors.every((c) => c === '55000'), errors.join());
  }
});

test('attack: close() racing the keepalive: closed cleanly, never reported lost', async (t) => {
  if (!(await sessions(t))) return;
  const rand = rng(SEED + 1);
  let s, l;
  for (let i = 0; i < 15; i++) {
    // ttl 3 s: a keepalive every second, due or in flight at the close;
    // a shorter one (1.2 s: 0.68 s for a keepalive) is lost on a loaded machine.
    s = await dlock.openSession(app, { ttl: 3000 });
    l = await s.tryAcquire(unique('closerace'));
    assert.ok(l);
    await sleep(rand() * 2250);
    const [a, b] = await Promise.all([s.close(), s.close()]);
    assert.ok(a && b, `seed ${SEED + 1}: round ${i}: ${s.signal.reason}`);
    assert.equal(await sessionRow(s.id), undefined);
  }
  await sleep(1250);
  assert.equal(s.lost, false);
  assert.equal(l.lost, false);
});

test('attack: two sessions of one holder: no re-entry across them; the loss of one leaves the other', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('two');
  const holder = `node-holder-${process.pid}-${Date.now()}`;
  const s1 = await dlock.openSession(app, { ttl: 3000, holder });
  const s2 = await dlock.openSession(app, { ttl: 3000, holder });
  const a = await s1.tryAcquire(r);
  assert.ok(a);
  await assert.rejects(s2.tryAcquire(r), (e) => e.code === '55000');
  const b = await s2.tryAcquire(`${r}/b`);
  await admin.query('SELECT dlock.close_session($1::bigint)', [s2.id.toString()]);
  await within(10000, aborted(b.signal), 'b told');
  assert.equal(s1.lost, false);
  assert.equal(await a.check(), true);
  assert.equal(await s2.close(), false);
  assert.equal(await s1.close(), true);
});

test('a lock broken by an administrator is lost; the session and its other locks live on', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('broken');
  // ttl 3 s: 1.5 s left a keepalive 0.85 s (CI under load).
  const s = await dlock.openSession(app, { ttl: 3000 });
  const a = await s.acquire(`${r}/a`);
  const b = await s.acquire(`${r}/b`);
  const at = Date.now();
  await admin.query('SELECT dlock.break_lock($1)', [`${r}/a`]);
  const why = await within(15000, aborted(a.signal), 'the broken lock\'s loss');
  assert.ok(why instanceof dlock.LockLost && /no longer has it \(broken/.test(why.message), String(why));
  assert.ok(Date.now() - at < 2.5 * s.ttl, `told after ${Date.now() - at} ms, ttl ${s.ttl}`);
  const other = await dlock.tryAcquire(app, `${r}/a`);
  assert.ok(other && other.fence > a.fence, 'another holder takes it');
  await sleep(2000);
  assert.equal(s.lost, false, `session lost: ${s.signal.reason}`);
  assert.equal(b.lost, false);
  assert.equal(await b.check(), true);
  assert.equal(await live(s.id), 1);
  assert.equal(await a.release(), false);
  assert.equal(await other.release(), true);
  assert.equal(await s.close(), true);
  assert.ok(b.released);
});

test('a lock of several resources in a session, one of them broken, is lost; the other kinds are kept', async (t) => {
  if (!(await sessions(t))) return;
  const r = unique('multibroken');
  // ttl 3 s: 1.5 s left a keepalive 0.85 s (CI under load).
  const s = await dlock.openSession(app, { ttl: 3000 });
  const m = await s.acquire([`${r}/m1`, `${r}/m2`, `${r}/m3`]);
  const kept = [await s.acquire([`${r}/k1`, `${r}/k2`]), await s.acquire(`${r}/sem`, { maxPermits: 2 }),
    await s.acquire(`${r}/sh`, { shared: true }), await s.acquire(`${r}/x`)];
  kept.push(await s.acquire(`${r}/x`));    // re-entry: one row for both
  await admin.query('SELECT dlock.break_lock($1)', [`${r}/m2`]);
  const why = await within(15000, aborted(m.signal), 'the multi-lock\'s loss');
  assert.ok(why instanceof dlock.LockLost && /no longer has it \(broken/.test(why.message), String(why));
  await sleep(2000);
  assert.equal(s.lost, false, `session lost: ${s.signal.reason}`);
  assert.ok(kept.every((l) => !l.lost), kept.filter((l) => l.lost).map((l) => String(l.signal.reason)).join());
  assert.equal(await kept[4].release(), true);
  await sleep(2000);
  assert.equal(kept[3].lost, false, 'one release of a re-entry leaves the row');
  assert.equal(await kept[3].check(), true);
  assert.equal(await m.release(), false);
  assert.equal(await s.close(), true);
});

test('attack: releases and acquisitions racing the keepalive: never reported lost', async (t) => {
  if (!(await sessions(t))) return;
  const rand = rng(SEED + 2);
  const r = unique('relrace');
  // A pool that says when a keepalive is sent: each release starts right
  // then, or a few ms later, so that its unlock commits before or after
  // the keepalive reads the session's holdings.
  const own = pool({ application_name: 'node-test-sess-relrace' });
  let sent = null;
  const hooked = {
    async connect() {
      const c = await own.connect();
      if (!c._dlockHooked) {
        const q = c.query.bind(c);
        c.query = (config, ...rest) => {
          const res = q(config, ...rest);
          if (String(typeof config === 'string' ? config : config.text).includes('dlock.keepalive(')) sent?.();
          return res;
        };
        c._dlockHooked = true;
      }
      return c;
    },
  };
  try {
    // ttl 3 s: a keepalive every second (1.2 s left one 0.68 s: CI under load).
    const s = await dlock.openSession(hooked, { ttl: 3000 });
    const locks = [];
    for (let i = 0; i < 4; i++) locks.push(await s.acquire(`${r}/${i}`));
    const all = [...locks];
    for (let round = 0; round < 20; round++) {
      await within(10000, new Promise((resolve) => { sent = resolve; }), 'a keepalive');
      sent = null;
      const delay = rand() * 4;
      if (delay >= 1) await sleep(delay);
      const i = Math.floor(rand() * locks.length);
      assert.equal(await locks[i].release(), true, `seed ${SEED + 2}: round ${round}`);
      locks[i] = await s.acquire(`${r}/${i}`);   // the same resource again, another fence
      all.push(locks[i]);
    }
    await sleep(2500);
    const lost = all.filter((l) => l.lost);
    assert.equal(lost.length, 0, `seed ${SEED + 2}: ${lost.map((l) => String(l.signal.reason)).join('; ')}`);
    assert.equal(s.lost, false);
    assert.equal(await live(s.id), 4);
    assert.equal(await s.close(), true);
  } finally {
    await own.end();
  }
});

test('an election in a session', async (t) => {
  if (!(await sessions(t))) return;
  const name = unique('elect');
  // ttl 3 s: 1.5 s left a keepalive 0.85 s (CI under load).
  const s = await dlock.openSession(app, { ttl: 3000 });
  const lead = await s.campaign(name, 'v');
  const e = new dlock.Election(app, name);
  assert.equal((await e.leader()).candidate, s.holder);
  await sleep(4000);   // past the ttl
  assert.equal(lead.lost, false);
  assert.equal((await e.leader()).term, lead.term);
  assert.equal(await lead.resign(), true);
  assert.equal(await e.leader(), null);
  await s.close();
});

test('the server down longer than the ttl: lost on every lock before the expiry the server last gave', async (t) => {
  if (!(await sessions(t))) return;
  const pgCtl = process.env.DLOCK_TEST_PG_CTL;
  if (!pgCtl) return t.skip('DLOCK_TEST_PG_CTL (pg_ctl -D DATADIR -l LOG, for this server) unset');
  const { execSync } = require('node:child_process');
  const r = unique('down');
  const p = pool({ application_name: 'node-test-sess-down' });
  const s = await dlock.openSession(p, { ttl: 3000 });
  const locks = [await s.acquire(`${r}/a`), await s.acquire(`${r}/b`)];
  let lostAt = null;
  s.signal.addEventListener('abort', () => { lostAt = new Date(); });
  await sleep(2500);        // a keepalive has given an expiry (1.5 s left the first 0.5 s)
  execSync(`${pgCtl} -w -m fast stop`, { stdio: 'ignore' });
  try {
    await expectLostOnAll(s, locks);
    assert.ok(s.expiresAt && lostAt < s.expiresAt, `lost at ${lostAt}, expiry ${s.expiresAt}`);
  } finally {
    execSync(`${pgCtl} -w start`, { stdio: 'ignore' });
  }
  assert.equal(await s.close(), false);
  await p.end().catch(() => {});
});

test('a server without sessions (dlock 1.0 SQL): openSession rejects with 0A000; the rest unchanged', async (t) => {
  const portable = (await admin.query("SELECT to_regclass('dlock.portable') IS NOT NULL AS p")).rows[0].p;
  if (portable) return t.skip('portable edition: the C extension\'s 1.0 SQL is installed in a new database');
  const db = `dlock_node_${process.pid}_${Date.now()}`;
  await admin.query(`CREATE DATABASE "${db}"`);
  const p = pool({ database: db });
  try {
    await p.query("CREATE EXTENSION dlock VERSION '1.0'");
    await assert.rejects(dlock.openSession(p), (e) => e.code === '0A000' && /open_session/.test(e.message));
    const l = await dlock.acquire(p, unique('old'), { wait: 0 });
    assert.equal(await l.check(), true);
    assert.equal(await l.release(), true);
  } finally {
    await p.end();
    await admin.query(`DROP DATABASE "${db}" WITH (FORCE)`);
  }
});
