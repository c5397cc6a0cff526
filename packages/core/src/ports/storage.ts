import type {
  ApiKey, NewApiKey, NewNode, NewOAuthClient, NewOAuthToken, NewPreAuthKey, Node, NodePatch, OAuthClient, OAuthToken,
  PendingRegistration, PolicyRecord, PreAuthKey, User, UserInput,
} from '../domain.js';
import { assertPort } from './assert.js';
import type { DriveGrant, DriveGrantRecord } from './drive.js';
import type { ClusterPort } from './cluster.js';
import type { DnsSettingsRecord, DnsSettingsRepository } from './dns.js';

/**
 * StoragePort is dumb persistence: no ACL, peer or allocation logic lives behind it.
 * Uniqueness (user name, machine key, node key, given name, IPv4, IPv6, key prefixes)
 * is enforced by the database; a violation rejects with a `StorageConflictError`.
 */
export interface UserRepository {
  list(filter?: { id?: number; name?: string; email?: string }): Promise<User[]>;
  get(id: number): Promise<User | undefined>;
  getByName(name: string): Promise<User | undefined>;
  /** create and update store providerId unique: a second user with the same one is a StorageConflictError (`provider_id`). */
  create(user: UserInput): Promise<User>;
  update(id: number, patch: Partial<UserInput>): Promise<User | undefined>;
  delete(id: number): Promise<boolean>;
}

export interface NodeRepository {
  list(filter?: { userId?: number }): Promise<Node[]>;
  get(id: number): Promise<Node | undefined>;
  getByMachineKey(machineKey: string): Promise<Node | undefined>;
  getByNodeKey(nodeKey: string): Promise<Node | undefined>;
  create(node: NewNode): Promise<Node>;
  update(id: number, patch: NodePatch): Promise<Node | undefined>;
  delete(id: number): Promise<boolean>;
}

export interface PreAuthKeyRepository {
  list(filter?: { userId?: number }): Promise<PreAuthKey[]>;
  get(id: number): Promise<PreAuthKey | undefined>;
  getByPrefix(prefix: string): Promise<PreAuthKey | undefined>;
  create(key: NewPreAuthKey): Promise<PreAuthKey>;
  /**
   * markUsed spends a key with a guarded `UPDATE ... WHERE used = false`, so two
   * concurrent registrations cannot both succeed: true only for the one that flipped it.
   */
  markUsed(id: number): Promise<boolean>;
  setExpiration(id: number, expiration: Date): Promise<boolean>;
  delete(id: number): Promise<boolean>;
}

export interface ApiKeyRepository {
  list(): Promise<ApiKey[]>;
  get(id: number): Promise<ApiKey | undefined>;
  getByPrefix(prefix: string): Promise<ApiKey | undefined>;
  create(key: NewApiKey): Promise<ApiKey>;
  update(id: number, patch: { expiration?: Date | null; lastSeen?: Date | null }): Promise<boolean>;
  delete(id: number): Promise<boolean>;
}

/** PendingCaps are the caps putWithinQuota holds waiting interactive logins to. */
export interface PendingCaps {
  /** perMachine: logins one machine key may have waiting, one per node key; a new one replaces the oldest. */
  perMachine: number;
  /** perSource: logins waiting from one source address (registration.max_pending_per_address). */
  perSource: number;
  /** total: logins waiting overall (registration.max_pending). */
  total: number;
}

/**
 * PendingAdmission is what putWithinQuota did: stored the login (and removed the ones it replaced),
 * or refused it because `limit` already holds `waiting` logins, writing nothing.
 */
export type PendingAdmission =
  | { stored: true; replaced: string[] }
  | { stored: false; limit: 'perSource' | 'total'; waiting: number };

export interface PendingRegistrationRepository {
  get(key: string): Promise<PendingRegistration | undefined>;
  put(reg: PendingRegistration): Promise<void>;
  /**
   * putWithinQuota stores a new waiting login only when the caps allow it, and the database decides: in one
   * transaction, holding a lock every putWithinQuota on the database takes first (whichever process or
   * instance calls it), it picks the machine's logins the new one replaces (the one for the same node key,
   * expired ones, and its oldest while it would keep more than caps.perMachine), counts the logins waiting at
   * `now` (expiresAt after it) from `source` and overall, not counting the replaced ones, and only when both are
   * under their caps deletes the replaced logins and inserts `reg`. So concurrent calls can never leave more
   * rows than a cap allows, nor two logins for one node key. On a transaction's repositories it must be the
   * first statement of the transaction (the lock comes before any read); on the storage it runs in a
   * transaction of its own.
   */
  putWithinQuota(reg: PendingRegistration, source: string, caps: PendingCaps, now: Date): Promise<PendingAdmission>;
  delete(key: string): Promise<boolean>;
  /** deleteByMachineKey removes a machine's waiting logins (a new one replaces them); returns how many. */
  deleteByMachineKey(machineKey: string): Promise<number>;
  deleteExpired(now: Date): Promise<number>;
}

export interface PolicyRepository {
  get(): Promise<PolicyRecord | undefined>;
  /**
   * set stores the policy text. `opts.check` runs in the write's transaction with the stored record (undefined:
   * none), after a lock that makes concurrent sets (from any instance) wait; when it throws, nothing is written
   * and set rejects with its error. That is how a version check (If-Match) cannot be passed by two writers at once.
   */
  set(text: string, opts?: { check?: (current: PolicyRecord | undefined) => void }): Promise<PolicyRecord>;
}

/**
 * DriveGrantRepository keeps Taildrive grants for the database drive adapter
 * (@headway/drive-db). Optional on a storage adapter: without it that drive
 * adapter refuses to start, and nothing else needs it.
 */
export interface DriveGrantRepository {
  list(): Promise<DriveGrantRecord[]>;
  get(id: number): Promise<DriveGrantRecord | undefined>;
  create(grant: DriveGrant): Promise<DriveGrantRecord>;
  delete(id: number): Promise<boolean>;
  /** deleteFor removes, in one statement, every grant from or to a user or node (it was deleted); returns how many. */
  deleteFor(end: { kind: 'user' | 'node'; id: number }): Promise<number>;
}

/**
 * AuditEntry is one administrative change as the audit log keeps it: who made it (`actor`: `apikey:<prefix>`,
 * `oauth:<client id>`, `socket` for the local admin socket), what (`action`: the API operation, `target`: what it
 * named, e.g. `node 3`), when and from where (`remote`: the client's address; empty over the socket).
 */
export interface AuditEntry {
  id: number;
  at: Date;
  actor: string;
  action: string;
  target: string;
  remote: string;
}

/** AuditQuery pages through the log newest first: entries older than `before` (an id), of one actor or action. */
export interface AuditQuery {
  before?: number;
  actor?: string;
  action?: string;
  limit: number;
}

/**
 * AuditRepository keeps the audit log. Optional on a storage adapter: without it the server keeps the latest
 * entries in memory only (and says so at start).
 */
export interface AuditRepository {
  append(entry: Omit<AuditEntry, 'id'>): Promise<AuditEntry>;
  /** list answers newest first. */
  list(query: AuditQuery): Promise<AuditEntry[]>;
  /** prune deletes entries made before `before`; returns how many. */
  prune(before: Date): Promise<number>;
}

/**
 * OAuthClientRepository keeps OAuth clients of /api/v2 and the access tokens they were issued.
 * Optional on a storage adapter: without it /api/v2 takes API keys only.
 */
export interface OAuthClientRepository {
  list(): Promise<OAuthClient[]>;
  get(id: number): Promise<OAuthClient | undefined>;
  /** getByClientId finds a client by its public id; clientId is unique (StorageConflictError `client_id`). */
  getByClientId(clientId: string): Promise<OAuthClient | undefined>;
  create(client: NewOAuthClient): Promise<OAuthClient>;
  /** update replaces a client's description, scopes and tags (its id, secret and tokens stay); undefined when there is none. */
  update(id: number, patch: Pick<OAuthClient, 'description' | 'scopes' | 'tags'>): Promise<OAuthClient | undefined>;
  setLastUsed(id: number, at: Date): Promise<boolean>;
  /** delete removes a client and, in the same transaction, every token it was issued. */
  delete(id: number): Promise<boolean>;
  /** createToken stores a token of an existing client (a missing client is a StorageConflictError `client_id`); prefix is unique. */
  createToken(token: NewOAuthToken): Promise<OAuthToken>;
  getToken(prefix: string): Promise<OAuthToken | undefined>;
  /** deleteExpiredTokens removes the tokens whose expiresAt is at or before `now`; returns how many. */
  deleteExpiredTokens(now: Date): Promise<number>;
}

/**
 * ConsoleSessionRow is an admin console session as stored: `id` is the SHA-256 hash of the cookie's secret (the
 * secret itself is never stored), `admin` who signed in (the provider's e-mail address or subject, or the name a
 * sign-in link made on the host was given: `headway console link` uses the host account's), `via` how, and `csrf` the token every change must carry in a header.
 */
export interface ConsoleSessionRow {
  id: string;
  admin: string;
  via: 'link' | 'oidc';
  csrf: string;
  createdAt: Date;
  lastSeenAt: Date;
}

/**
 * ConsoleSessionRepository keeps admin console sessions and one-time sign-in links, so that every instance sharing
 * the database knows them and a restart keeps them. Optional on a storage adapter: without it the server keeps them
 * in memory (and says so at start).
 */
export interface ConsoleSessionRepository {
  create(row: ConsoleSessionRow): Promise<void>;
  get(id: string): Promise<ConsoleSessionRow | undefined>;
  /** touch moves a session's lastSeenAt forward (never back). */
  touch(id: string, at: Date): Promise<void>;
  delete(id: string): Promise<boolean>;
  /** deleteIdle removes sessions last seen before `idleBefore` or created before `createdBefore`; returns how many. */
  deleteIdle(idleBefore: Date, createdBefore: Date): Promise<number>;
  /** createLink stores a sign-in link by the hash of its token, with the administrator it signs in. */
  createLink(hash: string, admin: string, expiresAt: Date): Promise<void>;
  /**
   * spendLink marks an unexpired, unspent link spent with a guarded update and answers its administrator when this
   * call spent it (undefined otherwise), so two requests racing with one link cannot both sign in.
   */
  spendLink(hash: string, now: Date): Promise<string | undefined>;
  /** deleteExpiredLinks removes links that expired before `now` (spent or not); returns how many. */
  deleteExpiredLinks(now: Date): Promise<number>;
}

export interface StorageRepositories {
  users: UserRepository;
  nodes: NodeRepository;
  preAuthKeys: PreAuthKeyRepository;
  apiKeys: ApiKeyRepository;
  pendingRegistrations: PendingRegistrationRepository;
  policy: PolicyRepository;
}

export interface StoragePort extends StorageRepositories {
  /** driveGrants is present when the adapter can keep Taildrive grants (the SQL adapters can). */
  readonly driveGrants?: DriveGrantRepository;
  /** oauthClients is present when the adapter can keep /api/v2 OAuth clients and their tokens (the SQL adapters can). */
  readonly oauthClients?: OAuthClientRepository;
  /** dnsSettings is present when the adapter can keep the DNS settings of dns.mode: database (the SQL adapters can). */
  readonly dnsSettings?: DnsSettingsRepository;
  /** cluster is present when several instances may share this database (PostgreSQL, MySQL/MariaDB); see ClusterPort. */
  readonly cluster?: ClusterPort;
  /** audit is present when the adapter keeps the audit log (the SQL adapters do). */
  readonly audit?: AuditRepository;
  /** consoleSessions is present when the adapter keeps admin console sessions and sign-in links (the SQL adapters do). */
  readonly consoleSessions?: ConsoleSessionRepository;
  /** migrate brings the schema up to date; refuses a database written by a newer Headway. */
  migrate(): Promise<void>;
  /**
   * transaction runs fn with repositories bound to one database transaction: it
   * commits when fn resolves and rolls back (rethrowing) when fn rejects. fn must
   * use only `tx`: on a single-connection database (SQLite) a call through the
   * storage itself would wait for the connection the transaction holds. A deadlock
   * or serialization failure rejects with `StorageRetryableError`, after rollback,
   * so the caller may run the whole transaction again.
   */
  transaction<T>(fn: (tx: StorageRepositories) => Promise<T>): Promise<T>;
  /** ping answers when the database answers (used by /health). */
  ping(): Promise<void>;
  /** describe names the database for logs, e.g. `postgres 127.0.0.1:5432/headway`. */
  describe(): string;
  close(): Promise<void>;
  /**
   * dump reads every record in one consistent snapshot (a read-only, repeatable-read
   * transaction), for `headway db backup`: a write committed during the dump is either
   * wholly in it or wholly out. Optional so an adapter without it still boots; the
   * storage contract requires it.
   */
  dump?(): Promise<StorageDump>;
  /**
   * restore writes a dump into this storage in one transaction, keeping every id, key
   * hash and timestamp (devices keep working without re-registering), then moves id
   * counters past the restored ids. It refuses a storage holding any record with
   * StorageNotEmptyError unless `replace`, which deletes everything first in the same
   * transaction. On any failure nothing is changed.
   */
  restore?(dump: StorageDump, opts?: RestoreOptions): Promise<void>;
  /**
   * nativeBackup writes a consistent copy of the database in its own file format to
   * `path` (SQLite: the online backup API, which sees writes still in the WAL). Only
   * file databases have it; the others are backed up with dump.
   */
  nativeBackup?(path: string): Promise<void>;
  /**
   * readNativeBackup reads a file nativeBackup wrote (a SQLite database) into a dump,
   * without changing the file, so a SQLite backup restores into any database.
   */
  readNativeBackup?(path: string): Promise<StorageDump>;
}

/**
 * StorageDump is the whole content of a storage as domain records, the same shapes the
 * repositories return. It is what the JSON backup holds and what an importer (such as a
 * headscale migration) builds: restore keeps the ids it carries.
 */
export interface StorageDump {
  /** kind names the database family the records came from: `sqlite`, `postgres`, `mysql`, `memory`. */
  kind: string;
  /** schemaVersion is the source's schema version (SQL migrations); 0 for a store without migrations. */
  schemaVersion: number;
  users: User[];
  preAuthKeys: PreAuthKey[];
  nodes: Node[];
  apiKeys: ApiKey[];
  pendingRegistrations: PendingRegistration[];
  /** driveGrants are the Taildrive grants the storage keeps (@headway/drive-db); absent: it keeps none. */
  driveGrants?: DriveGrantRecord[];
  /** oauthClients are the /api/v2 OAuth clients (their access tokens live an hour and are not kept); absent: none. */
  oauthClients?: OAuthClient[];
  policy: PolicyRecord | null;
  /** dnsSettings are the DNS settings `dns.mode: database` keeps; absent or null: none stored. */
  dnsSettings?: DnsSettingsRecord | null;
}

export interface RestoreOptions {
  /** replace deletes every record already in the storage, in the restore's transaction. */
  replace?: boolean;
}

/** StorageCounts says how many records of each kind a storage or a dump holds. */
export interface StorageCounts {
  users: number;
  nodes: number;
  preAuthKeys: number;
  apiKeys: number;
  pendingRegistrations: number;
  /** driveGrants: stored Taildrive grants (0 or absent for a storage without them). */
  driveGrants?: number;
  /** oauthClients: stored OAuth clients (0 or absent for a storage without them). */
  oauthClients?: number;
  /** dnsSettings: 1 when DNS settings are stored (dns.mode: database), else 0 or absent. */
  dnsSettings?: number;
  policy: number;
}

/** countDump counts the records of a dump, for messages and the backup header. */
export function countDump(d: Omit<StorageDump, 'kind' | 'schemaVersion'>): StorageCounts {
  return {
    users: d.users.length, nodes: d.nodes.length, preAuthKeys: d.preAuthKeys.length, apiKeys: d.apiKeys.length,
    pendingRegistrations: d.pendingRegistrations.length, policy: d.policy ? 1 : 0,
    ...(d.driveGrants?.length ? { driveGrants: d.driveGrants.length } : {}),
    ...(d.oauthClients?.length ? { oauthClients: d.oauthClients.length } : {}),
    ...(d.dnsSettings ? { dnsSettings: 1 } : {}),
  };
}

/** describeCounts renders counts as `3 users, 2 nodes, 1 pre-auth key, ...`, leaving out zeros. */
export function describeCounts(c: StorageCounts): string {
  const parts: Array<[number, string, string]> = [
    [c.users, 'user', 'users'], [c.nodes, 'node', 'nodes'], [c.preAuthKeys, 'pre-auth key', 'pre-auth keys'],
    [c.apiKeys, 'API key', 'API keys'], [c.pendingRegistrations, 'pending registration', 'pending registrations'],
    [c.policy, 'policy', 'policies'], [c.driveGrants ?? 0, 'drive grant', 'drive grants'],
    [c.oauthClients ?? 0, 'OAuth client', 'OAuth clients'],
    [c.dnsSettings ?? 0, 'DNS settings record', 'DNS settings records'],
  ];
  const text = parts.filter(([n]) => n > 0).map(([n, one, many]) => `${n} ${n === 1 ? one : many}`).join(', ');
  return text || 'no records';
}

/**
 * StorageNotEmptyError: restore was asked to write into a storage that already holds
 * records, and was not told to replace them. Nothing was written.
 */
export class StorageNotEmptyError extends Error {
  constructor(readonly database: string, readonly counts: StorageCounts) {
    super(`${database} is not empty (it holds ${describeCounts(counts)}); restore writes only into an empty database, `
      + 'unless told to replace its content');
    this.name = 'StorageNotEmptyError';
  }
}

export const STORAGE = 'storage';

const STORAGE_METHODS = ['migrate', 'transaction', 'ping', 'describe', 'close'] as const;
const REPO_METHODS: Record<keyof StorageRepositories, readonly string[]> = {
  users: ['list', 'get', 'getByName', 'create', 'update', 'delete'],
  nodes: ['list', 'get', 'getByMachineKey', 'getByNodeKey', 'create', 'update', 'delete'],
  preAuthKeys: ['list', 'get', 'getByPrefix', 'create', 'markUsed', 'setExpiration', 'delete'],
  apiKeys: ['list', 'get', 'getByPrefix', 'create', 'update', 'delete'],
  pendingRegistrations: ['get', 'put', 'putWithinQuota', 'delete', 'deleteByMachineKey', 'deleteExpired'],
  policy: ['get', 'set'],
};

/** assertStoragePort fails at boot, naming the adapter and every missing method. */
export function assertStoragePort(value: unknown, adapter: string): asserts value is StoragePort {
  assertPort(value, adapter, 'storage', STORAGE_METHODS, REPO_METHODS);
}

/** StorageConflictError is a uniqueness violation; `field` names the column when known. */
export class StorageConflictError extends Error {
  constructor(message: string, readonly field?: string) {
    super(message);
    this.name = 'StorageConflictError';
  }
}

/**
 * StorageRetryableError: the database gave up on a transaction because of other
 * transactions (deadlock, serialization failure, lock wait timeout, busy file).
 * Nothing was written; running the same transaction again may succeed.
 */
export class StorageRetryableError extends Error {
  constructor(message: string, cause?: unknown) {
    super(message, { cause });
    this.name = 'StorageRetryableError';
  }
}

/** StorageVersionError: the database was written by a newer Headway than this one. */
export class StorageVersionError extends Error {
  constructor(readonly found: number, readonly supported: number) {
    super(`database schema version ${found} is newer than this Headway supports (${supported}); upgrade Headway`);
    this.name = 'StorageVersionError';
  }
}
