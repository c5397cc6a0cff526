/**
 * PeerSet is the set of node ids a map session last told its client about, kept as one sorted typed array.
 * Every idle session holds one, so its size is what a tailnet pays per device per peer: a JS Set of small
 * integers costs ~20 bytes per entry (hash buckets plus entries, at 1,000 peers ~20 KiB a session), this
 * 4 bytes (8 once an id passes 2^32-1), with at most 1/8 spare. Lookups are binary searches; additions of
 * new nodes land at the end (ids grow), so the inserts a join causes in every session do not shift anything.
 */
export class PeerSet implements Iterable<number> {
  private ids: Uint32Array | Float64Array;
  /** len: the slots of ids in use (ascending ids); the set is those less `skip`. */
  private len = 0;
  /**
   * shared: ids is a compiled peer list's parsed ids (ofList), which every set made from that list reads; the first
   * add or delete copies it. skip: an id in those slots that is not in this set (ofList's `except`), or -1.
   */
  private shared = false;
  private skip = -1;

  constructor(ids?: Iterable<number>) {
    if (!ids) { this.ids = EMPTY; return; }
    const all = Array.from(ids);
    for (const id of all) checkId(id);
    const sorted = (all.every(fitsU32) ? Uint32Array.from(all) : Float64Array.from(all)).sort();
    let k = 0;
    for (let i = 0; i < sorted.length; i++) if (k === 0 || sorted[i] !== sorted[k - 1]) sorted[k++] = sorted[i]!;
    // slice, not subarray: a view would keep the duplicates' room.
    this.ids = k === sorted.length ? sorted : sorted.slice(0, k);
    this.len = k;
  }

  /**
   * ofList is the set of a compiled peer list (ids as text, as the policy compiler gives them), less `except` when
   * given. The parsed ids are kept per list: nodes of one class share one list (with each member itself in it, see
   * peerListOf), so a structural flush parses it once. The set reads those ids in place until it is changed
   * (copy on write): a structural flush gives every session such a set, and copying the class's ids for each (16 KB
   * per session at 10,000 devices, per flush) would make most of the garbage a join burst or a tag change leaves,
   * while idle sessions of one class can share one array.
   */
  static ofList(list: readonly string[], except?: number): PeerSet {
    let parsed = PARSED.get(list);
    if (!parsed) {
      parsed = parseAscending(list);
      if (!parsed) {
        const ps = new PeerSet(list.map(Number));
        parsed = ps.ids.subarray(0, ps.len);
      }
      PARSED.set(list, parsed);
    }
    const out = new PeerSet();
    out.ids = parsed;
    out.len = parsed.length;
    out.shared = true;
    if (except !== undefined && out.has(except)) out.skip = except;
    return out;
  }

  /**
   * diff walks this set (what the client holds) and `next` (what it should hold) once, both ascending:
   * `gone` are the ids only here, `each` is called for every id of `next` in ascending order with whether it
   * is new to the client. O(size + next.size), no lookups.
   */
  diff(next: PeerSet, each: (id: number, added: boolean) => void): number[] {
    const gone: number[] = [];
    const mine = this.ids, skip = this.skip;
    let i = 0;
    for (let j = 0; j < next.len; j++) {
      const id = next.ids[j]!;
      if (id === next.skip) continue;
      while (i < this.len && mine[i]! < id) { if (mine[i] !== skip) gone.push(mine[i]!); i++; }
      const held = i < this.len && mine[i] === id && id !== skip;
      if (i < this.len && mine[i] === id) i++;
      each(id, !held);
    }
    for (; i < this.len; i++) if (mine[i] !== skip) gone.push(mine[i]!);
    return gone;
  }

  /**
   * changes is diff without a call per id: the ids only here (gone) and the ids only in `next` (added), both
   * ascending. O(size + next.size).
   */
  changes(next: PeerSet, lists?: ListDiffs<unknown>): { gone: number[]; added: number[] } {
    const d = lists && this.sharedChanges(next, lists);
    if (d) return { gone: d.gone.slice(), added: d.added.slice() };
    return PeerSet.walk(this.ids, this.len, this.skip, next.ids, next.len, next.skip);
  }

  /**
   * sharedChanges is changes when this set and `next` both read shared lists and leave out the same id (or none):
   * the lists' difference, computed once per pair of lists, as the one read-only object `lists` gives every session
   * moving between them (a flush keeps on it what it builds from the difference, ListDiff.memo). Undefined when
   * either set holds ids of its own.
   */
  sharedChanges<M>(next: PeerSet, lists: ListDiffs<M>): ListDiff<M> | undefined {
    return this.shared && next.shared && this.skip === next.skip ? lists.between(this.ids, next.ids) : undefined;
  }

  /** walk is changes over two id arrays (the first `len` slots of each, less its `skip`). */
  private static walk(mine: Uint32Array | Float64Array, len: number, skip: number, theirs: Uint32Array | Float64Array, nextLen: number, nextSkip: number): { gone: number[]; added: number[] } {
    const gone: number[] = [];
    const added: number[] = [];
    let i = 0;
    for (let j = 0; j < nextLen; j++) {
      const id = theirs[j]!;
      if (id === nextSkip) continue;
      while (i < len && mine[i]! < id) { if (mine[i] !== skip) gone.push(mine[i]!); i++; }
      if (i < len && mine[i] === id) { if (id === skip) added.push(id); i++; }
      else added.push(id);
    }
    for (; i < len; i++) if (mine[i] !== skip) gone.push(mine[i]!);
    return { gone, added };
  }

  /** listDiff is the difference between two whole id arrays, as changes gives it (ListDiffs). */
  static listDiff(from: Uint32Array | Float64Array, to: Uint32Array | Float64Array): { gone: number[]; added: number[] } {
    return PeerSet.walk(from, from.length, -1, to, to.length, -1);
  }

  get size(): number { return this.skip < 0 ? this.len : this.len - 1; }

  /** byteLength is what the ids take (tests and memory accounting); a set still reading a shared list counts it whole. */
  get byteLength(): number { return this.ids.byteLength; }

  /** sharesList: the set still reads ofList's shared ids (tests). */
  get sharesList(): boolean { return this.shared; }

  has(id: number): boolean {
    if (id === this.skip) return false;
    const i = this.find(id);
    return i < this.len && this.ids[i] === id;
  }

  add(id: number): this {
    checkId(id);
    if (this.has(id)) return this;
    this.own();
    const i = this.find(id);
    if (!fitsU32(id) && this.ids instanceof Uint32Array) this.ids = Float64Array.from(this.ids);
    if (this.len === this.ids.length) {
      const next = new (this.ids.constructor as Uint32ArrayConstructor | Float64ArrayConstructor)(this.len + Math.max(4, this.len >>> 3));
      next.set(this.ids);
      this.ids = next;
    }
    if (i < this.len) this.ids.copyWithin(i + 1, i, this.len);
    this.ids[i] = id;
    this.len++;
    return this;
  }

  delete(id: number): boolean {
    if (!this.has(id)) return false;
    this.own();
    const i = this.find(id);
    this.ids.copyWithin(i, i + 1, this.len);
    this.len--;
    return true;
  }

  /** some calls fn with each id in ascending order until it returns true (a plain loop: the iterator is a
   * generator, slow in hot paths); true when it did. */
  some(fn: (id: number) => boolean): boolean {
    for (let i = 0; i < this.len; i++) if (this.ids[i] !== this.skip && fn(this.ids[i]!)) return true;
    return false;
  }

  *[Symbol.iterator](): IterableIterator<number> {
    for (let i = 0; i < this.len; i++) if (this.ids[i] !== this.skip) yield this.ids[i]!;
  }

  /** own gives the set ids of its own before a change: a copy of the shared list, less `skip`, with 1/8 spare. */
  private own(): void {
    if (!this.shared) return;
    const src = this.ids;
    const out = new (src.constructor as Uint32ArrayConstructor | Float64ArrayConstructor)(this.size + Math.max(4, this.size >>> 3));
    let k = 0;
    for (let i = 0; i < this.len; i++) if (src[i] !== this.skip) out[k++] = src[i]!;
    this.ids = out;
    this.len = k;
    this.shared = false;
    this.skip = -1;
  }

  /** find is the first index whose id is >= id (len when none). */
  private find(id: number): number {
    let lo = 0, hi = this.len;
    // Appending past the largest id is the common case (a new node): answer it without searching.
    if (hi > 0 && this.ids[hi - 1]! < id) return hi;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.ids[mid]! < id) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
}

/**
 * ListDiff is the difference between two shared peer lists (ascending ids), and what its user keeps with it: a flush
 * builds a session's new peers and their message part from `added` once for every session of the pair (memo).
 */
export interface ListDiff<M = unknown> {
  readonly gone: readonly number[];
  readonly added: readonly number[];
  memo?: M;
}

/**
 * ListDiffs keeps, for one structural flush, the differences between the shared peer lists sessions move between
 * (PeerSet.changes). The sessions of one peer class move from the same list to the same list: walking both for
 * each of them would cost O(peers) per session (4,000 ids at 10,000 devices) for a change of one or two peers; this
 * way a session pays only for its copy of the difference. Read-only results; callers get copies.
 */
export class ListDiffs<M = unknown> {
  private readonly byFrom = new Map<Uint32Array | Float64Array, Map<Uint32Array | Float64Array, ListDiff<M>>>();
  /** computed counts the pairs walked (tests). */
  computed = 0;

  between(from: Uint32Array | Float64Array, to: Uint32Array | Float64Array): ListDiff<M> {
    let row = this.byFrom.get(from);
    if (!row) this.byFrom.set(from, row = new Map());
    let d = row.get(to);
    if (!d) { d = PeerSet.listDiff(from, to); row.set(to, d); this.computed++; }
    return d;
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
