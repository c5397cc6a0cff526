import t from 'tap';
import { PolicyError, checkPolicy, parsePolicy, parseAlias, parsePortList, policyWarnings, userReferenceWarnings } from '../src/index.js';

/** rejection parses text that must be rejected and reports where and why. */
function rejection(text: string): { line: number; column: number; message: string; isPolicyError: boolean } {
  try {
    parsePolicy(text);
  } catch (e) {
    const pe = e as PolicyError;
    return { line: pe.line, column: pe.column, message: pe.message, isPolicyError: e instanceof PolicyError };
  }
  return { line: -1, column: -1, message: 'accepted', isPolicyError: false };
}

t.test('HuJSON extensions are accepted', async (tt) => {
  const pol = parsePolicy(`{
    // comment
    "acls": [ /* inline */
      {"action": "accept", "src": ["*"], "dst": ["*:*"],},
    ],
  }`);
  tt.equal(pol.acls?.length, 1);
  tt.same(pol.acls?.[0]?.dst[0]?.ports, [{ First: 0, Last: 65535 }]);
});

t.test('strictness: each rejected construct names its position', async (tt) => {
  const cases: [string, number, number, RegExp][] = [
    ['{\n  "groups": {},\n    acls: []\n}', 3, 5, /unquoted key "acls"/],
    ["{\n  'acls': []\n}", 2, 3, /single-quoted/],
    ['{\n  "acls": []\n  "groups": {}\n}', 3, 3, /missing comma/],
    ['{\n  # hash comment\n}', 2, 3, /"#" comments/],
    ['{\n  "hosts": {"a": 100.1.2.3}\n}', 2, 18, /quoteless string/],
    ['{\n  "hosts": {"a": abc}\n}', 2, 18, /quoteless string "abc"/],
    ['{\n  "hosts": {"a": "10.0.0.1\n"}\n}', 2, 18, /multi-line strings/],
    ['   \n  // nothing\n', 3, 1, /empty policy/],
    ['{\n  "acls": [],\n  "aclz": []\n}', 3, 3, /unknown field "aclz" in policy/],
    ['{"acls": [\n {"action": "accept", "src": ["*"], "dst": ["*:*"], "extra": 1}\n]}', 2, 53, /unknown field "extra" in acl/],
  ];
  for (const [text, line, column, pattern] of cases) {
    const r = rejection(text);
    tt.ok(r.isPolicyError, `${JSON.stringify(text)} is rejected with a PolicyError`);
    tt.same([r.line, r.column], [line, column], `position for ${JSON.stringify(text)}`);
    tt.match(r.message, pattern);
    tt.ok(r.message.startsWith(`line ${line}, column ${column}: `), 'message leads with the position');
  }
});

t.test('semantic errors use Tailscale wording', async (tt) => {
  const msg = (text: string) => {
    try { parsePolicy(text); return ''; } catch (e) { return (e as PolicyError).reason; }
  };
  tt.equal(msg('{"acls":[{"action":"accept","src":["tag:nope"],"dst":["*:*"]}]}'), 'src=tag not found: "tag:nope"');
  tt.equal(msg('{"acls":[{"action":"deny","src":["*"],"dst":["*:*"]}]}'), 'action="deny" is not supported; rules only allow ("accept"), and what no rule allows is denied');
  tt.equal(msg('{"tagOwners":{"tag:s":[]},"acls":[{"action":"accept","src":["*"],"dst":["tag:s:ssh"]}]}'), 'dst="tag:s:ssh": port range "ssh": invalid first integer');
  tt.equal(msg('{"grants":[{"src":["*"],"dst":["*"]}]}'), 'ip and app can not both be empty');
  tt.equal(msg('{"grants":[{"src":["*"],"dst":["0.0.0.0/0"],"ip":["*"]}]}'), 'dst "0.0.0.0/0": to allow all IP addresses, use "*" or "autogroup:internet"');
  tt.equal(msg('{"ssh":[{"action":"check","checkPeriod":"200h","src":["autogroup:member"],"dst":["autogroup:self"],"users":["root"]}]}'), 'checkPeriod 200h0m0s is above the max (168h)');
  tt.equal(msg('{"groups":{"group:a":["group:b"],"group:b":["x@y.z"]}}'), 'groups["group:a"]: "group:b": group members cannot be recursive');
});

t.test('aliases', async (tt) => {
  tt.same(parseAlias('*'), { kind: 'wildcard' });
  tt.same(parseAlias('odin@example.com'), { kind: 'user', name: 'odin@example.com' });
  tt.same(parseAlias('odin@'), { kind: 'user', name: 'odin@' });
  tt.same(parseAlias('group:admins'), { kind: 'group', name: 'group:admins' });
  tt.same(parseAlias('tag:server'), { kind: 'tag', name: 'tag:server' });
  tt.same(parseAlias('autogroup:member'), { kind: 'autogroup', name: 'autogroup:member' });
  tt.same(parseAlias('webserver'), { kind: 'host', name: 'webserver' });
  const p = parseAlias('10.0.0.0/8');
  tt.equal(p.kind, 'prefix');
  tt.same(p.kind === 'prefix' ? p.set.prefixes() : [], ['10.0.0.0/8']);
  const v6 = parseAlias('fd7a:115c:a1e0::1');
  tt.same(v6.kind === 'prefix' ? v6.set.prefixes() : [], ['fd7a:115c:a1e0::1']);
  tt.throws(() => parseAlias('autogroup:bogus'), /not supported/);
  tt.throws(() => parseAlias('%bogus%'), /invalid address/);
  tt.same(parsePortList('22,80-90'), [{ First: 22, Last: 22 }, { First: 80, Last: 90 }]);
  tt.throws(() => parsePortList('0'), /first port must be >0/);
});

// policy check lists every error at once, so a broken file is fixed in one round.
t.test('checkPolicy reports every error, in the order parsePolicy meets them', async (tt) => {
  const text = `{
  "groups": { "group:eng": ["alice@"], "admins": ["carol@"] },
  "hosts": { "db": "10.0.0.300" },
  "acls": [
    { "action": "accept", "src": ["group:ops"], "dst": ["alice:80"] },
    { "action": "allow", "src": ["*"], "dst": ["tag:web:443", "db:5432"] },
    { "action": "accept", "src": ["alice@"], "dst": ["*:99999"] },
  ],
  "aclz": [],
}`;
  const { policy, errors } = checkPolicy(text);
  tt.equal(policy, null);
  tt.same(errors.map((e) => [e.line, e.column, e.reason]), [
    [9, 3, 'unknown field "aclz" in policy; did you mean "acls"?'],
    [2, 40, 'groups: "admins" must start with "group:"'],
    [3, 20, 'hosts["db"]: "10.0.0.300": invalid address'],
    [5, 5, 'group "group:ops" not found'],
    [5, 5, 'host "alice" not found (define it under "hosts", or write "alice@" for a user named alice)'],
    [6, 17, 'action="allow" is not supported; did you mean "accept"?'],
    [6, 5, 'dst="tag:web": tag not found: "tag:web"'],
    [7, 5, 'dst="*:99999": port range "99999": port out of range'],
  ]);
  tt.ok(errors.every((e) => e instanceof PolicyError));
  const thrown = (() => { try { parsePolicy(text); } catch (e) { return e as PolicyError; } })();
  tt.same(thrown?.errors.map((e) => e.message), errors.map((e) => e.message), 'parsePolicy throws them all');
  tt.same([thrown?.line, thrown?.column, thrown?.reason], [errors[0]!.line, errors[0]!.column, errors[0]!.reason], 'its position and reason are the first');
  tt.notOk(errors.some((e) => /host "db" not found/.test(e.reason)), 'a bad host entry does not also make every use of it "not found"');

  const syntax = checkPolicy('{\n  "acls": [ } ,\n  "groups": 3\n}');
  tt.equal(syntax.errors.length, 1, 'a HuJSON syntax error stops there');
  tt.equal(syntax.errors[0]!.line, 2);

  const good = checkPolicy('{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}');
  tt.same(good.errors, []);
  tt.equal(good.policy?.acls?.length, 1);

  for (const bad of [
    '{"acls":[{"action":"accept","src":["tag:nope"],"dst":["*:*"]}]}',
    '{"grants":[{"src":["*"],"dst":["*"]}]}',
    '{"groups":{"group:a":["group:b"],"group:b":["x@y.z"]}}',
    '{"ssh":[{"action":"check","checkPeriod":"200h","src":["autogroup:member"],"dst":["autogroup:self"],"users":["root"]}]}',
    '{\n  "acls": [],\n  "aclz": []\n}',
  ]) {
    tt.equal(checkPolicy(bad).errors[0]?.message, rejection(bad).message, `same first error for ${bad}`);
  }
});

// "alice:80" is answered with what alice could be, not only that host alice is not found.
t.test('a bare name that is no host hints at the user form', async (tt) => {
  const text = '{"acls":[{"action":"accept","src":["*"],"dst":["alice:80"]}]}';
  tt.match(rejection(text).message, /host "alice" not found \(define it under "hosts", or write "alice@" for a user named alice\)/);
  tt.throws(() => parsePolicy(text, { userNames: ['bob', 'Alice'] }), /host "alice" not found; did you mean the user "alice@"\?/);
});

// An unknown user bob@ is flagged.
t.test('userReferenceWarnings flags users that match no live user, or several', async (tt) => {
  const policy = parsePolicy(`{
    "groups": {"group:eng": ["alice@", "bob@"]},
    "tagOwners": {"tag:ci": ["carol@example.com", "group:eng", "autogroup:admin"]},
    "acls": [{"action": "accept", "src": ["dave@"], "dst": ["alice@:22", "group:eng:*"]}],
  }`);
  const users = [
    { id: '1', name: 'alice' },
    { id: '2', name: 'carol', email: 'carol@example.com' },
    { id: '3', name: 'x', email: 'dave' },
    { id: '4', name: 'dave' },
  ];
  tt.same(userReferenceWarnings(policy, users), [
    'user "bob@" does not exist, so rules naming it match no device (users: alice, carol, dave, x)',
    'user "dave@" matches 2 users (x, dave), so rules naming it match no device',
  ]);
  tt.same(userReferenceWarnings(policy, undefined), ['users are not verified offline: alice@, bob@, carol@example.com, dave@']);
  tt.same(userReferenceWarnings(parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}]}'), []), [], 'no users named, nothing to say');
});

t.test('nesting is bounded: 200 levels parse, one more is a PolicyError at the bracket, not a stack overflow', async (tt) => {
  const prefix = '{"nodeAttrs":[{"target":["*"],"app":{"x.com/cap":';
  const nested = (depth: number) => `${prefix}${'['.repeat(depth - 4)}${']'.repeat(depth - 4)}}}]}`;
  // Levels: the object, nodeAttrs' list, its object, app's object, then the lists.
  tt.doesNotThrow(() => parsePolicy(nested(200)), '200 levels');
  const err = (() => { try { parsePolicy(nested(201)); } catch (e) { return e; } })();
  tt.type(err, PolicyError);
  tt.match((err as Error).message, /nest deeper than 200 levels/);
  tt.equal((err as PolicyError).column, prefix.length + 197, 'at the opening bracket of level 201');
  const deep = checkPolicy(`{"acls":${'['.repeat(100_000)}}`);
  tt.match(deep.errors[0]?.message ?? '', /nest deeper than 200 levels/, 'checkPolicy reports it too, however deep the text');
});

t.test('sections read but not acted on must still have their shapes', async (tt) => {
  const bad: Array<[string, RegExp]> = [
    ['"disableIPv4": 1', /disableIPv4 must be true or false/],
    ['"OneCGNATRoute": 1', /OneCGNATRoute must be a string/],
    ['"derpMap": []', /derpMap must be an object/],
    ['"attrConfig": "x"', /attrConfig must be an object/],
    ['"defaultSrcPosture": "posture:a"', /defaultSrcPosture must be a list of strings/],
    ['"postures": {"posture:a": [null]}', /postures\["posture:a"\] must be a string/],
    ['"ipsets": {"ipset:a": "add 10.0.0.0/8"}', /ipsets\["ipset:a"\] must be a list of strings/],
    ['"ipsets": []', /ipsets must be an object/],
  ];
  for (const [section, want] of bad) {
    const r = checkPolicy(`{${section}, "acls": []}`);
    tt.match(r.errors.map((e) => e.message).join('\n'), want, section);
  }
  const good = checkPolicy(`{"disableIPv4": false, "OneCGNATRoute": "mullvad", "derpMap": {"Regions": {}}, "attrConfig": {},
    "defaultSrcPosture": ["posture:a"], "postures": {"posture:a": ["node:os == 'linux'"]}, "ipsets": {"ipset:a": ["add 10.0.0.0/8"]},
    "acls": []}`);
  tt.same(good.errors.map((e) => e.message), [], 'the shapes Tailscale gives them are taken');
});

t.test('sources and group members: autogroup:internet only as a destination, group members are users', async (tt) => {
  // Accepted before: every public range became a source of every node's filter.
  tt.match(rejection('{"acls":[{"action":"accept","src":["autogroup:internet"],"dst":["*:*"]}]}').message, /autogroup:internet can only be used in ACL destinations/);
  tt.match(rejection('{"grants":[{"src":["autogroup:internet"],"dst":["*"],"ip":["*"]}]}').message, /autogroup:internet can only be used in ACL destinations/);
  tt.doesNotThrow(() => parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["autogroup:internet:*"]}]}'), 'as a destination it is fine');
  // Accepted before and matched nothing, with no word.
  for (const member of ['tag:a', '*', '10.0.0.0/8', '100.64.0.1', 'autogroup:member']) {
    const r = rejection(`{"tagOwners":{"tag:a":[]},"groups":{"group:a":["alice@",${JSON.stringify(member)}]},"acls":[{"action":"accept","src":["group:a"],"dst":["*:*"]}]}`);
    tt.match(r.message, new RegExp(`groups\\["group:a"\\]: ${JSON.stringify(member).replace(/[.*/]/g, '\\$&')}: a group member must be a user`), member);
  }
  tt.doesNotThrow(() => parsePolicy('{"groups":{"group:a":["alice@","bob@example.com","carol"]}}'), 'users in any spelling');
});

t.test('device posture is not checked, and a policy that sets it says so in its warnings', async (tt) => {
  const snapshot = { users: [{ id: '1', name: 'alice' }], nodes: [] };
  const posture = parsePolicy(`{
    "postures": {"posture:latest": ["node:tsVersion >= '1.60'"]},
    "grants": [
      {"src": ["*"], "dst": ["*"], "ip": ["*"]},
      {"src": ["alice@"], "dst": ["*"], "ip": ["22"], "srcPosture": ["posture:latest"]},
    ],
  }`);
  tt.match(policyWarnings(posture, snapshot), [/grant 2 \(line 5\) has srcPosture, which Headway does not check: it applies to every device in its src/]);
  const dflt = parsePolicy('{"defaultSrcPosture":["posture:latest"],"postures":{"posture:latest":[]},"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}]}');
  tt.match(policyWarnings(dflt, snapshot), [/defaultSrcPosture is set, and Headway does not check device posture/]);
  tt.same(policyWarnings(parsePolicy('{"postures":{"posture:x":[]},"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}]}'), snapshot), [], 'postures defined but not used: nothing to say');

  // Node attributes Headway does not provide are named with their entry and line; the rest are not.
  const attrs = parsePolicy(`{
    "acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}],
    "nodeAttrs": [
      {"target": ["*"], "attr": ["magicdns"]},
      {"target": ["*"], "attr": ["funnel"]},
      {"target": ["*"], "attr": [], "ipPool": ["100.80.0.0/16"]},
    ],
  }`);
  tt.same(policyWarnings(attrs, snapshot), [
    'nodeAttrs entry 2 (line 5) grants funnel, which Headway does not provide: nothing on the internet reaches these devices through it (the attribute is still sent, as headscale sends it)',
    'nodeAttrs entry 3 (line 6) has ipPool, which Headway does not apply: its devices keep their addresses from prefixes',
  ]);
  tt.same(policyWarnings(parsePolicy('{"acls":[{"action":"accept","src":["*"],"dst":["*:*"]}],"nodeAttrs":[{"target":["*"],"attr":["magicdns"]}]}'), snapshot), [], 'attributes Headway provides: nothing to say');
});
