import { asValue } from 'awilix';
import { STORAGE, type AdapterDescriptor, type StoragePort } from '@headway/core/ports';
import { networkOptionsFromConfig, openPostgresStorage, type NetworkStorageOptions } from '@headway/storage-sql';

export type { NetworkStorageOptions, NetworkConnection } from '@headway/storage-sql';

/**
 * createPostgresStorage connects to PostgreSQL 13+ (pg), verifies the login,
 * migrates, and returns the StoragePort. `connection` is a
 * `postgres://user:password@host:port/database` URL or a connection object.
 */
export function createPostgresStorage(opts: NetworkStorageOptions): Promise<StoragePort> {
  return openPostgresStorage(opts);
}

/** postgresStorageAdapter is `database.type: postgres`, configured by `database.postgres`. */
const postgresStorageAdapter: AdapterDescriptor = {
  port: 'storage',
  id: 'postgres',
  async register(ctx) {
    const options = networkOptionsFromConfig(ctx.config.database.postgres, 'database.postgres',
      ctx.logger.child({ adapter: 'storage-postgres' }));
    options.debugSql = ctx.config.database.debug;
    if (ctx.migrate === false) options.migrate = false;
    const cluster = ctx.config.cluster as typeof ctx.config.cluster | undefined;
    if (cluster) options.cluster = { pollIntervalMs: cluster.poll_interval, retentionMs: cluster.change_retention };
    const storage = await createPostgresStorage(options);
    ctx.container.register(STORAGE, asValue(storage));
  },
};

export default postgresStorageAdapter;
