import type { SqlMigration } from './types.js';

/**
 * auditLogMigration adds `audit_log`: one row per administrative change (who, what, when, from where), read newest
 * first by id. Not part of a backup; entries older than audit.retention are pruned.
 */
export const auditLogMigration: SqlMigration = {
  version: 10,
  name: '0010_audit_log',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    await knex.schema.createTable('audit_log', (t) => {
      if (mysql) {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
      t.increments('id').primary();
      t.datetime('at', { precision: 3, useTz: true }).notNullable().index('audit_log_at');
      t.string('actor', 255).notNullable().index('audit_log_actor');
      t.string('action', 128).notNullable();
      t.string('target', 1024).notNullable();
      t.string('remote', 255).notNullable();
    });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('audit_log');
  },
};
