import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/**
 * userIdentityMigration gives users the identity a provider vouches for:
 * `provider` (`oidc`, '' for local users), `provider_id` (the stable `<iss>/<sub>`,
 * unique, NULL for local users: NULLs never collide on any of the three databases),
 * and the provider's groups (JSON text, NULL read as none; the picture URL came with 0002_user_picture:
 * MySQL cannot give a TEXT column a default).
 */
export const userIdentityMigration: SqlMigration = {
  version: 3,
  name: '0003_user_identity',
  async up(knex) {
    await knex.schema.alterTable('users', (t) => {
      t.string('provider', 64).notNullable().defaultTo('');
      t.string('provider_id', 512).nullable().unique({ indexName: 'users_provider_id_unique' });
      t.text('groups', 'mediumtext').nullable();
    });
  },
  async down(knex) {
    await knex.schema.alterTable('users', (t) => {
      t.dropUnique(['provider_id'], 'users_provider_id_unique');
      t.dropColumns('provider', 'provider_id', 'groups');
    });
  },
};
