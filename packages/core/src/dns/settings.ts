import { HeadwayError } from '../errors.js';
import type { DnsConfig } from '../config/schema.js';
import { nameserverProblem, searchDomainProblem, splitProblem } from '../config/syntax.js';
import type { Logger } from '../log.js';
import type { DnsSettings, DnsSettingsRepository } from '../ports/dns.js';
import type { ChangeBus } from '../state/bus.js';

/** DNS_FILE_KEYS names, per setting, the config key that holds it in dns.mode: file. */
const DNS_FILE_KEYS: Record<keyof DnsSettings, string> = {
  nameservers: 'dns.nameservers.global', split: 'dns.nameservers.split', searchDomains: 'dns.search_domains',
  magicDns: 'dns.magic_dns', overrideLocalDns: 'dns.override_local_dns',
};

/** dnsSettingsOf reads the DNS settings out of the config file's `dns.*` values. */
export function dnsSettingsOf(dns: DnsConfig): DnsSettings {
  return {
    nameservers: [...dns.nameservers.global], split: structuredClone(dns.nameservers.split), searchDomains: [...dns.search_domains],
    magicDns: dns.magic_dns, overrideLocalDns: dns.override_local_dns,
  };
}

/**
 * checkDnsSettings refuses settings a device could not use, naming the field and the value: nameservers (IP
 * addresses or DoH URLs), split DNS (domain → nameserver IPs), search domains, and MagicDNS without a base domain.
 */
export function checkDnsSettings(s: DnsSettings, baseDomain: string): void {
  const fail = (field: keyof DnsSettings, message: string): never => { throw new HeadwayError('invalid_field', message, field); };
  for (const ns of s.nameservers) {
    const p = nameserverProblem(ns);
    if (p) fail('nameservers', `nameservers: ${p}`);
  }
  const split = splitProblem(s.split);
  if (split) fail('split', `split DNS: ${split}`);
  for (const d of s.searchDomains) {
    const p = searchDomainProblem(d);
    if (p) fail('searchDomains', `search paths: ${p}`);
  }
  if (s.magicDns && !baseDomain) fail('magicDns', 'MagicDNS needs dns.base_domain set in the config file');
}

/**
 * DnsSettingsService owns the DNS settings in force. With dns.mode: file they are the config file's and cannot
 * change while running; with dns.mode: database they are the stored row (seeded from the config file on the first
 * start), changed by `update`, which stores them, puts them in force and publishes `dns-settings-changed` (the
 * control plane sends every connected device its new DNS config; the cluster tells the other instances, which
 * `reload`).
 */
export class DnsSettingsService {
  private settings: DnsSettings;

  constructor(
    private readonly dns: DnsConfig,
    private readonly repo: DnsSettingsRepository | undefined,
    private readonly bus: ChangeBus,
    private readonly logger: Logger,
  ) {
    this.settings = dnsSettingsOf(dns);
  }

  get mode(): 'file' | 'database' { return this.dns.mode; }

  /** init loads the stored settings in database mode, storing the config file's when there are none yet. */
  async init(): Promise<void> {
    if (this.dns.mode !== 'database') return;
    if (!this.repo) throw new Error('dns.mode: database needs a storage adapter that keeps DNS settings (the built-in SQL ones do)');
    this.settings = (await this.repo.seed(dnsSettingsOf(this.dns))).settings;
  }

  /** current are the settings in force (a copy). */
  current(): DnsSettings { return structuredClone(this.settings); }

  /**
   * update applies change to the stored settings (not this instance's copy, which another instance may have
   * outdated), checks the result and stores it in one transaction, then puts it in force. In file mode it answers
   * 400 naming the config keys to edit instead.
   */
  async update(change: (current: DnsSettings) => DnsSettings): Promise<DnsSettings> {
    if (this.dns.mode !== 'database' || !this.repo) {
      const keys = Object.values(DNS_FILE_KEYS).join(', ');
      throw new HeadwayError('dns_read_only', `DNS settings come from the config file (dns.mode: file): edit ${keys} there and restart, or set dns.mode: database to change them through the API`);
    }
    const rec = await this.repo.update((stored) => {
      const next = change(structuredClone(stored ?? this.settings));
      checkDnsSettings(next, this.dns.base_domain);
      return next;
    });
    this.apply(rec.settings);
    this.logger.info('dns settings changed');
    return this.current();
  }

  /** reload re-reads the stored settings after another instance changed them (published as not to be announced again). */
  async reload(): Promise<void> {
    if (this.dns.mode !== 'database' || !this.repo) return;
    const rec = await this.repo.get();
    if (!rec || JSON.stringify(rec.settings) === JSON.stringify(this.settings)) return;
    this.bus.asRemote(() => this.apply(rec.settings));
  }

  private apply(settings: DnsSettings): void {
    this.settings = settings;
    this.bus.publish({ type: 'dns-settings-changed' });
  }
}
