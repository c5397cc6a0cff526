import t from 'tap';
import { ALLOW_ALL, TailnetContext, compilePolicy, parsePolicy, policyWarnings, primaryRoutes, type Snapshot } from '../src/index.js';

const snapshot: Snapshot = {
  users: [{ id: '1', name: 'odin', email: 'odin@example.com' }, { id: '2', name: 'thor', email: 'thor@example.org' }],
  nodes: [
    { id: 'a', name: 'laptop', userId: '1', tags: [], ipv4: '100.64.0.1', ipv6: 'fd7a:115c:a1e0::1', availableRoutes: [], approvedRoutes: [] },
    { id: 'b', name: 'phone', userId: '2', tags: [], ipv4: '100.64.0.2', ipv6: 'fd7a:115c:a1e0::2', availableRoutes: [], approvedRoutes: [] },
    { id: 'r1', name: 'router1', tags: ['tag:router'], ipv4: '100.64.0.3', availableRoutes: ['10.1.0.0/16', '0.0.0.0/0', '::/0'], approvedRoutes: [] },
    { id: 'r2', name: 'router2', tags: ['tag:router'], ipv4: '100.64.0.4', availableRoutes: ['10.1.0.0/16'], approvedRoutes: ['10.1.0.0/16'] },
  ],
};

t.test('no policy allows everything', async (tt) => {
  const c = compilePolicy(null, snapshot, 'a');
  tt.same(c.packetFilter, ALLOW_ALL);
  tt.same(c.peers.sort(), ['b', 'r1', 'r2']);
  tt.equal(c.sshPolicy, null);
});

t.test('acl compiles to the destination node only', async (tt) => {
  const pol = parsePolicy(`{
    "tagOwners": {"tag:router": ["odin@example.com"]},
    "acls": [{"action": "accept", "src": ["odin@example.com"], "dst": ["thor@example.org:22"]}],
    "autoApprovers": {"routes": {"10.0.0.0/8": ["tag:router"]}, "exitNode": ["tag:router"]},
  }`);
  const phone = compilePolicy(pol, snapshot, 'b');
  tt.same(phone.packetFilter, [{
    SrcIPs: ['100.64.0.1', 'fd7a:115c:a1e0::1'],
    DstPorts: [{ IP: '100.64.0.2', Ports: { First: 22, Last: 22 } }, { IP: 'fd7a:115c:a1e0::2', Ports: { First: 22, Last: 22 } }],
  }]);
  tt.same(phone.peers, ['a']);
  const laptop = compilePolicy(pol, snapshot, 'a');
  tt.same(laptop.packetFilter, [], 'the source gets no rule');
  tt.same(laptop.peers, ['b']);
  const r1 = compilePolicy(pol, snapshot, 'r1');
  tt.same(r1.approvedRoutes.sort(), ['0.0.0.0/0', '10.1.0.0/16', '::/0'], 'autoApprovers approve subnet and exit routes');
});

t.test('primary route goes to the first router that has it approved', async (tt) => {
  const pol = parsePolicy('{"tagOwners": {"tag:router": []}, "autoApprovers": {"routes": {"10.1.0.0/16": ["tag:router"]}}}');
  const ctx = new TailnetContext(pol, snapshot);
  tt.equal(primaryRoutes(ctx).get('10.1.0.0/16'), 'r1');
  const ctx2 = new TailnetContext(null, snapshot);
  tt.equal(primaryRoutes(ctx2).get('10.1.0.0/16'), 'r2', 'without auto-approval only router2 has it');
});

t.test('warnings flag lost connectivity', async (tt) => {
  const pol = parsePolicy('{"acls": []}');
  const w = policyWarnings(pol, snapshot);
  tt.ok(w.some((x) => /lose connectivity/.test(x)), 'warns about members losing connectivity');
  tt.same(policyWarnings(parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}]}'), snapshot), []);
});

t.test('tests block rejects a policy naming the failing test', async (tt) => {
  const { previewPolicy } = await import('../src/index.js');
  const topo = {
    users: [{ id: 1, name: 'odin', email: 'odin@example.com' }],
    nodes: { a: { tags: [], ipv4: '100.64.0.1', user: 'odin' }, s: { tags: ['tag:s'], ipv4: '100.64.0.9' } },
  };
  const bad = previewPolicy('{"tagOwners":{"tag:s":[]},"acls":[],"tests":[{"src":"odin@example.com","accept":["tag:s:22"]}]}', topo);
  tt.equal(bad.accepted, false);
  tt.match(bad.error ?? '', /^test\(s\) failed: tests\[0\]: odin@example.com -> tag:s:22 expected accept/);
  const good = previewPolicy('{"tagOwners":{"tag:s":[]},"acls":[{"action":"accept","src":["odin@example.com"],"dst":["tag:s:22"]}],"tests":[{"src":"odin@example.com","accept":["tag:s:22"],"deny":["tag:s:80"]}]}', topo);
  tt.equal(good.accepted, true);
  tt.same(good.nodes['s']?.peers.map((p) => p.name), ['a']);
});

t.test('a policy group names identity-provider groups when the server passes users\' groups (oidc.policy_groups)', async (tt) => {
  const withGroups: Snapshot = {
    ...snapshot,
    users: [{ id: '1', name: 'odin', email: 'odin@example.com', groups: ['engineering'] }, { id: '2', name: 'thor', email: 'thor@example.org', groups: ['sales'] }],
  };
  const pol = parsePolicy(`{
    "groups": {"group:engineering": []},
    "acls": [{"action": "accept", "src": ["group:engineering"], "dst": ["thor@example.org:22"]}],
  }`);
  const phone = compilePolicy(pol, withGroups, 'b');
  tt.same(phone.packetFilter[0]?.SrcIPs, ['100.64.0.1', 'fd7a:115c:a1e0::1'], 'odin is in group:engineering through the provider');
  const without = compilePolicy(pol, snapshot, 'b');
  tt.same(without.packetFilter, [], 'without provider groups the declared group is empty');
  const member = parsePolicy(`{"acls": [{"action": "accept", "src": ["autogroup:member"], "dst": ["thor@example.org:22"]}]}`);
  tt.same(compilePolicy(member, withGroups, 'b').packetFilter[0]?.SrcIPs, ['100.64.0.1-100.64.0.2', 'fd7a:115c:a1e0::1-fd7a:115c:a1e0::2'], 'autogroup:member includes users from the provider');
});
