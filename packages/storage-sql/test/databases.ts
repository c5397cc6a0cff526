import { randomBytes } from 'node:crypto';
import type { Test } from 'tap';
import knexFactory, { type Knex } from 'knex';
import type { NetworkConnection } from '../src/index.js';

/** inCI: in CI every database must run; elsewhere a missing one is skipped with a printed reason. */
export const inCI = process.env.CI === 'true';

/** runDatabaseName is unique per run so parallel runs and leftovers never collide. */
export function runDatabaseName(): string {
  return `headway_test_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}

/** missingServer skips the database with a printed reason, but fails in CI, where it must run. */
export function missingServer(t: Test, name: string, variable: string): void {
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
export async function withScratchDatabase(client: 'pg' | 'mysql2', admin: NetworkConnection,
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
