/**
 * In-process protocol tests (testkit devices, real server) pinning two answers:
 * every delta that shows an owner the client's netmap lacks carries that
 * UserProfile and makes the client rebuild its netmap, and a deleted node's
 * device is told it is logged out, on its open stream and on its later map and
 * logout requests.
 */
import t from 'tap';
import { ControlHttpError, TestDevice, type MapResponse } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

const TAGGED_USER_ID = 2147455555;
const LOGGED_OUT_EXPIRY = '1970-01-01T00:02:03Z';

async function authKey(s: TestServer, user = 'alice'): Promise<string> {
  const u = s.state.users.byName(user) ?? await s.state.users.create({ name: user });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  return secret;
}

async function join(s: TestServer, hostname: string, key: string): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey: key });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true });
  return d;
}

/** record collects every non-keepalive MapResponse a device receives from now on. */
function record(d: TestDevice): MapResponse[] {
  const out: MapResponse[] = [];
  d.on('update', (m: MapResponse) => out.push(m));
  return out;
}

/** waitMessage resolves with the first recorded message (old or new) matching predicate. */
async function waitMessage(msgs: MapResponse[], predicate: (m: MapResponse) => boolean, what: string, timeoutMs = 5000): Promise<MapResponse> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const m = msgs.find(predicate);
    if (m) return m;
    if (Date.now() > deadline) throw new Error(`no message with ${what} within ${timeoutMs} ms; got ${JSON.stringify(msgs).slice(0, 1500)}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** httpStatusOf is the HTTP status a control request failed with (200 when it did not fail). */
async function httpStatusOf(p: Promise<unknown>): Promise<number> {
  try {
    await p;
    return 200;
  } catch (err) {
    if (err instanceof ControlHttpError) return err.status;
    throw err;
  }
}

const changes = (id: number) => (m: MapResponse) => (m.PeersChanged ?? []).some((p) => p.ID === id);

t.test('tagged owner profile missing from the delta after nodes tag', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'alpha', key);
  const b = await join(s, 'bravo', key);
  t.teardown(async () => { await a.close(); await b.close(); });
  const idB = s.state.nodes.byNodeKey(b.nodeKeyText)!.id;
  await a.waitFor((nm) => nm.peers.has(idB));
  t.notOk(a.netmap.userProfiles.has(TAGGED_USER_ID), 'no tagged-devices profile before tagging');

  const msgs = record(a);
  await s.state.nodes.setTags(idB, ['tag:web']);
  const m = await waitMessage(msgs, changes(idB), 'bravo in PeersChanged');
  t.equal(m.PeersChanged!.find((p) => p.ID === idB)!.User, TAGGED_USER_ID, 'bravo is owned by the tagged-devices user');
  t.same(m.UserProfiles, [{ ID: TAGGED_USER_ID, LoginName: 'tagged-devices', DisplayName: 'Tagged Devices' }], 'the same delta carries the tagged-devices profile');
  t.equal(m.Domain, 'headway.net', 'the delta makes the client rebuild its netmap (Domain resent) so status shows the new owner');
  t.equal(m.Node, undefined, 'alpha itself did not change');

  // Once the client shows that owner, later changes of the peer carry neither profile nor rebuild.
  msgs.length = 0;
  await s.state.nodes.rename(idB, 'bravo-two');
  const again = await waitMessage(msgs, changes(idB), 'the renamed bravo');
  t.equal(again.UserProfiles, undefined, 'an already sent, shown profile is not resent');
  t.equal(again.Domain, undefined, 'no rebuild needed');
});

t.test('owner profiles for a new user, a node moved to another user, and a user rename', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const a = await join(s, 'alpha', await authKey(s, 'alice'));
  t.teardown(() => a.close());
  const msgs = record(a);

  // A new user's first node.
  const c = await join(s, 'charlie', await authKey(s, 'bob'));
  t.teardown(() => c.close());
  const bob = s.state.users.byName('bob')!;
  const idC = s.state.nodes.byNodeKey(c.nodeKeyText)!.id;
  let m = await waitMessage(msgs, changes(idC), 'charlie joining');
  t.same(m.UserProfiles, [{ ID: bob.id, LoginName: 'bob', DisplayName: 'bob' }], "the join carries bob's profile");
  t.equal(m.Domain, 'headway.net', 'and rebuilds the netmap');

  // A node moved to another user (here: alice's new device moved to a new user carol).
  const carol = await s.state.users.create({ name: 'carol' });
  msgs.length = 0;
  await s.state.nodes.update(idC, { userId: carol.id });
  m = await waitMessage(msgs, changes(idC), 'charlie moved to carol');
  t.same(m.UserProfiles, [{ ID: carol.id, LoginName: 'carol', DisplayName: 'carol' }], "the move carries carol's profile");
  t.equal(m.Domain, 'headway.net', 'and rebuilds the netmap');

  // A user rename changes a profile the client shows.
  msgs.length = 0;
  await s.state.users.rename(carol.id, 'caroline');
  m = await waitMessage(msgs, (x) => (x.UserProfiles ?? []).some((p) => p.ID === carol.id), 'the renamed profile');
  t.same(m.UserProfiles, [{ ID: carol.id, LoginName: 'caroline', DisplayName: 'caroline' }], 'the rename sends the new profile');
  t.equal(m.Domain, 'headway.net', 'and rebuilds the netmap');
  t.equal(a.netmap.userProfiles.get(carol.id)?.LoginName, 'caroline');
});

t.test('deleted node never learns it was deleted', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'alpha', key);
  const b = await join(s, 'bravo', key);
  t.teardown(async () => { await a.close(); await b.close(); });
  const nodeA = s.state.nodes.byNodeKey(a.nodeKeyText)!;
  const idB = s.state.nodes.byNodeKey(b.nodeKeyText)!.id;
  await a.waitFor((nm) => nm.peers.has(idB));

  // The open stream gets a last message, then ends.
  const msgs = record(a);
  await s.state.nodes.delete(nodeA.id);
  await a.mapDone;
  // A change already on its way before the delete (under load: bravo's endpoints or online state)
  // may arrive first; the stream's last message is the logout, and only one is sent.
  const last = msgs[msgs.length - 1]!;
  t.equal(msgs.filter((m) => m.Node?.KeyExpiry === LOGGED_OUT_EXPIRY).length, 1, 'one last message on the open stream');
  t.equal(last.Node?.ID, nodeA.id, 'it is about the node itself');
  t.equal(last.Node?.KeyExpiry, LOGGED_OUT_EXPIRY, 'with a key that expired: the client goes to NeedsLogin');
  t.same(last.PeersRemoved, [idB], 'and no peers left');
  t.equal(a.netmap.peers.size, 0, 'the device holds no stale peers');

  // Its next map request is answered the same way instead of a 404.
  const again = await a.startMap({ stream: true });
  t.equal(again.Node?.ID, nodeA.id, 'a later map request: the node as it was');
  t.equal(again.Node?.KeyExpiry, LOGGED_OUT_EXPIRY, 'still logged out');
  t.same(again.Node?.Addresses, [], 'with no addresses');
  t.ok(again.DERPMap, 'a first message keeps the DERP map (the client drops its relay without one)');
  t.equal(again.UserProfiles?.[0]?.LoginName, 'alice', "and its owner's profile");
  let ended = false;
  void a.mapDone.finally(() => { ended = true; });
  await new Promise((r) => setTimeout(r, 300));
  t.notOk(ended, 'the stream is held open (ending it would only make the client poll again)');
  a.stopMap();
  t.equal(await httpStatusOf(a.liteUpdate()), 200, 'a lite update is acknowledged (the client retries a failed one forever)');

  // `tailscale logout` on the deleted device succeeds.
  const out = await a.register({ logout: true });
  t.equal(out.Error, '', 'logout of a deleted node is no error');
  t.equal(out.NodeKeyExpired, true, 'and reports the key expired');

  // It can join again with a new node key.
  await a.rotateNodeKey({ authKey: key });
  await a.startMap({ stream: true });
  const fresh = s.state.nodes.byNodeKey(a.nodeKeyText)!;
  t.not(fresh.id, nodeA.id, 'a new node');
  t.equal(a.netmap.self?.KeyExpiry, undefined, 'not expired');
  t.ok(a.netmap.peers.has(idB), 'sees bravo again');
  await b.waitFor((nm) => nm.peers.has(fresh.id));
  t.pass('bravo sees the new node');
});

t.test('a map request from a machine with no node is answered logged out; a stale key of a known machine stays 404', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const stranger = new TestDevice({ serverUrl: s.urls.http, hostname: 'stranger' });
  t.teardown(() => stranger.close());
  await stranger.connect();
  const first = await stranger.startMap({ stream: true });
  t.equal(first.Node?.KeyExpiry, LOGGED_OUT_EXPIRY, 'never registered here (e.g. another database): logged out');
  t.equal(first.Node?.Key, stranger.nodeKeyText, 'its own node key');
  t.equal(first.Node?.Name, 'stranger.', 'named after its hostname');
  stranger.stopMap();

  const key = await authKey(s);
  const a = await join(s, 'alpha', key);
  t.teardown(() => a.close());
  const current = a.nodeKey;
  await a.rotateNodeKey({ authKey: key });
  const rotated = a.nodeKey;
  a.nodeKey = current;
  t.equal(await httpStatusOf(a.startMap({ stream: true })), 404, 'old key of a machine that has a node: 404');
  a.nodeKey = rotated;
});

t.test('logged-out answer sent the newest DERP map to clients that cannot pin the relay certificate', async (t) => {
  // Clients below capability version 115 read CertName as a host name; every other map gives them InsecureForTests.
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'old', capabilityVersion: 113 });
  t.teardown(() => d.close());
  await d.connect();
  t.equal((await d.register({ authKey: await authKey(s) })).Error, '');
  const full = await d.startMap({ stream: true });
  await s.state.nodes.delete(s.state.nodes.byNodeKey(d.nodeKeyText)!.id);
  const again = await d.startMap({ stream: true });
  t.equal(again.Node?.KeyExpiry, LOGGED_OUT_EXPIRY, 'answered logged out');
  t.same(again.DERPMap, full.DERPMap, 'the same DERP map as the full map for this client version');
  const relay = Object.values((again.DERPMap as { Regions: Record<string, { Nodes: Array<Record<string, unknown>> }> }).Regions)
    .flatMap((r) => r.Nodes);
  t.ok(relay.length > 0 && relay.every((n) => n.CertName === undefined), 'no certificate pin for a 1.80 client');
});
