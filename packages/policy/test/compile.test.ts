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

t.test('names a policy gives are its own: Object.prototype\'s members are no hosts, attributes or capabilities', async (tt) => {
  // A host named "constructor" was found (Object.prototype's function, taken for an address set): the policy was
  // accepted and every node's filter failed to compile, cutting every device off.
  for (const text of [
    '{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}],"ssh":[{"action":"accept","src":["constructor"],"dst":["autogroup:self"],"users":["root"]}]}',
    '{"nodeAttrs":[{"target":["constructor"],"attr":["funnel"]}]}',
    '{"acls":[{"action":"accept","src":["*"],"dst":["toString:*"]}]}',
    '{"grants":[{"src":["*"],"dst":["valueOf"],"ip":["*"]}]}',
    '{"acls":[{"action":"accept","src":["hasOwnProperty"],"dst":["*:*"]}]}',
  ]) {
    tt.throws(() => parsePolicy(text), /host "(constructor|toString|valueOf|hasOwnProperty)" not found/, text);
  }
  // Where no existence check applies, such a name resolves to nothing instead of a function.
  const aa = parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}],"autoApprovers":{"exitNode":["constructor"],"routes":{"10.1.0.0/16":["toString"]}}}');
  tt.same(compilePolicy(aa, snapshot, 'r1').approvedRoutes, [], 'approves nothing, compiles');
  // An attribute or capability named like a prototype member is an ordinary name.
  const attrs = parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}],"nodeAttrs":[{"target":["*"],"attr":["constructor","toString"]},{"target":["*"],"app":{"example.com/cap/__proto__":[{"x":1}]}}]}');
  const c = compilePolicy(attrs, snapshot, 'a');
  tt.same(Object.keys(c.capMap).sort(), ['constructor', 'example.com/cap/__proto__', 'toString']);
  tt.equal(c.capMap.constructor, null);
  const ssh = parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}],"ssh":[{"action":"accept","src":["autogroup:member"],"dst":["autogroup:self"],"users":["__proto__","constructor"]}]}');
  const rules = compilePolicy(ssh, snapshot, 'a').sshPolicy?.rules ?? [];
  tt.same(Object.keys(rules[0]?.sshUsers ?? {}).sort(), ['__proto__', 'constructor', 'root'], 'ssh users named like prototype members are users');
});

t.test('an acl with thousands of repeated sources and destinations compiles as written, each list resolved once', async (tt) => {
  // 2,000 copies of a user on each side took the server 30 s (every destination's grant merged the whole source
  // list again); the output is the same as before, the repeated entries kept as Tailscale keeps them.
  const k = 300;
  const pol = parsePolicy(JSON.stringify({ acls: [{ action: 'accept', src: Array(k).fill('odin@example.com'), dst: Array(k).fill('thor@example.org:22') }] }));
  const phone = compilePolicy(pol, snapshot, 'b');
  tt.equal(phone.packetFilter.length, 1);
  tt.same(phone.packetFilter[0]!.SrcIPs, ['100.64.0.1', 'fd7a:115c:a1e0::1']);
  tt.equal(phone.packetFilter[0]!.DstPorts!.length, 2 * k, 'every destination entry, repeated as written');
  tt.same(phone.peers, ['a']);
});
