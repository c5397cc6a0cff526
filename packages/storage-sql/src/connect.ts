import type { Knex } from 'knex';

/** ConnectionTarget names a database for error messages; it never carries the password. */
export interface ConnectionTarget {
  /** kind is the database family, e.g. `postgres`, `mysql`, `sqlite`. */
  kind: string;
  /** address is `host:port` or, for SQLite, the file path. */
  address: string;
  database?: string;
  user?: string;
}

/**
 * driverReason extracts the driver's own words from a connection error. Node 20
 * reports a refused dual-stack connect as an AggregateError with an empty
 * message, so the first inner error stands in for it.
 */
function driverReason(err: unknown): string {
  if (err instanceof AggregateError && !err.message && err.errors.length > 0) return driverReason(err.errors[0]);
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    if (err.message) return err.message;
    if (typeof code === 'string') return code;
  }
  return String(err);
}

/**
 * describeConnectionFailure builds the one-line error an operator sees when the
 * database cannot be reached, e.g. `cannot connect to postgres at 127.0.0.1:5432
 * (database headway, user headway): password authentication failed for user "headway"`.
 */
export function describeConnectionFailure(target: ConnectionTarget, err: unknown): Error {
  const details = [
    target.database ? `database ${target.database}` : '',
    target.user ? `user ${target.user}` : '',
  ].filter(Boolean).join(', ');
  const where = `${target.kind} at ${target.address}${details ? ` (${details})` : ''}`;
  return new Error(`cannot connect to ${where}: ${driverReason(err)}`, { cause: err });
}

/**
 * verifyConnection runs `select 1` so a wrong address or password fails at boot
 * with one clear message instead of on the first request. The knex instance is
 * destroyed on failure, so no pool keeps the process alive.
 */
export async function verifyConnection(knex: Knex, target: ConnectionTarget): Promise<void> {
  try {
    await knex.raw('select 1');
  } catch (err) {
    await knex.destroy().catch(() => undefined);
    throw describeConnectionFailure(target, err);
  }
}
