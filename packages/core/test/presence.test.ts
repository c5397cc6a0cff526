// Presence over a real in-memory SQLite database: a node is online while any instance
// holds a map session of it, and its going on- and offline is published once.
import t from 'tap';
import type { Change } from '../src/index.js';
import { changeTypes as types, nodeInput, startState } from '@headway/test-support';

const patches = (cs: Change[]) => cs.filter((c): c is Extract<Change, { type: 'node-patch' }> => c.type === 'node-patch').map((c) => ({ id: c.nodeId, online: c.patch.online }));

t.test('local sessions: the first opening publishes online, the last closing offline with lastSeen stored', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'ada' });
  const n = await s.state.nodes.create(nodeInput('pc', u.id));
  const told: Array<[number, boolean, boolean]> = [];
  s.state.presence.onLocalSession = (id, online, lastSeen) => told.push([id, online, lastSeen instanceof Date]);
  s.changes.length = 0;

  t.equal(s.state.presence.isOnline(n.id), false);
  t.equal(s.state.presence.onlineSince(n.id), undefined);
  const before = Date.now();
  s.state.presence.sessionOpened(n.id);
  s.state.presence.sessionOpened(n.id);
  t.equal(s.state.presence.isOnline(n.id), true);
  t.equal(s.state.presence.localSessionCount(), 2, 'two streams');
  t.same(s.state.presence.localSessionNodes(), [n.id], 'of one node');
  t.equal(s.state.presence.onlineCount(), 1);
  t.ok(s.state.presence.onlineSince(n.id)! >= before, 'online since the first session opened');
  t.same(patches(s.changes), [{ id: n.id, online: true }], 'published online once');

  await s.state.presence.sessionClosed(n.id);
  t.equal(s.state.presence.isOnline(n.id), true, 'one session still open');
  await s.state.presence.sessionClosed(n.id);
  t.equal(s.state.presence.isOnline(n.id), false);
  t.equal(s.state.presence.onlineSince(n.id), undefined);
  t.same(patches(s.changes), [{ id: n.id, online: true }, { id: n.id, online: false }], 'and offline once');
  const offline = s.changes.at(-1) as Extract<Change, { type: 'node-patch' }>;
  const stored = await s.storage.nodes.get(n.id);
  t.equal(stored?.lastSeen?.getTime(), offline.patch.lastSeen?.getTime(), 'the lastSeen published is the one stored');
  t.equal(s.state.nodes.require(n.id).lastSeen?.getTime(), offline.patch.lastSeen?.getTime(), 'and in memory');
  t.same(types(s.changes), ['node-patch', 'node-patch'], 'the lastSeen write itself publishes nothing more');
  t.same(told, [[n.id, true, false], [n.id, false, true]], 'the cluster hook hears the first opening and the last closing');
});

t.test('a deleted node\'s sessions are forgotten; its last closing writes nothing', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'bea' });
  const n = await s.state.nodes.create(nodeInput('gone', u.id));
  const told: Array<[number, boolean]> = [];
  s.state.presence.onLocalSession = (id, online) => told.push([id, online]);
  s.state.presence.sessionOpened(n.id);
  await s.state.nodes.delete(n.id);
  t.equal(s.state.presence.isOnline(n.id), false, 'a deleted node is not online');
  t.equal(s.state.presence.onlineCount(), 0);
  s.changes.length = 0;
  await s.state.presence.sessionClosed(n.id);
  t.same(s.changes, [], 'nothing published');
  t.same(told.at(-1), [n.id, false], 'but the cluster record goes');
});

t.test('remote sessions: another instance\'s session keeps a node online; the last one anywhere takes it offline', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'cy' });
  const n = await s.state.nodes.create(nodeInput('roamer', u.id));
  const remote: boolean[] = [];
  s.state.bus.subscribe(() => remote.push(s.state.bus.applyingRemote));
  s.changes.length = 0;

  s.state.presence.setRemoteOnline(n.id, 'b', true, undefined, new Date(1_000));
  t.equal(s.state.presence.isOnline(n.id), true);
  t.equal(s.state.presence.onlineSince(n.id), 1_000, 'since the time the other instance recorded');
  t.same(patches(s.changes), [{ id: n.id, online: true }]);
  t.same(remote, [true], 'published as another instance\'s change');

  s.state.presence.sessionOpened(n.id);
  t.same(patches(s.changes), [{ id: n.id, online: true }], 'a local session of a node online elsewhere publishes nothing');
  t.equal(s.state.presence.onlineSince(n.id), 1_000, 'the oldest session counts');
  s.state.presence.setRemoteOnline(n.id, 'b', false);
  t.equal(s.state.presence.isOnline(n.id), true, 'still online here');
  t.equal(s.changes.length, 1);
  await s.state.presence.sessionClosed(n.id);
  t.same(patches(s.changes), [{ id: n.id, online: true }, { id: n.id, online: false }]);

  s.state.presence.setRemoteOnline(n.id, 'b', true);
  s.state.presence.setRemoteOnline(n.id, 'c', true);
  t.same([...s.state.presence.remoteInstances()].sort(), ['b', 'c']);
  const lastSeen = new Date(Date.now() - 5_000);
  s.state.presence.setRemoteOnline(n.id, 'b', false, lastSeen);
  t.equal(s.state.presence.isOnline(n.id), true, 'c still holds one');
  s.state.presence.forgetInstance('c');
  t.equal(s.state.presence.isOnline(n.id), false, 'a dead instance\'s sessions go');
  const last = s.changes.at(-1) as Extract<Change, { type: 'node-patch' }>;
  t.same(last.patch.online, false);
  t.equal(s.state.nodes.require(n.id).lastSeen?.getTime(), last.patch.lastSeen?.getTime(), 'memory holds the lastSeen published');
  t.same(s.state.presence.remoteInstances(), new Set());
});

t.test('reconcile brings other instances\' sessions in line with the cluster\'s records', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'dot' });
  const a = await s.state.nodes.create(nodeInput('a', u.id));
  const b = await s.state.nodes.create(nodeInput('b', u.id));
  s.state.presence.setRemoteOnline(a.id, 'x', true);
  s.state.presence.sessionOpened(b.id);
  s.changes.length = 0;
  s.state.presence.reconcile([
    { instanceId: 'self', nodeId: a.id },
    { instanceId: 'y', nodeId: b.id, since: new Date(2_000) },
  ], 'self');
  t.equal(s.state.presence.isOnline(a.id), false, 'a session no longer recorded closes (this instance\'s own records are skipped)');
  t.equal(s.state.presence.isOnline(b.id), true);
  t.equal(s.state.presence.onlineSince(b.id), 2_000, 'since the oldest of its sessions, as recorded');
  t.same([...s.state.presence.remoteInstances()], ['y'], 'a newly recorded one opens');
  t.same(patches(s.changes), [{ id: a.id, online: false }], 'only a\'s change is published (b was online here already)');
});

t.test('lastSeen is the connect time while connected (in memory at once, then stored) and the disconnect time after', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'lin' });
  const n = await s.state.nodes.create(nodeInput('pc', u.id));
  let clock = new Date('2030-01-01T10:00:00Z');
  s.state.presence.now = () => clock;
  s.state.presence.sessionOpened(n.id);
  t.equal(s.state.nodes.require(n.id).lastSeen?.toISOString(), '2030-01-01T10:00:00.000Z', 'in memory as the session opens');
  await until(async () => (await s.storage.nodes.get(n.id))?.lastSeen?.getTime() === clock.getTime());
  clock = new Date('2030-01-01T10:30:00Z');
  s.state.presence.sessionOpened(n.id);
  t.equal(s.state.nodes.require(n.id).lastSeen?.toISOString(), '2030-01-01T10:00:00.000Z', 'a second session of the node moves nothing');
  await s.state.presence.sessionClosed(n.id);
  clock = new Date('2030-01-01T11:00:00Z');
  await s.state.presence.sessionClosed(n.id);
  t.equal(s.state.nodes.require(n.id).lastSeen?.toISOString(), '2030-01-01T11:00:00.000Z', 'the last session closing stamps the disconnect');
  t.equal((await s.storage.nodes.get(n.id))?.lastSeen?.toISOString(), '2030-01-01T11:00:00.000Z');
  t.same(patches(s.changes), [{ id: n.id, online: true }, { id: n.id, online: false }], 'the connect stamp publishes nothing of its own');
});

/** until polls a condition the store reaches after a write it was not awaited for. */
async function until(fn: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 500 && !(await fn()); i++) await new Promise((r) => setTimeout(r, 5));
  if (!(await fn())) throw new Error('the condition never held');
}
