// NodeStore over a real in-memory SQLite database: given names and addresses, the
// writes that change a node, and the rule that a failed write leaves no trace.
import t from 'tap';
import { createLogger, HeadwayError, State, type Node, type StoragePort } from '../src/index.js';
import { changeTypes as types, Faults, machineKey, nodeInput, nodeKey, startState, testConfig, type TestState } from '@headway/test-support';

const code = (c: string) => ({ constructor: HeadwayError, code: c });

async function storedNodes(s: TestState) {
  return (await s.storage.nodes.list()).sort((a, b) => a.id - b.id);
}

t.test('nodes: given names are unique, addresses allocated and reused, memory matches the database', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'erin' });
  const a = await s.state.nodes.create(nodeInput('Web Server', u.id));
  const b = await s.state.nodes.create(nodeInput('web-server', u.id));
  const c = await s.state.nodes.create(nodeInput('WEB_SERVER', u.id));
  t.same([a.givenName, b.givenName, c.givenName], ['web-server', 'web-server-1', 'web-server-2'], 'hostnames sanitized, duplicates numbered');
  t.same([a.ipv4, b.ipv4, c.ipv4], ['100.64.0.1', '100.64.0.2', '100.64.0.3'], 'sequential IPv4');
  t.ok(a.ipv6 && b.ipv6 && a.ipv6 !== b.ipv6, 'distinct IPv6');
  t.same(types(s.changes), ['user-changed', 'node-added', 'node-added', 'node-added']);
  t.equal(s.state.nodes.byMachineKey(b.machineKey)?.id, b.id);
  t.equal(s.state.nodes.byNodeKey(b.nodeKey)?.id, b.id);

  // Rename: unique, a DNS label.
  await t.rejects(s.state.nodes.rename(b.id, 'web-server'), { code: 'name_taken', field: 'newName' });
  await t.rejects(s.state.nodes.rename(b.id, 'Not A Label'), { code: 'invalid_field', field: 'newName' });
  await t.rejects(s.state.nodes.rename(9999, 'x'), code('not_found'));
  const renamed = await s.state.nodes.rename(b.id, 'api');
  t.equal(renamed.givenName, 'api');
  t.equal(s.changes.at(-1)?.type, 'node-changed');
  t.equal((await s.state.nodes.rename(b.id, 'api')).givenName, 'api', 'a node may be renamed to the name it has');
  await t.rejects(s.state.nodes.rename(c.id, 'api'), { code: 'name_taken', field: 'newName' }, 'the new name is taken');
  t.equal((await s.state.nodes.rename(c.id, 'web-server-1')).givenName, 'web-server-1', 'and the old one is free');
  t.equal((await s.state.nodes.rename(c.id, 'web-server-2')).givenName, 'web-server-2');

  // Delete frees the address and the name for the next node.
  await s.state.nodes.delete(a.id);
  t.notOk(s.state.nodes.byMachineKey(a.machineKey), 'key indexes dropped');
  t.notOk(s.state.nodes.byNodeKey(a.nodeKey));
  const d = await s.state.nodes.create(nodeInput('web-server', u.id));
  t.equal(d.givenName, 'web-server', 'the freed name is given again');
  t.equal(d.ipv4, '100.64.0.4', 'sequential allocation moves on rather than reusing at once');
  await t.rejects(s.state.nodes.delete(a.id), code('not_found'));

  t.same(await storedNodes(s), s.state.nodes.list(), 'memory holds exactly what was stored');
  const again = await startState(t);
  t.equal(again.state.nodes.list().length, 0, 'a new database starts empty (no state leaks between tests)');
});

t.test('addresses: a full prefix refuses a node and stores nothing; a freed address is reused', async (t) => {
  const s = await startState(t, { prefixes: { v4: '10.9.0.0/29', v6: '' } });
  const u = await s.state.users.create({ name: 'olga' });
  const made = [];
  for (let i = 0; i < 6; i++) made.push(await s.state.nodes.create(nodeInput('n', u.id)));
  t.same(made.map((n) => n.ipv4), ['10.9.0.1', '10.9.0.2', '10.9.0.3', '10.9.0.4', '10.9.0.5', '10.9.0.6'], 'network and broadcast never given');
  t.ok(made.every((n) => n.ipv6 === null), 'IPv6 disabled');
  s.changes.length = 0;
  await t.rejects(s.state.nodes.create(nodeInput('n', u.id)), { code: 'conflict', message: /no free addresses/ });
  t.same(s.changes, [], 'nothing published');
  t.equal((await s.storage.nodes.list()).length, 6, 'nothing stored');
  await s.state.nodes.delete(made[2]!.id);
  const again = await s.state.nodes.create(nodeInput('n', u.id));
  t.equal(again.ipv4, '10.9.0.3', 'the freed address is given again');
  t.equal(again.givenName, 'n-2', 'and so is the freed name');
});

t.test('nodes: tags, routes and expiry are validated, stored and published', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'frank' });
  const n = await s.state.nodes.create(nodeInput('router', u.id, { availableRoutes: ['10.0.0.0/24', '0.0.0.0/0', '::/0'] }));
  s.changes.length = 0;

  await t.rejects(s.state.nodes.setTags(n.id, ['server']), { code: 'invalid_field', field: 'tags' });
  t.same(s.changes, [], 'a bad tag stores and publishes nothing');
  t.same(s.state.nodes.require(n.id).tags, []);
  const tagged = await s.state.nodes.setTags(n.id, [' tag:web ', 'tag:db', 'tag:web', '']);
  t.same(tagged.tags, ['tag:db', 'tag:web'], 'trimmed, deduplicated, sorted');
  t.same((await s.storage.nodes.get(n.id))?.tags, ['tag:db', 'tag:web']);

  const routed = await s.state.nodes.approveRoutes(n.id, ['10.0.0.7/24', '::/0']);
  t.same(routed.approvedRoutes, ['0.0.0.0/0', '10.0.0.0/24', '::/0'], 'canonical, and either exit route approves both');
  await t.rejects(s.state.nodes.approveRoutes(n.id, ['not-a-route']), /./, 'a bad route is refused');
  t.same(s.state.nodes.require(n.id).approvedRoutes, routed.approvedRoutes, 'and changes nothing');

  const at = new Date(Date.now() - 1000);
  const expired = await s.state.nodes.expire(n.id, at);
  t.equal(expired.expiry?.getTime(), at.getTime());
  t.equal((await s.storage.nodes.get(n.id))?.expiry?.getTime(), at.getTime(), 'stored');
  const last = s.changes.at(-1);
  t.same(last, { type: 'node-patch', nodeId: n.id, patch: { keyExpiry: at } }, 'expiry is published as a patch, not a full change');
  t.same(types(s.changes), ['node-changed', 'node-changed', 'node-patch']);
  await t.rejects(s.state.nodes.expire(9999), code('not_found'));
});

t.test('a failed node write stores nothing, changes no memory and publishes nothing', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.users.create({ name: 'gina' });
  const n = await s.state.nodes.create(nodeInput('box', u.id));
  s.changes.length = 0;

  faults.failNext('nodes.update');
  await t.rejects(s.state.nodes.setTags(n.id, ['tag:x']), /injected failure/);
  faults.failNext('nodes.update');
  await t.rejects(s.state.nodes.rename(n.id, 'other'), /injected failure/);
  faults.failNext('nodes.update');
  await t.rejects(s.state.nodes.expire(n.id), /injected failure/);
  faults.failNext('nodes.delete');
  await t.rejects(s.state.nodes.delete(n.id), /injected failure/);
  t.same(s.changes, [], 'nothing published');
  t.same(s.state.nodes.require(n.id), n, 'memory unchanged');

  // A failed node create gives its name and addresses back.
  faults.failNext('nodes.create');
  await t.rejects(s.state.nodes.create(nodeInput('box', u.id)), /injected failure/);
  t.same(s.changes, []);
  const next = await s.state.nodes.create(nodeInput('box', u.id));
  t.equal(next.givenName, 'box-1', 'the name proposed by the failed attempt is free again');
  t.equal(next.ipv4, '100.64.0.2', 'and so is its address');
  t.same(types(s.changes), ['node-added']);
});

t.test('a single-use key is spent in the registration\'s transaction: a failed node write leaves it unspent', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.users.create({ name: 'kim' });
  const { key, secret } = await s.state.keys.createPreAuthKey({ userId: u.id });
  faults.failNext('nodes.create');
  await t.rejects(s.state.nodes.create(nodeInput('pc', u.id, { authKeyId: key.id }), { spendKeyId: key.id }), /injected failure/);
  t.equal((await s.storage.preAuthKeys.get(key.id))?.used, false, 'rolled back with the node');
  const n = await s.state.nodes.create(nodeInput('pc', u.id, { authKeyId: key.id }), { spendKeyId: key.id });
  t.ok(n.id);
  t.equal((await s.storage.preAuthKeys.get(key.id))?.used, true);
  const changesBefore = s.changes.length;
  await t.rejects(s.state.nodes.create(nodeInput('pc', u.id), { spendKeyId: key.id }), { code: 'unauthorized', message: 'authkey already used' });
  t.equal(s.changes.length, changesBefore, 'a spent key registers nothing and publishes nothing');
  t.equal(s.state.nodes.list().length, 1);
  await t.rejects(s.state.keys.checkPreAuthKey(secret), { message: 'authkey already used' });
});

t.test('commit stores several nodes in one transaction, runs `applied` on memory, then publishes each once', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.users.create({ name: 'mia' });
  const a = await s.state.nodes.create(nodeInput('a', u.id, { availableRoutes: ['10.1.0.0/24'] }));
  const b = await s.state.nodes.create(nodeInput('b', u.id, { availableRoutes: ['10.2.0.0/24'] }));
  s.changes.length = 0;

  // The second update fails inside the transaction: the first rolls back with it.
  let calls = 0;
  faults.failNext('nodes.update', 1);
  await t.rejects(s.state.nodes.commit([{ id: a.id, patch: { approvedRoutes: ['10.1.0.0/24'] } }, { id: b.id, patch: { approvedRoutes: ['10.2.0.0/24'] } }], () => calls++), /injected failure/);
  t.same((await storedNodes(s)).map((n) => n.approvedRoutes), [[], []], 'nothing stored');
  t.same(s.state.nodes.list().map((n) => n.approvedRoutes), [[], []], 'memory unchanged');
  t.equal(calls, 0, 'applied not run');
  t.same(s.changes, [], 'nothing published');

  let seen: Node[] = [];
  let publishedBefore = -1;
  const done = await s.state.nodes.commit([{ id: a.id, patch: { approvedRoutes: ['10.1.0.0/24'] } }, { id: b.id, patch: { approvedRoutes: ['10.2.0.0/24'] } }], (nodes) => {
    seen = nodes.map((n) => s.state.nodes.require(n.id));
    publishedBefore = s.changes.length;
  });
  t.same(done.map((n) => n.approvedRoutes), [['10.1.0.0/24'], ['10.2.0.0/24']]);
  t.same(seen.map((n) => n.approvedRoutes), [['10.1.0.0/24'], ['10.2.0.0/24']], 'applied sees both committed rows in memory');
  t.equal(publishedBefore, 0, 'before anything is published');
  t.same(types(s.changes), ['node-changed', 'node-changed']);
  t.same(await s.state.nodes.commit([]), [], 'an empty commit writes nothing');
  await t.rejects(s.state.nodes.commit([{ id: 9999, patch: {} }]), code('not_found'));
});

t.test('backfillIPs gives every node the addresses it lacks, all in one transaction', async (t) => {
  const s = await startState(t, { prefixes: { v4: '100.64.0.0/10', v6: '' } });
  const u = await s.state.users.create({ name: 'ned' });
  const a = await s.state.nodes.create(nodeInput('a', u.id));
  const b = await s.state.nodes.create(nodeInput('b', u.id));
  t.same([a.ipv6, b.ipv6], [null, null], 'IPv6 off');
  t.same(await s.state.nodes.backfillIPs(), [], 'nothing to do while every enabled family is given');

  // The same database under a config that enables IPv6, as after a config change and restart.
  const v6 = new State(s.storage, testConfig({ prefixes: { v4: '100.64.0.0/10', v6: 'fd7a:115c:a1e0::/48' } }), s.state.logger);
  await v6.init();
  const changes: string[] = [];
  v6.bus.subscribe((c) => changes.push(c.type));
  const filled = await v6.nodes.backfillIPs();
  t.same(filled.map((n) => n.id), [a.id, b.id]);
  t.ok(filled.every((n) => n.ipv6 && n.ipv6.startsWith('fd7a:115c:a1e0:')), 'each got an IPv6 address');
  t.not(filled[0]!.ipv6, filled[1]!.ipv6, 'distinct');
  t.same(filled.map((n) => n.ipv4), [a.ipv4, b.ipv4], 'IPv4 addresses stay');
  t.same((await storedNodes(s)).map((n) => n.ipv6), filled.map((n) => n.ipv6), 'stored');
  t.same(changes, ['node-changed', 'node-changed']);
  t.same(await v6.nodes.backfillIPs(), [], 'a second run finds nothing');
});

t.test('backfillIPs that cannot fill every node fills none and gives its addresses back', async (t) => {
  const s = await startState(t, { prefixes: { v4: '10.9.0.0/29', v6: '' } });
  const u = await s.state.users.create({ name: 'ora' });
  const made = [];
  for (let i = 0; i < 6; i++) made.push(await s.state.nodes.create(nodeInput(`n${i}`, u.id)));
  // A v6 prefix of two usable addresses, for six nodes.
  const tight = new State(s.storage, testConfig({ prefixes: { v4: '10.9.0.0/29', v6: 'fd00::/126' } }), s.state.logger);
  await tight.init();
  await t.rejects(tight.nodes.backfillIPs(), { code: 'conflict', message: /no free addresses/ });
  t.ok((await storedNodes(s)).every((n) => n.ipv6 === null), 'nothing stored');
  t.ok(tight.nodes.list().every((n) => n.ipv6 === null), 'nothing in memory');
  for (const n of made.slice(2)) await tight.nodes.delete(n.id);
  const filled = await tight.nodes.backfillIPs();
  t.same(filled.map((n) => n.ipv6), ['fd00::1', 'fd00::2'], 'the addresses given back are given again, from the start');
});

t.test('reRegister gives a known machine a new login; its name and addresses stay, a consumed login goes in the same transaction', async (t) => {
  const faults = new Faults();
  const s = await startState(t, {}, faults.wrap);
  const u = await s.state.users.create({ name: 'pia' });
  const v = await s.state.users.create({ name: 'rob' });
  const n = await s.state.nodes.create(nodeInput('desk', u.id));
  const login = await s.state.pending.create({ machineKey: n.machineKey, nodeKey: nodeKey(), hostinfo: null });
  s.changes.length = 0;

  faults.failNext('nodes.update');
  await t.rejects(s.state.nodes.reRegister(n.id, { nodeKey: login.nodeKey, userId: v.id }, { pendingKey: login.key }), /injected failure/);
  t.ok(await s.storage.pendingRegistrations.get(login.key), 'the login stays waiting');
  t.equal(s.state.pending.quota.size(), 1, 'and counted');
  t.same(s.changes, []);

  const again = await s.state.nodes.reRegister(n.id, { nodeKey: login.nodeKey, userId: v.id }, { pendingKey: login.key });
  t.equal(again.userId, v.id);
  t.same([again.givenName, again.ipv4, again.ipv6], [n.givenName, n.ipv4, n.ipv6], 'name and addresses stay');
  t.equal(s.state.nodes.byNodeKey(login.nodeKey)?.id, n.id, 'found by its new node key');
  t.notOk(s.state.nodes.byNodeKey(n.nodeKey), 'and no longer by the old one');
  t.notOk(await s.storage.pendingRegistrations.get(login.key), 'the login is consumed');
  t.equal(s.state.pending.quota.size(), 0, 'and no longer counted');
  t.same(types(s.changes), ['node-changed']);
  await t.rejects(s.state.nodes.reRegister(n.id, { nodeKey: nodeKey() }, { pendingKey: login.key }), { code: 'not_found', field: 'key' }, 'a login is consumed once');
});

t.test('autoApprovals: a write that changes what a node advertises, its approvals, tags or owner stores the approved routes with it', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'sam' });
  const drafts: string[][] = [];
  s.state.nodes.autoApprovals = (draft) => {
    drafts.push(draft.availableRoutes);
    return draft.availableRoutes.includes('10.7.0.0/24') ? ['10.7.0.0/24'] : undefined;
  };
  const plain = await s.state.nodes.create(nodeInput('plain', u.id));
  t.same(drafts, [], 'a node advertising nothing is not asked about');
  const router = await s.state.nodes.create(nodeInput('router', u.id, { availableRoutes: ['10.7.0.0/24'] }));
  t.same(router.approvedRoutes, ['10.7.0.0/24'], 'approved in the registration\'s own write');
  t.same((await s.storage.nodes.get(router.id))?.approvedRoutes, ['10.7.0.0/24']);

  drafts.length = 0;
  await s.state.nodes.update(plain.id, { endpoints: ['192.0.2.1:41641'] }, 'silent');
  t.same(drafts, [], 'endpoints do not touch routes');
  const moved = await s.state.nodes.update(plain.id, { availableRoutes: ['10.7.0.0/24'] });
  t.same(moved.approvedRoutes, ['10.7.0.0/24'], 'newly advertised routes are approved in the same write');
  await s.state.nodes.setTags(plain.id, ['tag:x']);
  t.equal(drafts.length, 2, 'a tag change asks again');
  s.state.nodes.autoApprovals = undefined;
  const left = await s.state.nodes.update(plain.id, { availableRoutes: [] });
  t.same(left.approvedRoutes, ['10.7.0.0/24'], 'without the hook nothing is added or taken');
});

t.test('load repairs a stored row that cannot be served (quarantine) and serves the rest', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'tia' });
  const good = await s.state.nodes.create(nodeInput('good', u.id));
  const bad = await s.state.nodes.create(nodeInput('bad', u.id));
  const worse = await s.state.nodes.create(nodeInput('worse', u.id));
  // The reader hands back what the adapters refuse to write: fields failing the protocol schemas, and one it could not decode.
  const poison = (n: Node): Node => n.id === bad.id ? { ...n, endpoints: [42 as unknown as string], hostinfo: { Hostname: 7 } as unknown as Node['hostinfo'] }
    : n.id === worse.id ? { ...n, approvedRoutes: [], damaged: ['approvedRoutes'] } : n;
  const storage: StoragePort = {
    ...s.storage,
    nodes: new Proxy(s.storage.nodes, {
      get: (target, prop) => {
        const v = Reflect.get(target, prop) as unknown;
        if (prop === 'list') return async (...args: unknown[]) => ((await (v as (...a: unknown[]) => Promise<Node[]>).apply(target, args))).map(poison);
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    }),
  };
  const logs: string[] = [];
  const again = new State(storage, s.config, createLogger({ level: 'debug', write: (l) => logs.push(l) }));
  await again.init();
  t.same(again.nodes.require(good.id), s.state.nodes.require(good.id), 'a good row as stored');
  const fixed = again.nodes.require(bad.id);
  t.same([fixed.endpoints, fixed.hostinfo], [[], null], 'the invalid fields reset');
  const stored = await s.storage.nodes.get(bad.id);
  t.same([stored?.endpoints, stored?.hostinfo], [[], null], 'and written back');
  t.equal(again.nodes.require(worse.id).damaged, undefined, 'the node in memory carries no damage mark');
  const errors = logs.filter((l) => l.includes('node row quarantined'));
  t.equal(errors.length, 2, 'an error line per repaired row');
  t.match(errors.join('\n'), /fields="?approvedRoutes/, 'naming the fields');
});

t.test('the key indexes follow node and machine keys', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'uma' });
  const mk = machineKey();
  const n = await s.state.nodes.create(nodeInput('k', u.id, { machineKey: mk }));
  const next = nodeKey();
  await s.state.nodes.update(n.id, { nodeKey: next }, 'silent');
  t.equal(s.state.nodes.byNodeKey(next)?.id, n.id);
  t.notOk(s.state.nodes.byNodeKey(n.nodeKey), 'the old node key is forgotten');
  t.equal(s.state.nodes.byMachineKey(mk)?.nodeKey, next, 'the machine key finds the node as updated');
  t.throws(() => s.state.nodes.require(9999), code('not_found'));
  t.same(s.state.nodes.list({ userId: u.id }).map((x) => x.id), [n.id]);
  t.same(s.state.nodes.list({ userId: u.id + 1 }), []);
});

t.test('setIPv4 gives a node a chosen address inside prefixes.v4; a refused one changes nothing', async (t) => {
  const s = await startState(t, { prefixes: { v4: '10.9.0.0/29', v6: '' } });
  const u = await s.state.users.create({ name: 'ivy' });
  const a = await s.state.nodes.create(nodeInput('a', u.id));
  const b = await s.state.nodes.create(nodeInput('b', u.id));
  t.same([a.ipv4, b.ipv4], ['10.9.0.1', '10.9.0.2']);
  s.changes.length = 0;

  const refused: Array<[string, RegExp]> = [
    ['10.9.0.2', /10\.9\.0\.2 is in use by another node/],
    ['10.9.1.1', /outside the configured prefix 10\.9\.0\.0\/29/],
    ['10.9.0.0', /network or broadcast/],
    ['10.9.0.7', /network or broadcast/],
    ['fd00::1', /is not an IPv4 address/],
    ['not-an-ip', /is not an IPv4 address/],
  ];
  for (const [ip, message] of refused) {
    await t.rejects(s.state.nodes.setIPv4(a.id, ip), { code: 'invalid_field', field: 'ipv4', message }, ip);
  }
  await t.rejects(s.state.nodes.setIPv4(9999, '10.9.0.5'), code('not_found'));
  t.same(s.changes, [], 'refusals publish nothing');
  t.same((await storedNodes(s)).map((n) => n.ipv4), ['10.9.0.1', '10.9.0.2'], 'refusals store nothing');

  t.equal(await s.state.nodes.setIPv4(a.id, '10.9.0.1'), s.state.nodes.get(a.id), 'its own address is a no-op');
  t.same(s.changes, []);
  const moved = await s.state.nodes.setIPv4(a.id, ' 10.9.0.5 ');
  t.equal(moved.ipv4, '10.9.0.5');
  t.same(types(s.changes), ['node-changed'], 'peers hear of it as of any change');
  t.equal((await storedNodes(s))[0]!.ipv4, '10.9.0.5', 'stored');
  await t.rejects(s.state.nodes.setIPv4(b.id, '10.9.0.5'), { field: 'ipv4', message: /in use/ }, 'the new address is held');
  t.equal((await s.state.nodes.setIPv4(b.id, '10.9.0.1')).ipv4, '10.9.0.1', 'the old one is free');

  // A second server on the same database that has not yet heard of the move: the unique index judges.
  const other = new State(s.storage, testConfig({ prefixes: { v4: '10.9.0.0/29', v6: '' } }), s.state.logger);
  await other.init();
  await s.state.nodes.setIPv4(a.id, '10.9.0.6');
  await t.rejects(other.nodes.setIPv4(b.id, '10.9.0.6'), { code: 'name_taken', field: 'ipv4' }, 'a 409 naming ipv4');
  t.same((await storedNodes(s)).map((n) => n.ipv4), ['10.9.0.6', '10.9.0.1'], 'the refused write stored nothing');

  const off = await startState(t, { prefixes: { v4: '', v6: 'fd00::/64' } });
  const ou = await off.state.users.create({ name: 'otto' });
  const on = await off.state.nodes.create(nodeInput('x', ou.id));
  await t.rejects(off.state.nodes.setIPv4(on.id, '100.64.0.9'), { field: 'ipv4', message: /IPv4 is disabled \(prefixes\.v4 is empty\)/ });
});
