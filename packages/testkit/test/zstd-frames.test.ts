// A map message's body may hold several zstd frames (the server compresses a part many sessions share once, see
// core's frameSegments); Tailscale's client decodes them all, one after another. zstdFrameLength finds where each
// ends (RFC 8878 §3.1), whatever blocks, header fields and checksum it has.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { constants, zstdCompressSync } from 'node:zlib';
import { zstdDecompress, zstdDecompressText, zstdFrameLength } from '../src/index.js';

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
