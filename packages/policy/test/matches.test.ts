import t from 'tap';
import { parseIpPort, previewMatches, type Snapshot } from '../src/index.js';

const snapshot: Snapshot = {
  users: [{ id: '1', name: 'alice', email: 'alice@example.com' }, { id: '2', name: 'bob' }, { id: '3', name: 'carol' }],
  nodes: [
    { id: '1', name: 'laptop', userId: '1', tags: [], ipv4: '100.64.0.1', ipv6: 'fd7a:115c:a1e0::1', availableRoutes: [], approvedRoutes: [] },
    { id: '2', name: 'web', tags: ['tag:web'], ipv4: '100.64.0.2', availableRoutes: [], approvedRoutes: [] },
    { id: '3', name: 'phone', userId: '2', tags: [], ipv4: '100.64.0.3', availableRoutes: [], approvedRoutes: [] },
  ],
};

const POLICY = `{
  "tagOwners": { "tag:web": ["alice@"] },
  "acls": [
    { "action": "accept", "src": ["alice@"], "dst": ["tag:web:80,443"] },
    // everyone reaches the web server's high ports
    { "action": "accept", "src": ["*"], "dst": ["tag:web:8000-8080"] },
    { "action": "accept", "src": ["bob@"], "dst": ["alice@:22"] },
  ],
}`;
const opts = { userNames: snapshot.users.map((u) => u.name) };

t.test('type user: the rules whose sources cover one of the user\'s devices, or everyone, as written, with their lines', async (t) => {
  t.same(previewMatches(POLICY, snapshot, { type: 'user', user: 'alice@example.com' }, opts), [
    { users: ['alice@'], ports: ['tag:web:80,443'], lineNumber: 4 },
    { users: ['*'], ports: ['tag:web:8000-8080'], lineNumber: 6 },
  ]);
  t.same(previewMatches(POLICY, snapshot, { type: 'user', user: 'bob' }, opts).map((m) => m.lineNumber), [6, 7]);
  t.same(previewMatches(POLICY, snapshot, { type: 'user', user: 'carol' }, opts).map((m) => m.lineNumber), [6], 'a user without devices: the rules for everyone');
  t.throws(() => previewMatches(POLICY, snapshot, { type: 'user', user: 'mallory' }, opts), /previewFor: no user "mallory"/);
});

t.test('type ipport: the rules whose destinations cover the address and the port', async (t) => {
  const at = (s: string) => previewMatches(POLICY, snapshot, { type: 'ipport', ...parseIpPort(s)! }, opts).map((m) => m.lineNumber);
  t.same(at('100.64.0.2:443'), [4]);
  t.same(at('100.64.0.2:8080'), [6]);
  t.same(at('100.64.0.2:22'), [], 'no rule opens port 22 of the web server');
  t.same(at('100.64.0.1:22'), [7]);
  t.same(at('[fd7a:115c:a1e0::1]:22'), [7], 'IPv6 in brackets');
  t.same(at('100.64.0.2'), [4, 6], 'no port: any port');
});

t.test('parseIpPort refuses what is not an address with an optional port', async (t) => {
  for (const bad of ['laptop', '100.64.0.1:0', '100.64.0.1:70000', '100.64.0.1:x', '']) t.equal(parseIpPort(bad), null, JSON.stringify(bad));
});

t.test('a policy that does not parse throws with its line', async (t) => {
  t.throws(() => previewMatches('{\n "acls": 3 }', snapshot, { type: 'user', user: 'alice' }, opts), /line 2/);
});
