// The ownership rule of NodeStore: a node is owned by its tags or by a user, never
// both (headscale 0.29): tagging clears the user, every tag cannot be taken away
// through the admin APIs, and rows stored with both are repaired at load.
import t from 'tap';
import { State, silentLogger, UNTAG_REFUSED } from '../src/index.js';
import { changeTypes as types, nodeInput, startState } from '@headway/test-support';

t.test('tagging a user\'s node makes it owned by its tags: no user in memory, in storage or in the user\'s list', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice' });
  const n = await s.state.nodes.create(nodeInput('laptop', alice.id));
  t.equal(n.userId, alice.id);
  s.changes.length = 0;
  const tagged = await s.state.nodes.setTags(n.id, ['tag:web']);
  t.equal(tagged.userId, null, 'the user is gone with the first tag');
  t.equal((await s.storage.nodes.get(n.id))?.userId, null, 'in the same write');
  t.same(s.state.nodes.list({ userId: alice.id }), [], 'alice no longer lists it');
  t.same(types(s.changes), ['node-changed'], 'published once');

  // Any later write keeps it so: an update naming a user cannot give a tagged node an owner.
  const kept = await s.state.nodes.update(n.id, { userId: alice.id, hostname: 'laptop2' });
  t.equal(kept.userId, null);
  t.equal(kept.hostname, 'laptop2');

  // A node created with tags has no user either.
  const made = await s.state.nodes.create({ ...nodeInput('srv', alice.id), tags: ['tag:db'] });
  t.equal(made.userId, null);
  t.equal((await s.storage.nodes.get(made.id))?.userId, null);
});

t.test('removing every tag is refused, naming the field and how a node returns to a user; nothing changes', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice' });
  const n = await s.state.nodes.create(nodeInput('laptop', alice.id));
  await s.state.nodes.setTags(n.id, ['tag:web']);
  s.changes.length = 0;
  for (const tags of [[], ['', ' ']]) {
    await t.rejects(s.state.nodes.setTags(n.id, tags), { code: 'invalid_field', field: 'tags', message: UNTAG_REFUSED });
  }
  t.match(UNTAG_REFUSED, /auth register --user/);
  t.same(s.state.nodes.require(n.id).tags, ['tag:web'], 'still tagged');
  t.same((await s.storage.nodes.get(n.id))?.tags, ['tag:web']);
  t.same(s.changes, [], 'nothing published');
  // headscale refuses an empty list for an untagged node too.
  const plain = await s.state.nodes.create(nodeInput('phone', alice.id));
  await t.rejects(s.state.nodes.setTags(plain.id, []), { code: 'invalid_field', field: 'tags' });
  t.equal(s.state.nodes.require(plain.id).userId, alice.id, 'and it stays alice\'s');
});

t.test('a stored row holding both tags and a user loses the user at load, written back', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice' });
  const a = await s.state.nodes.create(nodeInput('a', alice.id));
  const b = await s.state.nodes.create(nodeInput('b', alice.id));
  const c = await s.state.nodes.create(nodeInput('c', alice.id));
  // Written past NodeStore, as an older release stored tagged nodes.
  await s.storage.nodes.update(a.id, { tags: ['tag:web'] });
  await s.storage.nodes.update(b.id, { tags: ['tag:db'] });
  t.equal((await s.storage.nodes.get(a.id))?.userId, alice.id, 'the old shape');
  const again = new State(s.storage, s.config, silentLogger);
  await again.init();
  t.same([a.id, b.id, c.id].map((id) => again.nodes.require(id).userId), [null, null, alice.id], 'tagged rows have no user; the untagged one keeps it');
  t.same((await s.storage.nodes.get(b.id))?.userId, null, 'written back');
  t.same(again.nodes.list({ userId: alice.id }).map((n) => n.id), [c.id]);
});
