import type { ApiKey, PreAuthKey } from '../domain.js';
import { badField, HeadwayError, notFound } from '../errors.js';
import type { StoragePort } from '../ports/storage.js';
import { issueSecret, parseSecret, verifySecret } from '../secrets.js';
import { checkTag } from './names.js';
import type { UserStore } from './users.js';

/** LAST_SEEN_INTERVAL_MS bounds how often an API key's last use is written: once a minute, not on every request. */
const LAST_SEEN_INTERVAL_MS = 60_000;

/**
 * KeyStore issues and checks pre-auth keys (devices joining without a login) and
 * API keys (admin clients). Keys are not kept in memory: each check reads the
 * database, so a key created or revoked on another instance counts at once. Only
 * a hash of each secret is stored; the secret is shown once, when issued.
 */
export class KeyStore {
  /** users are checked for the owner a pre-auth key names. */
  constructor(private readonly storage: StoragePort, private readonly users: UserStore) {}

  // ---- pre-auth keys ----

  async createPreAuthKey(input: { userId: number | null; reusable?: boolean; ephemeral?: boolean; expiration?: Date | null; tags?: string[]; description?: string }): Promise<{ key: PreAuthKey; secret: string }> {
    if (input.userId !== null && !this.users.get(input.userId)) throw notFound('user', input.userId);
    const tags = [...new Set(input.tags ?? [])];
    for (const t of tags) { const err = checkTag(t); if (err) throw badField('aclTags', err); }
    if (input.userId === null && !tags.length) throw badField('user', 'a key without a user must carry tags');
    if (input.expiration && input.expiration.getTime() <= Date.now()) throw badField('expiration', 'must be in the future');
    const issued = issueSecret('auth');
    const key = await this.storage.preAuthKeys.create({
      userId: input.userId, reusable: Boolean(input.reusable), ephemeral: Boolean(input.ephemeral),
      expiration: input.expiration ?? null, tags: tags.sort(), description: input.description ?? '', prefix: issued.prefix, hash: issued.hash,
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
   * nodes.create or nodes.reRegister, which spend it in the registration's transaction).
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
}
