// audit_log on SQLite, PostgreSQL and MySQL/MariaDB: entries come back newest first, exactly as written,
// filtered and paged; over-long values are cut rather than refused; pruning removes only older entries.
import t, { type Test } from 'tap';
import type { AuditEntry, StoragePort } from '@headway/core/ports';
import { freshDatabases } from './databases.js';

async function auditSuite(t: Test, name: string, storage: StoragePort): Promise<void> {
  const repo = storage.audit!;
  t.ok(repo, `${name}: the SQL storage keeps an audit log`);
  t.same(await repo.list({ limit: 10 }), [], 'empty after the migration');
  const base = Date.UTC(2026, 10, 1, 12, 0, 0, 123);
  const written: AuditEntry[] = [];
  for (let i = 0; i < 5; i++) {
    written.push(await repo.append({
      at: new Date(base + i * 86_400_000), actor: i % 2 ? 'apikey:0123456789ab' : 'socket', action: i === 4 ? 'renameNode' : 'createUser',
      target: `user ${i} (ünïcode ${'✓'.repeat(i)})`, remote: i % 2 ? '2001:db8::7' : '',
    }));
  }
  t.ok(written.every((e, i) => i === 0 || e.id > written[i - 1]!.id), 'ids grow');
  const all = await repo.list({ limit: 10 });
  t.same(all, [...written].reverse(), `${name}: newest first, every field as written (milliseconds, unicode, IPv6)`);
  t.same((await repo.list({ limit: 2 })).map((e) => e.id), [written[4]!.id, written[3]!.id], 'limit');
  t.same((await repo.list({ limit: 10, before: written[2]!.id })).map((e) => e.id), [written[1]!.id, written[0]!.id], 'before pages back');
  t.same((await repo.list({ limit: 10, actor: 'socket' })).map((e) => e.id), [written[4]!.id, written[2]!.id, written[0]!.id], 'by actor');
  t.same((await repo.list({ limit: 10, action: 'renameNode' })).map((e) => e.id), [written[4]!.id], 'by action');
  t.same(await repo.list({ limit: 10, actor: 'nobody' }), [], 'an unknown actor finds nothing');

  const long = await repo.append({ at: new Date(base), actor: 'a'.repeat(400), action: 'b'.repeat(200), target: 'c'.repeat(5000), remote: 'd'.repeat(300) });
  const [stored] = await repo.list({ limit: 1 });
  t.same(stored, long, 'what append answered is what was stored');
  t.same([stored!.actor.length, stored!.action.length, stored!.target.length, stored!.remote.length], [255, 128, 1024, 255], `${name}: over-long values are cut to the columns`);

  t.equal(await repo.prune(new Date(base + 2 * 86_400_000)), 3, 'prune removes the entries made before the time (two days, and the long one)');
  t.same((await repo.list({ limit: 10 })).map((e) => e.id), [written[4]!.id, written[3]!.id, written[2]!.id], 'the newer ones remain');
}

for (const db of freshDatabases(t, 'audit')) {
  await t.test(db.name, (t) => db.fresh(async (open) => auditSuite(t, db.name, await open())));
}
