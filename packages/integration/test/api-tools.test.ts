/**
 * What tools built for headscale (web UIs such as headscale-ui, scripts) send and read on /api/v1: JSON bodies
 * whatever their content type says, a `message` beside every problem's `detail`, CORS for configured origins, the
 * pre-auth key in node lists and gets, a lastSeen that stays put while a node is connected, headscale's metric
 * names, /swagger, and /v1/metrics behind an API key on the main listener.
 */
import t from 'tap';
import { BODY_LIMIT } from '@headway/api';
import { TestDevice } from '@headway/testkit';
import { adminFetch, startTestServer } from '../src/server.js';
import { until } from '../src/until.js';
import { repoRoot } from '../src/tailscale.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const json = async (res: Response) => (await res.json()) as Record<string, any>;

t.test('a JSON body is read whatever its Content-Type says; text that is not JSON, or not an object, is a 400 that changes nothing', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const post = (body: string, type?: string) => fetch(s.urls.http + '/api/v1/user', {
    method: 'POST', headers: { authorization: `Bearer ${key}`, ...(type ? { 'content-type': type } : {}) }, body,
  });
  // What a browser labels a string body, and what curl -d sends.
  const browser = await post(JSON.stringify({ name: 'alice' }), 'text/plain;charset=UTF-8');
  t.equal(browser.status, 200);
  t.equal((await json(browser)).user.name, 'alice');
  const form = await post(JSON.stringify({ name: 'bob' }), 'application/x-www-form-urlencoded');
  t.equal(form.status, 200);
  const untyped = await fetch(s.urls.http + '/api/v1/user', { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: new Blob([JSON.stringify({ name: 'carol' })]) });
  t.equal(untyped.status, 200, 'no Content-Type at all');

  const notJson = await post('{"na', 'text/plain');
  t.equal(notJson.status, 400);
  const p = await json(notJson);
  t.equal(p.code, 'invalid_json');
  t.match(p.detail, /^body is not JSON: .+/, 'names the problem and where the parser stopped');
  t.equal(p.message, p.detail);
  for (const [body, found] of [['[1,2]', 'a list'], ['"alice"', 'a string'], ['42', 'a number'], ['null', 'null']]) {
    const res = await post(body!, 'application/json');
    t.equal(res.status, 400, body);
    t.equal((await json(res)).detail, `body must be a JSON object, found ${found}`);
  }
  const tooBig = await post(JSON.stringify({ name: 'x'.repeat(2 * 1024 * 1024) }), 'text/plain');
  t.equal(tooBig.status, 413, 'the size limit holds for any content type');
  t.match((await json(tooBig)).message, /exceeds the 1048576-byte limit/);
  t.same(s.state.users.list().map((u) => u.name).sort(), ['alice', 'bob', 'carol'], 'the refused bodies changed nothing');
});

t.test('every problem carries message (the text of detail): 400, 401, 404, 405, 409, 413 and the fall-throughs', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  await s.state.users.create({ name: 'alice' });
  const bob = await s.state.users.create({ name: 'bob' });
  const auth = { authorization: `Bearer ${key}` };
  const cases: Array<[string, number, string, RequestInit]> = [
    ['/api/v1/user', 401, 'missing API key', {}],
    ['/api/v1/user', 401, 'invalid, expired or revoked API key', { headers: { authorization: 'Bearer hwkey-api-nope' } }],
    ['/api/v1/unknown', 401, 'missing API key', {}],
    ['/api/v1/unknown', 404, 'no route GET /api/v1/unknown', { headers: auth }],
    ['/api/v1/node/99', 404, 'node 99', { headers: auth }],
    ['/api/v1/user', 405, 'PATCH is not allowed', { method: 'PATCH', headers: auth }],
    [`/api/v1/user/${bob.id}/rename/alice`, 409, 'alice', { method: 'POST', headers: auth }],
    ['/api/v1/node/abc', 400, 'id', { headers: auth }],
    ['/api/v1/user', 413, 'limit', { method: 'POST', headers: auth, body: 'x'.repeat(BODY_LIMIT + 1) }],
  ];
  for (const [path, status, text, init] of cases) {
    const res = await fetch(s.urls.http + path, init).catch(() => undefined);
    if (!res) { t.fail(`${path}: no answer`); continue; }
    t.equal(res.status, status, `${init.method ?? 'GET'} ${path}`);
    t.match(res.headers.get('content-type'), /application\/problem\+json/);
    const body = await json(res);
    t.equal(typeof body.message, 'string', `${status}: message present`);
    t.equal(body.message, body.detail, `${status}: message is detail`);
    t.match(body.message, text);
  }
  t.equal(s.state.users.get(bob.id)?.name, 'bob', 'the refused rename changed nothing');
});

t.test('CORS: a listed origin gets preflights and allow headers on answers and errors; others get none', async (t) => {
  const ui = 'http://127.0.0.1:3000';
  const s = await startTestServer({ api: { cors: { allowed_origins: [ui] } } });
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const preflight = (origin: string, method = 'POST') => fetch(s.urls.http + '/api/v1/user', {
    method: 'OPTIONS', headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization,content-type' },
  });
  const ok = await preflight(ui);
  t.equal(ok.status, 204);
  t.equal(ok.headers.get('access-control-allow-origin'), ui, 'the exact origin, never *');
  t.match(ok.headers.get('access-control-allow-methods'), /GET, POST, PUT, DELETE, PATCH/);
  t.equal((await preflight(ui, 'PATCH')).status, 204, "PATCH, which /api/v2's settings take");
  t.match(ok.headers.get('access-control-allow-headers'), /Authorization, Content-Type/);
  t.equal(ok.headers.get('access-control-allow-credentials'), null, 'no credentials: the page sends its own bearer key');
  t.match(ok.headers.get('vary'), /Origin/);

  const other = await preflight('http://127.0.0.1:3001');
  t.equal(other.headers.get('access-control-allow-origin'), null, 'an unlisted origin gets no allow header');
  t.equal(other.headers.get('access-control-allow-methods'), null);
  t.match(other.headers.get('vary'), /Origin/);
  const trace = await preflight(ui, 'TRACE');
  t.equal(trace.headers.get('access-control-allow-methods'), null, 'a method the API does not serve is not allowed');

  const created = await fetch(s.urls.http + '/api/v1/user', { method: 'POST', headers: { origin: ui, authorization: `Bearer ${key}` }, body: JSON.stringify({ name: 'alice' }) });
  t.equal(created.status, 200);
  t.equal(created.headers.get('access-control-allow-origin'), ui);
  const denied = await fetch(s.urls.http + '/api/v1/user', { headers: { origin: ui } });
  t.equal(denied.status, 401);
  t.equal(denied.headers.get('access-control-allow-origin'), ui, 'errors are readable by the listed page too');
  const stranger = await fetch(s.urls.http + '/api/v1/user', { headers: { origin: 'http://evil.test', authorization: `Bearer ${key}` } });
  t.equal(stranger.headers.get('access-control-allow-origin'), null);
  const outside = await fetch(s.urls.http + '/health', { headers: { origin: ui } });
  t.equal(outside.headers.get('access-control-allow-origin'), null, 'only /api/ paths');

  const plain = await startTestServer();
  t.teardown(() => plain.stop());
  const none = await fetch(plain.urls.http + '/api/v1/user', { method: 'OPTIONS', headers: { origin: ui, 'access-control-request-method': 'GET' } });
  t.equal(none.headers.get('access-control-allow-origin'), null, 'no CORS unless configured');
});

t.test('node list and get carry the pre-auth key a node registered with; lastSeen stays at the connect time while connected', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const alice = await s.state.users.create({ name: 'alice' });
  const pak = await adminFetch(s, key, 'POST', '/api/v1/preauthkey', { user: String(alice.id) });
  let clock = new Date('2030-01-01T10:00:00.000Z');
  s.state.presence.now = () => clock;
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'alpha' });
  t.teardown(() => d.close());
  await d.connect();
  await d.register({ authKey: pak.json.preAuthKey.key });
  await d.startMap();
  await until('alpha online', () => s.state.presence.isOnline(1));

  const list = await adminFetch(s, key, 'GET', '/api/v1/node');
  t.equal(list.status, 200);
  const node = list.json.nodes[0];
  t.match(node.preAuthKey, { id: pak.json.preAuthKey.id, user: { name: 'alice' }, reusable: false, used: true, aclTags: [] });
  t.match(node.preAuthKey.key, /^hwkey-auth-[A-Za-z0-9]+-\*\*\*$/, 'redacted, as in the key list');
  t.same((await adminFetch(s, key, 'GET', `/api/v1/node/${node.id}`)).json.node.preAuthKey, node.preAuthKey, 'node get has it too');

  t.equal(node.lastSeen, '2030-01-01T10:00:00.000Z', 'the connect time');
  clock = new Date('2030-01-01T11:00:00.000Z');
  t.equal((await adminFetch(s, key, 'GET', `/api/v1/node/${node.id}`)).json.node.lastSeen, '2030-01-01T10:00:00.000Z', 'asking later while connected gives the same time');
  d.stopMap();
  await until('alpha offline', () => !s.state.presence.isOnline(1));
  await until('lastSeen stored', async () => (await adminFetch(s, key, 'GET', '/api/v1/node/1')).json.node.lastSeen === '2030-01-01T11:00:00.000Z');
  t.pass('the disconnect time after the session closed');

  const other = await s.state.users.create({ name: 'bob' });
  const registered = await s.state.nodes.create({ machineKey: `mkey:${'1'.repeat(64)}`, nodeKey: `nodekey:${'2'.repeat(64)}`, hostname: 'bravo', userId: other.id, registerMethod: 'cli' });
  const bravo = (await adminFetch(s, key, 'GET', `/api/v1/node/${registered.id}`)).json.node;
  t.equal(bravo.preAuthKey, undefined, 'a node that logged in otherwise has none');
});

t.test('headscale metric names next to Headway\'s on both listeners, unless metrics.headscale_names is off', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  await s.state.users.create({ name: 'alice' });
  const text = await (await fetch(s.urls.metrics + '/metrics')).text();
  t.match(text, /^# TYPE headscale_nodestore_nodes gauge$/m);
  t.match(text, /^headscale_nodestore_nodes 0$/m);
  t.match(text, /^# TYPE headscale_mapresponse_sent_total counter$/m);
  t.match(text, /^# TYPE headscale_mapresponse_generated_total counter$/m);
  t.match(text, /^# TYPE process_cpu_seconds_total counter$/m);
  const cpu = Number(/^process_cpu_seconds_total ([\d.e+-]+)$/m.exec(text)?.[1]);
  t.ok(cpu > 0, 'process_cpu_seconds_total carries headway_process_cpu_seconds_total\'s value');
  t.match(text, /^headway_nodes 0$/m, 'Headway\'s own names stay');
  const dashboard = readFileSync(join(repoRoot(), 'docs', 'grafana-headscale-names.json'), 'utf8');
  const used = new Set([...dashboard.matchAll(/\b((?:headscale|process)_[a-z_]+)\{/g)].map((m) => m[1]!));
  t.ok(used.size >= 5, `the dashboard reads ${[...used].join(', ')}`);
  for (const name of used) t.match(text, new RegExp(`^# TYPE ${name} `, 'm'), `the dashboard's ${name} is published`);
  const off = await startTestServer({ metrics: { headscale_names: false } });
  t.teardown(() => off.stop());
  t.notMatch(await (await fetch(off.urls.metrics + '/metrics')).text(), /headscale_|^process_/m);
});

t.test('/swagger leads to the API reference page', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const res = await fetch(s.urls.http + '/swagger', { redirect: 'manual' });
  t.equal(res.status, 308);
  t.equal(res.headers.get('location'), '/api/v1/docs');
  const page = await fetch(s.urls.http + '/swagger');
  t.equal(page.status, 200);
  t.match(await page.text(), /<html/i);
});

t.test('/v1/metrics on the main listener needs an API key unless configuration opens it; metrics_listen_addr stays open', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const anon = await fetch(s.urls.http + '/v1/metrics');
  t.equal(anon.status, 401);
  const body = await json(anon);
  t.equal(body.message, body.detail);
  t.notMatch(JSON.stringify(body), /headway_users/);
  const keyed = await fetch(s.urls.http + '/v1/metrics', { headers: { authorization: `Bearer ${key}` } });
  t.equal(keyed.status, 200);
  t.match(await keyed.text(), /^headway_users 0$/m);
  t.equal((await fetch(s.urls.metrics + '/metrics')).status, 200, 'the metrics listener needs no key');

  const open = await startTestServer({ metrics: { require_api_key: false } });
  t.teardown(() => open.stop());
  t.equal((await fetch(open.urls.http + '/v1/metrics')).status, 200, 'metrics.require_api_key: false opens it');
  const hidden = await startTestServer({ metrics: { public_endpoint: false } });
  t.teardown(() => hidden.stop());
  t.equal((await fetch(hidden.urls.http + '/v1/metrics', { headers: { authorization: `Bearer ${(await hidden.state.keys.createApiKey(null)).secret}` } })).status, 404, 'metrics.public_endpoint: false hides it');
});
