// /api/v2's keys as Tailscale's Go client (keys.go) sends and reads them: auth keys made with an OAuth
// token (tags held to the client's), the key registering a device over the control protocol, list, get
// and delete of auth keys, API keys and OAuth clients, and the scopes each needs.
import t from 'tap';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

async function accessToken(s: TestServer, scopes: string[], tags: string[], scope?: string): Promise<string> {
  const { secret } = await s.state.oauth.create({ scopes, tags });
  const res = await fetch(`${s.urls.http}/api/v2/oauth/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_secret: secret, ...(scope ? { scope } : {}) }),
  });
  if (res.status !== 200) throw new Error(`token: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { access_token: string }).access_token;
}

async function call(s: TestServer, bearer: string, method: string, path: string, body?: unknown) {
  const res = await fetch(s.urls.http + path, {
    method, headers: { authorization: `Bearer ${bearer}`, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined,
  });
  return { status: res.status, json: await res.json() as any };
}

/** authKeyRequest is CreateKeyRequest as keys.go marshals it (every field present). */
const authKeyRequest = (tags: string[], extra: Record<string, unknown> = {}) => ({
  capabilities: { devices: { create: { reusable: false, ephemeral: true, tags, preauthorized: true } } }, expirySeconds: 0, description: '', ...extra,
});

t.test('an OAuth token with auth_keys creates a tagged key that registers a device; its tags are held to the client\'s', async (t) => {
  const s = await startTestServer({ dns: { base_domain: 'example.net', magic_dns: true }, policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  await s.policy.set(JSON.stringify({ tagOwners: { 'tag:ci': [], 'tag:k8s': [], 'tag:prod': [] }, acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }] }));
  const token = await accessToken(s, ['auth_keys', 'devices:core'], ['tag:ci', 'tag:k8s']);

  const before = Date.now();
  const made = await call(s, token, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci'], { expirySeconds: 3600, description: 'runner' }));
  t.equal(made.status, 200, JSON.stringify(made.json));
  const key = made.json;
  t.match(key, {
    id: /^[a-z0-9]{12}$/, keyType: 'auth', description: 'runner', invalid: false, expirySeconds: 3600, userId: '',
    capabilities: { devices: { create: { reusable: false, ephemeral: true, preauthorized: true, tags: ['tag:ci'] } } },
  });
  t.match(key.key, new RegExp(`^hwkey-auth-${key.id}-[A-Za-z0-9_-]{43}$`), 'the secret, with the id as its readable part');
  const expires = Date.parse(key.expires);
  t.ok(expires >= before + 3600_000 && expires <= Date.now() + 3600_000, 'expires an hour from creation');
  t.ok(!Number.isNaN(Date.parse(key.created)) && !Number.isNaN(Date.parse(key.updated)), 'created and updated are RFC 3339 (Go time.Time)');

  const device = new TestDevice({ serverUrl: s.urls.http, hostname: 'runner-1' });
  t.teardown(() => device.close());
  await device.connect();
  const reg = await device.register({ authKey: key.key });
  t.equal(reg.MachineAuthorized, true, 'the device joins with the key');
  const node = s.state.nodes.list().find((n) => n.hostname === 'runner-1');
  t.same(node?.tags, ['tag:ci'], "the device has the key's tag");
  t.equal(node?.ephemeral, true, 'and is ephemeral as asked');

  const other = await call(s, token, 'POST', '/api/v2/tailnet/example.net/keys', authKeyRequest(['tag:ci', 'tag:prod']));
  t.equal(other.status, 403);
  t.match(other.json.message, /may not assign tag:prod; it may assign tag:ci, tag:k8s/);
  const untagged = await call(s, token, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest([]));
  t.equal(untagged.status, 400);
  t.match(untagged.json.message, /capabilities\.devices\.create\.tags: a key created with an OAuth token must have tags/);
  t.equal((await s.state.keys.listPreAuthKeys()).length, 1, 'no refused key was stored');

  const readOnly = await accessToken(s, ['devices:core:read'], []);
  const refused = await call(s, readOnly, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci']));
  t.equal(refused.status, 403, 'a token with only devices:core:read cannot create keys');
  t.match(refused.json.message, /do not include auth_keys/);
  t.equal((await call(s, readOnly, 'GET', '/api/v2/tailnet/-/keys')).status, 403, 'nor list them');
  t.equal((await s.state.keys.listPreAuthKeys()).length, 1);
});

t.test('keys list, get and delete auth keys, API keys and OAuth clients, as keys.go reads them', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const { secret: apiKey, key: api } = await s.state.keys.createApiKey(new Date(Date.now() + 86_400_000));
  const auth = (await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci'], { capabilities: { devices: { create: { reusable: true, tags: ['tag:ci'] } } } }))).json;
  t.equal(auth.keyType, 'auth');
  t.equal(auth.expirySeconds, 90 * 86_400, 'no expirySeconds: 90 days, as Tailscale');
  const client = await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', { keyType: 'client', scopes: ['auth_keys'], tags: ['tag:ci'], description: 'tf' });
  t.equal(client.status, 200, JSON.stringify(client.json));
  t.match(client.json, { keyType: 'client', scopes: ['auth_keys'], tags: ['tag:ci'], description: 'tf', key: /^hwkey-client-/ });
  t.equal((await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest([]))).status, 400, 'an API key belongs to no user: an untagged key is refused');
  t.equal((await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', { keyType: 'federated' })).status, 501);

  const listed = await call(s, apiKey, 'GET', '/api/v2/tailnet/-/keys?all=true');
  t.equal(listed.status, 200);
  const byType = Object.fromEntries((listed.json.keys as Array<{ keyType: string; id: string }>).map((k) => [k.keyType, k.id]));
  t.same(byType, { auth: auth.id, api: api.prefix, client: client.json.id }, 'one of each, by id');
  t.equal(listed.json.keys.length, 3);
  t.notOk(JSON.stringify(listed.json).includes(auth.key.slice(-43)), 'no secret in the list');
  t.notOk((listed.json.keys as Array<Record<string, unknown>>).some((k) => 'key' in k), 'no key field at all');

  const described = (await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci'], { description: 'terraform runner' }))).json;
  t.equal((await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${described.id}`)).json.description, 'terraform runner', 'the description reads back (Terraform compares it)');
  const got = await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${auth.id}`);
  t.match(got.json, { id: auth.id, keyType: 'auth', invalid: false, capabilities: { devices: { create: { reusable: true, tags: ['tag:ci'] } } } });
  t.notOk('key' in got.json);
  t.match((await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${api.prefix}`)).json, { keyType: 'api', id: api.prefix, invalid: false });
  t.equal((await call(s, apiKey, 'GET', '/api/v2/tailnet/-/keys/nosuchkey')).status, 404);

  // An OAuth token with auth_keys sees auth keys only; API keys and OAuth clients need their own scopes.
  const token = await accessToken(s, ['auth_keys'], ['tag:ci']);
  const seen = (await call(s, token, 'GET', '/api/v2/tailnet/-/keys')).json.keys as Array<{ keyType: string }>;
  t.same([...new Set(seen.map((k) => k.keyType))], ['auth']);
  t.equal((await call(s, token, 'GET', `/api/v2/tailnet/-/keys/${api.prefix}`)).status, 403);
  t.equal((await call(s, token, 'DELETE', `/api/v2/tailnet/-/keys/${api.prefix}`)).status, 403, 'deleting an API key needs api_access_tokens');
  t.equal((await call(s, token, 'POST', '/api/v2/tailnet/-/keys', { keyType: 'client', scopes: ['all'] })).status, 403, 'creating an OAuth client needs oauth_keys');

  t.equal((await call(s, token, 'DELETE', `/api/v2/tailnet/-/keys/${auth.id}`)).status, 200);
  t.equal((await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${auth.id}`)).status, 404, 'the deleted auth key is gone');
  t.equal((await call(s, apiKey, 'DELETE', `/api/v2/tailnet/-/keys/${client.json.id}`)).status, 200);
  t.same(await s.state.oauth.list().then((l) => l.map((c) => c.clientId)).then((ids) => ids.includes(client.json.id)), false, 'the OAuth client is gone');
  t.equal((await call(s, apiKey, 'DELETE', `/api/v2/tailnet/-/keys/${api.prefix}`)).status, 200, 'an API key may delete itself');
  t.equal((await call(s, apiKey, 'GET', '/api/v2/tailnet/-/keys')).status, 401, 'and then no longer works');
});

t.test('PUT keys/{id} (the Go client\'s SetOAuthClient) replaces an OAuth client\'s scopes, tags and description; its tokens narrow at once', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  await s.policy.set(JSON.stringify({ tagOwners: { 'tag:ci': [], 'tag:k8s': [] }, acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }] }));
  const { secret: apiKey } = await s.state.keys.createApiKey(null);
  const made = await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', { keyType: 'client', scopes: ['auth_keys', 'devices:core'], tags: ['tag:ci'], description: 'operator' });
  t.equal(made.status, 200, JSON.stringify(made.json));
  const id = made.json.id as string;
  const form = new URLSearchParams({ grant_type: 'client_credentials', client_secret: made.json.key });
  const tokenRes = await fetch(`${s.urls.http}/api/v2/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form });
  const token = ((await tokenRes.json()) as { access_token: string }).access_token;
  t.equal((await call(s, token, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci']))).status, 200, 'the token creates keys');

  const set = await call(s, apiKey, 'PUT', `/api/v2/tailnet/-/keys/${id}`, { keyType: 'client', scopes: ['devices:core:read'], tags: ['tag:k8s'], description: 'reader' });
  t.equal(set.status, 200, JSON.stringify(set.json));
  t.match(set.json, { id, keyType: 'client', scopes: ['devices:core:read'], tags: ['tag:k8s'], description: 'reader' });
  t.notOk('key' in set.json, 'no secret in the answer');
  t.match((await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${id}`)).json, { scopes: ['devices:core:read'], tags: ['tag:k8s'], description: 'reader' }, 'get shows the change');
  const refused = await call(s, token, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci']));
  t.equal(refused.status, 403, 'the token held before no longer has auth_keys');
  t.equal((await call(s, token, 'GET', '/api/v2/tailnet/-/devices')).status, 200, 'but keeps devices:core narrowed to reading');
  const again = await fetch(`${s.urls.http}/api/v2/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: form });
  t.equal(again.status, 200, 'the same secret still gets tokens');
  t.match(await again.json(), { scope: 'devices:core:read' });

  const before = (await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${id}`)).json;
  const bad = [
    [{ scopes: ['nope'] }, 400, /scopes: unknown scope "nope"/],
    [{ scopes: ['auth_keys'], tags: [] }, 400, /tags: scope auth_keys needs at least one tag/],
    [{ scopes: ['devices:core:read'], tags: ['tag:undefined'] }, 400, /tag:undefined/],
    [{ tags: ['tag:ci'] }, 400, /scopes/],
  ] as const;
  for (const [body, status, message] of bad) {
    const res = await call(s, apiKey, 'PUT', `/api/v2/tailnet/-/keys/${id}`, { keyType: 'client', ...body });
    t.equal(res.status, status, JSON.stringify(body));
    t.match(res.json.message, message);
  }
  t.same((await call(s, apiKey, 'GET', `/api/v2/tailnet/-/keys/${id}`)).json, before, 'a refused change changes nothing');

  const authKey = (await call(s, apiKey, 'POST', '/api/v2/tailnet/-/keys', authKeyRequest(['tag:ci']))).json.id as string;
  const notClient = await call(s, apiKey, 'PUT', `/api/v2/tailnet/-/keys/${authKey}`, { keyType: 'client', scopes: ['devices:core:read'] });
  t.equal(notClient.status, 400);
  t.match(notClient.json.message, /is an auth key; only OAuth clients can be changed/);
  t.equal((await call(s, apiKey, 'PUT', '/api/v2/tailnet/-/keys/nosuchkey', { scopes: ['dns'] })).status, 404);
  const reader = await call(s, token, 'PUT', `/api/v2/tailnet/-/keys/${id}`, { scopes: ['all'] });
  t.equal(reader.status, 403, 'a token without auth_keys cannot change a client (not even its own)');
});
