import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { runHeadwayOn } from '../src/cli.js';
import { startTestServer } from '../src/server.js';

// The CLI against the real server (SQLite): what an administrator types and reads.
t.setTimeout(300_000);

// As in headscale, --force never deletes a user's nodes and keys along with the user.
t.test('users destroy --force only skips the prompt: a user who owns nodes is refused', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);

  t.equal((await hw('users', 'create', 'alice')).code, 0);
  t.equal((await hw('preauthkeys', 'create', '-u', 'alice', '--reusable')).code, 0);
  const node = await hw('debug', 'create-node', '--user', 'alice', '--name', 'box', '-o', 'json');
  t.equal(node.code, 0, node.stderr);
  const nodeId = String(JSON.parse(node.stdout).id);

  const refused = await hw('users', 'destroy', '--name', 'alice', '--force');
  t.equal(refused.code, 1);
  t.match(refused.stderr, /^Error: user alice still owns 1 node\(s\) \(box\); delete them first/);
  t.match(refused.stderr, /or add --delete-nodes to delete them with the user/, 'the refusal names the flag that deletes them too');
  // Without --force the refusal comes before the question (standard input is closed: a question would be refused as unanswered).
  const asked = await hw('users', 'destroy', '--name', 'alice');
  t.equal(asked.code, 1);
  t.notMatch(asked.stdout + asked.stderr, /Remove the user|Not confirmed/, 'nothing is asked');
  t.match(asked.stderr, /^Error: user alice still owns 1 node/, 'the user who owns nodes is refused at once');
  t.equal(s.state.nodes.list().length, 1, 'the node is still there');
  t.ok(s.state.users.byName('alice'), 'the user is still there');
  const keys = await hw('preauthkeys', 'list', '-u', 'alice', '-o', 'json');
  t.equal(JSON.parse(keys.stdout).length, 1, 'the pre-auth key is still there');

  t.equal((await hw('nodes', 'delete', '-i', nodeId, '--force')).code, 0);
  const done = await hw('users', 'destroy', '--name', 'alice', '--force');
  t.equal(done.code, 0, done.stderr);
  t.equal(done.stdout, 'User destroyed\n');
  t.equal(s.state.users.list().length, 0);
  t.same(await s.state.storage.preAuthKeys.list(), [], 'its pre-auth keys went with it');
});

// alice and Alice are one user.
t.test('user names are unique without case; old duplicates are named at start-up', async (t) => {
  const s = await startTestServer();
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  t.equal((await hw('users', 'create', 'alice')).code, 0);
  const dup = await hw('users', 'create', 'Alice');
  t.equal(dup.code, 1);
  t.match(dup.stderr, /user Alice already exists as alice \(names are compared without case\)/);
  t.equal((await hw('users', 'create', 'bob')).code, 0);
  const ren = await hw('users', 'rename', '--name', 'bob', '--new-name', 'ALICE');
  t.equal(ren.code, 1);
  t.match(ren.stderr, /already exists as alice/);
  const found = await hw('users', 'list', '--name', 'ALICE', '-o', 'json');
  t.same(JSON.parse(found.stdout).map((u: { name: string }) => u.name), ['alice'], 'lookups ignore case');
  t.equal((await hw('users', 'rename', '--name', 'Bob', '--new-name', 'Bobby')).code, 0, 'so does --name');
  t.equal((await hw('users', 'rename', '--name', 'bobby', '--new-name', 'BOBBY')).code, 0, 'a user may change the case of its own name');

  // Data from before the rule: write two names differing by case past the state, then restart.
  await s.state.storage.users.create({ name: 'Carol' });
  await s.state.storage.users.create({ name: 'carol' });
  await s.stop({ remove: false });
  const again = await startTestServer({}, { dataDir: s.dataDir });
  t.teardown(() => again.stop());
  const warning = again.logs.find((l) => l.includes('users differ only by case'));
  t.ok(warning, 'a start-up warning');
  t.match(warning, /Carol \(id \d+\), carol \(id \d+\)/);
  t.notMatch(warning, /alice/);
});

t.test('policy: warnings on set, every error, hints, unknown users, no policy', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  const file = (name: string, text: string) => {
    const path = join(s.dataDir, name);
    writeFileSync(path, text);
    return path;
  };

  // No policy set: policy get says so and what it means, not an empty line.
  const none = await hw('policy', 'get');
  t.equal(none.stdout, 'No policy is set (policy.mode: database): all traffic between devices is allowed.\n');

  t.equal((await hw('users', 'create', 'alice')).code, 0);
  t.equal((await hw('users', 'create', 'carol')).code, 0);

  // A deny-all policy is set with a warning saying what it does.
  const denyAll = await hw('policy', 'set', '-f', file('deny.hujson', '{"acls": []}'));
  t.equal(denyAll.code, 0, denyAll.stderr);
  t.equal(denyAll.stdout, 'Policy updated.\nwarning: the policy has an empty acls list and no grants: all traffic between devices will be denied\n');

  // "alice:80" names the likely slip (the user alice@), not only the missing host.
  const hostSlip = file('host.hujson', '{"acls": [{"action": "accept", "src": ["carol@"], "dst": ["alice:80"]}]}');
  const slip = await hw('policy', 'check', '-f', hostSlip);
  t.equal(slip.code, 1);
  t.equal(slip.stderr, 'Error: line 1, column 11: host "alice" not found; did you mean the user "alice@"?\n');
  const slipSet = await hw('policy', 'set', '-f', hostSlip);
  t.equal(slipSet.code, 1);
  t.match(slipSet.stderr, /did you mean the user "alice@"\?/);
  t.equal((await hw('policy', 'get', '-o', 'json')).stdout.includes('alice:80'), false, 'a rejected policy changes nothing');

  // An unknown user bob@ is flagged.
  const bob = file('bob.hujson', '{"acls": [{"action": "accept", "src": ["alice@", "bob@"], "dst": ["carol@:*"]}]}');
  const checked = await hw('policy', 'check', '-f', bob);
  t.equal(checked.code, 0, checked.stderr);
  t.match(checked.stdout, /^Policy is valid\nwarning: user "bob@" does not exist, so rules naming it match no device \(users: alice, carol\)\n$/);
  const set = await hw('policy', 'set', '-f', bob);
  t.equal(set.code, 0, set.stderr);
  t.match(set.stdout, /^Policy updated\.\nwarning: user "bob@" does not exist/);

  // policy check reports every error, not only the first.
  const broken = file('broken.hujson', `{
  "groups": {"admins": ["alice@"]},
  "acls": [
    {"action": "allow", "src": ["group:ops"], "dst": ["*:*"]},
    {"action": "accept", "src": ["*"], "dst": ["tag:web:443"]},
  ],
}`);
  const all = await hw('policy', 'check', '-f', broken);
  t.equal(all.code, 1);
  t.equal(all.stderr, [
    'Error: the policy has 4 errors:',
    '  line 2, column 14: groups: "admins" must start with "group:"',
    '  line 4, column 16: action="allow" is not supported; did you mean "accept"?',
    '  line 4, column 5: group "group:ops" not found',
    '  line 5, column 5: dst="tag:web": tag not found: "tag:web"',
    '',
  ].join('\n'));
  const api = await fetch(`${s.urls.http}/api/v1/policy/check`, { method: 'POST' });
  t.equal(api.status, 401, 'the check endpoint still needs a key over TCP');
});

t.test('policy set in file mode says what to change, in plain words', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const path = join(s.dataDir, 'p.hujson');
  writeFileSync(path, '{}');
  const r = await runHeadwayOn(s, ['policy', 'set', '-f', path]);
  t.equal(r.code, 1);
  t.equal(r.stderr, 'Error: policy set needs policy.mode: database; with policy.mode: file the policy comes from no file (policy.path is empty, so all traffic is allowed). '
    + 'Set policy.mode: database to manage it with `headway policy set`, or write it to the file named by policy.path and send SIGHUP\n');
  const get = await runHeadwayOn(s, ['policy', 'get']);
  t.equal(get.stdout, 'No policy is set (policy.mode: file): all traffic between devices is allowed.\n');
  const check = await runHeadwayOn(s, ['policy', 'check']);
  t.equal(check.code, 0, check.stderr);
  t.equal(check.stdout, 'No policy is set: all traffic between devices is allowed.\n', 'checking the policy in force when there is none');
});
