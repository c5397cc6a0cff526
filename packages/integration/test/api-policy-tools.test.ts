// /api/v1's policy tools for editing a policy before setting it: GET's version and PUT's optional `version` (a stale
// one is a 412 and changes nothing), the `tests` block run test by test, and one node's reach in both directions.
import t, { type Test } from 'tap';
import { nodeReach, parsePolicy } from '@headway/policy';
import { snapshotOf } from '@headway/core';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';

const POLICY = `{
  "acls": [
    { "action": "accept", "src": ["alice@"], "dst": ["bob@:22"] },
    { "action": "accept", "src": ["bob@"], "dst": ["carol@:80-443"] },
  ],
  "tests": [
    { "src": "alice@", "accept": ["bob-laptop:22"], "deny": ["carol-laptop:80"] },
    { "src": "carol@", "accept": ["alice-laptop:22"] },
  ],
  "hosts": {
    "bob-laptop": "100.64.0.2",
    "carol-laptop": "100.64.0.3",
    "alice-laptop": "100.64.0.1",
  },
}
`;

async function tailnet(t: Test): Promise<{ s: TestServer; call: (m: string, p: string, b?: unknown) => ReturnType<typeof adminFetch>; ids: Record<string, string> }> {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const call = (m: string, p: string, b?: unknown) => adminFetch(s, key, m, p, b);
  const ids: Record<string, string> = {};
  for (const name of ['alice', 'bob', 'carol']) {
    t.equal((await call('POST', '/api/v1/user', { name })).status, 200);
    ids[name] = (await call('POST', '/api/v1/debug/node', { user: name, name: `${name}-laptop` })).json.node.id;
  }
  return { s, call, ids };
}

t.test('PUT with the version GET answered sets the policy; with a stale version it is a 412 and the policy stays', async (t) => {
  const { call } = await tailnet(t);
  const first = await call('GET', '/api/v1/policy');
  t.match(first.json, { policy: '', mode: 'database', source: /database/, version: /^[0-9a-f]{64}$/ });
  const a = await call('PUT', '/api/v1/policy', { policy: '{"acls": []}', version: first.json.version });
  t.equal(a.status, 200, 'set at the version loaded');
  t.equal(a.json.version, (await call('GET', '/api/v1/policy')).json.version, 'PUT answers the new version, as GET does');
  const b = await call('PUT', '/api/v1/policy', { policy: '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}', version: first.json.version });
  t.equal(b.status, 412, 'a second writer holding the old version is refused');
  t.equal(b.json.code, 'precondition_failed');
  const now = await call('GET', '/api/v1/policy');
  t.equal(now.json.policy, '{"acls": []}', 'the first writer\'s text stays');
  t.not(now.json.version, first.json.version, 'the version moved');
  const bad = await call('PUT', '/api/v1/policy', { policy: '{}', version: 'v1' });
  t.equal(bad.status, 400);
  t.match(bad.json, { field: 'version', detail: /64 hex digits/ });
  t.equal((await call('GET', '/api/v1/policy')).json.policy, '{"acls": []}', 'a malformed version changes nothing');
  t.equal((await call('PUT', '/api/v1/policy', { policy: '{}' })).status, 200, 'no version: set whatever is stored');
});

t.test('POST /api/v1/policy/tests answers each test\'s verdict; a policy that does not parse is a 400 with line and column', async (t) => {
  const { call } = await tailnet(t);
  const r = await call('POST', '/api/v1/policy/tests', { policy: POLICY });
  t.equal(r.status, 200);
  t.match(r.json.results, [
    { block: 'tests', index: 0, src: 'alice@', passed: true, failures: [] },
    { block: 'tests', index: 1, src: 'carol@', passed: false, failures: ['carol@ -> alice-laptop:22 expected accept'] },
  ]);
  const check = await call('POST', '/api/v1/policy/check', { policy: POLICY });
  t.equal(check.status, 400, 'check refuses the policy for the same failing test');
  t.match(check.json.detail, /tests\[1\]: carol@ -> alice-laptop:22 expected accept/);
  const broken = await call('POST', '/api/v1/policy/tests', { policy: '{\n  "acls": [\n    { "action": "accept", "src": ["*"] "dst": ["*:*"] },\n  ],\n}' });
  t.equal(broken.status, 400);
  t.equal(broken.json.code, 'invalid_policy');
  t.match(broken.json.errors[0], /^line 3, column \d+: /);
  t.same((await call('POST', '/api/v1/policy/tests', { policy: '' })).json, { results: [] }, 'no policy, no tests');
});

t.test('POST /api/v1/policy/preview answers whom a node may reach and who may reach it, as the compiler does', async (t) => {
  const { s, call, ids } = await tailnet(t);
  const bob = await call('POST', '/api/v1/policy/preview', { policy: POLICY, node: ids.bob });
  t.equal(bob.status, 200);
  t.same(bob.json.node, { id: ids.bob, name: 'bob-laptop' });
  t.same(bob.json.canReach, [{ id: ids.carol, name: 'carol-laptop', ports: ['80-443'] }], 'bob reaches carol on 80-443');
  t.same(bob.json.reachableFrom, [{ id: ids.alice, name: 'alice-laptop', ports: ['22'] }], 'alice reaches bob on 22');
  t.same(bob.json.peers.map((p: { name: string }) => p.name).sort(), ['alice-laptop', 'carol-laptop']);
  const alice = await call('POST', '/api/v1/policy/preview', { policy: POLICY, node: ids.alice });
  t.same(alice.json.reachableFrom, [], 'nobody reaches alice');
  t.same(alice.json.peers.map((p: { name: string }) => p.name), ['bob-laptop'], 'alice is sent only bob');
  const snap = snapshotOf(s.state);
  t.same(alice.json.canReach, nodeReach(parsePolicy(POLICY), snap, ids.alice!).canReach, 'the compiler agrees');
  const open = await call('POST', '/api/v1/policy/preview', { policy: '', node: ids.alice });
  t.equal(open.json.canReach.length, 2, 'no policy: every node reaches every node');
  t.same(open.json.canReach[0].ports, ['*']);
  const missing = await call('POST', '/api/v1/policy/preview', { policy: POLICY, node: '999' });
  t.equal(missing.status, 404);
  t.match(missing.json.detail, /999/);
  const bad = await call('POST', '/api/v1/policy/preview', { policy: POLICY, node: 'x' });
  t.equal(bad.status, 400);
  t.equal(bad.json.field, 'node');
});
