// The embedded DERP relays of cluster instances mesh: two devices whose relay
// connections landed on different instances still reach each other through the relay.
// Two instances on one PostgreSQL or MariaDB database, in this process; mandatory under
// CI=true, skipped with a printed reason elsewhere.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { DerpClient, encodeFrame, FrameType, type DerpMessage } from '@headway/derp';
import { TestDevice } from '@headway/testkit';
import { serverDatabases, startTestServer, type TestServer } from '../src/server.js';

const databases = serverDatabases(t, 'the cluster DERP mesh tests');

const FAST = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s', poll_interval: '50ms' };

async function startPair(t: Test, database: Record<string, unknown>): Promise<[TestServer, TestServer]> {
  const shared = mkdtempSync(join(tmpdir(), 'headway-mesh-'));
  t.teardown(() => rmSync(shared, { recursive: true, force: true }));
  const servers: TestServer[] = [];
  const stopped = new Set<TestServer>();
  for (let i = 0; i < 2; i++) {
    servers.push(await startTestServer({ database, cluster: FAST, noise: { private_key_path: join(shared, 'noise.key') } }));
  }
  t.teardown(async () => { for (const s of [...servers].reverse()) if (!stopped.has(s)) await s.stop(); });
  const [a, b] = servers as [TestServer, TestServer];
  const stop = b.stop.bind(b);
  b.stop = async (o) => { stopped.add(b); await stop(o); };
  return [a, b];
}

async function until(what: string, fn: () => boolean, timeoutMs = 8000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function nextOf<T extends DerpMessage['type']>(client: DerpClient, type: T): Promise<Extract<DerpMessage, { type: T }>> {
  for (;;) {
    const m = await client.recv(5000);
    if (m.type === type) return m as Extract<DerpMessage, { type: T }>;
    if (m.type !== 'keepAlive' && m.type !== 'ping') throw new Error(`expected ${type}, got ${m.type}`);
  }
}

/** registered registers a node through `s` (the relay verifies clients) and returns its keys. */
async function registered(s: TestServer, hostname: string, authKey: string): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  return d;
}

for (const db of databases) {
  t.test(`${db.name}: DERP clients on two instances' relays reach each other through the mesh`, (t) => db.run(async (database) => {
    const [a, b] = await startPair(t, database);
    const derpA = a.relay.derp!;
    const derpB = b.relay.derp!;
    const alice = await a.state.users.create({ name: 'alice' });
    const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
    const nx = await registered(a, 'x', secret);
    const ny = await registered(b, 'y', secret);
    const nz = await registered(a, 'z', secret);
    t.teardown(() => Promise.all([nx, ny, nz].map((d) => d.close())));
    await until('both instances know every node', () => [a, b].every((s) => [nx, ny, nz].every((d) => s.state.nodes.byNodeKey(d.nodeKeyText))));

    await until('each relay meshes with the other', () =>
      a.relay.mesh!.status().some((p) => p.connected) && b.relay.mesh!.status().some((p) => p.connected));
    t.same(a.relay.mesh!.status().map((p) => p.url), [`${b.urls.http}/derp`], 'A meshes with B\'s relay at its registered address');

    const x = await DerpClient.connect({ url: `${a.urls.http}/derp`, privateKey: nx.nodeKey.privateKey });
    const y = await DerpClient.connect({ url: `${b.urls.http}/derp`, privateKey: ny.nodeKey.privateKey });
    t.teardown(() => Promise.all([x.close(), y.close()]));
    await until('A routes y to B and B routes x to A', () => derpA.hasMeshRoute(ny.nodeKeyText) && derpB.hasMeshRoute(nx.nodeKeyText));
    t.notOk(derpA.isConnected(ny.nodeKeyText), 'y is not connected to A\'s relay itself');

    x.send(ny.nodeKeyText, Buffer.from('x on A to y on B'));
    const atY = await nextOf(y, 'packet');
    t.equal(atY.source, nx.nodeKeyText, 'y receives the packet from x');
    t.equal(atY.data.toString(), 'x on A to y on B');
    y.send(nx.nodeKeyText, Buffer.from('y on B to x on A'));
    const atX = await nextOf(x, 'packet');
    t.equal(atX.source, ny.nodeKeyText, 'x receives the packet from y');
    t.equal(atX.data.toString(), 'y on B to x on A');
    t.equal(derpA.stats.packetsMeshForwarded, 1, 'A forwarded x\'s packet over the mesh');
    t.equal(derpB.stats.packetsFromMesh, 1, 'B delivered it');

    // z is registered but connected to no relay: nothing goes over the mesh for it.
    const meshedBefore = derpA.stats.packetsMeshForwarded;
    x.send(nz.nodeKeyText, Buffer.from('to z, connected nowhere'));
    await x.ping();
    t.equal(derpA.stats.packetsMeshForwarded, meshedBefore, 'no packet forwarded for a node connected nowhere');
    t.equal(derpB.stats.packetsFromMesh, 1, 'B received nothing more');

    // A registered node (not a relay) cannot forward: its ForwardPacket closes its connection.
    const forger = await DerpClient.connect({ url: `${b.urls.http}/derp`, privateKey: nz.nodeKey.privateKey });
    forger.writeRaw(encodeFrame(FrameType.ForwardPacket, nx.nodeKey.publicKey, ny.nodeKey.publicKey, Buffer.from('forged')));
    await forger.closed;
    await y.ping();
    await t.rejects(y.recv(200), /no DERP message/, 'y got no forged packet');
    t.equal(derpB.stats.packetsFromMesh, 1, 'B delivered no forged packet');

    // B stops: A drops its mesh peer and y's route.
    await b.stop();
    await until('A drops the mesh peer of the stopped instance', () => a.relay.mesh!.status().length === 0);
    t.notOk(derpA.hasMeshRoute(ny.nodeKeyText), 'A no longer routes y anywhere');
    t.equal(derpA.meshRouteCount, 0, 'no mesh route survives B');
    const gone = await nextOf(x, 'peerGone');
    t.equal(gone.peer, ny.nodeKeyText, 'x (who heard from y) is told y is gone');
  }));
}
