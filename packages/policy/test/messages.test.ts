import t from 'tap';
import { MAX_LISTED_ERRORS, PolicyError, checkPolicy, listErrors, parseAlias, parsePolicy } from '../src/index.js';
import { closest, editDistance } from '../src/suggest.js';

/** rejected parses text that must be rejected and returns the PolicyError. */
function rejected(text: string, opts: Parameters<typeof parsePolicy>[1] = {}): PolicyError {
  try {
    parsePolicy(text, opts);
  } catch (e) {
    if (e instanceof PolicyError) return e;
    throw e;
  }
  throw new Error(`accepted: ${text}`);
}

/** reasons are the reasons of every error checkPolicy finds. */
const reasons = (text: string, opts: Parameters<typeof parsePolicy>[1] = {}) => checkPolicy(text, opts).errors.map((e) => e.reason);

const acl = (action: string, src = '*', dst = '*:*') => JSON.stringify({ acls: [{ action, src: [src], dst: [dst] }] });
const ssh = (action: string, src = 'autogroup:member') => JSON.stringify({ ssh: [{ action, src: [src], dst: ['autogroup:self'], users: ['root'] }] });

// "action": "allow" is answered with what to write instead, not only that it is not supported.
t.test('an unsupported action says which action was meant', async (tt) => {
  tt.same(reasons(acl('allow')), ['action="allow" is not supported; did you mean "accept"?']);
  tt.same(reasons(acl('Accept')), ['action="Accept" is not supported; did you mean "accept"? (actions are lower case)']);
  tt.same(reasons(acl('acept')), ['action="acept" is not supported; did you mean "accept"?']);
  tt.same(reasons(acl('deny')), ['action="deny" is not supported; rules only allow ("accept"), and what no rule allows is denied']);
  tt.same(reasons(acl('jump')), ['action="jump" is not supported; use "accept"']);
  // SSH rules have two actions.
  tt.same(reasons(ssh('allow')), ['"allow" is not a valid action; did you mean "accept"? (or "check", to ask for a recent login)']);
  tt.same(reasons(ssh('chek')), ['"chek" is not a valid action; did you mean "check"?']);
  tt.same(reasons(ssh('ACCEPT')), ['"ACCEPT" is not a valid action; did you mean "accept"? (actions are lower case)']);
  tt.same(reasons(ssh('drop')), ['"drop" is not a valid action; rules only allow ("accept" or "check"), and what no rule allows is denied']);
  tt.same(reasons(ssh('jump')), ['"jump" is not a valid action; use "accept" or "check"']);
});

// An unknown group's message mentions the similar group the policy defines (group:admin -> group:admins).
t.test('a name that is not defined suggests the defined name a slip away', async (tt) => {
  const groups = { 'group:admins': ['alice@'], 'group:devs': ['bob@'] };
  const tagOwners = { 'tag:server': [], 'tag:ci': [] };
  const hosts = { webserver: '10.0.0.1', db: '10.0.0.2' };
  const pol = (rest: object) => JSON.stringify({ groups, tagOwners, hosts, ...rest });
  const accept = (src: string, dst: string) => pol({ acls: [{ action: 'accept', src: [src], dst: [dst] }] });

  tt.same(reasons(accept('group:admin', '*:*')), ['group "group:admin" not found; did you mean "group:admins"?']);
  tt.same(reasons(accept('group:Admins', '*:*')), ['group "group:Admins" not found; did you mean "group:admins"?'], 'case');
  tt.same(reasons(accept('group:ops', '*:*')), ['group "group:ops" not found'], 'nothing close: no guess');
  tt.same(reasons(accept('tag:serve', '*:*')), ['src=tag not found: "tag:serve"; did you mean "tag:server"?']);
  tt.same(reasons(accept('*', 'tag:sevrer:443')), ['dst="tag:sevrer": tag not found: "tag:sevrer"; did you mean "tag:server"?'], 'two letters swapped');
  tt.same(reasons(accept('*', 'tag:c:22')), ['dst="tag:c": tag not found: "tag:c"'], 'a short name has no neighbours');
  tt.same(reasons(accept('*', 'webservr:80')), ['host "webservr" not found; did you mean "webserver"?']);
  tt.same(reasons(accept('*', 'dbx:5432')), ['host "dbx" not found; did you mean "db"?']);
  tt.same(reasons(accept('*', 'alcie:80'), { userNames: ['alice', 'bob'] }), ['host "alcie" not found; did you mean the user "alice@"?'], 'a live user a slip away');
  tt.same(reasons(accept('*', 'alice:80'), { userNames: ['alice'] }), ['host "alice" not found; did you mean the user "alice@"?'], 'as before');
  tt.same(reasons(accept('*', 'mail:25')), ['host "mail" not found (define it under "hosts", or write "mail@" for a user named mail)'], 'as before');
  tt.same(reasons(accept('autogroup:membr', '*:*')), ['autogroup "autogroup:membr" is not supported; did you mean "autogroup:member"?']);
  tt.match(reasons(accept('autogroup:admin', '*:*'))[0], /^autogroup "autogroup:admin" is not supported \(Headway supports autogroup:internet, autogroup:member, /, 'nothing close: the supported ones');
  tt.throws(() => parseAlias('autogroup:taged'), /autogroup "autogroup:taged" is not supported; did you mean "autogroup:tagged"\?/);

  // Every place a tag, group or host is looked up.
  tt.same(reasons(pol({ grants: [{ src: ['group:dev'], dst: ['tag:servers'], ip: ['*'], via: ['tag:cii'] }] })), [
    'group "group:dev" not found; did you mean "group:devs"?',
    'tag not found: "tag:servers"; did you mean "tag:server"?',
    'tag "tag:cii" not found; did you mean "tag:ci"?',
  ]);
  tt.same(reasons(pol({ ssh: [{ action: 'accept', src: ['group:admin'], dst: ['tag:srever'], users: ['root'] }] })), [
    'group "group:admin" not found; did you mean "group:admins"?',
    'tag not found: "tag:srever"; did you mean "tag:server"?',
  ]);
  tt.same(reasons(pol({ nodeAttrs: [{ target: ['tag:sever'], attr: ['funnel'] }] })), ['tag not found: "tag:sever"; did you mean "tag:server"?']);
  tt.same(reasons(pol({ sshTests: [{ src: 'alice@', dst: ['tag:server:22'], accept: ['root'] }] })), ['SSH tests dst contains unknown tag "tag:server:22"; did you mean "tag:server"?']);
  tt.same(reasons(pol({ acl: [] })), ['unknown field "acl" in policy; did you mean "acls"?']);
  tt.same(reasons(pol({ acls: [{ action: 'accept', src: ['*'], dts: ['*:*'] }] })), ['unknown field "dts" in acl; did you mean "dst"?']);

  // Only names the policy defines are suggested, not other undefined ones it uses.
  tt.same(reasons(JSON.stringify({ acls: [{ action: 'accept', src: ['group:eng1', 'group:eng2'], dst: ['*:*'] }] })), [
    'group "group:eng1" not found', 'group "group:eng2" not found',
  ]);
});

t.test('the edit distance counts slips, and a suggestion is at most a third of the name away', async (tt) => {
  tt.equal(editDistance('admin', 'admins'), 1);
  tt.equal(editDistance('server', 'sevrer'), 1, 'a swap is one slip');
  tt.equal(editDistance('kitten', 'sitting'), 3);
  tt.equal(editDistance('', 'abc'), 3);
  tt.equal(editDistance('abcdef', 'uvwxyz', 2), 3, 'gives up past the bound');
  tt.equal(closest('group:abcdef', ['group:abcdxy']), 'group:abcdxy', '2 of 12');
  tt.equal(closest('group:abcdef', ['group:abcxyz'], 'group:'), undefined, '3 of 6 (the prefix does not count) is too far');
  tt.equal(closest('group:abcdef', ['group:abcdxy'], 'group:'), 'group:abcdxy', '2 of 6 is a third');
  tt.equal(closest('group:abcdefghi', ['group:abcdefgxy'], 'group:'), 'group:abcdefgxy', '2 of 9');
  tt.equal(closest('group:ab', ['group:abc'], 'group:'), undefined, 'names under 3 characters get none');
  tt.equal(closest('tag:x'.repeat(100), ['tag:x'.repeat(100) + 'y']), undefined, 'long names are not compared');
  tt.equal(closest('tag:aaaa', ['tag:aaab', 'tag:aaac']), 'tag:aaab', 'a tie goes to the first');
});

t.test('suggestions stay cheap for a policy of thousands of undefined and defined names', async (tt) => {
  const groups = Object.fromEntries(Array.from({ length: 3000 }, (_, k) => [`group:team-${k}`, ['a@']]));
  const src = Array.from({ length: 3000 }, (_, k) => `group:taem-${k}`);
  const started = Date.now();
  const { errors } = checkPolicy(JSON.stringify({ groups, acls: src.map((s) => ({ action: 'accept', src: [s], dst: ['*:*'] })) }));
  tt.equal(errors.length, 3000);
  tt.match(errors[0]!.reason, /^group "group:taem-0" not found/);
  tt.ok(Date.now() - started < 10_000, `${Date.now() - started} ms`);
});

// A policy with an unknown group and a bad action is refused for both, in one message.
t.test('parsePolicy reports every error of a policy, each on its own line', async (tt) => {
  const text = '{"acls":[{"action":"allow","src":["group:admin"],"dst":["*:*"]}],"groups":{"group:admins":["a@"]}}';
  const e = rejected(text);
  tt.equal(e.errors.length, 2);
  tt.equal(e.message, [
    'the policy has 2 errors:',
    '  line 1, column 20: action="allow" is not supported; did you mean "accept"?',
    '  line 1, column 10: group "group:admin" not found; did you mean "group:admins"?',
  ].join('\n'));
  tt.same([e.line, e.column, e.reason], [1, 20, 'action="allow" is not supported; did you mean "accept"?'], 'where and why: the first');
  tt.same(e.errors.map((x) => x.message), checkPolicy(text).errors.map((x) => x.message), 'the same errors checkPolicy lists');
  const one = rejected(acl('allow'));
  tt.equal(one.message, 'line 1, column 20: action="allow" is not supported; did you mean "accept"?', 'a single error reads as before');
  tt.same(one.errors, [one]);

  // Within one ssh rule, or one grant, the parts are independent too.
  tt.same(reasons('{"groups":{"group:admins":[]},"ssh":[{"action":"allow","src":["group:admin"],"dst":["autogroup:self"],"users":["root",""],"checkPeriod":"1x"}]}'), [
    '"allow" is not a valid action; did you mean "accept"? (or "check", to ask for a recent login)',
    'user "" is not valid',
    'group "group:admin" not found; did you mean "group:admins"?',
    'time: invalid duration "1x"',
  ]);
  tt.same(reasons('{"grants":[{"src":["*"],"dst":["*"],"ip":["tcp:0", "icmp:*", "bogus:22"],"app":{"tailscale.com/cap/nope":[{}]},"via":["tag:x"]}]}'), [
    'port range "0": first port must be >0, or use \'*\' for wildcard',
    'proto "bogus" is not a known protocol name or number 1-255',
    'capability name must not be in the tailscale.com domain',
    'tag "tag:x" not found',
  ]);
  tt.same(reasons('{"grants":[{"src":["*"],"dst":["*"],"ip":["tcp:0"]}]}'), ['port range "0": first port must be >0, or use \'*\' for wildcard'], 'a wrong ip entry is not also "empty"');
  tt.same(reasons('{"nodeAttrs":[{"target":["tag:a","group:b"],"attr":["x"],"ipPool":["100.100.100.0/24","nope"]}]}'), [
    'IPPool(100.100.100.0/24): network within reserved range',
    '"nope": invalid address',
    'tag not found: "tag:a"',
    'group "group:b" not found',
  ]);
  tt.same(reasons('{"acls":[{"action":"accept","proto":"bogus","src":["*"],"dst":["tag:a:22"]}]}'), [
    'proto "bogus" is not a known protocol name or number 1-255',
    'dst="tag:a": tag not found: "tag:a"',
  ]);
});

t.test('past MAX_LISTED_ERRORS errors, the message counts the rest', async (tt) => {
  tt.equal(MAX_LISTED_ERRORS, 20);
  const acls = Array.from({ length: 25 }, (_, k) => ({ action: 'accept', src: [`group:g${k}`], dst: ['*:*'] }));
  const e = rejected(JSON.stringify({ acls }));
  tt.equal(e.errors.length, 25, 'all of them are carried');
  const lines = e.message.split('\n');
  tt.equal(lines[0], 'the policy has 25 errors:');
  tt.equal(lines.length, 1 + 20 + 1);
  tt.match(lines[20], /group "group:g19" not found/);
  tt.equal(lines[21], '  and 5 more errors');
  tt.same(listErrors(['a', 'b']), ['a', 'b']);
  tt.same(listErrors(Array.from({ length: 21 }, (_, k) => `e${k}`)).slice(-2), ['e19', 'and 1 more error']);
});

// A HuJSON syntax error stops the reading (nothing after it can be trusted), so it is one error, which says where
// it is and what was expected there.
t.test('a syntax error names its line, column and what was expected', async (tt) => {
  const cases: Array<[string, number, number, string]> = [
    ['{\n  "acls": [ } ,\n  "groups": 3\n}', 2, 13, 'expected a value (a string, number, object, list, true, false or null), found character "}"'],
    ['{\n  "acls": [],\n  "hosts": {"a": "10.0.0.1",, }\n}', 3, 29, 'expected an object key, found character ","'],
    ['{\n  "acls": []\n  "groups": {}\n}', 3, 3, 'missing comma between object members: expected "," or "}", found character "\\""'],
    ['{"acls": [\n  {"action": "accept"}\n  {"action": "accept"}\n]}', 3, 3, 'missing comma between array elements: expected "," or "]", found character "{"'],
    ['{\n  "acls" []\n}', 2, 10, 'expected ":" after key "acls", found character "["'],
    ['{\n  acls: []\n}', 2, 3, 'unquoted key "acls": expected a double-quoted key'],
    ['{\n  "acls": [\n', 2, 11, 'unexpected end of input: the list that starts here is not closed (expected "]")'],
    ['{\n  "acls": []\n', 1, 1, 'unexpected end of input: the object that starts here is not closed (expected "}")'],
    ['{\n  "hosts": {"a": "10.0.0.1\\x"}\n}', 2, 27, 'invalid escape \\x in string: expected one of \\" \\\\ \\/ \\b \\f \\n \\r \\t or \\u and 4 hex digits'],
    ['{\n  "hosts": {"a": "x\ty"}\n}', 2, 20, 'control character U+0009 in string: expected it escaped (\\t, \\n or \\u00XX)'],
    ['{\n  "hosts": {"a": -x}\n}', 2, 18, 'invalid number: expected a digit after "-", found character "x"'],
    ['{"acls": []}\n}', 2, 1, 'unexpected character "}" after the end of the policy: expected nothing but spaces and comments after its closing bracket'],
    ['{"acls": []} /* note', 1, 14, 'unterminated /* comment: expected "*/" to end it'],
    ['{"acls": ["x', 1, 11, 'unterminated string: expected a closing \'"\''],
  ];
  for (const [text, line, column, reason] of cases) {
    const { errors } = checkPolicy(text);
    tt.equal(errors.length, 1, `one error for ${JSON.stringify(text)}`);
    tt.same([errors[0]?.line, errors[0]?.column, errors[0]?.reason], [line, column, reason], JSON.stringify(text));
    tt.equal(rejected(text).message, `line ${line}, column ${column}: ${reason}`);
  }
});
