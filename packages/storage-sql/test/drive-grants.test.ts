// drive_grants (migration 0004) on SQLite, PostgreSQL and MySQL/MariaDB: the
// migration applies to a database holding 0001 data, and the repository the
// database drive adapter uses keeps every kind of grant end exactly.
process.env.TZ = 'Pacific/Chatham';

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { DriveGrant, StoragePort } from '@headway/core/ports';
import { MIGRATIONS, openSqliteStorage } from '../src/index.js';
import { onServers } from './databases.js';

type Open = (o: { migrations?: typeof MIGRATIONS }) => Promise<StoragePort>;

async function driveGrantSuite(t: Test, name: string, open: Open): Promise<void> {
  const before = MIGRATIONS.findIndex((m) => m.name === '0004_drive_grants');
  t.ok(before > 0, 'the drive_grants migration is in the list');

  // Migrate to just before 0004 and seed, then migrate the rest.
  const old = await open({ migrations: MIGRATIONS.slice(0, before) });
  const user = await old.users.create({ name: 'alice' });
  await old.close();
  const storage = await open({});
  try {
    await checkRepository(t, name, storage, user.id);
  } finally {
    await storage.close();
  }
}

async function checkRepository(t: Test, name: string, storage: StoragePort, userId: number): Promise<void> {
  const user = { id: userId };
  t.equal((await storage.users.get(user.id))?.name, 'alice', `${name}: 0001 data survives the migration`);
  const repo = storage.driveGrants!;
  t.ok(repo, `${name}: the SQL storage offers driveGrants`);
  t.same(await repo.list(), [], 'no grants after the migration');

  const grants: DriveGrant[] = [
    { src: { kind: 'user', id: user.id }, dst: { kind: 'node', id: 7 }, shares: ['docs', 'my files (old)'], access: 'ro' },
    { src: { kind: 'group', name: 'group:eng' }, dst: { kind: 'tag', name: 'tag:nas' }, shares: ['*'], access: 'rw' },
    { src: { kind: 'tag', name: 'tag:ci' }, dst: { kind: 'node', id: 9 }, shares: ['build'], access: 'ro' },
    { src: { kind: 'node', id: 3 }, dst: { kind: 'tag', name: 'tag:nas' }, shares: ['a', 'b'], access: 'rw' },
  ];
  const made = [];
  for (const g of grants) {
    const before = Date.now();
    const r = await repo.create(g);
    t.match(r, g, `${name}: a ${g.src.kind} → ${g.dst.kind} grant is stored as given`);
    t.ok(r.id > 0, 'with an id');
    t.ok(r.createdAt instanceof Date && Math.abs(r.createdAt.getTime() - before) < 60_000, 'and its creation time');
    made.push(r);
  }
  t.same(await repo.list(), made, 'list returns them in id order, unchanged');
  t.same(await repo.get(made[1]!.id), made[1], 'get finds one by id');
  t.equal(await repo.get(999_999), undefined, 'get of an unknown id is undefined');
  t.equal(await repo.delete(made[0]!.id), true, 'delete removes a grant');
  t.equal(await repo.delete(made[0]!.id), false, 'a second delete finds nothing');
  t.same((await repo.list()).map((g) => g.id), made.slice(1).map((g) => g.id), 'the others remain');

  await t.rejects(repo.create({ ...grants[0]!, access: 'xx' as 'ro' }), /access must be ro or rw/, 'a bad access level is refused');
  t.equal((await repo.list()).length, 3, 'and nothing was written');
  await storage.migrate();
  t.equal((await repo.list()).length, 3, 'migrating again is a no-op that keeps the grants');

  // deleteFor removes a deleted node's grants on either end, and nothing else.
  const mine = await repo.create({ src: { kind: 'node', id: 9 }, dst: { kind: 'node', id: 3 }, shares: ['x'], access: 'ro' });
  t.equal(await repo.deleteFor({ kind: 'node', id: 9 }), 2, `${name}: deleteFor removes grants from and to node 9`);
  t.notOk((await repo.list()).some((g) => g.id === mine.id), 'including the one from it');
  t.same((await repo.list()).map((g) => g.src.kind), ['group', 'node'], 'the group grant and node 3\'s own grant remain');
  t.equal(await repo.deleteFor({ kind: 'user', id: 9 }), 0, 'a user with the same id as a node is another end');

  // Backups carry the grants: a dump holds them; a restore brings them back with their ids,
  // and a grant made after the restore gets a new id (the counter moved past the restored ones).
  const kept = await repo.list();
  const dump = await storage.dump!();
  t.same(dump.driveGrants, kept, `${name}: the dump holds every grant`);
  await storage.restore!(dump, { replace: true });
  t.same(await repo.list(), kept, `${name}: restore brings them back, ids and all`);
  const next = await repo.create({ src: { kind: 'tag', name: 'tag:ci' }, dst: { kind: 'node', id: 3 }, shares: ['y'], access: 'ro' });
  t.ok(kept.every((g) => g.id < next.id), `${name}: a new grant gets an id past the restored ones`);
}

await t.test('sqlite', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-drive-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'db.sqlite');
  await driveGrantSuite(t, 'sqlite', (o) => openSqliteStorage({ path, ...o }));
});

await onServers(t, 4, (t, name, open) => driveGrantSuite(t, name, open));
