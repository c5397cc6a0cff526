import { randomBytes } from 'node:crypto';
import { formatIP, parseIP, parseIPPrefix, prefixContains, prefixLast, type IPAddr, type Prefix } from '@headway/policy/ip';
import { HeadwayError } from '../errors.js';

/** Ranges Tailscale reserves inside the CGNAT space: never handed to a node. */
const RESERVED = ['100.100.100.0/24', '100.115.92.0/23'].map((p) => parseIPPrefix(p)!);

/**
 * AddressAllocator hands out node addresses from one prefix, sequentially or at
 * random, never the network or broadcast address nor a reserved range. It only
 * proposes: the database's unique index is the final word under concurrency.
 */
export class AddressAllocator {
  private readonly prefix: Prefix;
  private readonly used = new Set<bigint>();
  private cursor: bigint;

  constructor(cidr: string, private readonly mode: 'sequential' | 'random') {
    const p = parseIPPrefix(cidr);
    if (!p) throw new Error(`invalid prefix ${cidr}`);
    this.prefix = p;
    this.cursor = p.base + 1n;
  }

  get family(): 4 | 6 { return this.prefix.family; }

  markUsed(ip: string | null | undefined): void {
    const a = ip ? parseIP(ip) : undefined;
    if (a && prefixContains(this.prefix, a)) this.used.add(a.value);
  }

  release(ip: string | null | undefined): void {
    const a = ip ? parseIP(ip) : undefined;
    if (a) this.used.delete(a.value);
  }

  private usable(v: bigint): boolean {
    if (v <= this.prefix.base || v >= prefixLast(this.prefix)) return false; // network / broadcast
    if (this.used.has(v)) return false;
    const ip: IPAddr = { family: this.prefix.family, value: v };
    return !RESERVED.some((r) => prefixContains(r, ip));
  }

  /**
   * giveBack returns an address next() proposed for a write that did not commit:
   * it is free again, and sequential allocation resumes at it, so a rolled-back
   * registration leaves the allocator as it found it.
   */
  giveBack(ip: string | null | undefined): void {
    const a = ip ? parseIP(ip) : undefined;
    if (!a || !prefixContains(this.prefix, a)) return;
    this.used.delete(a.value);
    if (this.mode === 'sequential' && a.value < this.cursor) this.cursor = a.value;
  }

  /**
   * claim reserves one chosen address, or says why it cannot be given: outside the
   * prefix, the network or broadcast address, a reserved range, or in use. The
   * address is returned in canonical form; giveBack undoes a claim whose write failed.
   */
  claim(ip: string): { ip: string } | { refused: string } {
    const a = parseIP(ip);
    if (!a || a.family !== this.prefix.family) return { refused: `is not an IPv${this.prefix.family} address` };
    if (!prefixContains(this.prefix, a)) return { refused: `${formatIP(a)} is outside the configured prefix ${formatIP({ family: a.family, value: this.prefix.base })}/${this.prefix.bits}` };
    if (a.value === this.prefix.base || a.value === prefixLast(this.prefix)) return { refused: `${formatIP(a)} is the prefix's network or broadcast address` };
    if (RESERVED.some((r) => prefixContains(r, a))) return { refused: `${formatIP(a)} is in a range Tailscale reserves` };
    if (this.used.has(a.value)) return { refused: `${formatIP(a)} is in use by another node` };
    this.used.add(a.value);
    return { ip: formatIP(a) };
  }

  /** next reserves and returns a free address, or undefined when the prefix is full. */
  next(): string | undefined {
    const first = this.prefix.base + 1n, last = prefixLast(this.prefix) - 1n;
    const span = last - first + 1n;
    if (span <= 0n) return undefined;
    let start = this.cursor;
    if (this.mode === 'random') {
      const r = BigInt('0x' + randomBytes(16).toString('hex'));
      start = first + (r % span);
    }
    // Scan at most the whole range once; sequential mode resumes where it left off.
    let v = start < first || start > last ? first : start;
    for (let i = 0n; i < span; i++) {
      if (this.usable(v)) {
        this.used.add(v);
        if (this.mode === 'sequential') this.cursor = v + 1n;
        return formatIP({ family: this.prefix.family, value: v });
      }
      v = v >= last ? first : v + 1n;
      // Sequential allocation rarely needs a full scan; bound the work on huge v6 prefixes.
      if (i > 1_000_000n) break;
    }
    return undefined;
  }
}

/** Addressed is the part of a node the allocators look at. */
interface Addressed { ipv4: string | null; ipv6: string | null }

/**
 * NodeAddresses is the pair of allocators for the enabled families (prefixes.v4,
 * prefixes.v6): what nodes hold is marked used, and a node is given one address
 * of each enabled family, or none when either family is full.
 */
export class NodeAddresses {
  private readonly v4?: AddressAllocator;
  private readonly v6?: AddressAllocator;

  constructor(prefixes: { v4?: string; v6?: string; allocation: 'sequential' | 'random' }) {
    if (prefixes.v4) this.v4 = new AddressAllocator(prefixes.v4, prefixes.allocation);
    if (prefixes.v6) this.v6 = new AddressAllocator(prefixes.v6, prefixes.allocation);
  }

  markUsed(n: Addressed): void {
    this.v4?.markUsed(n.ipv4);
    this.v6?.markUsed(n.ipv6);
  }

  release(n: Addressed): void {
    this.v4?.release(n.ipv4);
    this.v6?.release(n.ipv6);
  }

  /** releaseChanged frees the addresses `before` held that `after` (the same node) no longer does. */
  releaseChanged(before: Addressed, after: Addressed): void {
    if (before.ipv4 !== after.ipv4) this.v4?.release(before.ipv4);
    if (before.ipv6 !== after.ipv6) this.v6?.release(before.ipv6);
  }

  /**
   * reserve takes one free address of each enabled family; allocation is
   * synchronous, so concurrent registrations never propose the same address.
   */
  reserve(): Addressed {
    const ipv4 = this.v4 ? this.v4.next() : null;
    const ipv6 = this.v6 ? this.v6.next() : null;
    if (ipv4 === undefined || ipv6 === undefined) {
      this.v4?.giveBack(ipv4); this.v6?.giveBack(ipv6);
      throw full();
    }
    return { ipv4, ipv6 };
  }

  /** claimV4 reserves a chosen IPv4 address (AddressAllocator.claim); without prefixes.v4 it is refused. */
  claimV4(ip: string): { ip: string } | { refused: string } {
    return this.v4 ? this.v4.claim(ip) : { refused: 'cannot be set: IPv4 is disabled (prefixes.v4 is empty)' };
  }

  /** giveBack returns addresses reserved for a write that did not commit (null: none of that family). */
  giveBack(ipv4: string | null, ipv6: string | null): void {
    this.v4?.giveBack(ipv4);
    this.v6?.giveBack(ipv6);
  }

  /**
   * fill reserves an address of each enabled family the node lacks and returns the
   * node's addresses with them; undefined when it lacks none.
   */
  fill(n: Addressed): Addressed | undefined {
    const needV4 = Boolean(this.v4 && !n.ipv4), needV6 = Boolean(this.v6 && !n.ipv6);
    if (!needV4 && !needV6) return undefined;
    const ipv4 = needV4 ? this.v4!.next() : n.ipv4;
    if (ipv4 === undefined) throw full();
    const ipv6 = needV6 ? this.v6!.next() : n.ipv6;
    if (ipv6 === undefined) {
      if (needV4) this.v4!.giveBack(ipv4);
      throw full();
    }
    return { ipv4, ipv6 };
  }
}

function full(): HeadwayError {
  return new HeadwayError('conflict', 'no free addresses left in the configured prefixes');
}
