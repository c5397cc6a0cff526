// DERP mesh between two relays of one region: mesh peers log in with the mesh key,
// watch connections and forward packets for nodes connected to the other relay.
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { DerpClient, type DerpMessage } from '../src/client.js';
import { encodeFrame, FrameType, PeerGoneReason } from '../src/frames.js';
import { MeshPeer } from '../src/mesh.js';
import { startRelay, waitFor, type Relay } from './helpers.js';

const MESH_KEY = 'a'.repeat(64);

/** nextOf skips keepalives and returns the next message of the wanted type. */
async function nextOf<T extends DerpMessage['type']>(client: DerpClient, type: T, timeoutMs = 3000): Promise<Extract<DerpMessage, { type: T }>> {
  for (;;) {
    const m = await client.recv(timeoutMs);
    if (m.type === type) return m as Extract<DerpMessage, { type: T }>;
    if (m.type !== 'keepAlive') throw new Error(`expected ${type}, got ${m.type}`);
  }
}

/** meshed starts two relays with the mesh key, each with a MeshPeer to the other. */
async function meshed(t: Test, verifyClient?: (key: string) => Promise<boolean>): Promise<{ a: Relay; b: Relay; ab: MeshPeer; ba: MeshPeer }> {
  const a = await startRelay({ meshKey: MESH_KEY, ...(verifyClient ? { verifyClient } : {}) });
  const b = await startRelay({ meshKey: MESH_KEY, ...(verifyClient ? { verifyClient } : {}) });
  const ab = new MeshPeer({ url: b.url, meshKey: MESH_KEY, server: a.derp, minBackoffMs: 20, maxBackoffMs: 100 });
  const ba = new MeshPeer({ url: a.url, meshKey: MESH_KEY, server: b.derp, minBackoffMs: 20, maxBackoffMs: 100 });
  ab.start();
  ba.start();
  t.teardown(async () => { await ab.close(); await ba.close(); await a.close(); await b.close(); });
  await waitFor(() => ab.connected && ba.connected, 3000, 'mesh peers connected');
  return { a, b, ab, ba };
}

t.test('packets between clients of two meshed relays arrive with the right source, both ways', async (t) => {
  const { a, b } = await meshed(t);
  const x = await DerpClient.connect({ url: a.url });
  const y = await DerpClient.connect({ url: b.url });
  t.teardown(() => Promise.all([x.close(), y.close()]));
  await waitFor(() => a.derp.hasMeshRoute(y.publicKeyString) && b.derp.hasMeshRoute(x.publicKeyString), 3000, 'routes learned');

  x.send(y.publicKeyString, Buffer.from('x to y'));
  const atY = await nextOf(y, 'packet');
  t.equal(atY.source, x.publicKeyString, 'y sees x as the source');
  t.equal(atY.data.toString(), 'x to y');
  y.send(x.publicKeyString, Buffer.from('y to x'));
  const atX = await nextOf(x, 'packet');
  t.equal(atX.source, y.publicKeyString, 'x sees y as the source');
  t.equal(atX.data.toString(), 'y to x');
  t.equal(a.derp.stats.packetsMeshForwarded, 1, 'A forwarded one packet over the mesh');
  t.equal(b.derp.stats.packetsFromMesh, 1, 'B delivered one packet from the mesh');
  t.equal(a.derp.clientCount, 1, 'the mesh peer is not counted as a node on A');

  // y leaves B: A forgets its route, and x (who heard from y) learns y is gone.
  await y.close();
  await waitFor(() => !a.derp.hasMeshRoute(y.publicKeyString), 3000, 'route to y dropped');
  const gone = await nextOf(x, 'peerGone');
  t.equal(gone.peer, y.publicKeyString);
  t.equal(gone.reason, PeerGoneReason.Disconnected);
});

t.test('a packet for a node connected nowhere is not forwarded', async (t) => {
  const { a, b } = await meshed(t);
  const x = await DerpClient.connect({ url: a.url });
  t.teardown(() => x.close());
  const nowhere = (await DerpClient.connect({ url: a.url }));
  const key = nowhere.publicKeyString;
  await nowhere.close();
  await waitFor(() => !b.derp.hasMeshRoute(key), 3000, 'departed key unrouted');
  x.send(key, Buffer.from('to nobody'));
  await x.ping();
  t.equal(a.derp.stats.packetsMeshForwarded, 0, 'nothing went over the mesh');
  t.equal(a.derp.stats.packetsDroppedUnknownDest, 1, 'dropped as an unknown destination');
  t.equal(b.derp.stats.packetsFromMesh, 0);
});

t.test('the mesh key is checked: without it mesh frames close the client, with a wrong one too', async (t) => {
  const seen: string[] = [];
  const relay = await startRelay({ meshKey: MESH_KEY, verifyClient: async (key) => { seen.push(key); return true; } });
  t.teardown(() => relay.close());
  const target = await DerpClient.connect({ url: relay.url });
  t.teardown(() => target.close());

  const plain = await DerpClient.connect({ url: relay.url });
  plain.writeRaw(encodeFrame(FrameType.ForwardPacket, Buffer.alloc(32, 1), target.publicKey, Buffer.from('forged')));
  await plain.closed;
  const wrong = await DerpClient.connect({ url: relay.url, meshKey: 'b'.repeat(64) });
  wrong.writeRaw(encodeFrame(FrameType.WatchConns));
  await wrong.closed;
  await target.ping();
  await t.rejects(target.recv(100), /no DERP message/, 'the forged packet was not delivered');
  t.equal(relay.derp.stats.packetsFromMesh, 0);

  // The right key: admitted without verifyClient (it is a relay, not a node), and it may forward.
  const before = seen.length;
  const mesh = await DerpClient.connect({ url: relay.url, meshKey: MESH_KEY });
  t.teardown(() => mesh.close());
  t.equal(seen.length, before, 'verifyClient is not asked about a mesh peer');
  const src = Buffer.alloc(32, 5);
  t.ok(mesh.forwardPacket(src, target.publicKey, Buffer.from('relayed')));
  const got = await nextOf(target, 'packet');
  t.equal(got.source, `nodekey:${src.toString('hex')}`, 'delivered as if from the original sender');
  t.equal(got.data.toString(), 'relayed');
  // A forwarded packet for a node this relay does not hold is dropped, never forwarded again (no loops).
  let reforwarded = 0;
  const elsewhere = Buffer.alloc(32, 9);
  relay.derp.addMeshRoute(`nodekey:${elsewhere.toString('hex')}`, { forwardPacket: () => { reforwarded++; return true; } });
  t.ok(mesh.forwardPacket(src, elsewhere, Buffer.from('loop?')));
  await mesh.ping();
  t.equal(reforwarded, 0, 'a forwarded packet is not forwarded again');
  mesh.watchConns();
  const present = await nextOf(mesh, 'peerPresent');
  t.equal(present.peer, target.publicKeyString, 'a watcher hears of the clients already connected');
});

t.test('a relay that stops drops its routes on the other relay', async (t) => {
  const { a, b, ab } = await meshed(t);
  const y = await DerpClient.connect({ url: b.url });
  await waitFor(() => a.derp.hasMeshRoute(y.publicKeyString), 3000, 'route to y');
  t.equal(ab.routeCount, 1);
  await b.derp.close();
  await waitFor(() => !a.derp.hasMeshRoute(y.publicKeyString) && !ab.connected, 3000, 'routes dropped');
  t.equal(a.derp.meshRouteCount, 0, 'no route survives the peer relay');
  await y.closed;
});

t.test('a node claimed by two mesh peers stays routed until both report it gone; the newest claim wins', async (t) => {
  const relay = await startRelay({ meshKey: MESH_KEY });
  t.teardown(() => relay.close());
  const sent: string[] = [];
  const peer = (name: string) => ({ forwardPacket: () => { sent.push(name); return true; } });
  const old = peer('old');
  const moved = peer('new');
  const x = await DerpClient.connect({ url: relay.url });
  t.teardown(() => x.close());
  const key = `nodekey:${'ab'.repeat(32)}`;
  relay.derp.addMeshRoute(key, old);
  relay.derp.addMeshRoute(key, moved);
  x.send(key, Buffer.from('1'));
  await x.ping();
  t.same(sent, ['new'], 'the newest claim carries the packet');
  relay.derp.removeMeshRoute(key, moved);
  x.send(key, Buffer.from('2'));
  await x.ping();
  t.same(sent, ['new', 'old'], 'the older claim takes over when the newest goes');
  relay.derp.removeMeshRoute(key, old);
  t.notOk(relay.derp.hasMeshRoute(key), 'gone once every peer reported it gone');
  relay.derp.addMeshRoute(key, old);
  relay.derp.addMeshRoute(key, moved);
  relay.derp.removeMeshRoute(key, old);
  x.send(key, Buffer.from('3'));
  await x.ping();
  t.same(sent, ['new', 'old', 'new'], 'the old instance reporting it gone late leaves the new route alone');
});

t.test('a peer relay that goes silent (no RST, no FIN) is dropped after an unanswered ping, with its routes', async (t) => {
  const a = await startRelay({ meshKey: MESH_KEY });
  const b = await startRelay({ meshKey: MESH_KEY });
  // A TCP proxy in front of B that can freeze: connections stay open but no byte passes.
  let frozen = false;
  const sockets: Socket[] = [];
  const proxy = createServer((inbound) => {
    const outbound = createConnection({ host: '127.0.0.1', port: b.port });
    sockets.push(inbound, outbound);
    inbound.on('data', (d) => { if (!frozen) outbound.write(d); });
    outbound.on('data', (d) => { if (!frozen) inbound.write(d); });
    inbound.on('close', () => outbound.destroy());
    outbound.on('close', () => inbound.destroy());
    inbound.on('error', () => undefined);
    outbound.on('error', () => undefined);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', r));
  const port = (proxy.address() as AddressInfo).port;
  const ab = new MeshPeer({ url: `http://127.0.0.1:${port}/derp`, meshKey: MESH_KEY, server: a.derp, minBackoffMs: 20, maxBackoffMs: 100, pingIntervalMs: 100 });
  t.teardown(async () => {
    await ab.close();
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => proxy.close(() => r()));
    await a.close();
    await b.close();
  });
  ab.start();
  const y = await DerpClient.connect({ url: b.url });
  t.teardown(() => y.close());
  await waitFor(() => a.derp.hasMeshRoute(y.publicKeyString), 3000, 'route to y through the proxy');
  const connects = ab.connects;
  frozen = true;
  await waitFor(() => !a.derp.hasMeshRoute(y.publicKeyString), 8000, 'route dropped after the silent peer missed a ping');
  t.pass('the silent peer\'s routes are gone');
  frozen = false;
  await waitFor(() => ab.connects > connects && a.derp.hasMeshRoute(y.publicKeyString), 8000, 'reconnected');
  t.pass('the mesh peer redialled and learned the route again once the network came back');
});
