
/** KeyHandle is an X25519 private key the addon holds (opaque). */
export type KeyHandle = object;

/**
 * RecordAead seals and opens transport records (ChaCha20-Poly1305, no associated data, at most `max` bytes of
 * plaintext) into the caller's buffers: seal returns the bytes written (ciphertext||tag), open whether the tag
 * matched (out is left as it was when not). With the addon it also carries the handshake's primitives (below);
 * sealWithAd and openWithAd are the addon's seal and open under names of their own, so that associated data is
 * never handed to the WASM build, which would ignore it.
 */
export interface RecordAead {
  /** backend: 'openssl' is @headway/aead's addon on the OpenSSL inside Node; 'wasm' is libsodium's WASM build. */
  readonly backend: 'openssl' | 'wasm';
  /** why, when the backend is 'wasm', the addon is not used. */
  readonly unavailable?: string;
  /** true when that is because the addon's build failed at install (the reason says why): worth the operator's notice. */
  readonly buildFailed?: boolean;
  readonly max: number;
  seal(key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, out: Uint8Array, offset: number): number;
  open(key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, out: Uint8Array, offset: number): boolean;
  /**
   * The addon's X25519 (a private key raw or as a handle made once: x25519Key, x25519Generate), Noise HKDF, and
   * seal and open with associated data, which the handshake uses when present (keys.ts, cipher.ts); node:crypto's
   * otherwise. The WASM build has none of them.
   */
  readonly x25519?: (privateKey: Uint8Array | KeyHandle, publicKey: Uint8Array, out: Uint8Array) => boolean;
  readonly x25519Key?: (privateKey: Uint8Array, publicOut: Uint8Array) => KeyHandle;
  readonly x25519Generate?: (privateOut: Uint8Array, publicOut: Uint8Array) => KeyHandle;
  readonly noiseHkdf?: (chainingKey: Uint8Array, input: Uint8Array, out: Uint8Array) => void;
  /** The addon's zstd (the one Node links), when visible: map messages' compression (core's frames.ts). */
  readonly zstdCompress?: (input: Uint8Array, level: number) => Buffer;
  readonly sealWithAd?: (key: Uint8Array, nonce: Uint8Array, plaintext: Uint8Array, out: Uint8Array, offset: number, ad: Uint8Array) => number;
  readonly openWithAd?: (key: Uint8Array, nonce: Uint8Array, sealed: Uint8Array, out: Uint8Array, offset: number, ad: Uint8Array) => boolean;
}

/** RECORD_MAX is the longest plaintext of a transport record, the size both backends must take. */
export const RECORD_MAX = 4096;

/**
 * wasmRecordAead is libsodium's WASM build (aead-wasm.ts): what records are sealed with when the addon is not there.
 * It is imported only then, since instantiating it takes memory of its own the addon does not need.
 */
export async function wasmRecordAead(): Promise<RecordAead> {
  const { openWasm, sealWasm, WASM_AEAD_MAX } = await import('./aead-wasm.js');
  if (WASM_AEAD_MAX !== RECORD_MAX) throw new Error(`aead-wasm takes records of ${WASM_AEAD_MAX} bytes, not ${RECORD_MAX}`);
  return { backend: 'wasm', max: WASM_AEAD_MAX, seal: sealWasm, open: openWasm };
}

/**
 * loadRecordAead picks the addon of @headway/aead (an optional dependency: OpenSSL's ChaCha20 uses the CPU's
 * vector instructions, several times as fast per record as libsodium's WASM build), or the WASM build with the
 * reason. Both write the same bytes (aead.test.ts).
 */
async function loadRecordAead(): Promise<RecordAead> {
  let reason: string;
  let buildFailed = false;
  try {
    const loaded = (await import('@headway/aead')).loadAead();
    if (!('unavailable' in loaded)) {
      if (loaded.max === RECORD_MAX) {
        return { ...loaded, backend: 'openssl', sealWithAd: loaded.seal, openWithAd: loaded.open };
      }
      reason = `the aead addon takes records of ${loaded.max} bytes, not ${RECORD_MAX}`;
    } else {
      reason = loaded.unavailable;
      buildFailed = loaded.buildFailed === true;
    }
  } catch (err) {
    reason = `@headway/aead is not installed (${(err as Error).message})`;
  }
  return { ...(await wasmRecordAead()), unavailable: reason, ...(buildFailed ? { buildFailed } : {}) };
}

/** recordAead is what this process seals and opens transport records with (see loadRecordAead). */
export const recordAead: RecordAead = await loadRecordAead();

/**
 * nativeZstdCompress is one zstd frame of input at level through the addon (the zstd Node itself links, one context
 * per thread), or undefined without it; the server compresses map messages with it (2-3 times as fast as the WASM
 * build for a few KB of JSON).
 */
export const nativeZstdCompress: ((input: Uint8Array, level: number) => Buffer) | undefined = recordAead.zstdCompress;
