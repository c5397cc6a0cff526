/**
 * PeerSet is the set of node ids a map session last told its client about, kept as one sorted typed array.
 * Every idle session holds one, so its size is what a tailnet pays per device per peer: a JS Set of small
 * integers costs ~20 bytes per entry (hash buckets plus entries, at 1,000 peers ~20 KiB a session), this
 * 4 bytes (8 once an id passes 2^32-1), with at most 1/8 spare. Lookups are binary searches; additions of
 * new nodes land at the end (ids grow), so the inserts a join causes in every session do not shift anything.
 */
export class PeerSet implements Iterable<number> {
  private ids: Uint32Array | Float64Array;
  private count = 0;

  constructor(ids?: Iterable<number>) {
    if (!ids) { this.ids = EMPTY; return; }
    const all = Array.from(ids);
    for (const id of all) checkId(id);
    const sorted = (all.every(fitsU32) ? Uint32Array.from(all) : Float64Array.from(all)).sort();
    let k = 0;
    for (let i = 0; i < sorted.length; i++) if (k === 0 || sorted[i] !== sorted[k - 1]) sorted[k++] = sorted[i]!;
    // slice, not subarray: a view would keep the duplicates' room.
    this.ids = k === sorted.length ? sorted : sorted.slice(0, k);
    this.count = k;
  }

  /**
   * ofList is the set of a compiled peer list (ids as text, as the policy compiler gives them), less `except` when
   * given. The parsed ids are kept per list: nodes of one class share one list (with each member itself in it, see
   * peerListOf), so a structural flush parses it once, and each session gets its own copy (a memcpy, skipping its
   * own id) because sessions change their sets independently afterwards.
   */
  static ofList(list: readonly string[], except?: number): PeerSet {
    let parsed = PARSED.get(list);
    if (!parsed) {
      parsed = parseAscending(list);
      if (!parsed) {
        const ps = new PeerSet(list.map(Number));
        parsed = ps.ids.subarray(0, ps.count);
      }
      PARSED.set(list, parsed);
    }
    const out = new PeerSet();
    out.ids = parsed.slice();
    out.count = parsed.length;
    if (except !== undefined) out.delete(except);
    return out;
  }

  /**
   * diff walks this set (what the client holds) and `next` (what it should hold) once, both ascending:
   * `gone` are the ids only here, `each` is called for every id of `next` in ascending order with whether it
   * is new to the client. O(size + next.size), no lookups.
   */
  diff(next: PeerSet, each: (id: number, added: boolean) => void): number[] {
    const gone: number[] = [];
    let i = 0;
    for (let j = 0; j < next.count; j++) {
      const id = next.ids[j]!;
      while (i < this.count && this.ids[i]! < id) gone.push(this.ids[i++]!);
      const held = i < this.count && this.ids[i] === id;
      if (held) i++;
      each(id, !held);
    }
    while (i < this.count) gone.push(this.ids[i++]!);
    return gone;
  }

  /**
   * changes is diff without a call per id: the ids only here (gone) and the ids only in `next` (added), both
   * ascending. O(size + next.size).
   */
  changes(next: PeerSet): { gone: number[]; added: number[] } {
    const gone: number[] = [];
    const added: number[] = [];
    let i = 0;
    for (let j = 0; j < next.count; j++) {
      const id = next.ids[j]!;
      while (i < this.count && this.ids[i]! < id) gone.push(this.ids[i++]!);
      if (i < this.count && this.ids[i] === id) i++;
      else added.push(id);
    }
    while (i < this.count) gone.push(this.ids[i++]!);
    return { gone, added };
  }

  get size(): number { return this.count; }

  /** byteLength is what the ids take (tests and memory accounting). */
  get byteLength(): number { return this.ids.byteLength; }

  has(id: number): boolean {
    const i = this.find(id);
    return i < this.count && this.ids[i] === id;
  }

  add(id: number): this {
    checkId(id);
    const i = this.find(id);
    if (i < this.count && this.ids[i] === id) return this;
    if (!fitsU32(id) && this.ids instanceof Uint32Array) this.ids = Float64Array.from(this.ids);
    if (this.count === this.ids.length) {
      const next = new (this.ids.constructor as Uint32ArrayConstructor | Float64ArrayConstructor)(this.count + Math.max(4, this.count >>> 3));
      next.set(this.ids);
      this.ids = next;
    }
    if (i < this.count) this.ids.copyWithin(i + 1, i, this.count);
    this.ids[i] = id;
    this.count++;
    return this;
  }

  delete(id: number): boolean {
    const i = this.find(id);
    if (i >= this.count || this.ids[i] !== id) return false;
    this.ids.copyWithin(i, i + 1, this.count);
    this.count--;
    return true;
  }

  /** some calls fn with each id in ascending order until it returns true (a plain loop: the iterator is a
   * generator, slow in hot paths); true when it did. */
  some(fn: (id: number) => boolean): boolean {
    for (let i = 0; i < this.count; i++) if (fn(this.ids[i]!)) return true;
    return false;
  }

  *[Symbol.iterator](): IterableIterator<number> {
    for (let i = 0; i < this.count; i++) yield this.ids[i]!;
  }

  /** find is the first index whose id is >= id (count when none). */
  private find(id: number): number {
    let lo = 0, hi = this.count;
    // Appending past the largest id is the common case (a new node): answer it without searching.
    if (hi > 0 && this.ids[hi - 1]! < id) return hi;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.ids[mid]! < id) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
}

const EMPTY = new Uint32Array(0);
/** PARSED holds each compiled peer list's ids, sorted, for as long as the list itself lives (see ofList). */
const PARSED = new WeakMap<readonly string[], Uint32Array | Float64Array>();

/**
 * parseAscending reads a peer list in one pass when it is what the compiler gives (strictly ascending ids that
 * fit 32 bits, the tailnet's order), undefined otherwise (the general constructor then sorts and checks).
 */
function parseAscending(list: readonly string[]): Uint32Array | undefined {
  const out = new Uint32Array(list.length);
  let prev = -1;
  for (let i = 0; i < list.length; i++) {
    const id = Number(list[i]);
    if (!Number.isInteger(id) || id <= prev || id > 0xffffffff) return undefined;
    out[i] = prev = id;
  }
  return out;
}

function fitsU32(id: number): boolean { return id <= 0xffffffff; }

function checkId(id: number): void {
  if (!Number.isSafeInteger(id) || id < 0) throw new TypeError(`PeerSet: node id must be a non-negative integer, got ${String(id)}`);
}
