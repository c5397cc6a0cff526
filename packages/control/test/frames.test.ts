// Map frames on the wire: u32 little-endian length, then zstd(JSON) (Node's own libzstd through @headway/aead's addon;
// without it the WASM libzstd up to WASM_MAX_INPUT, node:zlib's above) or the plain JSON. The real-client interop tests decode them end to end; this pins the
// frame header properties those clients rely on, with a map the size of a big tailnet.
import t from 'tap';
import { zstdDecompressSync } from 'node:zlib';
import { compress as wasmCompress, decompress as wasmDecompress } from '@bokuweb/zstd-wasm';
import { zstdDecompress, zstdFrameLength } from '@headway/testkit';
import { nativeZstdCompress } from '@headway/noise';
import { compressJson, frame, rawFrame, wasmCodec, ZSTD_WASM_READY, zstdWasmReady } from '../src/frames.js';
import { RAW_FRAME_MAX, WASM_MAX_INPUT } from '../src/fanout-knobs.js';

// zstd-wasm is called directly below to check the frames: instantiated once, as everything in the process does.
await zstdWasmReady();

const ZSTD_MAGIC = 0xfd2fb528;

/** zstdHeader reads a zstd frame header (RFC 8878 3.1.1.1): content size flag and window size. */
function zstdHeader(body: Buffer): { hasContentSize: boolean; window: number } {
  const fhd = body[4]!;
  const singleSegment = (fhd & 0x20) !== 0;
  const fcsFlag = fhd >> 6;
  const hasContentSize = singleSegment || fcsFlag !== 0;
  if (singleSegment) return { hasContentSize, window: 0 };
  const wd = body[5]!;
  const base = 2 ** (10 + (wd >> 3));
  return { hasContentSize, window: base + (base / 8) * (wd & 7) };
}

function bigMap(peers: number): string {
  return JSON.stringify({
    Peers: Array.from({ length: peers }, (_, i) => ({
      ID: i + 1,
      Key: `nodekey:${i.toString(16).padStart(64, '0')}`,
      Name: `node-${i}.example.headway.net.`,
      Addresses: [`100.64.${i >> 8}.${i & 255}/32`],
      Hostinfo: { OS: 'linux', Hostname: `node-${i}` },
    })),
  });
}

t.test('zstd frame: length prefix, one zstd frame with its content size, decodes to the JSON', async (t) => {
  const sizes = ['{"KeepAlive":true}', bigMap(10), bigMap(20_000)];
  // Either side of the codec switch: the last JSON the WASM codec writes and the first node:zlib writes.
  const near = (n: number) => `{"Pad":"${'x'.repeat(n - 10)}"}`;
  sizes.push(near(WASM_MAX_INPUT), near(WASM_MAX_INPUT + 1));
  t.equal(Buffer.byteLength(near(WASM_MAX_INPUT)), WASM_MAX_INPUT);
  for (const json of sizes) {
    const out = frame(json, true);
    const length = out.readUInt32LE(0);
    t.equal(length, out.length - 4, 'the prefix is the body length');
    const body = out.subarray(4);
    t.equal(body.readUInt32LE(0), ZSTD_MAGIC, 'a zstd frame');
    const header = zstdHeader(body);
    t.ok(header.hasContentSize, 'the header carries the decoded size');
    // Client decoders allocate the declared window: it must not ask for more than 8 MiB.
    t.ok(header.window <= 8 << 20, `window ${header.window} B`);
    t.equal(zstdDecompressSync(body).toString(), json);
    if (json.length > 1_000_000) t.comment(`${json.length} B of map JSON -> ${length} B zstd`);
  }
});

t.test('raw zstd frames: text kept as is, read by both libzstd builds, alone or among compressed frames', async (t) => {
  const short = '{"KeepAlive":true}';
  const body = frame(short, true).subarray(4);
  t.equal(body.readUInt32LE(0), ZSTD_MAGIC, 'a short message is still a zstd frame');
  t.ok(body.includes(Buffer.from(short)), 'holding its text uncompressed');
  t.equal(body.length, short.length + 12, 'magic, header with content size, one block header');
  t.ok(zstdHeader(body).hasContentSize, 'the header carries the decoded size');
  const below = Buffer.from('x'.repeat(RAW_FRAME_MAX - 1));
  t.ok(compressJson(below).length > below.length, `${below.length} B go raw`);
  t.ok(compressJson(Buffer.from('x'.repeat(RAW_FRAME_MAX))).length < 64, `${RAW_FRAME_MAX} B are compressed`);
  // Every size class of the block header, more than one block (128 KiB each), and nothing at all.
  const random = (n: number) => Buffer.from(Array.from({ length: n }, (_, i) => 32 + ((i * 7919 + (i >> 3)) % 95)));
  for (const text of [Buffer.alloc(0), random(1), random(255), random(70_000), random(128 * 1024), random(300_000)]) {
    const raw = rawFrame(text);
    t.same(zstdDecompressSync(raw), text, `${text.length} B: node:zlib decodes it`);
    t.same(Buffer.from(wasmDecompress(raw)), text, `${text.length} B: zstd-wasm decodes it`);
  }
  // A body of several frames, raw and compressed, decodes to their texts one after another (what a client reads;
  // node:zlib stops after the first frame, so the testkit's decoder walks them).
  const parts = ['{"PacketFilters":{"a0":[{"SrcIPs":', JSON.stringify(Array.from({ length: 400 }, (_, i) => `100.64.${i >> 8}.${i & 255}`)), '}]}}'];
  const frames = parts.map((p) => compressJson(Buffer.from(p)));
  t.same(frames.map((f) => zstdFrameLength(Buffer.concat([f, Buffer.alloc(8)]))), frames.map((f) => f.length), 'each frame ends where its header and blocks say');
  t.equal(zstdDecompress(Buffer.concat(frames)).toString(), parts.join(''));
});

t.test('uncompressed frame: the JSON as it is, after the length', async (t) => {
  const json = bigMap(3);
  const out = frame(json, false);
  t.equal(out.readUInt32LE(0), Buffer.byteLength(json));
  t.equal(out.subarray(4).toString(), json);
});

t.test('the reused compression context writes the bytes a fresh one does, call after call', async (t) => {
  // compressJson keeps one libzstd context (the addon's on Node's own zstd, or WASM's) for every frame: nothing of one
  // message may leak into the next. Both are libzstd at level 1 and write the same bytes.
  const texts = [bigMap(3), bigMap(40), `{"Pad":"${'y'.repeat(5000)}"}`, '{"PeersChangedPatch":[{"NodeID":7,"Online":true}],"Pad":"' + 'z'.repeat(300) + '"}', bigMap(3)];
  // The WASM codec (what compresses without the addon) is checked here whether or not the addon is built.
  const codecs: Array<[string, (text: Buffer) => Uint8Array]> = [['compressJson', compressJson], ['the WASM codec', await wasmCodec()]];
  for (const [name, compress] of codecs) {
    let calls = 0;
    for (let round = 0; round < 3; round++) {
      for (const json of [...texts].reverse().concat(texts)) {
        const text = Buffer.from(json);
        if (text.length < RAW_FRAME_MAX || text.length > WASM_MAX_INPUT) continue;
        const fresh = Buffer.from(wasmCompress(text, 1));
        const got = Buffer.from(compress(text));
        calls++;
        if (!got.equals(fresh)) { t.fail(`${name}, ${text.length} B, round ${round}: the frame differs from a fresh context's`); return; }
        t.equal(zstdDecompressSync(got).toString(), json);
      }
    }
    t.equal(calls, 30, `${name}: every text compressed`);
  }
});

t.test('map messages are compressed with the zstd Node links, through the addon, where it is built', async (t) => {
  // CI builds @headway/aead (scripts/build-sqlite.sh): there the addon must be what compresses.
  if (!nativeZstdCompress) {
    t.equal(process.env.CI === 'true', false, 'only outside CI may the addon be missing');
    t.comment('the aead addon is not built here: frames come from the WASM build and node:zlib');
    return;
  }
  for (const json of [bigMap(5), bigMap(300), bigMap(5000)]) {
    const text = Buffer.from(json);
    const got = Buffer.from(compressJson(text));
    t.ok(got.equals(nativeZstdCompress(text, 1)), `${text.length} B: the addon's frame`);
    t.equal(zstdDecompressSync(got).toString(), json, `${text.length} B: node:zlib decodes it`);
    t.equal(Buffer.from(wasmDecompress(got)).toString(), json, `${text.length} B: so does the WASM build`);
  }
});

t.test('zstd-wasm is instantiated once, however many parts of the process ask for it', async (t) => {
  // Its init() instantiates the module anew on every call and returns before the new instance is in place: a frame
  // made right after came out corrupt. The server and the testkit ask through one global promise (zstdWasmReady).
  const json = bigMap(40);
  const before = frame(json, true);
  const ready = zstdWasmReady();
  for (let round = 0; round < 3; round++) {
    t.equal(zstdWasmReady(), ready, 'the same instantiation');
    await zstdWasmReady();
    const after = frame(json, true);
    t.ok(after.equals(before), `asked again (${round + 1}): the same frame`);
    t.equal(zstdDecompressSync(after.subarray(4)).toString(), json, 'and it decodes to the map');
  }
  t.equal((globalThis as unknown as Record<symbol, unknown>)[ZSTD_WASM_READY], ready, 'under the name the testkit reads');
});
