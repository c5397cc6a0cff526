import type { Knex } from 'knex';

/**
 * SqlMigration is one append-only schema step. `version` is its position in the
 * list (1-based) and is what `schema_version` records; never edit a released one,
 * add a new file instead.
 */
export interface SqlMigration {
  version: number;
  name: string;
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}
