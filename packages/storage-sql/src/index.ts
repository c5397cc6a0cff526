export { createSqlStorage, type SqlStorageOptions } from './storage.js';
export { createRepositories, type SqlDialect, type Executor } from './repositories.js';
export { runMigrations, readSchemaVersion, MIGRATIONS_TABLE } from './migrate.js';
export { MIGRATIONS, LATEST_SCHEMA_VERSION, type SqlMigration } from './migrations/index.js';
export { toStorageError } from './errors.js';
export { describeConnectionFailure, verifyConnection, type ConnectionTarget } from './connect.js';
export {
  openSqliteStorage, sqlitePragmas, openPostgresStorage, openMysqlStorage, networkOptionsFromConfig, parseConnectionUrl, tlsOptions,
  type OpenOptions, type SqliteStorageOptions, type NetworkStorageOptions, type NetworkConnection, type TlsOptions,
} from './open.js';
export { dumpTables, restoreTables, readSqliteBackup, sqliteNativeBackup, isSqliteFile } from './backup.js';
export { createClusterPort, type ClusterOptions } from './cluster.js';
