import t from 'tap';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DerpClient, generateDerpKeyPair, formatNodeKey } from '@headway/derp';
import { reverseZones, parseDerpMap } from '@headway/control';
import { parsePrefix } from '@headway/core';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';
import { until } from '../src/until.js';

const tmp = () => mkdtempSync(join(tmpdir(), 'hw-srv-'));

async function device(s: TestServer, hostname: string, routes?: string[]): Promise<TestDevice> {
  const user = s.state.users.byName('alice') ?? await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey: secret, routes });
  if (r.Error) throw new Error(r.Error);
  await d.startMap({ stream: true });
  return d;
}

t.test('concurrent registrations never share an address; deleted addresses come back', async (t) => {
  const s = await startTestServer({ prefixes: { v4: '100.64.0.0/26', v6: 'fd7a:115c:a1e0::/120' } });
  t.teardown(() => s.stop());
  const user = await s.state.users.create({ name: 'alice' });
  const { randomBytes } = await import('node:crypto');
  const make = (i: number) => s.state.nodes.create({
    machineKey: `mkey:${randomBytes(32).toString('hex')}`, nodeKey: `nodekey:${randomBytes(32).toString('hex')}`,
    hostname: `n${i}`, userId: user.id, registerMethod: 'debug',
  });
  const nodes = await Promise.all(Array.from({ length: 40 }, (_, i) => make(i)));
  t.equal(new Set(nodes.map((n) => n.ipv4)).size, 40, 'unique IPv4');
  t.equal(new Set(nodes.map((n) => n.ipv6)).size, 40, 'unique IPv6');
  t.notOk(nodes.some((n) => n.ipv4 === '100.64.0.0' || n.ipv4 === '100.64.0.63'), 'no network or broadcast address');
  const freed = nodes[5]!;
  await s.state.nodes.delete(freed.id);
  // 62 usable addresses in a /26: 39 left in use, so 23 more fill it, the last wrapping around to the freed one.
  const more = await Promise.all(Array.from({ length: 23 }, (_, i) => make(100 + i)));
  t.ok(more.some((n) => n.ipv4 === freed.ipv4), 'the deleted node\'s address was reused');
  await t.rejects(make(999), { code: 'conflict', message: /no free addresses/ });
});

t.test('DNS: MagicDNS names, nameservers, split DNS, reverse zones and a watched extra records file', async (t) => {
  const dir = tmp();
  const records = join(dir, 'records.json');
  writeFileSync(records, JSON.stringify([{ name: 'git.corp', type: 'A', value: '100.64.0.99' }]));
  const s = await startTestServer({
    dns: {
      base_domain: 'mesh.example', override_local_dns: true, nameservers: { global: ['9.9.9.9'], split: { 'corp.internal': ['10.0.0.53'] } },
      search_domains: ['corp.internal'], extra_records_path: records,
    },
  });
  t.teardown(() => s.stop());
  const d = await device(s, 'Work Laptop');
  t.teardown(() => d.close());
  t.equal(d.netmap.self?.Name, 'work-laptop.mesh.example.');
  const dns = d.netmap.dnsConfig!;
  t.same(dns.Resolvers, [{ Addr: '9.9.9.9' }]);
  t.same(dns.Domains, ['mesh.example', 'corp.internal']);
  t.equal(dns.Proxied, true);
  t.same((dns.Routes as Record<string, unknown>)['corp.internal'], [{ Addr: '10.0.0.53' }]);
  t.same((dns.Routes as Record<string, unknown>)['64.100.in-addr.arpa'], [], 'reverse zone answered locally');
  t.same((dns.Routes as Record<string, unknown>)['0.e.1.a.c.5.1.1.a.7.d.f.ip6.arpa'], []);
  t.same(dns.ExtraRecords, [{ Name: 'git.corp', Type: 'A', Value: '100.64.0.99' }]);
  writeFileSync(records, JSON.stringify([{ name: 'wiki.corp', type: 'A', value: '100.64.0.98' }]));
  await d.waitFor((nm) => JSON.stringify(nm.dnsConfig?.ExtraRecords).includes('wiki.corp'), 5000);
  writeFileSync(records, '[{"name": "broken"');
  await until('the invalid records file is logged', () => s.logs.some((l) => /extra records file invalid/.test(l)));
  t.match(d.netmap.dnsConfig?.ExtraRecords, [{ Name: 'wiki.corp' }], 'an invalid file keeps the previous records');
});

t.test('reverse zones cover non-octet prefixes', async (t) => {
  t.same(reverseZones(parsePrefix('100.64.0.0/10')!).length, 64);
  t.same(reverseZones(parsePrefix('10.1.0.0/16')!), ['1.10.in-addr.arpa']);
  t.same(reverseZones(parsePrefix('fd7a:115c:a1e0::/48')!), ['0.e.1.a.c.5.1.1.a.7.d.f.ip6.arpa']);
});

t.test('DERP map: files merged by region with the embedded relay; bad files named', async (t) => {
  const dir = tmp();
  const yamlMap = join(dir, 'derp.yaml');
  writeFileSync(yamlMap, 'regions:\n  900:\n    regionid: 900\n    regioncode: home\n    regionname: Home\n    nodes:\n      - name: 900a\n        regionid: 900\n        hostname: derp.home.example\n        stunport: 3478\n');
  const s = await startTestServer({ derp: { paths: [yamlMap], server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
  t.teardown(() => s.stop());
  const d = await device(s, 'x');
  t.teardown(() => d.close());
  const regions = d.netmap.derpMap!.Regions as Record<string, { RegionCode: string; Nodes: Array<Record<string, unknown>> }>;
  t.same(Object.keys(regions).sort(), ['900', '999']);
  t.equal(regions['900']!.RegionCode, 'home');
  t.equal(regions['900']!.Nodes[0]!.HostName, 'derp.home.example');
  t.equal(regions['999']!.RegionCode, 'headway');
  t.match(regions['999']!.Nodes[0], { HostName: '127.0.0.1', DERPPort: s.relay.listener!.address().port, CertName: /^sha256-raw:[0-9a-f]{64}$/ });
  t.equal(regions['999']!.Nodes[0]!.STUNPort, s.relay.stun!.address().port, 'the port STUN really bound');
  t.not(regions['999']!.Nodes[0]!.STUNPort, 0);
  writeFileSync(yamlMap, 'regions:\n  901:\n    regionid: 901\n    regioncode: away\n    regionname: Away\n    nodes:\n      - name: 901a\n        regionid: 901\n        hostname: derp.away.example\n');
  t.equal(await s.derpMap.refresh(), true, 'the periodic refresh sees the change');
  await d.waitFor((nm) => Object.keys(nm.derpMap?.Regions ?? {}).sort().join() === '901,999', 5000);
  t.pass('a changed DERP map reaches connected devices');
  t.throws(() => parseDerpMap('regions: {901: {nodes: []}}', 'x.yaml'), /x\.yaml: region 901 has no Nodes/);
  t.throws(() => parseDerpMap('[1,2]', 'y.json'), /y\.json: expected a "Regions" mapping/);
});

t.test('embedded relay: registered nodes relay, others and deleted nodes cannot', async (t) => {
  const s = await startTestServer({ derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0', verify_clients: true } } });
  t.teardown(() => s.stop());
  const a = await device(s, 'a');
  const b = await device(s, 'b');
  t.teardown(() => { a.close(); b.close(); });
  const url = `${s.urls.http}/derp`;
  const ca = await DerpClient.connect({ url, privateKey: a.nodeKey.privateKey });
  const cb = await DerpClient.connect({ url, privateKey: b.nodeKey.privateKey });
  t.teardown(() => { ca.close(); cb.close(); });
  ca.send(b.nodeKey.publicKey, Buffer.from('hello through the relay'));
  const got = await cb.recv(3000);
  t.equal(got.type, 'packet');
  t.equal(got.type === 'packet' ? got.data.toString() : '', 'hello through the relay');
  const stranger = generateDerpKeyPair();
  await t.rejects(DerpClient.connect({ url, privateKey: stranger.privateKey, timeoutMs: 2000 }), 'an unregistered key is refused');
  const verify = await fetch(`${s.urls.http}/verify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ NodePublic: formatNodeKey(stranger.publicKey) }) });
  t.same(await verify.json(), { Allow: false });
  const verifyA = await fetch(`${s.urls.http}/verify`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ NodePublic: a.nodeKeyText }) });
  t.same(await verifyA.json(), { Allow: true });
  const nodeA = s.state.nodes.byNodeKey(a.nodeKeyText)!;
  await s.state.nodes.delete(nodeA.id);
  await until('the deleted node is dropped from the relay', () => !s.relay.derp!.isConnected(a.nodeKeyText));
  t.pass('a deleted node is dropped from the relay');
  await t.rejects(DerpClient.connect({ url, privateKey: a.nodeKey.privateKey, timeoutMs: 2000 }), 'and cannot come back');
  t.equal((await fetch(`${s.urls.http}/derp/probe`)).status, 200);
  const r204 = await fetch(`${s.urls.http}/generate_204`, { headers: { 'X-Tailscale-Challenge': 'abc' } });
  t.equal(r204.status, 204);
  t.equal(r204.headers.get('x-tailscale-response'), 'response abc');
});

t.test('subnet routes: one primary among online routers, failing over when it goes offline', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const r1 = await device(s, 'r1', ['10.9.0.0/24']);
  const r2 = await device(s, 'r2', ['10.9.0.0/24']);
  const viewer = await device(s, 'viewer');
  t.teardown(() => { r2.close(); viewer.close(); });
  const n1 = s.state.nodes.byNodeKey(r1.nodeKeyText)!, n2 = s.state.nodes.byNodeKey(r2.nodeKeyText)!;
  await s.state.nodes.approveRoutes(n1.id, ['10.9.0.0/24']);
  await s.state.nodes.approveRoutes(n2.id, ['10.9.0.0/24']);
  await viewer.waitFor((m) => (m.peers.get(n1.id)?.PrimaryRoutes ?? []).includes('10.9.0.0/24'), 5000);
  t.notOk(viewer.netmap.peers.get(n2.id)?.PrimaryRoutes, 'only one primary');
  r1.close();
  await viewer.waitFor((m) => (m.peers.get(n2.id)?.PrimaryRoutes ?? []).includes('10.9.0.0/24') && !(m.peers.get(n1.id)?.PrimaryRoutes ?? []).length, 5000);
  t.pass('failed over to r2');
  const listed = s.state.nodes.list().map((n) => s.routes.primaryRoutes(n.id));
  t.same(listed.flat(), ['10.9.0.0/24']);
});

t.test('HTTPS with tls_cert_path and tls_key_path', async (t) => {
  const dir = tmp();
  const cert = join(dir, 'cert.pem'), key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
  } catch {
    t.skip('openssl is not installed', () => undefined);
    return;
  }
  const s = await startTestServer({ tls_cert_path: cert, tls_key_path: key });
  t.teardown(() => s.stop());
  t.match(s.urls.http, /^https:/);
  const https = await import('node:https');
  const body = await new Promise<string>((resolve, reject) => {
    https.get(`${s.urls.http}/health`, { rejectUnauthorized: false }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve(text));
    }).on('error', reject);
  });
  t.same(JSON.parse(body), { status: 'pass' });
});

t.test('file policy: SIGHUP reloads; an invalid file keeps the old policy; invalid at start stops the server', async (t) => {
  const dir = tmp();
  const policy = join(dir, 'policy.hujson');
  writeFileSync(policy, '// allow ssh only\n{ "acls": [ { "action": "accept", "src": ["*"], "dst": ["*:22"] }, ], }\n');
  const s = await startTestServer({ policy: { mode: 'file', path: policy } });
  t.teardown(() => s.stop());
  const d = await device(s, 'x');
  t.teardown(() => d.close());
  t.match(JSON.stringify(d.netmap.packetFilter), /"First":22/);
  writeFileSync(policy, '{ "acls": [ { "action": "accept", "src": ["*"], "dst": ["*:443"] } ] }');
  process.kill(process.pid, 'SIGHUP');
  await d.waitFor((m) => JSON.stringify(m.packetFilter).includes('"First":443'), 5000);
  t.pass('SIGHUP applied the new file');
  writeFileSync(policy, '{ "acls": [ { action: "accept" } ] }');
  process.kill(process.pid, 'SIGHUP');
  await until('the failed reload is logged', () => s.logs.some((l) => /policy reload failed; keeping the policy in force/.test(l)));
  t.ok(s.logs.some((l) => /policy reload failed; keeping the policy in force/.test(l) && /line 1/.test(l)), 'the reason is logged');
  t.match(JSON.stringify(d.netmap.packetFilter), /"First":443/, 'old policy kept');
  await t.rejects(startTestServer({ policy: { mode: 'file', path: policy } }), { message: /policy from file .* is invalid: .*line 1, column/ });
  const put = await s.policy.set('{}').catch((e: Error) => e);
  t.match(put, { code: 'policy_read_only' });
});
