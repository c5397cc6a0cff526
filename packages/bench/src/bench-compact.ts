/**
 * bench-compact keeps a benchmark device's peers as plan indices instead of nodes. A worker holds thousands of
 * devices that each see thousands of peers: a Map of node objects per device is millions of entries for the
 * garbage collector to mark, and a per-peer copy of what the worker checks is work on every peer of every message.
 * CompactPeers is the netmap's peer map (emptyNetMap takes it), so every delta is applied by netmap.ts's own rules
 * (a full map replacing the peers, removals, changes, patches); it stores one bit per plan device, with the rare
 * peer that is not a plan device under its own canonical identity kept whole.
 */
import { bitsHas, type Node, type NodeID } from '@headway/testkit';
import type { Wanted } from './bench-match.js';

/**
 * PeerDirectory is a worker's shared knowledge of node ids: the node key each id was first seen with and the plan
 * device that key names, and the ids whose whole node devices keep (the target of a rename or a tag change).
 * A peer is held as a bit when its id and key are that first pairing (the benchmark's devices keep their keys).
 */
export class PeerDirectory {
  /** followed: node ids whose whole node every device keeps, so a check can read its name and tags. */
  readonly followed = new Set<NodeID>();
  private keyOfId: Array<string | undefined> = [];
  /** indexOfId[id]: 1 + the plan index of the id's first key (0: not a plan device's id, or not seen). */
  private indexOfId = new Int32Array(0);
  /** idOfIndex[i]: 1 + the node id paired with plan device i (0: none yet). */
  private idOfIndex: Int32Array;
  private stubs: Array<Node | undefined> = [];

  constructor(readonly planSize: number, private indexOfKey: (key: string) => number | undefined = () => undefined) {
    this.idOfIndex = new Int32Array(planSize);
  }

  /** reset forgets every pairing and takes a new key lookup (the driver sends the node keys once devices exist). */
  reset(indexOfKey: (key: string) => number | undefined): void {
    this.indexOfKey = indexOfKey;
    this.keyOfId = [];
    this.indexOfId = new Int32Array(0);
    this.idOfIndex = new Int32Array(this.planSize);
    this.stubs = [];
  }

  /** words is how many 32-bit words a bitset over the plan takes. */
  get words(): number {
    return (this.planSize + 31) >>> 5;
  }

  /** planIndex is the plan device a node key names, or -1. */
  planIndex(key: string | undefined): number {
    return key === undefined ? -1 : this.indexOfKey(key) ?? -1;
  }

  /** paired is the plan index of (id, key) when that is the id's pairing (recording it the first time), else -1. */
  paired(id: NodeID, key: string | undefined): number {
    if (id < 0 || key === undefined) return -1;
    if (id < this.indexOfId.length) {
      const i = this.indexOfId[id]! - 1;
      if (i >= 0) return this.keyOfId[id] === key ? i : -1;
      if (this.keyOfId[id] !== undefined) return -1;
    }
    const i = this.planIndex(key);
    if (i < 0 || this.idOfIndex[i] !== 0) return -1;
    if (id >= this.indexOfId.length) {
      const grown = new Int32Array(Math.max(id + 1, this.indexOfId.length * 2));
      grown.set(this.indexOfId);
      this.indexOfId = grown;
    }
    this.indexOfId[id] = i + 1;
    this.keyOfId[id] = key;
    this.idOfIndex[i] = id + 1;
    return i;
  }

  /** pairedIndex is the plan index paired with an id, or -1. */
  pairedIndex(id: NodeID): number {
    return id >= 0 && id < this.indexOfId.length ? this.indexOfId[id]! - 1 : -1;
  }

  /** idOf is the node id paired with plan device i (it has one when a device holds bit i). */
  idOf(i: number): NodeID {
    return this.idOfIndex[i]! - 1;
  }

  /** stub is the node as a device holding the paired id knows it without the node itself: its id and key. */
  stub(id: NodeID): Node {
    return this.stubs[id] ??= Object.freeze({ ID: id, Key: this.keyOfId[id] }) as Node;
  }
}

/** CompactPeers is one device's peer map (see the file comment); its values are stubs but for followed ids. */
export class CompactPeers implements Map<NodeID, Node> {
  readonly [Symbol.toStringTag] = 'CompactPeers';
  /** bits: the plan devices held under their paired id. */
  private readonly bits: Uint32Array;
  private held = 0;
  /** others: the peers held otherwise (no plan device's key, or a key the id was not first seen with), whole. */
  private readonly others = new Map<NodeID, Node>();
  /** whole: the followed peers held as bits, whole. */
  private readonly whole = new Map<NodeID, Node>();
  private want: Wanted | undefined;
  /**
   * wanted counts the peers held as bits that want holds (see watch). A peer held otherwise is never wanted: a
   * device holding one never matches, as the full check (exactly) finds too.
   */
  private wanted = 0;

  constructor(private readonly dir: PeerDirectory) {
    this.bits = new Uint32Array(dir.words);
  }

  get size(): number {
    return this.held + this.others.size;
  }

  /** watch makes want the peers matched against (undefined: none) and recounts. */
  watch(want: Wanted | undefined): void {
    this.want = want;
    this.wanted = 0;
    if (!want) return;
    for (let w = 0; w < this.bits.length; w++) {
      let x = this.bits[w]! & want.bits[w]!;
      while (x) { x &= x - 1; this.wanted++; }
    }
  }

  /** matches: exactly the watched peers are held, by the count kept as the map is edited (false when nothing is watched). */
  matches(): boolean {
    return this.want !== undefined && this.size === this.want.size && this.wanted === this.want.size;
  }

  /** exactly compares the held peers with want bit by bit, apart from the running count: the full check. */
  exactly(want: Wanted): boolean {
    if (this.others.size !== 0 || this.held !== want.size || want.bits.length !== this.bits.length) return false;
    for (let w = 0; w < this.bits.length; w++) if (this.bits[w] !== want.bits[w]) return false;
    return true;
  }

  get(id: NodeID): Node | undefined {
    const i = this.dir.pairedIndex(id);
    if (i >= 0 && bitsHas(this.bits, i)) return this.whole.get(id) ?? this.dir.stub(id);
    return this.others.get(id);
  }

  has(id: NodeID): boolean {
    const i = this.dir.pairedIndex(id);
    return (i >= 0 && bitsHas(this.bits, i)) || this.others.has(id);
  }

  set(id: NodeID, node: Node): this {
    const i = this.dir.paired(id, node.Key);
    if (i >= 0) {
      this.dropOther(id);
      const w = i >>> 5, b = 1 << (i & 31);
      if ((this.bits[w]! & b) === 0) {
        this.bits[w]! |= b;
        this.held++;
        if (this.want && bitsHas(this.want.bits, i)) this.wanted++;
      }
      if (this.dir.followed.has(id)) this.whole.set(id, node);
    } else {
      this.dropBit(id);
      this.dropOther(id);
      this.others.set(id, node);
    }
    return this;
  }

  delete(id: NodeID): boolean {
    return this.dropBit(id) || this.dropOther(id);
  }

  clear(): void {
    this.bits.fill(0);
    this.held = 0;
    this.wanted = 0;
    this.others.clear();
    this.whole.clear();
  }

  *keys(): MapIterator<NodeID> {
    for (let w = 0; w < this.bits.length; w++) {
      for (let x = this.bits[w]!; x; x &= x - 1) yield this.dir.idOf((w << 5) + (31 - Math.clz32(x & -x)));
    }
    yield* this.others.keys();
  }

  *values(): MapIterator<Node> {
    for (const id of this.keys()) yield this.get(id)!;
  }

  *entries(): MapIterator<[NodeID, Node]> {
    for (const id of this.keys()) yield [id, this.get(id)!];
  }

  [Symbol.iterator](): MapIterator<[NodeID, Node]> {
    return this.entries();
  }

  forEach(fn: (value: Node, key: NodeID, map: Map<NodeID, Node>) => void, thisArg?: unknown): void {
    for (const [id, node] of this.entries()) fn.call(thisArg, node, id, this);
  }

  private dropBit(id: NodeID): boolean {
    const i = this.dir.pairedIndex(id);
    if (i < 0 || !bitsHas(this.bits, i)) return false;
    this.bits[i >>> 5]! &= ~(1 << (i & 31));
    this.held--;
    if (this.want && bitsHas(this.want.bits, i)) this.wanted--;
    this.whole.delete(id);
    return true;
  }

  private dropOther(id: NodeID): boolean {
    return this.others.delete(id);
  }
}
