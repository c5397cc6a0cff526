import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer } from '../src/server.js';
import { runHeadway } from '../src/cli.js';

const home = mkdtempSync(join(tmpdir(), 'hw-cli-home-'));

const headway = (env: Record<string, string>, ...args: string[]) => runHeadway(env, args);

t.test('a new administrator\'s walk-through, over the socket and remotely with an API key', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const local = { HEADWAY_UNIX_SOCKET: s.urls.socket! };

  const user = await headway(local, 'users', 'create', 'alice', '--email', 'alice@example.com', '-o', 'json');
  t.equal(user.code, 0, user.stderr);
  t.match(JSON.parse(user.stdout), { name: 'alice', email: 'alice@example.com' });

  const pak = await headway(local, 'preauthkeys', 'create', '--user', '1', '--reusable', '--expiration', '24h');
  t.equal(pak.code, 0, pak.stderr);
  t.match(pak.stdout.trim(), /^hwkey-auth-[a-z0-9]{12}-[A-Za-z0-9_-]{43}$/, 'the key alone, shown once');

  const api = await headway(local, 'apikeys', 'create', '--expiration', '90d');
  t.equal(api.code, 0, api.stderr);
  const apiKey = api.stdout.trim();
  t.match(apiKey, /^hwkey-api-/);

  const node = await headway(local, 'debug', 'create-node', '--user', 'alice', '--name', 'demo-box', '-o', 'json');
  t.equal(node.code, 0, node.stderr);
  const id = String(JSON.parse(node.stdout).id);

  const remote = { HEADWAY_CLI_ADDRESS: s.urls.http, HEADWAY_CLI_API_KEY: apiKey };
  const listed = await headway(remote, 'nodes', 'list', '-o', 'json');
  t.equal(listed.code, 0, listed.stderr);
  const nodes = JSON.parse(listed.stdout) as Array<Record<string, unknown>>;
  t.equal(nodes.length, 1);
  t.match(nodes[0], { id, name: 'demo-box', given_name: 'demo-box', online: false });
  t.ok(Array.isArray(nodes[0]!.ip_addresses) && (nodes[0]!.ip_addresses as string[]).length === 2);

  const table = await headway(local, 'nodes', 'list');
  t.match(table.stdout, /demo-box/);

  t.equal((await headway(remote, 'nodes', 'rename', '--identifier', id, 'renamed-box')).code, 0);
  t.equal(s.state.nodes.get(Number(id))!.givenName, 'renamed-box');

  const curl = await fetch(`${s.urls.http}/api/v1/node/${id}/rename/via-curl`, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` } });
  t.equal(curl.status, 200);
  t.equal(s.state.nodes.get(Number(id))!.givenName, 'via-curl');

  const bad = await headway(local, 'nodes', 'rename', '--identifier', id, 'Not Valid');
  t.equal(bad.code, 1);
  t.match(bad.stderr, /DNS label/);

  t.equal((await headway(remote, 'nodes', 'delete', '--identifier', id, '--force')).code, 0);
  t.equal(s.state.nodes.list().length, 0);

  const keys = await headway(local, 'apikeys', 'list', '-o', 'json');
  const prefix = (JSON.parse(keys.stdout) as Array<{ prefix: string }>)[0]!.prefix;
  t.notOk(keys.stdout.includes(apiKey.slice(-43)), 'the list never shows the secret (its last 43 characters)');
  t.equal((await headway(local, 'apikeys', 'expire', '--prefix', prefix)).code, 0);
  const refused = await headway(remote, 'nodes', 'list');
  t.equal(refused.code, 1);
  t.match(refused.stderr, /invalid, expired or revoked API key/);
  const curl401 = await fetch(`${s.urls.http}/api/v1/node`, { headers: { authorization: `Bearer ${apiKey}` } });
  t.equal(curl401.status, 401);
});

t.test('no server: one line naming the socket tried', async (t) => {
  const r = await headway({ HEADWAY_UNIX_SOCKET: join(home, 'nope.sock') }, 'users', 'list');
  t.equal(r.code, 1);
  t.match(r.stderr.trim().split('\n').length, 1);
  t.match(r.stderr, /nope\.sock/);
});
