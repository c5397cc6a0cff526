import type { Knex } from 'knex';
import type { SqlMigration } from './types.js';

/** PICTURE_URL_MAX is the longest user picture URL stored (State checks it before writing). */
export const PICTURE_URL_MAX = 2048;

/**
 * userPictureMigration adds `users.profile_pic_url` (headscale's column name), the
 * picture `users create --picture-url` sets. It is skipped when the column already
 * exists, so a branch that added the same column (OIDC keeps the provider's picture)
 * and this one can both be applied to one database.
 */
export const userPictureMigration: SqlMigration = {
  version: 2,
  name: '0002_user_picture',
  async up(knex: Knex) {
    if (await knex.schema.hasColumn('users', 'profile_pic_url')) return;
    await knex.schema.alterTable('users', (t) => {
      t.string('profile_pic_url', PICTURE_URL_MAX).notNullable().defaultTo('');
    });
  },
  async down(knex: Knex) {
    if (!(await knex.schema.hasColumn('users', 'profile_pic_url'))) return;
    await knex.schema.alterTable('users', (t) => {
      t.dropColumn('profile_pic_url');
    });
  },
};
