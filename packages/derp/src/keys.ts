import { createPrivateKey, createPublicKey, randomBytes } from 'node:crypto';

/** KEY_LENGTH is the size of every raw Curve25519 key DERP puts on the wire. */
export const KEY_LENGTH = 32;

const NODE_KEY_PREFIX = 'nodekey:';
const PKCS8_X25519_PREFIX = Buffer.from('302e020100300506032b656e04220420', 'hex');

/** DerpKeyPair is a raw X25519 key pair; the public half is what clients address the server by. */
export interface DerpKeyPair {
  privateKey: Buffer;
  publicKey: Buffer;
}

/** generateDerpKeyPair returns a fresh random server (or client) key pair. */
export function generateDerpKeyPair(): DerpKeyPair {
  const privateKey = randomBytes(KEY_LENGTH);
  return { privateKey, publicKey: publicKeyFromPrivate(privateKey) };
}

/**
 * publicKeyFromPrivate derives the raw X25519 public key with node:crypto, so it
 * agrees with the clamped scalar multiplication NaCl box performs.
 */
export function publicKeyFromPrivate(privateKey: Buffer): Buffer {
  assertRawKey(privateKey, 'privateKey');
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_X25519_PREFIX, privateKey]), format: 'der', type: 'pkcs8' });
  return createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(12);
}

/** formatNodeKey renders a raw 32-byte key as `nodekey:<64 hex>`, the form control and DERP headers use. */
export function formatNodeKey(raw: Uint8Array): string {
  assertRawKey(raw, 'key');
  return NODE_KEY_PREFIX + Buffer.from(raw).toString('hex');
}

/**
 * parseNodeKey accepts `nodekey:<64 hex>` and returns the raw 32 bytes; anything
 * else throws an error naming what was wrong.
 */
export function parseNodeKey(text: string): Buffer {
  if (typeof text !== 'string' || !text.startsWith(NODE_KEY_PREFIX)) {
    throw new Error(`node key must start with "${NODE_KEY_PREFIX}", got ${JSON.stringify(String(text).slice(0, 80))}`);
  }
  const hex = text.slice(NODE_KEY_PREFIX.length);
  if (!/^[0-9a-fA-F]{64}$/.test(hex)) {
    throw new Error(`node key must be "${NODE_KEY_PREFIX}" followed by 64 hex digits, got ${hex.length} characters`);
  }
  return Buffer.from(hex, 'hex');
}

function assertRawKey(key: Uint8Array, name: string): void {
  if (!(key instanceof Uint8Array) || key.length !== KEY_LENGTH) {
    throw new Error(`${name} must be ${KEY_LENGTH} raw bytes, got ${key instanceof Uint8Array ? key.length : typeof key}`);
  }
}
