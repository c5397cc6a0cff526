import type { Addr, IPSet } from '../ip.js';
import type { PreRule } from './merge.js';
import { sortedUnique } from './node-lists.js';
import type { NodeIndex, NodeInfo } from './nodes.js';
import type { FilterRule } from './types.js';

/**
 * Hits: which DstPorts entries of a merged rule hold an address of a node, the part of the rule a node that routes
 * nothing receives. Read from an index of every node once enough nodes ask (hitsOf), before that from the rule's
 * entries flattened into typed arrays (hitIn).
 */

/**
 * Hit is one entry list of a PreRule's hits (interned: nodes served by the same entries share it, see hitsOf) with
 * the rule narrowed to those entries (plainRule), made on first use. Every node the same entries serve gets the
 * same object, in this context and in every context extended from it: sessions then hold one shared rule, and a
 * session's filter update skips a rule by identity when it is the object the session was sent before
 * (filterUpdate). Nobody may modify it.
 */
export interface Hit { es: number[]; rule?: FilterRule }

/**
 * FlatEntries are a rule's DstPorts entries as number ranges: IPv4 as pairs of doubles (exact below 2^53), IPv6 as
 * four 32-bit words for the start and four for the end, each range with its entry's number. hitIn reads a node's
 * entries by one pass over typed arrays instead of testing each entry's IPSet in turn (a call, a binary search and
 * bigint compares per entry), on rules that list thousands of entries.
 */
export interface FlatEntries { v4: Float64Array; v4e: Int32Array; v6: Uint32Array; v6e: Int32Array }

const W32 = 0xffffffffn;

function putWords(out: Uint32Array, at: number, n: bigint): void {
  out[at] = Number((n >> 96n) & W32);
  out[at + 1] = Number((n >> 64n) & W32);
  out[at + 2] = Number((n >> 32n) & W32);
  out[at + 3] = Number(n & W32);
}

/** cmpWords compares the 128-bit value in words[at..at+3] with (a0, a1, a2, a3). */
function cmpWords(w: Uint32Array, at: number, a0: number, a1: number, a2: number, a3: number): number {
  return w[at]! !== a0 ? w[at]! - a0 : w[at + 1]! !== a1 ? w[at + 1]! - a1 : w[at + 2]! !== a2 ? w[at + 2]! - a2 : w[at + 3]! - a3;
}

/**
 * V6_WORDS: an entry set's IPv6 ranges as FlatEntries words, kept per set (entry sets are parsed once per text across
 * contexts, see parseSetText), so a rule made again in an extension copies numbers instead of splitting bigints.
 * IPv4 ranges convert cheaply and are not kept: a kept pair per set would cost every session a few hundred bytes.
 */
const V6_WORDS = new WeakMap<IPSet, Uint32Array>();

function v6Words(set: IPSet): Uint32Array | undefined {
  let w = V6_WORDS.get(set);
  if (w) return w;
  const v6s = set.ranges.filter((r) => r.v6);
  if (!v6s.length) return undefined;
  w = new Uint32Array(8 * v6s.length);
  v6s.forEach((r, k) => { putWords(w!, 8 * k, r.start); putWords(w!, 8 * k + 4, r.end); });
  V6_WORDS.set(set, w);
  return w;
}

function flatOf(p: PreRule): FlatEntries {
  if (p.flat) return p.flat;
  let n4 = 0, n6 = 0;
  for (const set of p.entrySets) for (const r of set.ranges) if (r.v6) n6++; else n4++;
  const f: FlatEntries = { v4: new Float64Array(2 * n4), v4e: new Int32Array(n4), v6: new Uint32Array(8 * n6), v6e: new Int32Array(n6) };
  let k4 = 0, k6 = 0;
  p.entrySets.forEach((set, e) => {
    for (const r of set.ranges) {
      if (r.v6) continue;
      f.v4[2 * k4] = Number(r.start);
      f.v4[2 * k4 + 1] = Number(r.end);
      f.v4e[k4++] = e;
    }
    const w = n6 ? v6Words(set) : undefined;
    if (!w) return;
    f.v6.set(w, 8 * k6);
    for (let k = 0; k < w.length >> 3; k++) f.v6e[k6++] = e;
  });
  return (p.flat = f);
}

/** entriesWith appends to `es`, in order, the entries of f holding address a (each at most once: a set's ranges are disjoint). */
function entriesWith(f: FlatEntries, a: Addr, es: number[]): void {
  if (!a.v6) {
    const x = Number(a.n), v = f.v4, n = f.v4e.length;
    for (let k = 0; k < n; k++) if (v[2 * k]! <= x && x <= v[2 * k + 1]!) es.push(f.v4e[k]!);
    return;
  }
  const a0 = Number((a.n >> 96n) & W32), a1 = Number((a.n >> 64n) & W32), a2 = Number((a.n >> 32n) & W32), a3 = Number(a.n & W32);
  const w = f.v6, n = f.v6e.length;
  for (let k = 0; k < n; k++) {
    if (cmpWords(w, 8 * k, a0, a1, a2, a3) <= 0 && cmpWords(w, 8 * k + 4, a0, a1, a2, a3) >= 0) es.push(f.v6e[k]!);
  }
}

/** internHit is the one Hit of p for these entries (hitsOf and hitOf share them, and with them their rule objects). */
function internHit(p: PreRule, es: number[]): Hit {
  const lists = (p.hitLists ??= new Map());
  const key = es.join(',');
  let hit = lists.get(key);
  if (!hit) lists.set(key, hit = { es });
  return hit;
}

/** hitIn is node i's Hit of p read from p's entries one by one (undefined: none holds an address of i). */
function hitIn(p: PreRule, i: NodeInfo): Hit | undefined {
  const addrs = i.addrs.filter((a) => p.dsts.containsAddr(a));
  if (!addrs.length) return undefined;
  const f = flatOf(p);
  let es: number[] = [];
  entriesWith(f, addrs[0]!, es);
  for (let k = 1; k < addrs.length; k++) {
    // Each address's entries are in order; an entry holding two of them ('*', a large range) counts once.
    const more: number[] = [];
    entriesWith(f, addrs[k]!, more);
    if (more.length) es = Array.from(sortedUnique([...es, ...more]));
  }
  return es.length ? internHit(p, es) : undefined;
}

/** HITS_INDEX_AFTER: how many nodes read their entries of a rule one by one before its index is built (see hitOf). */
const HITS_INDEX_AFTER = 24;

/**
 * hitsOf indexes, once per PreRule, which DstPorts entries hold an address of each node. Equal entry lists are
 * one array (see plainRule), so nodes served by the same entries share one filter rule object.
 */
function hitsOf(p: PreRule, nodes: NodeIndex): Map<number, Hit> {
  const infos = nodes.infos;
  // Asked for every rule of every node compiled: answer at once when nothing joined since.
  if (p.hits && p.hitsSeen === infos.length) return p.hits;
  if (!p.hits) {
    const byNode = new Map<number, number[]>();
    p.entrySets.forEach((set, e) => {
      for (const x of nodes.nodesWithAddrIn(set)) {
        const l = byNode.get(x);
        if (l) l.push(e); else byNode.set(x, [e]);
      }
    });
    const hits = new Map<number, Hit>();
    for (const [x, es] of byNode) hits.set(x, internHit(p, es));
    p.hits = hits;
  } else {
    // A rule kept over an extension: index the nodes that joined since (each new node's entries, in order).
    for (let x = p.hitsSeen; x < infos.length; x++) {
      const hit = hitIn(p, infos[x]!);
      if (hit) p.hits.set(x, hit);
    }
  }
  p.hitsSeen = infos.length;
  return p.hits;
}

/**
 * hitOf is the node's entries of p (hitsOf), read straight from the entries while few nodes have asked: a rule
 * that replaced another in a tag change is asked by the retagged node alone (the others keep what its twin
 * gave them, see PacketFilters.compile), and indexing every node of its thousands of entries would be wasted on
 * that one. The HITS_INDEX_AFTER-th node to ask builds the index.
 */
export function hitOf(p: PreRule, i: NodeInfo, nodes: NodeIndex): Hit | undefined {
  if (p.hits || (p.hitAsks = (p.hitAsks ?? 0) + 1) > HITS_INDEX_AFTER) return hitsOf(p, nodes).get(i.idx);
  return hitIn(p, i);
}

/** plainRule is p narrowed to the entries of hit, one object per rule key and entry list (see Hit). */
export function plainRule(p: PreRule, hit: Hit): FilterRule {
  let out = hit.rule;
  if (out) return out;
  const entries = p.rule.DstPorts!;
  const dsts = hit.es.map((e) => entries[e]!);
  // The same sources, protocols and entries are the same rule: take the object made before, by this rule or by
  // another of the same key (one it replaced in an extension, or a scope's), so unchanged filters stay equal by identity.
  const key = dsts.map((d) => `${d.IP} ${d.Ports.First}-${d.Ports.Last}`).join(',');
  const plain = (p.plain ??= new Map());
  out = plain.get(key);
  if (!out) {
    out = { ...p.rule, DstPorts: dsts };
    plain.set(key, out);
  }
  hit.rule = out;
  return out;
}
