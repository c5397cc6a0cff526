import type { Knex } from 'knex';
import { silentLogger, type Logger, type StoragePort, type StorageRepositories } from '@headway/core/ports';
import { dumpTables, readSqliteBackup, restoreTables, sqliteNativeBackup } from './backup.js';
import { dnsSettingsRepository } from './dns-settings.js';
import { MIGRATIONS, type SqlMigration } from './migrations/index.js';
import { runMigrations } from './migrate.js';
import { createClusterPort, type ClusterOptions } from './cluster.js';
import { auditRepository } from './audit.js';
import { consoleSessionRepository } from './console-sessions.js';
import { createRepositories, driveGrantRepository, runTransaction, type SqlDialect } from './repositories.js';
import { oauthClientRepository } from './oauth.js';

export interface SqlStorageOptions {
  dialect: SqlDialect;
  /** describe names the database for logs, without secrets, e.g. `postgres 127.0.0.1:5432/headway`. */
  describe: string;
  logger?: Logger;
  /** migrations defaults to the full MIGRATIONS list; tests pass a prefix of it. */
  migrations?: readonly SqlMigration[];
  /** cluster tunes the change feed (PostgreSQL and MySQL/MariaDB; SQLite has no `cluster`). */
  cluster?: ClusterOptions;
}

/**
 * createSqlStorage implements StoragePort over a knex instance the caller built
 * and owns the connection settings of; `close()` destroys that instance.
 */
export function createSqlStorage(knex: Knex, opts: SqlStorageOptions): StoragePort {
  const { dialect, describe } = opts;
  const logger = (opts.logger ?? silentLogger).child({ storage: dialect });
  const migrations = opts.migrations ?? MIGRATIONS;
  const repositories = createRepositories(knex, dialect);
  let closed = false;
  return {
    ...repositories,
    driveGrants: driveGrantRepository(knex, dialect),
    audit: auditRepository(knex, dialect),
    consoleSessions: consoleSessionRepository(knex),
    oauthClients: oauthClientRepository(knex, dialect),
    dnsSettings: dnsSettingsRepository(knex, dialect),
    ...(dialect === 'sqlite' ? {} : { cluster: createClusterPort(knex, dialect, { ...opts.cluster, logger }) }),
    async migrate() {
      const version = await runMigrations(knex, migrations);
      logger.info('database schema up to date', { database: describe, schema_version: version });
    },
    transaction<T>(fn: (tx: StorageRepositories) => Promise<T>): Promise<T> {
      return runTransaction(knex, dialect, (trx) => fn(createRepositories(trx, dialect)));
    },
    async ping() {
      await knex.raw('select 1');
    },
    describe: () => describe,
    dump: () => dumpTables(knex, dialect),
    restore: (dump, restoreOpts) => restoreTables(knex, dialect, describe, dump, restoreOpts),
    ...(dialect === 'sqlite' ? { nativeBackup: (path: string) => sqliteNativeBackup(knex, path) } : {}),
    readNativeBackup: (path) => readSqliteBackup(path),
    async close() {
      if (closed) return;
      closed = true;
      await knex.destroy();
    },
  };
}
