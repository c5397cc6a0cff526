// The story db-backup.test.ts and db-switch.test.ts run on pairs of databases: the real
// CLI backs up a running server while another writer keeps committing, the backup is
// restored into an empty database, and a server started on it (with the same data
// directory, hence the same control key) lets an existing device map again with its
// address, and an existing API key in, without registering again.
import { copyFileSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { decodeBackup, type StorageDump } from '@headway/core/ports';
import { readSqliteBackup, openMysqlStorage, openPostgresStorage, openSqliteStorage, type NetworkConnection } from '@headway/storage-sql';
import { testDatabaseServers } from '@headway/storage-sql/testing';
import { TestDevice } from '@headway/testkit';
import { adminFetch, runHeadway, startTestServer, type TestServer } from '../src/index.js';

export { testDatabaseServers };

/** inCI: PostgreSQL and MariaDB are mandatory under CI and skipped with a reason elsewhere. */
export const inCI = process.env.CI === 'true';

/** Db is one database as a config block, plus a way to open it directly for checks. */
export interface Db {
  label: string;
  block: Record<string, unknown>;
  open(): ReturnType<typeof openSqliteStorage>;
}

export function sqliteDb(dir: string, name: string): Db {
  const path = join(dir, name);
  return {
    label: 'sqlite',
    block: { type: 'sqlite', sqlite: { path, write_ahead_log: true } },
    open: () => openSqliteStorage({ path }),
  };
}

export function networkDb(type: 'postgres' | 'mysql', conn: NetworkConnection): Db {
  return {
    label: type,
    block: { type, [type]: { host: conn.host, port: conn.port, name: conn.database, user: conn.user, pass: conn.password ?? '' } },
    open: () => (type === 'postgres' ? openPostgresStorage({ connection: conn }) : openMysqlStorage({ connection: conn })),
  };
}

/** cli runs the real `headway` with a config file naming `db` and the shared data directory. */
function cli(dataDir: string, db: Db, args: string[]) {
  const configPath = join(dataDir, `cli-${db.label}-${Math.random().toString(36).slice(2)}.yaml`);
  // JSON is YAML: the config file is written as JSON.
  writeFileSync(configPath, JSON.stringify({ data_dir: dataDir, database: db.block }));
  return runHeadway({ HEADWAY_CONFIG: configPath }, args, 120_000);
}

/**
 * startServer retries startTestServer when its second bind (on the port the first one
 * drew, to fix server_url) finds the port taken by a parallel test in between.
 */
async function startServer(raw: Record<string, unknown>, dataDir: string): Promise<TestServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startTestServer(raw, { dataDir });
    } catch (err) {
      if (attempt >= 3 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE') throw err;
    }
  }
}

async function dumpOf(db: Db): Promise<StorageDump> {
  const s = await db.open();
  try { return await s.dump!(); } finally { await s.close(); }
}

/**
 * roundTrip is the whole story on one pair of databases: back up `source` under load,
 * restore into the empty `target`, and bring the device back on a server over `target`.
 */
export async function roundTrip(t: Test, source: Db, target: Db, format: 'native' | 'json' | undefined): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-backup-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  let a: TestServer | undefined = await startServer({ database: source.block }, dataDir);
  t.teardown(() => a?.stop({ remove: false }));

  const alice = await a.state.users.create({ name: 'alice' });
  const { secret } = await a.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
  const { secret: apiSecret } = await a.state.keys.createApiKey(null);
  const { secret: clientSecret } = await a.state.oauth.create({ scopes: ['users:read'], description: 'kept' });
  const device = new TestDevice({ serverUrl: a.urls.http, hostname: 'laptop' });
  await device.connect();
  const reg = await device.register({ authKey: secret });
  t.notOk(reg.Error, `the device registers (${reg.Error ?? 'ok'})`);
  await device.startMap({ stream: true });
  const addresses = device.netmap.self?.Addresses;
  t.equal(addresses?.length, 2, `the device has its addresses ${JSON.stringify(addresses)}`);
  device.close();

  // A second writer commits user+node pairs in single transactions for the whole backup.
  let writing = true;
  let written = 0;
  const write = async () => {
    while (writing) {
      await a!.storage.transaction(async (tx) => {
        const u = await tx.users.create({ name: `writer-${written}` });
        await tx.nodes.create({
          machineKey: `mkey:aa${written.toString(16).padStart(62, '0')}`, nodeKey: `nodekey:bb${written.toString(16).padStart(62, '0')}`,
          discoKey: '', hostname: 'w', givenName: `writer-${written}`, userId: u.id, tags: [], ipv4: null, ipv6: null, endpoints: [],
          hostinfo: null, availableRoutes: [], approvedRoutes: [], registerMethod: 'debug', expiry: null, lastSeen: null,
          ephemeral: false, authKeyId: null,
        });
      });
      written++;
      // better-sqlite3 answers synchronously: without a turn of the event loop this would starve every timer.
      await new Promise((r) => setImmediate(r));
    }
  };
  let writer = write();
  await new Promise((r) => setTimeout(r, 200));

  if (source.label === 'sqlite') {
    // What the native backup is for: a plain copy of the file misses writes still in the WAL. The writer pauses
    // for the copy: its next commits could checkpoint the WAL into the file first (SQLite does at 1,000 pages).
    writing = false;
    await writer;
    await a.state.users.create({ name: 'just-before' });
    const path = (source.block.sqlite as { path: string }).path;
    const plain = join(dataDir, 'plain-copy.sqlite');
    copyFileSync(path, plain);
    const copied = await readSqliteBackup(plain);
    t.notOk(copied.users.some((u) => u.name === 'just-before'), 'cp db.sqlite misses the write made just before (it is in the WAL)');
    writing = true;
    writer = write();
  } else {
    await a.state.users.create({ name: 'just-before' });
  }

  // With no --format, SQLite gets its native file and the others JSON.
  const native = format === 'native' || (format === undefined && source.label === 'sqlite');
  const file = join(dataDir, native ? 'backup.sqlite' : 'backup.json');
  const started = Date.now();
  const backup = await cli(dataDir, source, ['db', 'backup', ...(format ? ['--format', format] : []), file]);
  const backupMs = Date.now() - started;
  writing = false;
  await writer;
  t.equal(backup.code, 0, `db backup exits 0 (${backup.stderr.trim()})`);
  t.match(backup.stdout, /Backed up \d+ users/);
  t.equal(statSync(file).mode & 0o777, 0o600, 'the backup file is 0600');
  console.log(`# ${source.label} backup (${format ?? 'default'}) of ${written} concurrent writes took ${backupMs} ms, ${statSync(file).size} bytes`);

  const backedUp = native ? await readSqliteBackup(file) : decodeBackup(readFileSync(file, 'utf8'), file).dump;
  t.ok(backedUp.users.some((u) => u.name === 'just-before'), 'the backup holds the write committed just before it');
  const writerUsers = backedUp.users.filter((u) => u.name.startsWith('writer-'));
  const writerNodes = backedUp.nodes.filter((n) => n.givenName.startsWith('writer-'));
  t.ok(writerUsers.length > 0, `the backup ran while the writer committed (${writerUsers.length} of ${written} pairs in it)`);
  t.equal(writerNodes.length, writerUsers.length, 'every user+node transaction is in the backup whole or not at all (one snapshot)');
  const text = readFileSync(file).toString('latin1');
  t.notOk(text.includes(secret) || text.includes(apiSecret), 'no key secret is in the backup, only hashes');

  // Restoring under a running server is refused.
  const underServer = await cli(dataDir, target, ['db', 'restore', file]);
  t.equal(underServer.code, 1, 'restore under a running server fails');
  t.match(underServer.stderr, /is running on the data directory .*stop it before restoring/);
  await a.stop({ remove: false });
  a = undefined;

  // A truncated and a foreign file are refused with a clear message, and write nothing.
  const truncated = join(dataDir, 'truncated');
  writeFileSync(truncated, readFileSync(file).subarray(0, Math.floor(statSync(file).size / 2)));
  const cut = await cli(dataDir, target, ['db', 'restore', truncated]);
  t.equal(cut.code, 1, 'a truncated backup is refused');
  t.match(cut.stderr, native ? /cut short by \d+ bytes \(is the file truncated\?\)/ : /ends early \(is the file truncated\?\)/);
  const foreign = join(dataDir, 'foreign.json');
  writeFileSync(foreign, JSON.stringify({ name: 'some-package', version: '1.0.0' }));
  const notOurs = await cli(dataDir, target, ['db', 'restore', foreign]);
  t.equal(notOurs.code, 1, 'a foreign file is refused');
  t.match(notOurs.stderr, /is not a Headway backup/);

  const restored = await cli(dataDir, target, ['db', 'restore', file]);
  t.equal(restored.code, 0, `restore into the empty ${target.label} database exits 0 (${restored.stderr.trim()})`);
  t.match(restored.stdout, new RegExp(`Restored .* \\(a ${source.label} backup\\) into ${target.label}`));
  const after = await dumpOf(target);
  t.same({ ...after, kind: '', schemaVersion: 0 }, { ...backedUp, kind: '', schemaVersion: 0 },
    'the target holds exactly the backup: ids, hashes and times (so nothing the refused restores did remains)');

  const again = await cli(dataDir, target, ['db', 'restore', file]);
  t.equal(again.code, 1, 'a second restore into the now non-empty database is refused');
  t.match(again.stderr, /is not empty \(it holds \d+ users.*pass --replace/);
  t.same(await dumpOf(target), after, 'the refused restore changed nothing');

  // A server on the restored database knows the device and the API key.
  const b = await startServer({ database: target.block }, dataDir);
  t.teardown(() => b.stop({ remove: false }));
  const back = new TestDevice({
    serverUrl: b.urls.http, hostname: 'laptop', machineKey: device.machineKey, nodeKey: device.nodeKey, discoKey: device.discoKey,
  });
  t.teardown(() => back.close());
  await back.connect();
  const relogin = await back.register({});
  t.equal(relogin.MachineAuthorized, true, 'the restored server authorizes the device without a new login');
  t.notOk(relogin.AuthURL, 'no login URL: the device does not register again');
  await back.startMap({ stream: true });
  t.same(back.netmap.self?.Addresses, addresses, 'the map request is accepted and the device keeps its addresses');
  const users = await adminFetch(b, apiSecret, 'GET', '/api/v1/user');
  t.equal(users.status, 200, 'the API key made before the backup works on the restored server');
  const token = await fetch(`${b.urls.http}/api/v2/oauth/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_secret: clientSecret }),
  });
  t.equal(token.status, 200, 'the OAuth client made before the backup gets tokens from the restored server');
  t.ok(b.state.users.byName('just-before'), 'the restored server has the last write');
}

