'use strict';
// index.d.ts: a typical program type-checks (tsc --noEmit, strict), and
// misuses do not.  Needs typescript, @types/node and @types/pg beside pg
// (DLOCK_NODE_MODULES, the cache the test run installed them in).
// Promises: none
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const modules = process.env.DLOCK_NODE_MODULES;
const tsc = modules && path.join(modules, 'typescript', 'bin', 'tsc');
const skip = tsc && fs.existsSync(tsc) && fs.existsSync(path.join(modules, '@types', 'pg'))
  ? false : 'typescript and @types/pg not installed (DLOCK_NODE_MODULES)';

const good = `
import { Pool } from 'pg';
import { withLock, acquire, tryAcquire, Election, LockLost, LockTimeout, Lock, Leader, Leadership,
  withSemaphore, withLocks, Semaphore, MultiLock, openSession, Session, SessionLost } from 'dlock-pg';
export async function main(pool: Pool): Promise<number> {
  const ss: Session = await openSession(pool, { ttl: 30_000, holder: 'w' });
  const sl: Lock | null = await ss.tryAcquire('r', { shared: true });
  const sm: MultiLock = await ss.acquire(['a', 'b'], { wait: 1000 });
  const sid: bigint = ss.id;
  ss.signal.addEventListener('abort', () => {
    if (ss.signal.reason instanceof SessionLost) { const i: bigint = ss.signal.reason.session; void i; }
  });
  const closed: boolean = await ss.close();
  void sl; void sm; void sid; void closed;
  const n: number = await withLock(pool, 'reports', async (lock) => {
    const f: bigint = lock.fence;
    lock.signal.addEventListener('abort', () => undefined);
    const c = await pool.connect();
    try { await c.query('BEGIN'); await lock.assertFence(c); await c.query('COMMIT'); } finally { c.release(); }
    return Number(f);
  }, { lease: 30_000, wait: '10s', holder: 'me' });
  const l: Lock = await acquire(pool, 'r', { lease: 1000, fair: true, signal: AbortSignal.timeout(5000) });
  const sa: Semaphore = await ss.acquire('slots', { maxPermits: 2, signal: new AbortController().signal });
  void sa;
  const ok: boolean = await l.release();
  const t: Lock | null = await tryAcquire(pool, 'r');
  const s: Semaphore = await acquire(pool, 'slots', { maxPermits: 3, permits: 2, wait: 0 });
  const p: number = s.permits + s.maxPermits;
  const m: MultiLock = await acquire(pool, ['a', 'b'], { shared: true });
  const fs: bigint[] = m.fences;
  const fs2: bigint[] = await withLocks(pool, ['a', 'b'], async (locks) => locks.fences, { lease: 1000 });
  const k: number = await withSemaphore(pool, 'slots', async (sem) => sem.permits, { maxPermits: 3 });
  const mt: MultiLock | null = await tryAcquire(pool, ['a']);
  void p; void fs; void fs2; void k; void mt;
  const e = new Election(pool, 'scheduler', { lease: 15000 });
  const lead: Leadership = await e.campaign('http://a:1', { wait: 1000, signal: null });
  const term: bigint = lead.term + 1n;
  await lead.proclaim(null);
  await e.resign();
  for await (const who of e.observe({ signal: AbortSignal.timeout(10) })) {
    const w: Leader | null = who;
    if (w) { const d: Date = w.expiresAt; void d; }
  }
  try { await acquire(pool, 'r', { wait: 0 }); } catch (err) {
    if (err instanceof LockTimeout) { const s: string = err.code; void s; }
    if (err instanceof LockLost) { const f: bigint = err.fence; void f; }
  }
  void ok; void t; void term;
  return n;
}
`;
const bad = `
import { Pool } from 'pg';
import { withLock, acquire } from 'dlock-pg';
export async function main(pool: Pool): Promise<void> {
  const n: number = (await acquire(pool, 'r')).fence;
  await withLock(pool, 'r', async () => 1, { lease: true });
  await acquire(pool, 42);
  const f: bigint = (await acquire(pool, ['a', 'b'])).fences;
  await withSemaphore(pool, 's', async () => 1, { permits: 2 });
  await withLocks(pool, 'a', async () => 1);
  void n; void f;
}
`;

function check(source) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-tsc-'));
  try {
    const nm = path.join(dir, 'node_modules');
    fs.mkdirSync(path.join(nm, '@types'), { recursive: true });
    for (const p of fs.readdirSync(modules)) {
      if (p === '@types' || p.startsWith('.')) continue;
      fs.symlinkSync(path.join(modules, p), path.join(nm, p));
    }
    for (const p of fs.readdirSync(path.join(modules, '@types')))
      fs.symlinkSync(path.join(modules, '@types', p), path.join(nm, '@types', p));
    fs.symlinkSync(path.resolve(__dirname, '..'), path.join(nm, 'dlock-pg'));
    fs.writeFileSync(path.join(dir, 'example.ts'), source);
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({
      compilerOptions: {
        strict: true, noEmit: true, target: 'es2020', module: 'commonjs', moduleResolution: 'node',
        types: ['node'], preserveSymlinks: true, lib: ['es2020'],
      },
      files: ['example.ts'],
    }));
    const r = spawnSync(process.execPath, [tsc, '-p', dir], { encoding: 'utf8' });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('index.d.ts: a typical program type-checks (strict)', { skip }, () => {
  const r = check(good);
  assert.equal(r.status, 0, r.out);
});

test('index.d.ts: misuses are type errors (fence is a bigint, lease a Duration, resource a string, fences an array, maxPermits required, withLocks an array)', { skip }, () => {
  const r = check(bad);
  assert.notEqual(r.status, 0);
  for (const line of [5, 6, 7, 8, 9, 10]) assert.match(r.out, new RegExp(`example\\.ts\\(${line},`), r.out);
});
