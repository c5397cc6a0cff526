/**
 * headscale's `policy get|set|check --bypass-grpc-and-access-database-directly`: with the server
 * stopped, the policy in the configured database is read, checked and replaced; a server started
 * afterwards runs on it. While a server runs on the data directory, or with a file policy, the flag
 * is refused with the reason, and nothing is written.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runHeadway } from '../src/cli.js';
import { startTestServer } from '../src/server.js';

const BYPASS = '--bypass-grpc-and-access-database-directly';
const POLICY = '{"tagOwners": {"tag:web": ["alice@"]}, "acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}';

t.test('policy set, get and check with the bypass flag work on the database without a server', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-bypass-'));
  const config = join(dir, 'config.yaml');
  writeFileSync(config, `data_dir: ${dir}\npolicy:\n  mode: database\n`);
  const file = join(dir, 'policy.hujson');
  writeFileSync(file, POLICY);
  const hw = (...args: string[]) => runHeadway({}, [...args, '-c', config]);

  const empty = await hw('policy', 'get', BYPASS);
  t.equal(empty.code, 0, empty.stderr);
  t.match(empty.stdout, /No policy is set/);

  const bad = join(dir, 'bad.hujson');
  writeFileSync(bad, '{"acls": [{"action": "accept", "src": ["group:nope"], "dst": ["*:*"]}]}');
  const refused = await hw('policy', 'set', '-f', bad, BYPASS);
  t.equal(refused.code, 1);
  t.match(refused.stderr, /group:nope/);
  t.match((await hw('policy', 'get', BYPASS)).stdout, /No policy is set/, 'an invalid policy is not stored');

  const set = await hw('policy', 'set', '-f', file, BYPASS);
  t.equal(set.code, 0, set.stderr);
  t.match(set.stdout, /^Policy updated\./);
  const got = await hw('policy', 'get', BYPASS);
  t.equal(got.stdout.trim(), POLICY, 'read back from the database');
  const checked = await hw('policy', 'check', BYPASS, '-o', 'json');
  t.equal(checked.code, 0, checked.stderr);
  t.match(JSON.parse(checked.stdout), { valid: true, checked_by: 'offline' });

  // A server started on that database runs on the policy; while it runs the flag is refused.
  const s = await startTestServer({ policy: { mode: 'database' } }, { dataDir: dir });
  t.teardown(() => s.stop());
  t.equal((await s.state.storage.policy.get())?.text, POLICY);
  const busy = await hw('policy', 'set', '-f', file, BYPASS);
  t.equal(busy.code, 1);
  t.match(busy.stderr, /a Headway server \(pid \d+\) is running on .*: leave out --bypass-grpc-and-access-database-directly/);
});

t.test('with a file policy the flag is refused, naming policy.mode and the file', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-bypass-file-'));
  const config = join(dir, 'config.yaml');
  const file = join(dir, 'policy.hujson');
  writeFileSync(file, POLICY);
  writeFileSync(config, `data_dir: ${dir}\npolicy:\n  mode: file\n  path: ${file}\n`);
  const r = await runHeadway({}, ['policy', 'get', BYPASS, '-c', config]);
  t.equal(r.code, 1);
  t.match(r.stderr, `policy.mode is file: edit ${file}`);
});
