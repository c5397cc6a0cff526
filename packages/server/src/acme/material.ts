import { createPrivateKey, X509Certificate } from 'node:crypto';

/*
 * The certificate Headway serves from its ACME CA: parsed, checked against its key and host name, and timed.
 */

/** RENEW_AT_FRACTION: renew once two thirds of the lifetime has passed (Let's Encrypt's advice), leaving a third for retries. */
export const RENEW_AT_FRACTION = 2 / 3;

/** Certificate is a PEM chain (leaf first) with its private key, as served and as cached. */
export interface Certificate {
  /** certPem is the leaf and its intermediates, PEM. */
  certPem: string;
  /** keyPem is the leaf's private key, PEM (never logged). */
  keyPem: string;
  notBefore: number;
  notAfter: number;
  /** serial is the leaf's serial number, hex (what a log line and a test name it by). */
  serial: string;
  issuer: string;
}

/**
 * readCertificate parses a chain and key, or says why they cannot be served for `host`: not PEM, a key that is not
 * the certificate's, or a certificate for another name.
 */
export function readCertificate(certPem: string, keyPem: string, host: string): Certificate | { error: string } {
  let leaf: X509Certificate;
  try { leaf = new X509Certificate(certPem); } catch { return { error: 'the certificate is not PEM' }; }
  try {
    if (!leaf.checkPrivateKey(createPrivateKey(keyPem))) return { error: 'the key is not the certificate\'s' };
  } catch { return { error: 'the key is not a PEM private key' }; }
  if (!leaf.checkHost(host, { wildcards: false })) return { error: `the certificate does not name ${host}` };
  return {
    certPem, keyPem,
    notBefore: Date.parse(leaf.validFrom), notAfter: Date.parse(leaf.validTo),
    serial: leaf.serialNumber.toLowerCase(), issuer: leaf.issuer.replace(/\n/g, ', '),
  };
}

/** renewAt is when a certificate is due for renewal: RENEW_AT_FRACTION into its lifetime. */
export function renewAt(c: Pick<Certificate, 'notBefore' | 'notAfter'>): number {
  return c.notBefore + Math.floor((c.notAfter - c.notBefore) * RENEW_AT_FRACTION);
}

/** describe names a certificate for a log line: serial, issuer, validity (no key material). */
export function describe(c: Certificate): Record<string, string> {
  return { serial: c.serial, issuer: c.issuer, not_after: new Date(c.notAfter).toISOString(), renew_at: new Date(renewAt(c)).toISOString() };
}
