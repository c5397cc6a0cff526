import { closeSync, existsSync, openSync, readSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import type { Knex } from 'knex';
import { SQLITE_MAGIC } from '@headway/core/ports';

/*
 * Reading a headscale database (0.26 to 0.29) for `headway migrate from-headscale`:
 * a SQLite file (opened read-only) or a PostgreSQL database, the two headscale
 * supports. Every table is read in one snapshot, as raw rows; headscale-db-convert.ts
 * turns them into Headway records. Nothing here writes.
 *
 * Schema differences across the supported versions (from headscale's migrations):
 * - 0.26: nodes.forced_tags (renamed to tags in 0.28); pre_auth_keys.key holds the key in
 *   plain text (no prefix/hash); tagged nodes keep the user who registered them.
 * - 0.27: same columns, tables rebuilt to schema.sql (SQLite).
 * - 0.28: pre_auth_keys.prefix + bcrypt hash (older keys keep `key`), nodes.tags.
 * - 0.29: database_versions holds the headscale version; tagged nodes have no user.
 * Before 0.26, routes lived in their own table: such a database must first be opened by
 * headscale 0.26 or later, which moves them into nodes.approved_routes.
 */

/** HeadscaleSourceError: the source is missing, not a headscale database, or of an unsupported version. */
export class HeadscaleSourceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HeadscaleSourceError';
  }
}

/** Row is one database row as the driver returns it. */
export type Row = Record<string, unknown>;

/** HeadscaleSnapshot is everything read from a headscale database. */
export interface HeadscaleSnapshot {
  /** source describes where it was read from (file path or host/database, no password). */
  source: string;
  dialect: 'sqlite' | 'postgres';
  /** version is headscale's, e.g. `0.29.2` (database_versions) or `0.27` (from the migrations it ran). */
  version: string;
  /** minor is the headscale 0.x minor version the schema corresponds to (26 to 29). */
  minor: number;
  users: Row[];
  nodes: Row[];
  preAuthKeys: Row[];
  apiKeys: Row[];
  /** policies are the rows of the policies table (database policy mode), oldest first. */
  policies: Row[];
  /** nodeTagsColumn is `tags` (0.28+) or `forced_tags` (before). */
  nodeTagsColumn: 'tags' | 'forced_tags';
}

/** MIGRATION_MINOR maps the migration that first appears in each supported release to it. */
const MIGRATION_MINOR: Array<[string, number]> = [
  ['202602201200-clear-tagged-node-user-id', 29],
  ['202511011637-preauthkey-bcrypt', 28],
  ['202507021200', 27],
  ['202502131714', 26],
];
/** KNOWN_MIGRATIONS are every migration id headscale 0.25 to 0.29.2 records; anything else is a newer headscale. */
const KNOWN_MIGRATIONS = new Set([
  '202312101416', '202312101430', '202402151347', '2024041121742', '202406021630', '202409271400', '202407191627',
  '202408181235', '202501221827', '202501311657', '202502070949', '202502131714', '202502171819', '202505091439',
  '202505141324', '202507021200', '202510311551', '202511101554-drop-old-idx', '202511011637-preauthkey-bcrypt',
  '202511122344-remove-newline-index', '202511131445-node-forced-tags-to-tags', '202601121700-migrate-hostinfo-request-tags',
  '202602201200-clear-tagged-node-user-id', '202605221435-clear-zero-time-node-expiry', '202606181200-recover-null-tags-node-user-id',
]);
export const SUPPORTED = { min: 26, max: 29 } as const;
const REQUIRED_TABLES = ['users', 'nodes', 'pre_auth_keys', 'api_keys', 'migrations'];

/** isPostgresDsn tells a PostgreSQL connection URL from a file path. */
export function isPostgresDsn(source: string): boolean {
  return /^postgres(ql)?:\/\//i.test(source);
}

/** describeDsn names a PostgreSQL URL without its password. */
function describeDsn(dsn: string): string {
  try {
    const u = new URL(dsn);
    return `postgres ${u.hostname}:${u.port || 5432}${u.pathname}`;
  } catch {
    throw new HeadscaleSourceError('the PostgreSQL connection string is not a URL (expected postgres://user:password@host:port/database)');
  }
}

/** loadKnex loads knex when an import runs, so no other command pays for it. */
async function loadKnex(): Promise<typeof import('knex').default> {
  return (await import('knex')).default;
}

async function openSqlite(path: string): Promise<Knex> {
  const file = resolve(path);
  if (!existsSync(file)) throw new HeadscaleSourceError(`${file}: no such file (give headscale's database.sqlite.path, or a postgres:// URL)`);
  if (!statSync(file).isFile()) throw new HeadscaleSourceError(`${file} is not a file`);
  const head = Buffer.alloc(16);
  const fd = openSync(file, 'r');
  try {
    readSync(fd, head, 0, 16, 0);
  } finally {
    closeSync(fd);
  }
  if (head.toString('latin1') !== SQLITE_MAGIC) throw new HeadscaleSourceError(`${file} is not a SQLite database, so not a headscale database`);
  return (await loadKnex())({
    client: 'better-sqlite3',
    connection: { filename: file, options: { readonly: true } },
    useNullAsDefault: true,
    pool: { min: 1, max: 1 },
  });
}

async function rowsOf(db: Knex | Knex.Transaction, dialect: 'sqlite' | 'postgres', sql: string, bindings: readonly unknown[] = []): Promise<Row[]> {
  const result = await db.raw(sql, bindings as Knex.RawBinding[]);
  return dialect === 'sqlite' ? (result as Row[]) : (result as { rows: Row[] }).rows;
}

async function tablesOf(db: Knex.Transaction, dialect: 'sqlite' | 'postgres'): Promise<Set<string>> {
  const rows = dialect === 'sqlite'
    ? await rowsOf(db, dialect, "select name from sqlite_master where type = 'table'")
    : await rowsOf(db, dialect, "select table_name as name from information_schema.tables where table_schema = current_schema()");
  return new Set(rows.map((r) => String(r.name)));
}

async function columnsOf(db: Knex.Transaction, dialect: 'sqlite' | 'postgres', table: string): Promise<Set<string>> {
  const rows = dialect === 'sqlite'
    ? await rowsOf(db, dialect, `select name from pragma_table_info(?)`, [table])
    : await rowsOf(db, dialect, 'select column_name as name from information_schema.columns where table_schema = current_schema() and table_name = ?', [table]);
  return new Set(rows.map((r) => String(r.name)));
}

/**
 * headscaleVersion finds which headscale last ran on the database: database_versions
 * (0.29 and later) when it holds a release version, else the newest migration it recorded.
 * Refuses a database older than 0.26 or newer than 0.29 with what to do.
 */
async function headscaleVersion(db: Knex.Transaction, dialect: 'sqlite' | 'postgres', tables: Set<string>, label: string): Promise<{ version: string; minor: number }> {
  const migrations = new Set((await rowsOf(db, dialect, 'select id from migrations')).map((r) => String(r.id)));
  let stored: string | undefined;
  if (tables.has('database_versions')) {
    const row = (await rowsOf(db, dialect, 'select version from database_versions where id = 1'))[0];
    stored = row ? String(row.version) : undefined;
  }
  const semver = stored ? /^v?(\d+)\.(\d+)\.(\d+)/.exec(stored) : null;
  if (semver) {
    const [major, minor] = [Number(semver[1]), Number(semver[2])];
    if (major !== 0 || minor > SUPPORTED.max) {
      throw new HeadscaleSourceError(`${label} was last used by headscale ${stored}; this Headway imports headscale 0.${SUPPORTED.min} to 0.${SUPPORTED.max} databases`);
    }
    if (minor < SUPPORTED.min) {
      throw new HeadscaleSourceError(`${label} was last used by headscale ${stored}; run headscale 0.${SUPPORTED.min} or later on it once (it migrates the schema), then import`);
    }
    return { version: stored!.replace(/^v/, ''), minor };
  }
  const unknown = [...migrations].filter((id) => !KNOWN_MIGRATIONS.has(id));
  if (unknown.length) {
    throw new HeadscaleSourceError(`${label} has headscale migrations this Headway does not know (${unknown.slice(0, 3).join(', ')}): a headscale newer than 0.${SUPPORTED.max}; this Headway imports 0.${SUPPORTED.min} to 0.${SUPPORTED.max}`);
  }
  const found = MIGRATION_MINOR.find(([id]) => migrations.has(id));
  if (!found || tables.has('routes')) {
    throw new HeadscaleSourceError(`${label} is from a headscale older than 0.${SUPPORTED.min} (routes are still in their own table); run headscale 0.${SUPPORTED.min} or later on it once (it migrates the schema), then import`);
  }
  return { version: `0.${found[1]}`, minor: found[1] };
}

/**
 * readHeadscaleDatabase reads a headscale database in one read-only snapshot: `source` is
 * a SQLite file path or a `postgres://` URL. Throws HeadscaleSourceError naming the
 * problem when it is missing, not headscale's, or of an unsupported version.
 */
export async function readHeadscaleDatabase(source: string): Promise<HeadscaleSnapshot> {
  const dialect = isPostgresDsn(source) ? 'postgres' : 'sqlite';
  const label = dialect === 'postgres' ? describeDsn(source) : resolve(source);
  const db = dialect === 'postgres'
    ? (await loadKnex())({ client: 'pg', connection: source, pool: { min: 0, max: 1 } })
    : await openSqlite(source);
  try {
    const config: Knex.TransactionConfig = dialect === 'postgres' ? { isolationLevel: 'repeatable read', readOnly: true } : {};
    return await db.transaction(async (trx) => {
      let tables: Set<string>;
      try {
        tables = await tablesOf(trx, dialect);
      } catch (err) {
        throw new HeadscaleSourceError(`${label}: cannot read it (${(err as Error).message})`);
      }
      const missing = REQUIRED_TABLES.filter((t) => !tables.has(t));
      if (missing.length) throw new HeadscaleSourceError(`${label} is not a headscale database (no ${missing.join(', ')} table${missing.length > 1 ? 's' : ''})`);
      const { version, minor } = await headscaleVersion(trx, dialect, tables, label);
      const nodeColumns = await columnsOf(trx, dialect, 'nodes');
      const nodeTagsColumn = nodeColumns.has('tags') ? 'tags' : 'forced_tags';
      if (!nodeColumns.has(nodeTagsColumn)) throw new HeadscaleSourceError(`${label}: the nodes table has neither a tags nor a forced_tags column`);
      const all = (table: string) => rowsOf(trx, dialect, `select * from ${table} order by id`);
      return {
        source: label, dialect, version, minor, nodeTagsColumn,
        users: await all('users'),
        nodes: await all('nodes'),
        preAuthKeys: await all('pre_auth_keys'),
        apiKeys: await all('api_keys'),
        policies: tables.has('policies') ? await all('policies') : [],
      };
    }, config);
  } catch (err) {
    if (err instanceof HeadscaleSourceError) throw err;
    throw new HeadscaleSourceError(`${label}: cannot read it as a headscale database (${(err as Error).message})`);
  } finally {
    await db.destroy();
  }
}
