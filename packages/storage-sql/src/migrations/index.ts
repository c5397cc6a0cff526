import { initialMigration } from './0001_initial.js';
import { userPictureMigration } from './0002_user_picture.js';
import { userIdentityMigration } from './0003_user_identity.js';
import { driveGrantsMigration } from './0004_drive_grants.js';
import { clusterMigration } from './0005_cluster.js';
import { pendingQuotaMigration } from './0006_pending_quota.js';
import { clusterValuesMigration } from './0007_cluster_values.js';
import { oauthClientsMigration } from './0008_oauth_clients.js';
import { dnsSettingsMigration } from './0009_dns_settings.js';
import { auditLogMigration } from './0010_audit_log.js';
import { consoleSessionsMigration } from './0011_console_sessions.js';
import type { SqlMigration } from './types.js';

export type { SqlMigration } from './types.js';

/** MIGRATIONS is the ordered, append-only schema history; index i holds version i + 1. */
export const MIGRATIONS: readonly SqlMigration[] = [initialMigration, userPictureMigration, userIdentityMigration, driveGrantsMigration, clusterMigration, pendingQuotaMigration, clusterValuesMigration,
  oauthClientsMigration, dnsSettingsMigration, auditLogMigration, consoleSessionsMigration];

/** LATEST_SCHEMA_VERSION is the newest schema this code can read and write. */
export const LATEST_SCHEMA_VERSION: number = MIGRATIONS[MIGRATIONS.length - 1]!.version;
