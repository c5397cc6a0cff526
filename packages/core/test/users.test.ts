// UserStore over a real in-memory SQLite database: names compared without case, provider
// logins and links, and deletion that never takes a user's devices unless asked to.
import t from 'tap';
import { HeadwayError } from '../src/index.js';
import { changeTypes as types, Faults, nodeInput, startState } from '@headway/test-support';

const code = (c: string) => ({ constructor: HeadwayError, code: c });

const identity = (sub: string, extra: Partial<{ email: string; username: string; displayName: string; profilePicUrl: string; groups: string[] }> = {}) => ({
  provider: 'oidc', providerId: `https://idp.example.com/${sub}`, email: '', username: '', displayName: '', profilePicUrl: '', groups: [], ...extra,
});

t.test('users: create, case-insensitive names, rename and delete refusals', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice', email: 'alice@example.com' });
  t.same(types(s.changes), ['user-changed']);
  await t.rejects(s.state.users.create({ name: 'Alice' }), code('name_taken'), 'a name differing only in case is taken');
  await t.rejects(s.state.users.create({ name: 'Alice' }), /already exists as alice \(names are compared without case\)/);
  await t.rejects(s.state.users.create({ name: '' }), { code: 'invalid_field', field: 'name' });
  await t.rejects(s.state.users.create({ name: '-bad' }), { code: 'invalid_field', field: 'name' });
  await t.rejects(s.state.users.create({ name: 'bob', email: 'not-an-email' }), { code: 'invalid_field', field: 'email' });
  t.equal(s.changes.length, 1, 'refusals publish nothing');
  t.equal((await s.storage.users.list()).length, 1, 'and store nothing');

  t.equal(s.state.users.byName('ALICE')?.id, alice.id, 'lookup ignores case');
  t.equal(s.state.users.resolve(String(alice.id)).id, alice.id, 'numeric reference is an id');
  t.equal(s.state.users.resolve('Alice').id, alice.id);
  t.throws(() => s.state.users.resolve('nobody'), code('not_found'));
  t.throws(() => s.state.users.resolve('  '), { code: 'invalid_field', field: 'user' });

  const bob = await s.state.users.create({ name: 'bob' });
  await t.rejects(s.state.users.rename(bob.id, 'ALICE'), { code: 'name_taken', field: 'newName' });
  await t.rejects(s.state.users.rename(bob.id, 'has space'), { code: 'invalid_field', field: 'newName' });
  await t.rejects(s.state.users.rename(9999, 'carol'), code('not_found'));
  const renamed = await s.state.users.rename(alice.id, 'Alice');
  t.equal(renamed.name, 'Alice', 'a user may change the case of its own name');
  t.equal((await s.storage.users.get(alice.id))?.name, 'Alice', 'stored');
  t.same(types(s.changes), ['user-changed', 'user-changed', 'user-changed']);

  const n = await s.state.nodes.create(nodeInput('laptop', bob.id));
  s.changes.length = 0;
  await t.rejects(s.state.users.delete(bob.id), { code: 'user_has_nodes', message: /still owns 1 node\(s\) \(laptop\)/ });
  t.ok(s.state.users.get(bob.id), 'a refused delete keeps the user');
  t.same(s.changes, [], 'and publishes nothing');
  await s.state.nodes.delete(n.id);
  await s.state.users.delete(bob.id);
  t.notOk(s.state.users.get(bob.id));
  t.notOk(await s.storage.users.get(bob.id), 'deleted in the database too');
  t.same(types(s.changes), ['node-removed', 'user-removed']);
  await t.rejects(s.state.users.delete(bob.id), code('not_found'));
});

t.test('delete also removes the user\'s pre-auth keys', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'dave' });
  await s.state.keys.createPreAuthKey({ userId: u.id });
  await s.state.users.delete(u.id);
  t.same(await s.state.keys.listPreAuthKeys({ userId: u.id }), []);
});

t.test('list filters by id, name (without case) and e-mail; version moves with every change in memory', async (t) => {
  const s = await startState(t);
  const v0 = s.state.users.version;
  const alice = await s.state.users.create({ name: 'alice', email: 'a@example.com' });
  const bob = await s.state.users.create({ name: 'bob' });
  t.ok(s.state.users.version > v0, 'a new user moves the version');
  t.same(s.state.users.list().map((u) => u.name), ['alice', 'bob'], 'in id order');
  t.same(s.state.users.list({ name: 'BOB' }).map((u) => u.id), [bob.id]);
  t.same(s.state.users.list({ email: 'a@example.com' }).map((u) => u.id), [alice.id]);
  t.same(s.state.users.list({ id: alice.id, name: 'bob' }), [], 'every filter applies');
  const v1 = s.state.users.version;
  await t.rejects(s.state.users.rename(bob.id, 'alice'));
  t.equal(s.state.users.version, v1, 'a refused change leaves it');
  await s.state.users.rename(bob.id, 'robert');
  t.ok(s.state.users.version > v1, 'a rename moves it');
});

t.test('a failed user write stores nothing, changes no memory and publishes nothing', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.users.create({ name: 'gina' });
  s.changes.length = 0;
  faults.failNext('users.update');
  await t.rejects(s.state.users.rename(u.id, 'gin'), /injected failure/);
  faults.failNext('users.create');
  await t.rejects(s.state.users.create({ name: 'hank' }), /injected failure/);
  faults.failNext('users.delete');
  await t.rejects(s.state.users.delete(u.id), /injected failure/);
  t.same(s.changes, [], 'nothing published');
  t.equal(s.state.users.get(u.id)?.name, 'gina');
  t.notOk(s.state.users.byName('hank'));
  t.equal((await s.storage.users.get(u.id))?.name, 'gina', 'the delete rolled back');
});

t.test('delete with deleteNodes removes the user and its nodes in one transaction, or nothing', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.users.create({ name: 'nina' });
  const other = await s.state.users.create({ name: 'omar' });
  const a = await s.state.nodes.create(nodeInput('a', u.id));
  const b = await s.state.nodes.create(nodeInput('b', u.id));
  const kept = await s.state.nodes.create(nodeInput('c', other.id));
  s.changes.length = 0;

  faults.failNext('users.delete');
  await t.rejects(s.state.users.delete(u.id, { deleteNodes: true }), /injected failure/);
  t.equal((await s.storage.nodes.list({ userId: u.id })).length, 2, 'the node deletions rolled back with the user');
  t.same(s.state.nodes.list({ userId: u.id }).map((n) => n.id), [a.id, b.id], 'memory unchanged');
  t.same(s.changes, [], 'nothing published');

  const { nodes } = await s.state.users.delete(u.id, { deleteNodes: true });
  t.same(nodes.map((n) => n.id), [a.id, b.id], 'the deleted nodes are returned');
  t.notOk(s.state.users.get(u.id));
  t.same(s.state.nodes.list().map((n) => n.id), [kept.id], 'another user\'s node stays');
  t.same(types(s.changes), ['node-removed', 'node-removed', 'user-removed'], 'each node, then the user');
  const again = await s.state.nodes.create(nodeInput('a', other.id));
  t.equal(again.givenName, 'a', 'the names of the deleted nodes are free');
  t.equal(again.ipv4, '100.64.0.4', 'sequential allocation moves on');
});

t.test('login: a provider identity finds its user, refreshes the profile, or creates one with a free name', async (t) => {
  const s = await startState(t);
  const first = await s.state.users.login(identity('1', { email: 'ann@example.com', username: 'ann', displayName: 'Ann', groups: ['b', 'a', 'b', ''] }));
  t.equal(first.name, 'ann', 'named after the provider\'s user name');
  t.same(first.groups, ['a', 'b'], 'groups deduplicated and sorted');
  t.equal(s.state.users.byProviderId('https://idp.example.com/1')?.id, first.id);
  s.changes.length = 0;

  const same = await s.state.users.login(identity('1', { email: 'ann@example.com', username: 'ann', displayName: 'Ann', groups: ['a', 'b'] }));
  t.equal(same.id, first.id);
  t.same(s.changes, [], 'an unchanged profile writes and publishes nothing');

  const moved = await s.state.users.login(identity('1', { email: 'ann@new.example.com', username: 'ann', displayName: 'Ann B', groups: ['a'] }));
  t.equal(moved.id, first.id, 'the same user');
  t.equal(moved.name, 'ann', 'whose name stays');
  t.equal((await s.storage.users.get(first.id))?.email, 'ann@new.example.com', 'the new profile is stored');
  t.same(types(s.changes), ['user-changed']);

  const byEmail = await s.state.users.login(identity('2', { email: 'ann2@example.com', username: 'ANN' }));
  t.equal(byEmail.name, 'ann2@example.com', 'a taken user name (without case) falls back to the e-mail address');
  const hashed = await s.state.users.login(identity('3', { email: 'not an address', username: '' }));
  t.match(hashed.name, /^user-[0-9a-f]{8}$/, 'then to a name from the identity');
  t.equal(hashed.email, '', 'an invalid e-mail address is not kept');
  t.equal((await s.state.users.login(identity('3'))).id, hashed.id, 'the identity finds it again');
});

t.test('link ties a local user to a provider identity, once', async (t) => {
  const s = await startState(t);
  const local = await s.state.users.create({ name: 'pat' });
  const other = await s.state.users.create({ name: 'quinn' });
  await t.rejects(s.state.users.link(local.id, 'OIDC!', 'sub'), { code: 'invalid_field', field: 'provider' });
  await t.rejects(s.state.users.link(local.id, 'oidc', 'has space'), { code: 'invalid_field', field: 'subject' });
  await t.rejects(s.state.users.link(9999, 'oidc', 'x'), code('not_found'));
  const linked = await s.state.users.link(local.id, 'oidc', 'https://idp.example.com/pat');
  t.equal(linked.provider, 'oidc');
  t.equal((await s.storage.users.get(local.id))?.providerId, 'https://idp.example.com/pat', 'stored');
  await t.rejects(s.state.users.link(other.id, 'oidc', 'https://idp.example.com/pat'), { code: 'name_taken', field: 'subject' }, 'one identity, one user');
  const login = await s.state.users.login(identity('pat', { username: 'someone-else' }));
  t.equal(login.id, local.id, 'the next login through the provider lands on the linked user');
});
