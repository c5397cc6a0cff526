import { readFileSync } from 'node:fs';
import https from 'node:https';
import { rootCertificates } from 'node:tls';
import acme from 'acme-client';

/*
 * One certificate order against an ACME CA, through acme-client (RFC 8555): account, order, the one challenge
 * type configured, finalize, download. The challenge answers are handed to the listeners through Challenges.
 */

export type ChallengeType = 'http-01' | 'tls-alpn-01';

/** Challenges is where an order puts the answers the CA asks for while it validates, and takes them back. */
export interface Challenges {
  setHttp(token: string, keyAuthorization: string): Promise<void>;
  clearHttp(token: string): Promise<void>;
  /** setAlpn serves `certPem` (the acmeIdentifier certificate, RFC 8737) to acme-tls/1 connections for `host`. */
  setAlpn(host: string, certPem: string, keyPem: string): Promise<void>;
  clearAlpn(host: string): Promise<void>;
}

export interface OrderRequest {
  directoryUrl: string;
  /** email is the account's contact (acme_email); empty registers without one. */
  email: string;
  hostname: string;
  challenge: ChallengeType;
  accountKeyPem: string;
}

/** Orderer obtains a certificate (the PEM chain and its new key); it throws with the CA's reason when refused. */
export type Orderer = (req: OrderRequest, challenges: Challenges) => Promise<{ certPem: string; keyPem: string }>;

/** POLL_MIN_MS and POLL_MAX_MS: how often a pending authorization or order is polled (a CA validates in seconds). */
const POLL_MIN_MS = 500;
const POLL_MAX_MS = 5000;

// The manager retries a failed order with its own back-off, so acme-client's transport does not retry as well.
(acme.axios.defaults as unknown as { acmeSettings: { retryMaxAttempts: number } }).acmeSettings.retryMaxAttempts = 0;

/**
 * trustAgent is the HTTPS agent the ACME client uses: Node's roots plus the PEM file NODE_EXTRA_CA_CERTS names,
 * read when an order starts (a test CA's directory is served under a root of its own). Without the variable, Node's
 * default agent.
 */
function trustAgent(): https.Agent | undefined {
  const extra = process.env['NODE_EXTRA_CA_CERTS'];
  if (!extra) return undefined;
  let pem: string;
  try { pem = readFileSync(extra, 'utf8'); } catch (err) {
    throw new Error(`NODE_EXTRA_CA_CERTS ${extra}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  return new https.Agent({ ca: [...rootCertificates, pem], keepAlive: false });
}

/** newAccountKey makes the ACME account's key (P-256, as Let's Encrypt recommends). */
export async function newAccountKey(): Promise<string> {
  return (await acme.crypto.createPrivateEcdsaKey('P-256')).toString();
}

/** acmeOrder is the Orderer that speaks to a real CA. */
export const acmeOrder: Orderer = async (req, challenges) => {
  acme.axios.defaults.httpsAgent = trustAgent();
  const client = new acme.Client({ directoryUrl: req.directoryUrl, accountKey: req.accountKeyPem, backoffMin: POLL_MIN_MS, backoffMax: POLL_MAX_MS });
  const [keyPem, csr] = await acme.crypto.createCsr({ commonName: req.hostname, altNames: [req.hostname] }, await acme.crypto.createPrivateEcdsaKey('P-256'));
  const certPem = await client.auto({
    csr,
    email: req.email || undefined,
    termsOfServiceAgreed: true,
    challengePriority: [req.challenge],
    // The CA's own validation is the check; a self-check would need this machine to reach itself by its public name.
    skipChallengeVerification: true,
    challengeCreateFn: async (authz, challenge, keyAuthorization) => {
      const type: string = challenge.type;
      if (type !== req.challenge) throw new Error(`the CA offered no ${req.challenge.toUpperCase()} challenge for ${authz.identifier.value}`);
      if (type === 'http-01') await challenges.setHttp(challenge.token, keyAuthorization);
      else {
        const [alpnKey, alpnCert] = await acme.crypto.createAlpnCertificate(authz, keyAuthorization);
        await challenges.setAlpn(authz.identifier.value, alpnCert.toString(), alpnKey.toString());
      }
    },
    challengeRemoveFn: async (authz, challenge) => {
      const type: string = challenge.type;
      if (type === 'http-01') await challenges.clearHttp(challenge.token);
      else if (type === 'tls-alpn-01') await challenges.clearAlpn(authz.identifier.value);
    },
  });
  return { certPem, keyPem: keyPem.toString() };
};
