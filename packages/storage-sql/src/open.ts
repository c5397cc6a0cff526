import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import knexFactory, { type Knex } from 'knex';
import type { Logger, NetworkDatabaseConfig, StoragePort } from '@headway/core/ports';
import { verifyConnection, type ConnectionTarget } from './connect.js';
import { createSqlStorage } from './storage.js';
import type { ClusterOptions } from './cluster.js';
import type { SqlMigration } from './migrations/types.js';

/*
 * The knex settings for each supported driver live here, next to the code that
 * relies on them (boolean and date handling, foreign keys), so the storage
 * contract suite in this package exercises exactly what the adapters run. The
 * adapter packages own the driver dependency and the config mapping.
 */

export interface OpenOptions {
  logger?: Logger;
  /** migrate brings the schema up to date before returning (default true). */
  migrate?: boolean;
  /** migrations overrides the schema history (tests: migrate to just before a step). */
  migrations?: readonly SqlMigration[];
  /** debugSql logs every statement at debug level (`database.debug`); otherwise at trace. */
  debugSql?: boolean;
  /** cluster tunes the change feed several instances share (PostgreSQL and MySQL/MariaDB only). */
  cluster?: ClusterOptions;
}

export interface SqliteStorageOptions extends OpenOptions {
  /** path of the database file, or `:memory:` (one private database per storage). */
  path: string;
  /** wal turns on write-ahead logging (default true): readers do not block the writer. */
  wal?: boolean;
  /** walAutocheckpoint in pages; 0 leaves SQLite's default. */
  walAutocheckpoint?: number;
  /**
   * synchronous is SQLite's sync level under WAL (default 'normal'): 'full' fsyncs every commit, which on the
   * synchronous better-sqlite3 driver stalls the whole event loop for the disk's flush time on every write
   * (a join's register and map writes among them); 'normal' syncs at checkpoints and stays consistent on a crash.
   * Without WAL SQLite's own default (full) is kept.
   */
  synchronous?: 'normal' | 'full';
  /** busyTimeoutMs is how long a write waits for another process's lock (default 5000). */
  busyTimeoutMs?: number;
}

/** NetworkConnection is a driver connection object; a URL string is parsed into one. */
export interface NetworkConnection {
  host: string;
  port: number;
  database: string;
  user: string;
  password?: string;
}

export interface NetworkStorageOptions extends OpenOptions {
  connection: string | NetworkConnection;
  /** pool bounds: max open connections, and how long an idle one lives. */
  pool?: { max?: number; idleTimeoutMillis?: number };
  /** ssl: false, true, or a libpq-style mode (`disable`, `require`, `verify-ca`, `verify-full`). */
  ssl?: boolean | string;
}

/** TlsOptions is the `ssl` value both pg and mysql2 accept. */
export type TlsOptions = false | { rejectUnauthorized: boolean; checkServerIdentity?: () => undefined };

/**
 * tlsOptions maps headscale's `ssl` setting: true means `require` (encrypt without
 * verifying, as libpq does), `verify-ca` checks the chain but not the host name.
 */
export function tlsOptions(ssl: boolean | string | undefined, field: string): TlsOptions {
  if (ssl === undefined || ssl === false) return false;
  if (ssl === true) return { rejectUnauthorized: false };
  switch (ssl.toLowerCase()) {
    case '': case 'false': case 'disable': case 'disabled': return false;
    case 'true': case 'require': case 'required': return { rejectUnauthorized: false };
    case 'verify-ca': case 'verify_ca': return { rejectUnauthorized: true, checkServerIdentity: () => undefined };
    case 'verify-full': case 'verify_identity': return { rejectUnauthorized: true };
    default:
      throw new Error(`${field}: unknown ssl mode ${JSON.stringify(ssl)}; expected false, true, disable, require, verify-ca or verify-full`);
  }
}

/** parseConnectionUrl reads `scheme://user:pass@host:port/database`; `defaultPort` fills a missing port. */
export function parseConnectionUrl(url: string, schemes: readonly string[], defaultPort: number): NetworkConnection {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(`database connection string is not a URL (expected ${schemes[0]}://user:password@host:port/database)`);
  }
  const scheme = parsed.protocol.replace(/:$/, '');
  if (!schemes.includes(scheme)) {
    throw new Error(`database connection string has scheme ${scheme}; expected ${schemes.join(' or ')}`);
  }
  const database = decodeURIComponent(parsed.pathname.replace(/^\//, ''));
  if (!parsed.hostname || !database) {
    throw new Error(`database connection string must name a host and a database (${scheme}://user:password@host:port/database)`);
  }
  return {
    host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: parsed.port ? Number(parsed.port) : defaultPort,
    database,
    user: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
  };
}

function hostPort(c: NetworkConnection): string {
  return c.host.includes(':') ? `[${c.host}]:${c.port}` : `${c.host}:${c.port}`;
}

function networkTarget(kind: string, c: NetworkConnection): ConnectionTarget {
  return { kind, address: hostPort(c), database: c.database, user: c.user };
}

/**
 * logQueries writes each SQL statement through the logger, at debug level with
 * `database.debug` and at trace otherwise. Bound values are never written (they
 * include key hashes and secrets): only their count.
 */
export function logQueries(knex: Knex, logger: Logger | undefined, debug: boolean | undefined): void {
  if (!logger) return;
  const log = debug ? logger.debug.bind(logger) : logger.trace.bind(logger);
  knex.on('query', (q: { sql?: string; bindings?: unknown[] }) => {
    log('sql', { sql: String(q.sql ?? '').replace(/\s+/g, ' '), params: q.bindings?.length ?? 0 });
  });
  knex.on('query-error', (err: Error, q: { sql?: string }) => {
    log('sql failed', { sql: String(q.sql ?? '').replace(/\s+/g, ' '), error: err.message.split('\n')[0]!.replace(/'[^']*'/g, "'?'") });
  });
}

/**
 * knexLog routes knex's own messages to the logger at debug level, first line only.
 * knex writes them to the console by default, and a failed connect printed a stack
 * trace ahead of the one FATAL line; the failure itself reaches the operator as the
 * error openXxxStorage throws.
 */
export function knexLog(logger: Logger | undefined): Knex.Config['log'] {
  const line = (m: unknown) => String(m instanceof Error ? m.message : m).split('\n')[0];
  const to = (what: string) => (m: unknown) => logger?.debug(`knex ${what}`, { message: line(m) });
  return { warn: to('warning'), error: to('error'), deprecate: to('deprecation'), debug: to('debug'), inspectionDepth: 1, enableColors: false };
}

async function finish(knex: Knex, target: ConnectionTarget, dialect: 'sqlite' | 'postgres' | 'mysql',
  describe: string, opts: OpenOptions): Promise<StoragePort> {
  logQueries(knex, opts.logger, opts.debugSql);
  await verifyConnection(knex, target);
  const storage = createSqlStorage(knex, {
    dialect,
    describe,
    ...(opts.logger ? { logger: opts.logger } : {}),
    ...(opts.migrations ? { migrations: opts.migrations } : {}),
    ...(opts.cluster ? { cluster: opts.cluster } : {}),
  });
  if (opts.migrate !== false) {
    try {
      await storage.migrate();
    } catch (err) {
      await storage.close().catch(() => undefined);
      throw err;
    }
  }
  return storage;
}

/** SqliteHandle is the slice of better-sqlite3's Database the pool hook uses. */
interface SqliteHandle {
  pragma(source: string): unknown;
  prepare(source: string): unknown;
}

/** SQLITE_STATEMENTS_CACHED bounds the prepared statements one connection keeps (least recently used go first). */
export const SQLITE_STATEMENTS_CACHED = 256;

/**
 * cacheStatements makes a better-sqlite3 connection hand back the statement it already prepared for the same
 * SQL text. knex's better-sqlite3 client prepares every query afresh (parse and plan, then thrown away), most of
 * what a small query costs. A statement is safe to reuse here: knex binds its
 * values on every run()/all() call, the driver is synchronous (no statement is mid-iteration when the next
 * query starts), and SQLite re-prepares a statement by itself when the schema changed under it. knex has no
 * setting for this, so the connection's own prepare is wrapped.
 */
export function cacheStatements(conn: SqliteHandle, limit = SQLITE_STATEMENTS_CACHED): void {
  const prepare = conn.prepare.bind(conn);
  const cache = new Map<string, unknown>();
  conn.prepare = (source: string) => {
    let stmt = cache.get(source);
    if (stmt !== undefined) {
      cache.delete(source);
      cache.set(source, stmt);
      return stmt;
    }
    stmt = prepare(source);
    cache.set(source, stmt);
    if (cache.size > limit) cache.delete(cache.keys().next().value!);
    return stmt;
  };
}

/**
 * openSqliteStorage opens (creating the parent directory of) a SQLite file through
 * better-sqlite3. Every connection turns on foreign keys (off by default in
 * SQLite, and the schema relies on them) and a busy timeout.
 */
/**
 * sqlitePragmas are the statements every SQLite connection runs when opened: foreign keys, the busy timeout,
 * and for a file with WAL the journal mode, its sync level (see SqliteStorageOptions.synchronous) and the
 * checkpoint interval. Kept apart so the settings can be checked without a driver connection.
 */
export function sqlitePragmas(opts: { memory: boolean; wal: boolean; busyTimeoutMs: number; walAutocheckpoint?: number; synchronous?: 'normal' | 'full' }): string[] {
  const out = ['foreign_keys = ON', `busy_timeout = ${Math.max(0, Math.floor(opts.busyTimeoutMs))}`];
  if (opts.memory || !opts.wal) return out;
  out.push('journal_mode = WAL', `synchronous = ${opts.synchronous === 'full' ? 'FULL' : 'NORMAL'}`);
  if (opts.walAutocheckpoint) out.push(`wal_autocheckpoint = ${Math.floor(opts.walAutocheckpoint)}`);
  return out;
}

export async function openSqliteStorage(opts: SqliteStorageOptions): Promise<StoragePort> {
  if (!opts.path) throw new Error('database.sqlite.path: a file path (or :memory:) is required');
  const memory = opts.path === ':memory:';
  const filename = memory ? opts.path : resolve(opts.path);
  if (!memory) {
    try {
      mkdirSync(dirname(filename), { recursive: true, mode: 0o700 });
      // Created 0600 here, since SQLite gives the -wal and -shm files the database file's mode.
      if (!existsSync(filename)) closeSync(openSync(filename, 'a', 0o600));
    } catch (err) {
      throw new Error(`cannot create the directory for sqlite database ${filename}: ${(err as Error).message}`);
    }
  }
  const wal = opts.wal ?? true;
  const busy = opts.busyTimeoutMs ?? 5000;
  const knex = knexFactory({
    log: knexLog(opts.logger),
    client: 'better-sqlite3',
    connection: { filename },
    useNullAsDefault: true,
    pool: {
      // better-sqlite3 is synchronous; one connection avoids SQLITE_BUSY between our own connections.
      min: 1,
      max: 1,
      afterCreate(conn: SqliteHandle, done: (err: Error | null, conn: SqliteHandle) => void) {
        try {
          for (const p of sqlitePragmas({ ...opts, memory, wal, busyTimeoutMs: busy })) conn.pragma(p);
          cacheStatements(conn);
          done(null, conn);
        } catch (err) {
          done(err as Error, conn);
        }
      },
    },
  });
  return finish(knex, { kind: 'sqlite', address: filename }, 'sqlite', `sqlite ${filename}`, opts);
}

function poolConfig(pool: NetworkStorageOptions['pool']): Knex.PoolConfig {
  return {
    // min 0: idle connections are closed after idleTimeoutMillis rather than kept forever.
    min: 0,
    max: Math.max(1, pool?.max ?? 10),
    idleTimeoutMillis: pool?.idleTimeoutMillis ?? 30_000,
  };
}

/** openPostgresStorage connects with pg, verifies the login, and migrates. */
export async function openPostgresStorage(opts: NetworkStorageOptions): Promise<StoragePort> {
  const conn = typeof opts.connection === 'string'
    ? parseConnectionUrl(opts.connection, ['postgres', 'postgresql'], 5432)
    : opts.connection;
  const ssl = tlsOptions(opts.ssl, 'database.postgres.ssl');
  const knex = knexFactory({
    log: knexLog(opts.logger),
    client: 'pg',
    connection: {
      host: conn.host,
      port: conn.port,
      database: conn.database,
      user: conn.user,
      password: conn.password ?? '',
      ssl,
      application_name: 'headway',
    },
    pool: poolConfig(opts.pool),
    acquireConnectionTimeout: 30_000,
  });
  return finish(knex, networkTarget('postgres', conn), 'postgres', `postgres ${hostPort(conn)}/${conn.database}`, opts);
}

/**
 * openMysqlStorage connects with mysql2 to MySQL 8 or MariaDB 10.11+. Dates are
 * written and read as UTC (`timezone: 'Z'`) whatever the server's zone, and the
 * connection speaks utf8mb4 so any Unicode name round-trips.
 */
export async function openMysqlStorage(opts: NetworkStorageOptions): Promise<StoragePort> {
  const conn = typeof opts.connection === 'string'
    ? parseConnectionUrl(opts.connection, ['mysql', 'mariadb'], 3306)
    : opts.connection;
  const ssl = tlsOptions(opts.ssl, 'database.mysql.ssl');
  const knex = knexFactory({
    log: knexLog(opts.logger),
    client: 'mysql2',
    connection: {
      host: conn.host,
      port: conn.port,
      database: conn.database,
      user: conn.user,
      password: conn.password ?? '',
      ...(ssl ? { ssl } : {}),
      charset: 'utf8mb4',
      timezone: 'Z',
      dateStrings: false,
      supportBigNumbers: true,
      bigNumberStrings: false,
    },
    pool: poolConfig(opts.pool),
    acquireConnectionTimeout: 30_000,
  });
  return finish(knex, networkTarget('mysql', conn), 'mysql', `mysql ${hostPort(conn)}/${conn.database}`, opts);
}

/**
 * networkOptionsFromConfig maps headscale's `database.postgres` / `database.mysql`
 * block (`section` names it in errors). Go's max_idle_conns caps idle
 * connections, which knex's pool cannot express; 0 is honoured by closing idle
 * connections after one second, otherwise conn_max_idle_time_secs applies.
 */
export function networkOptionsFromConfig(config: NetworkDatabaseConfig, section: string, logger?: Logger): NetworkStorageOptions {
  if (!config.host) throw new Error(`${section}.host: a database host is required`);
  if (!config.name) throw new Error(`${section}.name: a database name is required`);
  if (!Number.isInteger(config.port) || config.port < 1 || config.port > 65535) {
    throw new Error(`${section}.port: expected a TCP port (1-65535), got ${JSON.stringify(config.port)}`);
  }
  const idleSecs = config.conn_max_idle_time_secs > 0 ? config.conn_max_idle_time_secs : 3600;
  return {
    connection: {
      host: config.host,
      port: config.port,
      database: config.name,
      user: config.user,
      password: config.pass,
    },
    pool: {
      max: config.max_open_conns > 0 ? config.max_open_conns : 10,
      idleTimeoutMillis: config.max_idle_conns === 0 ? 1000 : idleSecs * 1000,
    },
    ssl: config.ssl,
    ...(logger ? { logger } : {}),
  };
}
