// DNS under /api/v2 (Tailscale's API, dns.go of tailscale.com/client/tailscale/v2): reads in both dns.mode values,
// writes refused in file mode naming the keys, writes in database mode reaching a connected device's map at once
// (and a device on another instance sharing the database), bad values refused naming them with nothing changed,
// and the stored settings outliving a restart with other config values.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { TestDevice } from '@headway/testkit';
import { serverDatabases, startTestServer, type TestServer } from '../src/server.js';

const DNS = { base_domain: 'example.net', magic_dns: true, nameservers: { global: ['1.1.1.1'], split: { 'corp.example.com': ['10.0.0.53'] } }, search_domains: ['lab.example.com'] };

interface Api { call(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> }

async function api(s: TestServer): Promise<Api> {
  const { secret } = await s.state.keys.createApiKey(null);
  return {
    async call(method, path, body) {
      const res = await fetch(`${s.urls.http}/api/v2/tailnet/-/dns/${path}`, {
        method, headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      return { status: res.status, json: text ? JSON.parse(text) : undefined };
    },
  };
}

/** device registers and streams a map for a testkit device of a new user on s. */
async function device(t: Test, s: TestServer, name: string): Promise<TestDevice> {
  const user = s.state.users.byName(name) ?? await s.state.users.create({ name });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: `${name}-laptop` });
  t.teardown(() => d.close());
  await d.connect();
  const r = await d.register({ authKey: secret });
  if (r.Error) throw new Error(`register: ${r.Error}`);
  await d.startMap({ stream: true });
  return d;
}

const resolvers = (d: TestDevice) => {
  const c = d.netmap.dnsConfig as { Resolvers?: { Addr: string }[]; FallbackResolvers?: { Addr: string }[] } | undefined;
  return [...(c?.Resolvers ?? []), ...(c?.FallbackResolvers ?? [])].map((r) => r.Addr);
};

t.test('dns.mode file: reads answer the config file, writes are a 400 naming the keys to edit', async (t) => {
  const s = await startTestServer({ dns: DNS });
  t.teardown(() => s.stop());
  const a = await api(s);
  t.same((await a.call('GET', 'nameservers')).json, { dns: ['1.1.1.1'] });
  t.same((await a.call('GET', 'preferences')).json, { magicDNS: true });
  t.same((await a.call('GET', 'searchpaths')).json, { searchPaths: ['lab.example.com'] });
  t.same((await a.call('GET', 'split-dns')).json, { 'corp.example.com': ['10.0.0.53'] });
  t.same((await a.call('GET', 'configuration')).json, {
    nameservers: [{ address: '1.1.1.1' }], splitDNS: { 'corp.example.com': [{ address: '10.0.0.53' }] }, searchPaths: ['lab.example.com'],
    preferences: { overrideLocalDNS: false, magicDNS: true },
  });
  for (const [method, path, body] of [['POST', 'nameservers', { dns: ['9.9.9.9'] }], ['POST', 'preferences', { magicDNS: false }], ['PUT', 'split-dns', {}]] as const) {
    const res = await a.call(method, path, body);
    t.equal(res.status, 400, `${method} ${path}`);
    t.match(res.json.message, /dns\.nameservers\.global.*dns\.magic_dns.*dns\.mode: database/, 'the message names the keys and the mode');
  }
  t.same((await a.call('GET', 'nameservers')).json, { dns: ['1.1.1.1'] }, 'nothing changed');
});

t.test('dns.mode database: changes reach a connected device at once; bad values are refused naming them', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-v2dns-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  let s = await startTestServer({ dns: { ...DNS, mode: 'database' } }, { dataDir });
  let a = await api(s);
  t.same((await a.call('GET', 'nameservers')).json, { dns: ['1.1.1.1'] }, 'the config file seeds the stored settings');
  const d = await device(t, s, 'alice');
  t.same(resolvers(d), ['1.1.1.1']);

  t.same((await a.call('POST', 'nameservers', { dns: ['9.9.9.9', 'https://dns.example.org/dns-query'] })).json, { dns: ['9.9.9.9', 'https://dns.example.org/dns-query'], magicDNS: true });
  await d.waitFor(() => resolvers(d).join() === '9.9.9.9,https://dns.example.org/dns-query');
  t.pass('the device got the new nameservers');

  t.same((await a.call('POST', 'searchpaths', { searchPaths: ['a.example.com', 'b.example.com'] })).json, { searchPaths: ['a.example.com', 'b.example.com'] });
  await d.waitFor((nm) => JSON.stringify(nm.dnsConfig?.Domains) === JSON.stringify(['example.net', 'a.example.com', 'b.example.com']));
  t.pass('the device got the search domains after the MagicDNS domain');

  const patched = await a.call('PATCH', 'split-dns', { 'corp.example.com': null, 'my_zone.example': ['10.1.1.1'] });
  t.same(patched.json, { 'my_zone.example': ['10.1.1.1'] }, 'PATCH removes a domain mapped to null and adds one, keys as sent');
  await d.waitFor((nm) => Boolean((nm.dnsConfig?.Routes as Record<string, unknown> | undefined)?.['my_zone.example']) && !(nm.dnsConfig?.Routes as Record<string, unknown>)['corp.example.com']);
  t.same((await a.call('PATCH', 'split-dns', { 'x.example': ['10.2.2.2'] })).json, { 'my_zone.example': ['10.1.1.1'], 'x.example': ['10.2.2.2'] }, 'PATCH keeps the others');
  t.same((await a.call('PUT', 'split-dns', { 'y.example': ['10.3.3.3'] })).json, { 'y.example': ['10.3.3.3'] }, 'PUT replaces the whole mapping');

  t.same((await a.call('POST', 'preferences', { magicDNS: false })).json, { magicDNS: false });
  await d.waitFor((nm) => nm.dnsConfig?.Proxied !== true && !(nm.dnsConfig?.Domains ?? []).includes('example.net'));
  t.pass('MagicDNS off: the device no longer resolves tailnet names');
  await a.call('POST', 'preferences', { magicDNS: true });
  await d.waitFor((nm) => nm.dnsConfig?.Proxied === true);
  t.pass('MagicDNS on again');

  const before = (await a.call('GET', 'configuration')).json;
  for (const [method, path, body, named] of [
    ['POST', 'nameservers', { dns: ['not-an-ip'] }, /"not-an-ip"/],
    ['POST', 'nameservers', { dns: 'one' }, /dns/],
    ['POST', 'searchpaths', { searchPaths: ['bad domain!'] }, /"bad domain!"/],
    ['PATCH', 'split-dns', { 'corp.example.com': ['https://doh.example/'] }, /corp\.example\.com/],
    ['PUT', 'split-dns', { 'bad domain': ['10.0.0.1'] }, /"bad domain"/],
    ['POST', 'preferences', { magicDNS: 'yes' }, /magicDNS/],
    ['POST', 'configuration', { nameservers: [{ address: '300.1.1.1' }] }, /"300\.1\.1\.1"/],
  ] as const) {
    const res = await a.call(method, path, body);
    t.equal(res.status, 400, `${method} ${path} ${JSON.stringify(body)}`);
    t.match(res.json.message, named, 'names the bad value');
  }
  t.same((await a.call('GET', 'configuration')).json, before, 'nothing changed');

  const conf = { nameservers: [{ address: '8.8.8.8' }], splitDNS: { 'z.example': [{ address: '10.9.9.9' }] }, searchPaths: ['s.example.com'], preferences: { magicDNS: true, overrideLocalDNS: true } };
  t.same((await a.call('POST', 'configuration', conf)).json, conf, 'the whole configuration at once');
  await d.waitFor((nm) => JSON.stringify((nm.dnsConfig as { Resolvers?: unknown }).Resolvers) === JSON.stringify([{ Addr: '8.8.8.8' }]));
  t.pass('override local DNS: the nameserver is the device\'s resolver for everything');

  await s.stop({ remove: false });
  s = await startTestServer({ dns: { ...DNS, nameservers: { global: ['4.4.4.4'], split: {} }, mode: 'database' } }, { dataDir });
  t.teardown(() => s.stop());
  a = await api(s);
  t.same((await a.call('GET', 'nameservers')).json, { dns: ['8.8.8.8'] }, 'after a restart the stored settings stand; the config file only seeds them');
});

for (const db of serverDatabases(t, 'DNS changes across instances')) {
  t.test(`${db.name}: a DNS change on one instance reaches a device on another`, (t) => db.run(async (database) => {
    const FAST = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s', poll_interval: '50ms' };
    const shared = mkdtempSync(join(tmpdir(), 'headway-v2dns-cluster-'));
    t.teardown(() => rmSync(shared, { recursive: true, force: true }));
    const servers: TestServer[] = [];
    for (let i = 0; i < 2; i++) {
      servers.push(await startTestServer({ database, cluster: FAST, dns: { ...DNS, mode: 'database' }, noise: { private_key_path: join(shared, 'noise.key') } }));
    }
    t.teardown(async () => { for (const s of servers.reverse()) await s.stop(); });
    const [a, b] = servers as [TestServer, TestServer];
    const d = await device(t, b, 'bob');
    const viaA = await api(a);
    t.equal((await viaA.call('POST', 'nameservers', { dns: ['9.9.9.9'] })).status, 200);
    await d.waitFor(() => resolvers(d).join() === '9.9.9.9');
    t.pass('the device on B got the nameservers set through A');
    const viaB = await api(b);
    t.same((await viaB.call('GET', 'nameservers')).json, { dns: ['9.9.9.9'] }, 'B answers them too');
    await Promise.all([viaA.call('PATCH', 'split-dns', { 'a.example': ['10.0.0.1'] }), viaB.call('PATCH', 'split-dns', { 'b.example': ['10.0.0.2'] })]);
    // Each instance learns of the other's change asynchronously; a lost update would never show.
    const both = ['a.example', 'b.example', 'corp.example.com'].join();
    for (let i = 0; ; i++) {
      const [onA, onB] = await Promise.all([viaA.call('GET', 'split-dns'), viaB.call('GET', 'split-dns')]);
      if (Object.keys(onA.json).sort().join() === both && Object.keys(onB.json).sort().join() === both) break;
      if (i > 250) return void t.fail('concurrent PATCHes on two instances lost one', { onA: onA.json, onB: onB.json });
      await new Promise((r) => setTimeout(r, 20));
    }
    t.pass('concurrent PATCHes on two instances lose nothing, and both instances end with both');
  }));
}
