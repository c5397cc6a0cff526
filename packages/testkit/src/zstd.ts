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

/** zstdDecompress decodes one zstd frame (with or without a content-size header) with libzstd. */
export function zstdDecompress(data: Uint8Array): Buffer {
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
/** DECODED_CACHE_KEY_TAIL: a body is looked up by its length and last bytes, then compared whole (hashing it all cost more). */
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
    json = zstdDecompress(body).toString('utf8');
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
  const key = `${body.length}:${body.toString('latin1', Math.max(0, body.length - DECODED_CACHE_KEY_TAIL))}`;
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
