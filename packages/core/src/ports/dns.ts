import { assertPort } from './assert.js';

/** DnsRecord is an extra A/AAAA record served by MagicDNS. */
export interface DnsRecord { name: string; type: 'A' | 'AAAA'; value: string }

/**
 * DnsPort lets plugins add to what every node's resolver knows: `records()` are
 * extra records under any name (kept in a file, another system, ...);
 * `tailnetRecords()`, when present, answers names under the tailnet domain
 * (`dns.base_domain`), given relative to it (`printer` → `printer.<base_domain>`),
 * so a plugin need not know the domain. Several DNS plugins may be listed under
 * `plugins:`; their records are merged in the listed order, after `dns.extra_records`.
 */
export interface DnsPort {
  records(): Promise<DnsRecord[]>;
  tailnetRecords?(): Promise<DnsRecord[]>;
  /** watch calls onChange when the records may have changed; returns an unsubscribe. */
  watch?(onChange: () => void): () => void;
  /** close releases what the plugin holds (watchers, connections) at shutdown. */
  close?(): Promise<void> | void;
}

export const DNS = 'dns';

export function assertDnsPort(value: unknown, adapter: string): asserts value is DnsPort {
  assertPort(value, adapter, 'dns', ['records']);
}
