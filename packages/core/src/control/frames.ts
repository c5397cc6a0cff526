import { constants, zstdCompressSync } from 'node:zlib';

/**
 * ZSTD_LEVEL is zstd's fastest standard level (1), what headscale and Tailscale's own test control servers use
 * for map responses (zstdframe.FastestCompression). Every join compresses a full map of the whole tailnet, and on
 * map JSON (mostly hex keys) level 1 took half the CPU of level 3 and came out no larger (146 KB of peers:
 * 24.2 KB in 156 µs against 28.8 KB in 300 µs); its window (512 KiB) is a quarter of level 3's.
 */
const ZSTD_LEVEL = 1;

/**
 * frame encodes one MapResponse as the client reads it: u32 little-endian length
 * then the zstd-compressed JSON (or plain JSON when the client asked for none).
 * zstd comes from node:zlib (libzstd built into Node 24), so there is no codec to
 * load first; the frame carries its content size, as the WASM codec's did.
 */
export function frame(json: string | Buffer, zstd: boolean): Buffer {
  const text = typeof json === 'string' ? Buffer.from(json) : json;
  const body = zstd ? zstdCompressSync(text, { params: { [constants.ZSTD_c_compressionLevel]: ZSTD_LEVEL } }) : text;
  const out = Buffer.allocUnsafe(4 + body.length);
  out.writeUInt32LE(body.length, 0);
  body.copy(out, 4);
  return out;
}
