import type { Node, PeerChange, PeerPatch, User } from '@headway/core';

/** PendingPatch is a peer's merged patch and the number of its latest change. */
export interface PendingPatch { readonly change: PeerChange; readonly seq: number }

/**
 * Batch is what a flush sends: everything that changed since the last one, merged. Each node's entry carries the
 * number of its latest change, so that a session whose full map was rendered after it (MapSession.renderedAt)
 * skips what that map already held.
 */
export interface Batch {
  /** full are the nodes to send whole (PeersChanged), in id order, and fullSeq each one's latest change. */
  readonly full: readonly Node[];
  readonly fullSeq: ReadonlyMap<number, number>;
  /** self: the nodes whose own entry (the map's Node) changed. */
  readonly self: ReadonlyMap<number, number>;
  readonly removed: readonly number[];
  readonly patches: readonly PendingPatch[];
  /** structural: who sees whom, or what a packet filter or SSH policy holds, may have changed. */
  readonly structural: boolean;
  /** users whose profile (name, display name) may have changed. */
  readonly users: readonly User[];
}

/** Lookups are what taking a batch asks of the tailnet as it stands. */
export interface Lookups {
  node(id: number): Node | undefined;
  user(id: number): User | undefined;
  /** peerTextChanged: the node's entry as its peers see it is no longer `before`. */
  peerTextChanged(node: Node, before: string): boolean;
}

/**
 * PendingBatch collects the changes published since the last flush, merged per node: a node sent whole absorbs its
 * own patches, a removed node drops everything else pending about it.
 */
export class PendingBatch {
  /** seq numbers the changes (see Batch). */
  seq = 0;
  /** reelect: primary routers may have moved (a node came or went, went on or offline, routes or policy changed). */
  reelect = false;
  private full = new Map<number, number>();
  private self = new Map<number, number>();
  private readonly removed = new Set<number>();
  private readonly patches = new Map<number, PendingPatch>();
  private readonly users = new Set<number>();
  private structural = false;
  /**
   * policyBefore is every peer's text from before the first pending policy change (what clients hold), and
   * policySeq the latest such change: at the flush only the peers whose text the change altered are sent again.
   */
  private policyBefore?: Map<number, string>;
  private policySeq = 0;
  /** openedUnderPolicy: a session's full map was rendered while a policy change was pending. */
  private openedUnderPolicy = false;

  /** next numbers a new change. */
  next(): number { return ++this.seq; }

  /** nodeAdded: a node to send whole; visibility: it may change who sees whom. */
  nodeAdded(id: number, seq: number, visibility: boolean): void {
    this.full.set(id, seq);
    this.reelect = true;
    if (visibility) this.structural = true;
  }

  nodeRemoved(id: number, visibility: boolean): void {
    this.full.delete(id);
    this.self.delete(id);
    this.patches.delete(id);
    this.removed.add(id);
    this.reelect = true;
    if (visibility) this.structural = true;
  }

  /** nodeChanged: a node to send whole, to its peers and to itself; reshaped: its tags, addresses, routes or owner changed. */
  nodeChanged(id: number, seq: number, reshaped: boolean, visibility: boolean): void {
    this.full.set(id, seq);
    this.self.set(id, seq);
    if (!reshaped) return;
    this.reelect = true;
    if (visibility) this.structural = true;
  }

  /** roleMoved: a node became or stopped being a primary router: sent whole, to its peers and to itself. */
  roleMoved(id: number, seq: number): void {
    this.full.set(id, seq);
    this.self.set(id, seq);
  }

  /** userChanged: a user's profile, and what a policy naming them grants, may have changed. */
  userChanged(id: number | undefined): void {
    if (id !== undefined) this.users.add(id);
    this.structural = true;
    this.reelect = true;
  }

  /** patch merges a peer's patch (online state, endpoints, keys) into what is pending for it. */
  patch(nodeId: number, patch: PeerPatch, seq: number): void {
    const pc: PeerChange = this.patches.get(nodeId)?.change ?? { NodeID: nodeId };
    if (patch.online !== undefined) { pc.Online = patch.online; this.reelect = true; }
    if (patch.lastSeen) pc.LastSeen = patch.lastSeen.toISOString();
    if (patch.endpoints) pc.Endpoints = patch.endpoints;
    if (patch.derpRegion !== undefined) pc.DERPRegion = patch.derpRegion;
    if (patch.keyExpiry !== undefined) pc.KeyExpiry = patch.keyExpiry ? patch.keyExpiry.toISOString() : '0001-01-01T00:00:00Z';
    if (patch.discoKey) pc.DiscoKey = patch.discoKey;
    if (patch.nodeKey) pc.Key = patch.nodeKey;
    this.patches.set(nodeId, { change: pc, seq });
    // The node's own map shows its key and expiry.
    if (patch.keyExpiry !== undefined || patch.nodeKey) this.self.set(nodeId, seq);
  }

  /**
   * sendFirstIfPolicyPending: a session opened since the pending policy change holds peers as that policy shows
   * them, which a comparison with the texts from before it cannot see, so the batch must go out before another
   * policy change comes in.
   */
  get mustSendBeforePolicy(): boolean { return this.policyBefore !== undefined && this.openedUnderPolicy; }

  /** policyChanged: a policy (or drive) change, numbered seq; textsBefore gives every peer's text under the old one. */
  policyChanged(seq: number, textsBefore: () => Map<number, string>): void {
    if (!this.policyBefore) {
      this.openedUnderPolicy = false;
      this.policyBefore = textsBefore();
    }
    this.policySeq = seq;
    this.structural = true;
    this.reelect = true;
  }

  /** sessionOpened: a full map was rendered now (with the pending policy, if any). */
  sessionOpened(): void {
    if (this.policyBefore) this.openedUnderPolicy = true;
  }

  /** take empties the batch into what a flush sends; undefined when nothing is to be sent. */
  take(look: Lookups): Batch | undefined {
    if (this.policyBefore) {
      for (const [id, before] of this.policyBefore) {
        const n = look.node(id);
        if (n && look.peerTextChanged(n, before)) {
          this.full.set(id, Math.max(this.full.get(id) ?? 0, this.policySeq));
          this.self.set(id, Math.max(this.self.get(id) ?? 0, this.policySeq));
        }
      }
      this.policyBefore = undefined;
    }
    const fullSeq = this.full, self = this.self;
    this.full = new Map();
    this.self = new Map();
    const full = [...fullSeq.keys()].map((id) => look.node(id)).filter((n): n is Node => Boolean(n)).sort((a, b) => a.id - b.id);
    const removed = [...this.removed];
    const patches = [...this.patches.values()].filter((p) => look.node(p.change.NodeID));
    const users = [...this.users].map((id) => look.user(id)).filter((u): u is User => Boolean(u));
    const structural = this.structural;
    this.removed.clear(); this.patches.clear(); this.users.clear();
    this.structural = false;
    if (!full.length && !removed.length && !patches.length && !structural && !self.size && !users.length) return undefined;
    return { full, fullSeq, self, removed, patches, structural, users };
  }
}
