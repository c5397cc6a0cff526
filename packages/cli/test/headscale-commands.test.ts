// The headscale 0.29 commands (auth, nodes expire, users create/destroy options) send headscale's requests
// and render its answers.
import t from 'tap';
import { ALICE, FakeApi, NODE, headway, headwayTty, problem, tempDir } from './helpers.js';

t.setTimeout(240_000);

t.test('the headscale 0.29 commands send the contract requests', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  api
    .on('POST', '/api/v1/auth/register', { body: { node: NODE } })
    .on('POST', '/api/v1/auth/approve', { body: { node: NODE } })
    .on('POST', '/api/v1/auth/reject', (r) => ((r.body as { authId: string }).authId === 'gone'
      ? problem(404, 'no pending login with auth ID gone: it expired or was already approved or rejected', 'not_found')
      : { body: {} }))
    .on('POST', '/api/v1/node/7/expire', (r) => ({ body: { node: { ...NODE, expiry: r.query.disableExpiry ? null : (r.query.expiry ?? '2020-01-01T00:00:00Z') } } }))
    .on('POST', '/api/v1/user', (r) => ({ body: { user: { ...ALICE, ...(r.body as object), profilePicUrl: (r.body as { pictureUrl?: string }).pictureUrl ?? '' } } }))
    .on('GET', '/api/v1/user', { body: { users: [ALICE] } })
    .on('GET', '/api/v1/node', { body: { nodes: [NODE, { ...NODE, id: '8', givenName: 'phone' }] } })
    .on('GET', '/api/v1/preauthkey', { body: { preAuthKeys: [{ id: '4', key: 'hwkey-auth-abc-***', user: ALICE }] } })
    .on('DELETE', '/api/v1/user/1', (r) => ({ body: r.query.deleteNodes === 'true' ? { deletedNodes: [{ id: '7', givenName: 'laptop-1' }, { id: '8', givenName: 'phone' }] } : {} }));
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath };
  const run = (...args: string[]) => headway(args, { env, cwd: dir });

  let r = await run('auth', 'register', '--auth-id', 'AbC_12-x', '--user', 'alice');
  t.equal(r.code, 0, r.stderr);
  t.same(api.last.body, { authId: 'AbC_12-x', user: 'alice' });
  t.equal(r.stdout, 'Node laptop-1 registered\n');

  r = await run('auth', 'approve', '--auth-id', 'AbC_12-x', '-o', 'json');
  t.equal(api.last.path, '/api/v1/auth/approve');
  t.same(api.last.body, { authId: 'AbC_12-x' });
  t.equal(JSON.parse(r.stdout).given_name, 'laptop-1');

  r = await run('auth', 'reject', '--auth-id', 'http://127.0.0.1:8080/register/AbC_12-x');
  t.same(api.last.body, { authId: 'AbC_12-x' }, 'a pasted login URL is reduced to its ID');
  t.equal(r.stdout, 'Auth request rejected\n');
  r = await run('auth', 'reject', '--auth-id', 'gone');
  t.equal(r.code, 1);
  t.equal(r.stderr, 'Error: no pending login with auth ID gone: it expired or was already approved or rejected\n');
  const sent = api.requests.length;
  r = await run('auth', 'register', '--auth-id', 'a b', '--user', 'alice');
  t.equal(r.code, 2);
  t.equal(api.requests.length, sent, 'a bad auth ID is refused before anything is sent');

  r = await run('nodes', 'expire', '-i', '7', '--disable');
  t.same(api.last.query, { disableExpiry: 'true' });
  t.equal(r.stdout, 'Node expiry disabled\n');
  r = await run('nodes', 'expire', '-i', '7', '-e', '2031-01-02T03:04:05Z');
  t.same(api.last.query, { expiry: '2031-01-02T03:04:05.000Z' });
  t.equal(r.stdout, 'Node expiration updated\n');
  r = await run('nodes', 'expire', '-i', '7', '--expiry', '2001-01-02T03:04:05+02:00');
  t.same(api.last.query, { expiry: '2001-01-02T01:04:05.000Z' });
  t.equal(r.stdout, 'Node expired\n', 'a past time expires the node');
  r = await run('nodes', 'expire', '-i', '7');
  t.same(api.last.query, {}, 'no flag: expire now, as before');

  r = await run('users', 'create', 'carol', '-p', 'https://example.com/c.png', '-o', 'json');
  t.same(api.last.body, { name: 'carol', pictureUrl: 'https://example.com/c.png' }, 'headscale\'s request field');
  t.equal(JSON.parse(r.stdout).profile_pic_url, 'https://example.com/c.png', 'headscale\'s JSON field');

  r = await run('users', 'destroy', '-n', 'alice', '--delete-nodes', '--force');
  t.equal(r.code, 0, r.stderr);
  t.equal(api.last.method, 'DELETE');
  t.same(api.last.query, { deleteNodes: 'true' });
  t.equal(r.stdout, 'User destroyed with 2 node(s): laptop-1, phone\n');
  const before = api.requests.length;
  r = await run('users', 'destroy', '-n', 'alice', '--force');
  t.notOk(api.requests.slice(before).some((q) => q.method === 'DELETE'), 'without --delete-nodes a user who owns nodes is refused before any DELETE');
  t.match(r.stderr, /or add --delete-nodes to delete them with the user/);
});

t.test('declining the --delete-nodes question names what would go, deletes nothing and exits 0', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  api
    .on('GET', '/api/v1/user', { body: { users: [ALICE] } })
    .on('GET', '/api/v1/node', { body: { nodes: [NODE] } })
    .on('GET', '/api/v1/preauthkey', { body: { preAuthKeys: [] } })
    .on('DELETE', '/api/v1/user/1', { body: { deletedNodes: [] } });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath };
  const no = await headwayTty(['users', 'destroy', '-n', 'alice', '--delete-nodes'], 'n\n', { env, cwd: dir });
  t.equal(no.code, 0, no.stdout);
  t.match(no.stdout, /Remove the user "alice" \(1\) with its 1 node\(s\) \(laptop-1\) and 0 pre-auth key\(s\)\? Deleted nodes' devices are logged out\. \[y\/N\]/);
  t.match(no.stdout, /User not destroyed/);
  t.notOk(api.requests.some((q) => q.method === 'DELETE'), 'nothing deleted');
});

t.test('generate private-key needs no server', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const r = await headway(['generate', 'private-key'], { env: { HOME: dir, HEADWAY_UNIX_SOCKET: `${dir}/none.sock` }, cwd: dir });
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /^privkey:[0-9a-f]{64}\n$/);
});
