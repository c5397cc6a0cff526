// SessionHub.begin: a new session's full map. With a batch pending on a policy that the batch made stale (a join
// burst), the full map waits for the flush or begin's own short timer, whichever comes first, so a burst of joins
// builds the tailnet context once instead of once per join; with nothing pending it goes out at once.
import t, { type Test } from 'tap';
import { Fleet, POLICIES } from './fleet.js';
import { machineKey, nodeKey } from '@headway/test-support';
import { firstMapWait } from '../src/batch-window.js';
import { FakeClock } from './fake-clock.js';

const POLICY = POLICIES[1]!; // everyone sees everyone: each new node is every session's peer

/**
 * startFleet starts a fleet on a FakeClock: no batch or first map goes out on a timer unless the test advances the
 * clock, and a job in slices moves on only when the test runs the loop's immediates (sliced).
 */
async function startFleet(t: Test, policy: string | undefined) {
  const clock = new FakeClock();
  return Fleet.start(t, policy, { clock, loadMeter: clock.meter() });
}

async function join(f: Fleet, userId: number, hostname: string) {
  return f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, registerMethod: 'authkey' });
}

/** withOneSession starts a fleet with one connected node whose session has had its first map and every change since. */
async function withOneSession(t: Test) {
  const f = await startFleet(t, POLICY);
  const [alice] = f.users();
  const first = await join(f, alice!.id, 'first');
  f.connect(first.id);
  f.hub.flushNow();
  const old = f.connected.get(first.id)!.client;
  return { f, alice: alice!, first, old, oldMessages: old.messages };
}

/** joinBurst joins and connects `count` nodes of `userId` while the batch they start is pending. */
async function joinBurst(f: Fleet, userId: number, count: number) {
  const fresh = [];
  for (let i = 0; i < count; i++) {
    const n = await join(f, userId, `burst${i}`);
    f.connect(n.id);
    fresh.push(n);
  }
  return fresh;
}

t.test('a burst of joins builds the tailnet context once, and each new device gets one full map with the burst in it', async (t) => {
  const { f, alice, first, old, oldMessages } = await withOneSession(t);
  const builds = f.view.contextBuilds;
  const extensions = f.view.contextExtensions;
  const fresh = await joinBurst(f, alice.id, 5);
  t.same(fresh.map((n) => f.connected.get(n.id)!.client.messages), [0, 0, 0, 0, 0], 'the new sessions wait for the pending batch');
  t.equal(f.view.contextBuilds + f.view.contextExtensions, builds + extensions, 'nothing was compiled while the burst arrived');

  f.hub.flushNow();
  t.equal(f.view.contextExtensions - extensions, 1, 'the batch extended the tailnet context with the burst, once');
  t.equal(f.view.contextBuilds, builds, 'and built none: joins alone never rebuild it');
  const all = [first, ...fresh].map((n) => n.id).sort((a, b) => a - b);
  for (const n of fresh) {
    const c = f.connected.get(n.id)!.client;
    t.equal(c.messages, 1, `node ${n.id}: one message, its full map`);
    t.same([...c.peers.keys()].sort((a, b) => a - b), all.filter((id) => id !== n.id), `node ${n.id} holds every other node`);
    t.ok(c.filter, `node ${n.id} holds a packet filter`);
  }
  t.equal(old.messages, oldMessages + 1, 'the session that was already open got the burst as one message');
  t.same([...old.peers.keys()].sort((a, b) => a - b), all.filter((id) => id !== first.id));

  f.hub.flushNow();
  t.same(fresh.map((n) => f.connected.get(n.id)!.client.messages), [1, 1, 1, 1, 1], 'the batch was not sent again to the sessions opened after it');
});

t.test('with nothing pending, a new session gets its full map at once', async (t) => {
  const f = await startFleet(t, POLICY);
  const [alice] = f.users();
  const a = await join(f, alice!.id, 'a');
  const b = await join(f, alice!.id, 'b');
  f.hub.flushNow();
  f.connect(a.id);
  f.hub.flushNow(); // a's coming online
  f.connect(b.id);
  t.equal(f.connected.get(b.id)!.client.messages, 1, 'no batch was waiting: the full map went out with the request');
  t.same([...f.connected.get(b.id)!.client.peers.keys()], [a.id]);
});

t.test('without a policy there is nothing to rebuild: the full map goes out at once', async (t) => {
  const f = await startFleet(t, undefined);
  const [alice] = f.users();
  const a = await join(f, alice!.id, 'a');
  f.connect(a.id);
  t.equal(f.connected.get(a.id)!.client.messages, 1);
});

t.test('a node deleted while its session waits is told it is logged out, and gets nothing more', async (t) => {
  const f = await startFleet(t, POLICY);
  const [alice] = f.users();
  const a = await join(f, alice!.id, 'a');
  const b = await join(f, alice!.id, 'b');
  f.connect(b.id);
  const waiting = f.connected.get(b.id)!.client;
  t.equal(waiting.messages, 0, 'waiting for the batch');
  await f.state.nodes.delete(b.id);
  t.equal(waiting.messages, 1);
  t.ok(waiting.loggedOut, 'its first map is that of a logged-out machine');
  t.equal(waiting.peers.size, 0);
  f.hub.flushNow();
  t.equal(waiting.messages, 1, 'the flush did not open the deleted node\'s session');
  t.notOk(f.connected.has(b.id), 'the session was closed');
  f.connect(a.id);
  f.hub.flushNow();
  t.same([...f.connected.get(a.id)!.client.peers.keys()], [], 'the others never see the deleted node');
});

t.test('a session closed while it waits is not opened by the flush', async (t) => {
  const f = await startFleet(t, POLICY);
  const [alice] = f.users();
  const a = await join(f, alice!.id, 'a');
  f.connect(a.id);
  const c = f.connected.get(a.id)!;
  await f.disconnect(a.id);
  f.hub.flushNow();
  t.equal(c.client.messages, 0);
  t.equal(f.hub.sessionCount, 0);
});

t.test('first maps can go out before the batch: the batch then sends the new sessions only what came after their maps', async (t) => {
  const { f, alice, first, old, oldMessages } = await withOneSession(t);
  const fresh = await joinBurst(f, alice.id, 3);
  const prepared = () => f.view.contextBuilds + f.view.contextExtensions;
  const before = prepared();
  f.hub.openDeferredNow(); // what begin's timer does when the batch window is longer than its own
  t.equal(prepared() - before, 1, 'the first maps shared one extension of the tailnet context');
  const all = [first, ...fresh].map((n) => n.id).sort((a, b) => a - b);
  for (const n of fresh) {
    const c = f.connected.get(n.id)!.client;
    t.equal(c.messages, 1, `node ${n.id}: its full map`);
    t.same([...c.peers.keys()].sort((a, b) => a - b), all.filter((id) => id !== n.id), `node ${n.id} holds the whole burst`);
  }
  t.equal(old.messages, oldMessages, 'the connected session has not been sent the burst yet');

  // After the first maps: a rename of one new node and an endpoint change of another.
  await f.state.nodes.rename(fresh[0]!.id, 'renamed');
  const ep = ['192.0.2.7:41641'];
  await f.state.nodes.update(fresh[1]!.id, { endpoints: ep }, 'silent');
  f.state.nodes.publishPatch(fresh[1]!.id, { endpoints: ep });
  f.hub.flushNow();

  for (const n of fresh) {
    const c = f.connected.get(n.id)!.client;
    const m = c.last!;
    const changed = ((m.PeersChanged as Array<Record<string, unknown>> | undefined) ?? []).map((p) => p.ID);
    const patched = ((m.PeersChangedPatch as Array<Record<string, unknown>> | undefined) ?? []).map((p) => p.NodeID);
    t.equal(c.messages, 2, `node ${n.id}: one more message`);
    t.same(changed, n.id === fresh[0]!.id ? [] : [fresh[0]!.id], `node ${n.id}: only the renamed peer is sent whole, not the burst its map held`);
    t.same(patched, n.id === fresh[1]!.id ? [] : [fresh[1]!.id], `node ${n.id}: the endpoint change as a patch`);
    if (n.id === fresh[0]!.id) t.match(c.self?.Name, /^renamed\./, 'the renamed node is sent its own new name');
    else t.match(c.peers.get(fresh[0]!.id)?.Name, /^renamed\./);
  }
  t.equal(old.messages, oldMessages + 1, 'the connected session got the burst and the changes as one message');
  t.same([...old.peers.keys()].sort((a, b) => a - b), all.filter((id) => id !== first.id));
  t.match(old.peers.get(fresh[0]!.id)?.Name, /^renamed\./);
  t.same(old.peers.get(fresh[1]!.id)?.Endpoints, ep);
});

t.test('a waiting session gets its full map from begin\'s own timer, without a flush being forced', async (t) => {
  const f = await startFleet(t, POLICY);
  const clock = f.hub.clock as FakeClock;
  const [alice] = f.users();
  const a = await join(f, alice!.id, 'a');
  f.connect(a.id);
  const c = f.connected.get(a.id)!.client;
  t.equal(c.messages, 0, 'waiting');
  for (let i = 0; i < 100 && c.messages === 0; i++) clock.advance(20);
  t.equal(c.messages, 1, 'the full map went out');
  t.ok(c.self, 'with the node itself');
});

t.test('under a long batch window a waiting session waits in proportion to what preparing the view last cost', async (t) => {
  const f = await startFleet(t, POLICY);
  const clock = f.hub.clock as FakeClock;
  const [alice] = f.users();
  // The previous flush, a burst's, just ended and cost 300 ms: the batch the join starts waits over a second
  // (nextBatchWindow; behind a lone change's flush it would wait the base window).
  f.hub.flushNow();
  const w = f.hub.scheduler.window;
  w.flushEnd = clock.now();
  w.lastFlushMs = 300;
  w.lastFlushChanges = 50;
  f.view.lastPrepareMs = 100;
  const a = await join(f, alice!.id, 'a');
  const started = clock.now();
  f.connect(a.id);
  t.ok(f.hub.batchWindow > 1000, `the batch waits ${f.hub.batchWindow} ms`);
  const c = f.connected.get(a.id)!.client;
  clock.advance(60);
  t.equal(c.messages, 0, 'after 60 ms the session still waits: preparing the view cost 100 ms, so first maps wait 200');
  for (let i = 0; i < 100 && c.messages === 0; i++) clock.advance(20);
  t.equal(c.messages, 1, 'then its full map went out');
  t.ok(clock.now() - started >= firstMapWait(100) - 5, `not before firstMapWait (${firstMapWait(100)} ms)`);
  t.ok(f.hub.batchWindow > 1000 && c.self, 'from begin\'s timer, the batch still pending');
});

/** sliced lets the loop run between the slices of a flush or round under way until it ends. */
async function sliced(f: Fleet): Promise<void> {
  const clock = f.hub.clock as FakeClock;
  for (let turns = 0; f.hub.flushing && turns < 1000; turns++) clock.turn();
}

t.test('a flush sent in slices keeps one view: changes and sessions arriving meanwhile wait for its end', async (t) => {
  const { f, alice, first } = await withOneSession(t);
  const others = await joinBurst(f, alice.id, 3);
  f.hub.flushNow();
  const open = [first, ...others];
  const before = new Map(open.map((n) => [n.id, f.connected.get(n.id)!.client.messages]));
  await f.state.nodes.rename(first.id, 'renamed');
  f.hub.flushInSlices(0); // one session a slice
  t.ok(f.hub.flushing, 'the flush is under way after its first slice');
  const sent = () => open.filter((n) => f.connected.get(n.id)!.client.messages > before.get(n.id)!).length;
  t.equal(sent(), 1, 'one session was sent its message');

  // A device joins and connects mid-flush: its change waits, its first map too.
  const late = await join(f, alice.id, 'late');
  f.connect(late.id);
  const lateClient = f.connected.get(late.id)!.client;
  t.equal(lateClient.messages, 0, 'the new session waits for the flush to end');
  await sliced(f);
  t.equal(sent(), open.length, 'every session had its message');
  for (const n of open) {
    const c = f.connected.get(n.id)!.client;
    t.equal(c.messages, before.get(n.id)! + 1, `node ${n.id}: one message for the batch`);
    t.notOk(c.peers.has(late.id), `node ${n.id}: the batch did not carry the device that joined during it`);
  }
  t.equal(lateClient.messages, 1, 'the new session got its full map when the flush ended');
  t.same([...lateClient.peers.keys()].sort((a, b) => a - b), open.map((n) => n.id).sort((a, b) => a - b), 'with every peer in it');

  f.hub.flushNow();
  for (const n of open) t.ok(f.connected.get(n.id)!.client.peers.has(late.id), `node ${n.id}: the next batch brought the late device`);
  t.equal(lateClient.messages, 1, 'and did not send the late session what its full map held');
  t.match(String((f.connected.get(others[0]!.id)!.client.peers.get(first.id) as { Name?: unknown } | undefined)?.Name), /^renamed\./, 'the rename reached the others');
});

t.test('flushNow finishes a flush under way at once', async (t) => {
  const { f, alice, first } = await withOneSession(t);
  const others = await joinBurst(f, alice.id, 3);
  f.hub.flushNow();
  const open = [first, ...others];
  const before = open.map((n) => f.connected.get(n.id)!.client.messages);
  await f.state.nodes.rename(first.id, 'renamed');
  f.hub.flushInSlices(0);
  t.ok(f.hub.flushing);
  f.hub.flushNow();
  t.notOk(f.hub.flushing, 'nothing left under way');
  t.same(open.map((n) => f.connected.get(n.id)!.client.messages), before.map((m) => m + 1), 'every session had its one message');
});

t.test('a round of first maps sent in slices keeps one view: changes and sessions arriving meanwhile wait for its end', async (t) => {
  const { f, alice, first, old, oldMessages } = await withOneSession(t);
  const fresh = await joinBurst(f, alice.id, 3);
  const prepared = () => f.view.contextBuilds + f.view.contextExtensions;
  const before = prepared();
  const opened = () => fresh.filter((n) => f.connected.get(n.id)!.client.messages > 0).length;
  f.hub.openInSlices(0); // one session a slice
  t.ok(f.hub.flushing, 'the round is under way after its first slice');
  t.equal(opened(), 1, 'one session has its first map');

  // Mid-round: a rename and a device that joins and connects. Neither reaches the round's maps.
  await f.state.nodes.rename(first.id, 'renamed');
  const late = await join(f, alice.id, 'late');
  f.connect(late.id);
  const lateClient = f.connected.get(late.id)!.client;
  await sliced(f);
  t.equal(opened(), fresh.length, 'every waiting session had its first map');
  t.equal(prepared() - before, 1, 'the whole round shared one extension of the tailnet context (the late join waited)');
  const round = [first, ...fresh].map((n) => n.id).sort((a, b) => a - b);
  for (const n of fresh) {
    const c = f.connected.get(n.id)!.client;
    t.equal(c.messages, 1, `node ${n.id}: its full map`);
    t.same([...c.peers.keys()].sort((a, b) => a - b), round.filter((id) => id !== n.id), `node ${n.id}: the round's view, without the late device`);
    t.notMatch(String((c.peers.get(first.id) as { Name?: unknown } | undefined)?.Name), /^renamed\./, `node ${n.id}: the round's view, before the rename`);
  }
  t.equal(lateClient.messages, 0, 'the late session waits for the next round or batch');
  t.equal(old.messages, oldMessages, 'the connected session has not been sent anything yet');

  f.hub.flushNow();
  t.equal(lateClient.messages, 1, 'the batch opened the late session');
  t.same([...lateClient.peers.keys()].sort((a, b) => a - b), round, 'with every peer in it');
  for (const n of [first, ...fresh]) {
    const c = f.connected.get(n.id)!.client;
    t.ok(c.peers.has(late.id) || n.id === late.id, `node ${n.id}: the batch brought the late device`);
    if (n.id !== first.id) t.match(String((c.peers.get(first.id) as { Name?: unknown } | undefined)?.Name), /^renamed\./, `node ${n.id}: and the rename`);
  }
});

t.test('flushNow finishes a round of first maps under way at once', async (t) => {
  const { f, alice } = await withOneSession(t);
  const fresh = await joinBurst(f, alice.id, 3);
  f.hub.openInSlices(0);
  t.ok(f.hub.flushing);
  f.hub.flushNow();
  t.notOk(f.hub.flushing, 'nothing left under way');
  t.same(fresh.map((n) => f.connected.get(n.id)!.client.messages), [1, 1, 1], 'every waiting session had its full map');
});
