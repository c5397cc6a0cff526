import type { AcmeTxtPublisher, Logger, Node, SetDNSRequest } from '@headway/core';
import { systemClock, type Clock, type Timer } from './clock.js';

/** ACME_PREFIX is the label the ACME DNS-01 challenge puts before the name being validated (RFC 8555 §8.4). */
const ACME_PREFIX = '_acme-challenge.';

/** MAX_VALUES_PER_NAME: TXT values kept at one name at once; a device retrying an order replaces its oldest. */
const MAX_VALUES_PER_NAME = 4;

/**
 * REQUESTS_PER_WINDOW set-dns requests are taken per name in any REQUEST_WINDOW_MS: each one is a DNS update, and an
 * ACME order needs one or two (a retrying client a few more), so a device cannot make Headway flood the DNS primary.
 */
const REQUESTS_PER_WINDOW = 10;
const REQUEST_WINDOW_MS = 60_000;

/** ACME_VALUE is an ACME key-authorization digest: base64url without padding (43 characters for SHA-256). */
const ACME_VALUE = /^[A-Za-z0-9_-]{16,128}$/;

/** SetDnsAnswer is what /machine/set-dns replies: 200 with `{}`, or a status and a line saying why not. */
export type SetDnsAnswer = { status: 200 } | { status: number; text: string };

interface Live { value: string; timer: Timer }

export interface AcmeDnsOptions {
  /** publisher is the DNS plugin with setTxt/removeTxt; undefined when dns.certificates.enabled is false. */
  publisher: AcmeTxtPublisher | undefined;
  /** certDomainOf is the one name a node may get a certificate for (Mapper.certDomain). */
  certDomainOf: (node: Node) => string | undefined;
  /** lifetimeMs is dns.certificates.txt_lifetime: how long a value stays published. */
  lifetimeMs: number;
  logger: Logger;
  clock?: Clock;
  now?: () => number;
}

/**
 * AcmeDns answers `/machine/set-dns`: a device publishes the TXT record of the ACME
 * DNS-01 challenge for its own MagicDNS name, and nothing else. The record set at a
 * name holds the values asked for in the last txt_lifetime (at most
 * MAX_VALUES_PER_NAME); each value is withdrawn when its lifetime ends, the record
 * set removed with the last one, and every record this instance published is removed
 * at shutdown. Changes to one name are made one at a time, so the set the DNS server
 * ends with is the set held here.
 */
export class AcmeDns {
  private readonly live = new Map<string, Live[]>();
  private readonly queues = new Map<string, Promise<void>>();
  /** recent: the clock times of the requests taken per name within the last REQUEST_WINDOW_MS. */
  private readonly recent = new Map<string, number[]>();
  private readonly clock: Clock;
  private readonly now: () => number;

  constructor(private readonly o: AcmeDnsOptions) {
    this.clock = o.clock ?? systemClock;
    this.now = o.now ?? Date.now;
  }

  /** published lists the TXT names and values this instance holds (for tests and logs). */
  published(): Record<string, string[]> {
    return Object.fromEntries([...this.live].map(([name, list]) => [name, list.map((l) => l.value)]));
  }

  /**
   * handle checks a SetDNSRequest from `node` (already matched to the request's machine key)
   * and publishes its value: 403 when certificates are off, for another name, or for an
   * expired node; 400 for another record type or a value that is not an ACME digest; 429
   * beyond REQUESTS_PER_WINDOW a minute for one name; 502 when the DNS provider fails.
   */
  async handle(node: Node, req: SetDNSRequest): Promise<SetDnsAnswer> {
    const { publisher } = this.o;
    if (!publisher) return { status: 403, text: 'device certificates are not enabled on this server (dns.certificates.enabled is false)' };
    if (node.expiry && node.expiry.getTime() <= this.now()) return { status: 403, text: 'the node key has expired: log in again' };
    const domain = this.o.certDomainOf(node);
    if (!domain) return { status: 403, text: 'device certificates are not enabled on this server (dns.certificates.enabled is false)' };
    if (req.Type.toUpperCase() !== 'TXT') {
      return { status: 400, text: `record type ${JSON.stringify(req.Type.slice(0, 16))} is not allowed: a device may set only the TXT record of the ACME DNS-01 challenge` };
    }
    const name = req.Name.toLowerCase().replace(/\.$/, '');
    const own = ACME_PREFIX + domain;
    if (name !== own) {
      return { status: 403, text: `name ${JSON.stringify(req.Name.slice(0, 255))} is not allowed: this device may set only ${own}` };
    }
    if (!ACME_VALUE.test(req.Value)) return { status: 400, text: 'Value must be an ACME DNS-01 digest (base64url, 16 to 128 characters)' };
    if (!this.take(name)) return { status: 429, text: `too many set-dns requests for ${name}: at most ${REQUESTS_PER_WINDOW} a minute` };
    try {
      await this.change(name, (list) => {
        const kept = list.filter((l) => l.value !== req.Value).slice(-(MAX_VALUES_PER_NAME - 1));
        const timer = this.clock.setTimeout(() => void this.expire(name, req.Value), this.o.lifetimeMs);
        this.clock.unref(timer);
        return [...kept, { value: req.Value, timer }];
      });
    } catch (err) {
      this.o.logger.warn('the dns plugin could not publish an ACME challenge record', { name, node: node.id, error: (err as Error).message });
      return { status: 502, text: `the DNS provider did not publish ${name}; the server log says why` };
    }
    this.o.logger.info('ACME challenge record published', { name, node: node.id });
    return { status: 200 };
  }

  /** take counts a request for `name`, or says no when the window already holds REQUESTS_PER_WINDOW of them. */
  private take(name: string): boolean {
    const now = this.clock.now();
    const times = (this.recent.get(name) ?? []).filter((at) => now - at < REQUEST_WINDOW_MS);
    if (times.length >= REQUESTS_PER_WINDOW) { this.recent.set(name, times); return false; }
    times.push(now);
    this.recent.set(name, times);
    // Forget names whose window has passed, so the map holds only names asked for in the last minute.
    for (const [n, list] of this.recent) if (!list.some((at) => now - at < REQUEST_WINDOW_MS)) this.recent.delete(n);
    return true;
  }

  /** close withdraws every record this instance published. */
  async close(): Promise<void> {
    const names = [...this.live.keys()];
    await Promise.all(names.map((name) => this.change(name, () => []).catch((err: Error) => this.o.logger.warn('could not remove an ACME challenge record at shutdown', { name, error: err.message }))));
  }

  private async expire(name: string, value: string): Promise<void> {
    try {
      await this.change(name, (list) => list.filter((l) => l.value !== value));
    } catch (err) {
      this.o.logger.warn('could not remove an expired ACME challenge record', { name, error: (err as Error).message });
    }
  }

  /**
   * change computes the name's next list of values and makes the DNS zone match it,
   * after any change to the same name still under way. The list held here changes
   * only once the DNS provider has accepted the change.
   */
  private change(name: string, next: (list: Live[]) => Live[]): Promise<void> {
    const publisher = this.o.publisher!;
    const run = async () => {
      const before = this.live.get(name) ?? [];
      const after = next(before);
      try {
        if (after.length) await publisher.setTxt(name, after.map((l) => l.value));
        else if (before.length) await publisher.removeTxt(name);
      } catch (err) {
        // The zone still holds `before`: a new value's timer goes with it, the old values keep theirs.
        for (const l of after) if (!before.includes(l)) this.clock.clearTimeout(l.timer);
        throw err;
      }
      for (const l of before) if (!after.includes(l)) this.clock.clearTimeout(l.timer);
      if (after.length) this.live.set(name, after);
      else this.live.delete(name);
    };
    const queued = (this.queues.get(name) ?? Promise.resolve()).then(run);
    const settled = queued.catch(() => undefined);
    this.queues.set(name, settled);
    void settled.then(() => { if (this.queues.get(name) === settled) this.queues.delete(name); });
    return queued;
  }
}
