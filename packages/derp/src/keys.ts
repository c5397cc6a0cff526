import { formatKey, generateKeyPair, type KeyPair } from '@headway/noise';

/**
 * DERP's key helpers are @headway/noise's X25519 helpers under the names DERP callers already use:
 * node:crypto derives public keys with the same clamped scalar multiplication NaCl box performs.
 */
export { KEY_LENGTH, parseNodeKey, publicFromPrivate as publicKeyFromPrivate } from '@headway/noise';

/** DerpKeyPair is a raw X25519 key pair; the public half is what clients address the server by. */
export type DerpKeyPair = KeyPair;

/** generateDerpKeyPair returns a fresh random server (or client) key pair. */
export function generateDerpKeyPair(): DerpKeyPair {
  return generateKeyPair();
}

/** formatNodeKey renders a raw 32-byte key as `nodekey:<64 hex>`, the form control and DERP headers use. */
export function formatNodeKey(raw: Uint8Array): string {
  return formatKey('nodekey', raw);
}
