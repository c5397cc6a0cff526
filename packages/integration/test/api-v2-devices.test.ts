import t, { type Test } from 'tap';
import { V2_ROUTES } from '@headway/api';
import { TestDevice, type NetMap } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

/*
 * /api/v2 devices, tailnet settings and the calls Headway does not serve, on a real
 * server with devices connected over the control protocol: each answer against the
 * field names of the official Go client (tailscale.com/client/tailscale/v2 v2.12.0,
 * devices.go and tailnet_settings.go), each change seen through /api/v1 and by a peer.
 */

/** DEFAULT_FIELDS: the Device struct's JSON names a listing without fields=all carries (devices.go). */
const DEFAULT_FIELDS = [
  'addresses', 'name', 'id', 'nodeId', 'authorized', 'user', 'tags', 'keyExpiryDisabled', 'blocksIncomingConnections',
  'clientVersion', 'created', 'expires', 'hostname', 'isEphemeral', 'isExternal', 'connectedToControl', 'lastSeen',
  'machineKey', 'nodeKey', 'os', 'tailnetLockError', 'tailnetLockKey', 'updateAvailable',
];
/** ALL_FIELDS: what fields=all adds (the Device struct's `all` part; postureIdentity is absent: Headway collects none). */
const ALL_FIELDS = ['sshEnabled', 'advertisedRoutes', 'enabledRoutes', 'clientConnectivity', 'distro'];
/** SETTINGS_FIELDS: the TailnetSettings struct's JSON names (tailnet_settings.go). */
const SETTINGS_FIELDS = [
  'aclsExternallyManagedOn', 'aclsExternalLink', 'devicesApprovalOn', 'devicesAutoUpdatesOn', 'devicesKeyDurationDays', 'usersApprovalOn',
  'usersRoleAllowedToJoinExternalTailnets', 'networkFlowLoggingOn', 'regionalRoutingOn', 'postureIdentityCollectionOn', 'httpsEnabled', 'routeSelection',
];

interface Answer { status: number; body: any }

function client(s: TestServer, key: string) {
  const call = async (method: string, path: string, body?: unknown): Promise<Answer> => {
    const res = await fetch(s.urls.http + path, {
      method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  return call;
}

const POLICY = JSON.stringify({
  tagOwners: { 'tag:web': ['alice@'], 'tag:db': ['alice@'] },
  acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
});

async function setup(t: Test) {
  const s = await startTestServer({ dns: { base_domain: 'example.net', magic_dns: true }, node: { expiry: '48h' }, policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const call = client(s, key);
  t.equal((await call('PUT', '/api/v1/policy', { policy: POLICY })).status, 200, 'policy set');
  const alice = await s.state.users.create({ name: 'alice' });
  const { secret: authKey } = await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true, expiration: null, tags: [] });
  const devices: TestDevice[] = [];
  t.teardown(async () => { for (const d of devices) await d.close(); });
  const join = async (hostname: string, hostinfo: Record<string, unknown> = {}, routes?: string[]) => {
    const d = new TestDevice({ serverUrl: s.urls.http, hostname });
    devices.push(d);
    await d.connect();
    await d.register({ authKey, routes, hostinfo });
    await d.startMap({ endpoints: ['192.0.2.10:41641'], hostinfo });
    return d;
  };
  const laptop = await join('laptop', {
    IPNVersion: '1.90.1', ShieldsUp: true, Distro: 'debian', DistroVersion: '12', DistroCodeName: 'bookworm',
    NetInfo: { PreferredDERP: 1, WorkingUDP: true, WorkingIPv6: false, HavePortMap: false, DERPLatency: { '1-v4': 0.012, '1-v6': 0.02, '2-v4': 0.05 } },
  }, ['10.1.0.0/24']);
  const desk = await join('desk');
  await desk.waitFor((m) => m.peers.size === 1);
  const ids = Object.fromEntries(s.state.nodes.list().map((n) => [n.givenName, String(n.id)]));
  return { s, call, laptop, desk, ids };
}

const peer = (m: NetMap) => [...m.peers.values()][0];

t.test('devices list and get answer the Go client\'s Device fields; fields=all adds routes, SSH, connectivity and distro', async (t) => {
  const { call, ids } = await setup(t);
  const list = await call('GET', '/api/v2/tailnet/-/devices');
  t.equal(list.status, 200);
  t.equal(list.body.devices.length, 2);
  const laptop = list.body.devices.find((d: { hostname: string }) => d.hostname === 'laptop');
  t.same(Object.keys(laptop).sort(), [...DEFAULT_FIELDS].sort(), 'exactly the default fields');
  const v1 = (await call('GET', `/api/v1/node/${ids.laptop}`)).body.node;
  t.match(laptop, {
    id: ids.laptop, nodeId: ids.laptop, name: 'laptop.example.net', hostname: 'laptop', user: 'alice', tags: [],
    os: 'linux', clientVersion: '1.90.1', blocksIncomingConnections: true, authorized: true, isExternal: false, isEphemeral: false,
    connectedToControl: true, lastSeen: null, keyExpiryDisabled: false, updateAvailable: false,
    machineKey: v1.machineKey, nodeKey: v1.nodeKey, created: v1.createdAt, addresses: v1.ipAddresses,
  });
  t.equal(Date.parse(laptop.expires), Date.parse(v1.expiry), 'expires is the node key expiry');

  const all = await call('GET', '/api/v2/tailnet/example.net/devices?fields=all');
  const full = all.body.devices.find((d: { hostname: string }) => d.hostname === 'laptop');
  t.same(Object.keys(full).sort(), [...DEFAULT_FIELDS, ...ALL_FIELDS].sort(), 'fields=all adds exactly the all-fields');
  t.match(full, {
    advertisedRoutes: ['10.1.0.0/24'], enabledRoutes: [], sshEnabled: false,
    distro: { name: 'debian', version: '12', codeName: 'bookworm' },
    clientConnectivity: {
      endpoints: ['192.0.2.10:41641'], derp: 'derp-1', mappingVariesByDestIP: false,
      latency: { 1: { preferred: true, latencyMs: 12 }, 2: { latencyMs: 50 } },
      clientSupports: { udp: true, ipv6: false, hairPinning: false, pcp: false, pmp: false, upnp: false },
    },
  });
  const desk = all.body.devices.find((d: { hostname: string }) => d.hostname === 'desk');
  t.equal(desk.distro, null, 'a device that reports no distribution');

  t.same((await call('GET', `/api/v2/device/${ids.laptop}`)).body, laptop, 'get answers what the list does');
  t.same((await call('GET', `/api/v2/device/${ids.laptop}?fields=all`)).body, full);

  t.same((await call('GET', '/api/v2/tailnet/-/devices?hostname=desk')).body.devices.map((d: { hostname: string }) => d.hostname), ['desk'], 'filter');
  t.equal((await call('GET', '/api/v2/tailnet/-/devices?os=linux&os=windows')).body.devices.length, 2, 'a repeated filter is any of its values');
  t.equal((await call('GET', '/api/v2/tailnet/-/devices?isEphemeral=true')).body.devices.length, 0);
  const bogus = await call('GET', '/api/v2/tailnet/-/devices?colour=blue');
  t.equal(bogus.status, 400);
  t.match(bogus.body, { field: 'colour', message: /colour: unknown field/ });
  const badFields = await call('GET', '/api/v2/tailnet/-/devices?fields=some');
  t.equal(badFields.status, 400);
  t.match(badFields.body, { field: 'fields' });
  for (const id of ['999', 'abc', 'n123CNTRL']) {
    const res = await call('GET', `/api/v2/device/${id}`);
    t.equal(res.status, 404, id);
    t.match(res.body.message, new RegExp(`device "${id}" not found`));
  }
  t.equal((await call('GET', '/api/v2/tailnet/other.net/devices')).status, 404);
});

t.test('rename, tags, routes, key expiry and IPv4 through /api/v2 are seen through /api/v1 and by the peer; bad input changes nothing', async (t) => {
  const { s, call, desk, laptop, ids } = await setup(t);
  const node = async (id: string) => (await call('GET', `/api/v1/node/${id}`)).body.node;
  const before = await node(ids.laptop);
  const refuse = async (path: string, body: unknown, status: number, field: string | undefined, message: RegExp) => {
    const res = await call('POST', `/api/v2/device/${ids.laptop}/${path}`, body);
    t.equal(res.status, status, `${path} ${JSON.stringify(body)}`);
    t.match(res.body, { ...(field ? { field } : {}), message });
  };

  // Name.
  t.equal((await call('POST', `/api/v2/device/${ids.laptop}/name`, { name: 'work.example.net' })).status, 200);
  t.equal((await node(ids.laptop)).givenName, 'work', 'the tailnet domain is taken off the full name');
  await desk.waitFor((m) => peer(m)?.Name?.startsWith('work.') === true);
  await refuse('name', { name: 'desk' }, 409, 'name', /desk already exists/);
  await refuse('name', { name: 'Not A Label' }, 400, 'name', /DNS label/);
  await refuse('name', { name: 'x.other.net' }, 400, 'name', /ending in \.example\.net/);
  await refuse('name', { name: '' }, 400, 'name', /required/);
  await refuse('name', {}, 400, 'name', /name/);

  // Tags: only those the policy's tagOwners define.
  t.equal((await call('POST', `/api/v2/device/${ids.laptop}/tags`, { tags: ['tag:web'] })).status, 200);
  t.same((await node(ids.laptop)).tags, ['tag:web']);
  await desk.waitFor((m) => peer(m)?.Tags?.includes('tag:web') === true);
  await refuse('tags', { tags: ['tag:nope'] }, 400, undefined, /tag:nope/);
  await refuse('tags', { tags: 'tag:db' }, 400, 'tags', /tags/);
  t.same((await node(ids.laptop)).tags, ['tag:web'], 'refused tags changed nothing');

  // Routes.
  const routes = await call('POST', `/api/v2/device/${ids.laptop}/routes`, { routes: ['10.1.0.0/24'] });
  t.same(routes.body, { advertisedRoutes: ['10.1.0.0/24'], enabledRoutes: ['10.1.0.0/24'] });
  t.same((await node(ids.laptop)).approvedRoutes, ['10.1.0.0/24']);
  t.same((await call('GET', `/api/v2/device/${ids.laptop}/routes`)).body, routes.body);
  await desk.waitFor((m) => peer(m)?.PrimaryRoutes?.includes('10.1.0.0/24') === true);
  await refuse('routes', { routes: ['not-a-route'] }, 400, 'routes', /not-a-route/);
  t.same((await node(ids.laptop)).approvedRoutes, ['10.1.0.0/24'], 'a refused route changed nothing');

  // Key expiry.
  t.equal((await call('POST', `/api/v2/device/${ids.laptop}/key`, { keyExpiryDisabled: true })).status, 200);
  t.equal((await node(ids.laptop)).expiry, null, 'never expires');
  t.equal((await call('GET', `/api/v2/device/${ids.laptop}`)).body.expires, '0001-01-01T00:00:00Z');
  t.equal((await call('POST', `/api/v2/device/${ids.laptop}/key`, { keyExpiryDisabled: false })).status, 200);
  const expiry = (await node(ids.laptop)).expiry;
  t.ok(expiry && Date.parse(expiry) > Date.parse(before.expiry), 'expires again, node.expiry from now');
  await refuse('key', { keyExpiryDisabled: 'yes' }, 400, 'keyExpiryDisabled', /keyExpiryDisabled/);

  // Authorization: every device is authorized.
  t.equal((await call('POST', `/api/v2/device/${ids.laptop}/authorized`, { authorized: true })).status, 200);
  await refuse('authorized', { authorized: false }, 400, 'authorized', /no device approval/);

  // IPv4 address.
  const deskV4 = (await node(ids.desk)).ipAddresses[0];
  await refuse('ip', { ipv4: '10.0.0.1' }, 400, 'ipv4', /outside the configured prefix 100\.64\.0\.0\/10/);
  await refuse('ip', { ipv4: deskV4 }, 400, 'ipv4', /in use by another node/);
  await refuse('ip', { ipv4: '100.100.100.100' }, 400, 'ipv4', /reserves/);
  await refuse('ip', { ipv4: 'fd7a:115c:a1e0::9' }, 400, 'ipv4', /not an IPv4 address/);
  t.same((await node(ids.laptop)).ipAddresses, before.ipAddresses, 'refused addresses changed nothing');
  t.equal((await call('POST', `/api/v2/device/${ids.laptop}/ip`, { ipv4: '100.64.0.50' })).status, 200);
  t.equal((await node(ids.laptop)).ipAddresses[0], '100.64.0.50');
  await desk.waitFor((m) => peer(m)?.Addresses?.includes('100.64.0.50/32') === true);
  await laptop.waitFor((m) => m.self?.Addresses?.includes('100.64.0.50/32') === true);

  // Delete.
  t.equal((await call('DELETE', `/api/v2/device/${ids.desk}`)).status, 200);
  t.equal((await call('GET', `/api/v1/node/${ids.desk}`)).status, 404);
  await laptop.waitFor((m) => m.peers.size === 0);
  t.equal((await call('DELETE', `/api/v2/device/${ids.desk}`)).status, 404);
  t.equal(s.state.nodes.list().length, 1);

  // The audit log holds each change that succeeded, under its v2 operation; refusals are not there.
  const audit = (await call('GET', '/api/v1/audit?limit=1000')).body.entries as Array<{ action: string; target: string }>;
  const v2 = audit.filter((e) => e.action.startsWith('v2')).reverse();
  t.same(v2.map((e) => e.action), ['v2SetDeviceName', 'v2SetDeviceTags', 'v2SetDeviceRoutes', 'v2SetDeviceKey', 'v2SetDeviceKey', 'v2AuthorizeDevice', 'v2SetDeviceIp', 'v2DeleteDevice']);
  t.match(v2.at(-1), { target: `id=${ids.desk}` });
});

t.test('tailnet settings come from the config; a PATCH that would change one names where it is set', async (t) => {
  const s = await startTestServer({ dns: { base_domain: 'example.net' }, node: { expiry: '720h' } });
  t.teardown(() => s.stop());
  const call = client(s, (await s.state.keys.createApiKey(null)).secret);
  const got = await call('GET', '/api/v2/tailnet/-/settings');
  t.equal(got.status, 200);
  t.same(Object.keys(got.body).sort(), [...SETTINGS_FIELDS].sort(), "exactly the Go client's TailnetSettings fields");
  t.match(got.body, {
    devicesKeyDurationDays: 30, devicesApprovalOn: false, aclsExternallyManagedOn: true, httpsEnabled: false,
    routeSelection: 'active-passive-failover', usersRoleAllowedToJoinExternalTailnets: 'none',
  });
  for (const body of [{}, { devicesApprovalOn: false, devicesKeyDurationDays: 30, aclsExternallyManagedOn: null, aclsExternalLink: null }]) {
    const res = await call('PATCH', '/api/v2/tailnet/-/settings', body);
    t.equal(res.status, 200, `no change: ${JSON.stringify(body)}`);
  }
  const refusals: Array<[Record<string, unknown>, string, RegExp]> = [
    [{ devicesKeyDurationDays: 90 }, 'devicesKeyDurationDays', /node\.expiry in the config file \(it is 30\)/],
    [{ devicesApprovalOn: true }, 'devicesApprovalOn', /no device approval/],
    [{ httpsEnabled: true }, 'httpsEnabled', /dns\.certificates\.enabled/],
    [{ aclsExternallyManagedOn: false }, 'aclsExternallyManagedOn', /policy\.mode/],
    [{ routeSelection: 'magicroute' }, 'routeSelection', /active-passive-failover/],
    [{ routeSelection: 'fastest' }, 'routeSelection', /routeSelection/],
    [{ regionalRoutingOn: false, routeSelection: 'active-passive-failover' }, 'routeSelection', /regionalRoutingOn/],
    [{ colour: 'blue' }, 'colour', /unknown field/],
  ];
  for (const [body, field, message] of refusals) {
    const res = await call('PATCH', '/api/v2/tailnet/-/settings', body);
    t.equal(res.status, 400, JSON.stringify(body));
    t.match(res.body, { field, message });
  }
  t.same((await call('GET', '/api/v2/tailnet/-/settings')).body, got.body, 'nothing changed');
  t.equal((await call('PATCH', '/api/v2/tailnet/other.net/settings', {})).status, 404);
});

t.test('what Headway does not have answers 501 in Tailscale\'s error shape, after authentication', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const call = client(s, (await s.state.keys.createApiKey(null)).secret);
  const notServed = V2_ROUTES.filter((r) => r.tag === 'v2:Not served');
  t.ok(notServed.length >= 30, 'contacts, webhooks, logging, posture, services, tailnets');
  for (const area of ['contacts', 'webhooks', 'logging', 'posture', 'vip-services', 'attributes', 'organizations']) {
    t.ok(notServed.some((r) => r.path.includes(area)), `${area} is registered`);
  }
  for (const r of notServed) {
    const path = r.path.replace(/:([A-Za-z]+)/g, (_, name: string) => (name === 'tailnet' ? '-' : 'x1'));
    const res = await call(r.method, path, r.method === 'GET' || r.method === 'DELETE' ? undefined : {});
    t.equal(res.status, 501, `${r.method} ${path}`);
    t.match(res.body.message, /not available on a Headway server|Headway server serves one tailnet/, `${r.method} ${path}: says what is missing`);
  }
  const unknown = await call('GET', '/api/v2/tailnet/-/no-such-thing');
  t.equal(unknown.status, 404, 'a path outside Tailscale\'s API is a 404, not a 501');
});
