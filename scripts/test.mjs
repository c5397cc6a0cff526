#!/usr/bin/env node
// Runs every compiled test file with tap and ends with one line `N passed, N failed`
// (tap's own summary is a JSON-ish comment that CI does not read).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

// Node 24 is the runtime the native module was compiled for: an older `node` (Debian's 20)
// re-runs this script under the Node 24 that scripts/node-runtime.sh installed, or says how to get one.
if (Number(process.versions.node.split('.')[0]) < 24) {
  const home = process.env.HEADWAY_NODE_HOME ?? join(process.env.HOME ?? '', '.cache', 'headway', 'node-24');
  const node24 = join(home, 'bin', 'node');
  if (!existsSync(node24)) {
    console.error(`Headway needs Node.js 24 (this is ${process.version}); run ./scripts/serve.sh once or eval "$(bash scripts/node-runtime.sh)"`);
    console.log('0 passed, 1 failed');
    process.exit(1);
  }
  const r = spawnSync(node24, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit', env: { ...process.env, PATH: `${join(home, 'bin')}:${process.env.PATH}` } });
  process.exit(r.status ?? 1);
}
const filters = process.argv.slice(2);

function collect(dir, out) {
  let entries;
  try { entries = readdirSync(dir); } catch { return; }
  for (const e of entries) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) collect(p, out);
    else if (e.endsWith('.test.js')) out.push(relative(root, p));
  }
}

const files = [];
for (const group of ['packages', 'examples']) {
  let pkgs = [];
  try { pkgs = readdirSync(join(root, group)); } catch { continue; }
  for (const pkg of pkgs) collect(join(root, group, pkg, 'dist', 'test'), files);
}
const selected = filters.length ? files.filter((f) => filters.some((x) => f.includes(x))) : files;
if (!selected.length) {
  console.error('no test files found (did the build run?)');
  console.log('0 passed, 1 failed');
  process.exit(1);
}

const args = ['--disable-coverage', '--allow-empty-coverage', '-R', 'tap', '--timeout=900', '--jobs=2', ...selected];
const child = spawn(join(root, 'node_modules', '.bin', 'tap'), args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
let tail = '';
// Every `not ok` with the subtests it sits in, listed again just above the summary line:
// a CI log often shows only its last page, and tap's failures are buried in the middle.
const failures = [];
const path = [];
let partial = '';
function scan(line) {
  const indent = line.match(/^ */)[0].length / 4;
  const sub = line.match(/^ *# Subtest: (.*)$/);
  if (sub) { path.length = indent; path[indent] = sub[1]; return; }
  const bad = line.match(/^ *not ok \d+ - (.*?)(?: # time=.*)?$/);
  if (bad && !line.includes('# TODO') && !line.includes('# SKIP')) {
    failures.push([...path.slice(0, indent), bad[1]].filter(Boolean).join(' > '));
  }
}
child.stdout.on('data', (chunk) => {
  process.stdout.write(chunk);
  const text = chunk.toString();
  tail = (tail + text).slice(-4000);
  const lines = (partial + text).split('\n');
  partial = lines.pop() ?? '';
  for (const line of lines) scan(line);
});
child.on('close', (code) => {
  // The last summary line is tap's own; earlier ones may be quoted from a test's output.
  const all = [...tail.matchAll(/^# \{ total: (\d+)(?:, pass: (\d+))?(?:, fail: (\d+))?(?:, skip: (\d+))?(?:, todo: (\d+))?/gm)];
  const m = all[all.length - 1];
  const pass = Number(m?.[2] ?? 0), fail = Number(m?.[3] ?? 0), skip = Number(m?.[4] ?? 0);
  const failed = fail || (code !== 0 ? Math.max(1, fail) : 0);
  // Only the innermost failures: a failing assertion also fails every subtest around it.
  const leaves = failures.filter((f) => !failures.some((g) => g !== f && g.startsWith(f + ' > ')));
  for (const f of leaves.slice(0, 40)) console.log(`# FAILED: ${f}`);
  console.log(`${pass} passed, ${failed} failed${skip ? `, ${skip} skipped` : ''}`);
  process.exit(code ?? 1);
});
