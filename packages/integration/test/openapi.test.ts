import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { DOC_PATHS, ProblemSchema, ROUTES, SCOPE_RESOURCES, V2_ROUTES, V2_TAGS, errorStatuses, openApiDocument, openApiPath, scopeName, type Route } from '@headway/api';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

/*
 * The API contract against the running server: every route is called with valid data
 * (and with bad data) on a real server with SQLite, and each answer is checked against
 * the schema the document declares for that operation and status, twice: with the zod
 * schema the server code holds, and with the served document's own JSON Schema (what a
 * client generated from it would expect). Undeclared fields fail: response objects are
 * closed (additionalProperties: false).
 */

type Doc = { paths: Record<string, Record<string, { responses: Record<string, unknown> }>>; components: { responses: Record<string, unknown> } };

interface Call { status: number; json: any; contentType: string }

function request(s: TestServer, key: string | null, method: string, path: string, body?: unknown, socket = false): Promise<Call> {
  const payload = body === undefined ? undefined : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  const headers: Record<string, string> = {};
  if (key) headers.authorization = `Bearer ${key}`;
  if (payload) { headers['content-type'] = 'application/json'; headers['content-length'] = String(payload.length); }
  const url = new URL(path, s.urls.http);
  const options: http.RequestOptions = socket
    ? { socketPath: s.urls.socket!, path, method, headers }
    : { hostname: url.hostname, port: url.port, path: url.pathname + url.search, method, headers };
  return new Promise((resolve, reject) => {
    const req = http.request(options, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        let json: unknown;
        try { json = text ? JSON.parse(text) : undefined; } catch { json = text; }
        resolve({ status: res.statusCode ?? 0, json, contentType: String(res.headers['content-type'] ?? '') });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** matches tells whether a concrete path fits a route's koa pattern. */
function matches(r: Route, path: string): boolean {
  const re = new RegExp(`^${r.path.replace(/:[A-Za-z_]+/g, '[^/]+')}$`);
  return re.test(path.split('?')[0]!);
}

/** ContractChecker validates answers against the declared schemas and records which operations and statuses were seen. */
class ContractChecker {
  readonly seen = new Map<string, Set<number>>();
  private readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });

  constructor(private readonly t: Test, private readonly doc: Doc) {
    this.ajv.addSchema(doc as object, 'openapi.json');
  }

  /** jsonSchemaFor finds the document's schema for an operation's answer with `status`, following a response $ref. */
  private jsonSchemaRef(r: Route, status: number): string | undefined {
    const pointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');
    const op = this.doc.paths[openApiPath(r.path)]?.[r.method.toLowerCase()];
    let response = op?.responses[String(status)] as { $ref?: string; content?: Record<string, unknown> } | undefined;
    let base = `#/paths/${pointer(openApiPath(r.path))}/${r.method.toLowerCase()}/responses/${status}`;
    if (response?.$ref) {
      base = response.$ref;
      response = this.doc.components.responses[response.$ref.split('/').pop()!] as typeof response;
    }
    if (!response?.content) return undefined;
    const media = Object.keys(response.content)[0]!;
    return `openapi.json${base}/content/${pointer(media)}/schema`;
  }

  check(r: Route, call: Call, label: string): void {
    const { t } = this;
    const where = `${r.operationId} ${label} → ${call.status}`;
    (this.seen.get(r.operationId) ?? this.seen.set(r.operationId, new Set()).get(r.operationId)!).add(call.status);
    const ok = call.status === 200 || call.status === r.also?.status;
    if (ok) {
      t.match(call.contentType, /^application\/json/, `${where}: JSON`);
      const parsed = r.response.safeParse(call.json);
      t.ok(parsed.success, `${where}: matches the zod response schema`, parsed.success ? {} : { issues: parsed.error.issues, body: call.json });
      // zod drops keys it does not know; equal after parsing means the server sent none.
      if (parsed.success) t.same(parsed.data, call.json, `${where}: no undeclared fields`);
    } else {
      t.ok((errorStatuses(r) as number[]).includes(call.status), `${where}: status is declared`, { declared: errorStatuses(r), body: call.json });
      t.match(call.contentType, /^application\/problem\+json/, `${where}: problem content type`);
      const parsed = ProblemSchema.safeParse(call.json);
      t.ok(parsed.success, `${where}: matches the Problem schema`, parsed.success ? {} : { issues: parsed.error.issues });
      if (parsed.success) t.same(parsed.data, call.json, `${where}: no undeclared problem fields`);
    }
    const ref = this.jsonSchemaRef(r, call.status);
    t.ok(ref, `${where}: the document declares this status with a body`);
    if (ref) {
      const validate = this.ajv.getSchema(ref);
      t.ok(validate, `${where}: schema compiles`);
      if (validate) t.ok(validate(call.json), `${where}: matches the document's JSON Schema`, { errors: validate.errors, body: call.json });
    }
  }
}

t.test('every route answers what the document declares (schema and handler agree)', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' }, unix_socket_permission: '0700', plugins: [{ package: '@headway/drive-db', port: 'drive' }] });
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const doc = (await request(s, null, 'GET', DOC_PATHS.document)).json as Doc;
  const checker = new ContractChecker(t, doc);
  const byId = new Map(ROUTES.map((r) => [r.operationId, r]));
  const call = async (operationId: string, method: string, path: string, body?: unknown, opts: { key?: string | null; socket?: boolean } = {}) => {
    const r = byId.get(operationId);
    if (!r) throw new Error(`no route ${operationId}`);
    t.equal(method, r.method, `${operationId} is ${r.method}`);
    t.ok(matches(r, path), `${path} is ${r.path}`);
    const res = await request(s, opts.key === undefined ? key : opts.key, method, path, body, opts.socket);
    checker.check(r, res, `${method} ${path}`);
    return res;
  };
  const ok = async (operationId: string, method: string, path: string, body?: unknown) => {
    const res = await call(operationId, method, path, body);
    t.equal(res.status, 200, `${operationId}: 200`, { body: res.json });
    return res.json;
  };
  // Problems: each is a declared status with a Problem body.
  const problem = async (operationId: string, method: string, path: string, body: unknown, status: number, field?: string) => {
    const res = await call(operationId, method, path, body);
    t.equal(res.status, status, `${operationId} ${path}: ${status}`, { body: res.json });
    if (field) t.equal(res.json.field, field, `${operationId}: names ${field}`);
    return res.json;
  };

  // Users.
  const alice = (await ok('createUser', 'POST', '/api/v1/user', { name: 'alice', displayName: 'Alice', email: 'alice@example.com' })).user;
  t.same(Object.keys(alice).sort(), ['createdAt', 'displayName', 'email', 'groups', 'id', 'name', 'profilePicUrl', 'provider', 'providerId'], 'the user shape: headscale\'s fields plus the provider\'s groups');
  await ok('createUser', 'POST', '/api/v1/user', { name: 'carol', pictureUrl: 'https://example.com/c.png' });
  await ok('linkUser', 'POST', `/api/v1/user/${alice.id}/link`, { subject: '248289761001', issuer: 'https://idp.example.com' });
  await ok('createUser', 'POST', '/api/v1/user', { name: 'bob', display_name: null, email: null });
  await ok('listUsers', 'GET', '/api/v1/user');
  t.equal((await ok('listUsers', 'GET', `/api/v1/user?id=${alice.id}&name=alice&email=`)).users.length, 1);
  await ok('renameUser', 'POST', `/api/v1/user/${alice.id}/rename/alicia`);

  // Nodes.
  const node = (await ok('createDebugNode', 'POST', '/api/v1/debug/node', { user: 'alicia', name: 'laptop', routes: ['10.0.0.0/24'] })).node;
  t.same(node.user.name, 'alicia');
  await ok('createDebugNode', 'POST', '/api/v1/debug/node', { user: Number(alice.id), name: 'phone', key: `mkey:${'ab'.repeat(32)}` });
  await ok('listNodes', 'GET', '/api/v1/node');
  await ok('listNodes', 'GET', '/api/v1/node?user=alicia');
  await ok('getNode', 'GET', `/api/v1/node/${node.id}`);
  await ok('renameNode', 'POST', `/api/v1/node/${node.id}/rename/laptop2`);
  const expired = (await ok('expireNode', 'POST', `/api/v1/node/${node.id}/expire`)).node;
  t.match(expired.expiry, /Z$/, 'an expired node has an RFC 3339 expiry');
  await ok('setNodeTags', 'POST', `/api/v1/node/${node.id}/tags`, { tags: ['tag:web'] });
  await ok('approveNodeRoutes', 'POST', `/api/v1/node/${node.id}/approve_routes`, { routes: ['10.0.0.0/24'] });
  await ok('backfillNodeIps', 'POST', '/api/v1/node/backfillips');

  // An interactive registration approved through the API.
  const device = new TestDevice({ serverUrl: s.urls.http, hostname: 'desk' });
  t.teardown(() => device.close());
  await device.connect();
  const first = await device.register({}) as { AuthURL: string };
  const regKey = first.AuthURL.split('/').pop()!;
  const registered = (await ok('registerNode', 'POST', `/api/v1/node/register?user=alicia&key=${regKey}`)).node;
  t.equal(registered.registerMethod, 'REGISTER_METHOD_CLI');

  // headscale 0.29's auth endpoints: register a new device, approve a known one logging in again, reject one.
  const pending = async (d: TestDevice, again = false) => {
    const first = (again ? await d.rotateNodeKey({}) : await d.register({})) as { AuthURL: string };
    const followup = d.register({ followup: first.AuthURL });
    return { authId: first.AuthURL.split('/').pop()!, followup };
  };
  const tablet = new TestDevice({ serverUrl: s.urls.http, hostname: 'tablet' });
  t.teardown(() => tablet.close());
  await tablet.connect();
  const p1 = await pending(tablet);
  const tabletNode = (await ok('authRegister', 'POST', '/api/v1/auth/register', { authId: p1.authId, user: 'alicia' })).node;
  await p1.followup;
  await s.state.nodes.expire(Number(tabletNode.id), new Date());
  const p2 = await pending(tablet, true);
  await ok('authApprove', 'POST', '/api/v1/auth/approve', { authId: p2.authId });
  await p2.followup;
  const stranger = new TestDevice({ serverUrl: s.urls.http, hostname: 'stranger' });
  t.teardown(() => stranger.close());
  await stranger.connect();
  const p3 = await pending(stranger);
  await ok('authReject', 'POST', '/api/v1/auth/reject', { authId: p3.authId });
  await p3.followup;
  await problem('authReject', 'POST', '/api/v1/auth/reject', { authId: p3.authId }, 404);

  // Taildrive grants (the database drive adapter is listed under plugins:).
  const grant = (await ok('grantDrive', 'POST', '/api/v1/drive', { src: 'alicia', dst: `node:${registered.id}`, shares: ['docs'] })).grant;
  t.equal(grant.access, 'ro', 'read-only by default');
  t.equal((await ok('listDriveGrants', 'GET', '/api/v1/drive')).grants.length, 1);
  await ok('revokeDrive', 'DELETE', `/api/v1/drive/${grant.id}`);
  await problem('grantDrive', 'POST', '/api/v1/drive', { src: 'alicia', dst: 'nas', acess: 'rw' }, 400, 'acess');

  // Pre-auth keys.
  const pak = (await ok('createPreAuthKey', 'POST', '/api/v1/preauthkey', { user: 'alicia', reusable: true, ephemeral: false, expiration: '24h', aclTags: ['tag:web'] })).preAuthKey;
  await ok('createPreAuthKey', 'POST', '/api/v1/preauthkey', { aclTags: ['tag:web'], expiration: null });
  await ok('listPreAuthKeys', 'GET', '/api/v1/preauthkey');
  await ok('listPreAuthKeys', 'GET', '/api/v1/preauthkey?user=alicia');
  await ok('expirePreAuthKey', 'POST', '/api/v1/preauthkey/expire', { id: pak.id });
  await ok('expirePreAuthKey', 'POST', '/api/v1/preauthkey/expire', { id: Number(pak.id) });
  await ok('deletePreAuthKey', 'DELETE', `/api/v1/preauthkey?id=${pak.id}`);

  // API keys.
  const apiKey = (await ok('createApiKey', 'POST', '/api/v1/apikey', { expiration: '24h' })).apiKey as string;
  await ok('createApiKey', 'POST', '/api/v1/apikey');
  const listed = (await ok('listApiKeys', 'GET', '/api/v1/apikey')).apiKeys as Array<{ id: string; prefix: string }>;
  const prefix = apiKey.split('-')[2]!;
  t.ok(listed.some((k) => k.prefix === prefix));
  await ok('expireApiKey', 'POST', '/api/v1/apikey/expire', { prefix });
  await ok('expireApiKey', 'POST', '/api/v1/apikey/expire', { id: listed.at(-1)!.id });
  await ok('deleteApiKey', 'DELETE', `/api/v1/apikey/${prefix}`);
  const oauth = await ok('createOAuthClient', 'POST', '/api/v1/oauthclient', { scopes: ['auth_keys'], tags: ['tag:ci'], description: 'ci' });
  t.same((await ok('listOAuthClients', 'GET', '/api/v1/oauthclient')).oauthClients.map((c: { id: string }) => c.id), [oauth.oauthClient.id]);
  await ok('deleteOAuthClient', 'DELETE', `/api/v1/oauthclient/${oauth.oauthClient.id}`);
  await problem('deleteOAuthClient', 'DELETE', `/api/v1/oauthclient/${oauth.oauthClient.id}`, undefined, 404);

  // Policy (database mode).
  await ok('getPolicy', 'GET', '/api/v1/policy');
  const policy = '{"tagOwners": {"tag:web": ["alicia"]}, "acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}';
  await ok('checkPolicy', 'POST', '/api/v1/policy/check', { policy });
  await ok('setPolicy', 'PUT', '/api/v1/policy', { policy });
  const current = await ok('getPolicy', 'GET', '/api/v1/policy');
  t.match(current.updatedAt, /Z$/);
  await ok('setPolicy', 'PUT', '/api/v1/policy', { policy, version: current.version });
  await ok('runPolicyTests', 'POST', '/api/v1/policy/tests', { policy });
  const someNode = (await ok('listNodes', 'GET', '/api/v1/node')).nodes[0];
  await ok('previewNodeReach', 'POST', '/api/v1/policy/preview', { policy, node: someNode.id });
  await ok('health', 'GET', '/api/v1/health');

  await problem('listUsers', 'GET', '/api/v1/user?id=x', undefined, 400, 'id');
  await problem('listUsers', 'GET', '/api/v1/user?name=a&name=b', undefined, 400, 'name');
  await problem('createUser', 'POST', '/api/v1/user', { name: 'alicia' }, 409);
  await problem('createUser', 'POST', '/api/v1/user', { name: ['x'] }, 400, 'name');
  await problem('renameUser', 'POST', '/api/v1/user/99/rename/x', undefined, 404);
  await problem('deleteUser', 'DELETE', `/api/v1/user/${alice.id}`, undefined, 409);
  await problem('getNode', 'GET', '/api/v1/node/abc', undefined, 400, 'id');
  await problem('getNode', 'GET', '/api/v1/node/999', undefined, 404);
  await problem('renameNode', 'POST', `/api/v1/node/${registered.id}/rename/laptop2`, undefined, 409);
  await problem('setNodeTags', 'POST', `/api/v1/node/${node.id}/tags`, { tags: ['tag:nope'] }, 400, 'tags');
  await problem('setNodeTags', 'POST', `/api/v1/node/${node.id}/tags`, { tags: [1] }, 400, 'tags[0]');
  await problem('setNodeTags', 'POST', `/api/v1/node/${node.id}/tags`, {}, 400, 'tags');
  await problem('approveNodeRoutes', 'POST', `/api/v1/node/${node.id}/approve_routes`, { routes: null }, 400, 'routes');
  await problem('registerNode', 'POST', '/api/v1/node/register?user=alicia&key=nope', undefined, 404);
  await problem('registerNode', 'POST', '/api/v1/node/register?user=alicia', undefined, 400, 'key');
  await problem('createDebugNode', 'POST', '/api/v1/debug/node', { user: 'alicia', name: '  ' }, 400, 'name');
  await problem('createDebugNode', 'POST', '/api/v1/debug/node', { user: 'ghost', name: 'x' }, 404);
  await problem('createDebugNode', 'POST', '/api/v1/debug/node', { user: 'alicia', name: 'x', key: 'mkey:zz' }, 400, 'key');
  await problem('createPreAuthKey', 'POST', '/api/v1/preauthkey', { user: 'alicia', reusable: 'yes' }, 400, 'reusable');
  await problem('createPreAuthKey', 'POST', '/api/v1/preauthkey', { user: 'nobody' }, 404);
  await problem('expirePreAuthKey', 'POST', '/api/v1/preauthkey/expire', {}, 400, 'id');
  await problem('deletePreAuthKey', 'DELETE', `/api/v1/preauthkey?id=${pak.id}`, undefined, 404);
  await problem('deletePreAuthKey', 'DELETE', '/api/v1/preauthkey', undefined, 400, 'id');
  await problem('expireApiKey', 'POST', '/api/v1/apikey/expire', {}, 400, 'prefix');
  await problem('deleteApiKey', 'DELETE', `/api/v1/apikey/${prefix}`, undefined, 404);
  const invalid = await problem('setPolicy', 'PUT', '/api/v1/policy', { policy: '{"acls": [ }' }, 400, 'policy');
  t.equal(invalid.code, 'invalid_policy');
  await problem('checkPolicy', 'POST', '/api/v1/policy/check', { policy: 5 }, 400, 'policy');
  t.equal((await call('createUser', 'POST', '/api/v1/user', '{"name":', {})).status, 400, 'broken JSON');
  t.equal((await call('createUser', 'POST', '/api/v1/user', '[1]', {})).status, 400, 'a list is not an object');
  const big = await call('createUser', 'POST', '/api/v1/user', { name: 'x'.repeat(2 * 1024 * 1024) });
  t.equal(big.status, 413);
  const unauthorized = await call('listNodes', 'GET', '/api/v1/node', undefined, { key: null });
  t.equal(unauthorized.status, 401);

  // Cleaning up through the API: deletes answer the declared empty object.
  for (const n of s.state.nodes.list()) await ok('deleteNode', 'DELETE', `/api/v1/node/${n.id}`);
  await problem('deleteNode', 'DELETE', `/api/v1/node/${node.id}`, undefined, 404);
  await ok('deleteUser', 'DELETE', `/api/v1/user/${alice.id}`);
  const carol = s.state.users.list({ name: 'carol' })[0]!;
  await ok('deleteUser', 'DELETE', `/api/v1/user/${carol.id}?deleteNodes=true`);

  // A single server's cluster view: not in a cluster, no instances.
  t.same(await ok('clusterStatus', 'GET', '/api/v1/cluster'), { enabled: false, instances: [] });
  t.match(await ok('serverInfo', 'GET', '/api/v1/server'), { clustered: false, tls: null, database: { type: 'sqlite' } });
  t.match(await ok('dnsInfo', 'GET', '/api/v1/dns'), { mode: 'file', extraRecords: [] });

  // The changes above, newest first, in the audit log.
  const audit = await ok('listAuditEntries', 'GET', '/api/v1/audit?limit=3');
  t.same(audit.entries.map((e: { action: string }) => e.action), ['deleteUser', 'deleteUser', 'deleteNode']);
  await problem('listAuditEntries', 'GET', '/api/v1/audit?limit=5000', undefined, 400, 'limit');

  // A database that stops answering: health's declared 503 (over the trusted socket, no key lookup).
  await s.storage.close();
  const down = await call('health', 'GET', '/api/v1/health', undefined, { key: null, socket: true });
  t.equal(down.status, 503);
  t.same(down.json, { databaseConnectivity: false });

  const missing = ROUTES.filter((r) => !checker.seen.get(r.operationId)?.has(200)).map((r) => r.operationId);
  t.same(missing, [], 'every route was called and answered 200');
  const statuses = [...checker.seen.values()].reduce((all, set) => { for (const x of set) all.add(x); return all; }, new Set<number>());
  t.same([...statuses].sort(), [200, 400, 401, 404, 409, 413, 503], 'the answers covered each kind of status');
});

t.test('request validation refuses bad input with a 400 naming the field and changes nothing', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const cases: Array<[string, string, unknown, string, RegExp]> = [
    ['POST', '/api/v1/user', {}, 'name', /^name: is required$/],
    ['POST', '/api/v1/user', { name: 42.5 }, 'name', /^name: expected a string, found a number$/],
    ['POST', '/api/v1/user', { name: 'zed', email: 7 }, 'email', /^email: expected a string, found the number 7$/],
    ['POST', '/api/v1/debug/node', { name: 'x' }, 'user', /^user: is required$/],
    ['POST', '/api/v1/debug/node', { user: true, name: 'x' }, 'user', /^user: expected a string or a number, found true or false$/],
    ['POST', '/api/v1/debug/node', { user: 'zed', name: 'x', routes: 'nope' }, 'routes', /^routes: expected a list, found a string$/],
    ['POST', '/api/v1/preauthkey', { ephemeral: 1 }, 'ephemeral', /^ephemeral: expected true or false, found the number 1$/],
    ['POST', '/api/v1/preauthkey', { acl_tags: 'tag:x' }, 'aclTags', /^aclTags: expected a list/],
    ['POST', '/api/v1/preauthkey/expire', { id: 'x' }, 'id', /^id: expected a numeric id, found "x"$/],
    ['POST', '/api/v1/preauthkey/expire', { id: -1 }, 'id', /^id: /],
    ['POST', '/api/v1/node/1/tags', { tags: 'tag:web' }, 'tags', /^tags: expected a list, found a string$/],
    ['POST', '/api/v1/node/1/tags', {}, 'tags', /^tags: is required \(an empty list removes all tags\)$/],
    ['POST', '/api/v1/node/x/tags', { tags: [] }, 'id', /^id: expected a numeric id, found "x"$/],
    ['PUT', '/api/v1/policy', {}, 'policy', /^policy: is required$/],
    ['DELETE', '/api/v1/preauthkey?id=', undefined, 'id', /^id: expected a numeric id, found ""$/],
  ];
  for (const [method, path, body, field, detail] of cases) {
    const res = await request(s, key, method, path, body);
    t.equal(res.status, 400, `${method} ${path} ${JSON.stringify(body)}: 400`);
    t.equal(res.json?.field, field, `names ${field}`);
    t.match(res.json?.detail, detail, `says what was wrong: ${res.json?.detail}`);
  }
  t.equal(s.state.users.list().length, 0, 'no user was created');
  t.equal(s.state.nodes.list().length, 0, 'no node was created');
  t.equal((await s.state.keys.listPreAuthKeys()).length, 0, 'no pre-auth key was created');
});

t.test('the document: typed components, declared statuses, servers, tags and unique operationIds', async (t) => {
  const doc = openApiDocument({ serverUrl: 'https://hw.example.net/' }) as any;
  t.same(doc.servers, [{ url: 'https://hw.example.net', description: 'This server (server_url)' }]);
  t.same(Object.keys(doc.components.schemas).sort(), ['ApiKey', 'AuditEntry', 'ClusterInstance', 'DriveGrant', 'Node', 'OAuthClient', 'PolicyReachEntry', 'PolicyTestResult', 'PreAuthKey', 'Problem', 'User']);
  const ids = new Set<string>();
  for (const r of ROUTES) {
    const op = doc.paths[openApiPath(r.path)][r.method.toLowerCase()];
    t.notOk(ids.has(op.operationId), `${op.operationId} is unique`);
    ids.add(op.operationId);
    t.ok(op.tags.length === 1 && doc.tags.some((x: { name: string }) => x.name === op.tags[0]), `${op.operationId} has a declared tag`);
    t.ok(op.description, `${op.operationId} has a description`);
    t.same(Object.keys(op.responses).map(Number).filter((x) => x >= 400 && x !== r.also?.status), errorStatuses(r), `${op.operationId} declares its problem statuses`);
    t.ok(op.responses[401] && op.responses[500], `${op.operationId} declares 401 and 500`);
    const schema = op.responses[200].content['application/json'].schema;
    t.equal(schema.type, 'object', `${op.operationId}: typed 200 body`);
    t.ok(schema.properties, `${op.operationId}: 200 body lists its fields`);
    if (op.requestBody) {
      const body = op.requestBody.content['application/json'].schema;
      for (const [name, prop] of Object.entries(body.properties as Record<string, Record<string, unknown>>)) {
        t.ok(prop.type || prop.anyOf || prop.$ref, `${op.operationId} body field ${name} is typed`);
      }
    }
    for (const p of op.parameters ?? []) t.ok(p.schema?.type, `${op.operationId} parameter ${p.name} is typed`);
  }
  // Every field of every component is typed (a bare {} would accept anything).
  for (const [name, schema] of Object.entries(doc.components.schemas as Record<string, { properties: Record<string, Record<string, unknown>> }>)) {
    for (const [field, prop] of Object.entries(schema.properties)) t.ok(prop.type || prop.anyOf || prop.$ref || prop.enum || prop.const, `${name}.${field} is typed`);
  }
});

const here = dirname(fileURLToPath(import.meta.url));

t.test('the v2 document: every /api/v2 route with its scope as an OAuth2 requirement, served unauthenticated; answers match it', async (t) => {
  const doc = openApiDocument({ api: 'v2' }) as any;
  t.equal(doc.info.title, 'Headway: Tailscale API');
  t.same(doc.tags.map((x: { name: string }) => x.name), Object.keys(V2_TAGS));
  const scopes = doc.components.securitySchemes.oauth2.flows.clientCredentials.scopes as Record<string, string>;
  for (const name of Object.keys(SCOPE_RESOURCES)) t.ok(scopes[name] && scopes[`${name}:read`], `scope ${name} and ${name}:read are declared`);
  const operations = Object.values(doc.paths as Record<string, Record<string, { operationId: string }>>).flatMap((item) => Object.values(item));
  t.equal(operations.length, V2_ROUTES.length, 'one operation per route, no more');
  for (const r of V2_ROUTES) {
    const op = doc.paths[openApiPath(r.path)]?.[r.method.toLowerCase()];
    t.equal(op?.operationId, r.operationId, `${r.method} ${r.path} is in the document`);
    if (!op) continue;
    t.same(op.tags, [r.tag.replace(/^v2:/, '')], `${r.operationId}: its tag`);
    if (r.scope === 'public') t.same(op.security, [], `${r.operationId}: no credential`);
    else t.same(op.security, [{ bearer: [] }, { basic: [] }, { oauth2: [scopeName(r.scope!)] }], `${r.operationId}: API key or a token with ${scopeName(r.scope!)}`);
  }

  const s = await startTestServer({ dns: { base_domain: 'example.net' } });
  t.teardown(() => s.stop());
  const served = await request(s, null, 'GET', DOC_PATHS.v2Document);
  t.equal(served.status, 200, 'no key needed');
  t.same(served.json, openApiDocument({ serverUrl: s.urls.http, api: 'v2' }));

  const key = (await s.state.keys.createApiKey(null)).secret;
  const checker = new ContractChecker(t, served.json as Doc);
  const byId = new Map(V2_ROUTES.map((r) => [r.operationId, r]));
  const call = async (operationId: string, path: string, body: unknown, status: number) => {
    const r = byId.get(operationId)!;
    t.ok(matches(r, path), `${path} is ${r.path}`);
    const res = await request(s, key, r.method, path, body);
    t.equal(res.status, status, `${operationId} ${path}: ${status}`, { body: res.json });
    checker.check(r, res, `${r.method} ${path}`);
    return res.json;
  };
  const user = await s.state.users.create({ name: 'alice' });
  const node = (await request(s, key, 'POST', '/api/v1/debug/node', { user: 'alice', name: 'laptop', routes: ['10.0.0.0/24'] })).json.node;
  t.ok(user && node);
  const dev = `/api/v2/device/${node.id}`;
  await call('v2ListDevices', '/api/v2/tailnet/-/devices', undefined, 200);
  await call('v2ListDevices', '/api/v2/tailnet/-/devices?fields=all&os=linux', undefined, 200);
  await call('v2ListDevices', '/api/v2/tailnet/-/devices?fields=every', undefined, 400);
  await call('v2ListDevices', '/api/v2/tailnet/elsewhere/devices', undefined, 404);
  await call('v2GetDevice', `${dev}?fields=all`, undefined, 200);
  await call('v2GetDevice', '/api/v2/device/77', undefined, 404);
  await call('v2GetDeviceRoutes', `${dev}/routes`, undefined, 200);
  await call('v2SetDeviceRoutes', `${dev}/routes`, { routes: ['10.0.0.0/24'] }, 200);
  await call('v2SetDeviceName', `${dev}/name`, { name: 'work' }, 200);
  await call('v2SetDeviceName', `${dev}/name`, { name: '-' }, 400);
  await call('v2SetDeviceTags', `${dev}/tags`, { tags: ['tag:web'] }, 200);
  await call('v2SetDeviceKey', `${dev}/key`, { keyExpiryDisabled: true }, 200);
  await call('v2AuthorizeDevice', `${dev}/authorized`, { authorized: true }, 200);
  await call('v2SetDeviceIp', `${dev}/ip`, { ipv4: '100.64.0.77' }, 200);
  await call('v2GetTailnetSettings', '/api/v2/tailnet/-/settings', undefined, 200);
  await call('v2UpdateTailnetSettings', '/api/v2/tailnet/-/settings', { devicesApprovalOn: false }, 200);
  await call('v2UpdateTailnetSettings', '/api/v2/tailnet/-/settings', { devicesApprovalOn: true }, 400);
  await call('v2ListWebhooks', '/api/v2/tailnet/-/webhooks', undefined, 501);
  await call('v2GetPostureAttributes', `${dev}/attributes`, undefined, 501);
  await call('v2DeleteDevice', dev, undefined, 200);
  const mine = V2_ROUTES.filter((r) => r.tag === 'v2:Devices' || r.tag === 'v2:Tailnet Settings').map((r) => r.operationId);
  t.same(mine.filter((id) => !checker.seen.get(id)?.has(200)), [], 'every device and settings route answered 200 as declared');
});

t.test('Redocly CLI lints the documents: no errors, no warnings (recommended-strict)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-openapi-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cli = createRequire(import.meta.url).resolve('@redocly/cli/bin/cli.js');
  const config = join(here, '..', '..', 'test', 'redocly.yaml');
  for (const api of ['v1', 'v2'] as const) {
    const file = join(dir, `openapi-${api}.json`);
    writeFileSync(file, JSON.stringify(openApiDocument({ api }), null, 2));
    const res = spawnSync(process.execPath, [cli, 'lint', file, '--config', config, '--format', 'json'], {
      encoding: 'utf8',
      // No telemetry or update check: CI has no network beyond the package registries.
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', CI: 'true' },
      timeout: 120_000,
    });
    const start = res.stdout.indexOf('{');
    const report = JSON.parse(res.stdout.slice(start)) as { totals: { errors: number; warnings: number; ignored: number }; problems: Array<{ ruleId: string; message: string; location: Array<{ pointer: string }> }> };
    t.comment(`redocly lint ${api}: ${report.totals.errors} errors, ${report.totals.warnings} warnings`);
    t.equal(report.totals.errors, 0, `${api}: no errors`, { problems: report.problems.slice(0, 20) });
    t.equal(report.totals.warnings, 0, `${api}: no warnings`, { problems: report.problems.slice(0, 20) });
    t.equal(res.status, 0, `${api}: redocly exits 0`, { stderr: res.stderr.slice(0, 2000) });
  }
});

t.test('the API reference page and its assets are served offline, unauthenticated, under a CSP', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const page = await fetch(s.urls.http + DOC_PATHS.page);
  t.equal(page.status, 200);
  t.match(page.headers.get('content-type'), /^text\/html/);
  const csp = page.headers.get('content-security-policy') ?? '';
  t.match(csp, /default-src 'none'/);
  t.match(csp, /script-src 'self'(;|$)/, 'scripts only from this server, none inline');
  const html = await page.text();
  const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
  t.ok(refs.length >= 3, 'the page loads its script, its init and its stylesheet');
  t.same(refs.filter((u) => !u.startsWith('/')), [], 'no external URL in the page');
  t.notOk(/<script>[^<]/.test(html), 'no inline script');
  for (const ref of refs) {
    const res = await fetch(s.urls.http + ref, { headers: { 'accept-encoding': 'gzip' } });
    t.equal(res.status, 200, `${ref}: 200 without a key`);
    const text = await res.text();
    t.ok(text.length > 0, `${ref} has content`);
    if (ref.endsWith('.js')) t.match(res.headers.get('content-type'), /javascript/, `${ref} is JavaScript`);
    if (ref.endsWith('.css')) t.match(res.headers.get('content-type'), /text\/css/, `${ref} is CSS`);
    if (ref.endsWith('swagger-ui-bundle.js')) {
      t.ok(text.length > 500_000, 'the whole Swagger UI bundle is served');
      t.match(text, /SwaggerUIBundle/);
    }
    if (ref.endsWith('init.js')) {
      t.match(text, DOC_PATHS.document, 'the page loads this server\'s document');
      t.notMatch(text, /https?:\/\//, 'init.js names no external URL');
      t.match(text, /validatorUrl: null/, 'the public validator is never called');
    }
  }
  const docRes = await fetch(s.urls.http + DOC_PATHS.document);
  t.equal(docRes.status, 200, 'the document needs no key');
  t.same(await docRes.json(), openApiDocument({ serverUrl: s.urls.http }));
  t.equal((await fetch(s.urls.http + '/api/v1/docs/package.json')).status, 401, 'nothing else from the package is reachable');
});
