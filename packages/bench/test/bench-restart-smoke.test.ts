import t from 'tap';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

// The realistic benchmark end to end on a small tailnet: the idle server read, the devices joined, the changes
// measured, then the server restarted twice (SIGTERM, SIGKILL) with every device back holding exactly its peers.
t.setTimeout(600_000);

const BENCH = fileURLToPath(new URL('../src/bench.js', import.meta.url));

t.test('a 30-device run restarts the server twice and every device comes back with a correct netmap', async (t) => {
  const child = spawn(process.execPath, ['--expose-gc', BENCH, '--sizes', '30', '--rounds', '1', '--workers', '1', '--restart', 'term,kill'], {
    env: { ...process.env, BENCH_IDLE_S: '2', BENCH_SETTLE_S: '1' }, stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => { out += c.toString(); });
  child.stderr.on('data', (c: Buffer) => { out += c.toString(); });
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  t.equal(code, 0, out.slice(-3000));
  const json = JSON.parse(out.split('\n').find((l) => l.startsWith('BENCH_JSON '))!.slice('BENCH_JSON '.length)) as {
    idle: Array<{ rss: number; rssAnon: number }>;
    sizes: Array<{ devices: number; server: { rss: { peakJoin: number; joined: number } }; restarts: Array<{ signal: string; wrong: string[]; unreached: string[]; back: number; devices: number; startupMs: number; backMs: number; peakRss: number }> }>;
  };
  t.equal(json.idle.length, 1, 'the idle server was read once');
  t.ok(json.idle[0]!.rss > json.idle[0]!.rssAnon && json.idle[0]!.rssAnon > 0, 'its resident set, split');
  const size = json.sizes[0]!;
  t.equal(size.devices, 30);
  t.ok(size.server.rss.peakJoin >= size.server.rss.joined && size.server.rss.joined > 0, 'the peak over the join is at least the resident set after it');
  t.same(size.restarts.map((r) => r.signal), ['SIGTERM', 'SIGKILL']);
  for (const r of size.restarts) {
    t.same(r.wrong, [], `${r.signal}: every device back with exactly its peers`);
    t.same(r.unreached, [], `${r.signal}: every device dialled again`);
    t.same([r.back, r.devices], [30, 30], `${r.signal}: 30 of 30 counted back`);
    t.ok(r.startupMs > 0 && r.peakRss > 0, `${r.signal}: start-up and peak RSS read`);
  }
  t.match(out, /^Restart \(every device connected/m, 'the restart table is printed');
});
