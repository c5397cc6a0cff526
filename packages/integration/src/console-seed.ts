/*
 * console-seed.ts: a tailnet for the console's browser tests: testkit devices streaming their maps (the console
 * shows them online), a seeded server with users, devices with routes and tags, keys, a policy and audit entries.
 */
import { TestDevice } from '@headway/testkit';
import type { TestServer } from './server.js';
import { socketCall } from './console.js';

/** streamingDevice registers a testkit device of `user` (made if missing) and streams its map until teardown. */
export async function streamingDevice(
  t: { teardown(fn: () => unknown): void }, s: TestServer, user: string, hostname: string, opts: { routes?: string[]; tags?: string[] } = {},
): Promise<TestDevice> {
  const owner = s.state.users.byName(user) ?? await s.state.users.create({ name: user });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: owner.id, ...(opts.tags ? { tags: opts.tags } : {}) });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  t.teardown(() => d.close());
  await d.connect();
  const r = await d.register({ authKey: secret, routes: opts.routes });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true, hostinfo: opts.routes ? { RoutableIPs: opts.routes } : undefined });
  return d;
}

/** SEED_CONFIG: the config seedTailnet needs (a policy kept in the database) and DNS the DNS page can change. */
export const SEED_CONFIG = {
  policy: { mode: 'database' },
  dns: { base_domain: 'example.net', mode: 'database', nameservers: { global: ['1.1.1.1'] }, extra_records: [{ name: 'grafana.example.net', type: 'A', value: '100.64.0.5' }] },
};

/** SEED_POLICY: tags owned by the admins group, everyone reaching the tagged servers. */
export const SEED_POLICY = JSON.stringify({
  groups: { 'group:admins': ['alice@'] },
  tagOwners: { 'tag:server': ['group:admins'] },
  acls: [{ action: 'accept', src: ['autogroup:member'], dst: ['tag:server:*'] }, { action: 'accept', src: ['group:admins'], dst: ['*:*'] }],
}, null, 2);

/**
 * seedTailnet fills a server started with SEED_CONFIG as the console's pages show it: users, devices (one a subnet router, one tagged), a
 * pre-auth key and an API key, a policy, and audit entries of changes made over the admin socket.
 */
export async function seedTailnet(t: { teardown(fn: () => unknown): void }, s: TestServer): Promise<void> {
  for (const name of ['alice', 'bob']) {
    const res = await socketCall(s, 'POST', '/api/v1/user', { name, email: `${name}@example.com` });
    if (res.status !== 200) throw new Error(`create user ${name}: ${res.status} ${JSON.stringify(res.json)}`);
  }
  const policy = await socketCall(s, 'PUT', '/api/v1/policy', { policy: SEED_POLICY });
  if (policy.status !== 200) throw new Error(`set policy: ${policy.status} ${JSON.stringify(policy.json)}`);
  await streamingDevice(t, s, 'alice', 'alice-laptop');
  await streamingDevice(t, s, 'alice', 'office-router', { routes: ['10.20.0.0/24'] });
  await streamingDevice(t, s, 'bob', 'web-1', { tags: ['tag:server'] });
  const router = s.state.nodes.list().find((n) => n.hostname === 'office-router');
  if (router) await socketCall(s, 'POST', `/api/v1/node/${router.id}/approve_routes`, { routes: ['10.20.0.0/24'] });
  const alice = s.state.users.byName('alice')!;
  await socketCall(s, 'POST', '/api/v1/preauthkey', { user: String(alice.id), reusable: true, expiration: new Date(Date.now() + 7 * 86_400_000).toISOString() });
  await socketCall(s, 'POST', '/api/v1/apikey', { expiration: new Date(Date.now() + 30 * 86_400_000).toISOString() });
}
