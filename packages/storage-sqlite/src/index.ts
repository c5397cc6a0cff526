import { isAbsolute, join } from 'node:path';
import { asValue } from 'awilix';
import { STORAGE, type AdapterDescriptor, type Logger, type StoragePort } from '@headway/core/ports';
import { openSqliteStorage, type SqliteStorageOptions } from '@headway/storage-sql';

export type { SqliteStorageOptions } from '@headway/storage-sql';

/**
 * createSqliteStorage opens, verifies and migrates a SQLite database (better-sqlite3)
 * and returns the StoragePort. `path` may be `:memory:` for tests.
 */
export function createSqliteStorage(opts: SqliteStorageOptions): Promise<StoragePort> {
  return openSqliteStorage(opts);
}

/** sqliteStoragePath resolves a relative `database.sqlite.path` against `data_dir`. */
export function sqliteStoragePath(path: string, dataDir: string): string {
  if (path === ':memory:' || isAbsolute(path) || !dataDir) return path;
  return join(dataDir, path);
}

/** sqliteStorageAdapter is `database.type: sqlite`, the embedded default. */
const sqliteStorageAdapter: AdapterDescriptor = {
  port: 'storage',
  id: 'sqlite',
  async register(ctx) {
    const config = ctx.config.database.sqlite;
    const logger: Logger = ctx.logger.child({ adapter: 'storage-sqlite' });
    const path = sqliteStoragePath(config.path, ctx.config.data_dir);
    // The driver's errors ("unable to open database file", EISDIR) do not say which setting named the file.
    const storage = await createSqliteStorage({
      path,
      wal: config.write_ahead_log,
      walAutocheckpoint: config.wal_autocheckpoint,
      synchronous: config.synchronous,
      logger,
      debugSql: ctx.config.database.debug,
      ...(ctx.migrate === false ? { migrate: false } : {}),
    }).catch((err: Error) => { throw new Error(`database.sqlite.path ${path}: ${err.message}`); });
    ctx.container.register(STORAGE, asValue(storage));
  },
};

export default sqliteStorageAdapter;
