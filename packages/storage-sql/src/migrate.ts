import type { Knex } from 'knex';
import { StorageVersionError } from '@headway/core/ports';
import type { SqlMigration } from './migrations/types.js';

/** MIGRATIONS_TABLE is knex's own bookkeeping table for applied migrations. */
export const MIGRATIONS_TABLE = 'knex_migrations';

/**
 * migrationSource feeds knex the compiled migration objects directly, so nothing
 * is looked up on disk at run time (bundling or a different cwd cannot break it).
 */
function migrationSource(migrations: readonly SqlMigration[]): Knex.MigrationSource<SqlMigration> {
  return {
    getMigrations: async () => [...migrations],
    getMigrationName: (m) => m.name,
    getMigration: async (m) => ({ up: (k: Knex) => m.up(k), down: (k: Knex) => m.down(k) }),
  };
}

function checkMigrationList(migrations: readonly SqlMigration[]): void {
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) {
      throw new Error(`migration list is out of order: ${m.name} has version ${m.version} at position ${i + 1}`);
    }
  });
}

/** readSchemaVersion returns the version recorded in `schema_version`, or 0 for an empty database. */
export async function readSchemaVersion(knex: Knex): Promise<number> {
  if (!(await knex.schema.hasTable('schema_version'))) return 0;
  const row = await knex('schema_version').where({ id: 1 }).first('version');
  return row ? Number(row.version) : 0;
}

/**
 * runMigrations applies every migration of `migrations` not yet applied and records
 * the newest version in `schema_version`. It refuses (StorageVersionError) before
 * touching anything when the database records a version newer than the list knows,
 * i.e. it was written by a newer Headway.
 */
export async function runMigrations(knex: Knex, migrations: readonly SqlMigration[]): Promise<number> {
  checkMigrationList(migrations);
  const supported = migrations.length === 0 ? 0 : migrations[migrations.length - 1]!.version;
  const found = await readSchemaVersion(knex);
  if (found > supported) throw new StorageVersionError(found, supported);

  const config: Knex.MigratorConfig = { migrationSource: migrationSource(migrations), tableName: MIGRATIONS_TABLE };
  await knex.migrate.latest(config);
  const version = supported;
  if (version > 0) {
    await knex('schema_version').insert({ id: 1, version }).onConflict('id').merge(['version']);
  }
  return version;
}
