import type { IPSet } from '../ip.js';
import type { PreRule } from './merge.js';
import { NodeList, bitsToList, sortedUnique } from './node-lists.js';
import type { NodeIndex, NodeInfo } from './nodes.js';
import type { RuleLists, Scope } from './scopes.js';

/**
 * The peer relation: which nodes see each other. Node j is a peer of node i when a matcher (parsed merged rule)
 * of i's or of j's rules has one of them among its sources and the other among its destinations, either way round
 * (NodeIndex.srcNodes and dstNodes say what "among" means), or when a via grant serves one through the other.
 */

/** peerSetsOf is p's source and destination nodes, once per rule (caught up over the nodes that joined since). */
function peerSetsOf(p: PreRule, nodes: NodeIndex): { S: NodeList; D: NodeList } {
  const infos = nodes.infos;
  const n = infos.length;
  if (!p.peerSets) p.peerSets = { S: new NodeList(nodes.srcNodes(p.srcs)), D: new NodeList(nodes.dstNodes(p.dsts)) };
  else if (p.peerSetsSeen < n) {
    // A rule kept over an extension: the nodes that joined since come after every node it holds (and route nothing).
    const more = (set: IPSet, list: NodeList): NodeList => {
      const extra: number[] = [];
      for (let x = p.peerSetsSeen; x < n; x++) if (infos[x]!.addrs.some((a) => set.containsAddr(a))) extra.push(x);
      if (!extra.length) return list;
      const idx = new Int32Array(list.size + extra.length);
      idx.set(list.idx);
      idx.set(extra, list.size);
      return new NodeList(idx);
    };
    p.peerSets = { S: more(p.srcs, p.peerSets.S), D: more(p.dsts, p.peerSets.D) };
  }
  p.peerSetsSeen = n;
  return p.peerSets;
}

/** PeerClass is the peer list shared by the nodes of one class: the members as indices and as node ids. */
export interface PeerClass { members: Int32Array; ids: string[] }

/**
 * PeerIndex is the peer relation as unions of precomputed node sets, built once per context (generation). A
 * global matcher is in every node's rules: with S and D its source and destination node sets, a node in S gains
 * D and a node in D gains S; via grants give such pairs too (their sources, the routers serving them). A scope's
 * own matcher is only in its owners' rules: an owner gains the whole other side, any other node only the owners
 * on the other side. A node's "class" is the list of contributions it gains; the nodes of one class (typically one
 * user's devices, or one tag set) share a single computed peer list, so each node costs O(rules touching it + its
 * output).
 */
export class PeerIndex {
  private readonly classes = new Map<string, PeerClass>();

  private constructor(
    private readonly nodes: NodeIndex,
    private readonly classOf: string[],
    private readonly contrib: Map<string, NodeList>,
  ) {}

  /** build makes every node's scope (so the rules kept over an extension are no longer needed after it). */
  static build(nodes: NodeIndex, rules: RuleLists): PeerIndex {
    const infos = nodes.infos;
    const n = infos.length;
    const parts: string[][] = Array.from({ length: n }, () => []);
    const contrib = new Map<string, NodeList>();
    const add = (members: Int32Array, key: string, gains: NodeList) => {
      if (gains.size === 0) return;
      contrib.set(key, gains);
      for (const x of members) parts[x]!.push(key);
    };
    const pairs: { S: NodeList; D: NodeList }[] = rules.globalList.map((p) => peerSetsOf(p, nodes));
    for (const g of rules.grants ?? []) {
      const v = g.via;
      if (!v) continue;
      const candidates = sortedUnique(v.tags.flatMap((t) => (nodes.nodesByTag.get(t) ?? []).map((x) => x.idx)));
      const routers = candidates.filter((x) => {
        const r = infos[x]!;
        return v.dsts.some((d) => d.overlaps(r.subnetSet)) || (v.internet && r.exitRoutes.length > 0);
      });
      pairs.push({ S: new NodeList(nodes.nodesWithAddrIn(v.srcSet)), D: new NodeList(routers) });
    }
    pairs.forEach(({ S, D }, k) => {
      add(S.idx, `g${k}s`, D);
      add(D.idx, `g${k}d`, S);
    });
    const scopes = new Set<Scope>();
    for (const i of infos) {
      const s = rules.scopeOf(i);
      if (s && s.extras.length) scopes.add(s);
    }
    const scopeIdx = new Int32Array(n).fill(-1);
    let si = 0;
    for (const s of scopes) {
      for (const o of s.owners) scopeIdx[o] = si;
      s.extras.forEach((m, mi) => {
        const { S, D } = peerSetsOf(m, nodes);
        const SO = new NodeList(S.idx.filter((x) => scopeIdx[x] === si));
        const DO = new NodeList(D.idx.filter((x) => scopeIdx[x] === si));
        const own = (list: Int32Array, yes: boolean) => list.filter((x) => (scopeIdx[x] === si) === yes);
        add(own(S.idx, true), `s${si}.${mi}so`, D);
        add(own(S.idx, false), `s${si}.${mi}s`, DO);
        add(own(D.idx, true), `s${si}.${mi}do`, S);
        add(own(D.idx, false), `s${si}.${mi}d`, SO);
      });
      si++;
    }
    // Every scope is built by now: the rules kept over from before an extension are no longer needed.
    rules.merger.doneKeeping();
    return new PeerIndex(nodes, parts.map((p) => p.join(' ')), contrib);
  }

  /** classFor is the peer list shared by every node gaining the same contributions as i. */
  classFor(i: NodeInfo): PeerClass {
    const key = this.classOf[i.idx]!;
    let cls = this.classes.get(key);
    if (!cls) {
      const infos = this.nodes.infos;
      const bits = new Uint32Array((infos.length + 31) >>> 5);
      if (key) for (const part of key.split(' ')) this.contrib.get(part)!.orInto(bits);
      const members = bitsToList(bits);
      cls = { members, ids: Array.from(members, (x) => infos[x]!.node.id) };
      this.classes.set(key, cls);
    }
    return cls;
  }
}
