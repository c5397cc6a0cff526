/**
 * The move from a real headscale to Headway, end to end: headscale 0.29.2 runs on loopback
 * (SQLite, its embedded DERP server), one real tailscaled joins with a pre-auth key and a
 * second interactively (`headscale auth register`), an API key is made, headscale stops,
 * `headway migrate from-headscale --apply` imports its database and control key (also into
 * PostgreSQL and MariaDB when the environment has them), and Headway starts on the address
 * headscale had. Both devices come back online with the same node ids, addresses and names
 * without logging in again, ping each other, and headscale's API key works on Headway's API.
 */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { StorageDump } from '@headway/core/ports';
import { openSqliteStorage } from '@headway/storage-sql';
import { HeadscaleServer, requireHeadscale } from '../src/headscale-server.js';
import { adminFetch, runHeadway, startTestServer } from '../src/index.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscaleStatus } from '../src/tailscale.js';
import { inCI, networkDb, testDatabaseServers } from './backup-roundtrip.js';

t.setTimeout(600_000);
const JOIN_TIMEOUT_MS = 45_000;

const installed = requireTailscale(t);
const headscaleBin = installed.length ? requireHeadscale(t) : undefined;

if (installed.length && headscaleBin) {
  t.test('headscale 0.29.2 to Headway: devices stay joined, keys keep working', async (t) => {
    const cleanups = cleanupStack(t);
    const root = mkdtempSync(join(tmpdir(), 'hw-migrate-interop-'));
    cleanups.push(() => rmSync(root, { recursive: true, force: true }));
    const hsDir = join(root, 'headscale');
    mkdirSync(hsDir);
    const hs = await HeadscaleServer.start(headscaleBin, hsDir);
    cleanups.push(() => hs.stop());

    // ---- a headscale deployment: a user, a key-registered device, an interactive one, an API key ----
    const alice = JSON.parse(await hs.cli(['users', 'create', 'alice', '-o', 'json'])) as { id: string | number };
    const authKey = (await hs.cli(['preauthkeys', 'create', '-u', String(alice.id), '--reusable'])).trim();
    t.match(authKey, /^hskey-auth-/, 'headscale made a pre-auth key');
    const apiKey = (await hs.cli(['apikeys', 'create'])).trim();
    t.match(apiKey, /^hskey-api-/, 'headscale made an API key');

    const newest = installed[0]!;
    const oldest = installed.at(-1)!;
    const a = await TailscaleDevice.start({ name: 'mig-a', version: newest.version });
    cleanups.push(() => a.stop());
    const b = await TailscaleDevice.start({ name: 'mig-b', version: oldest.version });
    cleanups.push(() => b.stop());
    await a.up({ loginServer: hs.url, authKey, hostname: 'alpha', timeoutMs: JOIN_TIMEOUT_MS });
    const up = await b.up({ loginServer: hs.url, hostname: 'bravo', timeoutMs: JOIN_TIMEOUT_MS });
    const authId = (up.authUrl ?? '').split('/').pop() ?? '';
    t.match(authId, /^[A-Za-z0-9_-]+$/, `bravo waits for approval at ${up.authUrl}`);
    await hs.cli(['auth', 'register', '--auth-id', authId, '--user', 'alice']);
    const running = (s: TailscaleStatus) => s.BackendState === 'Running' && (s.Self?.TailscaleIPs?.length ?? 0) === 2;
    const before = { a: await a.waitFor(running, JOIN_TIMEOUT_MS), b: await b.waitFor(running, JOIN_TIMEOUT_MS) };
    t.comment(`on headscale: alpha ${before.a.Self?.ID} ${before.a.Self?.TailscaleIPs?.join(' ')} (${newest.version}), bravo ${before.b.Self?.ID} ${before.b.Self?.TailscaleIPs?.join(' ')} (${oldest.version})`);
    await hs.stop();

    // ---- the import ----
    const dataDir = join(root, 'headway');
    const dbPath = join(dataDir, 'db.sqlite');
    const config = join(root, 'headway.yaml');
    writeFileSync(config, JSON.stringify({ data_dir: dataDir, database: { type: 'sqlite', sqlite: { path: dbPath } } }));
    const migrate = (cfg: string, extra: string[]) =>
      runHeadway({ HEADWAY_CONFIG: cfg }, ['migrate', 'from-headscale', '--db', hs.dbPath, '--noise-key', hs.noiseKeyPath, ...extra], 120_000);
    const dry = await migrate(config, []);
    t.equal(dry.code, 0, dry.stderr);
    t.comment(dry.stdout.trim().split('\n').map((l) => `dry run: ${l}`).join('\n'));
    t.match(dry.stdout, /headscale 0\.29\.2 database/);
    t.match(dry.stdout, /Would import 1 user, 2 nodes, 1 pre-auth key, 1 API key:/);
    const started = Date.now();
    const applied = await migrate(config, ['--apply']);
    t.equal(applied.code, 0, applied.stderr);
    t.match(applied.stdout, /Imported 1 user, 2 nodes, 1 pre-auth key, 1 API key:/);
    t.notMatch(applied.stdout, /Not imported/, 'every record was imported');
    console.log(`# migrate --apply (SQLite) took ${Date.now() - started} ms including CLI start-up`);
    const s = await openSqliteStorage({ path: dbPath });
    let imported: StorageDump;
    try { imported = await s.dump!(); } finally { await s.close(); }

    for (const server of testDatabaseServers()) {
      await t.test(`the same headscale database imports into ${server.type}`, async (t) => {
        if (!server.admin) {
          if (inCI) t.fail(`${server.variable} is not set, and CI must run the import on ${server.type}`);
          else t.skip(`${server.type}: ${server.variable} not set`, () => undefined);
          return;
        }
        await server.scratch(async (conn) => {
          const db = networkDb(server.type, conn);
          const cfg = join(root, `headway-${server.type}.yaml`);
          writeFileSync(cfg, JSON.stringify({ data_dir: join(root, `data-${server.type}`), database: db.block }));
          const r = await migrate(cfg, ['--apply']);
          t.equal(r.code, 0, r.stderr);
          const st = await db.open();
          try {
            const d = await st.dump!();
            const shape = (x: StorageDump) => x.nodes.map((n) => [n.id, n.machineKey, n.nodeKey, n.ipv4, n.ipv6, n.givenName, n.userId]);
            t.same(shape(d), shape(imported), 'the same nodes as in SQLite');
            t.same(d.apiKeys.map((k) => k.hash), imported.apiKeys.map((k) => k.hash), 'the same API key hash');
          } finally {
            await st.close();
          }
        });
      });
    }

    // ---- Headway where headscale was ----
    const server = await startTestServer({
      listen_addr: `127.0.0.1:${hs.port}`, server_url: hs.url,
      database: { type: 'sqlite', sqlite: { path: dbPath } },
      derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } },
    }, { dataDir });
    cleanups.push(() => server.stop({ remove: false }));
    const back = Date.now();

    const nodesOnline = async () => {
      const r = await adminFetch(server, apiKey, 'GET', '/api/v1/node');
      return { status: r.status, nodes: (r.json?.nodes ?? []) as Array<{ id: string; givenName: string; ipAddresses: string[]; online: boolean }> };
    };
    let listed = await nodesOnline();
    t.equal(listed.status, 200, 'headscale\'s API key works on Headway\'s API');
    t.equal((await adminFetch(server, apiKey.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')), 'GET', '/api/v1/node')).status, 401, 'a wrong one does not');
    const deadline = Date.now() + JOIN_TIMEOUT_MS;
    while (!(listed.nodes.length === 2 && listed.nodes.every((n) => n.online)) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 500));
      listed = await nodesOnline();
    }
    t.ok(listed.nodes.length === 2 && listed.nodes.every((n) => n.online), `both devices are online on Headway: ${JSON.stringify(listed.nodes.map((n) => [n.givenName, n.online]))}`);
    console.log(`# both devices back online ${Date.now() - back} ms after Headway started`);

    for (const [dev, was, name] of [[a, before.a, 'alpha'], [b, before.b, 'bravo']] as const) {
      const now = await dev.waitFor(running, JOIN_TIMEOUT_MS);
      t.equal(now.BackendState, 'Running', `${name} runs without logging in again`);
      t.equal(now.Self?.ID, was.Self?.ID, `${name} is the same node`);
      t.same(now.Self?.TailscaleIPs, was.Self?.TailscaleIPs, `${name} keeps its addresses`);
      t.equal(now.Self?.HostName, was.Self?.HostName, `${name} keeps its name`);
      t.equal(now.Self?.PublicKey, was.Self?.PublicKey, `${name} keeps its node key (no new login)`);
      const node = imported.nodes.find((n) => String(n.id) === was.Self?.ID);
      t.equal(server.state.nodes.get(node!.id)?.nodeKey, node!.nodeKey, `${name}'s node key on Headway is the imported one`);
    }
    t.equal(server.state.nodes.list().length, 2, 'no node was added');

    const ipB = before.b.Self!.TailscaleIPs![0]!;
    const ipA = before.a.Self!.TailscaleIPs![0]!;
    const pingAB = await a.ping(ipB, { count: 10, timeoutMs: 3000 });
    t.match(pingAB.output, /pong from bravo/, `alpha pings bravo via ${pingAB.via}`);
    const pingBA = await b.ping(ipA, { count: 10, timeoutMs: 3000 });
    t.match(pingBA.output, /pong from alpha/, `bravo pings alpha via ${pingBA.via}`);
  });
}
