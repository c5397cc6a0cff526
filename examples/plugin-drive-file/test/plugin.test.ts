// The example drive plugin, loaded by package name into the real server: devices
// receive the grants of its file (and follow the file as it changes), it merges
// with the database drive adapter in the listed order, and bad options or a bad
// file stop the start-up with a message naming them.
import t, { type Test } from 'tap';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestDevice } from '@headway/testkit';
import { runHeadway, startTestServer, until } from '@headway/integration';

const PKG = '@headway-examples/plugin-drive-file';
const CAP = 'tailscale.com/cap/drive';
type Server = Awaited<ReturnType<typeof startTestServer>>;

async function joinTagged(t: Test, s: Server, hostname: string, tag: string): Promise<TestDevice> {
  const owner = s.state.users.byName('owner') ?? await s.state.users.create({ name: 'owner' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: owner.id, reusable: true, tags: [tag] });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  t.teardown(() => d.close());
  await d.connect();
  await d.register({ authKey: secret });
  await d.startMap({ stream: true });
  return d;
}

/** drivePayloads are the {shares, access} payloads a device's filter grants, in order. */
function drivePayloads(d: TestDevice): unknown[] {
  return d.netmap.packetFilter.flatMap((r) => r.CapGrant ?? []).flatMap((g) => (g.CapMap?.[CAP] as unknown[] | undefined) ?? []);
}

function grantsFile(dir: string, grants: unknown[]): string {
  const file = join(dir, 'drive.json');
  writeFileSync(file, JSON.stringify({ grants }));
  return file;
}

t.test('devices receive the grants of the file, and follow it when it changes', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-drive-plugin-'));
  const file = grantsFile(dir, [{ src: 'tag:ci', dst: 'tag:nas', shares: ['artifacts'], access: 'rw' }]);
  const s = await startTestServer({ plugins: [{ package: PKG, port: 'drive', options: { file } }] });
  t.teardown(() => s.stop());
  const nas = await joinTagged(t, s, 'nas', 'tag:nas');
  const ci = await joinTagged(t, s, 'ci', 'tag:ci');
  await nas.waitFor(() => drivePayloads(nas).length > 0, 5000);
  t.same(drivePayloads(nas), [{ shares: ['artifacts'], access: 'rw' }], 'the sharer holds the grant');
  t.ok(nas.netmap.self?.CapMap && 'drive:share' in nas.netmap.self.CapMap, 'the nas may share');
  await ci.waitFor((nm) => !!nm.self?.CapMap && 'drive:access' in nm.self.CapMap, 5000);
  t.pass('the ci device may access');

  grantsFile(dir, [{ src: 'tag:ci', dst: 'tag:nas', shares: ['logs'] }]);
  await nas.waitFor(() => JSON.stringify(drivePayloads(nas)) === JSON.stringify([{ shares: ['logs'], access: 'ro' }]), 5000);
  t.pass('a changed file reaches connected devices (access defaults to ro)');

  writeFileSync(file, '{ "grants": [ { "src": "alice" } ] }');
  await until('the bad file is logged', () => s.logs.some((l) => /drive adapter failed to list its grants/.test(l)));
  t.same(drivePayloads(nas), [{ shares: ['logs'], access: 'ro' }], 'a bad file keeps the grants in force');
  t.ok(s.logs.some((l) => /drive adapter failed to list its grants/.test(l) && /grants\[0\]\.src/.test(l)), 'and logs why');
});

t.test('with the database drive adapter: both apply, in the listed order', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-drive-plugin-'));
  const file = grantsFile(dir, [{ src: 'tag:ci', dst: 'tag:nas', shares: ['from file'], access: 'ro' }]);
  const s = await startTestServer({
    plugins: [
      { package: PKG, port: 'drive', options: { file } },
      { package: '@headway/drive-db', port: 'drive' },
    ],
  });
  t.teardown(() => s.stop());
  const nas = await joinTagged(t, s, 'nas', 'tag:nas');
  await joinTagged(t, s, 'ci', 'tag:ci');
  await s.drive.grant({ src: 'tag:ci', dst: 'tag:nas', shares: ['from db'], access: 'rw' });
  await nas.waitFor(() => drivePayloads(nas).length === 2, 5000);
  t.same(drivePayloads(nas), [{ shares: ['from file'], access: 'ro' }, { shares: ['from db'], access: 'rw' }], 'the file\'s grant, then the database\'s');
  t.same((await s.drive.list()).map((g) => g.shares), [['from db']], 'admin writes go to the database adapter, the one that stores grants');
});

t.test('a bad option or a bad file stops the start-up, naming it', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hw-drive-plugin-data-'));
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'drive', options: { fil: 'x' } }] }, { dataDir }), {
    message: /plugins\[0\] \(@headway-examples\/plugin-drive-file\): option "fil": unknown option[\s\S]*option "file": required/,
  });
  t.notOk(existsSync(join(dataDir, 'db.sqlite')), 'options are checked before the database is created');
  const dir = mkdtempSync(join(tmpdir(), 'hw-drive-plugin-'));
  const file = grantsFile(dir, [{ src: 'tag:ci', dst: 'group:eng' }]);
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'drive', options: { file } }] }), {
    message: /grants\[0\]\.dst: expected tag:NAME, found "group:eng"/,
  });
});

t.test('headway config check reports the plugin\'s option errors', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-drive-plugin-check-'));
  const cfg = join(dir, 'config.yaml');
  writeFileSync(cfg, `plugins:\n  - package: "${PKG}"\n    port: drive\n    options: { file: 7 }\n`);
  const bad = await runHeadway({}, ['config', 'check', '-c', cfg]);
  t.equal(bad.code, 1, 'exit 1');
  t.match(bad.stdout, /error: plugins\[0\] \(@headway-examples\/plugin-drive-file\) options\.file: expected a file path, found 7/);
});
