import type { NewNode, Node, NodePatch, RegisterMethod } from '../domain.js';
import { badField, HeadwayError, notFound } from '../errors.js';
import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';
import { StorageConflictError, StorageRetryableError, type StoragePort, type StorageRepositories } from '../ports/storage.js';
import type { ChangeBus, PeerPatch } from './bus.js';
import { formatIP, parseIP } from '@headway/policy/ip';
import { NodeAddresses } from './ipam.js';
import { approvedRouteSet, checkDnsLabel, checkTag, GivenNames, sanitizeHostname, uniqueName } from './names.js';
import type { PendingLogins } from './pending.js';
import type { Presence } from './presence.js';
import { quarantine } from './quarantine.js';
import { autoApprovedPatch, autoApprovedRow, type AutoApprovals } from './routes.js';
import { atomically, conflictError, conflicts, WRITE_ATTEMPTS } from './writes.js';

/** DELETED_IDS_KEPT bounds NodeStore.deletedIds: a write in flight across a deletion resolves within seconds, not thousands of deletions later. */
const DELETED_IDS_KEPT = 65_536;

/** UNTAG_REFUSED is why an administrator cannot take every tag off a node: only a user's login can own it again. */
export const UNTAG_REFUSED = 'cannot remove all tags from a node: a tagged node has no user; log the device in again as a user ' +
  '(tailscale up --force-reauth --advertise-tags=, then headway auth register --user NAME) to make it that user\'s';

export interface NewNodeInput {
  machineKey: string;
  nodeKey: string;
  discoKey?: string;
  hostname: string;
  userId: number | null;
  tags?: string[];
  hostinfo?: Record<string, unknown> | null;
  availableRoutes?: string[];
  registerMethod: RegisterMethod;
  expiry?: Date | null;
  ephemeral?: boolean;
  authKeyId?: number | null;
}

/**
 * RegistrationWrites are the rows a registration consumes in the transaction that
 * writes its node, so a failed registration leaves them as they were.
 */
export interface RegistrationWrites {
  /** spendKeyId is a single-use pre-auth key, spent with the guarded update. */
  spendKeyId?: number;
  /** pendingKey is the pending registration being approved; deleting it is the guard. */
  pendingKey?: string;
}

/**
 * NodeStore keeps the nodes in memory, indexed by id, node key, machine key and
 * given name, with the addresses they hold, and answers reads from there. Every
 * change is stored first (a write of several rows in one transaction), then
 * applied to memory, then published once on the bus.
 */
export class NodeStore {
  private readonly byId = new Map<number, Node>();
  /** Key indexes: every register and map request looks a node up by key. */
  private readonly byNodeKeyIndex = new Map<string, Node>();
  private readonly byMachineKeyIndex = new Map<string, Node>();
  private readonly names = new GivenNames();
  private readonly addresses: NodeAddresses;
  /**
   * deletedIds are the nodes deleted since start-up (ids are never reused), newest last, at most
   * DELETED_IDS_KEPT. A write or a cluster reload that was in flight when its node was deleted
   * resolves after the deletion; without this it would put the deleted node back into memory, and
   * every full map sent afterwards would show it again.
   */
  private readonly deletedIds = new Set<number>();
  /**
   * autoApprovals returns the approved routes a node about to be written should
   * carry because the policy's autoApprovers approve what it advertises (undefined:
   * nothing to add). RouteService installs it; every write that changes what a
   * node advertises, its approvals or its owner (registration, Hostinfo, approval,
   * tags) stores the auto-approved routes in that same write (autoApprovedPatch).
   */
  autoApprovals?: AutoApprovals;

  /**
   * pending learns of the waiting logins a registration consumed; presence forgets
   * the sessions of a node that goes (a function, since presence is built after the nodes it reads).
   */
  constructor(
    private readonly storage: StoragePort,
    config: HeadwayConfig,
    private readonly logger: Logger,
    private readonly bus: ChangeBus,
    private readonly pending: PendingLogins,
    private readonly presence: () => Presence,
  ) {
    this.addresses = new NodeAddresses(config.prefixes);
  }

  /** load reads every stored node into memory (start-up), repairing rows that cannot be served as stored. */
  async load(): Promise<void> {
    const loaded: Node[] = [];
    for (const stored of await this.storage.nodes.list()) loaded.push(await quarantine(this.storage, this.logger, stored));
    // Rows written before the ownership rule (ownedPatch) may hold both tags and a user: the user goes, in one transaction.
    const both = loaded.filter((n) => n.tags.length > 0 && n.userId !== null);
    const fixed = new Map<number, Node>();
    if (both.length) {
      const rows = await atomically(this.storage, this.logger, async (tx) => {
        const out: Node[] = [];
        for (const n of both) { const u = await tx.nodes.update(n.id, { userId: null }); if (u) out.push(u); }
        return out;
      });
      for (const n of rows) fixed.set(n.id, n);
      this.logger.info('tagged nodes no longer list a user: a node is owned by its tags or by a user', { nodes: both.map((n) => n.id).join(',') });
    }
    for (const n of loaded) this.rememberStored(fixed.get(n.id) ?? n);
  }

  list(filter: { userId?: number } = {}): Node[] {
    return [...this.byId.values()]
      .filter((n) => filter.userId === undefined || n.userId === filter.userId)
      .sort((a, b) => a.id - b.id);
  }

  get(id: number): Node | undefined { return this.byId.get(id); }
  require(id: number): Node {
    const n = this.byId.get(id);
    if (!n) throw notFound('node', id);
    return n;
  }
  byMachineKey(key: string): Node | undefined { return this.byMachineKeyIndex.get(key); }
  byNodeKey(key: string): Node | undefined { return this.byNodeKeyIndex.get(key); }

  /**
   * create registers a device in one transaction: `writes` (key spent, pending
   * registration deleted), the node with a unique given name (`web`, `web-1`, ...)
   * and fresh addresses, or nothing at all. Names and addresses are proposed from
   * memory and reserved there while the transaction runs; the database's unique
   * indexes judge, and a name or address another server took is skipped on the
   * next attempt. Memory is updated and the node published only after commit; a
   * failed attempt gives its reservations back.
   */
  async create(input: NewNodeInput, writes: RegistrationWrites = {}): Promise<Node> {
    const base = sanitizeHostname(input.hostname);
    // Names the database holds that memory does not know (written by another server).
    const takenElsewhere = new Set<string>();
    for (let attempt = 1; ; attempt++) {
      const givenName = uniqueName(base, (n) => takenElsewhere.has(n) || this.names.taken(n));
      const { ipv4, ipv6 } = this.addresses.reserve();
      this.names.claim(givenName);
      let node: Node;
      try {
        node = await this.storage.transaction(async (tx) => {
          await this.consume(tx, writes);
          return tx.nodes.create(autoApprovedRow(this.autoApprovals, newNodeRow(input, givenName, ipv4, ipv6)));
        });
      } catch (err) {
        this.names.unclaim(givenName);
        const field = err instanceof StorageConflictError ? err.field : undefined;
        // An address the database already holds stays marked used here; the others go back.
        this.addresses.giveBack(field !== 'ipv4' ? ipv4 : null, field !== 'ipv6' ? ipv6 : null);
        if (field === 'given_name') takenElsewhere.add(givenName);
        const again = err instanceof StorageRetryableError || field === 'given_name' || field === 'ipv4' || field === 'ipv6';
        if (again && attempt < WRITE_ATTEMPTS) {
          this.logger.debug('registration retried', { attempt, reason: field ?? 'transaction aborted', name: givenName });
          continue;
        }
        throw conflictError(err);
      }
      this.names.unclaim(givenName);
      this.consumed(writes);
      this.remember(node);
      this.bus.publish({ type: 'node-added', node });
      return node;
    }
  }

  /**
   * reRegister gives a known machine a new login (node key, owner, expiry, ...)
   * in one transaction with `writes`; its given name and addresses stay.
   */
  async reRegister(id: number, patch: NodePatch, writes: RegistrationWrites = {}): Promise<Node> {
    const full = this.routePatch(this.require(id), patch);
    const updated = await conflicts(() => atomically(this.storage, this.logger, async (tx) => {
      await this.consume(tx, writes);
      const n = await tx.nodes.update(id, full);
      if (!n) throw notFound('node', id);
      return n;
    }));
    this.consumed(writes);
    if (this.deletedIds.has(id)) throw notFound('node', id);
    this.remember(updated);
    this.bus.publish({ type: 'node-changed', node: updated });
    return updated;
  }

  /** consume performs a registration's guarded writes; a lost guard aborts the transaction. */
  private async consume(tx: StorageRepositories, writes: RegistrationWrites): Promise<void> {
    if (writes.spendKeyId !== undefined && !(await tx.preAuthKeys.markUsed(writes.spendKeyId))) {
      throw new HeadwayError('unauthorized', 'authkey already used');
    }
    if (writes.pendingKey !== undefined && !(await tx.pendingRegistrations.delete(writes.pendingKey))) {
      throw new HeadwayError('not_found', `registration key ${writes.pendingKey} not found or already used; run tailscale up again for a new one`, 'key');
    }
  }

  /** consumed brings memory in step after a registration's transaction committed its writes. */
  private consumed(writes: RegistrationWrites): void {
    if (writes.pendingKey !== undefined) this.pending.consumed(writes.pendingKey);
  }

  /** routePatch is a patch with the routes the autoApprovers approve for the node as patched (autoApprovedPatch). */
  private routePatch(node: Node, patch: NodePatch): NodePatch {
    return autoApprovedPatch(this.autoApprovals, node, ownedPatch(node, patch));
  }

  /** update stores a patch and publishes it as a full peer change ('silent': publishes nothing). */
  async update(id: number, patch: NodePatch, publish: 'full' | 'silent' = 'full'): Promise<Node> {
    const full = this.routePatch(this.require(id), patch);
    const updated = await conflicts(() => this.storage.nodes.update(id, full));
    if (!updated || this.deletedIds.has(id)) throw notFound('node', id);
    this.remember(updated);
    if (publish === 'full') this.bus.publish({ type: 'node-changed', node: updated });
    return updated;
  }

  /** publishPatch tells peers of a change already stored (update, 'silent') in its small form. */
  publishPatch(id: number, patch: PeerPatch): void {
    this.bus.publish({ type: 'node-patch', nodeId: id, patch });
  }

  async rename(id: number, newName: string): Promise<Node> {
    this.require(id);
    const err = checkDnsLabel(newName);
    if (err) throw badField('newName', err);
    if (this.names.taken(newName, this.byId.get(id)?.givenName)) throw new HeadwayError('name_taken', `a node named ${newName} already exists`, 'newName');
    return this.update(id, { givenName: newName });
  }

  async delete(id: number): Promise<Node> {
    const node = this.require(id);
    await this.storage.nodes.delete(id);
    this.forget(node);
    return node;
  }

  /** expire sets a node's key expiry: now (log it out), a later time, or null (never expires). */
  async expire(id: number, at: Date | null = new Date()): Promise<Node> {
    this.require(id);
    const updated = await this.update(id, { expiry: at }, 'silent');
    this.publishPatch(id, { keyExpiry: at });
    return updated;
  }

  /**
   * setIPv4 gives a node a chosen IPv4 address: inside prefixes.v4, not the network,
   * broadcast or a reserved address, not another node's (a 400 naming `ipv4` says
   * which); its own address is a no-op. The database's unique index judges against
   * other servers (409). The old address is free once the write commits; peers and the
   * node itself hear of the change as of any change of a node's addresses.
   */
  async setIPv4(id: number, ip: string): Promise<Node> {
    const node = this.require(id);
    const parsed = parseIP(ip.trim());
    if (parsed && node.ipv4 && formatIP(parsed) === node.ipv4) return node;
    const claim = this.addresses.claimV4(ip.trim());
    if ('refused' in claim) throw badField('ipv4', claim.refused);
    let updated: Node;
    try {
      updated = await this.update(id, { ipv4: claim.ip });
    } catch (err) {
      // An address the database gave another node (a 409 on ipv4) stays marked used here.
      if (!(err instanceof HeadwayError && err.field === 'ipv4')) this.addresses.release({ ipv4: claim.ip, ipv6: null });
      throw err;
    }
    this.addresses.releaseChanged(node, updated);
    return updated;
  }

  async setTags(id: number, tags: string[]): Promise<Node> {
    const node = this.require(id);
    const clean = [...new Set(tags.map((t) => t.trim()).filter(Boolean))];
    for (const t of clean) {
      const err = checkTag(t);
      if (err) throw badField('tags', err);
    }
    // A tagged node keeps at least one tag: it has no user to fall back to (ownedPatch).
    if (!clean.length) throw badField('tags', UNTAG_REFUSED);
    return this.update(node.id, { tags: clean.sort() });
  }

  /** approveRoutes replaces the approved set; either exit route approves both. RouteService adds auto-approval and the primary election. */
  async approveRoutes(id: number, routes: string[]): Promise<Node> {
    this.require(id);
    return this.update(id, { approvedRoutes: approvedRouteSet(routes) });
  }

  /**
   * commit stores the patches of several nodes in one transaction, then
   * updates memory, then runs `applied` (in-memory work that must see the
   * committed rows before anyone hears of them, such as the primary-route
   * election), then publishes each node once as a full change. A failure stores,
   * applies and publishes nothing.
   */
  async commit(patches: Array<{ id: number; patch: NodePatch }>, applied?: (nodes: Node[]) => void): Promise<Node[]> {
    const full = patches.map((p) => ({ id: p.id, patch: this.routePatch(this.require(p.id), p.patch) }));
    if (!full.length) return [];
    const live = await this.updateAll(full);
    applied?.(live);
    for (const n of live) this.bus.publish({ type: 'node-changed', node: n });
    return live;
  }

  /**
   * backfillIPs gives every node an address of each enabled family it lacks, all
   * in one transaction: either every node gets its addresses or none does.
   */
  async backfillIPs(): Promise<Node[]> {
    const plan: Array<{ id: number; patch: { ipv4: string | null; ipv6: string | null } }> = [];
    /** fresh are the addresses reserved for the plan, given back if it does not commit. */
    const fresh: Array<{ ipv4: string | null; ipv6: string | null }> = [];
    let live: Node[];
    try {
      for (const node of this.list()) {
        const patch = this.addresses.fill(node);
        if (!patch) continue;
        fresh.push({ ipv4: node.ipv4 ? null : patch.ipv4, ipv6: node.ipv6 ? null : patch.ipv6 });
        plan.push({ id: node.id, patch });
      }
      if (!plan.length) return [];
      live = await this.updateAll(plan);
    } catch (err) {
      for (const f of fresh) this.addresses.giveBack(f.ipv4, f.ipv6);
      throw err;
    }
    for (const n of live) this.bus.publish({ type: 'node-changed', node: n });
    return live;
  }

  /** updateAll stores several nodes' patches in one transaction and puts the committed rows of the nodes still there into memory. */
  private async updateAll(patches: Array<{ id: number; patch: NodePatch }>): Promise<Node[]> {
    const updated = await conflicts(() => atomically(this.storage, this.logger, async (tx) => {
      const out: Node[] = [];
      for (const p of patches) {
        const n = await tx.nodes.update(p.id, p.patch);
        if (!n) throw notFound('node', p.id);
        out.push(n);
      }
      return out;
    }));
    // A node deleted while the transaction ran stays deleted.
    const live = updated.filter((n) => !this.deletedIds.has(n.id));
    for (const n of live) this.remember(n);
    return live;
  }

  // Memory alone, for the other parts of State: after their write committed, or for a row read from storage.

  /** wasDeleted says whether this instance deleted the node since start-up (a row read before that is stale). */
  wasDeleted(id: number): boolean { return this.deletedIds.has(id); }

  /** remember puts a node into memory and keeps the key and name indexes in step. */
  remember(n: Node): void {
    const old = this.byId.get(n.id);
    if (old) { this.dropKeys(old); this.names.drop(old.givenName); }
    this.byId.set(n.id, n);
    this.names.add(n.givenName);
    this.byNodeKeyIndex.set(n.nodeKey, n);
    this.byMachineKeyIndex.set(n.machineKey, n);
  }

  /** rememberStored puts a row read from storage into memory: the addresses it holds are marked used, those it gave up freed. */
  rememberStored(n: Node): void {
    const known = this.byId.get(n.id);
    if (known) this.addresses.releaseChanged(known, n);
    this.addresses.markUsed(n);
    this.remember(n);
  }

  /** forget drops a node deleted from storage from memory, frees its addresses and publishes the removal. */
  forget(node: Node): void {
    const id = node.id;
    this.deletedIds.add(id);
    if (this.deletedIds.size > DELETED_IDS_KEPT) this.deletedIds.delete(this.deletedIds.values().next().value!);
    this.dropKeys(node);
    const held = this.byId.get(id);
    if (held) this.names.drop(held.givenName);
    this.byId.delete(id);
    this.presence().forgetLocal(id);
    this.addresses.release(node);
    this.bus.publish({ type: 'node-removed', nodeId: id, node });
  }

  private dropKeys(n: Node): void {
    if (this.byNodeKeyIndex.get(n.nodeKey)?.id === n.id) this.byNodeKeyIndex.delete(n.nodeKey);
    if (this.byMachineKeyIndex.get(n.machineKey)?.id === n.id) this.byMachineKeyIndex.delete(n.machineKey);
  }
}

function newNodeRow(input: NewNodeInput, givenName: string, ipv4: string | null, ipv6: string | null): NewNode {
  return {
    machineKey: input.machineKey,
    nodeKey: input.nodeKey,
    discoKey: input.discoKey ?? '',
    hostname: input.hostname,
    givenName,
    userId: input.tags?.length ? null : input.userId,
    tags: input.tags ?? [],
    ipv4, ipv6,
    endpoints: [],
    hostinfo: input.hostinfo ?? null,
    availableRoutes: input.availableRoutes ?? [],
    approvedRoutes: [],
    registerMethod: input.registerMethod,
    expiry: input.expiry ?? null,
    lastSeen: null,
    ephemeral: input.ephemeral ?? false,
    authKeyId: input.authKeyId ?? null,
  };
}

/**
 * ownedPatch is the one ownership rule every node write goes through: a node is
 * owned by its user or by its tags, never both, so a write that leaves the node
 * with tags also clears its user (as headscale 0.29 does). Which user an untagged
 * node returns to is the login's decision (registration), never remembered here.
 */
export function ownedPatch(node: Pick<Node, 'tags'>, patch: NodePatch): NodePatch {
  const tags = patch.tags ?? node.tags;
  return tags.length > 0 ? { ...patch, userId: null } : patch;
}
