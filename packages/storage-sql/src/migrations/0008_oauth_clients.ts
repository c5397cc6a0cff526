import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/**
 * oauthClientsMigration adds the OAuth clients of /api/v2 (`oauth_clients`: public client id,
 * hash of the secret, description, scopes, the tags its keys may carry) and the access tokens
 * they were issued (`oauth_tokens`, an hour each), and gives pre-auth keys the `description`
 * /api/v2 sets. A token's row goes with its client (ON DELETE CASCADE), and the repository
 * deletes them together as well.
 */
export const oauthClientsMigration: SqlMigration = {
  version: 8,
  name: '0008_oauth_clients',
  async up(knex) {
    const mysql = knex.client.config.client === 'mysql2' || knex.client.config.client === 'mysql';
    const binary = (t: Knex.CreateTableBuilder) => {
      if (mysql) {
        t.charset('utf8mb4');
        t.collate('utf8mb4_bin');
      }
    };
    const time = (t: Knex.CreateTableBuilder, name: string) => t.datetime(name, { precision: 3, useTz: true });
    await knex.schema.createTable('oauth_clients', (t) => {
      binary(t);
      t.increments('id').primary();
      t.string('client_id', 64).notNullable().unique({ indexName: 'oauth_clients_client_id_unique' });
      t.string('hash', 255).notNullable();
      t.string('description', 255).notNullable().defaultTo('');
      t.text('scopes', 'mediumtext').notNullable();
      t.text('tags', 'mediumtext').notNullable();
      time(t, 'created_at').notNullable();
      time(t, 'last_used').nullable();
    });
    await knex.schema.createTable('oauth_tokens', (t) => {
      binary(t);
      t.increments('id').primary();
      t.string('prefix', 64).notNullable().unique({ indexName: 'oauth_tokens_prefix_unique' });
      t.string('hash', 255).notNullable();
      t.integer('client_id').unsigned().notNullable()
        .references('id').inTable('oauth_clients').onDelete('CASCADE').withKeyName('oauth_tokens_client_id_foreign');
      t.text('scopes', 'mediumtext').notNullable();
      time(t, 'expires_at').notNullable();
      time(t, 'created_at').notNullable();
      t.index(['client_id'], 'oauth_tokens_client_id_index');
      t.index(['expires_at'], 'oauth_tokens_expires_at_index');
    });
    await knex.schema.alterTable('pre_auth_keys', (t) => {
      t.string('description', 255).notNullable().defaultTo('');
    });
  },
  async down(knex) {
    await knex.schema.alterTable('pre_auth_keys', (t) => {
      t.dropColumn('description');
    });
    await knex.schema.dropTableIfExists('oauth_tokens');
    await knex.schema.dropTableIfExists('oauth_clients');
  },
};
