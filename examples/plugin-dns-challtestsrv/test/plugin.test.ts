// The plugin in the real server with a real pebble-challtestsrv: a device's set-dns ends as TXT answers from
// challtestsrv's DNS server, and the options are checked at start-up.
import t from 'tap';
import { Resolver } from 'node:dns/promises';
import { TestDevice } from '@headway/testkit';
import { pebbleMissing, startChallTestSrv, startTestServer, unmet } from '@headway/integration';

const PKG = '@headway-examples/plugin-dns-challtestsrv';
const BASE = 'tailnet.example';

t.test('a device\'s challenge record is published in pebble-challtestsrv and replaced by the next', async (t) => {
  const missing = pebbleMissing();
  if (missing) return unmet(t, missing);
  const srv = await startChallTestSrv();
  t.teardown(() => srv.stop());
  const s = await startTestServer({
    dns: { base_domain: BASE, certificates: { enabled: true } },
    plugins: [{ package: PKG, port: 'dns', options: { management_url: srv.managementUrl } }],
  });
  t.teardown(() => s.stop());
  const user = await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'web' });
  t.teardown(() => d.close());
  await d.connect();
  await d.register({ authKey: secret });
  const resolver = new Resolver();
  resolver.setServers([srv.dnsAddress]);
  const name = `_acme-challenge.web.${BASE}`;
  const txt = async () => (await resolver.resolveTxt(name).catch(() => [] as string[][])).map((parts) => parts.join('')).sort();
  const ask = (value: string) => d.request('/machine/set-dns', { Version: 130, NodeKey: d.nodeKeyText, Name: name, Type: 'TXT', Value: value });
  t.equal((await ask('x'.repeat(43))).status, 200);
  t.same(await txt(), ['x'.repeat(43)]);
  t.equal((await ask('y'.repeat(43))).status, 200);
  t.same(await txt(), ['x'.repeat(43), 'y'.repeat(43)], 'both values held (txt_lifetime has not ended)');
  await s.stop();
  t.same(await txt(), [], 'cleared when the server stops');
});

t.test('a bad management_url stops start-up naming the option', async (t) => {
  await t.rejects(startTestServer({
    dns: { base_domain: BASE, certificates: { enabled: true } },
    plugins: [{ package: PKG, port: 'dns', options: { management_url: 'ftp://x' } }],
  }), /plugins\[0\] \(@headway-examples\/plugin-dns-challtestsrv\): option "management_url": expected an http\(s\) URL, found "ftp:\/\/x"/);
});
