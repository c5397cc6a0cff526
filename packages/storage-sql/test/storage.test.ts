// Run the whole suite in a zone with an odd offset: a date that goes through local
// time anywhere on its way to or from the database shows up as a wrong instant.
process.env.TZ = 'Pacific/Chatham';

import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { openMysqlStorage, openPostgresStorage, openSqliteStorage, parseConnectionUrl } from '../src/index.js';
import { runSqlStorageContract as runStorageContract } from './contract.js';
import { missingServer, withScratchDatabase } from './databases.js';

await t.test('sqlite file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-storage-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'nested', 'dir', 'db.sqlite');
  await runStorageContract(t, 'sqlite (file, WAL)', (o) => openSqliteStorage({ path, wal: true, ...o }));
  t.ok(existsSync(path), 'the parent directories and the file were created');
  t.ok(existsSync(`${path}-wal`) || existsSync(path), 'database file present');
});

await t.test('sqlite :memory:', async (t) => {
  await runStorageContract(t, 'sqlite (:memory:)', (o) => openSqliteStorage({ path: ':memory:', ...o }), { reopens: false });
});

const postgresUrl = process.env.HEADWAY_TEST_POSTGRES_URL;
if (postgresUrl) {
  await t.test('postgres', async (t) => {
    await withScratchDatabase('pg', parseConnectionUrl(postgresUrl, ['postgres', 'postgresql'], 5432), (connection) =>
      runStorageContract(t, 'postgres', (o) => openPostgresStorage({ connection, pool: { max: 8 }, ...o })));
  });
} else {
  missingServer(t, 'postgres', 'HEADWAY_TEST_POSTGRES_URL');
}

const mysqlUrl = process.env.HEADWAY_TEST_MYSQL_URL;
if (mysqlUrl) {
  await t.test('mysql', async (t) => {
    await withScratchDatabase('mysql2', parseConnectionUrl(mysqlUrl, ['mysql', 'mariadb'], 3306), (connection) =>
      runStorageContract(t, 'mysql', (o) => openMysqlStorage({ connection, pool: { max: 8 }, ...o })));
  });
} else {
  missingServer(t, 'mysql', 'HEADWAY_TEST_MYSQL_URL');
}
