/**
 * Bad input (hostile bodies, paths and queries on every route): each is a 4xx naming what was wrong, never a 500,
 * and nothing changes.
 */
import t from 'tap';
import net from 'node:net';
import { ROUTES } from '@headway/api';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';

async function setUp(t: { teardown(fn: () => unknown): void }, config: Record<string, unknown> = {}): Promise<{ s: TestServer; call: (m: string, p: string, b?: unknown) => Promise<{ status: number; json: any }> }> {
  const s = await startTestServer(config);
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  return { s, call: (m, p, b) => adminFetch(s, key, m, p, b) };
}

t.test('an expiration past year 9999 or on a day that does not exist is a 400 naming the field, and creates nothing', async (t) => {
  const { s, call } = await setUp(t);
  await call('POST', '/api/v1/user', { name: 'alice' });
  const keysBefore = (await s.state.keys.listApiKeys()).length;
  for (const expiration of ['2100-02-29T00:00:00Z', '999999999999h', '100000000d', '10000-01-01T00:00:00Z', '2030-02-31T10:00:00Z', '2030-04-31T10:00:00Z', '2030-01-01T24:00:00Z', '2030-13-01T00:00:00Z', '2030-01-01T10:60:00Z', '2030-01-01T10:00:00+24:00']) {
    const pak = await call('POST', '/api/v1/preauthkey', { user: 'alice', expiration });
    t.match(pak, { status: 400, json: { code: 'invalid_field', field: 'expiration' } }, `pre-auth key, ${expiration}`);
    const api = await call('POST', '/api/v1/apikey', { expiration });
    t.match(api, { status: 400, json: { code: 'invalid_field', field: 'expiration' } }, `API key, ${expiration}`);
  }
  t.equal((await s.state.keys.listPreAuthKeys()).length, 0, 'no pre-auth key was made');
  t.equal((await s.state.keys.listApiKeys()).length, keysBefore, 'no API key was made');
  // What does exist still works: a leap day, a zone offset, the last second, a long but storable duration.
  for (const [expiration, want] of [['2028-02-29T12:00:00Z', '2028-02-29T12:00:00.000Z'], ['2400-02-29T00:00:00Z', '2400-02-29T00:00:00.000Z'], ['2030-01-31T10:00:00+02:00', '2030-01-31T08:00:00.000Z'], ['9999-12-31T23:59:59Z', '9999-12-31T23:59:59.000Z']]) {
    const pak = await call('POST', '/api/v1/preauthkey', { user: 'alice', expiration });
    t.equal(pak.json.preAuthKey?.expiration, want, expiration);
  }
  t.equal((await call('POST', '/api/v1/apikey', { expiration: '87600h' })).status, 200, 'ten years from now');
});

t.test('a node expiry on a day that does not exist is a 400 and leaves the node as it was', async (t) => {
  const { call } = await setUp(t);
  await call('POST', '/api/v1/user', { name: 'alice' });
  const before = (await call('POST', '/api/v1/debug/node', { user: 'alice', name: 'laptop' })).json.node;
  for (const expiry of ['2030-02-31T10:00:00Z', '2030-01-01T24:00:00Z', '2030-02-29T00:00:00Z']) {
    t.match(await call('POST', `/api/v1/node/1/expire?expiry=${encodeURIComponent(expiry)}`), { status: 400, json: { field: 'expiry' } }, `query ${expiry}`);
    t.match(await call('POST', '/api/v1/node/1/expire', { expiry }), { status: 400, json: { field: 'expiry' } }, `body ${expiry}`);
  }
  t.equal((await call('GET', '/api/v1/node/1')).json.node.expiry, before.expiry, 'expiry unchanged');
  const set = await call('POST', '/api/v1/node/1/expire?expiry=2032-02-29T00:00:00Z');
  t.equal(set.json.node.expiry, '2032-02-29T00:00:00.000Z', 'a leap day is taken');
});

t.test('an id past 2^53 - 1 is a 400, not another id it rounds to', async (t) => {
  const { call } = await setUp(t);
  for (const id of ['9007199254740993', '99999999999999999999']) {
    const r = await call('GET', `/api/v1/node/${id}`);
    t.match(r, { status: 400, json: { field: 'id' } }, id);
    t.match(r.json.detail, /too large/);
  }
  t.equal((await call('GET', '/api/v1/node/9007199254740991')).status, 404, 'the largest safe id is an id');
});

t.test('a blank approved route is a 400 and keeps the approvals; an empty list still removes them', async (t) => {
  const { call } = await setUp(t);
  await call('POST', '/api/v1/user', { name: 'alice' });
  await call('POST', '/api/v1/debug/node', { user: 'alice', name: 'router', routes: ['10.0.0.0/24'] });
  t.same((await call('POST', '/api/v1/node/1/approve_routes', { routes: ['10.0.0.0/24'] })).json.node.approvedRoutes, ['10.0.0.0/24']);
  for (const routes of [[''], [' '], ['10.0.0.0/24', '']]) {
    const r = await call('POST', '/api/v1/node/1/approve_routes', { routes });
    t.match(r, { status: 400, json: { field: 'routes' } }, JSON.stringify(routes));
    t.match(r.json.detail, /empty/);
  }
  t.same((await call('GET', '/api/v1/node/1')).json.node.approvedRoutes, ['10.0.0.0/24'], 'approvals kept');
  t.same((await call('POST', '/api/v1/node/1/approve_routes', { routes: [] })).json.node.approvedRoutes, []);
});

t.test('a policy nested thousands deep is a 400 naming the nesting, on check and on set', async (t) => {
  const { call } = await setUp(t, { policy: { mode: 'database' } });
  const before = (await call('GET', '/api/v1/policy')).json.policy;
  const policy = `{"acls":${'['.repeat(8000)}${']'.repeat(8000)}}`;
  for (const path of ['/api/v1/policy/check', '/api/v1/policy']) {
    const r = await call(path.endsWith('check') ? 'POST' : 'PUT', path, { policy });
    t.equal(r.status, 400, path);
    t.match(r.json.detail, /nest deeper than 200 levels/, path);
  }
  t.equal((await call('GET', '/api/v1/policy')).json.policy, before, 'policy unchanged');
});

t.test('a client that closes the connection inside its body is no server error', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const { hostname, port } = new URL(s.urls.http);
  await new Promise<void>((resolve, reject) => {
    const sock = net.connect(Number(port), hostname, () => {
      sock.write(`POST /api/v1/user HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":"al`);
      setTimeout(() => { sock.destroy(); resolve(); }, 200);
    });
    sock.on('error', reject);
  });
  // The server notices the reset asynchronously: wait for the request to be counted.
  let metrics = '';
  for (let k = 0; k < 50 && !/route="\/api\/v1\/user"/.test(metrics); k++) {
    await new Promise((r) => setTimeout(r, 50));
    metrics = await (await fetch(s.urls.metrics + '/metrics')).text();
  }
  t.match(metrics, /headway_http_requests_total\{method="POST",route="\/api\/v1\/user",status="400"\} 1/, 'counted as a bad request');
  t.notMatch(metrics, /status="500"/, 'no 500');
  t.notOk(s.logs.some((l) => /request failed/.test(l)), 'no internal error logged');
  t.equal(s.state.users.list().length, 0, 'no user made');
});

t.test('node expire refuses a parameter it does not know or a bare flag instead of expiring the node now', async (t) => {
  const { call } = await setUp(t);
  await call('POST', '/api/v1/user', { name: 'alice' });
  await call('POST', '/api/v1/debug/node', { user: 'alice', name: 'laptop' });
  const before = (await call('GET', '/api/v1/node/1')).json.node.expiry;
  const cases: Array<[string, unknown, string, RegExp]> = [
    ['?expires=2031-01-01T00:00:00Z', undefined, 'expires', /unknown field/],
    ['?disableExpiry', undefined, 'disableExpiry', /expected true or false, found ""/],
    ['?disableExpiry=yes', undefined, 'disableExpiry', /expected true or false/],
    ['', { expires: '2031-01-01T00:00:00Z' }, 'expires', /unknown field/],
  ];
  for (const [query, body, field, detail] of cases) {
    const r = await call('POST', `/api/v1/node/1/expire${query}`, body);
    t.match(r, { status: 400, json: { field } }, query || JSON.stringify(body));
    t.match(r.json.detail, detail);
  }
  t.equal((await call('GET', '/api/v1/node/1')).json.node.expiry, before, 'not expired');
  // headscale's gateway takes the proto names in query strings too.
  t.equal((await call('POST', '/api/v1/node/1/expire?expiry=2031-01-01T00:00:00Z')).json.node.expiry, '2031-01-01T00:00:00.000Z');
  t.equal((await call('POST', '/api/v1/node/1/expire?disable_expiry=true')).json.node.expiry, null, 'disable_expiry read as disableExpiry');
  t.equal((await call('DELETE', '/api/v1/user/1?delete_nodes=true')).status, 200, 'delete_nodes read as deleteNodes');
  t.equal((await call('GET', '/api/v1/node')).json.nodes.length, 0);
});

t.test('a not-found answer does not echo a kilobytes-long id whole', async (t) => {
  const { call } = await setUp(t);
  const r = await call('DELETE', `/api/v1/apikey/${'a'.repeat(5000)}`);
  t.equal(r.status, 404);
  t.equal(r.json.detail, `API key ${'a'.repeat(80)}… not found`);
});

t.test('a policy naming Object.prototype\'s members, or repeating an alias thousands of times, is handled as any other', async (t) => {
  const { s, call } = await setUp(t, { policy: { mode: 'database' } });
  await call('POST', '/api/v1/user', { name: 'alice' });
  await call('POST', '/api/v1/debug/node', { user: 'alice', name: 'one' });
  await call('POST', '/api/v1/debug/node', { user: 'alice', name: 'two' });
  const before = (await call('GET', '/api/v1/policy')).json.policy;
  // Accepted, then every node's filter failed to compile (all devices cut off); or a 500 on check and set.
  for (const policy of [
    '{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}],"ssh":[{"action":"accept","src":["constructor"],"dst":["autogroup:self"],"users":["root"]}]}',
    '{"nodeAttrs":[{"target":["constructor"],"attr":["funnel"]}]}',
    '{"acls":[{"action":"accept","src":["*"],"dst":["toString:*"]}]}',
    '{"grants":[{"src":["*"],"dst":["constructor"],"ip":["*"]}]}',
  ]) {
    for (const path of ['/api/v1/policy/check', '/api/v1/policy']) {
      const r = await call(path.endsWith('check') ? 'POST' : 'PUT', path, { policy });
      t.equal(r.status, 400, `${path}: ${policy.slice(0, 70)}`);
      t.match(r.json.detail, /host "(constructor|toString)" not found/);
    }
  }
  t.equal((await call('GET', '/api/v1/policy')).json.policy, before, 'policy unchanged');
  t.notOk(s.logs.some((l) => / ERR /.test(l)), 'nothing logged as a server error');
  // Accepted, and compiled once per list: 2,000 repeats on each side must not hold the server.
  const repeated = JSON.stringify({ acls: [{ action: 'accept', src: Array(2000).fill('alice@'), dst: Array(2000).fill('alice@:*') }] });
  const set = await call('PUT', '/api/v1/policy', { policy: repeated });
  t.equal(set.status, 200, set.json.detail ?? 'set');
  t.equal((await call('GET', '/api/v1/node')).json.nodes.length, 2, 'nodes still listed');
});

t.test('a user\'s display name and e-mail address are bounded as a provider\'s are (255 characters)', async (t) => {
  const { s, call } = await setUp(t);
  const long = await call('POST', '/api/v1/user', { name: 'alice', displayName: 'x'.repeat(100_000) });
  t.equal(long.status, 400);
  t.match(long.json.detail, /^displayName: must be at most 255 characters, found 100000/);
  const mail = await call('POST', '/api/v1/user', { name: 'alice', email: `${'x'.repeat(300)}@example.com` });
  t.equal(mail.status, 400);
  t.match(mail.json.detail, /^email: must be at most 255 characters/);
  t.same(s.state.users.list(), [], 'no user was made');
  t.equal((await call('POST', '/api/v1/user', { name: 'alice', displayName: 'x'.repeat(255) })).status, 200, '255 is fine');
});

/** deepList is `levels` lists around "x", as JSON text: a body that deep cannot go through JSON.stringify. */
const deepList = (levels: number) => `${'['.repeat(levels)}"x"${']'.repeat(levels)}`;
const deepObject = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;

/** rawCall sends `body` as it is (adminFetch would JSON.stringify it). */
async function rawCall(s: TestServer, key: string, method: string, path: string, body: string): Promise<{ status: number; json: any }> {
  const res = await fetch(s.urls.http + path, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text) };
}

t.test('drive access nested 5,000 deep answered 500 "Maximum call stack size exceeded" (the error message stringified it); every route answers 400', async (t) => {
  const { s } = await setUp(t);
  const key = (await s.state.keys.createApiKey(null)).secret;
  const grant = (access: string) => `{"src":"user:alice","dst":"node:nas","access":${access}}`;
  for (const levels of [3_000, 5_000, 100_000]) {
    for (const [shape, value] of [['lists', deepList(levels)], ['objects', deepObject(levels)]] as const) {
      const r = await rawCall(s, key, 'POST', '/api/v1/drive', grant(value));
      t.match(r, { status: 400, json: { code: 'invalid_json' } }, `drive access, ${levels} levels of ${shape}`);
      t.match(r.json.detail, /nest deeper than 64 levels/);
    }
  }
  // Up to the cap the body reaches validation, whose message quotes the value cut short.
  const atCap = await rawCall(s, key, 'POST', '/api/v1/drive', grant(deepList(63)));
  t.match(atCap, { status: 400, json: { code: 'invalid_field', field: 'access' } }, '64 levels in all reach the field check');
  t.match(atCap.json.detail, /^access: expected "ro" or "rw", found "\[\[\[.*\.\.\. \(more than 80 characters\)$/, 'which quotes 80 characters of it');

  let routes = 0;
  for (const r of ROUTES) {
    if (!r.body) continue;
    const path = r.path.replace(/:[A-Za-z]+/g, '1');
    const shape = (r.body as { shape?: Record<string, unknown> }).shape;
    const field = shape ? Object.keys(shape)[0] ?? 'x' : 'x';
    for (const levels of [5_000, 100_000]) {
      const res = await rawCall(s, key, r.method, path, `{${JSON.stringify(field)}:${deepList(levels)}}`);
      t.equal(res.status, 400, `${r.method} ${r.path}: ${field} ${levels} levels deep`);
      t.match(res.json.detail, /nest deeper than 64 levels/, `${r.method} ${r.path}: says why`);
    }
    routes++;
  }
  t.ok(routes >= 10, `every route with a body was tried (${routes})`);
  t.equal(s.state.users.list().length, 0, 'nothing was created');
});

// A policy with several errors is refused naming all of them, each with what to write instead.
t.test('an invalid policy is refused with every error, each saying what was likely meant; the detail lists 20', async (t) => {
  const { call } = await setUp(t, { policy: { mode: 'database' } });
  const before = (await call('GET', '/api/v1/policy')).json.policy;
  const policy = '{"acls":[{"action":"allow","src":["group:admin"],"dst":["*:*"]}],"groups":{"group:admins":["a@"]}}';
  const want = [
    'line 1, column 20: action="allow" is not supported; did you mean "accept"?',
    'line 1, column 10: group "group:admin" not found; did you mean "group:admins"?',
  ];
  for (const path of ['/api/v1/policy/check', '/api/v1/policy']) {
    const r = await call(path.endsWith('check') ? 'POST' : 'PUT', path, { policy });
    t.equal(r.status, 400, path);
    t.same(r.json.errors, want, path);
    t.equal(r.json.detail, `2 errors: ${want.join('; ')}`, path);
  }
  const many = JSON.stringify({ acls: Array.from({ length: 25 }, (_, k) => ({ action: 'accept', src: [`group:g${k}`], dst: ['*:*'] })) });
  const r = await call('PUT', '/api/v1/policy', { policy: many });
  t.equal(r.status, 400);
  t.equal(r.json.errors.length, 25, 'the list has them all');
  t.match(r.json.detail, /^25 errors: line 1, column \d+: group "group:g0" not found; .*group "group:g19" not found; and 5 more errors$/);
  t.notMatch(r.json.detail, /group:g20/, 'the detail stops at 20');
  t.equal((await call('GET', '/api/v1/policy')).json.policy, before, 'policy unchanged');
});
