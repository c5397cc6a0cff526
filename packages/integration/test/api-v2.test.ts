import t from 'tap';
import { V2_ROUTES } from '@headway/api';
import { startTestServer } from '../src/server.js';

const basic = (secret: string) => `Basic ${Buffer.from(`${secret}:`).toString('base64')}`;

t.test('/api/v2 takes an API key as Bearer token or as the basic-auth user name, and answers Tailscale\'s error shape', async (t) => {
  const s = await startTestServer({ dns: { base_domain: 'example.net', magic_dns: true } });
  t.teardown(() => s.stop());
  const { secret } = await s.state.keys.createApiKey(null);
  await s.state.users.create({ name: 'alice' });
  const get = (path: string, authorization?: string) => fetch(s.urls.http + path, { headers: authorization ? { authorization } : {} });

  for (const auth of [`Bearer ${secret}`, basic(secret)]) {
    const res = await get('/api/v2/tailnet/-/users', auth);
    t.equal(res.status, 200, auth.split(' ')[0]);
    const body = await res.json() as { users: Array<Record<string, unknown>> };
    t.match(body.users, [{ loginName: 'alice', role: 'member', type: 'member', deviceCount: 0, currentlyConnected: false }]);
  }
  const named = await get('/api/v2/tailnet/example.net/users', `Bearer ${secret}`);
  t.equal(named.status, 200, "the tailnet's own name works as '-' does");
  const other = await get('/api/v2/tailnet/other.example/users', `Bearer ${secret}`);
  t.equal(other.status, 404);
  t.match(await other.json(), { message: /tailnet "other.example" not found/ });

  for (const [label, auth] of [['missing', undefined], ['wrong', 'Bearer hwkey-api-aaaaaaaaaaaa-' + 'A'.repeat(43)], ['wrong basic', basic('nope')]] as const) {
    const res = await get('/api/v2/tailnet/-/users', auth);
    t.equal(res.status, 401, label);
    const body = await res.json() as { message?: string };
    t.type(body.message, 'string', `${label}: message, the field Tailscale's clients read`);
  }
  const unknown = await get('/api/v2/tailnet/-/no-such-thing');
  t.equal(unknown.status, 401, 'an unknown /api/v2 path is not probeable without a credential');
});

t.test('every /api/v2 route but the token endpoint needs a credential and declares a scope', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  for (const r of V2_ROUTES) {
    if (r.scope === 'public') continue;
    t.ok(r.scope, `${r.method} ${r.path} declares a scope`);
    const path = r.path.replace(/:([A-Za-z]+)/g, (_, name: string) => (name === 'tailnet' ? '-' : '1'));
    const res = await fetch(s.urls.http + path, { method: r.method, headers: { 'content-type': 'application/json' }, body: r.method === 'GET' || r.method === 'DELETE' ? undefined : '{}' });
    t.equal(res.status, 401, `${r.method} ${r.path}`);
  }
  t.equal(s.state.users.list().length, 0);
});
