/**
 * Node sets as the compiler keeps them: ascending lists of node indices (Int32Array) and bitsets over the
 * tailnet, with the searches they need.
 */

/** NodeList is a sorted list of node indices, OR-able into a bitset (as a bitset itself once it is large). */
export class NodeList {
  private bits?: Uint32Array;
  constructor(readonly idx: Int32Array) {}
  get size(): number { return this.idx.length; }
  orInto(out: Uint32Array): void {
    if (this.idx.length > out.length) {
      if (this.bits?.length !== out.length) {
        this.bits = new Uint32Array(out.length);
        for (const x of this.idx) this.bits[x >>> 5]! |= 1 << (x & 31);
      }
      for (let w = 0; w < out.length; w++) out[w]! |= this.bits[w]!;
      return;
    }
    for (const x of this.idx) out[x >>> 5]! |= 1 << (x & 31);
  }
}

/** indexIn is where x is in the ascending list, or -1. */
export function indexIn(list: Int32Array, x: number): number {
  let lo = 0, hi = list.length;
  while (lo < hi) { const mid = (lo + hi) >>> 1; if (list[mid]! < x) lo = mid + 1; else hi = mid; }
  return list[lo] === x ? lo : -1;
}

export function sortedUnique(xs: ArrayLike<number>): Int32Array {
  const a = Int32Array.from(xs).sort();
  let n = 0;
  for (let k = 0; k < a.length; k++) if (k === 0 || a[k] !== a[k - 1]) a[n++] = a[k]!;
  return a.subarray(0, n);
}

/**
 * lowerBound is the first index at or after `from` whose key is not below x, in keys sorted ascending (IPv4 addresses
 * as numbers, IPv6 ones as bigints), for a key expected near `from`: steps of 1, 2, 4… until one passes x, then a
 * binary search within the last step (O(log distance), not O(log length)).
 */
export function lowerBound<K extends number | bigint>(keys: readonly K[], x: K, from = 0): number {
  const n = keys.length;
  if (from >= n || keys[from]! >= x) return from;
  let lo = from, step = 1;
  while (lo + step < n && keys[lo + step]! < x) { lo += step; step *= 2; }
  let hi = Math.min(lo + step, n);
  lo++;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid]! < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/** bitsToList is the indices of a bitset's set bits, in order. */
export function bitsToList(bits: Uint32Array): Int32Array {
  let count = 0;
  for (let w = 0; w < bits.length; w++) {
    let word = bits[w]!;
    while (word) { word &= word - 1; count++; }
  }
  const out = new Int32Array(count);
  let at = 0;
  for (let w = 0; w < bits.length; w++) {
    let word = bits[w]!;
    while (word) {
      const low = word & -word;
      out[at++] = w * 32 + 31 - Math.clz32(low);
      word ^= low;
    }
  }
  return out;
}
