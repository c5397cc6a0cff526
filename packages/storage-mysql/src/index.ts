import { asValue } from 'awilix';
import { STORAGE, type AdapterDescriptor, type StoragePort } from '@headway/core/ports';
import { networkOptionsFromConfig, openMysqlStorage, type NetworkStorageOptions } from '@headway/storage-sql';

export type { NetworkStorageOptions, NetworkConnection } from '@headway/storage-sql';

/**
 * createMysqlStorage connects to MySQL 8 or MariaDB 10.11+ (mysql2), verifies the
 * login, migrates, and returns the StoragePort. `connection` is a
 * `mysql://user:password@host:port/database` URL or a connection object.
 */
export function createMysqlStorage(opts: NetworkStorageOptions): Promise<StoragePort> {
  return openMysqlStorage(opts);
}

/** mysqlStorageAdapter is `database.type: mysql`, configured by `database.mysql`. */
const mysqlStorageAdapter: AdapterDescriptor = {
  port: 'storage',
  id: 'mysql',
  async register(ctx) {
    const options = networkOptionsFromConfig(ctx.config.database.mysql, 'database.mysql',
      ctx.logger.child({ adapter: 'storage-mysql' }));
    options.debugSql = ctx.config.database.debug;
    if (ctx.migrate === false) options.migrate = false;
    const cluster = ctx.config.cluster as typeof ctx.config.cluster | undefined;
    if (cluster) options.cluster = { pollIntervalMs: cluster.poll_interval, retentionMs: cluster.change_retention };
    const storage = await createMysqlStorage(options);
    ctx.container.register(STORAGE, asValue(storage));
  },
};

export default mysqlStorageAdapter;
