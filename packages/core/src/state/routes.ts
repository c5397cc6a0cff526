import type { Policy } from '@headway/policy';
import type { NewNode, Node, NodePatch } from '../domain.js';
import type { Logger } from '../log.js';
import type { NetworkView } from '../policy/netview.js';
import { approvedRouteSet } from './names.js';
import type { State } from './state.js';

/** AutoApprovals returns the approved routes a node about to be written should carry (undefined: nothing to add). */
export type AutoApprovals = (draft: Node) => string[] | undefined;

/**
 * autoApprovedPatch adds to a node's patch the routes the autoApprovers approve for
 * the node as patched, when the patch changes what it advertises, its approvals or
 * its owner; other patches (endpoints, last seen, ...) pass unchanged.
 */
export function autoApprovedPatch(approve: AutoApprovals | undefined, node: Node, patch: NodePatch): NodePatch {
  if (!approve) return patch;
  const differs = (k: 'availableRoutes' | 'approvedRoutes' | 'tags') => patch[k] !== undefined && patch[k]!.join(',') !== node[k].join(',');
  const touches = differs('availableRoutes') || differs('approvedRoutes') || differs('tags') || (patch.userId !== undefined && patch.userId !== node.userId);
  if (!touches) return patch;
  const approvedRoutes = approve({ ...node, ...patch });
  return approvedRoutes ? { ...patch, approvedRoutes } : patch;
}

/** autoApprovedRow adds the routes the autoApprovers approve to a new node's row. */
export function autoApprovedRow(approve: AutoApprovals | undefined, row: NewNode): NewNode {
  if (!approve || !row.availableRoutes.length) return row;
  const now = new Date();
  const approved = approve({ ...row, id: -1, createdAt: now, updatedAt: now });
  return approved ? { ...row, approvedRoutes: approved } : row;
}

/**
 * PrimaryElection runs the primary-route election (SessionHub implements it: it
 * also queues the nodes whose role moved for their next map message).
 */
export interface PrimaryElection {
  /** electPrimaries elects now, over memory as it stands. */
  electPrimaries(): void;
  /** syncPrimaries elects only when something since the last election may have moved a primary. */
  syncPrimaries(): void;
}

/**
 * RouteService owns route approval: admin approvals, the policy's autoApprovers,
 * and the primary-route election that follows either. Every approval is one
 * transaction (all the nodes it touches, or none); memory is updated and the
 * election run only after it commits, and the change is published after both, so
 * a device never hears of an approval whose primary router is not yet elected.
 */
export class RouteService {
  private unsubscribe?: () => void;

  constructor(
    private readonly state: State,
    private readonly view: NetworkView,
    private readonly election: PrimaryElection,
    private readonly logger: Logger,
    /**
     * policy is the compiled policy in force (PolicyService.compiled). Approvals are judged against it and the node
     * alone, not against the network view: the SessionHub holds changes back while a flush or a round of first maps
     * is sent in slices, so the view may not know yet of the node (or policy) a change names (a router that
     * registered meanwhile was compiled as an unknown node, with nothing approved).
     */
    private readonly policy: () => Policy | null,
  ) {}

  /**
   * start keeps stored approvals in step with the autoApprovers whenever what a
   * node advertises or who owns it may have changed (registration, re-login, tag
   * changes) and for every node when the policy changes. It must subscribe after
   * the SessionHub, which installs a new policy in the view first. It also lets
   * State put the auto-approved routes of a registration in the registration's
   * own transaction (NodeStore.autoApprovals), so the follow-up finds nothing to add.
   */
  start(): void {
    this.state.nodes.autoApprovals = (draft) => this.withAutoApprovals(draft);
    this.unsubscribe = this.state.bus.subscribe((c) => {
      if (c.type === 'policy-changed') void this.autoApprove(this.state.nodes.list());
      if (c.type === 'node-added' || c.type === 'node-changed') void this.autoApprove([c.node]);
    });
  }

  stop(): void {
    this.unsubscribe?.();
    this.state.nodes.autoApprovals = undefined;
  }

  /**
   * approve replaces a node's admin-approved routes (either exit route approves
   * both); the routes the autoApprovers approve for what it advertises stay
   * approved, in the same write (autoApprovedPatch).
   */
  async approve(id: number, routes: string[]): Promise<Node> {
    this.state.nodes.require(id);
    const [updated] = await this.commit([{ id, patch: { approvedRoutes: approvedRouteSet(routes) } }]);
    return updated!;
  }

  /**
   * withAutoApprovals returns the approved routes a node should store once it
   * advertises what `draft` says (its stored approvals plus what the
   * autoApprovers approve), or undefined when that adds nothing.
   */
  withAutoApprovals(draft: Node): string[] | undefined {
    const missing = this.view.autoApproved(draft, this.policy()).filter((r) => !draft.approvedRoutes.includes(r));
    return missing.length ? approvedRouteSet([...draft.approvedRoutes, ...missing]) : undefined;
  }

  /**
   * commit writes node patches that change routes in one transaction, runs the
   * primary election over the committed state, then publishes (NodeStore.commit).
   */
  commit(patches: Array<{ id: number; patch: NodePatch }>): Promise<Node[]> {
    return this.state.nodes.commit(patches, () => this.election.electPrimaries());
  }

  /**
   * autoApprove stores, in one transaction, the routes the policy's autoApprovers
   * approve for these nodes' advertised routes and that are not stored yet.
   */
  async autoApprove(nodes: Node[]): Promise<void> {
    const policy = this.policy();
    if (!policy) return;
    const patches: Array<{ id: number; patch: { approvedRoutes: string[] } }> = [];
    for (const n of nodes) {
      const node = this.state.nodes.get(n.id);
      if (!node || !node.availableRoutes.length) continue;
      const missing = this.view.autoApproved(node, policy).filter((r) => !node.approvedRoutes.includes(r));
      if (missing.length) patches.push({ id: node.id, patch: { approvedRoutes: approvedRouteSet([...node.approvedRoutes, ...missing]) } });
    }
    if (!patches.length) return;
    await this.commit(patches).catch((err: Error) =>
      this.logger.warn('auto-approval failed', { nodes: patches.map((p) => p.id).join(','), error: err.message }));
  }

  /** primaryRoutes answers API reads: the routes a node is primary for, the election brought up to date first. */
  primaryRoutes(nodeId: number): string[] {
    this.election.syncPrimaries();
    return this.view.primaryRoutes(nodeId);
  }
}
