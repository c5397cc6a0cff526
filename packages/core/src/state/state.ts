import { randomBytes } from 'node:crypto';
import type { ApiKey, Node, NodePatch, PendingRegistration, PreAuthKey, RegisterMethod, User } from '../domain.js';
import { badField, HeadwayError, notFound } from '../errors.js';
import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';
import { isExitRoute } from '../net/ip.js';
import { StorageConflictError, type StoragePort } from '../ports/storage.js';
import { issueSecret, parseSecret, secretMatches } from '../secrets.js';
import { isEndpointList, isHostinfo } from '../control/validate.js';
import { ChangeBus, type PeerPatch } from './bus.js';
import { AddressAllocator } from './ipam.js';
import { canonicalRoutes, checkDnsLabel, checkTag, checkUserName, sanitizeHostname, uniqueName } from './names.js';

const LAST_SEEN_INTERVAL_MS = 60_000;
export const PENDING_TTL_MS = 15 * 60_000;

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
 * State is the single writer: it keeps users and nodes in memory, answers reads
 * without touching the database, and applies every change by storing it first,
 * then updating memory, then publishing it once on the ChangeBus.
 */
export class State {
  readonly bus = new ChangeBus();
  private readonly users = new Map<number, User>();
  private readonly nodes = new Map<number, Node>();
  private readonly sessions = new Map<number, number>();
  /** Key indexes: every register and map request looks a node up by key. */
  private readonly byNodeKey = new Map<string, Node>();
  private readonly byMachineKey = new Map<string, Node>();
  private v4?: AddressAllocator;
  private v6?: AddressAllocator;
  /** Serializes allocations so two registrations never propose the same address. */
  private allocating: Promise<unknown> = Promise.resolve();

  constructor(readonly storage: StoragePort, readonly config: HeadwayConfig, readonly logger: Logger) {}

  async init(): Promise<void> {
    const { v4, v6, allocation } = this.config.prefixes;
    if (v4) this.v4 = new AddressAllocator(v4, allocation);
    if (v6) this.v6 = new AddressAllocator(v6, allocation);
    for (const u of await this.storage.users.list()) this.users.set(u.id, u);
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
        && (filter.name === undefined || u.name === filter.name)
        && (filter.email === undefined || u.email === filter.email))
      .sort((a, b) => a.id - b.id);
  }

  getUser(id: number): User | undefined { return this.users.get(id); }
  userByName(name: string): User | undefined { return [...this.users.values()].find((u) => u.name === name); }

  /** resolveUser accepts a numeric id or a name, as the CLI's --user does. */
  resolveUser(ref: string | number, field = 'user'): User {
    const s = String(ref).trim();
    if (!s) throw badField(field, 'must name a user (id or name)');
    const byId = /^\d+$/.test(s) ? this.users.get(Number(s)) : undefined;
    const user = byId ?? this.userByName(s);
    if (!user) throw notFound('user', s);
    return user;
  }

  async createUser(input: { name: string; displayName?: string; email?: string }): Promise<User> {
    const err = checkUserName(input.name);
    if (err) throw badField('name', err);
    if (input.email && !/^[^\s@]+@[^\s@]+$/.test(input.email)) throw badField('email', `expected an e-mail address, found ${JSON.stringify(input.email)}`);
    if (this.userByName(input.name)) throw new HeadwayError('name_taken', `user ${input.name} already exists`, 'name');
    const user = await this.conflicts(() => this.storage.users.create(input));
    this.users.set(user.id, user);
    this.bus.publish({ type: 'user-changed', user });
    return user;
  }

  async renameUser(id: number, newName: string): Promise<User> {
    const user = this.users.get(id);
    if (!user) throw notFound('user', id);
    const err = checkUserName(newName);
    if (err) throw badField('newName', err);
    const other = this.userByName(newName);
    if (other && other.id !== id) throw new HeadwayError('name_taken', `user ${newName} already exists`, 'newName');
    const updated = await this.conflicts(() => this.storage.users.update(id, { name: newName }));
    if (!updated) throw notFound('user', id);
    this.users.set(id, updated);
    this.bus.publish({ type: 'user-changed', user: updated });
    return updated;
  }

  /** deleteUser refuses while the user owns nodes, unless forced (then the nodes go first). */
  async deleteUser(id: number, force = false): Promise<void> {
    const user = this.users.get(id);
    if (!user) throw notFound('user', id);
    const owned = this.listNodes({ userId: id });
    if (owned.length && !force) {
      throw new HeadwayError('user_has_nodes', `user ${user.name} still owns ${owned.length} node(s); delete them first or force`);
    }
    for (const n of owned) await this.deleteNode(n.id);
    await this.storage.users.delete(id);
    this.users.delete(id);
    this.bus.publish({ type: 'user-removed', userId: id });
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
    if (old) this.dropKeys(old);
    this.nodes.set(n.id, n);
    this.byNodeKey.set(n.nodeKey, n);
    this.byMachineKey.set(n.machineKey, n);
  }

  private dropKeys(n: Node): void {
    if (this.byNodeKey.get(n.nodeKey)?.id === n.id) this.byNodeKey.delete(n.nodeKey);
    if (this.byMachineKey.get(n.machineKey)?.id === n.id) this.byMachineKey.delete(n.machineKey);
  }

  isOnline(id: number): boolean { return (this.sessions.get(id) ?? 0) > 0; }
  onlineCount(): number { return [...this.sessions.values()].filter((c) => c > 0).length; }

  private givenNameTaken(name: string, except?: number): boolean {
    for (const n of this.nodes.values()) if (n.givenName === name && n.id !== except) return true;
    return false;
  }

  /** createNode registers a device: unique display name, fresh addresses, stored then published. */
  async createNode(input: NewNodeInput): Promise<Node> {
    const givenName = uniqueName(sanitizeHostname(input.hostname), (n) => this.givenNameTaken(n));
    return this.withAddresses(async (ipv4, ipv6) => {
      const node = await this.conflicts(() => this.storage.nodes.create({
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
      }));
      this.putNode(node);
      this.bus.publish({ type: 'node-added', node });
      return node;
    });
  }

  /** serialized runs allocation steps one at a time; a failed step does not block the next. */
  private serialized<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.allocating.then(fn);
    this.allocating = run.catch(() => undefined);
    return run;
  }

  private withAddresses<T>(fn: (v4: string | null, v6: string | null) => Promise<T>): Promise<T> {
    return this.serialized(async () => {
      const v4 = this.v4 ? this.v4.next() : null;
      const v6 = this.v6 ? this.v6.next() : null;
      if (v4 === undefined || v6 === undefined) {
        this.v4?.release(v4); this.v6?.release(v6);
        throw new HeadwayError('conflict', 'no free addresses left in the configured prefixes');
      }
      try {
        return await fn(v4, v6);
      } catch (err) {
        this.v4?.release(v4); this.v6?.release(v6);
        throw err;
      }
    });
  }

  /** updateNode stores a patch and publishes it as a full peer change. */
  async updateNode(id: number, patch: NodePatch, publish: 'full' | 'silent' = 'full'): Promise<Node> {
    this.requireNode(id);
    const updated = await this.conflicts(() => this.storage.nodes.update(id, patch));
    if (!updated) throw notFound('node', id);
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
    this.dropKeys(node);
    this.nodes.delete(id);
    this.sessions.delete(id);
    this.v4?.release(node.ipv4);
    this.v6?.release(node.ipv6);
    this.bus.publish({ type: 'node-removed', nodeId: id, node });
    return node;
  }

  async expireNode(id: number, at: Date = new Date()): Promise<Node> {
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

  /** approveRoutes replaces the approved set; either exit route approves both. */
  async approveRoutes(id: number, routes: string[]): Promise<Node> {
    this.requireNode(id);
    const set = new Set<string>();
    for (const c of canonicalRoutes(routes.map((x) => x.trim()).filter(Boolean))) {
      if (isExitRoute(c)) { set.add('0.0.0.0/0'); set.add('::/0'); } else set.add(c);
    }
    return this.updateNode(id, { approvedRoutes: [...set].sort() });
  }

  /** backfillIPs gives every node an address of each enabled family it lacks. */
  async backfillIPs(): Promise<Node[]> {
    const changed: Node[] = [];
    for (const node of this.listNodes()) {
      const needV4 = this.v4 && !node.ipv4, needV6 = this.v6 && !node.ipv6;
      if (!needV4 && !needV6) continue;
      const updated = await this.allocateFor(node, Boolean(needV4), Boolean(needV6));
      changed.push(updated);
    }
    return changed;
  }

  private allocateFor(node: Node, v4: boolean, v6: boolean): Promise<Node> {
    return this.serialized(async () => {
      const ip4 = v4 ? this.v4!.next() ?? null : node.ipv4;
      const ip6 = v6 ? this.v6!.next() ?? null : node.ipv6;
      try {
        return await this.updateNode(node.id, { ipv4: ip4, ipv6: ip6 });
      } catch (err) {
        if (v4) this.v4!.release(ip4); if (v6) this.v6!.release(ip6);
        throw err;
      }
    });
  }

  // ---- sessions (online state) ----

  /** sessionOpened counts live map sessions; the first one marks the node online. */
  sessionOpened(id: number): void {
    const count = (this.sessions.get(id) ?? 0) + 1;
    this.sessions.set(id, count);
    if (count === 1) this.bus.publish({ type: 'node-patch', nodeId: id, patch: { online: true } });
  }

  async sessionClosed(id: number): Promise<void> {
    const count = Math.max(0, (this.sessions.get(id) ?? 0) - 1);
    this.sessions.set(id, count);
    if (count > 0 || !this.nodes.has(id)) return;
    const lastSeen = new Date();
    await this.updateNode(id, { lastSeen }, 'silent').catch(() => undefined);
    this.bus.publish({ type: 'node-patch', nodeId: id, patch: { online: false, lastSeen } });
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
   * authenticatePreAuthKey checks a presented key and, for a single-use key, spends
   * it with the storage's guarded update; the error text is what the client prints.
   */
  async authenticatePreAuthKey(presented: string, opts: { spend: boolean; spentBy?: number | null }): Promise<PreAuthKey> {
    const parsed = parseSecret('auth', presented);
    const key = parsed ? await this.storage.preAuthKeys.getByPrefix(parsed.prefix) : undefined;
    if (!parsed || !key || !secretMatches(parsed.secret, key.hash)) throw new HeadwayError('unauthorized', 'invalid authkey');
    if (key.expiration && key.expiration.getTime() <= Date.now()) throw new HeadwayError('unauthorized', 'authkey expired');
    // A machine re-registering with the single-use key it joined with may present it again.
    if (!key.reusable && key.used && key.id === opts.spentBy) return key;
    if (!key.reusable && key.used) throw new HeadwayError('unauthorized', 'authkey already used');
    if (opts.spend && !key.reusable) {
      if (!(await this.storage.preAuthKeys.markUsed(key.id))) throw new HeadwayError('unauthorized', 'authkey already used');
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
      : ref.prefix ? await this.storage.apiKeys.getByPrefix(ref.prefix.replace(/^hwkey-api-/, '')) : undefined;
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
    if (!key || !secretMatches(parsed.secret, key.hash)) return undefined;
    if (key.expiration && key.expiration.getTime() <= Date.now()) return undefined;
    const now = new Date();
    if (!key.lastSeen || now.getTime() - key.lastSeen.getTime() >= LAST_SEEN_INTERVAL_MS) {
      await this.storage.apiKeys.update(key.id, { lastSeen: now });
    }
    return key;
  }

  // ---- pending registrations ----

  async createPending(input: { machineKey: string; nodeKey: string; hostinfo: Record<string, unknown> | null }): Promise<PendingRegistration> {
    const reg: PendingRegistration = {
      key: randomBytes(18).toString('base64url'),
      machineKey: input.machineKey, nodeKey: input.nodeKey, hostinfo: input.hostinfo,
      createdAt: new Date(), expiresAt: new Date(Date.now() + PENDING_TTL_MS),
    };
    await this.storage.pendingRegistrations.put(reg);
    return reg;
  }

  async getPending(key: string): Promise<PendingRegistration | undefined> {
    const reg = await this.storage.pendingRegistrations.get(key);
    if (!reg) return undefined;
    if (reg.expiresAt.getTime() <= Date.now()) {
      await this.storage.pendingRegistrations.delete(key);
      return undefined;
    }
    return reg;
  }

  async deletePending(key: string): Promise<void> { await this.storage.pendingRegistrations.delete(key); }

  /** conflicts turns a database uniqueness violation into a 409 naming the field. */
  private async conflicts<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof StorageConflictError) {
        throw new HeadwayError('name_taken', `${err.field ?? 'value'} already in use`, err.field);
      }
      throw err;
    }
  }
}
