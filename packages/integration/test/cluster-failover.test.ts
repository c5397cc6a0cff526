// Losing one of three instances under load: instance B runs in a child
// process and is killed with SIGKILL while A keeps writing. Devices reach the
// instances through a small TCP balancer (node:net); those that were on B reconnect
// through it to a surviving instance and see every change made meanwhile, no
// acknowledged write is lost, and the HA subnet router's primary role moves to the
// router connected to C. PostgreSQL and MariaDB: mandatory under CI=true.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { TestDevice } from '@headway/testkit';
import { serverDatabases, startTestServer } from '../src/server.js';
import { startChildInstance, TcpBalancer, type ChildInstance } from '../src/cluster.js';

const databases = serverDatabases(t, 'the cluster tests');

const CLUSTER = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '2s', poll_interval: '50ms' };
const ROUTE = '10.20.0.0/24';

async function join_(url: string, hostname: string, key: string, routes?: string[]): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: url, hostname });
  await d.connect();
  const r = await d.register({ authKey: key, routes });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true });
  return d;
}

/** reconnect opens a new Noise connection (through the balancer) and a new map stream, as tailscaled does after a drop. */
async function reconnect(d: TestDevice): Promise<void> {
  await d.close();
  for (let attempt = 1; ; attempt++) {
    try {
      await d.connect();
      await d.startMap({ stream: true });
      return;
    } catch (err) {
      // Landed on an instance still deciding B is gone, or on B's closed port: try again, as a client does.
      if (attempt >= 20) throw err;
      await d.close();
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

for (const db of databases) {
  t.test(`${db.name}: kill -9 one of three instances under load: its devices reconnect through the balancer, see every change, no acknowledged write lost, the HA primary fails over`, (t) => db.run(async (database) => {
    const shared = mkdtempSync(join(tmpdir(), 'headway-failover-'));
    t.teardown(() => rmSync(shared, { recursive: true, force: true }));
    const common = { database, cluster: CLUSTER, policy: { mode: 'database' }, noise: { private_key_path: join(shared, 'noise.key') } };
    const a = await startTestServer(common);
    t.teardown(() => a.stop());
    const children: ChildInstance[] = [];
    t.teardown(async () => { for (const c of children) await c.stop(); });
    for (const name of ['b', 'c']) children.push(await startChildInstance({ ...common, data_dir: join(shared, name) }));
    const [b, c] = children as [ChildInstance, ChildInstance];
    const balancer = new TcpBalancer([a.urls.http, b.url, c.url]);
    const front = await balancer.listen();
    t.teardown(() => balancer.close());

    const alice = await a.state.users.create({ name: 'alice' });
    const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    // The two HA routers talk to B and C directly (the one on B goes down with it); viewers come through the balancer.
    const router1 = await join_(b.url, 'router1', secret, [ROUTE]);
    const router2 = await join_(c.url, 'router2', secret, [ROUTE]);
    const viewers: TestDevice[] = [];
    for (let i = 0; i < 6; i++) viewers.push(await join_(front, `viewer${i}`, secret));
    const all = [router1, router2, ...viewers];
    t.teardown(() => Promise.all(all.map((d) => d.close())));
    const id = (d: TestDevice) => a.state.nodes.byNodeKey(d.nodeKeyText)?.id ?? -1;
    await Promise.all(all.map((d) => d.waitFor((nm) => nm.peers.size === all.length - 1, 10_000)));
    await a.routes.approve(id(router1), [ROUTE]);
    await a.routes.approve(id(router2), [ROUTE]);
    const primaryOf = (d: TestDevice) => [...d.netmap.peers.values()].find((p) => (p.PrimaryRoutes ?? []).includes(ROUTE))?.ID;
    await Promise.all(viewers.map((v) => v.waitFor(() => primaryOf(v) === id(router1), 10_000)));
    t.pass('every viewer sees router1 (on B) as the primary');

    // Load: A renames a node again and again; every acknowledged name is recorded.
    let acknowledged = '';
    let writing = true;
    const target = id(viewers[0]!);
    const load = (async () => {
      for (let i = 0; writing; i++) {
        await a.state.nodes.rename(target, `load-${i}`);
        acknowledged = `load-${i}`;
        await new Promise((r) => setTimeout(r, 10));
      }
    })();

    const ended = new Set<TestDevice>();
    for (const v of viewers) v.once('mapEnd', () => ended.add(v));
    const killedAt = performance.now();
    await b.kill();
    t.comment(`${db.name}: instance B (pid ${b.pid}) killed with SIGKILL`);

    // Changes made while B's devices are away.
    await a.state.nodes.rename(id(viewers[4]!), 'renamed-meanwhile');
    const gone = viewers.pop()!;
    const goneId = id(gone);
    // The last viewer is deleted meanwhile (it may have been on any instance).
    await gone.close();
    await a.state.nodes.delete(goneId);

    await new Promise((r) => setTimeout(r, 300));
    t.ok(ended.size > 0 || balancer.counts.get(new URL(b.url).origin) === undefined, `${ended.size} viewer stream(s) ended with B`);
    for (const v of ended) if (v !== gone) await reconnect(v);
    t.comment(`${db.name}: ${ended.size} viewer(s) reconnected through the balancer ${(performance.now() - killedAt).toFixed(0)} ms after the kill`);

    writing = false;
    await load;
    t.ok(acknowledged, `writes went on during the failover (last acknowledged ${acknowledged})`);
    const stored = await a.storage.nodes.get(target);
    t.equal(stored?.givenName, acknowledged, 'the last acknowledged write is in the database');

    for (const v of viewers) {
      await v.waitFor((nm) => {
        const names = [...nm.peers.values()].map((p) => p.Name);
        const self = nm.self?.Name;
        return !nm.peers.has(goneId) && [...names, self].includes(`${acknowledged}.headway.net.`)
          && [...names, self].includes('renamed-meanwhile.headway.net.') && !names.some((n) => n?.startsWith('viewer5.'));
      }, 10_000).catch((err: Error) => { throw new Error(`${v.hostname} (${ended.has(v) ? 'reconnected' : 'stream kept'}): ${err.message}; peers ${JSON.stringify([...v.netmap.peers.values()].map((p) => p.Name))}; instance A still holds the deleted node: ${a.state.nodes.get(goneId) ? 'yes' : 'no'}`); });
    }
    t.pass('every remaining viewer sees the last rename, the rename made meanwhile and not the deleted node');

    await Promise.all(viewers.map((v) => v.waitFor(() => primaryOf(v) === id(router2), 10_000)));
    t.comment(`${db.name}: primary moved to router2 ${(performance.now() - killedAt).toFixed(0)} ms after the kill`);
    t.pass('the HA primary failed over to router2 (on C)');
    t.notOk(a.state.presence.isOnline(id(router1)), 'router1 counts as offline once B is gone');

    const instances = await (await a.container.resolve<{ status(): Promise<Array<{ address: string; live: boolean }>> }>('cluster')).status();
    t.notOk(instances.some((i) => i.address === b.url && i.live), 'B is no longer listed live');
  }));
}
