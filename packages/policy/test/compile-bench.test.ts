/**
 * The compiler's micro-benchmark (bench/compile-all.mjs) still runs against the built package and prints each of
 * its figures; its timings are printed, never judged here.
 */
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const script = fileURLToPath(new URL('../../bench/compile-all.mjs', import.meta.url));
const run = (...args: string[]) => spawnSync(process.execPath, [script, ...args], { encoding: 'utf8', timeout: 120_000 });

t.test('compile-all prints the from-scratch and the per-change figures', async (t) => {
  const r = run('300', '--rounds', '2');
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^current N=300 rules=\d+: context \d+ ms, compile all nodes \d+ ms .*avg peers [\d.]+, avg filter rules [\d.]+$/m);
  const ms = '[\\d.]+ ms';
  t.match(r.stdout, new RegExp(`^extended N=300, mean of 2: a round of 10 joins: extend ${ms}, grants and the first joiner's filter ${ms}, ` +
    `peer index ${ms}, the other joiners ${ms}, then every node ${ms}; a tag change: extend ${ms}, every node ${ms}$`, 'm'));
});

t.test('compile-all refuses a bad --rounds and --rounds with --reference, naming what was wrong', async (t) => {
  for (const bad of ['x', '0', '1.5']) {
    const r = run('300', '--rounds', bad);
    t.equal(r.status, 2, `--rounds ${bad}`);
    t.match(r.stderr, `--rounds needs a whole number of at least 1, got "${bad}"`);
    t.equal(r.stdout, '', 'nothing measured');
  }
  const r = run('300', '--rounds', '1', '--reference');
  t.equal(r.status, 2);
  t.match(r.stderr, /drop --reference/);
});
