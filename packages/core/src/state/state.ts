import { createHash } from 'node:crypto';
import type { ApiKey, NewNode, Node, NodePatch, PendingRegistration, PreAuthKey, RegisterMethod, User } from '../domain.js';
import { badField, HeadwayError, notFound, shown } from '../errors.js';
import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';
import { StorageConflictError, StorageRetryableError, type StoragePort, type StorageRepositories } from '../ports/storage.js';
import { issueSecret, parseSecret, randomToken, verifySecret } from '../secrets.js';
import { isEndpointList, isHostinfo } from '../wire/validate.js';
import { ChangeBus, type Change, type PeerPatch } from './bus.js';
import { AddressAllocator } from './ipam.js';
import { PER_MACHINE, PendingQuota, pendingQuotaError } from './pending.js';
import { approvedRouteSet, checkDnsLabel, checkTag, checkUserName, sanitizeHostname, uniqueName } from './names.js';
import { sameUserName, warnCaseDuplicates } from './user-names.js';

const LAST_SEEN_INTERVAL_MS = 60_000;
/**
 * REGISTER_ATTEMPTS bounds how often one registration runs its transaction again
 * after a deadlock or after another server took the name or address it proposed.
 */
const REGISTER_ATTEMPTS = 25;
/** DELETED_IDS_KEPT bounds State.deletedIds: a write in flight across a deletion resolves within seconds, not thousands of deletions later. */
const DELETED_IDS_KEPT = 65_536;

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
 * State is the single writer: it keeps users and nodes in memory, answers reads
 * without touching the database, and applies every change by storing it first,
 * then updating memory, then publishing it once on the ChangeBus.
 */
export class State {
  readonly bus = new ChangeBus();
  private readonly users = new VersionedMap<number, User>();
  private readonly nodes = new Map<number, Node>();
  /** nodesByName counts the nodes in memory per given name (names are unique in storage; a count stays safe if not). */
  private readonly nodesByName = new Map<string, number>();
  private readonly sessions = new Map<number, number>();
  /**
   * deletedIds are the nodes deleted since start-up (ids are never reused), newest last, at most
   * DELETED_IDS_KEPT. A write or a cluster reload that was in flight when its node was deleted
   * resolves after the deletion; without this it would put the deleted node back into memory, and
   * every full map sent afterwards would show it again.
   */
  private readonly deletedIds = new Set<number>();
  /** remoteOnline: nodes whose map session another cluster instance holds (node id → instance ids). */
  private readonly remoteOnline = new Map<number, Set<string>>();
  /**
   * sessionSince: when each instance's map session of a node opened (node id → instance id, or
   * '' for this one, → epoch ms). Every instance holds the same values (they travel with the
   * session records), so a cluster-wide choice by it (the HA route primary) agrees everywhere.
   */
  private readonly sessionSince = new Map<number, Map<string, number>>();
  /**
   * applyingRemote is true while a change another cluster instance made is being
   * published here (the bus is synchronous), so the cluster does not announce it again.
   */
  applyingRemote = false;
  /**
   * onLocalSession is told when this instance's first map session of a node opens or
   * its last one closes (the cluster records and announces it); unset alone.
   */
  onLocalSession?: (id: number, online: boolean, lastSeen?: Date, since?: Date) => void;
  /** clustered: other instances write the same database, so a key memory does not know is looked up there too. */
  clustered = false;
  /** serving is false while a cluster instance has lost its database: it accepts no map streams. */
  serving = true;
  /** Key indexes: every register and map request looks a node up by key. */
  private readonly byNodeKey = new Map<string, Node>();
  private readonly byMachineKey = new Map<string, Node>();
  private v4?: AddressAllocator;
  private v6?: AddressAllocator;
  /**
   * claimedNames are given names proposed by registrations still in their
   * transaction, so concurrent joins of one hostname propose different names.
   */
  private readonly claimedNames = new Set<string>();
  /**
   * autoApprovals returns the approved routes a node about to be written should
   * carry because the policy's autoApprovers approve what it advertises (undefined:
   * nothing to add). RouteService installs it; every write that changes what a
   * node advertises, its approvals or its owner (registration, Hostinfo, approval,
   * tags) stores the auto-approved routes in that same write (see routePatch).
   */
  autoApprovals?: (draft: Node) => string[] | undefined;

  constructor(readonly storage: StoragePort, readonly config: HeadwayConfig, readonly logger: Logger) {}

  async init(): Promise<void> {
    const { v4, v6, allocation } = this.config.prefixes;
    if (v4) this.v4 = new AddressAllocator(v4, allocation);
    if (v6) this.v6 = new AddressAllocator(v6, allocation);
    for (const u of await this.storage.users.list()) this.users.set(u.id, u);
    warnCaseDuplicates([...this.users.values()], this.logger);
    for (const stored of await this.storage.nodes.list()) {
      const n = await this.quarantine(stored);
      this.putNode(n);
      this.v4?.markUsed(n.ipv4);
      this.v6?.markUsed(n.ipv6);
    }
  }

  /**
   * quarantine repairs a node row that cannot be served as stored, so one bad row
   * never stops start-up: fields the reader could not decode (`damaged`), and a
   * Hostinfo or endpoint list that fails the protocol schemas (peers' Go decoders
   * would reject their whole netmap). Those fields get safe defaults (no Hostinfo,
   * no endpoints or routes, an expiry in the past), written back, with an ERR line
   * naming the node; the device re-sends its Hostinfo and endpoints on its next map.
   */
  private async quarantine(n: Node): Promise<Node> {
    const { damaged, ...node } = n;
    const fields = new Set(damaged ?? []);
    if (node.hostinfo !== null && !isHostinfo(node.hostinfo)) fields.add('hostinfo');
    if (!isEndpointList(node.endpoints)) fields.add('endpoints');
    if (!fields.size) return n;
    const repair: NodePatch = {};
    if (fields.has('hostinfo')) repair.hostinfo = null;
    if (fields.has('endpoints')) repair.endpoints = [];
    if (fields.has('tags')) repair.tags = [];
    if (fields.has('availableRoutes')) repair.availableRoutes = [];
    if (fields.has('approvedRoutes')) repair.approvedRoutes = [];
    if (fields.has('expiry')) repair.expiry = node.expiry;
    if (fields.has('lastSeen')) repair.lastSeen = null;
    this.logger.error('node row quarantined: unreadable or invalid fields reset to safe defaults', {
      node: node.id, name: node.givenName, fields: [...fields].join(','),
    });
    try {
      const fixed = await this.storage.nodes.update(node.id, repair);
      if (fixed) {
        const { damaged: _still, ...clean } = fixed;
        return clean;
      }
    } catch (err) {
      this.logger.error('node row quarantine could not be written back; serving the defaults from memory', {
        node: node.id, error: err instanceof Error ? err.name : 'error',
      });
    }
    return { ...node, ...repair };
  }

  // ---- users ----

  listUsers(filter: { id?: number; name?: string; email?: string } = {}): User[] {
    return [...this.users.values()]
      .filter((u) => (filter.id === undefined || u.id === filter.id)
        && (filter.name === undefined || sameUserName(u.name, filter.name))
        && (filter.email === undefined || u.email === filter.email))
      .sort((a, b) => a.id - b.id);
  }

  getUser(id: number): User | undefined { return this.users.get(id); }
  /** usersVersion moves whenever a user is added, changed or removed in memory (caches of users check it). */
  get usersVersion(): number { return this.users.version; }
  /** userByName ignores case: `alice` and `Alice` are one user, as login names are (an exact match wins for old data holding both). */
  userByName(name: string): User | undefined {
    const all = [...this.users.values()];
    return all.find((u) => u.name === name) ?? all.find((u) => sameUserName(u.name, name));
  }

  /** resolveUser accepts a numeric id or a name, as the CLI's --user does. */
  resolveUser(ref: string | number, field = 'user'): User {
    const s = String(ref).trim();
    if (!s) throw badField(field, 'must name a user (id or name)');
    const byId = /^\d+$/.test(s) ? this.users.get(Number(s)) : undefined;
    const user = byId ?? this.userByName(s);
    if (!user) throw notFound('user', s);
    return user;
  }

  async createUser(input: { name: string; displayName?: string; email?: string; profilePicUrl?: string }): Promise<User> {
    const err = checkUserName(input.name);
    if (err) throw badField('name', err);
    if (input.email && !/^[^\s@]+@[^\s@]+$/.test(input.email)) throw badField('email', `expected an e-mail address such as alice@example.com, found ${shown(input.email)}`);
    if (input.email && input.email.length > 255) throw badField('email', `must be at most 255 characters, found ${input.email.length}`);
    // The same bound a provider's display name gets (loginUser): every device in the tailnet is sent it.
    if (input.displayName && input.displayName.length > 255) throw badField('displayName', `must be at most 255 characters, found ${input.displayName.length}`);
    if (input.profilePicUrl) {
      const bad = checkPictureUrl(input.profilePicUrl);
      if (bad) throw badField('pictureUrl', bad);
    }
    const taken = this.userByName(input.name);
    if (taken) throw new HeadwayError('name_taken', `user ${input.name} already exists${taken.name !== input.name ? ` as ${taken.name} (names are compared without case)` : ''}`, 'name');
    const user = await this.conflicts(() => this.storage.users.create(input));
    this.users.set(user.id, user);
    this.bus.publish({ type: 'user-changed', user });
    return user;
  }

  /** userByProviderId finds the user a provider identity (`<iss>/<sub>`) belongs to. */
  userByProviderId(providerId: string): User | undefined {
    for (const u of this.users.values()) if (u.providerId === providerId) return u;
    return undefined;
  }

  /**
   * loginUser finds the user of a verified provider identity by its stable id and
   * refreshes the profile the provider keeps (e-mail, display name, picture, groups),
   * or creates the user: named after the provider's user name, else the e-mail
   * address, else `user-<hash>`, the first that is valid and free (names are how
   * policies and the CLI address users; the identity itself never changes).
   */
  async loginUser(identity: { provider: string; providerId: string; email: string; username: string; displayName: string; profilePicUrl: string; groups: string[] }): Promise<User> {
    const profile = {
      email: /^[^\s@]+@[^\s@]+$/.test(identity.email) ? identity.email : '',
      displayName: identity.displayName.slice(0, 255),
      profilePicUrl: /^https?:\/\//i.test(identity.profilePicUrl) ? identity.profilePicUrl.slice(0, 2048) : '',
      groups: [...new Set(identity.groups.filter((g) => typeof g === 'string' && g))].sort(),
    };
    for (let attempt = 1; ; attempt++) {
      const known = this.userByProviderId(identity.providerId);
      if (known) {
        const same = known.email === profile.email && known.displayName === profile.displayName
          && known.profilePicUrl === profile.profilePicUrl && JSON.stringify(known.groups) === JSON.stringify(profile.groups)
          && known.provider === identity.provider;
        if (same) return known;
        const updated = await this.conflicts(() => this.storage.users.update(known.id, { ...profile, provider: identity.provider }));
        if (!updated) throw notFound('user', known.id);
        this.users.set(updated.id, updated);
        this.bus.publish({ type: 'user-changed', user: updated });
        return updated;
      }
      const name = this.nameForIdentity(identity);
      try {
        const user = await this.storage.users.create({ name, ...profile, provider: identity.provider, providerId: identity.providerId });
        this.users.set(user.id, user);
        this.bus.publish({ type: 'user-changed', user });
        return user;
      } catch (err) {
        // Another server created this identity's user (or took the name) meanwhile: read and try again.
        if (!(err instanceof StorageConflictError) || attempt >= 3) throw conflictError(err);
        for (const u of await this.storage.users.list()) this.users.set(u.id, u);
      }
    }
  }

  private nameForIdentity(identity: { providerId: string; email: string; username: string }): string {
    const free = (n: string) => n && !checkUserName(n) && !this.userByName(n);
    for (const candidate of [identity.username, identity.email]) if (free(candidate)) return candidate;
    const hash = createHash('sha256').update(identity.providerId).digest('hex');
    for (let i = 8; i <= 64; i += 4) if (free(`user-${hash.slice(0, i)}`)) return `user-${hash.slice(0, i)}`;
    throw new HeadwayError('name_taken', 'no free user name for this identity');
  }

  /**
   * linkUser ties an existing user to a provider identity, so the person's next login
   * through the provider lands on this user (and its nodes) instead of a new one.
   */
  async linkUser(id: number, provider: string, providerId: string): Promise<User> {
    const user = this.users.get(id);
    if (!user) throw notFound('user', id);
    if (!provider || !/^[a-z0-9_-]{1,64}$/.test(provider)) throw badField('provider', `expected a provider name such as oidc, found ${shown(provider)}`);
    if (!providerId || providerId.length > 512 || /[\s]/.test(providerId)) throw badField('subject', `expected the provider's subject identifier (1-512 characters, no spaces), found ${shown(providerId)}`);
    const other = this.userByProviderId(providerId);
    if (other && other.id !== id) throw new HeadwayError('name_taken', `identity ${providerId} is already linked to user ${other.name} (id ${other.id})`, 'subject');
    const updated = await this.conflicts(() => this.storage.users.update(id, { provider, providerId }));
    if (!updated) throw notFound('user', id);
    this.users.set(id, updated);
    this.bus.publish({ type: 'user-changed', user: updated });
    return updated;
  }

  async renameUser(id: number, newName: string): Promise<User> {
    const user = this.users.get(id);
    if (!user) throw notFound('user', id);
    const err = checkUserName(newName);
    if (err) throw badField('newName', err);
    const other = this.userByName(newName);
    if (other && other.id !== id) throw new HeadwayError('name_taken', `user ${newName} already exists${other.name !== newName ? ` as ${other.name} (names are compared without case)` : ''}`, 'newName');
    const updated = await this.conflicts(() => this.storage.users.update(id, { name: newName }));
    if (!updated) throw notFound('user', id);
    this.users.set(id, updated);
    this.bus.publish({ type: 'user-changed', user: updated });
    return updated;
  }

  /**
   * deleteUser removes a user and its pre-auth keys in one transaction, and refuses
   * while the user still owns nodes, as headscale does: deleting a person must never
   * take devices with it. The database's node list is checked too (another server
   * may just have registered one).
   */
  async deleteUser(id: number, opts: { deleteNodes?: boolean } = {}): Promise<{ nodes: Node[] }> {
    if (opts.deleteNodes) return this.deleteUserWithNodes(id);
    const user = this.users.get(id);
    if (!user) throw notFound('user', id);
    const refuse = (owned: Node[]) => {
      const names = owned.slice(0, 5).map((n) => n.givenName).join(', ') + (owned.length > 5 ? ', ...' : '');
      return new HeadwayError('user_has_nodes', `user ${user.name} still owns ${owned.length} node(s) (${names}); delete them first (headway nodes delete -i ID)`);
    };
    const owned = this.listNodes({ userId: id });
    if (owned.length) throw refuse(owned);
    try {
      await this.atomically(async (tx) => {
        const stored = await tx.nodes.list({ userId: id });
        if (stored.length) throw refuse(stored);
        if (!(await tx.users.delete(id))) throw notFound('user', id);
      });
    } catch (err) {
      // A node registered for the user while the transaction ran keeps it (foreign key).
      if (err instanceof StorageConflictError) throw new HeadwayError('user_has_nodes', `user ${user.name} gained a node while being deleted; try again`);
      throw err;
    }
    this.users.delete(id);
    this.bus.publish({ type: 'user-removed', userId: id });
    return { nodes: [] };
  }

  /**
   * deleteUserWithNodes is the explicit cascade (`users destroy --delete-nodes`): the
   * user's nodes (as the database lists them inside the transaction, so one another
   * server just registered goes too), the user and its pre-auth keys go in one
   * transaction, or nothing does. Memory and the bus follow only after commit: each
   * node is forgotten and published as removed (its device is logged out), then the user.
   */
  private async deleteUserWithNodes(id: number): Promise<{ nodes: Node[] }> {
    const user = this.users.get(id);
    if (!user) throw notFound('user', id);
    let deleted: Node[];
    try {
      deleted = await this.atomically(async (tx) => {
        const stored = await tx.nodes.list({ userId: id });
        for (const n of stored) await tx.nodes.delete(n.id);
        if (!(await tx.users.delete(id))) throw notFound('user', id);
        return stored;
      });
    } catch (err) {
      // A node registered for the user while the transaction ran keeps it (foreign key): nothing was deleted.
      if (err instanceof StorageConflictError) throw new HeadwayError('user_has_nodes', `user ${user.name} gained a node while being deleted; try again`);
      throw err;
    }
    const nodes: Node[] = [];
    for (const n of deleted) {
      const known = this.nodes.get(n.id);
      if (known) this.forgetNode(known);
      nodes.push(known ?? n);
    }
    this.users.delete(id);
    this.bus.publish({ type: 'user-removed', userId: id });
    this.logger.info('user deleted with its nodes', { user: id, nodes: nodes.length });
    return { nodes };
  }

  // ---- nodes ----

  listNodes(filter: { userId?: number } = {}): Node[] {
    return [...this.nodes.values()]
      .filter((n) => filter.userId === undefined || n.userId === filter.userId)
      .sort((a, b) => a.id - b.id);
  }

  getNode(id: number): Node | undefined { return this.nodes.get(id); }
  requireNode(id: number): Node {
    const n = this.nodes.get(id);
    if (!n) throw notFound('node', id);
    return n;
  }
  nodeByMachineKey(key: string): Node | undefined { return this.byMachineKey.get(key); }
  nodeByNodeKey(key: string): Node | undefined { return this.byNodeKey.get(key); }

  /** putNode stores a node in memory and keeps the key indexes in step. */
  private putNode(n: Node): void {
    const old = this.nodes.get(n.id);
    if (old) { this.dropKeys(old); this.dropName(old); }
    this.nodes.set(n.id, n);
    this.nodesByName.set(n.givenName, (this.nodesByName.get(n.givenName) ?? 0) + 1);
    this.byNodeKey.set(n.nodeKey, n);
    this.byMachineKey.set(n.machineKey, n);
  }

  private dropName(n: Node): void {
    const c = this.nodesByName.get(n.givenName) ?? 0;
    if (c <= 1) this.nodesByName.delete(n.givenName);
    else this.nodesByName.set(n.givenName, c - 1);
  }

  private dropKeys(n: Node): void {
    if (this.byNodeKey.get(n.nodeKey)?.id === n.id) this.byNodeKey.delete(n.nodeKey);
    if (this.byMachineKey.get(n.machineKey)?.id === n.id) this.byMachineKey.delete(n.machineKey);
  }

  isOnline(id: number): boolean { return (this.sessions.get(id) ?? 0) > 0 || this.remoteOnline.has(id); }
  onlineCount(): number {
    const ids = new Set([...this.remoteOnline.keys()].filter((id) => this.nodes.has(id)));
    for (const [id, c] of this.sessions) if (c > 0) ids.add(id);
    return ids.size;
  }
  /** localSessionNodes are the nodes this instance holds a map session of. */
  localSessionNodes(): number[] {
    return [...this.sessions].filter(([, c]) => c > 0).map(([id]) => id);
  }

  /** localSessionCount is how many map sessions this instance holds (cluster heartbeats report it). */
  localSessionCount(): number {
    let n = 0;
    for (const c of this.sessions.values()) n += c;
    return n;
  }

  private givenNameTaken(name: string, except?: number): boolean {
    if (this.claimedNames.has(name)) return true;
    // Counted by name (putNode/forgetNode keep it): scanning every node cost O(N) per join, O(N²) per burst.
    const count = this.nodesByName.get(name) ?? 0;
    if (count === 0) return false;
    return !(count === 1 && except !== undefined && this.nodes.get(except)?.givenName === name);
  }

  /**
   * createNode registers a device in one transaction: `writes` (key spent, pending
   * registration deleted), the node with a unique given name (`web`, `web-1`, ...)
   * and fresh addresses, or nothing at all. Names and addresses are proposed from
   * memory and reserved there while the transaction runs; the database's unique
   * indexes judge, and a name or address another server took is skipped on the
   * next attempt. Memory is updated and the node published only after commit; a
   * failed attempt gives its reservations back.
   */
  async createNode(input: NewNodeInput, writes: RegistrationWrites = {}): Promise<Node> {
    const base = sanitizeHostname(input.hostname);
    // Names the database holds that memory does not know (written by another server).
    const takenElsewhere = new Set<string>();
    for (let attempt = 1; ; attempt++) {
      const givenName = uniqueName(base, (n) => takenElsewhere.has(n) || this.givenNameTaken(n));
      const { ipv4, ipv6 } = this.reserveAddresses();
      this.claimedNames.add(givenName);
      let node: Node;
      try {
        node = await this.storage.transaction(async (tx) => {
          await this.consume(tx, writes);
          return tx.nodes.create(this.withAutoApprovals(this.newNodeRow(input, givenName, ipv4, ipv6)));
        });
      } catch (err) {
        this.claimedNames.delete(givenName);
        const field = err instanceof StorageConflictError ? err.field : undefined;
        // An address the database already holds stays marked used here; the others go back.
        if (field !== 'ipv4') this.v4?.giveBack(ipv4);
        if (field !== 'ipv6') this.v6?.giveBack(ipv6);
        if (field === 'given_name') takenElsewhere.add(givenName);
        const again = err instanceof StorageRetryableError || field === 'given_name' || field === 'ipv4' || field === 'ipv6';
        if (again && attempt < REGISTER_ATTEMPTS) {
          this.logger.debug('registration retried', { attempt, reason: field ?? 'transaction aborted', name: givenName });
          continue;
        }
        throw conflictError(err);
      }
      this.claimedNames.delete(givenName);
      this.consumed(writes);
      this.putNode(node);
      this.bus.publish({ type: 'node-added', node });
      return node;
    }
  }

  /**
   * reRegisterNode gives a known machine a new login (node key, owner, expiry, ...)
   * in one transaction with `writes`; its given name and addresses stay.
   */
  async reRegisterNode(id: number, patch: NodePatch, writes: RegistrationWrites = {}): Promise<Node> {
    const full = this.routePatch(this.requireNode(id), patch);
    const updated = await this.conflicts(() => this.atomically(async (tx) => {
      await this.consume(tx, writes);
      const n = await tx.nodes.update(id, full);
      if (!n) throw notFound('node', id);
      return n;
    }));
    this.consumed(writes);
    if (this.deletedIds.has(id)) throw notFound('node', id);
    this.putNode(updated);
    this.bus.publish({ type: 'node-changed', node: updated });
    return updated;
  }

  /** consumed brings memory in step after a registration's transaction committed its writes. */
  private consumed(writes: RegistrationWrites): void {
    if (writes.pendingKey !== undefined) this.pendingQuota.remove(writes.pendingKey);
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

  /**
   * routePatch adds to a node's patch the routes the autoApprovers approve for the
   * node as patched, when the patch changes what it advertises, its approvals or
   * its owner; other patches (endpoints, last seen, ...) pass unchanged.
   */
  private routePatch(node: Node, patch: NodePatch): NodePatch {
    if (!this.autoApprovals) return patch;
    const differs = (k: 'availableRoutes' | 'approvedRoutes' | 'tags') => patch[k] !== undefined && patch[k]!.join(',') !== node[k].join(',');
    const touches = differs('availableRoutes') || differs('approvedRoutes') || differs('tags') || (patch.userId !== undefined && patch.userId !== node.userId);
    if (!touches) return patch;
    const approvedRoutes = this.autoApprovals({ ...node, ...patch });
    return approvedRoutes ? { ...patch, approvedRoutes } : patch;
  }

  /** withAutoApprovals adds the routes the autoApprovers approve to a new node's row. */
  private withAutoApprovals(row: NewNode): NewNode {
    if (!this.autoApprovals || !row.availableRoutes.length) return row;
    const now = new Date();
    const approved = this.autoApprovals({ ...row, id: -1, createdAt: now, updatedAt: now });
    return approved ? { ...row, approvedRoutes: approved } : row;
  }

  private newNodeRow(input: NewNodeInput, givenName: string, ipv4: string | null, ipv6: string | null): NewNode {
    return {
      machineKey: input.machineKey,
      nodeKey: input.nodeKey,
      discoKey: input.discoKey ?? '',
      hostname: input.hostname,
      givenName,
      userId: input.userId,
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
   * reserveAddresses takes one free address of each enabled family; allocation is
   * synchronous, so concurrent registrations never propose the same address.
   */
  private reserveAddresses(): { ipv4: string | null; ipv6: string | null } {
    const ipv4 = this.v4 ? this.v4.next() : null;
    const ipv6 = this.v6 ? this.v6.next() : null;
    if (ipv4 === undefined || ipv6 === undefined) {
      this.v4?.giveBack(ipv4); this.v6?.giveBack(ipv6);
      throw new HeadwayError('conflict', 'no free addresses left in the configured prefixes');
    }
    return { ipv4, ipv6 };
  }

  /** atomically runs fn in one transaction, again (a few times) when the database aborted it for a concurrent one. */
  private async atomically<T>(fn: (tx: StorageRepositories) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.storage.transaction(fn);
      } catch (err) {
        if (!(err instanceof StorageRetryableError) || attempt >= REGISTER_ATTEMPTS) throw err;
        this.logger.debug('transaction retried', { attempt });
      }
    }
  }

  /** updateNode stores a patch and publishes it as a full peer change. */
  async updateNode(id: number, patch: NodePatch, publish: 'full' | 'silent' = 'full'): Promise<Node> {
    const full = this.routePatch(this.requireNode(id), patch);
    const updated = await this.conflicts(() => this.storage.nodes.update(id, full));
    if (!updated || this.deletedIds.has(id)) throw notFound('node', id);
    this.putNode(updated);
    if (publish === 'full') this.bus.publish({ type: 'node-changed', node: updated });
    return updated;
  }

  async renameNode(id: number, newName: string): Promise<Node> {
    this.requireNode(id);
    const err = checkDnsLabel(newName);
    if (err) throw badField('newName', err);
    if (this.givenNameTaken(newName, id)) throw new HeadwayError('name_taken', `a node named ${newName} already exists`, 'newName');
    return this.updateNode(id, { givenName: newName });
  }

  async deleteNode(id: number): Promise<Node> {
    const node = this.requireNode(id);
    await this.storage.nodes.delete(id);
    this.forgetNode(node);
    return node;
  }

  /** forgetNode drops a node deleted from storage from memory, frees its addresses and publishes the removal. */
  private forgetNode(node: Node): void {
    const id = node.id;
    this.deletedIds.add(id);
    if (this.deletedIds.size > DELETED_IDS_KEPT) this.deletedIds.delete(this.deletedIds.values().next().value!);
    this.dropKeys(node);
    const held = this.nodes.get(id);
    if (held) this.dropName(held);
    this.nodes.delete(id);
    this.sessions.delete(id);
    this.v4?.release(node.ipv4);
    this.v6?.release(node.ipv6);
    this.bus.publish({ type: 'node-removed', nodeId: id, node });
  }

  /** expireNode sets a node's key expiry: now (log it out), a later time, or null (never expires). */
  async expireNode(id: number, at: Date | null = new Date()): Promise<Node> {
    this.requireNode(id);
    const updated = await this.updateNode(id, { expiry: at }, 'silent');
    this.bus.publish({ type: 'node-patch', nodeId: id, patch: { keyExpiry: at } });
    return updated;
  }

  async setTags(id: number, tags: string[]): Promise<Node> {
    const node = this.requireNode(id);
    const clean = [...new Set(tags.map((t) => t.trim()).filter(Boolean))];
    for (const t of clean) {
      const err = checkTag(t);
      if (err) throw badField('tags', err);
    }
    // A node given tags is owned by its tags; removing every tag returns it to its user.
    return this.updateNode(node.id, { tags: clean.sort() });
  }

  /** approveRoutes replaces the approved set; either exit route approves both. RouteService adds auto-approval and the primary election. */
  async approveRoutes(id: number, routes: string[]): Promise<Node> {
    this.requireNode(id);
    return this.updateNode(id, { approvedRoutes: approvedRouteSet(routes) });
  }

  /**
   * commitNodes stores the patches of several nodes in one transaction, then
   * updates memory, then runs `applied` (in-memory work that must see the
   * committed rows before anyone hears of them, such as the primary-route
   * election), then publishes each node once as a full change. A failure stores,
   * applies and publishes nothing.
   */
  async commitNodes(patches: Array<{ id: number; patch: NodePatch }>, applied?: (nodes: Node[]) => void): Promise<Node[]> {
    const full = patches.map((p) => ({ id: p.id, patch: this.routePatch(this.requireNode(p.id), p.patch) }));
    if (!full.length) return [];
    const updated = await this.conflicts(() => this.atomically(async (tx) => {
      const out: Node[] = [];
      for (const p of full) {
        const n = await tx.nodes.update(p.id, p.patch);
        if (!n) throw notFound('node', p.id);
        out.push(n);
      }
      return out;
    }));
    // A node deleted while the transaction ran stays deleted.
    const live = updated.filter((n) => !this.deletedIds.has(n.id));
    for (const n of live) this.putNode(n);
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
    const fresh: Array<[AddressAllocator, string]> = [];
    const take = (alloc: AddressAllocator): string => {
      const ip = alloc.next();
      if (ip === undefined) throw new HeadwayError('conflict', 'no free addresses left in the configured prefixes');
      fresh.push([alloc, ip]);
      return ip;
    };
    let updated: Node[];
    try {
      for (const node of this.listNodes()) {
        const needV4 = Boolean(this.v4 && !node.ipv4), needV6 = Boolean(this.v6 && !node.ipv6);
        if (!needV4 && !needV6) continue;
        plan.push({ id: node.id, patch: { ipv4: needV4 ? take(this.v4!) : node.ipv4, ipv6: needV6 ? take(this.v6!) : node.ipv6 } });
      }
      if (!plan.length) return [];
      updated = await this.conflicts(() => this.atomically(async (tx) => {
        const out: Node[] = [];
        for (const p of plan) {
          const n = await tx.nodes.update(p.id, p.patch);
          if (!n) throw notFound('node', p.id);
          out.push(n);
        }
        return out;
      }));
    } catch (err) {
      for (const [alloc, ip] of fresh) alloc.giveBack(ip);
      throw err;
    }
    const live = updated.filter((n) => !this.deletedIds.has(n.id));
    for (const n of live) {
      this.putNode(n);
      this.bus.publish({ type: 'node-changed', node: n });
    }
    return live;
  }

  // ---- sessions (online state) ----

  /** sessionOpened counts live map sessions; the first one marks the node online. */
  sessionOpened(id: number): void {
    const count = (this.sessions.get(id) ?? 0) + 1;
    this.sessions.set(id, count);
    if (count !== 1) return;
    const since = new Date();
    this.noteSince(id, '', since);
    this.onLocalSession?.(id, true, undefined, since);
    if (!this.remoteOnline.has(id)) this.bus.publish({ type: 'node-patch', nodeId: id, patch: { online: true } });
  }

  async sessionClosed(id: number): Promise<void> {
    const count = Math.max(0, (this.sessions.get(id) ?? 0) - 1);
    this.sessions.set(id, count);
    if (count > 0) return;
    this.noteSince(id, '', undefined);
    if (!this.nodes.has(id)) {
      // A deleted node's last session: its cluster record goes too.
      this.onLocalSession?.(id, false);
      return;
    }
    const lastSeen = new Date();
    await this.updateNode(id, { lastSeen }, 'silent').catch(() => undefined);
    this.onLocalSession?.(id, false, lastSeen);
    // A session of the node still open on another instance keeps it online.
    if (this.isOnline(id)) return;
    this.bus.publish({ type: 'node-patch', nodeId: id, patch: { online: false, lastSeen } });
  }

  // ---- cluster: applying what other instances changed ----

  /** publishRemote publishes a change another instance made, marked so it is not announced again. */
  private publishRemote(change: Change): void {
    this.applyingRemote = true;
    try {
      this.bus.publish(change);
    } finally {
      this.applyingRemote = false;
    }
  }

  /**
   * setRemoteOnline records that another instance opened (or closed) a node's map
   * session, and publishes the node's online state here when that changed it.
   */
  setRemoteOnline(id: number, instance: string, online: boolean, lastSeen?: Date, since?: Date): void {
    this.noteSince(id, instance, online ? since ?? new Date() : undefined);
    const before = this.isOnline(id);
    const set = this.remoteOnline.get(id) ?? new Set<string>();
    if (online) set.add(instance); else set.delete(instance);
    if (set.size) this.remoteOnline.set(id, set); else this.remoteOnline.delete(id);
    if (!this.nodes.has(id) || before === this.isOnline(id)) return;
    if (online) this.publishRemote({ type: 'node-patch', nodeId: id, patch: { online: true } });
    else {
      const at = lastSeen ?? new Date();
      const node = this.nodes.get(id)!;
      this.putNode({ ...node, lastSeen: at });
      this.publishRemote({ type: 'node-patch', nodeId: id, patch: { online: false, lastSeen: at } });
    }
  }

  private noteSince(id: number, instance: string, since: Date | undefined): void {
    const m = this.sessionSince.get(id);
    if (since) {
      // A session already known keeps its first time (a repeated record does not make it newer).
      const map = m ?? this.sessionSince.set(id, new Map()).get(id)!;
      if (!map.has(instance)) map.set(instance, since.getTime());
    } else if (m) {
      m.delete(instance);
      if (!m.size) this.sessionSince.delete(id);
    }
  }

  /** onlineSince is when the node's oldest open map session (on any instance) opened; undefined when offline. */
  onlineSince(id: number): number | undefined {
    const m = this.sessionSince.get(id);
    return m?.size ? Math.min(...m.values()) : undefined;
  }

  /** forgetInstance drops every session a dead instance held (its devices go offline unless connected elsewhere). */
  forgetInstance(instance: string): void {
    for (const [id, set] of [...this.remoteOnline]) if (set.has(instance)) this.setRemoteOnline(id, instance, false);
  }

  /** remoteInstances are the other instances this one believes hold map sessions. */
  remoteInstances(): Set<string> {
    const out = new Set<string>();
    for (const set of this.remoteOnline.values()) for (const i of set) out.add(i);
    return out;
  }

  /** findStoredMachine is findStoredNode by machine key (a register request from a machine memory does not know). */
  async findStoredMachine(machineKey: string): Promise<Node | undefined> {
    const known = this.byMachineKey.get(machineKey);
    if (known || !this.clustered) return known;
    const row = await this.storage.nodes.getByMachineKey(machineKey);
    if (row) this.applyNodeRow(row.id, row);
    return this.byMachineKey.get(machineKey);
  }

  /**
   * findStoredNode looks a node key up in the database when memory does not know it
   * and other instances write the same database (a device that registered on one
   * instance may reach another before the announcement does), and applies the row.
   */
  async findStoredNode(nodeKey: string): Promise<Node | undefined> {
    const known = this.byNodeKey.get(nodeKey);
    if (known || !this.clustered) return known;
    const row = await this.storage.nodes.getByNodeKey(nodeKey);
    if (row) this.applyNodeRow(row.id, row);
    return this.byNodeKey.get(nodeKey);
  }

  /**
   * reloadNodes reads the named nodes from storage after another instance changed
   * them and applies each here: added, changed or (no row any more) removed, each
   * published once as if it had been changed on this instance.
   */
  async reloadNodes(ids: number[]): Promise<void> {
    const rows = await Promise.all(ids.map((id) => this.storage.nodes.get(id)));
    ids.forEach((id, i) => this.applyNodeRow(id, rows[i]));
  }

  private applyNodeRow(id: number, row: Node | undefined): void {
    // A row read before this instance deleted the node is stale.
    if (row && this.deletedIds.has(id)) return;
    const known = this.nodes.get(id);
    if (!row) {
      if (known) {
        this.remoteOnline.delete(id);
        this.sessionSince.delete(id);
        this.applyingRemote = true;
        try { this.forgetNode(known); } finally { this.applyingRemote = false; }
      }
      return;
    }
    const { damaged: _damaged, ...node } = row;
    if (known && known.updatedAt.getTime() === node.updatedAt.getTime() && JSON.stringify(known) === JSON.stringify(node)) return;
    if (known) {
      if (known.ipv4 !== node.ipv4) this.v4?.release(known.ipv4);
      if (known.ipv6 !== node.ipv6) this.v6?.release(known.ipv6);
    }
    this.v4?.markUsed(node.ipv4);
    this.v6?.markUsed(node.ipv6);
    this.putNode(node);
    this.publishRemote(known ? { type: 'node-changed', node } : { type: 'node-added', node });
  }

  /** reloadNodePatch reads a node another instance patched (endpoints, disco key, expiry, ...) and publishes the patch. */
  async reloadNodePatch(id: number, patch: PeerPatch): Promise<void> {
    const row = await this.storage.nodes.get(id);
    if (!row) return this.applyNodeRow(id, undefined);
    const { damaged: _damaged, ...node } = row;
    if (!this.nodes.has(id)) return this.applyNodeRow(id, row);
    this.putNode(node);
    this.publishRemote({ type: 'node-patch', nodeId: id, patch });
  }

  /** reloadUsers reads the named users after another instance changed them, and applies each here. */
  async reloadUsers(ids: number[]): Promise<void> {
    const rows = await Promise.all(ids.map((id) => this.storage.users.get(id)));
    ids.forEach((id, i) => this.applyUserRow(id, rows[i]));
  }

  private applyUserRow(id: number, user: User | undefined): void {
    const known = this.users.get(id);
    if (!user) {
      if (known) {
        this.users.delete(id);
        this.publishRemote({ type: 'user-removed', userId: id });
      }
      return;
    }
    if (known && JSON.stringify(known) === JSON.stringify(user)) return;
    this.users.set(id, user);
    this.publishRemote({ type: 'user-changed', user });
  }

  /**
   * resync reloads every user and node after announcements may have been missed
   * (the change feed lost its connection) and applies what differs, users first
   * (nodes refer to them); deletions last.
   */
  async resync(sessions?: Array<{ instanceId: string; nodeId: number; since?: Date }>, self?: string): Promise<void> {
    const [users, nodes] = [await this.storage.users.list(), await this.storage.nodes.list()];
    const userIds = new Set(users.map((u) => u.id));
    for (const u of users) this.applyUserRow(u.id, u);
    const nodeIds = new Set(nodes.map((n) => n.id));
    for (const n of nodes) this.applyNodeRow(n.id, n);
    for (const id of [...this.nodes.keys()]) if (!nodeIds.has(id)) this.applyNodeRow(id, undefined);
    for (const id of [...this.users.keys()]) if (!userIds.has(id)) this.applyUserRow(id, undefined);
    if (sessions) {
      const want = new Map<number, Map<string, Date | undefined>>();
      for (const s of sessions) {
        if (s.instanceId === self) continue;
        (want.get(s.nodeId) ?? want.set(s.nodeId, new Map()).get(s.nodeId)!).set(s.instanceId, s.since);
      }
      for (const [id, set] of [...this.remoteOnline]) for (const inst of set) if (!want.get(id)?.has(inst)) this.setRemoteOnline(id, inst, false);
      for (const [id, map] of want) for (const [inst, since] of map) if (!this.remoteOnline.get(id)?.has(inst)) this.setRemoteOnline(id, inst, true, undefined, since);
    }
  }

  publishPatch(id: number, patch: PeerPatch): void {
    this.bus.publish({ type: 'node-patch', nodeId: id, patch });
  }

  // ---- pre-auth keys ----

  async createPreAuthKey(input: { userId: number | null; reusable?: boolean; ephemeral?: boolean; expiration?: Date | null; tags?: string[] }): Promise<{ key: PreAuthKey; secret: string }> {
    if (input.userId !== null && !this.users.has(input.userId)) throw notFound('user', input.userId);
    const tags = [...new Set(input.tags ?? [])];
    for (const t of tags) { const err = checkTag(t); if (err) throw badField('aclTags', err); }
    if (input.userId === null && !tags.length) throw badField('user', 'a key without a user must carry tags');
    if (input.expiration && input.expiration.getTime() <= Date.now()) throw badField('expiration', 'must be in the future');
    const issued = issueSecret('auth');
    const key = await this.storage.preAuthKeys.create({
      userId: input.userId, reusable: Boolean(input.reusable), ephemeral: Boolean(input.ephemeral),
      expiration: input.expiration ?? null, tags: tags.sort(), prefix: issued.prefix, hash: issued.hash,
    });
    return { key, secret: issued.full };
  }

  listPreAuthKeys(filter: { userId?: number } = {}): Promise<PreAuthKey[]> {
    return this.storage.preAuthKeys.list(filter);
  }

  async expirePreAuthKey(id: number): Promise<PreAuthKey> {
    const key = await this.storage.preAuthKeys.get(id);
    if (!key) throw notFound('pre-auth key', id);
    await this.storage.preAuthKeys.setExpiration(id, new Date());
    return (await this.storage.preAuthKeys.get(id))!;
  }

  async deletePreAuthKey(id: number): Promise<void> {
    if (!(await this.storage.preAuthKeys.delete(id))) throw notFound('pre-auth key', id);
  }

  /**
   * checkPreAuthKey checks a presented key without writing anything; `spend` says
   * whether registering with it must spend it (pass its id as `spendKeyId` to
   * createNode or reRegisterNode, which spend it in the registration's transaction).
   * The error text is what the client prints.
   */
  async checkPreAuthKey(presented: string, spentBy?: number | null): Promise<{ key: PreAuthKey; spend: boolean }> {
    const parsed = parseSecret('auth', presented);
    const key = parsed ? await this.storage.preAuthKeys.getByPrefix(parsed.prefix) : undefined;
    if (!parsed || !key || !(await verifySecret(parsed, key.hash))) throw new HeadwayError('unauthorized', 'invalid authkey');
    if (key.expiration && key.expiration.getTime() <= Date.now()) throw new HeadwayError('unauthorized', 'authkey expired');
    // A machine re-registering with the single-use key it joined with may present it again.
    if (!key.reusable && key.used && key.id === spentBy) return { key, spend: false };
    if (!key.reusable && key.used) throw new HeadwayError('unauthorized', 'authkey already used');
    return { key, spend: !key.reusable };
  }

  /**
   * authenticatePreAuthKey checks a presented key and, with `spend`, spends a
   * single-use one on its own; registrations use checkPreAuthKey instead so the
   * spend shares the node's transaction.
   */
  async authenticatePreAuthKey(presented: string, opts: { spend: boolean; spentBy?: number | null }): Promise<PreAuthKey> {
    const { key, spend } = await this.checkPreAuthKey(presented, opts.spentBy);
    if (opts.spend && spend && !(await this.storage.preAuthKeys.markUsed(key.id))) {
      throw new HeadwayError('unauthorized', 'authkey already used');
    }
    return key;
  }

  // ---- API keys ----

  async createApiKey(expiration: Date | null): Promise<{ key: ApiKey; secret: string }> {
    if (expiration && expiration.getTime() <= Date.now()) throw badField('expiration', 'must be in the future');
    const issued = issueSecret('api');
    const key = await this.storage.apiKeys.create({ prefix: issued.prefix, hash: issued.hash, expiration });
    return { key, secret: issued.full };
  }

  listApiKeys(): Promise<ApiKey[]> { return this.storage.apiKeys.list(); }

  async findApiKey(ref: { prefix?: string; id?: number }): Promise<ApiKey> {
    const key = ref.id !== undefined ? await this.storage.apiKeys.get(ref.id)
      : ref.prefix ? await this.storage.apiKeys.getByPrefix(ref.prefix.replace(/^h[ws]key-api-/, '')) : undefined;
    if (!key) throw notFound('API key', ref.prefix ?? String(ref.id));
    return key;
  }

  async expireApiKey(ref: { prefix?: string; id?: number }): Promise<ApiKey> {
    const key = await this.findApiKey(ref);
    await this.storage.apiKeys.update(key.id, { expiration: new Date() });
    return (await this.storage.apiKeys.get(key.id))!;
  }

  async deleteApiKey(ref: { prefix?: string; id?: number }): Promise<void> {
    const key = await this.findApiKey(ref);
    await this.storage.apiKeys.delete(key.id);
  }

  /** authenticateApiKey: undefined for any bad key; lastSeen is written at most once a minute. */
  async authenticateApiKey(presented: string): Promise<ApiKey | undefined> {
    const parsed = parseSecret('api', presented);
    if (!parsed) return undefined;
    const key = await this.storage.apiKeys.getByPrefix(parsed.prefix);
    if (!key || !(await verifySecret(parsed, key.hash))) return undefined;
    if (key.expiration && key.expiration.getTime() <= Date.now()) return undefined;
    const now = new Date();
    if (!key.lastSeen || now.getTime() - key.lastSeen.getTime() >= LAST_SEEN_INTERVAL_MS) {
      await this.storage.apiKeys.update(key.id, { lastSeen: now });
    }
    return key;
  }

  // ---- pending registrations ----

  /** pendingQuota remembers the waiting interactive logins this process stored: a first filter in front of the database's caps (registration.*). */
  readonly pendingQuota = new PendingQuota(() => this.config.registration);

  /**
   * createPending stores an interactive login waiting for approval. The Hostinfo kept with it is bounded, and
   * the database decides the rest in the one transaction that writes the row (putWithinQuota): the machine's
   * login for the same node key (or its oldest of PER_MACHINE) is replaced, and the per-source and overall caps
   * are counted there, under a lock every instance on the database takes, so concurrent logins cannot pass a cap
   * together (a count in memory before the write cannot see the others in flight).
   */
  async createPending(input: { machineKey: string; nodeKey: string; hostinfo: Record<string, unknown> | null; source?: string }): Promise<PendingRegistration> {
    const limits = this.config.registration;
    const size = input.hostinfo ? Buffer.byteLength(JSON.stringify(input.hostinfo)) : 0;
    if (size > limits.max_hostinfo_bytes) {
      throw new HeadwayError('payload_too_large', `Hostinfo is ${size} bytes; a login waiting for approval stores at most ${limits.max_hostinfo_bytes} (registration.max_hostinfo_bytes)`, 'Hostinfo');
    }
    const source = input.source ?? 'unknown';
    // One at a time in this process, so memory learns of the database's decisions in the order it made them: two
    // answered out of order left memory holding a login the later one had replaced (the database serializes them
    // anyway, with its lock; across instances that lock alone decides, since memory is not consulted there).
    const turn = this.pendingTurn.then(() => this.admitPending(input, source));
    this.pendingTurn = turn.catch(() => undefined);
    return turn;
  }

  /** pendingTurn is the createPending running now, which the next one waits for. */
  private pendingTurn: Promise<unknown> = Promise.resolve();

  private async admitPending(input: { machineKey: string; nodeKey: string; hostinfo: Record<string, unknown> | null }, source: string): Promise<PendingRegistration> {
    const limits = this.config.registration;
    // Alone, every login memory counts is a row in the database, so a refusal here is the database's too and
    // spares it the locked transaction; in a cluster another instance may have approved some, so it decides.
    if (!this.clustered) this.pendingQuota.check(source, input.machineKey, input.nodeKey);
    const now = new Date();
    const reg: PendingRegistration = {
      // Letters and digits: the key goes on a command line, where a leading '-' reads as a flag (randomToken).
      key: randomToken(24),
      machineKey: input.machineKey, nodeKey: input.nodeKey, hostinfo: input.hostinfo,
      createdAt: now, expiresAt: new Date(now.getTime() + limits.pending_expiry),
    };
    const caps = { perMachine: PER_MACHINE, perSource: limits.max_pending_per_address, total: limits.max_pending };
    const admission = await this.atomically((tx) => tx.pendingRegistrations.putWithinQuota(reg, source, caps, now));
    if (!admission.stored) throw pendingQuotaError(admission.limit, source, limits);
    this.pendingQuota.add(reg.key, source, reg.machineKey, reg.expiresAt.getTime(), reg.nodeKey, admission.replaced);
    return reg;
  }

  async getPending(key: string): Promise<PendingRegistration | undefined> {
    const reg = await this.storage.pendingRegistrations.get(key);
    if (!reg) return undefined;
    if (reg.expiresAt.getTime() <= Date.now()) {
      await this.deletePending(key);
      return undefined;
    }
    return reg;
  }

  async deletePending(key: string): Promise<void> {
    await this.storage.pendingRegistrations.delete(key);
    this.pendingQuota.remove(key);
  }

  /** deleteExpiredPending removes every expired waiting login; called periodically (registration.gc_interval). */
  async deleteExpiredPending(): Promise<number> {
    const n = await this.storage.pendingRegistrations.deleteExpired(new Date());
    this.pendingQuota.prune();
    return n;
  }

  /** conflicts turns a database uniqueness violation into a 409 naming the field. */
  private async conflicts<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw conflictError(err);
    }
  }
}

/** checkPictureUrl says what is wrong with a user picture URL (http or https, at most 2048 characters), or nothing. */
export function checkPictureUrl(value: string): string | undefined {
  if (value.length > 2048) return `expected a URL of at most 2048 characters, found ${value.length}`;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return `expected an http:// or https:// URL, found ${JSON.stringify(value.slice(0, 100))}`;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `expected an http:// or https:// URL, found ${JSON.stringify(value.slice(0, 100))}`;
  return undefined;
}

/** conflictError maps a StorageConflictError to a 409 naming the field; other errors pass through. */
function conflictError(err: unknown): unknown {
  if (err instanceof StorageConflictError) {
    return new HeadwayError('name_taken', `${err.field ?? 'value'} already in use`, err.field);
  }
  return err;
}

/** VersionedMap counts its writes, so a cache of something derived from it can tell it is out of date. */
class VersionedMap<K, V> extends Map<K, V> {
  version = 0;
  override set(key: K, value: V): this { this.version++; return super.set(key, value); }
  override delete(key: K): boolean { this.version++; return super.delete(key); }
  override clear(): void { this.version++; super.clear(); }
}
