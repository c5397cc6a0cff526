/**
 * `npm run bench:headscale` end to end at 5 devices, one rename: both servers accept the four-group policy, every
 * device converges to exactly its expected peers on each, the rename reaches every device, and the run ends with a
 * table and a BENCH_JSON line. Needs the real headscale (built by .ci/install-headscale.sh): skipped with the reason
 * without it, failed under CI=true.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { requireHeadscale } from '@headway/integration';

t.setTimeout(600_000);

const script = fileURLToPath(new URL('../src/bench-headscale.js', import.meta.url));

if (requireHeadscale(t)) {
  t.test('--sizes 5 --rounds 1 measures both servers and converges on each', async (t) => {
    const { code, stdout, stderr } = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [script, '--sizes', '5', '--rounds', '1'], { timeout: 540_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout: String(stdout), stderr: String(stderr) });
      });
    });
    if (code !== 0) t.comment(`${stdout}\n${stderr}`);
    t.equal(code, 0, 'exit status 0');
    t.match(stdout, /^N=5 +headway +headscale$/m, 'the side-by-side table');
    const line = stdout.split('\n').find((l) => l.startsWith('BENCH_JSON '));
    t.ok(line, 'a BENCH_JSON line');
    if (!line) return;
    const report = JSON.parse(line.slice('BENCH_JSON '.length));
    t.same(report.failed, []);
    t.same(report.sizes.map((s: { devices: number }) => s.devices), [5]);
    for (const name of ['headway', 'headscale']) {
      const f = report.sizes[0].servers[name];
      t.ok(f, `${name} measured`);
      if (!f) continue;
      t.same([f.joinFailures, f.joinTimedOut, typeof f.joinMs], [0, false, 'number'], `${name}: every device joined and holds its expected peers`);
      t.same(f.renames.map((r: { reached: number; devices: number }) => [r.reached, r.devices]), [[5, 5]], `${name}: the rename reached all 5 devices`);
      t.ok(f.rssIdle > 0 && f.rssSteady > 0 && f.hwm > 0, `${name}: memory read from /proc`);
      t.ok(f.serverCpuJoinMs > 0, `${name}: the server's CPU in the join read from /proc`);
    }
  });
}
