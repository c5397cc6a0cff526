import { randomBytes } from 'node:crypto';
import { formatIP, parseIP, parseIPPrefix, prefixContains, prefixLast, type IPAddr, type Prefix } from '@headway/policy/ip';

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
