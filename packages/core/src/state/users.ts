import { createHash } from 'node:crypto';
import type { Node, User } from '../domain.js';
import { badField, HeadwayError, notFound, shown } from '../errors.js';
import type { Logger } from '../log.js';
import { StorageConflictError, type StoragePort } from '../ports/storage.js';
import type { VerifiedIdentity } from '../ports/identity.js';
import type { ChangeBus } from './bus.js';
import { checkUserName } from './names.js';
import type { NodeStore } from './nodes.js';
import { sameUserName, warnCaseDuplicates } from './user-names.js';
import { atomically, conflictError, conflicts } from './writes.js';

/** ProviderIdentity is a person as a login provider verified them. */
export type ProviderIdentity = VerifiedIdentity;

/**
 * UserStore keeps the users in memory and answers reads from there; every change
 * is stored first, then applied to memory, then published once on the bus.
 */
export class UserStore {
  private readonly byId = new VersionedMap<number, User>();

  /** nodes are asked which nodes a user owns (a user with nodes is not deleted without them). */
  constructor(
    private readonly storage: StoragePort,
    private readonly bus: ChangeBus,
    private readonly logger: Logger,
    private readonly nodes: NodeStore,
  ) {}

  /** load reads every stored user into memory (start-up). */
  async load(): Promise<void> {
    for (const u of await this.storage.users.list()) this.byId.set(u.id, u);
    warnCaseDuplicates([...this.byId.values()], this.logger);
  }

  list(filter: { id?: number; name?: string; email?: string } = {}): User[] {
    return [...this.byId.values()]
      .filter((u) => (filter.id === undefined || u.id === filter.id)
        && (filter.name === undefined || sameUserName(u.name, filter.name))
        && (filter.email === undefined || u.email === filter.email))
      .sort((a, b) => a.id - b.id);
  }

  get(id: number): User | undefined { return this.byId.get(id); }

  /** version moves whenever a user is added, changed or removed in memory (caches of users check it). */
  get version(): number { return this.byId.version; }

  /** byName ignores case: `alice` and `Alice` are one user, as login names are (an exact match wins for old data holding both). */
  byName(name: string): User | undefined {
    const all = [...this.byId.values()];
    return all.find((u) => u.name === name) ?? all.find((u) => sameUserName(u.name, name));
  }

  /** byProviderId finds the user a provider identity (`<iss>/<sub>`) belongs to. */
  byProviderId(providerId: string): User | undefined {
    for (const u of this.byId.values()) if (u.providerId === providerId) return u;
    return undefined;
  }

  /** resolve accepts a numeric id or a name, as the CLI's --user does. */
  resolve(ref: string | number, field = 'user'): User {
    const s = String(ref).trim();
    if (!s) throw badField(field, 'must name a user (id or name)');
    const byId = /^\d+$/.test(s) ? this.byId.get(Number(s)) : undefined;
    const user = byId ?? this.byName(s);
    if (!user) throw notFound('user', s);
    return user;
  }

  async create(input: { name: string; displayName?: string; email?: string; profilePicUrl?: string }): Promise<User> {
    const err = checkUserName(input.name);
    if (err) throw badField('name', err);
    if (input.email && !/^[^\s@]+@[^\s@]+$/.test(input.email)) throw badField('email', `expected an e-mail address such as alice@example.com, found ${shown(input.email)}`);
    if (input.email && input.email.length > 255) throw badField('email', `must be at most 255 characters, found ${input.email.length}`);
    // The same bound a provider's display name gets (login): every device in the tailnet is sent it.
    if (input.displayName && input.displayName.length > 255) throw badField('displayName', `must be at most 255 characters, found ${input.displayName.length}`);
    if (input.profilePicUrl) {
      const bad = checkPictureUrl(input.profilePicUrl);
      if (bad) throw badField('pictureUrl', bad);
    }
    const taken = this.byName(input.name);
    if (taken) throw new HeadwayError('name_taken', `user ${input.name} already exists${taken.name !== input.name ? ` as ${taken.name} (names are compared without case)` : ''}`, 'name');
    const user = await conflicts(() => this.storage.users.create(input));
    this.changed(user);
    return user;
  }

  /**
   * login finds the user of a verified provider identity by its stable id and
   * refreshes the profile the provider keeps (e-mail, display name, picture, groups),
   * or creates the user: named after the provider's user name, else the e-mail
   * address, else `user-<hash>`, the first that is valid and free (names are how
   * policies and the CLI address users; the identity itself never changes).
   */
  async login(identity: ProviderIdentity): Promise<User> {
    const profile = {
      email: /^[^\s@]+@[^\s@]+$/.test(identity.email) ? identity.email : '',
      displayName: identity.displayName.slice(0, 255),
      profilePicUrl: /^https?:\/\//i.test(identity.profilePicUrl) ? identity.profilePicUrl.slice(0, 2048) : '',
      groups: [...new Set(identity.groups.filter((g) => typeof g === 'string' && g))].sort(),
    };
    for (let attempt = 1; ; attempt++) {
      const known = this.byProviderId(identity.providerId);
      if (known) {
        const same = known.email === profile.email && known.displayName === profile.displayName
          && known.profilePicUrl === profile.profilePicUrl && JSON.stringify(known.groups) === JSON.stringify(profile.groups)
          && known.provider === identity.provider;
        if (same) return known;
        const updated = await conflicts(() => this.storage.users.update(known.id, { ...profile, provider: identity.provider }));
        if (!updated) throw notFound('user', known.id);
        this.changed(updated);
        return updated;
      }
      const name = this.nameForIdentity(identity);
      try {
        const user = await this.storage.users.create({ name, ...profile, provider: identity.provider, providerId: identity.providerId });
        this.changed(user);
        return user;
      } catch (err) {
        // Another server created this identity's user (or took the name) meanwhile: read and try again.
        if (!(err instanceof StorageConflictError) || attempt >= 3) throw conflictError(err);
        for (const u of await this.storage.users.list()) this.byId.set(u.id, u);
      }
    }
  }

  private nameForIdentity(identity: { providerId: string; email: string; username: string }): string {
    const free = (n: string) => n && !checkUserName(n) && !this.byName(n);
    for (const candidate of [identity.username, identity.email]) if (free(candidate)) return candidate;
    const hash = createHash('sha256').update(identity.providerId).digest('hex');
    for (let i = 8; i <= 64; i += 4) if (free(`user-${hash.slice(0, i)}`)) return `user-${hash.slice(0, i)}`;
    throw new HeadwayError('name_taken', 'no free user name for this identity');
  }

  /**
   * link ties an existing user to a provider identity, so the person's next login
   * through the provider lands on this user (and its nodes) instead of a new one.
   */
  async link(id: number, provider: string, providerId: string): Promise<User> {
    const user = this.byId.get(id);
    if (!user) throw notFound('user', id);
    if (!provider || !/^[a-z0-9_-]{1,64}$/.test(provider)) throw badField('provider', `expected a provider name such as oidc, found ${shown(provider)}`);
    if (!providerId || providerId.length > 512 || /[\s]/.test(providerId)) throw badField('subject', `expected the provider's subject identifier (1-512 characters, no spaces), found ${shown(providerId)}`);
    const other = this.byProviderId(providerId);
    if (other && other.id !== id) throw new HeadwayError('name_taken', `identity ${providerId} is already linked to user ${other.name} (id ${other.id})`, 'subject');
    const updated = await conflicts(() => this.storage.users.update(id, { provider, providerId }));
    if (!updated) throw notFound('user', id);
    this.changed(updated);
    return updated;
  }

  async rename(id: number, newName: string): Promise<User> {
    const user = this.byId.get(id);
    if (!user) throw notFound('user', id);
    const err = checkUserName(newName);
    if (err) throw badField('newName', err);
    const other = this.byName(newName);
    if (other && other.id !== id) throw new HeadwayError('name_taken', `user ${newName} already exists${other.name !== newName ? ` as ${other.name} (names are compared without case)` : ''}`, 'newName');
    const updated = await conflicts(() => this.storage.users.update(id, { name: newName }));
    if (!updated) throw notFound('user', id);
    this.changed(updated);
    return updated;
  }

  /**
   * delete removes a user and its pre-auth keys in one transaction, and refuses
   * while the user still owns nodes, as headscale does: deleting a person must never
   * take devices with it. The database's node list is checked too (another server
   * may just have registered one). `deleteNodes` is the explicit cascade.
   */
  async delete(id: number, opts: { deleteNodes?: boolean } = {}): Promise<{ nodes: Node[] }> {
    if (opts.deleteNodes) return this.deleteWithNodes(id);
    const user = this.byId.get(id);
    if (!user) throw notFound('user', id);
    const refuse = (owned: Node[]) => {
      const names = owned.slice(0, 5).map((n) => n.givenName).join(', ') + (owned.length > 5 ? ', ...' : '');
      return new HeadwayError('user_has_nodes', `user ${user.name} still owns ${owned.length} node(s) (${names}); delete them first (headway nodes delete -i ID)`);
    };
    const owned = this.nodes.list({ userId: id });
    if (owned.length) throw refuse(owned);
    try {
      await atomically(this.storage, this.logger, async (tx) => {
        const stored = await tx.nodes.list({ userId: id });
        if (stored.length) throw refuse(stored);
        if (!(await tx.users.delete(id))) throw notFound('user', id);
      });
    } catch (err) {
      // A node registered for the user while the transaction ran keeps it (foreign key).
      if (err instanceof StorageConflictError) throw new HeadwayError('user_has_nodes', `user ${user.name} gained a node while being deleted; try again`);
      throw err;
    }
    this.removed(id);
    return { nodes: [] };
  }

  /**
   * deleteWithNodes is the explicit cascade (`users destroy --delete-nodes`): the
   * user's nodes (as the database lists them inside the transaction, so one another
   * server just registered goes too), the user and its pre-auth keys go in one
   * transaction, or nothing does. Memory and the bus follow only after commit: each
   * node is forgotten and published as removed (its device is logged out), then the user.
   */
  private async deleteWithNodes(id: number): Promise<{ nodes: Node[] }> {
    const user = this.byId.get(id);
    if (!user) throw notFound('user', id);
    let deleted: Node[];
    try {
      deleted = await atomically(this.storage, this.logger, async (tx) => {
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
      if (known) this.nodes.forget(known);
      nodes.push(known ?? n);
    }
    this.removed(id);
    this.logger.info('user deleted with its nodes', { user: id, nodes: nodes.length });
    return { nodes };
  }

  private changed(user: User): void {
    this.byId.set(user.id, user);
    this.bus.publish({ type: 'user-changed', user });
  }

  private removed(id: number): void {
    this.byId.delete(id);
    this.bus.publish({ type: 'user-removed', userId: id });
  }

  /** remember puts a user row read from storage into memory, publishing nothing (the caller publishes). */
  remember(user: User): void { this.byId.set(user.id, user); }

  /** forget drops a user storage no longer holds from memory, publishing nothing (the caller publishes). */
  forget(id: number): void { this.byId.delete(id); }
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

/** VersionedMap counts its writes, so a cache of something derived from it can tell it is out of date. */
class VersionedMap<K, V> extends Map<K, V> {
  version = 0;
  override set(key: K, value: V): this { this.version++; return super.set(key, value); }
  override delete(key: K): boolean { this.version++; return super.delete(key); }
  override clear(): void { this.version++; super.clear(); }
}
