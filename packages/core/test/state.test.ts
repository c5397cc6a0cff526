// State unit tests over a real in-memory SQLite database: users, nodes, keys,
// and the rule that a change is published once, after its write, in order.
import t from 'tap';
import { HeadwayError, type Change, type NewNodeInput, type StoragePort } from '../src/index.js';
import { Faults, machineKey, nodeKey, startState, type TestState } from '@headway/test-support';

const code = (c: string) => ({ constructor: HeadwayError, code: c });
const types = (cs: Change[]) => cs.map((c) => c.type);

function nodeInput(hostname: string, userId: number | null, extra: Partial<NewNodeInput> = {}): NewNodeInput {
  return { machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, registerMethod: 'authkey', ...extra };
}

/** reopen starts a second State over the same database, as a restart would, to compare memory with what was stored. */
async function storedNodes(s: TestState) {
  return (await s.storage.nodes.list()).sort((a, b) => a.id - b.id);
}

t.test('users: create, case-insensitive names, rename and delete refusals', async (t) => {
  const s = await startState(t);
  const alice = await s.state.createUser({ name: 'alice', email: 'alice@example.com' });
  t.same(types(s.changes), ['user-changed']);
  await t.rejects(s.state.createUser({ name: 'Alice' }), code('name_taken'), 'a name differing only in case is taken');
  await t.rejects(s.state.createUser({ name: 'Alice' }), /already exists as alice \(names are compared without case\)/);
  await t.rejects(s.state.createUser({ name: '' }), { code: 'invalid_field', field: 'name' });
  await t.rejects(s.state.createUser({ name: '-bad' }), { code: 'invalid_field', field: 'name' });
  await t.rejects(s.state.createUser({ name: 'bob', email: 'not-an-email' }), { code: 'invalid_field', field: 'email' });
  t.equal(s.changes.length, 1, 'refusals publish nothing');
  t.equal((await s.storage.users.list()).length, 1, 'and store nothing');

  t.equal(s.state.userByName('ALICE')?.id, alice.id, 'lookup ignores case');
  t.equal(s.state.resolveUser(String(alice.id)).id, alice.id, 'numeric reference is an id');
  t.equal(s.state.resolveUser('Alice').id, alice.id);
  t.throws(() => s.state.resolveUser('nobody'), code('not_found'));
  t.throws(() => s.state.resolveUser('  '), { code: 'invalid_field', field: 'user' });

  const bob = await s.state.createUser({ name: 'bob' });
  await t.rejects(s.state.renameUser(bob.id, 'ALICE'), { code: 'name_taken', field: 'newName' });
  await t.rejects(s.state.renameUser(bob.id, 'has space'), { code: 'invalid_field', field: 'newName' });
  await t.rejects(s.state.renameUser(9999, 'carol'), code('not_found'));
  const renamed = await s.state.renameUser(alice.id, 'Alice');
  t.equal(renamed.name, 'Alice', 'a user may change the case of its own name');
  t.equal((await s.storage.users.get(alice.id))?.name, 'Alice', 'stored');
  t.same(types(s.changes), ['user-changed', 'user-changed', 'user-changed']);

  const n = await s.state.createNode(nodeInput('laptop', bob.id));
  s.changes.length = 0;
  await t.rejects(s.state.deleteUser(bob.id), { code: 'user_has_nodes', message: /still owns 1 node\(s\) \(laptop\)/ });
  t.ok(s.state.getUser(bob.id), 'a refused delete keeps the user');
  t.same(s.changes, [], 'and publishes nothing');
  await s.state.deleteNode(n.id);
  await s.state.deleteUser(bob.id);
  t.notOk(s.state.getUser(bob.id));
  t.notOk(await s.storage.users.get(bob.id), 'deleted in the database too');
  t.same(types(s.changes), ['node-removed', 'user-removed']);
  await t.rejects(s.state.deleteUser(bob.id), code('not_found'));
});

t.test('deleteUser also removes the user\'s pre-auth keys', async (t) => {
  const s = await startState(t);
  const u = await s.state.createUser({ name: 'dave' });
  await s.state.createPreAuthKey({ userId: u.id });
  await s.state.deleteUser(u.id);
  t.same(await s.state.listPreAuthKeys({ userId: u.id }), []);
});

t.test('nodes: given names are unique, addresses allocated and reused, memory matches the database', async (t) => {
  const s = await startState(t);
  const u = await s.state.createUser({ name: 'erin' });
  const a = await s.state.createNode(nodeInput('Web Server', u.id));
  const b = await s.state.createNode(nodeInput('web-server', u.id));
  const c = await s.state.createNode(nodeInput('WEB_SERVER', u.id));
  t.same([a.givenName, b.givenName, c.givenName], ['web-server', 'web-server-1', 'web-server-2'], 'hostnames sanitized, duplicates numbered');
  t.same([a.ipv4, b.ipv4, c.ipv4], ['100.64.0.1', '100.64.0.2', '100.64.0.3'], 'sequential IPv4');
  t.ok(a.ipv6 && b.ipv6 && a.ipv6 !== b.ipv6, 'distinct IPv6');
  t.same(types(s.changes), ['user-changed', 'node-added', 'node-added', 'node-added']);
  t.equal(s.state.nodeByMachineKey(b.machineKey)?.id, b.id);
  t.equal(s.state.nodeByNodeKey(b.nodeKey)?.id, b.id);

  // Rename: unique, a DNS label.
  await t.rejects(s.state.renameNode(b.id, 'web-server'), { code: 'name_taken', field: 'newName' });
  await t.rejects(s.state.renameNode(b.id, 'Not A Label'), { code: 'invalid_field', field: 'newName' });
  await t.rejects(s.state.renameNode(9999, 'x'), code('not_found'));
  const renamed = await s.state.renameNode(b.id, 'api');
  t.equal(renamed.givenName, 'api');
  t.equal(s.changes.at(-1)?.type, 'node-changed');
  t.equal((await s.state.renameNode(b.id, 'api')).givenName, 'api', 'a node may be renamed to the name it has');
  await t.rejects(s.state.renameNode(c.id, 'api'), { code: 'name_taken', field: 'newName' }, 'the new name is taken');
  t.equal((await s.state.renameNode(c.id, 'web-server-1')).givenName, 'web-server-1', 'and the old one is free');
  t.equal((await s.state.renameNode(c.id, 'web-server-2')).givenName, 'web-server-2');

  // Delete frees the address and the name for the next node.
  await s.state.deleteNode(a.id);
  t.notOk(s.state.nodeByMachineKey(a.machineKey), 'key indexes dropped');
  t.notOk(s.state.nodeByNodeKey(a.nodeKey));
  const d = await s.state.createNode(nodeInput('web-server', u.id));
  t.equal(d.givenName, 'web-server', 'the freed name is given again');
  t.equal(d.ipv4, '100.64.0.4', 'sequential allocation moves on rather than reusing at once');
  await t.rejects(s.state.deleteNode(a.id), code('not_found'));

  t.same(await storedNodes(s), s.state.listNodes(), 'memory holds exactly what was stored');
  const again = await startState(t);
  t.equal(again.state.listNodes().length, 0, 'a new database starts empty (no state leaks between tests)');
});

t.test('addresses: a full prefix refuses a node and stores nothing; a freed address is reused', async (t) => {
  const s = await startState(t, { prefixes: { v4: '10.9.0.0/29', v6: '' } });
  const u = await s.state.createUser({ name: 'olga' });
  const made = [];
  for (let i = 0; i < 6; i++) made.push(await s.state.createNode(nodeInput('n', u.id)));
  t.same(made.map((n) => n.ipv4), ['10.9.0.1', '10.9.0.2', '10.9.0.3', '10.9.0.4', '10.9.0.5', '10.9.0.6'], 'network and broadcast never given');
  t.ok(made.every((n) => n.ipv6 === null), 'IPv6 disabled');
  s.changes.length = 0;
  await t.rejects(s.state.createNode(nodeInput('n', u.id)), { code: 'conflict', message: /no free addresses/ });
  t.same(s.changes, [], 'nothing published');
  t.equal((await s.storage.nodes.list()).length, 6, 'nothing stored');
  await s.state.deleteNode(made[2]!.id);
  const again = await s.state.createNode(nodeInput('n', u.id));
  t.equal(again.ipv4, '10.9.0.3', 'the freed address is given again');
  t.equal(again.givenName, 'n-2', 'and so is the freed name');
});

t.test('nodes: tags, routes and expiry are validated, stored and published', async (t) => {
  const s = await startState(t);
  const u = await s.state.createUser({ name: 'frank' });
  const n = await s.state.createNode(nodeInput('router', u.id, { availableRoutes: ['10.0.0.0/24', '0.0.0.0/0', '::/0'] }));
  s.changes.length = 0;

  await t.rejects(s.state.setTags(n.id, ['server']), { code: 'invalid_field', field: 'tags' });
  t.same(s.changes, [], 'a bad tag stores and publishes nothing');
  t.same(s.state.requireNode(n.id).tags, []);
  const tagged = await s.state.setTags(n.id, [' tag:web ', 'tag:db', 'tag:web', '']);
  t.same(tagged.tags, ['tag:db', 'tag:web'], 'trimmed, deduplicated, sorted');
  t.same((await s.storage.nodes.get(n.id))?.tags, ['tag:db', 'tag:web']);

  const routed = await s.state.approveRoutes(n.id, ['10.0.0.7/24', '::/0']);
  t.same(routed.approvedRoutes, ['0.0.0.0/0', '10.0.0.0/24', '::/0'], 'canonical, and either exit route approves both');
  await t.rejects(s.state.approveRoutes(n.id, ['not-a-route']), /./, 'a bad route is refused');
  t.same(s.state.requireNode(n.id).approvedRoutes, routed.approvedRoutes, 'and changes nothing');

  const at = new Date(Date.now() - 1000);
  const expired = await s.state.expireNode(n.id, at);
  t.equal(expired.expiry?.getTime(), at.getTime());
  t.equal((await s.storage.nodes.get(n.id))?.expiry?.getTime(), at.getTime(), 'stored');
  const last = s.changes.at(-1);
  t.same(last, { type: 'node-patch', nodeId: n.id, patch: { keyExpiry: at } }, 'expiry is published as a patch, not a full change');
  t.same(types(s.changes), ['node-changed', 'node-changed', 'node-patch']);
  await t.rejects(s.state.expireNode(9999), code('not_found'));
});

t.test('a failed write stores nothing, changes no memory and publishes nothing', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.createUser({ name: 'gina' });
  const n = await s.state.createNode(nodeInput('box', u.id));
  s.changes.length = 0;

  faults.failNext('nodes.update');
  await t.rejects(s.state.setTags(n.id, ['tag:x']), /injected failure/);
  faults.failNext('nodes.update');
  await t.rejects(s.state.renameNode(n.id, 'other'), /injected failure/);
  faults.failNext('nodes.update');
  await t.rejects(s.state.expireNode(n.id), /injected failure/);
  faults.failNext('nodes.delete');
  await t.rejects(s.state.deleteNode(n.id), /injected failure/);
  faults.failNext('users.update');
  await t.rejects(s.state.renameUser(u.id, 'gin'), /injected failure/);
  faults.failNext('users.create');
  await t.rejects(s.state.createUser({ name: 'hank' }), /injected failure/);
  t.same(s.changes, [], 'nothing published');
  t.same(s.state.requireNode(n.id), n, 'memory unchanged');
  t.equal(s.state.getUser(u.id)?.name, 'gina');
  t.notOk(s.state.userByName('hank'));

  // A failed node create gives its name and addresses back.
  faults.failNext('nodes.create');
  await t.rejects(s.state.createNode(nodeInput('box', u.id)), /injected failure/);
  t.same(s.changes, []);
  const next = await s.state.createNode(nodeInput('box', u.id));
  t.equal(next.givenName, 'box-1', 'the name proposed by the failed attempt is free again');
  t.equal(next.ipv4, '100.64.0.2', 'and so is its address');
  t.same(types(s.changes), ['node-added']);
});

t.test('the bus carries each change once, after the write, in order', async (t) => {
  const s = await startState(t);
  // A listener that reads the database when it hears of a change must find the write there.
  const seen: string[] = [];
  s.state.bus.subscribe((c) => {
    if (c.type === 'node-added' || c.type === 'node-changed') {
      void s.storage.nodes.get(c.node.id).then((stored) => seen.push(`${c.type}:${stored?.givenName}`));
    }
  });
  const u = await s.state.createUser({ name: 'ivy' });
  const n = await s.state.createNode(nodeInput('one', u.id));
  await s.state.renameNode(n.id, 'two');
  await s.state.setTags(n.id, ['tag:a']);
  await s.state.approveRoutes(n.id, []);
  s.state.sessionOpened(n.id);
  s.state.sessionOpened(n.id);
  await s.state.sessionClosed(n.id);
  await s.state.sessionClosed(n.id);
  await s.state.deleteNode(n.id);
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
  t.equal(s.state.isOnline(n.id), false);
});

t.test('pre-auth keys: single-use spent once, reusable, expired, wrong secret', async (t) => {
  const s = await startState(t);
  const u = await s.state.createUser({ name: 'jack' });
  await t.rejects(s.state.createPreAuthKey({ userId: 9999 }), code('not_found'));
  await t.rejects(s.state.createPreAuthKey({ userId: null }), { code: 'invalid_field', field: 'user' }, 'a key without a user needs tags');
  await t.rejects(s.state.createPreAuthKey({ userId: u.id, tags: ['bad'] }), { code: 'invalid_field', field: 'aclTags' });
  await t.rejects(s.state.createPreAuthKey({ userId: u.id, expiration: new Date(Date.now() - 1) }), { code: 'invalid_field', field: 'expiration' });
  t.same(await s.state.listPreAuthKeys(), [], 'refusals store nothing');

  const single = await s.state.createPreAuthKey({ userId: u.id });
  t.notMatch(JSON.stringify(single.key), single.secret.slice(-20), 'the stored key holds no secret');
  const first = await s.state.checkPreAuthKey(single.secret);
  t.equal(first.spend, true, 'a single-use key must be spent');
  await s.state.authenticatePreAuthKey(single.secret, { spend: true });
  await t.rejects(s.state.authenticatePreAuthKey(single.secret, { spend: true }), { code: 'unauthorized', message: 'authkey already used' });
  t.same(await s.state.checkPreAuthKey(single.secret, single.key.id), { key: { ...single.key, used: true }, spend: false },
    'the machine that spent it may present it again without spending');

  const reusable = await s.state.createPreAuthKey({ userId: u.id, reusable: true });
  for (let i = 0; i < 3; i++) {
    const k = await s.state.authenticatePreAuthKey(reusable.secret, { spend: true });
    t.equal(k.used, false, `reusable use ${i + 1} never spends`);
  }

  const tagged = await s.state.createPreAuthKey({ userId: null, tags: ['tag:b', 'tag:a', 'tag:b'] });
  t.same(tagged.key.tags, ['tag:a', 'tag:b']);

  const soon = await s.state.createPreAuthKey({ userId: u.id, reusable: true });
  const expired = await s.state.expirePreAuthKey(soon.key.id);
  t.ok(expired.expiration && expired.expiration.getTime() <= Date.now());
  await t.rejects(s.state.checkPreAuthKey(soon.secret), { code: 'unauthorized', message: 'authkey expired' });

  await t.rejects(s.state.checkPreAuthKey(reusable.secret.slice(0, -1) + (reusable.secret.endsWith('a') ? 'b' : 'a')), { message: 'invalid authkey' });
  await t.rejects(s.state.checkPreAuthKey('garbage'), { message: 'invalid authkey' });
  await s.state.deletePreAuthKey(reusable.key.id);
  await t.rejects(s.state.checkPreAuthKey(reusable.secret), { message: 'invalid authkey' }, 'a deleted key is unknown');
  await t.rejects(s.state.deletePreAuthKey(reusable.key.id), code('not_found'));
  await t.rejects(s.state.expirePreAuthKey(9999), code('not_found'));
});

t.test('a single-use key is spent in the registration\'s transaction: a failed node write leaves it unspent', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.createUser({ name: 'kim' });
  const { key, secret } = await s.state.createPreAuthKey({ userId: u.id });
  faults.failNext('nodes.create');
  await t.rejects(s.state.createNode(nodeInput('pc', u.id, { authKeyId: key.id }), { spendKeyId: key.id }), /injected failure/);
  t.equal((await s.storage.preAuthKeys.get(key.id))?.used, false, 'rolled back with the node');
  const n = await s.state.createNode(nodeInput('pc', u.id, { authKeyId: key.id }), { spendKeyId: key.id });
  t.ok(n.id);
  t.equal((await s.storage.preAuthKeys.get(key.id))?.used, true);
  const changesBefore = s.changes.length;
  await t.rejects(s.state.createNode(nodeInput('pc', u.id), { spendKeyId: key.id }), { code: 'unauthorized', message: 'authkey already used' });
  t.equal(s.changes.length, changesBefore, 'a spent key registers nothing and publishes nothing');
  t.equal(s.state.listNodes().length, 1);
  await t.rejects(s.state.checkPreAuthKey(secret), { message: 'authkey already used' });
});

t.test('API keys: shown once, expire, delete, wrong secret refused', async (t) => {
  const s = await startState(t);
  await t.rejects(s.state.createApiKey(new Date(Date.now() - 1)), { code: 'invalid_field', field: 'expiration' });
  const { key, secret } = await s.state.createApiKey(null);
  t.notMatch(JSON.stringify(await s.state.listApiKeys()), secret.slice(-20), 'the secret is not stored');
  const ok = await s.state.authenticateApiKey(secret);
  t.equal(ok?.id, key.id);
  t.ok((await s.storage.apiKeys.get(key.id))?.lastSeen, 'lastSeen written on first use');
  t.equal(await s.state.authenticateApiKey(secret.slice(0, -2) + 'zz'), undefined, 'wrong secret');
  t.equal(await s.state.authenticateApiKey('hwkey-auth-nope'), undefined, 'wrong kind');
  t.equal((await s.state.findApiKey({ prefix: key.prefix })).id, key.id);
  await s.state.expireApiKey({ id: key.id });
  t.equal(await s.state.authenticateApiKey(secret), undefined, 'an expired key is refused');
  await s.state.deleteApiKey({ prefix: key.prefix });
  await t.rejects(s.state.findApiKey({ id: key.id }), code('not_found'));
  t.same(await s.state.listApiKeys(), []);
});

t.test('restart: a new State over the same database holds the same users, nodes and free addresses', async (t) => {
  const s = await startState(t);
  const u = await s.state.createUser({ name: 'lee' });
  const a = await s.state.createNode(nodeInput('a', u.id));
  const b = await s.state.createNode(nodeInput('b', u.id));
  await s.state.deleteNode(a.id);
  const { State } = await import('../src/index.js');
  const again = new State(s.storage, s.config, s.state.logger);
  await again.init();
  t.same(again.listUsers(), s.state.listUsers());
  t.same(again.listNodes(), s.state.listNodes());
  const c = await again.createNode(nodeInput('b', u.id));
  t.equal(c.givenName, 'b-1', 'names known after a restart');
  t.not(c.ipv4, b.ipv4, 'used addresses known after a restart');
});

// A write in flight when its node is deleted (a session's last-seen update, a cluster reload reading the row)
// resolves after the deletion; it must not put the node back into memory, where every later full map would
// show it (a reconnected device would keep a deleted peer).
t.test('a write or reload in flight across a deletion does not bring the deleted node back', async (t) => {
  let hold: Promise<void> | undefined;
  let reached: (() => void) | undefined;
  const wrap = (real: StoragePort) => ({
    ...real,
    nodes: new Proxy(real.nodes, {
      get: (target, prop) => {
        const v = Reflect.get(target, prop) as unknown;
        if (typeof v !== 'function') return v;
        return async (...args: unknown[]) => {
          const gate = prop === 'update' || prop === 'get' ? hold : undefined;
          const out = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          // The held call has done its database work; its answer arrives only once the test lets it.
          if (gate) { reached?.(); await gate; }
          return out;
        };
      },
    }),
  });
  const s = await startState(t, {}, wrap);
  const u = await s.state.createUser({ name: 'ivy' });

  for (const kind of ['updateNode', 'reloadNodes', 'reloadNodePatch'] as const) {
    const n = await s.state.createNode(nodeInput(`box-${kind.toLowerCase()}`, u.id));
    s.changes.length = 0;
    let release!: () => void;
    hold = new Promise((r) => { release = r; });
    const atGate = new Promise<void>((r) => { reached = r; });
    const inFlight: Promise<unknown> = kind === 'updateNode' ? s.state.updateNode(n.id, { lastSeen: new Date() }, 'silent')
      : kind === 'reloadNodes' ? s.state.reloadNodes([n.id])
        : s.state.reloadNodePatch(n.id, { endpoints: ['192.0.2.1:41641'] });
    await atGate;
    hold = undefined;
    await s.state.deleteNode(n.id);
    release();
    if (kind === 'updateNode') await t.rejects(inFlight, code('not_found'), 'the update reports the node gone');
    else await inFlight;
    t.notOk(s.state.getNode(n.id), `${kind}: the deleted node stays out of memory`);
    t.notOk(s.state.nodeByNodeKey(n.nodeKey), `${kind}: and out of the key index`);
    t.notOk(s.state.listNodes().some((x) => x.id === n.id), `${kind}: and out of the node list`);
    t.same(types(s.changes), ['node-removed'], `${kind}: only the removal is published`);
  }
});

// The quota is decided by the database, in the write's transaction: checked in memory before an awaited write,
// logins arriving together would all pass (one machine x 200 would leave 200 rows).
t.test('createPending: logins arriving at once stay within one per node key and registration.max_pending_per_address', async (t) => {
  const s = await startState(t, { registration: { max_pending_per_address: 100, max_pending: 150 } });
  const rows = async () => (await s.storage.dump!()).pendingRegistrations.length;
  const outcome = async (logins: Array<Promise<unknown>>) => {
    const settled = await Promise.allSettled(logins);
    const refused = settled.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as HeadwayError);
    return { stored: settled.length - refused.length, refused };
  };
  const mkey = machineKey();
  const nkey = nodeKey();
  const same = await outcome(Array.from({ length: 200 }, () => s.state.createPending({ machineKey: mkey, nodeKey: nkey, hostinfo: null, source: '192.0.2.1' })));
  t.equal(same.stored, 200, 'each of 200 logins of one machine and node key is taken, replacing the one before');
  t.equal(await rows(), 1, 'one row is left');
  t.equal(s.state.pendingQuota.size(), 1, 'and memory counts one');

  const burst = await outcome(Array.from({ length: 240 }, () => s.state.createPending({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '198.51.100.7' })));
  t.equal(burst.stored, 100, '100 of 240 logins from one address are stored');
  t.equal(burst.refused.length, 140, 'the rest refused');
  t.ok(burst.refused.every((e) => e.code === 'rate_limited' && /^too many logins waiting for approval from 198\.51\.100\.7 \(registration\.max_pending_per_address 100\)/.test(e.message)),
    'with the same 429 and message as before');
  t.equal(await rows(), 101);

  // Rows this State never saw (another instance's, or written before a restart) count too: memory does not decide.
  const now = new Date();
  const elsewhere = { perMachine: 3, perSource: 1000, total: 1000 };
  for (let i = 0; i < 49; i++) {
    await s.storage.pendingRegistrations.putWithinQuota({
      key: `elsewhere${i}`, machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, createdAt: now, expiresAt: new Date(now.getTime() + 600_000),
    }, `203.0.113.${i % 7}`, elsewhere, now);
  }
  t.equal(s.state.pendingQuota.size(), 101, 'memory knows none of the 49 written elsewhere');
  t.equal(await rows(), 150, 'the database holds max_pending');
  await t.rejects(s.state.createPending({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '192.0.2.200' }),
    { code: 'rate_limited', message: /^too many logins waiting for approval \(registration\.max_pending 150\)/ }, 'the next login is refused by the overall cap');
  t.equal(await rows(), 150, 'and nothing was written');
});
