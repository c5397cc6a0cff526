import { createServer } from 'node:net';
import t from 'tap';
import { createContainer } from 'awilix';
import { silentLogger, type HeadwayConfig, type NetworkDatabaseConfig, type StoragePort } from '@headway/core';
import { parseConnectionUrl } from '@headway/storage-sql';
import mysqlStorageAdapter, { createMysqlStorage } from '../src/index.js';

/** closedPort returns a loopback port that nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function configWith(mysql: NetworkDatabaseConfig): HeadwayConfig {
  // Only `database` is read by the adapter; the rest of the config is irrelevant here.
  return { data_dir: '', database: { type: 'mysql', debug: false, mysql } } as unknown as HeadwayConfig;
}

function networkConfig(overrides: Partial<NetworkDatabaseConfig>): NetworkDatabaseConfig {
  return {
    host: '127.0.0.1', port: 3306, name: 'headway', user: 'headway', pass: 's3cret-pass',
    max_open_conns: 4, max_idle_conns: 2, conn_max_idle_time_secs: 60, ssl: false, ...overrides,
  };
}

t.test('descriptor', async (t) => {
  t.equal(mysqlStorageAdapter.port, 'storage');
  t.equal(mysqlStorageAdapter.id, 'mysql');
});

t.test('a closed port gives one message naming database, address and reason', async (t) => {
  const port = await closedPort();
  const err = await createMysqlStorage({
    connection: { host: '127.0.0.1', port, database: 'headway', user: 'headway', password: 's3cret-pass' },
  }).then(() => undefined, (e: unknown) => e as Error);
  t.equal(err?.message,
    `cannot connect to mysql at 127.0.0.1:${port} (database headway, user headway): connect ECONNREFUSED 127.0.0.1:${port}`);
  t.notMatch(err?.message ?? '', /s3cret/, 'the password is never in the message');
});

t.test('register() fails the same way and registers nothing', async (t) => {
  const port = await closedPort();
  const container = createContainer();
  await t.rejects(async () => mysqlStorageAdapter.register({ container, config: configWith(networkConfig({ port })), logger: silentLogger }),
    { message: `cannot connect to mysql at 127.0.0.1:${port} (database headway, user headway): connect ECONNREFUSED 127.0.0.1:${port}` });
  t.equal(container.hasRegistration('storage'), false);
});

t.test('bad config values are named', async (t) => {
  const container = createContainer();
  await t.rejects(async () => mysqlStorageAdapter.register({ container, config: configWith(networkConfig({ host: '' })), logger: silentLogger }),
    /database\.mysql\.host/);
  await t.rejects(async () => mysqlStorageAdapter.register({ container, config: configWith(networkConfig({ ssl: 'sometimes' })), logger: silentLogger }),
    /database\.mysql\.ssl: unknown ssl mode "sometimes"/);
});

const url = process.env.HEADWAY_TEST_MYSQL_URL;
t.test('against a real server', { skip: url ? false : 'HEADWAY_TEST_MYSQL_URL not set' }, async (t) => {
  const conn = parseConnectionUrl(url!, ['mysql', 'mariadb'], 3306);
  const err = await createMysqlStorage({ connection: { ...conn, password: 'wrong-password' } })
    .then(() => undefined, (e: unknown) => e as Error);
  t.match(err?.message, new RegExp(`^cannot connect to mysql at ${conn.host}:${conn.port} \\(database ${conn.database}, user ${conn.user}\\): ` +
    `Access denied for user '${conn.user}'@'[^']+' \\(using password: YES\\)$`));

  const container = createContainer();
  await mysqlStorageAdapter.register({
    container,
    config: configWith(networkConfig({ host: conn.host, port: conn.port, name: conn.database, user: conn.user, pass: conn.password ?? '' })),
    logger: silentLogger,
  });
  const storage = container.resolve<StoragePort>('storage');
  t.teardown(() => storage.close());
  await storage.ping();
  t.equal(storage.describe(), `mysql ${conn.host}:${conn.port}/${conn.database}`);
});
