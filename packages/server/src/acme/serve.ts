import type http from 'node:http';
import type https from 'node:https';
import type { HeadwayConfig, Logger } from '@headway/core';
import { closeSilentConnections } from '@headway/core';
import { serveRequests } from '../listeners.js';
import { http01Handler, type AnswerSlot } from './listen.js';
import { CertificateManager, type Clock } from './manager.js';
import type { Certificate } from './material.js';
import type { Orderer } from './order.js';
import { DirectoryStore, type CertificateStore } from './store.js';
import { DatabaseStore, sharedValues } from './store-db.js';
import { randomUUID } from 'node:crypto';
import type { ClusterPort } from '@headway/core';

/*
 * Let's Encrypt in a running server: the certificate manager wired to the listeners bound for it.
 */

export interface CertificateOptions {
  config: HeadwayConfig;
  logger: Logger;
  /** slot is what the listeners were bound with (bindListeners): the manager answers through it. */
  slot: AnswerSlot;
  main: https.Server;
  acmeHttp?: http.Server;
  /** cluster: with cluster.enabled, the database port that shares the certificate between the instances. */
  cluster?: ClusterPort;
  clock?: Clock;
  order?: Orderer;
}

/** pemPair is a certificate as the TLS listeners take it. */
export function pemPair(c: Certificate): { cert: Buffer; key: Buffer } {
  return { cert: Buffer.from(c.certPem), key: Buffer.from(c.keyPem) };
}

/**
 * startCertificates answers validations on the bound listeners, serves each certificate the manager gets on the main
 * listener (setSecureContext: open connections keep theirs, new ones get it), and waits for the first attempt.
 */
export async function startCertificates(opts: CertificateOptions): Promise<CertificateManager> {
  const { config, logger } = opts;
  const hostname = config.tls_letsencrypt_hostname.toLowerCase();
  const shared = config.cluster.enabled ? sharedValues(opts.cluster) : undefined;
  let store: CertificateStore;
  if (shared) store = new DatabaseStore(shared, hostname, config.acme_url);
  else {
    const dir = new DirectoryStore(config.tls_letsencrypt_cache_dir, hostname);
    dir.check();
    store = dir;
  }
  const manager = new CertificateManager({
    hostname, directoryUrl: config.acme_url, email: config.acme_email,
    challenge: config.tls_letsencrypt_challenge_type === 'TLS-ALPN-01' ? 'tls-alpn-01' : 'http-01',
    store, logger, holder: randomUUID(), clock: opts.clock, order: opts.order,
  });
  opts.slot.target = manager;
  if (opts.acmeHttp) {
    serveRequests(opts.acmeHttp, http01Handler(manager, config.server_url));
    // The main listener's deadline for a connection that sends no complete request.
    closeSilentConnections(opts.acmeHttp, config.noise.handshake_timeout);
  }
  manager.on('certificate', (c) => opts.main.setSecureContext(pemPair(c)));
  if (shared) logger.info('the TLS certificate is shared through the database', { host: hostname });
  await manager.start();
  return manager;
}

/**
 * withCertificate calls `fn` with the manager's certificate now or, without one yet, when it comes; then `next` on
 * each renewal. A failure of `fn` is logged (`what` names it).
 */
export function withCertificate(manager: CertificateManager, logger: Logger, what: string, fn: (c: Certificate) => Promise<unknown>, next: (c: Certificate) => void): Promise<unknown> | undefined {
  let started: Promise<unknown> | undefined;
  const begin = (c: Certificate) => {
    started = fn(c);
    started.catch((err: unknown) => logger.error(`${what} did not start with the TLS certificate`, { error: (err as Error).message }));
    return started;
  };
  manager.on('certificate', (c) => { if (started) next(c); else begin(c); });
  return manager.current ? begin(manager.current) : undefined;
}

/** acmeHealth is /health's `tls:certificate` component: the served certificate's expiry, and the last renewal failure. */
export function acmeHealth(manager: CertificateManager): () => Record<string, unknown[]> {
  return () => {
    const h = manager.health();
    return {
      'tls:certificate': [{
        componentType: 'system', status: h.status, observedUnit: 'notAfter', observedValue: h.notAfter ?? null,
        ...(h.serial ? { serial: h.serial } : {}), ...(h.lastError ? { output: h.lastError } : {}),
      }],
    };
  };
}
