import { parseIP } from '@headway/policy/ip';
import { PORT_SELECTION, type PluginEntry, type PortName } from '../ports/adapter.js';

/*
 * The syntax of single values (addresses, domain names, DNS records, plugin entries), shared by the key kinds,
 * the cross-key checks and the parts of the server that read the same values from elsewhere.
 */

/** describe names a value found where another was expected, for an error message. */
export function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a mapping';
  // JSON.stringify writes NaN and Infinity (.nan, .inf in YAML) as null.
  return typeof v === 'number' ? `number ${String(v)}` : `${typeof v} ${JSON.stringify(v)}`;
}

export function parseHostPort(v: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(v);
  if (!m) return undefined;
  const port = Number(m[3]);
  if (port > 65535) return undefined;
  const host = m[1] ?? m[2] ?? '';
  if (m[1] && !parseIP(m[1])) return undefined;
  return { host: host || '0.0.0.0', port };
}

/** isLoopbackHost: 127.0.0.0/8, ::1 and localhost never leave the machine. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h === '::1') return true;
  const ip = parseIP(h);
  return ip?.family === 4 && h.startsWith('127.');
}

/**
 * isDomainName: labels of letters, digits, '-' (not at either end) and '_', 1-63 characters each, 253 in all, an
 * optional final dot, and a last label that is not all digits (that is an IP address, not a name).
 */
export function isDomainName(s: string): boolean {
  const name = s.endsWith('.') ? s.slice(0, -1) : s;
  if (!name || name.length > 253) return false;
  const labels = name.split('.');
  return labels.every((l) => /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/i.test(l)) && !/^\d+$/.test(labels.at(-1)!);
}

/** isDohUrl: an https:// URL with a host (DNS over HTTPS), nothing else. */
export function isDohUrl(s: string): boolean {
  if (!/^https:\/\/[^\s]+$/i.test(s)) return false;
  try { return new URL(s).hostname !== ''; } catch { return false; }
}

/** nameserverProblem says why `s` is not a global nameserver (an IP address or a DoH URL); undefined when it is one. */
export function nameserverProblem(s: unknown): string | undefined {
  if (typeof s === 'string' && (parseIP(s) || isDohUrl(s))) return undefined;
  return `expected nameserver IP addresses or https:// DoH URLs, found ${typeof s === 'string' ? JSON.stringify(s) : describe(s)}`;
}

/** searchDomainProblem says why `s` is not a search domain; undefined when it is one. */
export function searchDomainProblem(s: unknown): string | undefined {
  if (typeof s === 'string' && isDomainName(s)) return undefined;
  return `expected domain names such as corp.example.com, found ${typeof s === 'string' ? JSON.stringify(s) : describe(s)}`;
}

/** splitProblem says what is wrong with a split DNS mapping (domain → nameserver IPs); undefined when nothing is. */
export function splitProblem(v: unknown): string | undefined {
  if (!v || typeof v !== 'object' || Array.isArray(v)) return `expected a mapping of domain to a list of nameservers, found ${describe(v)}`;
  for (const [d, list] of Object.entries(v)) {
    if (!isDomainName(d)) return `expected a domain name such as corp.example.com as each key, found ${JSON.stringify(d)}`;
    if (!Array.isArray(list) || list.some((s) => typeof s !== 'string' || !parseIP(s))) {
      return `${d}: expected a list of nameserver IP addresses, found ${describe(list)}`;
    }
  }
  return undefined;
}

/** ExtraRecord is one DNS record served beside the nodes' own names (dns.extra_records). */
export interface ExtraRecord { name: string; type: string; value: string }

/** checkRecord validates one DNS extra record; shared with the extra_records_path watcher. */
export function checkRecord(r: unknown): string | undefined {
  if (!r || typeof r !== 'object') return `expected {name, type, value}, found ${describe(r)}`;
  const { name, type, value } = r as Record<string, unknown>;
  if (typeof name !== 'string' || !name) return 'name must be a non-empty string';
  if (!isDomainName(name)) return `name must be a DNS name such as grafana.example.com, found ${JSON.stringify(name)}`;
  if (type !== 'A' && type !== 'AAAA') return `type must be A or AAAA, found ${JSON.stringify(type)}`;
  const ip = typeof value === 'string' ? parseIP(value) : undefined;
  if (!ip || (type === 'A') !== (ip.family === 4)) return `value must be an IPv${type === 'A' ? 4 : 6} address, found ${JSON.stringify(value)}`;
  return undefined;
}

/** PACKAGE_NAME: what npm accepts as a package name, scoped or not (an adapter id such as `sqlite` is one too). */
export const PACKAGE_NAME = /^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*$/;

/**
 * checkPluginEntry normalizes one `plugins:` item to {package, port, options}. A
 * bare package name is the DNS port with no options. Storage and policy are
 * refused here, naming the key that chooses them, because a second source for a
 * one-adapter port would be ambiguous. The options themselves are the plugin's to
 * check (kernel/loader.ts).
 */
export function checkPluginEntry(item: unknown): PluginEntry | string {
  if (typeof item === 'string') item = { package: item, port: 'dns' };
  if (!item || typeof item !== 'object' || Array.isArray(item)) return `expected {package, port, options}, found ${describe(item)}`;
  const { package: pkg, port, options, ...rest } = item as Record<string, unknown>;
  const unknown = Object.keys(rest);
  if (unknown.length) return `unknown field ${unknown.map((k) => JSON.stringify(k)).join(', ')} (expected package, port, options)`;
  if (typeof pkg !== 'string' || !PACKAGE_NAME.test(pkg)) {
    return pkg === undefined ? 'package is required (an npm package name)' : `package: expected an npm package name, found ${describe(pkg)}`;
  }
  if (typeof port !== 'string' || !(port in PORT_SELECTION)) {
    const ports = Object.entries(PORT_SELECTION).filter(([, s]) => s.by === 'plugins').map(([p]) => p).join(', ');
    return port === undefined ? `${pkg}: port is required (one of ${ports})` : `${pkg}: port: expected one of ${ports}, found ${describe(port)}`;
  }
  const selection = PORT_SELECTION[port as PortName];
  if (selection.by === 'config') {
    return `${pkg}: the ${port} port is not loaded from plugins: it has exactly one adapter, chosen by ${selection.key} (set ${selection.key}: ${pkg})`;
  }
  if (selection.by === 'none') return `${pkg}: ${selection.reason}`;
  if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
    return `${pkg}: options: expected a mapping of the plugin's options, found ${describe(options)}`;
  }
  return { package: pkg, port: port as PortName, options: (options ?? {}) as Record<string, unknown> };
}
