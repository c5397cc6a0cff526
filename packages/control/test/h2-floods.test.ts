import t from 'tap';
import { H2_ERROR, H2Session, type H2SessionOptions, type H2Transport } from '../src/h2.js';
import { MAX_HEADER_FRAMES, MAX_QUEUED_REPLIES, RESETS, IDLE_FRAMES } from '../src/h2-limits.js';
import { HpackDecoder } from '../src/hpack.js';
import { h2Frame, H2_PREFACE } from '@headway/testkit';

// What a peer without credentials can make the control server's HTTP/2 do (a completed Noise handshake is free):
// each flood is sent to a session over an in-memory transport whose peer reads or does not, and the test asserts
// the connection ends with GOAWAY ENHANCE_YOUR_CALM after a bounded amount of work, counted, never timed.

const DATA = 0x0, HEADERS = 0x1, RST_STREAM = 0x3, SETTINGS = 0x4, PING = 0x6, GOAWAY = 0x7, CONTINUATION = 0x9;
const END_STREAM = 0x1, END_HEADERS = 0x4;
/** GET_ROOT is `:method GET`, `:scheme http`, `:path /` from HPACK's static table. */
const GET_ROOT = Buffer.from('828684', 'hex');


function rst(id: number): Buffer {
  const p = Buffer.alloc(4);
  p.writeUInt32BE(H2_ERROR.CANCEL);
  return h2Frame(RST_STREAM, 0, id, p);
}

/**
 * Peer is the far end of an in-memory transport. While `reading`, what the session writes is taken at once (no
 * backlog); otherwise it stays queued and counts as the transport's backlog, as on a socket whose reader stopped.
 */
class Peer {
  reading = true;
  backlog = 0;
  readonly out: Buffer[] = [];
  ended = false;
  streams = 0;
  readonly errors: number[] = [];
  private onData?: (chunk: Buffer) => void;
  readonly session: H2Session;

  constructor(opts: Partial<H2SessionOptions> = {}) {
    const transport = {
      writeRecords: (parts: readonly Uint8Array[]) => {
        const b = Buffer.concat(parts);
        this.out.push(b);
        if (!this.reading) this.backlog += b.length;
      },
      on: (event: string, fn: (chunk: Buffer) => void) => { if (event === 'data') this.onData = fn; },
      end: () => { this.ended = true; },
      destroy: () => { this.ended = true; },
      get destroyed() { return false; },
      sendBacklog: () => this.backlog,
    } as unknown as H2Transport;
    this.session = new H2Session(transport, {
      onStream: (s) => { this.streams++; s.end('ok'); },
      onError: (e) => this.errors.push(e.code),
      ...opts,
    });
    this.onData!(Buffer.concat([H2_PREFACE, h2Frame(SETTINGS, 0, 0)]));
  }

  /** send feeds bytes to the session and lets its writes of this tick go out. */
  async send(bytes: Buffer): Promise<void> {
    if (!this.ended) this.onData!(bytes);
    await new Promise((r) => setImmediate(r));
  }

  /** frames parses everything the session wrote into [type, flags, stream, payload]. */
  frames(): Array<[number, number, number, Buffer]> {
    const buf = Buffer.concat(this.out);
    const out: Array<[number, number, number, Buffer]> = [];
    for (let at = 0; at + 9 <= buf.length;) {
      const len = buf.readUIntBE(at, 3);
      out.push([buf[at + 3]!, buf[at + 4]!, buf.readUInt32BE(at + 5) & 0x7fffffff, buf.subarray(at + 9, at + 9 + len)]);
      at += 9 + len;
    }
    return out;
  }

  count(type: number, flags?: number): number {
    return this.frames().filter(([ty, fl]) => ty === type && (flags === undefined || (fl & flags) === flags)).length;
  }

  /** goaway is the error code of the GOAWAY the session sent, or undefined. */
  goaway(): number | undefined {
    const g = this.frames().find(([type]) => type === GOAWAY);
    return g ? g[3].readUInt32BE(4) : undefined;
  }

  bytesOut(): number {
    return this.out.reduce((n, b) => n + b.length, 0);
  }
}

/** A clock that moves a second on each reading: every budget is full again whenever it is asked. */
function generousClock(): () => number {
  let now = 0;
  return () => (now += 1000);
}

t.test('a CONTINUATION flood ends the connection after a bounded number of frames', async (t) => {
  // Empty CONTINUATION frames count no header bytes: only a frame count can stop them.
  const flood = new Peer();
  const frames = [h2Frame(HEADERS, 0, 1, GET_ROOT), ...Array.from({ length: 100_000 }, () => h2Frame(CONTINUATION, 0, 1))];
  await flood.send(Buffer.concat(frames.slice(0, MAX_HEADER_FRAMES + 1)));
  t.equal(flood.goaway(), H2_ERROR.ENHANCE_YOUR_CALM, `a header block in ${MAX_HEADER_FRAMES + 1} frames: GOAWAY ENHANCE_YOUR_CALM`);
  t.ok(flood.ended, 'the connection is ended');
  await flood.send(Buffer.concat(frames.slice(MAX_HEADER_FRAMES + 1)));
  t.equal(flood.streams, 0, 'no request came of it');

  // A block in as many frames as allowed is a request like any other.
  const fine = new Peer();
  await fine.send(Buffer.concat([
    h2Frame(HEADERS, END_STREAM, 1, GET_ROOT),
    ...Array.from({ length: MAX_HEADER_FRAMES - 2 }, () => h2Frame(CONTINUATION, 0, 1)),
    h2Frame(CONTINUATION, END_HEADERS, 1),
  ]));
  t.equal(fine.streams, 1, `a header block in ${MAX_HEADER_FRAMES} frames is served`);
  t.equal(fine.goaway(), undefined, 'and the connection stays');
});

/** bigEntry is a literal field with incremental indexing and a new name of `length` bytes: it enters the dynamic table. */
function bigEntry(length: number): Buffer {
  // 0x40: literal with incremental indexing, new name; the name's length as a 7-bit-prefix integer (not Huffman).
  const len: number[] = [0x7f];
  for (let v = length - 0x7f; ; v = Math.floor(v / 0x80)) { if (v >= 0x80) len.push((v & 0x7f) | 0x80); else { len.push(v); break; } }
  return Buffer.concat([Buffer.from([0x40, ...len]), Buffer.alloc(length, 'a'), Buffer.from([0x00])]);
}

t.test('an HPACK bomb (one big table entry indexed thousands of times) stops decoding early', async (t) => {
  // The decoder alone: decoding stops once the fields add up to the limit, after a handful of them.
  const d = new HpackDecoder();
  d.decode(bigEntry(4000), () => undefined);
  let fields = 0;
  const bomb = Buffer.alloc(61_000, 0xbe); // index 62: the newest dynamic entry, 4,032 bytes as a header list counts it
  t.throws(() => d.decode(bomb, () => { fields++; }, 64 * 1024), { code: H2_ERROR.ENHANCE_YOUR_CALM }, 'the bomb is refused');
  t.ok(fields <= 16, `decoding stopped after ${fields} fields of 61,000`);

  // Over the connection: the entry goes in with a first request, then the bomb comes in HEADERS and CONTINUATIONs.
  const p = new Peer();
  await p.send(h2Frame(HEADERS, END_STREAM | END_HEADERS, 1, Buffer.concat([GET_ROOT, bigEntry(4000)])));
  t.equal(p.streams, 1, 'the request that fills the table is served');
  const block = Buffer.concat([GET_ROOT, bomb]);
  const parts = [];
  for (let at = 0; at < block.length; at += 16_384) parts.push(block.subarray(at, at + 16_384));
  await p.send(Buffer.concat(parts.map((part, i) => h2Frame(i === 0 ? HEADERS : CONTINUATION, (i === 0 ? END_STREAM : 0) | (i === parts.length - 1 ? END_HEADERS : 0), 3, part))));
  t.equal(p.goaway(), H2_ERROR.ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM');
  t.equal(p.streams, 1, 'the bomb is not served');

  // A header list over SETTINGS_MAX_HEADER_LIST_SIZE but within what is decoded is a 431, and the connection goes on.
  const q = new Peer();
  await q.send(h2Frame(HEADERS, END_STREAM | END_HEADERS, 1, Buffer.concat([GET_ROOT, bigEntry(4000)])));
  await q.send(h2Frame(HEADERS, END_STREAM | END_HEADERS, 3, Buffer.concat([GET_ROOT, Buffer.alloc(5, 0xbe)])));
  const status = q.frames().filter(([type, , id]) => type === HEADERS && id === 3).map(([, , , block]) => block.toString('latin1'));
  t.match(status[0], /431/, 'five references to a 4,000-byte entry: 431');
  t.equal(q.goaway(), undefined, 'the connection stays');
});

for (const [name, frame, ack] of [
  ['PING', h2Frame(PING, 0, 0, Buffer.alloc(8, 7)), PING],
  ['SETTINGS', h2Frame(SETTINGS, 0, 0), SETTINGS],
] as const) {
  t.test(`${name} frames from a peer that never reads: the replies waiting are bounded`, async (t) => {
    // The budget of control frames refills at every frame here: only the replies' backlog can stop the flood.
    const p = new Peer({ now: generousClock() });
    await p.send(Buffer.alloc(0)); // the opening SETTINGS and its acknowledgement go out
    p.reading = false;
    const acksBefore = p.count(ack, 0x1);
    for (let i = 0; i < 50 && !p.ended; i++) await p.send(Buffer.concat(Array.from({ length: 100 }, () => frame)));
    t.equal(p.goaway(), H2_ERROR.ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM');
    t.ok(p.ended, 'the connection is ended');
    const acks = p.count(ack, 0x1) - acksBefore;
    t.equal(acks, MAX_QUEUED_REPLIES, `${MAX_QUEUED_REPLIES} acknowledgements queued, not 5,000`);
    t.ok(p.backlog < 40_000, `${p.backlog} bytes held for the peer`);

    // A peer that reads gets every acknowledgement.
    const r = new Peer({ now: generousClock() });
    await r.send(Buffer.alloc(0));
    const before = r.count(ack, 0x1);
    for (let i = 0; i < 50; i++) await r.send(Buffer.concat(Array.from({ length: 100 }, () => frame)));
    t.equal(r.count(ack, 0x1) - before, 5000, 'a reading peer: 5,000 acknowledged');
    t.equal(r.goaway(), undefined, 'and the connection stays');
  });
}

t.test('control frames past the per-connection budget end the connection, whether or not the peer reads', async (t) => {
  const p = new Peer({ now: () => 0 });
  await p.send(Buffer.concat(Array.from({ length: IDLE_FRAMES.burst + 500 }, () => h2Frame(PING, 0, 0, Buffer.alloc(8)))));
  t.equal(p.goaway(), H2_ERROR.ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM');
  // The client's SETTINGS after the preface spent one of the budget.
  t.equal(p.count(PING, 0x1), IDLE_FRAMES.burst - 1, 'the burst is answered, nothing past it');

  const empty = new Peer({ now: () => 0 });
  await empty.send(h2Frame(HEADERS, END_HEADERS, 1, Buffer.from('838684', 'hex'))); // POST with a body to come
  await empty.send(Buffer.concat(Array.from({ length: IDLE_FRAMES.burst + 10 }, () => h2Frame(DATA, 0, 1))));
  t.equal(empty.goaway(), H2_ERROR.ENHANCE_YOUR_CALM, 'empty DATA frames: GOAWAY ENHANCE_YOUR_CALM');

  // At a steady rate under the budget's refill, nothing is cut.
  let now = 0;
  const steady = new Peer({ now: () => now });
  for (let i = 0; i < 3000; i++) {
    now += 1000 / IDLE_FRAMES.rate;
    await steady.send(h2Frame(PING, 0, 0, Buffer.alloc(8)));
  }
  t.equal(steady.goaway(), undefined, `3,000 PINGs at ${IDLE_FRAMES.rate} a second: the connection stays`);
});

t.test('rapid reset: streams opened and reset past the budget end the connection', async (t) => {
  const p = new Peer({ now: () => 0 });
  const streams = 10_000;
  for (let k = 0; k < streams && !p.ended; k += 500) {
    const batch: Buffer[] = [];
    for (let i = k; i < k + 500; i++) batch.push(h2Frame(HEADERS, END_HEADERS, 2 * i + 1, GET_ROOT), rst(2 * i + 1));
    await p.send(Buffer.concat(batch));
  }
  t.equal(p.goaway(), H2_ERROR.ENHANCE_YOUR_CALM, 'GOAWAY ENHANCE_YOUR_CALM');
  t.ok(p.streams <= RESETS.burst + 1, `${p.streams} of ${streams} requests reached the server`);
  t.same(p.errors, [H2_ERROR.ENHANCE_YOUR_CALM], 'reported once');

  // A client that cancels a request now and then is not cut off.
  let now = 0;
  const calm = new Peer({ now: () => now });
  for (let i = 0; i < 3000; i++) {
    now += 1000 / RESETS.rate;
    await calm.send(Buffer.concat([h2Frame(HEADERS, END_HEADERS, 2 * i + 1, GET_ROOT), rst(2 * i + 1)]));
  }
  t.equal(calm.goaway(), undefined, `3,000 streams reset at ${RESETS.rate} a second: the connection stays`);
  t.equal(calm.streams, 3000, 'and every request was served');
});
