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

const MAX4 = (1n << 32n) - 1n;
const MAX6 = (1n << 128n) - 1n;

function familyMax(v6: boolean): bigint {
  return v6 ? MAX6 : MAX4;
}

/**
 * MEMO_LIMIT bounds each of the address memos below (and parseSetText's). Every tailnet context parses every
 * node's addresses and formats them into SrcIPs again (once per batch of changes, issue 9), so the same few
 * thousand texts and numbers are converted over and over; a memo full of stale entries is simply dropped.
 */
const MEMO_LIMIT = 1 << 17;
const parsedAddrs = new Map<string, Addr | null>();
const formatted4 = new Map<bigint, string>();
const formatted6 = new Map<bigint, string>();

function remember<K, V>(memo: Map<K, V>, key: K, value: V): V {
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

function parseAddrText(text: string): Addr | null {
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

function formatAddrText(a: Addr): string {
  if (!a.v6) {
    return [24n, 16n, 8n, 0n].map((s) => String((a.n >> s) & 255n)).join('.');
  }
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((a.n >> BigInt(i * 16)) & 0xffffn));
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

/** parsePrefix parses "addr" or "addr/bits" into its (masked) range; null when invalid. */
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

/** parseRangeText parses "a-b" address ranges as written in SrcIPs. */
export function parseRangeText(text: string): IPRange | null {
  const dash = text.indexOf('-');
  if (dash < 0) return parsePrefix(text);
  const a = parseAddr(text.slice(0, dash));
  const b = parseAddr(text.slice(dash + 1));
  if (!a || !b || a.v6 !== b.v6 || a.n > b.n) return null;
  return { v6: a.v6, start: a.n, end: b.n };
}

export function prefixRange(addr: Addr, bits: number): IPRange {
  const width = addr.v6 ? 128n : 32n;
  const hostBits = width - BigInt(bits);
  const mask = (1n << hostBits) - 1n;
  return { v6: addr.v6, start: addr.n & ~mask & familyMax(addr.v6), end: (addr.n & ~mask) | mask };
}

/** rangeToPrefixes splits a range into the minimal list of CIDR prefixes covering it exactly. */
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

const parsedSets = new Map<string, IPSet>();

/**
 * parseSetText is one SrcIPs or DstPorts address text ("*", an address, a prefix or "a-b") as a set, remembered
 * like the address memos above: every tailnet context's rules name the same node addresses and prefixes as the
 * last one's. The set is shared (sets are never modified); invalid text throws, as IPSet.of does, and is not kept.
 */
export function parseSetText(text: string): IPSet {
  return parsedSets.get(text) ?? remember(parsedSets, text, text === '*' ? ALL : IPSet.of(text));
}

/** PREFIXES and STRINGS cache IPSet.prefixes()/strings() per set, outside the object so that sets still compare
 * equal field by field; rendering a large set (a tag's scattered addresses) is bigint work the compiler repeats
 * for every rule naming it. */
const PREFIXES = new WeakMap<IPSet, string[]>();
const STRINGS = new WeakMap<IPSet, string[]>();
/**
 * RANGE_PREFIXES, RANGE_TEXT and RANGE_SETS keep the same per range object. A set grown by a few addresses (an
 * alias after a join) is a new set holding the old one's range objects (normalize and union keep those it does not
 * merge), so rendering it formats only the new ranges: formatting every address of a thousands-strong alias again
 * for each round of joins was a good part of a tailnet context's extension at 10,000 devices.
 */
const RANGE_PREFIXES = new WeakMap<IPRange, string[]>();
const RANGE_TEXT = new WeakMap<IPRange, string>();
const RANGE_SETS = new WeakMap<IPRange, IPSet[]>();
/** PREFIX_SETS caches prefixSets() per set (the list is shared: callers never modify it). */
const PREFIX_SETS = new WeakMap<IPSet, IPSet[]>();

function prefixesOfRange(r: IPRange): string[] {
  let v = RANGE_PREFIXES.get(r);
  if (!v) RANGE_PREFIXES.set(r, v = rangeToPrefixes(r));
  return v;
}

function textOfRange(r: IPRange): string {
  let v = RANGE_TEXT.get(r);
  if (v === undefined) {
    if (r.start === r.end) v = formatAddr({ v6: r.v6, n: r.start });
    else {
      const ps = prefixesOfRange(r);
      v = ps.length === 1 ? ps[0]! : `${formatAddr({ v6: r.v6, n: r.start })}-${formatAddr({ v6: r.v6, n: r.end })}`;
    }
    RANGE_TEXT.set(r, v);
  }
  return v;
}

/** IPSet is an immutable-by-convention union of address ranges, kept sorted and merged. */
export class IPSet {
  readonly ranges: IPRange[];

  constructor(ranges: IPRange[] = []) {
    this.ranges = normalize(ranges);
  }

  static of(...texts: string[]): IPSet {
    const rs: IPRange[] = [];
    for (const t of texts) {
      if (t === '*') { rs.push(...ALL.ranges); continue; }
      const r = parseRangeText(t);
      if (!r) throw new Error(`invalid address or prefix ${JSON.stringify(t)}`);
      rs.push(r);
    }
    return new IPSet(rs);
  }

  isEmpty(): boolean {
    return this.ranges.length === 0;
  }

  union(other: IPSet): IPSet {
    // Both lists are in order: merged in one pass, normalize finds them ordered and skips its sort.
    const a = this.ranges, b = other.ranges, out: IPRange[] = [];
    if (!b.length) return this;
    if (!a.length) return other;
    let i = 0, j = 0;
    while (i < a.length && j < b.length) out.push(compareRanges(a[i]!, b[j]!) <= 0 ? a[i++]! : b[j++]!);
    while (i < a.length) out.push(a[i++]!);
    while (j < b.length) out.push(b[j++]!);
    return new IPSet(out);
  }

  subtract(other: IPSet): IPSet {
    let cur = this.ranges;
    for (const cut of other.ranges) {
      const next: IPRange[] = [];
      for (const r of cur) {
        if (r.v6 !== cut.v6 || cut.end < r.start || cut.start > r.end) { next.push(r); continue; }
        if (cut.start > r.start) next.push({ v6: r.v6, start: r.start, end: cut.start - 1n });
        if (cut.end < r.end) next.push({ v6: r.v6, start: cut.end + 1n, end: r.end });
      }
      cur = next;
    }
    return new IPSet(cur);
  }

  intersect(other: IPSet): IPSet {
    const out: IPRange[] = [];
    for (const a of this.ranges) {
      for (const b of other.ranges) {
        if (a.v6 !== b.v6) continue;
        const s = a.start > b.start ? a.start : b.start;
        const e = a.end < b.end ? a.end : b.end;
        if (s <= e) out.push({ v6: a.v6, start: s, end: e });
      }
    }
    return new IPSet(out);
  }

  /**
   * floor is the index of the last range starting at or before address `n` of family `v6` (-1 when none).
   * The ranges are sorted (IPv4 first), disjoint and never adjacent, so one binary search answers every
   * membership question: the compiler asks millions of them per snapshot and a linear scan made each one
   * O(ranges) (issue 9's profile had the IPSet scans near the top).
   */
  private floor(v6: boolean, n: bigint): number {
    const rs = this.ranges;
    let lo = 0, hi = rs.length - 1, at = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      const r = rs[mid]!;
      if (r.v6 === v6 ? r.start <= n : !r.v6) { at = mid; lo = mid + 1; } else hi = mid - 1;
    }
    return at;
  }

  containsAddr(a: Addr): boolean {
    const r = this.ranges[this.floor(a.v6, a.n)];
    return !!r && r.v6 === a.v6 && a.n <= r.end;
  }

  containsRange(x: IPRange): boolean {
    const r = this.ranges[this.floor(x.v6, x.start)];
    return !!r && r.v6 === x.v6 && x.end <= r.end;
  }

  overlapsRange(x: IPRange): boolean {
    const r = this.ranges[this.floor(x.v6, x.end)];
    return !!r && r.v6 === x.v6 && x.start <= r.end;
  }

  overlaps(other: IPSet): boolean {
    return other.ranges.some((r) => this.overlapsRange(r));
  }

  subsetOf(other: IPSet): boolean {
    return this.ranges.every((r) => other.containsRange(r));
  }

  equals(other: IPSet): boolean {
    return this.key() === other.key();
  }

  /** prefixes lists the set as CIDR strings, single addresses without a /bits suffix. */
  prefixes(): string[] {
    // Cached (the set is immutable by convention) and copied, since callers may extend the list they get.
    let cached = PREFIXES.get(this);
    if (!cached) PREFIXES.set(this, cached = this.ranges.flatMap(prefixesOfRange));
    return [...cached];
  }

  /** prefixSets is prefixes() each as a set (the one parseSetText gives for its text), in the same order. */
  prefixSets(): IPSet[] {
    let cached = PREFIX_SETS.get(this);
    if (!cached) {
      PREFIX_SETS.set(this, cached = this.ranges.flatMap((r) => {
        let v = RANGE_SETS.get(r);
        if (!v) RANGE_SETS.set(r, v = prefixesOfRange(r).map(parseSetText));
        return v;
      }));
    }
    return cached;
  }

  /** strings lists each range as an address, a prefix when it is exactly one, or "a-b". */
  strings(): string[] {
    let cached = STRINGS.get(this);
    if (!cached) STRINGS.set(this, cached = this.ranges.map(textOfRange));
    return [...cached];
  }

  /** key is a canonical text form used for equality and map keys. */
  key(): string {
    return this.ranges
      .map((r) => `${r.v6 ? 6 : 4}:${r.start.toString(16)}-${r.end.toString(16)}`)
      .join(',');
  }
}

function compareRanges(a: IPRange, b: IPRange): number {
  return a.v6 !== b.v6 ? (a.v6 ? 1 : -1) : a.start < b.start ? -1 : a.start > b.start ? 1 : 0;
}

/**
 * normalize sorts and merges ranges. Range objects are shared between sets (never modified), and input that is
 * already sorted (a union of sets, addresses in tailnet order) skips the sort: the policy compiler builds
 * thousands of sets per tailnet context and sorting each copy was near the top of its profile.
 */
function normalize(ranges: IPRange[]): IPRange[] {
  let ordered = true;
  for (let i = 1; i < ranges.length && ordered; i++) ordered = compareRanges(ranges[i - 1]!, ranges[i]!) <= 0;
  const sorted = ordered ? ranges : orderRuns(ranges);
  const out: IPRange[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && last.v6 === r.v6 && r.start <= last.end + 1n) {
      if (r.end > last.end) out[out.length - 1] = { v6: last.v6, start: last.start, end: r.end };
    } else {
      out.push(r);
    }
  }
  return out;
}

/**
 * orderRuns sorts ranges that mostly come as ordered runs: sets joined end to end (a merged rule's destinations, an
 * alias of several groups) or nodes' IPv4 and IPv6 addresses in turn. Each family is taken apart (nodes in address
 * order are then one run each) and its runs are merged pairwise, O(n log runs) comparisons where a sort made
 * O(n log n): a 5,000-device join spent 4.4 s of the server's CPU sorting merged rules' destinations (mergePieces).
 * Input of many short runs is sorted.
 */
function orderRuns(ranges: IPRange[]): IPRange[] {
  const v4: IPRange[] = [], v6: IPRange[] = [];
  for (const r of ranges) (r.v6 ? v6 : v4).push(r);
  const a = mergeRuns(v4), b = mergeRuns(v6);
  if (!b.length) return a;
  if (!a.length) return b;
  for (const r of b) a.push(r);
  return a;
}

const byStart = (a: IPRange, b: IPRange): number => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0);

/** mergeRuns orders one family's ranges (see orderRuns); the array may be reused. */
function mergeRuns(rs: IPRange[]): IPRange[] {
  let runs: IPRange[][] = [];
  let from = 0;
  for (let i = 1; i <= rs.length; i++) {
    if (i < rs.length && rs[i]!.start >= rs[i - 1]!.start) continue;
    runs.push(from === 0 && i === rs.length ? rs : rs.slice(from, i));
    from = i;
    // Many short runs: not joined sets but scattered input.
    if (runs.length > 8 && runs.length * 8 > i) return rs.sort(byStart);
  }
  while (runs.length > 1) {
    const next: IPRange[][] = [];
    for (let k = 0; k < runs.length; k += 2) next.push(k + 1 < runs.length ? mergeTwo(runs[k]!, runs[k + 1]!) : runs[k]!);
    runs = next;
  }
  return runs[0] ?? [];
}

function mergeTwo(a: IPRange[], b: IPRange[]): IPRange[] {
  const out = new Array<IPRange>(a.length + b.length);
  let i = 0, j = 0, k = 0;
  while (i < a.length && j < b.length) out[k++] = b[j]!.start < a[i]!.start ? b[j++]! : a[i++]!;
  while (i < a.length) out[k++] = a[i++]!;
  while (j < b.length) out[k++] = b[j++]!;
  return out;
}

/** ALL is every IPv4 and IPv6 address (what "*" means as a packet-filter address). */
export const ALL = new IPSet([
  { v6: false, start: 0n, end: MAX4 },
  { v6: true, start: 0n, end: MAX6 },
]);

/** TAILNET_WILDCARD is what "*" resolves to as a policy alias: the CGNAT range minus the
 * ChromeOS VM range, plus Tailscale's ULA range. */
export const TAILNET_WILDCARD = IPSet.of('100.64.0.0/10', 'fd7a:115c:a1e0::/48').subtract(
  IPSet.of('100.115.92.0/23'),
);

/** INTERNET is autogroup:internet: public unicast space without private, link-local and
 * Tailscale ranges. */
export const INTERNET = IPSet.of('0.0.0.0/0', '2000::/3').subtract(
  IPSet.of(
    'fc00::/7', '10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16',
    'fd7a:115c:a1e0::/48', '100.64.0.0/10', 'fe80::/10', '169.254.0.0/16',
  ),
);

export function isExitRoute(prefix: string): boolean {
  return prefix === '0.0.0.0/0' || prefix === '::/0';
}
