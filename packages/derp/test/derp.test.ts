import t, { type Test } from 'tap';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { DerpClient, type DerpMessage } from '../src/client.js';
import { sealTo } from '../src/box.js';
import { DERP_MAGIC, encodeFrame, FrameReader, FrameType, MAX_PACKET_SIZE, PeerGoneReason } from '../src/frames.js';
import { formatNodeKey, generateDerpKeyPair } from '../src/keys.js';
import type { DerpClientInfo } from '../src/server.js';
import { discoPacket, RawConn, startRelay, upgradeRequest, waitFor } from './helpers.js';

async function expectNoMessage(t: Test, client: DerpClient, what: string): Promise<void> {
  // A ping round trip proves the server has processed everything sent before it.
  await client.ping();
  await t.rejects(client.recv(50), /no DERP message/, what);
}

/** nextOf skips keepalives and returns the next message of the wanted type. */
async function nextOf<T extends DerpMessage['type']>(client: DerpClient, type: T): Promise<Extract<DerpMessage, { type: T }>> {
  for (;;) {
    const m = await client.recv();
    if (m.type === type) return m as Extract<DerpMessage, { type: T }>;
    if (m.type !== 'keepAlive') throw new Error(`expected ${type}, got ${m.type}`);
  }
}

t.test('login happy path: 101 headers, ServerKey, verifyClient info, ServerInfo', async (t) => {
  const seen: { key: string; info: DerpClientInfo }[] = [];
  const relay = await startRelay({
    verifyClient: async (key, info) => {
      seen.push({ key, info });
      return true;
    },
  });
  t.teardown(() => relay.close());

  const raw = await RawConn.open(relay.port);
  raw.socket.write(upgradeRequest());
  await raw.until(() => raw.data.includes('\r\n\r\n') && raw.data.length >= raw.data.indexOf('\r\n\r\n') + 4 + 45);
  const headEnd = raw.data.indexOf('\r\n\r\n');
  const head = raw.data.subarray(0, headEnd).toString();
  t.match(head, /^HTTP\/1\.1 101 Switching Protocols/);
  t.match(head, /\r\nUpgrade: DERP\r\n/);
  t.match(head, /\r\nConnection: Upgrade\r\n/);
  t.match(head, /\r\nDerp-Version: 2\r\n/);
  t.match(head, new RegExp(`\\r\\nDerp-Public-Key: ${relay.derp.publicKeyString}`));
  const frame = new FrameReader(1024);
  frame.push(raw.data.subarray(headEnd + 4));
  const serverKey = frame.next();
  t.equal(serverKey?.type, FrameType.ServerKey);
  t.same(serverKey?.payload.subarray(0, 8), DERP_MAGIC, 'ServerKey starts with the DERP magic');
  t.same(serverKey?.payload.subarray(8), relay.derp.publicKey);
  raw.socket.destroy();

  const client = await DerpClient.connect({ url: relay.url });
  t.same(client.serverPublicKey, relay.derp.publicKey, 'client learned the server key from ServerKey');
  t.ok(relay.derp.isConnected(client.publicKeyString));
  t.equal(relay.derp.clientCount, 1);
  t.equal(seen.length, 1);
  t.equal(seen[0]?.key, client.publicKeyString, 'verifyClient gets nodekey:<hex>');
  t.equal(seen[0]?.info.version, 2);
  t.equal(seen[0]?.info.canAckPings, true);
  t.equal(seen[0]?.info.transport, 'derp');
  t.equal(seen[0]?.info.remoteAddress, '127.0.0.1');
  await client.close();
  await waitFor(() => relay.derp.clientCount === 0, 3000, 'client to unregister');
});

t.test('Derp-Fast-Start: no HTTP response, frames start at once', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const raw = await RawConn.open(relay.port);
  raw.socket.write(upgradeRequest(['Derp-Fast-Start: 1']));
  await raw.until(() => raw.data.length >= 45);
  t.equal(raw.data[0], FrameType.ServerKey, 'first byte is a ServerKey frame, not HTTP');
  raw.socket.destroy();

  const client = await DerpClient.connect({ url: relay.url, fastStart: true });
  t.ok(relay.derp.isConnected(client.publicKeyString));
  await client.close();
});

t.test('login rejects bad boxes, wrong first frames, short and non-JSON ClientInfo', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const server = relay.derp.publicKey;
  const me = generateDerpKeyPair();
  const other = generateDerpKeyPair();
  const cases: [string, Buffer][] = [
    ['box sealed by a different key', encodeFrame(FrameType.ClientInfo, me.publicKey, sealTo(Buffer.from('{"version":2}'), server, other.privateKey))],
    ['garbage box', encodeFrame(FrameType.ClientInfo, me.publicKey, Buffer.alloc(60, 1))],
    ['short ClientInfo', encodeFrame(FrameType.ClientInfo, me.publicKey.subarray(0, 20))],
    ['box of non-JSON', encodeFrame(FrameType.ClientInfo, me.publicKey, sealTo(Buffer.from('not json'), server, me.privateKey))],
    ['box of a JSON array', encodeFrame(FrameType.ClientInfo, me.publicKey, sealTo(Buffer.from('[1]'), server, me.privateKey))],
    ['SendPacket before login', encodeFrame(FrameType.SendPacket, Buffer.alloc(40))],
    ['ClientInfo over 256 KiB', Buffer.concat([Buffer.of(FrameType.ClientInfo), Buffer.from([0x00, 0x04, 0x00, 0x01])])],
  ];
  for (const [name, bytes] of cases) {
    const before = relay.derp.stats.loginFailures;
    const raw = await RawConn.open(relay.port);
    raw.socket.write(upgradeRequest(['Derp-Fast-Start: 1']));
    raw.socket.write(bytes);
    await raw.waitClosed();
    t.ok(raw.closed, `${name}: connection closed`);
    t.equal(relay.derp.stats.loginFailures, before + 1, `${name}: counted as login failure`);
  }
  t.equal(relay.derp.clientCount, 0);
  // The server survived all of it.
  const client = await DerpClient.connect({ url: relay.url });
  t.ok(client.isOpen);
  await client.close();
});

t.test('client refuses a server greeting with the wrong magic', async (t) => {
  const fake = createNetServer((socket) => {
    socket.once('data', () => {
      socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n');
      socket.write(encodeFrame(FrameType.ServerKey, Buffer.from('NOTDERP!'), Buffer.alloc(32)));
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((r) => fake.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => fake.close(() => r())));
  const port = (fake.address() as AddressInfo).port;
  await t.rejects(DerpClient.connect({ url: `http://127.0.0.1:${port}/derp` }), /invalid DERP server greeting/);
});

t.test('login times out when ClientInfo never arrives', async (t) => {
  const relay = await startRelay({ loginTimeoutMs: 100 });
  t.teardown(() => relay.close());
  const raw = await RawConn.open(relay.port);
  raw.socket.write(upgradeRequest());
  await raw.waitClosed();
  t.ok(raw.closed);
  t.equal(relay.derp.stats.loginFailures, 1);
});

t.test('verifyClient refusing or throwing keeps the client out', async (t) => {
  const refused = generateDerpKeyPair();
  const rejecting = generateDerpKeyPair();
  const throwing = generateDerpKeyPair();
  const relay = await startRelay({
    verifyClient: (key) => {
      if (key === formatNodeKey(refused.publicKey)) return Promise.resolve(false);
      if (key === formatNodeKey(rejecting.publicKey)) return Promise.reject(new Error('store down'));
      if (key === formatNodeKey(throwing.publicKey)) throw new Error('bug in predicate');
      return Promise.resolve(true);
    },
  });
  t.teardown(() => relay.close());
  await t.rejects(DerpClient.connect({ url: relay.url, privateKey: refused.privateKey }), /closed/);
  t.notOk(relay.derp.isConnected(formatNodeKey(refused.publicKey)));
  await t.rejects(DerpClient.connect({ url: relay.url, privateKey: rejecting.privateKey }), /closed/, 'rejected promise refuses');
  await t.rejects(DerpClient.connect({ url: relay.url, privateKey: throwing.privateKey }), /closed/, 'synchronous throw refuses');
  t.equal(relay.derp.stats.loginFailures, 3);
  const allowed = await DerpClient.connect({ url: relay.url });
  t.ok(relay.derp.isConnected(allowed.publicKeyString));
  t.equal(relay.derp.clientCount, 1);
  await allowed.close();
});

t.test('send/recv between two clients carries source and bytes', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  const b = await DerpClient.connect({ url: relay.url });
  t.teardown(() => Promise.all([a.close(), b.close()]));
  a.send(b.publicKeyString, Buffer.from('hello b'));
  const got = await nextOf(b, 'packet');
  t.equal(got.source, a.publicKeyString);
  t.equal(got.data.toString(), 'hello b');
  const big = Buffer.alloc(MAX_PACKET_SIZE, 0xab);
  b.send(a.publicKey, big);
  const back = await nextOf(a, 'packet');
  t.equal(back.source, b.publicKeyString);
  t.ok(back.data.equals(big), 'a 64 KiB packet arrives intact');
  t.equal(relay.derp.stats.packetsForwarded, 2);
  t.throws(() => a.send(b.publicKeyString, Buffer.alloc(MAX_PACKET_SIZE + 1)), /exceeds/);
});

t.test('unknown destination: disco gets rate-limited PeerGone(not here), other packets are dropped silently', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  t.teardown(() => a.close());
  const nobody = formatNodeKey(generateDerpKeyPair().publicKey);
  a.send(nobody, Buffer.from('plain wireguard bytes'));
  await expectNoMessage(t, a, 'no PeerGone for a non-disco packet');
  t.equal(relay.derp.stats.packetsDroppedUnknownDest, 1);

  for (let i = 0; i < 5; i++) a.send(nobody, discoPacket());
  const gone = await nextOf(a, 'peerGone');
  t.equal(gone.peer, nobody);
  t.equal(gone.reason, PeerGoneReason.NotHere);
  await nextOf(a, 'peerGone');
  await nextOf(a, 'peerGone');
  await expectNoMessage(t, a, 'burst of 3, then rate-limited');
  t.equal(relay.derp.stats.peerGoneNotHereFrames, 3);
});

t.test('a departing peer triggers PeerGone(disconnected) only to clients it sent to', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  const b = await DerpClient.connect({ url: relay.url });
  const c = await DerpClient.connect({ url: relay.url });
  t.teardown(() => Promise.all([b.close(), c.close()]));
  a.send(b.publicKeyString, Buffer.from('x'));
  await nextOf(b, 'packet');
  const aKey = a.publicKeyString;
  await a.close();
  const gone = await nextOf(b, 'peerGone');
  t.equal(gone.peer, aKey);
  t.equal(gone.reason, PeerGoneReason.Disconnected);
  await expectNoMessage(t, c, 'c never heard from a, so no PeerGone');
  t.equal(relay.derp.stats.peerGoneDisconnectedFrames, 1);
});

t.test('disconnect(key) drops the node and tells its peers', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  const b = await DerpClient.connect({ url: relay.url });
  t.teardown(() => b.close());
  a.send(b.publicKeyString, Buffer.from('x'));
  await nextOf(b, 'packet');
  t.equal(relay.derp.disconnect(a.publicKeyString), true);
  await a.closed;
  t.notOk(relay.derp.isConnected(a.publicKeyString));
  t.equal((await nextOf(b, 'peerGone')).peer, a.publicKeyString);
  t.equal(relay.derp.disconnect(a.publicKeyString), false, 'second disconnect is a no-op');
});

t.test('ping/pong, short and oversized pings', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  t.teardown(() => a.close());
  const rtt = await a.ping();
  t.ok(rtt >= 0 && rtt < 1000, 'pong came back');
  // Extra bytes after the 8-byte body are allowed; the pong echoes the first 8.
  a.writeRaw(encodeFrame(FrameType.Ping, Buffer.from('abcdefghEXTRA')));
  const pong = await nextOf(a, 'pong');
  t.equal(pong.data.toString(), 'abcdefgh');
  t.equal(relay.derp.stats.pings, 2);

  const short = await DerpClient.connect({ url: relay.url });
  short.writeRaw(encodeFrame(FrameType.Ping, Buffer.from('abc')));
  await short.closed;
  const long = await DerpClient.connect({ url: relay.url });
  long.writeRaw(encodeFrame(FrameType.Ping, Buffer.alloc(1001)));
  await long.closed;
  t.ok(a.isOpen, 'other clients unaffected');
  await a.ping();
});

t.test('keepalive frames arrive on the configured period', async (t) => {
  const relay = await startRelay({ keepAliveMs: 40 });
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  t.teardown(() => a.close());
  const started = Date.now();
  t.equal((await a.recv(2000)).type, 'keepAlive');
  t.equal((await a.recv(2000)).type, 'keepAlive');
  t.ok(Date.now() - started >= 70, 'two keepalives take at least two periods');
});

t.test('NotePreferred is accepted; a wrong-size one closes the client', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  t.teardown(() => a.close());
  a.notePreferred(true);
  a.notePreferred(false);
  await a.ping();
  t.ok(a.isOpen);
  const bad = await DerpClient.connect({ url: relay.url });
  bad.writeRaw(encodeFrame(FrameType.NotePreferred, Buffer.of(1, 1)));
  await bad.closed;
  t.notOk(relay.derp.isConnected(bad.publicKeyString));
});

t.test('unknown frames are skipped; mesh-only frames close a non-mesh client', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  t.teardown(() => a.close());
  a.writeRaw(encodeFrame(0x30, Buffer.from('future frame')));
  a.writeRaw(encodeFrame(FrameType.Pong, Buffer.alloc(8)));
  await a.ping();
  t.equal(relay.derp.stats.unknownFrames, 2);
  const mesh = await DerpClient.connect({ url: relay.url });
  mesh.writeRaw(encodeFrame(FrameType.WatchConns));
  await mesh.closed;
  t.ok(a.isOpen);
});

t.test('oversized or short frames close only the offending client', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const a = await DerpClient.connect({ url: relay.url });
  const b = await DerpClient.connect({ url: relay.url });
  t.teardown(() => Promise.all([a.close(), b.close()]));

  const bad = await DerpClient.connect({ url: relay.url });
  const header = Buffer.alloc(5);
  header[0] = FrameType.SendPacket;
  header.writeUInt32BE(MAX_PACKET_SIZE + 33, 1);
  bad.writeRaw(header); // the header alone is enough: the payload is never buffered
  await bad.closed;

  const short = await DerpClient.connect({ url: relay.url });
  short.writeRaw(encodeFrame(FrameType.SendPacket, Buffer.alloc(10)));
  await short.closed;

  t.equal(relay.derp.clientCount, 2);
  a.send(b.publicKeyString, Buffer.from('still works'));
  t.equal((await nextOf(b, 'packet')).data.toString(), 'still works');
  t.ok(relay.derp.stats.protocolErrors >= 2);
});

t.test('a slow reader loses packets at its queue cap without stalling anyone else', async (t) => {
  const relay = await startRelay({ sendQueueDepth: 4 });
  t.teardown(() => relay.close());
  const sender = await DerpClient.connect({ url: relay.url });
  const slow = await DerpClient.connect({ url: relay.url });
  const fast = await DerpClient.connect({ url: relay.url });
  t.teardown(() => Promise.all([sender.close(), slow.close(), fast.close()]));
  slow.pause();
  const chunk = Buffer.alloc(60_000, 1);
  // Loopback socket buffers are several MB; keep sending until the relay has to drop.
  for (let i = 0; i < 2000 && relay.derp.droppedPackets(slow.publicKeyString) === 0; i++) {
    sender.send(slow.publicKeyString, chunk);
    if (i % 20 === 19) await sender.ping();
  }
  t.ok(relay.derp.droppedPackets(slow.publicKeyString) > 0, 'packets to the slow reader were dropped');
  t.ok(relay.derp.queuedPackets(slow.publicKeyString) <= 4, 'its queue never exceeds the cap');
  const started = Date.now();
  sender.send(fast.publicKeyString, Buffer.from('not blocked'));
  t.equal((await nextOf(fast, 'packet')).data.toString(), 'not blocked');
  t.ok(Date.now() - started < 1000, 'fast client served promptly');
  t.ok(relay.derp.stats.packetsDroppedQueueFull > 0);
  // The slow reader recovers when it resumes.
  slow.resume();
  sender.send(slow.publicKeyString, Buffer.from('eventually'));
  for (;;) {
    const m = await nextOf(slow, 'packet');
    if (m.data.toString() === 'eventually') break;
  }
  t.pass('slow reader received the latest packet after resuming');
});

t.test('reconnecting with the same key replaces the old connection without PeerGone', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const keys = generateDerpKeyPair();
  const peer = await DerpClient.connect({ url: relay.url });
  const first = await DerpClient.connect({ url: relay.url, privateKey: keys.privateKey });
  first.send(peer.publicKeyString, Buffer.from('from first'));
  await nextOf(peer, 'packet');
  const second = await DerpClient.connect({ url: relay.url, privateKey: keys.privateKey });
  t.teardown(() => Promise.all([peer.close(), second.close()]));
  await first.closed;
  t.equal(relay.derp.clientCount, 2);
  t.ok(relay.derp.isConnected(second.publicKeyString));
  peer.send(second.publicKeyString, Buffer.from('to second'));
  t.equal((await nextOf(second, 'packet')).data.toString(), 'to second');
  await expectNoMessage(t, peer, 'the key never left, so no PeerGone');
});

t.test('Health frames reach the client; close() sends Restarting then closes', async (t) => {
  const relay = await startRelay();
  const a = await DerpClient.connect({ url: relay.url });
  t.equal(relay.derp.sendHealth(a.publicKeyString, 'duplicate key'), true);
  t.same(await nextOf(a, 'health'), { type: 'health', problem: 'duplicate key' });
  await relay.close();
  const restarting = await nextOf(a, 'restarting');
  t.same(restarting, { type: 'restarting', reconnectInMs: 0, tryForMs: 0 });
  await a.closed;
  t.equal(relay.derp.clientCount, 0);

  const relay2 = await startRelay();
  const b = await DerpClient.connect({ url: relay2.url });
  await relay2.derp.close({ reconnectInMs: 1500, tryForMs: 9000 });
  t.same(await nextOf(b, 'restarting'), { type: 'restarting', reconnectInMs: 1500, tryForMs: 9000 });
  await b.closed;
  await relay2.close();
});

t.test('WebSocket variant round trip with a raw DERP peer', async (t) => {
  const seen: string[] = [];
  const relay = await startRelay({
    verifyClient: async (_k, info) => {
      seen.push(info.transport);
      return true;
    },
  });
  t.teardown(() => relay.close());
  const ws = await DerpClient.connect({ url: relay.wsUrl });
  const plain = await DerpClient.connect({ url: relay.url });
  t.teardown(() => Promise.all([ws.close(), plain.close()]));
  t.same(seen, ['websocket', 'derp']);
  ws.send(plain.publicKeyString, Buffer.from('over websocket'));
  const got = await nextOf(plain, 'packet');
  t.equal(got.source, ws.publicKeyString);
  t.equal(got.data.toString(), 'over websocket');
  const big = Buffer.alloc(MAX_PACKET_SIZE, 3);
  plain.send(ws.publicKeyString, big);
  t.ok((await nextOf(ws, 'packet')).data.equals(big), '64 KiB packet through WebSocket framing');
  await ws.ping();
  await ws.close();
  t.equal((await nextOf(plain, 'peerGone')).peer, ws.publicKeyString);
});

t.test('HTTP routes: 426 without upgrade, probes, generate_204 challenge, others not owned', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const base = `http://127.0.0.1:${relay.port}`;
  const derp = await fetch(`${base}/derp`);
  t.equal(derp.status, 426);
  t.match(await derp.text(), /requires connection upgrade/);
  for (const p of ['/derp/probe', '/derp/latency-check']) {
    const r = await fetch(base + p);
    t.equal(r.status, 200, p);
    t.equal(r.headers.get('access-control-allow-origin'), '*');
  }
  t.equal((await fetch(`${base}/derp/probe`, { method: 'POST' })).status, 405);
  const g = await fetch(`${base}/generate_204`, { headers: { 'X-Tailscale-Challenge': 'abc-123.XYZ_:' } });
  t.equal(g.status, 204);
  t.equal(g.headers.get('x-tailscale-response'), 'response abc-123.XYZ_:');
  const bad = await fetch(`${base}/generate_204`, { headers: { 'X-Tailscale-Challenge': 'no spaces allowed' } });
  t.equal(bad.status, 204);
  t.equal(bad.headers.get('x-tailscale-response'), null, 'invalid challenge is not echoed');
  const long = await fetch(`${base}/generate_204`, { headers: { 'X-Tailscale-Challenge': 'a'.repeat(65) } });
  t.equal(long.headers.get('x-tailscale-response'), null, 'over-long challenge is not echoed');
  t.equal((await fetch(`${base}/elsewhere`)).status, 404, 'handleRequest returns false for other paths');

  const raw = await RawConn.open(relay.port);
  raw.socket.write('GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n');
  await raw.waitClosed();
  t.match(raw.data.toString(), /^HTTP\/1\.1 426/);
  const ws = await RawConn.open(relay.port);
  ws.socket.write('GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: derp\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short\r\n\r\n');
  await ws.waitClosed();
  t.match(ws.data.toString(), /^HTTP\/1\.1 400/, 'bad Sec-WebSocket-Key is refused');
});

t.test('Upgrade: websocket without the derp subprotocol is raw DERP (very old clients)', async (t) => {
  const relay = await startRelay();
  t.teardown(() => relay.close());
  const raw = await RawConn.open(relay.port);
  raw.socket.write('GET /derp HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n\r\n');
  await raw.until(() => raw.data.includes('\r\n\r\n'));
  t.match(raw.data.toString(), /^HTTP\/1\.1 101 Switching Protocols\r\nUpgrade: DERP\r\n/);
  raw.socket.destroy();
});
