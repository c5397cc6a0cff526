import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Secrets (API keys, pre-auth keys) are `hwkey-<kind>-<prefix>-<secret>`: a readable
 * 12-character prefix that identifies the record and a 256-bit random secret that
 * is shown once and stored only as a SHA-256 hash (the secret has full entropy, so a
 * slow hash adds nothing), compared in constant time.
 */
export type SecretKind = 'api' | 'auth';

export interface IssuedSecret { full: string; prefix: string; hash: string }

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

function randomPrefix(): string {
  const bytes = randomBytes(12);
  return Array.from(bytes, (b) => ALPHABET[b % ALPHABET.length]).join('');
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export function issueSecret(kind: SecretKind): IssuedSecret {
  const prefix = randomPrefix();
  const secret = randomBytes(32).toString('base64url');
  return { full: `hwkey-${kind}-${prefix}-${secret}`, prefix, hash: hashSecret(secret) };
}

/** parseSecret splits a presented key; undefined when it is not of the given kind's shape. */
export function parseSecret(kind: SecretKind, text: string): { prefix: string; secret: string } | undefined {
  const m = new RegExp(`^hwkey-${kind}-([a-z0-9]{12})-([A-Za-z0-9_-]{43})$`).exec(text.trim());
  return m ? { prefix: m[1]!, secret: m[2]! } : undefined;
}

export function secretMatches(secret: string, storedHash: string): boolean {
  const a = Buffer.from(hashSecret(secret), 'hex');
  const b = Buffer.from(storedHash, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}
