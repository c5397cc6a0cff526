import type {
  ApiKey, NewApiKey, NewNode, NewPreAuthKey, Node, NodePatch, PendingRegistration,
  PolicyRecord, PreAuthKey, User, UserInput,
} from '../domain.js';
import { assertPort } from './assert.js';

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

export interface PendingRegistrationRepository {
  get(key: string): Promise<PendingRegistration | undefined>;
  put(reg: PendingRegistration): Promise<void>;
  delete(key: string): Promise<boolean>;
  /** deleteByMachineKey removes a machine's waiting logins (a new one replaces them); returns how many. */
  deleteByMachineKey(machineKey: string): Promise<number>;
  deleteExpired(now: Date): Promise<number>;
}

export interface PolicyRepository {
  get(): Promise<PolicyRecord | undefined>;
  set(text: string): Promise<PolicyRecord>;
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
}

export const STORAGE = 'storage';

const STORAGE_METHODS = ['migrate', 'transaction', 'ping', 'describe', 'close'] as const;
const REPO_METHODS: Record<keyof StorageRepositories, readonly string[]> = {
  users: ['list', 'get', 'getByName', 'create', 'update', 'delete'],
  nodes: ['list', 'get', 'getByMachineKey', 'getByNodeKey', 'create', 'update', 'delete'],
  preAuthKeys: ['list', 'get', 'getByPrefix', 'create', 'markUsed', 'setExpiration', 'delete'],
  apiKeys: ['list', 'get', 'getByPrefix', 'create', 'update', 'delete'],
  pendingRegistrations: ['get', 'put', 'delete', 'deleteByMachineKey', 'deleteExpired'],
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
