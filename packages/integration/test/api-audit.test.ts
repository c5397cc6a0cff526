import * as grpc from '@grpc/grpc-js';
import t from 'tap';
import { headscaleServiceDefinition } from '@headway/api/grpc';
import { runHeadwayOn } from '../src/cli.js';
import { adminFetch, startTestServer } from '../src/server.js';

type Entry = { id: string; at: string; actor: string; action: string; target: string; remote: string };

const HeadscaleClient = grpc.makeGenericClientConstructor(headscaleServiceDefinition(), 'HeadscaleService');

t.test('every change through REST, the admin socket and gRPC is recorded with who, what and from where; reads and checks are not', async (t) => {
  const s = await startTestServer({ grpc_listen_addr: '127.0.0.1:0' });
  t.teardown(() => s.stop());
  const { secret, key } = await s.state.keys.createApiKey(null);

  t.equal((await adminFetch(s, secret, 'POST', '/api/v1/user', { name: 'alice' })).status, 200);
  const alice = s.state.users.list({ name: 'alice' })[0]!;
  t.equal((await adminFetch(s, secret, 'POST', `/api/v1/user/${alice.id}/rename/alicia`)).status, 200);
  t.equal((await adminFetch(s, secret, 'GET', '/api/v1/user')).status, 200, 'a read');
  t.equal((await adminFetch(s, secret, 'POST', '/api/v1/policy/check', { policy: '{}' })).status, 200, 'a check');
  t.equal((await adminFetch(s, secret, 'POST', '/api/v1/user', { name: 'alicia' })).status, 409, 'a refused change');
  t.equal((await adminFetch(s, secret, 'POST', '/api/v1/preauthkey', { user: String(alice.id), reusable: true })).status, 200);

  const viaSocket = await runHeadwayOn(s, ['users', 'create', 'bob']);
  t.equal(viaSocket.code, 0, viaSocket.stderr);

  const c = new HeadscaleClient(new URL(s.urls.grpc!.replace(/^grpcs?:/, 'http:')).host, grpc.credentials.createInsecure());
  t.teardown(() => c.close());
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${secret}`);
  const rpc = (method: string, req: Record<string, unknown>) => new Promise<void>((resolve, reject) =>
    (c as unknown as Record<string, (r: unknown, m: grpc.Metadata, cb: (e: grpc.ServiceError | null) => void) => void>)[method]!(req, md, (e) => (e ? reject(e) : resolve())));
  await rpc('CreateUser', { name: 'carol' });
  await rpc('ListUsers', {});

  const { status, json } = await adminFetch(s, secret, 'GET', '/api/v1/audit');
  t.equal(status, 200);
  t.equal(json.persistent, true, 'SQLite keeps the log');
  const entries = json.entries as Entry[];
  t.same(entries.map((e) => e.action), ['CreateUser', 'createUser', 'createPreAuthKey', 'renameUser', 'createUser'],
    'newest first: the gRPC call, the socket call, then the REST changes; no read, check or refused change');
  const actor = `apikey:${key.prefix}`;
  t.match(entries[0], { actor, target: 'name=carol', remote: /127\.0\.0\.1/ }, 'gRPC: the key, the request, the peer');
  t.match(entries[1], { actor: 'socket', target: /^user \d+ \(bob\)$/, remote: '' }, 'the admin socket: no address');
  t.match(entries[2], { actor, target: /^preAuthKey \d+$/, remote: '127.0.0.1' });
  t.notMatch(entries[2]!.target, /hwkey/, 'a secret in the answer is not recorded');
  t.match(entries[3], { actor, target: `id=${alice.id} newName=alicia`, remote: '127.0.0.1' }, 'path parameters name the target');
  t.match(entries[4], { actor, target: `user ${alice.id} (alice)` }, "else what the answer made");
  t.ok(entries.every((e, i) => i === 0 || Number(e.id) < Number(entries[i - 1]!.id)), 'ids descend');

  const page = await adminFetch(s, secret, 'GET', `/api/v1/audit?limit=2&before=${entries[1]!.id}`);
  t.same((page.json.entries as Entry[]).map((e) => e.id), [entries[2]!.id, entries[3]!.id], 'limit and before page through it');
  const mine = await adminFetch(s, secret, 'GET', `/api/v1/audit?actor=socket`);
  t.same((mine.json.entries as Entry[]).map((e) => e.action), ['createUser'], 'by actor');
  const bad = await adminFetch(s, secret, 'GET', '/api/v1/audit?limit=0');
  t.equal(bad.status, 400, 'a bad limit is a 400');
  t.match(bad.json, { field: 'limit' });

  const cli = await runHeadwayOn(s, ['audit', 'list', '-n', '3', '-o', 'json']);
  t.equal(cli.code, 0, cli.stderr);
  t.same((JSON.parse(cli.stdout) as Array<{ action: string }>).map((e) => e.action), ['CreateUser', 'createUser', 'createPreAuthKey'], 'headway audit list');
  const table = await runHeadwayOn(s, ['audit', 'list', '--actor', actor]);
  t.match(table.stdout, /renameUser\s+id=\d+ newName=alicia\s+127\.0\.0\.1/, 'the table names each change');
  t.notOk(s.logs.some((l) => l.includes(secret)), 'the key is never logged');
});
