import { constants, zstdCompressSync, zstdDecompressSync } from 'node:zlib';
import { decompress as wasmDecompress, init as initWasmZstd } from '@bokuweb/zstd-wasm';

/**
 * WASM_MAX_BODY: frames up to this size are decoded with @bokuweb/zstd-wasm, larger ones with node:zlib. node:zlib
 * builds a stream and a native context per call (28 µs for a 79-byte patch, 36 µs for a 1.6 KB packet filter,
 * against 2 µs and 17 µs in WASM), and a virtual device receives mostly small frames; on a 21 KB full map node:zlib
 * is faster (125 µs against 229 µs).
 */
const WASM_MAX_BODY = 8 * 1024;

await initWasmZstd();

/**
 * zstdFrameLength is the length of the zstd frame (RFC 8878 §3.1) at the start of data, or undefined when it is
 * cut short or not a frame. A map message may hold several frames (the server compresses a part many sessions
 * share once, see frameSegments), and Tailscale's client decodes them all; neither node:zlib nor zstd-wasm reports
 * where a frame ends (node:zlib stops after the first, zstd-wasm sizes its output by the first frame's header).
 */
export function zstdFrameLength(data: Uint8Array): number | undefined {
  if (data.length < 8) return undefined;
  const magic = (data[0]! | (data[1]! << 8) | (data[2]! << 16) | (data[3]! << 24)) >>> 0;
  if ((magic & 0xfffffff0) === 0x184d2a50) {
    // A skippable frame: magic, a u32 little-endian size, that many bytes.
    const size = (data[4]! | (data[5]! << 8) | (data[6]! << 16) | (data[7]! << 24)) >>> 0;
    return 8 + size <= data.length ? 8 + size : undefined;
  }
  if (magic !== 0xfd2fb528) return undefined;
  const descriptor = data[4]!;
  const singleSegment = (descriptor >> 5) & 1;
  const fcsFlag = descriptor >> 6;
  const checksum = (descriptor >> 2) & 1;
  const dictionaryIdLength = [0, 1, 2, 4][descriptor & 3]!;
  const contentSizeLength = fcsFlag === 0 ? singleSegment : [0, 2, 4, 8][fcsFlag]!;
  let at = 5 + (singleSegment ? 0 : 1) + dictionaryIdLength + contentSizeLength;
  for (;;) {
    if (at + 3 > data.length) return undefined;
    const header = data[at]! | (data[at + 1]! << 8) | (data[at + 2]! << 16);
    const last = header & 1, type = (header >> 1) & 3, size = header >>> 3;
    if (type === 3) return undefined; // reserved block type
    at += 3 + (type === 1 ? 1 : size); // an RLE block holds one byte, repeated size times
    if (at > data.length) return undefined;
    if (last) break;
  }
  at += checksum ? 4 : 0;
  return at <= data.length ? at : undefined;
}

/** framesOf is a body of several zstd frames cut into its data frames (skippable ones left out), or undefined for one frame. */
function framesOf(data: Uint8Array): Uint8Array[] | undefined {
  const first = zstdFrameLength(data);
  if (first === undefined || first >= data.length) return undefined;
  const out: Uint8Array[] = [];
  for (let at = 0; at < data.length;) {
    const n = zstdFrameLength(data.subarray(at));
    if (n === undefined) throw new Error(`zstd frame at byte ${at} of ${data.length} is cut short or not a frame`);
    if (data[at + 3] !== 0x18) out.push(data.subarray(at, at + n)); // not a skippable frame
    at += n;
  }
  return out;
}

/** zstdDecompress decodes a zstd body: one frame, or several whose contents follow one another. */
export function zstdDecompress(data: Uint8Array): Buffer {
  const frames = framesOf(data);
  return frames ? Buffer.concat(frames.map(zstdDecompressOne)) : zstdDecompressOne(data);
}

/**
 * zstdDecompressText is zstdDecompress as UTF-8 text. A body of several frames is decoded frame by frame into the
 * text (a character cut between two frames joins up), without a buffer of the whole: in the benchmark's workers,
 * concatenating each message's decoded frames doubled its large short-lived buffers.
 */
export function zstdDecompressText(data: Uint8Array): string {
  const frames = framesOf(data);
  if (!frames) return zstdDecompressOne(data).toString('utf8');
  const utf8 = new TextDecoder();
  let text = '';
  for (const f of frames) text += utf8.decode(zstdDecompressOne(f), { stream: true });
  return text + utf8.decode();
}

/** zstdDecompressOne decodes one zstd frame (with or without a content-size header) with libzstd. */
function zstdDecompressOne(data: Uint8Array): Buffer {
  if (data.length <= WASM_MAX_BODY) {
    try {
      const out = wasmDecompress(data);
      return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    } catch {
      // No content size, or not zstd at all: node:zlib decodes the first and names what is wrong with the second.
    }
  }
  return zstdDecompressSync(data);
}

/** zstdCompress encodes data as one zstd frame at level 3 (zstd's default), as the server does. */
export function zstdCompress(data: Uint8Array): Buffer {
  return zstdCompressSync(data, { params: { [constants.ZSTD_c_compressionLevel]: 3 } });
}

/** MAX_MAP_FRAME_LENGTH bounds one framed MapResponse so a broken length prefix cannot exhaust memory. */
export const MAX_MAP_FRAME_LENGTH = 64 << 20;

/** encodeMapFrame frames a MapResponse as the server sends it: u32 little-endian length + zstd(JSON). */
export function encodeMapFrame(message: object): Buffer {
  const body = zstdCompress(Buffer.from(JSON.stringify(message), 'utf8'));
  const header = Buffer.alloc(4);
  header.writeUInt32LE(body.length, 0);
  return Buffer.concat([header, body]);
}

/**
 * DECODED_CACHE_ENTRIES bounds the process-wide cache of decoded frames. The server compresses a broadcast once
 * and sends every session the same bytes, so N virtual devices in one process would otherwise decompress and
 * parse the same body N times: node:zlib builds a fresh zstd context per call (~30-50 µs even for a 300-byte
 * delta), and N parsed copies of every delta made the load generator's garbage collector, not the server,
 * the bottleneck of a join burst. Devices that received the same bytes share one deeply frozen message (the
 * netmap code replaces what it changes, never edits a message; a write would throw).
 */
const DECODED_CACHE_ENTRIES = 512;
/** DECODED_CACHE_MAX_BODY: larger bodies (full maps, unique per device) are not worth keeping. */
const DECODED_CACHE_MAX_BODY = 16 * 1024;
/**
 * DECODED_CACHE_KEY_TAIL: a body is looked up by its length, its middle bytes and its last bytes, then compared whole
 * (hashing it all cost more). The middle matters for a body of several frames: its last frame is often a session's
 * few own bytes ('}'), the same in every message of a flush, and keys of length and tail alone collided and evicted
 * each other (the workers' CPU in a policy change at 5,000 devices went from 28 to 67 s).
 */
const DECODED_CACHE_KEY_TAIL = 24;
const decodedCache = new Map<string, { body: Buffer; value: unknown }>();

/** freezeShared: shared messages are deeply frozen (tests); a benchmark's load generator turns it off (setFreezeShared). */
let freezeShared = true;

/**
 * setFreezeShared turns the freezing of shared decoded messages on or off. Tests keep it on, so netmap code that
 * edits a message it shares with other devices throws; the benchmark's workers run that same code and turn it off,
 * since walking every object of every shared message cost them as much as parsing it.
 */
export function setFreezeShared(on: boolean): void {
  freezeShared = on;
}

function deepFreeze<T>(v: T): T {
  if (!freezeShared) return v;
  if (v && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/** parseBody decompresses and parses one frame body. */
function parseBody(body: Buffer): unknown {
  let json: string;
  try {
    json = zstdDecompressText(body);
  } catch (err) {
    throw new Error(`map frame is not valid zstd: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(json);
  } catch (err) {
    throw new Error(`map frame is not valid JSON: ${(err as Error).message}`);
  }
}

/** decodeBody is the message one frame body holds, shared (frozen) between devices that received the same bytes. */
function decodeBody(body: Buffer): unknown {
  if (body.length > DECODED_CACHE_MAX_BODY) return parseBody(body);
  const mid = body.length >> 1;
  const key = `${body.length}:${body.toString('latin1', mid, mid + DECODED_CACHE_KEY_TAIL)}:${body.toString('latin1', Math.max(0, body.length - DECODED_CACHE_KEY_TAIL))}`;
  const hit = decodedCache.get(key);
  if (hit && hit.body.equals(body)) return hit.value;
  const value = deepFreeze(parseBody(body));
  if (decodedCache.size >= DECODED_CACHE_ENTRIES) decodedCache.delete(decodedCache.keys().next().value!);
  decodedCache.set(key, { body: Buffer.from(body), value });
  return value;
}

/**
 * MapFrameDecoder turns a byte stream of framed MapResponses into JSON values, across arbitrary chunking.
 * Chunks are kept in a list until a whole frame is there, so a large map arriving in transport-record-sized
 * pieces is joined once rather than re-copied on every piece.
 */
export class MapFrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;

  /** push adds bytes and returns every message completed by them. */
  push(chunk: Buffer): unknown[] {
    if (chunk.length) { this.chunks.push(chunk); this.buffered += chunk.length; }
    const out: unknown[] = [];
    while (this.buffered >= 4) {
      const head = this.contiguous(4);
      const length = head.readUInt32LE(0);
      if (length > MAX_MAP_FRAME_LENGTH) throw new Error(`map frame length ${length} exceeds ${MAX_MAP_FRAME_LENGTH}`);
      if (this.buffered < 4 + length) break;
      const whole = this.contiguous(4 + length);
      const body = whole.subarray(4, 4 + length);
      this.consume(4 + length);
      out.push(decodeBody(body));
    }
    return out;
  }

  /** contiguous returns the first n buffered bytes as one buffer, merging leading chunks only when needed. */
  private contiguous(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks, this.buffered)];
    return this.chunks[0]!;
  }

  private consume(n: number): void {
    const first = this.chunks[0]!;
    if (first.length === n) this.chunks.shift();
    else this.chunks[0] = first.subarray(n);
    this.buffered -= n;
  }

  /** leftover is how many bytes of an incomplete frame are buffered (non-zero at stream end = truncated). */
  get leftover(): number {
    return this.buffered;
  }
}
