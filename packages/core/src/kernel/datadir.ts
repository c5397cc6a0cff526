import { chmodSync, existsSync, lstatSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeDirectory } from './preflight.js';
import type { Logger } from '../log.js';

/*
 * The data directory holds the database, the private keys and the API socket, so
 * nobody else on the machine may read it, whatever mode it was created with.
 */

const RECORD = 'database.json';

const uid = () => (typeof process.getuid === 'function' ? process.getuid() : -1);

/**
 * prepareDataDir creates the data directory with mode 0700, or tightens an existing
 * one we own (a 0755 directory left by an older version or by mkdir) to 0700.
 */
export function prepareDataDir(dir: string): void {
  makeDirectory(dir, 'data_dir');
  const st = lstatSync(dir);
  if ((st.mode & 0o077) !== 0 && st.uid === uid()) chmodSync(dir, 0o700);
}

/**
 * secureDataDir makes each of `files` (the database with its -wal/-shm/-journal,
 * the private keys, the lock and the database record) 0600, a directory among
 * them 0700, and returns those
 * still readable by others that could not be fixed (not ours, or chmod refused).
 * Only Headway's own files are touched, never the whole tree: data_dir may be a
 * directory shared with other things, such as a home directory.
 */
export function secureDataDir(files: string[]): string[] {
  const open: string[] = [];
  for (const path of new Set(files)) {
    let st;
    try { st = lstatSync(path); } catch { continue; }
    if (!(st.isFile() || st.isDirectory()) || (st.mode & 0o077) === 0) continue;
    try {
      if (st.uid !== uid()) throw new Error('not owned by this user');
      chmodSync(path, st.isDirectory() ? 0o700 : 0o600);
    } catch {
      open.push(`${path} (${(st.mode & 0o777).toString(8).padStart(4, '0')})`);
    }
  }
  return open;
}

/** dataDirFiles lists the directory itself and the files Headway keeps there besides the database and keys. */
export function dataDirFiles(dir: string): string[] {
  return [dir, join(dir, 'headway.lock'), join(dir, RECORD)];
}

/** warnOpenFiles is the one start-up warning about files secureDataDir could not tighten. */
export function warnOpenFiles(logger: Logger, open: string[]): void {
  if (!open.length) return;
  logger.warn(`readable by other users and could not be restricted (chown them to the user running Headway, or chmod go-rwx): ${open.join(', ')}`);
}

/** Locks held by this process: a second server in the same process must be refused too. */
const held = new Set<string>();

/** DataDirLockedError names the other server's pid so the one FATAL line says who holds the directory. */
export class DataDirLockedError extends Error {
  constructor(readonly dir: string, readonly pid: number) {
    super(`another Headway (pid ${pid}) uses the data directory ${dir}; stop it first, or give this server its own data_dir`);
    this.name = 'DataDirLockedError';
  }
}

/**
 * alive reports whether `pid` is a running process that could be Headway. A pid
 * taken over by an unrelated program after a crash (common in containers, where
 * Headway is often pid 1) counts as dead, so its stale lock is taken over.
 */
function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (pid === process.pid) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    return /node|headway/i.test(cmd);
  } catch {
    return true;
  }
}

/**
 * lockDataDir takes `headway.lock` (holding our pid) in the data directory, so two
 * servers never share one database and socket. A lock left by a dead process is
 * taken over. The returned function releases it.
 */
export function lockDataDir(dir: string): () => void {
  const path = join(dir, 'headway.lock');
  if (held.has(path)) throw new DataDirLockedError(dir, process.pid);
  for (let attempt = 0; ; attempt++) {
    try {
      writeFileSync(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 2) throw err;
      let pid = NaN;
      try { pid = Number(readFileSync(path, 'utf8').trim()); } catch { /* vanished: retry */ }
      if (alive(pid)) throw new DataDirLockedError(dir, pid);
      try { unlinkSync(path); } catch { /* another starter took it over first: retry */ }
    }
  }
  held.add(path);
  return () => {
    held.delete(path);
    try {
      if (existsSync(path) && readFileSync(path, 'utf8').trim() === String(process.pid)) unlinkSync(path);
    } catch { /* already gone */ }
  };
}

/** DatabaseRecord is what data_dir/database.json remembers about the database last used. */
export interface DatabaseRecord {
  type: string;
  database: string;
  users: number;
  nodes: number;
  updated: string;
}

export function readDatabaseRecord(dir: string): DatabaseRecord | undefined {
  try {
    const r = JSON.parse(readFileSync(join(dir, RECORD), 'utf8')) as DatabaseRecord;
    return typeof r.database === 'string' && typeof r.type === 'string' ? r : undefined;
  } catch {
    return undefined;
  }
}

export function writeDatabaseRecord(dir: string, r: Omit<DatabaseRecord, 'updated'>): void {
  writeFileSync(join(dir, RECORD), JSON.stringify({ ...r, updated: new Date().toISOString() }, null, 2) + '\n', { mode: 0o600 });
}

/**
 * databaseSwitchWarning says, once, that the database changed to an empty one while
 * the one this data directory used before still holds data: starting empty after
 * editing database.type otherwise looks like data loss.
 */
export function databaseSwitchWarning(prev: DatabaseRecord | undefined, now: Omit<DatabaseRecord, 'updated'>): string | undefined {
  if (!prev || prev.database === now.database) return undefined;
  if (prev.users + prev.nodes === 0 || now.users + now.nodes > 0) return undefined;
  return `the database is now ${now.database} (database.type ${now.type}) and it is empty, but this data directory last used ${prev.database} (database.type ${prev.type}), which still holds ${prev.users} users and ${prev.nodes} nodes; `
    + `to keep them, set database.type back to ${prev.type}, or move them before registering devices: with the old database.type run "headway db backup --format json FILE", then with the new one (server stopped) "headway db restore FILE"`;
}
