import t, { type Test } from 'tap';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestDevice } from '@headway/testkit';
import { runHeadway, startTestServer } from '@headway/integration';

const PKG = '@headway-examples/plugin-dns-records';

async function joinDevice(t: Test, s: Awaited<ReturnType<typeof startTestServer>>): Promise<TestDevice> {
  const user = await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'client' });
  t.teardown(() => d.close());
  await d.connect();
  await d.register({ authKey: secret });
  await d.startMap({ stream: true });
  return d;
}

t.test('the server loads the plugin by package name with its options and devices receive its records', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-plugin-'));
  const hosts = join(dir, 'hosts');
  writeFileSync(hosts, '# lab\n10.0.0.5 nas.lab nas\nfd00::5 nas6.lab\n');
  const s = await startTestServer({ plugins: [{ package: PKG, port: 'dns', options: { file: hosts } }] });
  t.teardown(() => s.stop());
  const d = await joinDevice(t, s);
  t.same(d.netmap.dnsConfig?.ExtraRecords, [
    { Name: 'nas.lab', Type: 'A', Value: '10.0.0.5' },
    { Name: 'nas', Type: 'A', Value: '10.0.0.5' },
    { Name: 'nas6.lab', Type: 'AAAA', Value: 'fd00::5' },
  ]);
  writeFileSync(hosts, '10.0.0.6 printer.lab\n');
  await d.waitFor((nm) => JSON.stringify(nm.dnsConfig?.ExtraRecords) === JSON.stringify([{ Name: 'printer.lab', Type: 'A', Value: '10.0.0.6' }]), 5000);
  t.pass('a changed file reaches connected devices');
});

t.test('several DNS plugins: records merged in the listed order, after dns.extra_records', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-plugin-'));
  const first = join(dir, 'first'), second = join(dir, 'second');
  writeFileSync(first, '10.1.0.1 one.lab\n');
  writeFileSync(second, '10.2.0.2 two.lab\n10.2.0.3 three.lab\n');
  const s = await startTestServer({
    dns: { extra_records: [{ name: 'zero.lab', type: 'A', value: '10.0.0.0' }] },
    plugins: [
      { package: PKG, port: 'dns', options: { file: second } },
      { package: PKG, port: 'dns', options: { file: first } },
    ],
  });
  t.teardown(() => s.stop());
  const d = await joinDevice(t, s);
  t.same(d.netmap.dnsConfig?.ExtraRecords?.map((r) => r.Name), ['zero.lab', 'two.lab', 'three.lab', 'one.lab']);
  writeFileSync(second, '10.2.0.9 nine.lab\n');
  await d.waitFor((nm) => JSON.stringify(nm.dnsConfig?.ExtraRecords?.map((r) => r.Name)) === JSON.stringify(['zero.lab', 'nine.lab', 'one.lab']), 5000);
  t.pass('a change in the first plugin keeps its place before the second');
});

t.test('a bad option stops the start-up naming the plugin and the option', async (t) => {
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'dns', options: { file: 42, colour: 'red' } }] }), {
    message: /plugins\[0\] \(@headway-examples\/plugin-dns-records\): option "colour": unknown option[\s\S]*plugins\[0\] \(@headway-examples\/plugin-dns-records\): option "file": expected a file path, found 42/,
  });
  const dataDir = mkdtempSync(join(tmpdir(), 'hw-plugin-data-'));
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'dns' }] }, { dataDir }), {
    message: /plugins\[0\] \(@headway-examples\/plugin-dns-records\): option "file": required/,
  });
  t.notOk(existsSync(join(dataDir, 'db.sqlite')), 'the options were checked before the database was created');
});

t.test('headway config check reports a plugin option error, naming plugin and option', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-plugin-check-'));
  const cfg = join(dir, 'config.yaml');
  const hosts = join(dir, 'hosts');
  writeFileSync(hosts, '10.0.0.5 nas.lab\n');
  writeFileSync(cfg, `plugins:\n  - package: "${PKG}"\n    port: dns\n    options: { file: "${hosts}" }\n  - package: "${PKG}"\n    port: dns\n    options: { fiel: "${hosts}" }\n`);
  const bad = await runHeadway({}, ['config', 'check', '-c', cfg]);
  t.equal(bad.code, 1, 'exit 1');
  t.match(bad.stdout, /error: plugins\[1\] \(@headway-examples\/plugin-dns-records\) options\.fiel: unknown option/);
  t.match(bad.stdout, /error: plugins\[1\] \(@headway-examples\/plugin-dns-records\) options\.file: required/);
  t.notMatch(bad.stdout, /plugins\[0\]/, 'the good entry is not reported');

  writeFileSync(cfg, `plugins:\n  - package: "${PKG}"\n    port: dns\n    options: { file: "${hosts}" }\n`);
  const good = await runHeadway({}, ['config', 'check', '-c', cfg]);
  t.equal(good.code, 0, good.stdout + good.stderr);
  t.match(good.stdout, /Config is valid/);
});

t.test('a storage or policy plugins: entry is refused with the key that chooses it', async (t) => {
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'storage' }] }), {
    message: /plugins\[0\]: @headway-examples\/plugin-dns-records: the storage port is not loaded from plugins: it has exactly one adapter, chosen by database\.type/,
  });
  await t.rejects(startTestServer({ plugins: [{ package: PKG, port: 'policy', options: { file: '/x' } }] }), {
    message: /the policy port is not loaded from plugins: .*chosen by policy\.mode/,
  });
});
