import { createServer } from 'node:net';
import t from 'tap';
import { createContainer } from 'awilix';
import { silentLogger, type HeadwayConfig, type NetworkDatabaseConfig, type StoragePort } from '@headway/core';
import { parseConnectionUrl } from '@headway/storage-sql';
import postgresStorageAdapter, { createPostgresStorage } from '../src/index.js';

/** closedPort returns a loopback port that nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function configWith(postgres: NetworkDatabaseConfig): HeadwayConfig {
  // Only `database` is read by the adapter; the rest of the config is irrelevant here.
  return { data_dir: '', database: { type: 'postgres', debug: false, postgres } } as unknown as HeadwayConfig;
}

function networkConfig(overrides: Partial<NetworkDatabaseConfig>): NetworkDatabaseConfig {
  return {
    host: '127.0.0.1', port: 5432, name: 'headway', user: 'headway', pass: 's3cret-pass',
    max_open_conns: 4, max_idle_conns: 2, conn_max_idle_time_secs: 60, ssl: false, ...overrides,
  };
}

t.test('descriptor', async (t) => {
  t.equal(postgresStorageAdapter.port, 'storage');
  t.equal(postgresStorageAdapter.id, 'postgres');
});

t.test('a closed port gives one message naming database, address and reason', async (t) => {
  const port = await closedPort();
  const err = await createPostgresStorage({
    connection: { host: '127.0.0.1', port, database: 'headway', user: 'headway', password: 's3cret-pass' },
  }).then(() => undefined, (e: unknown) => e as Error);
  t.equal(err?.message,
    `cannot connect to postgres at 127.0.0.1:${port} (database headway, user headway): connect ECONNREFUSED 127.0.0.1:${port}`);
  t.notMatch(err?.message ?? '', /s3cret/, 'the password is never in the message');
});

t.test('register() fails the same way and registers nothing', async (t) => {
  const port = await closedPort();
  const container = createContainer();
  await t.rejects(async () => postgresStorageAdapter.register({ container, config: configWith(networkConfig({ port })), logger: silentLogger }),
    { message: `cannot connect to postgres at 127.0.0.1:${port} (database headway, user headway): connect ECONNREFUSED 127.0.0.1:${port}` });
  t.equal(container.hasRegistration('storage'), false);
});

t.test('bad config values are named', async (t) => {
  const container = createContainer();
  await t.rejects(async () => postgresStorageAdapter.register({ container, config: configWith(networkConfig({ host: '' })), logger: silentLogger }),
    /database\.postgres\.host/);
  await t.rejects(async () => postgresStorageAdapter.register({ container, config: configWith(networkConfig({ ssl: 'sometimes' })), logger: silentLogger }),
    /database\.postgres\.ssl: unknown ssl mode "sometimes"/);
});

const url = process.env.HEADWAY_TEST_POSTGRES_URL;
t.test('against a real server', { skip: url ? false : 'HEADWAY_TEST_POSTGRES_URL not set' }, async (t) => {
  const conn = parseConnectionUrl(url!, ['postgres', 'postgresql'], 5432);
  const err = await createPostgresStorage({ connection: { ...conn, password: 'wrong-password' } })
    .then(() => undefined, (e: unknown) => e as Error);
  t.equal(err?.message, `cannot connect to postgres at ${conn.host}:${conn.port} (database ${conn.database}, user ${conn.user}): ` +
    `password authentication failed for user "${conn.user}"`);

  const container = createContainer();
  await postgresStorageAdapter.register({
    container,
    config: configWith(networkConfig({ host: conn.host, port: conn.port, name: conn.database, user: conn.user, pass: conn.password ?? '' })),
    logger: silentLogger,
  });
  const storage = container.resolve<StoragePort>('storage');
  t.teardown(() => storage.close());
  await storage.ping();
  t.equal(storage.describe(), `postgres ${conn.host}:${conn.port}/${conn.database}`);
});
