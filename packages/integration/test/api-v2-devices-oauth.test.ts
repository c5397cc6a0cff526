// /api/v2 devices and settings under OAuth tokens: each call needs its scope (a 403
// naming it, nothing changed), and a token tags devices only with its client's tags;
// API keys may do everything the policy allows. Real OAuth clients over /api/v1, tokens
// from the client-credentials endpoint, on a real server with SQLite.
import t, { type Test } from 'tap';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';

const POLICY = JSON.stringify({
  tagOwners: { 'tag:web': ['alice@'], 'tag:db': ['alice@'], 'tag:ci': ['alice@'] },
  acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
});

async function oauthToken(t: Test, s: TestServer, apiKey: string, scopes: string[], tags: string[]): Promise<string> {
  const created = await adminFetch(s, apiKey, 'POST', '/api/v1/oauthclient', { scopes, tags, description: scopes.join(' ') });
  t.equal(created.status, 200, `client with ${scopes.join(' ')}`, { body: created.json });
  const { oauthClient, secret } = created.json as { oauthClient: { id: string }; secret: string };
  const res = await fetch(`${s.urls.http}/api/v2/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: `Basic ${Buffer.from(`${oauthClient.id}:${secret}`).toString('base64')}` },
    body: 'grant_type=client_credentials',
  });
  const json = await res.json() as { access_token: string };
  t.equal(res.status, 200, 'token issued');
  return json.access_token;
}

t.test('OAuth tokens: device calls need their scope, and a token tags devices only with its client\'s tags', async (t) => {
  const s = await startTestServer({ dns: { base_domain: 'example.net' }, policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const apiKey = (await s.state.keys.createApiKey(null)).secret;
  t.equal((await adminFetch(s, apiKey, 'PUT', '/api/v1/policy', { policy: POLICY })).status, 200);
  await s.state.users.create({ name: 'alice' });
  const node = (await adminFetch(s, apiKey, 'POST', '/api/v1/debug/node', { user: 'alice', name: 'laptop', routes: ['10.0.0.0/24'] })).json.node as { id: string };
  const dev = `/api/v2/device/${node.id}`;
  const v1 = async () => (await adminFetch(s, apiKey, 'GET', `/api/v1/node/${node.id}`)).json.node;

  const web = await oauthToken(t, s, apiKey, ['devices:core', 'devices:routes:read'], ['tag:web']);
  const reader = await oauthToken(t, s, apiKey, ['devices:core:read'], []);
  const keysOnly = await oauthToken(t, s, apiKey, ['auth_keys'], ['tag:ci']);

  // Tags: the client's own; another is a 403 naming it, and changes nothing.
  t.equal((await adminFetch(s, web, 'POST', `${dev}/tags`, { tags: ['tag:web'] })).status, 200);
  t.same((await v1()).tags, ['tag:web']);
  for (const tags of [['tag:db'], ['tag:web', 'tag:db']]) {
    const refused = await adminFetch(s, web, 'POST', `${dev}/tags`, { tags });
    t.equal(refused.status, 403, JSON.stringify(tags));
    t.match(refused.json.message, /may not assign tag:db; it may assign tag:web/);
    t.same((await v1()).tags, ['tag:web'], 'nothing changed');
  }
  t.equal((await adminFetch(s, apiKey, 'POST', `${dev}/tags`, { tags: ['tag:web', 'tag:db'] })).status, 200, 'an API key sets any tag the policy allows');
  t.equal((await adminFetch(s, web, 'POST', `${dev}/tags`, { tags: ['tag:web', 'tag:db'] })).status, 200, 'a tag the device already has may stay');

  // Scopes: devices:routes:read reads routes but may not set them.
  t.equal((await adminFetch(s, web, 'GET', `${dev}/routes`)).status, 200);
  const routes = await adminFetch(s, web, 'POST', `${dev}/routes`, { routes: ['10.0.0.0/24'] });
  t.equal(routes.status, 403);
  t.match(routes.json.message, /do not include devices:routes$/);
  t.same((await v1()).approvedRoutes, [], 'no route approved');

  // devices:core:read reads, and writes nothing.
  t.equal((await adminFetch(s, reader, 'GET', `${dev}?fields=all`)).status, 200);
  t.equal((await adminFetch(s, reader, 'GET', '/api/v2/tailnet/-/devices')).status, 200);
  for (const [method, path, body] of [['POST', `${dev}/name`, { name: 'other' }], ['POST', `${dev}/key`, { keyExpiryDisabled: true }], ['POST', `${dev}/ip`, { ipv4: '100.64.0.9' }], ['DELETE', dev, undefined]] as const) {
    const res = await adminFetch(s, reader, method, path, body);
    t.equal(res.status, 403, `${method} ${path}`);
    t.match(res.json.message, /do not include devices:core$/);
  }
  t.match(await v1(), { givenName: 'laptop' }, 'still there, unrenamed');

  // A token without any devices or settings scope.
  for (const [path, scope] of [['/api/v2/tailnet/-/devices', 'devices:core:read'], [`${dev}/routes`, 'devices:routes:read'], ['/api/v2/tailnet/-/settings', 'feature_settings:read'], ['/api/v2/tailnet/-/webhooks', 'webhooks:read']] as const) {
    const res = await adminFetch(s, keysOnly, 'GET', path);
    t.equal(res.status, 403, path);
    t.match(res.json.message, new RegExp(`do not include ${scope}$`), 'the scope check comes before a 501');
  }
});
