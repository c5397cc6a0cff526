import type { SqlMigration } from './types.js';

/**
 * clusterValuesMigration adds `cluster_values`: small named texts every instance reads, such as the Let's Encrypt
 * account key, the certificate with its key and the answers to a validation running on one instance. Not part of
 * a backup: a certificate is ordered again.
 */
export const clusterValuesMigration: SqlMigration = {
  version: 7,
  name: '0007_cluster_values',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    await knex.schema.createTable('cluster_values', (t) => {
      if (mysql) {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
      t.string('name', 255).primary();
      t.text('value', 'mediumtext').notNullable();
      t.datetime('updated_at', { precision: 3, useTz: true }).notNullable();
    });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('cluster_values');
  },
};
