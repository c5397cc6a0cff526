import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/**
 * clusterMigration adds what several instances on one database share:
 * `instances` (one row per running instance, refreshed by its heartbeat),
 * `cluster_sessions` (which instance holds which node's map session, so every
 * instance knows who is online), `cluster_leases` (a periodic job runs where its
 * lease is held) and `cluster_changes` (the change log MySQL/MariaDB instances
 * follow by increasing id; PostgreSQL announces through NOTIFY and leaves it empty).
 * None of them is part of a backup: they describe running processes, not the network.
 */
export const clusterMigration: SqlMigration = {
  version: 5,
  name: '0005_cluster',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    const binary = (t: Knex.CreateTableBuilder) => {
      if (mysql) {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
    };
    await knex.schema.createTable('instances', (t) => {
      binary(t);
      t.string('id', 64).primary();
      t.string('address', 255).notNullable();
      t.string('noise_public_key', 128).notNullable();
      t.datetime('started_at', { precision: 3, useTz: true }).notNullable();
      t.datetime('heartbeat', { precision: 3, useTz: true }).notNullable();
      t.integer('sessions').notNullable().defaultTo(0);
    });
    await knex.schema.createTable('cluster_sessions', (t) => {
      binary(t);
      t.string('instance_id', 64).notNullable();
      t.integer('node_id').notNullable();
      // since: when the session opened; the HA route primary is the router online the longest.
      t.datetime('since', { precision: 3, useTz: true }).notNullable();
      t.primary(['instance_id', 'node_id']);
    });
    await knex.schema.createTable('cluster_leases', (t) => {
      binary(t);
      t.string('name', 64).primary();
      t.string('holder', 64).notNullable();
      t.datetime('expires_at', { precision: 3, useTz: true }).notNullable();
    });
    await knex.schema.createTable('cluster_changes', (t) => {
      binary(t);
      t.bigIncrements('id').primary();
      t.string('origin', 64).notNullable();
      t.text('payload', 'mediumtext').notNullable();
      t.datetime('created_at', { precision: 3, useTz: true }).notNullable().index('cluster_changes_created_at');
    });
  },
  async down(knex) {
    for (const table of ['cluster_changes', 'cluster_leases', 'cluster_sessions', 'instances']) await knex.schema.dropTableIfExists(table);
  },
};
