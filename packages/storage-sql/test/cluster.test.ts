// ClusterPort (migration 0005) on PostgreSQL and MySQL/MariaDB: the migration applies
// to a database holding older data, SQLite offers no cluster, leases have one holder
// under a race, the instance registry and session records behave, and the change
// feed delivers announcements to another storage on the same database in order.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { ClusterMessage, StoragePort } from '@headway/core/ports';
import { MIGRATIONS, openSqliteStorage } from '../src/index.js';
import { onServers, type ServerOpen } from './databases.js';

async function waitFor(what: string, fn: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function clusterSuite(t: Test, name: string, open: ServerOpen): Promise<void> {
  const before = MIGRATIONS.findIndex((m) => m.name === '0005_cluster');
  t.ok(before > 0, 'the cluster migration is in the list');
  const old = await open({ migrations: MIGRATIONS.slice(0, before) });
  await old.users.create({ name: 'alice' });
  await old.close();

  const one = await open({ cluster: { pollIntervalMs: 20 } });
  const two = await open({ cluster: { pollIntervalMs: 20 } });
  t.teardown(async () => { await one.close(); await two.close(); });
  t.equal((await one.users.getByName('alice'))?.name, 'alice', `${name}: older data survives the migration`);
  const a = one.cluster!, b = two.cluster!;
  t.ok(a && b, `${name}: the storage offers a cluster port`);

  // Registry.
  const since = new Date(Date.now() - 10_000);
  t.same(await a.join({ id: 'i-a', address: 'a:1', noisePublicKey: 'mkey:aa' }, since), [], 'the first instance finds nobody');
  const others = await b.join({ id: 'i-b', address: 'b:1', noisePublicKey: 'mkey:aa' }, since);
  t.same(others.map((o) => [o.id, o.address, o.noisePublicKey]), [['i-a', 'a:1', 'mkey:aa']], 'the second finds the first with its key');
  t.equal(await a.heartbeat({ id: 'i-a', address: 'a:2', noisePublicKey: 'mkey:aa', startedAt: new Date(), sessions: 3 }), false, 'a heartbeat updates the row');
  t.match((await b.instances()).find((i) => i.id === 'i-a'), { address: 'a:2', sessions: 3 }, 'address and session count stored');

  // Sessions, and pruning a dead instance with its sessions.
  await a.setSession('i-a', 7, true);
  await a.setSession('i-a', 7, true);
  await b.setSession('i-b', 8, true);
  t.same((await b.sessions()).map((s) => `${s.instanceId}/${s.nodeId}`).sort(), ['i-a/7', 'i-b/8'], 'a session is recorded once');
  await b.heartbeat({ id: 'i-b', address: 'b:1', noisePublicKey: 'mkey:aa', startedAt: new Date(), sessions: 1 });
  await new Promise((r) => setTimeout(r, 20));
  const cut = new Date(Date.now() - 5);
  await b.heartbeat({ id: 'i-b', address: 'b:1', noisePublicKey: 'mkey:aa', startedAt: new Date(), sessions: 1 });
  // i-a's last heartbeat is older than `cut`: it is dead.
  t.same(await b.prune(cut), ['i-a'], 'prune names the dead instance');
  t.same((await b.sessions()).map((s) => s.instanceId), ['i-b'], 'its sessions went with it');
  t.equal(await a.heartbeat({ id: 'i-a', address: 'a:2', noisePublicKey: 'mkey:aa', startedAt: new Date(), sessions: 0 }), true, 'a pruned instance is told its row was written again');
  await a.setSession('i-a', 7, false);

  // Leases: of two racing instances exactly one holds it; the holder renews; an expired one moves.
  const race = await Promise.all([a.acquireLease('jobs', 'i-a', 60_000), b.acquireLease('jobs', 'i-b', 60_000)]);
  t.equal(race.filter(Boolean).length, 1, `${name}: exactly one of two racing instances holds the lease`);
  const [holder, other] = race[0] ? [a, b] : [b, a];
  const [holderId, otherId] = race[0] ? ['i-a', 'i-b'] : ['i-b', 'i-a'];
  t.equal(await other.leaseHolder!('jobs'), holderId, 'either instance reads who holds it');
  t.equal(await holder.acquireLease('jobs', holderId, 60_000), true, 'the holder renews');
  t.equal(await other.acquireLease('jobs', otherId, 60_000), false, 'the other cannot take a live lease');
  t.equal(await holder.acquireLease('jobs', holderId, -1000), true, 'renewed with an expiry in the past');
  t.equal(await other.leaseHolder!('jobs'), undefined, 'an expired lease has no holder');
  t.equal(await other.acquireLease('jobs', otherId, 60_000), true, 'an expired lease moves');
  await other.releaseLease('jobs', otherId);
  t.equal(await holder.leaseHolder!('jobs'), undefined, 'a released lease has no holder');
  t.equal(await holder.acquireLease('jobs', holderId, 60_000), true, 'a released lease is free at once');

  // Shared values: what one instance writes the other reads; a second write replaces it; undefined deletes.
  t.equal(await b.getValue!('acme:cert:hw.example.com'), undefined);
  await a.setValue!('acme:cert:hw.example.com', 'first');
  await a.setValue!('acme:cert:hw.example.com', 'x'.repeat(70_000));
  t.equal(await b.getValue!('acme:cert:hw.example.com'), 'x'.repeat(70_000), `${name}: the other instance reads the latest value (longer than a TEXT column)`);
  await b.setValue!('acme:cert:hw.example.com', undefined);
  t.equal(await a.getValue!('acme:cert:hw.example.com'), undefined, 'deleted');

  // Change feed: what one storage announces reaches a follower on the other, in order.
  const seen: ClusterMessage[] = [];
  const follower = await b.follow({ message: (m) => seen.push(m), gap: () => undefined, error: () => undefined });
  t.teardown(() => follower.close());
  await a.announce('i-a', { kind: 'nodes', ids: [1, 2] });
  await a.announce('i-a', { kind: 'node-patch', id: 1, patch: { endpoints: ['192.0.2.1:41641'] } });
  await a.announce('i-a', { kind: 'users', ids: Array.from({ length: 1200 }, (_, i) => i + 1) });
  await a.announce('i-a', { kind: 'online', id: 2, online: true });
  await a.announce('i-a', { kind: 'policy' });
  await waitFor('every announcement arrives', () => seen.some((m) => m.kind === 'policy'));
  t.same(seen.map((m) => m.kind), ['nodes', 'node-patch', 'users', 'users', 'users', 'online', 'policy'], `${name}: in order, a long id list split`);
  t.same(seen.filter((m) => m.kind === 'users').flatMap((m) => (m as { ids: number[] }).ids).length, 1200, 'every user id delivered');
  t.ok(seen.every((m) => m.origin === 'i-a'), 'each names its origin');
  t.same(seen[1], { kind: 'node-patch', id: 1, patch: { endpoints: ['192.0.2.1:41641'] }, origin: 'i-a' }, 'a patch arrives as sent');

  await a.leave('i-a');
  t.notOk((await b.instances()).some((i) => i.id === 'i-a'), 'leave removes the row');
}

t.test('SQLite offers no cluster port (cluster.enabled is refused there)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-cluster-sqlite-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const s: StoragePort = await openSqliteStorage({ path: join(dir, 'db.sqlite') });
  t.teardown(() => s.close());
  t.equal(s.cluster, undefined);
});

t.test('cluster port on PostgreSQL and MySQL/MariaDB', (t) => onServers(t, 4, (t, name, open) => clusterSuite(t, name, open)));
