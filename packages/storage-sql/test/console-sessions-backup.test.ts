// A native SQLite backup (`headway db backup --format native`) leaves the admin console's sessions and links behind:
// the file's console tables are empty (and vacuumed, so no freed page keeps a row), while the records are all there.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { openSqliteStorage } from '../src/index.js';

interface Db { prepare(sql: string): { get(): Record<string, unknown> }; close(): void }
const Database = createRequire(import.meta.url)('better-sqlite3') as new (filename: string, o: { readonly: boolean }) => Db;

t.test('a native backup carries no console session or link', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-console-backup-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const storage = await openSqliteStorage({ path: join(dir, 'db.sqlite') });
  t.teardown(() => storage.close());
  const id = 'ab'.repeat(32);
  const now = new Date();
  await storage.consoleSessions!.create({ id, admin: 'erin@example.com', via: 'oidc', csrf: 'q'.repeat(43), createdAt: now, lastSeenAt: now });
  await storage.consoleSessions!.createLink('cd'.repeat(32), 'frank', new Date(now.getTime() + 60_000));
  await storage.users.create({ name: 'kept-user' });

  const file = join(dir, 'backup.sqlite');
  await storage.nativeBackup!(file);
  const db = new Database(file, { readonly: true });
  try {
    t.equal(db.prepare('select count(*) as n from console_sessions').get().n, 0, 'no session in the backup');
    t.equal(db.prepare('select count(*) as n from console_links').get().n, 0, 'no link in the backup');
    t.equal(db.prepare("select count(*) as n from users where name = 'kept-user'").get().n, 1, 'the records are there');
  } finally {
    db.close();
  }
  const bytes = readFileSync(file).toString('latin1');
  t.notOk(bytes.includes(id) || bytes.includes('erin@example.com'), 'not even a freed page holds the session');
  t.ok(await storage.consoleSessions!.get(id), 'the live database keeps its session');
});
