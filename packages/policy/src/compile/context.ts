import type { IPSet } from '../ip.js';
import type { Alias, Policy } from '../policy.js';
import { AliasResolver } from './aliases.js';
import { PacketFilters } from './filter.js';
import { GrantCompiler } from './grants.js';
import { indexIn } from './node-lists.js';
import { nodeCapMap } from './node-attrs.js';
import { NodeIndex, movedInPlace, nodeInfo, samePlace, type NodeInfo } from './nodes.js';
import { PeerIndex, type PeerClass } from './peers.js';
import { RouteVisibility, approvedRoutes, settleRoutes } from './routes.js';
import { RuleLists } from './scopes.js';
import { SshRules } from './ssh.js';
import type { FilterRule, PolicyNode, SSHRule, Snapshot } from './types.js';

/**
 * TailnetContext resolves a policy against one snapshot; build it once per snapshot. Everything that does not
 * depend on the node compiled is computed once here and indexed by node, so compiling one node costs O(rules
 * touching it + its output) rather than a scan of the tailnet per rule. It composes:
 *   - NodeIndex (nodes.ts): the nodes and users, indexed by owner, tag and address;
 *   - AliasResolver (aliases.ts): alias to address set, once per alias;
 *   - routes.ts: approved routes (autoApprovers), primary routes, route visibility (RouteVisibility);
 *   - GrantCompiler (grants.ts) and RuleLists (scopes.ts): the grants as rules, merged (merge.ts) into each
 *     node's rule list: the global list, or its autogroup:self or via scope's;
 *   - PacketFilters (filter.ts, with hits.ts): each node's filter, narrowed to what the node serves;
 *   - PeerIndex (peers.ts): who sees whom;
 *   - SshRules (ssh.ts) and nodeCapMap (node-attrs.ts): SSH policy and node attributes.
 * extend brings it to a larger or retagged tailnet in place, each part updating or dropping what it derived.
 */
export class TailnetContext {
  /** infos are the tailnet's nodes in snapshot order (the NodeIndex's list, updated in place by extend). */
  readonly infos: NodeInfo[];
  readonly byId: Map<string, NodeInfo>;
  private readonly nodes: NodeIndex;
  private readonly aliases: AliasResolver;
  private readonly rules: RuleLists;
  private readonly filters: PacketFilters;
  private readonly ssh: SshRules;
  private readonly routes: RouteVisibility;
  private peerIndex?: PeerIndex;

  /**
   * matcherCache is accepted by peers() and routeVisible() for callers that pass one; the context keeps every
   * rule's parsed matchers itself (once per context, shared by all nodes), so it stays empty.
   */
  readonly matcherCache = new Map<string, { srcs: IPSet; dsts: IPSet }[]>();

  /** snapshot is the tailnet the context answers for (extend replaces it with a larger one). */
  get snapshot(): Snapshot { return this.tailnet; }
  private tailnet: Snapshot;

  /** twinsKept counts the rules a node's filter kept or skipped by a twin (see PacketFilters.compile), for tests. */
  get twinsKept(): number { return this.filters.twinsKept; }
  set twinsKept(n: number) { this.filters.twinsKept = n; }

  /** applyAutoApprovers=false takes approvedRoutes as final (e.g. a capture of a control
   * plane that already applied autoApprovers when the routes were advertised). */
  constructor(readonly policy: Policy | null, snapshot: Snapshot, readonly applyAutoApprovers = true) {
    this.tailnet = snapshot;
    this.nodes = new NodeIndex(snapshot);
    this.infos = this.nodes.infos;
    this.byId = this.nodes.byId;
    this.aliases = new AliasResolver(policy, this.nodes);
    for (const i of this.infos) {
      settleRoutes(i, approvedRoutes(i, policy, this.aliases, applyAutoApprovers));
      this.nodes.noteRoutes(i);
    }
    // A policy without acls or grants behaves like Tailscale's default `*` -> `*:*` rule,
    // whose sources are the tailnet ranges (not a literal "*").
    const effective = policy && policy.acls === null && policy.grants === null
      ? { ...policy, grants: [{ src: [{ kind: 'wildcard' as const }], dst: [{ kind: 'wildcard' as const }], ip: [{ protos: null, ports: [{ First: 0, Last: 65535 }] }], app: null, via: [] }] }
      : policy;
    this.rules = new RuleLists(effective, new GrantCompiler(this.aliases, this.nodes), this.nodes);
    this.filters = new PacketFilters(this.rules, this.nodes);
    this.ssh = new SshRules(policy, this.nodes, this.aliases);
    this.routes = new RouteVisibility(this.rules, this.filters);
  }

  /**
   * extend brings the context up to `snapshot` when all that changed is nodes joining or nodes changing owner or
   * tags: the same users (the same array), every node the context knows still in its place, either unchanged in
   * what the policy reads (owner, tags, addresses, routes) or "moved" (same addresses, new owner or tags, and no
   * routes advertised before or after), and the new nodes after them, advertising no routes. It returns false,
   * changing nothing, for any other snapshot; build a new context then.
   *
   * Extended, the context updates its indexes, recomputes only the alias sets the changes touch (a join grows the
   * sets it falls in; a moved node's old and new memberships name the sets to resolve again; a set nothing touches
   * keeps its identity), compiles again only the grants naming a set that changed, and keeps every merged rule made
   * of the same pieces as before. What a kept rule knows of the nodes (hits, peer sets) turns on addresses and
   * routes alone, which a moved node keeps, so it only catches up over the new nodes. Scopes, the peer index and
   * the node-derived caches are rebuilt lazily, from those rules. This spares a join burst or a tag change a
   * context built from scratch (O(tailnet + rules), with every rule's source list rendered and parsed again). The
   * property tests compare the result with a context built from scratch.
   */
  extend(snapshot: Snapshot): boolean {
    const before = this.infos.length;
    if (snapshot.users !== this.tailnet.users || snapshot.nodes.length < before) return false;
    const moved: number[] = [];
    for (let k = 0; k < before; k++) {
      const was = this.infos[k]!.node;
      const now = snapshot.nodes[k]!;
      if (samePlace(was, now)) continue;
      if (!movedInPlace(was, now)) return false;
      moved.push(k);
    }
    const added = snapshot.nodes.slice(before);
    if (added.some((n) => n.availableRoutes.length > 0 || this.byId.has(n.id))) return false;
    if (new Set(added.map((n) => n.id)).size !== added.length) return false;
    let fresh: NodeInfo[];
    try {
      fresh = added.map((n, k) => nodeInfo(n, before + k));
    } catch {
      return false;
    }
    const old = this.tailnet;
    this.tailnet = snapshot;
    if (!fresh.length && !moved.length) return true;
    // No routes advertised by a moved or a new node: its approved routes are only admin approvals.
    const approved = (i: NodeInfo) => approvedRoutes(i, this.policy, this.aliases, this.applyAutoApprovers);
    // The alias sets a moved node leaves or enters: those its old and its new self resolve differently.
    let dirty = new Set<string>();
    if (moved.length) {
      const was = this.alike(moved.map((k) => old.nodes[k]!));
      const now = this.alike(moved.map((k) => snapshot.nodes[k]!));
      dirty = this.aliases.differing((a) => was.resolve(a), (a) => now.resolve(a));
    }
    for (const k of moved) {
      const i = nodeInfo(snapshot.nodes[k]!, k);
      const gone = this.nodes.replace(i);
      if (!gone.tagged && gone.node.userId !== undefined) this.rules.forgetSelf(gone.node.userId);
      if (!i.tagged && i.node.userId !== undefined) this.rules.forgetSelf(i.node.userId);
      i.approved = approved(i);
    }
    // The new nodes alone resolve each alias to what they add to it.
    if (fresh.length) {
      const alone = this.alike(added);
      this.aliases.grow((a) => alone.resolve(a), dirty);
    }
    for (const i of fresh) {
      this.nodes.append(i);
      if (!i.tagged && i.node.userId !== undefined) this.rules.forgetSelf(i.node.userId);
      i.approved = approved(i);
    }
    // Every index holds the moved and the new nodes now: resolve what the moves touched again, whole.
    this.aliases.resolveAgain(dirty);
    // Merged rules are kept by their pieces; everything else that depends on the nodes is rebuilt on use.
    this.rules.extended();
    this.filters.nextGeneration();
    this.nodes.newGeneration();
    this.aliases.newGeneration();
    this.ssh.clear();
    this.routes.clear();
    this.peerIndex = undefined;
    return true;
  }

  /** alike is a context of the same policy and users on `nodes` alone (extend compares alias sets on them). */
  private alike(nodes: PolicyNode[]): TailnetContext {
    return new TailnetContext(this.policy, { users: this.tailnet.users, nodes }, this.applyAutoApprovers);
  }

  /** resolve turns an alias into addresses; null for autogroup:self (resolved per node). Memoized per alias. */
  resolve(a: Alias): IPSet | null {
    return this.aliases.resolve(a);
  }

  /** unreducedRules is every rule relevant to compiling this node's filter, before
   * dropping destinations the node does not serve. */
  unreducedRules(i: NodeInfo): FilterRule[] {
    return this.rules.unreducedRules(i);
  }

  /** packetFilter is the node's filter: only destinations the node itself serves (see PacketFilters.compile). */
  packetFilter(i: NodeInfo): FilterRule[] {
    return this.filters.compile(i);
  }

  /** viaServes reports whether a via grant lets `user` reach something through `router`. */
  viaServes(user: NodeInfo, router: NodeInfo, prefix?: string): boolean {
    return this.routes.viaServes(user, router, prefix);
  }

  /** peers are the nodes `i` can reach or be reached by, judged by either side's rules, in tailnet order.
   * The cache argument is accepted and not needed (see matcherCache). */
  peers(i: NodeInfo, _cache?: Map<string, { srcs: IPSet; dsts: IPSet }[]>): NodeInfo[] {
    const peers: NodeInfo[] = [];
    for (const x of this.peerClass(i).members) if (x !== i.idx) peers.push(this.infos[x]!);
    return peers;
  }

  /** peerCount is peers(i).length without building the list (policyWarnings asks it of every node). */
  peerCount(i: NodeInfo): number {
    const { members } = this.peerClass(i);
    return members.length - (indexIn(members, i.idx) >= 0 ? 1 : 0);
  }

  /** somePeer is peers(i).some(test) without building the list. */
  somePeer(i: NodeInfo, test: (peer: NodeInfo) => boolean): boolean {
    for (const x of this.peerClass(i).members) if (x !== i.idx && test(this.infos[x]!)) return true;
    return false;
  }

  /** peerIds is peers() as node ids, read from the class's shared id list (O(output), no NodeInfo detour). */
  peerIds(i: NodeInfo): string[] {
    const { members, ids } = this.peerClass(i);
    const at = indexIn(members, i.idx);
    // Not a member of its own class: the class's list itself, shared (callers never modify a peer list), so
    // consumers can key per-list work on it (PeerSet.ofList parses each shared list once).
    if (at < 0) return ids;
    return [...ids.slice(0, at), ...ids.slice(at + 1)];
  }

  /** peerClassIds is the shared id list of the node's peer class: its peers, plus the node itself when it is a
   * member (see peerListOf). Callers never modify it. */
  peerClassIds(i: NodeInfo): readonly string[] {
    return this.peerClass(i).ids;
  }

  /** peerClass is the peer list shared by every node gaining the same contributions (see PeerIndex). */
  private peerClass(i: NodeInfo): PeerClass {
    this.peerIndex ??= PeerIndex.build(this.nodes, this.rules);
    return this.peerIndex.classFor(i);
  }

  /** routeVisible reports whether `viewer` gets route `prefix` of `router` in AllowedIPs:
   * either some rule lets the viewer send into the route, or the viewer's own filter
   * accepts packets from the route (so replies and inbound traffic must be routed). */
  routeVisible(viewer: NodeInfo, router: NodeInfo, prefix: string, _cache?: Map<string, { srcs: IPSet; dsts: IPSet }[]>, includeVia = true): boolean {
    return this.routes.visible(viewer, router, prefix, includeVia);
  }

  info(id: string): NodeInfo {
    const i = this.byId.get(id);
    if (!i) throw new Error(`unknown node ${JSON.stringify(id)}`);
    return i;
  }

  /** sshRules compiles the node's SSH policy; null when the policy has no ssh section. */
  sshRules(i: NodeInfo): SSHRule[] | null {
    return this.ssh.rulesFor(i);
  }

  /** capMap is what nodeAttrs (and randomizeClientPort) add to the node's own CapMap. */
  capMap(i: NodeInfo): Record<string, unknown[] | null> {
    return nodeCapMap(this.policy, this.aliases, i);
  }
}
