import t, { type Test } from 'tap';
import http2 from 'node:http2';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { H2_ERROR, H2Session, type H2SessionOptions, type H2Stream, type H2Transport } from '../src/h2.js';
import { decodeHuffman, HpackDecoder } from '../src/hpack.js';
import { h2Frame, H2_PREFACE } from '@headway/testkit';
import { transportOf } from './h2-transport.js';

// The control server's own HTTP/2 (h2.ts, hpack.ts), checked against nghttp2's client (node:http2) over TCP,
// and against hand-made frames for what a well-behaved client never sends.


interface Served { port: number; sessions: H2Session[]; server: Server }

async function serve(t: Test, onStream: (s: H2Stream) => void, opts: Partial<H2SessionOptions> = {}): Promise<Served> {
  const sessions: H2Session[] = [];
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    sockets.push(socket);
    sessions.push(new H2Session(transportOf(socket), { onStream, ...opts }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { server.close(); for (const s of sockets) s.destroy(); });
  return { port: (server.address() as AddressInfo).port, sessions, server };
}

function client(t: Test, port: number, options: http2.ClientSessionOptions = {}): http2.ClientHttp2Session {
  const c = http2.connect(`http://127.0.0.1:${port}`, options);
  c.on('error', () => undefined);
  t.teardown(() => { c.destroy(); });
  return c;
}

interface Response { status: number; headers: http2.IncomingHttpHeaders; body: Buffer; rstCode?: number }

function request(c: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body?: Buffer | string): Promise<Response> {
  return new Promise((resolve, reject) => {
    const req = c.request(headers, { endStream: body === undefined });
    const chunks: Buffer[] = [];
    let status = 0;
    let got: http2.IncomingHttpHeaders = {};
    req.on('response', (h) => { status = Number(h[':status']); got = h; });
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('error', () => undefined);
    req.on('close', () => resolve({ status, headers: got, body: Buffer.concat(chunks), rstCode: req.rstCode }));
    if (body !== undefined) req.end(body);
    setTimeout(() => reject(new Error('request timed out')), 20_000).unref();
  });
}

/** echo answers with the method, path and body it got. */
function echo(s: H2Stream): void {
  s.body().then((body) => {
    s.respond(201, 'application/x-echo');
    s.write(Buffer.from(`${s.method} ${s.path} `));
    s.end(body);
  }, (err: Error & { status?: number }) => s.reply(err.status ?? 400, err.message));
}

t.test('HPACK: RFC 7541 C.4 (Huffman, dynamic table across three requests)', async (t) => {
  const d = new HpackDecoder();
  const decode = (hex: string) => { const out: string[] = []; d.decode(Buffer.from(hex, 'hex'), (n, v) => out.push(`${n}: ${v}`)); return out; };
  t.same(decode('828684418cf1e3c2e5f23a6ba0ab90f4ff'), [':method: GET', ':scheme: http', ':path: /', ':authority: www.example.com']);
  t.same(decode('828684be5886a8eb10649cbf'), [':method: GET', ':scheme: http', ':path: /', ':authority: www.example.com', 'cache-control: no-cache']);
  t.same(decode('828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf'), [':method: GET', ':scheme: https', ':path: /index.html', ':authority: www.example.com', 'custom-key: custom-value']);
});

t.test('HPACK: malformed blocks are compression errors', async (t) => {
  const fails = (hex: string, why: RegExp, msg: string) => t.throws(() => new HpackDecoder().decode(Buffer.from(hex, 'hex'), () => undefined), why, msg);
  fails('80', /index 0/, 'indexed field 0');
  fails('be', /past the dynamic table/, 'an index past both tables');
  fails('0f', /ends inside an integer/, 'an integer cut short');
  fails('ffffffffff0f', /too large/, 'an integer past 2^31');
  fails('400a6162', /past the end/, 'a string longer than the block');
  fails('3fe21f', /exceeds/, 'a table size update above the limit');
  fails('823f00', /after a header field/, 'a table size update after a field');
  t.throws(() => decodeHuffman(Buffer.from('ffffffff', 'hex'), 0, 4), /EOS|padding/, 'EOS in a Huffman string');
  t.throws(() => decodeHuffman(Buffer.from('00', 'hex'), 0, 1), /padding/, 'padding of zeros');
});

t.test('requests and bodies both ways, with flow control, against nghttp2', async (t) => {
  const { port } = await serve(t, echo);
  const c = client(t, port);
  const small = await request(c, { ':method': 'POST', ':path': '/machine/map?x=1' }, '{"Version":130}');
  t.equal(small.status, 201);
  t.equal(small.headers['content-type'], 'application/x-echo');
  t.equal(small.body.toString(), 'POST /machine/map?x=1 {"Version":130}');

  // Every printable character in the path: nghttp2 Huffman-codes it.
  const printable = Array.from({ length: 94 }, (_, i) => String.fromCharCode(33 + i)).join('').replace(/[#?]/g, '');
  const huff = await request(c, { ':method': 'GET', ':path': `/${printable}` });
  t.equal(huff.body.toString(), `GET /${printable} `, 'a Huffman-coded path of every printable character');

  // 600 KB up and back: more than the default 64 KiB windows many times over, in both directions.
  const big = Buffer.alloc(600_000);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
  const r = await request(c, { ':method': 'POST', ':path': '/big' }, big);
  t.equal(r.status, 201);
  t.ok(r.body.subarray('POST /big '.length).equals(big), 'a 600 KB body arrives and is sent back intact');

  const many = await Promise.all(Array.from({ length: 20 }, (_, i) => request(c, { ':method': 'POST', ':path': `/n${i}` }, `body ${i}`)));
  t.same(many.map((m) => m.body.toString()), many.map((_, i) => `POST /n${i} body ${i}`), 'twenty concurrent streams');
});

t.test('a response written over time, the client resetting it, a ping, and GOAWAY', async (t) => {
  let closedOnServer = 0;
  const streams: H2Stream[] = [];
  const { port, sessions } = await serve(t, (s) => {
    streams.push(s);
    s.onClose(() => closedOnServer++);
    void s.body().then(() => { s.respond(200, 'application/octet-stream'); s.write(Buffer.from('first;')); });
  });
  const c = client(t, port);
  const req = c.request({ ':method': 'POST', ':path': '/machine/map' });
  req.end('{}');
  const chunks: string[] = [];
  req.on('data', (d: Buffer) => chunks.push(d.toString()));
  req.on('error', () => undefined);
  await new Promise((r) => req.once('data', r));
  streams[0]!.write(Buffer.from('second;'));
  await new Promise((r) => req.once('data', r));
  t.same(chunks.join(''), 'first;second;', 'writes reach the client as they are made');
  const rtt = await new Promise<number>((resolve, reject) => c.ping((err, ms) => (err ? reject(err) : resolve(ms))));
  t.ok(rtt >= 0, 'a PING is acknowledged');
  req.close(http2.constants.NGHTTP2_CANCEL);
  for (let i = 0; i < 100 && closedOnServer === 0; i++) await new Promise((r) => setTimeout(r, 10));
  t.equal(closedOnServer, 1, 'the client reset the stream: it closed on the server');
  t.ok(streams[0]!.closed);

  const goaway = new Promise<number>((r) => c.once('goaway', (code) => r(code)));
  const closed = new Promise<void>((r) => c.once('close', () => r()));
  sessions[0]!.close();
  t.equal(await goaway, 0, 'close() sends GOAWAY with NO_ERROR');
  await closed;
  t.pass('and the connection ends');
});

t.test('bodies over the limit get 413, bodies that never end are cancelled, streams over the limit refused', async (t) => {
  const { port } = await serve(t, echo, { bodyLimit: 1000, bodyTimeoutMs: 300, maxConcurrentStreams: 2 });
  const c = client(t, port);
  const over = await request(c, { ':method': 'POST', ':path': '/x' }, Buffer.alloc(5000));
  t.equal(over.status, 413, 'a body over the limit is answered 413');
  t.equal(over.body.toString(), 'body too large\n');

  const stalled = c.request({ ':method': 'POST', ':path': '/slow' });
  stalled.on('error', () => undefined);
  stalled.write('{"Ver');
  const code = await new Promise<number>((r) => stalled.on('close', () => r(stalled.rstCode ?? -1)));
  t.equal(code, http2.constants.NGHTTP2_CANCEL, 'a body that never ends is cancelled');

  // nghttp2 holds a request back past the server's limit, so the third is sent by hand.
  const post = (id: number) => h2Frame(1, 0x4, id, Buffer.from('838684', 'hex'));
  const r = await raw(port, Buffer.concat([H2_PREFACE, h2Frame(4, 0, 0), post(1), post(3), post(5), h2Frame(7, 0, 0, Buffer.alloc(8))]));
  t.same(r.rst.find(([id]) => id === 5), [5, H2_ERROR.REFUSED_STREAM], 'a third concurrent stream is refused (limit 2)');
  t.same(r.rst.filter(([id]) => id !== 5).sort(), [[1, H2_ERROR.CANCEL], [3, H2_ERROR.CANCEL]], 'the two open ones are cancelled when their bodies stall, and the connection ends');
});

// --- frames a well-behaved client never sends ---------------------------------------------------------------


/** raw sends bytes and returns the GOAWAY error code the server answers with (or -1) once it closes. */
async function raw(port: number, bytes: Buffer): Promise<{ goaway: number; rst: Array<[number, number]> }> {
  const socket = connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  let buf = Buffer.alloc(0);
  socket.on('data', (d: Buffer) => { buf = Buffer.concat([buf, d]); });
  socket.write(bytes);
  await new Promise<void>((resolve) => { socket.on('close', () => resolve()); setTimeout(() => { socket.destroy(); }, 3000).unref(); });
  let goaway = -1;
  const rst: Array<[number, number]> = [];
  for (let at = 0; at + 9 <= buf.length;) {
    const len = buf.readUIntBE(at, 3);
    const type = buf[at + 3];
    const id = buf.readUInt32BE(at + 5);
    if (type === 7) goaway = buf.readUInt32BE(at + 13);
    if (type === 3) rst.push([id, buf.readUInt32BE(at + 9)]);
    at += 9 + len;
  }
  return { goaway, rst };
}

t.test('protocol errors end the connection with the GOAWAY code RFC 9113 names', async (t) => {
  const { port } = await serve(t, echo);
  const settings = h2Frame(4, 0, 0);
  const win = (id: number, inc: number) => { const p = Buffer.alloc(4); p.writeUInt32BE(inc); return h2Frame(8, 0, id, p); };
  const cases: Array<[string, Buffer, number]> = [
    ['a wrong preface', Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n'), H2_ERROR.PROTOCOL_ERROR],
    ['no SETTINGS after the preface', Buffer.concat([H2_PREFACE, h2Frame(6, 0, 0, Buffer.alloc(8))]), H2_ERROR.PROTOCOL_ERROR],
    ['a frame over 16 KiB', Buffer.concat([H2_PREFACE, settings, h2Frame(0, 0, 1, Buffer.alloc(20_000))]), H2_ERROR.FRAME_SIZE_ERROR],
    ['DATA on stream 0', Buffer.concat([H2_PREFACE, settings, h2Frame(0, 0, 0, Buffer.from('x'))]), H2_ERROR.PROTOCOL_ERROR],
    ['DATA on an idle stream', Buffer.concat([H2_PREFACE, settings, h2Frame(0, 0, 5, Buffer.from('x'))]), H2_ERROR.PROTOCOL_ERROR],
    ['a WINDOW_UPDATE of 0', Buffer.concat([H2_PREFACE, settings, win(0, 0)]), H2_ERROR.PROTOCOL_ERROR],
    ['a window past 2^31-1', Buffer.concat([H2_PREFACE, settings, win(0, 0x7fffffff)]), H2_ERROR.FLOW_CONTROL_ERROR],
    ['SETTINGS of 5 bytes', Buffer.concat([H2_PREFACE, h2Frame(4, 0, 0, Buffer.alloc(5))]), H2_ERROR.FRAME_SIZE_ERROR],
    ['a PING of 4 bytes', Buffer.concat([H2_PREFACE, settings, h2Frame(6, 0, 0, Buffer.alloc(4))]), H2_ERROR.FRAME_SIZE_ERROR],
    ['a header block that is not HPACK', Buffer.concat([H2_PREFACE, settings, h2Frame(1, 0x5, 1, Buffer.from('80', 'hex'))]), H2_ERROR.COMPRESSION_ERROR],
    ['HEADERS on an even stream', Buffer.concat([H2_PREFACE, settings, h2Frame(1, 0x5, 2, Buffer.from('828684', 'hex'))]), H2_ERROR.PROTOCOL_ERROR],
    ['a frame between HEADERS and its CONTINUATION', Buffer.concat([H2_PREFACE, settings, h2Frame(1, 0x1, 1, Buffer.from('82', 'hex')), h2Frame(6, 0, 0, Buffer.alloc(8))]), H2_ERROR.PROTOCOL_ERROR],
    ['PUSH_PROMISE from a client', Buffer.concat([H2_PREFACE, settings, h2Frame(5, 0x4, 1, Buffer.alloc(4))]), H2_ERROR.PROTOCOL_ERROR],
    ['padding that fills the frame', Buffer.concat([H2_PREFACE, settings, h2Frame(1, 0x5 | 0x8, 1, Buffer.from([9, 0x82]))]), H2_ERROR.PROTOCOL_ERROR],
    ['CONTINUATION frames past 64 KiB', Buffer.concat([H2_PREFACE, settings, h2Frame(1, 0x1, 1, Buffer.alloc(16_000, 0x82)), ...Array.from({ length: 4 }, () => h2Frame(9, 0, 1, Buffer.alloc(16_000, 0x82)))]), H2_ERROR.ENHANCE_YOUR_CALM],
  ];
  for (const [what, bytes, code] of cases) {
    const r = await raw(port, bytes);
    t.equal(r.goaway, code, `${what}: GOAWAY ${code}`);
  }

  // A malformed request is a stream error: RST_STREAM, and the connection goes on.
  const noPath = h2Frame(1, 0x5, 1, Buffer.from('8286', 'hex')); // :method GET, :scheme http, no :path
  const r = await raw(port, Buffer.concat([H2_PREFACE, settings, noPath, h2Frame(7, 0, 0, Buffer.alloc(8))]));
  t.same(r.rst, [[1, H2_ERROR.PROTOCOL_ERROR]], 'a request without :path is reset with PROTOCOL_ERROR');
});

t.test('a client byte stream cut anywhere is read the same (frames split across and joined within reads)', async (t) => {
  const block = Buffer.from('838684', 'hex'); // POST, http, /
  const ping = Buffer.from('0123456789abcdef', 'hex');
  const input = Buffer.concat([
    H2_PREFACE, h2Frame(4, 0, 0),
    h2Frame(1, 0x4, 1, block), h2Frame(0, 0x8, 1, Buffer.concat([Buffer.from([3]), Buffer.from('hel'), Buffer.alloc(3)])),
    h2Frame(0, 0x1, 1, Buffer.from('lo')), h2Frame(6, 0, 0, ping.subarray(0, 8)),
    h2Frame(1, 0x1 | 0x4, 3, Buffer.from('828684', 'hex')), h2Frame(8, 0, 0, Buffer.from('00001000', 'hex')),
  ]);
  /** run feeds the input cut at `cuts`; returns what the session did, and all it wrote (batching aside). */
  const run = async (cuts: number[]): Promise<string> => {
    const events: string[] = [];
    const out: Buffer[] = [];
    const listeners: { data?: (c: Buffer) => void } = {};
    const transport = {
      writeRecords: (parts: readonly Uint8Array[]) => { out.push(Buffer.concat(parts)); },
      on: (event: string, fn: (c: Buffer) => void) => { if (event === 'data') listeners.data = fn; },
      end: () => events.push('end'),
      destroy: () => events.push('destroy'),
      destroyed: false,
      sendBacklog: () => 0,
    } as unknown as H2Transport;
    new H2Session(transport, {
      onStream: (s) => { events.push(`stream ${s.id} ${s.method} ${s.path}`); void s.body().then((b) => { events.push(`body ${b}`); s.end(b); }); },
      onError: (e) => events.push(`error ${e.code}`),
    });
    let at = 0;
    for (const cut of [...cuts, input.length]) {
      listeners.data!(input.subarray(at, cut));
      at = cut;
      await new Promise((r) => setImmediate(r));
    }
    // Frames written: the same set whatever the cuts (their order across writes follows when bodies complete).
    const bytes = Buffer.concat(out);
    const frames: string[] = [];
    for (let f = 0; f + 9 <= bytes.length; f += 9 + bytes.readUIntBE(f, 3)) frames.push(bytes.subarray(f, f + 9 + bytes.readUIntBE(f, 3)).toString('hex'));
    return `${events.sort().join('\n')}\nwrote ${frames.sort().join(' ')}`;
  };
  const whole = await run([]);
  t.match(whole, /body \nbody hello\nstream 1 POST \/\nstream 3 GET \//, 'two requests, the first with a padded body in two frames');
  t.match(whole, / 0000080601000000000123456789abcdef/, 'the PING is acknowledged');
  t.match(whole, / 00000500010000000168656c6c6f/, 'the body is sent back');
  let seed = 7;
  const rand = (n: number) => { seed = (seed * 1103515245 + 12345) % 2 ** 31; return seed % n; };
  let same = 0;
  for (let k = 0; k < 300; k++) {
    const cuts = [...new Set(Array.from({ length: 1 + rand(12) }, () => 1 + rand(input.length - 1)))].sort((a, b) => a - b);
    if ((await run(cuts)) === whole) same++;
  }
  t.equal(same, 300, 'every one of 300 cuttings gives the same requests and replies');
  for (let cut = 1; cut < input.length; cut++) {
    if ((await run([cut])) !== whole) { t.fail(`cut at byte ${cut} differs`); break; }
  }
});

t.test('what the client\'s windows hold back waits, in order, and goes once the windows open', async (t) => {
  const body = Buffer.from(Array.from({ length: 100 }, (_, i) => i));
  const { port } = await serve(t, (s) => { s.write(body.subarray(0, 60)); s.end(body.subarray(60)); });
  const socket = connect(port, '127.0.0.1');
  t.teardown(() => socket.destroy());
  let got = Buffer.alloc(0);
  socket.on('data', (d: Buffer) => { got = Buffer.concat([got, d]); });
  const frames = () => {
    const out: Array<{ type: number; flags: number; id: number; payload: Buffer }> = [];
    for (let at = 0; at + 9 <= got.length;) {
      const len = got.readUIntBE(at, 3);
      if (at + 9 + len > got.length) break;
      out.push({ type: got[at + 3]!, flags: got[at + 4]!, id: got.readUInt32BE(at + 5), payload: got.subarray(at + 9, at + 9 + len) });
      at += 9 + len;
    }
    return out;
  };
  const data = () => Buffer.concat(frames().filter((f) => f.type === 0 && f.id === 1).map((f) => f.payload));
  const ended = () => frames().some((f) => f.type === 0 && f.id === 1 && (f.flags & 1));
  const settle = () => new Promise((r) => setTimeout(r, 100));
  const setting = (key: number, value: number) => { const p = Buffer.alloc(6); p.writeUInt16BE(key); p.writeUInt32BE(value, 2); return h2Frame(4, 0, 0, p); };
  const win = (id: number, inc: number) => { const p = Buffer.alloc(4); p.writeUInt32BE(inc); return h2Frame(8, 0, id, p); };

  // A stream window of 10 bytes: the first 10 go, the other 90 wait.
  socket.write(Buffer.concat([H2_PREFACE, setting(4, 10), h2Frame(1, 0x5, 1, Buffer.from('828684', 'hex'))]));
  await settle();
  t.same(data(), body.subarray(0, 10), 'the first 10 bytes, as the stream window allows');
  t.notOk(ended(), 'not ended while bytes wait');
  socket.write(win(1, 25));
  await settle();
  t.same(data(), body.subarray(0, 35), 'a stream WINDOW_UPDATE of 25 lets 25 more go, across the two writes');
  // Lowering the initial window makes the stream's window negative: nothing more goes until it is above zero.
  socket.write(setting(4, 0));
  socket.write(win(1, 5));
  await settle();
  t.same(data(), body.subarray(0, 35), 'a window lowered by SETTINGS below zero holds everything back');
  socket.write(win(1, 1000));
  await settle();
  t.same(data(), body, 'the rest, in order, once the window opens');
  t.ok(ended(), 'and END_STREAM with the last byte');
});

t.test('a message written in pieces goes out in DATA frames that span them, held back by the windows, in order', async (t) => {
  // A map message is written as its length prefix and frames (WireMessage), not joined: DATA frames carry as many
  // bytes as the frame size and windows allow, whatever piece they come from.
  const pieces = [4, 3000, 10, 20_000, 1, 0, 7].map((n, k) => Buffer.alloc(n, k + 1));
  const last = [Buffer.alloc(5, 9), Buffer.alloc(700, 10)];
  const body = Buffer.concat([...pieces, ...last]);
  const { port } = await serve(t, (s) => { s.write(pieces); s.end(last); });
  const socket = connect(port, '127.0.0.1');
  t.teardown(() => socket.destroy());
  let got = Buffer.alloc(0);
  socket.on('data', (d: Buffer) => { got = Buffer.concat([got, d]); });
  const dataFrames = () => {
    const out: Array<{ flags: number; payload: Buffer }> = [];
    for (let at = 0; at + 9 <= got.length;) {
      const len = got.readUIntBE(at, 3);
      if (at + 9 + len > got.length) break;
      if (got[at + 3] === 0 && got.readUInt32BE(at + 5) === 1) out.push({ flags: got[at + 4]!, payload: got.subarray(at + 9, at + 9 + len) });
      at += 9 + len;
    }
    return out;
  };
  const settle = () => new Promise((r) => setTimeout(r, 100));
  const setting = (key: number, value: number) => { const p = Buffer.alloc(6); p.writeUInt16BE(key); p.writeUInt32BE(value, 2); return h2Frame(4, 0, 0, p); };
  const win = (id: number, inc: number) => { const p = Buffer.alloc(4); p.writeUInt32BE(inc); return h2Frame(8, 0, id, p); };
  socket.write(Buffer.concat([H2_PREFACE, setting(4, 3010), h2Frame(1, 0x5, 1, Buffer.from('828684', 'hex'))]));
  await settle();
  t.same(dataFrames().map((f) => f.payload.length), [3010], 'one frame of 3,010 bytes across the first three pieces, as the window allows');
  t.same(Buffer.concat(dataFrames().map((f) => f.payload)), body.subarray(0, 3010));
  socket.write(win(1, 100_000));
  await settle();
  const frames = dataFrames();
  t.same(frames.map((f) => f.payload.length), [3010, 16_384, body.length - 3010 - 16_384], 'then frames of the largest size, across pieces');
  t.same(Buffer.concat(frames.map((f) => f.payload)), body, 'every byte, in order');
  t.equal(frames.at(-1)!.flags & 1, 1, 'END_STREAM with the last byte');
});
