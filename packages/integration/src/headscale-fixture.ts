/**
 * Hand-made headscale SQLite databases for the `headway migrate from-headscale` tests:
 * the schema exactly as headscale 0.26 and 0.29 create it (from headscale's own
 * testdata dump and schema.sql at those tags), the migration ids each version
 * records, and whatever rows a test inserts.
 */
import { createRequire } from 'node:module';

interface SqliteDatabase {
  exec(sql: string): void;
  prepare(sql: string): { run(...params: unknown[]): unknown };
  close(): void;
}
const Database = createRequire(import.meta.url)('better-sqlite3') as new (path: string) => SqliteDatabase;

/** SCHEMA_0_26 is headscale 0.26.1's SQLite schema (gorm AutoMigrate; forced_tags; plain-text pre-auth keys). */
const SCHEMA_0_26 = `
CREATE TABLE \`migrations\` (\`id\` text,PRIMARY KEY (\`id\`));
CREATE TABLE \`users\` (\`id\` integer PRIMARY KEY AUTOINCREMENT,\`created_at\` datetime,\`updated_at\` datetime,\`deleted_at\` datetime,\`name\` text,\`display_name\` text,\`email\` text,\`provider_identifier\` text,\`provider\` text,\`profile_pic_url\` text);
CREATE TABLE \`pre_auth_keys\` (\`id\` integer PRIMARY KEY AUTOINCREMENT,\`key\` text,\`user_id\` integer,\`reusable\` numeric,\`ephemeral\` numeric DEFAULT false,\`used\` numeric DEFAULT false,\`tags\` text,\`created_at\` datetime,\`expiration\` datetime,CONSTRAINT \`fk_pre_auth_keys_user\` FOREIGN KEY (\`user_id\`) REFERENCES \`users\`(\`id\`) ON DELETE SET NULL);
CREATE TABLE \`api_keys\` (\`id\` integer PRIMARY KEY AUTOINCREMENT,\`prefix\` text,\`hash\` blob,\`created_at\` datetime,\`expiration\` datetime,\`last_seen\` datetime);
CREATE TABLE IF NOT EXISTS "nodes"  (\`id\` integer PRIMARY KEY AUTOINCREMENT,\`machine_key\` text,\`node_key\` text,\`disco_key\` text,\`endpoints\` text,\`host_info\` text,\`ipv4\` text,\`ipv6\` text,\`hostname\` text,\`given_name\` varchar(63),\`user_id\` integer,\`register_method\` text,\`forced_tags\` text,\`auth_key_id\` integer,\`expiry\` datetime,\`last_seen\` datetime,\`approved_routes\` text,\`created_at\` datetime,\`updated_at\` datetime,\`deleted_at\` datetime,CONSTRAINT \`fk_nodes_user\` FOREIGN KEY (\`user_id\`) REFERENCES \`users\`(\`id\`) ON DELETE CASCADE,CONSTRAINT \`fk_nodes_auth_key\` FOREIGN KEY (\`auth_key_id\`) REFERENCES \`pre_auth_keys\`(\`id\`));
CREATE TABLE \`policies\` (\`id\` integer PRIMARY KEY AUTOINCREMENT,\`created_at\` datetime,\`updated_at\` datetime,\`deleted_at\` datetime,\`data\` text);
CREATE INDEX \`idx_users_deleted_at\` ON \`users\`(\`deleted_at\`);
CREATE UNIQUE INDEX \`idx_api_keys_prefix\` ON \`api_keys\`(\`prefix\`);
CREATE INDEX \`idx_policies_deleted_at\` ON \`policies\`(\`deleted_at\`);
CREATE UNIQUE INDEX idx_provider_identifier ON users (provider_identifier) WHERE provider_identifier IS NOT NULL;
CREATE UNIQUE INDEX idx_name_provider_identifier ON users (name,provider_identifier);
CREATE UNIQUE INDEX idx_name_no_provider_identifier ON users (name) WHERE provider_identifier IS NULL;
`;

/** SCHEMA_0_29 is headscale 0.29.2's hscontrol/db/schema.sql (tags, prefix + bcrypt hash, database_versions). */
const SCHEMA_0_29 = `
CREATE TABLE migrations(id text,PRIMARY KEY(id));
CREATE TABLE users(id integer PRIMARY KEY AUTOINCREMENT, name text, display_name text, email text, provider_identifier text, provider text, profile_pic_url text, created_at datetime, updated_at datetime, deleted_at datetime);
CREATE INDEX idx_users_deleted_at ON users(deleted_at);
CREATE UNIQUE INDEX idx_provider_identifier ON users(provider_identifier) WHERE provider_identifier IS NOT NULL;
CREATE UNIQUE INDEX idx_name_provider_identifier ON users(name, provider_identifier);
CREATE UNIQUE INDEX idx_name_no_provider_identifier ON users(name) WHERE provider_identifier IS NULL;
CREATE TABLE pre_auth_keys(id integer PRIMARY KEY AUTOINCREMENT, key text, prefix text, hash blob, user_id integer, reusable numeric, ephemeral numeric DEFAULT false, used numeric DEFAULT false, tags text, expiration datetime, created_at datetime,
  CONSTRAINT fk_pre_auth_keys_user FOREIGN KEY(user_id) REFERENCES users(id) ON DELETE SET NULL);
CREATE UNIQUE INDEX idx_pre_auth_keys_prefix ON pre_auth_keys(prefix) WHERE prefix IS NOT NULL AND prefix != '';
CREATE TABLE api_keys(id integer PRIMARY KEY AUTOINCREMENT, prefix text, hash blob, expiration datetime, last_seen datetime, created_at datetime);
CREATE UNIQUE INDEX idx_api_keys_prefix ON api_keys(prefix);
CREATE TABLE nodes(id integer PRIMARY KEY AUTOINCREMENT, machine_key text, node_key text, disco_key text, endpoints text, host_info text, ipv4 text, ipv6 text, hostname text, given_name varchar(63),
  user_id integer, register_method text, tags text, auth_key_id integer, last_seen datetime, expiry datetime, approved_routes text, created_at datetime, updated_at datetime, deleted_at datetime,
  CONSTRAINT fk_nodes_user FOREIGN KEY(user_id) REFERENCES users(id) ON DELETE CASCADE,
  CONSTRAINT fk_nodes_auth_key FOREIGN KEY(auth_key_id) REFERENCES pre_auth_keys(id));
CREATE TABLE policies(id integer PRIMARY KEY AUTOINCREMENT, data text, created_at datetime, updated_at datetime, deleted_at datetime);
CREATE INDEX idx_policies_deleted_at ON policies(deleted_at);
CREATE TABLE database_versions(id integer PRIMARY KEY, version text NOT NULL, updated_at datetime);
`;

const MIGRATIONS_0_26 = ['202312101416', '202312101430', '202402151347', '2024041121742', '202406021630', '202409271400', '202407191627',
  '202408181235', '202501221827', '202501311657', '202502070949', '202502131714', '202502171819', '202505091439', '202505141324'];
const MIGRATIONS_0_29 = ['202501221827', '202501311657', '202502070949', '202502131714', '202502171819', '202505091439', '202505141324',
  '202507021200', '202510311551', '202511101554-drop-old-idx', '202511011637-preauthkey-bcrypt', '202511122344-remove-newline-index',
  '202511131445-node-forced-tags-to-tags', '202601121700-migrate-hostinfo-request-tags', '202602201200-clear-tagged-node-user-id',
  '202605221435-clear-zero-time-node-expiry', '202606181200-recover-null-tags-node-user-id'];

export type FixtureVersion = '0.26' | '0.29';

/** FixtureRows are rows per table, column name to value (Buffers for blobs, strings for times as gorm writes them). */
export type FixtureRows = Partial<Record<'users' | 'nodes' | 'pre_auth_keys' | 'api_keys' | 'policies', Array<Record<string, unknown>>>>;

/**
 * makeHeadscaleDb writes a headscale database of `version` at `path` with `rows`;
 * `databaseVersion` overrides what 0.29's database_versions holds (null: no row, as before 0.29
 * or under a development build), `migrations` the recorded ids.
 */
export function makeHeadscaleDb(path: string, version: FixtureVersion, rows: FixtureRows,
  opts: { databaseVersion?: string | null; migrations?: string[]; extraSql?: string } = {}): void {
  const db = new Database(path);
  try {
    // Off so a test can write what headscale's foreign keys did not always prevent (they were
    // off during several of its migrations): a node whose user is gone.
    db.exec('PRAGMA foreign_keys = OFF');
    db.exec(version === '0.26' ? SCHEMA_0_26 : SCHEMA_0_29);
    const migrate = db.prepare('INSERT INTO migrations (id) VALUES (?)');
    for (const id of opts.migrations ?? (version === '0.26' ? MIGRATIONS_0_26 : MIGRATIONS_0_29)) migrate.run(id);
    if (version === '0.29' && opts.databaseVersion !== null) db.prepare('INSERT INTO database_versions (id, version, updated_at) VALUES (1, ?, ?)').run(opts.databaseVersion ?? 'v0.29.2', '2026-11-01 10:00:00+00:00');
    for (const [table, list] of Object.entries(rows)) {
      for (const row of list ?? []) {
        const cols = Object.keys(row);
        db.prepare(`INSERT INTO ${table} (${cols.join(', ')}) VALUES (${cols.map(() => '?').join(', ')})`)
          .run(...cols.map((c) => (typeof row[c] === 'boolean' ? (row[c] ? 1 : 0) : row[c])));
      }
    }
    if (opts.extraSql) db.exec(opts.extraSql);
  } finally {
    db.close();
  }
}
