import { constants, zstdCompressSync } from 'node:zlib';
import { nativeZstdCompress } from '@headway/noise';
import { RAW_FRAME_MAX, SHARED_FRAME_MIN, WASM_MAX_INPUT, ZSTD_LEVEL } from './fanout-knobs.js';

/**
 * ZSTD_WASM_READY names, on globalThis, the one instantiation of zstd-wasm's module in this process. Its init()
 * instantiates the module anew on every call and resolves before the new instance is in place: a frame made in
 * that gap came out corrupt (a test calling init() again saw "Unknown frame descriptor"), and anything kept from
 * the previous instance (a compression context, once) points into memory no longer its own. The testkit, which
 * runs in one process with the server in tests, asks through the same name (testkit/src/zstd.ts). The one
 * compression context (CCTX) is made after that instantiation, in it, and nothing here instantiates the module again.
 */
export const ZSTD_WASM_READY = Symbol.for('headway.zstd-wasm.ready');

/** zstdWasmReady instantiates zstd-wasm's module the first time any part of the process asks, and never again. */
export function zstdWasmReady(): Promise<void> {
  const g = globalThis as unknown as Record<symbol, Promise<void> | undefined>;
  return (g[ZSTD_WASM_READY] ??= import('@bokuweb/zstd-wasm').then((m) => m.init()));
}

/** WasmCodec compresses a frame with zstd-wasm through one context. */
type WasmCodec = (text: Uint8Array) => Uint8Array;

/**
 * wasmCodec is made only without the addon (its module's memory is a cost the addon does not need): one compression
 * context for every WASM frame, since ZSTD_compress sets up and frees a context's workspace on each call, a third of
 * a small message's cost, and a flush sends a small message to each of thousands of sessions. zstd-wasm exposes a
 * context only with ZSTD_compress_usingDict; with an empty dictionary it writes the very bytes ZSTD_compress does
 * (frames.test.ts). Calls are synchronous, so one context serves the process.
 */
export async function wasmCodec(): Promise<WasmCodec> {
  await zstdWasmReady();
  const { compressUsingDict, createCCtx } = await import('@bokuweb/zstd-wasm');
  const cctx = createCCtx();
  const noDict = new Uint8Array(0);
  return (text) => compressUsingDict(cctx, text, noDict, ZSTD_LEVEL);
}

// Top-level await: without the addon, the WASM codec is ready before any frame can be asked for.
const wasmCompress: WasmCodec | undefined = nativeZstdCompress ? undefined : await wasmCodec();

/** RAW_BLOCK_MAX is zstd's largest block (Block_Maximum_Size, 128 KiB; RFC 8878 §3.1.1.2.3). */
const RAW_BLOCK_MAX = 128 * 1024;

/**
 * rawFrame is a zstd frame holding `text` uncompressed (RFC 8878 §3.1.1): the magic number, a frame header for a
 * single segment with a 4-byte content size, then raw blocks (type 0) of at most 128 KiB, the last one flagged.
 * Any zstd decoder reads it, as it reads the frames a compressor writes when compressing does not pay.
 */
export function rawFrame(text: Uint8Array): Uint8Array {
  const blocks = Math.max(1, Math.ceil(text.length / RAW_BLOCK_MAX));
  const out = Buffer.allocUnsafe(4 + 1 + 4 + blocks * 3 + text.length);
  out.writeUInt32LE(0xfd2fb528, 0);
  // Frame_Header_Descriptor: Frame_Content_Size_flag 2 (4 bytes), Single_Segment_flag, no checksum, no dictionary.
  out[4] = 0b1010_0000;
  out.writeUInt32LE(text.length, 5);
  let at = 9;
  for (let k = 0; k < blocks; k++) {
    const part = text.subarray(k * RAW_BLOCK_MAX, (k + 1) * RAW_BLOCK_MAX);
    // Block_Header, 3 bytes little-endian: Last_Block (bit 0), Block_Type 0 = Raw (bits 1-2), Block_Size (bits 3-23).
    out.writeUIntLE((part.length << 3) | (k === blocks - 1 ? 1 : 0), at, 3);
    out.set(part, at + 3);
    at += 3 + part.length;
  }
  return out;
}

/**
 * compressJson is one zstd frame of `text` at ZSTD_LEVEL (as is when short): through the zstd Node links, called
 * directly by @headway/aead's addon with one context reused (nativeZstdCompress), or without the addon from
 * whichever codec is cheaper at its size (WASM_MAX_INPUT). Each session's own text in a flush is compressed for it
 * alone, so the fixed cost per call matters more than the cost per byte: the addon's is a fraction of the WASM
 * build's.
 */
export function compressJson(text: Buffer): Uint8Array {
  if (text.length < RAW_FRAME_MAX) return rawFrame(text);
  if (nativeZstdCompress) return nativeZstdCompress(text, ZSTD_LEVEL);
  if (wasmCompress && text.length <= WASM_MAX_INPUT) return wasmCompress(text);
  return zstdCompressSync(text, { params: { [constants.ZSTD_c_compressionLevel]: ZSTD_LEVEL } });
}

let sharedFrameMin = SHARED_FRAME_MIN;
/** setSharedFrameMin changes SHARED_FRAME_MIN in force and returns the previous value (tests: 1 frames every shared part). */
export function setSharedFrameMin(n: number): number {
  const was = sharedFrameMin;
  sharedFrameMin = n;
  return was;
}
/** sharedFrameMinInForce is SHARED_FRAME_MIN, or what setSharedFrameMin set. */
export function sharedFrameMinInForce(): number { return sharedFrameMin; }

/**
 * frameSegments encodes one MapResponse given as consecutive pieces of its JSON text, each either text to compress
 * now or a zstd frame compressed earlier (a part many sessions share, compressed once per flush): a body of several
 * frames, which Tailscale's client decodes as their contents one after another (zstdframe.AppendDecode takes zero
 * or more frames). Each session's own parts (its packet filter changes, profiles) are compressed for it alone, the
 * shared peers once for all: a policy change may give thousands of sessions the same tens of KB of new peers.
 */
export function frameSegments(segments: ReadonlyArray<string | Uint8Array>): WireMessage {
  const bodies: Uint8Array[] = [];
  for (const s of segments) {
    if (typeof s !== 'string') bodies.push(s);
    else if (s.length) bodies.push(compressJson(Buffer.from(s))); // nothing between two shared frames: no frame
  }
  return prefixedPieces(bodies);
}

/**
 * WireMessage is a message as it goes on the stream: one buffer, or its pieces in order, which the stream sends
 * without joining them (H2Stream.write), so that frames shared by many sessions are not copied once per session.
 */
export type WireMessage = Uint8Array | readonly Uint8Array[];

/** wireBytes is a message as one buffer (tests, and callers that must hold it whole). */
export function wireBytes(m: WireMessage): Buffer {
  return m instanceof Uint8Array ? Buffer.from(m.buffer, m.byteOffset, m.length) : Buffer.concat(m);
}

/**
 * prefixedPieces is a message of several bodies as pieces: the u32 little-endian length of the bodies, then the
 * bodies (zstd frames made by compressJson or rawFrame).
 */
export function prefixedPieces(bodies: readonly Uint8Array[]): Uint8Array[] {
  let length = 0;
  for (const b of bodies) length += b.length;
  const prefix = Buffer.allocUnsafe(4);
  prefix.writeUInt32LE(length, 0);
  return [prefix, ...bodies];
}

/**
 * lengthPrefixed is a message as one buffer: u32 little-endian length of the bodies, then the bodies (zstd frames
 * made by compressJson or rawFrame, or one plain JSON text).
 */
export function lengthPrefixed(bodies: readonly Uint8Array[]): Buffer {
  const length = bodies.reduce((n, b) => n + b.length, 0);
  const out = Buffer.allocUnsafe(4 + length);
  out.writeUInt32LE(length, 0);
  let at = 4;
  for (const b of bodies) { out.set(b, at); at += b.length; }
  return out;
}

/**
 * frame encodes one MapResponse as the client reads it: u32 little-endian length
 * then the zstd-compressed JSON (or plain JSON when the client asked for none).
 * The frame carries its content size.
 */
export function frame(json: string | Buffer, zstd: boolean): Buffer {
  const text = typeof json === 'string' ? Buffer.from(json) : json;
  return lengthPrefixed([zstd ? compressJson(text) : text]);
}
