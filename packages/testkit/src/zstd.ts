import { constants, zstdCompressSync, zstdDecompressSync } from 'node:zlib';

/** zstdDecompress decodes one zstd frame (with or without a content-size header) with node:zlib's libzstd. */
export function zstdDecompress(data: Uint8Array): Buffer {
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

/** MapFrameDecoder turns a byte stream of framed MapResponses into JSON values, across arbitrary chunking. */
export class MapFrameDecoder {
  private pending: Buffer = Buffer.alloc(0);

  /** push adds bytes and returns every message completed by them. */
  push(chunk: Buffer): unknown[] {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const out: unknown[] = [];
    while (this.pending.length >= 4) {
      const length = this.pending.readUInt32LE(0);
      if (length > MAX_MAP_FRAME_LENGTH) throw new Error(`map frame length ${length} exceeds ${MAX_MAP_FRAME_LENGTH}`);
      if (this.pending.length < 4 + length) break;
      const body = this.pending.subarray(4, 4 + length);
      this.pending = this.pending.subarray(4 + length);
      let json: string;
      try {
        json = zstdDecompress(body).toString('utf8');
      } catch (err) {
        throw new Error(`map frame is not valid zstd: ${(err as Error).message}`);
      }
      try {
        out.push(JSON.parse(json));
      } catch (err) {
        throw new Error(`map frame is not valid JSON: ${(err as Error).message}`);
      }
    }
    return out;
  }

  /** leftover is how many bytes of an incomplete frame are buffered (non-zero at stream end = truncated). */
  get leftover(): number {
    return this.pending.length;
  }
}
