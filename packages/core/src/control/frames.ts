import { compress, init } from '@bokuweb/zstd-wasm';

let ready: Promise<void> | undefined;

/** zstdReady loads the WASM codec once per process. */
export function zstdReady(): Promise<void> {
  ready ??= init();
  return ready;
}

/**
 * frame encodes one MapResponse as the client reads it: u32 little-endian length
 * then the zstd-compressed JSON (or plain JSON when the client asked for none).
 */
export function frame(json: string, zstd: boolean): Buffer {
  const body = zstd ? Buffer.from(compress(Buffer.from(json), 3)) : Buffer.from(json);
  const out = Buffer.allocUnsafe(4 + body.length);
  out.writeUInt32LE(body.length, 0);
  body.copy(out, 4);
  return out;
}
