'use strict';
// README.md's examples, as a new user would run them: each ```js or ```mjs
// block is a whole program, run with node in a directory where `dlock-pg`
// and `pg` are installed; it must exit 0.
// Promises: none
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { pool, elections, noElections, kinds, noKinds } = require('./helpers');

const admin = pool();
after(() => admin.end());

async function sessions(p) {
  const r = await p.query("SELECT to_regprocedure('dlock.open_session(interval,text)') IS NOT NULL AS ok");
  return r.rows[0].ok;
}

const readme = fs.readFileSync(path.join(__dirname, '..', 'README.md'), 'utf8');
const blocks = [];
let heading = '';
for (const m of readme.matchAll(/^## (.*)$|^```(js|mjs)\n([\s\S]*?)^```$/gm)) {
  if (m[1]) heading = m[1];
  else blocks.push({ heading, ext: m[2], code: m[3] });
}

// A directory like a project's: node_modules with pg (and what it needs)
// and dlock-pg (this package).
const modules = process.env.DLOCK_NODE_MODULES || process.env.NODE_PATH;
function project() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dlock-example-'));
  const nm = path.join(dir, 'node_modules');
  fs.mkdirSync(nm);
  for (const p of fs.readdirSync(modules)) {
    if (!p.startsWith('.')) fs.symlinkSync(path.join(modules, p), path.join(nm, p));
  }
  fs.symlinkSync(path.resolve(__dirname, '..'), path.join(nm, 'dlock-pg'));
  return dir;
}

function run(file, cwd) {
  return new Promise((resolve) => {
    const env = { ...process.env };
    delete env.NODE_PATH;
    const child = spawn(process.execPath, [file], { cwd, env });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60000);
    child.on('close', (code, signal) => { clearTimeout(timer); resolve({ code, signal, out }); });
  });
}

test('README.md has runnable examples', () => {
  assert.ok(blocks.length >= 5, `${blocks.length} blocks`);
});

for (const [i, b] of blocks.entries()) {
  test(`README example ${i + 1} (${b.heading})`, async (t) => {
    if (/\bElection\b/.test(b.code) && !(await elections(admin))) return t.skip(noElections);
    if (/\bwith(Semaphore|Locks)\b/.test(b.code) && !(await kinds(admin))) return t.skip(noKinds);
    if (/\bopenSession\b/.test(b.code) && !(await sessions(admin)))
      return t.skip("no sessions: to_regprocedure('dlock.open_session(interval,text)') IS NULL on this server");
    const dir = project();
    try {
      const file = path.join(dir, `example.${b.ext}`);
      fs.writeFileSync(file, b.code);
      const r = await run(file, dir);
      assert.equal(r.code, 0, `exit ${r.code} ${r.signal || ''}:\n${r.out}`);
      assert.doesNotMatch(r.out, /Error|rror:/, r.out);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
}
