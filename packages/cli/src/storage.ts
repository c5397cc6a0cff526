import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  adapterPackage, assertStoragePort, createLogger, formatProblem, importDescriptor, loadConfig, pluginOptions,
  STORAGE, type HeadwayConfig, type StoragePort,
} from '@headway/core/ports';

/*
 * `headway db backup|restore` open the configured database themselves, as the
 * server does at start-up (same config file, same adapter), instead of asking the
 * running server over its socket: a restore must run while the server is stopped
 * (its memory would not know the restored rows), a backup works whether or not it
 * runs, and the backup file never crosses the API. All three databases allow a
 * second reader next to the server: SQLite in WAL mode, PostgreSQL and MySQL over
 * their own connections.
 */

/** ConfiguredStorage is the opened database with the config it came from. */
export interface ConfiguredStorage {
  storage: StoragePort;
  config: HeadwayConfig;
  /** source is the config file read, or undefined for built-in defaults. */
  source: string | null;
}

/** readConfig loads the config as the server would and refuses one with errors, naming them. */
export function readConfig(configPath: string | undefined): { config: HeadwayConfig; source: string | null } {
  const { config, source, problems } = loadConfig(configPath ? { path: configPath } : {});
  const errors = problems.filter((p) => p.level !== 'warn');
  if (errors.length) throw new Error(`the config has errors (run \`headway config check\`): ${errors.map(formatProblem).join('; ')}`);
  return { config, source };
}

/**
 * openConfiguredStorage opens (and migrates) the database the config names through
 * its adapter package. `awilix` is loaded here only, so other commands never pay for it.
 * `migrate: false` opens it as it is (Headway's own adapters then create no table).
 */
export async function openConfiguredStorage(config: HeadwayConfig, opts: { migrate?: boolean } = {}): Promise<StoragePort> {
  const { createContainer } = await import('awilix');
  const id = config.database.type;
  const descriptor = await importDescriptor('storage', adapterPackage('storage', id), 'database.type');
  const options = await pluginOptions(descriptor, {}, `database.type (${id})`);
  const container = createContainer();
  // Warnings from the adapter reach stderr; stdout stays the command's.
  const logger = createLogger({ level: 'warn' });
  await descriptor.register({ container, config, logger, options, ...(opts.migrate === false ? { migrate: false } : {}) });
  const storage = container.resolve<StoragePort>(STORAGE);
  assertStoragePort(storage, id);
  return storage;
}

/**
 * runningServerPid returns the pid in the data directory's `headway.lock` when that
 * process is alive and looks like Headway (node), else undefined: restore refuses to
 * write under a running server.
 */
export function runningServerPid(dataDir: string): number | undefined {
  let pid: number;
  try {
    pid = Number(readFileSync(join(dataDir, 'headway.lock'), 'utf8').trim());
  } catch {
    return undefined;
  }
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return undefined;
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return undefined;
  }
  try {
    return /node|headway/i.test(readFileSync(`/proc/${pid}/cmdline`, 'utf8')) ? pid : undefined;
  } catch {
    return pid;
  }
}
