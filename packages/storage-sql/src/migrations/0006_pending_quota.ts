import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/** PENDING_QUOTA_LOCK names the `storage_locks` row putWithinQuota locks (repositories.ts). */
export const PENDING_QUOTA_LOCK = 'pending_registrations';

/**
 * pendingQuotaMigration lets the database decide the caps on waiting logins (concurrent registers would pass
 * an in-memory check together and leave rows past the caps):
 * `pending_registrations.source` (the address a login came from, counted against
 * registration.max_pending_per_address; NULL for rows written before, which count only overall), indexes for
 * the per-source and per-machine look-ups, and `storage_locks`, rows a transaction updates first to go
 * through a section of work one at a time across every instance on the database. It is seeded with the
 * pending-registration lock.
 */
export const pendingQuotaMigration: SqlMigration = {
  version: 6,
  name: '0006_pending_quota',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    await knex.schema.alterTable('pending_registrations', (t) => {
      t.string('source', 255).nullable();
      t.index(['source', 'expires_at'], 'pending_registrations_source_index');
      t.index(['machine_key'], 'pending_registrations_machine_key_index');
    });
    await knex.schema.createTable('storage_locks', (t) => {
      if (mysql) {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
      t.string('name', 64).primary();
      // turn is what the locking UPDATE writes; it only counts how often the lock was taken.
      t.bigInteger('turn').notNullable().defaultTo(0);
    });
    await knex('storage_locks').insert({ name: PENDING_QUOTA_LOCK, turn: 0 });
  },
  async down(knex) {
    await knex.schema.dropTableIfExists('storage_locks');
    await knex.schema.alterTable('pending_registrations', (t) => {
      t.dropIndex(['machine_key'], 'pending_registrations_machine_key_index');
      t.dropIndex(['source', 'expires_at'], 'pending_registrations_source_index');
      t.dropColumn('source');
    });
  },
};
