// /api/v1/drive against a real server (SQLite, @headway/drive-db listed under
// plugins:): every bad body is a 4xx naming the field and stores nothing, unknown
// users and nodes are 404s, a grant reaches the compiled maps at once, and a
// server without a grant store says which plugin to add. The CLI's refusals
// carry the server's message.
import t, { type Test } from 'tap';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';
import { runHeadwayOn } from '../src/cli.js';

const CAP = 'tailscale.com/cap/drive';

async function setup(t: Test, plugins = true) {
  const s = await startTestServer(plugins ? { plugins: [{ package: '@headway/drive-db', port: 'drive' }] } : {});
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const alice = await s.state.users.create({ name: 'alice' });
  const node = await s.state.nodes.create({ machineKey: `mkey:${'1'.repeat(64)}`, nodeKey: `nodekey:${'2'.repeat(64)}`, hostname: 'nas', userId: alice.id, registerMethod: 'api' });
  return { s, key, alice, node };
}

async function rawPost(s: TestServer, key: string, body: string, type = 'application/json') {
  const res = await fetch(`${s.urls.http}/api/v1/drive`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': type }, body });
  return { status: res.status, json: await res.json() as { code?: string; detail?: string; field?: string } };
}

t.test('POST /api/v1/drive refuses bad bodies with a 4xx naming the field, and stores nothing', async (t) => {
  const { s, key } = await setup(t);
  const cases: Array<[unknown, number, string | undefined, RegExp]> = [
    [{}, 400, 'src', /src: is required/],
    [{ src: 'alice' }, 400, 'dst', /dst: is required/],
    [{ src: 42, dst: 'nas' }, 400, 'src', /src: expected a string, found number/],
    [{ src: 'alice', dst: ['nas'] }, 400, 'dst', /dst: expected a string, found a list/],
    [{ src: 'alice', dst: 'nas', shares: 'docs' }, 400, 'shares', /shares: expected a list of share names/],
    [{ src: 'alice', dst: 'nas', shares: [] }, 400, 'shares', /must name at least one share/],
    [{ src: 'alice', dst: 'nas', shares: ['../etc'] }, 400, 'shares', /not a Taildrive share name/],
    [{ src: 'alice', dst: 'nas', access: 'write' }, 400, 'access', /access: expected "ro" or "rw", found "write"/],
    [{ src: 'alice', dst: 'nas', acess: 'rw' }, 400, 'acess', /acess: unknown field/],
    [{ src: 'alice', dst: 'user:alice' }, 400, 'dst', /a node \(node:NAME\) or a tag/],
    [{ src: 'nobody', dst: 'nas' }, 404, undefined, /user nobody not found/],
    [{ src: 'alice', dst: 'node:ghost' }, 404, undefined, /node ghost not found/],
    [{ src: 'alice', dst: 'node:9999' }, 404, undefined, /node 9999 not found/],
    [{ src: 'group:eng', dst: 'nas' }, 404, undefined, /group group:eng .*not defined in the policy/],
  ];
  for (const [body, status, field, detail] of cases) {
    const r = await adminFetch(s, key, 'POST', '/api/v1/drive', body);
    t.equal(r.status, status, `${JSON.stringify(body)} → ${status}`);
    t.match(r.json, { detail }, 'with a message saying what is wrong');
    if (field) t.equal(r.json.field, field, `naming ${field}`);
  }
  const notJson = await rawPost(s, key, '{"src": ');
  t.equal(notJson.status, 400, 'a body that is not JSON is a 400');
  const wrongType = await rawPost(s, key, 'src=alice', 'application/x-www-form-urlencoded');
  t.ok(wrongType.status >= 400 && wrongType.status < 500, `a form body is a 4xx (${wrongType.status})`);
  const list = await adminFetch(s, key, 'GET', '/api/v1/drive');
  t.same(list.json, { grants: [] }, 'nothing was stored');
  t.notOk(s.logs.some((l) => / 500 |"status":500/.test(l)), 'no 500 was logged');
});

t.test('a grant is listed, reaches the compiled maps at once, and a revoke removes it', async (t) => {
  const { s, key, alice, node } = await setup(t);
  const before = s.control.mapper.filterJson(node.id);
  t.notMatch(before, CAP, 'no drive capability before');
  const made = await adminFetch(s, key, 'POST', '/api/v1/drive', { src: 'alice', dst: `node:${node.id}`, shares: ['docs'], access: 'rw' });
  t.equal(made.status, 200);
  t.match(made.json, {
    grant: { id: /^\d+$/, src: { kind: 'user', id: String(alice.id), name: 'alice' }, dst: { kind: 'node', id: String(node.id), name: 'nas' }, shares: ['docs'], access: 'rw', createdAt: /^\d{4}-/ },
  }, 'the stored grant comes back with names');
  const filter = JSON.parse(s.control.mapper.filterJson(node.id)) as Array<{ CapGrant?: Array<{ CapMap: Record<string, unknown> }> }>;
  t.same(filter.flatMap((r) => r.CapGrant ?? []).map((g) => g.CapMap[CAP]).filter(Boolean), [[{ shares: ['docs'], access: 'rw' }]], 'the node\'s filter holds the grant right after the answer');
  const self = JSON.parse(s.control.mapper.selfNode(s.state.nodes.get(node.id)!)) as { CapMap: Record<string, unknown> };
  t.ok('drive:share' in self.CapMap && 'drive:access' in self.CapMap, 'the node may share and (its own user being the source) access');
  const listed = await adminFetch(s, key, 'GET', '/api/v1/drive');
  t.same(listed.json.grants, [made.json.grant], 'GET lists it');

  t.equal((await adminFetch(s, key, 'DELETE', '/api/v1/drive/abc')).status, 400, 'a non-numeric id is a 400');
  const missing = await adminFetch(s, key, 'DELETE', '/api/v1/drive/9999');
  t.equal(missing.status, 404, 'an unknown id is a 404');
  t.match(missing.json, { detail: /drive grant 9999 not found/ });
  const gone = await adminFetch(s, key, 'DELETE', `/api/v1/drive/${made.json.grant.id}`);
  t.same([gone.status, gone.json], [200, {}], 'DELETE revokes');
  t.notMatch(s.control.mapper.filterJson(node.id), CAP, 'and the capability is gone from the filter');
  t.same((await adminFetch(s, key, 'GET', '/api/v1/drive')).json, { grants: [] });
});

t.test('without a drive grant store the API answers 409 naming the plugin; the CLI shows it', async (t) => {
  const { s, key } = await setup(t, false);
  const r = await adminFetch(s, key, 'GET', '/api/v1/drive');
  t.equal(r.status, 409);
  t.match(r.json, { detail: /@headway\/drive-db/ });
  const cli = await runHeadwayOn(s, ['drive', 'list'], 30_000);
  t.not(cli.code, 0, 'headway drive list fails');
  t.match(cli.stderr, /@headway\/drive-db/, `and says what to add: ${cli.stderr.trim()}`);
});

t.test('the CLI refuses what the API refuses, with its message', async (t) => {
  const { s } = await setup(t);
  const r = await runHeadwayOn(s, ['drive', 'grant', '--from', 'nobody', '--to', 'nas'], 30_000);
  t.not(r.code, 0, 'an unknown user fails');
  t.match(r.stderr, /user nobody not found/);
  const bad = await runHeadwayOn(s, ['drive', 'grant', '--from', 'alice', '--to', 'nas', '--access', 'write'], 30_000);
  t.not(bad.code, 0, 'a bad --access fails before any request');
  t.match(bad.stderr, /access/);
  const rv = await runHeadwayOn(s, ['drive', 'revoke', 'x1'], 30_000);
  t.not(rv.code, 0);
  t.match(rv.stderr, /"x1" is not a grant id/);
  const ok = await runHeadwayOn(s, ['drive', 'grant', '--from', 'alice', '--to', 'nas', '-s', 'docs,photos'], 30_000);
  t.equal(ok.code, 0, `a good grant succeeds ${ok.stderr}`);
  t.match(ok.stdout, /Drive grant 1 added/);
  t.match(ok.stdout, /user:alice\s+node:nas\s+docs,photos\s+ro/, 'and prints it (read-only by default)');
});
