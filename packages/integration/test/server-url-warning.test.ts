// Instances behind a balancer on the same machine are not warned that server_url "points at port ... devices
// would be sent to the wrong port": that is the intended address. `headway serve` warns only when server_url
// does not reach this very server. A clustered instance
// is not warned (a balancer in front of several is the point); a lone server whose server_url is a
// proxy forwarding to it is not warned; one whose server_url names a port of this machine where
// nothing, or another server, answers still is.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { TcpBalancer } from '../src/cluster.js';
import { freePort } from '../src/ports.js';
import { serverDatabases, startTestServer } from '../src/server.js';
import { repoRoot } from '../src/tailscale.js';

const WRONG_PORT = /devices would be sent to the wrong port/;

interface Served {
  output(): string;
  /** waitFor resolves with the output once `re` matches it, and rejects after `ms` or when the process exits. */
  waitFor(re: RegExp, ms?: number): Promise<string>;
}

/** serve runs `headway serve` (the real CLI) on a config file, listening on `port`, logging text at debug level to stderr. */
async function serve(t: Test, port: number, raw: Record<string, unknown>): Promise<Served> {
  const dir = mkdtempSync(join(tmpdir(), 'hw-server-url-'));
  const config = join(dir, 'config.yaml');
  writeFileSync(config, JSON.stringify({
    listen_addr: `127.0.0.1:${port}`, metrics_listen_addr: '', grpc_listen_addr: '', data_dir: join(dir, 'data'),
    derp: { server: { stun_listen_addr: '127.0.0.1:0' } }, log: { level: 'debug' }, ...raw,
  }));
  const child = spawn(process.execPath, [join(repoRoot(), 'packages', 'cli', 'bin', 'run.js'), 'serve', '-c', config], {
    cwd: dir, env: { PATH: process.env.PATH ?? '', HOME: dir }, stdio: ['ignore', 'ignore', 'pipe'],
  });
  let out = '';
  child.stderr!.on('data', (b: Buffer) => { out += b.toString(); });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    output: () => out,
    async waitFor(re, ms = 30_000) {
      const end = Date.now() + ms;
      while (!re.test(out)) {
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`headway serve exited before ${re}: ${out.slice(-3000)}`);
        if (Date.now() > end) throw new Error(`not within ${ms} ms: ${re}; output: ${out.slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 50));
      }
      return out;
    },
  };
}

t.test('a lone server reached through a proxy on another port of this machine is not warned', async (t) => {
  const port = await freePort();
  const proxy = new TcpBalancer([`http://127.0.0.1:${port}`]);
  const url = await proxy.listen();
  t.teardown(() => proxy.close());
  const s = await serve(t, port, { server_url: url });
  await s.waitFor(/server_url answers as this server/);
  t.notMatch(s.output(), WRONG_PORT, 'no wrong-port warning');
});

t.test('a lone server whose server_url names a port of this machine where nothing answers is warned', async (t) => {
  const [port, nothing] = [await freePort(), await freePort()];
  const s = await serve(t, port, { server_url: `http://127.0.0.1:${nothing}` });
  const out = await s.waitFor(WRONG_PORT);
  t.match(out, new RegExp(`http://127\\.0\\.0\\.1:${nothing} points at port ${nothing} of this machine but listen_addr is 127\\.0\\.0\\.1:${port}`));
  t.match(out, /nothing answered http:\/\/127\.0\.0\.1:\d+\/health \(ECONNREFUSED\)/, 'the warning says why');
});

t.test('a lone server whose server_url names the port of another server is warned', async (t) => {
  const other = await startTestServer();
  t.teardown(() => other.stop());
  const port = await freePort();
  const s = await serve(t, port, { server_url: other.urls.http });
  const out = await s.waitFor(WRONG_PORT);
  t.match(out, /another Headway server answers/, 'warned: another server answers there');
});

for (const db of serverDatabases(t, 'the clustered server_url check')) {
  t.test(`${db.name}: a clustered instance behind a balancer on another port is not warned`, (t) => db.run(async (database) => {
    const [port, balancer] = [await freePort(), await freePort()];
    const s = await serve(t, port, {
      server_url: `http://127.0.0.1:${balancer}`, database, cluster: { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s' },
    });
    await s.waitFor(/listening/);
    t.notMatch(s.output(), WRONG_PORT, 'no wrong-port warning');
  }));
}
