import { createPrivateKey, createPublicKey, diffieHellman, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { recordAead, type KeyHandle } from './aead.js';

/** KEY_LENGTH is the size of every raw X25519 key, public or private. */
export const KEY_LENGTH = 32;

/** KeyPair holds raw 32-byte X25519 keys; the private half is never exported in text form by accident. */
export interface KeyPair {
  privateKey: Buffer;
  publicKey: Buffer;
}

/** KeyPrefix names the text forms Tailscale uses for keys on the wire (`<prefix>:<64 hex>`). */
export type KeyPrefix = 'mkey' | 'nodekey' | 'discokey' | 'privkey' | 'chalpub' | 'nlpub';

const PKCS8_X25519_PREFIX = Buffer.from('302e020100300506032b656e04220420', 'hex');
const SPKI_X25519_PREFIX = Buffer.from('302a300506032b656e032100', 'hex');

function checkRawKey(raw: Uint8Array, what: string): void {
  if (!(raw instanceof Uint8Array) || raw.length !== KEY_LENGTH) {
    const got = raw instanceof Uint8Array ? `${raw.length} bytes` : typeof raw;
    throw new TypeError(`${what} must be ${KEY_LENGTH} raw bytes, got ${got}`);
  }
}

/**
 * PRIVATE_KEY_OBJECTS caches the OpenSSL key object of a raw private key buffer: importing a DER key costs
 * far more than the X25519 itself, and the server's control key takes part in every handshake. Keyed by the
 * buffer object (a WeakMap), so nothing outlives the caller's copy of the key.
 */
const PRIVATE_KEY_OBJECTS = new WeakMap<Uint8Array, KeyObject>();

function privateKeyObject(raw: Uint8Array): KeyObject {
  const cached = PRIVATE_KEY_OBJECTS.get(raw);
  if (cached) return cached;
  checkRawKey(raw, 'X25519 private key');
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_X25519_PREFIX, raw]), format: 'der', type: 'pkcs8' });
  PRIVATE_KEY_OBJECTS.set(raw, key);
  return key;
}

/** PUBLIC_KEY_OBJECTS caches imported peer keys per buffer object (a handshake uses each one twice). */
const PUBLIC_KEY_OBJECTS = new WeakMap<Uint8Array, KeyObject>();

function publicKeyObject(raw: Uint8Array): KeyObject {
  const cached = PUBLIC_KEY_OBJECTS.get(raw);
  if (cached) return cached;
  checkRawKey(raw, 'X25519 public key');
  // A JWK import is about ten times cheaper than parsing DER, and it runs on every handshake.
  const key = createPublicKey({ key: { kty: 'OKP', crv: 'X25519', x: Buffer.from(raw).toString('base64url') }, format: 'jwk' });
  PUBLIC_KEY_OBJECTS.set(raw, key);
  return key;
}

/**
 * KEY_HANDLES caches the addon's handle of a raw private key buffer (see keyHandle), as PRIVATE_KEY_OBJECTS does
 * node:crypto's key objects; the handle frees its OpenSSL key when collected.
 */
const KEY_HANDLES = new WeakMap<Uint8Array, KeyHandle>();

/**
 * keyHandle is the addon's handle of a raw private key, imported on first use. OpenSSL computes a key's public half
 * whenever it imports a raw private key, a scalar multiplication as costly as the agreement: the server's static
 * key takes part in two agreements of every handshake and each ephemeral key in two, so each is imported once.
 */
function keyHandle(raw: Uint8Array, make: NonNullable<typeof recordAead.x25519Key>): KeyHandle {
  return KEY_HANDLES.get(raw) ?? importKey(raw, make, Buffer.alloc(KEY_LENGTH));
}

/** importKey imports a raw private key into the addon, writing its public key into pub, and caches the handle. */
function importKey(raw: Uint8Array, make: NonNullable<typeof recordAead.x25519Key>, pub: Buffer): KeyHandle {
  const h = make(raw, pub);
  KEY_HANDLES.set(raw, h);
  return h;
}

/** publicFromPrivate derives the raw X25519 public key for a raw private key. */
export function publicFromPrivate(privateKey: Uint8Array): Buffer {
  if (recordAead.x25519Key) {
    checkRawKey(privateKey, 'X25519 private key');
    const pub = Buffer.alloc(KEY_LENGTH);
    importKey(privateKey, recordAead.x25519Key, pub);
    return pub;
  }
  const spki = createPublicKey(privateKeyObject(privateKey)).export({ format: 'der', type: 'spki' });
  return Buffer.from(spki.subarray(SPKI_X25519_PREFIX.length));
}

/** keyPairFromPrivate builds a KeyPair from a raw private key (copied, so callers may reuse their buffer). */
export function keyPairFromPrivate(privateKey: Uint8Array): KeyPair {
  checkRawKey(privateKey, 'X25519 private key');
  // The copy is the key the pair's users hold (and the one its handle is cached for): a buffer of its own.
  const own = Buffer.alloc(KEY_LENGTH);
  own.set(privateKey);
  return { privateKey: own, publicKey: publicFromPrivate(own) };
}

/**
 * generateKeyPair makes a fresh random X25519 key pair from the OS CSPRNG (OpenSSL's, through the addon when it is
 * there; each key its own buffer, no view of a shared pool slab).
 */
export function generateKeyPair(): KeyPair {
  if (recordAead.x25519Generate) {
    const privateKey = Buffer.alloc(KEY_LENGTH), publicKey = Buffer.alloc(KEY_LENGTH);
    KEY_HANDLES.set(privateKey, recordAead.x25519Generate(privateKey, publicKey));
    return { privateKey, publicKey };
  }
  const { privateKey } = generateKeyPairSync('x25519');
  const jwk = privateKey.export({ format: 'jwk' });
  const raw = Buffer.from(jwk.d!, 'base64url');
  PRIVATE_KEY_OBJECTS.set(raw, privateKey);
  return { privateKey: raw, publicKey: Buffer.from(jwk.x!, 'base64url') };
}

/**
 * x25519 computes the shared secret DH(privateKey, publicKey). It throws when the peer key is a
 * low-order point (all-zero result), which Noise treats as a failed handshake.
 */
export function x25519(privateKey: Uint8Array, publicKey: Uint8Array): Buffer {
  if (recordAead.x25519) {
    // The addon's agreement on raw keys: no key objects to import (a JWK import per peer key costs about as much as
    // the agreement itself).
    checkRawKey(privateKey, 'X25519 private key');
    checkRawKey(publicKey, 'X25519 public key');
    const shared = Buffer.allocUnsafe(KEY_LENGTH);
    const key = recordAead.x25519Key ? keyHandle(privateKey, recordAead.x25519Key) : privateKey;
    if (!recordAead.x25519(key, publicKey, shared) || isZeroKey(shared)) {
      throw new Error('X25519 key agreement failed (all-zero shared secret from a low-order public key?)');
    }
    return shared;
  }
  return nodeX25519(privateKey, publicKey);
}

/** nodeX25519 is x25519 through node:crypto's key objects (without the addon, and the tests' reference). */
export function nodeX25519(privateKey: Uint8Array, publicKey: Uint8Array): Buffer {
  const priv = privateKeyObject(privateKey);
  const pub = publicKeyObject(publicKey);
  let shared: Buffer;
  try {
    shared = diffieHellman({ privateKey: priv, publicKey: pub });
  } catch (err) {
    // OpenSSL refuses low-order points itself; report it like the explicit all-zero check below.
    throw new Error(`X25519 key agreement failed (all-zero shared secret from a low-order public key?): ${(err as Error).message}`);
  }
  if (shared.every((b) => b === 0)) throw new Error('X25519 produced an all-zero shared secret (low-order public key)');
  return shared;
}

/** ZERO_KEY is the all-zero key Go sends for "no key" (an empty string does not decode). */
export const ZERO_KEY: Buffer = Buffer.alloc(KEY_LENGTH);

/** isZeroKey reports whether raw is the all-zero key. */
export function isZeroKey(raw: Uint8Array): boolean {
  return raw.length === KEY_LENGTH && raw.every((b) => b === 0);
}

/** formatKey renders a raw key as `<prefix>:<64 lowercase hex>`. */
export function formatKey(prefix: KeyPrefix, raw: Uint8Array): string {
  checkRawKey(raw, `${prefix} key`);
  return `${prefix}:${Buffer.from(raw).toString('hex')}`;
}

const HEX_KEY = /^[0-9a-fA-F]{64}$/;

/** parseKey strictly parses `<prefix>:<64 hex>` into 32 raw bytes; any other shape throws naming what was wrong. */
export function parseKey(prefix: KeyPrefix, text: string): Buffer {
  if (typeof text !== 'string') throw new TypeError(`${prefix} key must be a string, got ${typeof text}`);
  const expected = `${prefix}:`;
  if (!text.startsWith(expected)) {
    const colon = text.indexOf(':');
    const got = colon >= 0 ? `prefix "${text.slice(0, colon)}:"` : 'no prefix';
    throw new Error(`invalid ${prefix} key: expected "${expected}<64 hex chars>", got ${got}`);
  }
  const hex = text.slice(expected.length);
  if (!HEX_KEY.test(hex)) {
    throw new Error(`invalid ${prefix} key: expected 64 hex chars after "${expected}", got ${hex.length} chars${/^[0-9a-fA-F]*$/.test(hex) ? '' : ' with non-hex characters'}`);
  }
  return Buffer.from(hex, 'hex');
}

/** parseMachineKey parses `mkey:<hex>` (machine or control public key). */
export function parseMachineKey(text: string): Buffer {
  return parseKey('mkey', text);
}

/** parseNodeKey parses `nodekey:<hex>` (WireGuard node public key). */
export function parseNodeKey(text: string): Buffer {
  return parseKey('nodekey', text);
}

/** parseDiscoKey parses `discokey:<hex>`. */
export function parseDiscoKey(text: string): Buffer {
  return parseKey('discokey', text);
}

/** parsePrivateKey parses `privkey:<hex>` (storage form of any private key). */
export function parsePrivateKey(text: string): Buffer {
  return parseKey('privkey', text);
}
