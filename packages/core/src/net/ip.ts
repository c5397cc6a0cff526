import { isIPv4, isIPv6 } from 'node:net';

/** An IP address as a family and a BigInt, so v4 and v6 share one arithmetic. */
export interface IPAddr { family: 4 | 6; value: bigint }
export interface Prefix { family: 4 | 6; base: bigint; bits: number }

const WIDTH = { 4: 32, 6: 128 } as const;

export function parseIP(text: string): IPAddr | undefined {
  if (isIPv4(text)) {
    const v = text.split('.').reduce((acc, p) => (acc << 8n) | BigInt(Number(p)), 0n);
    return { family: 4, value: v };
  }
  if (isIPv6(text) && !text.includes('%')) {
    let s = text;
    // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
    const m = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
    if (m) {
      const v4 = parseIP(m[1]!)!.value;
      s = s.slice(0, -m[1]!.length) + `${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
    }
    const [head, tail] = s.split('::') as [string, string | undefined];
    const h = head ? head.split(':') : [];
    const tl = tail !== undefined ? (tail ? tail.split(':') : []) : [];
    const groups = tail !== undefined ? [...h, ...Array(8 - h.length - tl.length).fill('0'), ...tl] : h;
    const v = groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
    return { family: 6, value: v };
  }
  return undefined;
}

export function formatIP(ip: IPAddr): string {
  if (ip.family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => String((ip.value >> s) & 0xffn)).join('.');
  }
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((ip.value >> BigInt(i * 16)) & 0xffffn));
  // RFC 5952: compress the longest run (length >= 2) of zero groups, the first on ties.
  let best = -1, bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) { i++; continue; }
    let j = i; while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) { best = i; bestLen = j - i; }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

/** parsePrefix accepts `a.b.c.d/n`, `v6/n`, or a bare address (a host prefix); the base is masked. */
export function parsePrefix(text: string): Prefix | undefined {
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

export function mask(family: 4 | 6, bits: number): bigint {
  const width = BigInt(WIDTH[family]);
  const all = (1n << width) - 1n;
  return bits === 0 ? 0n : (all >> (width - BigInt(bits))) << (width - BigInt(bits));
}

export function formatPrefix(p: Prefix): string {
  return `${formatIP({ family: p.family, value: p.base })}/${p.bits}`;
}

export function prefixSize(p: Prefix): bigint {
  return 1n << BigInt(WIDTH[p.family] - p.bits);
}

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

/** canonicalPrefix normalizes a CIDR string (masked base, compressed v6) or returns undefined. */
export function canonicalPrefix(text: string): string | undefined {
  const p = parsePrefix(text);
  return p ? formatPrefix(p) : undefined;
}

export const EXIT_ROUTES = ['0.0.0.0/0', '::/0'] as const;
export function isExitRoute(cidr: string): boolean {
  return cidr === '0.0.0.0/0' || cidr === '::/0';
}
