import { binaryCollation, jsonColumn, timestampColumn } from './0001_initial.js';
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
    await knex.schema.createTable('oauth_clients', (t) => {
      binaryCollation(t, knex);
      t.increments('id').primary();
      t.string('client_id', 64).notNullable().unique({ indexName: 'oauth_clients_client_id_unique' });
      t.string('hash', 255).notNullable();
      t.string('description', 255).notNullable().defaultTo('');
      jsonColumn(t, 'scopes').notNullable();
      jsonColumn(t, 'tags').notNullable();
      timestampColumn(t, 'created_at').notNullable();
      timestampColumn(t, 'last_used').nullable();
    });
    await knex.schema.createTable('oauth_tokens', (t) => {
      binaryCollation(t, knex);
      t.increments('id').primary();
      t.string('prefix', 64).notNullable().unique({ indexName: 'oauth_tokens_prefix_unique' });
      t.string('hash', 255).notNullable();
      t.integer('client_id').unsigned().notNullable()
        .references('id').inTable('oauth_clients').onDelete('CASCADE').withKeyName('oauth_tokens_client_id_foreign');
      jsonColumn(t, 'scopes').notNullable();
      timestampColumn(t, 'expires_at').notNullable();
      timestampColumn(t, 'created_at').notNullable();
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
