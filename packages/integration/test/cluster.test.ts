// Several Headway instances on one PostgreSQL or MariaDB database (cluster.enabled),
// in this process: testkit devices spread over the instances see changes made on any
// of them. PostgreSQL and MariaDB are mandatory under CI=true, skipped with a printed
// reason elsewhere.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { TestDevice } from '@headway/testkit';
import type { ClusterMember } from '@headway/core';
import { adminFetch, serverDatabases, startTestServer, type TestServer } from '../src/server.js';
import { TcpBalancer } from '../src/cluster.js';
import { runHeadwayOn } from '../src/cli.js';

const databases = serverDatabases(t, 'the cluster tests');

const FAST = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s', poll_interval: '50ms' };

/** startCluster starts `count` instances on one database sharing one noise key (a file in a shared directory). */
async function startCluster(t: Test, database: Record<string, unknown>, count: number, extra: Record<string, unknown> = {}): Promise<TestServer[]> {
  const shared = mkdtempSync(join(tmpdir(), 'headway-cluster-'));
  t.teardown(() => rmSync(shared, { recursive: true, force: true }));
  const servers: TestServer[] = [];
  for (let i = 0; i < count; i++) {
    const s = await startTestServer({
      database, cluster: FAST, policy: { mode: 'database' }, noise: { private_key_path: join(shared, 'noise.key') }, ...extra,
    });
    servers.push(s);
  }
  t.teardown(async () => { for (const s of servers.reverse()) await s.stop(); });
  return servers;
}

const member = (s: TestServer) => s.container.resolve<ClusterMember>('cluster');

async function device(s: TestServer, hostname: string, key: string, routes?: string[]): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey: key, routes });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true });
  return d;
}

const nm = (d: TestDevice) => JSON.stringify([...d.netmap.peers.values()].map((p) => ({ id: p.ID, KeyExpiry: p.KeyExpiry })));

/** until polls a condition (state applied asynchronously on another instance). */
async function until(what: string, fn: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

for (const db of databases) {
  // A router that comes back must not take the role from the one carrying the traffic: the primary
  // is the router online the longest, the same on every instance, and it keeps the role while it
  // stays online.
  t.test(`${db.name}: the HA route primary is the same on every instance and stays with the router carrying it`, (t) => db.run(async (database) => {
    const [a, b, c] = await startCluster(t, database, 3) as [TestServer, TestServer, TestServer];
    const alice = await a.state.users.create({ name: 'alice' });
    await until('alice reaches B', () => Boolean(b.state.users.byName('alice')));
    const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    const route = '10.30.0.0/24';
    let r1 = await device(a, 'r1', secret, [route]);
    const r2 = await device(b, 'r2', secret, [route]);
    const viewer = await device(c, 'viewer', secret);
    t.teardown(() => Promise.all([r1, r2, viewer].map((d) => d.close())));
    const id1 = a.state.nodes.byNodeKey(r1.nodeKeyText)!.id;
    const id2 = b.state.nodes.byNodeKey(r2.nodeKeyText)!.id;
    t.ok(id1 < id2, 'r1 has the lower id');
    // r2 registered on B: A approves it once it has heard of it (the instances share the database, not the moment).
    await until('A knows r2', () => Boolean(a.state.nodes.get(id2)));
    await a.routes.approve(id1, [route]);
    await a.routes.approve(id2, [route]);
    const all = [a, b, c];
    const primaryEverywhere = (id: number) => all.every((s) => s.routes.primaryRoutes(id).includes(route));
    await until('r1 primary on A, B and C', () => all.every((s) => s.state.presence.isOnline(id1) && s.state.presence.isOnline(id2)) && primaryEverywhere(id1));
    t.pass('the router online first (r1) is primary on every instance');

    // r1 goes away: r2 takes over everywhere.
    await r1.close();
    await until('r2 primary everywhere once r1 is offline', () => all.every((s) => !s.state.presence.isOnline(id1)) && primaryEverywhere(id2));
    await viewer.waitFor((nm) => (nm.peers.get(id2)?.PrimaryRoutes ?? []).includes(route), 5000);
    t.pass('r2 took over on every instance and the viewer on C was told');

    // The same r1 (same keys, same node) comes back through C: r2 keeps the role.
    const gone = r1;
    r1 = new TestDevice({ serverUrl: c.urls.http, hostname: 'r1', machineKey: gone.machineKey, nodeKey: gone.nodeKey, discoKey: gone.discoKey });
    await r1.connect();
    await r1.startMap({ stream: true, hostinfo: { RoutableIPs: [route] } });
    t.equal(c.state.nodes.byNodeKey(r1.nodeKeyText)?.id, id1, 'r1 is back as the same node');
    await until('r1 advertises the route again everywhere', () => all.every((s) => s.state.nodes.get(id1)?.availableRoutes.includes(route)));
    await until('r1 online again everywhere', () => all.every((s) => s.state.presence.isOnline(id1)));
    await new Promise((r) => setTimeout(r, 300));
    t.ok(primaryEverywhere(id2), 'r2 is still primary on A, B and C');
    t.ok(all.every((s) => !s.routes.primaryRoutes(id1).includes(route)), 'the returning router (lower id) does not take the role back');
  }));

  t.test(`${db.name}: three instances; renames, tags, route approvals, policy changes and deletes made on A reach devices on B and C`, (t) => db.run(async (database) => {
    const [a, b, c] = await startCluster(t, database, 3) as [TestServer, TestServer, TestServer];
    const alice = await a.state.users.create({ name: 'alice' });
    await until('alice reaches C', () => Boolean(c.state.users.byName('alice')));
    const { secret } = await c.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });

    const router = await device(b, 'router', secret, ['10.9.0.0/24']);
    const viewer = await device(c, 'viewer', secret);
    const third = await device(a, 'third', secret);
    t.teardown(() => Promise.all([router, viewer, third].map((d) => d.close())));
    const routerId = b.state.nodes.byNodeKey(router.nodeKeyText)!.id;
    const thirdId = a.state.nodes.byNodeKey(third.nodeKeyText)!.id;
    await viewer.waitFor((nm) => nm.peers.has(routerId) && nm.peers.has(thirdId), 5000);
    await third.waitFor((nm) => nm.peers.size === 2, 5000);
    t.pass('devices registered on B, C and A see each other');

    await viewer.waitFor((nm) => nm.peers.get(routerId)?.Online === true && nm.peers.get(thirdId)?.Online === true, 5000);
    await until('A counts the router (on B) online', () => a.state.presence.isOnline(routerId));
    t.pass('a device connected to B is online on A and for devices on C');

    await a.state.nodes.rename(routerId, 'gateway');
    await viewer.waitFor((nm) => nm.peers.get(routerId)?.Name === 'gateway.headway.net.', 5000);
    await router.waitFor((nm) => nm.self?.Name === 'gateway.headway.net.', 5000);
    t.pass('a rename on A reached the peer on C and the device itself on B');

    await a.policy.set(JSON.stringify({
      tagOwners: { 'tag:router': ['alice@'] },
      acls: [{ action: 'accept', src: ['alice@'], dst: ['*:22'] }],
    }));
    await viewer.waitFor((nm) => JSON.stringify(nm.packetFilter).includes('"First":22'), 5000);
    t.equal(c.policy.policyText, a.policy.policyText, 'C holds the policy set on A');
    t.pass('a policy change on A reached the packet filter of a device on C');

    await a.state.nodes.setTags(routerId, ['tag:router']);
    await viewer.waitFor((nm) => JSON.stringify(nm.peers.get(routerId)?.Tags) === '["tag:router"]', 5000);
    t.pass('tags set on A reached the peer on C');

    await a.routes.approve(routerId, ['10.9.0.0/24']);
    await viewer.waitFor((nm) => (nm.peers.get(routerId)?.PrimaryRoutes ?? []).includes('10.9.0.0/24'), 5000);
    t.same(c.routes.primaryRoutes(routerId), ['10.9.0.0/24'], 'C elects the router primary too');
    t.pass('a route approval on A reached the peer on C');

    await router.liteUpdate({ endpoints: ['192.0.2.7:41641'] });
    await viewer.waitFor((nm) => (nm.peers.get(routerId)?.Endpoints ?? []).includes('192.0.2.7:41641'), 5000);
    t.pass('endpoints reported to B reached the peer on C');

    const expiry = new Date(Math.floor(Date.now() / 1000) * 1000 + 3_600_000);
    await a.state.nodes.expire(thirdId, expiry);
    await viewer.waitFor((nm) => {
      const seen = nm.peers.get(thirdId)?.KeyExpiry;
      return Boolean(seen) && new Date(seen!).getTime() === expiry.getTime();
    }, 5000).catch((err: Error) => { throw new Error(`${err.message}; the viewer holds ${nm(viewer)}`); });
    t.pass('a key expiry set on A reached the peer on C');

    const listed = await fetch(`${c.urls.http}/api/v1/cluster`, { headers: { authorization: `Bearer ${(await c.state.keys.createApiKey(null)).secret}` } });
    const status = await listed.json() as { enabled: boolean; instances: Array<{ address: string; live: boolean; sessions: number; self: boolean }> };
    t.equal(status.enabled, true);
    t.equal(status.instances.length, 3, 'three instances listed');
    t.ok(status.instances.every((i) => i.live), 'all live');
    t.same(status.instances.map((i) => i.address).sort(), [a, b, c].map((s) => s.urls.http).sort(), 'each listed at its address');
    t.equal(status.instances.find((i) => i.self)?.sessions, 1, 'C serves one map session');
    t.equal(status.instances.reduce((n, i) => n + i.sessions, 0), 3, 'three sessions in all');

    const cli = await runHeadwayOn(c, ['cluster', 'status', '-o', 'json']);
    t.equal(cli.code, 0, cli.stderr);
    const shown = JSON.parse(cli.stdout) as { enabled: boolean; instances: Array<{ address: string; live: boolean; self: boolean }> };
    t.same(shown.instances.map((i) => i.address).sort(), [a, b, c].map((s) => s.urls.http).sort(), 'headway cluster status lists the three instances');
    const table = await runHeadwayOn(a, ['cluster', 'status']);
    t.match(table.stdout, /Address\s+Sessions\s+Last heartbeat/, 'the table has its columns');
    t.match(table.stdout, /live, this one/, 'the answering instance is marked');
    const key = (await b.state.keys.createApiKey(null)).secret;
    const nodesOnB = await adminFetch(b, key, 'GET', '/api/v1/node');
    t.equal(nodesOnB.status, 200);
    t.same((nodesOnB.json.nodes as Array<{ online: boolean }>).map((n) => n.online), [true, true, true], 'nodes list on B shows all three online (two on other instances)');

    await a.state.nodes.delete(thirdId);
    await viewer.waitFor((nm) => !nm.peers.has(thirdId), 5000);
    await router.waitFor((nm) => !nm.peers.has(thirdId), 5000);
    t.equal(b.state.nodes.get(thirdId), undefined, 'B forgot the deleted node');
    t.pass('a delete on A reached devices on B and C');

    await a.state.users.rename(alice.id, 'alice2');
    await until('the rename of alice reaches B', () => b.state.users.get(alice.id)?.name === 'alice2');
    t.pass('a user rename on A reached B');

    // The router is owned by its tag since it was tagged: deleting alice with her nodes leaves it.
    await a.state.users.delete(alice.id, { deleteNodes: true });
    await until('B and C forget the user and her node', () => [b, c].every((s) => !s.state.users.get(alice.id)
      && s.state.nodes.list().map((n) => n.id).join() === String(routerId)));
    t.same([b, c].map((s) => s.state.nodes.get(routerId)?.userId), [null, null], 'the tagged router, owned by no user, stays on B and C');
    t.pass('a user deleted with her nodes on A is gone from B and C');
  }));

  t.test(`${db.name}: 40 concurrent registrations with 20 single-use keys over two instances: exactly 20 join, every address unique`, (t) => db.run(async (database) => {
    const [a, b] = await startCluster(t, database, 2) as [TestServer, TestServer];
    const fleet = await a.state.users.create({ name: 'fleet' });
    const keys: string[] = [];
    for (let i = 0; i < 20; i++) keys.push((await a.state.keys.createPreAuthKey({ userId: fleet.id, reusable: false })).secret);
    // Each key is presented twice, once to each instance.
    const devices = Array.from({ length: 40 }, (_, i) => new TestDevice({ serverUrl: (i % 2 ? b : a).urls.http, hostname: 'web' }));
    t.teardown(() => Promise.all(devices.map((d) => d.close())));
    await Promise.all(devices.map((d) => d.connect()));
    const started = performance.now();
    const replies = await Promise.all(devices.map((d, i) => d.register({ authKey: keys[i >> 1]! }).then((r) => r.Error || 'ok', (err: Error) => err.message)));
    t.comment(`${db.name}: 40 registrations on two instances answered in ${(performance.now() - started).toFixed(0)} ms`);
    t.equal(replies.filter((r) => r === 'ok').length, 20, `exactly 20 joined (${[...new Set(replies)].join('; ')})`);
    const stored = await a.storage.nodes.list();
    t.equal(stored.length, 20, '20 nodes stored');
    t.equal(new Set(stored.map((n) => n.ipv4)).size, 20, 'every IPv4 unique');
    t.equal(new Set(stored.map((n) => n.ipv6)).size, 20, 'every IPv6 unique');
    t.equal(new Set(stored.map((n) => n.givenName)).size, 20, 'every name unique');
    await until('both instances hold the 20 nodes', () => a.state.nodes.list().length === 20 && b.state.nodes.list().length === 20);
    t.pass('both instances know all 20');
  }));

  t.test(`${db.name}: an instance that loses the database closes its map streams, answers /health 500, and recovers by itself`, (t) => db.run(async (database) => {
    const type = database.type as string;
    const direct = database[type] as { host: string; port: number };
    const proxy = new TcpBalancer([`http://${direct.host}:${direct.port}`]);
    const proxied = new URL(await proxy.listen());
    t.teardown(() => proxy.close());
    const shared = mkdtempSync(join(tmpdir(), 'headway-cluster-'));
    t.teardown(() => rmSync(shared, { recursive: true, force: true }));
    const common = { cluster: FAST, policy: { mode: 'database' }, noise: { private_key_path: join(shared, 'noise.key') } };
    const a = await startTestServer({ ...common, database });
    t.teardown(() => a.stop());
    const b = await startTestServer({ ...common, database: { ...database, [type]: { ...direct, host: '127.0.0.1', port: Number(proxied.port) } } });
    t.teardown(() => b.stop());
    const health = async (s: TestServer) => (await fetch(`${s.urls.http}/health`)).status;

    const alice = await a.state.users.create({ name: 'alice' });
    const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    const onB = await device(b, 'onb', secret);
    const onA = await device(a, 'ona', secret);
    t.teardown(() => Promise.all([onA, onB].map((d) => d.close())));
    const idA = a.state.nodes.byNodeKey(onA.nodeKeyText)!.id;
    await onB.waitFor((nm) => nm.peers.has(idA), 5000);
    t.equal(await health(b), 200, 'B is healthy');

    const ended = new Promise<void>((resolve) => onB.once('mapEnd', () => resolve()));
    proxy.cut();
    const cutAt = performance.now();
    await ended;
    t.comment(`${db.name}: B closed its map stream ${(performance.now() - cutAt).toFixed(0)} ms after losing the database`);
    t.equal(await health(b), 500, 'B answers /health 500 without its database');
    const refused = await onB.startMap({ stream: true }).then(() => 'accepted', (err: Error) => err.message);
    t.match(refused, /503/, 'B refuses a new map stream with 503');
    await a.state.nodes.rename(idA, 'renamed-while-b-was-lost');

    // The device moves to A (as a load balancer would send it) and sees the change.
    const moved = new TestDevice({ serverUrl: a.urls.http, hostname: 'onb', machineKey: onB.machineKey, nodeKey: onB.nodeKey });
    t.teardown(() => moved.close());
    await moved.connect();
    await moved.startMap({ stream: true });
    await moved.waitFor((nm) => nm.peers.get(idA)?.Name === 'renamed-while-b-was-lost.headway.net.', 5000);
    t.pass('the device moved to A and sees the change made meanwhile');

    proxy.restore();
    const end = Date.now() + 10_000;
    while (await health(b) !== 200) {
      if (Date.now() > end) throw new Error('B did not recover within 10 s');
      await new Promise((r) => setTimeout(r, 100));
    }
    t.comment(`${db.name}: B healthy again ${(performance.now() - cutAt).toFixed(0)} ms after the cut`);
    await until('B caught up with the rename', () => b.state.nodes.get(idA)?.givenName === 'renamed-while-b-was-lost');
    const again = await device(b, 'late', secret);
    t.teardown(() => again.close());
    await again.waitFor((nm) => nm.peers.get(idA)?.Name === 'renamed-while-b-was-lost.headway.net.', 5000);
    t.pass('B serves map streams again, with what changed while it was cut off');
    const idB = b.state.nodes.byNodeKey(onB.nodeKeyText)!.id;
    await moved.close();
    await until('the device that left B while it was cut off is offline everywhere (B cleared its stale session row)', () => !a.state.presence.isOnline(idB) && !b.state.presence.isOnline(idB));
    t.notOk((await a.storage.cluster!.sessions()).some((r) => r.nodeId === idB), 'no session row left for it');
  }));

  t.test(`${db.name}: an instance pruned as dead after a late heartbeat records its map sessions again (its devices stayed offline on the others)`, (t) => db.run(async (database) => {
    const [a, b] = await startCluster(t, database, 2) as [TestServer, TestServer];
    const alice = await a.state.users.create({ name: 'alice' });
    const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    const d = await device(b, 'late', secret);
    t.teardown(() => d.close());
    const id = b.state.nodes.byNodeKey(d.nodeKeyText)!.id;
    await until('A counts the device on B online', () => a.state.presence.isOnline(id));
    // Every instance looks dead: as if their heartbeats had all come late.
    await a.storage.cluster!.prune(new Date(Date.now() + 60_000));
    const end = Date.now() + 5000;
    while (!(await a.storage.cluster!.sessions()).some((r) => r.nodeId === id)) {
      if (Date.now() > end) throw new Error('B did not record its map session again');
      await new Promise((r) => setTimeout(r, 50));
    }
    await until('A counts the device online again', () => a.state.presence.isOnline(id));
    t.pass('B wrote its session row again and A counts the device online');
  }));

  t.test(`${db.name}: an interactive login waiting on B is approved or rejected on A (the held follow-up on B never heard of it)`, (t) => db.run(async (database) => {
    const [a, b] = await startCluster(t, database, 2) as [TestServer, TestServer];
    const bob = await a.state.users.create({ name: 'bob' });
    const d = new TestDevice({ serverUrl: b.urls.http, hostname: 'desk' });
    t.teardown(() => d.close());
    await d.connect();
    const first = await d.register({}) as { AuthURL: string };
    const followup = d.register({ followup: first.AuthURL });
    await new Promise((r) => setTimeout(r, 200));
    const nodeId = await a.registrar.approve(first.AuthURL.split('/').pop()!, bob.id);
    const res = await followup;
    t.equal(res.MachineAuthorized, true, 'the follow-up held by B answers authorized');
    t.equal(b.state.nodes.get(nodeId)?.userId, bob.id, 'B knows the node, owned by bob');

    // A rejection on A reaches the follow-up held by B too (until the login expired, it waited 15 minutes).
    const e = new TestDevice({ serverUrl: b.urls.http, hostname: 'intruder' });
    t.teardown(() => e.close());
    await e.connect();
    const login = await e.register({}) as { AuthURL: string };
    const held = e.register({ followup: login.AuthURL });
    await new Promise((r) => setTimeout(r, 200));
    await a.registrar.reject(login.AuthURL.split('/').pop()!);
    const answer = await held;
    t.match(answer.Error, /reject/i, `the follow-up held by B answers the rejection (${answer.Error})`);
    t.notOk(answer.MachineAuthorized, 'not authorized');
  }));

  t.test(`${db.name}: an instance with another noise key is refused at start`, (t) => db.run(async (database) => {
    await startCluster(t, database, 1);
    const err = await startTestServer({ database, cluster: FAST }).then((s) => s.stop().then(() => undefined), (e: Error) => e);
    t.match(err?.message, /serves another noise key/, 'start failed naming the noise key');
  }));

  t.test(`${db.name}: the jobs lease is held by one instance and taken over when it stops`, (t) => db.run(async (database) => {
    const [a, b] = await startCluster(t, database, 2);
    await until('one instance holds the jobs lease', () => member(a!).runsJobs() !== member(b!).runsJobs(), 5000);
    const [holder, other] = member(a!).runsJobs() ? [a!, b!] : [b!, a!];
    await holder.stop();
    await until('the other instance takes the jobs over', () => member(other).runsJobs(), 5000);
    t.pass('the lease moved');
  }));

  // Every instance names the lease holder, read from the lease row, not only itself when it holds it.
  t.test(`${db.name}: cluster status on every instance names the instance holding the jobs lease`, (t) => db.run(async (database) => {
    const [a, b] = await startCluster(t, database, 2) as [TestServer, TestServer];
    t.equal(typeof a.storage.cluster?.leaseHolder, 'function', 'the storage adapter reads the lease row (ClusterPort.leaseHolder)');
    await until('one instance holds the jobs lease', () => member(a).runsJobs() !== member(b).runsJobs(), 5000);
    const [holder, other] = member(a).runsJobs() ? [a, b] : [b, a];
    for (const [s, name] of [[holder, 'the holder'], [other, 'the other instance']] as const) {
      const { status, json } = await adminFetch(s, (await s.state.keys.createApiKey(null)).secret, 'GET', '/api/v1/cluster');
      t.equal(status, 200);
      const instances = json.instances as Array<{ id: string; self: boolean; jobs: boolean }>;
      t.same(instances.filter((i) => i.jobs).map((i) => i.id), [member(holder).id], `asked on ${name}: the holder, and only it, runs the jobs`);
      t.equal(instances.find((i) => i.self)?.id, member(s).id, `asked on ${name}: it is marked as itself`);
    }
    const table = await runHeadwayOn(other, ['cluster', 'status']);
    t.equal(table.code, 0, table.stderr);
    const holderLine = table.stdout.split('\n').find((l) => l.includes(member(holder).id)) ?? '';
    t.match(holderLine, /runs jobs/, `headway cluster status on the other instance shows the holder running the jobs:\n${table.stdout}`);
    t.notMatch(table.stdout.split('\n').find((l) => l.includes(member(other).id)) ?? '', /runs jobs/);
  }));
}

t.test('cluster.enabled on SQLite is refused at start with a clear error', async (t) => {
  const err = await startTestServer({ cluster: { enabled: true } }).then((s) => s.stop().then(() => undefined), (e: Error) => e);
  t.match(err?.message, /cluster\.enabled: needs database\.type postgres or mysql/);
});
