// A map message's body may hold several zstd frames (the server compresses a part many sessions share once, see
// core's frameSegments); Tailscale's client decodes them all, one after another. zstdFrameLength finds where each
// ends (RFC 8878 §3.1), whatever blocks, header fields and checksum it has.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { constants, zstdCompressSync } from 'node:zlib';
import { MapFrameDecoder, PlanRng, setSkippedMembers, zstdDecompress, zstdDecompressText, zstdFrameLength } from '../src/index.js';

const compress = (data: Buffer, params: Record<number, number> = {}): Buffer =>
  zstdCompressSync(data, { params: { [constants.ZSTD_c_compressionLevel]: 1, ...params } });

/** skippable is a skippable frame (magic 0x184D2A5?, u32 size, payload): it decodes to nothing. */
function skippable(payload: Buffer): Buffer {
  const head = Buffer.alloc(8);
  head.writeUInt32LE(0x184d2a53, 0);
  head.writeUInt32LE(payload.length, 4);
  return Buffer.concat([head, payload]);
}

const pieces: Array<[string, Buffer, Record<number, number>?]> = [
  ['JSON text', Buffer.from(JSON.stringify({ PeersChanged: Array.from({ length: 40 }, (_, i) => ({ ID: i, Key: `nodekey:${'ab'.repeat(32)}` })) }))],
  ['incompressible bytes (raw blocks)', randomBytes(5000)],
  ['one byte repeated (an RLE block)', Buffer.alloc(300_000, 0x61)],
  ['with a checksum', Buffer.from('{"Domain":"example.com"}'), { [constants.ZSTD_c_checksumFlag]: 1 }],
  ['without a content size', Buffer.from('{"KeepAlive":true}'), { [constants.ZSTD_c_contentSizeFlag]: 0 }],
  ['larger than one block (128 KiB)', Buffer.from('x'.repeat(50) + randomBytes(200_000).toString('hex'))],
  ['empty', Buffer.alloc(0)],
];

t.test('each frame\'s length is found, alone and followed by others', async (t) => {
  for (const [what, data, params] of pieces) {
    const f = compress(data, params);
    t.equal(zstdFrameLength(f), f.length, what);
    t.equal(zstdFrameLength(Buffer.concat([f, compress(Buffer.from('tail'))])), f.length, `${what}, followed by another frame`);
    t.equal(zstdFrameLength(f.subarray(0, f.length - 1)), undefined, `${what}, cut short`);
  }
  const s = skippable(Buffer.from('metadata'));
  t.equal(zstdFrameLength(s), s.length, 'a skippable frame');
  t.equal(zstdFrameLength(Buffer.from('{"not":"zstd"}')), undefined, 'not a frame');
});

t.test('a body of several frames decodes to their contents one after another', async (t) => {
  const frames = pieces.map(([, data, params]) => compress(data, params));
  const body = Buffer.concat([frames[0]!, skippable(Buffer.from('x')), ...frames.slice(1)]);
  t.ok(zstdDecompress(body).equals(Buffer.concat(pieces.map(([, data]) => data))), 'every frame, in order, the skippable one adding nothing');
  const json = ['{"PeersChanged":[', '{"ID":1},{"ID":2}', '],"Domain":"a"}'].map((p) => compress(Buffer.from(p)));
  t.same(JSON.parse(zstdDecompress(Buffer.concat(json)).toString()), { PeersChanged: [{ ID: 1 }, { ID: 2 }], Domain: 'a' }, 'a message cut into frames mid-JSON');
  t.ok(zstdDecompress(frames[0]!).equals(pieces[0]![1]), 'a single frame, as before');
  const text = Buffer.from('{"Name":"café-ü-😀"}');
  const cut = [text.subarray(0, 13), text.subarray(13, 20), text.subarray(20)].map((p) => compress(p)); // inside 'é' and '😀'
  t.equal(zstdDecompressText(Buffer.concat(cut)), text.toString(), 'as text: a character cut between frames joins up');
  t.equal(zstdDecompressText(frames[0]!), pieces[0]![1].toString(), 'as text: a single frame');
  t.throws(() => zstdDecompress(Buffer.concat([frames[0]!, frames[1]!.subarray(0, 20)])), /cut short/, 'a body whose last frame is cut short is refused');
});

// A message the server cuts around a large shared part: its own text, the shared members as a frame of their own,
// the rest of its own text. The decoder parses the shared frame once for every message holding it (decodeFrame),
// and whatever it does must come out as JSON.parse of the whole text would: the same value, or an error.
const hex = (rng: PlanRng, n: number): string => Array.from({ length: n }, () => rng.int(16).toString(16)).join('');
const peerList = (rng: PlanRng, key: string): string =>
  `"${key}":[${Array.from({ length: 8 + rng.int(12) }, (_, i) => JSON.stringify({ ID: i, Key: `nodekey:${hex(rng, 64)}`, Name: `d${i}.é😀 x` })).join(',')}]`;
const ownMember = (rng: PlanRng, key: string): string =>
  rng.pick([`"${key}":${rng.int(1000)}`, `"${key}":{"a":[1,{"b":"} ] \\" ,{"}],"c":"  x"}`, `"${key}":"ü 😀, {"`, `"${key}":[]`]);

/** raw is a zstd frame holding bytes uncompressed in one raw block, as the server sends short text (rawFrame). */
function raw(bytes: Buffer): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt32LE(0xfd2fb528, 0);
  head[4] = 0b1010_0000; // single segment, 4-byte content size
  head.writeUInt32LE(bytes.length, 5);
  head.writeUIntLE((bytes.length << 3) | 1, 9, 3); // last block, raw
  return Buffer.concat([head, bytes]);
}

/** cutText cuts a text into frames at random places, inside strings and characters too, some of them raw. */
function cutText(rng: PlanRng, text: string): Buffer[] {
  const bytes = Buffer.from(text);
  if (!bytes.length) return [compress(bytes)];
  const out: Buffer[] = [];
  let at = 0;
  while (at < bytes.length) {
    const n = rng.chance(0.5) ? bytes.length - at : 1 + rng.int(bytes.length - at);
    const piece = bytes.subarray(at, at + n);
    out.push(rng.chance(0.3) ? raw(piece) : compress(piece));
    at += n;
  }
  return out;
}

/** body is the length-prefixed message of these frames, as one map frame on the stream. */
function framed(frames: Buffer[]): Buffer {
  const body = Buffer.concat(frames);
  const head = Buffer.alloc(4);
  head.writeUInt32LE(body.length, 0);
  return Buffer.concat([head, body]);
}

const decodeOne = (frames: Buffer[]): unknown => new MapFrameDecoder().push(framed(frames))[0];
const wholeOf = (frames: Buffer[]): string => zstdDecompressText(Buffer.concat(frames));

/**
 * wholeOrRefused is the frames' whole text and what JSON.parse makes of it; when that is nothing, it checks that the
 * decoder refuses the message too (expected undefined).
 */
function wholeOrRefused(t: Test, frames: Buffer[], what: string): { text: string; expected: unknown } {
  const text = wholeOf(frames);
  let expected: unknown;
  try { expected = JSON.parse(text); } catch { expected = undefined; }
  if (expected === undefined) t.throws(() => decodeOne(frames), /not valid JSON/, `${what}: refused as its whole text is`);
  return { text, expected };
}

t.test('a message of own text around shared member frames decodes as its whole text parses', async (t) => {
  let checked = 0, refused = 0, shared = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const rng = new PlanRng(seed);
    // Members in order; some are shared lists (a frame each), the rest own text cut anywhere.
    const members = Array.from({ length: 1 + rng.int(5) }, (_, i) => (rng.chance(0.5) ? { shared: true, text: peerList(rng, `L${i}`) } : { shared: false, text: ownMember(rng, `o${i}`) }));
    // Damage at a cut now and then: what the whole text then is, the decoder must say.
    const damage = rng.chance(0.3) ? rng.pick(['comma-before', 'comma-after', 'no-comma', 'nested', 'duplicate', 'trailing']) : '';
    const frames: Buffer[] = [];
    let own = '{';
    members.forEach((m, i) => {
      let sep = i ? ',' : '';
      if (damage === 'comma-before' && m.shared) sep += ',';
      if (damage === 'no-comma' && m.shared && i) sep = '';
      if (m.shared) {
        own += sep;
        if (damage === 'nested' && m.shared) own += '"n":{';
        frames.push(...cutText(rng, own));
        frames.push(compress(Buffer.from(m.text)));
        own = damage === 'nested' ? '}' : '';
        if (damage === 'comma-after') own += ',';
        if (damage === 'duplicate') own += `,${m.text.slice(0, m.text.indexOf(':'))}:1`;
      } else own += sep + m.text;
    });
    own += damage === 'trailing' ? ',}' : '}';
    frames.push(...cutText(rng, own));
    const { text, expected } = wholeOrRefused(t, frames, `seed ${seed} (${damage})`);
    if (expected === undefined) {
      refused++;
    } else {
      const got = decodeOne(frames) as Record<string, unknown>;
      t.same(got, expected, `seed ${seed} (${damage || 'intact'}): ${text.length} characters in ${frames.length} frames`);
      checked++;
      // Another message around the same shared frames gets the very lists this one got.
      if (!damage && members.some((m) => m.shared)) {
        const first = zstdDecompress(frames[0]!); // '{' and whatever own text came with it
        const other = decodeOne([compress(Buffer.concat([Buffer.from('{"Other":1,'), first.subarray(1)])), ...frames.slice(1)]) as Record<string, unknown>;
        if (other && members.every((m) => !m.shared || got[m.text.slice(1, m.text.indexOf('"', 1))] === other[m.text.slice(1, m.text.indexOf('"', 1))])) shared++;
      }
    }
  }
  t.ok(checked > 150 && refused > 20, `both kinds seen (${checked} decoded, ${refused} refused)`);
  t.ok(shared > 80, `messages sharing frames shared their lists (${shared})`);
});

t.test('messages holding the same shared frame share its parsed members, frozen', async (t) => {
  const rng = new PlanRng(7);
  const list = compress(Buffer.from(peerList(rng, 'PeersChanged')));
  t.ok(list.length >= 256, 'large enough to be looked up as shared');
  const a = decodeOne([compress(Buffer.from('{"PacketFilters":{"a0":[]},')), list, compress(Buffer.from('}'))]) as Record<string, Array<{ ID: number }>>;
  const b = decodeOne([compress(Buffer.from('{')), list, compress(Buffer.from(',"Domain":"x"}'))]) as Record<string, Array<{ ID: number }>>;
  t.same(new Set(Object.keys(a)), new Set(['PacketFilters', 'PeersChanged']));
  t.same(new Set(Object.keys(b)), new Set(['Domain', 'PeersChanged']));
  t.equal(a.PeersChanged, b.PeersChanged, 'one parsed list for both messages');
  t.ok(Object.isFrozen(a.PeersChanged![0]), 'frozen, so no device changes what another holds');
  // Own text that stops inside a string with a comma in it, and picks up after the list with `,"}`: cut out, the
  // list would leave '{"A":"x,"}', valid; whole, the text is not.
  t.throws(() => decodeOne([compress(Buffer.from('{"A":"x,')), list, compress(Buffer.from(',"}'))]), /not valid JSON/, 'a list inside a string is no list');
  t.same((decodeOne([compress(Buffer.from('{"PeersChanged":1,')), list, compress(Buffer.from('}'))]) as Record<string, unknown>).PeersChanged, a.PeersChanged,
    'as JSON.parse does: the last of a repeated key wins');
});

t.test('raw frames are read in place, and a large text frame many messages hold decodes once, exactly', async (t) => {
  const text = Buffer.from('{"Domain":"é 😀"}');
  t.ok(zstdDecompress(raw(text)).equals(text), 'a raw frame holds its bytes');
  t.equal(zstdFrameLength(raw(text)), raw(text).length, 'and ends where its block does');
  t.ok(zstdDecompress(Buffer.concat([raw(text.subarray(0, 13)), compress(text.subarray(13))])).equals(text), 'beside a compressed frame, cut inside a character');
  const twoBlocks = raw(text);
  twoBlocks.writeUIntLE((0 << 3) | 0, 9, 3); // an empty raw block that is not the last, then the text
  const split = Buffer.concat([twoBlocks.subarray(0, 12), Buffer.from([(text.length << 3) | 1, 0, 0]), text]);
  t.ok(zstdDecompress(split).equals(text), 'two raw blocks: left to libzstd, same bytes');
  // A block of a filter rule's sources, as a frame of its own in every message of a flush that sends it, between
  // each session's own text; a second block of the same length ending alike must not be taken for it.
  const block = (last: string) => JSON.stringify(Array.from({ length: 40 }, (_, i) => `100.64.0.${i}`).concat(last));
  const a = compress(Buffer.from(block('100.64.9.1'))), b = compress(Buffer.from(block('100.64.9.2')));
  const message = (own: string, frame: Buffer) => decodeOne([raw(Buffer.from(`{"PacketFilters":{"${own}":[{"SrcIPs":`)), frame, raw(Buffer.from(`,"DstPorts":[{"IP":"${own}","Ports":{"First":1,"Last":1}}]}]}}`))]) as { PacketFilters: Record<string, Array<{ SrcIPs: string[] }>> };
  for (const [own, frame, last] of [['x', a, '100.64.9.1'], ['y', a, '100.64.9.1'], ['z', b, '100.64.9.2']] as const) {
    const got = message(own, frame);
    t.equal(got.PacketFilters[own]![0]!.SrcIPs.at(-1), last, `message ${own}: its own block's sources`);
    t.equal(got.PacketFilters[own]![0]!.SrcIPs.length, 41);
  }
});

t.test('a full map whose peers come in blocks of their own decodes as its whole text parses, each block parsed once', async (t) => {
  const peer = (rng: PlanRng, id: number): string => JSON.stringify({ ID: id, Key: `nodekey:${hex(rng, 64)}`, Name: `d${id}.é😀 x`, Hostinfo: { OS: '[{",' } });
  let checked = 0, refused = 0, sharedRuns = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const rng = new PlanRng(seed);
    // Peers in blocks (the server's PEER_BLOCK_IDS): some a frame of their own, some inline in the own text.
    const blocks = Array.from({ length: 1 + rng.int(5) }, (_, b) => ({
      framed: rng.chance(0.6),
      text: Array.from({ length: 6 + rng.int(10) }, (_, k) => peer(rng, b * 100 + k)).join(','),
    }));
    const damage = rng.chance(0.3) ? rng.pick(['no-comma', 'double-comma', 'nested', 'in-object', 'after-value', 'trailing-comma']) : '';
    const frames: Buffer[] = [];
    const runFrames: Buffer[] = [];
    let own = '{"Node":{"ID":1},';
    // Now and then a shared member list first (its comma is cut out of the own text before the peers' blocks).
    if (rng.chance(0.5)) {
      frames.push(...cutText(rng, own));
      frames.push(compress(Buffer.from(peerList(rng, 'UserProfiles'))));
      own = ',';
    }
    own += damage === 'nested' ? '"Deep":[[' : damage === 'in-object' ? '"Peers":{"x":[' : '"Peers":[';
    if (damage === 'after-value') own += '1 ';
    blocks.forEach((b, k) => {
      if (k) own += damage === 'no-comma' && b.framed ? '' : damage === 'double-comma' && b.framed ? ',,' : ',';
      if (!b.framed) { own += b.text; return; }
      frames.push(...cutText(rng, own));
      const f = compress(Buffer.from(b.text));
      frames.push(f);
      runFrames.push(f);
      own = '';
    });
    own += damage === 'trailing-comma' ? ',]' : ']';
    if (damage === 'nested' || damage === 'in-object') own += '}';
    own += ',"ControlTime":"2026-11-27T00:00:00Z"}';
    frames.push(...cutText(rng, own));
    const { text, expected } = wholeOrRefused(t, frames, `seed ${seed} (${damage})`);
    if (expected === undefined) {
      refused++;
      continue;
    }
    const got = decodeOne(frames) as { Peers?: Array<{ ID: number }> };
    t.same(got, expected, `seed ${seed} (${damage || 'intact'}): ${text.length} characters in ${frames.length} frames`);
    checked++;
    // Another joiner's map around the same block frames holds the very peer objects this one got.
    if (!damage && runFrames.length && got.Peers) {
      const other = decodeOne([compress(Buffer.from('{"Node":{"ID":2},"Peers":[')), ...runFrames.flatMap((f, k) => (k ? [raw(Buffer.from(',')), f] : [f])), raw(Buffer.from(']}'))]) as { Peers: Array<{ ID: number }> };
      const mine = new Map(got.Peers.map((p) => [p.ID, p]));
      if (other.Peers.length && other.Peers.every((p) => mine.get(p.ID) === p)) sharedRuns++;
    }
  }
  t.ok(checked > 150 && refused > 15, `both kinds seen (${checked} decoded, ${refused} refused)`);
  t.ok(sharedRuns > 80, `maps sharing block frames shared their peers (${sharedRuns})`);
});

t.test('a run mark the message holds itself does not take a block\'s place', async (t) => {
  const rng = new PlanRng(3);
  const block = compress(Buffer.from(Array.from({ length: 12 }, (_, i) => JSON.stringify({ ID: i, Key: `nodekey:${hex(rng, 64)}` })).join(',')));
  // The message lists, before the block, a string that reads like the mark of run 0.
  const frames = [compress(Buffer.from('{"Peers":["\\u0000headway-run:0",')), block, raw(Buffer.from(']}'))];
  const got = decodeOne(frames) as { Peers: unknown[] };
  t.same(got, JSON.parse(wholeOf(frames)), 'decoded as the whole text parses');
  t.equal(got.Peers[0], '\u0000headway-run:0', 'the string stays a string');
  t.equal(got.Peers.length, 13);
});

t.test('a block of a rule\'s sources in a frame of its own is parsed once for every message holding it', async (t) => {
  let checked = 0, refused = 0, shared = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const rng = new PlanRng(seed);
    // Blocks as the server cuts a rule's sources (filter-chunks): a JSON array of addresses, compressed once.
    const blocks = Array.from({ length: 1 + rng.int(4) }, (_, b) => compress(Buffer.from(JSON.stringify(
      Array.from({ length: 5 + rng.int(90) }, () => (rng.chance(0.5) ? `100.64.${b}.${rng.int(256)}` : `fd7a:115c:a1e0::${hex(rng, 4)}:${hex(rng, 4)}`))))));
    // Most are short: a block near a tailnet's edge holds a few addresses and compresses to less than 100 bytes.
    const damage = rng.chance(0.3) ? rng.pick(['in-array', 'no-colon', 'value-after', 'mark-in-text', 'not-array']) : '';
    const message = (own: string): Buffer[] => {
      const frames: Buffer[] = [];
      let text = `{"PacketFilters":{`;
      blocks.forEach((block, k) => {
        if (k) text += ',';
        text += `"${own}.${k}":[{"SrcIPs":`;
        if (damage === 'in-array' && k === 0) text += '[';
        if (damage === 'no-colon' && k === 0) text = text.slice(0, -1) + ',"x":1,';
        if (damage === 'mark-in-text' && k === 0) text += '"\\u0000headway-value:0","Other":';
        frames.push(...cutText(rng, text));
        frames.push(damage === 'not-array' && k === 0 ? compress(Buffer.from(`"${'x'.repeat(300)}"`)) : block);
        text = damage === 'value-after' && k === 0 ? ' 1' : '';
        if (damage === 'in-array' && k === 0) text += ']';
        text += `,"DstPorts":[{"IP":"100.64.9.${k}","Ports":{"First":22,"Last":22}}]}]`;
      });
      text += '},"ControlTime":"2026-11-27T00:00:00Z"}';
      frames.push(...cutText(rng, text));
      return frames;
    };
    const frames = message('a');
    const { text, expected } = wholeOrRefused(t, frames, `seed ${seed} (${damage})`);
    if (expected === undefined) { refused++; continue; }
    const got = decodeOne(frames) as { PacketFilters: Record<string, Array<{ SrcIPs: string[] }>> };
    t.same(got, expected, `seed ${seed} (${damage || 'intact'}): ${text.length} characters in ${frames.length} frames`);
    checked++;
    if (!damage) {
      // Another session's message around the same block frames holds the very same source lists, frozen.
      const other = decodeOne(message('b')) as typeof got;
      const mine = got.PacketFilters['a.0']![0]!.SrcIPs, theirs = other.PacketFilters['b.0']![0]!.SrcIPs;
      if (mine === theirs && Object.isFrozen(mine)) shared++;
    }
  }
  t.ok(checked > 200 && refused > 10, `both kinds seen (${checked} decoded, ${refused} refused)`);
  t.ok(shared > 150, `messages holding the same block frame shared its parsed sources (${shared})`);
});

t.test('own text in frames of a character or two, with blanks between tokens, still finds where shared frames go', async (t) => {
  // The decoder tests how the own text so far ends (`"name":`, `[` or `,`) from its last characters: a decoder that
  // looked only at the last frame (or kept too short an end) would miss a place spread over several.
  let cut = 0;
  for (let seed = 1; seed <= 60; seed++) {
    const rng = new PlanRng(seed);
    const block = compress(Buffer.from(JSON.stringify(Array.from({ length: 40 }, (_, k) => `100.64.${seed}.${k}`))));
    const list = compress(Buffer.from(peerList(rng, 'PeersChanged')));
    const blanks = (): string => ' \n\t'.slice(0, rng.int(4));
    const tiny = (text: string): Buffer[] => {
      const out: Buffer[] = [];
      for (let at = 0; at < text.length;) { const n = 1 + rng.int(2); out.push(raw(Buffer.from(text.slice(at, at + n)))); at += n; }
      return out;
    };
    const frames = [
      ...tiny(`{${blanks()}"Domain"${blanks()}:${blanks()}"example.com"${blanks()},${blanks()}`), list,
      // Right after a list comes its comma (a frame of blanks alone there is refused, and the body parsed whole).
      ...tiny(`,${blanks()}"PacketFilters"${blanks()}:${blanks()}{${blanks()}"a.0"${blanks()}:${blanks()}[{"SrcIPs"${blanks()}:${blanks()}`), block,
      ...tiny(`${blanks()},"DstPorts":[{"IP":"100.64.9.1","Ports":{"First":22,"Last":22}}]}]}${blanks()}}`),
    ];
    const { text, expected } = wholeOrRefused(t, frames, `seed ${seed}`);
    if (expected === undefined) { t.fail(`seed ${seed}: the whole text should parse: ${text}`); continue; }
    t.same(decodeOne(frames), expected, `seed ${seed}: ${text.length} characters in ${frames.length} frames`);
    // The same block in another message is the very same parsed array: it was cut out, not parsed in the own text.
    const again = decodeOne([...tiny(`{"PacketFilters":{"b.0":[{"SrcIPs":${blanks()}`), block, ...tiny(`,"DstPorts":[]}]}}`)]) as { PacketFilters: Record<string, Array<{ SrcIPs: unknown }>> };
    const got = decodeOne(frames) as typeof again;
    if (got.PacketFilters['a.0']![0]!.SrcIPs === again.PacketFilters['b.0']![0]!.SrcIPs) cut++;
  }
  t.equal(cut, 60, 'every block was cut out and shared, blanks and one-character frames notwithstanding');
});

t.test('a policy change\'s long message, hundreds of blocks between own pieces short and long, decodes as its whole text parses', async (t) => {
  // The decoder tests how the own text so far ends: right after pieces longer and shorter than what it looks at,
  // after blanks cut off across several pieces, after a block's mark, hundreds of times in one message.
  let cut = 0, total = 0;
  for (let seed = 1; seed <= 12; seed++) {
    const rng = new PlanRng(1000 + seed);
    const blocks = Array.from({ length: 200 + rng.int(200) }, (_, b) => compress(Buffer.from(JSON.stringify(
      Array.from({ length: 20 + rng.int(30) }, (_, k) => `100.${64 + (b >> 8)}.${b & 255}.${k}`)))));
    const list = compress(Buffer.from(peerList(rng, 'PeersChanged')));
    const pad = (): string => ' '.repeat(rng.int(3));
    const frames: Buffer[] = [];
    const own = (text: string): void => { for (const f of cutText(rng, text)) frames.push(rng.chance(0.2) ? raw(zstdDecompress(f)) : f); };
    // A list after blanks and a comma that come in frames of their own.
    own('{"Domain":"example.com"');
    frames.push(raw(Buffer.from(pad())), raw(Buffer.from(',')), raw(Buffer.from(` ${pad()}`)), list);
    own(`,${pad()}"PacketFilters":{`);
    blocks.forEach((block, k) => {
      // Destinations of every length: a few characters, or far more than the end the decoder keeps.
      const dsts = Array.from({ length: rng.int(6) }, (_, d) => `{"IP":"100.99.${k & 255}.${d}","Ports":{"First":${d},"Last":${d + rng.int(2000)}}}`).join(',');
      own(`${k ? ',' : ''}"r${k}":[{"SrcIPs":${pad()}`);
      frames.push(block);
      own(`${pad()},"DstPorts":[${dsts}]}]`);
    });
    own('}}');
    const { text, expected } = wholeOrRefused(t, frames, `seed ${seed}`);
    if (expected === undefined) { t.fail(`seed ${seed}: the whole text should parse`); continue; }
    const got = decodeOne(frames) as { PacketFilters: Record<string, Array<{ SrcIPs: unknown }>> };
    t.same(got, expected, `seed ${seed}: ${text.length} characters in ${frames.length} frames, ${blocks.length} blocks`);
    // Each block was cut out and parsed once: another message holding it gets the very same array.
    const again = decodeOne([compress(Buffer.from('{"PacketFilters":{"x":[{"SrcIPs":')), blocks[blocks.length - 1]!, compress(Buffer.from(',"DstPorts":[]}]}}'))]) as typeof got;
    total++;
    if (got.PacketFilters[`r${blocks.length - 1}`]![0]!.SrcIPs === again.PacketFilters.x![0]!.SrcIPs) cut++;
  }
  t.equal(cut, total, 'the last block of every message was cut out and shared');
});

t.test('skipped members are left out of what is decoded, with the shared blocks they held, and the rest is as parsed whole', async (t) => {
  setSkippedMembers(['PacketFilters', 'PacketFilter']);
  t.teardown(() => setSkippedMembers([]));
  let checked = 0;
  for (let seed = 1; seed <= 120; seed++) {
    const rng = new PlanRng(seed);
    const blocks = Array.from({ length: 1 + rng.int(3) }, () => compress(Buffer.from(JSON.stringify(
      Array.from({ length: 5 + rng.int(60) }, () => `100.64.${rng.int(4)}.${rng.int(256)}`)))));
    const frames: Buffer[] = [];
    // The filter sits first, last or between other members; some messages hold a shared peer list too.
    const where = rng.int(3);
    const list = rng.chance(0.5) ? peerList(rng, 'PeersChanged') : '';
    let text = where === 0 ? '{' : `{"Domain":"x\\"}{[","Node":{"ID":${seed}},`;
    text += '"PacketFilters":{';
    blocks.forEach((block, k) => {
      text += `${k ? ',' : ''}"r${k}":[{"SrcIPs":`;
      frames.push(...cutText(rng, text));
      frames.push(block);
      text = `,"DstPorts":[{"IP":"100.64.9.${k}","Ports":{"First":22,"Last":22}}]}]`;
    });
    text += '}';
    if (where !== 2) text += ',"ControlTime":"2026-11-27T00:00:00Z","PacketFilter":[{"SrcIPs":["*"]}]';
    if (list) {
      text += ',';
      frames.push(...cutText(rng, text));
      frames.push(compress(Buffer.from(list)));
      text = '';
    }
    text += '}';
    frames.push(...cutText(rng, text));
    const expected = JSON.parse(wholeOf(frames)) as Record<string, unknown>;
    delete expected.PacketFilters;
    delete expected.PacketFilter;
    t.same(decodeOne(frames), expected, `seed ${seed}: ${frames.length} frames`);
    checked++;
  }
  t.equal(checked, 120);
});
