import { INTERNET, IPSet, parseAddr, parseRangeText, type Addr } from '../ip.js';
import { bitsToList, lowerBound, sortedUnique } from './node-lists.js';
import type { PolicyNode, PolicyUser, Snapshot } from './types.js';

/**
 * The tailnet as the compiler indexes it: each node with its addresses parsed (NodeInfo), and the NodeIndex of
 * users by name, e-mail and id, nodes by owner, tag and address, and which nodes route subnets or exit traffic.
 */

export interface NodeInfo {
  /** idx is the node's position in the snapshot (tailnet order); every per-context index is keyed by it. */
  idx: number;
  node: PolicyNode;
  addrs: Addr[];
  /** addrPrefixes are the node's addresses as /32 and /128 prefixes (how CapGrant Dsts name them); filled
   * on first use (addressPrefixes), as only CapGrant rules need them. */
  addrPrefixes: string[];
  ips: IPSet;
  tagged: boolean;
  approved: string[];
  subnetRoutes: string[];
  subnetSet: IPSet;
  exitRoutes: string[];
}

/** nodeInfo is a snapshot node with its addresses parsed; routes are filled in by the context (settleRoutes). */
export function nodeInfo(n: PolicyNode, idx: number): NodeInfo {
  const texts = [n.ipv4, n.ipv6].filter((x): x is string => !!x);
  const addrs = texts.map((s) => {
    const a = parseAddr(s);
    if (!a) throw new Error(`node ${n.name}: invalid address ${JSON.stringify(s)}`);
    return a;
  });
  // The same set IPSet.of(...texts) gives, without parsing the addresses a second time.
  const ips = new IPSet(addrs.map((a) => ({ v6: a.v6, start: a.n, end: a.n })));
  return {
    idx, node: n, addrs, addrPrefixes: [], ips, tagged: n.tags.length > 0,
    approved: [], subnetRoutes: [], subnetSet: new IPSet(), exitRoutes: [],
  };
}

export const sameList = (a: readonly string[] | undefined, b: readonly string[] | undefined): boolean =>
  a === b || (a !== undefined && b !== undefined && a.length === b.length && a.every((x, k) => x === b[k]));

/** samePlace: the node is the same, unchanged in everything the policy reads of it (see TailnetContext.extend). */
export function samePlace(a: PolicyNode, b: PolicyNode): boolean {
  return a.id === b.id && a.userId === b.userId && a.ipv4 === b.ipv4 && a.ipv6 === b.ipv6
    && sameList(a.tags, b.tags) && sameList(a.availableRoutes, b.availableRoutes) && sameList(a.approvedRoutes, b.approvedRoutes);
}

/**
 * movedInPlace: the same node at the same addresses with another owner or other tags, advertising no routes before
 * or after (routes decide who routes what, which an extension does not follow). See TailnetContext.extend.
 */
export function movedInPlace(a: PolicyNode, b: PolicyNode): boolean {
  return a.id === b.id && a.ipv4 === b.ipv4 && a.ipv6 === b.ipv6 && a.availableRoutes.length === 0 && b.availableRoutes.length === 0;
}

/** addressPrefixes is the node's addresses as /32 and /128 prefixes (NodeInfo.addrPrefixes, made on first use). */
export function addressPrefixes(i: NodeInfo): string[] {
  if (i.addrPrefixes.length !== i.addrs.length) i.addrPrefixes = i.addrs.map((a) => addrText(a) + (a.v6 ? '/128' : '/32'));
  return i.addrPrefixes;
}

function addrText(a: Addr): string {
  return new IPSet([{ v6: a.v6, start: a.n, end: a.n }]).strings()[0]!;
}

const V4_ALL = parseRangeText('0.0.0.0/0')!;
const V6_ALL = parseRangeText('::/0')!;

/** exitCover is the peer rule's test for a destination set reaching exit nodes: all of IPv4 or IPv6, or the
 * whole internet (see NodeIndex.dstNodes). */
function exitCover(dsts: IPSet): boolean {
  return dsts.containsRange(V4_ALL) || dsts.containsRange(V6_ALL) || INTERNET.subsetOf(dsts);
}

/**
 * NodeIndex holds a context's nodes (infos, in tailnet order) and users, indexed every way the compiler looks them
 * up. A context's extension updates it in place (replace, append) and drops what it derived (newGeneration).
 */
export class NodeIndex {
  readonly infos: NodeInfo[];
  readonly byId = new Map<string, NodeInfo>();
  /** users are the tailnet's users (an extension keeps the very same list). */
  readonly users: PolicyUser[];
  private readonly usersByName = new Map<string, PolicyUser[]>();
  private readonly usersByEmail = new Map<string, PolicyUser[]>();
  readonly userById = new Map<string, PolicyUser>();
  /** nodesByUser: the untagged nodes of each user, in tailnet order. */
  readonly nodesByUser = new Map<string, NodeInfo[]>();
  readonly nodesByTag = new Map<string, NodeInfo[]>();
  /** v4Keys are IPv4 addresses as numbers (exact: below 2^32), so that nodesWithAddrIn compares doubles, not bigints. */
  private readonly v4Keys: number[] = [];
  private readonly v4Idx: number[] = [];
  private readonly v6Keys: bigint[] = [];
  private readonly v6Idx: number[] = [];
  /** routers and exitNodes are the nodes with approved subnet routes and exit routes (see noteRoutes). */
  readonly routers: NodeInfo[] = [];
  readonly exitNodes: NodeInfo[] = [];
  private addrHits = new WeakMap<IPSet, Int32Array>();

  /** The snapshot's node addresses are parsed here: an invalid one throws. */
  constructor(snapshot: Snapshot) {
    this.users = snapshot.users;
    this.infos = snapshot.nodes.map((n, idx) => nodeInfo(n, idx));
    for (const i of this.infos) this.byId.set(i.node.id, i);
    for (const u of snapshot.users) {
      push(this.usersByName, u.name, u);
      if (u.email !== undefined) push(this.usersByEmail, u.email, u);
      if (!this.userById.has(u.id)) this.userById.set(u.id, u);
    }
    const v4: [bigint, number][] = [];
    const v6: [bigint, number][] = [];
    for (const i of this.infos) {
      if (!i.tagged && i.node.userId !== undefined) push(this.nodesByUser, i.node.userId, i);
      for (const t of new Set(i.node.tags)) push(this.nodesByTag, t, i);
      for (const a of i.addrs) (a.v6 ? v6 : v4).push([a.n, i.idx]);
    }
    for (const list of [v4, v6]) list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]));
    for (const [k, x] of v4) { this.v4Keys.push(Number(k)); this.v4Idx.push(x); }
    for (const [k, x] of v6) { this.v6Keys.push(k); this.v6Idx.push(x); }
  }

  /** noteRoutes counts i among the routers and exit nodes when its settled routes (see settleRoutes) make it one. */
  noteRoutes(i: NodeInfo): void {
    if (!i.subnetSet.isEmpty()) this.routers.push(i);
    if (i.exitRoutes.length > 0) this.exitNodes.push(i);
  }

  /** userOf is the one user a policy user name (`name@` or an e-mail address) names, if exactly one. */
  userOf(alias: string): PolicyUser | undefined {
    const trimmed = alias.endsWith('@') ? alias.slice(0, -1) : alias;
    const matches = new Set([...(this.usersByEmail.get(trimmed) ?? []), ...(this.usersByName.get(trimmed) ?? [])]);
    return matches.size === 1 ? [...matches][0] : undefined;
  }

  nodesOfUser(u: PolicyUser | undefined): NodeInfo[] {
    if (!u) return [];
    return this.nodesByUser.get(u.id) ?? [];
  }

  /** nodesWithAddrIn lists (sorted, once per set) the nodes with an address in `set`, by binary search. */
  nodesWithAddrIn(set: IPSet): Int32Array {
    let v = this.addrHits.get(set);
    if (!v) {
      // A node's bit, once whatever number of its addresses the set holds; read out in index order, no sort. Both
      // the ranges and the keys are in order: each search gallops on from where the one before ended, so a set of
      // thousands of single addresses (autogroup:member) walks the keys about once instead of a binary search from
      // there per range.
      const bits = new Uint32Array((this.infos.length + 31) >>> 5);
      let from4 = 0, from6 = 0;
      const keys4 = this.v4Keys, ids4 = this.v4Idx, keys6 = this.v6Keys, ids6 = this.v6Idx;
      for (const r of set.ranges) {
        if (!r.v6) {
          const end = Number(r.end);
          let k = lowerBound(keys4, Number(r.start), from4);
          for (; k < keys4.length && keys4[k]! <= end; k++) { const x = ids4[k]!; bits[x >>> 5]! |= 1 << (x & 31); }
          from4 = k;
          continue;
        }
        let k = lowerBound(keys6, r.start, from6);
        for (; k < keys6.length && keys6[k]! <= r.end; k++) { const x = ids6[k]!; bits[x >>> 5]! |= 1 << (x & 31); }
        from6 = k;
      }
      v = bitsToList(bits);
      this.addrHits.set(set, v);
    }
    return v;
  }

  /** srcNodes are the nodes the peer rule counts as a source of `srcs`: an address in it, or an approved subnet
   * route overlapping it. */
  srcNodes(srcs: IPSet): Int32Array {
    const base = this.nodesWithAddrIn(srcs);
    const extra = this.routers.filter((r) => srcs.overlaps(r.subnetSet)).map((r) => r.idx);
    return extra.length ? sortedUnique([...base, ...extra]) : base;
  }

  /** dstNodes are the nodes the peer rule counts as a destination of `dsts`: srcNodes' tests, plus exit nodes
   * when the set covers what an exit route carries (exitCover). */
  dstNodes(dsts: IPSet): Int32Array {
    const base = this.srcNodes(dsts);
    if (this.exitNodes.length === 0 || !exitCover(dsts)) return base;
    return sortedUnique([...base, ...this.exitNodes.map((e) => e.idx)]);
  }

  /** replace puts i in the place of the node it moves (same index, id and addresses: see movedInPlace) and returns the old one. */
  replace(i: NodeInfo): NodeInfo {
    const gone = this.infos[i.idx]!;
    this.infos[i.idx] = i;
    this.byId.set(i.node.id, i);
    if (!gone.tagged && gone.node.userId !== undefined) drop(this.nodesByUser, gone.node.userId, gone);
    for (const t of new Set(gone.node.tags)) drop(this.nodesByTag, t, gone);
    if (!i.tagged && i.node.userId !== undefined) insertByIdx(this.nodesByUser, i.node.userId, i);
    for (const t of new Set(i.node.tags)) insertByIdx(this.nodesByTag, t, i);
    return gone;
  }

  /** append adds a node that joined (its idx is the next one) to every index. */
  append(i: NodeInfo): void {
    this.infos.push(i);
    this.byId.set(i.node.id, i);
    if (!i.tagged && i.node.userId !== undefined) push(this.nodesByUser, i.node.userId, i);
    for (const t of new Set(i.node.tags)) push(this.nodesByTag, t, i);
    for (const a of i.addrs) {
      if (a.v6) {
        const at = lowerBound(this.v6Keys, a.n);
        this.v6Keys.splice(at, 0, a.n);
        this.v6Idx.splice(at, 0, i.idx);
      } else {
        const x = Number(a.n), at = lowerBound(this.v4Keys, x);
        this.v4Keys.splice(at, 0, x);
        this.v4Idx.splice(at, 0, i.idx);
      }
    }
  }

  /** newGeneration drops what was derived from the nodes before an extension. */
  newGeneration(): void {
    this.addrHits = new WeakMap();
  }
}

function push<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const l = m.get(k);
  if (l) l.push(v); else m.set(k, [v]);
}

/** drop takes `v` out of its list under `k` (and the key with an emptied list, as a fresh context never has one). */
function drop<K, V>(m: Map<K, V[]>, k: K, v: V): void {
  const l = m.get(k)?.filter((x) => x !== v);
  if (l?.length) m.set(k, l); else m.delete(k);
}

/** insertByIdx puts a node into its list under `k` in tailnet order, where a fresh context would have it. */
function insertByIdx<K>(m: Map<K, NodeInfo[]>, k: K, i: NodeInfo): void {
  const l = m.get(k);
  if (!l) { m.set(k, [i]); return; }
  let at = l.length;
  while (at > 0 && l[at - 1]!.idx > i.idx) at--;
  l.splice(at, 0, i);
}
