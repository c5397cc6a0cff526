import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { gitDescribe } from '../src/build-info.js';
import { FIXTURES, FakeApi, headway, tempDir } from './helpers.js';

// Each step spawns the CLI; on a busy 2-core machine that takes a while.
t.setTimeout(240_000);

const fx = (name: string) => `${FIXTURES}${name}`;
const CLI_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI_VERSION = (JSON.parse(readFileSync(`${CLI_ROOT}package.json`, 'utf8')) as { version: string }).version;

t.test('config check', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const env = { HOME: dir };

  let r = await headway(['config', 'check', '-c', fx('valid.yaml')], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, `Config is valid (${fx('valid.yaml')})\n`);

  r = await headway(['config', 'check', '-c', fx('removed-key.yaml')], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stdout, /randomize_client_port/);
  t.match(r.stdout, /randomizeClientPort/);
  t.notMatch(r.stdout, /Config is valid/);

  r = await headway(['config', 'check', '-c', fx('renamed-key.yaml')], { env, cwd: dir });
  t.equal(r.code, 0, 'a renamed key only warns');
  t.match(r.stdout, /^warning: ephemeral_node_inactivity_timeout: renamed to `node\.ephemeral\.inactivity_timeout`/);
  t.match(r.stdout, /Config is valid/);

  r = await headway(['config', 'check', '-c', fx('bad-cidr.yaml')], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stdout, /^error: prefixes\.v4: .*100\.64\.0\.0\/33/);

  r = await headway(['config', 'check', '-c', fx('bad-cidr.yaml'), '-o', 'json'], { env, cwd: dir });
  t.equal(r.code, 1);
  const report = JSON.parse(r.stdout) as { valid: boolean; problems: { level: string; key: string }[] };
  t.equal(report.valid, false);
  t.same(report.problems.map((p) => [p.level, p.key]), [['error', 'prefixes.v4']]);

  r = await headway(['config', 'check', '-c', `${dir}/missing.yaml`], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stdout, /missing\.yaml does not exist/);

  r = await headway(['config', 'check'], { env, cwd: dir });
  t.equal(r.code, 0, 'no file at all is valid: built-in defaults');
  t.match(r.stdout, /no config file found/);

  r = await headway(['config', 'check', '-c', fx('oidc-incomplete.yaml')], { env, cwd: dir });
  t.equal(r.code, 1, 'config check validates the oidc block');
  t.match(r.stdout, /^fatal: oidc\.strip_email_domain: removed/m);
  t.match(r.stdout, /^error: oidc\.pkce\.method: expected one of S256, plain, found string "S512"/m);
  t.match(r.stdout, /^error: oidc\.client_secret: oidc\.client_secret and oidc\.client_secret_path are mutually exclusive/m);
  t.match(r.stdout, /^error: oidc\.client_secret_path: \/nonexistent\/headway\/oidc_secret does not exist/m);
  t.notMatch(r.stdout + r.stderr, /do-not-print-this-secret/, 'the client secret is never printed');

  r = await headway(['configtest', '-c', fx('removed-key.yaml')], { env, cwd: dir });
  t.equal(r.code, 1, 'headscale spelling `configtest` works');
});

t.test('policy check without a server checks offline', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: `${dir}/none.sock` };

  let r = await headway(['policy', 'check', '-f', fx('good.hujson')], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, 'Policy is valid\n');
  t.match(r.stderr, /checking offline/);

  r = await headway(['policy', 'check', '-f', fx('empty-acls.hujson')], { env, cwd: dir });
  t.equal(r.code, 0);
  t.match(r.stdout, /^Policy is valid\nwarning: .*all traffic between devices will be denied/);

  r = await headway(['policy', 'check', '-f', fx('bad.hujson')], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, new RegExp(`Error: ${fx('bad.hujson').replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:5:3: .*bogusField`), 'error names file, line and column');
  t.equal(r.stdout, '');

  // Every error, not only the first, each with file, line and column.
  r = await headway(['policy', 'check', '-f', fx('multi-error.hujson')], { env, cwd: dir });
  t.equal(r.code, 1);
  const lines = r.stderr.trimEnd().split('\n').filter((l) => !l.startsWith('note:'));
  t.equal(lines[0], 'Error: the policy has 8 errors:');
  t.equal(lines.length, 9, 'one line per error');
  t.match(r.stderr, /multi-error\.hujson:9:3: unknown field "aclz" in policy/);
  t.match(r.stderr, /multi-error\.hujson:5:5: host "alice" not found \(define it under "hosts", or write "alice@" for a user named alice\)/);
  t.match(r.stderr, /multi-error\.hujson:7:5: dst="\*:99999": port range "99999": port out of range/);

  // An unknown group and a bad action: both reported, each saying what was likely meant.
  writeFileSync(`${dir}/two.hujson`, '{"acls":[{"action":"allow","src":["group:admin"],"dst":["*:*"]}],"groups":{"group:admins":["a@"]}}');
  r = await headway(['policy', 'check', '-f', `${dir}/two.hujson`], { env, cwd: dir });
  t.equal(r.code, 1);
  t.same(r.stderr.trimEnd().split('\n').filter((l) => !l.startsWith('note:')), [
    'Error: the policy has 2 errors:',
    `  ${dir}/two.hujson:1:20: action="allow" is not supported; did you mean "accept"?`,
    `  ${dir}/two.hujson:1:10: group "group:admin" not found; did you mean "group:admins"?`,
  ]);
  // Past 20 errors the rest are counted; -o json has them all.
  writeFileSync(`${dir}/many.hujson`, JSON.stringify({ acls: Array.from({ length: 25 }, (_, k) => ({ action: 'accept', src: [`group:g${k}`], dst: ['*:*'] })) }));
  r = await headway(['policy', 'check', '-f', `${dir}/many.hujson`], { env, cwd: dir });
  t.equal(r.code, 1);
  const manyLines = r.stderr.trimEnd().split('\n').filter((l) => !l.startsWith('note:'));
  t.equal(manyLines[0], 'Error: the policy has 25 errors:');
  t.equal(manyLines.length, 1 + 20 + 1);
  t.match(manyLines[20], /many\.hujson:1:\d+: group "group:g19" not found$/);
  t.equal(manyLines[21], '  and 5 more errors');
  r = await headway(['policy', 'check', '-f', `${dir}/many.hujson`, '-o', 'json'], { env, cwd: dir });
  t.equal(JSON.parse(r.stdout).errors.length, 25);

  // Offline nobody knows the users: the ones the policy names are listed as not verified.
  writeFileSync(`${dir}/users.hujson`, '{"acls": [{"action": "accept", "src": ["alice@"], "dst": ["bob@:*"]}]}');
  r = await headway(['policy', 'check', '-f', `${dir}/users.hujson`], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, 'Policy is valid\nwarning: users are not verified offline: alice@, bob@\n');

  r = await headway(['policy', 'check', '-f', fx('good.hujson'), '-o', 'json'], { env, cwd: dir });
  t.same(JSON.parse(r.stdout), { valid: true, warnings: [], checked_by: 'offline' });

  r = await headway(['policy', 'check', '-f', `${dir}/nope.hujson`], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, /policy file .*nope\.hujson does not exist/);
});

t.test('policy preview', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const env = { HOME: dir };
  let r = await headway(['policy', 'preview', '-f', fx('server-only.hujson'), '--topology', fx('topology.json')], { env, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  const text = r.stdout;
  t.match(text, /^server \(100\.64\.0\.3\/32, fd7a:115c:a1e0::3\/128\)\n  tags: tag:server\n  filter rules:\n    100\.64\.0\.1, fd7a:115c:a1e0::1 -> 100\.64\.0\.3:22, 100\.64\.0\.3:443, \[fd7a:115c:a1e0::3\]:22, \[fd7a:115c:a1e0::3\]:443\n  peers: alice-laptop$/m);
  t.match(text, /^bob-phone .*\n  filter rules:\n    \(none: nothing may connect to this node\)\n  peers: \(none\)$/m);

  r = await headway(['policy', 'preview', '-f', fx('server-only.hujson'), '--topology', fx('topology.json'), '-o', 'json'], { env, cwd: dir });
  const result = JSON.parse(r.stdout) as { accepted: boolean; nodes: Record<string, { peers: { name: string }[] }> };
  t.equal(result.accepted, true);
  t.same(result.nodes['alice-laptop']!.peers.map((p) => p.name), ['server']);

  r = await headway(['policy', 'preview', '-f', fx('bad.hujson'), '--topology', fx('topology.json')], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, /policy rejected: .*bogusField/);

  r = await headway(['policy', 'preview', '-f', fx('good.hujson'), '--topology', fx('valid.yaml')], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, /a topology needs "users"/);
});

t.test('version names the release, the commit and the runtime', async (t) => {
  const commit = gitDescribe(CLI_ROOT);
  t.ok(commit, 'the test runs in a git checkout');
  const r = await headway(['version']);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, `headway ${CLI_VERSION}\ncommit: ${commit}\nruntime: node ${process.version} (${process.platform}/${process.arch})\n`);
  const j = await headway(['version', '-o', 'json']);
  t.equal(j.code, 0, j.stderr);
  t.same(JSON.parse(j.stdout), { version: CLI_VERSION, commit, node: process.version, platform: process.platform, arch: process.arch });
});

t.test('serve stops on config problems with log lines, exit 1', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const r = await headway(['serve', '-c', fx('removed-key.yaml')], { env: { HOME: dir }, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, /^\S+ FTL randomize_client_port: removed: .*randomizeClientPort/m);
  t.equal(r.stdout, '');
  const bad = await headway(['serve', '-c', fx('bad-cidr.yaml')], { env: { HOME: dir }, cwd: dir });
  t.equal(bad.code, 1);
  t.match(bad.stderr, /^\S+ ERR prefixes\.v4: /m);
});

const HELLO_ROOT = fileURLToPath(new URL('../../../../examples/plugin-cli-hello/', import.meta.url));
const helloBuilt = existsSync(`${HELLO_ROOT}dist/src/commands/hello.js`);

/**
 * linkHello registers the example plugin the way a user adds one: an oclif user-plugin
 * manifest in headway's plugin directory ($XDG_DATA_HOME/headway/plugins/package.json). The shipped
 * CLI does not bundle it, so without this `headway hello` does not exist.
 */
function linkHello(dataHome: string): void {
  mkdirSync(`${dataHome}/headway/plugins`, { recursive: true });
  writeFileSync(`${dataHome}/headway/plugins/package.json`, JSON.stringify({
    private: true,
    oclif: { schema: 1, plugins: [{ type: 'link', name: '@headway-examples/plugin-cli-hello', root: HELLO_ROOT }] },
  }));
}

t.test('the shipped CLI does not bundle the example plugin', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const help = await headway(['--help'], { env: { HOME: dir, XDG_DATA_HOME: `${dir}/data` }, cwd: dir });
  t.equal(help.code, 0, help.stderr);
  t.match(help.stdout, /\busers\b/, 'the help lists the built-in topics');
  t.notMatch(help.stdout, /\bhello\b/, 'no example command (the hello plugin is not bundled)');
  const r = await headway(['hello'], { env: { HOME: dir, XDG_DATA_HOME: `${dir}/data` }, cwd: dir });
  t.equal(r.code, 2);
  t.match(r.stderr, /unknown command "hello"/);
});

t.test('the example plugin adds `headway hello`', { skip: helloBuilt ? false : 'examples/plugin-cli-hello is not built (run npx tsc -b examples/plugin-cli-hello)' }, async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  api.on('GET', '/api/v1/health', { body: { databaseConnectivity: true } });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const XDG_DATA_HOME = `${dir}/data`;
  linkHello(XDG_DATA_HOME);
  const help = await headway(['--help'], { env: { HOME: dir, XDG_DATA_HOME }, cwd: dir });
  t.match(help.stdout, /\bhello\b/, 'a linked plugin shows in the help');
  let r = await headway(['hello', '--name', 'Ada'], { env: { HOME: dir, XDG_DATA_HOME, HEADWAY_UNIX_SOCKET: api.socketPath }, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, 'Hello, Ada!\nserver: healthy\n');
  t.equal(api.last.path, '/api/v1/health');
  r = await headway(['hello', '-o', 'json'], { env: { HOME: dir, XDG_DATA_HOME, HEADWAY_UNIX_SOCKET: `${dir}/none.sock` }, cwd: dir });
  t.equal(r.code, 0);
  t.match(JSON.parse(r.stdout), { greeting: 'Hello, world!', server: /^unknown \(cannot reach/ });
  r = await headway(['hello', '--bogus'], { env: { HOME: dir, XDG_DATA_HOME }, cwd: dir });
  t.equal(r.code, 2, 'plugin commands get the same usage-error handling');
});
