import type { SqlMigration } from './types.js';

/** reservedMigration holds schema version 8, which another change to the schema takes; it changes nothing. */
export const reservedMigration: SqlMigration = {
  version: 8,
  name: '0008_reserved',
  async up() {},
  async down() {},
};
