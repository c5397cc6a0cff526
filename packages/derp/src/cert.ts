import { createHash, createPrivateKey, X509Certificate } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { dirname } from 'node:path';

const DAY_MS = 24 * 3600_000;
/** RELAY_CERT_VALIDITY_DAYS matches tailscale's derper: a year (longer is refused by some TLS stacks). */
export const RELAY_CERT_VALIDITY_DAYS = 365;
/** RELAY_CERT_RENEW_BEFORE_MS: a certificate this close to expiry is replaced at start-up or by renewal. */
export const RELAY_CERT_RENEW_BEFORE_MS = 30 * DAY_MS;
/** Backdating covers devices whose clock runs a little behind (Go refuses a certificate "not yet valid"). */
const BACKDATE_MS = DAY_MS;

/** RelayCertificate is the relay's TLS identity as PEM plus what the DERP map pins. */
export interface RelayCertificate {
  cert: string;
  key: string;
  /** sha256 is the lower-case hex SHA-256 of the certificate's DER bytes (DERPNode.CertName "sha256-raw:<hex>"). */
  sha256: string;
  notAfter: Date;
  hostNames: string[];
  /** created is true when this call generated the pair; reason then says why. */
  created: boolean;
  reason?: string;
}

export interface RelayCertificateOptions {
  certPath: string;
  keyPath: string;
  /** hostNames the certificate must cover: DNS names and IP literals (the DERP node's HostName first). */
  hostNames: string[];
  now?: Date;
}

/** certificateSha256 is the hex SHA-256 of a PEM certificate's DER encoding, the form Tailscale's sha256-raw pin compares. */
export function certificateSha256(certPem: string): string {
  return createHash('sha256').update(new X509Certificate(certPem).raw).digest('hex');
}

/** certificateCovers reports whether a certificate is valid for a host name or IP literal. */
export function certificateCovers(cert: X509Certificate, host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return isIP(h) ? cert.checkIP(h) !== undefined : cert.checkHost(h) !== undefined;
}

/**
 * loadOrCreateRelayCertificate returns the relay's self-signed certificate from
 * disk, or generates a new one (ECDSA P-256, files mode 0600) when a file is
 * missing or unreadable, the pair does not match, a host name is not covered
 * (server_url changed), or it expires within 30 days. Reusing it across
 * restarts keeps the pin clients already hold valid.
 */
export async function loadOrCreateRelayCertificate(options: RelayCertificateOptions): Promise<RelayCertificate> {
  const now = options.now ?? new Date();
  const hostNames = [...new Set(options.hostNames.map((h) => h.replace(/^\[|\]$/g, '')).filter(Boolean))];
  if (!hostNames.length) throw new Error('relay certificate: at least one host name is required');
  const existing = readExisting(options, hostNames, now);
  if (existing.ok) return existing.ok;
  const generated = await generateRelayCertificate(hostNames, now);
  writePrivate(options.keyPath, generated.key);
  writePrivate(options.certPath, generated.cert);
  return { ...generated, created: true, reason: existing.why };
}

function readExisting(o: RelayCertificateOptions, hostNames: string[], now: Date): { ok?: RelayCertificate; why: string } {
  if (!existsSync(o.certPath) || !existsSync(o.keyPath)) return { why: 'no certificate yet' };
  let cert: X509Certificate;
  let certPem: string;
  let keyPem: string;
  try {
    certPem = readFileSync(o.certPath, 'utf8');
    keyPem = readFileSync(o.keyPath, 'utf8');
    cert = new X509Certificate(certPem);
    if (!cert.checkPrivateKey(createPrivateKey(keyPem))) return { why: `${o.keyPath} is not the key of ${o.certPath}` };
  } catch (err) {
    return { why: `the stored certificate is unreadable (${(err as Error).message})` };
  }
  const missing = hostNames.filter((h) => !certificateCovers(cert, h));
  if (missing.length) return { why: `the stored certificate does not cover ${missing.join(', ')}` };
  const notAfter = new Date(cert.validTo);
  if (notAfter.getTime() - now.getTime() < RELAY_CERT_RENEW_BEFORE_MS) return { why: `the stored certificate expires ${notAfter.toISOString()}` };
  if (new Date(cert.validFrom).getTime() > now.getTime()) return { why: `the stored certificate is not valid before ${cert.validFrom}` };
  return { ok: { cert: certPem, key: keyPem, sha256: createHash('sha256').update(cert.raw).digest('hex'), notAfter, hostNames, created: false }, why: '' };
}

/** generateRelayCertificate makes a self-signed server certificate whose names are exactly hostNames. */
async function generateRelayCertificate(hostNames: string[], now: Date): Promise<Omit<RelayCertificate, 'created' | 'reason'>> {
  const notBefore = new Date(now.getTime() - BACKDATE_MS);
  const notAfter = new Date(now.getTime() + RELAY_CERT_VALIDITY_DAYS * DAY_MS);
  const altNames = hostNames.map((h) => (isIP(h) ? { type: 7 as const, ip: h } : { type: 2 as const, value: h }));
  // Imported only when a pair is made: its X.509 stack is a few MiB of heap that a start with a stored pair never needs.
  const { generate: generateSelfSigned } = await import('selfsigned');
  const pems = await generateSelfSigned([{ name: 'commonName', value: hostNames[0]! }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate: notBefore,
    notAfterDate: notAfter,
    extensions: [
      { name: 'basicConstraints', cA: false, critical: true },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames },
    ],
  });
  const cert = new X509Certificate(pems.cert);
  return { cert: pems.cert, key: pems.private, sha256: createHash('sha256').update(cert.raw).digest('hex'), notAfter: new Date(cert.validTo), hostNames };
}

/** writePrivate replaces a file atomically (temporary file, then rename) with mode 0600 from its creation. */
function writePrivate(path: string, text: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}
