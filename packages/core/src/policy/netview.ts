import { ALLOW_ALL, approvedRoutesOf, compilePolicy, drivePolicy, IPSet, mergeCompiled, preparedContext, TailnetContext, type Alias, type CompiledNode, type DriveRule, type Policy, type PolicyUser, type Snapshot } from '@headway/policy';
import { ownedByTags, type Node } from '../domain.js';
import type { DriveGrant, DriveSource } from '../ports/drive.js';
import type { Logger } from '../log.js';
import { isExitRoute } from '@headway/policy/ip';
import { snapshotNode, snapshotOf, snapshotUsers } from './engine.js';
import type { State } from '../state/state.js';

/**
 * NetworkView is what the compiled policy means for each node right now: its
 * packet filter, SSH policy, CapMap additions, visible peers and effective routes,
 * plus which node is primary for each subnet route. Results are computed lazily
 * and dropped whenever the tailnet or the policy changes.
 */
export class NetworkView {
  private policy: Policy | null = null;
  private ctx?: TailnetContext;
  /** ctxUsers is the UserStore.version the context's users were read at; grown: nodes joined or changed since. */
  private ctxUsers = -1;
  private grown = false;
  private readonly compiled = new Map<number, CompiledNode>();
  private allIds?: number[];
  /** route → node id; sticky while the primary stays online. */
  private readonly primaries = new Map<string, number>();
  private primaryOf = new Map<number, string[]>();
  /** unhealthy: routers that are online but did not answer the HA prober's last ping; the election passes them over. */
  private readonly unhealthy = new Set<number>();
  /** haRouters: the online routers of every subnet route that two or more online routers serve, as the last election saw them. */
  private haIds: number[] = [];

  /**
   * approvals are nodes' routes with autoApprovers applied, per node object (State replaces a node's object on
   * every change), under the current policy and users: the primary election and every peer's AllowedIPs ask for
   * them, and answering from the tailnet context rebuilt that whole context after each join.
   */
  private readonly approvals = new Map<number, { node: Node; routes: string[] }>();
  /** users are the users as the compiler sees them, with the UserStore.version they were read at. */
  private users?: { version: number; list: PolicyUser[] };

  /** drive is the compiled form of the drive adapters' grants for the current tailnet, built lazily. */
  private drive?: { policy: Policy; snapshot: Snapshot; ctx: TailnetContext } | null;

  /** driveGrants returns the drive adapters' grants (DriveService.grants); none when absent. */
  constructor(private readonly state: State, private readonly logger: Logger, private readonly driveGrants: () => readonly DriveGrant[] = () => []) {}

  /** setPolicy installs the compiled policy PolicyService owns (null: no policy); it never parses text itself. */
  setPolicy(policy: Policy | null): void {
    this.policy = policy;
    this.approvals.clear();
    this.invalidate();
  }

  /**
   * nodeChanged drops what a join or a changed node changes (every node's compiled view) but keeps the tailnet
   * context: the next compile extends it (TailnetContext.extend) with the nodes that joined and those with a new
   * owner or new tags, instead of building it again, which a join burst did for every round of first maps and
   * every batch, and a tag change once per change. A change extend does not follow (routes, addresses) makes
   * it say no, and the context is built again then.
   */
  nodeChanged(): void {
    if (!this.ctx) return this.invalidate();
    this.grown = true;
    this.dropCompiled();
  }

  /** nodeRemoved forgets what was kept about a deleted node. */
  nodeRemoved(id: number): void {
    this.approvals.delete(id);
    this.invalidate();
  }

  get hasPolicy(): boolean { return this.policy !== null; }
  /** stale: a policy or drive grants apply and the tailnet context they need was dropped since it was last built. */
  get stale(): boolean {
    return (this.policy !== null && (this.ctx === undefined || this.grown)) || (this.drive === undefined && this.hasDriveGrants);
  }
  /** hasDriveGrants: drive adapters grant something, so filters and CapMaps depend on the tailnet. */
  get hasDriveGrants(): boolean { return this.driveGrants().length > 0; }

  /** compiledPolicy is the policy object installed by setPolicy (the one PolicyService compiled). */
  get compiledPolicy(): Policy | null { return this.policy; }

  invalidate(): void {
    this.ctx = undefined;
    this.grown = false;
    this.dropCompiled();
  }

  /** dropCompiled forgets every node's compiled view and the drive grants' context (kept: the tailnet context). */
  private dropCompiled(): void {
    this.drive = undefined;
    this.compiled.clear();
    this.allIds = undefined;
  }

  /** contextBuilds counts tailnet contexts built (each costs O(tailnet + rules)), contextExtensions those extended by joins; for metrics and tests. */
  contextBuilds = 0;
  contextExtensions = 0;
  /** contextsAdopted counts contexts taken over from the policy's check (preparedContext) instead of built. */
  contextsAdopted = 0;
  /**
   * lastPrepareMs is what the last compile that found the context stale took: building or extending it, the rules
   * it builds on first use, and that one node's filter (what a round of first maps shares, see openWait). The peer
   * index, built on the first read of a node's peers just after, is not in it: counting it too makes first maps
   * wait longer, and a large join then sends many more, smaller batches and takes longer on the whole.
   */
  lastPrepareMs = 0;

  private context(): TailnetContext {
    if (this.ctx && this.grown) {
      this.grown = false;
      // The same users (the context keeps its array), every node as the context knows it, and the joiners.
      const extended = this.state.users.version === this.ctxUsers
        && this.ctx.extend(snapshotOf(this.state, this.ctx.snapshot.users));
      if (extended) this.contextExtensions++;
      else this.ctx = undefined;
    }
    if (!this.ctx) {
      this.ctxUsers = this.state.users.version;
      // The context the policy was checked with (PolicyService, just before installing it), when the tailnet is
      // still the one it was checked against.
      const snapshot = snapshotOf(this.state);
      const prepared = preparedContext(this.policy, snapshot);
      this.ctx = prepared ?? new TailnetContext(this.policy, snapshot);
      if (prepared) this.contextsAdopted++; else this.contextBuilds++;
    }
    return this.ctx;
  }

  forNode(id: number): CompiledNode {
    let c = this.compiled.get(id);
    if (c) return c;
    if (!this.policy) {
      this.allIds ??= this.state.nodes.list().map((n) => n.id);
      const node = this.state.nodes.get(id);
      c = {
        packetFilter: ALLOW_ALL, sshPolicy: null, capMap: {}, randomizeClientPort: false,
        peers: this.allIds.filter((x) => x !== id).map(String),
        approvedRoutes: node ? node.approvedRoutes : [],
      };
    } else {
      const preparing = this.ctx === undefined || this.grown;
      const started = preparing ? performance.now() : 0;
      try {
        // The context's own snapshot: building a fresh one here cost O(N) per node, O(N²) per tailnet recompute.
        const ctx = this.context();
        c = compilePolicy(this.policy, ctx.snapshot, String(id), ctx);
        if (preparing) this.lastPrepareMs = performance.now() - started;
      } catch (err) {
        // A policy that was valid can fail against a node it never saw; deny rather than open up.
        this.logger.error('policy compile failed for node; sending an empty filter', { node: id, error: (err as Error).message });
        c = { packetFilter: [], sshPolicy: null, capMap: {}, peers: [], approvedRoutes: [], randomizeClientPort: false };
      }
    }
    c = this.withDrive(id, c);
    this.compiled.set(id, c);
    return c;
  }

  /**
   * autoApproved lists the routes the policy's autoApprovers approve for `node` as
   * given (which may be a node not yet stored, or a stored one with new advertised
   * routes), among the routes it advertises. It compiles that one node against the
   * live tailnet with no admin approvals, so the answer is the policy's part alone. `policy` is the one installed
   * here unless given (RouteService passes the one in force, which this view may not have installed yet).
   */
  autoApproved(node: Node, policy: Policy | null = this.policy): string[] {
    const aa = policy?.autoApprovers;
    if (!policy || !aa || !node.availableRoutes.length) return [];
    if (!Object.keys(aa.routes ?? {}).length && !aa.exitNode?.length) return [];
    try {
      const approved = approvedRoutesOf(policy, this.policyUsers(), { ...snapshotNode(this.state, node), approvedRoutes: [] });
      const available = new Set(node.availableRoutes);
      return approved.filter((r) => available.has(r)).sort();
    } catch (err) {
      this.logger.warn('auto-approval: policy compile failed for node; approving nothing', { node: node.id, error: (err as Error).message });
      return [];
    }
  }

  /** policyUsers are the users for approvedRoutesOf; when they changed, every kept approval is dropped too. */
  private policyUsers(): PolicyUser[] {
    const version = this.state.users.version;
    if (this.users?.version !== version) {
      this.users = { version, list: snapshotUsers(this.state) };
      this.approvals.clear();
    }
    return this.users.list;
  }

  /**
   * withDrive adds the drive adapters' grants to a node's result: they are
   * compiled as a policy of their own (see drivePolicy) and merged, so a
   * node's policy output is untouched when there are none.
   */
  private withDrive(id: number, c: CompiledNode): CompiledNode {
    if (this.drive === undefined) {
      const grants = this.driveGrants();
      if (!grants.length) this.drive = null;
      else {
        const snapshot = snapshotOf(this.state);
        const policy = drivePolicy(this.policy, grants.map((g) => this.driveRule(g)));
        this.drive = { policy, snapshot, ctx: new TailnetContext(policy, snapshot) };
      }
    }
    if (!this.drive) return c;
    try {
      return mergeCompiled(c, compilePolicy(this.drive.policy, this.drive.snapshot, String(id), this.drive.ctx));
    } catch (err) {
      this.logger.error('drive grants failed to compile for node; sending the policy result alone', { node: id, error: (err as Error).message });
      return c;
    }
  }

  /** driveRule turns a grant's ends into policy aliases; users and nodes by their current addresses. */
  private driveRule(g: DriveGrant): DriveRule {
    return { src: [this.driveAlias(g.src)], dst: [this.driveAlias(g.dst)], shares: g.shares, access: g.access };
  }

  private driveAlias(end: DriveSource): Alias {
    switch (end.kind) {
      case 'group': return { kind: 'group', name: end.name };
      case 'tag': return { kind: 'tag', name: end.name };
      case 'user': {
        const nodes = this.state.nodes.list({ userId: end.id }).filter((n) => !ownedByTags(n));
        return { kind: 'prefix', text: `user:${end.id}`, set: IPSet.of(...nodes.flatMap(bareAddresses)) };
      }
      case 'node': {
        const n = this.state.nodes.get(end.id);
        return { kind: 'prefix', text: `node:${end.id}`, set: IPSet.of(...(n ? bareAddresses(n) : [])) };
      }
    }
  }

  peersOf(id: number): number[] {
    return this.forNode(id).peers.map(Number);
  }

  /** effectiveApproved: admin-approved plus auto-approved routes, limited to what the node advertises. */
  effectiveApproved(node: Node): string[] {
    // Only an advertised route can be approved: most nodes advertise none and cost nothing here.
    if (!node.availableRoutes.length) return [];
    const approved = this.policy ? this.approvedByPolicy(node) : node.approvedRoutes;
    const available = new Set(node.availableRoutes);
    return approved.filter((r) => available.has(r));
  }

  /**
   * approvedByPolicy is the node's approved routes with the policy's autoApprovers applied (approvedRoutesOf: the
   * node and the users alone), kept per node object until it, a user or the policy changes. A node the policy
   * cannot place gets nothing approved, as forNode's deny-on-failure does.
   */
  private approvedByPolicy(node: Node): string[] {
    const users = this.policyUsers();
    const hit = this.approvals.get(node.id);
    if (hit && hit.node === node) return hit.routes;
    let routes: string[];
    try {
      routes = approvedRoutesOf(this.policy, users, snapshotNode(this.state, node));
    } catch {
      routes = [];
    }
    this.approvals.set(node.id, { node, routes });
    return routes;
  }

  /**
   * updatePrimaries picks one online router per subnet route, keeping the current one while it stays online and
   * healthy (no flapping), and returns the nodes whose primary routes changed. A router the HA prober marked
   * unhealthy is passed over while a healthy online router serves the route; when none does, the current primary
   * keeps it.
   */
  updatePrimaries(): Set<number> {
    // In a cluster every instance elects on its own, from what all of them know alike: the
    // router online the longest (its oldest map session, on any instance; then the lowest id).
    // That is sticky too: the primary keeps the role while it stays online, and a router that
    // comes back has the newest session, so it does not take the role back.
    const clustered = this.state.cluster.clustered;
    const sticky = !clustered;
    const since = (n: Node) => this.state.presence.onlineSince(n.id) ?? Number.POSITIVE_INFINITY;
    const candidates = new Map<string, Node[]>();
    for (const n of this.state.nodes.list()) {
      for (const r of this.effectiveApproved(n)) {
        if (isExitRoute(r)) continue;
        (candidates.get(r) ?? candidates.set(r, []).get(r)!).push(n);
      }
    }
    const next = new Map<string, number>();
    const ha = new Set<number>();
    for (const [route, nodes] of candidates) {
      const cur = this.primaries.get(route);
      const online = nodes.filter((n) => this.state.presence.isOnline(n.id));
      if (clustered) online.sort((a, b) => since(a) - since(b) || a.id - b.id);
      if (online.length > 1) for (const n of online) ha.add(n.id);
      const healthy = this.unhealthy.size ? online.filter((n) => !this.unhealthy.has(n.id)) : online;
      let pick: number;
      if (sticky && cur !== undefined && healthy.some((n) => n.id === cur)) pick = cur;
      else if (healthy.length) pick = healthy[0]!.id;
      else if (cur !== undefined && online.some((n) => n.id === cur)) pick = cur;
      else if (online.length) pick = online[0]!.id;
      else if (sticky && cur !== undefined && nodes.some((n) => n.id === cur)) pick = cur;
      else pick = nodes[0]!.id;
      next.set(route, pick);
    }
    this.haIds = [...ha].sort((a, b) => a - b);
    const before = this.primaryOf;
    const after = new Map<number, string[]>();
    for (const [route, id] of next) (after.get(id) ?? after.set(id, []).get(id)!).push(route);
    for (const list of after.values()) list.sort();
    const changed = new Set<number>();
    for (const id of new Set([...before.keys(), ...after.keys()])) {
      if ((before.get(id) ?? []).join(',') !== (after.get(id) ?? []).join(',')) changed.add(id);
    }
    this.primaries.clear();
    for (const [r, id] of next) this.primaries.set(r, id);
    this.primaryOf = after;
    return changed;
  }

  /** haRouters: the online routers of the subnet routes two or more online routers serve, by id (the last election's view). */
  haRouters(): readonly number[] { return this.haIds; }

  /**
   * setHealth records the HA prober's verdicts (node id → answered) and says whether any router's health changed,
   * in which case the caller runs the election again. Only online routers can be unhealthy: a verdict against one
   * that went offline meanwhile is dropped.
   */
  setHealth(verdicts: ReadonlyMap<number, boolean>): boolean {
    let changed = false;
    for (const [id, healthy] of verdicts) {
      if (healthy || !this.state.presence.isOnline(id)) changed = this.unhealthy.delete(id) || changed;
      else if (!this.unhealthy.has(id)) { this.unhealthy.add(id); changed = true; }
    }
    return changed;
  }

  /** isHealthy: the node has not been marked unhealthy by the HA prober (unknown nodes are healthy). */
  isHealthy(id: number): boolean { return !this.unhealthy.has(id); }

  primaryRoutes(id: number): string[] { return this.primaryOf.get(id) ?? []; }

  /** allowedIPs: the node's addresses, the subnet routes it is primary for, and approved exit routes. */
  allowedIPs(node: Node): string[] {
    const out = addresses(node);
    out.push(...this.primaryRoutes(node.id));
    const eff = this.effectiveApproved(node);
    if (eff.includes('0.0.0.0/0') && eff.includes('::/0')) out.push('0.0.0.0/0', '::/0');
    return out;
  }
}

function bareAddresses(node: Node): string[] {
  return [node.ipv4, node.ipv6].filter((x): x is string => !!x);
}

export function addresses(node: Node): string[] {
  const out: string[] = [];
  if (node.ipv4) out.push(`${node.ipv4}/32`);
  if (node.ipv6) out.push(`${node.ipv6}/128`);
  return out;
}
