#!/usr/bin/env node
// cpuprofile-top prints the top self-time frames of V8 CPU profiles (node --cpu-prof, or BENCH_CPU_PROF=<dir>
// with `npm run bench`), so before/after profiles can be compared in a closing note without a browser.
// Usage: node scripts/cpuprofile-top.mjs <file.cpuprofile | directory> [count=15]
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const [target, countArg] = process.argv.slice(2);
if (!target) {
  process.stderr.write('usage: node scripts/cpuprofile-top.mjs <file.cpuprofile | directory> [count=15]\n');
  process.exit(2);
}
const count = Number(countArg ?? 15);
if (!Number.isInteger(count) || count < 1) {
  process.stderr.write(`count: "${countArg}" is not a positive integer\n`);
  process.exit(2);
}
const files = statSync(target).isDirectory()
  ? readdirSync(target).filter((f) => f.endsWith('.cpuprofile')).map((f) => join(target, f))
  : [target];
if (!files.length) {
  process.stderr.write(`no .cpuprofile file in ${target}\n`);
  process.exit(1);
}
for (const file of files) {
  const profile = JSON.parse(readFileSync(file, 'utf8'));
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const keyOf = (id) => {
    const cf = byId.get(id).callFrame;
    const where = cf.url ? `${cf.url.replace(/^file:\/\//, '').split('/').slice(-5).join('/')}:${cf.lineNumber + 1}` : '';
    return `${cf.functionName || '(anonymous)'} ${where}`.trim();
  };
  const selfUs = new Map();
  // totalUs counts a sample once for every distinct function on its stack (inclusive time).
  const totalUs = new Map();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    const key = keyOf(id);
    selfUs.set(key, (selfUs.get(key) ?? 0) + us);
    const seen = new Set();
    for (let at = id; at !== undefined; at = parent.get(at)) seen.add(keyOf(at));
    for (const k of seen) totalUs.set(k, (totalUs.get(k) ?? 0) + us);
    total += us;
  });
  process.stdout.write(`${file}: ${(total / 1e6).toFixed(1)} s sampled\n`);
  const top = [...selfUs].sort((a, b) => b[1] - a[1]).slice(0, count);
  process.stdout.write('  self time:\n');
  for (const [key, us] of top) {
    process.stdout.write(`  ${(us / 1e3).toFixed(0).padStart(8)} ms  ${((100 * us) / total).toFixed(1).padStart(5)}%  ${key}\n`);
  }
  process.stdout.write('  inclusive time (headway code only):\n');
  const mine = [...totalUs].filter(([k]) => k.includes('/dist/src/')).sort((a, b) => b[1] - a[1]).slice(0, count);
  for (const [key, us] of mine) {
    process.stdout.write(`  ${(us / 1e3).toFixed(0).padStart(8)} ms  ${((100 * us) / total).toFixed(1).padStart(5)}%  ${key}\n`);
  }
}
