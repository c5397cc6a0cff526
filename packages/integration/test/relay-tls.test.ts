/**
 * The embedded relay with the default http:// server_url:
 * its own TLS port, a self-signed certificate kept in data_dir and pinned in
 * the DERP map, older clients told to skip verification, and TLS handshakes
 * that reach the plain-HTTP listener logged instead of failing silently.
 */
import t, { type Test } from 'tap';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { connect as netConnect } from 'node:net';
import { DerpClient } from '@headway/derp';
import { certificateSha256, DERP_LOGIN_LIMITS } from '@headway/derp';
import { KEYS } from '@headway/core';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';

async function device(s: TestServer, hostname: string, capabilityVersion?: number): Promise<TestDevice> {
  const user = s.state.users.byName('alice') ?? await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
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

/** stalled opens a TCP connection that sends `bytes` and nothing more; it resolves with whether the server closed it. */
function stalled(port: number, bytes: string | Buffer, t: Test): { closed: Promise<boolean> } {
  const c = netConnect({ host: '127.0.0.1', port });
  t.teardown(() => c.destroy());
  c.on('error', () => undefined);
  c.write(bytes);
  c.resume();
  const closed = new Promise<boolean>((resolve) => {
    c.once('close', () => resolve(true));
    setTimeout(() => resolve(false), 5000).unref();
  });
  return { closed };
}

/** derpUpgrade opens a raw DERP upgrade that never logs in; it resolves with the status line the server answered. */
async function derpUpgrade(port: number, t: Test): Promise<string> {
  const c = netConnect({ host: '127.0.0.1', port });
  t.teardown(() => c.destroy());
  c.on('error', () => undefined);
  c.write('GET /derp HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n');
  return new Promise<string>((resolve) => {
    let got = '';
    c.on('data', (d) => {
      got += d.toString('latin1');
      if (got.includes('\r\n')) resolve(got.slice(0, got.indexOf('\r\n')));
    });
    c.once('close', () => resolve(got || 'closed'));
  });
}

t.test('relay limits for clients without credentials come from the config (relay TLS port held open by one byte; unlimited unauthenticated relay connections and logins per address)', async (t) => {
  const s = await startTestServer({
    noise: { handshake_timeout: '300ms' },
    derp: { server: { max_unauthenticated_connections_per_address: 2, login_rate: 7, login_burst: 9 } },
  });
  t.teardown(() => s.stop());
  const relayPort = s.relay.listener!.address().port;
  const mainPort = Number(new URL(s.urls.http).port);

  // noise.handshake_timeout closes what never completes a request head on the relay's TLS port.
  const stalls = [Buffer.from([0x16]), 'G', 'GET /derp HTTP/1.1\r\nHost: 127.0.0.1\r\n'].map((b) => stalled(relayPort, b, t));
  const closed = await Promise.all(stalls.map((x) => x.closed));
  t.same(closed, [true, true, true], 'one byte of TLS, one byte of HTTP and half a request head are all closed');

  // Two relay connections from 127.0.0.1 may wait to log in, on either port; the third is refused.
  t.match(await derpUpgrade(relayPort, t), /^HTTP\/1\.1 101 /);
  t.match(await derpUpgrade(mainPort, t), /^HTTP\/1\.1 101 /);
  t.match(await derpUpgrade(relayPort, t), /^HTTP\/1\.1 429 /, 'the third not logged in from one address gets 429');
  t.equal(s.relay.derp!.stats.connectionsRefusedPerAddress, 1);
  t.same(s.relay.derp!.loginLimits, { maxUnauthenticatedPerAddress: 2, loginRate: 7, loginBurst: 9 }, 'the login rate and burst reach the relay');
});

t.test('the relay login limits default to what the relay library documents', async (t) => {
  t.equal(KEYS['derp.server.max_unauthenticated_connections_per_address']!.default, DERP_LOGIN_LIMITS.maxUnauthenticatedPerAddress);
  t.equal(KEYS['derp.server.login_rate']!.default, DERP_LOGIN_LIMITS.loginRate);
  t.equal(KEYS['derp.server.login_burst']!.default, DERP_LOGIN_LIMITS.loginBurst);
});
