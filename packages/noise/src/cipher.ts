import { createCipheriv, createDecipheriv, createHash, createSecretKey, hkdfSync, type KeyObject } from 'node:crypto';
import { recordAead } from './aead.js';

/** TAG_LENGTH is the ChaCha20-Poly1305 authentication tag size. */
export const TAG_LENGTH = 16;
const HASH = 'blake2s256';

/** NonceOrder picks how the 64-bit counter is laid out: the Noise spec says little-endian, Tailscale uses big-endian. */
export type NonceOrder = 'big' | 'little';

/** blake2s hashes the concatenation of parts with BLAKE2s-256. */
export function blake2s(...parts: Uint8Array[]): Buffer {
  const h = createHash(HASH);
  for (const p of parts) h.update(p);
  return h.digest();
}

/**
 * noiseHkdf is the Noise HKDF with two outputs (HMAC-BLAKE2s extract + expand); node's hkdf is byte-identical. The
 * addon's (recordAead.noiseHkdf) spares node's job object per call, most of the call's cost.
 */
export function noiseHkdf(chainingKey: Uint8Array, inputKeyMaterial: Uint8Array): [Buffer, Buffer] {
  if (recordAead.noiseHkdf) {
    const out = Buffer.allocUnsafe(64);
    recordAead.noiseHkdf(chainingKey, inputKeyMaterial, out);
    return [out.subarray(0, 32), out.subarray(32, 64)];
  }
  return nodeNoiseHkdf(chainingKey, inputKeyMaterial);
}

/** nodeNoiseHkdf is noiseHkdf through node:crypto (without the addon, and the tests' reference). */
export function nodeNoiseHkdf(chainingKey: Uint8Array, inputKeyMaterial: Uint8Array): [Buffer, Buffer] {
  const out = Buffer.from(hkdfSync(HASH, inputKeyMaterial, chainingKey, Buffer.alloc(0), 64));
  return [out.subarray(0, 32), out.subarray(32, 64)];
}

/** writeNonce lays the counter into a 12-byte nonce buffer (the first 4 bytes stay zero). */
function writeNonce(nonce: Buffer, counter: bigint, order: NonceOrder): Buffer {
  if (order === 'big') nonce.writeBigUInt64BE(counter, 4);
  else nonce.writeBigUInt64LE(counter, 4);
  return nonce;
}

const AUTH_FAILED = 'message authentication failed (wrong key, corrupted or replayed data)';

/**
 * aeadSeal encrypts with ChaCha20-Poly1305 and returns ciphertext||tag (a buffer of its own). The handshake's
 * messages go through the addon when it is there: node:crypto makes a cipher object per call (two per handshake
 * side), a visible part of a server's handshake.
 */
export function aeadSeal(key: Uint8Array | KeyObject, nonce: Uint8Array, ad: Uint8Array, plaintext: Uint8Array): Buffer {
  if (recordAead.sealWithAd && key instanceof Uint8Array && plaintext.length <= recordAead.max) {
    const out = Buffer.allocUnsafeSlow(plaintext.length + TAG_LENGTH);
    recordAead.sealWithAd(key, nonce, plaintext, out, 0, ad);
    return out;
  }
  return nodeAeadSeal(key, nonce, ad, plaintext);
}

/** nodeAeadSeal is aeadSeal through node:crypto (without the addon, and the tests' reference). */
export function nodeAeadSeal(key: Uint8Array | KeyObject, nonce: Uint8Array, ad: Uint8Array, plaintext: Uint8Array): Buffer {
  const c = createCipheriv('chacha20-poly1305', key, nonce, { authTagLength: TAG_LENGTH });
  c.setAAD(ad, { plaintextLength: plaintext.length });
  return Buffer.concat([c.update(plaintext), c.final(), c.getAuthTag()]);
}

/** aeadOpen verifies and decrypts ciphertext||tag (into a buffer of its own); it throws on any authentication failure. */
export function aeadOpen(key: Uint8Array | KeyObject, nonce: Uint8Array, ad: Uint8Array, sealed: Uint8Array): Buffer {
  if (recordAead.openWithAd && key instanceof Uint8Array && sealed.length >= TAG_LENGTH && sealed.length - TAG_LENGTH <= recordAead.max) {
    const out = Buffer.allocUnsafeSlow(sealed.length - TAG_LENGTH);
    if (!recordAead.openWithAd(key, nonce, sealed, out, 0, ad)) throw new Error(AUTH_FAILED);
    return out;
  }
  return nodeAeadOpen(key, nonce, ad, sealed);
}

/** nodeAeadOpen is aeadOpen through node:crypto (without the addon, and the tests' reference). */
export function nodeAeadOpen(key: Uint8Array | KeyObject, nonce: Uint8Array, ad: Uint8Array, sealed: Uint8Array): Buffer {
  if (sealed.length < TAG_LENGTH) throw new Error(`ciphertext too short: ${sealed.length} bytes, need at least ${TAG_LENGTH}`);
  const body = sealed.subarray(0, sealed.length - TAG_LENGTH);
  const d = createDecipheriv('chacha20-poly1305', key, nonce, { authTagLength: TAG_LENGTH });
  d.setAAD(ad, { plaintextLength: body.length });
  d.setAuthTag(sealed.subarray(sealed.length - TAG_LENGTH));
  try {
    return Buffer.concat([d.update(body), d.final()]);
  } catch {
    throw new Error(AUTH_FAILED);
  }
}

const MAX_COUNTER = (1n << 64n) - 1n;

/**
 * ownBytes copies bytes into a Buffer of their own. A small Buffer made by Buffer.from/concat is a view
 * of a shared pool slab (Buffer.poolSize, 64 KiB on Node 24), and a view kept for a connection's lifetime
 * (a key, the handshake hash) keeps the whole slab alive: up to 64 KiB per idle connection for 32 bytes.
 */
export function ownBytes(bytes: Uint8Array): Buffer {
  const out = Buffer.allocUnsafeSlow(bytes.length);
  out.set(bytes);
  return out;
}

/**
 * CipherState is one direction of a Noise transport: a key plus a strictly increasing counter.
 * The counter may never reach 2^64-1 (reserved by Noise), so exhaustion is an error, not a wrap.
 * The key is held as a KeyObject made once: on Node 24 createCipheriv given raw key bytes builds a
 * key object per call, several times the cost of the encryption itself.
 * The nonce buffer is reused too (createCipheriv copies the IV). Transport records (sealInto, open) go through
 * recordAead instead (OpenSSL's cipher through @headway/aead, or libsodium's WASM build), which allocates nothing
 * per record; the raw key is kept for it.
 */
export class CipherState {
  private counter = 0n;
  private readonly key: KeyObject;
  private readonly raw: Buffer;
  private readonly nonce = Buffer.alloc(12);
  constructor(key: Buffer, private readonly order: NonceOrder = 'big') {
    if (key.length !== 32) throw new Error(`cipher key must be 32 bytes, got ${key.length}`);
    this.key = createSecretKey(key);
    this.raw = ownBytes(key);
  }

  /** nonceCounter is the counter the next seal/open will use. */
  get nonceCounter(): bigint {
    return this.counter;
  }

  private nextNonce(): Buffer {
    if (this.counter >= MAX_COUNTER) throw new Error('cipher nonce counter exhausted; the connection must be re-established');
    return writeNonce(this.nonce, this.counter++, this.order);
  }

  seal(plaintext: Uint8Array, ad: Uint8Array = Buffer.alloc(0)): Buffer {
    return aeadSeal(this.key, this.nextNonce(), ad, plaintext);
  }

  /**
   * sealInto encrypts plaintext (no associated data) straight into out at offset as ciphertext||tag and
   * returns the bytes written, sparing the transport a concatenation per record.
   */
  sealInto(plaintext: Uint8Array, out: Buffer, offset: number): number {
    if (plaintext.length <= recordAead.max) return recordAead.seal(this.raw, this.nextNonce(), plaintext, out, offset);
    const c = createCipheriv('chacha20-poly1305', this.key, this.nextNonce(), { authTagLength: TAG_LENGTH });
    const body = c.update(plaintext);
    body.copy(out, offset);
    let n = body.length;
    const rest = c.final();
    if (rest.length) { rest.copy(out, offset + n); n += rest.length; }
    c.getAuthTag().copy(out, offset + n);
    return n + TAG_LENGTH;
  }

  /** open decrypts; a failure still consumes the nonce, which is fine because callers must drop the connection. */
  open(sealed: Uint8Array, ad: Uint8Array = Buffer.alloc(0)): Buffer {
    if (ad.length > 0 || sealed.length < TAG_LENGTH || sealed.length - TAG_LENGTH > recordAead.max) return aeadOpen(this.key, this.nextNonce(), ad, sealed);
    // A record's plaintext fits Buffer's pool (under 4 KiB): no buffer of its own per record.
    const out = Buffer.allocUnsafe(sealed.length - TAG_LENGTH);
    if (!recordAead.open(this.raw, this.nextNonce(), sealed, out, 0)) throw new Error('message authentication failed (wrong key, corrupted or replayed data)');
    return out;
  }
}
