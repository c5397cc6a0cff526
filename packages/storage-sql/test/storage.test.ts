// Run the whole suite in a zone with an odd offset: a date that goes through local
// time anywhere on its way to or from the database shows up as a wrong instant.
process.env.TZ = 'Pacific/Chatham';

import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteStorage } from '../src/index.js';
import { runSqlStorageContract as runStorageContract } from './contract.js';
import { onServers } from './databases.js';

/** The slice of better-sqlite3 used here (the package ships no types; knex loads it the same way). */
interface Db { pragma(s: string, o: { simple: true }): unknown; close(): void }
const Database = createRequire(import.meta.url)('better-sqlite3') as new (filename: string, o: { readonly: boolean }) => Db;

await t.test('sqlite file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-storage-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'nested', 'dir', 'db.sqlite');
  await runStorageContract(t, 'sqlite (file, WAL)', (o) => openSqliteStorage({ path, wal: true, ...o }));
  t.ok(existsSync(path), 'the parent directories and the file were created');
  // WAL is a property of the file (SQLite keeps it across connections), so a fresh connection shows it.
  const db = new Database(path, { readonly: true });
  let journalMode: unknown;
  try {
    journalMode = db.pragma('journal_mode', { simple: true });
  } finally {
    db.close();
  }
  t.equal(journalMode, 'wal', 'wal: true left the database in WAL journal mode');
});

await t.test('sqlite :memory:', async (t) => {
  await runStorageContract(t, 'sqlite (:memory:)', (o) => openSqliteStorage({ path: ':memory:', ...o }), { reopens: false });
});

await onServers(t, 8, (t, name, open) => runStorageContract(t, name, open));
