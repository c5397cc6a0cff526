import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createContainer } from 'awilix';
import { silentLogger, type HeadwayConfig, type SqliteConfig, type StoragePort } from '@headway/core';
import { sqlitePragmas } from '@headway/storage-sql';
import sqliteStorageAdapter, { createSqliteStorage, sqliteStoragePath } from '../src/index.js';

function configWith(sqlite: SqliteConfig, dataDir: string): HeadwayConfig {
  // Only `data_dir` and `database` are read by the adapter.
  return { data_dir: dataDir, database: { type: 'sqlite', debug: false, sqlite } } as unknown as HeadwayConfig;
}

const dir = mkdtempSync(join(tmpdir(), 'headway-sqlite-adapter-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

t.test('descriptor', async (t) => {
  t.equal(sqliteStorageAdapter.port, 'storage');
  t.equal(sqliteStorageAdapter.id, 'sqlite');
});

t.test('relative paths live under data_dir', async (t) => {
  t.equal(sqliteStoragePath('db.sqlite', '/var/lib/headway'), '/var/lib/headway/db.sqlite');
  t.equal(sqliteStoragePath('/abs/db.sqlite', '/var/lib/headway'), '/abs/db.sqlite');
  t.equal(sqliteStoragePath(':memory:', '/var/lib/headway'), ':memory:');
});

t.test('register() creates the directory, uses WAL, migrates and registers the port', async (t) => {
  const container = createContainer();
  await sqliteStorageAdapter.register({
    container,
    config: configWith({ path: 'state/db.sqlite', write_ahead_log: true, wal_autocheckpoint: 1000, synchronous: 'normal' }, dir),
    logger: silentLogger,
  });
  const storage = container.resolve<StoragePort>('storage');
  t.teardown(() => storage.close());
  const path = join(dir, 'state', 'db.sqlite');
  t.equal(storage.describe(), `sqlite ${path}`);
  await storage.users.create({ name: 'wal-check' });
  t.ok(existsSync(`${path}-wal`), 'a write goes to the write-ahead log');
  await storage.ping();
});

t.test('synchronous: WAL files sync at checkpoints unless full is asked for; no WAL keeps SQLite\'s default', async (t) => {
  const base = { memory: false, wal: true, busyTimeoutMs: 5000, walAutocheckpoint: 1000 };
  t.same(sqlitePragmas(base), ['foreign_keys = ON', 'busy_timeout = 5000', 'journal_mode = WAL', 'synchronous = NORMAL', 'wal_autocheckpoint = 1000']);
  t.ok(sqlitePragmas({ ...base, synchronous: 'full' }).includes('synchronous = FULL'));
  t.notOk(sqlitePragmas({ ...base, wal: false }).some((p) => p.startsWith('synchronous')), 'rollback journal: SQLite default');
  t.notOk(sqlitePragmas({ ...base, memory: true }).some((p) => p.startsWith('synchronous')), 'memory: nothing to sync');
});

t.test('write_ahead_log: false keeps the rollback journal', async (t) => {
  const path = join(dir, 'nowal', 'db.sqlite');
  const storage = await createSqliteStorage({ path, wal: false });
  t.teardown(() => storage.close());
  await storage.users.create({ name: 'journal' });
  t.notOk(existsSync(`${path}-wal`), 'no -wal file');
});

t.test('the same file keeps its data across opens', async (t) => {
  const path = join(dir, 'reopen.sqlite');
  const first = await createSqliteStorage({ path });
  const user = await first.users.create({ name: 'persisted' });
  await first.close();
  const second = await createSqliteStorage({ path });
  t.teardown(() => second.close());
  t.same(await second.users.getByName('persisted'), user);
});

t.test('an impossible path is one clear error', async (t) => {
  const blocker = join(dir, 'a-file');
  writeFileSync(blocker, 'not a directory');
  await t.rejects(createSqliteStorage({ path: join(blocker, 'db.sqlite') }),
    new RegExp(`^cannot create the directory for sqlite database ${blocker}/db\\.sqlite: `));
  await t.rejects(createSqliteStorage({ path: '' }), /database\.sqlite\.path: a file path/);
});
