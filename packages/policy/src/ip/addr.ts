/** Addr is one IPv4 or IPv6 address; v4 addresses never compare equal to v6 ones. */
export interface Addr {
  v6: boolean;
  n: bigint;
}

/** IPRange is an inclusive range of addresses within one family. */
export interface IPRange {
  v6: boolean;
  start: bigint;
  end: bigint;
}

export const MAX4 = (1n << 32n) - 1n;
export const MAX6 = (1n << 128n) - 1n;

function familyMax(v6: boolean): bigint {
  return v6 ? MAX6 : MAX4;
}

/**
 * MEMO_LIMIT bounds each of the address memos below (and set.ts's parseSetText memo). Every tailnet context parses
 * every node's addresses and formats them into SrcIPs again, so the same few thousand texts and numbers are
 * converted over and over; a memo full of stale entries is simply dropped.
 */
const MEMO_LIMIT = 1 << 17;
const parsedAddrs = new Map<string, Addr | null>();
const formatted4 = new Map<bigint, string>();
const formatted6 = new Map<bigint, string>();

/** remember stores value under key in a memo bounded by MEMO_LIMIT and returns it. */
export function remember<K, V>(memo: Map<K, V>, key: K, value: V): V {
  if (memo.size >= MEMO_LIMIT) memo.clear();
  memo.set(key, value);
  return value;
}

/** parseAddr parses dotted IPv4 or RFC 4291 IPv6 text (zones rejected); null when invalid. The result is shared: never modify it. */
export function parseAddr(text: string): Addr | null {
  const known = parsedAddrs.get(text);
  if (known !== undefined || parsedAddrs.has(text)) return known ?? null;
  return remember(parsedAddrs, text, parseAddrText(text));
}

/**
 * parseAddrText is parseAddr without the memo: a new object on every call. It accepts exactly what Node's
 * net.isIPv4/isIPv6 accept, less IPv6 zones ("%eth0"): no leading zeros in IPv4 parts, IPv4 tails on IPv6 text.
 */
export function parseAddrText(text: string): Addr | null {
  if (text.includes(':')) {
    const n = parseIPv6(text);
    return n === null ? null : { v6: true, n };
  }
  const n = parseIPv4(text);
  return n === null ? null : { v6: false, n };
}

function parseIPv4(text: string): bigint | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  let n = 0n;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || (p.length > 1 && p[0] === '0')) return null;
    const v = Number(p);
    if (v > 255) return null;
    n = (n << 8n) | BigInt(v);
  }
  return n;
}

function parseIPv6(text: string): bigint | null {
  if (text.includes('%')) return null;
  let head = text;
  let tailV4: bigint | null = null;
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    tailV4 = parseIPv4(text.slice(lastColon + 1));
    if (tailV4 === null) return null;
    head = text.slice(0, lastColon + 1) + '0:0';
  }
  const halves = head.split('::');
  if (halves.length > 2) return null;
  const parseGroups = (s: string): number[] | null => {
    if (s === '') return [];
    const out: number[] = [];
    for (const g of s.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const left = parseGroups(halves[0]!);
  const right = halves.length === 2 ? parseGroups(halves[1]!) : [];
  if (left === null || right === null) return null;
  let groups: number[];
  if (halves.length === 2) {
    const missing = 8 - left.length - right.length;
    if (missing < 1) return null;
    groups = [...left, ...new Array<number>(missing).fill(0), ...right];
  } else {
    groups = left;
  }
  if (groups.length !== 8) return null;
  let n = 0n;
  for (const g of groups) n = (n << 16n) | BigInt(g);
  if (tailV4 !== null) n = (n & ~MAX4) | tailV4;
  return n;
}

/** formatAddr renders an address the way Go's netip does (RFC 5952 for IPv6). */
export function formatAddr(a: Addr): string {
  const memo = a.v6 ? formatted6 : formatted4;
  return memo.get(a.n) ?? remember(memo, a.n, formatAddrText(a));
}

/** formatAddrText is formatAddr without the memo. */
export function formatAddrText(a: Addr): string {
  if (!a.v6) {
    return [24n, 16n, 8n, 0n].map((s) => String((a.n >> s) & 255n)).join('.');
  }
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((a.n >> BigInt(i * 16)) & 0xffffn));
  // RFC 5952: the longest run (length >= 2) of zero groups is compressed, the first on ties.
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) { bestStart = i; bestLen = j - i; }
    i = j;
  }
  const hex = (gs: number[]) => gs.map((g) => g.toString(16)).join(':');
  if (bestStart < 0) return hex(groups);
  return hex(groups.slice(0, bestStart)) + '::' + hex(groups.slice(bestStart + bestLen));
}

/**
 * parsePrefix parses "addr" or "addr/bits" into its (masked) range; null when invalid. The bits are written as Go's
 * netip.ParsePrefix wants them, without leading zeros ("10.0.0.0/08" is refused; see parseIPPrefix).
 */
export function parsePrefix(text: string): IPRange | null {
  const slash = text.indexOf('/');
  const addr = parseAddr(slash < 0 ? text : text.slice(0, slash));
  if (!addr) return null;
  const width = addr.v6 ? 128 : 32;
  let bits = width;
  if (slash >= 0) {
    const b = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(b) || (b.length > 1 && b[0] === '0')) return null;
    bits = Number(b);
    if (bits > width) return null;
  }
  return prefixRange(addr, bits);
}

/** parseRangeText parses "a-b" address ranges as written in SrcIPs (and anything parsePrefix takes). */
export function parseRangeText(text: string): IPRange | null {
  const dash = text.indexOf('-');
  if (dash < 0) return parsePrefix(text);
  const a = parseAddr(text.slice(0, dash));
  const b = parseAddr(text.slice(dash + 1));
  if (!a || !b || a.v6 !== b.v6 || a.n > b.n) return null;
  return { v6: a.v6, start: a.n, end: b.n };
}

/** prefixRange is the range of the prefix of `bits` bits holding addr. */
export function prefixRange(addr: Addr, bits: number): IPRange {
  const width = addr.v6 ? 128n : 32n;
  const hostBits = width - BigInt(bits);
  const mask = (1n << hostBits) - 1n;
  return { v6: addr.v6, start: addr.n & ~mask & familyMax(addr.v6), end: (addr.n & ~mask) | mask };
}

/** rangeToPrefixes splits a range into the minimal list of CIDR prefixes covering it exactly (single addresses without /bits). */
export function rangeToPrefixes(r: IPRange): string[] {
  const width = r.v6 ? 128 : 32;
  const out: string[] = [];
  let cur = r.start;
  while (cur <= r.end) {
    let bits = width;
    while (bits > 0) {
      const size = 1n << BigInt(width - bits + 1);
      if (cur % size !== 0n || cur + size - 1n > r.end) break;
      bits--;
    }
    const addr = formatAddr({ v6: r.v6, n: cur });
    out.push(bits === width ? addr : `${addr}/${bits}`);
    cur += 1n << BigInt(width - bits);
  }
  return out;
}
