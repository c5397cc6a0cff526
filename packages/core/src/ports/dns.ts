import { assertPort, PortAssertionError } from './assert.js';

/** DnsRecord is an extra A/AAAA record served by MagicDNS. */
export interface DnsRecord { name: string; type: 'A' | 'AAAA'; value: string }

/**
 * DnsPort lets plugins add to what every node's resolver knows, and publish the
 * TXT records of the ACME DNS-01 challenge in a real DNS zone:
 *
 * - `records()` are extra records under any name (kept in a file, another system, ...);
 * - `tailnetRecords()`, when present, answers names under the tailnet domain
 *   (`dns.base_domain`), given relative to it (`printer` → `printer.<base_domain>`),
 *   so a plugin need not know the domain. Several DNS plugins may be listed under
 *   `plugins:`; their records are merged in the listed order, after `dns.extra_records`.
 * - `setTxt(fqdn, values)` and `removeTxt(fqdn)` (the ACME-challenge capability, both
 *   or neither) publish in the zone that serves `dns.base_domain` on the Internet.
 *   With `dns.certificates.enabled`, a device's `/machine/set-dns` request for
 *   `_acme-challenge.<its name>.<base_domain>` ends in `setTxt`, and `removeTxt`
 *   follows once `dns.certificates.txt_lifetime` has passed. Exactly one listed DNS
 *   plugin may have them. A plugin that only publishes challenges may leave out
 *   `records()`.
 */
export interface DnsPort {
  records?(): Promise<DnsRecord[]>;
  tailnetRecords?(): Promise<DnsRecord[]>;
  /**
   * setTxt makes `values` the whole TXT record set at `fqdn` (absolute, no trailing
   * dot, lower case), replacing what was there, and resolves once the zone's
   * authoritative servers answer with it (the device asks the CA to validate as
   * soon as its request returns). Values are ACME key-authorization digests
   * (base64url, 43 characters). Reject with an Error saying what the DNS server
   * answered; its text goes to the server log, and the device gets a 502.
   */
  setTxt?(fqdn: string, values: string[]): Promise<void>;
  /** removeTxt deletes the TXT record set at `fqdn`; removing what is not there is no error. */
  removeTxt?(fqdn: string): Promise<void>;
  /** watch calls onChange when the records may have changed; returns an unsubscribe. */
  watch?(onChange: () => void): () => void;
  /** close releases what the plugin holds (watchers, connections) at shutdown. */
  close?(): Promise<void> | void;
}

/** AcmeTxtPublisher is a DnsPort that publishes ACME challenge records. */
export type AcmeTxtPublisher = DnsPort & Required<Pick<DnsPort, 'setTxt' | 'removeTxt'>>;

/** publishesTxt says whether a DNS plugin has the ACME-challenge capability. */
export function publishesTxt(port: DnsPort): port is AcmeTxtPublisher {
  return typeof port.setTxt === 'function' && typeof port.removeTxt === 'function';
}

export const DNS = 'dns';

/** assertDnsPort: a DNS plugin has records(), or setTxt and removeTxt, or all three. */
export function assertDnsPort(value: unknown, adapter: string): asserts value is DnsPort {
  assertPort(value, adapter, 'dns', []);
  const v = value as Record<string, unknown>;
  const has = (m: string) => typeof v[m] === 'function';
  if (has('setTxt') !== has('removeTxt')) throw new PortAssertionError(adapter, 'dns', [has('setTxt') ? 'removeTxt (it has setTxt)' : 'setTxt (it has removeTxt)']);
  if (!has('records') && !has('setTxt')) throw new PortAssertionError(adapter, 'dns', ['records (or setTxt and removeTxt)']);
}

/**
 * DnsSettings are the tailnet's resolver settings that `dns.mode: database` keeps in storage (the `dns.*` keys of
 * the same names in file mode): global nameservers (IPs or DoH URLs), split DNS (domain → nameserver IPs), search
 * domains, MagicDNS, and whether devices use the global nameservers for everything.
 */
export interface DnsSettings {
  nameservers: string[];
  split: Record<string, string[]>;
  searchDomains: string[];
  magicDns: boolean;
  overrideLocalDns: boolean;
}

export interface DnsSettingsRecord { settings: DnsSettings; updatedAt: Date }

/**
 * DnsSettingsRepository keeps the one DnsSettings record of `dns.mode: database`. Optional on a storage
 * adapter (the SQL adapters have it); without it that mode refuses to start.
 */
export interface DnsSettingsRepository {
  get(): Promise<DnsSettingsRecord | undefined>;
  /** seed stores `settings` when nothing is stored yet and answers what is stored (concurrent seeds keep one). */
  seed(settings: DnsSettings): Promise<DnsSettingsRecord>;
  /**
   * update replaces the stored settings with change(stored) in one transaction, after a lock that makes concurrent
   * updates (from any instance) wait; when change throws, nothing is written and update rejects with its error.
   */
  update(change: (current: DnsSettings | undefined) => DnsSettings): Promise<DnsSettingsRecord>;
}
