import {
  STORAGE, StorageConflictError, StorageNotEmptyError, countDump,
  type AdapterDescriptor, type RestoreOptions, type StorageDump, type ApiKey, type NewApiKey, type NewNode, type NewPreAuthKey, type Node, type NodePatch,
  type PendingRegistration, type PolicyRecord, type PreAuthKey, type StoragePort, type StorageRepositories, type User,
} from '@headway/core/ports';

/** Tables is the whole store; a transaction works on a copy and swaps it in on commit. */
interface Tables {
  users: Map<number, User>;
  nodes: Map<number, Node>;
  preAuthKeys: Map<number, PreAuthKey>;
  apiKeys: Map<number, ApiKey>;
  pending: Map<string, PendingRegistration>;
  /** pendingSources: the source address of each waiting login putWithinQuota stored (put stores none). */
  pendingSources: Map<string, string>;
  policy: PolicyRecord | undefined;
  nextId: { users: number; nodes: number; preAuthKeys: number; apiKeys: number };
}

const emptyTables = (): Tables => ({
  users: new Map(), nodes: new Map(), preAuthKeys: new Map(), apiKeys: new Map(), pending: new Map(), pendingSources: new Map(),
  policy: undefined, nextId: { users: 1, nodes: 1, preAuthKeys: 1, apiKeys: 1 },
});

/** copy hands out and takes in deep copies, so no caller can change a stored row behind the store's back. */
const copy = <T>(v: T): T => structuredClone(v);
const byId = <T extends { id: number }>(m: Map<number, T>) => [...m.values()].sort((a, b) => a.id - b.id).map(copy);

function validDate(d: Date | null | undefined, field: string): void {
  if (d instanceof Date && Number.isNaN(d.getTime())) throw new Error(`${field} must be a valid Date`);
}

/**
 * repositories implements every repository over one set of tables. Each write
 * checks uniqueness and references first and only then changes anything, so a
 * refused write leaves the tables as they were (what a database constraint does).
 */
function repositories(db: () => Tables): StorageRepositories {
  const unique = <T>(rows: Iterable<T>, self: number | undefined, pick: (r: T) => unknown, value: unknown, field: string, id: (r: T) => number) => {
    if (value === null || value === undefined) return;
    for (const r of rows) {
      if (id(r) !== self && pick(r) === value) throw new StorageConflictError(`${field} ${JSON.stringify(value)} is already taken`, field);
    }
  };
  const userExists = (userId: number | null | undefined) => {
    if (userId !== null && userId !== undefined && !db().users.has(userId)) throw new StorageConflictError(`user ${userId} does not exist`, 'user_id');
  };
  const checkNode = (n: Partial<NewNode>, self?: number) => {
    const rows = db().nodes.values();
    const all = [...rows];
    const id = (r: Node) => r.id;
    unique(all, self, (r) => r.machineKey, n.machineKey, 'machine_key', id);
    unique(all, self, (r) => r.nodeKey, n.nodeKey, 'node_key', id);
    unique(all, self, (r) => r.givenName, n.givenName, 'given_name', id);
    unique(all, self, (r) => r.ipv4, n.ipv4, 'ipv4', id);
    unique(all, self, (r) => r.ipv6, n.ipv6, 'ipv6', id);
    userExists(n.userId);
    if (n.authKeyId !== null && n.authKeyId !== undefined && !db().preAuthKeys.has(n.authKeyId)) {
      throw new StorageConflictError(`pre-auth key ${n.authKeyId} does not exist`, 'auth_key_id');
    }
    validDate(n.expiry, 'expiry');
    validDate(n.lastSeen, 'lastSeen');
  };

  return {
    users: {
      async list(filter = {}) {
        return byId(db().users).filter((u) => (filter.id === undefined || u.id === filter.id)
          && (filter.name === undefined || u.name === filter.name) && (filter.email === undefined || u.email === filter.email));
      },
      async get(id) { const u = db().users.get(id); return u && copy(u); },
      async getByName(name) { const u = [...db().users.values()].find((x) => x.name === name); return u && copy(u); },
      async create(input) {
        const t = db();
        unique(t.users.values(), undefined, (r) => r.name, input.name, 'name', (r) => r.id);
        unique(t.users.values(), undefined, (r) => r.providerId, input.providerId, 'provider_id', (r) => r.id);
        const user: User = {
          id: t.nextId.users++, name: input.name, displayName: input.displayName ?? '', email: input.email ?? '',
          provider: input.provider ?? '', providerId: input.providerId ?? null, profilePicUrl: input.profilePicUrl ?? '',
          groups: [...(input.groups ?? [])], createdAt: new Date(),
        };
        t.users.set(user.id, user);
        return copy(user);
      },
      async update(id, patch) {
        const t = db();
        const u = t.users.get(id);
        if (!u) return undefined;
        unique(t.users.values(), id, (r) => r.name, patch.name, 'name', (r) => r.id);
        unique(t.users.values(), id, (r) => r.providerId, patch.providerId, 'provider_id', (r) => r.id);
        const next = { ...u, ...Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) };
        t.users.set(id, next);
        return copy(next);
      },
      async delete(id) {
        const t = db();
        if (!t.users.has(id)) return false;
        if ([...t.nodes.values()].some((n) => n.userId === id)) throw new StorageConflictError(`user ${id} still owns nodes`, 'user_id');
        for (const k of [...t.preAuthKeys.values()]) {
          if (k.userId !== id) continue;
          t.preAuthKeys.delete(k.id);
          for (const n of t.nodes.values()) if (n.authKeyId === k.id) n.authKeyId = null;
        }
        return t.users.delete(id);
      },
    },
    nodes: {
      async list(filter = {}) { return byId(db().nodes).filter((n) => filter.userId === undefined || n.userId === filter.userId); },
      async get(id) { const n = db().nodes.get(id); return n && copy(n); },
      async getByMachineKey(k) { const n = [...db().nodes.values()].find((x) => x.machineKey === k); return n && copy(n); },
      async getByNodeKey(k) { const n = [...db().nodes.values()].find((x) => x.nodeKey === k); return n && copy(n); },
      async create(input) {
        checkNode(input);
        const t = db();
        const now = new Date();
        const node: Node = { ...copy(input), id: t.nextId.nodes++, createdAt: now, updatedAt: now };
        t.nodes.set(node.id, node);
        return copy(node);
      },
      async update(id, patch: NodePatch) {
        const t = db();
        const n = t.nodes.get(id);
        if (!n) return undefined;
        checkNode(patch, id);
        const defined = Object.fromEntries(Object.entries(copy(patch)).filter(([, v]) => v !== undefined));
        const next: Node = { ...n, ...defined, updatedAt: new Date() };
        t.nodes.set(id, next);
        return copy(next);
      },
      async delete(id) { return db().nodes.delete(id); },
    },
    preAuthKeys: {
      async list(filter = {}) { return byId(db().preAuthKeys).filter((k) => filter.userId === undefined || k.userId === filter.userId); },
      async get(id) { const k = db().preAuthKeys.get(id); return k && copy(k); },
      async getByPrefix(prefix) { const k = [...db().preAuthKeys.values()].find((x) => x.prefix === prefix); return k && copy(k); },
      async create(input: NewPreAuthKey) {
        const t = db();
        unique(t.preAuthKeys.values(), undefined, (r) => r.prefix, input.prefix, 'prefix', (r) => r.id);
        userExists(input.userId);
        validDate(input.expiration, 'expiration');
        const key: PreAuthKey = { ...copy(input), description: input.description ?? '', id: t.nextId.preAuthKeys++, used: false, createdAt: new Date() };
        t.preAuthKeys.set(key.id, key);
        return copy(key);
      },
      // markUsed checks and flips in one synchronous step: no other call can run in between.
      async markUsed(id) {
        const k = db().preAuthKeys.get(id);
        if (!k || k.used) return false;
        k.used = true;
        return true;
      },
      async setExpiration(id, expiration) {
        validDate(expiration, 'expiration');
        const k = db().preAuthKeys.get(id);
        if (!k) return false;
        k.expiration = new Date(expiration.getTime());
        return true;
      },
      async delete(id) {
        const t = db();
        if (!t.preAuthKeys.delete(id)) return false;
        for (const n of t.nodes.values()) if (n.authKeyId === id) n.authKeyId = null;
        return true;
      },
    },
    apiKeys: {
      async list() { return byId(db().apiKeys); },
      async get(id) { const k = db().apiKeys.get(id); return k && copy(k); },
      async getByPrefix(prefix) { const k = [...db().apiKeys.values()].find((x) => x.prefix === prefix); return k && copy(k); },
      async create(input: NewApiKey) {
        const t = db();
        unique(t.apiKeys.values(), undefined, (r) => r.prefix, input.prefix, 'prefix', (r) => r.id);
        validDate(input.expiration, 'expiration');
        const key: ApiKey = { ...copy(input), id: t.nextId.apiKeys++, lastSeen: null, createdAt: new Date() };
        t.apiKeys.set(key.id, key);
        return copy(key);
      },
      async update(id, patch) {
        validDate(patch.expiration, 'expiration');
        validDate(patch.lastSeen, 'lastSeen');
        const k = db().apiKeys.get(id);
        if (!k) return false;
        if (patch.expiration !== undefined) k.expiration = copy(patch.expiration);
        if (patch.lastSeen !== undefined) k.lastSeen = copy(patch.lastSeen);
        return true;
      },
      async delete(id) { return db().apiKeys.delete(id); },
    },
    pendingRegistrations: {
      async get(key) { const r = db().pending.get(key); return r && copy(r); },
      async put(reg) { validDate(reg.expiresAt, 'expiresAt'); db().pending.set(reg.key, copy(reg)); db().pendingSources.delete(reg.key); },
      // Calls run one at a time and nothing below awaits, so the count and the write cannot be split.
      async putWithinQuota(reg, source, caps, now) {
        validDate(reg.expiresAt, 'expiresAt');
        const t = db();
        const waiting = (r: PendingRegistration) => r.expiresAt.getTime() > now.getTime();
        const mine = [...t.pending.values()].filter((r) => r.machineKey === reg.machineKey)
          .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
        const replaced = mine.filter((r) => !waiting(r) || r.nodeKey === reg.nodeKey);
        const live = mine.filter((r) => !replaced.includes(r));
        while (live.length && live.length >= caps.perMachine) replaced.push(live.shift()!);
        const going = new Set(replaced.filter(waiting).map((r) => r.key));
        const counted = [...t.pending.values()].filter((r) => waiting(r) && !going.has(r.key));
        const fromSource = counted.filter((r) => t.pendingSources.get(r.key) === source).length;
        if (fromSource >= caps.perSource) return { stored: false, limit: 'perSource', waiting: fromSource };
        if (counted.length >= caps.total) return { stored: false, limit: 'total', waiting: counted.length };
        for (const r of replaced) { t.pending.delete(r.key); t.pendingSources.delete(r.key); }
        t.pending.set(reg.key, copy(reg));
        t.pendingSources.set(reg.key, source);
        return { stored: true, replaced: replaced.map((r) => r.key) };
      },
      async delete(key) { db().pendingSources.delete(key); return db().pending.delete(key); },
      async deleteByMachineKey(machineKey) {
        let n = 0;
        for (const [k, r] of db().pending) if (r.machineKey === machineKey) { db().pending.delete(k); db().pendingSources.delete(k); n++; }
        return n;
      },
      async deleteExpired(now) {
        let n = 0;
        for (const [k, r] of db().pending) if (r.expiresAt.getTime() <= now.getTime()) { db().pending.delete(k); db().pendingSources.delete(k); n++; }
        return n;
      },
    },
    policy: {
      async get() { const p = db().policy; return p && copy(p); },
      async set(text, opts) {
        // Calls run one at a time, so the check and the write cannot be split by another set.
        opts?.check?.(db().policy && copy(db().policy!));
        const p = { text, updatedAt: new Date() };
        db().policy = p;
        return copy(p);
      },
    },
  };
}

/**
 * MemoryStorage keeps everything in process memory and loses it at exit: a
 * skeleton to start a storage adapter from, and a store for tests. Calls run one
 * at a time (a promise queue), so a transaction sees no one else's writes: it
 * works on a copy of the tables and swaps the copy in only when its function
 * resolves. As on SQLite, a transaction's function must use only `tx`.
 */
export class MemoryStorage implements StoragePort {
  private tables = emptyTables();
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  private readonly direct = repositories(() => this.tables);
  readonly users; readonly nodes; readonly preAuthKeys; readonly apiKeys; readonly pendingRegistrations; readonly policy;

  constructor() {
    // Every direct call waits its turn behind running transactions.
    const serial = <R extends object>(repo: R): R => Object.fromEntries(Object.entries(repo).map(([name, fn]) =>
      [name, (...args: unknown[]) => this.exclusive(() => (fn as (...a: unknown[]) => Promise<unknown>)(...args))])) as R;
    this.users = serial(this.direct.users);
    this.nodes = serial(this.direct.nodes);
    this.preAuthKeys = serial(this.direct.preAuthKeys);
    this.apiKeys = serial(this.direct.apiKeys);
    this.pendingRegistrations = serial(this.direct.pendingRegistrations);
    this.policy = serial(this.direct.policy);
  }

  /** exclusive runs fn after every call queued before it, and before any queued after. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new Error('memory storage is closed'));
    const run = this.queue.then(fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  async migrate(): Promise<void> { /* nothing to migrate: the schema is the code */ }

  transaction<T>(fn: (tx: StorageRepositories) => Promise<T>): Promise<T> {
    return this.exclusive(async () => {
      const draft = copy(this.tables);
      const result = await fn(repositories(() => draft));
      this.tables = draft;
      return result;
    });
  }

  async ping(): Promise<void> {
    if (this.closed) throw new Error('memory storage is closed');
  }

  describe(): string { return 'memory (nothing is kept after exit)'; }

  /** dump copies the tables between two queued calls, so it sees no half-done transaction. */
  dump(): Promise<StorageDump> {
    return this.exclusive(async () => {
      const t = this.tables;
      return {
        kind: 'memory', schemaVersion: 0,
        users: byId(t.users), preAuthKeys: byId(t.preAuthKeys),
        nodes: byId(t.nodes).map(({ damaged: _damaged, ...n }) => n),
        apiKeys: byId(t.apiKeys),
        pendingRegistrations: [...t.pending.values()].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0)).map(copy),
        policy: t.policy ? copy(t.policy) : null,
      };
    });
  }

  /**
   * restore builds fresh tables through the repositories' own checks (unique keys and
   * names, existing references), moving each row to the id the dump gives it, and
   * swaps them in only when all of it holds: a refused restore leaves the store as it was.
   */
  restore(dump: StorageDump, opts: RestoreOptions = {}): Promise<void> {
    return this.exclusive(async () => {
      const t = this.tables;
      const counts = countDump({
        users: [...t.users.values()], nodes: [...t.nodes.values()], preAuthKeys: [...t.preAuthKeys.values()],
        apiKeys: [...t.apiKeys.values()], pendingRegistrations: [...t.pending.values()], policy: t.policy ?? null,
      });
      if (Object.values(counts).some((n) => n > 0) && !opts.replace) throw new StorageNotEmptyError(this.describe(), counts);
      const draft = emptyTables();
      // Rows are created under ids far above any restored one, then moved to their own.
      const temp = 2 ** 52;
      draft.nextId = { users: temp, nodes: temp, preAuthKeys: temp, apiKeys: temp };
      const repos = repositories(() => draft);
      const adopt = async <T extends { id: number }>(m: Map<number, T>, row: T, table: string, create: () => Promise<{ id: number }>) => {
        if (m.has(row.id)) throw new StorageConflictError(`${table}: id ${row.id} appears twice`, 'id');
        m.delete((await create()).id);
        m.set(row.id, copy(row));
      };
      for (const u of dump.users) await adopt(draft.users, u, 'users', () => repos.users.create(u));
      for (const k of dump.preAuthKeys) await adopt(draft.preAuthKeys, k, 'preAuthKeys', () => repos.preAuthKeys.create(k));
      for (const n of dump.nodes) await adopt(draft.nodes, n, 'nodes', () => repos.nodes.create(n));
      for (const k of dump.apiKeys) await adopt(draft.apiKeys, k, 'apiKeys', () => repos.apiKeys.create(k));
      for (const r of dump.pendingRegistrations) await repos.pendingRegistrations.put(r);
      draft.policy = dump.policy ? copy(dump.policy) : undefined;
      const next = (m: Map<number, unknown>) => Math.max(0, ...m.keys()) + 1;
      draft.nextId = { users: next(draft.users), nodes: next(draft.nodes), preAuthKeys: next(draft.preAuthKeys), apiKeys: next(draft.apiKeys) };
      this.tables = draft;
    });
  }

  async close(): Promise<void> { this.closed = true; }
}

/** memoryStorageAdapter is `database.type: "@headway-examples/storage-memory"`. */
const memoryStorageAdapter: AdapterDescriptor = {
  port: 'storage',
  id: 'memory',
  register({ container, logger }) {
    logger.warn('storage is in memory: every user, node and key is lost when the server stops');
    const storage = new MemoryStorage();
    container.register(STORAGE, { resolve: () => storage, lifetime: 'SINGLETON' });
  },
};
export default memoryStorageAdapter;
