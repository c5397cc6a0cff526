import type { SqlMigration } from './types.js';

/**
 * consoleSessionsMigration adds the admin console's sign-ins: `console_sessions` (one row per signed-in
 * administrator, keyed by the SHA-256 hex of the cookie's secret) and `console_links` (one-time sign-in links, keyed
 * by the SHA-256 hex of their token). Neither holds a secret, neither is part of a backup, and both are pruned hourly.
 */
export const consoleSessionsMigration: SqlMigration = {
  version: 11,
  name: '0011_console_sessions',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    const binary = (t: { charset(c: string): void; collate(c: string): void }) => {
      if (!mysql) return;
      t.charset('utf8mb4');
      t.collate('utf8mb4_bin');
    };
    await knex.schema.createTable('console_sessions', (t) => {
      binary(t);
      t.string('id', 64).primary();
      t.string('admin', 255).notNullable();
      t.string('via', 16).notNullable();
      t.string('csrf', 64).notNullable();
      t.datetime('created_at', { precision: 3, useTz: true }).notNullable().index('console_sessions_created_at');
      t.datetime('last_seen_at', { precision: 3, useTz: true }).notNullable().index('console_sessions_last_seen_at');
    });
    await knex.schema.createTable('console_links', (t) => {
      binary(t);
      t.string('hash', 64).primary();
      t.string('admin', 255).notNullable();
      t.datetime('expires_at', { precision: 3, useTz: true }).notNullable().index('console_links_expires_at');
      t.datetime('spent_at', { precision: 3, useTz: true }).nullable();
    });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('console_links');
    await knex.schema.dropTableIfExists('console_sessions');
  },
};
