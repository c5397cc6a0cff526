// The drive port: grants from drive adapters compile exactly like the same grant
// written in the policy, change nothing when there are none, and the
// DriveService checks admin input (4xx, nothing stored) before a store sees it,
// publishing one drive-changed only after the store committed.
import t from 'tap';
import { ALLOW_ALL, parsePolicy } from '@headway/policy';
import { DriveService, HeadwayError, NetworkView, silentLogger, type DriveGrant, type DriveGrantStore, type DrivePort, type NewNodeInput } from '../src/index.js';
import { machineKey, nodeKey, startState, type TestState } from '@headway/test-support';

const CAP = 'tailscale.com/cap/drive';

function input(hostname: string, userId: number | null, extra: Partial<NewNodeInput> = {}): NewNodeInput {
  return { machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, registerMethod: 'authkey', ...extra };
}

/** sqlStore is a grant store over the real SQL repository of the test database (what @headway/drive-db wraps). */
function sqlStore(s: TestState): DriveGrantStore & { writes: number } {
  const repo = s.storage.driveGrants!;
  return {
    writes: 0,
    async grants() { return (await repo.list()).map(({ src, dst, shares, access }) => ({ src, dst, shares, access })); },
    list: () => repo.list(),
    async grant(g) { this.writes++; return repo.create(g); },
    async revoke(id) { this.writes++; return repo.delete(id); },
    revokeFor: (end) => repo.deleteFor(end),
  };
}

async function tailnet(t: Parameters<typeof startState>[0]) {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice' });
  const bob = await s.state.users.create({ name: 'bob' });
  const laptop = await s.state.nodes.create(input('laptop', alice.id));
  const phone = await s.state.nodes.create(input('phone', alice.id));
  const nas = await s.state.nodes.create(input('nas', null, { tags: ['tag:nas'] }));
  const desk = await s.state.nodes.create(input('desk', bob.id));
  return { s, alice, bob, laptop, phone, nas, desk };
}

/** setText installs policy text in a view the way PolicyService does: parsed once, then handed over. */
function setText(view: NetworkView, text: string | undefined): void {
  view.setPolicy(text === undefined ? null : parsePolicy(text));
}

const sortedRules = (rules: readonly unknown[]) => rules.map((r) => JSON.stringify(r)).sort();

const ACL_ALL = { action: 'accept', src: ['*'], dst: ['*:*'] };

t.test('a drive adapter grant compiles exactly like the same grant written in the policy', async (t) => {
  const { s, alice, laptop, phone, nas, desk } = await tailnet(t);
  const written = new NetworkView(s.state, silentLogger);
  setText(written, JSON.stringify({
    tagOwners: { 'tag:nas': ['alice@'] },
    acls: [ACL_ALL],
    nodeAttrs: [{ target: ['tag:nas'], attr: ['drive:share'] }, { target: ['alice@'], attr: ['drive:access'] }],
    grants: [{ src: ['alice@'], dst: ['tag:nas'], app: { [CAP]: [{ shares: ['docs'], access: 'ro' }] } }],
  }));
  const grants: DriveGrant[] = [{ src: { kind: 'user', id: alice.id }, dst: { kind: 'tag', name: 'tag:nas' }, shares: ['docs'], access: 'ro' }];
  const adapted = new NetworkView(s.state, silentLogger, () => grants);
  setText(adapted, JSON.stringify({ tagOwners: { 'tag:nas': ['alice@'] }, acls: [ACL_ALL] }));
  for (const n of [laptop, phone, nas, desk]) {
    const a = written.forNode(n.id);
    const b = adapted.forNode(n.id);
    t.same(b.capMap, a.capMap, `${n.givenName}: the same CapMap`);
    // The policy compiles its grants before its acls; adapter rules follow the policy's, so compare as sets.
    t.same(sortedRules(b.packetFilter), sortedRules(a.packetFilter), `${n.givenName}: the same packet filter rules (CapGrant and drive-sharer rules included)`);
    t.same([...b.peers].sort(), [...a.peers].sort(), `${n.givenName}: the same peers`);
  }
  const nasCaps = adapted.forNode(nas.id).packetFilter.filter((r) => r.CapGrant);
  t.same(nasCaps[0]?.CapGrant?.[0]?.CapMap, { [CAP]: [{ shares: ['docs'], access: 'ro' }] }, 'the sharer holds the {shares, access} payload');
  t.ok(Object.hasOwn(adapted.forNode(laptop.id).capMap, 'drive:access'), 'alice may access');
  t.ok(Object.hasOwn(adapted.forNode(nas.id).capMap, 'drive:share'), 'the nas may share');
  t.notOk(Object.hasOwn(adapted.forNode(desk.id).capMap, 'drive:access'), 'bob may not');
});

t.test('no drive grants: every node\'s result is the policy\'s alone', async (t) => {
  const { s, laptop, nas, desk } = await tailnet(t);
  const policy = JSON.stringify({
    acls: [{ action: 'accept', src: ['alice@'], dst: ['tag:nas:445'] }],
    tagOwners: { 'tag:nas': ['alice@'] },
    nodeAttrs: [{ target: ['tag:nas'], attr: ['drive:share'] }],
    grants: [{ src: ['alice@'], dst: ['tag:nas'], app: { [CAP]: [{ shares: ['*'], access: 'rw' }] } }],
  });
  const plain = new NetworkView(s.state, silentLogger);
  const withPort = new NetworkView(s.state, silentLogger, () => []);
  setText(plain, policy);
  setText(withPort, policy);
  for (const n of [laptop, nas, desk]) t.same(withPort.forNode(n.id), plain.forNode(n.id), `${n.givenName}: unchanged`);
  t.equal(withPort.hasDriveGrants, false);
});

t.test('without a policy a drive grant adds to the allow-all filter', async (t) => {
  const { s, desk, nas, laptop } = await tailnet(t);
  const before = JSON.stringify(ALLOW_ALL);
  const grants: DriveGrant[] = [{ src: { kind: 'node', id: desk.id }, dst: { kind: 'node', id: nas.id }, shares: ['*'], access: 'rw' }];
  const view = new NetworkView(s.state, silentLogger, () => grants);
  setText(view, undefined);
  const f = view.forNode(nas.id).packetFilter;
  t.same(f[0], ALLOW_ALL[0], 'the allow-all rule comes first');
  t.same(f[1], { SrcIPs: [desk.ipv4, desk.ipv6], CapGrant: [{ Dsts: [`${nas.ipv4}/32`, `${nas.ipv6}/128`], CapMap: { [CAP]: [{ shares: ['*'], access: 'rw' }] } }] }, 'then the drive grant from bob\'s desk');
  t.equal(JSON.stringify(ALLOW_ALL), before, 'the shared ALLOW_ALL constant is untouched');
  t.same(view.peersOf(laptop.id).sort(), [s.state.nodes.list().filter((n) => n.id !== laptop.id).map((n) => n.id)].flat().sort(), 'everyone still sees everyone');
  t.ok(Object.hasOwn(view.forNode(desk.id).capMap, 'drive:access'));
  t.notOk(Object.hasOwn(view.forNode(laptop.id).capMap, 'drive:access'), 'only the granted node may access');
});

t.test('group sources resolve through the policy\'s groups', async (t) => {
  const { s, laptop, phone, nas, desk } = await tailnet(t);
  const grants: DriveGrant[] = [{ src: { kind: 'group', name: 'group:staff' }, dst: { kind: 'node', id: nas.id }, shares: ['a', 'b'], access: 'ro' }];
  const view = new NetworkView(s.state, silentLogger, () => grants);
  setText(view, JSON.stringify({ groups: { 'group:staff': ['bob@'] }, acls: [ACL_ALL] }));
  t.ok(Object.hasOwn(view.forNode(desk.id).capMap, 'drive:access'), 'bob (in group:staff) may access');
  for (const n of [laptop, phone]) t.notOk(Object.hasOwn(view.forNode(n.id).capMap, 'drive:access'), `${n.givenName} (alice) may not`);
});

t.test('DriveService refuses bad grants with a 4xx naming the field, storing nothing', async (t) => {
  const { s, nas } = await tailnet(t);
  const store = sqlStore(s);
  const drive = new DriveService([store], s.state, silentLogger, () => parsePolicy(JSON.stringify({ groups: { 'group:staff': ['bob@'] }, tagOwners: { 'tag:nas': ['alice@'] } })));
  await drive.init();
  const bad: Array<[Parameters<DriveService['grant']>[0], number, RegExp]> = [
    [{ src: 'nobody', dst: 'node:nas', shares: ['*'], access: 'ro' }, 404, /user nobody not found/],
    [{ src: 'alice', dst: 'node:nope', shares: ['*'], access: 'ro' }, 404, /node nope not found/],
    [{ src: 'alice', dst: 'node:999', shares: ['*'], access: 'ro' }, 404, /node 999 not found/],
    [{ src: 'group:ghosts', dst: 'nas', shares: ['*'], access: 'ro' }, 404, /group group:ghosts .*not defined/],
    [{ src: 'alice', dst: 'tag:other', shares: ['*'], access: 'ro' }, 404, /tag tag:other .*tagOwners/],
    [{ src: 'alice', dst: 'user:bob', shares: ['*'], access: 'ro' }, 400, /dst: .*a node \(node:NAME\) or a tag/],
    [{ src: 'alice', dst: 'nas', shares: ['Docs/..'], access: 'ro' }, 400, /shares: "Docs\/\.\." is not a Taildrive share name/],
    [{ src: 'alice', dst: 'nas', shares: ['*'], access: 'xx' as 'ro' }, 400, /access: expected ro or rw/],
    [{ src: '', dst: 'nas', shares: ['*'], access: 'ro' }, 400, /src: is required/],
    [{ src: 'tag:bad tag', dst: 'nas', shares: ['*'], access: 'ro' }, 400, /src: "tag:bad tag" is not a tag/],
  ];
  for (const [g, status, message] of bad) {
    const err = await drive.grant(g).then(() => undefined, (e: unknown) => e);
    t.type(err, HeadwayError, `${JSON.stringify(g)} is refused`);
    t.equal((err as HeadwayError).status, status, `with ${status}`);
    t.match((err as Error).message, message);
  }
  t.equal(store.writes, 0, 'the store was never called');
  t.same(await store.list(), [], 'nothing was stored');
  t.notOk(s.changes.some((c) => c.type === 'drive-changed'), 'nothing was published');
  const ok = await drive.grant({ src: 'group:staff', dst: `node:${nas.id}`, shares: ['docs', 'docs'], access: 'rw' });
  t.match(ok, { src: { kind: 'group', name: 'group:staff' }, dst: { kind: 'node', id: nas.id }, shares: ['docs'], access: 'rw' }, 'a good grant is stored, shares deduplicated');
});

t.test('DriveService: a grant is stored, then held in memory, then published once; revoke likewise', async (t) => {
  const { s, alice, nas } = await tailnet(t);
  const store = sqlStore(s);
  const seen: Array<{ change: string; stored: number; inMemory: number }> = [];
  const drive = new DriveService([store], s.state, silentLogger, () => null);
  await drive.init();
  s.state.bus.subscribe((c) => {
    if (c.type === 'drive-changed') void store.list().then((l) => seen.push({ change: c.type, stored: l.length, inMemory: drive.grants().length }));
  });
  const g = await drive.grant({ src: 'alice@', dst: 'nas', shares: [], access: 'ro' });
  t.match(g, { src: { kind: 'user', id: alice.id }, dst: { kind: 'node', id: nas.id }, shares: ['*'], access: 'ro' }, 'no shares means every share');
  await new Promise((r) => setImmediate(r));
  t.same(seen, [{ change: 'drive-changed', stored: 1, inMemory: 1 }], 'one change, published after the row and the memory both hold it');
  t.same(drive.grants(), [{ src: g.src, dst: g.dst, shares: g.shares, access: g.access }]);
  const missing = await drive.revoke(g.id + 100).then(() => undefined, (e: unknown) => e);
  t.match(missing, { status: 404, message: /drive grant \d+ not found/ }, 'revoking an unknown id is a 404');
  await drive.revoke(g.id);
  await new Promise((r) => setImmediate(r));
  t.same(drive.grants(), [], 'revoked from memory');
  t.equal(seen.length, 2, 'and published once more');
});

t.test('DriveService without a grant store answers 409 naming the plugin to add', async (t) => {
  const { s } = await tailnet(t);
  const readOnly: DrivePort = { grants: async () => [] };
  const drive = new DriveService([readOnly], s.state, silentLogger, () => null);
  await drive.init();
  const err = await drive.list().then(() => undefined, (e: unknown) => e);
  t.match(err, { status: 409, message: /@headway\/drive-db/ });
});

t.test('DriveService merges adapters in the listed order and follows their watch', async (t) => {
  const { s, nas, desk, laptop } = await tailnet(t);
  let fire: () => void = () => undefined;
  let watching = false;
  let second: DriveGrant[] = [];
  const a: DrivePort = { grants: async () => [{ src: { kind: 'node', id: laptop.id }, dst: { kind: 'node', id: nas.id }, shares: ['a'], access: 'ro' }] };
  const b: DrivePort = { grants: async () => second, watch: (fn) => { fire = fn; watching = true; return () => { watching = false; }; } };
  const drive = new DriveService([a, b], s.state, silentLogger, () => null);
  await drive.init();
  t.same(drive.grants().map((g) => g.shares[0]), ['a']);
  second = [{ src: { kind: 'node', id: desk.id }, dst: { kind: 'node', id: nas.id }, shares: ['b'], access: 'rw' }];
  // The re-read is asynchronous and ends by publishing drive-changed: wait for that, not for a guessed time.
  const published = new Promise<void>((resolve) => {
    const off = s.state.bus.subscribe((c) => { if (c.type === 'drive-changed') { off(); resolve(); } });
  });
  fire();
  await published;
  t.pass('a watch firing publishes a change');
  t.same(drive.grants().map((g) => g.shares[0]), ['a', 'b'], 'the second adapter\'s grants follow the first\'s');
  await drive.close();
  t.equal(watching, false, 'close unsubscribes');
});


t.test('DriveService: deleting a node removes the grants from and to it, and pushes the change', async (t) => {
  const { s, nas, desk, laptop } = await tailnet(t);
  const store = sqlStore(s);
  const drive = new DriveService([store], s.state, silentLogger, () => null);
  await drive.init();
  t.teardown(() => drive.close());
  await drive.grant({ src: `node:${desk.id}`, dst: `node:${nas.id}`, shares: ['*'], access: 'ro' });
  const keep = await drive.grant({ src: `node:${laptop.id}`, dst: 'tag:nas', shares: ['*'], access: 'ro' });
  const published = s.changes.filter((c) => c.type === 'drive-changed').length;
  // Forgetting the node's grants follows the removal asynchronously and ends by publishing drive-changed.
  const forgotten = new Promise<void>((resolve) => {
    const off = s.state.bus.subscribe((c) => { if (c.type === 'drive-changed') { off(); resolve(); } });
  });
  await s.state.nodes.delete(desk.id);
  await forgotten;
  t.same((await store.list()).map((g) => g.id), [keep.id], 'the deleted node\'s grant is gone from the store');
  t.equal(drive.grants().length, 1, 'and from memory');
  t.equal(s.changes.filter((c) => c.type === 'drive-changed').length, published + 1, 'one change was published');
});
