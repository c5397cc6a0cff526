import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import { connect as http2Connect, createServer as createHttp2Server } from 'node:http2';
import { connect as netConnect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import {
  acceptInitiation,
  CipherState,
  dialTs2021,
  fetchControlKey,
  formatKey,
  generateKeyPair,
  handleTs2021Upgrade,
  MAX_PLAINTEXT_PER_RECORD,
  NoiseConn,
  sealRecords,
  startClientHandshake,
  type Ts2021ConnectionInfo,
  type Ts2021ServerOptions,
} from '../src/index.js';

const control = generateKeyPair();

interface TestServer {
  url: string;
  server: Server;
  connections: Array<{ conn: NoiseConn; info: Ts2021ConnectionInfo }>;
  refusals: string[];
}

/** startServer runs a loopback control server whose Noise connections are handed to `onConnection`. */
async function startServer(
  t: Test,
  overrides: Partial<Ts2021ServerOptions> & { keyResponse?: object } = {},
): Promise<TestServer> {
  const connections: TestServer['connections'] = [];
  const refusals: string[] = [];
  const server = createServer((req, res) => {
    if (req.url?.startsWith('/key')) {
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(overrides.keyResponse ?? { publicKey: formatKey('mkey', control.publicKey) }));
      return;
    }
    res.statusCode = 404;
    res.end();
  });
  server.on('upgrade', (req, socket, head) => {
    handleTs2021Upgrade(req, socket, head, {
      privateKey: control.privateKey,
      onRefused: (reason) => refusals.push(reason),
      ...overrides,
      onConnection: (conn, info) => {
        connections.push({ conn, info });
        overrides.onConnection?.(conn, info);
      },
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  t.teardown(() => {
    for (const { conn } of connections) conn.destroy();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${port}`, server, connections, refusals };
}

function readExactly(stream: Duplex, n: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let have = 0;
    const onData = (c: Buffer): void => {
      chunks.push(c);
      have += c.length;
      if (have >= n) {
        stream.off('data', onData);
        stream.off('error', reject);
        const all = Buffer.concat(chunks);
        if (all.length > n) stream.unshift(all.subarray(n));
        resolve(all.subarray(0, n));
      }
    };
    stream.on('data', onData);
    stream.on('error', reject);
  });
}

const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

function rawUpgrade(url: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/ts2021`, { method: 'POST', headers });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, body: '' });
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('fetchControlKey reads /key and rejects a zero or malformed key', async (t) => {
  const good = await startServer(t);
  t.same(await fetchControlKey(good.url, 130), control.publicKey);
  const zero = await startServer(t, { keyResponse: { legacyPublicKey: 'mkey:' + '0'.repeat(64), publicKey: 'mkey:' + '0'.repeat(64) } });
  await t.rejects(fetchControlKey(zero.url, 130), /control server is too old; no noise key/);
  const bad = await startServer(t, { keyResponse: { publicKey: 'nodekey:' + '1'.repeat(64) } });
  await t.rejects(fetchControlKey(bad.url, 130), /invalid mkey key/);
});

t.test('an idle connection pins no 64 KiB pool slab for a 32-byte key: kept bytes own their memory', async (t) => {
  const machine = generateKeyPair();
  const srv = await startServer(t, { earlyPayload: () => ({ nodeKeyChallenge: 'chalpub:' + 'ab'.repeat(32) }), onConnection: (conn) => conn.pipe(conn) });
  const { conn } = await dialTs2021({ url: srv.url, machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 145 });
  t.teardown(() => conn.destroy());
  conn.write('x');
  t.equal((await readExactly(conn, 1)).toString(), 'x');
  const server = srv.connections[0]!.conn;
  for (const [name, b] of [['server handshakeHash', server.handshakeHash], ['server peerPublicKey', server.peerPublicKey!], ['client handshakeHash', conn.handshakeHash]] as const) {
    t.equal(b.buffer.byteLength, b.length, `${name} is backed by its own ${b.length} bytes, not a shared slab`);
  }
  // The cipher keys are private: a slab view passed in must not be what the state keeps.
  const slab = Buffer.alloc(4096);
  const key = slab.subarray(64, 96);
  const cs = new CipherState(key);
  key.fill(7);
  const sealed = new CipherState(Buffer.alloc(32)).seal(Buffer.from('k'));
  t.same(cs.open(sealed), Buffer.from('k'), 'CipherState keeps a copy of its key: changing the caller\'s bytes changes nothing');
});

t.test('handshake, early payload and echo both ways over loopback', async (t) => {
  const machine = generateKeyPair();
  const srv = await startServer(t, {
    earlyPayload: (info) => ({ nodeKeyChallenge: 'chalpub:' + 'ab'.repeat(32), seenVersion: info.capabilityVersion }),
    onConnection: (conn) => conn.pipe(conn), // echo
  });
  const { conn, earlyPayload } = await dialTs2021({
    url: srv.url,
    machinePrivateKey: machine.privateKey,
    controlPublicKey: control.publicKey,
    capabilityVersion: 145,
  });
  t.teardown(() => conn.destroy());
  t.same(earlyPayload, { nodeKeyChallenge: 'chalpub:' + 'ab'.repeat(32), seenVersion: 145 });
  t.equal(srv.connections.length, 1);
  t.same(srv.connections[0]!.info, { machineKey: formatKey('mkey', machine.publicKey), capabilityVersion: 145, source: '127.0.0.1', address: '127.0.0.1' });
  t.same(srv.connections[0]!.conn.handshakeHash, conn.handshakeHash, 'both sides agree on the handshake hash');

  conn.write('hello noise');
  t.equal((await readExactly(conn, 11)).toString(), 'hello noise');

  // Server-initiated bytes reach the client too (not only echoes).
  srv.connections[0]!.conn.write('from server');
  t.equal((await readExactly(conn, 11)).toString(), 'from server');

  for (const size of [MAX_PLAINTEXT_PER_RECORD, MAX_PLAINTEXT_PER_RECORD + 1, 10_000, 200 * 1024]) {
    const big = Buffer.alloc(size);
    for (let i = 0; i < size; i++) big[i] = (i * 31 + size) & 0xff;
    conn.write(big);
    const back = await readExactly(conn, size);
    t.equal(sha(back), sha(big), `${size}-byte write echoed intact`);
  }
});

t.test('clientAddress names the client a session is charged to and logged as', async (t) => {
  const machine = generateKeyPair();
  const srv = await startServer(t, {
    clientAddress: (req) => (req.url === '/ts2021' ? '2001:db8:1:2:3::9' : undefined),
    earlyPayload: () => ({ nodeKeyChallenge: 'chalpub:' + 'ab'.repeat(32) }),
  });
  const { conn } = await dialTs2021({ url: srv.url, machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 145 });
  t.teardown(() => conn.destroy());
  t.match(srv.connections[0]!.info, { address: '2001:db8:1:2:3::9', source: '2001:db8:1:2::/64' });
});

t.test('sealRecords splits into frames of at most 4096 bytes', async (t) => {
  const key = Buffer.alloc(32, 3);
  const frames = sealRecords(new CipherState(key), Buffer.alloc(10_000, 1));
  const sizes: number[] = [];
  for (let off = 0; off < frames.length; ) {
    t.equal(frames[off], 4, 'record type');
    const len = frames.readUInt16BE(off + 1);
    sizes.push(3 + len);
    off += 3 + len;
  }
  t.same(sizes, [4096, 4096, 10_000 - 2 * MAX_PLAINTEXT_PER_RECORD + 19]);
});

/** MemorySocket is a Duplex whose inbound bytes the test feeds by hand and whose outbound bytes it records. */
class MemorySocket extends Duplex {
  written: Buffer[] = [];
  override _read(): void {}
  override _write(chunk: Buffer, _e: BufferEncoding, cb: () => void): void {
    this.written.push(chunk);
    cb();
  }
}

function handshakePair() {
  const machine = generateKeyPair();
  const hs = startClientHandshake({ machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 });
  const accepted = acceptInitiation({ controlPrivateKey: control.privateKey, initiation: hs.initiation });
  return { client: hs.finish(accepted.response), server: accepted.keys };
}

t.test('records split across reads byte by byte, coalesced, and zero-length records', async (t) => {
  const { client, server } = handshakePair();
  const socket = new MemorySocket();
  const conn = new NoiseConn({ socket, keys: client });
  // A zero-length record is legal and must simply be skipped.
  const first = sealRecords(server.send, Buffer.from('first '));
  const empty = server.send.seal(Buffer.alloc(0));
  const emptyFrame = Buffer.concat([Buffer.from([4, 0, empty.length]), empty]);
  const rest = sealRecords(server.send, Buffer.from('second'));
  const stream = Buffer.concat([first, emptyFrame, rest]);
  const got = readExactly(conn, 12);
  for (let i = 0; i < stream.length; i++) socket.push(stream.subarray(i, i + 1));
  t.equal((await got).toString(), 'first second');
  conn.destroy();
});

t.test('corked writes are sealed as one run of records in one socket write, intact and in order', async (t) => {
  const { client, server } = handshakePair();
  const socket = new MemorySocket();
  const conn = new NoiseConn({ socket, keys: server });
  // HTTP/2 writes a frame header and its payload as separate chunks inside one cork.
  const chunks = [Buffer.from('header-9b'), Buffer.alloc(MAX_PLAINTEXT_PER_RECORD + 100, 7), Buffer.from('tail')];
  conn.cork();
  for (const c of chunks) conn.write(c);
  conn.uncork();
  await new Promise((r) => setImmediate(r));
  t.equal(socket.written.length, 1, 'one socket write for the corked batch');
  const wire = socket.written[0]!;
  const plain: Buffer[] = [];
  let records = 0;
  for (let off = 0; off < wire.length; records++) {
    t.equal(wire[off], 4, 'record type');
    const len = wire.readUInt16BE(off + 1);
    t.ok(3 + len <= 4096, 'record within the 4096-byte limit');
    plain.push(client.receive.open(wire.subarray(off + 3, off + 3 + len)));
    off += 3 + len;
  }
  t.equal(records, 2, 'the batch fills records instead of one per chunk');
  t.equal(Buffer.concat(plain).toString('hex'), Buffer.concat(chunks).toString('hex'), 'plaintext intact and in order');
  // A single write after the batch still uses the next nonce.
  conn.write(Buffer.from('next'));
  await new Promise((r) => setImmediate(r));
  const last = socket.written[1]!;
  t.equal(client.receive.open(last.subarray(3)).toString(), 'next');
  conn.destroy();
});

t.test('large writes reuse one sealed buffer only where the socket let go of it: a loaded TCP socket and a stream that keeps chunks', async (t) => {
  // writeRecords seals large output into a buffer kept for the process when a TCP socket takes it whole at once,
  // and gives a queued write (the reader stalled) that buffer for good. Two connections write in turn, one with a
  // reader that stalls now and then: every byte must arrive as written on both.
  const listener = createNetServer();
  await new Promise<void>((r) => listener.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => listener.close());
  const open = async () => {
    const { client, server } = handshakePair();
    const accepted = new Promise<Socket>((r) => listener.once('connection', r));
    const dialed = netConnect((listener.address() as AddressInfo).port, '127.0.0.1');
    await new Promise((r) => dialed.once('connect', r));
    const socket = await accepted;
    const receiver = new NoiseConn({ socket: dialed, keys: client });
    const got: Buffer[] = [];
    receiver.on('data', (c: Buffer) => got.push(c));
    return { socket, dialed, sender: new NoiseConn({ socket, keys: server }), receiver, got, sent: [] as Buffer[], queued: 0 };
  };
  const conns = [await open(), await open()];
  let seed = 7;
  const rand = (n: number) => { seed = (seed * 1103515245 + 12345) & 0x7fffffff; return seed % n; };
  for (let i = 0; i < 240; i++) {
    const c = conns[i % 2]!;
    // The first connection's reader stops for a while now and then, so its kernel buffers fill and its writes queue.
    if (i % 60 === 10) conns[0]!.dialed.pause();
    if (i % 60 === 40) conns[0]!.dialed.resume();
    const size = 4096 + rand(180_000);
    const text = Buffer.alloc(size, i & 0xff);
    for (let k = 0; k < 64; k++) text[rand(size)] = rand(256);
    // Parts as HTTP/2 gives them: a header and a payload, or one part.
    const parts = i % 4 < 2 ? [text.subarray(0, 9), text.subarray(9)] : [text];
    c.sender.writeRecords(parts);
    if (c.socket.writableLength > 0) c.queued++;
    c.sent.push(Buffer.from(text));
    if (i % 20 === 0) await new Promise((r) => setImmediate(r));
  }
  conns[0]!.dialed.resume();
  for (const [k, c] of conns.entries()) {
    const total = c.sent.reduce((n, b) => n + b.length, 0);
    for (let waited = 0; c.got.reduce((n, b) => n + b.length, 0) < total && waited < 500; waited++) await new Promise((r) => setTimeout(r, 10));
    t.equal(Buffer.concat(c.got).length, total, `connection ${k}: every byte arrived`);
    t.ok(Buffer.concat(c.got).equals(Buffer.concat(c.sent)), `connection ${k}: intact and in order`);
    c.sender.destroy(); c.receiver.destroy();
  }
  t.ok(conns[0]!.queued > 0, `${conns[0]!.queued} of 120 writes on the stalled connection were queued by its socket`);

  // A stream that keeps what it is given (as this MemorySocket does) gets a buffer of its own per write.
  const pair = handshakePair();
  const memory = new MemorySocket();
  const conn = new NoiseConn({ socket: memory, keys: pair.server });
  const texts = [Buffer.alloc(50_000, 1), Buffer.alloc(50_000, 2), Buffer.alloc(20_000, 3)];
  for (const x of texts) conn.writeRecords([x]);
  const plain: Buffer[] = [];
  for (const wire of memory.written) {
    for (let off = 0; off < wire.length;) {
      const len = wire.readUInt16BE(off + 1);
      plain.push(pair.client.receive.open(wire.subarray(off + 3, off + 3 + len)));
      off += 3 + len;
    }
  }
  t.ok(Buffer.concat(plain).equals(Buffer.concat(texts)), 'what the stream kept is what was written');
  conn.destroy();
});

t.test('the records of one read reach the reader as one chunk; those before a bad record still arrive', async (t) => {
  const { client, server } = handshakePair();
  const socket = new MemorySocket();
  const conn = new NoiseConn({ socket, keys: client });
  const chunks: Buffer[] = [];
  conn.on('data', (c: Buffer) => chunks.push(c));
  const text = Buffer.alloc(3 * MAX_PLAINTEXT_PER_RECORD + 10);
  for (let i = 0; i < text.length; i++) text[i] = i % 251;
  const wire = sealRecords(server.send, text);
  // All four records in one read, then a read ending inside a record and one finishing it.
  socket.push(wire);
  await new Promise((r) => setImmediate(r));
  t.equal(chunks.length, 1, 'four records, one chunk');
  t.ok(chunks[0]!.equals(text), 'intact and in order');
  const more = sealRecords(server.send, Buffer.from('after a split read'));
  socket.push(more.subarray(0, 7));
  socket.push(more.subarray(7));
  await new Promise((r) => setImmediate(r));
  t.equal(Buffer.concat(chunks.slice(1)).toString(), 'after a split read');
  // Two good records and a corrupted third in one read: the good ones are delivered, then the connection fails.
  const good = sealRecords(server.send, Buffer.alloc(MAX_PLAINTEXT_PER_RECORD + 5, 9));
  const bad = sealRecords(server.send, Buffer.from('bad'));
  bad[bad.length - 1]! ^= 0xff;
  const failed = new Promise<Error>((resolve) => conn.on('error', resolve));
  const before = chunks.length;
  socket.push(Buffer.concat([good, bad]));
  t.match((await failed).message, /decrypting noise record/);
  t.same(Buffer.concat(chunks.slice(before)), Buffer.alloc(MAX_PLAINTEXT_PER_RECORD + 5, 9), 'the records before it were delivered');
});

t.test('a corrupted record destroys the connection', async (t) => {
  const { client, server } = handshakePair();
  const socket = new MemorySocket();
  const conn = new NoiseConn({ socket, keys: client });
  const frame = sealRecords(server.send, Buffer.from('data'));
  frame[frame.length - 1]! ^= 0xff;
  const failed = new Promise<Error>((resolve) => conn.on('error', resolve));
  socket.push(frame);
  t.match((await failed).message, /decrypting noise record/);
  t.ok(socket.destroyed, 'underlying socket is closed');
});

t.test('an oversized frame header is rejected', async (t) => {
  const { client } = handshakePair();
  const socket = new MemorySocket();
  const conn = new NoiseConn({ socket, keys: client });
  const failed = new Promise<Error>((resolve) => conn.on('error', resolve));
  socket.push(Buffer.from([4, 0x10, 0x00]));
  t.match((await failed).message, /frame too large: 4099 bytes/);
});

t.test('malformed upgrade requests get 400 before any upgrade', async (t) => {
  const srv = await startServer(t);
  const bad = await rawUpgrade(srv.url, { Upgrade: 'tailscale-control-protocol', Connection: 'upgrade', 'X-Tailscale-Handshake': '!!!not base64!!!' });
  t.equal(bad.status, 400);
  t.match(bad.body, /not standard padded base64/);
  const short = await rawUpgrade(srv.url, { Upgrade: 'tailscale-control-protocol', Connection: 'upgrade', 'X-Tailscale-Handshake': Buffer.alloc(50).toString('base64') });
  t.equal(short.status, 400);
  t.match(short.body, /initiation is 50 bytes, expected 101/);
  const missing = await rawUpgrade(srv.url, { Upgrade: 'tailscale-control-protocol', Connection: 'upgrade' });
  t.equal(missing.status, 400);
  t.match(missing.body, /missing Tailscale handshake header/);
  const other = await rawUpgrade(srv.url, { Upgrade: 'h2c', Connection: 'upgrade', 'X-Tailscale-Handshake': 'AAAA' });
  t.equal(other.status, 400);
  t.match(other.body, /unknown next protocol "h2c"/);
  // The Upgrade token is matched case-insensitively on the server side.
  const machine = generateKeyPair();
  const hs = startClientHandshake({ machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 });
  const mixed = await rawUpgrade(srv.url, { Upgrade: 'Tailscale-Control-Protocol', Connection: 'upgrade', 'X-Tailscale-Handshake': hs.initiation.toString('base64') });
  t.equal(mixed.status, 101);
  t.equal(srv.connections.length, 1, 'no connection from the malformed requests');
});

t.test('a client with the wrong control key fails the handshake', async (t) => {
  const srv = await startServer(t);
  const machine = generateKeyPair();
  await t.rejects(
    dialTs2021({ url: srv.url, machinePrivateKey: machine.privateKey, controlPublicKey: generateKeyPair().publicKey, capabilityVersion: 130, timeoutMs: 3000 }),
    /connection closed during the noise handshake/,
  );
  t.equal(srv.connections.length, 0);
  t.match(srv.refusals, [/did not authenticate/]);
});

t.test('a too-old capability version is refused with an error frame', async (t) => {
  const srv = await startServer(t);
  const machine = generateKeyPair();
  const dial = (capabilityVersion: number) =>
    dialTs2021({ url: srv.url, machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion, timeoutMs: 3000 });
  await t.rejects(dial(100), /server error: "client capability version 100 is too old; this server requires at least 113/);
  t.equal(srv.connections.length, 0);
  const srv2 = await startServer(t, { minCapabilityVersion: 140 });
  await t.rejects(
    dialTs2021({ url: srv2.url, machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130, timeoutMs: 3000 }),
    /version 130 is too old; this server requires at least 140/,
  );
});

t.test('dialing a non-upgrading server reports the HTTP status', async (t) => {
  const server = createServer((_req, res) => {
    res.statusCode = 404;
    res.end('no such route');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  await t.rejects(
    dialTs2021({ url: `http://127.0.0.1:${port}`, machinePrivateKey: generateKeyPair().privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 }),
    /ts2021 upgrade refused: HTTP 404: no such route/,
  );
});

t.test('HTTP/2 runs inside the Noise channel', async (t) => {
  const h2 = createHttp2Server();
  h2.on('stream', (stream, headers) => {
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      stream.respond({ ':status': 200, 'content-type': 'application/json' });
      stream.end(JSON.stringify({ path: headers[':path'], body: Buffer.concat(chunks).toString() }));
    });
  });
  const srv = await startServer(t, {
    // Without an early payload the client's peek sees the server's HTTP/2 SETTINGS frame instead.
    onConnection: (conn) => h2.emit('connection', conn),
  });
  const machine = generateKeyPair();
  const { conn, earlyPayload } = await dialTs2021({ url: srv.url, machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 });
  t.equal(earlyPayload, undefined);
  const session = http2Connect('http://control.example', { createConnection: () => conn });
  t.teardown(() => {
    session.destroy();
    h2.close();
  });
  const req = session.request({ ':method': 'POST', ':path': '/machine/register', 'content-type': 'application/json' });
  req.end(JSON.stringify({ Version: 130 }).padEnd(9000, ' '));
  // Headers, body and end can arrive in one read (Node 24 delivers them in one tick), so the body is
  // collected from the start rather than after awaiting 'response' (a late for-await sees a closed stream).
  const statusP = new Promise<number>((resolve) => req.on('response', (h) => resolve(Number(h[':status']))));
  const bodyP = (async () => { const chunks: Buffer[] = []; for await (const c of req) chunks.push(c as Buffer); return Buffer.concat(chunks); })();
  const [status, body] = await Promise.all([statusP, bodyP]);
  const reply = JSON.parse(body.toString()) as { path: string; body: string };
  t.equal(status, 200);
  t.equal(reply.path, '/machine/register');
  t.same(JSON.parse(reply.body), { Version: 130 }, '9000-byte request body crossed several records');
});
