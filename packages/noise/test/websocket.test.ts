import t, { type Test } from 'tap';
import { createHash } from 'node:crypto';
import { createServer, request } from 'node:http';
import { connect as http2Connect, createServer as createHttp2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { dialTs2021, generateKeyPair, handleTs2021Upgrade, startClientHandshake, websocketAccept, type NoiseConn } from '../src/index.js';

const control = generateKeyPair();

async function startServer(t: Test, onConnection: (conn: NoiseConn) => void): Promise<string> {
  const server = createServer((_req, res) => res.end());
  const conns: NoiseConn[] = [];
  server.on('upgrade', (req, socket, head) => {
    handleTs2021Upgrade(req, socket, head, {
      privateKey: control.privateKey,
      onConnection: (conn) => {
        conns.push(conn);
        onConnection(conn);
      },
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const c of conns) c.destroy();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

t.test('RFC 6455 accept value', async (t) => {
  t.equal(websocketAccept('dGhlIHNhbXBsZSBub25jZQ=='), 's3pPLMBiTxaQ9kYGzzhZRbK+xOo=');
});

t.test('ts2021 over WebSocket: handshake, large echo and HTTP/2', async (t) => {
  const h2 = createHttp2Server();
  h2.on('stream', (stream, headers) => {
    stream.respond({ ':status': 200 });
    stream.end(`hello ${headers[':path']}`);
  });
  t.teardown(() => h2.close());
  let mode: 'echo' | 'h2' = 'echo';
  const url = await startServer(t, (conn) => (mode === 'echo' ? conn.pipe(conn) : h2.emit('connection', conn)));
  const machine = generateKeyPair();
  const dial = () =>
    dialTs2021({ url, machinePrivateKey: machine.privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130, websocket: true, peekEarlyPayload: mode === 'h2' });

  const { conn } = await dial();
  const big = Buffer.alloc(70 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
  conn.write(big);
  const chunks: Buffer[] = [];
  let have = 0;
  await new Promise<void>((resolve) =>
    conn.on('data', (c: Buffer) => {
      chunks.push(c);
      have += c.length;
      if (have >= big.length) resolve();
    }),
  );
  const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');
  t.equal(sha(Buffer.concat(chunks)), sha(big), '70 KiB echoed intact over websocket');
  conn.destroy();

  mode = 'h2';
  const { conn: conn2, earlyPayload } = await dial();
  t.equal(earlyPayload, undefined, 'no early payload on the websocket path');
  const session = http2Connect('http://control.example', { createConnection: () => conn2 });
  t.teardown(() => session.destroy());
  const req = session.request({ ':path': '/machine/ws' });
  const body: Buffer[] = [];
  for await (const c of req) body.push(c as Buffer);
  t.equal(Buffer.concat(body).toString(), 'hello /machine/ws');
});

t.test('websocket variant refuses a wrong subprotocol and old clients', async (t) => {
  const url = await startServer(t, () => t.fail('no connection expected'));
  const hs = startClientHandshake({ machinePrivateKey: generateKeyPair().privateKey, controlPublicKey: control.publicKey, capabilityVersion: 130 });
  const status = await new Promise<{ code: number; body: string }>((resolve, reject) => {
    const req = request(`${url}/ts2021?X-Tailscale-Handshake=${encodeURIComponent(hs.initiation.toString('base64'))}`, {
      headers: { Upgrade: 'websocket', Connection: 'Upgrade', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Protocol': 'chat' },
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => resolve({ code: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(status.code, 400);
  t.match(status.body, /subprotocol must be tailscale-control-protocol/);
  await t.rejects(
    dialTs2021({ url, machinePrivateKey: generateKeyPair().privateKey, controlPublicKey: control.publicKey, capabilityVersion: 90, websocket: true }),
    /server error: "client capability version 90 is too old/,
  );
});
