import t from 'tap';
import http from 'node:http';
import { ROUTES, openApiDocument } from '@headway/api';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';

async function withKey(s: TestServer): Promise<string> {
  return (await s.state.keys.createApiKey(null)).secret;
}

function socketRequest(path: string, method: string, socketPath: string, body?: unknown): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, path, method, headers: body ? { 'content-type': 'application/json' } : {} }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, json: text ? JSON.parse(text) : undefined }));
    });
    req.on('error', reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

const fill = (path: string) => path.replace(':id', '1').replace(':newName', 'x').replace(':prefix', 'abc');

t.test('every admin route answers 401 with no data to missing, malformed, unknown, expired and revoked keys', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const expired = await s.state.keys.createApiKey(null);
  await s.state.keys.expireApiKey({ id: expired.key.id });
  const revoked = await s.state.keys.createApiKey(null);
  await s.state.keys.deleteApiKey({ id: revoked.key.id });
  const headers: Array<[string, Record<string, string>]> = [
    ['missing', {}],
    ['malformed', { authorization: 'Basic abc' }],
    ['unknown', { authorization: 'Bearer hwkey-api-aaaaaaaaaaaa-' + 'A'.repeat(43) }],
    ['garbage', { authorization: 'Bearer nonsense' }],
    ['expired', { authorization: `Bearer ${expired.secret}` }],
    ['revoked', { authorization: `Bearer ${revoked.secret}` }],
  ];
  let calls = 0;
  for (const r of ROUTES) {
    for (const [label, h] of headers) {
      const res = await fetch(s.urls.http + fill(r.path), { method: r.method, headers: { ...h, 'content-type': 'application/json' }, body: r.method === 'GET' ? undefined : '{"name":"x"}' });
      const body = await res.json() as Record<string, unknown>;
      t.equal(res.status, 401, `${r.method} ${r.path} (${label})`);
      t.same(Object.keys(body).sort(), ['code', 'detail', 'message', 'status', 'title', 'type'], 'problem fields only (message repeats detail)');
      calls++;
    }
  }
  t.equal(calls, ROUTES.length * headers.length);
  t.equal(s.state.users.list().length, 0, 'no handler ran');
});

t.test('the OpenAPI document and the router agree', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await withKey(s);
  const doc = openApiDocument({ serverUrl: s.urls.http }) as { openapi: string; paths: Record<string, Record<string, unknown>> };
  t.equal(doc.openapi, '3.1.0');
  const ops = Object.entries(doc.paths).flatMap(([p, m]) => Object.keys(m).map((method) => `${method.toUpperCase()} ${p}`)).sort();
  const routes = ROUTES.map((r) => `${r.method} ${r.path.replace(/:([A-Za-z]+)/g, '{$1}')}`).sort();
  t.same(ops, routes);
  const served = await (await fetch(s.urls.http + '/api/v1/openapi.json')).json();
  t.same(served, doc);
  // Every documented operation exists on the server (a missing one would be route_not_found).
  for (const r of ROUTES) {
    const res = await adminFetch(s, key, r.method, fill(r.path), r.method === 'GET' || r.method === 'DELETE' ? undefined : {});
    t.not(res.json?.code, 'route_not_found', `${r.method} ${r.path} is routed`);
    t.not(res.status, 500, `${r.method} ${r.path} never 500s on empty input`);
  }
  const unknown = await adminFetch(s, key, 'GET', '/api/v1/nope');
  t.equal(unknown.status, 404);
  t.equal(unknown.json.code, 'route_not_found');
});

t.test('users, nodes, keys and policy through the API', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await withKey(s);
  const call = (m: string, p: string, b?: unknown) => adminFetch(s, key, m, p, b);

  const created = await call('POST', '/api/v1/user', { name: 'alice', displayName: 'Alice', email: 'alice@example.com' });
  t.equal(created.status, 200);
  t.match(created.json.user, { id: '1', name: 'alice', displayName: 'Alice', email: 'alice@example.com' });
  t.match(created.json.user.createdAt, /^\d{4}-\d\d-\d\dT/);
  t.equal((await call('POST', '/api/v1/user', { name: 'alice' })).status, 409);
  t.match((await call('POST', '/api/v1/user', { name: 'bad name' })).json, { status: 400, field: 'name' });
  t.match((await call('POST', '/api/v1/user', { name: 'bob', email: 'nope' })).json, { status: 400, field: 'email' });
  t.match((await call('POST', '/api/v1/user', {})).json, { status: 400, detail: 'name: is required' });
  t.match((await call('POST', '/api/v1/user', { name: 42.5 })).json, { status: 400 });
  t.equal((await call('GET', '/api/v1/user?name=alice')).json.users.length, 1);
  t.equal((await call('GET', '/api/v1/user?id=x')).status, 400);
  t.equal((await call('POST', '/api/v1/user/1/rename/alicia')).json.user.name, 'alicia');
  t.equal((await call('POST', '/api/v1/user/99/rename/x')).status, 404);

  const node = await call('POST', '/api/v1/debug/node', { user: 'alicia', name: 'My Laptop', routes: ['10.0.0.0/24'] });
  t.equal(node.status, 200);
  t.match(node.json.node, { id: '1', name: 'My Laptop', givenName: 'my-laptop', user: { name: 'alicia' }, online: false, registerMethod: 'REGISTER_METHOD_DEBUG', availableRoutes: ['10.0.0.0/24'], approvedRoutes: [] });
  t.equal(node.json.node.ipAddresses.length, 2);
  t.match((await call('POST', '/api/v1/debug/node', { user: 'alicia', name: 'x', routes: ['nope'] })).json, { status: 400, field: 'routes' });
  t.equal((await call('POST', '/api/v1/debug/node', { user: 'ghost', name: 'x' })).status, 404);
  t.equal((await call('GET', '/api/v1/node')).json.nodes.length, 1);
  t.equal((await call('GET', '/api/v1/node?user=alicia')).json.nodes.length, 1);
  t.equal((await call('GET', '/api/v1/node/1')).json.node.givenName, 'my-laptop');
  t.equal((await call('GET', '/api/v1/node/abc')).status, 400);
  t.equal((await call('GET', '/api/v1/node/42')).status, 404);

  const renamed = await call('POST', '/api/v1/node/1/rename/laptop');
  t.equal(renamed.json.node.givenName, 'laptop');
  t.equal(renamed.json.node.name, 'My Laptop', 'only the display name changes');
  t.match((await call('POST', '/api/v1/node/1/rename/Bad_Name')).json, { status: 400, field: 'newName' });
  await call('POST', '/api/v1/debug/node', { user: 'alicia', name: 'other' });
  t.equal((await call('POST', '/api/v1/node/2/rename/laptop')).status, 409);

  t.same((await call('POST', '/api/v1/node/1/tags', { tags: ['tag:web', 'tag:db'] })).json.node.tags, ['tag:db', 'tag:web']);
  t.match((await call('POST', '/api/v1/node/1/tags', { tags: ['web'] })).json, { status: 400, field: 'tags' });
  t.match((await call('POST', '/api/v1/node/1/tags', { tags: 'tag:web' })).json, { status: 400, field: 'tags' });
  const tagged = (await call('GET', '/api/v1/node/1')).json.node;
  t.equal(tagged.user, null, 'a tagged node has no user');
  const untag = await call('POST', '/api/v1/node/1/tags', { tags: [] });
  t.match(untag.json, { status: 400, field: 'tags', detail: /cannot remove all tags from a node/ });
  t.same((await call('GET', '/api/v1/node/1')).json.node.tags, ['tag:db', 'tag:web'], 'a refused untag changes nothing');

  const approved = await call('POST', '/api/v1/node/1/approve_routes', { routes: ['10.0.0.0/24', '::/0'] });
  t.same(approved.json.node.approvedRoutes, ['0.0.0.0/0', '10.0.0.0/24', '::/0']);
  t.same(approved.json.node.subnetRoutes, ['10.0.0.0/24']);
  t.match((await call('POST', '/api/v1/node/1/approve_routes', { routes: ['10.0.0.300/24'] })).json, { status: 400, field: 'routes' });

  const expired = await call('POST', '/api/v1/node/1/expire');
  t.ok(Date.parse(expired.json.node.expiry) <= Date.now());

  t.equal((await call('DELETE', '/api/v1/user/1')).status, 409, 'user still owns nodes');
  t.equal((await call('DELETE', '/api/v1/node/2')).status, 200);
  t.equal((await call('DELETE', '/api/v1/node/2')).status, 404);

  const pak = await call('POST', '/api/v1/preauthkey', { user: '1', reusable: true, expiration: new Date(Date.now() + 3600_000).toISOString(), aclTags: ['tag:web'] });
  t.equal(pak.status, 200);
  t.match(pak.json.preAuthKey.key, /^hwkey-auth-[a-z0-9]{12}-/);
  t.match(pak.json.preAuthKey, { reusable: true, ephemeral: false, used: false, aclTags: ['tag:web'], user: { name: 'alicia' } });
  const listed = await call('GET', '/api/v1/preauthkey?user=alicia');
  t.equal(listed.json.preAuthKeys.length, 1);
  t.match(listed.json.preAuthKeys[0].key, /\*\*\*$/, 'the secret is never listed');
  t.match((await call('POST', '/api/v1/preauthkey', { user: 'alicia', expiration: 'tomorrow' })).json, { status: 400, field: 'expiration' });
  t.match((await call('POST', '/api/v1/preauthkey', { user: 'alicia', aclTags: ['nope'] })).json, { status: 400, field: 'aclTags' });
  t.match((await call('POST', '/api/v1/preauthkey', { user: 'alicia', reusable: 'yes' })).json, { status: 400, field: 'reusable' });
  t.match((await call('POST', '/api/v1/preauthkey', { user: 'alicia', expiration: '2000-01-01T00:00:00Z' })).json, { status: 400, field: 'expiration' });
  const expiredKey = await call('POST', '/api/v1/preauthkey/expire', { id: pak.json.preAuthKey.id });
  t.ok(Date.parse(expiredKey.json.preAuthKey.expiration) <= Date.now());
  t.equal((await call('POST', '/api/v1/preauthkey/expire', { id: 'x' })).status, 400);
  t.equal((await call('DELETE', `/api/v1/preauthkey?id=${pak.json.preAuthKey.id}`)).status, 200);
  t.equal((await call('DELETE', `/api/v1/preauthkey?id=${pak.json.preAuthKey.id}`)).status, 404);

  const ak = await call('POST', '/api/v1/apikey', { expiration: '24h' });
  t.match(ak.json.apiKey, /^hwkey-api-/);
  const aks = await call('GET', '/api/v1/apikey');
  t.equal(aks.json.apiKeys.length, 2);
  // The secret is the last 43 characters (base64url, which may hold '-': split('-').pop() gave a tail of a few
  // characters, or none, that a list could hold by chance).
  t.notOk(JSON.stringify(aks.json).includes(ak.json.apiKey.slice(-43)), 'no secret in the list');
  const prefix = ak.json.apiKey.split('-')[2];
  t.equal((await adminFetch(s, ak.json.apiKey, 'GET', '/api/v1/user')).status, 200, 'new key works');
  t.equal((await call('POST', '/api/v1/apikey/expire', { prefix })).status, 200);
  t.equal((await adminFetch(s, ak.json.apiKey, 'GET', '/api/v1/user')).status, 401, 'expired key refused from then on');
  t.equal((await call('POST', '/api/v1/apikey/expire', {})).status, 400);
  t.equal((await call('DELETE', `/api/v1/apikey/${prefix}`)).status, 200);
  t.equal((await call('DELETE', `/api/v1/apikey/${prefix}`)).status, 404);

  const pol = await call('GET', '/api/v1/policy');
  t.match(pol.json, { policy: '', mode: 'file' });
  const put = await call('PUT', '/api/v1/policy', { policy: '{}' });
  t.equal(put.status, 400);
  t.match(put.json.detail, /policy.mode: database/);
  t.equal((await call('POST', '/api/v1/policy/check', { policy: '{"acls": []}' })).json.valid, true);
  const bad = await call('POST', '/api/v1/policy/check', { policy: '{"acls": [ } ' });
  t.equal(bad.status, 400);
  t.match(bad.json.detail, /line 1/);

  t.same((await call('GET', '/api/v1/health')).json, { databaseConnectivity: true });
  // headscale refuses to delete a user that owns nodes; ?force is not a way around it. (Node 1 is tagged: it is nobody's.)
  t.equal((await call('POST', '/api/v1/debug/node', { user: 'alicia', name: 'kept' })).status, 200);
  const nodesBefore = s.state.nodes.list().length;
  const refused = await call('DELETE', '/api/v1/user/1?force=true');
  t.equal(refused.status, 409);
  t.match(refused.json.detail, /still owns \d+ node/);
  t.equal(s.state.nodes.list().length, nodesBefore, 'a refused delete removed no node');
  t.ok(s.state.users.get(1), 'the user is still there');
  for (const n of s.state.nodes.list({ userId: 1 })) t.equal((await call('DELETE', `/api/v1/node/${n.id}`)).status, 200);
  t.equal((await call('DELETE', '/api/v1/user/1')).status, 200, 'a user without nodes can be deleted');
});

t.test('bodies: size cap before auth, JSON whatever the content type says, JSON shape', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = await withKey(s);
  const big = 'x'.repeat(2 * 1024 * 1024);
  const tooBig = await fetch(s.urls.http + '/api/v1/user', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: `{"name":"${big}"}` });
  t.equal(tooBig.status, 413);
  const form = await fetch(s.urls.http + '/api/v1/user', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=x' });
  t.equal(form.status, 400, 'a body that is not JSON is refused, whatever its type');
  t.match(((await form.json()) as { detail: string }).detail, /^body is not JSON: /);
  const badJson = await fetch(s.urls.http + '/api/v1/user', { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: '{"name":' });
  t.equal(badJson.status, 400);
  t.equal(((await badJson.json()) as { code: string }).code, 'invalid_json');
  const arr = await adminFetch(s, key, 'POST', '/api/v1/user', [1, 2]);
  t.equal(arr.status, 400);
  const snake = await adminFetch(s, key, 'POST', '/api/v1/user', { name: 'carol', display_name: 'Carol' });
  t.equal(snake.json.user.displayName, 'Carol', 'headscale snake_case fields accepted');
  t.equal(s.state.users.list().length, 1, 'bad requests changed nothing');
});

t.test('the unix socket is trusted by file permission', async (t) => {
  const s = await startTestServer({ unix_socket_permission: '0700' });
  t.teardown(() => s.stop());
  const res = await socketRequest('/api/v1/user', 'POST', s.urls.socket!, { name: 'dave' });
  t.equal(res.status, 200);
  t.equal(res.json.user.name, 'dave');
  const { statSync } = await import('node:fs');
  t.equal(statSync(s.urls.socket!).mode & 0o777, 0o700);
});

t.test('metrics on both listeners', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  await s.state.users.create({ name: 'erin' });
  await fetch(s.urls.http + '/health');
  const text = await (await fetch(s.urls.metrics + '/metrics')).text();
  t.match(text, /headway_users 1/);
  t.match(text, /headway_nodes 0/);
  t.match(text, /headway_nodes_online 0/);
  t.match(text, /headway_map_sessions 0/);
  // The user created above may already have gone out as a batch (to no sessions): counts, not exact values.
  t.match(text, /headway_map_batch_seconds_count \d+/, 'batches sent to map sessions, timed');
  t.match(text, /headway_map_batch_window_seconds [\d.]+/);
  t.match(text, /headway_policy_contexts_built \d+/, 'how often the policy was resolved against the whole tailnet');
  t.match(text, /headway_policy_contexts_adopted \d+/, 'how often a new policy was installed with the resolution its check made');
  t.match(text, /headway_http_requests_total\{method="GET",route="\/health",status="200"\} 1/);
  t.match(text, /headway_process_resident_memory_bytes/);
  const v1 = await (await fetch(s.urls.http + '/v1/metrics', { headers: { authorization: `Bearer ${await withKey(s)}` } })).text();
  t.match(v1, /headway_users 1/);
});

t.test('secrets never reach the logs at any level', async (t) => {
  // database.debug: every SQL statement is logged too (values redacted), and must not leak either.
  const s = await startTestServer({ log: { level: 'trace' }, database: { debug: true } });
  t.teardown(() => s.stop());
  const user = await s.state.users.create({ name: 'frank' });
  const api = await withKey(s);
  const pak = await adminFetch(s, api, 'POST', '/api/v1/preauthkey', { user: String(user.id) });
  const { TestDevice } = await import('@headway/testkit');
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'canary' });
  await d.connect();
  await d.register({ authKey: pak.json.preAuthKey.key });
  await d.register({ authKey: pak.json.preAuthKey.key.replace(/.$/, 'Z') });
  d.close();
  await adminFetch(s, api.replace(/.$/, 'Z'), 'GET', '/api/v1/user');
  const logs = s.logs.join('\n');
  t.ok(s.logs.length > 5, 'something was logged');
  t.ok(s.logs.some((l) => / DBG sql .*insert into/i.test(l)), 'SQL statements were logged');
  t.ok(s.logs.some((l) => / DBG ts2021 connection /.test(l)), 'protocol steps were logged');
  for (const secret of [api, pak.json.preAuthKey.key]) {
    // The secret part is the last 43 characters; base64url may contain '-', so
    // split('-').pop() could give a tail of a few characters found in any log.
    const tail = secret.slice(-43);
    t.notOk(logs.includes(tail), 'secret part absent from logs');
  }
});

t.test('a database that stops answering makes /health fail', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop().catch(() => undefined));
  t.same(await (await fetch(s.urls.http + '/health')).json(), { status: 'pass' });
  await s.storage.close();
  const res = await fetch(s.urls.http + '/health');
  t.equal(res.status, 500);
  t.same(await res.json(), { status: 'fail' });
});
