import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { makeDirectory } from './preflight.js';
import { dirname } from 'node:path';

const PKCS8_X25519 = Buffer.from('302e020100300506032b656e04220420', 'hex');

/** x25519Public derives the raw 32-byte public key from a raw private key. */
export function x25519Public(priv: Buffer): Buffer {
  const key = createPrivateKey({ key: Buffer.concat([PKCS8_X25519, priv]), format: 'der', type: 'pkcs8' });
  return createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(12);
}

/**
 * readKeyFile reads a `privkey:<hex>` file's private key; undefined when there is no file. Anything else there (a
 * directory, an unreadable or malformed file) is an error naming the path.
 */
export function readKeyFile(path: string): Buffer | undefined {
  if (!existsSync(path)) return undefined;
  let text: string;
  try {
    text = readFileSync(path, 'utf8').trim();
  } catch (err) {
    throw new Error(`cannot read key file ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const m = /^privkey:([0-9a-f]{64})$/.exec(text);
  if (!m) throw new Error(`key file ${path} is not a private key (expected privkey:<64 hex digits>)`);
  return Buffer.from(m[1]!, 'hex');
}

/**
 * loadOrCreateKey reads a `privkey:<hex>` file, creating it (mode 0600) on first
 * start, so the server keeps its identity across restarts and devices stay joined.
 */
export function loadOrCreateKey(path: string): { privateKey: Buffer; publicKey: Buffer; created: boolean } {
  const existing = readKeyFile(path);
  if (existing) return { privateKey: existing, publicKey: x25519Public(existing), created: false };
  makeDirectory(dirname(path), 'key file directory');
  const { privateKey: k } = generateKeyPairSync('x25519');
  const privateKey = k.export({ format: 'der', type: 'pkcs8' }).subarray(16);
  writeFileSync(path, `privkey:${privateKey.toString('hex')}\n`, { mode: 0o600 });
  chmodSync(path, 0o600);
  return { privateKey, publicKey: x25519Public(privateKey), created: true };
}
