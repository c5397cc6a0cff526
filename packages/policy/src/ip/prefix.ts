import { formatAddrText, parseAddrText } from './addr.js';

/**
 * The server's address arithmetic (address pools, configured prefixes, advertised routes): addresses and prefixes
 * as a family and BigInts, each call a new object. It parses addresses as addr.ts does; parseIPPrefix takes the
 * prefix length more loosely than parsePrefix (see there).
 */

/** An IP address as a family and a BigInt, so v4 and v6 share one arithmetic. */
export interface IPAddr { family: 4 | 6; value: bigint }
/** Prefix is a CIDR prefix: its family, its base address (masked to `bits`) and its length. */
export interface Prefix { family: 4 | 6; base: bigint; bits: number }

const WIDTH = { 4: 32, 6: 128 } as const;

/** parseIP parses an IPv4 or IPv6 address as parseAddr does (zones refused); undefined when invalid. */
export function parseIP(text: string): IPAddr | undefined {
  const a = parseAddrText(text);
  return a ? { family: a.v6 ? 6 : 4, value: a.n } : undefined;
}

/** formatIP renders an address as formatAddr does (RFC 5952 for IPv6). */
export function formatIP(ip: IPAddr): string {
  return formatAddrText({ v6: ip.family === 6, n: ip.value });
}

/**
 * parseIPPrefix accepts `a.b.c.d/n`, `v6/n`, or a bare address (a host prefix); the base is masked. Unlike
 * parsePrefix, the length may have leading zeros ("10.0.0.0/08" is 10.0.0.0/8), as the server's configuration
 * and address pools take it.
 */
export function parseIPPrefix(text: string): Prefix | undefined {
  const slash = text.indexOf('/');
  const ip = parseIP(slash < 0 ? text : text.slice(0, slash));
  if (!ip) return undefined;
  const width: number = WIDTH[ip.family];
  let bits = width;
  if (slash >= 0) {
    const b = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(b)) return undefined;
    bits = Number(b);
    if (bits > width) return undefined;
  }
  return { family: ip.family, base: ip.value & mask(ip.family, bits), bits };
}

/** mask is the network mask of a `bits`-long prefix of the family, as a number. */
export function mask(family: 4 | 6, bits: number): bigint {
  const width = BigInt(WIDTH[family]);
  const all = (1n << width) - 1n;
  return bits === 0 ? 0n : (all >> (width - BigInt(bits))) << (width - BigInt(bits));
}

export function formatPrefix(p: Prefix): string {
  return `${formatIP({ family: p.family, value: p.base })}/${p.bits}`;
}

/** prefixSize is how many addresses the prefix holds. */
export function prefixSize(p: Prefix): bigint {
  return 1n << BigInt(WIDTH[p.family] - p.bits);
}

/** prefixLast is the prefix's last address, as a number. */
export function prefixLast(p: Prefix): bigint {
  return p.base + prefixSize(p) - 1n;
}

export function prefixContains(p: Prefix, ip: IPAddr): boolean {
  return p.family === ip.family && (ip.value & mask(p.family, p.bits)) === p.base;
}

/** prefixOverlaps: two prefixes of one family share at least one address. */
export function prefixOverlaps(a: Prefix, b: Prefix): boolean {
  if (a.family !== b.family) return false;
  const bits = Math.min(a.bits, b.bits);
  return (a.base & mask(a.family, bits)) === (b.base & mask(b.family, bits));
}

/** canonicalPrefix normalizes a CIDR string (masked base, compressed v6, always a /bits) or returns undefined. */
export function canonicalPrefix(text: string): string | undefined {
  const p = parseIPPrefix(text);
  return p ? formatPrefix(p) : undefined;
}

/** EXIT_ROUTES are the routes an exit node advertises; isExitRoute tells them apart from subnet routes (text as written). */
export const EXIT_ROUTES = ['0.0.0.0/0', '::/0'] as const;
export function isExitRoute(cidr: string): boolean {
  return cidr === '0.0.0.0/0' || cidr === '::/0';
}
