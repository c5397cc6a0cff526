import t, { type Test } from 'tap';
import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import {
  formatKey,
  generateKeyPair,
  handleTs2021Upgrade,
  MESSAGE_TYPE_ERROR,
  MESSAGE_TYPE_RESPONSE,
  ReplayFilter,
  SessionLimits,
  sourceOf,
  startClientHandshake,
  TokenBuckets,
  Ts2021Limits,
  type NoiseConn,
  type RefusalKind,
  type Ts2021LimitOptions,
} from '../src/index.js';

const control = generateKeyPair();

t.test('sourceOf charges IPv4 per address and IPv6 per /64', async (t) => {
  t.equal(sourceOf('192.0.2.7'), '192.0.2.7');
  t.equal(sourceOf('::ffff:192.0.2.7'), '192.0.2.7', 'IPv4-mapped counts as IPv4');
  t.equal(sourceOf('2001:db8:1:2:aaaa::1'), '2001:db8:1:2::/64');
  t.equal(sourceOf('2001:db8:1:2:bbbb:cccc:dddd:eeee'), '2001:db8:1:2::/64', 'the same /64 is one source');
  t.equal(sourceOf('2001:db8::1'), '2001:db8:0:0::/64');
  t.equal(sourceOf('::1'), '0:0:0:0::/64');
  t.equal(sourceOf(undefined), 'unknown');
});

t.test('TokenBuckets allow a burst, then the refill rate', async (t) => {
  let now = 1_000_000;
  const b = new TokenBuckets({ rate: 2, burst: 3, now: () => now });
  t.same([b.take('a'), b.take('a'), b.take('a'), b.take('a')], [true, true, true, false], 'burst of 3, the 4th refused');
  t.ok(b.take('b'), 'another source has its own bucket');
  now += 499;
  t.notOk(b.take('a'), 'under one token after 499 ms at 2/s');
  now += 2;
  t.ok(b.take('a'), 'one token after 500 ms');
  t.notOk(b.take('a'));
  now += 60_000;
  t.same([b.take('a'), b.take('a'), b.take('a'), b.take('a')], [true, true, true, false], 'refill never exceeds the burst');
  t.throws(() => new TokenBuckets({ rate: 0, burst: 1 }), /rate > 0/);
});

t.test('TokenBuckets stay bounded in sources tracked', async (t) => {
  let now = 0;
  const b = new TokenBuckets({ rate: 1, burst: 1, maxKeys: 100, now: () => now });
  for (let i = 0; i < 1000; i++) { b.take(`s${i}`); now += 1; }
  t.ok(b.size <= 100, `tracked ${b.size} of at most 100`);
});

t.test('ReplayFilter remembers ephemerals for the window and within its capacity', async (t) => {
  let now = 0;
  const f = new ReplayFilter(1000, 3, () => now);
  const e = (n: number) => Buffer.alloc(32, n);
  f.remember(e(1));
  t.ok(f.seenBefore(e(1)));
  t.notOk(f.seenBefore(e(2)));
  now = 999;
  t.ok(f.seenBefore(e(1)), 'still inside the window');
  now = 1000;
  t.notOk(f.seenBefore(e(1)), 'forgotten after the window');
  for (const n of [2, 3, 4, 5]) f.remember(e(n));
  t.equal(f.size, 3, 'capacity holds');
  t.notOk(f.seenBefore(e(2)), 'the oldest made room');
  t.ok(f.seenBefore(e(5)));
});

t.test('SessionLimits cap unauthenticated sessions per source and overall; registered machines pass', async (t) => {
  const registered = new Set<string>();
  const s = new SessionLimits({ maxUnauthenticated: 3, maxUnauthenticatedPerSource: 2, isAuthenticated: (k) => registered.has(k) });
  const a1 = s.admit('A', 'm1');
  const a2 = s.admit('A', 'm2');
  t.ok('release' in a1 && 'release' in a2);
  const a3 = s.admit('A', 'm3');
  t.ok('refused' in a3 && /too many unauthenticated sessions from A \(limit 2\)/.test(a3.refused), 'third from A refused');
  t.equal(s.unauthenticated('A'), 2, 'a refusal is not counted');
  t.ok('release' in s.admit('B', 'm4'), 'another source still fits the global cap');
  const b2 = s.admit('B', 'm5');
  t.ok('refused' in b2 && /on this server \(limit 3\)/.test(b2.refused), 'global cap');
  registered.add('m9');
  t.ok('release' in s.admit('A', 'm9'), 'a registered machine is never refused');
  t.equal(s.unauthenticated(), 3, 'and not counted');
  if ('release' in a1) a1.release();
  t.ok('release' in s.admit('A', 'm6'), 'a closed session frees its slot');
  registered.add('m2');
  t.ok('release' in s.admit('C', 'm7'), 'a machine that registered since stops counting when the cap is reached');
});

interface Raw { status: number; headers: string; body: Buffer; socket: Socket }

/** rawUpgrade sends one POST /ts2021 upgrade with the given initiation and collects the reply until the server closes or `want` bytes follow a 101. */
function rawUpgrade(port: number, initiation: Buffer, want = 51): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    let done = false;
    const finish = () => {
      if (done) return;
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const headers = buf.subarray(0, end).toString('latin1');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(headers)?.[1]);
      const body = buf.subarray(end + 4);
      if (status === 101 && body.length < want && !socket.readableEnded) return;
      done = true;
      resolve({ status, headers, body, socket });
    };
    socket.on('data', (c: Buffer) => { buf = Buffer.concat([buf, c]); finish(); });
    socket.on('end', () => { finish(); if (!done) reject(new Error(`closed after ${buf.length} bytes`)); });
    socket.on('error', reject);
    socket.write(
      `POST /ts2021 HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: tailscale-control-protocol\r\nConnection: upgrade\r\n` +
        `X-Tailscale-Handshake: ${initiation.toString('base64')}\r\nContent-Length: 0\r\n\r\n`,
    );
  });
}

async function limitedServer(t: Test, limits: Partial<Ts2021LimitOptions> & { registered?: Set<string> } = {}) {
  const registered = limits.registered ?? new Set<string>();
  const l = new Ts2021Limits({
    handshakeRate: 1000, handshakeBurst: 1000, replayWindowMs: 60_000, maxUnauthenticated: 1000, maxUnauthenticatedPerSource: 1000,
    isAuthenticated: (k) => registered.has(k),
    ...limits,
  });
  const conns: NoiseConn[] = [];
  const refusals: Array<{ reason: string; kind: RefusalKind }> = [];
  const server = createServer((_, res) => res.end());
  server.on('upgrade', (req, socket, head) => {
    handleTs2021Upgrade(req, socket, head, {
      privateKey: control.privateKey, limits: l,
      onConnection: (conn) => { conns.push(conn); conn.on('end', () => conn.destroy()).resume(); },
      onRefused: (reason, kind) => refusals.push({ reason, kind }),
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { for (const c of conns) c.destroy(); server.closeAllConnections(); server.close(); });
  return { port: (server.address() as AddressInfo).port, limits: l, conns, refusals };
}

function initiation(machine = generateKeyPair()) {
  return startClientHandshake({ machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 }).initiation;
}

t.test('a replayed initiation is refused before any key agreement', async (t) => {
  const srv = await limitedServer(t);
  const init = initiation();
  const first = await rawUpgrade(srv.port, init);
  t.equal(first.status, 101);
  t.equal(first.body[0], MESSAGE_TYPE_RESPONSE, 'the original handshake completes');
  const replay = await rawUpgrade(srv.port, init);
  t.equal(replay.status, 403);
  t.match(replay.body.toString(), /replayed handshake initiation/);
  t.same(srv.refusals.map((r) => r.kind), ['replayed']);
  t.equal(srv.conns.length, 1, 'the replay made no connection');
  const fresh = await rawUpgrade(srv.port, initiation());
  t.equal(fresh.status, 101, 'a fresh initiation from the same source still works');
  first.socket.destroy(); fresh.socket.destroy();
});

t.test('handshakes per source are rate-limited with 429', async (t) => {
  const srv = await limitedServer(t, { handshakeRate: 0.001, handshakeBurst: 3 });
  const replies = [];
  for (let i = 0; i < 5; i++) replies.push(await rawUpgrade(srv.port, initiation()));
  t.same(replies.map((r) => r.status), [101, 101, 101, 429, 429], 'burst of 3, then refused');
  t.match(replies[3]!.headers, /Retry-After: 1/);
  t.match(replies[3]!.body.toString(), /too many handshakes/);
  t.equal(srv.refusals.filter((r) => r.kind === 'rate-limited').length, 2);
  t.equal(srv.limits.replays.size, 3, 'refused initiations were never processed');
  for (const r of replies) r.socket.destroy();
});

t.test('the N+1th unauthenticated session from one address is refused with an error frame', async (t) => {
  const registered = new Set<string>();
  const srv = await limitedServer(t, { maxUnauthenticatedPerSource: 3, registered });
  const ok = [];
  for (let i = 0; i < 3; i++) ok.push(await rawUpgrade(srv.port, initiation()));
  t.same(ok.map((r) => [r.status, r.body[0]]), Array(3).fill([101, MESSAGE_TYPE_RESPONSE]));
  const refused = await rawUpgrade(srv.port, initiation());
  t.equal(refused.status, 101);
  t.equal(refused.body[0], MESSAGE_TYPE_ERROR, 'told with a type-3 frame (tailscaled shows it)');
  t.match(refused.body.subarray(3).toString(), /too many unauthenticated sessions from 127\.0\.0\.1 \(limit 3\)/);
  t.equal(srv.conns.length, 3);

  const machine = generateKeyPair();
  registered.add(formatKey('mkey', machine.publicKey));
  const known = await rawUpgrade(srv.port, initiation(machine));
  t.equal(known.body[0], MESSAGE_TYPE_RESPONSE, 'a registered machine is admitted past the cap');

  ok[0]!.socket.destroy();
  // The server sees the close as a later socket event: wait for it (up to a generous bound) rather than a guessed time.
  for (let i = 0; i < 2000 && srv.limits.sessions.unauthenticated('127.0.0.1') !== 2; i++) await new Promise((r) => setTimeout(r, 5));
  t.equal(srv.limits.sessions.unauthenticated('127.0.0.1'), 2, 'a closed connection releases its slot');
  const again = await rawUpgrade(srv.port, initiation());
  t.equal(again.body[0], MESSAGE_TYPE_RESPONSE);
  for (const r of [...ok, refused, known, again]) r.socket.destroy();
});
