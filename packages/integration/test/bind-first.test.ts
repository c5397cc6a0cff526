import t, { type Test } from 'tap';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer } from '../src/server.js';

// A second server on the same ports, with a data directory of its own, must not create a database and generate
// keys before failing on a port: every port is bound before the data directory, the database or a key is
// touched, and a port in use names who holds it.

function freshDir(t: Test): string {
  const root = mkdtempSync(join(tmpdir(), 'hw-bind-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  return join(root, 'data');
}

t.test('a second server on the same ports stops before writing anything, naming the port', async (t) => {
  const first = await startTestServer({ grpc_listen_addr: '127.0.0.1:0' });
  t.teardown(() => first.stop());
  const port = (u: string | undefined) => new URL(u!.replace(/^grpc:/, 'http:')).port;
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['listen_addr', { listen_addr: `127.0.0.1:${port(first.urls.http)}` }, /^listen_addr 127\.0\.0\.1:\d+: the address is already in use; choose another port$/],
    ['metrics_listen_addr', { metrics_listen_addr: `127.0.0.1:${port(first.urls.metrics)}` }, /^metrics_listen_addr 127\.0\.0\.1:\d+: the address is already in use/],
    ['grpc_listen_addr', { grpc_listen_addr: `127.0.0.1:${port(first.urls.grpc)}` }, /^grpc_listen_addr .*in use; choose another port, or set grpc_listen_addr: "" to turn the gRPC API off$/],
    ['derp.server.stun_listen_addr', { derp: { server: { stun_listen_addr: `127.0.0.1:${first.derpMap.stunPort}` } } }, /^derp\.server\.stun_listen_addr 127\.0\.0\.1:\d+: the address is already in use/],
  ];
  for (const [key, raw, message] of cases) {
    const dir = freshDir(t);
    await t.rejects(startTestServer(raw, { dataDir: dir }), { message }, `${key} in use: the error names it`);
    t.notOk(existsSync(dir) && readdirSync(dir).length, `${key} in use: nothing written (no data directory, database or key)`);
  }
  // The ports of a start that failed are free again: the same ports on their own are taken at once.
  const again = await startTestServer({ grpc_listen_addr: '127.0.0.1:0' });
  t.teardown(() => again.stop());
  t.ok(again.urls.http, 'a server with free ports starts');
});

t.test('a port held by another process names that process', async (t) => {
  // A TCP port and a UDP port held by a child process (the kind of clash a headscale left running makes).
  const child = spawn(process.execPath, ['-e', `
    const net = require('node:net'); const dgram = require('node:dgram');
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const u = dgram.createSocket('udp4'); u.bind(0, '127.0.0.1', () => console.log(s.address().port + ' ' + u.address().port));
    });`], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => { child.kill(); });
  const [tcp, udp] = await new Promise<number[]>((resolve) => child.stdout!.once('data', (d: Buffer) => resolve(d.toString().trim().split(' ').map(Number))));
  const dir = freshDir(t);
  await t.rejects(startTestServer({ listen_addr: `127.0.0.1:${tcp}` }, { dataDir: dir }),
    { message: new RegExp(`^listen_addr 127\\.0\\.0\\.1:${tcp}: the address is already in use \\(by node, pid ${child.pid}\\); choose another port$`) });
  await t.rejects(startTestServer({ derp: { server: { stun_listen_addr: `127.0.0.1:${udp}` } } }, { dataDir: dir }),
    { message: new RegExp(`^derp\\.server\\.stun_listen_addr 127\\.0\\.0\\.1:${udp}: the address is already in use \\(by node, pid ${child.pid}\\)`) });
  t.notOk(existsSync(dir), 'nothing written');
});
