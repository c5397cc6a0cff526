/*
 * @headway/storage-contract: the behavioural suite every storage adapter must
 * pass, whatever it stores into. A third-party adapter proves itself with one call
 * in its own tap test:
 *
 *   await runStorageContract(t, 'my store', async () => openMyStorage(...));
 *
 * It is a package of its own, not a `@headway/core/testing` entry, so that core
 * (installed on every server) never depends on a test framework; adapters add it
 * as a devDependency next to tap.
 */
import type { Test } from 'tap';
import { settingsContract } from './settings.js';
import {
  StorageConflictError, StorageNotEmptyError, countDump, type NewNode, type PendingCaps, type PendingRegistration, type StorageDump, type StoragePort,
} from '@headway/core/ports';
import { oauthClientContract } from './oauth.js';
import { consoleSessionContract } from './console-sessions.js';

/** StorageFactory opens a storage (migrated) for the suite; it is called once per run. */
export type StorageFactory = () => Promise<StoragePort>;

/** ContractOptions: `more` runs adapter-specific checks on the same storage after the shared ones. */
export interface ContractOptions {
  more?: (t: Test, storage: StoragePort) => Promise<void>;
}

let serial = 0;
/** unique makes names that cannot collide across subtests sharing one database. */
export function unique(label: string): string {
  serial += 1;
  return `${label}-${process.pid}-${serial}`;
}

/** hex makes a unique 64-hex-digit key body, as node and machine keys have. */
export function hex(label: string): string {
  return Buffer.from(unique(label)).toString('hex').padEnd(64, '0').slice(0, 64);
}

/** newNode is a valid node to create, with unique keys and name; overrides set the fields a test cares about. */
export function newNode(overrides: Partial<NewNode> = {}): NewNode {
  return {
    machineKey: `mkey:${hex('m')}`,
    nodeKey: `nodekey:${hex('n')}`,
    discoKey: `discokey:${hex('d')}`,
    hostname: 'laptop',
    givenName: unique('laptop'),
    userId: null,
    tags: [],
    ipv4: null,
    ipv6: null,
    endpoints: [],
    hostinfo: null,
    availableRoutes: [],
    approvedRoutes: [],
    registerMethod: 'authkey',
    expiry: null,
    lastSeen: null,
    ephemeral: false,
    authKeyId: null,
    ...overrides,
  };
}

async function conflictField(t: Test, work: Promise<unknown>, field: string, what: string): Promise<void> {
  try {
    await work;
    t.fail(`${what}: expected StorageConflictError(${field}), the write succeeded`);
  } catch (err) {
    t.type(err, StorageConflictError, `${what}: StorageConflictError`);
    t.equal((err as StorageConflictError).field, field, `${what}: field is ${field}`);
  }
}

/**
 * runStorageContract is the one behavioural suite every storage adapter must
 * pass: CRUD on every repository, uniqueness conflicts naming their field,
 * foreign keys, transactions that commit or roll back whole, the single-use key
 * race, the caps on waiting logins under concurrent putWithinQuota, dates and JSON
 * round-trips. It opens one storage for the run and writes rows with unique names,
 * so any database (a throw-away one is best) will do.
 */
export async function runStorageContract(t: Test, name: string, makeStorage: StorageFactory,
  opts: ContractOptions = {}): Promise<void> {
  await t.test(name, async (t) => {
    const storage = await makeStorage();
    t.teardown(() => storage.close());

    await t.test('ping and describe', async (t) => {
      await storage.ping();
      t.match(storage.describe(), /\S/, 'describe names the database');
    });

    await t.test('migrate twice is a no-op that keeps data', async (t) => {
      const user = await storage.users.create({ name: unique('remigrate') });
      await storage.migrate();
      await storage.migrate();
      t.same(await storage.users.get(user.id), user);
    });

    await t.test('users: create, read, update, list, delete', async (t) => {
      const name = unique('alice');
      const alice = await storage.users.create({ name, displayName: 'Alice Ünicode 🚀', email: 'alice@example.com' });
      t.type(alice.id, 'number');
      t.equal(alice.name, name);
      t.equal(alice.displayName, 'Alice Ünicode 🚀');
      t.type(alice.createdAt, Date);
      t.same(await storage.users.get(alice.id), alice);
      t.same(await storage.users.getByName(name), alice);
      t.equal(await storage.users.getByName(name.toUpperCase()), undefined, 'names are case-sensitive on every database');
      const bare = await storage.users.create({ name: unique('bob') });
      t.equal(bare.displayName, '');
      t.equal(bare.email, '');
      t.equal(bare.profilePicUrl, '', 'no picture is an empty string');
      const picture = `https://example.com/p/${'x'.repeat(1900)}.png?size=96&é=1`;
      const pictured = await storage.users.create({ name: unique('pic'), profilePicUrl: picture });
      t.equal(pictured.profilePicUrl, picture, 'a long picture URL round-trips');
      t.equal((await storage.users.update(pictured.id, { profilePicUrl: 'https://example.com/b.png' }))?.profilePicUrl, 'https://example.com/b.png');
      t.equal(await storage.users.delete(pictured.id), true);

      const updated = await storage.users.update(alice.id, { email: 'a@example.org' });
      t.equal(updated?.email, 'a@example.org');
      t.equal(updated?.name, name, 'unpatched fields keep their value');
      t.same(await storage.users.update(alice.id, { email: 'a@example.org' }), updated, 'an update to the same values still finds the row');
      t.equal(await storage.users.update(999_999, { email: 'x' }), undefined, 'unknown id');

      t.same((await storage.users.list({ name })).map((u) => u.id), [alice.id]);
      t.same((await storage.users.list({ id: bare.id })).map((u) => u.id), [bare.id]);
      t.same((await storage.users.list({ email: 'a@example.org' })).map((u) => u.id), [alice.id]);
      const all = await storage.users.list();
      t.ok(all.findIndex((u) => u.id === alice.id) < all.findIndex((u) => u.id === bare.id), 'list is ordered by id');

      t.equal(await storage.users.delete(bare.id), true);
      t.equal(await storage.users.delete(bare.id), false, 'second delete finds nothing');
      t.equal(await storage.users.get(bare.id), undefined);
    });

    await t.test('users.name is unique', async (t) => {
      const name = unique('dup');
      const first = await storage.users.create({ name });
      await conflictField(t, storage.users.create({ name }), 'name', 'create');
      const other = await storage.users.create({ name: unique('other') });
      await conflictField(t, storage.users.update(other.id, { name }), 'name', 'rename');
      t.equal((await storage.users.get(other.id))?.name, other.name, 'failed rename changed nothing');
      t.equal((await storage.users.list({ name })).length, 1);
      t.equal((await storage.users.get(first.id))?.name, name);
    });

    await t.test('users keep a provider identity; provider_id is unique, NULL for local users', async (t) => {
      const providerId = `https://idp.example.com/${unique('sub')}`;
      const u = await storage.users.create({
        name: unique('oidc'), email: 'p@example.com', provider: 'oidc', providerId,
        profilePicUrl: 'https://pictures.example.com/p.png', groups: ['engineering', 'ops'],
      });
      t.match(u, { provider: 'oidc', providerId, profilePicUrl: 'https://pictures.example.com/p.png', groups: ['engineering', 'ops'] });
      t.same(await storage.users.get(u.id), u, 'read back as written');
      const local1 = await storage.users.create({ name: unique('local') });
      const local2 = await storage.users.create({ name: unique('local') });
      t.match([local1, local2], [{ provider: '', providerId: null, profilePicUrl: '', groups: [] }, { providerId: null }], 'local users share a NULL provider_id');
      await conflictField(t, storage.users.create({ name: unique('twin'), providerId }), 'provider_id', 'create with a taken identity');
      await conflictField(t, storage.users.update(local1.id, { providerId }), 'provider_id', 'link to a taken identity');
      const groupsGone = await storage.users.update(u.id, { groups: [], displayName: 'P' });
      t.same(groupsGone?.groups, [], 'groups can be emptied');
      const linked = await storage.users.update(local2.id, { provider: 'oidc', providerId: `${providerId}-2` });
      t.equal(linked?.providerId, `${providerId}-2`);
    });

    await t.test('nodes: create, read, update, list, delete with JSON and dates', async (t) => {
      const owner = await storage.users.create({ name: unique('owner') });
      const hostinfo = {
        OS: 'linux', Hostname: 'laptop', IPNVersion: '1.80.3',
        NetInfo: { PreferredDERP: 1, LinkType: 'wired', nested: [1, 'two', null, { ok: true }] },
        Services: [], unicode: 'ümlaut 東京 🚀', quote: 'a"b\\c',
      };
      const expiry = new Date('2031-02-03T04:05:06.789Z');
      const input = newNode({
        userId: owner.id,
        tags: ['tag:server', 'tag:prod'],
        ipv4: '100.64.0.1',
        ipv6: 'fd7a:115c:a1e0::1',
        endpoints: ['192.0.2.1:41641', '[2001:db8::1]:41641'],
        hostinfo,
        availableRoutes: ['10.0.0.0/8', '::/0'],
        approvedRoutes: ['10.0.0.0/8'],
        registerMethod: 'cli',
        expiry,
        lastSeen: new Date('2030-12-31T23:59:59.001Z'),
        ephemeral: true,
      });
      const node = await storage.nodes.create(input);
      t.type(node.id, 'number');
      t.match(node, { ...input, expiry, lastSeen: input.lastSeen });
      t.same(node.hostinfo, hostinfo, 'hostinfo JSON round-trips exactly');
      t.same(node.tags, ['tag:server', 'tag:prod']);
      t.same(node.endpoints, input.endpoints);
      t.equal(node.ephemeral, true);
      t.equal(node.expiry?.toISOString(), '2031-02-03T04:05:06.789Z', 'millisecond precision, UTC');
      t.equal(node.lastSeen?.toISOString(), '2030-12-31T23:59:59.001Z');
      t.type(node.createdAt, Date);
      t.equal(node.updatedAt.getTime(), node.createdAt.getTime());
      t.same(await storage.nodes.get(node.id), node);
      t.same(await storage.nodes.getByMachineKey(input.machineKey), node);
      t.same(await storage.nodes.getByNodeKey(input.nodeKey), node);
      t.equal(await storage.nodes.getByNodeKey('nodekey:missing'), undefined);

      const plain = await storage.nodes.create(newNode());
      t.equal(plain.userId, null);
      t.equal(plain.hostinfo, null);
      t.same(plain.tags, []);
      t.equal(plain.expiry, null);
      t.equal(plain.ephemeral, false);

      await new Promise((r) => setTimeout(r, 5));
      const newKey = `nodekey:${hex('rotated')}`;
      const patched = await storage.nodes.update(node.id, {
        nodeKey: newKey, hostinfo: null, expiry: null, approvedRoutes: [], ephemeral: false,
      });
      t.equal(patched?.nodeKey, newKey);
      t.equal(patched?.hostinfo, null);
      t.equal(patched?.expiry, null);
      t.same(patched?.approvedRoutes, []);
      t.same(patched?.availableRoutes, input.availableRoutes, 'unpatched JSON keeps its value');
      t.equal(patched?.ephemeral, false);
      t.ok(patched!.updatedAt.getTime() > node.updatedAt.getTime(), 'update moves updatedAt');
      t.equal(patched?.createdAt.getTime(), node.createdAt.getTime(), 'createdAt never moves');
      t.equal(await storage.nodes.getByNodeKey(input.nodeKey), undefined, 'old node key no longer resolves');
      t.equal(await storage.nodes.update(999_999, { hostname: 'x' }), undefined, 'unknown id');

      t.same((await storage.nodes.list({ userId: owner.id })).map((n) => n.id), [node.id]);
      t.ok((await storage.nodes.list()).some((n) => n.id === plain.id));

      t.equal(await storage.nodes.delete(plain.id), true);
      t.equal(await storage.nodes.delete(plain.id), false);
      t.equal(await storage.nodes.get(plain.id), undefined);
    });

    await t.test('nodes: every unique column conflicts with its field name', async (t) => {
      const base = await storage.nodes.create(newNode({ ipv4: '100.64.1.1', ipv6: 'fd7a:115c:a1e0::101' }));
      await conflictField(t, storage.nodes.create(newNode({ machineKey: base.machineKey })), 'machine_key', 'machine key');
      await conflictField(t, storage.nodes.create(newNode({ nodeKey: base.nodeKey })), 'node_key', 'node key');
      await conflictField(t, storage.nodes.create(newNode({ givenName: base.givenName })), 'given_name', 'given name');
      await conflictField(t, storage.nodes.create(newNode({ ipv4: '100.64.1.1' })), 'ipv4', 'ipv4');
      await conflictField(t, storage.nodes.create(newNode({ ipv6: 'fd7a:115c:a1e0::101' })), 'ipv6', 'ipv6');
      const other = await storage.nodes.create(newNode());
      await conflictField(t, storage.nodes.update(other.id, { givenName: base.givenName }), 'given_name', 'rename onto a taken name');
      await conflictField(t, storage.nodes.update(other.id, { ipv4: '100.64.1.1' }), 'ipv4', 'move onto a taken address');
      t.equal((await storage.nodes.get(other.id))?.ipv4, null, 'failed update changed nothing');

      const a = await storage.nodes.create(newNode({ ipv4: null, ipv6: null }));
      const b = await storage.nodes.create(newNode({ ipv4: null, ipv6: null }));
      t.not(a.id, b.id, 'many nodes may have no addresses (NULL is not a duplicate)');
    });

    await t.test('pre-auth keys: create, read, spend, expire, delete', async (t) => {
      const owner = await storage.users.create({ name: unique('keys') });
      const expiration = new Date('2032-06-07T08:09:10.111Z');
      const prefix = unique('hskey');
      const key = await storage.preAuthKeys.create({
        userId: owner.id, reusable: false, ephemeral: true, expiration, tags: ['tag:ci'], prefix, hash: '$argon2id$secret-hash',
      });
      t.match(key, { userId: owner.id, reusable: false, ephemeral: true, used: false, tags: ['tag:ci'], prefix, hash: '$argon2id$secret-hash' });
      t.equal(key.expiration?.toISOString(), '2032-06-07T08:09:10.111Z');
      t.same(await storage.preAuthKeys.get(key.id), key);
      t.same(await storage.preAuthKeys.getByPrefix(prefix), key);
      t.same((await storage.preAuthKeys.list({ userId: owner.id })).map((k) => k.id), [key.id]);

      t.equal(await storage.preAuthKeys.markUsed(key.id), true, 'first spend wins');
      t.equal(await storage.preAuthKeys.markUsed(key.id), false, 'second spend loses');
      t.equal((await storage.preAuthKeys.get(key.id))?.used, true);
      t.equal(await storage.preAuthKeys.markUsed(999_999), false, 'unknown key');

      const now = new Date('2026-01-01T00:00:00.500Z');
      t.equal(await storage.preAuthKeys.setExpiration(key.id, now), true);
      t.equal((await storage.preAuthKeys.get(key.id))?.expiration?.toISOString(), now.toISOString());
      t.equal(await storage.preAuthKeys.setExpiration(999_999, now), false);
      await t.rejects(storage.preAuthKeys.setExpiration(key.id, new Date(Number.NaN)), /expiration must be a valid Date/);

      const tagOnly = await storage.preAuthKeys.create({
        userId: null, reusable: true, ephemeral: false, expiration: null, tags: ['tag:a', 'tag:b'], prefix: unique('tagkey'), hash: 'h',
      });
      t.equal(tagOnly.userId, null);
      t.equal(tagOnly.expiration, null);
      t.same(tagOnly.tags, ['tag:a', 'tag:b']);
      await conflictField(t, storage.preAuthKeys.create({
        userId: null, reusable: true, ephemeral: false, expiration: null, tags: [], prefix, hash: 'other',
      }), 'prefix', 'prefix');

      t.equal(await storage.preAuthKeys.delete(tagOnly.id), true);
      t.equal(await storage.preAuthKeys.delete(tagOnly.id), false);
    });

    await t.test('api keys: create, read, update, delete', async (t) => {
      const prefix = unique('api');
      const key = await storage.apiKeys.create({ prefix, hash: 'hash-1', expiration: new Date('2027-03-04T05:06:07.089Z') });
      t.equal(key.lastSeen, null);
      t.equal(key.expiration?.toISOString(), '2027-03-04T05:06:07.089Z');
      t.same(await storage.apiKeys.get(key.id), key);
      t.same(await storage.apiKeys.getByPrefix(prefix), key);
      t.ok((await storage.apiKeys.list()).some((k) => k.id === key.id));

      const seen = new Date('2026-05-06T07:08:09.123Z');
      t.equal(await storage.apiKeys.update(key.id, { lastSeen: seen, expiration: null }), true);
      const after = await storage.apiKeys.get(key.id);
      t.equal(after?.lastSeen?.toISOString(), seen.toISOString());
      t.equal(after?.expiration, null);
      t.equal(await storage.apiKeys.update(key.id, {}), true, 'empty patch on an existing key');
      t.equal(await storage.apiKeys.update(999_999, { lastSeen: seen }), false);

      await conflictField(t, storage.apiKeys.create({ prefix, hash: 'hash-2', expiration: null }), 'prefix', 'prefix');
      t.equal(await storage.apiKeys.delete(key.id), true);
      t.equal(await storage.apiKeys.getByPrefix(prefix), undefined);
      t.equal(await storage.apiKeys.delete(key.id), false);
    });

    await t.test('OAuth clients and their tokens', (t) => oauthClientContract(t, storage, unique));

    await t.test('foreign keys', async (t) => {
      const owner = await storage.users.create({ name: unique('fk') });
      const key = await storage.preAuthKeys.create({
        userId: owner.id, reusable: true, ephemeral: false, expiration: null, tags: [], prefix: unique('fkkey'), hash: 'h',
      });
      const node = await storage.nodes.create(newNode({ userId: owner.id, authKeyId: key.id }));

      await conflictField(t, storage.users.delete(owner.id), 'user_id', 'deleting a user who owns nodes');
      t.ok(await storage.users.get(owner.id), 'the user is still there');
      t.ok(await storage.nodes.get(node.id), 'the node is still there');

      await t.rejects(storage.nodes.create(newNode({ userId: 999_999 })), StorageConflictError, 'node for a missing user');
      await t.rejects(storage.nodes.create(newNode({ authKeyId: 999_999 })), StorageConflictError, 'node for a missing key');
      await t.rejects(storage.preAuthKeys.create({
        userId: 999_999, reusable: false, ephemeral: false, expiration: null, tags: [], prefix: unique('orphan'), hash: 'h',
      }), StorageConflictError, 'key for a missing user');

      t.equal(await storage.preAuthKeys.delete(key.id), true);
      t.equal((await storage.nodes.get(node.id))?.authKeyId, null, 'deleting a key clears nodes.auth_key_id');

      const key2 = await storage.preAuthKeys.create({
        userId: owner.id, reusable: true, ephemeral: false, expiration: null, tags: [], prefix: unique('cascade'), hash: 'h',
      });
      t.equal(await storage.nodes.delete(node.id), true);
      t.equal(await storage.users.delete(owner.id), true, 'a user without nodes can go');
      t.equal(await storage.preAuthKeys.get(key2.id), undefined, "the user's keys went with them");
    });

    await t.test('transactions commit on resolve and roll back on throw', async (t) => {
      const kept = unique('kept');
      const result = await storage.transaction(async (tx) => {
        const u = await tx.users.create({ name: kept });
        await tx.nodes.create(newNode({ userId: u.id }));
        return u.id;
      });
      t.ok(await storage.users.get(result), 'committed');

      const lost = unique('lost');
      let createdId = 0;
      await t.rejects(storage.transaction(async (tx) => {
        const u = await tx.users.create({ name: lost });
        createdId = u.id;
        t.ok(await tx.users.get(u.id), 'visible inside the transaction');
        throw new Error('abort on purpose');
      }), /abort on purpose/, 'the error reaches the caller');
      t.equal(await storage.users.getByName(lost), undefined, 'rolled back');
      t.equal(await storage.users.get(createdId), undefined);

      await t.rejects(storage.transaction(async (tx) => {
        await tx.users.create({ name: unique('before-conflict') });
        await tx.users.create({ name: kept });
      }), StorageConflictError, 'a conflict inside a transaction is a StorageConflictError');
    });

    await t.test('20 concurrent spends of one single-use key: exactly one wins', async (t) => {
      const owner = await storage.users.create({ name: unique('race') });
      const key = await storage.preAuthKeys.create({
        userId: owner.id, reusable: false, ephemeral: false, expiration: null, tags: [], prefix: unique('race'), hash: 'h',
      });
      const results = await Promise.all(Array.from({ length: 20 }, () => storage.preAuthKeys.markUsed(key.id)));
      t.equal(results.filter(Boolean).length, 1, 'one markUsed returned true');

      // The way the kernel registers: spend and create the node in one transaction.
      const key2 = await storage.preAuthKeys.create({
        userId: owner.id, reusable: false, ephemeral: false, expiration: null, tags: [], prefix: unique('race2'), hash: 'h',
      });
      const outcomes = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => storage.transaction(async (tx) => {
        if (!(await tx.preAuthKeys.markUsed(key2.id))) throw new Error('key already used');
        return tx.nodes.create(newNode({ userId: owner.id, authKeyId: key2.id, givenName: unique(`racer${i}`) }));
      })));
      t.equal(outcomes.filter((o) => o.status === 'fulfilled').length, 1, 'one registration committed');
      t.ok(outcomes.filter((o) => o.status === 'rejected')
        .every((o) => /key already used/.test(String((o as PromiseRejectedResult).reason))), 'the others saw the key spent');
      t.equal((await storage.nodes.list({ userId: owner.id })).length, 1, 'exactly one node exists');
    });

    await t.test('pending registrations: put, overwrite, delete, expiry sweep', async (t) => {
      const base = Date.parse('2026-03-01T12:00:00.000Z');
      const reg = (key: string, expiresInMs: number) => ({
        key, machineKey: `mkey:${hex('pm')}`, nodeKey: `nodekey:${hex('pn')}`,
        hostinfo: { Hostname: key, OS: 'ios' }, expiresAt: new Date(base + expiresInMs), createdAt: new Date(base - 1000),
      });
      const a = reg(unique('reg-a'), -1);
      const b = reg(unique('reg-b'), 0);
      const c = reg(unique('reg-c'), 1);
      for (const r of [a, b, c]) await storage.pendingRegistrations.put(r);
      t.same(await storage.pendingRegistrations.get(c.key), c);

      const replaced = { ...c, nodeKey: `nodekey:${hex('pn2')}`, hostinfo: null };
      await storage.pendingRegistrations.put(replaced);
      t.same(await storage.pendingRegistrations.get(c.key), replaced, 'put overwrites by key');

      t.equal(await storage.pendingRegistrations.deleteExpired(new Date(base)), 2, 'expired and expiring-now are swept');
      t.equal(await storage.pendingRegistrations.get(a.key), undefined);
      t.equal(await storage.pendingRegistrations.get(b.key), undefined);
      t.ok(await storage.pendingRegistrations.get(c.key), 'the future one stays');
      t.equal(await storage.pendingRegistrations.deleteExpired(new Date(base)), 0);

      t.equal(await storage.pendingRegistrations.delete(c.key), true);
      t.equal(await storage.pendingRegistrations.delete(c.key), false);
      t.equal(await storage.pendingRegistrations.get('missing'), undefined);
    });

    await t.test('pending registrations: deleteByMachineKey removes only that machine\'s rows', async (t) => {
      const future = new Date(Date.now() + 60_000);
      const mine = `mkey:${hex('pmine')}`;
      const other = `mkey:${hex('pother')}`;
      const reg = (key: string, machineKey: string) => ({
        key, machineKey, nodeKey: `nodekey:${hex('pn')}`, hostinfo: null, expiresAt: future, createdAt: new Date(Date.now() - 1000),
      });
      const a = reg(unique('by-mk-a'), mine);
      const b = reg(unique('by-mk-b'), mine);
      const c = reg(unique('by-mk-c'), other);
      for (const r of [a, b, c]) await storage.pendingRegistrations.put(r);
      t.equal(await storage.pendingRegistrations.deleteByMachineKey(mine), 2);
      t.equal(await storage.pendingRegistrations.get(a.key), undefined);
      t.equal(await storage.pendingRegistrations.get(b.key), undefined);
      t.ok(await storage.pendingRegistrations.get(c.key), 'another machine keeps its row');
      t.equal(await storage.pendingRegistrations.deleteByMachineKey(mine), 0);
      await storage.pendingRegistrations.delete(c.key);
    });

    await t.test('pending registrations: putWithinQuota called concurrently stores exactly up to each cap and refuses the rest', async (t) => {
      // The caps count logins waiting at `now`. Each round's `now` lies past every row other tests wrote (and the
      // rounds before), so on a shared database the caps count this round's rows only.
      let epoch = Date.UTC(2200, 0, 1);
      const round = () => { epoch += 10 * 3_600_000; return new Date(epoch); };
      const written: string[] = [];
      const login = (now: Date, machineKey = `mkey:${hex('qm')}`, nodeKey = `nodekey:${hex('qn')}`): PendingRegistration => {
        const reg = { key: unique('quota'), machineKey, nodeKey, hostinfo: { Hostname: 'q' }, createdAt: now, expiresAt: new Date(now.getTime() + 3_600_000) };
        written.push(reg.key);
        return reg;
      };
      const kept = async (regs: PendingRegistration[]) => (await Promise.all(regs.map((r) => storage.pendingRegistrations.get(r.key)))).filter(Boolean).length;
      const caps = (over: Partial<PendingCaps>): PendingCaps => ({ perMachine: 3, perSource: 10_000, total: 10_000, ...over });
      const put = (regs: PendingRegistration[], source: (i: number) => string, c: PendingCaps, now: Date) =>
        Promise.all(regs.map((r, i) => storage.pendingRegistrations.putWithinQuota(r, source(i), c, now)));

      let now = round();
      const fromOne = Array.from({ length: 240 }, () => login(now));
      let results = await put(fromOne, () => '198.51.100.7', caps({ perSource: 100 }), now);
      t.equal(results.filter((r) => r.stored).length, 100, 'per source: 100 of 240 stored');
      t.same(results.filter((r) => !r.stored), Array.from({ length: 140 }, () => ({ stored: false, limit: 'perSource', waiting: 100 })), 'the other 140 refused at the per-source cap');
      t.equal(await kept(fromOne), 100, 'and the table holds exactly 100 of them');
      const storedOne = fromOne.find((_, i) => results[i]!.stored)!;
      const renewed = login(now, storedOne.machineKey, storedOne.nodeKey);
      t.same(await storage.pendingRegistrations.putWithinQuota(renewed, '198.51.100.7', caps({ perSource: 100 }), now), { stored: true, replaced: [storedOne.key] },
        'at the cap, a machine renewing its login replaces it');
      t.equal(await storage.pendingRegistrations.get(storedOne.key), undefined, 'the replaced login is gone');
      t.same(await storage.pendingRegistrations.putWithinQuota(login(now), '198.51.100.7', caps({ perSource: 100 }), now), { stored: false, limit: 'perSource', waiting: 100 });
      t.same(await storage.pendingRegistrations.putWithinQuota(login(now), '198.51.100.8', caps({ perSource: 100 }), now), { stored: true, replaced: [] }, 'another source still has room');

      now = round();
      const fromMany = Array.from({ length: 240 }, () => login(now));
      results = await put(fromMany, (i) => `203.0.113.${i % 12}`, caps({ total: 150 }), now);
      t.equal(results.filter((r) => r.stored).length, 150, 'overall: 150 of 240 from 12 sources stored');
      t.same(results.filter((r) => !r.stored), Array.from({ length: 90 }, () => ({ stored: false, limit: 'total', waiting: 150 })), 'the other 90 refused at the overall cap');
      t.equal(await kept(fromMany), 150, 'and the table holds exactly 150 of them');

      now = round();
      const machineKey = `mkey:${hex('qmachine')}`;
      const nodeKey = `nodekey:${hex('qnode')}`;
      const retries = Array.from({ length: 200 }, () => login(now, machineKey, nodeKey));
      results = await put(retries, () => '192.0.2.1', caps({ perSource: 5, total: 5 }), now);
      t.ok(results.every((r) => r.stored), 'one machine and node key, 200 at once: each is stored, replacing the one before');
      t.equal(await kept(retries), 1, 'one login is left');
      t.equal(results.flatMap((r) => (r.stored ? r.replaced : [])).length, 199, 'the other 199 were each replaced once');
      const rotated = Array.from({ length: 50 }, () => login(now, machineKey));
      results = await put(rotated, () => '192.0.2.1', caps({ perSource: 5, total: 5 }), now);
      t.ok(results.every((r) => r.stored), 'new node keys of the machine are all stored');
      t.equal(await kept([...retries, ...rotated]), 3, 'and the machine keeps perMachine (3) logins');

      now = round();
      const inTransactions = Array.from({ length: 60 }, () => login(now));
      results = await Promise.all(inTransactions.map((r) => storage.transaction((tx) => tx.pendingRegistrations.putWithinQuota(r, '192.0.2.9', caps({ perSource: 20 }), now))));
      t.equal(results.filter((r) => r.stored).length, 20, 'inside transactions too: 20 of 60 stored');
      t.equal(await kept(inTransactions), 20);

      const expired = login(new Date(now.getTime() - 2 * 3_600_000));
      await storage.pendingRegistrations.put(expired);
      t.same(await storage.pendingRegistrations.putWithinQuota(login(now), '192.0.2.9', caps({ perSource: 20 }), now), { stored: false, limit: 'perSource', waiting: 20 },
        'an expired row is not counted, and a refusal writes nothing');
      t.ok(await storage.pendingRegistrations.get(expired.key), 'not even the expired row of another machine is touched');
      t.same(await storage.pendingRegistrations.putWithinQuota(login(now, expired.machineKey), '192.0.2.10', caps({}), now), { stored: true, replaced: [expired.key] },
        'a login of that machine removes its expired one');

      for (const key of written) await storage.pendingRegistrations.delete(key);
    });

    await t.test('policy: one row, set and get', async (t) => {
      t.equal(await storage.policy.get(), undefined, 'a fresh database has no policy');
      const first = await storage.policy.set('{"acls": []}');
      t.equal(first.text, '{"acls": []}');
      t.type(first.updatedAt, Date);
      const stored = await storage.policy.get();
      t.equal(stored?.text, '{"acls": []}');
      t.equal(stored?.updatedAt.getTime(), first.updatedAt.getTime());
      const big = `// policy ü 🚀\n${JSON.stringify({ acls: Array.from({ length: 2000 }, (_, i) => ({ action: 'accept', src: [`group:g${i}`], dst: ['*:*'] })) })}`;
      await storage.policy.set(big);
      t.equal((await storage.policy.get())?.text, big, 'large policies (beyond 64 KiB) round-trip');
    });

    await t.test('dates are ms-precise and zone-independent at the extremes', async (t) => {
      for (const iso of ['1970-01-01T00:00:00.001Z', '2038-01-19T03:14:08.000Z', '9999-12-31T23:59:59.999Z']) {
        const key = await storage.apiKeys.create({ prefix: unique('date'), hash: 'h', expiration: new Date(iso) });
        t.equal((await storage.apiKeys.get(key.id))?.expiration?.toISOString(), iso, iso);
      }
    });

    await t.test('dump and restore: ids, hashes and times round-trip; a non-empty or broken restore changes nothing', async (t) => {
      if (!storage.dump || !storage.restore) {
        t.fail('dump and restore are missing: `headway db backup` and `headway db restore` cannot work with this adapter');
        return;
      }
      const owner = await storage.users.create({ name: unique('backup'), displayName: 'Backup Ü 🚀', email: 'b@example.com' });
      const key = await storage.preAuthKeys.create({
        userId: owner.id, reusable: false, ephemeral: false, expiration: new Date('2033-01-02T03:04:05.678Z'),
        tags: ['tag:backup'], prefix: unique('bkey'), hash: '$argon2id$kept-hash',
      });
      await storage.preAuthKeys.markUsed(key.id);
      const node = await storage.nodes.create(newNode({
        userId: owner.id, authKeyId: key.id, ipv4: '100.64.9.9', ipv6: 'fd7a:115c:a1e0::909', tags: ['tag:backup'],
        hostinfo: { OS: 'linux', Hostname: 'kept', nested: { a: [1, 'b', null] } }, endpoints: ['192.0.2.9:41641'],
        availableRoutes: ['10.9.0.0/16'], approvedRoutes: ['10.9.0.0/16'], expiry: new Date('2034-05-06T07:08:09.010Z'),
        lastSeen: new Date('2026-02-03T04:05:06.007Z'),
      }));
      const api = await storage.apiKeys.create({ prefix: unique('bapi'), hash: 'api-kept-hash', expiration: null });
      await storage.apiKeys.update(api.id, { lastSeen: new Date('2026-07-08T09:10:11.012Z') });
      await storage.pendingRegistrations.put({
        key: unique('bpending'), machineKey: `mkey:${hex('bpm')}`, nodeKey: `nodekey:${hex('bpn')}`,
        hostinfo: { Hostname: 'waiting' }, expiresAt: new Date('2099-01-01T00:00:00.000Z'), createdAt: new Date('2026-01-01T00:00:00.001Z'),
      });
      await storage.policy.set('// kept\n{"acls": []}');

      const before = await storage.dump();
      t.match(before.kind, /\S/, 'the dump names its database kind');
      t.type(before.schemaVersion, 'number');
      t.same(before.users.find((u) => u.id === owner.id), owner);
      t.same(before.preAuthKeys.find((k) => k.id === key.id)?.hash, '$argon2id$kept-hash', 'key hashes are dumped as stored');
      t.same(before.nodes.find((n) => n.id === node.id), await storage.nodes.get(node.id));
      t.equal(before.apiKeys.find((k) => k.id === api.id)?.lastSeen?.toISOString(), '2026-07-08T09:10:11.012Z');
      t.equal(before.policy?.text, '// kept\n{"acls": []}');
      t.ok(before.pendingRegistrations.some((r) => r.hostinfo?.Hostname === 'waiting'));

      await t.rejects(storage.restore(before), StorageNotEmptyError, 'restore refuses a store that holds records');
      t.same(await storage.dump(), before, 'the refused restore changed nothing');

      const nothing: StorageDump = { ...before, users: [], preAuthKeys: [], nodes: [], apiKeys: [], pendingRegistrations: [], oauthClients: [], policy: null };
      await storage.restore(nothing, { replace: true });
      t.same(countDump(await storage.dump()), countDump(nothing), 'replace with an empty dump empties the store');

      const maxNode = Math.max(...before.nodes.map((n) => n.id));
      const orphan = { ...before.nodes.find((n) => n.id === node.id)!, id: maxNode + 100, machineKey: `mkey:${hex('orph')}`,
        nodeKey: `nodekey:${hex('orph')}`, givenName: unique('orphan'), ipv4: null, ipv6: null, userId: 999_999, authKeyId: null };
      await t.rejects(storage.restore({ ...before, nodes: [...before.nodes, orphan] }), StorageConflictError,
        'a node owned by a user not in the dump is refused');
      t.same(countDump(await storage.dump()), countDump(nothing), 'the refused restore wrote nothing, not even the good rows');

      await storage.restore(before);
      t.same(await storage.dump(), before, 'restore into the empty store gives back the same records, ids included');
      t.same(await storage.preAuthKeys.getByPrefix(key.prefix), { ...key, used: true }, 'the key is found by its prefix, still spent');
      t.same(await storage.nodes.getByNodeKey(node.nodeKey), await storage.nodes.get(node.id), 'the node is found by its node key');

      const maxId = (rows: Array<{ id: number }>) => Math.max(0, ...rows.map((r) => r.id));
      const newUser = await storage.users.create({ name: unique('after-restore') });
      t.ok(newUser.id > maxId(before.users), `a new user gets an id past the restored ones (${newUser.id})`);
      const newNodeRow = await storage.nodes.create(newNode({ userId: newUser.id }));
      t.ok(newNodeRow.id > maxId(before.nodes), `a new node gets an id past the restored ones (${newNodeRow.id})`);
      const newKey = await storage.preAuthKeys.create({ userId: null, reusable: true, ephemeral: false, expiration: null, tags: [], prefix: unique('after'), hash: 'h' });
      t.ok(newKey.id > maxId(before.preAuthKeys), 'a new pre-auth key gets an id past the restored ones');
      const newApi = await storage.apiKeys.create({ prefix: unique('after'), hash: 'h', expiration: null });
      t.ok(newApi.id > maxId(before.apiKeys), 'a new API key gets an id past the restored ones');

      await storage.restore(before, { replace: true });
      t.equal(await storage.users.get(newUser.id), undefined, 'replace removed what was there');
      t.same(await storage.dump(), before, 'and left exactly the dump');
    });

    await consoleSessionContract(t, storage, unique);
    await settingsContract(t, storage);
    if (opts.more) await opts.more(t, storage);
  });
}
