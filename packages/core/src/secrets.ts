import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import bcrypt from 'bcryptjs';

/**
 * Secrets (API keys, pre-auth keys, OAuth client secrets and access tokens) are `hwkey-<kind>-<prefix>-<secret>`: a readable
 * 12-character prefix that identifies the record and a 256-bit random secret that
 * is shown once and stored only as a SHA-256 hash (the secret has full entropy, so a
 * slow hash adds nothing), compared in constant time.
 */
export type SecretKind = 'api' | 'auth' | 'client' | 'token';

export interface IssuedSecret { full: string; prefix: string; hash: string }

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const TOKEN_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * randomFrom is `length` characters drawn uniformly from `alphabet` (at most 256 characters): bytes at or above the
 * largest multiple of its size are dropped, so that no character is likelier than another.
 */
function randomFrom(alphabet: string, length: number): string {
  const limit = 256 - (256 % alphabet.length);
  let out = '';
  while (out.length < length) {
    for (const b of randomBytes(length - out.length + 8)) {
      if (b < limit && out.length < length) out += alphabet[b % alphabet.length];
    }
  }
  return out;
}

function randomPrefix(): string {
  return randomFrom(ALPHABET, 12);
}

/**
 * randomToken is `length` letters and digits (about 5.95 bits each). An administrator types it as a command's
 * argument (`headway nodes register --key …`): base64url text starts with `-` one time in 64, and the CLI then takes
 * the key for a flag and refuses the command ("Flag --key expects a value").
 */
export function randomToken(length: number): string {
  return randomFrom(TOKEN_ALPHABET, length);
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export function issueSecret(kind: SecretKind): IssuedSecret {
  const prefix = randomPrefix();
  const secret = randomBytes(32).toString('base64url');
  return { full: `hwkey-${kind}-${prefix}-${secret}`, prefix, hash: hashSecret(secret) };
}

/**
 * SecretScheme says how a presented key was written, hence how its record's hash is checked:
 * `headway` keys (`hwkey-...`) against a SHA-256 hash; keys imported from headscale by
 * `headway migrate from-headscale` as headscale shows them, so they keep working after the move:
 * - `headscale`: `hskey-api-<12>-<64>` and `hskey-auth-<12>-<64>` (headscale 0.28 and later) and the
 *   older `<7>.<32>` API keys; headscale keeps only a bcrypt hash of the part after the prefix, which
 *   the import carries over unchanged (there is nothing else to check them against).
 * - `headscale-plain`: pre-auth keys of headscale before 0.28, 48 hex digits stored in plain text; the
 *   import keeps their first 12 digits as the prefix and a SHA-256 hash of the rest, as for Headway keys.
 */
export type SecretScheme = 'headway' | 'headscale' | 'headscale-plain';

/** ParsedSecret is a presented key split into the record's lookup prefix and the secret to check. */
export interface ParsedSecret { prefix: string; secret: string; scheme: SecretScheme }

const B64URL = '[A-Za-z0-9_-]';
const HEADSCALE_KEY: Partial<Record<SecretKind, RegExp>> = {
  api: new RegExp(`^hskey-api-(${B64URL}{12})-(${B64URL}{64})$`),
  auth: new RegExp(`^hskey-auth-(${B64URL}{12})-(${B64URL}{64})$`),
};
const HEADSCALE_LEGACY_API_KEY = new RegExp(`^(${B64URL}{7})\\.(${B64URL}{32})$`);
const HEADSCALE_PLAIN_AUTH_KEY = /^([0-9a-f]{12})([0-9a-f]{36})$/;

/** parseSecret splits a presented key; undefined when it is not of the given kind's shape. */
export function parseSecret(kind: SecretKind, text: string): ParsedSecret | undefined {
  const trimmed = text.trim();
  const m = new RegExp(`^hwkey-${kind}-([a-z0-9]{12})-([A-Za-z0-9_-]{43})$`).exec(trimmed);
  if (m) return { prefix: m[1]!, secret: m[2]!, scheme: 'headway' };
  const hs = HEADSCALE_KEY[kind]?.exec(trimmed) ?? (kind === 'api' ? HEADSCALE_LEGACY_API_KEY.exec(trimmed) : null);
  if (hs) return { prefix: hs[1]!, secret: hs[2]!, scheme: 'headscale' };
  const plain = kind === 'auth' ? HEADSCALE_PLAIN_AUTH_KEY.exec(trimmed) : null;
  if (plain) return { prefix: plain[1]!, secret: plain[2]!, scheme: 'headscale-plain' };
  return undefined;
}

export function secretMatches(secret: string, storedHash: string): boolean {
  const a = Buffer.from(hashSecret(secret), 'hex');
  const b = Buffer.from(storedHash, 'hex');
  return a.length === b.length && timingSafeEqual(a, b);
}

/** BCRYPT_HASH is the modular-crypt form headscale stores (Go's bcrypt writes `$2a$`). */
const BCRYPT_HASH = /^\$2[aby]\$\d{2}\$[./A-Za-z0-9]{53}$/;

/** isBcryptHash tells an imported headscale hash from a Headway SHA-256 one. */
export function isBcryptHash(storedHash: string): boolean {
  return BCRYPT_HASH.test(storedHash);
}

/**
 * bcryptVerified remembers, by a SHA-256 of hash and secret, the bcrypt checks that succeeded:
 * bcrypt costs tens of milliseconds by design, and an automation script sends the same API key
 * with every request. Bounded; the oldest entry goes first.
 */
const bcryptVerified = new Set<string>();
const BCRYPT_CACHE_MAX = 1024;

/**
 * verifySecret checks a parsed key against its record's stored hash by the key's scheme: a
 * Headway-shaped key only ever matches a SHA-256 hash and a headscale-shaped one only a bcrypt
 * hash, so neither form can stand in for the other.
 */
export async function verifySecret(presented: ParsedSecret, storedHash: string): Promise<boolean> {
  if (presented.scheme !== 'headscale') return !isBcryptHash(storedHash) && secretMatches(presented.secret, storedHash);
  if (!isBcryptHash(storedHash)) return false;
  const memo = createHash('sha256').update(storedHash).update('\0').update(presented.secret).digest('base64');
  if (bcryptVerified.has(memo)) return true;
  if (!(await bcrypt.compare(presented.secret, storedHash))) return false;
  if (bcryptVerified.size >= BCRYPT_CACHE_MAX) bcryptVerified.delete(bcryptVerified.values().next().value!);
  bcryptVerified.add(memo);
  return true;
}
