import t from 'tap';
import { connect, type Socket } from 'node:net';
import { fetchControlKey, generateKeyPair, startClientHandshake } from '@headway/noise';
import { startTestServer, type TestServer } from '../src/server.js';
import { haproxyMissing, startHAProxy, type HAProxy } from '../src/haproxy.js';
import { unmet } from '../src/unmet.js';

// Two clients behind a real reverse proxy (HAProxy, option forwardfor) in front of a real Headway. Loopback
// holds all of 127/8: the clients dial the proxy from 127.0.0.2 and 127.0.0.3, the proxy reaches Headway
// from 127.0.0.1.

const CAPVER = 130;
const A = '127.0.0.2';
const B = '127.0.0.3';

interface Reply { status: number; socket: Socket }

/** upgrade sends one raw HTTP upgrade request from `from` to 127.0.0.1:port and resolves with its status line's code. */
function upgrade(port: number, from: string, lines: string[]): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress: from });
    let buf = '';
    let done = false;
    socket.on('data', (c: Buffer) => {
      buf += c.toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf);
      if (m && !done) { done = true; resolve({ status: Number(m[1]), socket }); }
    });
    socket.on('error', (err) => { if (!done) { done = true; reject(err); } });
    socket.on('end', () => { if (!done) { done = true; reject(new Error(`closed before a reply: ${JSON.stringify(buf)}`)); } });
    socket.write([...lines, 'Host: headway.test', '', ''].join('\r\n'));
  });
}

function ts2021(port: number, from: string, initiation: Buffer, extra: string[] = []): Promise<Reply> {
  return upgrade(port, from, ['POST /ts2021 HTTP/1.1', 'Upgrade: tailscale-control-protocol', 'Connection: upgrade',
    `X-Tailscale-Handshake: ${initiation.toString('base64')}`, 'Content-Length: 0', ...extra]);
}

function derp(port: number, from: string): Promise<Reply> {
  return upgrade(port, from, ['GET /derp HTTP/1.1', 'Upgrade: DERP', 'Connection: Upgrade']);
}

const portOf = (s: TestServer) => Number(new URL(s.urls.http).port);

async function setUp(t: { teardown(fn: () => unknown): void }, trusted: string[] | undefined): Promise<{ s: TestServer; proxy: HAProxy; init: () => Buffer; sockets: Socket[] }> {
  const s = await startTestServer({
    ...(trusted ? { trusted_proxies: trusted } : {}),
    noise: { handshake_rate: 1, handshake_burst: 3 },
    derp: { server: { max_unauthenticated_connections_per_address: 2 } },
  });
  t.teardown(() => s.stop());
  const proxy = await startHAProxy(portOf(s));
  t.teardown(() => proxy.stop());
  const sockets: Socket[] = [];
  t.teardown(() => { for (const x of sockets) x.destroy(); });
  const control = await fetchControlKey(s.urls.http, CAPVER);
  const init = () => startClientHandshake({ machinePrivateKey: generateKeyPair().privateKey, controlPublicKey: control, capabilityVersion: CAPVER }).initiation;
  return { s, proxy, init, sockets };
}

/** hammer sends n ts2021 upgrades from `from` through the proxy and returns their statuses. */
async function hammer(port: number, from: string, n: number, init: () => Buffer, sockets: Socket[], extra: string[] = []): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = await ts2021(port, from, init(), extra);
    sockets.push(r.socket);
    statuses.push(r.status);
  }
  return statuses;
}

t.test('behind a trusted proxy each client has its own rate-limit bucket, relay cap and log lines', async (t) => {
  const missing = haproxyMissing();
  if (missing) return unmet(t, missing);
  const { s, proxy, init, sockets } = await setUp(t, ['127.0.0.1/32']);

  // A spoofed X-Forwarded-For is kept by the proxy, which appends the real peer: the walk from the right finds A.
  t.same(await hammer(proxy.port, A, 5, init, sockets, ['X-Forwarded-For: 198.51.100.77']), [101, 101, 101, 429, 429],
    'the hammering client gets its burst of 3, then 429');
  t.same(await hammer(proxy.port, B, 2, init, sockets), [101, 101], 'the other client behind the same proxy is not limited');
  t.ok(s.logs.some((l) => /ts2021 connection refused/.test(l) && l.includes(`too many handshakes from ${A}`)), 'the refusal names the client behind the proxy');
  t.ok(s.logs.some((l) => /ts2021 connection\b/.test(l) && !/refused/.test(l) && l.includes(B)), 'a session\'s log line names its client');
  t.notOk(s.logs.some((l) => l.includes('198.51.100.77')), 'the address the client made up is charged nothing and logged nowhere');
  t.equal(s.control.limits.handshakes.size, 2, 'two buckets: one per client');

  const relayA = [await derp(proxy.port, A), await derp(proxy.port, A), await derp(proxy.port, A)];
  sockets.push(...relayA.map((r) => r.socket));
  t.same(relayA.map((r) => r.status), [101, 101, 429], 'the relay caps connections not logged in per client (2), over HTTP upgrade');
  const relayB = await derp(proxy.port, B);
  sockets.push(relayB.socket);
  t.equal(relayB.status, 101, 'the other client still reaches the relay');
  t.ok(s.logs.some((l) => l.includes(`too many connections not logged in from ${A}`)), 'the relay log names the client behind the proxy');
});

t.test('without trusted_proxies the proxy is the client: one bucket for everyone behind it', async (t) => {
  const missing = haproxyMissing();
  if (missing) return unmet(t, missing);
  const { s, proxy, init, sockets } = await setUp(t, undefined);
  t.same(await hammer(proxy.port, A, 3, init, sockets), [101, 101, 101], 'the first client spends the burst');
  t.same(await hammer(proxy.port, B, 1, init, sockets), [429], 'the second client shares the proxy\'s bucket');
  t.ok(s.logs.some((l) => l.includes('too many handshakes from 127.0.0.1')), 'logs name the proxy');
  t.notOk(s.logs.some((l) => l.includes(A) || l.includes(B)), 'and never a client');
});

t.test('forwarded headers from a peer that is not a listed proxy are ignored', async (t) => {
  const { s, init, sockets } = await setUp(t, ['127.0.0.1/32']);
  // Straight to Headway from 127.0.0.4 (not listed), each request claiming a different client.
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) {
    const r = await ts2021(portOf(s), '127.0.0.4', init(), [`X-Forwarded-For: 198.51.100.${i}`, `X-Real-IP: 203.0.113.${i}`, `True-Client-IP: 192.0.2.${i}`]);
    sockets.push(r.socket);
    statuses.push(r.status);
  }
  t.same(statuses, [101, 101, 101, 429, 429], 'every spoofed request is charged to the real peer');
  t.ok(s.logs.some((l) => l.includes('too many handshakes from 127.0.0.4')));
  t.equal(s.control.limits.handshakes.size, 1, 'one bucket');
});
