import t from 'tap';
import { dialTs2021, fetchControlKey, generateKeyPair, type NoiseConn } from '@headway/noise';
import { h2Frame, H2_PREFACE } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

// HTTP/2 floods inside a real Noise session against the real server: no credentials are needed for any of them
// (a completed handshake is free). Each is bounded, and each must end the connection with GOAWAY
// ENHANCE_YOUR_CALM while the server keeps answering /health. Counts and closures, never timings.

const CAPVER = 130;
const HEADERS = 0x1, RST_STREAM = 0x3, SETTINGS = 0x4, PING = 0x6, GOAWAY = 0x7, CONTINUATION = 0x9;
const ENHANCE_YOUR_CALM = 0xb;
/** GET_ROOT: `:method GET`, `:scheme http`, `:path /` from HPACK's static table. */
const GET_ROOT = Buffer.from('828684', 'hex');


interface Outcome { closed: boolean; goaway?: number; responses: number }

/**
 * flood opens a Noise session, sends the preface and then `frames` in chunks, and reads what the server answers
 * until it closes the connection (or 30 s pass: then `closed` is false and the test fails).
 */
async function flood(s: TestServer, frames: Iterable<Buffer>): Promise<Outcome> {
  const controlPublicKey = await fetchControlKey(s.urls.http, CAPVER);
  const conn: NoiseConn = (await dialTs2021({ url: s.urls.http, machinePrivateKey: generateKeyPair().privateKey, controlPublicKey, capabilityVersion: CAPVER })).conn;
  conn.on('error', () => undefined);
  let buf = Buffer.alloc(0);
  conn.on('data', (d: Buffer) => { buf = Buffer.concat([buf, d]); });
  const closed = new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => { conn.destroy(); resolve(false); }, 30_000);
    conn.once('close', () => { clearTimeout(timer); resolve(true); });
  });
  conn.write(Buffer.concat([H2_PREFACE, h2Frame(SETTINGS, 0, 0)]));
  let chunk: Buffer[] = [];
  for (const f of frames) {
    if (conn.destroyed) break;
    chunk.push(f);
    if (chunk.length === 1000) { conn.write(Buffer.concat(chunk)); chunk = []; await new Promise((r) => setImmediate(r)); }
  }
  if (chunk.length && !conn.destroyed) conn.write(Buffer.concat(chunk));
  const out: Outcome = { closed: await closed, responses: 0 };
  for (let at = 0; at + 9 <= buf.length;) {
    const len = buf.readUIntBE(at, 3);
    const type = buf[at + 3];
    const id = buf.readUInt32BE(at + 5);
    if (type === GOAWAY) out.goaway = buf.readUInt32BE(at + 13);
    if (type === HEADERS && id % 2 === 1) out.responses++;
    at += 9 + len;
  }
  return out;
}

function* repeat(n: number, make: (i: number) => Buffer | Buffer[]): Iterable<Buffer> {
  for (let i = 0; i < n; i++) { const f = make(i); if (Array.isArray(f)) yield* f; else yield f; }
}

t.test('floods inside the tunnel end the connection; the server goes on serving', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const health = async () => (await fetch(`${s.urls.http}/health`)).status;

  const continuation = await flood(s, [h2Frame(HEADERS, 0, 1, GET_ROOT), ...repeat(100_000, () => h2Frame(CONTINUATION, 0, 1))]);
  t.ok(continuation.closed, '100,000 empty CONTINUATION frames: the connection is closed');
  t.equal(continuation.goaway, ENHANCE_YOUR_CALM, 'with GOAWAY ENHANCE_YOUR_CALM');

  const table = Buffer.concat([Buffer.from([0x40, 0x7f, 0xa1, 0x1e]), Buffer.alloc(4000, 'a'), Buffer.from([0x00])]); // a 4,000-byte name into the table
  const bomb = Buffer.concat([GET_ROOT, Buffer.alloc(61_000, 0xbe)]);
  const pieces = Array.from({ length: Math.ceil(bomb.length / 16_384) }, (_, i) => bomb.subarray(i * 16_384, (i + 1) * 16_384));
  const hpack = await flood(s, [
    h2Frame(HEADERS, 0x5, 1, Buffer.concat([GET_ROOT, table])),
    ...repeat(100, (k) => pieces.map((p, i) => h2Frame(i === 0 ? HEADERS : CONTINUATION, (i === 0 ? 0x1 : 0) | (i === pieces.length - 1 ? 0x4 : 0), 3 + 2 * k, p))),
  ]);
  t.ok(hpack.closed, 'HPACK bomb blocks: the connection is closed');
  t.equal(hpack.goaway, ENHANCE_YOUR_CALM, 'with GOAWAY ENHANCE_YOUR_CALM');
  t.ok(hpack.responses <= 1, 'no bomb was served');

  const pings = await flood(s, repeat(20_000, () => h2Frame(PING, 0, 0, Buffer.alloc(8))));
  t.ok(pings.closed, '20,000 PINGs: the connection is closed');
  t.equal(pings.goaway, ENHANCE_YOUR_CALM, 'with GOAWAY ENHANCE_YOUR_CALM');

  const settings = await flood(s, repeat(20_000, () => h2Frame(SETTINGS, 0, 0)));
  t.ok(settings.closed, '20,000 SETTINGS: the connection is closed');
  t.equal(settings.goaway, ENHANCE_YOUR_CALM, 'with GOAWAY ENHANCE_YOUR_CALM');

  const cancel = Buffer.from([0, 0, 0, 8]);
  const reset = await flood(s, repeat(10_000, (i) => [h2Frame(HEADERS, 0x4, 2 * i + 1, GET_ROOT), h2Frame(RST_STREAM, 0, 2 * i + 1, cancel)]));
  t.ok(reset.closed, 'rapid reset, 10,000 streams: the connection is closed');
  t.equal(reset.goaway, ENHANCE_YOUR_CALM, 'with GOAWAY ENHANCE_YOUR_CALM');
  t.ok(reset.responses < 2000, `${reset.responses} of 10,000 requests answered`);

  t.equal(await health(), 200, '/health answers after every flood');
});
