/**
 * The headscale 0.29 CLI commands, against the real server (SQLite) with testkit
 * devices doing the real Noise handshake and register requests: auth register|approve|
 * reject, generate private-key, nodes expire --expiry/--disable, users create
 * --picture-url, users destroy --delete-nodes, Last seen of online nodes, config check.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { loadOrCreateKey } from '@headway/core';
import { REJECTED } from '@headway/control';
import { TestDevice } from '@headway/testkit';
import { runHeadway, runHeadwayOn } from '../src/cli.js';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';

t.setTimeout(300_000);

/** pendingLogin has a new testkit device ask to join without a key; it returns the auth ID and its held follow-up. */
async function pendingLogin(s: TestServer, hostname: string, device?: TestDevice) {
  const d = device ?? new TestDevice({ serverUrl: s.urls.http, hostname });
  if (!device) await d.connect();
  // A known device whose key expired logs in again with a fresh node key, as tailscaled does.
  const first = device ? await d.rotateNodeKey({}) : await d.register({});
  const authUrl = String(first.AuthURL);
  const authId = authUrl.split('/').pop()!;
  const followup = d.register({ followup: authUrl });
  // The follow-up is held open until an administrator decides.
  await new Promise((r) => setTimeout(r, 200));
  return { d, authId, authUrl, followup };
}

t.test('auth register, approve and reject decide pending logins (headscale 0.29 auth commands)', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  await s.state.users.create({ name: 'alice' });

  // The register page prints the non-deprecated command.
  const a = await pendingLogin(s, 'desk');
  const page = await (await fetch(a.authUrl)).text();
  t.match(page, `headway auth register --auth-id ${a.authId} --user USERNAME`);
  t.notMatch(page, 'nodes register', 'the deprecated form is gone');

  // auth approve refuses a new device: it needs an owner. Nothing changes.
  const refused = await hw('auth', 'approve', '--auth-id', a.authId);
  t.equal(refused.code, 1);
  t.match(refused.stderr, `Error: the login with auth ID ${a.authId} is from a new device, which needs an owner: run headway auth register --auth-id ${a.authId} --user USERNAME`);
  t.equal(s.state.nodes.list().length, 0, 'no node');

  const reg = await hw('auth', 'register', '--auth-id', a.authId, '--user', 'alice', '-o', 'json');
  t.equal(reg.code, 0, reg.stderr);
  const node = JSON.parse(reg.stdout);
  t.equal(node.given_name, 'desk');
  t.equal(node.user.name, 'alice');
  const res = await a.followup;
  t.equal(res.MachineAuthorized, true, 'the held follow-up is answered: the device is in');
  const spent = await fetch(a.authUrl);
  t.match(await spent.text(), /Device approved/, 'the login URL is spent: it says the device was approved');
  const again = await hw('auth', 'register', '--auth-id', a.authId, '--user', 'alice');
  t.equal(again.code, 1, 'a spent auth ID is refused');
  t.match(again.stderr, /no pending login with auth ID/);

  // The whole URL pasted from the device works as --auth-id too.
  const b = await pendingLogin(s, 'phone');
  const human = await hw('auth', 'register', '--auth-id', b.authUrl, '--user', 'alice');
  t.equal(human.code, 0, human.stderr);
  t.equal(human.stdout, 'Node phone registered\n');
  t.equal((await b.followup).MachineAuthorized, true);

  // Reject: the device is told, the URL stops working, nothing is registered.
  const c = await pendingLogin(s, 'intruder');
  const rej = await hw('auth', 'reject', '--auth-id', c.authId);
  t.equal(rej.code, 0, rej.stderr);
  t.equal(rej.stdout, 'Auth request rejected\n');
  const answer = await c.followup;
  t.equal(answer.MachineAuthorized, false);
  t.equal(answer.Error, REJECTED, 'the held follow-up carries the rejection, which tailscale up prints');
  t.equal((await fetch(c.authUrl)).status, 410, 'the rejected login\'s URL says it was rejected');
  t.equal(s.state.nodes.list().length, 2, 'no node for the rejected device');
  const twice = await hw('auth', 'reject', '--auth-id', c.authId);
  t.equal(twice.code, 1);
  t.match(twice.stderr, `Error: no pending login with auth ID ${c.authId}`);

  // Approve: a known device logging in again (after its key expired) keeps its owner.
  await s.state.nodes.expire(Number(node.id), new Date(Date.now() - 1000));
  const d2 = await pendingLogin(s, 'desk', a.d);
  const ok = await hw('auth', 'approve', '--auth-id', d2.authId);
  t.equal(ok.code, 0, ok.stderr);
  t.equal(ok.stdout, 'Auth request approved\n');
  t.equal((await d2.followup).MachineAuthorized, true);
  const after = s.state.nodes.get(Number(node.id))!;
  t.equal(after.userId, s.state.users.byName('alice')!.id, 'still alice\'s');
  t.ok(!after.expiry || after.expiry.getTime() > Date.now(), 'no longer expired');

  // Bad input: a usage error before anything is sent, and 4xx naming the field on the API.
  const bad = await hw('auth', 'register', '--auth-id', 'not valid!', '--user', 'alice');
  t.equal(bad.code, 2);
  t.match(bad.stderr, /is not an auth ID/);
  const missing = await hw('auth', 'reject');
  t.equal(missing.code, 2);
  t.match(missing.stderr, /auth-id/);
  const key = (await s.state.keys.createApiKey(null)).secret;
  const noUser = await adminFetch(s, key, 'POST', '/api/v1/auth/register', { auth_id: 'abc' });
  t.equal(noUser.status, 400);
  t.equal(noUser.json.field, 'user');
  const badId = await adminFetch(s, key, 'POST', '/api/v1/auth/reject', { authId: '../x' });
  t.equal(badId.status, 400);
  t.equal(badId.json.field, 'authId');
  const unknown = await adminFetch(s, key, 'POST', '/api/v1/auth/approve', { authId: 'nope' });
  t.equal(unknown.status, 404);

  // The deprecated spelling still works for scripts, with a note on stderr.
  const e = await pendingLogin(s, 'legacy');
  const legacy = await hw('nodes', 'register', '--user', 'alice', '--key', e.authId);
  t.equal(legacy.code, 0, legacy.stderr);
  t.equal(legacy.stdout, 'Node legacy registered\n');
  t.match(legacy.stderr, /deprecated, use "headway auth register/);
  for (const dev of [a.d, b.d, c.d, e.d]) dev.close();
});

t.test('nodes expire: now, at a time, or never (--expiry / --disable)', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  await s.state.users.create({ name: 'bob' });
  const created = await hw('debug', 'create-node', '--user', 'bob', '--name', 'box', '-o', 'json');
  const id = String(JSON.parse(created.stdout).id);
  const expiry = () => s.state.nodes.get(Number(id))!.expiry;

  let r = await hw('nodes', 'expire', '-i', id, '--expiry', '2031-02-03T04:05:06Z');
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, 'Node expiration updated\n');
  t.equal(expiry()?.toISOString(), '2031-02-03T04:05:06.000Z');

  r = await hw('nodes', 'expire', '-i', id, '--disable', '-o', 'json');
  t.equal(r.code, 0, r.stderr);
  t.equal(JSON.parse(r.stdout).expiry, null);
  t.equal(expiry(), null, 'the node never expires');

  r = await hw('nodes', 'expire', '-i', id, '--expiry', '30d');
  t.equal(r.code, 0, r.stderr);
  const in30 = expiry()!.getTime() - Date.now();
  t.ok(in30 > 29 * 86400_000 && in30 <= 30 * 86400_000, 'a duration is counted from now');

  r = await hw('nodes', 'expire', '-i', id);
  t.equal(r.stdout, 'Node expired\n');
  t.ok(expiry()!.getTime() <= Date.now(), 'no flag: expired now');

  const both = await hw('nodes', 'expire', '-i', id, '--disable', '--expiry', '2031-01-01T00:00:00Z');
  t.equal(both.code, 2);
  t.match(both.stderr, /--expiry or --disable, not both/);
  const junk = await hw('nodes', 'expire', '-i', id, '--expiry', 'tomorrow');
  t.equal(junk.code, 2);
  t.match(junk.stderr, /"tomorrow" is not an RFC 3339 time/);

  const key = (await s.state.keys.createApiKey(null)).secret;
  const before = expiry()!.getTime();
  const apiBoth = await adminFetch(s, key, 'POST', `/api/v1/node/${id}/expire?disableExpiry=true&expiry=2031-01-01T00:00:00Z`);
  t.equal(apiBoth.status, 400);
  t.equal(apiBoth.json.field, 'expiry');
  const apiBad = await adminFetch(s, key, 'POST', `/api/v1/node/${id}/expire?expiry=soon`);
  t.equal(apiBad.status, 400);
  t.equal(expiry()!.getTime(), before, 'refused requests changed nothing');
  const apiFuture = await adminFetch(s, key, 'POST', `/api/v1/node/${id}/expire?expiry=2032-01-01T00:00:00Z`);
  t.equal(apiFuture.status, 200);
  t.equal(apiFuture.json.node.expiry, '2032-01-01T00:00:00.000Z', 'headscale\'s query parameter');
});

t.test('users create --picture-url/--display-name/--email are stored and listed with headscale\'s field names', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  const pic = 'https://example.com/a/carol.png?s=96';
  const made = await hw('users', 'create', 'carol', '--display-name', 'Carol C', '--email', 'carol@example.com', '--picture-url', pic);
  t.equal(made.code, 0, made.stderr);
  t.equal(made.stdout, 'User created\n');
  const list = await hw('users', 'list', '-o', 'json');
  const [carol] = JSON.parse(list.stdout);
  t.match(carol, { name: 'carol', display_name: 'Carol C', email: 'carol@example.com', profile_pic_url: pic });
  const key = (await s.state.keys.createApiKey(null)).secret;
  const api = await adminFetch(s, key, 'GET', '/api/v1/user?name=carol');
  t.equal(api.json.users[0].profilePicUrl, pic, 'the REST API returns it (headscale v1User.profilePicUrl)');

  const badUrl = await hw('users', 'create', 'dave', '--picture-url', 'javascript:alert(1)');
  t.equal(badUrl.code, 2);
  t.match(badUrl.stderr, /--picture-url: "javascript:alert\(1\)" is not an http:\/\/ or https:\/\/ URL/);
  const badMail = await hw('users', 'create', 'dave', '--email', 'not-an-address');
  t.equal(badMail.code, 2);
  t.match(badMail.stderr, /--email: "not-an-address" is not an e-mail address/);
  const apiBad = await adminFetch(s, key, 'POST', '/api/v1/user', { name: 'dave', picture_url: 'ftp://example.com/x.png' });
  t.equal(apiBad.status, 400);
  t.equal(apiBad.json.field, 'pictureUrl');
  t.equal(s.state.users.byName('dave'), undefined, 'no user was created');

  // Devices see the picture: the owner's UserProfile and the register reply carry it.
  const { secret } = await s.state.keys.createPreAuthKey({ userId: s.state.users.byName('carol')!.id });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'cpic' });
  await d.connect();
  const reg = await d.register({ authKey: secret });
  t.equal((reg as { User?: { ProfilePicURL?: string } }).User?.ProfilePicURL, pic, 'register reply');
  const map = await d.startMap({ stream: true });
  const profiles = (map as { UserProfiles?: { LoginName: string; ProfilePicURL?: string }[] }).UserProfiles ?? [];
  t.equal(profiles.find((p) => p.LoginName === 'carol@example.com')?.ProfilePicURL, pic, 'map UserProfile');
  await d.close();
});

t.test('users destroy --delete-nodes names what goes, asks, and deletes it all in one go', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const hw = (...args: string[]) => runHeadwayOn(s, args);
  await hw('users', 'create', 'erin');
  await hw('users', 'create', 'fay');
  for (const n of ['e1', 'e2']) t.equal((await hw('debug', 'create-node', '--user', 'erin', '--name', n)).code, 0);
  await hw('debug', 'create-node', '--user', 'fay', '--name', 'f1');
  await hw('preauthkeys', 'create', '-u', 'erin', '--reusable');

  // Without a terminal and without --force nobody can confirm: refused, nothing deleted.
  const noTty = await hw('users', 'destroy', '--name', 'erin', '--delete-nodes');
  t.equal(noTty.code, 1);
  t.match(noTty.stderr, /Remove the user "erin" \(\d+\) with its 2 node\(s\) \(e1, e2\) and 1 pre-auth key\(s\)\?/, 'the question names what would go');
  t.equal(s.state.nodes.list().length, 3);

  const plain = await hw('users', 'destroy', '--name', 'erin', '--force');
  t.equal(plain.code, 1, '--force alone never deletes nodes');
  t.match(plain.stderr, /still owns 2 node\(s\)/);

  const done = await hw('users', 'destroy', '--name', 'erin', '--delete-nodes', '--force');
  t.equal(done.code, 0, done.stderr);
  t.equal(done.stdout, 'User destroyed with 2 node(s): e1, e2\n');
  t.same(s.state.nodes.list().map((n) => n.givenName), ['f1'], 'only the other user\'s node is left');
  t.equal(s.state.users.byName('erin'), undefined);
  t.same(await s.state.storage.preAuthKeys.list(), [], 'its key went too');

  const json = await hw('users', 'destroy', '--name', 'fay', '--delete-nodes', '--force', '-o', 'json');
  t.equal(json.code, 0, json.stderr);
  t.same(JSON.parse(json.stdout).deleted_nodes.map((n: { given_name: string }) => n.given_name), ['f1']);
});

t.test('nodes list shows Last seen for online nodes (when they connected), as headscale does', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const u = await s.state.users.create({ name: 'gus' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'live' });
  await d.connect();
  t.equal((await d.register({ authKey: secret })).MachineAuthorized, true);
  const connected = new Date('2030-02-03T04:05:06.000Z');
  s.state.presence.now = () => connected;
  await d.startMap({ stream: true });
  t.teardown(() => d.close());
  const r = await runHeadwayOn(s, ['nodes', 'list', '-o', 'json']);
  const [n] = JSON.parse(r.stdout);
  t.equal(n.online, true);
  t.equal(Date.parse(n.last_seen), connected.getTime(), `an online node was seen when it connected (${n.last_seen})`);
  const table = await runHeadwayOn(s, ['nodes', 'list']);
  const row = table.stdout.split('\n')[1]!;
  t.match(row, /\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\s+N\/A\s+online/, 'the Last seen cell is filled');
});

t.test('taildrop.enabled: false withholds the file-sharing capability (it was accepted and ignored)', async (t) => {
  for (const enabled of [true, false]) {
    const s = await startTestServer({ taildrop: { enabled } });
    const u = await s.state.users.create({ name: 'hal' });
    const { secret } = await s.state.keys.createPreAuthKey({ userId: u.id });
    const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'h' });
    await d.connect();
    await d.register({ authKey: secret });
    const map = await d.startMap({ stream: true });
    const caps = Object.keys((map.Node as { CapMap?: Record<string, unknown> }).CapMap ?? {});
    t.equal(caps.includes('https://tailscale.com/cap/file-sharing'), enabled, `taildrop.enabled: ${enabled}`);
    d.close();
    await s.stop();
  }
});

t.test('generate private-key prints a key the server reads as its noise key', async (t) => {
  const one = await runHeadway({}, ['generate', 'private-key']);
  t.equal(one.code, 0, one.stderr);
  const key = one.stdout.trim();
  t.match(key, /^privkey:[0-9a-f]{64}$/);
  const raw = Buffer.from(key.slice(8), 'hex');
  t.equal(raw[0]! & 7, 0, 'clamped as Tailscale clamps a Curve25519 key');
  t.equal(raw[31]! & 0xc0, 0x40);
  const two = await runHeadway({}, ['gen', 'private-key', '-o', 'json']);
  const { private_key: other } = JSON.parse(two.stdout);
  t.match(other, /^privkey:[0-9a-f]{64}$/);
  t.not(other, key, 'a new key each time');
  const dir = mkdtempSync(join(tmpdir(), 'hw-genkey-'));
  writeFileSync(join(dir, 'noise_private.key'), one.stdout);
  const loaded = loadOrCreateKey(join(dir, 'noise_private.key'));
  t.equal(loaded.created, false, 'the file is read, not replaced');
  t.equal(loaded.privateKey.toString('hex'), key.slice(8));
  const s = await startTestServer({ noise: { private_key_path: join(dir, 'noise_private.key') } });
  t.teardown(() => s.stop());
  const served = await (await fetch(`${s.urls.http}/key?v=100`)).json() as { publicKey: string };
  t.equal(served.publicKey, `mkey:${loaded.publicKey.toString('hex')}`, 'the server uses the generated key');
});

t.test('config check names keys accepted for headscale compatibility but not implemented; --strict fails on them', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-strict-'));
  const path = join(dir, 'config.yaml');
  writeFileSync(path, [
    'server_url: https://hs.example.com',
    'listen_addr: 127.0.0.1:8080',
    'grpc_listen_addr: 127.0.0.1:50443',
    'tls_letsencrypt_hostname: hs.example.com',
    'tls_letsencrypt_challenge_type: HTTP-01',
    'acme_email: admin@example.com',
    'database:',
    '  gorm:',
    '    prepare_stmt: true',
    'oidc:',
    '  issuer: https://sso.example.com',
    '  client_id: headway',
    '  client_secret: hunter2-secret',
    'logtail:',
    '  enabled: false',
    'disable_check_updates: true',
    '',
  ].join('\n'));
  const r = await runHeadway({}, ['config', 'check', '-c', path]);
  t.equal(r.code, 0, 'warnings only');
  t.match(r.stdout, /^warning: database\.gorm\.prepare_stmt: accepted for headscale compatibility but not implemented: gorm/m);
  t.notMatch(r.stdout, /^warning: (tls_letsencrypt_hostname|tls_letsencrypt_challenge_type|acme_email)\b/m, 'Let\'s Encrypt is implemented: its keys are checked, not reported');
  t.notMatch(r.stdout, /oidc\.[a-z_]+: accepted for headscale compatibility but not implemented/, 'oidc is implemented: its keys are checked, not reported');
  t.notMatch(r.stdout, /grpc_listen_addr/, 'the gRPC API is implemented: grpc_listen_addr is not reported');
  t.notMatch(r.stdout, /logtail|disable_check_updates/, 'keys set to what Headway does anyway are not reported');
  t.notMatch(r.stdout, /hunter2/, 'values are never printed');
  t.match(r.stdout, /Config is valid/);

  const strict = await runHeadway({}, ['config', 'check', '-c', path, '--strict']);
  t.equal(strict.code, 1, '--strict fails');
  t.match(strict.stdout, /^error: database\.gorm\.prepare_stmt: accepted for headscale compatibility but not implemented/m);
  t.notMatch(strict.stdout, /Config is valid/);

  const json = await runHeadway({}, ['config', 'check', '-c', path, '-o', 'json']);
  const out = JSON.parse(json.stdout);
  t.equal(out.valid, true);
  t.equal(out.problems.filter((p: { code?: string }) => p.code === 'not_implemented').length, 1);

  writeFileSync(path, 'server_url: https://hs.example.com\nlogtail:\n  enabled: true\n');
  const env = await runHeadway({ HEADWAY_GRPC_ALLOW_INSECURE: 'true' }, ['config', 'check', '-c', path, '--strict']);
  t.equal(env.code, 1);
  t.match(env.stdout, /logtail\.enabled: accepted for headscale compatibility but not implemented: client log uploads/);
  t.notMatch(env.stdout, /grpc_allow_insecure/, 'grpc_allow_insecure is implemented: not reported');

  writeFileSync(path, 'server_url: https://hs.example.com\ngrpc_listen_addr: 0.0.0.0:50443\n');
  const plain = await runHeadway({}, ['config', 'check', '-c', path]);
  t.equal(plain.code, 1, 'plaintext gRPC on every interface is an error');
  t.match(plain.stdout, /^error: grpc_listen_addr: 0\.0\.0\.0:50443 is not a loopback address and no TLS is configured.*tls_cert_path and tls_key_path.*grpc_allow_insecure: true/m);

  writeFileSync(path, 'server_url: https://hs.example.com\n');
  const clean = await runHeadway({}, ['config', 'check', '-c', path, '--strict']);
  t.equal(clean.code, 0, clean.stdout);
  t.equal(clean.stdout, `Config is valid (${path})\n`);
});
