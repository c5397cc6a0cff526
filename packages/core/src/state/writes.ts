import { HeadwayError } from '../errors.js';
import type { Logger } from '../log.js';
import { StorageConflictError, StorageRetryableError, type StoragePort, type StorageRepositories } from '../ports/storage.js';

/**
 * WRITE_ATTEMPTS bounds how often one write runs its transaction again after a
 * deadlock, or a registration after another server took the name or address it proposed.
 */
export const WRITE_ATTEMPTS = 25;

/** atomically runs fn in one transaction, again (a few times) when the database aborted it for a concurrent one. */
export async function atomically<T>(storage: StoragePort, logger: Logger, fn: (tx: StorageRepositories) => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await storage.transaction(fn);
    } catch (err) {
      if (!(err instanceof StorageRetryableError) || attempt >= WRITE_ATTEMPTS) throw err;
      logger.debug('transaction retried', { attempt });
    }
  }
}

/** conflicts turns a database uniqueness violation into a 409 naming the field. */
export async function conflicts<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw conflictError(err);
  }
}

/** conflictError maps a StorageConflictError to a 409 naming the field; other errors pass through. */
export function conflictError(err: unknown): unknown {
  if (err instanceof StorageConflictError) {
    return new HeadwayError('name_taken', `${err.field ?? 'value'} already in use`, err.field);
  }
  return err;
}
