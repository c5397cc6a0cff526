// Registration is one transaction on every database: the State and the Registrar
// run here over the real storage adapters (SQLite always, PostgreSQL and MariaDB
// when their URLs are set, mandatory in CI), some wrapped to fail on purpose.
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createLogger, parseRegisterRequest, resolveConfig, silentLogger, State, StorageRetryableError, type Change, type RegisterRequest, type RegisterResponse, type StoragePort } from '@headway/core';
import { Registrar } from '@headway/control';
import { faultyStorage, freshDatabases, type Opener } from './databases.js';

const databases = freshDatabases(t, 'register');

interface Server {
  state: State;
  registrar: Registrar;
  changes: Change[];
}

async function startServer(storage: StoragePort, raw: Record<string, unknown> = {}, logs?: string[]): Promise<Server> {
  const { config, problems } = resolveConfig({ server_url: 'http://127.0.0.1:9', ...raw }, { env: {} });
  const bad = problems.filter((p) => p.level !== 'warn');
  if (bad.length) throw new Error(`test config invalid: ${bad.map((p) => `${p.key}: ${p.message}`).join('; ')}`);
  const logger = logs ? createLogger({ level: 'debug', write: (l) => logs.push(l) }) : silentLogger;
  const state = new State(storage, config, logger);
  await state.init();
  const changes: Change[] = [];
  state.bus.subscribe((c) => changes.push(c));
  return { state, registrar: new Registrar(state, config, silentLogger), changes };
}

const hex = () => randomBytes(32).toString('hex');

interface Device { machineKey: string; req: { Version: number; NodeKey: string; Hostinfo: { Hostname: string } } }

function device(hostname: string): Device {
  return { machineKey: `mkey:${hex()}`, req: { Version: 106, NodeKey: `nodekey:${hex()}`, Hostinfo: { Hostname: hostname } } };
}

function register(s: Server, d: Device, authKey: string): Promise<RegisterResponse> {
  return s.registrar.handle(parseRegisterRequest({ ...d.req, Auth: { AuthKey: authKey } }), d.machineKey, new AbortController().signal);
}

async function singleUseKeys(s: Server, user: string, count: number): Promise<Array<{ id: number; secret: string }>> {
  const u = s.state.users.byName(user) ?? await s.state.users.create({ name: user });
  const out: Array<{ id: number; secret: string }> = [];
  for (let i = 0; i < count; i++) {
    const { key, secret } = await s.state.keys.createPreAuthKey({ userId: u.id, reusable: false });
    out.push({ id: key.id, secret });
  }
  return out;
}

const expectedNames = (base: string, n: number) => [base, ...Array.from({ length: n - 1 }, (_, i) => `${base}-${i + 1}`)].sort();

for (const db of databases) {
  await t.test(db.name, async (t: Test) => {
    await t.test('same-hostname devices joining at once with single-use keys all join with unique names (given_name already in use on PostgreSQL)', (t) => db.fresh(async (open) => {
      const storage = await open();
      const s = await startServer(storage);
      const keys = await singleUseKeys(s, 'fleet', 30);
      const devices = keys.map(() => device('web'));
      const started = performance.now();
      const replies = await Promise.all(devices.map((d, i) => register(s, d, keys[i]!.secret)));
      t.comment(`${db.name}: 30 concurrent registrations took ${(performance.now() - started).toFixed(0)} ms`);
      t.same(replies.map((r) => r.Error).filter(Boolean), [], 'no registration failed');
      t.ok(replies.every((r) => r.MachineAuthorized), 'every device is authorized');
      const stored = await storage.nodes.list();
      t.equal(stored.length, 30, '30 nodes stored');
      t.same(stored.map((n) => n.givenName).sort(), expectedNames('web', 30), 'web, web-1 ... web-29');
      t.equal(new Set(stored.map((n) => n.ipv4)).size, 30, '30 distinct IPv4 addresses');
      t.same(s.state.nodes.list().map((n) => n.givenName).sort(), expectedNames('web', 30), 'memory matches the database');
      const spent = await Promise.all(keys.map((k) => storage.preAuthKeys.get(k.id)));
      t.ok(spent.every((k) => k?.used), 'every key was spent, once each');
      t.same(new Set(stored.map((n) => n.authKeyId)), new Set(keys.map((k) => k.id)), 'each node names its own key');
      t.equal(s.changes.filter((c) => c.type === 'node-added').length, 30, 'each join published once');
    }));

    // Two SQLite connections in one process would block each other's synchronous driver;
    // SQLite is a one-server database anyway.
    await t.test('two servers on one database: same-hostname joins skip the names and addresses the other took', { skip: db.name === 'sqlite' ? 'sqlite serves one server' : false }, (t) => db.fresh(async (open) => {
      const logs: string[] = [];
      const a = await startServer(await open(), {}, logs);
      const b = await startServer(await open(), {}, logs);
      const keysA = await singleUseKeys(a, 'one', 6);
      const keysB = await singleUseKeys(b, 'two', 6);
      const replies = await Promise.all([
        ...keysA.map((k) => register(a, device('db'), k.secret)),
        ...keysB.map((k) => register(b, device('db'), k.secret)),
      ]);
      t.same(replies.map((r) => r.Error).filter(Boolean), [], 'every registration succeeded');
      const stored = await a.state.storage.nodes.list();
      t.same(stored.map((n) => n.givenName).sort(), expectedNames('db', 12), 'the unique index judged: 12 distinct names');
      t.equal(new Set(stored.map((n) => n.ipv4)).size, 12, '12 distinct IPv4 addresses');
      t.equal(new Set(stored.map((n) => n.ipv6)).size, 12, '12 distinct IPv6 addresses');
      // Both servers proposed `db` first: at least one of them lost it at the unique index.
      const retries = logs.filter((l) => l.includes('registration retried'));
      t.ok(retries.length >= 1, 'the database refused a proposal and the loser retried');
      t.comment(`${db.name}: ${retries.length} attempts retried after a conflict with the other server`);
    }));

    await t.test('single-use key burnt when the node write fails after the spend: the key stays unspent and the retry joins', (t) => db.fresh(async (open) => {
      const f = faultyStorage(await open());
      const s = await startServer(f.storage);
      const [key] = await singleUseKeys(s, 'alice', 1);
      const d = device('web');
      s.changes.length = 0;
      f.failNext('nodes.create');
      await t.rejects(register(s, d, key!.secret), /injected failure in nodes\.create/);
      t.same(f.calls.slice(0, 2), ['preAuthKeys.markUsed', 'nodes.create'], 'the key was spent before the failing write');
      t.equal((await f.storage.preAuthKeys.get(key!.id))?.used, false, 'the spend was rolled back');
      t.same(await f.storage.nodes.list(), [], 'no node in the database');
      t.same(s.state.nodes.list(), [], 'no node in memory');
      t.same(s.changes, [], 'nothing published');

      const reply = await register(s, d, key!.secret);
      t.equal(reply.Error, '', 'the retry with the same key succeeds');
      const node = s.state.nodes.byMachineKey(d.machineKey)!;
      t.equal(node.givenName, 'web', 'the name the failed attempt proposed was given back');
      t.equal(node.ipv4, '100.64.0.1', 'the address the failed attempt proposed was given back');
      t.equal((await f.storage.preAuthKeys.get(key!.id))?.used, true, 'now spent');
      t.match(await register(s, device('other'), key!.secret), { Error: 'authkey already used' }, 'and single-use');
    }));

    await t.test('a registration the database aborted for a concurrent one (deadlock) runs again and joins', (t) => db.fresh(async (open) => {
      const f = faultyStorage(await open());
      const s = await startServer(f.storage);
      const [key] = await singleUseKeys(s, 'alice', 1);
      const d = device('web');
      f.failNext('nodes.create', new StorageRetryableError('injected deadlock'));
      t.equal((await register(s, d, key!.secret)).Error, '', 'joined on the second attempt');
      t.same(f.calls, ['preAuthKeys.markUsed', 'nodes.create', 'preAuthKeys.markUsed', 'nodes.create'], 'the whole transaction ran twice');
      t.equal((await f.storage.nodes.list()).length, 1, 'one node');
      t.equal(s.state.nodes.byMachineKey(d.machineKey)?.ipv4, '100.64.0.1', 'the first attempt\'s address was reused');
    }));

    // With one connection (SQLite) two transactions never interleave, so they cannot deadlock.
    await t.test('a deadlock between two transactions rejects one with StorageRetryableError and commits the other', { skip: db.name === 'sqlite' ? 'one connection: no deadlock possible' : false }, (t) => db.fresh(async (open) => {
      const storage = await open();
      const a = await storage.users.create({ name: 'a' });
      const b = await storage.users.create({ name: 'b' });
      let oneLocked!: () => void, twoLocked!: () => void;
      const oneHolds = new Promise<void>((r) => { oneLocked = r; });
      const twoHolds = new Promise<void>((r) => { twoLocked = r; });
      const outcomes = await Promise.allSettled([
        storage.transaction(async (tx) => {
          await tx.users.update(a.id, { displayName: 'one' });
          oneLocked();
          await twoHolds;
          await tx.users.update(b.id, { displayName: 'one' });
        }),
        storage.transaction(async (tx) => {
          await oneHolds;
          await tx.users.update(b.id, { displayName: 'two' });
          twoLocked();
          await tx.users.update(a.id, { displayName: 'two' });
        }),
      ]);
      t.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1, 'one transaction committed');
      const lost = outcomes.find((o) => o.status === 'rejected') as PromiseRejectedResult | undefined;
      t.ok(lost?.reason instanceof StorageRetryableError, `the other is retryable (${String(lost?.reason)})`);
      const names = [(await storage.users.get(a.id))?.displayName, (await storage.users.get(b.id))?.displayName];
      t.ok(names[0] === names[1] && (names[0] === 'one' || names[0] === 'two'), 'the winner wrote both rows, the loser none');
    }));

    await t.test('no free addresses: the key stays unspent, and the retry after a delete joins', (t) => db.fresh(async (open) => {
      const storage = await open();
      // A /30 holds two usable addresses; IPv6 is off.
      const s = await startServer(storage, { prefixes: { v4: '100.64.0.0/30', v6: '' } });
      const keys = await singleUseKeys(s, 'alice', 3);
      const devices = [device('a'), device('b'), device('c')];
      t.equal((await register(s, devices[0]!, keys[0]!.secret)).Error, '');
      t.equal((await register(s, devices[1]!, keys[1]!.secret)).Error, '');
      const full = await register(s, devices[2]!, keys[2]!.secret);
      t.equal(full.Error, 'no free addresses left in the configured prefixes', 'the client is told why');
      t.equal((await storage.preAuthKeys.get(keys[2]!.id))?.used, false, 'the key is unspent');
      t.equal(await storage.nodes.getByMachineKey(devices[2]!.machineKey), undefined, 'no node stored');
      t.equal(s.state.nodes.byMachineKey(devices[2]!.machineKey), undefined, 'no node in memory');

      const freed = s.state.nodes.byMachineKey(devices[0]!.machineKey)!;
      await s.state.nodes.delete(freed.id);
      t.equal((await register(s, devices[2]!, keys[2]!.secret)).Error, '', 'the retry joins');
      t.equal(s.state.nodes.byMachineKey(devices[2]!.machineKey)?.ipv4, freed.ipv4, 'with the freed address');
    }));

    await t.test('re-registration with a new single-use key: a failed write leaves the key unspent and the node as it was', (t) => db.fresh(async (open) => {
      const f = faultyStorage(await open());
      const s = await startServer(f.storage);
      const [first, second] = await singleUseKeys(s, 'alice', 2);
      const d = device('laptop');
      t.equal((await register(s, d, first!.secret)).Error, '');
      const before = s.state.nodes.byMachineKey(d.machineKey)!;
      const relogin: Device = { machineKey: d.machineKey, req: { ...d.req, NodeKey: `nodekey:${hex()}` } };
      s.changes.length = 0;
      f.failNext('nodes.update');
      await t.rejects(register(s, relogin, second!.secret), /injected failure/);
      t.equal((await f.storage.preAuthKeys.get(second!.id))?.used, false, 'the new key is unspent');
      t.equal((await f.storage.nodes.get(before.id))?.nodeKey, before.nodeKey, 'the stored node kept its node key');
      t.equal(s.state.nodes.byMachineKey(d.machineKey)?.nodeKey, before.nodeKey, 'memory kept it too');
      t.same(s.changes, [], 'nothing published');
      t.equal((await register(s, relogin, second!.secret)).Error, '', 'the retry succeeds');
      t.equal(s.state.nodes.byMachineKey(d.machineKey)?.nodeKey, relogin.req.NodeKey);
      t.equal(s.state.nodes.byMachineKey(d.machineKey)?.givenName, before.givenName, 'name kept');
      t.equal((await f.storage.preAuthKeys.get(second!.id))?.used, true);
    }));

    await t.test('interactive approval: a failed write leaves the registration pending; of two approvals one wins', (t) => db.fresh(async (open) => {
      const f = faultyStorage(await open());
      const s = await startServer(f.storage);
      const user = await s.state.users.create({ name: 'bob' });
      const d = device('desk');
      const pending = await s.state.pending.create({ machineKey: d.machineKey, nodeKey: d.req.NodeKey!, hostinfo: { Hostname: 'desk' } });
      f.failNext('nodes.create');
      await t.rejects(s.registrar.approve(pending.key, user.id), /injected failure/);
      t.ok(await f.storage.pendingRegistrations.get(pending.key), 'still pending');
      t.same(await f.storage.nodes.list(), [], 'no node stored');
      t.same(s.state.nodes.list(), [], 'no node in memory');

      const outcomes = await Promise.allSettled([s.registrar.approve(pending.key, user.id), s.registrar.approve(pending.key, user.id)]);
      t.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1, 'one approval registered the machine');
      t.match(outcomes.find((o) => o.status === 'rejected'), { reason: { message: /not found/ } }, 'the other found it gone');
      t.equal((await f.storage.nodes.list()).length, 1, 'one node');
      t.equal(await f.storage.pendingRegistrations.get(pending.key), undefined, 'the pending registration is consumed');
    }));

    await t.test('user delete is one transaction and refuses a user with nodes (headscale: force only skips the prompt)', (t) => db.fresh(async (open) => {
      const f = faultyStorage(await open());
      const s = await startServer(f.storage);
      const user = await s.state.users.create({ name: 'carol' });
      const other = await s.state.users.create({ name: 'dave' });
      const owned = await s.state.nodes.create({ machineKey: `mkey:${hex()}`, nodeKey: `nodekey:${hex()}`, hostname: 'n1', userId: user.id, registerMethod: 'debug' });
      const kept = await s.state.nodes.create({ machineKey: `mkey:${hex()}`, nodeKey: `nodekey:${hex()}`, hostname: 'n4', userId: other.id, registerMethod: 'debug' });
      await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
      s.changes.length = 0;
      await t.rejects(s.state.users.delete(user.id), { code: 'user_has_nodes' }, 'refused while the user owns a node');
      t.notOk(f.calls.includes('nodes.delete'), 'no node was deleted');
      await s.state.nodes.delete(owned.id);
      s.changes.length = 0;
      f.failNext('users.delete');
      await t.rejects(s.state.users.delete(user.id), /injected failure in users\.delete/);
      t.ok(await f.storage.users.get(user.id), 'the user is still stored');
      t.equal((await f.storage.preAuthKeys.list({ userId: user.id })).length, 1, 'its key is still stored');
      t.ok(s.state.users.get(user.id), 'memory unchanged');
      t.same(s.changes, [], 'nothing published');

      await s.state.users.delete(user.id);
      t.equal(await f.storage.users.get(user.id), undefined);
      t.same(await f.storage.preAuthKeys.list({ userId: user.id }), [], 'its keys went with it');
      t.same(s.state.nodes.list().map((n) => n.id), [kept.id], 'the other user\'s node remains');
      t.same(s.changes.map((c) => c.type), ['user-removed']);
    }));

    await t.test('user delete with deleteNodes (users destroy --delete-nodes) takes nodes, keys and user in one transaction', (t) => db.fresh(async (open) => {
      const f = faultyStorage(await open());
      const s = await startServer(f.storage);
      const user = await s.state.users.create({ name: 'frank' });
      const other = await s.state.users.create({ name: 'gina' });
      const mk = (hostname: string, userId: number) => s.state.nodes.create({ machineKey: `mkey:${hex()}`, nodeKey: `nodekey:${hex()}`, hostname, userId, registerMethod: 'debug' });
      const a = await mk('fa', user.id);
      const b = await mk('fb', user.id);
      const kept = await mk('ga', other.id);
      await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
      await s.state.keys.createPreAuthKey({ userId: other.id, reusable: true });

      // A failure after the nodes were deleted inside the transaction rolls all of it back.
      s.changes.length = 0;
      f.failNext('users.delete');
      await t.rejects(s.state.users.delete(user.id, { deleteNodes: true }), /injected failure in users\.delete/);
      t.same((await f.storage.nodes.list({ userId: user.id })).map((n) => n.id).sort(), [a.id, b.id].sort(), 'both nodes still stored');
      t.ok(await f.storage.users.get(user.id), 'the user is still stored');
      t.equal((await f.storage.preAuthKeys.list({ userId: user.id })).length, 1, 'its key is still stored');
      t.equal(s.state.nodes.list({ userId: user.id }).length, 2, 'memory unchanged');
      t.same(s.changes, [], 'nothing published');

      const { nodes } = await s.state.users.delete(user.id, { deleteNodes: true });
      t.same(nodes.map((n) => n.givenName).sort(), ['fa', 'fb'], 'the deleted nodes are reported');
      t.equal(await f.storage.users.get(user.id), undefined, 'user gone');
      t.same(await f.storage.nodes.list({ userId: user.id }), [], 'its nodes gone');
      t.same(await f.storage.preAuthKeys.list({ userId: user.id }), [], 'its keys gone');
      t.same(s.state.nodes.list().map((n) => n.id), [kept.id], 'only the other user\'s node remains in memory');
      t.notOk(s.state.nodes.byMachineKey(a.machineKey), 'the key index forgot the deleted node');
      t.equal((await f.storage.preAuthKeys.list({ userId: other.id })).length, 1, 'the other user\'s key remains');
      t.same(s.changes.map((c) => c.type), ['node-removed', 'node-removed', 'user-removed'], 'published after commit: each node, then the user');
      await t.rejects(s.state.users.delete(user.id, { deleteNodes: true }), { code: 'not_found' });
    }));

    await t.test('IP backfill is one transaction: a failure gives no node an address', (t) => db.fresh(async (open) => {
      const storage = await open();
      const v4only = await startServer(storage, { prefixes: { v6: '' } });
      const user = await v4only.state.users.create({ name: 'erin' });
      for (const name of ['p', 'q']) {
        await v4only.state.nodes.create({ machineKey: `mkey:${hex()}`, nodeKey: `nodekey:${hex()}`, hostname: name, userId: user.id, registerMethod: 'debug' });
      }
      const f = faultyStorage(storage);
      const s = await startServer(f.storage);
      f.failNext('nodes.update');
      await t.rejects(s.state.nodes.backfillIPs(), /injected failure/);
      t.ok((await storage.nodes.list()).every((n) => n.ipv6 === null), 'no node got an IPv6 address');
      t.ok(s.state.nodes.list().every((n) => n.ipv6 === null), 'memory unchanged');
      const changed = await s.state.nodes.backfillIPs();
      t.equal(changed.length, 2, 'the retry gives both nodes an address');
      t.same(changed.map((n) => n.ipv6).sort(), ['fd7a:115c:a1e0::1', 'fd7a:115c:a1e0::2'], 'the addresses the failed attempt proposed were given back');
    }));
  });
}
