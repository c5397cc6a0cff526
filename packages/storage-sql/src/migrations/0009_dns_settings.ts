import type { SqlMigration } from './types.js';

/** POLICY_LOCK names the `storage_locks` row a conditional policy write takes (repositories.ts). */
export const POLICY_LOCK = 'policy';
/** DNS_SETTINGS_LOCK names the `storage_locks` row a DNS settings update takes (dns-settings.ts). */
export const DNS_SETTINGS_LOCK = 'dns_settings';

/**
 * dnsSettingsMigration adds `dns_settings`: the one row of DNS settings `dns.mode: database` keeps (global and
 * split nameservers, search domains, MagicDNS, override local DNS) as JSON text, seeded from the config file's
 * `dns.*` values on the first start in that mode; and the `storage_locks` rows that conditional policy writes and
 * DNS settings updates take (seeded: concurrent first inserts of a lock row could deadlock on MySQL/MariaDB).
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
    await knex('storage_locks').insert([{ name: POLICY_LOCK, turn: 0 }, { name: DNS_SETTINGS_LOCK, turn: 0 }]).onConflict('name').ignore();
  },
  async down(knex) {
    await knex('storage_locks').whereIn('name', [POLICY_LOCK, DNS_SETTINGS_LOCK]).delete();
    await knex.schema.dropTableIfExists('dns_settings');
  },
};
