import type { Test } from 'tap';
import { StorageVersionError, type StoragePort } from '@headway/core';
import { runStorageContract, unique } from '@headway/storage-contract';
import { MIGRATIONS, type SqlMigration } from '../src/index.js';

/**
 * StorageFactory opens a storage on the run's database (the same database every
 * call). `migrations` replaces the schema history; `migrate: false` skips it.
 */
export type StorageFactory = (opts?: { migrations?: readonly SqlMigration[]; migrate?: boolean }) => Promise<StoragePort>;

/** probeMigration is a test-only next step: it proves a newer migration applies on top of seeded data. */
const probeMigration: SqlMigration = {
  version: MIGRATIONS.length + 1,
  name: `${String(MIGRATIONS.length + 1).padStart(4, '0')}_contract_probe`,
  async up(knex) {
    await knex.schema.createTable('contract_probe', (t) => {
      t.integer('id').primary();
    });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('contract_probe');
  },
};

/**
 * runSqlStorageContract runs the exported storage contract (@headway/storage-contract),
 * then the SQL-only migration checks on the same database, which they leave at a
 * newer schema version: give it a throw-away database. `reopens: false` says every
 * factory call yields a new database (SQLite `:memory:`), which skips the upgrade
 * test that needs to re-open the same one.
 */
export async function runSqlStorageContract(t: Test, name: string, makeStorage: StorageFactory,
  opts: { reopens?: boolean } = {}): Promise<void> {
  await runStorageContract(t, name, () => makeStorage(), {
    more: async (t, storage) => {
      await t.test('migrations: a newer step applies on seeded data; a newer database is refused', async (t) => {
        if (opts.reopens === false) {
          t.pass('skipped', { skip: `${name}: each open is a new database, so there is nothing to re-open and upgrade` });
          return;
        }
        const seeded = await storage.users.create({ name: unique('seed') });
        const upgraded = await makeStorage({ migrations: [...MIGRATIONS, probeMigration] });
        try {
          t.same(await upgraded.users.get(seeded.id), seeded, 'data survives the new migration');
          await upgraded.migrate();
        } finally {
          await upgraded.close();
        }
        const older = await makeStorage({ migrate: false });
        try {
          const err = await older.migrate().then(() => undefined, (e: unknown) => e);
          t.type(err, StorageVersionError, 'older code refuses a newer database');
          t.match(err, { found: MIGRATIONS.length + 1, supported: MIGRATIONS.length });
          t.match((err as Error).message, /newer than this Headway supports/);
        } finally {
          await older.close();
        }
      });
    },
  });
}
