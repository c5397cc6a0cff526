import t from 'tap';
import { FakeApi, headway, headwayTty, tempDir } from './helpers.js';

// Each case spawns the CLI; on a busy 2-core machine that takes a while.
t.setTimeout(240_000);

// Every case must fail before any request is sent: exit 2, one line on stderr naming the problem.
const cases: [string[], RegExp][] = [
  [['preauthkeys', 'create', '-u', '1', '--expiration', '3x'], /--expiration: "3x" is not a duration/],
  [['preauthkeys', 'create', '-u', '1', '-e', '1y'], /--expiration: "1y" is not a duration/],
  [['apikeys', 'create', '--expiration', '0'], /--expiration: "0" must be longer than zero/],
  [['apikeys', 'create', '--expiration', 'soon'], /"soon" is not a duration/],
  [['nodes', 'tag', '-i', '1', '-t', 'web'], /--tags: "web" is not a tag/],
  [['nodes', 'tag', '-i', '1', '--tags', 'tag:ok,tag:bad name'], /"tag:bad name" is not a tag/],
  [['nodes', 'tag', '-i', '1', '-t', 'tag:'], /"tag:" is not a tag/],
  [['nodes', 'tag', '-t', 'tag:a'], /missing required flag --identifier/],
  [['nodes', 'tag', '-i', '1'], /pass --tags/],
  [['nodes', 'delete'], /missing required flag --identifier/],
  [['nodes', 'expire', '-i', 'abc'], /--identifier: "abc" is not an id/],
  [['nodes', 'expire', '--identifier=-3'], /is not an id/],
  [['nodes', 'approve-routes', '-i', '1', '-r', '10.0.0.0'], /"10.0.0.0" is not a CIDR prefix/],
  [['nodes', 'approve-routes', '-i', '1', '-r', '10.0.0.0/33'], /"10.0.0.0\/33" is not a CIDR prefix/],
  // A missing argument is named, with what it is for, in one readable line.
  [['nodes', 'rename', '-i', '1'], /^Error: Missing required argument NEWNAME \(new name\)\. See `headway nodes rename --help`\.$/m],
  [['nodes', 'list', 'extra'], /Unexpected argument: extra/],
  [['nodes', 'register', '--user', 'alice'], /missing required flag --key/],
  [['preauthkeys', 'create', '-u', '1', '--ephemeral=maybe'], /--ephemeral expects true or false, got "maybe"/],
  [['preauthkeys', 'create', '-u', '1', '--tags', 'tag:a,admin'], /"admin" is not a tag/],
  [['preauthkeys', 'expire'], /pass --id ID/],
  [['preauthkeys', 'delete', '--id', 'x1'], /"x1" is not an id/],
  [['users', 'list', '-o', 'xml'], /--output=xml.*json, json-line, yaml/],
  [['users', 'list', '--output', 'table'], /json, json-line, yaml/],
  [['users', 'list', '--bogus'], /unknown flag: --bogus/],
  [['users', 'create'], /^Error: Missing required argument NAME \(user name\)\. See `headway users create --help`\.$/m],
  // "Did you mean": the nearest flag of that command, the nearest command.
  [['preauthkeys', 'create', '-u', '1', '--expire', '1h'], /unknown flag: --expire \(did you mean --expiration\?\)\. See `headway preauthkeys create --help`/],
  [['users', 'list', '--nme', 'x'], /unknown flag: --nme \(did you mean --name\?\)/],
  [['users', 'lst'], /unknown command "users lst"; did you mean "users list"\?/],
  [['user', 'lst'], /did you mean "users list"\?/],
  [['nodse'], /unknown command "nodse"; did you mean "nodes"\?/],
  [['policy', 'chekc', '-f', 'x'], /did you mean "policy check"\?/],
  [['users', 'rename', '--new-name', 'bob'], /pass --identifier or --name/],
  [['users', 'rename', '-i', '1'], /missing required flag --new-name/],
  [['users', 'destroy'], /pass --identifier or --name/],
  [['users', 'destroy', '--force=perhaps', '-i', '1'], /--force expects true or false/],
  [['apikeys', 'expire'], /pass --prefix PREFIX, --id ID/],
  [['apikeys', 'expire', '--prefix', 'abc', 'def'], /only one of/],
  [['apikeys', 'delete'], /pass --prefix PREFIX/],
  [['debug', 'create-node', '--user', 'alice'], /missing required flag --name/],
  [['debug', 'create-node', '--user', 'alice', '--name', 'n', '--route', 'nope'], /--route: "nope" is not a CIDR/],
  [['policy', 'set'], /missing required flag --file/],
  [['policy', 'preview', '-f', 'x.hujson'], /missing required flag --topology/],
  [['frobnicate'], /unknown command "frobnicate"; run `headway --help`/],
  [['--bogus'], /unknown flag "--bogus" before any command/],
  [['users', 'frobnicate'], /unknown command "users frobnicate"/],
];

t.test('bad input exits 2 with one clear line and sends nothing', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath };
  // A few at a time: each run is a separate node process.
  const results: Awaited<ReturnType<typeof headway>>[] = [];
  for (let i = 0; i < cases.length; i += 4) {
    results.push(...(await Promise.all(cases.slice(i, i + 4).map(([args]) => headway(args, { env, cwd: dir })))));
  }
  for (const [i, [args, message]] of cases.entries()) {
    const r = results[i]!;
    t.equal(r.code, 2, `${args.join(' ')}: exit code (stderr: ${r.stderr.trim()})`);
    t.match(r.stderr, message, `${args.join(' ')}: message`);
    t.equal(r.stderr.trim().split('\n').length, 1, `${args.join(' ')}: one line`);
    t.equal(r.stdout, '', `${args.join(' ')}: nothing on stdout`);
  }
  t.equal(api.requests.length, 0, 'no request reached the server');
});

t.test('no server: one line naming the socket, exit 1', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const socket = `${dir}/missing.sock`;
  const r = await headway(['users', 'list'], { env: { HOME: dir, HEADWAY_UNIX_SOCKET: socket }, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, new RegExp(`^Error: cannot reach the headway server at unix socket ${socket.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  t.equal(r.stderr.trim().split('\n').length, 1);

  const j = await headway(['users', 'list', '-o', 'json'], { env: { HOME: dir, HEADWAY_UNIX_SOCKET: socket }, cwd: dir });
  t.equal(j.code, 1);
  t.equal(j.stderr, '');
  const parsed = JSON.parse(j.stdout) as { error: string };
  t.match(parsed.error, /cannot reach the headway server at unix socket/);

  const remote = await headway(['nodes', 'list'], { env: { HOME: dir, HEADWAY_CLI_ADDRESS: 'http://127.0.0.1:9' }, cwd: dir });
  t.equal(remote.code, 1);
  t.match(remote.stderr, /cannot reach the headway server at http:\/\/127\.0\.0\.1:9/);
});

t.test('a -c file that does not exist is an error naming it', async (t) => {
  const { dir, cleanup } = tempDir();
  t.teardown(cleanup);
  const r = await headway(['nodes', 'list', '-c', `${dir}/nope.yaml`], { env: { HOME: dir }, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, /nope\.yaml does not exist/);
});

t.test('destructive commands refuse without a TTY unless --force', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  api.on('GET', '/api/v1/node/3', { body: { node: { id: '3', name: 'box', givenName: 'box' } } });
  api.on('DELETE', '/api/v1/node/3', { body: {} });
  api.on('POST', '/api/v1/node/backfillips', { body: { changes: [] } });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath };
  const r = await headway(['nodes', 'delete', '-i', '3'], { env, cwd: dir });
  t.equal(r.code, 1);
  t.match(r.stderr, /pass --force/);
  t.notOk(api.requests.some((q) => q.method === 'DELETE'), 'nothing deleted');

  const b = await headway(['nodes', 'backfillips'], { env, cwd: dir });
  t.equal(b.code, 1);
  t.match(b.stderr, /pass --force/);
  t.notOk(api.requests.some((q) => q.path.endsWith('backfillips')), 'no backfill sent');

  const f = await headway(['nodes', 'delete', '-i', '3', '--force'], { env, cwd: dir });
  t.equal(f.code, 0, f.stderr);
  t.equal(f.stdout.trim(), 'Node deleted');
  t.equal(api.last.method, 'DELETE');
  t.equal(api.last.path, '/api/v1/node/3');

  const no = await headway(['nodes', 'delete', '-i', '3', '--force=false'], { env, cwd: dir });
  t.equal(no.code, 1, '--force=false means no force');
  t.match(no.stderr, /pass --force/);
});

t.test('declining a prompt prints what did not happen and exits 0 (headscale)', async (t) => {
  const { dir, cleanup } = tempDir();
  const api = new FakeApi(dir);
  api.on('GET', '/api/v1/user', { body: { users: [{ id: '2', name: 'bob' }] } });
  api.on('DELETE', '/api/v1/user/2', { body: {} });
  api.on('GET', '/api/v1/node', { body: { nodes: [] } });
  api.on('GET', '/api/v1/node/3', { body: { node: { id: '3', name: 'box', givenName: 'box' } } });
  api.on('DELETE', '/api/v1/node/3', { body: {} });
  await api.start();
  t.teardown(async () => {
    await api.close();
    cleanup();
  });
  const env = { HOME: dir, HEADWAY_UNIX_SOCKET: api.socketPath };
  const u = await headwayTty(['users', 'destroy', '-n', 'bob'], 'n\n', { env, cwd: dir });
  t.equal(u.code, 0, u.stdout);
  t.match(u.stdout, /Remove the user "bob" \(2\) and its pre-auth keys\? \[y\/N\]/);
  t.match(u.stdout, /User not destroyed/);
  const n = await headwayTty(['nodes', 'delete', '-i', '3'], 'no\n', { env, cwd: dir });
  t.equal(n.code, 0, n.stdout);
  t.match(n.stdout, /Node not deleted/);
  t.notOk(api.requests.some((q) => q.method === 'DELETE'), 'nothing deleted');

  const y = await headwayTty(['users', 'destroy', '-n', 'bob'], 'y\n', { env, cwd: dir });
  t.equal(y.code, 0, y.stdout);
  t.match(y.stdout, /User destroyed/);
  t.equal(api.last.method, 'DELETE', 'yes goes ahead');
});
