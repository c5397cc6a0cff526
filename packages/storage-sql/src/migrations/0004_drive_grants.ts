import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/**
 * driveGrantsMigration adds `drive_grants`, the Taildrive grants the database
 * drive adapter (@headway/drive-db) keeps. A source or destination is a kind
 * (user, group, tag, node) with either an id (users, nodes) or a name (groups,
 * tags); no foreign key, since the id column points at users or nodes by kind.
 */
export const driveGrantsMigration: SqlMigration = {
  version: 4,
  name: '0004_drive_grants',
  async up(knex) {
    await knex.schema.createTable('drive_grants', (t: Knex.CreateTableBuilder) => {
      if (knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql') {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
      t.increments('id').primary();
      t.string('src_kind', 16).notNullable();
      t.integer('src_id').nullable();
      t.string('src_name', 255).nullable();
      t.string('dst_kind', 16).notNullable();
      t.integer('dst_id').nullable();
      t.string('dst_name', 255).nullable();
      t.text('shares', 'mediumtext').notNullable();
      t.string('access', 2).notNullable();
      t.datetime('created_at', { precision: 3, useTz: true }).notNullable();
    });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('drive_grants');
  },
};
