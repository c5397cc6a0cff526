import t, { type Test } from 'tap';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { PONG_BACKLOG_BYTES, webSocketAccept, WebSocketStream, WsCloseCode, isValidWebSocketKey } from '../src/websocket.js';

/** WirePeer is the hand-driven end of a TCP connection: it records every byte and whether the socket closed. */
interface WirePeer {
  socket: Socket;
  readonly data: Buffer;
  readonly closed: boolean;
}

async function dialWirePeer(port: number): Promise<WirePeer> {
  const socket = connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const peer = { socket, data: Buffer.alloc(0), closed: false };
  socket.on('data', (c: Buffer) => (peer.data = Buffer.concat([peer.data, c])));
  socket.on('close', () => (peer.closed = true));
  socket.on('error', () => {});
  return peer;
}

/** eventually polls cond, since the stream's reactions arrive as later socket events. */
async function eventually(cond: () => boolean, what: string, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** clientFrame builds one client-to-server frame, masked unless told otherwise. */
function clientFrame(opcode: number, payload: Buffer, opts: { fin?: boolean; masked?: boolean; rsv?: number } = {}): Buffer {
  const fin = opts.fin ?? true;
  const masked = opts.masked ?? true;
  const len = payload.length;
  const ext = len < 126 ? Buffer.alloc(0) : len < 65536 ? Buffer.alloc(2) : Buffer.alloc(8);
  if (ext.length === 2) ext.writeUInt16BE(len);
  if (ext.length === 8) ext.writeBigUInt64BE(BigInt(len));
  const b0 = (fin ? 0x80 : 0) | (opts.rsv ?? 0) | opcode;
  const b1 = (masked ? 0x80 : 0) | (len < 126 ? len : len < 65536 ? 126 : 127);
  const mask = Buffer.from([1, 2, 3, 4]);
  const body = Buffer.from(payload);
  if (masked) for (let i = 0; i < body.length; i++) body[i]! ^= mask[i & 3]!;
  return Buffer.concat([Buffer.of(b0, b1), ext, masked ? mask : Buffer.alloc(0), body]);
}

/** serverFrames parses unmasked server frames out of raw bytes. */
function serverFrames(data: Buffer): { opcode: number; payload: Buffer }[] {
  const out: { opcode: number; payload: Buffer }[] = [];
  let o = 0;
  while (o + 2 <= data.length) {
    let len = data[o + 1]! & 0x7f;
    let h = 2;
    if (len === 126) {
      len = data.readUInt16BE(o + 2);
      h = 4;
    } else if (len === 127) {
      len = Number(data.readBigUInt64BE(o + 2));
      h = 10;
    }
    if (o + h + len > data.length) break;
    out.push({ opcode: data[o]! & 0x0f, payload: data.subarray(o + h, o + h + len) });
    o += h + len;
  }
  return out;
}

async function pair(t: Test): Promise<{ ws: WebSocketStream; raw: WirePeer; received: () => Buffer; socket: Socket }> {
  let accepted!: (s: Socket) => void;
  const got = new Promise<Socket>((r) => (accepted = r));
  const server = createServer((s) => accepted(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const raw = await dialWirePeer((server.address() as AddressInfo).port);
  const socket = await got;
  const ws = new WebSocketStream(socket, { role: 'server', maxMessageBytes: 1000 });
  ws.on('error', () => {});
  const chunks: Buffer[] = [];
  ws.on('data', (c: Buffer) => chunks.push(c));
  t.teardown(() => {
    ws.destroy();
    raw.socket.destroy();
  });
  return { ws, raw, received: () => Buffer.concat(chunks), socket };
}

t.test('accept key matches RFC 6455 example; key validation', async (t) => {
  t.equal(webSocketAccept('dGhlIHNhbXBsZSBub25jZQ=='), 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
  t.ok(isValidWebSocketKey('dGhlIHNhbXBsZSBub25jZQ=='));
  t.notOk(isValidWebSocketKey('short'));
  t.notOk(isValidWebSocketKey(undefined));
});

t.test('fragmented binary messages become one byte stream; ping gets pong', async (t) => {
  const { ws, raw, received } = await pair(t);
  raw.socket.write(clientFrame(0x2, Buffer.from('hel'), { fin: false }));
  raw.socket.write(clientFrame(0x9, Buffer.from('pingdata')));
  raw.socket.write(clientFrame(0x0, Buffer.from('lo '), { fin: false }));
  raw.socket.write(clientFrame(0x0, Buffer.from('world')));
  raw.socket.write(clientFrame(0x2, Buffer.alloc(300, 7)));
  await eventually(() => serverFrames(raw.data).some((f) => f.opcode === 0xa), 'pong');
  const pong = serverFrames(raw.data).find((f) => f.opcode === 0xa);
  t.equal(pong?.payload.toString(), 'pingdata', 'pong echoes the ping payload unmasked');
  const want = Buffer.concat([Buffer.from('hello world'), Buffer.alloc(300, 7)]);
  await eventually(() => received().length >= want.length, 'every data byte');
  t.same(received(), want);
  ws.write(Buffer.from('reply'));
  await eventually(() => serverFrames(raw.data).some((f) => f.opcode === 0x2), 'binary reply');
  t.equal(serverFrames(raw.data).find((f) => f.opcode === 0x2)?.payload.toString(), 'reply', 'server frames are binary and unmasked');
});

t.test('close is echoed and ends the stream', async (t) => {
  const { ws, raw } = await pair(t);
  const ended = new Promise<void>((r) => ws.once('end', r));
  const code = Buffer.alloc(2);
  code.writeUInt16BE(1000);
  raw.socket.write(clientFrame(0x8, code));
  await ended;
  await eventually(() => serverFrames(raw.data).some((f) => f.opcode === 0x8), 'close frame');
  t.equal(serverFrames(raw.data).find((f) => f.opcode === 0x8)?.payload.readUInt16BE(0), 1000);
  t.equal(ws.closeCode, 1000);
});

const violations: [string, Buffer, number][] = [
  ['unmasked client frame', clientFrame(0x2, Buffer.from('x'), { masked: false }), WsCloseCode.ProtocolError],
  ['reserved bits', clientFrame(0x2, Buffer.from('x'), { rsv: 0x40 }), WsCloseCode.ProtocolError],
  ['text message', clientFrame(0x1, Buffer.from('x')), WsCloseCode.UnsupportedData],
  ['continuation without start', clientFrame(0x0, Buffer.from('x')), WsCloseCode.ProtocolError],
  ['fragmented control frame', clientFrame(0x9, Buffer.from('x'), { fin: false }), WsCloseCode.ProtocolError],
  ['frame over the size cap', clientFrame(0x2, Buffer.alloc(1001)), WsCloseCode.TooBig],
  ['unknown opcode', clientFrame(0x3, Buffer.from('x')), WsCloseCode.ProtocolError],
];
for (const [name, bytes, expected] of violations) {
  t.test(`protocol violation closes with ${expected}: ${name}`, async (t) => {
    const { ws, raw } = await pair(t);
    raw.socket.write(bytes);
    await eventually(() => raw.closed, 'socket close');
    const close = serverFrames(raw.data).find((f) => f.opcode === 0x8);
    t.equal(close?.payload.readUInt16BE(0), expected);
    t.ok(ws.destroyed);
  });
}

t.test('a peer that pings and never reads gets no more pongs than the socket can hold', async (t) => {
  // Answering each ping into the socket's write queue whatever is waiting there would let one connection that never
  // reads grow the server by gigabytes.
  const { raw, socket } = await pair(t);
  raw.socket.pause();
  const ping = clientFrame(0x9, Buffer.alloc(125, 1));
  let most = 0;
  for (let round = 0; round < 40; round++) {
    raw.socket.write(Buffer.concat(Array.from({ length: 1000 }, () => ping)));
    await new Promise((r) => setTimeout(r, 5));
    most = Math.max(most, socket.writableLength);
  }
  t.ok(most > 0, `pongs queued while the peer does not read (${most} bytes at most)`);
  t.ok(most < PONG_BACKLOG_BYTES + 1024, `the queue stays under the bound (${most} bytes for 5 MB of pings)`);
  raw.socket.resume();
  await eventually(() => serverFrames(raw.data).some((f) => f.opcode === 0xa), 'a pong once the peer reads');
});
