import { closeSync, copyFileSync, existsSync, mkdtempSync, openSync, readSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import knexFactory, { type Knex } from 'knex';
import {
  BackupFormatError, SQLITE_MAGIC, StorageNotEmptyError, StorageVersionError,
  type Node, type RestoreOptions, type StorageCounts, type StorageDump,
} from '@headway/core/ports';
import { toStorageError } from './errors.js';
import { readSchemaVersion, runMigrations } from './migrate.js';
import { LATEST_SCHEMA_VERSION, MIGRATIONS } from './migrations/index.js';
import { DNS_SETTINGS_ROW_ID, dnsSettingsFromRow, settingsText } from './dns-settings.js';
import { driveEndRow, type Executor, type SqlDialect } from './repositories.js';
import {
  NODE_COLUMNS, apiKeyFromRow, driveGrantFromRow, nodeFromRow, oauthClientFromRow, objectText, pendingRegistrationFromRow, policyFromRow,
  preAuthKeyFromRow, stringArrayText, userFromRow, type Row,
} from './rows.js';

/*
 * Dump and restore for every SQL dialect, behind StoragePort.dump/restore: the
 * logical backup of `headway db backup` (JSON for PostgreSQL and MySQL, no
 * pg_dump or mysqldump needed) and its ID-preserving import.
 */

/** DATA_TABLES in restore order (referenced rows first); deletion runs in reverse. */
const DATA_TABLES = ['users', 'pre_auth_keys', 'nodes', 'api_keys', 'pending_registrations', 'drive_grants', 'oauth_clients', 'policies', 'dns_settings'] as const;
/** TRANSIENT_TABLES are not backed up (OAuth access tokens live an hour) but are emptied by a replacing restore, first. */
const TRANSIENT_TABLES = ['oauth_tokens'] as const;
/** SERIAL_TABLES have an auto-increment `id` whose counter must pass the restored ids. */
const SERIAL_TABLES = ['users', 'pre_auth_keys', 'nodes', 'api_keys', 'drive_grants', 'oauth_clients'] as const;
/** CHUNK rows per INSERT keeps every statement under each driver's bound-parameter limit. */
const CHUNK = 200;

/**
 * snapshotConfig is the transaction that makes a dump consistent. PostgreSQL: a
 * read-only REPEATABLE READ transaction sees one snapshot for all its statements.
 * MySQL/MariaDB (InnoDB): REPEATABLE READ fixes the snapshot at the first read (knex
 * would write `READ ONLY` without the comma MySQL needs, so it is left out). SQLite
 * ignores isolation levels: a read transaction in WAL mode is a snapshot already.
 */
function snapshotConfig(dialect: SqlDialect): Knex.TransactionConfig {
  if (dialect === 'postgres') return { isolationLevel: 'repeatable read', readOnly: true };
  if (dialect === 'mysql') return { isolationLevel: 'repeatable read' };
  return {};
}

function withoutDamage(n: Node): Node {
  const { damaged: _damaged, ...rest } = n;
  return rest;
}

/** dumpTables reads every table in one snapshot transaction (see snapshotConfig). */
export async function dumpTables(knex: Knex, dialect: SqlDialect): Promise<StorageDump> {
  return knex.transaction(async (trx) => {
    const schemaVersion = await readSchemaVersion(trx as unknown as Knex);
    const all = (table: string, order: string) => trx(table).select('*').orderBy(order) as Promise<Row[]>;
    const users = (await all('users', 'id')).map(userFromRow);
    const preAuthKeys = (await all('pre_auth_keys', 'id')).map(preAuthKeyFromRow);
    const nodes = (await all('nodes', 'id')).map(nodeFromRow).map(withoutDamage);
    const apiKeys = (await all('api_keys', 'id')).map(apiKeyFromRow);
    const pendingRegistrations = (await all('pending_registrations', 'key')).map(pendingRegistrationFromRow);
    const driveGrants = (await all('drive_grants', 'id')).map(driveGrantFromRow);
    const oauthClients = (await all('oauth_clients', 'id')).map(oauthClientFromRow);
    const policyRow = await trx('policies').where({ id: 1 }).first();
    const dnsRow = await trx('dns_settings').where({ id: DNS_SETTINGS_ROW_ID }).first();
    return {
      kind: dialect, schemaVersion, users, preAuthKeys, nodes, apiKeys, pendingRegistrations, driveGrants, oauthClients,
      policy: policyRow ? policyFromRow(policyRow) : null,
      dnsSettings: dnsRow ? dnsSettingsFromRow(dnsRow) : null,
    };
  }, snapshotConfig(dialect));
}

/** countTables counts the rows of every data table but dns_settings (seeded at start), for the emptiness check. */
async function countTables(db: Executor): Promise<StorageCounts> {
  const count = async (table: string) => Number(((await db(table).count({ n: '*' })) as Array<{ n: unknown }>)[0]!.n);
  return {
    users: await count('users'), nodes: await count('nodes'), preAuthKeys: await count('pre_auth_keys'),
    apiKeys: await count('api_keys'), pendingRegistrations: await count('pending_registrations'), policy: await count('policies'),
    driveGrants: await count('drive_grants'), oauthClients: await count('oauth_clients'),
  };
}

function date(value: Date, field: string): Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) throw new TypeError(`restore: ${field} must be a valid Date`);
  return value;
}
const dateOrNull = (value: Date | null, field: string) => (value === null || value === undefined ? null : date(value, field));

/** rowsOf turns a dump into rows per table, with the same encoders the repositories write with. */
function rowsOf(dump: StorageDump): Record<(typeof DATA_TABLES)[number], Row[]> {
  return {
    users: dump.users.map((u) => ({
      id: u.id, name: u.name, display_name: u.displayName, email: u.email, profile_pic_url: u.profilePicUrl ?? '', provider: u.provider ?? '', provider_id: u.providerId ?? null, groups: u.groups?.length ? stringArrayText(u.groups, 'users.groups') : null, created_at: date(u.createdAt, `users[${u.id}].createdAt`),
    })),
    pre_auth_keys: dump.preAuthKeys.map((k) => ({
      id: k.id, user_id: k.userId, reusable: k.reusable, ephemeral: k.ephemeral, used: k.used,
      expiration: dateOrNull(k.expiration, `preAuthKeys[${k.id}].expiration`), tags: stringArrayText(k.tags, 'pre_auth_keys.tags'),
      description: k.description ?? '', prefix: k.prefix, hash: k.hash, created_at: date(k.createdAt, `preAuthKeys[${k.id}].createdAt`),
    })),
    nodes: dump.nodes.map((n) => {
      const row: Row = { id: n.id };
      for (const [field, [column, encode]] of Object.entries(NODE_COLUMNS) as Array<[keyof Node, [string, (v: unknown) => unknown]]>) {
        const value = n[field];
        row[column] = field === 'expiry' || field === 'lastSeen' ? dateOrNull(value as Date | null, `nodes[${n.id}].${field}`) : encode(value);
      }
      row.created_at = date(n.createdAt, `nodes[${n.id}].createdAt`);
      row.updated_at = date(n.updatedAt, `nodes[${n.id}].updatedAt`);
      return row;
    }),
    api_keys: dump.apiKeys.map((k) => ({
      id: k.id, prefix: k.prefix, hash: k.hash, expiration: dateOrNull(k.expiration, `apiKeys[${k.id}].expiration`),
      last_seen: dateOrNull(k.lastSeen, `apiKeys[${k.id}].lastSeen`), created_at: date(k.createdAt, `apiKeys[${k.id}].createdAt`),
    })),
    pending_registrations: dump.pendingRegistrations.map((r) => ({
      key: r.key, machine_key: r.machineKey, node_key: r.nodeKey, hostinfo: objectText(r.hostinfo, 'pending_registrations.hostinfo'),
      expires_at: date(r.expiresAt, `pendingRegistrations[${r.key}].expiresAt`), created_at: date(r.createdAt, `pendingRegistrations[${r.key}].createdAt`),
    })),
    drive_grants: (dump.driveGrants ?? []).map((g) => ({
      id: g.id, ...driveEndRow('src', g.src), ...driveEndRow('dst', g.dst),
      shares: stringArrayText(g.shares, 'drive_grants.shares'), access: g.access, created_at: date(g.createdAt, `driveGrants[${g.id}].createdAt`),
    })),
    oauth_clients: (dump.oauthClients ?? []).map((c) => ({
      id: c.id, client_id: c.clientId, hash: c.hash, description: c.description, scopes: stringArrayText(c.scopes, 'oauth_clients.scopes'),
      tags: stringArrayText(c.tags, 'oauth_clients.tags'), created_at: date(c.createdAt, `oauthClients[${c.id}].createdAt`),
      last_used: dateOrNull(c.lastUsed, `oauthClients[${c.id}].lastUsed`),
    })),
    policies: dump.policy ? [{ id: 1, text: dump.policy.text, updated_at: date(dump.policy.updatedAt, 'policy.updatedAt') }] : [],
    dns_settings: dump.dnsSettings
      ? [{ id: DNS_SETTINGS_ROW_ID, settings: settingsText(dump.dnsSettings.settings), updated_at: date(dump.dnsSettings.updatedAt, 'dnsSettings.updatedAt') }] : [],
  };
}

/**
 * resetCounters moves each id counter past the restored ids. PostgreSQL sequences do
 * not notice explicit ids, so they are set to max(id) + 1. InnoDB raises
 * AUTO_INCREMENT itself on an explicit id (and ALTER TABLE would commit the
 * transaction early), and SQLite's AUTOINCREMENT records the largest id it saw in
 * sqlite_sequence: neither needs a statement.
 */
async function resetCounters(trx: Knex.Transaction, dialect: SqlDialect): Promise<void> {
  if (dialect !== 'postgres') return;
  for (const table of SERIAL_TABLES) {
    await trx.raw(`select setval(pg_get_serial_sequence(?, 'id'), coalesce((select max(id) from ??), 0) + 1, false)`, [table, table]);
  }
}

/**
 * restoreTables writes a dump in one transaction (see StoragePort.restore): refuses a
 * non-empty database unless `replace`, inserts every table in reference order with
 * the ids and hashes it carries, then resets the id counters. A failure rolls it all back.
 */
export async function restoreTables(knex: Knex, dialect: SqlDialect, describe: string, dump: StorageDump,
  opts: RestoreOptions = {}): Promise<void> {
  const rows = rowsOf(dump);
  await knex.transaction(async (trx) => {
    const counts = await countTables(trx);
    if (Object.values(counts).some((n) => n > 0)) {
      if (!opts.replace) throw new StorageNotEmptyError(describe, counts);
      for (const table of [...TRANSIENT_TABLES, ...[...DATA_TABLES].reverse()]) await trx(table).delete();
    }
    // DNS settings a server seeded from its config file at start do not make the database "not empty": the backup's replace them.
    if (rows.dns_settings.length) await trx('dns_settings').delete();
    for (const table of DATA_TABLES) {
      for (let i = 0; i < rows[table].length; i += CHUNK) {
        try {
          await trx(table).insert(rows[table].slice(i, i + CHUNK));
        } catch (err) {
          throw toStorageError(err, table);
        }
      }
    }
    await resetCounters(trx, dialect);
  });
}

/**
 * sqliteNativeBackup copies a SQLite database with the online backup API on the
 * storage's own connection, so pages still in the WAL are included (a file copy of
 * the database would miss them). All pages go in one step, under one read lock: the
 * copy is the database as of one instant, however busy other processes are.
 */
export async function sqliteNativeBackup(knex: Knex, path: string): Promise<void> {
  const client = knex.client as unknown as {
    acquireConnection(): Promise<{ backup(file: string, opts: { progress(): number }): Promise<unknown> }>;
    releaseConnection(conn: unknown): Promise<void>;
  };
  const conn = await client.acquireConnection();
  try {
    await conn.backup(path, { progress: () => 0x7fffffff });
  } finally {
    await client.releaseConnection(conn);
  }
  await dropSignIns(path);
}

/** SIGN_IN_TABLES hold the admin console's sessions and links: never part of a backup, so never restored. */
const SIGN_IN_TABLES = ['console_sessions', 'console_links'] as const;

/**
 * dropSignIns empties the console's sign-in tables in a native backup file and vacuums it, so not even the freed
 * pages keep a session's row.
 */
async function dropSignIns(path: string): Promise<void> {
  const copy = knexFactory({ client: 'better-sqlite3', connection: { filename: path }, useNullAsDefault: true, pool: { min: 1, max: 1 } });
  try {
    for (const table of SIGN_IN_TABLES) if (await copy.schema.hasTable(table)) await copy(table).delete();
    await copy.raw('vacuum');
  } finally {
    await copy.destroy();
  }
}

/** isSqliteFile reads the 16-byte header every SQLite database starts with. */
export function isSqliteFile(path: string): boolean {
  return readHeader(path).subarray(0, 16).toString('latin1') === SQLITE_MAGIC;
}

function readHeader(path: string): Buffer {
  const fd = openSync(path, 'r');
  try {
    const head = Buffer.alloc(100);
    const n = readSync(fd, head, 0, 100, 0);
    return head.subarray(0, n);
  } finally {
    closeSync(fd);
  }
}

/**
 * sqliteShortBy says how many bytes a SQLite file lacks against the size its header
 * records (page size times page count), 0 when complete: a cut file may otherwise
 * read as a smaller, silently incomplete database.
 */
function sqliteShortBy(path: string): number {
  const head = readHeader(path);
  if (head.length < 32) return 1;
  const raw = head.readUInt16BE(16);
  const pageSize = raw === 1 ? 65536 : raw;
  const pages = head.readUInt32BE(28);
  return Math.max(0, pageSize * pages - statSync(path).size);
}

/**
 * readSqliteBackup dumps a SQLite backup file without touching it: it works on a
 * private copy (with its -wal, if one lies beside it), refuses a file that is not a
 * Headway database or was written by a newer one, and brings an older schema up to
 * date on the copy before reading. Any SQL storage can call it, so a SQLite backup
 * restores into PostgreSQL or MySQL too.
 */
export async function readSqliteBackup(path: string): Promise<StorageDump> {
  if (!existsSync(path)) throw new BackupFormatError(`${path}: no such file`);
  if (!isSqliteFile(path)) throw new BackupFormatError(`${path} is not a SQLite database`);
  const short = existsSync(`${path}-wal`) ? 0 : sqliteShortBy(path);
  if (short > 0) throw new BackupFormatError(`${path} is a SQLite database cut short by ${short} bytes (is the file truncated?)`);
  const dir = mkdtempSync(join(tmpdir(), 'headway-restore-'));
  const copy = join(dir, 'backup.sqlite');
  let knex: Knex | undefined;
  try {
    copyFileSync(path, copy);
    if (existsSync(`${path}-wal`)) copyFileSync(`${path}-wal`, `${copy}-wal`);
    knex = knexFactory({ client: 'better-sqlite3', connection: { filename: copy }, useNullAsDefault: true, pool: { min: 1, max: 1 } });
    let version: number;
    try {
      version = await readSchemaVersion(knex);
    } catch (err) {
      throw new BackupFormatError(`${path} is not a readable SQLite database: ${(err as Error).message.split('\n')[0]}`);
    }
    if (version === 0) throw new BackupFormatError(`${path} is a SQLite database but not a Headway one (it has no schema_version)`);
    if (version > LATEST_SCHEMA_VERSION) throw new StorageVersionError(version, LATEST_SCHEMA_VERSION);
    const check = (await knex.raw('pragma quick_check')) as Array<Record<string, unknown>>;
    const problems = check.map((r) => String(Object.values(r)[0])).filter((v) => v !== 'ok');
    if (problems.length) throw new BackupFormatError(`${path} is a damaged SQLite database: ${problems.slice(0, 3).join('; ')}`);
    if (version < LATEST_SCHEMA_VERSION) await runMigrations(knex, MIGRATIONS);
    return await dumpTables(knex, 'sqlite');
  } finally {
    await knex?.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}
