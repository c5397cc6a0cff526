import { StorageConflictError } from '@headway/core/ports';

/**
 * CONSTRAINT_COLUMNS maps the constraint names 0001_initial gives its unique
 * indexes and foreign keys to the column they guard, for drivers (MySQL) whose
 * error names only the constraint.
 */
const CONSTRAINT_COLUMNS: Record<string, string> = {
  users_name_unique: 'name',
  users_provider_id_unique: 'provider_id',
  nodes_machine_key_unique: 'machine_key',
  nodes_node_key_unique: 'node_key',
  nodes_given_name_unique: 'given_name',
  nodes_ipv4_unique: 'ipv4',
  nodes_ipv6_unique: 'ipv6',
  pre_auth_keys_prefix_unique: 'prefix',
  api_keys_prefix_unique: 'prefix',
  nodes_user_id_foreign: 'user_id',
  nodes_auth_key_id_foreign: 'auth_key_id',
  pre_auth_keys_user_id_foreign: 'user_id',
  oauth_clients_client_id_unique: 'client_id',
  oauth_tokens_prefix_unique: 'prefix',
  oauth_tokens_client_id_foreign: 'client_id',
};

interface DriverError {
  code?: unknown;
  errno?: unknown;
  constraint?: unknown;
  detail?: unknown;
  message?: unknown;
  sqlMessage?: unknown;
}

function text(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** uniqueViolationColumn returns the column of a unique violation, '' if unknown, or undefined if `err` is not one. */
function uniqueViolationColumn(err: DriverError): string | undefined {
  const code = text(err.code);
  // PostgreSQL unique_violation; detail reads `Key (name)=(alice) already exists.`
  if (code === '23505') {
    const fromDetail = /Key \(([^)]+)\)=/.exec(text(err.detail))?.[1];
    return fromDetail ?? CONSTRAINT_COLUMNS[text(err.constraint)] ?? '';
  }
  // MySQL/MariaDB: `Duplicate entry 'alice' for key 'users_name_unique'` (MySQL 8 prefixes `users.`).
  if (code === 'ER_DUP_ENTRY' || err.errno === 1062) {
    const key = /for key '(?:[^'.]+\.)?([^']+)'/.exec(text(err.sqlMessage) || text(err.message))?.[1] ?? '';
    return CONSTRAINT_COLUMNS[key] ?? '';
  }
  // SQLite: `UNIQUE constraint failed: users.name`
  if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') {
    return /constraint failed: [^.\s]+\.(\w+)/.exec(text(err.message))?.[1] ?? '';
  }
  return undefined;
}

interface ForeignKeyViolation {
  /** column is the referencing column, '' when the driver does not say. */
  column: string;
  /** stillReferenced: a delete hit rows that point at it; false: a write pointed at a missing row. */
  stillReferenced: boolean | undefined;
}

/** foreignKeyViolation describes a foreign-key violation, or returns undefined if `err` is not one. */
function foreignKeyViolation(err: DriverError): ForeignKeyViolation | undefined {
  const code = text(err.code);
  if (code === '23503') {
    return {
      column: CONSTRAINT_COLUMNS[text(err.constraint)] ?? '',
      stillReferenced: /still referenced/.test(text(err.detail)),
    };
  }
  if (code === 'ER_ROW_IS_REFERENCED_2' || code === 'ER_NO_REFERENCED_ROW_2' || err.errno === 1451 || err.errno === 1452) {
    return {
      column: /FOREIGN KEY \(`([^`]+)`\)/.exec(text(err.sqlMessage) || text(err.message))?.[1] ?? '',
      stillReferenced: code === 'ER_ROW_IS_REFERENCED_2' || err.errno === 1451,
    };
  }
  // SQLite names neither the key nor the direction; the caller may know both.
  // An ON DELETE RESTRICT action reports itself as a trigger failure.
  if (code === 'SQLITE_CONSTRAINT_FOREIGNKEY'
    || (code === 'SQLITE_CONSTRAINT_TRIGGER' && /FOREIGN KEY constraint failed/.test(text(err.message)))) {
    return { column: '', stillReferenced: undefined };
  }
  return undefined;
}

/**
 * toStorageError turns a driver's unique or foreign-key violation into a
 * StorageConflictError whose `field` is the column (e.g. `machine_key`), so the
 * kernel handles all three databases alike. Other errors pass through unchanged.
 * `table` names the table written, for the message; `fkField` is used when the
 * driver does not name the foreign-key column (SQLite).
 */
export function toStorageError(err: unknown, table: string, fkField?: string): unknown {
  if (typeof err !== 'object' || err === null) return err;
  const driverError = err as DriverError;
  const unique = uniqueViolationColumn(driverError);
  if (unique !== undefined) {
    const field = unique || undefined;
    return new StorageConflictError(`${table}: ${field ?? 'a unique column'} already exists`, field);
  }
  const fk = foreignKeyViolation(driverError);
  if (fk !== undefined) {
    const field = fk.column || fkField;
    const what = fk.stillReferenced === undefined ? 'references a missing row or is still referenced'
      : fk.stillReferenced ? 'is still referenced by other rows' : 'references a row that does not exist';
    return new StorageConflictError(`${table}: ${field ?? 'a foreign key'} ${what}`, field);
  }
  return err;
}


/**
 * isRetryableError recognises a transaction the database aborted because of
 * other transactions (PostgreSQL serialization failure or deadlock, MySQL
 * deadlock or lock wait timeout, MariaDB 11.6+ "record has changed since last read"
 * under innodb_snapshot_isolation, SQLite busy or locked): running it again may succeed.
 */
export function isRetryableError(err: unknown): boolean {
  if (typeof err !== 'object' || err === null) return false;
  const e = err as DriverError;
  const code = text(e.code);
  if (code === '40001' || code === '40P01' || code === '55P03') return true;
  if (code === 'ER_LOCK_DEADLOCK' || code === 'ER_LOCK_WAIT_TIMEOUT' || e.errno === 1213 || e.errno === 1205) return true;
  if (code === 'ER_CHECKREAD' || e.errno === 1020) return true;
  return code === 'SQLITE_BUSY' || code.startsWith('SQLITE_BUSY_') || code === 'SQLITE_LOCKED' || code.startsWith('SQLITE_LOCKED_');
}
