/**
 * Hostile protocol input: register and map bodies with
 * wrong types, arrays, nulls and huge values, sent over the real Noise/HTTP2 transport
 * by testkit devices. Every refused request must leave the database unchanged (no
 * ghost node, single-use key not spent), no request may get a 500, nothing a client
 * sent may reach the logs, and the server must start again on the same database.
 * Runs on SQLite always, on PostgreSQL and MariaDB when their URLs are set (CI: must).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import knexFactory, { type Knex } from 'knex';
import { parseConnectionUrl, type NetworkConnection } from '@headway/storage-sql';
import { TestDevice, type HttpReply } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

const inCI = process.env.CI === 'true';
/** MARK is inside every hostile string value: no log line may ever contain it. */
const MARK = 'HOSTILEMARK';

// ---------------------------------------------------------------- databases

interface Database {
  name: string;
  /** config is merged into the server's raw configuration. */
  config: Record<string, unknown>;
  /** connect opens a knex on the database the server uses (after dataDir is known for SQLite). */
  connect(dataDir: string): Knex;
  drop(): Promise<void>;
}

function sqliteDatabase(): Database {
  return {
    name: 'sqlite',
    config: {},
    connect: (dataDir) => knexFactory({ client: 'better-sqlite3', connection: { filename: join(dataDir, 'db.sqlite') }, useNullAsDefault: true }),
    drop: async () => undefined,
  };
}

/** scratchDatabase creates a uniquely named database through the admin URL; drop() removes it. */
async function scratchDatabase(kind: 'postgres' | 'mysql', url: string): Promise<Database> {
  const client = kind === 'postgres' ? 'pg' : 'mysql2';
  const admin: NetworkConnection = kind === 'postgres'
    ? parseConnectionUrl(url, ['postgres', 'postgresql'], 5432)
    : parseConnectionUrl(url, ['mysql', 'mariadb'], 3306);
  const database = `headway_hostile_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
  const adminKnex = knexFactory({ client, connection: { ...admin }, pool: { min: 0, max: 1 } });
  await adminKnex.raw(kind === 'postgres' ? `create database "${database}"` : `create database \`${database}\` character set utf8mb4 collate utf8mb4_bin`);
  return {
    name: kind,
    config: {
      database: {
        type: kind,
        [kind]: { host: admin.host, port: admin.port, name: database, user: admin.user, pass: admin.password ?? '' },
      },
    },
    connect: () => knexFactory({ client, connection: { ...admin, database }, pool: { min: 0, max: 2 } }),
    async drop() {
      try {
        await adminKnex.raw(kind === 'postgres' ? `drop database if exists "${database}" with (force)` : `drop database if exists \`${database}\``);
      } finally {
        await adminKnex.destroy();
      }
    },
  };
}

/** snapshot is every row a refused request could have touched, as comparable text. */
async function snapshot(k: Knex): Promise<string> {
  const nodes = await k('nodes').select('id', 'machine_key', 'node_key', 'disco_key', 'hostname', 'given_name', 'user_id', 'tags',
    'ipv4', 'ipv6', 'endpoints', 'hostinfo', 'available_routes', 'approved_routes', 'expiry', 'ephemeral', 'auth_key_id', 'updated_at').orderBy('id');
  const keys = await k('pre_auth_keys').select('id', 'used', 'expiration').orderBy('id');
  const pending = await k('pending_registrations').select('key', 'machine_key', 'node_key', 'hostinfo').orderBy('key');
  const users = await k('users').select('id', 'name').orderBy('id');
  return JSON.stringify({ nodes, keys, pending, users });
}

/** storedHostinfo reads a node's raw hostinfo column and says whether the reader accepts it. */
async function storedHostinfo(k: Knex, nodeKey: string): Promise<{ readable: boolean; value: unknown }> {
  const row = await k('nodes').where({ node_key: nodeKey }).first('hostinfo');
  if (!row) return { readable: false, value: undefined };
  if (row.hostinfo === null) return { readable: true, value: null };
  try {
    const v = JSON.parse(String(row.hostinfo));
    return { readable: typeof v === 'object' && v !== null && !Array.isArray(v), value: v };
  } catch {
    return { readable: false, value: row.hostinfo };
  }
}

// ---------------------------------------------------------------- the case table

type Kind = 'string' | 'hostname' | 'bool' | 'int' | 'number' | 'strings' | 'prefixes' | 'object' | 'time' | 'nodekey'
  | 'discokey' | 'base64' | 'endpoints' | 'ints' | 'services' | 'record' | 'auth';

const huge = (n: number) => MARK + 'x'.repeat(n);
const bigArray = (n: number, v: unknown) => Array.from({ length: n }, () => v);

/** WRONG lists, per kind of field, values of the wrong type, malformed values and values past the size caps. */
const WRONG: Record<Kind, unknown[]> = {
  string: [5, true, [], {}, [MARK], huge(300_000)],
  hostname: [5, false, [MARK], { a: MARK }, huge(300), `${MARK}\u0000nul`],
  bool: ['true', 1, [], {}],
  int: [MARK, 1.5, true, [], {}, 1e300],
  number: [MARK, true, [], {}],
  strings: [MARK, 5, {}, [5], [[MARK]], [null], bigArray(50_000, 'ab')],
  prefixes: [MARK, 5, {}, [5], [MARK], ['10.0.0.0/33'], ['10.0.0.1'], bigArray(5_000, '10.0.0.0/8')],
  object: [MARK, 5, [], true, [{ a: 1 }]],
  time: [5, MARK, '9999-12-31', '2026-13-45T99:99:99Z', true, {}],
  nodekey: [5, MARK, `nodekey:${'z'.repeat(64)}`, `nodekey:${'a'.repeat(63)}`, `discokey:${'a'.repeat(64)}`, {}, []],
  discokey: [5, MARK, `discokey:${'z'.repeat(64)}`, `nodekey:${'a'.repeat(64)}`, {}],
  base64: [5, `${MARK}!!!`, {}, huge(20_000)],
  endpoints: [MARK, [5], ['192.0.2.1'], ['192.0.2.1:99999'], ['[zz::1]:5'], [`${MARK}:1`], {}, bigArray(2_000, '192.0.2.1:41641')],
  ints: [MARK, [MARK], [1.5], {}, bigArray(2_000, 1)],
  services: [MARK, [5], [{ Proto: 5, Port: 1 }], [{ Proto: 'tcp', Port: MARK }], [{ Proto: 'tcp', Port: 70_000 }], bigArray(2_000, { Proto: 'tcp', Port: 1 })],
  record: [MARK, [], { '1-v4': MARK }, 5],
  auth: [MARK, 5, [], true],
};

/** HOSTINFO is tailcfg.Hostinfo's fields and their kinds (tailscale 1.80 to 1.102). */
const HOSTINFO: Record<string, Kind> = {
  IPNVersion: 'string', FrontendLogID: 'string', BackendLogID: 'string', OS: 'string', OSVersion: 'string',
  Container: 'bool', Env: 'string', Distro: 'string', DistroVersion: 'string', DistroCodeName: 'string', App: 'string',
  Desktop: 'bool', Package: 'string', DeviceModel: 'string', PushDeviceToken: 'string', Hostname: 'hostname',
  ShieldsUp: 'bool', ShareeNode: 'bool', NoLogsNoSupport: 'bool', RemoteConfig: 'bool', WireIngress: 'bool', IngressEnabled: 'bool',
  AllowsUpdate: 'bool', Machine: 'string', GoArch: 'string', GoArchVar: 'string', GoVersion: 'string',
  RoutableIPs: 'prefixes', RequestTags: 'strings', WoLMACs: 'strings', Services: 'services', NetInfo: 'object',
  sshHostKeys: 'strings', Cloud: 'string', Userspace: 'bool', UserspaceRouter: 'bool', AppConnector: 'bool',
  ServicesHash: 'string', PeerRelay: 'bool', ExitNodeID: 'string', Location: 'object', TPM: 'object', StateEncrypted: 'bool',
};

const NETINFO: Record<string, Kind> = {
  MappingVariesByDestIP: 'bool', WorkingIPv6: 'bool', OSHasIPv6: 'bool', WorkingUDP: 'bool', WorkingICMPv4: 'bool',
  HavePortMap: 'bool', UPnP: 'bool', PMP: 'bool', PCP: 'bool', PreferredDERP: 'int', LinkType: 'string',
  DERPLatency: 'record', FirewallMode: 'string',
};

const LOCATION: Record<string, Kind> = {
  Country: 'string', CountryCode: 'string', City: 'string', CityCode: 'string', Latitude: 'number', Longitude: 'number', Priority: 'int',
};

const TPM: Record<string, Kind> = {
  Manufacturer: 'string', Vendor: 'string', Model: 'int', FirmwareVersion: 'number', SpecRevision: 'int', FamilyIndicator: 'string',
};

const REGISTER: Record<string, Kind> = {
  Version: 'int', NodeKey: 'nodekey', OldNodeKey: 'nodekey', NLKey: 'string', Auth: 'auth', Expiry: 'time', Followup: 'string',
  Hostinfo: 'object', Ephemeral: 'bool', NodeKeySignature: 'base64', SignatureType: 'int', Timestamp: 'time',
  DeviceCert: 'base64', Signature: 'base64', Tailnet: 'string',
};

const MAP: Record<string, Kind> = {
  Version: 'int', Compress: 'string', KeepAlive: 'bool', NodeKey: 'nodekey', DiscoKey: 'discokey', Stream: 'bool',
  Hostinfo: 'object', MapSessionHandle: 'string', MapSessionSeq: 'int', Endpoints: 'endpoints', EndpointTypes: 'ints',
  TKAHead: 'string', ReadOnly: 'bool', OmitPeers: 'bool', DebugFlags: 'strings', ConnectionHandleForTest: 'string',
  HardwareAttestationKeySignature: 'base64', HardwareAttestationKeySignatureTimestamp: 'time',
};

interface Case { path: (string | number)[]; value: unknown }

function fieldCases(prefix: (string | number)[], fields: Record<string, Kind>): Case[] {
  return Object.entries(fields).flatMap(([f, kind]) => WRONG[kind].map((value) => ({ path: [...prefix, f], value })));
}

/** deepNest builds a value nested `depth` levels deep. */
function deepNest(depth: number): unknown {
  let v: unknown = MARK;
  for (let i = 0; i < depth; i++) v = { a: v };
  return v;
}

/** hostinfoCases are wrong values for every Hostinfo field, its nested structs, and whole-Hostinfo limits. */
function hostinfoCases(root: string): Case[] {
  return [
    { path: [root], value: [1, 2] },
    { path: [root], value: [{ Hostname: MARK }] },
    { path: [root], value: MARK },
    { path: [root], value: 5 },
    ...fieldCases([root], HOSTINFO),
    ...fieldCases([root, 'NetInfo'], NETINFO),
    ...fieldCases([root, 'Location'], LOCATION),
    ...fieldCases([root, 'TPM'], TPM),
    // Go decodes keys case-insensitively: these would land in OS/Hostname on every peer.
    { path: [root, 'os'], value: 5 },
    { path: [root, 'hostname'], value: [MARK] },
    { path: [root, 'NetInfo', 'preferredderp'], value: MARK },
    // Unknown fields are kept, but not without bounds.
    { path: [root, 'FutureField'], value: huge(300_000) },
    { path: [root, 'FutureField'], value: deepNest(100) },
  ];
}

function registerCases(): Case[] {
  return [
    ...fieldCases([], REGISTER),
    ...fieldCases(['Auth'], { AuthKey: 'string' }),
    { path: ['nodekey'], value: MARK },
    ...hostinfoCases('Hostinfo'),
  ];
}

function mapCases(): Case[] {
  return [...fieldCases([], MAP), ...hostinfoCases('Hostinfo')];
}

/** nullCases set each top-level and Hostinfo field to null, which Go reads as "unset". */
function nullCases(top: Record<string, Kind>): Case[] {
  return [
    ...Object.keys(top).map((f) => ({ path: [f], value: null })),
    ...Object.keys(HOSTINFO).map((f) => ({ path: ['Hostinfo', f], value: null })),
    ...Object.keys(NETINFO).map((f) => ({ path: ['Hostinfo', 'NetInfo', f], value: null })),
  ];
}

function withValue(base: Record<string, unknown>, c: Case): Record<string, unknown> {
  const out = structuredClone(base);
  let o: Record<string | number, unknown> = out;
  for (const p of c.path.slice(0, -1)) {
    if (!o[p] || typeof o[p] !== 'object') o[p] = {};
    o = o[p] as Record<string | number, unknown>;
  }
  o[c.path.at(-1)!] = c.value;
  return out;
}

function describe(c: Case): string {
  const v = JSON.stringify(c.value) ?? String(c.value);
  return `${c.path.join('.')} = ${v.length > 40 ? `${v.slice(0, 37)}... (${v.length} chars)` : v}`;
}

/** refusedCleanly: a 4xx, or a 200 register answer with Error set. */
function refusal(reply: HttpReply): string | undefined {
  const text = reply.body.toString('utf8');
  if (reply.status >= 400 && reply.status < 500) return text;
  if (reply.status === 200) {
    try {
      const j = JSON.parse(text) as { Error?: string };
      if (j.Error) return j.Error;
    } catch { /* not a register answer */ }
  }
  return undefined;
}

// ---------------------------------------------------------------- helpers

async function userKey(s: TestServer, reusable: boolean): Promise<{ id: number; secret: string }> {
  const user = s.state.users.byName('alice') ?? await s.state.users.create({ name: 'alice' });
  const { key, secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable });
  return { id: key.id, secret };
}

async function device(s: TestServer, hostname: string, from?: TestDevice): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname, machineKey: from?.machineKey, nodeKey: from?.nodeKey, discoKey: from?.discoKey });
  await d.connect();
  return d;
}

function mapBody(d: TestDevice, hostinfo: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    Version: d.capabilityVersion, Compress: '', KeepAlive: false, NodeKey: d.nodeKeyText, DiscoKey: d.discoKeyText,
    Stream: false, OmitPeers: true, Endpoints: ['192.0.2.10:41641', '[2001:db8::10]:41641'], EndpointTypes: [1, 1],
    Hostinfo: { IPNVersion: '1.90.0', OS: 'linux', Hostname: d.hostname, GoArch: 'amd64', NetInfo: { PreferredDERP: 999 }, ...hostinfo },
  };
}

function errLines(s: TestServer): string[] {
  return s.logs.filter((l) => / (ERR|FTL) /.test(l));
}

// ---------------------------------------------------------------- the suite per database

async function hostileSuite(t: Test, db: Database): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), `headway-hostile-${db.name}-`));
  const raw = { ...db.config, node: { expiry: '1h' } };
  let s = await startTestServer(raw, { dataDir });
  const k = db.connect(dataDir);
  t.teardown(async () => {
    await s.stop().catch(() => undefined);
    await k.destroy();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const reusable = (await userKey(s, true)).secret;
  const victim = await device(s, 'victim');
  t.equal((await victim.register({ authKey: reusable })).Error, '', 'the victim joins');
  const baseMap = mapBody(victim);
  t.equal((await victim.request('/machine/map', baseMap)).status, 200, 'a well-formed map request is accepted');
  const single = await userKey(s, false);
  const intruder = await device(s, 'intruder');
  const baseRegister = intruder.buildRegisterRequest({ authKey: single.secret }) as unknown as Record<string, unknown>;
  const before = await snapshot(k);

  const counts = { register: 0, map: 0, nulls: 0, bodies: 0 };
  let failures = 0;
  const check = async (what: 'register' | 'map', d: TestDevice, body: Record<string, unknown> | string, label: string, path?: Case['path']): Promise<void> => {
    counts[what]++;
    const reply = await d.request(`/machine/${what}`, body);
    const why = refusal(reply);
    const after = await snapshot(k);
    // A 400 names the field (or the struct holding it) and never repeats what was sent.
    const named = reply.status !== 400 || !path || path.some((p) => typeof p === 'string' && why!.toLowerCase().includes(p.toLowerCase()));
    if (reply.status >= 500 || why === undefined || after !== before || !named || why.includes(MARK)) {
      failures++;
      t.fail(`${what} ${label}: status ${reply.status} ${JSON.stringify(reply.body.toString('utf8').slice(0, 200))}${after !== before ? ', database changed' : ''}${named ? '' : ', field not named'}`);
    }
  };

  await t.test('register: every field with wrong types, arrays and huge values is refused and changes nothing', async () => {
    for (const c of registerCases()) await check('register', intruder, withValue(baseRegister, c), describe(c), c.path);
  });
  await t.test('map: every field with wrong types, arrays and huge values is refused and changes nothing', async () => {
    for (const c of mapCases()) await check('map', victim, withValue(baseMap, c), describe(c), c.path);
  });
  await t.test('bodies that are not a JSON object are refused', async () => {
    for (const body of ['', '{', `{"Hostinfo":"${MARK}`, '[]', '[1,2]', `"${MARK}"`, '5', 'null', 'true', '\u0000\u0001']) {
      counts.bodies++;
      for (const what of ['register', 'map'] as const) await check(what, what === 'map' ? victim : intruder, body, JSON.stringify(body));
    }
    const tooBig = { ...baseRegister, Hostinfo: { Hostname: huge(1_100_000) } };
    const reply = await intruder.request('/machine/register', tooBig);
    t.equal(reply.status, 413, 'a body over 1 MiB gets 413');
    t.equal(await snapshot(k), before, 'and changes nothing');
  });
  t.equal(failures, 0, `${counts.register} register and ${counts.map} map cases, ${counts.bodies} raw bodies: no 500, all refused, database unchanged`);
  const singleRow = await k('pre_auth_keys').where({ id: single.id }).first('used');
  t.ok(singleRow.used === false || Number(singleRow.used) === 0, 'the single-use key is not spent');
  t.notOk(s.state.nodes.byMachineKey(intruder.machineKeyText), 'no ghost node for the intruder');

  await t.test('null reads as unset (Go semantics): accepted, and what is stored stays readable', async (t) => {
    const nuller = await device(s, 'nuller');
    t.teardown(() => nuller.close());
    const base = nuller.buildRegisterRequest({ authKey: reusable }) as unknown as Record<string, unknown>;
    t.equal((await nuller.request('/machine/register', base)).status, 200);
    for (const c of nullCases(REGISTER)) {
      counts.nulls++;
      const reply = await nuller.request('/machine/register', withValue(base, c));
      const text = reply.body.toString('utf8');
      if (c.path[0] === 'Version' || c.path[0] === 'NodeKey') {
        t.equal(reply.status, 400, `register ${describe(c)}: 400`);
      } else {
        t.ok(reply.status === 200 && !(JSON.parse(text) as { Error: string }).Error, `register ${describe(c)}: accepted`, { status: reply.status, body: text.slice(0, 200) });
      }
      t.ok((await storedHostinfo(k, nuller.nodeKeyText)).readable, `register ${describe(c)}: stored Hostinfo is a JSON object`);
    }
    for (const c of nullCases(MAP)) {
      counts.nulls++;
      const reply = await victim.request('/machine/map', withValue(baseMap, c));
      t.equal(reply.status, c.path[0] === 'Version' || c.path[0] === 'NodeKey' ? 400 : 200, `map ${describe(c)}`);
      t.ok((await storedHostinfo(k, victim.nodeKeyText)).readable, `map ${describe(c)}: stored Hostinfo is a JSON object`);
    }
    t.equal((await victim.request('/machine/map', baseMap)).status, 200, 'the victim reports its real Hostinfo again');
  });

  t.same(s.logs.filter((l) => l.includes(MARK)), [], 'nothing a client sent reached the log');
  t.same(errLines(s), [], 'no ERR line (no request failed inside the server)');

  await t.test('storage refuses to write a value its reader would refuse', async (t) => {
    const id = s.state.nodes.byNodeKey(victim.nodeKeyText)!.id;
    const rowBefore = await snapshot(k);
    await t.rejects(s.state.nodes.update(id, { hostinfo: [1, 2] as unknown as Record<string, unknown> }), /nodes\.hostinfo: not a JSON object/);
    await t.rejects(s.state.nodes.update(id, { endpoints: [5] as unknown as string[] }), /nodes\.endpoints: not an array of strings/);
    t.equal(await snapshot(k), rowBefore, 'nothing written');
  });

  await t.test('the server starts again on the same database', async (t) => {
    await s.stop();
    s = await startTestServer(raw, { dataDir });
    const node = s.state.nodes.byNodeKey(victim.nodeKeyText);
    t.ok(node, 'the victim is still registered');
    t.equal((node!.hostinfo as { Hostname?: string }).Hostname, 'victim', 'with its real Hostinfo');
    t.same(node!.endpoints, baseMap.Endpoints, 'and its endpoints');
    const again = await device(s, 'victim', victim);
    t.teardown(() => again.close());
    t.equal((await again.request('/machine/map', mapBody(again))).status, 200, 'and maps again');
  });

  await t.test('State.init failed on a bad hostinfo row (FTL: column nodes.hostinfo does not hold a JSON object): quarantined instead', async (t) => {
    const victimId = s.state.nodes.byNodeKey(victim.nodeKeyText)!.id;
    const others = s.state.nodes.list().filter((n) => n.id !== victimId).map((n) => n.id);
    t.ok(others.length >= 1, 'a second node to poison differently');
    await s.stop();
    await k('nodes').where({ id: victimId }).update({ hostinfo: '[1,2]' });
    await k('nodes').where({ id: others[0] }).update({ hostinfo: '{"Hostname":5,"OS":["x"]}', endpoints: '["not-an-endpoint"]', approved_routes: 'not json' });
    s = await startTestServer(raw, { dataDir });
    t.pass('the server started');
    const lines = errLines(s);
    t.ok(lines.some((l) => l.includes('quarantined') && l.includes(`node=${victimId} `) && l.includes('fields=hostinfo')), `ERR line names node ${victimId}`);
    t.ok(lines.some((l) => l.includes('quarantined') && l.includes(`node=${others[0]} `) && /fields="?[a-zA-Z,]*approvedRoutes/.test(l)), `ERR line names node ${others[0]}`);
    t.equal(s.state.nodes.get(victimId)!.hostinfo, null, 'the array Hostinfo is reset to null');
    t.equal(s.state.nodes.get(others[0]!)!.hostinfo, null, 'a Hostinfo with wrong field types too');
    t.same(s.state.nodes.get(others[0]!)!.endpoints, [], 'bad endpoints are dropped');
    t.same(s.state.nodes.get(others[0]!)!.damaged, undefined, 'the in-memory node is clean');
    t.equal((await k('nodes').where({ id: victimId }).first('hostinfo')).hostinfo, null, 'and the reset is written back');
    const again = await device(s, 'victim', victim);
    t.teardown(() => again.close());
    t.equal((await again.request('/machine/map', mapBody(again))).status, 200, 'the quarantined node maps');
    t.equal((s.state.nodes.get(victimId)!.hostinfo as { Hostname?: string } | null)?.Hostname, 'victim', 'and its next map restores its Hostinfo');
    const stored = await storedHostinfo(k, victim.nodeKeyText);
    t.equal((stored.value as { Hostname?: string }).Hostname, 'victim', 'in the database too');
  });

  victim.close();
  intruder.close();
  t.comment(`${db.name}: ${counts.register} register, ${counts.map} map, ${counts.nulls} null and ${counts.bodies * 2} raw-body cases`);
}

// ---------------------------------------------------------------- database-independent checks

t.test('sqlite', async (t) => hostileSuite(t, sqliteDatabase()));

for (const [kind, variable] of [['postgres', 'HEADWAY_TEST_POSTGRES_URL'], ['mysql', 'HEADWAY_TEST_MYSQL_URL']] as const) {
  const url = process.env[variable];
  if (!url) {
    if (inCI) t.fail(`${kind}: ${variable} is not set, and CI must run the hostile suite on ${kind}`);
    else t.skip(`${kind}: ${variable} not set`, () => undefined);
    continue;
  }
  t.test(kind, async (t) => {
    const db = await scratchDatabase(kind, url);
    t.teardown(() => db.drop());
    await hostileSuite(t, db);
  });
}

t.test('a device could extend its own key expiry past node.expiry (Expiry: 9999-12-31)', async (t) => {
  const s = await startTestServer({ node: { expiry: '1h' } });
  t.teardown(() => s.stop());
  const key = (await userKey(s, true)).secret;
  const hour = 3600_000;

  const far = await device(s, 'far');
  t.teardown(() => far.close());
  const start = Date.now();
  t.equal((await far.register({ authKey: key, expiry: '9999-12-31T00:00:00Z' })).Error, '');
  const capped = s.state.nodes.byNodeKey(far.nodeKeyText)!.expiry!.getTime();
  t.ok(capped >= start + hour && capped <= Date.now() + hour, `a later expiry is capped to now + node.expiry (got ${new Date(capped).toISOString()})`);

  const near = await device(s, 'near');
  t.teardown(() => near.close());
  const asked = new Date(Date.now() + 10 * 60_000);
  asked.setMilliseconds(0);
  t.equal((await near.register({ authKey: key, expiry: asked })).Error, '');
  t.equal(s.state.nodes.byNodeKey(near.nodeKeyText)!.expiry!.getTime(), asked.getTime(), 'a shorter expiry is kept');

  const out = await near.logout();
  t.equal(out.NodeKeyExpired, true, 'logout (an expiry in the past) still works');
  t.ok(s.state.nodes.byNodeKey(near.nodeKeyText)!.expiry!.getTime() <= Date.now(), 'and expires the node');

  const plain = await device(s, 'plain');
  t.teardown(() => plain.close());
  t.equal((await plain.register({ authKey: key })).Error, '');
  const def = s.state.nodes.byNodeKey(plain.nodeKeyText)!.expiry!.getTime();
  t.ok(def > Date.now() + hour - 60_000 && def <= Date.now() + hour, 'no Expiry sent: now + node.expiry');

  const bad = await device(s, 'bad');
  t.teardown(() => bad.close());
  const reply = await bad.request('/machine/register', bad.buildRegisterRequest({ authKey: key, expiry: '9999-12-31' }));
  t.equal(reply.status, 400, 'an Expiry that is not RFC 3339 is refused');
  t.match(reply.body.toString(), /Expiry/, 'naming the field');
});

t.test('fields from newer clients are kept; case variants of known fields are not', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await userKey(s, true)).secret;
  const d = await device(s, 'newer');
  t.teardown(() => d.close());
  const r = await d.register({ authKey: key, hostinfo: { FutureField: { nested: [1, 'two'] }, NetInfo: { PreferredDERP: 999, FutureNetInfo: true } } });
  t.equal(r.Error, '', 'accepted');
  const h = s.state.nodes.byNodeKey(d.nodeKeyText)!.hostinfo as { FutureField?: unknown; NetInfo?: { FutureNetInfo?: unknown } };
  t.same(h.FutureField, { nested: [1, 'two'] }, 'an unknown Hostinfo field is stored as sent');
  t.equal(h.NetInfo?.FutureNetInfo, true, 'an unknown NetInfo field too');
  const reply = await d.request('/machine/map', mapBody(d, { os: 'linux' }));
  t.equal(reply.status, 400, 'a key that differs from OS only in case is refused');
  t.match(reply.body.toString(), /Hostinfo\.os: differs from the field OS only in letter case/);
});

t.test('control ERR lines quoted the SQL text holding the client\'s Hostinfo', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const key = (await userKey(s, true)).secret;
  // A database that refuses the insert, as a full disk or a broken constraint would.
  const k = sqliteDatabase().connect(s.dataDir);
  t.teardown(() => k.destroy());
  await k.raw(`create trigger refuse_nodes before insert on nodes begin select raise(abort, 'refused by test trigger'); end`);
  const d = await device(s, 'doomed');
  t.teardown(() => d.close());
  const reply = await d.request('/machine/register', d.buildRegisterRequest({ authKey: key, hostinfo: { OSVersion: MARK } }));
  t.equal(reply.status, 500, 'a database failure is a 500');
  t.equal(reply.body.toString().trim(), 'internal error', 'that tells the client nothing');
  const lines = errLines(s).filter((l) => l.includes('control request failed'));
  t.equal(lines.length, 1, 'one ERR line');
  t.notMatch(lines[0] ?? '', MARK, 'without the client\'s values');
  t.notMatch(lines[0] ?? '', /insert into/i, 'without SQL text');
  t.match(lines[0] ?? '', /SQLITE_CONSTRAINT/, 'naming the driver error code');
  t.same(s.logs.filter((l) => l.includes(MARK)), [], 'no other line has them either');
});
