import { randomBytes } from 'node:crypto';
import nacl from 'tweetnacl';

/** NONCE_LENGTH is the XSalsa20 nonce size that prefixes every sealed DERP message. */
export const NONCE_LENGTH = 24;
/** BOX_OVERHEAD is the Poly1305 tag NaCl box adds to the plaintext. */
export const BOX_OVERHEAD = 16;

/**
 * sealTo encrypts message from myPrivate to peerPublic and returns nonce ‖ box,
 * the layout DERP uses for ClientInfo and ServerInfo (Go's key.NodePrivate.SealTo).
 */
export function sealTo(message: Uint8Array, peerPublic: Uint8Array, myPrivate: Uint8Array): Buffer {
  const nonce = randomBytes(NONCE_LENGTH);
  const box = nacl.box(message, nonce, peerPublic, myPrivate);
  return Buffer.concat([nonce, box]);
}

/** openFrom reverses sealTo; it returns null when the data is short or fails authentication. */
export function openFrom(sealed: Uint8Array, peerPublic: Uint8Array, myPrivate: Uint8Array): Buffer | null {
  if (sealed.length < NONCE_LENGTH + BOX_OVERHEAD) return null;
  const opened = nacl.box.open(sealed.subarray(NONCE_LENGTH), sealed.subarray(0, NONCE_LENGTH), peerPublic, myPrivate);
  return opened ? Buffer.from(opened) : null;
}
