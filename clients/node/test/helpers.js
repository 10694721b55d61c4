'use strict';
// helpers.js - what the tests share: pools on the test server (PGHOST,
// PGPORT, PGUSER, PGDATABASE: a superuser, for break_lock and
// pg_terminate_backend), on pgbouncer (DLOCK_TEST_BOUNCER_PORT, transaction
// pooling), and through a TCP proxy the tests can cut.
const net = require('node:net');
const pg = require('pg');

let n = 0;
// unique: a resource name of its own for each test.
const unique = (what) => `node-test:${what}:${process.pid}:${++n}`;

// newPool: a pg.Pool with the 'error' listener every application needs
// (pg emits a killed idle connection's error on its pool).
function newPool(config) {
  const p = new pg.Pool(config);
  p.on('error', () => {});
  return p;
}

function pool(extra) {
  return newPool({ max: 4, ...extra });
}

const bouncerPort = process.env.DLOCK_TEST_BOUNCER_PORT;
function bouncerPool(extra) {
  return newPool({ host: '127.0.0.1', port: Number(bouncerPort), max: 4, ...extra });
}

// proxy: a TCP proxy to the server's socket.  cut() closes every
// connection and black-holes new ones (accepted, never answered), as a
// partition would; heal() lets them through again.  swallowNew([N]) does
// that to new connections only (the next N; all without N), the open ones
// work on.  stall() holds back
// what the server sends on the connections open now (new ones pass),
// resume() delivers it.
async function proxy() {
  const target = process.env.PGHOST.startsWith('/')
    ? { path: `${process.env.PGHOST}/.s.PGSQL.${process.env.PGPORT || 5432}` }
    : { host: process.env.PGHOST, port: Number(process.env.PGPORT || 5432) };
  const sockets = new Set();
  const pairs = new Set();
  let cut = false, swallow = 0;
  const server = net.createServer((c) => {
    sockets.add(c);
    c.on('close', () => sockets.delete(c));
    c.on('error', () => {});
    if (cut || swallow > 0) {
      swallow -= 1;
      return;
    }
    const s = net.connect(target);
    sockets.add(s);
    s.on('close', () => { sockets.delete(s); c.destroy(); });
    s.on('error', () => {});
    c.on('close', () => s.destroy());
    c.pipe(s);
    const pair = { held: null };
    pairs.add(pair);
    s.on('close', () => pairs.delete(pair));
    pair.flush = () => { if (pair.held) c.write(Buffer.concat(pair.held)); pair.held = null; };
    s.on('data', (d) => { if (pair.held) pair.held.push(d); else c.write(d); });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: server.address().port,
    pool(extra) {
      return newPool({ host: '127.0.0.1', port: server.address().port, max: 4, ...extra });
    },
    cut() { cut = true; for (const s of sockets) s.destroy(); },
    heal() { cut = false; swallow = 0; },
    swallowNew(n) { swallow = n === undefined ? Infinity : n; },
    stall() { for (const p of pairs) p.held = p.held || []; },
    resume() { for (const p of pairs) p.flush(); },
    close() {
      for (const s of sockets) s.destroy();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}

// within MS PROMISE WHAT: PROMISE, or a failure after MS (a bound on a
// hang, never a speed assertion).
function within(ms, promise, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// aborted SIGNAL: resolves with the signal's reason once it is aborted.
const aborted = (signal) => new Promise((resolve) => {
  if (signal.aborted) resolve(signal.reason);
  else signal.addEventListener('abort', () => resolve(signal.reason), { once: true });
});

// lossClock SIGNAL: notes the wall clock the moment SIGNAL aborts (it must
// not have yet); returns a function that gives that Date (null: not yet).
// Compared with the server's expires_at afterwards (the server runs on
// this machine, on loopback): a query made after the loss answers late on
// a loaded machine, and the loss comes only a tenth of the lease early.
function lossClock(signal) {
  if (signal.aborted) throw new Error('lossClock: the signal has aborted already');
  let at = null;
  signal.addEventListener('abort', () => { at = new Date(); }, { once: true });
  return () => at;
}

// endOf ADMIN SQL PARAMS: the Date in the first column of SQL's first row
// (the lease's or ttl's end), or null (no row, or NULL).
async function endOf(admin, sql, params) {
  const r = (await admin.query(sql, params)).rows[0];
  const v = r && Object.values(r)[0];
  return v ? new Date(v) : null;
}

// assertToldBefore TOLD END AGAIN: TOLD (a lossClock's Date) came before
// the lease's end on the server: END, read once no renewal could land any
// more, or AGAIN (a function reading it once more) if later, in case a
// renewal under way landed.
async function assertToldBefore(told, end, again) {
  if (!told) throw new Error('assertToldBefore: the loss was not told');
  const later = await again();
  const last = later && (!end || later > end) ? later : end;
  if (!last) throw new Error('assertToldBefore: no end read for the lease');
  if (!(told < last)) throw new Error(`loss told at ${told.toISOString()}, the lease on the server ended at ${last.toISOString()}`);
}

// pauseIdle ADMIN PID: SIGSTOP backend PID, and SIGCONT it and try again
// until it is caught idle, waiting to read from its client (5 s, else an
// error).  Stopped inside a statement, a backend may hold a lightweight
// lock that every other backend of the cluster needs, and stall them all.
// A backend that is gone is not paused.  ADMIN: a pool or client.
async function pauseIdle(admin, pid) {
  const end = Date.now() + 5000;
  while (Date.now() < end) {
    process.kill(pid, 'SIGSTOP');
    let stopped = false;
    try {
      // Bounded here, not by statement_timeout: a reader retries while
      // the backend is stopped updating its pg_stat_activity entry, and
      // may wait on a lightweight lock it holds (no timeout ends that
      // wait).  SIGCONT ends both.
      const read = admin.query("SELECT coalesce(state = 'idle' AND wait_event = 'ClientRead', false) AS idle " +
        'FROM pg_stat_activity WHERE pid = $1', [pid]);
      let timer;
      const first = await Promise.race([
        read,
        new Promise((resolve) => { timer = setTimeout(() => resolve(null), 500); }),
      ]).finally(() => clearTimeout(timer));
      if (first && first.rows.length && first.rows[0].idle) {
        stopped = true;
        return;
      }
      try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
      if ((await read).rows.length === 0) return; // gone: nothing to pause
    } finally {
      // Never leave it stopped on an error.
      if (!stopped) try { process.kill(pid, 'SIGCONT'); } catch { /* gone */ }
    }
    await sleep(7);
  }
  throw new Error(`backend ${pid} never stopped while idle (waiting for its client)`);
}

// elections POOL: whether the server has dlock's [elect] functions (both
// editions have them; older SQL may not); tests of elections skip
// themselves otherwise.
async function elections(pool) {
  const r = await pool.query("SELECT to_regprocedure('dlock.leader(text)') IS NOT NULL AS ok");
  if (!r.rows[0].ok && process.env.DLOCK_TEST_ELECTIONS === 'required')
    throw new Error('DLOCK_TEST_ELECTIONS=required, but the server has no dlock.leader(text)');
  return r.rows[0].ok;
}
const noElections = 'this server has no dlock.campaign/leader (older SQL)';

// kinds POOL: whether the server has dlock's [kinds] (semaphores,
// lock_all: the C extension's SQL 0.5, the portable edition), by name: a
// later version's try_lock_all has more arguments (session, 1.1).
async function kinds(pool) {
  const r = await pool.query("SELECT EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace " +
    "WHERE n.nspname = 'dlock' AND p.proname = 'try_lock_all') AS ok");
  return r.rows[0].ok;
}
const noKinds = 'this server has no semaphores or lock_all (older SQL)';

// restartWithin: stop the server (PGCTL: pg_ctl -D DATADIR -l LOG, fast)
// now, start it again once the renewal due at DUE (ms since the epoch)
// has failed, then wait until EXPIRY() (the holding's expiry on the
// server, ms since the epoch) shows one that landed after the stop, and
// the last one before it has run out. The outage is measured, not slept:
// a slow stop or start under load shortens the margin, never fakes a loss.
async function restartWithin(pgCtl, leaseMs, due, expiry) {
  const { execSync } = require('node:child_process');
  // -t 300: a loaded machine once took longer than pg_ctl's 60 s.
  const ctl = (args) => execSync(`${pgCtl} -w -t 300 ${args}`, { stdio: 'ignore' });
  const stopped = Date.now();
  ctl('-m fast stop');
  try {
    await sleep(Math.max(0, due + 1000 - Date.now()));
    ctl('start');
  } finally {
    // Whatever failed, the server is up for the tests that follow
    // (pg_ctl status exits 3 when no server runs).
    try { execSync(`${pgCtl} status`, { stdio: 'ignore' }); } catch { ctl('start'); }
  }
  for (const end = Date.now() + leaseMs; ; await sleep(100)) {
    const e = await expiry().catch(() => null);
    if (e !== null && e > stopped + leaseMs) break;
    if (Date.now() > end) throw new Error('no renewal landed on the server after the restart');
  }
  await sleep(Math.max(0, stopped + leaseMs + 500 - Date.now()));
}

module.exports = { elections, noElections, kinds, noKinds, pg, unique, pool, bouncerPool, bouncerPort, proxy, within, sleep, aborted, pauseIdle, restartWithin,
  lossClock, endOf, assertToldBefore };
