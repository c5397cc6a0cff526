// Tailscale SSH rules: what the compiler sends (one principal per source address) and which src/dst combinations
// a policy may write (a user's devices only from that same user).
import t from 'tap';
import { TailnetContext, checkPolicy, compilePolicy, parseAddr, parsePolicy, runPolicyTests, type PolicyNode, type SSHRule, type Snapshot } from '../src/index.js';

/**
 * clientAccepts is how a client matches an incoming connection against a principal: `nodeIP` is parsed as one
 * address and compared with the connection's source (tailssh, principalMatchesTailscaleIdentity). A range or a
 * prefix does not parse, so it matches nothing.
 */
function clientAccepts(rules: SSHRule[], src: string, user: string): boolean {
  const from = parseAddr(src);
  return rules.some((r) => r.principals.some((p) => {
    const a = parseAddr(p.nodeIP);
    return a !== null && from !== null && a.v6 === from.v6 && a.n === from.n;
  }) && !!(r.sshUsers[user] ?? (user !== 'root' ? r.sshUsers['*'] : undefined)));
}

const node = (id: string, userId: string | undefined, tags: string[], n: number): PolicyNode => ({
  id, name: id, userId, tags, ipv4: `100.64.0.${n}`, ipv6: `fd7a:115c:a1e0::${n.toString(16)}`, availableRoutes: [], approvedRoutes: [],
});

const adjacent: Snapshot = {
  users: [{ id: '1', name: 'alice', email: 'alice@example.com' }, { id: '2', name: 'bob', email: 'bob@example.com' }],
  nodes: [node('node-a', '1', [], 1), node('node-b', '1', [], 2), node('bob-laptop', '2', [], 3), node('server', undefined, ['tag:server'], 4)],
};

const ALLOW = '"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]';

t.test('a user with devices at adjacent addresses may reach them with Tailscale SSH (nodeIP is one address, not a range)', async (tt) => {
  for (const rule of [
    '{"action": "accept", "src": ["alice@example.com"], "dst": ["alice@example.com"], "users": ["root"]}',
    '{"action": "accept", "src": ["autogroup:member"], "dst": ["autogroup:self"], "users": ["root"]}',
  ]) {
    const pol = parsePolicy(`{${ALLOW}, "ssh": [${rule}]}`);
    const rules = compilePolicy(pol, adjacent, 'node-b').sshPolicy?.rules ?? [];
    tt.same(rules.map((r) => r.principals.map((p) => p.nodeIP)), [['100.64.0.1', '100.64.0.2', 'fd7a:115c:a1e0::1', 'fd7a:115c:a1e0::2']],
      `${rule}: one principal per address`);
    tt.ok(clientAccepts(rules, '100.64.0.1', 'root'), `${rule}: tailscale ssh root@node-b from node-a (IPv4) is accepted`);
    tt.ok(clientAccepts(rules, 'fd7a:115c:a1e0::1', 'root'), `${rule}: and over IPv6`);
    tt.notOk(clientAccepts(rules, '100.64.0.3', 'root'), `${rule}: bob's laptop is not`);
  }
  // The policy's own sshTests match principals the same way: the test of a correct policy failed.
  const withTest = parsePolicy(`{${ALLOW},
    "ssh": [{"action": "accept", "src": ["alice@example.com"], "dst": ["alice@example.com"], "users": ["root"]}],
    "sshTests": [{"src": "alice@example.com", "dst": ["alice@example.com"], "accept": ["root"]}]}`);
  tt.doesNotThrow(() => runPolicyTests(withTest, adjacent), 'sshTests: alice may reach her own devices');
  // The same merge made a `tests` src of such a user match no device.
  const aclTest = parsePolicy(`{${ALLOW}, "tests": [{"src": "alice@example.com", "accept": ["100.64.0.4:22"]}]}`);
  tt.doesNotThrow(() => runPolicyTests(aclTest, adjacent), 'tests: alice\'s devices are a source');
});

t.test('no SSH principal is a range or a prefix, however many adjacent devices a rule names', async (tt) => {
  // 30 users with 10 devices each on consecutive addresses (crossing /24 boundaries and filling aligned blocks),
  // 20 tag:ci devices after them, and a tagged server.
  const users = Array.from({ length: 30 }, (_, k) => ({ id: String(k + 1), name: `u${k}`, email: `u${k}@example.com` }));
  const nodes: PolicyNode[] = [];
  let host = 0;
  const addr = () => {
    const n = 256 + host++;
    return { ipv4: `100.64.${n >> 8}.${n & 255}`, ipv6: `fd7a:115c:a1e0::${n.toString(16)}` };
  };
  for (const u of users) for (let d = 0; d < 10; d++) nodes.push({ id: `${u.name}-${d}`, name: `${u.name}-${d}`, userId: u.id, tags: [], ...addr(), availableRoutes: [], approvedRoutes: [] });
  for (let d = 0; d < 20; d++) nodes.push({ id: `ci-${d}`, name: `ci-${d}`, tags: ['tag:ci'], ...addr(), availableRoutes: [], approvedRoutes: [] });
  nodes.push({ id: 'server', name: 'server', tags: ['tag:server'], ipv4: '100.64.9.1', ipv6: 'fd7a:115c:a1e0::9:1', availableRoutes: [], approvedRoutes: [] });
  const snap: Snapshot = { users, nodes };
  const pol = parsePolicy(JSON.stringify({
    groups: { 'group:many': users.map((u) => u.email) },
    tagOwners: { 'tag:ci': ['u0@example.com'], 'tag:server': ['u0@example.com'] },
    acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
    ssh: [
      { action: 'accept', src: ['group:many', 'tag:ci'], dst: ['tag:server'], users: ['root'] },
      { action: 'check', src: ['100.64.1.0/24'], dst: ['tag:server'], users: ['autogroup:nonroot'] },
      { action: 'accept', src: ['group:many'], dst: ['tag:server'], users: ['localpart:*@example.com'] },
      { action: 'accept', src: ['autogroup:member'], dst: ['autogroup:self'], users: ['root'] },
    ],
  }));
  const ctx = new TailnetContext(pol, snap);
  const bad: string[] = [];
  for (const n of nodes) {
    for (const r of compilePolicy(pol, snap, n.id, ctx).sshPolicy?.rules ?? []) {
      for (const p of r.principals) if (parseAddr(p.nodeIP) === null) bad.push(`${n.name}: ${p.nodeIP}`);
    }
  }
  tt.same(bad.slice(0, 5), [], 'every nodeIP is a single address');
  const addrsOf = (ns: PolicyNode[]) => ns.flatMap((n) => [n.ipv4!, n.ipv6!]).sort();
  const server = compilePolicy(pol, snap, 'server', ctx).sshPolicy?.rules ?? [];
  const principalsOf = (r: SSHRule | undefined) => (r?.principals ?? []).map((p) => p.nodeIP).sort();
  tt.same(principalsOf(server.find((r) => r.sshUsers.root === 'root')), addrsOf(nodes.filter((n) => n.id !== 'server')),
    'group and tag sources: each device address once');
  tt.same(principalsOf(server.find((r) => r.action.holdAndDelegate)), addrsOf(nodes.filter((n) => n.ipv4!.startsWith('100.64.1.'))),
    'a /24 source: each device in it (both its addresses), not the /24');
  const u3 = compilePolicy(pol, snap, 'u3-0', ctx).sshPolicy?.rules ?? [];
  tt.same(principalsOf(u3.find((r) => r.sshUsers.root === 'root')), addrsOf(nodes.filter((n) => n.userId === '4')), 'autogroup:self: the owner\'s ten devices, one by one');
  for (const n of nodes.filter((x) => x.userId === '4')) tt.ok(clientAccepts(u3, n.ipv4!, 'root'), `u3 reaches u3-0 from ${n.name}`);
});

// The policy the table below adds its ssh rules to.
const base = (ssh: unknown[]) => JSON.stringify({
  groups: { 'group:devs': ['alice@example.com', 'bob@example.com'], 'group:solo': ['alice@example.com'] },
  tagOwners: { 'tag:ci': ['alice@example.com'], 'tag:server': ['alice@example.com'] },
  acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
  ssh,
}, null, 1);
const rule = (src: string[], dst: string[]) => ({ action: 'accept', src, dst, users: ['root'] });

t.test('a rule for SSH into another user\'s devices is refused, naming it', async (tt) => {
  const refused: [unknown[], RegExp][] = [
    [[rule(['tag:ci'], ['autogroup:member'])], /^line \d+, column \d+: ssh rule 1: dst "autogroup:member" is not allowed: .*other users' devices/],
    [[rule(['bob@example.com'], ['alice@example.com'])], /ssh rule 1: dst "alice@example.com": users in dst are only allowed from the same user, and src "bob@example.com" is not that user/],
    [[rule(['group:devs'], ['alice@example.com'])], /ssh rule 1: dst "alice@example.com": .* src "group:devs" is not that user/],
    [[rule(['group:solo'], ['alice@example.com'])], /ssh rule 1: dst "alice@example.com": .* src "group:solo" is not that user/],
    [[rule(['alice@example.com', 'bob@example.com'], ['alice@example.com'])], /src "bob@example.com" is not that user/],
    [[rule(['alice@example.com'], ['alice@example.com', 'bob@example.com'])], /dst "bob@example.com": .* src "alice@example.com" is not that user/],
    [[rule(['tag:ci'], ['alice@example.com'])], /dst "alice@example.com": .* src "tag:ci" is not that user/],
    [[rule(['*'], ['alice@example.com'])], /src "\*" is not that user/],
    [[rule(['100.64.0.3'], ['alice@example.com'])], /src "100.64.0.3" is not that user/],
    [[rule(['group:devs'], ['autogroup:member'])], /ssh rule 1: dst "autogroup:member" is not allowed/],
    [[rule(['autogroup:member'], ['autogroup:member'])], /ssh rule 1: dst "autogroup:member" is not allowed/],
    [[rule(['alice@example.com'], ['*'])], /ssh rule 1: dst "\*" is not allowed/],
    [[rule(['alice@example.com'], ['group:solo'])], /ssh rule 1: dst "group:solo" is not allowed/],
    [[rule(['alice@example.com'], ['user:*@example.com'])], /ssh rule 1: dst "user:\*@example.com" is not allowed/],
    [[rule(['tag:ci'], ['autogroup:self'])], /ssh rule 1: dst "autogroup:self" is only allowed from users and groups, not from "tag:ci"/],
    [[rule(['autogroup:member', 'autogroup:tagged'], ['autogroup:self'])], /not from "autogroup:tagged"/],
    [[rule(['alice@example.com'], ['tag:server']), rule(['bob@example.com'], ['alice@example.com'])], /ssh rule 2: dst "alice@example.com"/],
  ];
  for (const [ssh, want] of refused) {
    const text = base(ssh);
    tt.throws(() => parsePolicy(text), want, JSON.stringify(ssh));
    const { policy, errors } = checkPolicy(text);
    tt.equal(policy, null, `${JSON.stringify(ssh)}: checkPolicy refuses it too`);
    tt.match(errors.map((e) => e.message), [want]);
  }
});

t.test('SSH rules within Tailscale\'s model are accepted: a user to their own devices, anyone named to tagged devices', async (tt) => {
  const accepted: unknown[][] = [
    [rule(['alice@example.com'], ['alice@example.com'])],
    [rule(['alice@'], ['alice@'])],
    [rule(['alice@example.com'], ['alice@example.com', 'tag:server'])],
    [rule(['autogroup:member'], ['autogroup:self'])],
    [rule(['autogroup:member'], ['autogroup:self', 'tag:server'])],
    [rule(['group:devs'], ['autogroup:self'])],
    [rule(['alice@example.com', 'bob@example.com', 'user:*@example.com'], ['autogroup:self'])],
    [rule(['tag:ci'], ['tag:server'])],
    [rule(['autogroup:tagged'], ['autogroup:tagged'])],
    [rule(['autogroup:member'], ['tag:server', 'tag:ci'])],
    [rule(['bob@example.com', 'group:devs', '*', '100.64.0.0/10'], ['tag:server'])],
  ];
  for (const ssh of accepted) tt.doesNotThrow(() => parsePolicy(base(ssh)), JSON.stringify(ssh));
  // What they compile to: nobody reaches another user's device.
  const pol = parsePolicy(base([rule(['alice@example.com'], ['alice@example.com']), rule(['autogroup:member'], ['autogroup:self']), rule(['group:devs', 'tag:ci'], ['tag:server'])]));
  const snap: Snapshot = {
    users: adjacent.users,
    nodes: [...adjacent.nodes, node('ci', undefined, ['tag:ci'], 5)],
  };
  const reaches = (from: string, to: string) => clientAccepts(compilePolicy(pol, snap, to).sshPolicy?.rules ?? [], from, 'root');
  tt.ok(reaches('100.64.0.1', 'node-b'), 'alice to her own device');
  tt.notOk(reaches('100.64.0.3', 'node-b'), 'not bob to alice\'s device');
  tt.notOk(reaches('100.64.0.1', 'bob-laptop'), 'not alice to bob\'s device');
  tt.notOk(reaches('100.64.0.5', 'node-b'), 'not tag:ci to alice\'s device');
  tt.ok(reaches('100.64.0.3', 'server'), 'bob to the tagged server');
  tt.ok(reaches('100.64.0.5', 'server'), 'tag:ci to the tagged server');
});
