import t from 'tap';
import { nodeReach, parsePolicy, policyTestResults, runPolicyTests, type Snapshot } from '../src/index.js';

const snapshot: Snapshot = {
  users: [{ id: '1', name: 'alice' }, { id: '2', name: 'bob' }],
  nodes: [
    { id: '1', name: 'laptop', userId: '1', tags: [], ipv4: '100.64.0.1', ipv6: 'fd7a:115c:a1e0::1', availableRoutes: [], approvedRoutes: [] },
    { id: '2', name: 'web', tags: ['tag:web'], ipv4: '100.64.0.2', availableRoutes: ['10.0.0.0/24'], approvedRoutes: ['10.0.0.0/24'] },
    { id: '3', name: 'phone', userId: '2', tags: [], ipv4: '100.64.0.3', availableRoutes: [], approvedRoutes: [] },
  ],
};
const opts = { userNames: ['alice', 'bob'] };

const POLICY = `{
  "tagOwners": { "tag:web": ["alice@"] },
  "acls": [
    { "action": "accept", "src": ["alice@"], "dst": ["tag:web:80,443", "10.0.0.0/24:*"] },
    { "action": "accept", "proto": "icmp", "src": ["bob@"], "dst": ["alice@:*"] },
  ],
  "tests": [
    { "src": "alice@", "accept": ["web:443"], "deny": ["web:22"] },
    { "src": "bob@", "accept": ["web:80"] },
    { "src": "nobody@example.com", "accept": ["web:80"] },
  ],
  "hosts": { "web": "100.64.0.2" },
}`;

t.test('nodeReach: the ports each way, by protocol, on nodes\' own addresses only (not routed subnets)', async (t) => {
  const policy = parsePolicy(POLICY, opts);
  const laptop = nodeReach(policy, snapshot, '1');
  t.same(laptop.canReach, [{ id: '2', name: 'web', ports: ['80', '443'] }], 'the subnet behind web is not web');
  t.same(laptop.reachableFrom, [{ id: '3', name: 'phone', ports: ['*/proto 1'] }], 'bob reaches alice by ICMP only');
  t.same(laptop.peers.map((p) => p.name).sort(), ['phone', 'web']);
  const web = nodeReach(policy, snapshot, '2');
  t.same(web.canReach, [], 'web opens nothing');
  t.same(web.reachableFrom, [{ id: '1', name: 'laptop', ports: ['80', '443'] }]);
  t.same(nodeReach(null, snapshot, '3').canReach.map((e) => e.ports), [['*'], ['*']], 'no policy: everything');
  t.throws(() => nodeReach(policy, snapshot, '9'), /unknown node "9"/);
});

t.test('policyTestResults: a verdict per test with every failure; runPolicyTests throws the first', async (t) => {
  const policy = parsePolicy(POLICY, opts);
  const results = policyTestResults(policy, snapshot);
  t.same(results.map((r) => [r.block, r.index, r.passed]), [['tests', 0, true], ['tests', 1, false], ['tests', 2, false]]);
  t.same(results[1]!.failures, ['bob@ -> web:80 expected accept']);
  t.match(results[2]!.failures[0], /src "nobody@example.com" matches no device/);
  t.throws(() => runPolicyTests(policy, snapshot), { message: 'test(s) failed: tests[1]: bob@ -> web:80 expected accept' });
  t.same(policyTestResults(parsePolicy('{}', opts), snapshot), [], 'no tests, no verdicts');
});
