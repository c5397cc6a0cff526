// `headway migrate from-headscale` on hand-made headscale 0.26 and 0.29 SQLite databases
// (schema exactly as those versions create it): what each version's columns become, a record
// that cannot be imported (a node whose user is missing) reported and left out, the dry run
// writing nothing, the non-empty-target refusal and what --force replaces, bad input named and
// refused with nothing written, and imported keys working on a server started afterwards.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import bcrypt from 'bcryptjs';
import type { StorageDump } from '@headway/core/ports';
import knexFactory from 'knex';
import { openSqliteStorage } from '@headway/storage-sql';
import { testDatabaseServers } from '@headway/storage-sql/testing';
import { makeHeadscaleDb } from '../src/headscale-fixture.js';
import { adminFetch, runHeadway, startTestServer } from '../src/index.js';

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const b64url = (n: number) => Array.from(randomBytes(n), (b) => B64URL[b % 64]).join('');
/** goBcrypt hashes as headscale does (Go's bcrypt, cost 10, `$2a$`), stored as a blob. */
const goBcrypt = (secret: string) => Buffer.from(bcrypt.hashSync(secret, 10).replace(/^\$2b\$/, '$2a$'));
const hex = (n: number) => randomBytes(n).toString('hex');
const privkey = () => `privkey:${hex(32)}`;

const dir = mkdtempSync(join(tmpdir(), 'hw-migrate-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

// ---- headscale 0.26: forced_tags, plain-text pre-auth key, `prefix.secret` API key, zero-time expiry ----
const plainKey = hex(24);
const legacyApiPrefix = b64url(7);
const legacyApiSecret = b64url(32);
const v26 = {
  users: [
    { id: 1, name: 'alice', display_name: 'Alice', email: 'alice@example.com', created_at: '2025-06-01 10:00:00.123456789+00:00' },
    { id: 2, name: 'bob', email: 'bob@example.com', provider: 'oidc', provider_identifier: 'https://idp.example.com/sub-bob', created_at: '2025-06-02 10:00:00+00:00' },
    { id: 3, name: 'gone', created_at: '2025-06-03 10:00:00+00:00', deleted_at: '2025-06-04 10:00:00+00:00' },
  ],
  pre_auth_keys: [
    { id: 1, key: plainKey, user_id: 1, reusable: true, ephemeral: false, used: false, tags: '[]', created_at: '2025-06-01 11:00:00+00:00', expiration: '2099-01-01 00:00:00+00:00' },
    { id: 2, key: hex(24), user_id: 2, reusable: false, ephemeral: true, used: true, tags: 'null', created_at: '2025-06-01 11:00:00+00:00' },
  ],
  api_keys: [{ id: 1, prefix: legacyApiPrefix, hash: goBcrypt(legacyApiSecret), created_at: '2025-06-01 12:00:00+00:00', expiration: '2099-01-01 00:00:00+00:00' }],
  nodes: [
    {
      id: 1, machine_key: `mkey:${hex(32)}`, node_key: `nodekey:${hex(32)}`, disco_key: `discokey:${hex(32)}`,
      endpoints: '["192.0.2.1:41641","[2001:db8::1]:41641"]', host_info: JSON.stringify({ Hostname: 'laptop', OS: 'linux', RoutableIPs: ['10.1.0.0/24'], RequestTags: ['tag:laptop'] }),
      ipv4: '100.64.0.1', ipv6: 'fd7a:115c:a1e0::1', hostname: 'laptop', given_name: 'laptop', user_id: 1, register_method: 'authkey',
      forced_tags: 'null', auth_key_id: 1, expiry: '0001-01-01 00:00:00+00:00', last_seen: '2025-06-05 09:00:00.5+00:00',
      approved_routes: '["10.1.0.0/24"]', created_at: '2025-06-01 11:30:00+00:00', updated_at: '2025-06-05 09:00:00+00:00',
    },
    {
      id: 2, machine_key: `mkey:${hex(32)}`, node_key: `nodekey:${hex(32)}`, disco_key: '', endpoints: null, host_info: '{}',
      ipv4: '100.64.0.2', ipv6: 'fd7a:115c:a1e0::2', hostname: 'server', given_name: 'server', user_id: 2, register_method: 'oidc',
      forced_tags: '["tag:server"]', auth_key_id: 2, expiry: '2099-01-01 00:00:00+00:00', approved_routes: '[]',
      created_at: '2025-06-02 11:30:00+00:00', updated_at: '2025-06-02 11:30:00+00:00',
    },
    {
      id: 3, machine_key: `mkey:${hex(32)}`, node_key: `nodekey:${hex(32)}`, ipv4: '100.64.0.3', hostname: 'ghost', given_name: 'ghost',
      user_id: 9, register_method: 'cli', forced_tags: '[]', created_at: '2025-06-02 11:30:00+00:00', updated_at: '2025-06-02 11:30:00+00:00',
    },
  ],
  policies: [
    { id: 1, data: '{"acls":[]}', created_at: '2025-06-01 10:00:00+00:00', updated_at: '2025-06-01 10:00:00+00:00' },
    { id: 2, data: '{\n  // allow all\n  "acls": [{"action": "accept", "src": ["*"], "dst": ["*:*"]}]\n}', created_at: '2025-06-06 10:00:00+00:00', updated_at: '2025-06-06 10:00:00+00:00' },
  ],
};
const hs26 = join(dir, 'hs-0.26.sqlite');
makeHeadscaleDb(hs26, '0.26', v26);

// ---- headscale 0.29: tags, hskey-auth prefix + bcrypt hash, hskey-api key, tagged node without user ----
const authPrefix = b64url(12);
const authSecret = b64url(64);
const apiPrefix = b64url(12);
const apiSecret = b64url(64);
const v29 = {
  users: [
    { id: 5, name: 'carol', email: '', created_at: '2026-01-01 10:00:00+00:00' },
    { id: 6, name: 'Carol', provider: 'oidc', provider_identifier: 'https://idp.example.com/sub-carol', created_at: '2026-01-01 10:00:00+00:00' },
  ],
  pre_auth_keys: [
    { id: 4, prefix: authPrefix, hash: goBcrypt(authSecret), user_id: 5, reusable: true, ephemeral: false, used: false, tags: null, created_at: '2026-01-01 11:00:00+00:00' },
    { id: 5, prefix: b64url(12), hash: goBcrypt(b64url(64)), user_id: null, reusable: true, ephemeral: false, used: false, tags: '["tag:ci"]', created_at: '2026-01-01 11:00:00+00:00' },
  ],
  api_keys: [{ id: 3, prefix: apiPrefix, hash: goBcrypt(apiSecret), created_at: '2026-01-01 12:00:00+00:00' }],
  nodes: [
    {
      id: 7, machine_key: `mkey:${hex(32)}`, node_key: `nodekey:${hex(32)}`, disco_key: `discokey:${hex(32)}`, endpoints: '[]', host_info: '{"Hostname":"desk"}',
      ipv4: '100.64.0.7', ipv6: null, hostname: 'desk', given_name: 'desk', user_id: 5, register_method: 'authkey', tags: '[]', auth_key_id: 4,
      approved_routes: null, created_at: '2026-01-01 11:30:00+00:00', updated_at: '2026-01-01 11:30:00+00:00',
    },
    {
      id: 8, machine_key: `mkey:${hex(32)}`, node_key: `nodekey:${hex(32)}`, disco_key: '', endpoints: '[]', host_info: '{"Hostname":"runner"}',
      ipv4: '100.64.0.8', ipv6: 'fd7a:115c:a1e0::8', hostname: 'runner', given_name: 'desk', user_id: null, register_method: 'authkey', tags: '["tag:ci"]', auth_key_id: 5,
      approved_routes: '[]', created_at: '2026-01-01 11:30:00+00:00', updated_at: '2026-01-01 11:30:00+00:00',
    },
    {
      id: 9, machine_key: `mkey:${hex(32)}`, node_key: `nodekey:${hex(32)}`, ipv4: '100.64.0.9', hostname: 'orphan', given_name: 'orphan',
      user_id: 42, register_method: 'cli', tags: 'null', created_at: '2026-01-01 11:30:00+00:00', updated_at: '2026-01-01 11:30:00+00:00',
    },
  ],
};
const hs29 = join(dir, 'hs-0.29.sqlite');
makeHeadscaleDb(hs29, '0.29', v29);

const key26 = join(dir, 'noise-26.key');
writeFileSync(key26, privkey());
const key29 = join(dir, 'noise-29.key');
writeFileSync(key29, `${privkey()}\n`);

/** target makes a Headway data directory and config naming a SQLite database in it. */
function target(name: string, extra: Record<string, unknown> = {}) {
  const dataDir = join(dir, name);
  const config = join(dir, `${name}.yaml`);
  writeFileSync(config, JSON.stringify({ data_dir: dataDir, database: { type: 'sqlite', sqlite: { path: join(dataDir, 'db.sqlite') } }, ...extra }));
  return {
    dataDir, db: join(dataDir, 'db.sqlite'), noiseKey: join(dataDir, 'noise_private.key'),
    run: (args: string[]) => runHeadway({ HEADWAY_CONFIG: config }, ['migrate', 'from-headscale', ...args], 60_000),
    async dump(): Promise<StorageDump> {
      const s = await openSqliteStorage({ path: join(dataDir, 'db.sqlite') });
      try { return await s.dump!(); } finally { await s.close(); }
    },
  };
}

t.test('headscale 0.26: dry run reports everything and writes nothing', async (t) => {
  const tg = target('dry');
  const r = await tg.run(['--db', hs26, '--noise-key', key26]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /headscale 0\.26 database .*hs-0\.26\.sqlite/);
  t.match(r.stdout, /Would import 2 users, 2 nodes, 2 pre-auth keys, 1 API key, 1 policy:/);
  t.match(r.stdout, /node 1 laptop 100\.64\.0\.1 fd7a:115c:a1e0::1 of alice/);
  t.match(r.stdout, /Cannot import \(2\):/);
  t.match(r.stdout, /user 3 gone: deleted in headscale/);
  t.match(r.stdout, /node 3 ghost \(100\.64\.0\.3\): its user 9 does not exist/, 'a node whose user is missing is reported with the reason');
  t.match(r.stdout, /node 1 laptop \(100\.64\.0\.1\): advertises tag:laptop, which headscale 0\.26 kept only in Hostinfo; they are not applied/,
    'tags a 0.26 node only advertised are reported, not applied');
  t.match(r.stdout, /Control key: would copy .*noise-26\.key to .*noise_private\.key/);
  t.match(r.stdout, /Dry run: nothing written/);
  t.notOk(existsSync(tg.db), 'no database was created');
  t.notOk(existsSync(tg.noiseKey), 'no control key was written');

  const j = await tg.run(['--db', hs26, '--noise-key', key26, '-o', 'json']);
  const out = JSON.parse(j.stdout);
  t.equal(out.dryRun, true);
  t.same(out.counts, { users: 2, nodes: 2, preAuthKeys: 2, apiKeys: 1, pendingRegistrations: 0, policy: 1 });
  t.same(out.skipped.map((s: { kind: string; id: number }) => `${s.kind} ${s.id}`), ['user 3', 'node 3']);
  t.notOk(j.stdout.includes(plainKey), 'the plain-text key headscale 0.26 kept is not printed');
});

t.test('headscale 0.26 --apply: records as Headway keeps them; keys work on the server started afterwards', async (t) => {
  const tg = target('v26', { policy: { mode: 'database' } });
  const r = await tg.run(['--db', hs26, '--noise-key', key26, '--apply']);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /Imported 2 users, 2 nodes, 2 pre-auth keys, 1 API key, 1 policy:/);
  t.match(r.stdout, /Not imported \(2\):/);
  t.equal(readFileSync(tg.noiseKey, 'utf8').trim(), readFileSync(key26, 'utf8').trim(), 'the control key is headscale\'s');

  const d = await tg.dump();
  t.same(d.users.map((u) => [u.id, u.name, u.provider, u.providerId]), [[1, 'alice', '', null], [2, 'bob', 'oidc', 'https://idp.example.com/sub-bob']]);
  t.equal(d.users[0]!.createdAt.toISOString(), '2025-06-01T10:00:00.123Z', 'gorm\'s nanosecond times are read');
  const [laptop, server] = d.nodes;
  t.same([laptop!.id, laptop!.ipv4, laptop!.ipv6, laptop!.givenName, laptop!.userId, laptop!.tags], [1, '100.64.0.1', 'fd7a:115c:a1e0::1', 'laptop', 1, []], 'forced_tags null reads as no tags');
  t.equal(laptop!.machineKey, v26.nodes[0]!.machine_key);
  t.equal(laptop!.nodeKey, v26.nodes[0]!.node_key);
  t.equal(laptop!.discoKey, v26.nodes[0]!.disco_key);
  t.equal(laptop!.expiry, null, 'Go\'s zero time means no expiry');
  t.equal(laptop!.lastSeen?.toISOString(), '2025-06-05T09:00:00.500Z');
  t.same(laptop!.approvedRoutes, ['10.1.0.0/24']);
  t.same(laptop!.availableRoutes, ['10.1.0.0/24'], 'advertised routes come from Hostinfo.RoutableIPs');
  t.same(laptop!.endpoints, ['192.0.2.1:41641', '[2001:db8::1]:41641']);
  t.equal(laptop!.authKeyId, 1);
  t.same([server!.tags, server!.userId, server!.ephemeral, server!.registerMethod, server!.expiry?.getUTCFullYear()], [['tag:server'], 2, true, 'oidc', 2099],
    '0.26 forced_tags become tags; a tagged node keeps the user that registered it; ephemeral comes from its key');
  t.same(d.preAuthKeys.map((k) => [k.id, k.prefix, k.reusable, k.used, k.ephemeral]), [[1, plainKey.slice(0, 12), true, false, false], [2, v26.pre_auth_keys[1]!.key.slice(0, 12), false, true, true]]);
  t.notOk(JSON.stringify(d).includes(plainKey), 'the plain-text key is kept only as a hash');
  t.same(d.apiKeys.map((k) => [k.id, k.prefix]), [[1, legacyApiPrefix]]);
  t.match(d.policy?.text, /allow all/, 'the newest policy row');

  const server2 = await startTestServer({ policy: { mode: 'database' } }, { dataDir: tg.dataDir });
  t.teardown(() => server2.stop({ remove: false }));
  t.equal((await adminFetch(server2, `${legacyApiPrefix}.${legacyApiSecret}`, 'GET', '/api/v1/user')).status, 200, 'headscale\'s `prefix.secret` API key works');
  t.equal((await adminFetch(server2, `${legacyApiPrefix}.${b64url(32)}`, 'GET', '/api/v1/user')).status, 401, 'with a wrong secret it does not');
  t.equal((await server2.state.keys.checkPreAuthKey(plainKey)).key.id, 1, 'headscale 0.26\'s plain-text pre-auth key works');
  t.equal(server2.state.nodes.get(1)?.ipv4, '100.64.0.1', 'the server knows the node');
});

t.test('headscale 0.29 --apply; a non-empty target is refused unless --force, which replaces it', async (t) => {
  const tg = target('v29');
  t.equal((await tg.run(['--db', hs26, '--noise-key', key26, '--apply'])).code, 0);
  const before = await tg.dump();

  const refused = await tg.run(['--db', hs29, '--noise-key', key29, '--apply']);
  t.equal(refused.code, 1, 'refused');
  t.match(refused.stderr, /already holds 2 users, 2 nodes, 2 pre-auth keys, 1 API key, 1 policy.*pass --force/);
  t.same(await tg.dump(), before, 'nothing changed');
  t.equal(readFileSync(tg.noiseKey, 'utf8').trim(), readFileSync(key26, 'utf8').trim(), 'nor the control key');

  const dry = await tg.run(['--db', hs29, '--noise-key', key29]);
  t.equal(dry.code, 0);
  t.match(dry.stdout, /The target already holds 2 users.*--apply replaces them only when confirmed \(--force\)/);
  t.match(dry.stdout, /holds a different key: --apply replaces it/);

  const forced = await tg.run(['--db', hs29, '--noise-key', key29, '--apply', '--force']);
  t.equal(forced.code, 0, forced.stderr);
  t.match(forced.stdout, /headscale 0\.29\.2 database/);
  t.match(forced.stdout, /user 6 Carol as Carol-6/, 'a name differing only in case is renamed, and said so');
  t.match(forced.stdout, /node 8 desk.*the name desk is taken by another node; imported as desk-8/);
  t.match(forced.stdout, /node 9 orphan \(100\.64\.0\.9\): its user 42 does not exist/);
  const d = await tg.dump();
  t.same(d.users.map((u) => u.id), [5, 6], 'the old records are gone, the new ones in');
  t.same(d.nodes.map((n) => [n.id, n.givenName, n.userId, n.tags, n.ipv6]), [[7, 'desk', 5, [], null], [8, 'desk-8', null, ['tag:ci'], 'fd7a:115c:a1e0::8']]);
  t.same(d.preAuthKeys.map((k) => [k.id, k.userId, k.tags]), [[4, 5, []], [5, null, ['tag:ci']]]);
  t.ok(d.preAuthKeys[0]!.hash.startsWith('$2a$10$'), 'the bcrypt hash is carried over');
  t.equal(d.policy, null, 'headscale kept no policy');
  t.match(forced.stdout, /headscale kept no policy in its database/);
  t.equal(readFileSync(tg.noiseKey, 'utf8').trim(), readFileSync(key29, 'utf8').trim(), 'the control key is replaced');
  t.equal(readFileSync(`${tg.noiseKey}.before-migrate`, 'utf8').trim(), readFileSync(key26, 'utf8').trim(), 'the old one is kept aside');

  const server = await startTestServer({}, { dataDir: tg.dataDir });
  t.teardown(() => server.stop({ remove: false }));
  t.equal((await adminFetch(server, `hskey-api-${apiPrefix}-${apiSecret}`, 'GET', '/api/v1/node')).status, 200, 'headscale 0.29\'s API key works');
  t.equal((await server.state.keys.checkPreAuthKey(`hskey-auth-${authPrefix}-${authSecret}`)).key.id, 4, 'and its pre-auth key');
});

t.test('without database_versions the version comes from the migrations headscale recorded', async (t) => {
  const tg = target('v28');
  const v28 = join(dir, 'hs-0.28.sqlite');
  const migrations28 = ['202501221827', '202501311657', '202502070949', '202502131714', '202502171819', '202505091439', '202505141324',
    '202507021200', '202510311551', '202511101554-drop-old-idx', '202511011637-preauthkey-bcrypt', '202511122344-remove-newline-index',
    '202511131445-node-forced-tags-to-tags', '202601121700-migrate-hostinfo-request-tags'];
  makeHeadscaleDb(v28, '0.29', { users: v29.users.slice(0, 1) }, { databaseVersion: null, migrations: migrations28 });
  const r = await tg.run(['--db', v28, '--noise-key', key29]);
  t.equal(r.code, 0, r.stderr);
  t.match(r.stdout, /headscale 0\.28 database/);
  t.match(r.stdout, /Would import 1 user:/);
});

t.test('bad input is named, exits non-zero and writes nothing', async (t) => {
  const tg = target('bad');
  const cases: Array<[string, string[], RegExp]> = [];
  cases.push(['a missing database', ['--db', join(dir, 'nope.sqlite'), '--noise-key', key26], /nope\.sqlite: no such file/]);
  const text = join(dir, 'text.sqlite');
  writeFileSync(text, 'hello');
  cases.push(['a file that is not SQLite', ['--db', text, '--noise-key', key26], /text\.sqlite is not a SQLite database/]);
  const other = join(dir, 'other.sqlite');
  await (await openSqliteStorage({ path: other })).close();
  cases.push(['a SQLite database that is not headscale\'s', ['--db', other, '--noise-key', key26], /other\.sqlite is not a headscale database \(no migrations table\)/]);
  const newer = join(dir, 'hs-0.30.sqlite');
  makeHeadscaleDb(newer, '0.29', {}, { databaseVersion: 'v0.30.1' });
  cases.push(['a newer headscale', ['--db', newer, '--noise-key', key26], /last used by headscale v0\.30\.1; this Headway imports headscale 0\.26 to 0\.29/]);
  const older = join(dir, 'hs-0.25.sqlite');
  makeHeadscaleDb(older, '0.26', {}, { migrations: ['202501221827', '202501311657', '202502070949'], extraSql: 'CREATE TABLE routes(id integer);' });
  cases.push(['an older headscale', ['--db', older, '--noise-key', key26], /older than 0\.26 .*run headscale 0\.26 or later on it once/]);
  cases.push(['a missing key file', ['--db', hs26, '--noise-key', join(dir, 'nokey')], /--noise-key .*nokey: no such file/]);
  cases.push(['a key file that is not a key', ['--db', hs26, '--noise-key', text], /is not a headscale noise private key \(expected privkey:<64 hex digits>\)/]);
  cases.push(['a PostgreSQL URL that is not one', ['--db', 'postgres://[bad', '--noise-key', key26], /not a URL/]);
  for (const [what, args, message] of cases) {
    const r = await tg.run([...args, '--apply']);
    t.not(r.code, 0, `${what}: exits ${r.code}`);
    t.match(r.stderr, message, `${what}: ${r.stderr.trim()}`);
  }
  t.notOk(existsSync(tg.db), 'no database was created');
  t.notOk(existsSync(tg.noiseKey), 'no control key was written');
});

t.test('a headscale database on PostgreSQL (postgres:// URL) imports alike', async (t) => {
  const pg = testDatabaseServers().find((s) => s.type === 'postgres')!;
  if (!pg.admin) {
    if (process.env.CI === 'true') t.fail('HEADWAY_TEST_POSTGRES_URL is not set, and CI must import from PostgreSQL');
    else t.skip('HEADWAY_TEST_POSTGRES_URL not set', () => undefined);
    return;
  }
  await pg.scratch(async (conn) => {
    const url = `postgres://${encodeURIComponent(conn.user)}:${encodeURIComponent(conn.password ?? '')}@${conn.host}:${conn.port}/${conn.database}`;
    // The column types gorm gives headscale 0.29's models on PostgreSQL.
    const knex = knexFactory({ client: 'pg', connection: url });
    try {
      await knex.raw(`
        CREATE TABLE migrations (id varchar(255) PRIMARY KEY);
        CREATE TABLE users (id bigserial PRIMARY KEY, name text, display_name text, email text, provider_identifier text, provider text, profile_pic_url text,
          created_at timestamptz, updated_at timestamptz, deleted_at timestamptz);
        CREATE TABLE pre_auth_keys (id bigserial PRIMARY KEY, key text, prefix text, hash bytea, user_id bigint REFERENCES users(id) ON DELETE SET NULL,
          reusable boolean, ephemeral boolean DEFAULT false, used boolean DEFAULT false, tags text, created_at timestamptz, expiration timestamptz);
        CREATE TABLE api_keys (id bigserial PRIMARY KEY, prefix text UNIQUE, hash bytea, created_at timestamptz, expiration timestamptz, last_seen timestamptz);
        CREATE TABLE nodes (id bigserial PRIMARY KEY, machine_key text, node_key text, disco_key text, endpoints text, host_info text, ipv4 text, ipv6 text,
          hostname text, given_name varchar(63), user_id bigint REFERENCES users(id) ON DELETE CASCADE, register_method text, tags text,
          auth_key_id bigint REFERENCES pre_auth_keys(id), expiry timestamptz, last_seen timestamptz, approved_routes text,
          created_at timestamptz, updated_at timestamptz, deleted_at timestamptz);
        CREATE TABLE policies (id bigserial PRIMARY KEY, data text, created_at timestamptz, updated_at timestamptz, deleted_at timestamptz);
        CREATE TABLE database_versions (id bigint PRIMARY KEY, version text NOT NULL, updated_at timestamptz);`);
      await knex('migrations').insert(['202511011637-preauthkey-bcrypt', '202602201200-clear-tagged-node-user-id'].map((id) => ({ id })));
      await knex('database_versions').insert({ id: 1, version: 'v0.29.1', updated_at: new Date() });
      await knex('users').insert({ id: 5, name: 'carol', created_at: new Date('2026-01-01T10:00:00.250Z') });
      await knex('pre_auth_keys').insert({ id: 4, prefix: authPrefix, hash: goBcrypt(authSecret), user_id: 5, reusable: true, tags: '[]', created_at: new Date() });
      await knex('api_keys').insert({ id: 3, prefix: apiPrefix, hash: goBcrypt(apiSecret), created_at: new Date(), expiration: new Date('2099-01-01T00:00:00Z') });
      await knex('nodes').insert({
        id: 7, machine_key: v29.nodes[0]!.machine_key, node_key: v29.nodes[0]!.node_key, disco_key: '', endpoints: '[]', host_info: 'null',
        ipv4: '100.64.0.7', ipv6: 'fd7a:115c:a1e0::7', hostname: 'desk', given_name: 'desk', user_id: 5, register_method: 'authkey', tags: '[]',
        auth_key_id: 4, expiry: new Date('2027-01-01T00:00:00Z'), approved_routes: '["0.0.0.0/0","::/0"]', created_at: new Date(), updated_at: new Date(),
      });
      await knex('policies').insert({ data: '{"acls":[]}', created_at: new Date(), updated_at: new Date() });
    } finally {
      await knex.destroy();
    }
    const tg = target('from-pg');
    const r = await tg.run(['--db', url, '--noise-key', key29, '--apply']);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, new RegExp(`headscale 0\\.29\\.1 database postgres ${conn.host}:${conn.port}/${conn.database} ->`), 'the source is named without its password');
    t.notOk(r.stdout.includes(url) || r.stdout.includes(`:${encodeURIComponent(conn.password ?? '')}@`), 'the URL with its password is not printed');
    t.match(r.stdout, /Imported 1 user, 1 node, 1 pre-auth key, 1 API key, 1 policy:/);
    const d = await tg.dump();
    t.equal(d.users[0]!.createdAt.toISOString(), '2026-01-01T10:00:00.250Z');
    t.same(d.nodes.map((n) => [n.id, n.userId, n.authKeyId, n.ipv6, n.approvedRoutes, n.expiry?.toISOString(), n.hostinfo]),
      [[7, 5, 4, 'fd7a:115c:a1e0::7', ['0.0.0.0/0', '::/0'], '2027-01-01T00:00:00.000Z', null]]);
    t.same(d.preAuthKeys.map((k) => [k.id, k.reusable, k.used, k.ephemeral]), [[4, true, false, false]], 'booleans and bigint ids read right');
    t.ok(d.apiKeys[0]!.hash.startsWith('$2a$10$'), 'the bytea hash is read as text');
  });
});

// A dry run prints "Dry run: nothing written", so it must create no table either: on every server
// database the dry run leaves the target as it found it; --apply
// then imports, and a later dry run reads what the target holds.
for (const server of testDatabaseServers()) {
  t.test(`${server.type}: a dry run into an empty database creates no table`, async (t) => {
    if (!server.admin) {
      if (process.env.CI === 'true') t.fail(`${server.variable} is not set, and CI must check the dry run on ${server.type}`);
      else t.skip(`${server.variable} not set`, () => undefined);
      return;
    }
    await server.scratch(async (conn) => {
      const tg = target(`dry-${server.type}`, {
        database: { type: server.type, [server.type]: { host: conn.host, port: conn.port, name: conn.database, user: conn.user, pass: conn.password ?? '' } },
      });
      const knex = knexFactory({ client: server.type === 'postgres' ? 'pg' : 'mysql2', connection: { ...conn, password: conn.password ?? '' }, pool: { min: 0, max: 1 } });
      t.teardown(() => knex.destroy());
      const tables = async (): Promise<string[]> => {
        const rows = server.type === 'postgres'
          ? (await knex.raw(`select table_name as name from information_schema.tables where table_schema = current_schema()`)).rows
          : (await knex.raw(`select table_name as name from information_schema.tables where table_schema = database()`))[0];
        return (rows as Array<{ name?: string; NAME?: string }>).map((r) => String(r.name ?? r.NAME)).sort();
      };
      t.same(await tables(), [], 'the scratch database starts empty');

      const dry = await tg.run(['--db', hs26, '--noise-key', key26]);
      t.equal(dry.code, 0, dry.stderr);
      t.match(dry.stdout, /Would import 2 users, 2 nodes, 2 pre-auth keys, 1 API key, 1 policy:/);
      t.match(dry.stdout, /The target has no Headway schema yet, or an older one: --apply creates or updates it first/);
      t.match(dry.stdout, /Dry run: nothing written/);
      t.same(await tables(), [], 'the dry run created no table');
      t.notOk(existsSync(tg.noiseKey), 'no control key was written');

      const applied = await tg.run(['--db', hs26, '--noise-key', key26, '--apply']);
      t.equal(applied.code, 0, applied.stderr);
      t.match(applied.stdout, /Imported 2 users, 2 nodes, 2 pre-auth keys, 1 API key, 1 policy:/);
      const after = await tables();
      t.ok(after.includes('nodes') && after.includes('users'), '--apply made the schema');

      const again = await tg.run(['--db', hs29, '--noise-key', key29]);
      t.equal(again.code, 0, again.stderr);
      t.match(again.stdout, /The target already holds 2 users, 2 nodes, 2 pre-auth keys, 1 API key, 1 policy/, 'a dry run reads what a migrated target holds');
      t.same(await tables(), after, 'and adds no table');
    });
  });
}
