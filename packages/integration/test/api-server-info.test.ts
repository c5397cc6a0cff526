/**
 * GET /api/v1/server and GET /api/v1/dns: the running server's build, database, counts and served certificate, and
 * the DNS mode, MagicDNS domain and extra records with the source of each; both need a credential.
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { startTestServer } from '../src/server.js';
import { socketCall } from '../src/console.js';
import { streamingDevice } from '../src/console-seed.js';
import { unmet } from '../src/unmet.js';

const serverVersion = (JSON.parse(readFileSync(createRequire(import.meta.url).resolve('@headway/server/package.json'), 'utf8')) as { version: string }).version;

t.test('server: build, database, counts; plain HTTP has no certificate', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  await streamingDevice(t, s, 'alice', 'laptop');
  await s.state.users.create({ name: 'bob' });

  const res = await socketCall(s, 'GET', '/api/v1/server');
  t.equal(res.status, 200);
  t.same(res.json, {
    version: serverVersion, commit: 'unknown', serverUrl: s.config.server_url,
    database: { type: 'sqlite', description: s.storage.describe() }, clustered: false, tls: null,
    counts: { users: 2, nodes: 1, onlineNodes: 1 },
  });
  t.match(res.json.database.description, /sqlite/);

  const anonymous = await fetch(`${s.urls.http}/api/v1/server`);
  t.equal(anonymous.status, 401, 'the main listener asks for a credential');
  const dns = await fetch(`${s.urls.http}/api/v1/dns`);
  t.equal(dns.status, 401);
});

t.test('dns: mode, base domain and extra records with their source', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-dnsinfo-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const s = await startTestServer({ dns: { base_domain: 'example.net', extra_records: [{ name: 'grafana.example.net', type: 'A', value: '100.64.0.5' }] } });
  t.teardown(() => s.stop());
  t.same((await socketCall(s, 'GET', '/api/v1/dns')).json, {
    mode: 'file', baseDomain: 'example.net',
    extraRecords: [{ name: 'grafana.example.net', type: 'A', value: '100.64.0.5', source: 'dns.extra_records' }],
  });

  const path = join(dir, 'records.json');
  writeFileSync(path, JSON.stringify([{ name: 'wiki.example.net', type: 'AAAA', value: 'fd7a:115c:a1e0::5' }]));
  const f = await startTestServer({ dns: { mode: 'database', base_domain: 'example.net', extra_records_path: path } });
  t.teardown(() => f.stop());
  t.same((await socketCall(f, 'GET', '/api/v1/dns')).json, {
    mode: 'database', baseDomain: 'example.net',
    extraRecords: [{ name: 'wiki.example.net', type: 'AAAA', value: 'fd7a:115c:a1e0::5', source: `dns.extra_records_path (${path})` }],
  });
});

t.test('server: a tls_cert_path certificate and its expiry', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-serverinfo-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cert = join(dir, 'cert.pem'), key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '3', '-subj', '/CN=127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
  } catch {
    return unmet(t, 'openssl is not installed (apt-get install openssl)');
  }
  const s = await startTestServer({ tls_cert_path: cert, tls_key_path: key });
  t.teardown(() => s.stop());
  const res = await socketCall(s, 'GET', '/api/v1/server');
  t.same(res.json.tls, { source: 'tls_cert_path', notAfter: new Date(new X509Certificate(readFileSync(cert)).validTo).toISOString(), status: 'pass' });
});
