import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestDevice } from '@headway/testkit';
import { startTestServer } from '@headway/integration';

t.test('the server loads the plugin by package name and devices receive its records', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-plugin-'));
  const hosts = join(dir, 'hosts');
  writeFileSync(hosts, '# lab\n10.0.0.5 nas.lab nas\nfd00::5 nas6.lab\n');
  process.env.HEADWAY_DNS_HOSTS_FILE = hosts;
  const s = await startTestServer({ plugins: ['@headway-examples/plugin-dns-records'] });
  t.teardown(() => s.stop());
  const user = await s.state.createUser({ name: 'alice' });
  const { secret } = await s.state.createPreAuthKey({ userId: user.id, reusable: true });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'client' });
  t.teardown(() => d.close());
  await d.connect();
  await d.register({ authKey: secret });
  await d.startMap({ stream: true });
  t.same(d.netmap.dnsConfig?.ExtraRecords, [
    { Name: 'nas.lab', Type: 'A', Value: '10.0.0.5' },
    { Name: 'nas', Type: 'A', Value: '10.0.0.5' },
    { Name: 'nas6.lab', Type: 'AAAA', Value: 'fd00::5' },
  ]);
  writeFileSync(hosts, '10.0.0.6 printer.lab\n');
  await d.waitFor((nm) => JSON.stringify(nm.dnsConfig?.ExtraRecords) === JSON.stringify([{ Name: 'printer.lab', Type: 'A', Value: '10.0.0.6' }]), 5000);
  t.pass('a changed file reaches connected devices');
});

t.test('a plugin that cannot start stops the server with its reason', async (t) => {
  delete process.env.HEADWAY_DNS_HOSTS_FILE;
  await t.rejects(startTestServer({ plugins: ['@headway-examples/plugin-dns-records'] }), { message: /plugins: dns adapter @headway-examples\/plugin-dns-records: set HEADWAY_DNS_HOSTS_FILE/ });
});
