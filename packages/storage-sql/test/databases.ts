import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { StoragePort, StorageRepositories } from '@headway/core/ports';
import { openMysqlStorage, openPostgresStorage, openSqliteStorage, parseConnectionUrl, type OpenOptions } from '../src/index.js';
import { testDatabaseServers, withScratchDatabase } from '../src/testing.js';

export { runDatabaseName, withScratchDatabase } from '../src/testing.js';

/** inCI: in CI every database must run; elsewhere a missing one is skipped with a printed reason. */
export const inCI = process.env.CI === 'true';

/** missingServer skips the database with a printed reason, but fails in CI, where it must run. */
export function missingServer(t: Test, name: string, variable: string): void {
  if (inCI) {
    t.fail(`${name}: ${variable} is not set, and CI must run the storage suite on ${name} (eval "$(bash .ci/databases.sh start)")`);
  } else {
    t.skip(`${name}: ${variable} not set`, () => undefined);
  }
}


/** Opener opens one more storage on the same database (a second server shares it). */
export type Opener = () => Promise<StoragePort>;

/** TestDatabase is one database kind the transactional suites run on. */
export interface TestDatabase {
  name: string;
  /** fresh runs `body` against a new empty database, closing every storage it opened. */
  fresh(body: (open: Opener) => Promise<void>): Promise<void>;
}

/** tracked closes every storage `open` handed out once `body` is done. */
async function tracked(openOne: Opener, body: (open: Opener) => Promise<void>): Promise<void> {
  const opened: StoragePort[] = [];
  try {
    await body(async () => { const s = await openOne(); opened.push(s); return s; });
  } finally {
    for (const s of opened) await s.close();
  }
}

/**
 * freshDatabases lists SQLite (a file in a temporary directory named after `prefix`) and
 * the PostgreSQL and MySQL servers whose URLs are set (each `fresh` on a scratch
 * database); a missing server is skipped with a reason, or fails in CI.
 */
export function freshDatabases(t: Test, prefix: string, pool = 10): TestDatabase[] {
  const databases: TestDatabase[] = [{
    name: 'sqlite',
    async fresh(body) {
      const dir = mkdtempSync(join(tmpdir(), `headway-${prefix}-`));
      try {
        await tracked(() => openSqliteStorage({ path: join(dir, 'db.sqlite') }), body);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  }];
  for (const server of testDatabaseServers()) {
    if (!server.admin) {
      missingServer(t, server.type, server.variable);
      continue;
    }
    const openOne = server.type === 'postgres' ? openPostgresStorage : openMysqlStorage;
    databases.push({
      name: server.type,
      fresh: (body) => server.scratch((connection) => tracked(() => openOne({ connection, pool: { max: pool } }), body)),
    });
  }
  return databases;
}

/** ServerOpen opens a storage on the scratch database, with extra adapter options (`migrations`, ...). */
export type ServerOpen = (o?: Partial<OpenOptions>) => Promise<StoragePort>;

/**
 * onServers runs `suite` on a scratch PostgreSQL and a scratch MySQL/MariaDB database when
 * HEADWAY_TEST_POSTGRES_URL / HEADWAY_TEST_MYSQL_URL are set (see missingServer otherwise).
 */
export async function onServers(t: Test, pool: number, suite: (t: Test, name: 'postgres' | 'mysql', open: ServerOpen) => Promise<void>): Promise<void> {
  const postgresUrl = process.env.HEADWAY_TEST_POSTGRES_URL;
  if (postgresUrl) {
    await t.test('postgres', (t) => withScratchDatabase('pg', parseConnectionUrl(postgresUrl, ['postgres', 'postgresql'], 5432), (connection) =>
      suite(t, 'postgres', (o) => openPostgresStorage({ connection, pool: { max: pool }, ...o }))));
  } else {
    missingServer(t, 'postgres', 'HEADWAY_TEST_POSTGRES_URL');
  }
  const mysqlUrl = process.env.HEADWAY_TEST_MYSQL_URL;
  if (mysqlUrl) {
    await t.test('mysql', (t) => withScratchDatabase('mysql2', parseConnectionUrl(mysqlUrl, ['mysql', 'mariadb'], 3306), (connection) =>
      suite(t, 'mysql', (o) => openMysqlStorage({ connection, pool: { max: pool }, ...o }))));
  } else {
    missingServer(t, 'mysql', 'HEADWAY_TEST_MYSQL_URL');
  }
}

/**
 * FaultyStorage is the real adapter whose transactions fail once at a chosen
 * repository call (`nodes.create`, ...), after the calls before it ran for real.
 */
export interface FaultyStorage {
  storage: StoragePort;
  /** failAt makes the `nth` (default first) `repo.method` call inside a transaction throw `error` (default: a plain Error). */
  failAt(call: string, nth?: number, error?: Error): void;
  /** failNext is failAt(call, 1, error). */
  failNext(call: string, error?: Error): void;
  /** calls lists every repository call made inside transactions, in order. */
  calls: string[];
}

export function faultyStorage(real: StoragePort): FaultyStorage {
  const faults = new Map<string, { left: number; error: Error }>();
  const calls: string[] = [];
  const wrap = (tx: StorageRepositories): StorageRepositories => {
    const out: Record<string, unknown> = {};
    for (const [repoName, repo] of Object.entries(tx)) {
      const methods: Record<string, unknown> = {};
      for (const [m, f] of Object.entries(repo as Record<string, unknown>)) {
        if (typeof f !== 'function') continue;
        methods[m] = async (...args: unknown[]) => {
          const call = `${repoName}.${m}`;
          calls.push(call);
          const fault = faults.get(call);
          if (fault && --fault.left === 0) {
            faults.delete(call);
            throw fault.error;
          }
          return (f as (...a: unknown[]) => Promise<unknown>)(...args);
        };
      }
      out[repoName] = methods;
    }
    return out as unknown as StorageRepositories;
  };
  const failAt = (call: string, nth = 1, error?: Error) => { faults.set(call, { left: nth, error: error ?? new Error(`injected failure in ${call}`) }); };
  return {
    storage: { ...real, transaction: (fn) => real.transaction((tx) => fn(wrap(tx))) },
    failAt,
    failNext: (call, error) => failAt(call, 1, error),
    calls,
  };
}
