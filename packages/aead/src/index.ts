import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

/**
 * Aead seals and opens ChaCha20-Poly1305 records (96-bit nonce, 16-byte tag, no associated data) of at most `max`
 * bytes of plaintext, reading and writing the caller's buffers. seal writes ciphertext||tag into out at offset and
 * returns its length; open writes the plaintext and returns true, or false when the tag does not match (out is
 * then left as it was). A wrong argument (key not 32 bytes, nonce not 12, a record too long, no room in out)
 * throws a TypeError naming it.
 */
export interface Aead {
  readonly max: number;
  /** ad: associated data authenticated with the record (the Noise handshake's hash; transport records have none). */
  seal(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, out: Uint8Array, offset: number, ad?: Uint8Array): number;
  open(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, out: Uint8Array, offset: number, ad?: Uint8Array): boolean;
  /**
   * x25519 writes the X25519 shared secret of a private key (32 raw bytes, or a handle from x25519Key or
   * x25519Generate) and a raw public key into out and returns true, or false when OpenSSL refuses the agreement
   * (a low-order public key); out is then zeroed.
   */
  x25519(privateKey: Uint8Array | X25519Handle, publicKey: Uint8Array, out: Uint8Array): boolean;
  /**
   * x25519Key imports a raw private key once (OpenSSL computes its public key on import, as costly as an
   * agreement) and writes its public key into publicOut; x25519Generate makes a random key pair into the two
   * outs. The handle frees its key when collected.
   */
  x25519Key(privateKey: Uint8Array, publicOut: Uint8Array): X25519Handle;
  x25519Generate(privateOut: Uint8Array, publicOut: Uint8Array): X25519Handle;
  /**
   * zstdCompress is one zstd frame of input at level (1-19) as a new Buffer, through the zstd Node links (one
   * context per thread, reused); absent when this Node's zstd is not visible to addons.
   */
  zstdCompress?(input: Uint8Array, level: number): Buffer;
  /** noiseHkdf writes Noise's HKDF (HMAC-BLAKE2s) of input under chainingKey, two 32-byte outputs, into out (64 bytes). */
  noiseHkdf(chainingKey: Uint8Array, input: Uint8Array, out: Uint8Array): void;
}

/** X25519Handle is an X25519 private key held by the addon (opaque). */
export type X25519Handle = object;

/** Where node-gyp puts the addon, relative to this file (dist/src/index.js). */
export const ADDON_PATH = fileURLToPath(new URL('../../build/Release/aead.node', import.meta.url));
/** Where the install script (scripts/addon-install.mjs) writes why the build failed: a summary line, then node-gyp's output. */
export const NOT_BUILT_PATH = fileURLToPath(new URL('../../build/not-built.txt', import.meta.url));

/**
 * loadAead loads the compiled addon, or returns why there is none: it was not built (npm installs this package as
 * optional; a checkout builds it with scripts/build-sqlite.sh; buildFailed when the install tried and failed, with
 * its reason), or it did not load (a Node whose OpenSSL lacks ChaCha20-Poly1305, or whose crypto library is not OpenSSL).
 */
export function loadAead(): Aead | { unavailable: string; buildFailed?: boolean } {
  if (!existsSync(ADDON_PATH)) {
    if (!existsSync(NOT_BUILT_PATH)) return { unavailable: `the aead addon was not built (${ADDON_PATH})` };
    const why = readFileSync(NOT_BUILT_PATH, 'utf8').split('\n', 1)[0];
    return { unavailable: `the aead addon failed to build at install: ${why} (${NOT_BUILT_PATH} has node-gyp's output)`, buildFailed: true };
  }
  let addon: Partial<Aead>;
  try {
    addon = createRequire(import.meta.url)(ADDON_PATH) as Partial<Aead>;
  } catch (err) {
    return { unavailable: `the aead addon did not load: ${(err as Error).message}` };
  }
  if (typeof addon.seal !== 'function' || typeof addon.open !== 'function' || typeof addon.max !== 'number'
    || typeof addon.x25519 !== 'function' || typeof addon.noiseHkdf !== 'function' || typeof addon.x25519Key !== 'function'
    || typeof addon.x25519Generate !== 'function') {
    return { unavailable: `the aead addon at ${ADDON_PATH} lacks seal, open, x25519, x25519Key, x25519Generate, noiseHkdf or max (an old build: bash scripts/build-sqlite.sh)` };
  }
  return addon as Aead;
}
