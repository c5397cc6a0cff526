import { writeFileSync } from 'node:fs';
import http from 'node:http';
import t from 'tap';
import YAML from 'yaml';
import { ALICE, FakeApi, NODE, headway, problem, tempDir, type RunResult } from './helpers.js';

// Each step spawns the CLI; on a busy 2-core machine that takes a while.
t.setTimeout(240_000);

const manyErrors = {
  status: 400, contentType: 'application/problem+json',
  body: { type: 'about:blank', title: 'Invalid policy', status: 400, code: 'invalid_policy', detail: '2 errors: line 1, column 2: a; line 3, column 4: b', errors: ['line 1, column 2: a', 'line 3, column 4: b'] },
};

const BARE = { id: '2', name: 'bare', createdAt: '2026-01-03T00:00:00Z' };

const PAK = {
  id: '4', key: 'hwkey-auth-abc123-***', user: ALICE, reusable: false, ephemeral: true, used: false,
  expiration: '2026-05-01T00:00:00Z', createdAt: '2026-04-01T00:00:00Z', aclTags: [],
};

/**
 * expiresIn: an expiration the CLI computed as "now + ms" at some moment between `before` and `after` (the
 * command's run, however long it took), give or take the second it may be rounded to.
 */
function expiresIn(iso: string, before: number, after: number, ms: number): boolean {
  const at = Date.parse(iso);
  return at >= before + ms - 1000 && at <= after + ms + 1000;
}

t.test('commands send the contract requests and render the answers', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  api
    .on('GET', '/api/v1/user', (r) => ({ body: { users: r.query.name === 'nobody' ? [] : r.query.id === '2' ? [BARE] : r.query.name === 'bare' ? [BARE] : [ALICE] } }))
    .on('POST', '/api/v1/user', (r) => ({ body: { user: { ...ALICE, ...(r.body as object) } } }))
    .on('POST', '/api/v1/user/1/rename/bob', { body: { user: { ...ALICE, name: 'bob' } } })
    .on('DELETE', '/api/v1/user/1', problem(409, 'user alice still owns 2 node(s) (laptop-1, phone); delete them first', 'user_has_nodes'))
    .on('DELETE', '/api/v1/user/2', { body: {} })
    // User 2 (bare) owns no nodes; every other query gets alice's two.
    .on('GET', '/api/v1/node', (r) => ({ body: { nodes: r.query.user === '2' ? [] : [NODE, { ...NODE, id: '8', name: 'phone', givenName: 'phone', approvedRoutes: [], availableRoutes: [], subnetRoutes: [], online: false, user: null, tags: [] }] } }))
    .on('GET', '/api/v1/node/7', { body: { node: NODE } })
    .on('POST', '/api/v1/node/7/rename/new%20name', { body: { node: { ...NODE, givenName: 'new-name' } } })
    .on('POST', '/api/v1/node/7/tags', (r) => ({ body: { node: { ...NODE, tags: (r.body as { tags: string[] }).tags } } }))
    .on('POST', '/api/v1/node/7/approve_routes', (r) => ({ body: { node: { ...NODE, approvedRoutes: (r.body as { routes: string[] }).routes } } }))
    .on('POST', '/api/v1/node/7/expire', { body: { node: { ...NODE, expiry: '2020-01-01T00:00:00Z' } } })
    .on('POST', '/api/v1/node/register', { body: { node: NODE } })
    .on('POST', '/api/v1/node/backfillips', { body: { changes: ['node 7: added fd7a:115c:a1e0::7'] } })
    .on('POST', '/api/v1/debug/node', (r) => ({ body: { node: { ...NODE, name: (r.body as { name: string }).name, registerMethod: 'REGISTER_METHOD_DEBUG' } } }))
    .on('GET', '/api/v1/preauthkey', { body: { preAuthKeys: [PAK, { ...PAK, id: '5', key: 'hwkey-auth-zzz999-***', aclTags: ['tag:ci'] }] } })
    .on('POST', '/api/v1/preauthkey', (r) => ({ body: { preAuthKey: { ...PAK, key: 'hwkey-auth-abc123-SECRETSECRET', ...(r.body as object), user: ALICE } } }))
    .on('POST', '/api/v1/preauthkey/expire', { body: { preAuthKey: { ...PAK, expiration: '2020-01-01T00:00:00Z' } } })
    .on('DELETE', '/api/v1/preauthkey', { body: {} })
    .on('GET', '/api/v1/apikey', { body: { apiKeys: [{ id: '2', prefix: 'pfx2', expiration: '2027-01-01T00:00:00Z', createdAt: '2026-01-01T00:00:00Z', lastSeen: null }] } })
    .on('POST', '/api/v1/apikey', { body: { apiKey: 'hwkey-api-pfx3-FULLSECRET' } })
    .on('POST', '/api/v1/apikey/expire', { body: {} })
    .on('DELETE', '/api/v1/apikey/pfx2', { body: {} })
    .on('GET', '/api/v1/policy', { body: { policy: '{"acls": []}\n', updatedAt: '2026-01-01T00:00:00Z', mode: 'database' } })
    .on('PUT', '/api/v1/policy', (r) => ((r.body as { policy: string }).policy.includes('many')
      ? manyErrors
      : { body: { policy: (r.body as { policy: string }).policy, updatedAt: '2026-02-02T00:00:00Z', warnings: ['the policy has an empty acls list and no grants: all traffic between devices will be denied'] } }))
    .on('POST', '/api/v1/policy/check', (r) =>
      (r.body as { policy: string }).policy.includes('many')
        ? manyErrors
        : (r.body as { policy: string }).policy.includes('bad') ? problem(400, 'line 1, column 3: unknown field "bad"', 'invalid_policy') : { body: { valid: true, warnings: ['device x will see no peers'] } })
    .on('GET', '/api/v1/health', { body: { databaseConnectivity: true } });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath };
  const run = async (...args: string[]): Promise<RunResult> => {
    const r = await headway(args, { env, cwd: dir });
    t.equal(r.code, 0, `${args.join(' ')} exits 0 (stderr: ${r.stderr.trim()})`);
    return r;
  };

  t.test('users', async (t) => {
    let r = await run('users', 'create', 'carol', '--display-name', 'Carol C', '-e', 'carol@example.com');
    t.same(api.last.body, { name: 'carol', displayName: 'Carol C', email: 'carol@example.com' });
    t.equal(api.last.method, 'POST');
    t.equal(r.stdout, 'User created\n');
    t.notOk(api.last.headers.authorization, 'no API key over the local socket');

    r = await run('users', 'list', '-o', 'json');
    t.same(JSON.parse(r.stdout), [{ id: '1', name: 'alice', display_name: 'Alice A', email: 'alice@example.com', created_at: '2026-01-02T03:04:05Z', provider: '', provider_id: '', profile_pic_url: '' }]);

    r = await run('users', 'list', '--name', 'alice');
    t.same(api.last.query, { name: 'alice' });
    const lines = r.stdout.trimEnd().split('\n');
    t.match(lines[0], /^ID\s+Name\s+Display name\s+Email\s+Created$/);
    t.match(lines[1], /^1\s+alice\s+Alice A\s+alice@example\.com\s+2026-01-02 03:04:05$/);
    t.equal(lines[0]!.indexOf('Display name'), lines[1]!.indexOf('Alice A'), 'columns are aligned');

    // A user without a display name still shows its name under "Name".
    r = await run('users', 'list', '--name', 'bare');
    const bare = r.stdout.trimEnd().split('\n');
    t.match(bare[1], /^2\s+bare\s+2026-01-03 00:00:00$/, 'the name is under Name, not an empty cell');
    t.equal(bare[0]!.indexOf('Name'), bare[1]!.indexOf('bare'));

    r = await run('user', 'ls', '-i', '1', '-o', 'yaml');
    t.same(api.last.query, { id: '1' }, 'headscale alias `user ls` works');
    t.same(YAML.parse(r.stdout), [{ id: '1', name: 'alice', display_name: 'Alice A', email: 'alice@example.com', created_at: '2026-01-02T03:04:05Z', provider: '', provider_id: '', profile_pic_url: '' }]);

    r = await run('users', 'rename', '-i', '1', '--new-name', 'bob', '-o', 'json-line');
    t.equal(api.last.path, '/api/v1/user/1/rename/bob');
    t.equal(r.stdout.trim().split('\n').length, 1, 'json-line is one line');
    t.equal(JSON.parse(r.stdout).name, 'bob');

    r = await run('users', 'rename', '--name', 'alice', '-r', 'bob');
    t.equal(api.requests.at(-2)!.query.name, 'alice', 'resolves the name first');
    t.equal(api.last.path, '/api/v1/user/1/rename/bob');

    r = await run('users', 'destroy', '-i', '2', '--force');
    t.equal(api.last.method, 'DELETE');
    t.equal(api.last.path, '/api/v1/user/2');
    t.equal(r.stdout, 'User destroyed\n');

    t.same(api.requests.at(-2)!.query, { user: '2' }, 'the user\'s nodes are looked up before anything is asked or deleted');
    t.same(api.last.query, {}, 'no force parameter is sent');

    // --force only skips the question: a user with nodes is refused, before any DELETE, naming
    // --delete-nodes.
    const owner = await headway(['users', 'destroy', '-i', '1', '--force'], { env, cwd: dir });
    t.equal(owner.code, 1);
    t.equal(api.last.method, 'GET', 'nothing deleted');
    t.equal(owner.stderr, 'Error: user alice still owns 2 node(s) (laptop-1, phone); delete them first (headway nodes delete -i ID), or add --delete-nodes to delete them with the user\n');
    t.equal(owner.stdout, '');

    const missing = await headway(['users', 'destroy', '--name', 'nobody', '--force'], { env, cwd: dir });
    t.equal(missing.code, 1);
    t.equal(missing.stderr, 'Error: no user named "nobody"\n');
  });

  t.test('nodes', async (t) => {
    let r = await run('nodes', 'list', '-u', 'alice', '-o', 'json');
    t.same(api.last.query, { user: 'alice' });
    const nodes = JSON.parse(r.stdout) as Record<string, unknown>[];
    t.equal(nodes.length, 2);
    t.same(nodes[0], {
      id: '7', machine_key: NODE.machineKey, node_key: NODE.nodeKey, disco_key: NODE.discoKey,
      ip_addresses: NODE.ipAddresses, name: 'laptop',
      user: { id: '1', name: 'alice', display_name: 'Alice A', email: 'alice@example.com', created_at: '2026-01-02T03:04:05Z', provider: '', provider_id: '', profile_pic_url: '' },
      last_seen: NODE.lastSeen, expiry: NODE.expiry, created_at: NODE.createdAt, register_method: 'REGISTER_METHOD_AUTH_KEY',
      forced_tags: ['tag:web'], tags: ['tag:web'], given_name: 'laptop-1', online: true,
      approved_routes: ['10.0.0.0/24'], available_routes: ['10.0.0.0/24', '192.168.1.0/24'], subnet_routes: ['10.0.0.0/24'], ephemeral: false,
    });
    t.equal(nodes[1]!.user, null);

    r = await run('nodes', 'ls');
    const lines = r.stdout.trimEnd().split('\n');
    t.match(lines[0], /^ID\s+Hostname\s+Name\s+MachineKey\s+NodeKey\s+User\s+Tags\s+IP addresses/);
    t.match(lines[1], /^7\s+laptop\s+laptop-1\s+mkey:01234567\s+nodekey:fedcba98\s+alice\s+tag:web\s+100\.64\.0\.7, fd7a:115c:a1e0::7\s+false\s+2026-03-01 10:00:00\s+2099-01-01 00:00:00\s+online\s+no$/);
    t.match(lines[2], /^8\s+phone\s+phone\s.*offline\s+no$/);

    r = await run('nodes', 'list-routes');
    t.equal(r.stdout.trimEnd().split('\n').length, 2, 'only nodes with routes');
    // list-routes: hostname and given name in their own columns.
    t.match(r.stdout, /^ID\s+Hostname\s+Name\s+Approved\s+Available\s+Serving \(Primary\)\n/);
    t.match(r.stdout, /7\s+laptop\s+laptop-1\s+10\.0\.0\.0\/24\s+10\.0\.0\.0\/24, 192\.168\.1\.0\/24\s+10\.0\.0\.0\/24/);
    await run('nodes', 'list-routes', '-i', '7');
    t.equal(api.last.path, '/api/v1/node/7');

    r = await run('nodes', 'rename', '-i', '7', 'new name');
    t.equal(api.last.path, '/api/v1/node/7/rename/new%20name', 'name is path-encoded');
    t.equal(r.stdout, 'Node renamed\n');

    r = await run('nodes', 'tag', '-i', '7', '-t', 'tag:a,tag:b', '-t', 'tag:c', '-o', 'json');
    t.same(api.last.body, { tags: ['tag:a', 'tag:b', 'tag:c'] });
    t.same(JSON.parse(r.stdout).tags, ['tag:a', 'tag:b', 'tag:c']);
    await run('nodes', 'tag', '-i', '7', '--tags', '');
    t.same(api.last.body, { tags: [] }, '--tags "" is sent as an empty list: the server decides (it refuses)');

    await run('nodes', 'approve-routes', '-i', '7', '-r', '10.0.0.0/8,fd00::/64');
    t.same(api.last.body, { routes: ['10.0.0.0/8', 'fd00::/64'] });
    t.equal(api.last.path, '/api/v1/node/7/approve_routes');
    await run('nodes', 'approve-routes', '-i', '7', '--routes=');
    t.same(api.last.body, { routes: [] });

    r = await run('nodes', 'expire', '-i', '7');
    t.equal(api.last.path, '/api/v1/node/7/expire');
    t.equal(api.last.method, 'POST');
    t.equal(r.stdout, 'Node expired\n');
    await run('node', 'logout', '--identifier', '7');
    t.equal(api.last.path, '/api/v1/node/7/expire', 'headscale alias `node logout`');

    r = await run('nodes', 'register', '--user', 'alice', '--key', 'REGKEY123');
    t.same(api.last.query, { user: 'alice', key: 'REGKEY123' });
    t.equal(r.stdout, 'Node laptop-1 registered\n');

    r = await run('nodes', 'backfillips', '--force');
    t.equal(api.last.path, '/api/v1/node/backfillips');
    t.equal(r.stdout, 'node 7: added fd7a:115c:a1e0::7\n');

    r = await run('debug', 'create-node', '--user', 'alice', '--name', 'fake', '--route', '10.1.0.0/16', '--route', '10.2.0.0/16', '-o', 'json');
    t.same(api.last.body, { user: 'alice', name: 'fake', routes: ['10.1.0.0/16', '10.2.0.0/16'] });
    t.equal(JSON.parse(r.stdout).register_method, 'REGISTER_METHOD_DEBUG');
  });

  t.test('preauthkeys', async (t) => {
    const before = Date.now();
    let r = await run('preauthkeys', 'create', '-u', '1', '--reusable', '--expiration', '24h', '--tags', 'tag:ci,tag:prod');
    const body = api.last.body as Record<string, unknown>;
    t.equal(body.user, '1');
    t.equal(body.reusable, true);
    t.equal(body.ephemeral, false);
    t.same(body.aclTags, ['tag:ci', 'tag:prod']);
    t.ok(expiresIn(body.expiration as string, before, Date.now(), 24 * 3600_000), 'expiration is now + 24h');
    t.equal(r.stdout, 'hwkey-auth-abc123-SECRETSECRET\n', 'human mode prints the key alone');

    const bools: [string[], boolean][] = [
      [['--ephemeral'], true], [['--ephemeral=true'], true], [['--ephemeral=false'], false],
      [['--no-ephemeral'], false], [['--ephemeral=1'], true], [[], false],
    ];
    for (const [flag, want] of bools) {
      await run('preauthkeys', 'create', '-u', '1', ...flag);
      t.equal((api.last.body as { ephemeral: boolean }).ephemeral, want, `${flag.join(' ') || '(none)'} → ephemeral ${want}`);
    }
    const beforeDefault = Date.now();
    await run('preauthkeys', 'create', '-u', '1');
    t.ok(expiresIn((api.last.body as { expiration: string }).expiration, beforeDefault, Date.now(), 3600_000), 'default expiration is 1h');

    r = await run('preauthkeys', 'create', '-u', 'alice', '-o', 'json');
    t.equal(JSON.parse(r.stdout).key, 'hwkey-auth-abc123-SECRETSECRET');
    t.same(Object.keys(JSON.parse(r.stdout)).sort(), ['acl_tags', 'created_at', 'ephemeral', 'expiration', 'id', 'key', 'reusable', 'used', 'user']);

    r = await run('preauthkeys', 'list', '-u', '1');
    t.same(api.last.query, { user: '1' });
    t.match(r.stdout, /^ID\s+Key\/Prefix\s+Reusable\s+Ephemeral\s+Used\s+Expiration\s+Created\s+Owner\n4\s+hwkey-auth-abc123-\*\*\*\s+false\s+true\s+false\s+2026-05-01 00:00:00\s+2026-04-01 00:00:00\s+alice\n5\s.*tag:ci\n$/);

    r = await run('preauthkeys', 'expire', '--id', '4');
    t.same(api.last.body, { id: '4' });
    t.equal(r.stdout, 'Key expired\n');

    await run('preauthkeys', 'expire', '--user', '1', 'hwkey-auth-zzz999-FULLSECRET');
    t.same(api.requests.at(-2)!.query, { user: '1' }, 'lists the user\'s keys to find the prefix');
    t.same(api.last.body, { id: '5' });
    await run('preauthkeys', 'revoke', 'abc123');
    t.same(api.last.body, { id: '4' }, 'bare prefix works');

    const none = await headway(['preauthkeys', 'expire', 'nomatch'], { env, cwd: dir });
    t.equal(none.code, 1);
    t.match(none.stderr, /no pre-auth key matches "nomatch"/);

    r = await run('preauthkeys', 'delete', '--id', '4');
    t.equal(api.last.method, 'DELETE');
    t.same(api.last.query, { id: '4' });
    t.equal(r.stdout, 'Key deleted\n');
  });

  t.test('apikeys', async (t) => {
    let before = Date.now();
    let r = await run('apikeys', 'create', '--expiration', '87600h');
    t.ok(expiresIn((api.last.body as { expiration: string }).expiration, before, Date.now(), 87600 * 3600_000), 'expiration is 10 years out');
    t.equal(r.stdout, 'hwkey-api-pfx3-FULLSECRET\n');
    before = Date.now();
    await run('apikeys', 'create', '-e', '90d');
    t.ok(expiresIn((api.last.body as { expiration: string }).expiration, before, Date.now(), 90 * 86_400_000), 'expiration is 90 days out');

    r = await run('apikeys', 'list', '-o', 'json');
    t.same(JSON.parse(r.stdout), [{ id: '2', prefix: 'pfx2', expiration: '2027-01-01T00:00:00Z', created_at: '2026-01-01T00:00:00Z', last_seen: null }]);

    await run('apikeys', 'expire', '--prefix', 'pfx2');
    t.same(api.last.body, { prefix: 'pfx2' });
    await run('apikeys', 'revoke', 'pfx2');
    t.same(api.last.body, { prefix: 'pfx2' }, 'revoke alias with positional prefix');
    await run('apikeys', 'expire', '-i', '2');
    t.same(api.last.body, { id: '2' });

    r = await run('apikeys', 'delete', '--prefix', 'pfx2');
    t.equal(api.last.method, 'DELETE');
    t.equal(api.last.path, '/api/v1/apikey/pfx2');
    t.equal(r.stdout, 'Key deleted\n');
    await run('apikeys', 'delete', '--id', '2');
    t.equal(api.last.path, '/api/v1/apikey/pfx2', 'id resolved to prefix');
  });

  t.test('policy and health', async (t) => {
    let r = await run('policy', 'get');
    t.equal(r.stdout, '{"acls": []}\n');
    r = await run('policy', 'get', '-o', 'json');
    t.same(JSON.parse(r.stdout), { policy: '{"acls": []}\n', updated_at: '2026-01-01T00:00:00Z', mode: 'database' });

    // No policy set: policy get says so rather than printing an empty line.
    api.on('GET', '/api/v1/policy', { body: { policy: '', updatedAt: null, mode: 'file' } });
    r = await run('policy', 'get');
    t.equal(r.stdout, 'No policy is set (policy.mode: file): all traffic between devices is allowed.\n');
    r = await run('policy', 'get', '-o', 'json');
    t.same(JSON.parse(r.stdout), { policy: '', updated_at: null, mode: 'file' }, 'machine output unchanged');
    api.on('GET', '/api/v1/policy', { body: { policy: '{"acls": []}\n', updatedAt: '2026-01-01T00:00:00Z', mode: 'database' } });

    writeFileSync(`${dir}/good.hujson`, '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}');
    writeFileSync(`${dir}/bad.hujson`, '{"bad": 1}');
    r = await run('policy', 'set', '-f', `${dir}/good.hujson`);
    t.equal(api.last.method, 'PUT');
    t.same(api.last.body, { policy: '{"acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]}' });
    // policy set prints the server's warnings (a deny-all policy is not just "Policy updated.").
    t.equal(r.stdout, 'Policy updated.\nwarning: the policy has an empty acls list and no grants: all traffic between devices will be denied\n');
    r = await run('policy', 'set', '-f', `${dir}/good.hujson`, '-o', 'json');
    t.same(JSON.parse(r.stdout).warnings, ['the policy has an empty acls list and no grants: all traffic between devices will be denied']);

    // policy check prints every error the server lists, one per line.
    writeFileSync(`${dir}/many.hujson`, '{"many": 1}');
    const many = await headway(['policy', 'check', '-f', `${dir}/many.hujson`], { env, cwd: dir });
    t.equal(many.code, 1);
    t.equal(many.stderr, 'Error: the policy has 2 errors:\n  line 1, column 2: a\n  line 3, column 4: b\n');
    const manyJson = await headway(['policy', 'check', '-f', `${dir}/many.hujson`, '-o', 'json'], { env, cwd: dir });
    t.same(JSON.parse(manyJson.stdout), { valid: false, errors: ['line 1, column 2: a', 'line 3, column 4: b'], checked_by: 'server' });
    const manySet = await headway(['policy', 'set', '-f', `${dir}/many.hujson`], { env, cwd: dir });
    t.equal(manySet.code, 1);
    t.equal(manySet.stderr, 'Error: the policy has 2 errors:\n  line 1, column 2: a\n  line 3, column 4: b\n');

    r = await run('policy', 'check', '-f', `${dir}/good.hujson`);
    t.equal(api.last.path, '/api/v1/policy/check');
    t.equal(r.stdout, 'Policy is valid\nwarning: device x will see no peers\n');
    const bad = await headway(['policy', 'check', '-f', `${dir}/bad.hujson`], { env, cwd: dir });
    t.equal(bad.code, 1);
    t.equal(bad.stderr, 'Error: line 1, column 3: unknown field "bad"\n', 'problem detail is printed');
    const badJson = await headway(['policy', 'check', '-f', `${dir}/bad.hujson`, '-o', 'json'], { env, cwd: dir });
    t.equal(badJson.code, 1);
    t.same(JSON.parse(badJson.stdout), { valid: false, errors: ['line 1, column 3: unknown field "bad"'], checked_by: 'server' });

    r = await run('health');
    t.equal(r.stdout, 'OK: database reachable\n');
  });

  t.test('remote address with API key', async (t) => {
    const seen: http.IncomingHttpHeaders[] = [];
    const server = http.createServer((req, res) => {
      seen.push(req.headers);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ users: [ALICE] }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as { port: number }).port;
    const r = await headway(['users', 'list', '-o', 'json'], {
      env: { HOME: dir, HEADWAY_CLI_ADDRESS: `http://127.0.0.1:${port}`, HEADWAY_CLI_API_KEY: 'hwkey-api-x-secret' },
      cwd: dir,
    });
    t.equal(r.code, 0, r.stderr);
    t.equal(seen[0]?.authorization, 'Bearer hwkey-api-x-secret');
    t.equal(JSON.parse(r.stdout)[0].name, 'alice');
  });
});
