import { readFile } from 'node:fs/promises';
import { watch, type FSWatcher } from 'node:fs';
import type { DnsConfig } from '@headway/core';
import { checkRecord } from '@headway/core';
import { parsePrefix, type Prefix } from '@headway/core';
import type { Logger } from '@headway/core';
import type { DnsPort, DnsRecord, DnsSettings } from '@headway/core';

interface Resolver { Addr: string }

/** reverseZones lists the in-addr.arpa / ip6.arpa zones covering a prefix (byte or nibble aligned). */
export function reverseZones(p: Prefix): string[] {
  const unit = p.family === 4 ? 8 : 4;
  const width = p.family === 4 ? 32 : 128;
  const bits = Math.ceil(p.bits / unit) * unit;
  const count = 1 << (bits - p.bits);
  const zones: string[] = [];
  for (let i = 0; i < count; i++) {
    const base = p.base + (BigInt(i) << BigInt(width - bits));
    const parts: string[] = [];
    for (let k = 0; k < bits / unit; k++) {
      const shift = BigInt(width - (k + 1) * unit);
      const v = Number((base >> shift) & BigInt((1 << unit) - 1));
      parts.push(p.family === 4 ? String(v) : v.toString(16));
    }
    zones.push(`${parts.reverse().join('.')}.${p.family === 4 ? 'in-addr' : 'ip6'}.arpa`);
  }
  return zones;
}

/**
 * DnsConfigSource builds the DNSConfig every node receives from `dns.*`, the
 * extra records file (re-read when it changes) and the DnsPort plugins, whose
 * records follow in the order `plugins:` lists them.
 */
export class DnsConfigSource {
  private fileRecords: DnsRecord[] = [];
  private pluginRecords: DnsRecord[][] = [];
  private watcher?: FSWatcher;
  private unwatchPlugins: Array<() => void> = [];
  private cached?: Record<string, unknown>;
  private effective?: DnsConfig;

  constructor(
    private readonly file: DnsConfig,
    private readonly prefixes: string[],
    private readonly logger: Logger,
    private readonly onChange: () => void,
    private readonly plugins: readonly DnsPort[] = [],
    private readonly settings?: () => DnsSettings,
  ) {}

  /** dns is the config file's dns block with the settings in force (dns.mode: database keeps them in storage), built once per change. */
  private get dns(): DnsConfig {
    if (this.effective) return this.effective;
    const s = this.settings?.();
    this.effective = !s ? this.file : {
      ...this.file, magic_dns: s.magicDns, override_local_dns: s.overrideLocalDns, search_domains: s.searchDomains,
      nameservers: { global: s.nameservers, split: s.split },
    };
    return this.effective;
  }

  /** settingsChanged rebuilds the DNS config after the DNS settings in force changed, and tells every device. */
  settingsChanged(): void {
    this.effective = undefined;
    this.changed();
  }

  async init(): Promise<void> {
    if (this.dns.extra_records_path) {
      this.fileRecords = await this.readRecordsFile(true);
      let timer: NodeJS.Timeout | undefined;
      try {
        this.watcher = watch(this.dns.extra_records_path, () => {
          clearTimeout(timer);
          timer = setTimeout(() => void this.reloadFile(), 100);
        });
      } catch (err) {
        this.logger.warn('cannot watch dns.extra_records_path', { path: this.dns.extra_records_path, error: (err as Error).message });
      }
    }
    for (const [i, plugin] of this.plugins.entries()) {
      try {
        this.pluginRecords[i] = await this.readPlugin(plugin);
      } catch (err) {
        throw new Error(`plugins: dns plugin ${i + 1} of ${this.plugins.length}: ${(err as Error).message}`);
      }
      const unwatch = plugin.watch?.(() => void this.readPlugin(plugin).then((r) => {
        if (JSON.stringify(r) === JSON.stringify(this.pluginRecords[i])) return;
        this.pluginRecords[i] = r;
        this.changed();
      }, (err: Error) => this.logger.warn('dns plugin records failed; keeping the previous records', { plugin: i + 1, error: err.message })));
      if (unwatch) this.unwatchPlugins.push(unwatch);
    }
  }

  /**
   * readPlugin asks one plugin for its records and checks them as dns.extra_records
   * are checked; names from tailnetRecords() are qualified with dns.base_domain.
   */
  private async readPlugin(plugin: DnsPort): Promise<DnsRecord[]> {
    const check = (list: unknown, what: string): DnsRecord[] => {
      if (!Array.isArray(list)) throw new Error(`${what}() must return a list of {name, type, value} records`);
      list.forEach((r, i) => {
        const err = checkRecord(r);
        if (err) throw new Error(`${what}() record ${i + 1}: ${err}`);
      });
      return list.map((r: DnsRecord) => ({ name: r.name, type: r.type, value: r.value }));
    };
    const out = plugin.records ? check(await plugin.records(), 'records') : [];
    if (plugin.tailnetRecords) {
      const base = this.dns.base_domain.replace(/\.$/, '');
      const local = check(await plugin.tailnetRecords(), 'tailnetRecords');
      if (local.length && !(this.dns.magic_dns && base)) {
        this.logger.warn('dns plugin tailnet records ignored: dns.magic_dns is off or dns.base_domain is empty', { records: local.length });
      } else {
        for (const r of local) {
          const label = r.name.replace(/\.$/, '');
          if (label.endsWith(`.${base}`) || label === base) throw new Error(`tailnetRecords() name ${JSON.stringify(r.name)} must be relative to the tailnet domain (without .${base})`);
          out.push({ ...r, name: `${label}.${base}` });
        }
      }
    }
    return out;
  }

  private async readRecordsFile(strict: boolean): Promise<DnsRecord[]> {
    const path = this.dns.extra_records_path;
    try {
      const parsed = parseJsonFile(await readFile(path, 'utf8'));
      if (!Array.isArray(parsed)) throw new Error('expected a JSON list of {name, type, value} records');
      parsed.forEach((r, i) => {
        const err = checkRecord(r);
        if (err) throw new Error(`record ${i + 1}: ${err}`);
      });
      return parsed as DnsRecord[];
    } catch (err) {
      if (strict) throw new Error(`dns.extra_records_path ${path}: ${(err as Error).message}`);
      throw err;
    }
  }

  private async reloadFile(): Promise<void> {
    try {
      const next = await this.readRecordsFile(false);
      if (JSON.stringify(next) === JSON.stringify(this.fileRecords)) return;
      this.fileRecords = next;
      this.logger.info('dns extra records reloaded', { path: this.dns.extra_records_path, records: next.length });
      this.changed();
    } catch (err) {
      this.logger.warn('dns extra records file invalid; keeping the previous records', { path: this.dns.extra_records_path, error: (err as Error).message });
    }
  }

  private changed(): void {
    this.cached = undefined;
    this.onChange();
  }

  /**
   * records lists the extra records every device receives, each with where it comes from: the config file's
   * dns.extra_records, the file dns.extra_records_path names, or a DNS plugin (by its place in `plugins:`).
   */
  records(): Array<{ name: string; type: string; value: string; source: string }> {
    const tag = (list: Array<{ name: string; type: string; value: string }>, source: string) => list.map((r) => ({ name: r.name, type: r.type, value: r.value, source }));
    return [
      ...tag(this.dns.extra_records, 'dns.extra_records'),
      ...tag(this.fileRecords, `dns.extra_records_path (${this.dns.extra_records_path})`),
      ...this.pluginRecords.flatMap((list, i) => tag(list, `plugin ${i + 1}`)),
    ];
  }

  /** config is the tailcfg.DNSConfig, built once per change and shared by every node. */
  config(): Record<string, unknown> {
    if (this.cached) return this.cached;
    const d = this.dns;
    const resolvers = d.nameservers.global.map((a): Resolver => ({ Addr: a }));
    const routes: Record<string, Resolver[]> = {};
    for (const [domain, list] of Object.entries(d.nameservers.split)) routes[domain] = list.map((a) => ({ Addr: a }));
    if (d.magic_dns) {
      for (const p of this.prefixes) {
        const prefix = parsePrefix(p);
        if (prefix) for (const z of reverseZones(prefix)) routes[z] ??= [];
      }
    }
    const records = [...d.extra_records, ...this.fileRecords, ...this.pluginRecords.flat()];
    const cfg: Record<string, unknown> = {
      Resolvers: d.override_local_dns ? resolvers : [],
      FallbackResolvers: d.override_local_dns ? [] : resolvers,
      Routes: routes,
      Domains: [...(d.magic_dns && d.base_domain ? [d.base_domain] : []), ...d.search_domains],
      Proxied: d.magic_dns,
      ExtraRecords: records.map((r) => ({ Name: r.name, Type: r.type, Value: r.value })),
    };
    if (d.magic_dns && d.base_domain) cfg.CertDomains = [];
    this.cached = cfg;
    return cfg;
  }

  /**
   * certDomain is the one name a node may get a certificate for, its MagicDNS name
   * (`<given name>.<base_domain>`, no trailing dot), when dns.certificates.enabled.
   */
  certDomain(givenName: string): string | undefined {
    const d = this.dns;
    if (!d.certificates.enabled || !d.magic_dns || !d.base_domain) return undefined;
    return `${givenName}.${d.base_domain.replace(/\.$/, '')}`.toLowerCase();
  }

  /** configFor is config() with the node's own CertDomains (a copy; config() stays shared). */
  configFor(givenName: string): Record<string, unknown> {
    const domain = this.certDomain(givenName);
    return domain ? { ...this.config(), CertDomains: [domain] } : this.config();
  }

  close(): void {
    this.watcher?.close();
    for (const unwatch of this.unwatchPlugins) unwatch();
  }
}

/**
 * parseJsonFile is JSON.parse with an error that says where, not what: V8's message quotes the text around the
 * fault, and the file may hold anything (a secret put there by mistake is not to be logged).
 */
function parseJsonFile(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    const where = /line \d+ column \d+/.exec((err as Error).message)?.[0];
    throw new Error(`not valid JSON${where ? ` (${where})` : ''}`);
  }
}
