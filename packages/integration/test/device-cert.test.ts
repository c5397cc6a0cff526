// Device certificates over the protocol (testkit devices, the real server, the RFC 2136 plugin and a real Knot):
// each device's map names its own MagicDNS name as its one cert domain and follows a rename; set-dns publishes
// only a device's own challenge record; the server refuses to start with dns.certificates.enabled and no DNS
// plugin that publishes TXT records, naming the key.
import t, { type Test } from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TestDevice } from '@headway/testkit';
import { resolveConfig } from '@headway/core';
import { knotMissing, startKnot, type Knot } from '../src/knot.js';
import { startTestServer, type TestServer } from '../src/server.js';
import { unmet } from '../src/unmet.js';

const BASE = 'tailnet.example';

async function withKnot(t: Test): Promise<{ knot: Knot; s: TestServer } | undefined> {
  const missing = knotMissing();
  if (missing) { unmet(t, missing); return undefined; }
  const knot = await startKnot({ zone: BASE });
  t.teardown(() => knot.stop());
  const s = await startTestServer({
    dns: { base_domain: BASE, certificates: { enabled: true } },
    plugins: [{ package: '@headway/dns-rfc2136', port: 'dns', options: { server: knot.address, zone: BASE, key_name: knot.key.name, key_secret: knot.key.secret } }],
  });
  t.teardown(() => s.stop());
  return { knot, s };
}

async function device(t: Test, s: TestServer, hostname: string, authKey: string): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  t.teardown(() => d.close());
  await d.connect();
  await d.register({ authKey });
  await d.startMap({ stream: true });
  return d;
}

const until = async (what: string, ok: () => boolean): Promise<void> => {
  for (let i = 0; i < 200 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
  if (!ok()) throw new Error(`timed out waiting for ${what}`);
};

t.test('each device gets its own cert domain and the https capability; a rename sends the new one', async (t) => {
  const env = await withKnot(t);
  if (!env) return;
  const { s } = env;
  const user = await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
  const web = await device(t, s, 'web', secret);
  const db = await device(t, s, 'db', secret);
  t.same(web.netmap.dnsConfig?.CertDomains, [`web.${BASE}`]);
  t.same(db.netmap.dnsConfig?.CertDomains, [`db.${BASE}`], 'each its own, nobody else\'s');
  t.ok('https' in (web.netmap.self?.CapMap ?? {}), 'the https capability');
  const node = s.state.nodes.list().find((n) => n.givenName === 'web')!;
  await s.state.nodes.rename(node.id, 'www');
  await until('the renamed device\'s cert domain', () => web.netmap.dnsConfig?.CertDomains?.[0] === `www.${BASE}`);
  t.same(web.netmap.dnsConfig?.CertDomains, [`www.${BASE}`], 'the rename reaches the client\'s DNSConfig');
  t.same(db.netmap.dnsConfig?.CertDomains, [`db.${BASE}`], 'the other device is unchanged');
});

t.test('set-dns: the own name is published in Knot, the old name after a rename is refused, bad bodies get 400', async (t) => {
  const env = await withKnot(t);
  if (!env) return;
  const { s, knot } = env;
  const user = await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
  const d = await device(t, s, 'web', secret);
  const ask = (body: Record<string, unknown>) => d.request('/machine/set-dns', { Version: 130, NodeKey: d.nodeKeyText, Type: 'TXT', Value: 'b'.repeat(43), ...body });
  t.equal((await ask({ Name: `_acme-challenge.web.${BASE}` })).status, 200);
  t.same(await knot.txt(`_acme-challenge.web.${BASE}`), ['b'.repeat(43)]);
  const node = s.state.nodes.list().find((n) => n.givenName === 'web')!;
  await s.state.nodes.rename(node.id, 'www');
  const old = await ask({ Name: `_acme-challenge.web.${BASE}`, Value: 'c'.repeat(43) });
  t.equal(old.status, 403, 'the name it had before is no longer its own');
  t.same(await knot.txt(`_acme-challenge.web.${BASE}`), ['b'.repeat(43)], 'unchanged');
  const bad = await ask({ Name: 42 });
  t.equal(bad.status, 400);
  t.match(bad.body.toString(), /invalid SetDNSRequest: Name: expected string/);
  const stranger = await d.request('/machine/set-dns', { Version: 130, NodeKey: `nodekey:${'1'.repeat(64)}`, Name: `_acme-challenge.www.${BASE}`, Type: 'TXT', Value: 'd'.repeat(43) });
  t.equal(stranger.status, 404, 'a node key that is not this machine\'s');
});

t.test('dns.certificates.enabled: checked against MagicDNS and the plugins, each problem naming the key', async (t) => {
  const problems = (raw: Record<string, unknown>) => resolveConfig(raw, { env: {} }).problems.filter((p) => p.key === 'dns.certificates.enabled').map((p) => p.message);
  t.same(problems({ dns: { certificates: { enabled: true }, magic_dns: false } }), [
    'needs dns.magic_dns: true and dns.base_domain set: a certificate names a device by its MagicDNS name',
    'needs a plugins: entry with port dns that publishes TXT records (such as @headway/dns-rfc2136) for the ACME DNS-01 challenge',
  ]);
  t.same(problems({ dns: { certificates: { enabled: false }, magic_dns: false } }), [], 'off: nothing to check');
  const hosts = join(mkdtempSync(join(tmpdir(), 'hw-cert-')), 'hosts');
  writeFileSync(hosts, '10.0.0.5 nas.lab\n');
  await t.rejects(startTestServer({
    dns: { base_domain: BASE, certificates: { enabled: true } },
    plugins: [{ package: '@headway-examples/plugin-dns-records', port: 'dns', options: { file: hosts } }],
  }), /dns\.certificates\.enabled: no dns plugin under plugins: publishes TXT records \(setTxt\/removeTxt\)/,
  'a DNS plugin without setTxt is not enough: the server does not start');
});
