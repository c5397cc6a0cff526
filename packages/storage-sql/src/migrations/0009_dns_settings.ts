import type { SqlMigration } from './types.js';

/**
 * dnsSettingsMigration adds `dns_settings`: the one row of DNS settings `dns.mode: database` keeps (global and
 * split nameservers, search domains, MagicDNS, override local DNS) as JSON text, seeded from the config file's
 * `dns.*` values on the first start in that mode.
 */
export const dnsSettingsMigration: SqlMigration = {
  version: 9,
  name: '0009_dns_settings',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    await knex.schema.createTable('dns_settings', (t) => {
      if (mysql) {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
      t.integer('id').primary();
      t.text('settings', 'mediumtext').notNullable();
      t.datetime('updated_at', { precision: 3, useTz: true }).notNullable();
    });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('dns_settings');
  },
};
