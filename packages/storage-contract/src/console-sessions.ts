import type { Test } from 'tap';
import { countDump, type ConsoleSessionRow, type StorageDump, type StoragePort } from '@headway/core/ports';

/** hash64 makes a 64-hex-digit key like a SHA-256 hex digest, unique per label. */
const hash64 = (label: string) => Buffer.from(`${label}-${process.pid}-${Math.random()}`).toString('hex').padEnd(64, '0').slice(0, 64);

/**
 * consoleSessionContract covers the admin console's sign-ins where the adapter keeps them (`consoleSessions`):
 * sessions round-trip to the millisecond, touch only moves forward, pruning removes exactly the idle, the too-old and
 * the expired; a link is spent once, even by ten racing calls; and none of it is in a dump or makes a store "not empty".
 */
export async function consoleSessionContract(t: Test, storage: StoragePort, unique: (label: string) => string): Promise<void> {
  const repo = storage.consoleSessions;
  if (!repo) return;
  const base = Date.UTC(2026, 10, 1, 12, 0, 0, 123);
  const at = (minutes: number) => new Date(base + minutes * 60_000);

  await t.test('console sessions: create, get, touch forward only, delete', async (t) => {
    const row: ConsoleSessionRow = { id: hash64('s'), admin: `${unique('admin')}@example.com`, via: 'oidc', csrf: 'c'.repeat(43), createdAt: at(0), lastSeenAt: at(0) };
    await repo.create(row);
    t.same(await repo.get(row.id), row, 'every field as written, milliseconds included');
    t.equal(await repo.get(hash64('unknown')), undefined, 'an unknown id finds nothing');
    await repo.touch(row.id, at(5));
    t.same((await repo.get(row.id))?.lastSeenAt, at(5), 'touch moves lastSeenAt');
    await repo.touch(row.id, at(2));
    t.same((await repo.get(row.id))?.lastSeenAt, at(5), 'an older touch does not move it back');
    t.equal(await repo.delete(row.id), true);
    t.equal(await repo.delete(row.id), false, 'a second delete finds nothing');
    t.equal(await repo.get(row.id), undefined);
  });

  await t.test('console sessions: deleteIdle removes the idle and the too-old, keeps the rest', async (t) => {
    const make = async (admin: string, created: number, seen: number) => {
      const row: ConsoleSessionRow = { id: hash64(admin), admin, via: 'link', csrf: 'x'.repeat(43), createdAt: at(created), lastSeenAt: at(seen) };
      await repo.create(row);
      return row;
    };
    const idle = await make('idle', 0, 10);
    const old = await make('old', -600, 55);
    const live = await make('live', 0, 55);
    t.equal(await repo.deleteIdle(at(30), at(-300)), 2, 'the idle one (last seen before 30) and the old one (made before -300)');
    t.equal(await repo.get(idle.id), undefined);
    t.equal(await repo.get(old.id), undefined);
    t.same(await repo.get(live.id), live, 'the live one stays');
    await repo.delete(live.id);
  });

  await t.test('console links: spent once, never after expiry; expired ones pruned', async (t) => {
    const h = hash64('link');
    await repo.createLink(h, 'alice', at(10));
    t.equal(await repo.spendLink(hash64('nope'), at(0)), undefined, 'an unknown link signs no one in');
    t.equal(await repo.spendLink(h, at(1)), 'alice', 'the first spend answers the administrator');
    t.equal(await repo.spendLink(h, at(2)), undefined, 'a spent link is refused');
    const late = hash64('late');
    await repo.createLink(late, 'bob', at(10));
    t.equal(await repo.spendLink(late, at(10)), undefined, 'a link is refused at its expiry');
    const raced = hash64('race');
    await repo.createLink(raced, 'carol', at(10));
    const answers = await Promise.all(Array.from({ length: 10 }, () => repo.spendLink(raced, at(3))));
    t.same(answers.filter((a) => a !== undefined), ['carol'], 'ten racing spends: exactly one signs in');
    t.equal(await repo.deleteExpiredLinks(at(11)), 3, 'all three links expired by 11 go, spent or not');
    t.equal(await repo.deleteExpiredLinks(at(11)), 0);
  });

  await t.test('console sign-ins are not backed up and do not make a store "not empty"', async (t) => {
    if (!storage.dump || !storage.restore) return;
    const empty: StorageDump = { ...(await storage.dump()), users: [], preAuthKeys: [], nodes: [], apiKeys: [], pendingRegistrations: [], driveGrants: [], oauthClients: [], policy: null };
    await storage.restore(empty, { replace: true });
    const row: ConsoleSessionRow = { id: hash64('kept'), admin: 'dana@example.com', via: 'oidc', csrf: 'k'.repeat(43), createdAt: at(0), lastSeenAt: at(0) };
    await repo.create(row);
    await repo.createLink(hash64('kept-link'), 'dana@example.com', at(10));
    const dump = await storage.dump();
    t.notMatch(JSON.stringify(dump), /dana@example\.com/, 'the dump carries no session and no link');
    t.same(countDump(dump), countDump(empty), 'and counts nothing for them');
    await storage.restore(empty);
    t.pass('a store holding only console sign-ins accepts a restore without replace');
    t.same(await repo.get(row.id), row, 'a restore leaves sessions alone');
    await repo.delete(row.id);
  });
}
