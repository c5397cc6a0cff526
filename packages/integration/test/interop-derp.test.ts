/**
 * Real-client interop for the embedded DERP relay: stock tailscaled clients
 * (every installed version) whose only DERP region is Headway's own relay
 * ping each other, carry a TCP stream through the mesh, lose the relay when
 * their node is deleted, and use an approved exit node.
 *
 * The devices run with TS_DEBUG_ALWAYS_USE_DERP=1: on one machine two clients
 * otherwise find a direct 127.0.0.1 path within milliseconds and the relay
 * would carry nothing after the first packet; forcing DERP makes every
 * assertion below exercise the relay.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestServer, type TestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';
import { requireTailscale, TailscaleDevice, type TailscalePeerStatus, type TailscaleStatus } from '../src/tailscale.js';

const CLI = fileURLToPath(new URL('../../../cli/bin/run.js', import.meta.url));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** runCli runs the admin CLI against the test server's socket (see runHeadwayOn). */
const runCli = (s: TestServer, args: string[]) => runHeadwayOn(s, args, 30_000);

/** freeTcpPort asks the kernel for an unused loopback port (it is free again when this returns). */
async function freeTcpPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

/**
 * loopbackSocketOwner finds which of the given processes owns the local end
 * 127.0.0.1:port of an open TCP connection (via /proc/net/tcp inodes and
 * /proc/<pid>/fd); this tells which tailscaled dialed a test server.
 */
function loopbackSocketOwner(port: number, pids: number[]): number | undefined {
  const wanted = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  const inodes = new Set<string>();
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const cols = line.trim().split(/\s+/);
    if (cols[1] === wanted && cols[9] && cols[9] !== '0') inodes.add(cols[9]);
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m && inodes.has(m[1]!)) return pid;
      } catch {
        // The descriptor closed while scanning.
      }
    }
  }
  return undefined;
}

/** ncExchange pipes payload through `tailscale nc ip port` and resolves with what came back once it is as long as payload. */
function ncExchange(d: TailscaleDevice, ip: string, port: number, payload: string, timeoutMs: number): Promise<string> {
  const child = spawn(d.binaries.tailscale, [`--socket=${d.socketPath}`, 'nc', ip, String(port)], { env: d.env, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tailscale nc ${ip} ${port} (${d.name}) got ${JSON.stringify(out)} within ${timeoutMs} ms; stderr: ${err.trim()}`));
    }, timeoutMs);
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      if (out.length >= payload.length) {
        clearTimeout(timer);
        child.kill('SIGTERM');
        resolve(out);
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      err += chunk;
    });
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      if (out.length < payload.length) reject(new Error(`tailscale nc ${ip} ${port} (${d.name}) exited ${code} after ${JSON.stringify(out)}; stderr: ${err.trim()}`));
    });
    child.stdin.write(payload);
  });
}

function ipv4Of(st: TailscaleStatus): string {
  const ip = (st.TailscaleIPs ?? []).find((a) => a.includes('.'));
  if (!ip) throw new Error(`no IPv4 in status: ${JSON.stringify(st.TailscaleIPs)}`);
  return ip;
}

function peerByHost(st: TailscaleStatus, host: string): TailscalePeerStatus | undefined {
  return Object.values(st.Peer ?? {}).find((p) => p.HostName === host);
}

const installed = requireTailscale(t);
for (const binaries of installed) {
  t.test(binaries.version, async (t) => {
    const s = await startTestServer({ derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
    const devices: TailscaleDevice[] = [];
    const closers: Array<() => void> = [];
    t.teardown(async () => {
      for (const close of closers) close();
      for (const d of devices) await d.stop().catch(() => undefined);
      await s.stop();
    });
    const region = Object.values(s.derpMap.map.Regions);
    t.equal(region.length, 1, 'the embedded relay is the only DERP region');
    const stunPort = region[0]!.Nodes[0]!.STUNPort as number;
    t.ok(stunPort > 0 && stunPort === s.relay.stun?.address().port, `the DERP map carries the bound STUN port (${stunPort}), not 0`);

    const user = await s.state.users.create({ name: 'alice' });
    const key = (await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true })).secret;
    const tag = binaries.version.replace(/\W/g, '');
    const proxyPort = await freeTcpPort();
    const start = async (name: string, extra: { daemonArgs?: string[]; exitNode?: boolean } = {}): Promise<TailscaleDevice> => {
      const d = await TailscaleDevice.start({
        name: `${name}${tag}`,
        version: binaries.version,
        env: { TS_DEBUG_ALWAYS_USE_DERP: '1' },
        extraDaemonArgs: extra.daemonArgs,
      });
      devices.push(d);
      await d.up({ loginServer: s.urls.http, authKey: key, hostname: name, advertiseExitNode: extra.exitNode, timeoutMs: 60_000 });
      return d;
    };
    // a runs an outbound HTTP proxy: in userspace-networking mode that is the
    // only way for host programs to send traffic into the tailnet (and so
    // through an exit node).
    const [a, b, exit] = await Promise.all([
      start('dev-a', { daemonArgs: [`--outbound-http-proxy-listen=127.0.0.1:${proxyPort}`] }),
      start('dev-b'),
      start('exit', { exitNode: true }),
    ]);
    const stA = await a.waitFor((st) => peerByHost(st, 'dev-b')?.Online === true, 20_000);
    const stB = await b.waitFor((st) => peerByHost(st, 'dev-a')?.Online === true, 20_000);
    const ipA = ipv4Of(stA);
    const ipB = ipv4Of(stB);
    const nodeA = s.state.nodes.list().find((n) => n.hostname === 'dev-a')!;
    const nodeB = s.state.nodes.list().find((n) => n.hostname === 'dev-b')!;

    await t.test('ping through the embedded relay', async (t) => {
      const deadline = Date.now() + 20_000;
      while (!(s.relay.derp!.isConnected(nodeA.nodeKey) && s.relay.derp!.isConnected(nodeB.nodeKey)) && Date.now() < deadline) await sleep(100);
      t.ok(s.relay.derp!.isConnected(nodeA.nodeKey) && s.relay.derp!.isConnected(nodeB.nodeKey), 'both clients hold a relay connection');
      const disco = await a.ping(ipB, { count: 3, timeoutMs: 5000 });
      t.equal(disco.via, 'DERP(headway)', `disco ping answered via the relay: ${disco.output.trim().split('\n').at(-1)}`);
      const back = await b.ping(ipA, { count: 3, timeoutMs: 5000 });
      t.equal(back.via, 'DERP(headway)', 'and the other way');
      const tsmp = await a.ping(ipB, { tsmp: true, count: 1, timeoutMs: 5000 });
      t.match(tsmp.output, new RegExp(`pong from dev-b \\(${ipB.replace(/\./g, '\\.')}, \\d+\\) via TSMP`), 'TSMP ping through WireGuard over the relay');
      const st = await a.status();
      t.equal(peerByHost(st, 'dev-b')?.Relay, 'headway', "status names the relay's region code");
      t.equal(peerByHost(st, 'dev-b')?.CurAddr ?? '', '', 'no direct path in use');
    });

    await t.test('TCP through the mesh with tailscale nc', async (t) => {
      const owners: Array<number | undefined> = [];
      const pids = devices.map((d) => d.pid!).filter((p) => p !== undefined);
      const echo = net.createServer((sock) => {
        owners.push(loopbackSocketOwner(sock.remotePort!, pids));
        sock.pipe(sock);
      });
      await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
      closers.push(() => echo.close());
      const port = (echo.address() as net.AddressInfo).port;
      const payload = `hello through headway ${binaries.version} ${'x'.repeat(2000)}\n`;
      const got = await ncExchange(a, ipB, port, payload, 20_000);
      t.equal(got, payload, 'the echo came back byte for byte');
      t.equal(owners.length, 1, 'one connection reached the echo server');
      t.equal(owners[0], b.pid, "it was dialed by dev-b's tailscaled (inbound tailnet TCP forwarded to localhost)");
      echo.close();
    });

    // Exit node. In userspace-networking mode only tailscaled's own proxies send
    // host traffic into the tailnet, so dev-a's outbound HTTP proxy is the
    // "device traffic". The target must stay on this machine, i.e. on
    // loopback, and a userspace exit node does not forward packets addressed
    // to 127.0.0.1 (they arrive over WireGuard; its netstack only dials
    // non-loopback destinations on the host), so the full exit path cannot be
    // observed here. What is asserted: the route is approved and offered, the
    // client selects it, and selecting it moves dev-a's proxy traffic off the
    // local dialer into the tailnet (the loopback target stops being reached
    // by dev-a's tailscaled); clearing it restores local dialing.
    await t.test('an approved exit node captures the other device\'s traffic', async (t) => {
      const pids = devices.map((d) => d.pid!).filter((p) => p !== undefined);
      const owners: Array<number | undefined> = [];
      const target = http.createServer((req, res) => {
        owners.push(loopbackSocketOwner(req.socket.remotePort!, pids));
        // No keep-alive: every request must be a fresh dial by whichever path is current.
        res.setHeader('connection', 'close');
        res.end('from the test server\n');
      });
      await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
      closers.push(() => target.close());
      const port = (target.address() as net.AddressInfo).port;
      const viaProxy = (timeoutMs: number): Promise<{ status: number; body: string } | Error> => new Promise((resolve) => {
        const req = http.request({ agent: false, host: '127.0.0.1', port: proxyPort, method: 'GET', path: `http://127.0.0.1:${port}/`, headers: { host: `127.0.0.1:${port}`, connection: 'close' }, timeout: timeoutMs }, (res) => {
          let body = '';
          res.setEncoding('utf8').on('data', (c: string) => (body += c)).on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
        req.on('error', resolve);
        req.end();
      });

      const before = await viaProxy(10_000);
      t.match(before, { status: 200, body: 'from the test server\n' }, 'without an exit node the proxy reaches the target');
      t.same(owners, [a.pid], "dialed locally by dev-a's tailscaled");

      const exitNode = s.state.nodes.list().find((n) => n.hostname === 'exit')!;
      t.same([...exitNode.availableRoutes].sort(), ['0.0.0.0/0', '::/0'], 'the exit node advertises both default routes');
      const approve = await runCli(s, ['nodes', 'approve-routes', '-i', String(exitNode.id), '-r', '0.0.0.0/0,::/0', '-o', 'json']);
      t.equal(approve.code, 0, `headway nodes approve-routes exits 0 ${approve.stderr.trim()}`);
      const st = await a.waitFor((x) => peerByHost(x, 'exit')?.ExitNodeOption === true, 15_000);
      t.ok(['0.0.0.0/0', '::/0'].every((r) => (peerByHost(st, 'exit')?.AllowedIPs ?? []).includes(r)), 'dev-a routes both default routes to the exit node');
      const exitIp = ipv4Of({ BackendState: '', TailscaleIPs: peerByHost(st, 'exit')?.TailscaleIPs ?? [] });
      await a.cliOk(['set', `--exit-node=${exitIp}`]);
      await a.waitFor((x) => peerByHost(x, 'exit')?.ExitNode === true, 15_000);
      t.pass('dev-a uses the exit node');

      owners.length = 0;
      const during = await viaProxy(5000);
      const described = during instanceof Error ? during.message : `HTTP ${during.status} ${during.body.trim()}`;
      t.comment(`${binaries.version}: proxy GET to the loopback target with the exit node selected -> ${described}; connections seen: ${JSON.stringify(owners.map((o) => devices.find((d) => d.pid === o)?.name ?? o))}`);
      t.notOk(owners.includes(a.pid), "with the exit node selected dev-a's tailscaled no longer dials the target itself");
      t.ok(during instanceof Error || during.status !== 200 || owners.includes(exit.pid), 'the request either went through the exit node or did not complete locally');

      await a.cliOk(['set', '--exit-node=']);
      await a.waitFor((x) => peerByHost(x, 'exit')?.ExitNode !== true, 15_000);
      owners.length = 0;
      const after = await viaProxy(10_000);
      t.match(after, { status: 200 }, 'clearing the exit node restores local dialing');
      t.same(owners, [a.pid]);
      target.close();
    });

    await t.test('a deleted node loses the relay', async (t) => {
      const del = await runCli(s, ['nodes', 'delete', '-i', String(nodeB.id), '--force', '-o', 'json']);
      t.equal(del.code, 0, `headway nodes delete exits 0 ${del.stderr.trim()}`);
      const began = Date.now();
      while (s.relay.derp!.isConnected(nodeB.nodeKey) && Date.now() - began < 10_000) await sleep(50);
      t.notOk(s.relay.derp!.isConnected(nodeB.nodeKey), `the relay dropped dev-b (${Date.now() - began} ms)`);
      // tailscaled redials the relay at once; verify_clients must keep refusing it.
      await sleep(3000);
      t.notOk(s.relay.derp!.isConnected(nodeB.nodeKey), 'dev-b is still refused by the relay 3 s later');
      t.ok(s.relay.derp!.isConnected(nodeA.nodeKey), 'dev-a keeps its relay connection');
      await a.waitFor((x) => peerByHost(x, 'dev-b') === undefined, 15_000);
      t.pass('dev-a no longer lists dev-b');
      const fromB = await b.cli(['ping', '--c=2', '--timeout=2s', '--until-direct=false', ipA], { timeoutMs: 20_000 });
      t.not(fromB.code, 0, `ping from the deleted node fails: ${(fromB.stderr || fromB.stdout).trim().split('\n').at(-1)}`);
      const toB = await a.cli(['ping', '--c=1', '--timeout=2s', ipB], { timeoutMs: 20_000 });
      t.not(toB.code, 0, 'ping to the deleted node fails');
    });
  });
}
