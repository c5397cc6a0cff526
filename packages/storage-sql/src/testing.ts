/*
 * Helpers for tests that need a real PostgreSQL or MariaDB (@headway/storage-sql/testing):
 * each test gets a scratch database of its own, created through the server named by
 * HEADWAY_TEST_POSTGRES_URL / HEADWAY_TEST_MYSQL_URL and dropped afterwards.
 */
import { randomBytes } from 'node:crypto';
import knexFactory, { type Knex } from 'knex';
import { parseConnectionUrl, type NetworkConnection } from './open.js';

/** runDatabaseName is unique per run so parallel runs and leftovers never collide. */
export function runDatabaseName(): string {
  return `headway_test_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}

/**
 * withScratchDatabase creates a uniquely named database through the admin URL,
 * hands its connection to `run`, and drops it afterwards.
 */
export async function withScratchDatabase(client: 'pg' | 'mysql2', admin: NetworkConnection,
  run: (conn: NetworkConnection) => Promise<void>): Promise<void> {
  const adminKnex: Knex = knexFactory({ client, connection: { ...admin }, pool: { min: 0, max: 1 } });
  const database = runDatabaseName();
  try {
    await adminKnex.raw(client === 'pg' ? `create database "${database}"` : `create database \`${database}\` character set utf8mb4 collate utf8mb4_bin`);
    try {
      await run({ ...admin, database });
    } finally {
      await dropScratch(adminKnex, client, database);
    }
  } finally {
    await adminKnex.destroy();
  }
}

/**
 * dropScratch drops a scratch database, ending its connections on PostgreSQL. A connection still
 * starting up there (a client reconnecting while the test ends) has no role yet, and terminating
 * it needs pg_signal_backend, which the test role lacks: the drop is tried again once it is up.
 */
async function dropScratch(adminKnex: Knex, client: 'pg' | 'mysql2', database: string): Promise<void> {
  const sql = client === 'pg' ? `drop database if exists "${database}" with (force)` : `drop database if exists \`${database}\``;
  for (let attempt = 1; ; attempt++) {
    try {
      await adminKnex.raw(sql);
      return;
    } catch (err) {
      if (attempt >= 10 || !/pg_signal_backend/.test((err as Error).message)) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** ScratchDatabaseServer is one database server the test environment names. */
export interface ScratchDatabaseServer {
  type: 'postgres' | 'mysql';
  /** variable is the environment variable naming it. */
  variable: 'HEADWAY_TEST_POSTGRES_URL' | 'HEADWAY_TEST_MYSQL_URL';
  /** admin is its connection, or undefined when the variable is not set. */
  admin: NetworkConnection | undefined;
  /** scratch runs `run` with the connection of a new empty database, dropped afterwards. */
  scratch(run: (conn: NetworkConnection) => Promise<void>): Promise<void>;
}

/** testDatabaseServers lists PostgreSQL and MySQL/MariaDB as the environment configures them. */
export function testDatabaseServers(env: NodeJS.ProcessEnv = process.env): ScratchDatabaseServer[] {
  const pg = env.HEADWAY_TEST_POSTGRES_URL ? parseConnectionUrl(env.HEADWAY_TEST_POSTGRES_URL, ['postgres', 'postgresql'], 5432) : undefined;
  const my = env.HEADWAY_TEST_MYSQL_URL ? parseConnectionUrl(env.HEADWAY_TEST_MYSQL_URL, ['mysql', 'mariadb'], 3306) : undefined;
  return [
    { type: 'postgres', variable: 'HEADWAY_TEST_POSTGRES_URL', admin: pg, scratch: (run) => withScratchDatabase('pg', pg!, run) },
    { type: 'mysql', variable: 'HEADWAY_TEST_MYSQL_URL', admin: my, scratch: (run) => withScratchDatabase('mysql2', my!, run) },
  ];
}
