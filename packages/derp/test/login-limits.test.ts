/**
 * Limits on relay connections that have not logged in yet (attack run against the relay):
 * 2,000 connections each trickling a 256 KiB - 1 ClientInfo held +516 MB until the login
 * timer; one address opened any number of them; and one address made 1,399 logins a second
 * with random keys, each a public-key box open on the server.
 */
import t from 'tap';
import { Duplex } from 'node:stream';
import { DerpClient } from '../src/client.js';
import { encodeFrame, FRAME_HEADER_LENGTH, FrameType, MAX_CLIENT_INFO_LENGTH, MAX_PACKET_SIZE, PROTOCOL_VERSION } from '../src/frames.js';
import { KEY_LENGTH, generateDerpKeyPair } from '../src/keys.js';
import { DerpServer, type DerpLogger } from '../src/server.js';
import { RawConn, startRelay, upgradeRequest, waitFor } from './helpers.js';

interface Line { level: string; msg: string; fields: Record<string, unknown> }

function capture(): DerpLogger & { lines: Line[] } {
  const lines: Line[] = [];
  const push = (level: string) => (msg: string, fields: Record<string, unknown> = {}) => lines.push({ level, msg, fields });
  return { lines, debug: push('debug'), info: push('info'), warn: push('warn') };
}

/** MemorySocket is an in-process stream for DerpServer.accept: what the server writes is kept in `written`. */
class MemorySocket extends Duplex {
  written: Buffer[] = [];
  override _read(): void {}
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.written.push(chunk);
    cb();
  }
}

/** header is a DERP frame header declaring `length` payload bytes. */
function header(type: number, length: number): Buffer {
  const h = Buffer.alloc(FRAME_HEADER_LENGTH);
  h[0] = type;
  h.writeUInt32BE(length, 1);
  return h;
}

/** maskedWsHeader is a client WebSocket binary frame header (64-bit length form) declaring `length` bytes. */
function maskedWsHeader(length: number): Buffer {
  const h = Buffer.alloc(14);
  h[0] = 0x82;
  h[1] = 0x80 | 127;
  h.writeBigUInt64BE(BigInt(length), 2);
  h.writeUInt32BE(0x01020304, 10);
  return h;
}

t.test('ClientInfo size: a real client sends about 200 bytes, and the limit is a few KiB', async (t) => {
  // Tailscale's client seals {"version":2,"meshKey":"<64 hex>","CanAckPings":true,"IsProber":true} at most,
  // after its 32-byte key, with a 24-byte nonce and a 16-byte tag.
  const json = JSON.stringify({ version: PROTOCOL_VERSION, meshKey: 'f'.repeat(64), CanAckPings: true, IsProber: true });
  const largest = KEY_LENGTH + 24 + 16 + json.length;
  t.ok(largest < 256, `largest real ClientInfo payload is ${largest} bytes`);
  t.ok(MAX_CLIENT_INFO_LENGTH >= 2048 && MAX_CLIENT_INFO_LENGTH <= 8192, `limit ${MAX_CLIENT_INFO_LENGTH} bytes`);
  t.throws(() => new DerpServer({ privateKey: generateDerpKeyPair().privateKey, meshKey: 'k'.repeat(2048) }), /meshKey/, 'a mesh key that could not fit in a ClientInfo is refused at start');
});

t.test('oversized ClientInfo: 256 KiB - 1 declared and trickled is refused at its header, not buffered until the login timer', async (t) => {
  // The login timer is far away, so only the size check can close these connections.
  const relay = await startRelay({ loginTimeoutMs: 60_000 });
  t.teardown(() => relay.close());
  const declared = [(256 << 10) - 1, MAX_CLIENT_INFO_LENGTH + 1];
  for (const length of declared) {
    const before = relay.derp.stats;
    const raw = await RawConn.open(relay.port);
    raw.socket.write(upgradeRequest(['Derp-Fast-Start: 1']));
    raw.socket.write(header(FrameType.ClientInfo, length));
    raw.socket.write(Buffer.alloc(1000, 7)); // the start of a body that never finishes
    await raw.waitClosed().catch(() => undefined);
    t.ok(raw.closed, `declared ${length} bytes: closed`);
    t.equal(relay.derp.stats.loginFailures, before.loginFailures + 1, `declared ${length} bytes: a login failure`);
    t.equal(relay.derp.stats.protocolErrors, before.protocolErrors + 1, `declared ${length} bytes: a protocol error`);
  }

  // The same through the WebSocket transport, whose frames are buffered whole before DERP sees a byte:
  // a 64 KiB WebSocket frame before login is refused at its header.
  const ws = await RawConn.open(relay.port);
  ws.socket.write([
    'GET /derp HTTP/1.1', 'Host: 127.0.0.1', 'Upgrade: websocket', 'Connection: Upgrade',
    'Sec-WebSocket-Version: 13', 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Protocol: derp', '', '',
  ].join('\r\n'));
  await ws.until(() => ws.data.includes('\r\n\r\n'));
  ws.socket.write(maskedWsHeader(64 << 10));
  ws.socket.write(Buffer.alloc(1000, 7));
  await ws.waitClosed().catch(() => undefined);
  t.ok(ws.closed, 'WebSocket: a 64 KiB frame before login closes the connection');
  t.equal(relay.derp.clientCount, 0);

  // Real clients are unaffected, WebSocket ones included once logged in: a 64 KiB packet still goes through.
  const plain = await DerpClient.connect({ url: relay.url });
  const overWs = await DerpClient.connect({ url: relay.wsUrl });
  t.teardown(() => Promise.all([plain.close(), overWs.close()]));
  const big = Buffer.alloc(MAX_PACKET_SIZE, 3);
  overWs.send(plain.publicKeyString, big);
  for (;;) {
    const m = await plain.recv();
    if (m.type !== 'packet') continue;
    t.equal(m.data.length, MAX_PACKET_SIZE, 'a 64 KiB packet over WebSocket after login');
    break;
  }
});

t.test('unauthenticated connections are capped per address (IPv4 address or IPv6 /64)', async (t) => {
  const relay = await startRelay({ maxUnauthenticatedPerAddress: 3, loginTimeoutMs: 60_000 });
  t.teardown(() => relay.close());
  const idle: RawConn[] = [];
  for (let i = 0; i < 3; i++) {
    const raw = await RawConn.open(relay.port);
    raw.socket.write(upgradeRequest());
    await raw.until(() => raw.data.includes('101 Switching Protocols'));
    idle.push(raw);
  }
  t.teardown(() => idle.forEach((r) => r.socket.destroy()));

  const fourth = await RawConn.open(relay.port);
  t.teardown(() => fourth.socket.destroy());
  fourth.socket.write(upgradeRequest());
  await fourth.waitClosed().catch(() => undefined);
  t.ok(fourth.closed, 'the fourth connection from the address is closed');
  t.match(fourth.data.toString(), /^HTTP\/1\.1 429 /, 'with 429');
  t.equal(relay.derp.stats.connectionsRefusedPerAddress, 1);
  t.equal(relay.derp.unauthenticatedConnections('127.0.0.1'), 3);
  await t.rejects(DerpClient.connect({ url: relay.url, timeoutMs: 3000 }), 'so does a real client while the address is full');

  // A connection that goes away frees its slot; one that logs in stops counting.
  idle.pop()!.socket.destroy();
  await waitFor(() => relay.derp.unauthenticatedConnections('127.0.0.1') === 2, 3000, 'the slot to free');
  const client = await DerpClient.connect({ url: relay.url });
  t.teardown(() => client.close());
  t.equal(relay.derp.unauthenticatedConnections('127.0.0.1'), 2, 'a logged-in client is not counted');
  const again = await RawConn.open(relay.port);
  again.socket.write(upgradeRequest());
  await again.until(() => again.data.includes('101 Switching Protocols'));
  idle.push(again);
  t.equal(relay.derp.unauthenticatedConnections('127.0.0.1'), 3);

  // In process: an IPv6 /64 is one address, IPv4-mapped IPv6 is its IPv4 address, and addresses do not share.
  const server = new DerpServer({ privateKey: generateDerpKeyPair().privateKey, maxUnauthenticatedPerAddress: 2, loginTimeoutMs: 60_000 });
  t.teardown(() => server.close());
  const accept = (addr: string) => {
    const s = new MemorySocket();
    server.accept(s, addr);
    return s;
  };
  const v6 = ['2001:db8:1:2::5', '2001:db8:1:2:ffff::6', '2001:db8:1:2::7'].map(accept);
  t.same(v6.map((s) => s.destroyed), [false, false, true], 'the third from one /64 is refused');
  t.equal(accept('2001:db8:1:3::1').destroyed, false, 'another /64 is not');
  const v4 = ['10.0.0.1', '10.0.0.1', '::ffff:10.0.0.1', '10.0.0.2'].map(accept);
  t.same(v4.map((s) => s.destroyed), [false, false, true, false], 'IPv4-mapped counts as its IPv4 address');
  t.equal(server.stats.connectionsRefusedPerAddress, 2);
  v4[0]!.destroy();
  await waitFor(() => server.unauthenticatedConnections('10.0.0.1') === 1, 3000, 'the closed one to stop counting');
  t.equal(accept('10.0.0.1').destroyed, false, 'a closed connection frees its slot');
});

t.test('relay logins are rate-limited per address before the box is opened', async (t) => {
  const clock = { ms: 1_000_000 };
  const log = capture();
  const relay = await startRelay({ loginRate: 1, loginBurst: 3, now: () => clock.ms, logger: log });
  t.teardown(() => relay.close());
  const clients: DerpClient[] = [];
  t.teardown(() => Promise.all(clients.map((c) => c.close())));
  for (let i = 0; i < 3; i++) clients.push(await DerpClient.connect({ url: relay.url }));
  t.equal(relay.derp.clientCount, 3, 'the burst logs in');
  await t.rejects(DerpClient.connect({ url: relay.url, timeoutMs: 3000 }), 'the fourth login at the same instant is refused');
  t.equal(relay.derp.stats.loginsRateLimited, 1);

  // A login frame whose box does not open: refused by the rate alone, so the box is never tried (no protocol error).
  const protocolErrors = relay.derp.stats.protocolErrors;
  const raw = await RawConn.open(relay.port);
  raw.socket.write(upgradeRequest(['Derp-Fast-Start: 1']));
  raw.socket.write(encodeFrame(FrameType.ClientInfo, generateDerpKeyPair().publicKey, Buffer.alloc(60, 1)));
  await raw.waitClosed();
  t.equal(relay.derp.stats.loginsRateLimited, 2, 'refused by the rate');
  t.equal(relay.derp.stats.protocolErrors, protocolErrors, 'before the box was opened');
  t.ok(log.lines.some((l) => /login rate/.test(String(l.fields.reason))), 'the refusal is logged with its reason');

  clock.ms += 1000;
  clients.push(await DerpClient.connect({ url: relay.url }));
  t.equal(relay.derp.clientCount, 4, 'one second later one more token');
  await t.rejects(DerpClient.connect({ url: relay.url, timeoutMs: 3000 }), 'and only one');
  t.equal(relay.derp.stats.loginsRateLimited, 3);

  // Another address has its own bucket: its (garbage) login is opened and fails as a protocol error.
  const s = new MemorySocket();
  relay.derp.accept(s, '192.0.2.7');
  s.push(encodeFrame(FrameType.ClientInfo, generateDerpKeyPair().publicKey, Buffer.alloc(60, 1)));
  await waitFor(() => s.destroyed, 3000, 'the garbage login to close');
  t.equal(relay.derp.stats.loginsRateLimited, 3, 'not rate-limited');
  t.equal(relay.derp.stats.protocolErrors, protocolErrors + 1, 'its box was tried');
});
