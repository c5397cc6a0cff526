import { EventEmitter } from 'node:events';
import { createSecureContext, type SecureContext } from 'node:tls';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from '@headway/core';
import { describe, readCertificate, renewAt, type Certificate } from './material.js';
import type { Challenges, ChallengeType, Orderer } from './order.js';

/** orderLazily loads acme-client only when an order is placed: its HTTP client and crypto are MiBs of heap a server without Let's Encrypt never needs. */
const orderLazily: Orderer = async (req, challenges) => (await import('./order.js')).acmeOrder(req, challenges);
import type { CertificateStore } from './store.js';

/*
 * CertificateManager keeps the server's Let's Encrypt certificate: the cached one at start when still good,
 * else a new order; a renewal once RENEW_AT_FRACTION of its lifetime has passed; failures retried with a
 * doubling back-off. Each new certificate is announced ('certificate') for the listeners to swap in.
 */

/** RETRY_MIN_MS and RETRY_MAX_MS: a failed order is retried after 1 min, doubling to 1 h (under Let's Encrypt's failed-validation limit of 5 an hour). */
export const RETRY_MIN_MS = 60_000;
export const RETRY_MAX_MS = 3_600_000;
/** TIMER_STEP_MS: a wait longer than this is taken in steps (Node's timers hold at most 24.8 days). */
const TIMER_STEP_MS = 86_400_000;
/** LEASE_MS: how long an instance may order before another one may try (an order takes seconds). */
const LEASE_MS = 10 * 60_000;
/** CLUSTER_POLL_MS: how often an instance that does not hold the lease looks for the certificate another one is ordering. */
const CLUSTER_POLL_MS = 5000;
/** SHARED_CHECK_MS: how often an instance of a cluster looks for a certificate another instance renewed (one row read). */
export const SHARED_CHECK_MS = 60_000;

/** Clock is time and timers, injected so tests move time themselves. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (fn, ms) => { const t = setTimeout(fn, ms); t.unref(); return t; },
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export interface ManagerOptions {
  hostname: string;
  directoryUrl: string;
  email: string;
  challenge: ChallengeType;
  store: CertificateStore;
  logger: Logger;
  /** holder names this instance for the store's lease (cluster); any string for one server. */
  holder?: string;
  clock?: Clock;
  order?: Orderer;
}

export declare interface CertificateManager {
  on(event: 'certificate', fn: (c: Certificate) => void): this;
}

export class CertificateManager extends EventEmitter implements Challenges {
  /** current is the certificate served, once there is one. */
  current?: Certificate;
  /** failures counts consecutive failed orders (the back-off's exponent); 0 after a success. */
  failures = 0;
  /** lastError is the last failed order's reason (the CA's problem detail when it gave one). */
  lastError?: string;
  private readonly clock: Clock;
  private readonly orderer: Orderer;
  private readonly http = new Map<string, string>();
  private readonly alpn = new Map<string, SecureContext>();
  private timer?: unknown;
  private checkTimer?: unknown;
  private running?: Promise<void>;
  private closed = false;
  private orders?: Counter<'result'>;
  private metricsRegistered = false;

  constructor(private readonly opts: ManagerOptions) {
    super();
    this.clock = opts.clock ?? systemClock;
    this.orderer = opts.order ?? orderLazily;
  }

  /** registerMetrics publishes the certificate's expiry and the orders made on `registry`. */
  registerMetrics(registry: Registry): void {
    if (this.metricsRegistered) return;
    this.metricsRegistered = true;
    const self = this;
    new Gauge({
      name: 'headway_tls_certificate_not_after_seconds', help: 'When the TLS certificate obtained from the ACME CA expires (seconds since the epoch); absent until there is one',
      registers: [registry],
      collect() { this.reset(); if (self.current) this.set(Math.floor(self.current.notAfter / 1000)); },
    });
    const orders = new Counter({ name: 'headway_acme_orders_total', help: 'Certificate orders sent to the ACME CA by this instance, by result (ok, failed)', labelNames: ['result'], registers: [registry] });
    orders.inc({ result: 'ok' }, this.ordered.ok);
    orders.inc({ result: 'failed' }, this.ordered.failed);
    this.orders = orders;
  }

  /** ordered counts this instance's orders, also before metrics are registered. */
  readonly ordered = { ok: 0, failed: 0 };

  /**
   * start takes the cached certificate when it is good for the host, else orders one and waits for that first
   * attempt; a failure is logged and retried in the background (TLS handshakes fail until a certificate comes).
   * A cache that cannot be read or written stops the start.
   */
  async start(): Promise<void> {
    if (this.opts.store.shared) this.watchStore();
    const cached = await this.opts.store.load();
    if (cached) {
      const c = readCertificate(cached.certPem, cached.keyPem, this.opts.hostname);
      if ('error' in c) this.opts.logger.warn('the cached TLS certificate is not used', { reason: c.error, cache: this.opts.store.where });
      else if (c.notAfter <= this.clock.now()) this.opts.logger.info('the cached TLS certificate has expired; ordering a new one', describe(c));
      else {
        this.install(c, 'cache');
        if (renewAt(c) > this.clock.now()) { this.schedule(renewAt(c) - this.clock.now()); return; }
      }
    }
    await this.renew();
  }

  /** renew runs one order now (joining one already running); the next attempt is scheduled either way. */
  renew(): Promise<void> {
    this.running ??= this.attempt().finally(() => { this.running = undefined; });
    return this.running;
  }

  private async attempt(): Promise<void> {
    const { store, logger, hostname } = this.opts;
    const holder = this.opts.holder ?? 'local';
    if (!await store.lease(holder, LEASE_MS)) {
      // Another instance is ordering: its certificate arrives through the store.
      if (!await this.adoptStored()) this.schedule(CLUSTER_POLL_MS);
      return;
    }
    try {
      if (await this.adoptStored()) return;
      let accountKeyPem = await store.loadAccountKey();
      if (!accountKeyPem) {
        accountKeyPem = await (await import('./order.js')).newAccountKey();
        await store.saveAccountKey(accountKeyPem);
      }
      logger.info('ordering a TLS certificate', { host: hostname, ca: this.opts.directoryUrl, challenge: this.opts.challenge.toUpperCase() });
      let got: { certPem: string; keyPem: string };
      try {
        got = await this.orderer({ directoryUrl: this.opts.directoryUrl, email: this.opts.email, hostname, challenge: this.opts.challenge, accountKeyPem }, this);
      } catch (err) {
        this.failed(oneLine(err));
        return;
      }
      const c = readCertificate(got.certPem, got.keyPem, hostname);
      if ('error' in c) { this.failed(`the CA's certificate cannot be served: ${c.error}`); return; }
      this.count('ok');
      await store.save({ certPem: c.certPem, keyPem: c.keyPem });
      this.install(c, 'ca');
      this.schedule(Math.max(renewAt(c) - this.clock.now(), 0));
    } finally {
      await store.release(holder).catch(() => undefined);
    }
  }

  /** watchStore looks for another instance's renewal every SHARED_CHECK_MS. */
  private watchStore(): void {
    const tick = () => {
      this.checkTimer = undefined;
      void this.refresh().catch(() => undefined).finally(() => { if (!this.closed) this.checkTimer = this.clock.setTimeout(tick, SHARED_CHECK_MS); });
    };
    this.checkTimer = this.clock.setTimeout(tick, SHARED_CHECK_MS);
  }

  /** refresh serves a newer certificate another instance stored (cluster); true when it did. */
  async refresh(): Promise<boolean> {
    if (this.running || this.closed) return false;
    return this.adoptStored();
  }

  /** adoptStored installs a certificate in the store newer than the one served and not yet due (another instance's order). */
  private async adoptStored(): Promise<boolean> {
    const stored = await this.opts.store.load();
    if (!stored) return false;
    const c = readCertificate(stored.certPem, stored.keyPem, this.opts.hostname);
    if ('error' in c || renewAt(c) <= this.clock.now() || (this.current && c.notAfter <= this.current.notAfter)) return false;
    this.install(c, 'store');
    this.schedule(renewAt(c) - this.clock.now());
    return true;
  }

  private count(result: 'ok' | 'failed'): void {
    this.ordered[result]++;
    this.orders?.inc({ result });
  }

  private failed(reason: string): void {
    this.count('failed');
    this.failures++;
    this.lastError = reason;
    const delay = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** (this.failures - 1));
    this.opts.logger.error('the ACME CA did not issue a TLS certificate; retrying', {
      host: this.opts.hostname, ca: this.opts.directoryUrl, reason, attempt: this.failures,
      retry_in_s: Math.round(delay / 1000), ...(this.current ? { serving: describe(this.current).not_after } : { serving: 'none: TLS handshakes fail until a certificate is issued' }),
    });
    this.schedule(delay);
  }

  private install(c: Certificate, from: 'cache' | 'ca' | 'store'): void {
    const renewed = this.current !== undefined;
    this.current = c;
    this.failures = 0;
    this.lastError = undefined;
    this.opts.logger.info(from === 'cache' ? 'using the cached TLS certificate' : renewed ? 'renewed the TLS certificate' : 'obtained the TLS certificate', { host: this.opts.hostname, ...describe(c), from });
    this.emit('certificate', c);
  }

  /** schedule runs the next attempt in `ms`, in steps of at most TIMER_STEP_MS. */
  private schedule(ms: number): void {
    if (this.closed) return;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    const due = this.clock.now() + ms;
    const step = () => {
      this.timer = undefined;
      const left = due - this.clock.now();
      if (left > 0) { this.timer = this.clock.setTimeout(step, Math.min(left, TIMER_STEP_MS)); return; }
      void this.renew();
    };
    this.timer = this.clock.setTimeout(step, Math.min(Math.max(ms, 0), TIMER_STEP_MS));
  }

  /** health is the certificate's state for /health: pass, warn (renewal overdue) or fail (none, or expired). */
  health(): { status: 'pass' | 'warn' | 'fail'; notAfter?: string; serial?: string; lastError?: string } {
    const c = this.current;
    const now = this.clock.now();
    const status = !c || c.notAfter <= now ? 'fail' : this.lastError && renewAt(c) <= now ? 'warn' : 'pass';
    return { status, ...(c ? { notAfter: new Date(c.notAfter).toISOString(), serial: c.serial } : {}), ...(this.lastError ? { lastError: this.lastError } : {}) };
  }

  // Challenges: filled while an order is validated, and put in a shared store for the other instances to answer.
  async setHttp(token: string, keyAuthorization: string): Promise<void> {
    this.http.set(token, keyAuthorization);
    await this.opts.store.putAnswer?.(`http-01:${token}`, keyAuthorization);
  }
  async clearHttp(token: string): Promise<void> {
    this.http.delete(token);
    await this.opts.store.putAnswer?.(`http-01:${token}`, undefined);
  }
  async setAlpn(host: string, certPem: string, keyPem: string): Promise<void> {
    this.alpn.set(host.toLowerCase(), createSecureContext({ cert: certPem, key: keyPem }));
    await this.opts.store.putAnswer?.(`tls-alpn-01:${host.toLowerCase()}`, JSON.stringify({ certPem, keyPem }));
  }
  async clearAlpn(host: string): Promise<void> {
    this.alpn.delete(host.toLowerCase());
    await this.opts.store.putAnswer?.(`tls-alpn-01:${host.toLowerCase()}`, undefined);
  }

  /** httpAnswer is the key authorization for an HTTP-01 token being validated here or, in a cluster, on another instance. */
  async httpAnswer(token: string): Promise<string | undefined> {
    return this.http.get(token) ?? await this.opts.store.getAnswer?.(`http-01:${token}`);
  }

  /** alpnOffered says whether an acme-tls/1 connection for `host` may be answered: a validation runs here, or may run on another instance. */
  alpnOffered(host: string): boolean {
    return this.alpn.has(host.toLowerCase()) || (this.opts.store.getAnswer !== undefined && host.toLowerCase() === this.opts.hostname);
  }

  /** alpnContext is the acmeIdentifier certificate for a TLS-ALPN-01 validation of `host`, if one is running. */
  async alpnContext(host: string): Promise<SecureContext | undefined> {
    const local = this.alpn.get(host.toLowerCase());
    if (local) return local;
    const shared = await this.opts.store.getAnswer?.(`tls-alpn-01:${host.toLowerCase()}`);
    if (!shared) return undefined;
    const { certPem, keyPem } = JSON.parse(shared) as { certPem: string; keyPem: string };
    return createSecureContext({ cert: certPem, key: keyPem });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    if (this.checkTimer !== undefined) this.clock.clearTimeout(this.checkTimer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }
}

/** oneLine is an error's message on one line (the CA's problem detail is in it). */
function oneLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).replace(/\s+/g, ' ').trim();
}
