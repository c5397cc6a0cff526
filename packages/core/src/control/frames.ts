import { constants, zstdCompressSync } from 'node:zlib';

/** ZSTD_LEVEL is zstd's default level (3): the size/speed trade-off the Go client's own encoder makes. */
const ZSTD_LEVEL = 3;

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
