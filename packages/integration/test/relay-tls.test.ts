/**
 * The embedded relay with the default http:// server_url (issue 14 item 2):
 * its own TLS port, a self-signed certificate kept in data_dir and pinned in
 * the DERP map, older clients told to skip verification, and TLS handshakes
 * that reach the plain-HTTP listener logged instead of failing silently.
 */
import t from 'tap';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { connect as netConnect } from 'node:net';
import { DerpClient } from '@headway/derp';
import { certificateSha256 } from '@headway/derp';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

async function device(s: TestServer, hostname: string, capabilityVersion?: number): Promise<TestDevice> {
  const user = s.state.userByName('alice') ?? await s.state.createUser({ name: 'alice' });
  const { secret } = await s.state.createPreAuthKey({ userId: user.id, reusable: true });
  const d = new TestDevice({ serverUrl: s.urls.http, hostname, capabilityVersion });
  await d.connect();
  const r = await d.register({ authKey: secret });
  if (r.Error) throw new Error(r.Error);
  await d.startMap({ stream: true });
  return d;
}

type RelayNode = Record<string, unknown>;
const relayNode = (d: TestDevice): RelayNode => (d.netmap.derpMap!.Regions as Record<string, { Nodes: RelayNode[] }>)['999']!.Nodes[0]!;

t.test('http:// server_url: the relay listens on its own TLS port with a pinned certificate kept in data_dir', async (t) => {
  const s = await startTestServer({});
  let stopped = false;
  t.teardown(() => (stopped ? undefined : s.stop()));
  const port = s.relay.listener!.address().port;
  const certPath = join(s.dataDir, 'derp_tls_cert.pem');
  const keyPath = join(s.dataDir, 'derp_tls_key.pem');
  for (const p of [certPath, keyPath]) t.equal(statSync(p).mode & 0o777, 0o600, `${p} is mode 0600`);
  const pem = readFileSync(certPath, 'utf8');
  const sha = certificateSha256(pem);
  t.ok(s.logs.some((l) => /generated the relay TLS certificate/.test(l)), 'generation is logged');
  t.ok(s.logs.some((l) => /relay serving TLS on its own port/.test(l) && l.includes(sha)), 'the start-up line names the pin');
  t.ok(s.logs.some((l) => /WRN .*older than 1\.82/.test(l)), 'a start-up warning about clients that cannot pin');
  t.notOk(s.logs.some((l) => /BEGIN .*PRIVATE KEY/.test(l)), 'the key is never logged');

  const modern = await device(s, 'modern');
  t.teardown(() => modern.close());
  t.same(relayNode(modern), {
    Name: '999', RegionID: 999, HostName: '127.0.0.1', DERPPort: port, STUNPort: s.relay.stun!.address().port, CanPort80: false,
    CertName: `sha256-raw:${sha}`,
  }, 'capability version 130: the TLS port and the pin');
  const old = await device(s, 'old', 113);
  t.teardown(() => old.close());
  t.match(relayNode(old), { DERPPort: port, InsecureForTests: true }, 'capability version 113 (Tailscale 1.80): unverified TLS on the same port');
  t.notOk('CertName' in relayNode(old));

  // A DERP client that trusts exactly the pinned certificate logs in over TLS.
  const c = await DerpClient.connect({ url: `https://127.0.0.1:${port}/derp`, privateKey: modern.nodeKey.privateKey, tls: { ca: pem } });
  t.teardown(() => c.close());
  t.ok(s.relay.derp!.isConnected(modern.nodeKeyText), 'a registered node logs in to the relay over TLS');
  await c.close();

  // Restart on the same data directory: same certificate, so devices' pins stay valid.
  await s.close();
  stopped = true;
  const again = await startTestServer({}, { dataDir: s.dataDir });
  t.teardown(() => again.stop());
  t.equal(certificateSha256(readFileSync(certPath, 'utf8')), sha, 'the certificate survives a restart');
  t.notOk(again.logs.some((l) => /generated the relay TLS certificate/.test(l)), 'and is not regenerated');
  t.match(again.derpMap.map.Regions['999']!.Nodes[0], { CertName: `sha256-raw:${sha}` });
});

t.test('https server_url keeps the relay on listen_addr (no extra port)', async (t) => {
  const s = await startTestServer({ server_url: 'https://hw.example.com' });
  t.teardown(() => s.stop());
  t.equal(s.relay.listener, undefined);
  t.same(s.derpMap.map.Regions['999']!.Nodes[0], {
    Name: '999', RegionID: 999, HostName: 'hw.example.com', DERPPort: 443, STUNPort: s.relay.stun!.address().port, CanPort80: false,
  });
});

t.test('a TLS handshake on the plain-HTTP listener is logged (rate-limited); other bad requests still get 400', async (t) => {
  const s = await startTestServer({});
  t.teardown(() => s.stop());
  const port = Number(new URL(s.urls.http).port);
  for (let i = 0; i < 3; i++) {
    await new Promise<void>((resolve) => {
      const c = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
      c.on('error', () => resolve());
      c.on('close', () => resolve());
    });
  }
  const lines = s.logs.filter((l) => /TLS handshake on the plain-HTTP listener/.test(l));
  t.equal(lines.length, 1, 'three attempts, one line');
  t.match(lines[0], /WRN .*remote=127\.0\.0\.1:\d+/);
  const reply = await new Promise<string>((resolve) => {
    const c = netConnect({ host: '127.0.0.1', port });
    let got = '';
    c.on('data', (d) => (got += d.toString()));
    c.on('close', () => resolve(got));
    c.on('error', () => resolve(got));
    c.write('\x01\x02 nonsense\r\n\r\n');
  });
  t.match(reply, /^HTTP\/1\.1 400 Bad Request\r\n/, 'a non-TLS bad request still gets 400');
  const health = await fetch(`${s.urls.http}/health`);
  t.equal(health.status, 200, 'and the listener keeps serving');
});

t.test('derp.server.tls_listen_addr that cannot be bound stops the server naming the key', async (t) => {
  await t.rejects(startTestServer({ derp: { server: { tls_listen_addr: '192.0.2.1:0' } } }), /derp\.server\.tls_listen_addr 192\.0\.2\.1:0: .*EADDRNOTAVAIL/);
});
