import { MAX4, MAX6, formatAddr, parseRangeText, rangeToPrefixes, remember, type Addr, type IPRange } from './addr.js';

const parsedSets = new Map<string, IPSet>();

/**
 * parseSetText is one SrcIPs or DstPorts address text ("*", an address, a prefix or "a-b") as a set, remembered
 * like the address memos (addr.ts): every tailnet context's rules name the same node addresses and prefixes as the
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
 * alias after a join) is a new set holding the old one's range objects (normalize and union keep those they do not
 * merge), so rendering it formats only the new ranges, not every address of a large alias again on each join.
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
   * membership question: the compiler asks millions of them per snapshot, and a scan would make each O(ranges).
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
 * thousands of sets per tailnet context, most of them from ordered input.
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
 * order are then one run each) and its runs are merged pairwise, O(n log runs) comparisons where a sort makes
 * O(n log n); merged rules' destinations on a large tailnet run to thousands of ranges. Input of many short runs
 * is sorted.
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
