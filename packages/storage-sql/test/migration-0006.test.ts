// 0006_pending_quota on a database holding logins written before it: they are kept, with no source, and
// count against the overall cap (not any address's) until they expire; the lock row is in place, on every
// database (SQLite always, PostgreSQL and MariaDB when their URLs are set).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { PendingRegistration, StoragePort } from '@headway/core/ports';
import { MIGRATIONS, openSqliteStorage, type OpenOptions } from '../src/index.js';
import { onServers } from './databases.js';

const BEFORE = MIGRATIONS.slice(0, 5);

async function check(t: Test, open: (o: Partial<OpenOptions>) => Promise<StoragePort>): Promise<void> {
  t.equal(BEFORE[BEFORE.length - 1]!.name, '0005_cluster', 'migrated up to just before 0006');
  const now = new Date();
  const reg = (i: number, machineKey = `mkey:old-${i}`): PendingRegistration => ({
    key: `old${i}`, machineKey, nodeKey: `nodekey:old-${i}`, hostinfo: { Hostname: `old-${i}` },
    createdAt: new Date(now.getTime() - 60_000), expiresAt: new Date(now.getTime() + 600_000),
  });
  const old = await open({ migrations: BEFORE });
  try {
    for (let i = 0; i < 3; i++) await old.pendingRegistrations.put(reg(i));
  } finally {
    await old.close();
  }
  const storage = await open({});
  try {
    for (let i = 0; i < 3; i++) t.same(await storage.pendingRegistrations.get(`old${i}`), reg(i), `login ${i} written before is kept as it was`);
    const caps = { perMachine: 3, perSource: 1, total: 5 };
    const fresh = (key: string, machineKey: string): PendingRegistration => ({ ...reg(9, machineKey), key, nodeKey: `nodekey:${key}` });
    t.same(await storage.pendingRegistrations.putWithinQuota(fresh('new1', 'mkey:new-1'), '192.0.2.1', caps, now), { stored: true, replaced: [] },
      'the old logins count against no address');
    t.same(await storage.pendingRegistrations.putWithinQuota(fresh('new2', 'mkey:new-2'), '192.0.2.2', caps, now), { stored: true, replaced: [] });
    t.same(await storage.pendingRegistrations.putWithinQuota(fresh('new3', 'mkey:new-3'), '192.0.2.3', caps, now), { stored: false, limit: 'total', waiting: 5 },
      'but overall: three old and two new fill a cap of five');
    t.same(await storage.pendingRegistrations.putWithinQuota(fresh('new4', 'mkey:old-0'), '192.0.2.4', { ...caps, perMachine: 1 }, now), { stored: true, replaced: ['old0'] },
      'an old login is replaced by its machine\'s new one');
    await storage.migrate();
    t.same(await storage.pendingRegistrations.get('new4'), { ...fresh('new4', 'mkey:old-0') }, 'migrating again changes nothing');
  } finally {
    await storage.close();
  }
}

await t.test('sqlite', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-0006-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  await check(t, (o) => openSqliteStorage({ path: join(dir, 'db.sqlite'), ...o }));
});

await onServers(t, 4, (t, _name, open) => check(t, open));
