import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

const PKCS8_X25519 = Buffer.from('302e020100300506032b656e04220420', 'hex');

/** x25519Public derives the raw 32-byte public key from a raw private key. */
export function x25519Public(priv: Buffer): Buffer {
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_X25519, priv]), format: 'der', type: 'pkcs8' });
  return createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(12);
}

/**
 * loadOrCreateKey reads a `privkey:<hex>` file, creating it (mode 0600) on first
 * start, so the server keeps its identity across restarts and devices stay joined.
 */
export function loadOrCreateKey(path: string): { privateKey: Buffer; publicKey: Buffer; created: boolean } {
  if (existsSync(path)) {
    const text = readFileSync(path, 'utf8').trim();
    const m = /^privkey:([0-9a-f]{64})$/.exec(text);
    if (!m) throw new Error(`key file ${path} is not a private key (expected privkey:<64 hex digits>)`);
    const privateKey = Buffer.from(m[1]!, 'hex');
    return { privateKey, publicKey: x25519Public(privateKey), created: false };
  }
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const { privateKey: k } = generateKeyPairSync('x25519');
  const privateKey = k.export({ format: 'der', type: 'pkcs8' }).subarray(16);
  writeFileSync(path, `privkey:${privateKey.toString('hex')}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
  return { privateKey, publicKey: x25519Public(privateKey), created: true };
}
