import t from 'tap';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

async function authKey(s: TestServer, opts: { reusable?: boolean; ephemeral?: boolean; tags?: string[]; user?: string } = {}): Promise<string> {
  const name = opts.user ?? 'alice';
  const user = s.state.users.byName(name) ?? await s.state.users.create({ name });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: opts.reusable ?? true, ephemeral: opts.ephemeral, tags: opts.tags });
  return secret;
}

/** until polls a condition the server reaches asynchronously. */
async function until(fn: () => boolean, timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${fn.toString()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function join(s: TestServer, hostname: string, key: string, extra: { routes?: string[] } = {}): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey: key, routes: extra.routes });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true });
  return d;
}

t.test('two devices join with a pre-auth key and see each other', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'laptop', key);
  const b = await join(s, 'phone', key);
  t.teardown(() => { a.close(); b.close(); });
  await a.waitFor((nm) => [...nm.peers.values()].some((p) => p.Name?.startsWith('phone.')), 5000);
  const nodeA = s.state.nodes.byNodeKey(a.nodeKeyText)!;
  const nodeB = s.state.nodes.byNodeKey(b.nodeKeyText)!;
  t.equal(a.netmap.self?.Name, 'laptop.headway.net.');
  t.same(a.netmap.self?.Addresses, [`${nodeA.ipv4}/32`, `${nodeA.ipv6}/128`]);
  const peerOfB = b.netmap.peers.get(nodeA.id)!;
  t.ok(peerOfB, 'b lists a');
  t.same(peerOfB.Addresses, [`${nodeA.ipv4}/32`, `${nodeA.ipv6}/128`]);
  await b.waitFor((nm) => nm.peers.get(nodeA.id)?.Online === true, 5000);
  t.ok(s.state.presence.isOnline(nodeA.id) && s.state.presence.isOnline(nodeB.id), 'both online on the server');
  t.same(a.netmap.packetFilter, [{ SrcIPs: ['*'], DstPorts: [{ IP: '*', Ports: { First: 0, Last: 65535 } }] }], 'allow-all without a policy');
  t.ok((a.netmap.derpMap?.Regions as Record<string, unknown>)['999'], 'the embedded relay is in the default DERP map');
  t.equal(a.netmap.dnsConfig?.Proxied, true);
});

t.test('rename, tags, route approval and delete reach the other device', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'router', key, { routes: ['10.1.0.0/24', '0.0.0.0/0', '::/0'] });
  const b = await join(s, 'viewer', key);
  t.teardown(() => { a.close(); b.close(); });
  const nodeA = s.state.nodes.byNodeKey(a.nodeKeyText)!;
  await b.waitFor((nm) => nm.peers.has(nodeA.id), 5000);

  await s.state.nodes.rename(nodeA.id, 'gateway');
  await b.waitFor((nm) => nm.peers.get(nodeA.id)?.Name === 'gateway.headway.net.', 5000);
  await a.waitFor((nm) => nm.self?.Name === 'gateway.headway.net.', 5000);
  t.pass('rename reached peer and self');

  await s.state.nodes.setTags(nodeA.id, ['tag:router']);
  await b.waitFor((nm) => JSON.stringify(nm.peers.get(nodeA.id)?.Tags) === '["tag:router"]', 5000);
  t.pass('tags reached the peer');

  t.same(s.state.nodes.get(nodeA.id)!.availableRoutes, ['0.0.0.0/0', '10.1.0.0/24', '::/0']);
  await s.state.nodes.approveRoutes(nodeA.id, ['10.1.0.0/24', '0.0.0.0/0']);
  const nm = await b.waitFor((m) => (m.peers.get(nodeA.id)?.PrimaryRoutes ?? []).includes('10.1.0.0/24'), 5000);
  const allowed = nm.peers.get(nodeA.id)!.AllowedIPs!;
  t.ok(allowed.includes('10.1.0.0/24'), 'subnet in AllowedIPs');
  t.ok(allowed.includes('0.0.0.0/0') && allowed.includes('::/0'), 'approving 0.0.0.0/0 approves both exit routes');

  await s.state.nodes.delete(nodeA.id);
  await b.waitFor((m) => !m.peers.has(nodeA.id), 5000);
  t.pass('delete removed the peer');
});

t.test('online state follows sessions; a second session of one node is also updated', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'a', key);
  const b = await join(s, 'b', key);
  const nodeB = s.state.nodes.byNodeKey(b.nodeKeyText)!;
  await a.waitFor((m) => m.peers.get(nodeB.id)?.Online === true, 5000);
  // Same machine, second stream.
  const a2 = new TestDevice({ serverUrl: s.urls.http, hostname: 'a', machineKey: a.machineKey, nodeKey: a.nodeKey });
  await a2.connect();
  await a2.startMap({ stream: true });
  t.teardown(() => { a.close(); a2.close(); });
  b.close();
  await a.waitFor((m) => m.peers.get(nodeB.id)?.Online === false, 5000);
  await a2.waitFor((m) => m.peers.get(nodeB.id)?.Online === false, 5000);
  t.notOk(s.state.presence.isOnline(nodeB.id));
  t.ok(s.state.nodes.get(nodeB.id)!.lastSeen, 'last seen recorded');
});

t.test('pre-auth key rules: single-use, expired, unknown', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const single = await authKey(s, { reusable: false });
  const a = new TestDevice({ serverUrl: s.urls.http, hostname: 'one' });
  await a.connect();
  t.equal((await a.register({ authKey: single })).Error, '');
  const b = new TestDevice({ serverUrl: s.urls.http, hostname: 'two' });
  await b.connect();
  t.equal((await b.register({ authKey: single })).Error, 'authkey already used');
  t.equal((await b.register({ authKey: 'hwkey-auth-aaaaaaaaaaaa-' + 'A'.repeat(43) })).Error, 'invalid authkey');
  // The same machine re-registering with its own single-use key is not refused.
  t.equal((await a.register({ authKey: single })).Error, '');
  const user = s.state.users.byName('alice')!;
  const { key, secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
  await s.state.keys.expirePreAuthKey(key.id);
  t.equal((await b.register({ authKey: secret })).Error, 'authkey expired');
  a.close(); b.close();
});

t.test('interactive registration: AuthURL, held follow-up, approval', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const user = await s.state.users.create({ name: 'bob' });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'desk' });
  await d.connect();
  const first = await d.register({}) as { AuthURL: string; [k: string]: unknown };
  t.match(first.AuthURL, new RegExp(`^${s.urls.http}/register/[A-Za-z0-9_-]+$`));
  const page = await fetch(first.AuthURL);
  const html = await page.text();
  const regKey = first.AuthURL.split('/').pop()!;
  t.match(html, `headway auth register --auth-id ${regKey} --user USERNAME`);
  const followup = d.register({ followup: first.AuthURL });
  await new Promise((r) => setTimeout(r, 200));
  const nodeId = await s.control.registrar.approve(regKey, user.id);
  const res = await followup;
  t.equal(res.MachineAuthorized, true);
  t.equal(res.AuthURL, '');
  t.equal(s.state.nodes.get(nodeId)!.userId, user.id);
  t.match(await (await fetch(first.AuthURL)).text(), /Device approved/, 'the link is spent: its page says the device was approved');
  // An unknown follow-up from a device not registered gets a fresh URL, not the same one
  // (a registered one gets its registration: see the next test).
  const other = new TestDevice({ serverUrl: s.urls.http, hostname: 'other' });
  await other.connect();
  const again = await other.register({ followup: `${s.urls.http}/register/nope` });
  t.not(again.AuthURL, first.AuthURL);
  t.ok(again.AuthURL);
  t.equal((await d.register({ followup: `${s.urls.http}/register/nope` })).MachineAuthorized, true, 'the approved device is told it is registered');
  d.close();
  other.close();
});

// A login completed while the device's follow-up is not open must not leave it logged out: the next
// follow-up finds no pending row, yet the node key is registered, so it gets the registration.
t.test('a follow-up sent after the login was approved meanwhile gets the registration, not a new AuthURL', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const user = await s.state.users.create({ name: 'alice' });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'paused' });
  await d.connect();
  const first = await d.register({});
  const authId = first.AuthURL!.split('/').pop()!;
  // The follow-up is open, then the device stops and its connection is cut.
  const cut = new AbortController();
  const held = d.register({ followup: first.AuthURL, signal: cut.signal }).catch((err: Error) => err);
  await until(() => s.control.registrar.waiting(authId));
  cut.abort();
  await d.close();
  t.type(await held, Error, 'the held follow-up ended with the connection');
  await until(() => !s.control.registrar.waiting(authId));
  const nodeId = await s.control.registrar.approve(authId, user.id);
  // The device resumes on a new connection and repeats its follow-up.
  const back = new TestDevice({ serverUrl: s.urls.http, hostname: 'paused', machineKey: d.machineKey, nodeKey: d.nodeKey });
  await back.connect();
  t.teardown(() => back.close());
  const res = await back.register({ followup: first.AuthURL });
  t.equal(res.AuthURL, '', 'no new login');
  t.equal(res.MachineAuthorized, true);
  t.equal(res.Error, '');
  t.equal(res.Login?.LoginName, 'alice');
  t.same(s.state.pending.quota.keyOf(d.machineKeyText, d.nodeKeyText), undefined, 'no new pending login was made');
  await back.startMap({ stream: true });
  t.equal(back.netmap.self?.ID, nodeId, 'it runs as the approved node');
  // A follow-up from another machine presenting that node key is still refused.
  const thief = new TestDevice({ serverUrl: s.urls.http, hostname: 'evil', nodeKey: d.nodeKey });
  await thief.connect();
  t.teardown(() => thief.close());
  t.match((await thief.register({ followup: first.AuthURL })).Error, /another machine/);
});

t.test('logout expires the node; restart keeps id and addresses; node key of another machine refused', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'box', key);
  const node = s.state.nodes.byNodeKey(a.nodeKeyText)!;
  a.close();
  // tailscaled restart: same machine and node key, no auth.
  const again = new TestDevice({ serverUrl: s.urls.http, hostname: 'box', machineKey: a.machineKey, nodeKey: a.nodeKey });
  await again.connect();
  const r = await again.register({});
  t.equal(r.MachineAuthorized, true);
  t.equal(r.AuthURL, '');
  await again.startMap({ stream: true });
  t.equal(again.netmap.self?.ID, node.id);
  t.same(again.netmap.self?.Addresses, [`${node.ipv4}/32`, `${node.ipv6}/128`]);
  // Another machine presenting this node key is refused.
  const thief = new TestDevice({ serverUrl: s.urls.http, hostname: 'evil', nodeKey: a.nodeKey });
  await thief.connect();
  t.match((await thief.register({ authKey: key })).Error, /another machine/);
  thief.close();
  const out = await again.logout();
  t.equal(out.NodeKeyExpired, true);
  t.ok(s.state.nodes.get(node.id)!.expiry!.getTime() <= Date.now(), 'expired');
  again.close();
});

t.test('ephemeral nodes disappear after the inactivity timeout', async (t) => {
  const s = await startTestServer({ node: { ephemeral: { inactivity_timeout: '1s' } } });
  t.teardown(() => s.stop());
  const key = await authKey(s, { ephemeral: true });
  const a = await join(s, 'temp', key);
  const id = s.state.nodes.byNodeKey(a.nodeKeyText)!.id;
  t.ok(s.state.nodes.get(id)!.ephemeral);
  a.close();
  const start = Date.now();
  while (s.state.nodes.get(id) && Date.now() - start < 10_000) await new Promise((r) => setTimeout(r, 100));
  t.notOk(s.state.nodes.get(id), 'deleted');
});

t.test('a policy set in database mode changes filters live', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const key = await authKey(s);
  const a = await join(s, 'a', key);
  const b = await join(s, 'b', key);
  t.teardown(() => { a.close(); b.close(); });
  const policy = JSON.stringify({ acls: [{ action: 'accept', src: ['alice@'], dst: ['alice@:22'] }] });
  await s.policy.set(policy);
  const nm = await a.waitFor((m) => JSON.stringify(m.packetFilter).includes('"First":22'), 5000);
  t.ok(nm.packetFilter!.every((r) => r.DstPorts?.every((p) => p.Ports.First === 22)), 'only port 22');
  await t.rejects(s.policy.set('{ "acls": [ { "action": "accept", "src": ["nobody@"], } '), { code: 'invalid_policy' });
});

t.test('autoApprovers approve advertised routes on join and again when the policy changes', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const key = await authKey(s);
  await s.policy.set(JSON.stringify({
    acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
    autoApprovers: { routes: { '10.50.0.0/16': ['alice@'] } },
  }));
  const r = await join(s, 'router', key, { routes: ['10.50.1.0/24', '10.60.0.0/24'] });
  t.teardown(() => r.close());
  const id = s.state.nodes.byNodeKey(r.nodeKeyText)!.id;
  const start = Date.now();
  while (!s.state.nodes.get(id)!.approvedRoutes.includes('10.50.1.0/24') && Date.now() - start < 5000) await new Promise((res) => setTimeout(res, 50));
  t.same(s.state.nodes.get(id)!.approvedRoutes, ['10.50.1.0/24'], 'inside the auto-approved range only');
  await s.policy.set(JSON.stringify({
    acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
    autoApprovers: { routes: { '10.50.0.0/16': ['alice@'], '10.60.0.0/16': ['alice@'] } },
  }));
  const again = Date.now();
  while (!s.state.nodes.get(id)!.approvedRoutes.includes('10.60.0.0/24') && Date.now() - again < 5000) await new Promise((res) => setTimeout(res, 50));
  t.same(s.state.nodes.get(id)!.approvedRoutes, ['10.50.1.0/24', '10.60.0.0/24'], 'the policy change approved the second route');
});
