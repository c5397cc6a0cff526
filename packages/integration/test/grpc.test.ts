/**
 * headscale's gRPC API (headscale.v1.HeadscaleService) on grpc_listen_addr:
 * the real headscale v0.29.2 CLI in remote mode against the real server, its JSON
 * output checked field by field against Headway's REST API, plus the API-key check,
 * the status codes and the message limits with a grpc-js client.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import type { ApiDeps } from '@headway/api';
import type { HeadwayConfig } from '@headway/core';
import { headscaleServiceDefinition, HANDLERS, startGrpcServer } from '@headway/api/grpc';
import { TestDevice } from '@headway/testkit';
import { findHeadscale, localApi, requireHeadscale, runHeadscale } from '../src/headscale-cli.js';
import { startTestServer, type TestServer } from '../src/server.js';

t.setTimeout(300_000);

// ---- a grpc-js client ----

const HeadscaleClient = grpc.makeGenericClientConstructor(headscaleServiceDefinition(), 'HeadscaleService');
type Client = InstanceType<typeof HeadscaleClient>;

function grpcClient(s: TestServer, creds = grpc.credentials.createInsecure()): Client {
  const url = new URL(s.urls.grpc!.replace(/^grpcs?:/, 'http:'));
  const c = new HeadscaleClient(url.host, creds);
  return c;
}

interface Answer { err?: grpc.ServiceError; res?: any }

/** rpc calls one method; `key` null sends no authorization at all, a string starting with "raw:" sends that header as it is. */
function rpc(c: Client, method: string, req: Record<string, unknown>, key: string | null): Promise<Answer> {
  const md = new grpc.Metadata();
  if (key !== null) md.set('authorization', key.startsWith('raw:') ? key.slice(4) : `Bearer ${key}`);
  return new Promise((resolve) => {
    (c as unknown as Record<string, (r: unknown, m: grpc.Metadata, cb: (e: grpc.ServiceError | null, r: unknown) => void) => void>)[method]!(
      req, md, (err, res) => resolve(err ? { err } : { res }),
    );
  });
}

const codeName = (a: Answer) => (a.err ? grpc.status[a.err.code] : 'OK');

// ---- what headscale's CLI prints: Go's encoding/json over the generated structs ----

type Json = Record<string, unknown>;

/** omitEmpty drops what `json:",omitempty"` drops: zero numbers, false, empty strings and lists, nil messages. */
function omitEmpty(o: Json): Json {
  const out: Json = {};
  for (const [k, v] of Object.entries(o)) {
    if (v === undefined || v === null || v === '' || v === 0 || v === false || (Array.isArray(v) && !v.length)) continue;
    out[k] = v;
  }
  return out;
}

function goTime(iso: string | null | undefined): Json | undefined {
  if (!iso) return undefined;
  const ms = Date.parse(iso);
  const seconds = Math.floor(ms / 1000);
  return omitEmpty({ seconds, nanos: (ms - seconds * 1000) * 1_000_000 });
}

const goUser = (u: any): Json | undefined => (u ? omitEmpty({
  id: Number(u.id), name: u.name, created_at: goTime(u.createdAt), display_name: u.displayName, email: u.email,
  provider_id: u.providerId, provider: u.provider, profile_pic_url: u.profilePicUrl,
}) : undefined);

const goPreAuthKey = (k: any): Json => omitEmpty({
  user: goUser(k.user), id: Number(k.id), key: k.key, reusable: k.reusable, ephemeral: k.ephemeral, used: k.used,
  expiration: goTime(k.expiration), created_at: goTime(k.createdAt), acl_tags: k.aclTags,
});

/** REGISTER_METHOD is headscale's enum as numbers; Headway's API and debug methods have no entry of their own. */
const REGISTER_METHOD: Record<string, number> = {
  REGISTER_METHOD_AUTH_KEY: 1, REGISTER_METHOD_CLI: 2, REGISTER_METHOD_API: 2, REGISTER_METHOD_OIDC: 3, REGISTER_METHOD_DEBUG: 0,
};

function goNode(n: any, preAuthKey?: any): Json {
  return omitEmpty({
    id: Number(n.id), machine_key: n.machineKey, node_key: n.nodeKey, disco_key: n.discoKey, ip_addresses: n.ipAddresses,
    name: n.name, user: goUser(n.user), last_seen: goTime(n.lastSeen), expiry: goTime(n.expiry),
    pre_auth_key: preAuthKey ? goPreAuthKey(preAuthKey) : undefined, created_at: goTime(n.createdAt),
    register_method: REGISTER_METHOD[n.registerMethod], given_name: n.givenName, online: n.online,
    approved_routes: n.approvedRoutes, available_routes: n.availableRoutes, subnet_routes: n.subnetRoutes, tags: n.tags,
  });
}

const goApiKey = (k: any): Json => omitEmpty({
  id: Number(k.id), prefix: k.prefix, expiration: goTime(k.expiration), created_at: goTime(k.createdAt), last_seen: goTime(k.lastSeen),
});

/**
 * seenNow: an online node's last_seen is "now" whenever it is asked (REST and gRPC alike),
 * so two answers a moment apart differ; both must carry one, and it is then set aside.
 */
function seenNow(t: Test, nodes: Json[], what: string): Json[] {
  return nodes.map((n) => {
    if (!n.online) return n;
    t.ok(n.last_seen, `${what}: online node ${n.id} has a last_seen`);
    return { ...n, last_seen: 'now' };
  });
}

// ---- the server side of the comparison: Headway's REST API over its socket ----

/** restNodes is what GET /api/v1/node says, in headscale's JSON form, with each node's pre-auth key. */
async function restNodes(s: TestServer, filter = ''): Promise<Json[]> {
  const nodes = (await localApi(s, 'GET', `/api/v1/node${filter}`)).json.nodes as any[];
  const keys = (await localApi(s, 'GET', '/api/v1/preauthkey')).json.preAuthKeys as any[];
  return nodes.map((n) => {
    const keyId = s.state.nodes.get(Number(n.id))!.authKeyId;
    return goNode(n, keyId !== null ? keys.find((k) => Number(k.id) === keyId) : undefined);
  });
}

/** restNode is one node as GET /api/v1/node/:id answers it (a tagged node has no user there; a list shows tagged-devices). */
async function restNode(s: TestServer, id: number): Promise<Json> {
  const n = (await localApi(s, 'GET', `/api/v1/node/${id}`)).json.node;
  const keys = (await localApi(s, 'GET', '/api/v1/preauthkey')).json.preAuthKeys as any[];
  const keyId = s.state.nodes.get(id)!.authKeyId;
  return goNode(n, keyId !== null ? keys.find((k) => Number(k.id) === keyId) : undefined);
}

function makeCert(dir: string): { cert: string; key: string } | undefined {
  const cert = join(dir, 'cert.pem'), key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert,
    ], { stdio: 'ignore' });
  } catch {
    return undefined;
  }
  return { cert, key };
}

const POLICY = `// the gRPC test policy
{
  "tagOwners": { "tag:web": ["alice@"] },
  "acls": [ { "action": "accept", "src": ["*"], "dst": ["*:*"] }, ],
}
`;

/**
 * cliSetup starts a server with TLS on both listeners (headscale's CLI speaks TLS only in
 * remote mode) and a database policy, and returns headscale's CLI pointed at it; undefined
 * when the binary or openssl is missing (skipped, or failed under CI=true).
 */
async function cliSetup(t: Test) {
  const bin = requireHeadscale(t);
  if (!bin) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'hw-grpc-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pem = makeCert(dir);
  if (!pem) {
    if (process.env.CI === 'true') t.fail('openssl is not installed');
    else t.skip('openssl is not installed', () => undefined);
    return undefined;
  }
  // testkit devices reach the same listen_addr, which then serves HTTPS with this certificate: trust it here.
  tls.setDefaultCACertificates([...tls.getCACertificates('default'), readFileSync(pem.cert, 'utf8')]);
  const s = await startTestServer({ tls_cert_path: pem.cert, tls_key_path: pem.key, grpc_listen_addr: '127.0.0.1:0', policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  t.match(s.urls.grpc, /^grpcs:\/\/127\.0\.0\.1:\d+$/, 'TLS on the gRPC listener');
  const address = new URL(s.urls.grpc!.replace(/^grpcs:/, 'https:')).host;
  const { secret: apiKey } = await s.state.keys.createApiKey(null);
  const hs = (...args: string[]) => runHeadscale(bin, { address, apiKey, args });
  const json = async (...args: string[]) => {
    const r = await hs(...args, '-o', 'json');
    t.equal(r.code, 0, `headscale ${args.join(' ')}: ${r.stderr.trim()}`);
    return JSON.parse(r.stdout);
  };
  const devices: TestDevice[] = [];
  t.teardown(async () => { for (const d of devices) await d.close(); });
  /** device registers a testkit device (over HTTPS); an empty `opts` leaves it waiting for an interactive login. */
  const device = async (hostname: string, opts: Parameters<TestDevice['register']>[0]) => {
    const d = new TestDevice({ serverUrl: s.urls.http, hostname });
    devices.push(d);
    await d.connect();
    const res = await d.register(opts);
    return { d, res };
  };
  return { s, dir, bin, address, apiKey, hs, json, device };
}

/** pendingLogin has a device ask to log in (a new one, or a known one with a fresh node key) and holds its follow-up. */
async function pendingLogin(d: TestDevice, res: { AuthURL?: string }) {
  const authUrl = String(res.AuthURL);
  const followup = d.register({ followup: authUrl });
  // As tailscaled does, the follow-up is sent before anyone decides; give it a moment to arrive.
  await new Promise((r) => setTimeout(r, 200));
  return { authId: authUrl.split('/').pop()!, followup };
}

t.test('headscale v0.29.2 CLI in remote mode: every command answers what the REST API says', async (t) => {
  const cli = await cliSetup(t);
  if (!cli) return;
  const { s, dir, bin, address, apiKey, hs, json, device } = cli;

  // ---- users ----
  const alice = await json('users', 'create', 'alice', '-d', 'Alice Liddell', '-e', 'alice@example.com', '-p', 'https://example.com/alice.png');
  const restAlice = (await localApi(s, 'GET', '/api/v1/user?name=alice')).json.users[0];
  t.strictSame(alice, goUser(restAlice), 'users create: the user the REST API shows');
  t.equal(alice.display_name, 'Alice Liddell');
  const bob = await json('users', 'create', 'bob');
  t.strictSame(await json('users', 'list'), (await localApi(s, 'GET', '/api/v1/user')).json.users.map(goUser), 'users list');
  const robert = await json('users', 'rename', '-i', String(bob.id), '-r', 'robert');
  t.equal(robert.name, 'robert');
  t.strictSame(robert, goUser((await localApi(s, 'GET', `/api/v1/user?id=${bob.id}`)).json.users[0]), 'users rename');
  const taken = await hs('users', 'create', 'ALICE');
  t.equal(taken.code, 1, 'a taken name is refused');
  t.match(taken.stderr, /code = AlreadyExists desc = user ALICE already exists as alice/);

  // ---- policy (database mode) ----
  const good = join(dir, 'policy.hujson');
  writeFileSync(good, POLICY);
  const bad = join(dir, 'bad.hujson');
  writeFileSync(bad, '{ "acls": [ { "action": "maybe", "src": ["*"], "dst": ["*:*"] } ] }');
  const check = await hs('policy', 'check', '-f', good);
  t.equal(check.code, 0, check.stderr);
  t.equal(check.stdout, 'Policy is valid\n', 'policy check goes to the server (CheckPolicy)');
  const refused = await hs('policy', 'check', '-f', bad);
  const restCheck = await localApi(s, 'POST', '/api/v1/policy/check', { policy: readFileSync(bad, 'utf8') });
  t.equal(restCheck.status, 400);
  t.equal(refused.code, 1, 'an invalid policy is refused');
  t.match(refused.stderr, 'code = InvalidArgument desc = ' + restCheck.json.detail, 'with the errors the REST API lists');
  t.equal((await localApi(s, 'GET', '/api/v1/policy')).json.policy, '', 'check changed nothing');
  const set = await hs('policy', 'set', '-f', good);
  t.equal(set.code, 0, set.stderr);
  t.equal(set.stdout, 'Policy updated.\n');
  const restPolicy = (await localApi(s, 'GET', '/api/v1/policy')).json;
  t.equal(restPolicy.policy, POLICY, 'policy set stored the file as it is');
  const get = await hs('policy', 'get');
  t.equal(get.stdout, `${restPolicy.policy}\n`, 'policy get prints the text the REST API has');
  const setBad = await hs('policy', 'set', '-f', bad);
  t.equal(setBad.code, 1);
  t.match(setBad.stderr, /code = InvalidArgument/);
  t.equal((await localApi(s, 'GET', '/api/v1/policy')).json.policy, POLICY, 'an invalid policy changes nothing');

  // ---- pre-auth keys ----
  const reusable = await json('preauthkeys', 'create', '-u', String(alice.id), '--reusable', '-e', '1h');
  const restKeys = () => localApi(s, 'GET', '/api/v1/preauthkey').then((r) => r.json.preAuthKeys as any[]);
  const listed = (await restKeys()).find((k) => Number(k.id) === reusable.id);
  t.match(reusable.key, /^hwkey-auth-/, 'the whole key, once');
  t.ok(reusable.key.startsWith(listed.key.replace(/\*\*\*$/, '')), 'the REST list shows the same key redacted');
  t.strictSame(reusable, { ...goPreAuthKey(listed), key: reusable.key }, 'preauthkeys create: every other field as the REST API has it');
  t.equal(reusable.reusable, true);
  const tagKey = await json('preauthkeys', 'create', '--tags', 'tag:web', '-e', '1h');
  t.strictSame(tagKey.acl_tags, ['tag:web']);
  t.notOk(tagKey.user, 'a tags-only key (user 0) has no user');
  const unknownTag = await hs('preauthkeys', 'create', '--tags', 'tag:nope', '-e', '1h');
  t.equal(unknownTag.code, 1);
  t.match(unknownTag.stderr, /code = InvalidArgument desc = tags: tag:nope not defined in the policy's tagOwners/);
  t.strictSame(await json('preauthkeys', 'list'), (await restKeys()).map(goPreAuthKey), 'preauthkeys list');

  // ---- nodes from testkit devices ----
  const router = await device('router', { authKey: reusable.key, routes: ['10.0.0.0/24', '192.168.1.0/24'] });
  t.equal(router.res.MachineAuthorized, true, 'a key from headscale preauthkeys create registers a device');
  await router.d.startMap();
  const laptop = await device('laptop', { authKey: reusable.key });
  t.equal(laptop.res.MachineAuthorized, true);
  const routerId = s.state.nodes.byMachineKey(router.d.machineKeyText)!.id;
  const laptopId = s.state.nodes.byMachineKey(laptop.d.machineKeyText)!.id;

  const listNodes = await json('nodes', 'list');
  t.equal(listNodes.length, 2);
  t.strictSame(seenNow(t, listNodes, 'nodes list'), seenNow(t, await restNodes(s), 'REST'), 'nodes list');
  t.equal(listNodes.find((n: Json) => n.id === routerId).pre_auth_key.id, reusable.id, 'each node names the key it joined with');
  const table = await hs('nodes', 'list');
  t.equal(table.code, 0, `the human-readable table renders: ${table.stderr}`);
  t.match(table.stdout, /router[\s\S]*laptop/);
  t.strictSame(seenNow(t, await json('nodes', 'list', '-u', 'alice'), 'nodes list -u'), seenNow(t, await restNodes(s, '?user=alice'), 'REST'), 'nodes list --user');

  const approved = await json('nodes', 'approve-routes', '-i', String(routerId), '-r', '10.0.0.0/24');
  t.strictSame(approved.approved_routes, ['10.0.0.0/24']);
  t.strictSame(seenNow(t, [approved], 'approve-routes'), seenNow(t, [await restNode(s, routerId)], 'REST'), 'nodes approve-routes');
  const routes = await json('nodes', 'list-routes');
  t.strictSame(routes.map((n: Json) => n.id), [routerId], 'list-routes shows the nodes with routes');
  t.strictSame(seenNow(t, routes, 'list-routes'), seenNow(t, [await restNode(s, routerId)], 'REST'), 'nodes list-routes');
  t.strictSame(routes[0].subnet_routes, ['10.0.0.0/24'], 'the online router serves its approved route');

  const tagged = await json('nodes', 'tag', '-i', String(laptopId), '-t', 'tag:web');
  t.strictSame(tagged.tags, ['tag:web']);
  t.strictSame(tagged, await restNode(s, laptopId), 'nodes tag');
  const renamed = await json('nodes', 'rename', '-i', String(laptopId), 'web-1');
  t.equal(renamed.given_name, 'web-1');
  t.equal(renamed.name, 'laptop', 'the hostname the device reports stays');
  t.strictSame(renamed, await restNode(s, laptopId), 'nodes rename');

  // nodes register (headscale's deprecated form of auth register) approves a waiting login.
  const desk = await device('desk', {});
  const { authId, followup } = await pendingLogin(desk.d, desk.res);
  const registered = await json('nodes', 'register', '--user', 'alice', '--key', authId);
  t.equal((await followup).MachineAuthorized, true, 'the waiting device is in');
  t.equal(registered.given_name, 'desk');
  t.equal(registered.register_method, 2, 'REGISTER_METHOD_CLI');
  t.strictSame(registered, await restNode(s, registered.id), 'nodes register');

  const deleted = await json('nodes', 'delete', '-i', String(registered.id), '--force');
  t.strictSame(deleted, { Result: 'Node deleted' });
  t.equal((await localApi(s, 'GET', `/api/v1/node/${registered.id}`)).status, 404, 'the REST API no longer has it');
  const missing = await hs('nodes', 'rename', '-i', '9999', 'ghost');
  t.equal(missing.code, 1);
  t.match(missing.stderr, /code = NotFound desc = node 9999 not found/);

  // ---- API keys ----
  const created = await json('apikeys', 'create', '-e', '1d');
  t.match(created, /^hwkey-api-/, 'the whole key, once');
  t.equal((await fetch(`${s.urls.http}/api/v1/user`, { headers: { authorization: `Bearer ${created}` } })).status, 200, 'it works on the REST API');
  const restApiKeys = () => localApi(s, 'GET', '/api/v1/apikey').then((r) => r.json.apiKeys as any[]);
  t.strictSame(await json('apikeys', 'list'), (await restApiKeys()).map(goApiKey), 'apikeys list');
  const prefix = (await restApiKeys()).find((k) => created.includes(k.prefix)).prefix as string;
  t.strictSame(await json('apikeys', 'expire', '-p', prefix), {}, 'apikeys expire');
  const expired = (await restApiKeys()).find((k) => k.prefix === prefix);
  t.ok(Date.parse(expired.expiration) <= Date.now(), 'the REST API shows it expired');
  t.equal((await fetch(`${s.urls.http}/api/v1/user`, { headers: { authorization: `Bearer ${created}` } })).status, 401, 'and it stops working');
  t.strictSame(await json('apikeys', 'list'), (await restApiKeys()).map(goApiKey), 'apikeys list after expire');

  // ---- authentication ----
  const wrong = await runHeadscale(bin, { address, apiKey: 'hwkey-api-000000000000-nope', args: ['users', 'list'] });
  t.equal(wrong.code, 1, 'a wrong API key is refused');
  t.match(wrong.stderr, /code = Unauthenticated desc = invalid, expired or revoked API key/);
  t.equal(wrong.stdout, '', 'and sees nothing');
  t.notOk(s.logs.some((l) => l.includes(apiKey) || l.includes(created)), 'API keys are never logged');
});

t.test('headscale v0.29.2 CLI: health, nodes expire and backfillips, debug create-node, auth register/approve/reject, key and user deletion', async (t) => {
  const cli = await cliSetup(t);
  if (!cli) return;
  const { s, hs, json, device } = cli;
  t.strictSame(await json('health'), { database_connectivity: true }, 'health');
  const alice = await json('users', 'create', 'alice');

  // debug create-node takes headscale's auth ID form; Headway stores the node at once.
  const dbg = await json('debug', 'create-node', '--name', 'dbg', '--user', 'alice', '--key', `hskey-authreq-${'a'.repeat(24)}`, '-r', '10.9.0.0/24');
  t.equal(dbg.name, 'dbg');
  t.strictSame(dbg.available_routes, ['10.9.0.0/24']);
  t.strictSame(dbg, await restNode(s, dbg.id), 'debug create-node');

  const never = await json('nodes', 'expire', '-i', String(dbg.id), '--disable');
  t.equal(never.expiry, undefined, 'nodes expire --disable: no expiry');
  t.equal((await localApi(s, 'GET', `/api/v1/node/${dbg.id}`)).json.node.expiry, null);
  const later = await json('nodes', 'expire', '-i', String(dbg.id), '-e', '2030-01-31T10:00:00Z');
  t.strictSame(later.expiry, { seconds: Date.parse('2030-01-31T10:00:00Z') / 1000 }, 'nodes expire --expiry');
  t.strictSame(later, await restNode(s, dbg.id));
  const now = await json('nodes', 'expire', '-i', String(dbg.id));
  t.ok(now.expiry.seconds * 1000 <= Date.now(), 'nodes expire: now');
  t.strictSame(now, await restNode(s, dbg.id));
  t.strictSame(await json('nodes', 'backfillips', '--force'), {}, 'nodes backfillips: every node has its addresses already');

  // auth register, then the same device logs in again and auth approve lets it back in.
  const phone = await device('phone', {});
  const reg = await pendingLogin(phone.d, phone.res);
  const node = await json('auth', 'register', '--auth-id', reg.authId, '--user', 'alice');
  t.equal((await reg.followup).MachineAuthorized, true, 'auth register: the device is in');
  t.strictSame(node, await restNode(s, node.id), 'auth register');
  await json('nodes', 'expire', '-i', String(node.id));
  const again = await pendingLogin(phone.d, await phone.d.rotateNodeKey({}));
  t.strictSame(await json('auth', 'approve', '--auth-id', again.authId), {}, 'auth approve');
  t.equal((await again.followup).MachineAuthorized, true, 'the known device is back');
  t.equal(s.state.nodes.require(node.id).userId, alice.id, 'with its owner');
  const stranger = await device('stranger', {});
  const rej = await pendingLogin(stranger.d, stranger.res);
  t.strictSame(await json('auth', 'reject', '--auth-id', rej.authId), {}, 'auth reject');
  t.equal((await rej.followup).MachineAuthorized, false, 'the device is told no');
  t.equal(s.state.nodes.list().length, 2, 'no node for it');

  // pre-auth keys and API keys go away.
  const key = await json('preauthkeys', 'create', '-u', String(alice.id), '-e', '1h');
  t.strictSame(await json('preauthkeys', 'expire', '-i', String(key.id)), {}, 'preauthkeys expire');
  const keys = () => localApi(s, 'GET', '/api/v1/preauthkey').then((r) => r.json.preAuthKeys as any[]);
  t.ok(Date.parse((await keys()).find((k) => Number(k.id) === key.id).expiration) <= Date.now(), 'the REST API shows it expired');
  t.strictSame(await json('preauthkeys', 'delete', '-i', String(key.id)), {}, 'preauthkeys delete');
  t.notOk((await keys()).some((k) => Number(k.id) === key.id), 'the REST API no longer lists it');
  const apiKey = await json('apikeys', 'create');
  const apiKeys = () => localApi(s, 'GET', '/api/v1/apikey').then((r) => r.json.apiKeys as any[]);
  const prefix = (await apiKeys()).find((k) => apiKey.includes(k.prefix)).prefix as string;
  t.strictSame(await json('apikeys', 'delete', '-p', prefix), {}, 'apikeys delete');
  t.notOk((await apiKeys()).some((k) => k.prefix === prefix), 'the REST API no longer lists it');

  // users destroy: refused while the user owns nodes, as the REST API refuses it.
  const owner = await hs('users', 'destroy', '-i', String(alice.id), '--force');
  t.equal(owner.code, 1);
  t.match(owner.stderr, /code = FailedPrecondition desc = user alice still owns 2 node\(s\)/);
  const carol = await json('users', 'create', 'carol');
  t.strictSame(await json('users', 'destroy', '-i', String(carol.id), '--force'), {}, 'users destroy');
  t.strictSame((await localApi(s, 'GET', '/api/v1/user')).json.users.map((u: Json) => u.name), ['alice'], 'the REST API no longer has carol');
});

t.test('every HeadscaleService rpc needs an API key: UNAUTHENTICATED and no data without one', async (t) => {
  const s = await startTestServer({ grpc_listen_addr: '127.0.0.1:0' });
  t.teardown(() => s.stop());
  const c = grpcClient(s);
  t.teardown(() => c.close());
  const methods = Object.keys(headscaleServiceDefinition());
  t.equal(methods.length, 29, 'the 29 calls of headscale v0.29.2');
  t.strictSame(Object.keys(HANDLERS).sort(), [...methods].sort(), 'each has a handler');
  await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createApiKey(null);
  const { key: old, secret: oldSecret } = await s.state.keys.createApiKey(null);
  await s.state.keys.expireApiKey({ id: old.id });
  for (const method of methods) {
    for (const [what, key, detail] of [
      ['no key', null, /^missing API key/],
      ['a wrong key', 'hwkey-api-000000000000-wrong', /^invalid, expired or revoked API key$/],
      ['an expired key', oldSecret, /^invalid, expired or revoked API key$/],
      ['not a bearer token', `raw:Basic ${secret}`, /^malformed authorization metadata/],
    ] as const) {
      const a = await rpc(c, method, {}, key);
      if (codeName(a) !== 'UNAUTHENTICATED' || a.res !== undefined || !detail.test(a.err!.details)) {
        t.fail(`${method} with ${what}: ${codeName(a)} ${a.err?.details ?? JSON.stringify(a.res)}`);
      }
    }
  }
  t.pass(`${methods.length} calls x 4 refusals`);
  const users = await rpc(c, 'ListUsers', {}, secret);
  t.equal(codeName(users), 'OK');
  t.strictSame(users.res.users.map((u: Json) => u.name), ['alice'], 'the same call with the key answers');
  t.notOk(s.logs.some((l) => l.includes(secret) || l.includes(oldSecret)), 'keys are never logged');
});

/** grpcSetUp starts a server with the gRPC API and an API key: `call` sends a message, `raw` the bytes given as one. */
async function grpcSetUp(t: Test) {
  const s = await startTestServer({ grpc_listen_addr: '127.0.0.1:0' });
  t.teardown(() => s.stop());
  const c = grpcClient(s);
  t.teardown(() => c.close());
  const { secret } = await s.state.keys.createApiKey(null);
  const call = (method: string, req: Record<string, unknown> = {}) => rpc(c, method, req, secret);
  const raw = (method: string, bytes: number[]) => new Promise<Answer>((resolve) => {
    const md = new grpc.Metadata();
    md.set('authorization', `Bearer ${secret}`);
    c.makeUnaryRequest(`/headscale.v1.HeadscaleService/${method}`, (b: Buffer) => b, (b: Buffer) => b, Buffer.from(bytes), md,
      (err, res) => resolve(err ? { err } : { res }));
  });
  return { s, c, secret, call, raw };
}

t.test('client mistakes map to gRPC codes naming the field, and change nothing', async (t) => {
  const { s, c, secret, call, raw } = await grpcSetUp(t);
  const expect = async (method: string, req: Record<string, unknown>, code: string, detail: RegExp | string) => {
    const a = await call(method, req);
    t.equal(codeName(a), code, `${method} ${JSON.stringify(req).slice(0, 80)}`);
    t.match(a.err?.details, detail);
    return a;
  };

  const alice = await call('CreateUser', { name: 'alice' });
  t.equal(codeName(alice), 'OK');
  t.equal(alice.res.user.name, 'alice');
  await expect('CreateUser', { name: 'Alice' }, 'ALREADY_EXISTS', 'user Alice already exists as alice');
  await expect('CreateUser', { name: 'not a name!' }, 'INVALID_ARGUMENT', /^name: /);
  await expect('CreateUser', { name: 'carol', picture_url: 'ftp://x' }, 'INVALID_ARGUMENT', /^picture_url: /);
  t.strictSame(s.state.users.list().map((u) => u.name), ['alice'], 'no user was added');
  await expect('RenameUser', { old_id: 0, new_name: 'x' }, 'NOT_FOUND', 'user 0 not found');
  await expect('RenameUser', { old_id: alice.res.user.id, new_name: '' }, 'INVALID_ARGUMENT', /^new_name: /);

  await expect('GetNode', { node_id: 999 }, 'NOT_FOUND', 'node 999 not found');
  await expect('DeleteNode', { node_id: 999 }, 'NOT_FOUND', 'node 999 not found');
  await expect('ListNodes', { user: 'nobody' }, 'NOT_FOUND', 'user nobody not found');
  await expect('GetNode', { node_id: '9007199254740993' }, 'INVALID_ARGUMENT', /^node_id: expected an id below 2\^53/);
  const box = await call('DebugCreateNode', { user: 'alice', name: 'box', key: 'ignored', routes: ['10.1.0.0/24'] });
  t.equal(codeName(box), 'OK', box.err?.details ?? 'created');
  const id = Number(box.res.node.id);
  t.strictSame(box.res.node.available_routes, ['10.1.0.0/24']);
  t.equal(box.res.node.register_method, 'REGISTER_METHOD_UNSPECIFIED', 'a debug node has no headscale register method');
  await expect('SetApprovedRoutes', { node_id: id, routes: ['10.1.0.0/33'] }, 'INVALID_ARGUMENT', /^routes: expected CIDR prefixes/);
  await expect('ExpireNode', { node_id: id, disable_expiry: true, expiry: { seconds: 2_000_000_000 } }, 'INVALID_ARGUMENT', 'expiry: cannot be combined with disable_expiry');
  await expect('SetTags', { node_id: id, tags: ['web'] }, 'INVALID_ARGUMENT', /^tags: /);
  await expect('RenameNode', { node_id: id, new_name: 'Not A Label!' }, 'INVALID_ARGUMENT', /^new_name: /);
  const node = s.state.nodes.require(id);
  t.strictSame([node.approvedRoutes, node.expiry, node.tags, node.givenName], [[], null, [], 'box'], 'the node is as it was');
  await expect('DebugCreateNode', { user: 'alice', name: ' ' }, 'INVALID_ARGUMENT', 'name: must not be empty');
  await expect('BackfillNodeIPs', { confirmed: false }, 'INVALID_ARGUMENT', /^confirmed: must be true/);
  await expect('DeleteUser', { id: alice.res.user.id }, 'FAILED_PRECONDITION', /^user alice still owns 1 node\(s\) \(box\)/);

  await expect('CreatePreAuthKey', { user: 0 }, 'INVALID_ARGUMENT', 'user: a key without a user must carry tags');
  await expect('CreatePreAuthKey', { user: 77 }, 'NOT_FOUND', 'user 77 not found');
  await expect('CreatePreAuthKey', { user: alice.res.user.id, acl_tags: ['web'] }, 'INVALID_ARGUMENT', /^acl_tags: /);
  await expect('CreatePreAuthKey', { user: alice.res.user.id, expiration: { seconds: 1 } }, 'INVALID_ARGUMENT', 'expiration: must be in the future');
  // Past year 9999: a Date still, but not one every database's timestamp column holds.
  await expect('CreatePreAuthKey', { user: alice.res.user.id, expiration: { seconds: 253402300800 } }, 'INVALID_ARGUMENT', /^expiration: expected a time between years 1 and 9999/);
  t.strictSame(await s.state.keys.listPreAuthKeys(), [], 'no key was made');
  await expect('ExpirePreAuthKey', { id: 5 }, 'NOT_FOUND', 'pre-auth key 5 not found');
  await expect('ExpireApiKey', {}, 'INVALID_ARGUMENT', 'prefix: is required (or id)');
  await expect('DeleteApiKey', { prefix: 'nope' }, 'NOT_FOUND', 'API key nope not found');
  await expect('AuthApprove', { auth_id: 'not/an/id' }, 'INVALID_ARGUMENT', /^auth_id: expected the ID from the login URL/);
  await expect('AuthReject', { auth_id: 'hwreg-unknown' }, 'NOT_FOUND', /^no pending login with auth ID hwreg-unknown/);
  await expect('AuthRegister', { auth_id: 'hwreg-unknown', user: 'nobody' }, 'NOT_FOUND', 'user nobody not found');
  await expect('SetPolicy', { policy: '{}' }, 'FAILED_PRECONDITION', /policy set needs policy.mode: database/);
  await expect('CheckPolicy', { policy: '{ "acls": [ { "action": "maybe" } ] }' }, 'INVALID_ARGUMENT', /action/);
  const health = await call('Health');
  t.strictSame(health.res, { database_connectivity: true });

  // Limits: the REST body limits (1 MiB, policy text 4 MiB), before any handler runs.
  await expect('CreateUser', { name: 'a'.repeat(1_100_000) }, 'RESOURCE_EXHAUSTED', /exceeds the 1048576-byte limit/);
  const big = `{ "acls": [] ${' '.repeat(2_000_000)}, "x": 1 }`;
  await expect('CheckPolicy', { policy: big }, 'INVALID_ARGUMENT', /x/);
  const huge = await call('CheckPolicy', { policy: ' '.repeat(5 * 1024 * 1024) });
  t.equal(codeName(huge), 'RESOURCE_EXHAUSTED', 'a policy over 4 MiB is refused');
  // A message that is not protobuf at all is the client's fault, not INTERNAL.
  const garbage = await raw('GetNode', [0x12, 0x05, 0x01]);
  t.equal(codeName(garbage), 'INVALID_ARGUMENT');
  t.match(garbage.err?.details, /not a valid GetNode message/);
  t.notOk(s.logs.some((l) => / ERR /.test(l) && /grpc/.test(l)), 'no client mistake was logged as a server error');
});

t.test('hostile requests: echoes cut short, messages read strictly, malformed machine keys and times before year 1 refused', async (t) => {
  const { s, c, secret, call, raw } = await grpcSetUp(t);
  const alice = await call('CreateUser', { name: 'alice' });
  const keysBefore = (await s.state.keys.listApiKeys()).length;

  // A 100,000-character name must not be echoed whole in the status: past the client's header limit the stream is
  // reset (INTERNAL, "Protocol error") and every later call on the channel fails.
  for (const [method, req] of [['CreateUser', { name: 'x'.repeat(100_000) }], ['RenameUser', { old_id: alice.res.user.id, new_name: 'x'.repeat(100_000) }],
    ['CreateUser', { name: 'bob', email: 'x'.repeat(100_000) }], ['CheckPolicy', { policy: 'x'.repeat(100_000) }]] as const) {
    const a = await call(method, req);
    t.equal(codeName(a), 'INVALID_ARGUMENT', `${method}: ${a.err?.details.slice(0, 100)}`);
    t.ok((a.err?.details.length ?? 0) < 500, `${method}: the message quotes a part of the value (${a.err?.details.length} characters)`);
  }
  t.equal(codeName(await call('Health')), 'OK', 'the channel still works');

  // protobufjs read a length-delimited field 2 (reusable, a bool) as a varint and then its contents as top-level
  // fields: a reusable key for user 1 came out of a message that asked for none.
  const misread = await raw('CreatePreAuthKey', [0x12, 0x0b, 0x08, 0x01, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
  t.equal(codeName(misread), 'INVALID_ARGUMENT');
  t.match(misread.err?.details, /not a valid CreatePreAuthKey message: field 2 \(reusable\) came as wire type 2, but it is of wire type 0/);
  t.match((await raw('CreateApiKey', [0x00, 0x01])).err?.details, /field number 0 is not a field/);
  t.match((await raw('CreateApiKey', [0x0b])).err?.details, /wire type 3/);
  t.strictSame(await s.state.keys.listPreAuthKeys(), [], 'no pre-auth key was made');
  t.equal((await s.state.keys.listApiKeys()).length, keysBefore, 'no API key was made');
  const unknownField = await raw('ListUsers', [0xf8, 0x07, 0x01, 0x12, 0x05, 0x61, 0x6c, 0x69, 0x63, 0x65]);
  t.equal(codeName(unknownField), 'OK', 'an unknown field (number 127) is skipped, as every protobuf reader does');
  t.strictSame(unknownField.res && headscaleServiceDefinition().ListUsers!.responseDeserialize(unknownField.res as Buffer), { users: [alice.res.user] }, 'and the known ones read');

  const box = await call('DebugCreateNode', { user: 'alice', name: 'box', key: 'a-headscale-registration-id' });
  t.equal(codeName(box), 'OK', 'a headscale registration id is no machine key and is ignored');
  const id = Number(box.res.node.id);
  for (const key of ['mkey:zz', `mkey:${'a'.repeat(63)}`, `mkey:${'A'.repeat(64)}`]) {
    const a = await call('DebugCreateNode', { user: 'alice', name: 'box2', key });
    t.equal(codeName(a), 'INVALID_ARGUMENT', key.slice(0, 12));
    t.match(a.err?.details, /^key: expected mkey:<64 lower-case hex digits>/);
  }
  t.equal(s.state.nodes.list().length, 1, 'no node was made from a malformed machine key');
  // Before year 1: refused like after 9999 (REST showed "-271821-04-20T00:00:00.000Z").
  for (const seconds of ['-8640000000000', '-62135596801']) {
    const a = await call('ExpireNode', { node_id: id, expiry: { seconds } });
    t.match(a.err?.details, /^expiry: expected a time between years 1 and 9999/, seconds);
  }
  t.equal(s.state.nodes.require(id).expiry, null, 'the node does not expire');
});

t.test('grpc_listen_addr: plaintext on a non-loopback address refuses to start, naming the keys; empty turns it off', async (t) => {
  await t.rejects(startTestServer({ grpc_listen_addr: '0.0.0.0:0' }),
    /grpc_listen_addr: 0\.0\.0\.0:0 is not a loopback address and no TLS is configured.*tls_cert_path and tls_key_path.*grpc_allow_insecure: true/);
  // The listener checks again for configs built without resolveConfig (embedders).
  const config = { grpc_listen_addr: '0.0.0.0:0', grpc_allow_insecure: false, tls_cert_path: '' } as HeadwayConfig;
  await t.rejects(startGrpcServer({ config, deps: {} as ApiDeps, logger: undefined as never }), /^grpc_listen_addr 0\.0\.0\.0:0 is not a loopback address/);
  const taken = createServer();
  await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
  t.teardown(() => taken.close());
  const port = (taken.address() as AddressInfo).port;
  await t.rejects(startTestServer({ grpc_listen_addr: `127.0.0.1:${port}` }),
    { message: new RegExp(`^grpc_listen_addr 127\\.0\\.0\\.1:${port}: the address is already in use; choose another port, or set grpc_listen_addr: "" to turn the gRPC API off$`) },
    'a port in use is named in the error, with the way to turn the API off');
  const off = await startTestServer({ grpc_listen_addr: '' });
  t.teardown(() => off.stop());
  t.equal(off.urls.grpc, undefined, 'no gRPC listener');
  t.match(off.logs.join('\n'), /grpc=off/);
});

// The headscale CLI (TLS by default) against the plaintext port says only "context deadline exceeded": the server
// log is where the operator learns why.
t.test('a client speaking TLS to the plaintext gRPC port is told in the log, once a minute', async (t) => {
  const s = await startTestServer({ grpc_listen_addr: '127.0.0.1:0' });
  t.teardown(() => s.stop());
  const port = Number(new URL(s.urls.grpc!.replace(/^grpc:/, 'http:')).port);
  const hello = () => new Promise<void>((resolve) => {
    const c = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false });
    c.on('error', () => resolve());
    c.on('close', () => resolve());
  });
  const bin = findHeadscale();
  if (bin) {
    const { secret: apiKey } = await s.state.keys.createApiKey(null);
    const r = await runHeadscale(bin, { address: `127.0.0.1:${port}`, apiKey, args: ['users', 'list'], insecure: false, cliTimeout: '5s' });
    t.not(r.code, 0, 'the headscale CLI with TLS fails against the plaintext port');
  } else await hello();
  await hello();
  await hello();
  const lines = s.logs.filter((l) => l.includes('spoke TLS to the gRPC port'));
  t.equal(lines.length, 1, 'logged once for three attempts');
  t.match(lines[0], /cli\.insecure: true \(HEADSCALE_CLI_INSECURE=1\).*tls_cert_path and tls_key_path/, 'with the two ways out');
  // The port still serves gRPC in plaintext.
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  t.teardown(() => client.close());
  await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 10_000, (err) => (err ? reject(err) : resolve())));
  t.pass('a plaintext gRPC client still connects (its HTTP/2 connection is ready)');
});
