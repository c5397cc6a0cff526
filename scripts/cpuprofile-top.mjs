#!/usr/bin/env node
// cpuprofile-top prints the top self-time frames of V8 CPU profiles (node --cpu-prof, or BENCH_CPU_PROF=<dir>
// with `npm run bench`), so two profiles can be compared as text, without a browser.
// Usage: node scripts/cpuprofile-top.mjs <file.cpuprofile | directory> [count=15] [--window=FROM,TO] [--timeline]
//   --window=FROM,TO  only the samples between FROM and TO seconds after the profile started (one phase of a run)
//   --timeline        also print the busy (non-idle) milliseconds of each second, to find a phase
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

const usage = 'usage: node scripts/cpuprofile-top.mjs <file.cpuprofile | directory> [count=15] [--window=FROM,TO] [--timeline]\n';
const flags = process.argv.slice(2).filter((a) => a.startsWith('--'));
const [target, countArg] = process.argv.slice(2).filter((a) => !a.startsWith('--'));
if (!target) {
  process.stderr.write(usage);
  process.exit(2);
}
let window = [0, Number.POSITIVE_INFINITY];
let timeline = false;
for (const f of flags) {
  const m = /^--window=([\d.]+),([\d.]+)$/.exec(f);
  if (m && Number(m[1]) < Number(m[2])) window = [Number(m[1]) * 1e6, Number(m[2]) * 1e6];
  else if (f === '--timeline') timeline = true;
  else {
    process.stderr.write(`${f}: not a known option (--window=FROM,TO in seconds, FROM < TO; --timeline)\n${usage}`);
    process.exit(2);
  }
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
  let at = 0;
  const busyPerSecond = [];
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    at += us;
    const key = keyOf(id);
    if (key !== '(idle)') busyPerSecond[Math.floor(at / 1e6)] = (busyPerSecond[Math.floor(at / 1e6)] ?? 0) + us;
    if (at < window[0] || at >= window[1]) return;
    selfUs.set(key, (selfUs.get(key) ?? 0) + us);
    const seen = new Set();
    for (let at = id; at !== undefined; at = parent.get(at)) seen.add(keyOf(at));
    for (const k of seen) totalUs.set(k, (totalUs.get(k) ?? 0) + us);
    total += us;
  });
  process.stdout.write(`${file}: ${(total / 1e6).toFixed(1)} s sampled${window[0] > 0 || window[1] < Infinity ? ` between ${window[0] / 1e6} and ${window[1] / 1e6} s` : ''}\n`);
  if (timeline) process.stdout.write(`  busy ms per second: ${Array.from(busyPerSecond, (us, s) => `${s}:${Math.round((us ?? 0) / 1e3)}`).join(' ')}\n`);
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
