// Run the whole suite in a zone with an odd offset: a date that goes through local
// time anywhere on its way to or from the database shows up as a wrong instant.
process.env.TZ = 'Pacific/Chatham';

import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import t from 'tap';
import knexFactory, { type Knex } from 'knex';
import {
  openMysqlStorage, openPostgresStorage, openSqliteStorage, parseConnectionUrl, type NetworkConnection,
} from '../src/index.js';
import { runStorageContract } from './contract.js';

const inCI = process.env.CI === 'true';

/** runDatabaseName is unique per run so parallel runs and leftovers never collide. */
function runDatabaseName(): string {
  return `headway_test_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}

/** missingServer skips the database with a printed reason, but fails in CI, where it must run. */
function missingServer(name: string, variable: string): void {
  if (inCI) {
    t.fail(`${name}: ${variable} is not set, and CI must run the storage suite on ${name} (eval "$(bash .ci/databases.sh start)")`);
  } else {
    t.skip(`${name}: ${variable} not set`, () => undefined);
  }
}

/**
 * withScratchDatabase creates a uniquely named database through the admin URL,
 * hands its connection to `run`, and drops it afterwards.
 */
async function withScratchDatabase(client: 'pg' | 'mysql2', admin: NetworkConnection,
  run: (conn: NetworkConnection) => Promise<void>): Promise<void> {
  const adminKnex: Knex = knexFactory({ client, connection: { ...admin }, pool: { min: 0, max: 1 } });
  const database = runDatabaseName();
  try {
    await adminKnex.raw(client === 'pg' ? `create database "${database}"` : `create database \`${database}\` character set utf8mb4 collate utf8mb4_bin`);
    try {
      await run({ ...admin, database });
    } finally {
      await adminKnex.raw(client === 'pg' ? `drop database if exists "${database}" with (force)` : `drop database if exists \`${database}\``);
    }
  } finally {
    await adminKnex.destroy();
  }
}

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
  missingServer('postgres', 'HEADWAY_TEST_POSTGRES_URL');
}

const mysqlUrl = process.env.HEADWAY_TEST_MYSQL_URL;
if (mysqlUrl) {
  await t.test('mysql', async (t) => {
    await withScratchDatabase('mysql2', parseConnectionUrl(mysqlUrl, ['mysql', 'mariadb'], 3306), (connection) =>
      runStorageContract(t, 'mysql', (o) => openMysqlStorage({ connection, pool: { max: 8 }, ...o })));
  });
} else {
  missingServer('mysql', 'HEADWAY_TEST_MYSQL_URL');
}
