import { randomBytes } from 'node:crypto';
import instantiate from 'libsodium';

/**
 * aead-wasm seals and opens transport records with libsodium's ChaCha20-Poly1305 (IETF, as Noise uses it), run as
 * WASM, reading and writing buffers the caller gives. node:crypto needs a cipher object per record (a nonce cannot
 * be changed on one) and returns each record's ciphertext, plaintext and tag as new buffers. Those objects outlive
 * a scavenge and fill the old generation, so with a large live heap every record costs several times as much and
 * the collector's mark-compacts take a large share of a big change. Here a record allocates nothing, and costs the
 * same whatever the heap (a pure JavaScript cipher, @noble/ciphers, is slower still). libsodium.js's own wrappers
 * allocate a result per call, as costly as node:crypto with a large heap, so the module's C functions are called
 * directly, on scratch memory taken once: calls are synchronous, so one scratch area serves the process. The key is
 * copied in for each call and wiped after it; nothing of a connection stays in the module's memory.
 */
// The module looks for a random source (which sodium_init stirs) in browser globals, then through CommonJS's
// require, which an ES module does not have: it is handed node:crypto's.
const sodium = await instantiate({ getRandomValue: () => randomBytes(4).readUInt32BE(0) });
if (sodium._sodium_init() < 0) throw new Error('libsodium failed to initialize');

/** WASM_AEAD_MAX is the longest plaintext (or ciphertext without its tag) handled here: a transport record's. */
export const WASM_AEAD_MAX = 4096;
const TAG = 16;
const pKey = sodium._malloc(32);
const pNonce = sodium._malloc(12);
const pIn = sodium._malloc(WASM_AEAD_MAX);
const pOut = sodium._malloc(WASM_AEAD_MAX);
const pTag = sodium._malloc(TAG);

/** sealWasm writes ciphertext||tag of plaintext (no associated data) into out at offset; returns the bytes written. */
export function sealWasm(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, out: Uint8Array, offset: number): number {
  const n = plaintext.length;
  if (n > WASM_AEAD_MAX) throw new RangeError(`sealWasm: ${n} bytes exceed ${WASM_AEAD_MAX}`);
  // Read HEAPU8 on every call: the module replaces the view if its memory ever grows.
  const heap = sodium.HEAPU8;
  heap.set(key, pKey);
  heap.set(nonce, pNonce);
  heap.set(plaintext, pIn);
  sodium._crypto_aead_chacha20poly1305_ietf_encrypt_detached(pOut, pTag, 0, pIn, n, 0, 0, 0, 0, 0, pNonce, pKey);
  heap.fill(0, pKey, pKey + 32);
  out.set(heap.subarray(pOut, pOut + n), offset);
  out.set(heap.subarray(pTag, pTag + TAG), offset + n);
  return n + TAG;
}

/**
 * openWasm verifies ciphertext||tag (no associated data) and writes the plaintext into out at offset; false when
 * the tag does not match (out is then left as it was).
 */
export function openWasm(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, out: Uint8Array, offset: number): boolean {
  const n = sealed.length - TAG;
  if (n < 0 || n > WASM_AEAD_MAX) throw new RangeError(`openWasm: ${sealed.length} bytes is not a sealed record of at most ${WASM_AEAD_MAX}`);
  const heap = sodium.HEAPU8;
  heap.set(key, pKey);
  heap.set(nonce, pNonce);
  heap.set(sealed.subarray(0, n), pIn);
  heap.set(sealed.subarray(n), pTag);
  const rc = sodium._crypto_aead_chacha20poly1305_ietf_decrypt_detached(pOut, 0, pIn, n, 0, pTag, 0, 0, 0, pNonce, pKey);
  heap.fill(0, pKey, pKey + 32);
  if (rc !== 0) return false;
  out.set(heap.subarray(pOut, pOut + n), offset);
  return true;
}
