// The policy file under /api/v2 (Tailscale's API): HuJSON and JSON by Accept, the ETag and If-Match (412 on a
// stale version, also when two instances on one database race), validation answering as Tailscale's client
// expects, rule previews, and file mode's refusal. Shapes follow tailscale.com/client/tailscale/v2's policyfile.go.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { TestDevice } from '@headway/testkit';
import { serverDatabases, startTestServer, type TestServer } from '../src/server.js';

const POLICY = `// who may reach what
{
  "groups": { "group:admins": ["alice@"] },
  "acls": [
    // admins reach everything
    { "action": "accept", "src": ["group:admins"], "dst": ["*:*"] },
    { "action": "accept", "src": ["bob@"], "dst": ["alice@:22"] },
  ],
}
`;

interface Api { s: TestServer; call(method: string, path: string, opts?: { body?: string; headers?: Record<string, string> }): Promise<Response> }

async function api(s: TestServer): Promise<Api> {
  const { secret } = await s.state.keys.createApiKey(null);
  return {
    s,
    call: (method, path, opts = {}) => fetch(s.urls.http + path, {
      method, body: opts.body, headers: { authorization: `Bearer ${secret}`, ...opts.headers },
    }),
  };
}

/** tailnet makes users alice and bob and registers alice's laptop (a testkit device), which gets 100.64.0.1. */
async function tailnet(t: Test, s: TestServer): Promise<void> {
  const alice = await s.state.users.create({ name: 'alice' });
  await s.state.users.create({ name: 'bob' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: alice.id });
  const laptop = new TestDevice({ serverUrl: s.urls.http, hostname: 'laptop' });
  t.teardown(() => laptop.close());
  await laptop.connect();
  const r = await laptop.register({ authKey: secret });
  if (r.Error) throw new Error(`register: ${r.Error}`);
  t.equal(s.state.nodes.list()[0]?.ipv4, '100.64.0.1', 'the laptop is 100.64.0.1');
}

t.test('GET answers HuJSON by default and JSON on Accept: application/json, with a quoted ETag; POST with If-Match refuses a stale version', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const a = await api(s);
  await s.state.users.create({ name: 'alice' });
  await s.state.users.create({ name: 'bob' });

  const none = await a.call('GET', '/api/v2/tailnet/-/acl');
  t.equal(none.status, 200);
  const noneTag = none.headers.get('etag')!;
  t.match(noneTag, /^"[0-9a-f]{64}"$/, 'the ETag is quoted, as the Go client sends it back in If-Match');
  t.match(await none.text(), /"\*:\*"/, 'no policy reads as the policy meaning the same: everything allowed');

  const set = await a.call('POST', '/api/v2/tailnet/-/acl', { body: POLICY, headers: { 'content-type': 'application/hujson', 'if-match': '"ts-default"' } });
  t.equal(set.status, 200, 'If-Match "ts-default" sets the policy while none was ever set');
  const v1 = set.headers.get('etag')!;
  t.not(v1, noneTag, 'a new version has a new ETag');
  t.equal(await set.text(), POLICY, 'a HuJSON set answers the text as stored');

  const raw = await a.call('GET', '/api/v2/tailnet/-/acl', { headers: { accept: 'application/hujson' } });
  t.equal(raw.headers.get('content-type'), 'application/hujson');
  t.equal(await raw.text(), POLICY, 'HuJSON keeps the comments');
  t.equal(raw.headers.get('etag'), v1, 'the same version has the same ETag');

  const json = await a.call('GET', '/api/v2/tailnet/-/acl', { headers: { accept: 'application/json' } });
  t.match(json.headers.get('content-type'), /^application\/json/);
  const parsed = await json.json() as Record<string, unknown>;
  t.same(parsed.groups, { 'group:admins': ['alice@'] }, 'JSON is the parsed policy, comments and trailing commas gone');
  t.equal((parsed.acls as unknown[]).length, 2);

  const stale = await a.call('POST', '/api/v2/tailnet/-/acl', { body: '{"acls": []}', headers: { 'content-type': 'application/json', 'if-match': noneTag } });
  t.equal(stale.status, 412, 'a stale If-Match is refused');
  t.match(await stale.json(), { message: /no longer version/ });
  const notDefault = await a.call('POST', '/api/v2/tailnet/-/acl', { body: '{"acls": []}', headers: { 'content-type': 'application/json', 'if-match': '"ts-default"' } });
  t.equal(notDefault.status, 412, '"ts-default" once a policy is set is stale too');
  t.equal(s.policy.policyText, POLICY, 'and nothing changed');

  // The Go client's SetAndGet: a JSON ACL body, no Accept; the answer is JSON with the new ETag.
  const unquoted = v1.replace(/"/g, '');
  const json2 = await a.call('POST', '/api/v2/tailnet/-/acl', { body: JSON.stringify({ acls: [{ action: 'accept', src: ['*'], dst: ['*:22'] }] }), headers: { 'content-type': 'application/json', 'if-match': `"${unquoted}"` } });
  t.equal(json2.status, 200);
  t.same(await json2.json(), { acls: [{ action: 'accept', src: ['*'], dst: ['*:22'] }] });

  const bad = await a.call('POST', '/api/v2/tailnet/-/acl', { body: '{\n  "acls": [ { "action": "accept", "src": ["*"], "dst": ["nope"] } ]\n}', headers: { 'content-type': 'application/hujson' } });
  t.equal(bad.status, 400, 'an invalid policy is a 400');
  t.match(await bad.json(), { message: /line 2/ }, 'naming the line');
  const failing = await a.call('POST', '/api/v2/tailnet/-/acl', {
    body: JSON.stringify({ acls: [], tests: [{ src: 'alice@', accept: ['100.64.0.1:22'] }] }), headers: { 'content-type': 'application/json' },
  });
  t.equal(failing.status, 400, 'a policy whose tests fail is not set');
  t.match(await failing.json(), { message: /test\(s\) failed/ });
  t.match(s.policy.policyText, /\*:22/, 'the refused policies changed nothing');

  const empty = await a.call('POST', '/api/v2/tailnet/-/acl', { body: '', headers: { 'content-type': 'application/hujson' } });
  t.equal(empty.status, 400);
  const details = await a.call('GET', '/api/v2/tailnet/-/acl?details=1');
  t.match(await details.json(), { acl: /\*:22/, warnings: Array, errors: [] });
  const other = await a.call('GET', '/api/v2/tailnet/other.example/acl');
  t.equal(other.status, 404);
});

t.test('validate answers 200 with an empty body when the policy passes, 200 with message and data otherwise', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const a = await api(s);
  await tailnet(t, s);
  await s.policy.set(POLICY);

  const ok = await a.call('POST', '/api/v2/tailnet/-/acl/validate', { body: POLICY, headers: { 'content-type': 'application/hujson' } });
  t.equal(ok.status, 200);
  t.equal(await ok.text(), '', 'a passing policy: empty body (the Go client returns nil only then)');

  const broken = await a.call('POST', '/api/v2/tailnet/-/acl/validate', { body: '{ "acls": [ { "action": "accept", "src": ["*"], ', headers: { 'content-type': 'application/hujson' } });
  t.equal(broken.status, 200, 'an invalid policy is a 200 with a message, as Tailscale answers');
  t.match(await broken.json(), { message: /line 1, column/ });

  const withTests = JSON.stringify({
    acls: [{ action: 'accept', src: ['group:admins'], dst: ['*:*'] }], groups: { 'group:admins': ['alice@'] },
    tests: [{ src: 'alice@', accept: ['100.64.0.1:22'] }, { src: 'alice@', deny: ['100.64.0.1:80'] }],
  });
  const failing = await a.call('POST', '/api/v2/tailnet/-/acl/validate', { body: withTests, headers: { 'content-type': 'application/json' } });
  t.equal(failing.status, 200);
  t.match(await failing.json(), { message: 'test(s) failed', data: [{ user: 'alice@', errors: [/tests\[1\].*expected deny/] }] });

  // The Go client's Validate([]ACLTest): a JSON list of tests run against the policy in force.
  const list = await a.call('POST', '/api/v2/tailnet/-/acl/validate', { body: JSON.stringify([{ src: 'alice@', accept: ['100.64.0.1:22'] }]), headers: { 'content-type': 'application/json' } });
  t.equal(await list.text(), '', 'tests that pass against the policy in force');
  const listFail = await a.call('POST', '/api/v2/tailnet/-/acl/validate', { body: JSON.stringify([{ src: 'alice@', deny: ['100.64.0.1:80'] }]), headers: { 'content-type': 'application/json' } });
  t.match(await listFail.json(), { message: 'test(s) failed', data: [{ user: 'alice@', errors: [/expected deny/] }] });
  t.equal(s.policy.policyText, POLICY, 'validation changes nothing');
});

t.test('preview lists the rules that apply to a user or to an address and port, with their lines', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const a = await api(s);
  await tailnet(t, s);
  const preview = async (q: string, body = POLICY) => a.call('POST', `/api/v2/tailnet/-/acl/preview?${q}`, { body, headers: { 'content-type': 'application/hujson' } });

  const alice = await preview('type=user&previewFor=alice');
  t.equal(alice.status, 200);
  t.same(await alice.json(), { matches: [{ users: ['group:admins'], ports: ['*:*'], lineNumber: 6 }], type: 'user', previewFor: 'alice' },
    "alice's laptop is covered by the admins rule only");
  const port22 = await preview('type=ipport&previewFor=100.64.0.1:22');
  t.same((await port22.json() as { matches: unknown[] }).matches, [
    { users: ['group:admins'], ports: ['*:*'], lineNumber: 6 }, { users: ['bob@'], ports: ['alice@:22'], lineNumber: 7 },
  ], 'port 22 of the laptop: both rules');
  const port80 = await preview('type=ipport&previewFor=100.64.0.1:80');
  t.equal((await port80.json() as { matches: unknown[] }).matches.length, 1, 'port 80: only the admins rule');

  const badAddr = await preview('type=ipport&previewFor=laptop');
  t.equal(badAddr.status, 400);
  t.match(await badAddr.json(), { message: /previewFor.*"laptop"/ });
  const badUser = await preview('type=user&previewFor=mallory');
  t.equal(badUser.status, 400);
  t.match(await badUser.json(), { message: /mallory/ });
  const badType = await preview('type=device&previewFor=x');
  t.equal(badType.status, 400);
  const badPolicy = await preview('type=user&previewFor=alice', '{ "acls": 3 }');
  t.equal(badPolicy.status, 400);
  t.equal(s.policy.policyText, undefined, 'previews set nothing');
});

t.test('file mode: reads work, a set is a 400 naming policy.path', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-v2pol-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'policy.hujson');
  writeFileSync(path, POLICY);
  const s = await startTestServer({ policy: { mode: 'file', path } });
  t.teardown(() => s.stop());
  const a = await api(s);
  const get = await a.call('GET', '/api/v2/tailnet/-/acl');
  t.equal(await get.text(), POLICY);
  const set = await a.call('POST', '/api/v2/tailnet/-/acl', { body: '{"acls": []}', headers: { 'content-type': 'application/json' } });
  t.equal(set.status, 400);
  t.match(await set.json(), { message: /policy\.mode: database.*policy\.path/s });
  t.equal(s.policy.policyText, POLICY);
});

t.test('a token without policy_file write scope cannot set the policy', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const res = await fetch(`${s.urls.http}/api/v2/tailnet/-/acl`, { method: 'POST', body: '{}' });
  t.equal(res.status, 401);
});

for (const db of serverDatabases(t, 'the If-Match race between instances')) {
  t.test(`${db.name}: two instances on one database, both posting with the same If-Match: exactly one wins`, (t) => db.run(async (database) => {
    const FAST = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s', poll_interval: '50ms' };
    const shared = mkdtempSync(join(tmpdir(), 'headway-v2pol-cluster-'));
    t.teardown(() => rmSync(shared, { recursive: true, force: true }));
    const servers: TestServer[] = [];
    for (let i = 0; i < 2; i++) {
      servers.push(await startTestServer({ database, cluster: FAST, policy: { mode: 'database' }, noise: { private_key_path: join(shared, 'noise.key') } }));
    }
    t.teardown(async () => { for (const s of servers.reverse()) await s.stop(); });
    const [a, b] = await Promise.all(servers.map(api)) as [Api, Api];
    for (let round = 0; round < 5; round++) {
      // The instances learn of each other's writes asynchronously: read once both hold the last round's winner.
      for (let i = 0; a.s.policy.version !== b.s.policy.version; i++) {
        if (i > 250) throw new Error('the instances did not agree on the policy within 5 s');
        await new Promise((r) => setTimeout(r, 20));
      }
      const tag = (await a.call('GET', '/api/v2/tailnet/-/acl')).headers.get('etag')!;
      const post = (x: Api, who: string) => x.call('POST', '/api/v2/tailnet/-/acl', {
        body: `{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:${round * 10 + (who === 'a' ? 1 : 2)}"]}]}`,
        headers: { 'content-type': 'application/json', 'if-match': tag },
      });
      const answers = await Promise.all([post(a, 'a'), post(b, 'b')]);
      const statuses = answers.map((r) => r.status).sort();
      t.same(statuses, [200, 412], `round ${round}: one 200, one 412`, { bodies: await Promise.all(answers.map((r) => r.text())) });
    }
  }));
}
