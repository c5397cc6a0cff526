// State as a whole over a real in-memory SQLite database: its parts share one bus, on
// which each change is published once, after its write, in order; and a new State over
// the same database (a restart) holds what the old one did.
import t from 'tap';
import type { Change } from '../src/index.js';
import { changeTypes as types, nodeInput, startState } from '@headway/test-support';

t.test('the bus carries each change once, after the write, in order', async (t) => {
  const s = await startState(t);
  // A listener that reads the database when it hears of a change must find the write there.
  const seen: string[] = [];
  s.state.bus.subscribe((c) => {
    if (c.type === 'node-added' || c.type === 'node-changed') {
      void s.storage.nodes.get(c.node.id).then((stored) => seen.push(`${c.type}:${stored?.givenName}`));
    }
  });
  const u = await s.state.users.create({ name: 'ivy' });
  const n = await s.state.nodes.create(nodeInput('one', u.id));
  await s.state.nodes.rename(n.id, 'two');
  await s.state.nodes.setTags(n.id, ['tag:a']);
  await s.state.nodes.approveRoutes(n.id, []);
  s.state.presence.sessionOpened(n.id);
  s.state.presence.sessionOpened(n.id);
  await s.state.presence.sessionClosed(n.id);
  await s.state.presence.sessionClosed(n.id);
  await s.state.nodes.delete(n.id);
  await new Promise((r) => setImmediate(r));
  t.same(types(s.changes), [
    'user-changed', 'node-added', 'node-changed', 'node-changed', 'node-changed',
    'node-patch', // first session: online
    'node-patch', // last session closed: offline with lastSeen
    'node-removed',
  ]);
  const [online, offline] = s.changes.filter((c) => c.type === 'node-patch') as Array<Extract<Change, { type: 'node-patch' }>>;
  t.same(online!.patch, { online: true });
  t.equal(offline!.patch.online, false);
  t.ok(offline!.patch.lastSeen instanceof Date, 'offline carries lastSeen');
  t.same(seen, ['node-added:one', 'node-changed:two', 'node-changed:two', 'node-changed:two'], 'the write was committed when the change was heard');
  t.equal(s.state.presence.isOnline(n.id), false);
});

t.test('restart: a new State over the same database holds the same users, nodes and free addresses', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'lee' });
  const a = await s.state.nodes.create(nodeInput('a', u.id));
  const b = await s.state.nodes.create(nodeInput('b', u.id));
  await s.state.nodes.delete(a.id);
  const { State } = await import('../src/index.js');
  const again = new State(s.storage, s.config, s.state.logger);
  await again.init();
  t.same(again.users.list(), s.state.users.list());
  t.same(again.nodes.list(), s.state.nodes.list());
  const c = await again.nodes.create(nodeInput('b', u.id));
  t.equal(c.givenName, 'b-1', 'names known after a restart');
  t.not(c.ipv4, b.ipv4, 'used addresses known after a restart');
});

t.test('init loads users before the nodes that refer to them, and every part reads the same memory', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'mo' });
  const n = await s.state.nodes.create(nodeInput('m', u.id));
  const { State } = await import('../src/index.js');
  const again = new State(s.storage, s.config, s.state.logger);
  await again.init();
  t.equal(again.users.get(n.userId!)?.name, 'mo');
  await t.rejects(again.users.delete(u.id), { code: 'user_has_nodes' }, 'users see the nodes part');
  again.presence.sessionOpened(n.id);
  t.equal(again.presence.onlineCount(), 1, 'presence sees the nodes part');
  await again.nodes.delete(n.id);
  t.equal(again.presence.isOnline(n.id), false, 'and a deleted node\'s sessions go with it');
  t.equal(again.cluster.clustered, false, 'alone until a cluster member says otherwise');
  t.equal(again.cluster.serving, true);
});
