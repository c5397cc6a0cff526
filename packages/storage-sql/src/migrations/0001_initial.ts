import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/**
 * timestampColumn declares a millisecond-precision timestamp. `datetime` rather
 * than `timestamp` because MySQL's TIMESTAMP stops at 2038; on PostgreSQL knex
 * makes it `timestamptz(3)`; SQLite stores the epoch milliseconds knex binds.
 */
export function timestampColumn(table: Knex.CreateTableBuilder, name: string): Knex.ColumnBuilder {
  return table.datetime(name, { precision: 3, useTz: true });
}

/** jsonColumn holds JSON as text so all three databases compare and return it alike. */
export function jsonColumn(table: Knex.CreateTableBuilder, name: string): Knex.ColumnBuilder {
  return table.text(name, 'mediumtext');
}

/** binaryCollation makes MySQL/MariaDB compare strings case-sensitively, like PostgreSQL and SQLite. */
export function binaryCollation(table: Knex.CreateTableBuilder, knex: Knex): void {
  if (knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql') {
    table.charset('utf8mb4');
    table.collate('utf8mb4_bin');
  }
}

export const initialMigration: SqlMigration = {
  version: 1,
  name: '0001_initial',
  async up(knex) {
    await knex.schema.createTable('schema_version', (t) => {
      binaryCollation(t, knex);
      t.integer('id').primary();
      t.integer('version').notNullable();
    });

    await knex.schema.createTable('users', (t) => {
      binaryCollation(t, knex);
      t.increments('id').primary();
      t.string('name', 255).notNullable().unique({ indexName: 'users_name_unique' });
      t.string('display_name', 255).notNullable().defaultTo('');
      t.string('email', 255).notNullable().defaultTo('');
      timestampColumn(t, 'created_at').notNullable();
    });

    await knex.schema.createTable('pre_auth_keys', (t) => {
      binaryCollation(t, knex);
      t.increments('id').primary();
      t.integer('user_id').unsigned().nullable()
        .references('id').inTable('users').onDelete('CASCADE').withKeyName('pre_auth_keys_user_id_foreign');
      t.boolean('reusable').notNullable();
      t.boolean('ephemeral').notNullable();
      t.boolean('used').notNullable().defaultTo(false);
      timestampColumn(t, 'expiration').nullable();
      jsonColumn(t, 'tags').notNullable();
      t.string('prefix', 64).notNullable().unique({ indexName: 'pre_auth_keys_prefix_unique' });
      t.string('hash', 255).notNullable();
      timestampColumn(t, 'created_at').notNullable();
      t.index(['user_id'], 'pre_auth_keys_user_id_index');
    });

    await knex.schema.createTable('nodes', (t) => {
      binaryCollation(t, knex);
      t.increments('id').primary();
      t.string('machine_key', 255).notNullable().unique({ indexName: 'nodes_machine_key_unique' });
      t.string('node_key', 255).notNullable().unique({ indexName: 'nodes_node_key_unique' });
      t.string('disco_key', 255).notNullable().defaultTo('');
      t.string('hostname', 255).notNullable().defaultTo('');
      t.string('given_name', 255).notNullable().unique({ indexName: 'nodes_given_name_unique' });
      // RESTRICT: deleting a user that still owns nodes is the kernel's decision, not a silent cascade.
      t.integer('user_id').unsigned().nullable()
        .references('id').inTable('users').onDelete('RESTRICT').withKeyName('nodes_user_id_foreign');
      jsonColumn(t, 'tags').notNullable();
      t.string('ipv4', 64).nullable().unique({ indexName: 'nodes_ipv4_unique' });
      t.string('ipv6', 64).nullable().unique({ indexName: 'nodes_ipv6_unique' });
      jsonColumn(t, 'endpoints').notNullable();
      jsonColumn(t, 'hostinfo').nullable();
      jsonColumn(t, 'available_routes').notNullable();
      jsonColumn(t, 'approved_routes').notNullable();
      t.string('register_method', 32).notNullable();
      timestampColumn(t, 'expiry').nullable();
      timestampColumn(t, 'last_seen').nullable();
      t.boolean('ephemeral').notNullable().defaultTo(false);
      t.integer('auth_key_id').unsigned().nullable()
        .references('id').inTable('pre_auth_keys').onDelete('SET NULL').withKeyName('nodes_auth_key_id_foreign');
      timestampColumn(t, 'created_at').notNullable();
      timestampColumn(t, 'updated_at').notNullable();
      t.index(['user_id'], 'nodes_user_id_index');
      t.index(['auth_key_id'], 'nodes_auth_key_id_index');
    });

    await knex.schema.createTable('api_keys', (t) => {
      binaryCollation(t, knex);
      t.increments('id').primary();
      t.string('prefix', 64).notNullable().unique({ indexName: 'api_keys_prefix_unique' });
      t.string('hash', 255).notNullable();
      timestampColumn(t, 'expiration').nullable();
      timestampColumn(t, 'last_seen').nullable();
      timestampColumn(t, 'created_at').notNullable();
    });

    await knex.schema.createTable('pending_registrations', (t) => {
      binaryCollation(t, knex);
      t.string('key', 255).primary();
      t.string('machine_key', 255).notNullable();
      t.string('node_key', 255).notNullable();
      jsonColumn(t, 'hostinfo').nullable();
      timestampColumn(t, 'expires_at').notNullable();
      timestampColumn(t, 'created_at').notNullable();
      t.index(['expires_at'], 'pending_registrations_expires_at_index');
    });

    await knex.schema.createTable('policies', (t) => {
      binaryCollation(t, knex);
      // One row only (id = 1): the policy text the `database` policy mode serves.
      t.integer('id').primary();
      t.text('text', 'mediumtext').notNullable();
      timestampColumn(t, 'updated_at').notNullable();
    });
  },
  async down(knex) {
    for (const table of ['policies', 'pending_registrations', 'api_keys', 'nodes', 'pre_auth_keys', 'users', 'schema_version']) {
      await knex.schema.dropTableIfExists(table);
    }
  },
};
