import type { Knex } from 'knex';
import {
  StorageConflictError, StorageRetryableError,
  type ApiKey, type ApiKeyRepository, type NewApiKey, type NewNode, type NewPreAuthKey, type Node,
  type NodePatch, type NodeRepository, type PendingAdmission, type PendingCaps, type PendingRegistration, type PendingRegistrationRepository,
  type PolicyRecord, type PolicyRepository, type PreAuthKey, type PreAuthKeyRepository,
  type StorageRepositories, type User, type UserRepository, type DriveGrant, type DriveGrantRepository, type DriveSource,
} from '@headway/core/ports';
import { isRetryableError, toStorageError } from './errors.js';
import { PENDING_QUOTA_LOCK } from './migrations/0006_pending_quota.js';
import { POLICY_LOCK } from './migrations/0009_dns_settings.js';
import {
  NODE_COLUMNS, apiKeyFromRow, driveGrantFromRow, jsonText, nodeFromRow, objectText, pendingRegistrationFromRow, policyFromRow,
  preAuthKeyFromRow, stringArrayText, toDate, userFromRow, type Row,
} from './rows.js';

export type SqlDialect = 'sqlite' | 'postgres' | 'mysql';

/** Executor is the knex instance or an open transaction; repositories work on either. */
export type Executor = Knex | Knex.Transaction;

/**
 * runTransaction runs fn in one transaction on `db` (knex commits when fn resolves and rolls back, rethrowing,
 * when it rejects), or inside `db` when it already is one. A deadlock or serialization failure rejects with
 * StorageRetryableError (see StoragePort.transaction).
 */
export async function runTransaction<T>(db: Executor, dialect: SqlDialect, fn: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  if (db.isTransaction) return fn(db as Knex.Transaction);
  try {
    return await db.transaction(fn);
  } catch (err) {
    if (isRetryableError(err)) {
      // The driver's message quotes the statement with its values; name only the code.
      const code = String((err as { code?: unknown }).code ?? 'busy');
      throw new StorageRetryableError(`${dialect}: transaction aborted by a concurrent one (${code}); it may be retried`, err);
    }
    throw err;
  }
}

/** POLICY_ROW_ID is the id of the single row of `policies`. */
const POLICY_ROW_ID = 1;

/** writableDate rejects Invalid Date before it reaches a driver that would store garbage or NULL. */
export function writableDate(value: Date, field: string): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    throw new TypeError(`storage: ${field} must be a valid Date`);
  }
  return value;
}

function writableDateOrNull(value: Date | null | undefined, field: string): Date | null {
  return value === null || value === undefined ? null : writableDate(value, field);
}

/**
 * insertId inserts one row and returns its generated id. The only dialect
 * difference in the package: PostgreSQL needs RETURNING to report the id, while
 * MySQL (no RETURNING) and SQLite answer with the insert id.
 */
export async function insertId(db: Executor, dialect: SqlDialect, table: string, row: Row): Promise<number> {
  if (dialect === 'postgres') {
    const rows: Array<{ id: unknown }> = await db(table).insert(row).returning('id');
    return Number(rows[0]!.id);
  }
  const ids: unknown[] = await db(table).insert(row);
  return Number(ids[0]);
}

/**
 * insertRow and updateRow write one row and give it back as stored: in the same statement where the dialect has
 * RETURNING for both (SQLite 3.35+, PostgreSQL), read again by id on MySQL/MariaDB (MariaDB has no UPDATE ...
 * RETURNING). A device's registration and its first map request each write a node: a select after each write would
 * double those queries, and on the embedded SQLite every query through knex costs the server's single thread time.
 */
async function insertRow(db: Executor, dialect: SqlDialect, table: string, row: Row): Promise<Row> {
  if (dialect !== 'mysql') {
    const rows: Row[] = await db(table).insert(row).returning('*');
    return rows[0]!;
  }
  const id = await insertId(db, dialect, table, row);
  return (await db(table).where({ id }).first()) as Row;
}

async function updateRow(db: Executor, dialect: SqlDialect, table: string, id: number, row: Row): Promise<Row | undefined> {
  if (dialect !== 'mysql') {
    const rows: Row[] = await db(table).where({ id }).update(row).returning('*');
    return rows[0];
  }
  const changed = await db(table).where({ id }).update(row);
  return changed === 0 ? undefined : ((await db(table).where({ id }).first()) as Row | undefined);
}

export async function guarded<T>(table: string, work: () => Promise<T>, fkField?: string): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw toStorageError(err, table, fkField);
  }
}

function userRepository(db: Executor, dialect: SqlDialect): UserRepository {
  const byId = async (id: number): Promise<User | undefined> => {
    const row = await db('users').where({ id }).first();
    return row ? userFromRow(row) : undefined;
  };
  return {
    async list(filter = {}) {
      const q = db('users').select('*').orderBy('id');
      if (filter.id !== undefined) q.where('id', filter.id);
      if (filter.name !== undefined) q.where('name', filter.name);
      if (filter.email !== undefined) q.where('email', filter.email);
      return (await q).map(userFromRow);
    },
    get: byId,
    async getByName(name) {
      const row = await db('users').where({ name }).first();
      return row ? userFromRow(row) : undefined;
    },
    async create(user) {
      const id = await guarded('users', () => insertId(db, dialect, 'users', {
        name: user.name,
        display_name: user.displayName ?? '',
        email: user.email ?? '',
        provider: user.provider ?? '',
        provider_id: user.providerId ?? null,
        profile_pic_url: user.profilePicUrl ?? '',
        groups: user.groups?.length ? stringArrayText(user.groups, 'users.groups') : null,
        created_at: new Date(),
      }));
      return (await byId(id))!;
    },
    async update(id, patch) {
      const row: Row = {};
      if (patch.name !== undefined) row.name = patch.name;
      if (patch.displayName !== undefined) row.display_name = patch.displayName;
      if (patch.email !== undefined) row.email = patch.email;
      if (patch.provider !== undefined) row.provider = patch.provider;
      if (patch.providerId !== undefined) row.provider_id = patch.providerId;
      if (patch.profilePicUrl !== undefined) row.profile_pic_url = patch.profilePicUrl;
      if (patch.groups !== undefined) row.groups = patch.groups.length ? stringArrayText(patch.groups, 'users.groups') : null;
      if (Object.keys(row).length > 0) {
        const changed = await guarded('users', () => db('users').where({ id }).update(row));
        if (changed === 0) return undefined;
      }
      return byId(id);
    },
    async delete(id) {
      try {
        return (await db('users').where({ id }).delete()) > 0;
      } catch (err) {
        const mapped = toStorageError(err, 'users', 'user_id');
        if (mapped instanceof StorageConflictError) {
          throw new StorageConflictError(`users: user ${id} still owns nodes; move or delete them first`, 'user_id');
        }
        throw mapped;
      }
    },
  };
}

function nodeRow(node: NodePatch): Row {
  const row: Row = {};
  for (const [field, [column, encode]] of Object.entries(NODE_COLUMNS) as Array<[keyof NodePatch, [string, (v: unknown) => unknown]]>) {
    const value = node[field];
    if (value === undefined) continue;
    if (field === 'expiry' || field === 'lastSeen') {
      row[column] = writableDateOrNull(value as Date | null, field);
    } else {
      row[column] = encode(value);
    }
  }
  return row;
}

function nodeRepository(db: Executor, dialect: SqlDialect): NodeRepository {
  const byId = async (id: number): Promise<Node | undefined> => {
    const row = await db('nodes').where({ id }).first();
    return row ? nodeFromRow(row) : undefined;
  };
  return {
    async list(filter = {}) {
      const q = db('nodes').select('*').orderBy('id');
      if (filter.userId !== undefined) q.where('user_id', filter.userId);
      return (await q).map(nodeFromRow);
    },
    get: byId,
    async getByMachineKey(machineKey) {
      const row = await db('nodes').where({ machine_key: machineKey }).first();
      return row ? nodeFromRow(row) : undefined;
    },
    async getByNodeKey(nodeKey) {
      const row = await db('nodes').where({ node_key: nodeKey }).first();
      return row ? nodeFromRow(row) : undefined;
    },
    async create(node: NewNode) {
      const now = new Date();
      const row = { ...nodeRow(node), created_at: now, updated_at: now };
      return nodeFromRow(await guarded('nodes', () => insertRow(db, dialect, 'nodes', row)));
    },
    async update(id, patch) {
      const row = { ...nodeRow(patch), updated_at: new Date() };
      const stored = await guarded('nodes', () => updateRow(db, dialect, 'nodes', id, row));
      return stored ? nodeFromRow(stored) : undefined;
    },
    async delete(id) {
      return (await db('nodes').where({ id }).delete()) > 0;
    },
  };
}

function preAuthKeyRepository(db: Executor, dialect: SqlDialect): PreAuthKeyRepository {
  const byId = async (id: number): Promise<PreAuthKey | undefined> => {
    const row = await db('pre_auth_keys').where({ id }).first();
    return row ? preAuthKeyFromRow(row) : undefined;
  };
  return {
    async list(filter = {}) {
      const q = db('pre_auth_keys').select('*').orderBy('id');
      if (filter.userId !== undefined) q.where('user_id', filter.userId);
      return (await q).map(preAuthKeyFromRow);
    },
    get: byId,
    async getByPrefix(prefix) {
      const row = await db('pre_auth_keys').where({ prefix }).first();
      return row ? preAuthKeyFromRow(row) : undefined;
    },
    async create(key: NewPreAuthKey) {
      const row: Row = {
        user_id: key.userId,
        reusable: key.reusable,
        ephemeral: key.ephemeral,
        used: false,
        expiration: writableDateOrNull(key.expiration, 'expiration'),
        tags: jsonText(key.tags ?? []),
        description: key.description ?? '',
        prefix: key.prefix,
        hash: key.hash,
        created_at: new Date(),
      };
      const id = await guarded('pre_auth_keys', () => insertId(db, dialect, 'pre_auth_keys', row), 'user_id');
      return (await byId(id))!;
    },
    async markUsed(id) {
      // The WHERE on `used` is the guard: of concurrent spenders, the database lets exactly one flip it.
      const changed = await db('pre_auth_keys').where({ id, used: false }).update({ used: true });
      return changed === 1;
    },
    async setExpiration(id, expiration) {
      const changed = await db('pre_auth_keys').where({ id })
        .update({ expiration: writableDate(expiration, 'expiration') });
      return changed > 0;
    },
    async delete(id) {
      return (await db('pre_auth_keys').where({ id }).delete()) > 0;
    },
  };
}

function apiKeyRepository(db: Executor, dialect: SqlDialect): ApiKeyRepository {
  const byId = async (id: number): Promise<ApiKey | undefined> => {
    const row = await db('api_keys').where({ id }).first();
    return row ? apiKeyFromRow(row) : undefined;
  };
  return {
    async list() {
      return (await db('api_keys').select('*').orderBy('id')).map(apiKeyFromRow);
    },
    get: byId,
    async getByPrefix(prefix) {
      const row = await db('api_keys').where({ prefix }).first();
      return row ? apiKeyFromRow(row) : undefined;
    },
    async create(key: NewApiKey) {
      const row: Row = {
        prefix: key.prefix,
        hash: key.hash,
        expiration: writableDateOrNull(key.expiration, 'expiration'),
        last_seen: null,
        created_at: new Date(),
      };
      const id = await guarded('api_keys', () => insertId(db, dialect, 'api_keys', row));
      return (await byId(id))!;
    },
    async update(id, patch) {
      const row: Row = {};
      if (patch.expiration !== undefined) row.expiration = writableDateOrNull(patch.expiration, 'expiration');
      if (patch.lastSeen !== undefined) row.last_seen = writableDateOrNull(patch.lastSeen, 'lastSeen');
      if (Object.keys(row).length === 0) return (await byId(id)) !== undefined;
      return (await db('api_keys').where({ id }).update(row)) > 0;
    },
    async delete(id) {
      return (await db('api_keys').where({ id }).delete()) > 0;
    },
  };
}

/**
 * lockPendingQuota takes the pending-registration lock for the rest of the transaction: an UPDATE of its
 * `storage_locks` row, which every putWithinQuota runs first, so they go one at a time on every database and
 * across every instance sharing it (an in-process mutex would not reach another instance). An UPDATE rather
 * than SELECT ... FOR UPDATE, though PostgreSQL and MySQL/MariaDB take the same exclusive row lock for both:
 * SQLite has no FOR UPDATE, and there a write as the first statement makes the transaction the database's
 * writer at once, so another process on the file waits (busy_timeout) instead of failing to upgrade a read.
 * What makes the counts after it exact: on PostgreSQL (READ COMMITTED) each later statement takes a new
 * snapshot, taken after the previous holder committed; on InnoDB a locking statement opens no read view, so
 * under REPEATABLE READ the transaction's snapshot is taken by its first plain read, after the lock as well.
 * Counting and then inserting without it lets concurrent callers all count the same rows and all insert,
 * whatever the isolation level short of SERIALIZABLE. A guarded counter (UPDATE ... SET n = n + 1 WHERE n < cap)
 * would need every other delete (approval, rejection, the expiry sweep, restore) to keep it right; an advisory
 * lock has no MySQL twin that ends with the transaction (GET_LOCK belongs to the pooled connection).
 */
async function lockPendingQuota(trx: Knex.Transaction): Promise<void> {
  await lockRow(trx, PENDING_QUOTA_LOCK);
}

/** lockRow takes the `storage_locks` row `name` for the rest of the transaction (see lockPendingQuota for why an UPDATE). */
export async function lockRow(trx: Knex.Transaction, name: string): Promise<void> {
  const take = () => trx('storage_locks').where({ name }).update({ turn: trx.raw('turn + 1') });
  if (await take() > 0) return;
  // The migrations seed the rows; one deleted by hand is put back (the insert waits on a concurrent one).
  await trx('storage_locks').insert({ name, turn: 0 }).onConflict('name').ignore();
  await take();
}

/** countWaiting counts the logins waiting at `now` (expires_at after it), optionally from one source only. */
async function countWaiting(trx: Knex.Transaction, now: Date, source?: string): Promise<number> {
  const q = trx('pending_registrations').where('expires_at', '>', now);
  if (source !== undefined) q.where({ source });
  const [row] = await q.count({ n: '*' });
  return Number((row as { n: unknown } | undefined)?.n ?? 0);
}

function pendingRegistrationRepository(db: Executor, dialect: SqlDialect): PendingRegistrationRepository {
  const pendingRow = (reg: PendingRegistration): Row => ({
    key: reg.key,
    machine_key: reg.machineKey,
    node_key: reg.nodeKey,
    hostinfo: objectText(reg.hostinfo, 'pending_registrations.hostinfo'),
    expires_at: writableDate(reg.expiresAt, 'expiresAt'),
    created_at: writableDate(reg.createdAt, 'createdAt'),
  });
  return {
    async get(key) {
      const row = await db('pending_registrations').where({ key }).first();
      return row ? pendingRegistrationFromRow(row) : undefined;
    },
    async put(reg: PendingRegistration) {
      await db('pending_registrations').insert(pendingRow(reg)).onConflict('key').merge();
    },
    putWithinQuota(reg: PendingRegistration, source: string, caps: PendingCaps, now: Date): Promise<PendingAdmission> {
      const row = { ...pendingRow(reg), source };
      const at = writableDate(now, 'now');
      return runTransaction(db, dialect, async (trx) => {
        await lockPendingQuota(trx);
        const mine = await trx('pending_registrations').where({ machine_key: reg.machineKey })
          .select('key', 'node_key', 'source', 'expires_at').orderBy([{ column: 'created_at' }, { column: 'key' }]);
        const live: Row[] = [];
        const replaced: Array<{ key: string; source: unknown; live: boolean }> = [];
        for (const r of mine) {
          const waiting = toDate(r.expires_at, 'pending_registrations.expires_at').getTime() > at.getTime();
          if (!waiting || r.node_key === reg.nodeKey) replaced.push({ key: String(r.key), source: r.source, live: waiting });
          else live.push(r);
        }
        while (live.length && live.length >= caps.perMachine) {
          const oldest = live.shift()!;
          replaced.push({ key: String(oldest.key), source: oldest.source, live: true });
        }
        const going = replaced.filter((r) => r.live);
        const fromSource = await countWaiting(trx, at, source) - going.filter((r) => r.source === source).length;
        if (fromSource >= caps.perSource) return { stored: false, limit: 'perSource', waiting: fromSource };
        const total = await countWaiting(trx, at) - going.length;
        if (total >= caps.total) return { stored: false, limit: 'total', waiting: total };
        if (replaced.length) await trx('pending_registrations').whereIn('key', replaced.map((r) => r.key)).delete();
        await trx('pending_registrations').insert(row);
        return { stored: true, replaced: replaced.map((r) => r.key) };
      });
    },
    async delete(key) {
      return (await db('pending_registrations').where({ key }).delete()) > 0;
    },
    async deleteByMachineKey(machineKey) {
      return db('pending_registrations').where({ machine_key: machineKey }).delete();
    },
    async deleteExpired(now) {
      return db('pending_registrations').where('expires_at', '<=', writableDate(now, 'now')).delete();
    },
  };
}

function policyRepository(db: Executor, dialect: SqlDialect): PolicyRepository {
  const read = async (ex: Executor) => {
    const row = await ex('policies').where({ id: POLICY_ROW_ID }).first();
    return row ? policyFromRow(row) : undefined;
  };
  const write = async (ex: Executor, text: string): Promise<PolicyRecord> => {
    const updatedAt = new Date();
    await ex('policies').insert({ id: POLICY_ROW_ID, text, updated_at: updatedAt }).onConflict('id').merge();
    return { text, updatedAt };
  };
  return {
    get: () => read(db),
    async set(text, opts): Promise<PolicyRecord> {
      if (typeof text !== 'string') throw new TypeError('storage: policy text must be a string');
      const check = opts?.check;
      if (!check) return write(db, text);
      // The lock, not the row, serialises conditional writes: with no policy stored yet there is no row to lock.
      return runTransaction(db, dialect, async (trx) => {
        await lockRow(trx, POLICY_LOCK);
        check(await read(trx));
        return write(trx, text);
      });
    },
  };
}

/** driveEndRow writes one end of a grant as its kind, id and name columns (also used by restore). */
export function driveEndRow(prefix: 'src' | 'dst', end: DriveSource): Row {
  const id = end.kind === 'user' || end.kind === 'node' ? end.id : null;
  const name = end.kind === 'group' || end.kind === 'tag' ? end.name : null;
  if (id !== null && !Number.isSafeInteger(id)) throw new TypeError(`storage: drive grant ${prefix} id must be an integer`);
  if (name !== null && typeof name !== 'string') throw new TypeError(`storage: drive grant ${prefix} name must be a string`);
  return { [`${prefix}_kind`]: end.kind, [`${prefix}_id`]: id, [`${prefix}_name`]: name };
}

/** driveGrantRepository keeps Taildrive grants (schema 0004); reads come back in id order. */
export function driveGrantRepository(db: Executor, dialect: SqlDialect): DriveGrantRepository {
  const byId = async (id: number) => {
    const row = await db('drive_grants').where({ id }).first();
    return row ? driveGrantFromRow(row) : undefined;
  };
  return {
    async list() {
      return (await db('drive_grants').orderBy('id')).map(driveGrantFromRow);
    },
    get: byId,
    async create(grant: DriveGrant) {
      if (grant.access !== 'ro' && grant.access !== 'rw') throw new TypeError('storage: drive grant access must be ro or rw');
      const createdAt = new Date();
      const id = await insertId(db, dialect, 'drive_grants', {
        ...driveEndRow('src', grant.src), ...driveEndRow('dst', grant.dst),
        shares: stringArrayText(grant.shares, 'drive_grants.shares'), access: grant.access, created_at: createdAt,
      });
      return (await byId(id))!;
    },
    async delete(id) {
      return (await db('drive_grants').where({ id }).delete()) > 0;
    },
    async deleteFor(end) {
      if (!Number.isSafeInteger(end.id)) throw new TypeError('storage: drive grant end id must be an integer');
      return db('drive_grants')
        .where((q) => q.where({ src_kind: end.kind, src_id: end.id }).orWhere({ dst_kind: end.kind, dst_id: end.id }))
        .delete();
    },
  };
}

/** createRepositories binds every repository to `db`, the knex instance or a transaction. */
export function createRepositories(db: Executor, dialect: SqlDialect): StorageRepositories {
  return {
    users: userRepository(db, dialect),
    nodes: nodeRepository(db, dialect),
    preAuthKeys: preAuthKeyRepository(db, dialect),
    apiKeys: apiKeyRepository(db, dialect),
    pendingRegistrations: pendingRegistrationRepository(db, dialect),
    policy: policyRepository(db, dialect),
  };
}
