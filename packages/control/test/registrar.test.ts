// Registrar unit tests: every /machine/register path, driven with requests
// parsed by parseRegisterRequest, over a State on a real in-memory SQLite.
import t from 'tap';
import { parseRegisterRequest, silentLogger, TAGGED_USER_ID, type RegisterResponse } from '@headway/core';
import { Registrar } from '../src/index.js';
import { machineKey, nodeKey, startState, type TestState } from '@headway/test-support';

interface Device { machineKey: string; nodeKey: string; hostname: string }

function device(hostname: string): Device {
  return { machineKey: machineKey(), nodeKey: nodeKey(), hostname };
}

interface Env extends TestState { registrar: Registrar }

async function start(t: Parameters<typeof startState>[0], raw: Record<string, unknown> = {}): Promise<Env> {
  const s = await startState(t, raw);
  return { ...s, registrar: new Registrar(s.state, s.config, silentLogger) };
}

function register(env: Env, d: Device, body: Record<string, unknown> = {}, signal = new AbortController().signal): Promise<RegisterResponse> {
  const req = parseRegisterRequest({ Version: 106, NodeKey: d.nodeKey, Hostinfo: { Hostname: d.hostname }, ...body });
  return env.registrar.handle(req, d.machineKey, signal);
}

const ok = (r: RegisterResponse) => ({ MachineAuthorized: r.MachineAuthorized, NodeKeyExpired: r.NodeKeyExpired, Error: r.Error, AuthURL: r.AuthURL });
const AUTHORIZED = { MachineAuthorized: true, NodeKeyExpired: false, Error: '', AuthURL: '' };

t.test('authkey: a new machine joins as the key\'s user, or as tagged devices with a tagged key', async (t) => {
  const env = await start(t, { node: { expiry: '24h' } });
  const u = await env.state.users.create({ name: 'alice', email: 'alice@example.com' });
  const { secret } = await env.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  const d = device('laptop');
  const r = await register(env, d, { Auth: { AuthKey: secret }, Hostinfo: { Hostname: 'laptop', RoutableIPs: ['10.0.0.9/24', '10.0.0.0/24'] } });
  t.same(ok(r), AUTHORIZED);
  t.equal(r.Login?.LoginName, 'alice@example.com');
  t.equal(r.User?.ID, u.id);
  const n = env.state.nodes.byMachineKey(d.machineKey)!;
  t.equal(n.nodeKey, d.nodeKey);
  t.equal(n.userId, u.id);
  t.equal(n.registerMethod, 'authkey');
  t.same(n.availableRoutes, ['10.0.0.0/24'], 'advertised routes canonical and deduplicated');
  t.ok(n.expiry && Math.abs(n.expiry.getTime() - (Date.now() + 24 * 3600_000)) < 60_000, 'node.expiry applies to a user node');

  const tagKey = await env.state.keys.createPreAuthKey({ userId: null, tags: ['tag:server'] });
  const srv = device('srv');
  const rt = await register(env, srv, { Auth: { AuthKey: tagKey.secret } });
  t.same(ok(rt), AUTHORIZED);
  t.equal(rt.User?.ID, TAGGED_USER_ID);
  t.equal(rt.Login?.LoginName, 'tagged-devices');
  const tagged = env.state.nodes.byMachineKey(srv.machineKey)!;
  t.same(tagged.tags, ['tag:server']);
  t.equal(tagged.expiry, null, 'tagged nodes do not expire');
});

t.test('authkey refusals are answered in Error and store nothing', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'bob' });
  const single = await env.state.keys.createPreAuthKey({ userId: u.id });
  const first = device('a');
  t.same(ok(await register(env, first, { Auth: { AuthKey: single.secret } })), AUTHORIZED);
  const before = env.changes.length;
  const second = device('b');
  t.same(ok(await register(env, second, { Auth: { AuthKey: single.secret } })),
    { MachineAuthorized: false, NodeKeyExpired: false, Error: 'authkey already used', AuthURL: '' });
  t.same(ok(await register(env, second, { Auth: { AuthKey: 'hwkey-auth-notakey' } })),
    { MachineAuthorized: false, NodeKeyExpired: false, Error: 'invalid authkey', AuthURL: '' });
  const gone = await env.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  await env.state.keys.expirePreAuthKey(gone.key.id);
  t.equal((await register(env, second, { Auth: { AuthKey: gone.secret } })).Error, 'authkey expired');
  t.notOk(env.state.nodes.byMachineKey(second.machineKey), 'no node');
  t.equal(env.changes.length, before, 'nothing published');
});

t.test('re-register with an authkey keeps the node, its name and addresses, and takes the new node key', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'carol' });
  const other = await env.state.users.create({ name: 'dave' });
  const single = await env.state.keys.createPreAuthKey({ userId: u.id });
  const d = device('pc');
  await register(env, d, { Auth: { AuthKey: single.secret } });
  const before = env.state.nodes.byMachineKey(d.machineKey)!;
  // The single-use key the machine joined with may be presented again by that machine.
  const rotated = { ...d, nodeKey: nodeKey() };
  t.same(ok(await register(env, rotated, { Auth: { AuthKey: single.secret } })), AUTHORIZED);
  const again = env.state.nodes.require(before.id);
  t.equal(again.nodeKey, rotated.nodeKey);
  t.notOk(env.state.nodes.byNodeKey(d.nodeKey), 'the old node key no longer finds it');
  t.same([again.givenName, again.ipv4, again.ipv6], [before.givenName, before.ipv4, before.ipv6]);
  // A new key of another user moves the machine to that user.
  const key2 = await env.state.keys.createPreAuthKey({ userId: other.id });
  t.same(ok(await register(env, { ...rotated, nodeKey: nodeKey() }, { Auth: { AuthKey: key2.secret } })), AUTHORIZED);
  t.equal(env.state.nodes.require(before.id).userId, other.id);
  t.equal(env.state.nodes.list().length, 1, 'still one node');
  t.equal((await env.storage.preAuthKeys.get(key2.key.id))?.used, true, 'the new single-use key is spent');
});

t.test('a known node key without credentials (tailscaled restart) is authorized and refreshes hostname and routes', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'erin' });
  const { secret } = await env.state.keys.createPreAuthKey({ userId: u.id });
  const d = device('old-name');
  await register(env, d, { Auth: { AuthKey: secret } });
  const r = await register(env, d, { Hostinfo: { Hostname: 'new-name', RoutableIPs: ['192.168.5.0/24'] } });
  t.same(ok(r), AUTHORIZED);
  const n = env.state.nodes.byMachineKey(d.machineKey)!;
  t.equal(n.hostname, 'new-name');
  t.same(n.availableRoutes, ['192.168.5.0/24']);
  t.equal(n.givenName, 'old-name', 'the given name is the administrator\'s and stays');
});

t.test('a node key registered to another machine is refused and changes nothing', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'fay' });
  const { secret } = await env.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  const d = device('victim');
  await register(env, d, { Auth: { AuthKey: secret } });
  const thief = { ...device('thief'), nodeKey: d.nodeKey };
  const before = env.changes.length;
  for (const body of [{}, { Auth: { AuthKey: secret } }, { Expiry: '2001-01-01T00:00:00Z' }]) {
    const r = await register(env, thief, body);
    t.same(ok(r), { MachineAuthorized: false, NodeKeyExpired: false, Error: 'node key is registered to another machine', AuthURL: '' });
  }
  t.equal(env.changes.length, before, 'nothing published');
  t.equal(env.state.nodes.list().length, 1);
  t.equal(env.state.nodes.byNodeKey(d.nodeKey)?.machineKey, d.machineKey);
  t.equal(env.state.nodes.require(env.state.nodes.list()[0]!.id).expiry, null, 'the victim was not logged out');
});

t.test('logout: a past expiry expires the node, deletes an ephemeral one, and answers a machine without a node', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'gus' });
  const { secret } = await env.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  const eph = await env.state.keys.createPreAuthKey({ userId: u.id, reusable: true, ephemeral: true });
  const d = device('laptop');
  await register(env, d, { Auth: { AuthKey: secret } });
  const id = env.state.nodes.byMachineKey(d.machineKey)!.id;
  const r = await register(env, d, { Expiry: '1970-01-01T00:02:03Z' });
  t.same(ok(r), { MachineAuthorized: true, NodeKeyExpired: true, Error: '', AuthURL: '' });
  const n = env.state.nodes.require(id);
  t.ok(n.expiry && n.expiry.getTime() <= Date.now(), 'expired now');
  t.same(env.changes.at(-1), { type: 'node-patch', nodeId: id, patch: { keyExpiry: n.expiry } }, 'peers hear the expiry as a patch');

  // An expired node without credentials must log in again.
  const again = await register(env, d, {});
  t.same(ok(again), { MachineAuthorized: false, NodeKeyExpired: true, Error: '', AuthURL: '' });

  const e = device('ephemeral');
  await register(env, e, { Auth: { AuthKey: eph.secret } });
  const eid = env.state.nodes.byMachineKey(e.machineKey)!.id;
  t.ok(env.state.nodes.require(eid).ephemeral);
  const re = await register(env, e, { Expiry: '2001-01-01T00:00:00Z' });
  t.same(ok(re), { MachineAuthorized: false, NodeKeyExpired: true, Error: '', AuthURL: '' });
  t.notOk(env.state.nodes.get(eid), 'an ephemeral node is deleted on logout');
  t.equal(env.changes.at(-1)?.type, 'node-removed');

  const stranger = device('never-joined');
  t.same(ok(await register(env, stranger, { Expiry: '2001-01-01T00:00:00Z' })), { MachineAuthorized: false, NodeKeyExpired: true, Error: '', AuthURL: '' },
    'a machine with no node is already logged out');
});

t.test('seamless key rotation: OldNodeKey and the machine key identify the node', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'hal' });
  const { secret } = await env.state.keys.createPreAuthKey({ userId: u.id });
  const d = device('phone');
  await register(env, d, { Auth: { AuthKey: secret } });
  const id = env.state.nodes.byMachineKey(d.machineKey)!.id;
  const next = nodeKey();
  env.changes.length = 0;
  const r = await register(env, { ...d, nodeKey: next }, { OldNodeKey: d.nodeKey });
  t.same(ok(r), AUTHORIZED);
  t.equal(env.state.nodes.require(id).nodeKey, next);
  t.equal((await env.storage.nodes.get(id))?.nodeKey, next, 'stored');
  t.same(env.changes, [{ type: 'node-patch', nodeId: id, patch: { nodeKey: next } }], 'peers get the new key as a patch');

  // Another machine presenting the old key of this node gets no rotation, only a login URL.
  const thief = device('thief');
  const stolen = await register(env, thief, { OldNodeKey: next, NodeKey: nodeKey() });
  t.equal(stolen.MachineAuthorized, false);
  t.match(stolen.AuthURL, /\/register\/[A-Za-z0-9_-]+$/);
  t.equal(env.state.nodes.require(id).nodeKey, next, 'unchanged');

  // An expired node cannot rotate its way back in.
  await env.state.nodes.expire(id, new Date(Date.now() - 1000));
  const late = await register(env, { ...d, nodeKey: nodeKey() }, { OldNodeKey: next });
  t.equal(late.MachineAuthorized, false);
  t.match(late.AuthURL, /\/register\//, 'an expired node must log in again');
  t.equal(env.state.nodes.require(id).nodeKey, next);
});

t.test('interactive login: AuthURL, a follow-up held until approval, then authorized', async (t) => {
  const env = await start(t);
  const u = await env.state.users.create({ name: 'ida', email: 'ida@example.com' });
  const d = device('tablet');
  const first = await register(env, d, {});
  t.equal(first.MachineAuthorized, false);
  t.equal(first.Error, '');
  const m = /\/register\/([A-Za-z0-9_-]+)$/.exec(first.AuthURL);
  t.ok(m, `AuthURL ${first.AuthURL}`);
  const key = m![1]!;
  t.match(key, /^[A-Za-z0-9]{24}$/, 'the key is letters and digits: it goes on a command line (--key), where a leading - is a flag');
  t.notOk(env.state.nodes.byMachineKey(d.machineKey), 'no node before approval');

  t.equal(env.state.pending.quota.size(), 1, 'the waiting login counts against registration.max_pending');

  let settled = false;
  const held = register(env, d, { Followup: first.AuthURL }).then((r) => { settled = true; return r; });
  await new Promise((r) => setTimeout(r, 50));
  t.equal(settled, false, 'the follow-up waits for the administrator');
  const id = await env.registrar.approve(key, u.id);
  const r = await held;
  t.same(ok(r), AUTHORIZED);
  t.equal(r.Login?.LoginName, 'ida@example.com');
  const n = env.state.nodes.require(id);
  t.same([n.machineKey, n.nodeKey, n.registerMethod, n.userId], [d.machineKey, d.nodeKey, 'cli', u.id]);
  // An approved login leaves the pending quota at once, not when it expires (its row is deleted
  // inside the registration's transaction, past PendingLogins.delete).
  t.equal(env.state.pending.quota.size(), 0, 'an approved login no longer counts as waiting');
  await t.rejects(env.registrar.approve(key, u.id), { code: 'not_found', field: 'key' }, 'a key approves once');
  t.equal(env.state.nodes.list().length, 1);

  // Re-login of a known machine through approval keeps the node.
  const relogin = { ...d, nodeKey: nodeKey() };
  await env.state.nodes.expire(id, new Date(Date.now() - 1000));
  const url = (await register(env, relogin, {})).AuthURL;
  const key2 = /\/register\/([A-Za-z0-9_-]+)$/.exec(url)![1]!;
  t.equal(await env.registrar.approve(key2, u.id), id, 'the same node');
  t.equal(env.state.pending.quota.size(), 0, 'nor does an approved re-login');
  t.equal(env.state.nodes.require(id).nodeKey, relogin.nodeKey);
  t.equal(env.state.nodes.list().length, 1);
});

t.test('interactive login: an unknown or foreign follow-up gets a fresh URL; a cancelled one answers cancelled', async (t) => {
  const env = await start(t);
  const d = device('box');
  const unknown = await register(env, d, { Followup: 'http://127.0.0.1:9/register/doesnotexist' });
  t.match(unknown.AuthURL, /\/register\//);
  t.not(unknown.AuthURL, 'http://127.0.0.1:9/register/doesnotexist', 'a fresh URL, not the same one');

  const other = device('other');
  const foreign = await register(env, other, { Followup: unknown.AuthURL });
  t.not(foreign.AuthURL, unknown.AuthURL, 'another machine\'s URL is not waited on');

  const ac = new AbortController();
  const held = register(env, d, { Followup: unknown.AuthURL }, ac.signal);
  await new Promise((r) => setTimeout(r, 50));
  ac.abort();
  t.same(ok(await held), { MachineAuthorized: false, NodeKeyExpired: false, Error: 'request cancelled', AuthURL: '' });
  t.equal(env.state.nodes.list().length, 0);
});

t.test('follow-up cancelled while its pending login was being read hung until the login expired', async (t) => {
  const env = await start(t);
  const d = device('box');
  const url = (await register(env, d, {})).AuthURL;
  const ac = new AbortController();
  // Aborted before the Registrar starts waiting: the 'abort' event has already fired.
  const held = register(env, d, { Followup: url }, ac.signal);
  ac.abort();
  const r = await Promise.race([held, new Promise<'hung'>((res) => setTimeout(() => res('hung'), 5000).unref())]);
  t.not(r, 'hung', 'answered, not held until the pending login expires');
  if (r !== 'hung') t.equal(r.Error, 'request cancelled');
});

t.test('a requested expiry beyond node.expiry is capped; a shorter one is kept', async (t) => {
  const env = await start(t, { node: { expiry: '1h' } });
  const u = await env.state.users.create({ name: 'jo' });
  const { secret } = await env.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  const far = device('far');
  await register(env, far, { Auth: { AuthKey: secret }, Expiry: new Date(Date.now() + 365 * 86400_000).toISOString() });
  const farExpiry = env.state.nodes.byMachineKey(far.machineKey)!.expiry!.getTime();
  t.ok(farExpiry <= Date.now() + 3600_000 && farExpiry > Date.now() + 3500_000, 'capped to now + 1h');
  const near = device('near');
  const asked = new Date(Date.now() + 600_000);
  await register(env, near, { Auth: { AuthKey: secret }, Expiry: asked.toISOString() });
  t.equal(env.state.nodes.byMachineKey(near.machineKey)!.expiry!.getTime(), asked.getTime(), 'shorter is kept');
});

t.test('re-login of a tagged device: as a user without advertised tags it becomes that user\'s; with tags or unnamed it stays tagged', async (t) => {
  const env = await start(t);
  const alice = await env.state.users.create({ name: 'alice' });
  const bob = await env.state.users.create({ name: 'bob' });
  const d = device('box');
  const url = (await register(env, d, {})).AuthURL;
  const id = await env.registrar.approve(/\/register\/([A-Za-z0-9_-]+)$/.exec(url)![1]!, alice.id);
  await env.state.nodes.setTags(id, ['tag:web']);
  t.equal(env.state.nodes.require(id).userId, null);

  const relogin = async (hostinfo: Record<string, unknown>, userId?: number) => {
    d.nodeKey = nodeKey();
    const u = (await register(env, d, { Hostinfo: { Hostname: 'box', ...hostinfo } })).AuthURL;
    return env.registrar.approve(/\/register\/([A-Za-z0-9_-]+)$/.exec(u)![1]!, userId);
  };
  t.equal(await relogin({}), id, 'auth approve (no user)');
  t.same([env.state.nodes.require(id).tags, env.state.nodes.require(id).userId], [['tag:web'], null], 'keeps its tags');
  await relogin({ RequestTags: ['tag:web'] }, bob.id);
  t.same([env.state.nodes.require(id).tags, env.state.nodes.require(id).userId], [['tag:web'], null], 'advertising tags: still tagged, no user');
  await relogin({}, bob.id);
  const n = env.state.nodes.require(id);
  t.same([n.tags, n.userId], [[], bob.id], 'no tags advertised: the user who logged it in owns it, not the one who first registered it');
  t.same((await env.storage.nodes.get(id))?.userId, bob.id, 'stored');
});
