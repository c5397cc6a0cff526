// A fleet built from one image joins at once: the real server on each database
// (SQLite always, PostgreSQL and MariaDB when HEADWAY_TEST_POSTGRES_URL /
// HEADWAY_TEST_MYSQL_URL are set, mandatory in CI) with testkit devices doing the
// real Noise handshake and register request.
import t from 'tap';
import { TestDevice } from '@headway/testkit';
import { serverDatabases, startTestServer, type ServerDatabase, type TestServer } from '../src/server.js';

const databases: ServerDatabase[] = [{ name: 'sqlite', run: (body) => body({ type: 'sqlite' }) }];
databases.push(...serverDatabases(t, 'this test'));

async function singleUseKeys(s: TestServer, count: number): Promise<Array<{ id: number; secret: string }>> {
  const user = await s.state.users.create({ name: 'fleet' });
  const out: Array<{ id: number; secret: string }> = [];
  for (let i = 0; i < count; i++) {
    const { key, secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: false });
    out.push({ id: key.id, secret });
  }
  return out;
}

for (const db of databases) {
  t.test(`${db.name}: 30 devices named web join at once with 30 single-use keys (25 of 30 failed with given_name already in use on PostgreSQL)`, (t) => db.run(async (database) => {
    const s = await startTestServer({ database });
    t.teardown(() => s.stop());
    const keys = await singleUseKeys(s, 30);
    const devices = keys.map(() => new TestDevice({ serverUrl: s.urls.http, hostname: 'web' }));
    t.teardown(() => Promise.all(devices.map((d) => d.close())));
    await Promise.all(devices.map((d) => d.connect()));
    const started = performance.now();
    const replies = await Promise.all(devices.map((d, i) => d.register({ authKey: keys[i]!.secret })));
    t.comment(`${db.name}: 30 registrations at once answered in ${(performance.now() - started).toFixed(0)} ms`);
    t.same(replies.map((r) => r.Error).filter(Boolean), [], 'no device was refused');
    t.ok(replies.every((r) => r.MachineAuthorized), 'every device is authorized');
    const names = devices.map((d) => s.state.nodes.byNodeKey(d.nodeKeyText)?.givenName);
    t.same([...names].sort(), ['web', ...Array.from({ length: 29 }, (_, i) => `web-${i + 1}`)].sort(), 'web, web-1 ... web-29');
    const stored = await s.state.storage.nodes.list();
    t.equal(stored.length, 30, '30 nodes stored');
    t.ok((await Promise.all(keys.map((k) => s.state.storage.preAuthKeys.get(k.id)))).every((k) => k?.used), 'all 30 keys spent');

    // Each device's own map carries the name it was given.
    const d = devices[7]!;
    await d.startMap({ stream: false });
    t.equal(d.netmap.self?.Name, `${s.state.nodes.byNodeKey(d.nodeKeyText)!.givenName}.headway.net.`);
  }));

  t.test(`${db.name}: single-use key spent when registration then fails (500 on a bad Hostname): the key stays unspent and the retry joins`, (t) => db.run(async (database) => {
    const s = await startTestServer({ database });
    t.teardown(() => s.stop());
    const [key] = await singleUseKeys(s, 1);
    const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'web' });
    t.teardown(() => d.close());
    await d.connect();
    // Whether the server refuses it up front (4xx, an Error) or fails later, nothing may be written.
    const bad = await d.register({ authKey: key!.secret, hostinfo: { Hostname: 42 as unknown as string } })
      .then((r) => r.Error, (err: Error) => err.message);
    t.ok(bad, `the bad request was refused (${bad})`);
    t.equal((await s.state.storage.preAuthKeys.get(key!.id))?.used, false, 'the key is unspent');
    t.same(await s.state.storage.nodes.list(), [], 'no node stored');
    t.equal(s.state.nodes.byNodeKey(d.nodeKeyText), undefined, 'no node in memory');

    const good = await d.register({ authKey: key!.secret, hostinfo: { Hostname: 'web' } });
    t.equal(good.Error, '', 'the retry with the same key joins');
    t.equal(s.state.nodes.byNodeKey(d.nodeKeyText)?.givenName, 'web');
    t.equal((await s.state.storage.preAuthKeys.get(key!.id))?.used, true, 'now spent');
  }));
}
